//! Splicing a client and an upstream both ways, with byte counts, an idle
//! timeout, and (for CONNECT and SOCKS5) the ClientHello check before any client
//! byte reaches the upstream.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use warden_core::policy::net::{parse_host, Host, TunnelUse};

use super::decide::Opened;
use super::{allowed_event, decide_event, read_more, splice, Link};
use crate::events::printable;
use crate::events::{Protocol, RefusalCode};
use crate::tls::{self, Sniff, MAX_CLIENT_HELLO};
use crate::ProxyConfig;

/// How a tunnel ended.
#[derive(Debug)]
pub(crate) enum End {
    /// Both directions reached end of stream, or one failed, or idle.
    Done,
    /// The client's first bytes were refused (nothing of them was forwarded):
    /// the decision code (`sni-mismatch`, `no-sni`, `plain-tunnel`) and why.
    Refused(RefusalCode, String),
}

/// What the first bytes of a CONNECT or SOCKS5 tunnel must be: a TLS ClientHello
/// naming `host`, or what `allowed` permits besides.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expect<'a> {
    pub host: &'a Host,
    pub allowed: TunnelUse,
}

/// The time of the last byte, as milliseconds since `start`.
struct Activity {
    start: Instant,
    last: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        self.last
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    async fn idle(&self, limit: Duration) {
        loop {
            let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
            let quiet = self.start.elapsed().saturating_sub(last);
            if quiet >= limit {
                return;
            }
            tokio::time::sleep(limit - quiet).await;
        }
    }
}

/// One direction of the tunnel, socket to socket in the kernel; the outer idle
/// watch sees every byte through `activity`. At end of stream the other side's
/// write half is shut down (half-close travels on).
async fn pump(
    r: &mut tokio::net::tcp::ReadHalf<'_>,
    w: &mut tokio::net::tcp::WriteHalf<'_>,
    count: &AtomicU64,
    activity: &Activity,
) -> io::Result<()> {
    let mut pipe = splice::Pipe::new()?;
    splice::relay(r.as_ref(), w.as_ref(), &mut pipe, None, None, |n| {
        count.fetch_add(n as u64, Ordering::Relaxed);
        activity.touch();
    })
    .await?;
    let _ = w.shutdown().await;
    Ok(())
}

enum Up {
    Done,
    Refused(RefusalCode, String),
}

/// An allowed tunnel (CONNECT or SOCKS5) from its allow decision to its end:
/// records the decision, sends the protocol's success `reply`, then runs the
/// tunnel with the first-bytes check against `host` (`client_prefix`: bytes the
/// client sent after its request): TLS naming `host`, or what the policy's
/// [`TunnelUse`] for `host` and `port` permits besides. A refusal is a second
/// decision (`sni-mismatch`, `no-sni`, `plain-tunnel`).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve_allowed(
    cfg: &ProxyConfig,
    protocol: Protocol,
    client: &mut TcpStream,
    mut opened: Opened,
    host: &Host,
    shown: &str,
    port: u16,
    client_prefix: Vec<u8>,
    reply: &[u8],
) {
    allowed_event(cfg, protocol, shown, port, opened.addr, &opened.grant);
    let link = Link::new(cfg, protocol, shown, port, opened.addr);
    if client.write_all(reply).await.is_err() {
        return;
    }
    let expect = Expect {
        host,
        allowed: opened.grant.policy.tunnel_use(host, port),
    };
    let end = run(
        client,
        &mut opened.stream,
        client_prefix,
        Vec::new(),
        Some(expect),
        &link,
        cfg.limits.idle_timeout,
    )
    .await;
    if let End::Refused(code, why) = end {
        decide_event(
            cfg,
            protocol,
            shown,
            port,
            Some(opened.addr),
            Some(code),
            Some(&opened.grant.rule),
        );
        tracing::debug!(session = %cfg.session, host = %shown, port, code = code.as_str(), why = %why, "proxy: tunnel refused");
    }
}

/// Splices `client` and `upstream` until both directions end, one fails, or
/// nothing moves for `idle`. `client_prefix` (bytes the client already sent) and
/// `upstream_prefix` (bytes the upstream already sent) go first. With `expect`,
/// the client's first bytes are held until they are known to be a ClientHello
/// naming the host, or something else `expect.allowed` permits.
pub(crate) async fn run(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    client_prefix: Vec<u8>,
    upstream_prefix: Vec<u8>,
    expect: Option<Expect<'_>>,
    link: &Link,
    idle: Duration,
) -> End {
    let activity = Activity {
        start: Instant::now(),
        last: AtomicU64::new(0),
    };
    let (mut cr, mut cw) = client.split();
    let (mut ur, mut uw) = upstream.split();

    let down = async {
        if !upstream_prefix.is_empty() {
            cw.write_all(&upstream_prefix).await?;
        }
        pump(&mut ur, &mut cw, &link.down, &activity).await
    };
    let up = async {
        let mut prefix = client_prefix;
        if let Some(Expect {
            host: expected,
            allowed,
        }) = expect
        {
            const SNI: RefusalCode = RefusalCode::SniMismatch;
            loop {
                match tls::sniff(&prefix) {
                    Ok(Sniff::NeedMore) => {
                        let room = MAX_CLIENT_HELLO - prefix.len();
                        if read_more(&mut cr, &mut prefix, room).await? == 0 {
                            if prefix.is_empty() {
                                let _ = uw.shutdown().await;
                                return Ok(Up::Done);
                            }
                            return Ok(Up::Refused(
                                SNI,
                                "the client closed inside its TLS ClientHello".into(),
                            ));
                        }
                        activity.touch();
                    }
                    Ok(Sniff::NotTls) if allowed.plain => break,
                    Ok(Sniff::NotTls) => {
                        return Ok(Up::Refused(
                            RefusalCode::PlainTunnel,
                            format!(
                                "the tunnel to {expected} carries no TLS, and no network.allow \
                                 entry lists this port for it explicitly"
                            ),
                        ))
                    }
                    Ok(Sniff::ClientHello { sni: None, .. }) if allowed.no_sni => break,
                    Ok(Sniff::ClientHello { sni: None, .. }) => {
                        return Ok(Up::Refused(
                            RefusalCode::NoSni,
                            format!("the TLS ClientHello to {expected} names no server"),
                        ))
                    }
                    Ok(Sniff::ClientHello {
                        sni: Some(name), ..
                    }) => match parse_host(&name) {
                        Ok(h) if &h == expected => break,
                        Ok(h) => {
                            return Ok(Up::Refused(
                                SNI,
                                format!("TLS server name {h} is not the tunnel's host {expected}"),
                            ))
                        }
                        Err(e) => {
                            return Ok(Up::Refused(
                                SNI,
                                format!("TLS server name {}: {e}", printable(name.as_bytes())),
                            ))
                        }
                    },
                    Err(e) => return Ok(Up::Refused(SNI, format!("TLS ClientHello refused: {e}"))),
                }
            }
        }
        if !prefix.is_empty() {
            uw.write_all(&prefix).await?;
            link.add_up(prefix.len());
            activity.touch();
        }
        drop(prefix);
        pump(&mut cr, &mut uw, &link.up, &activity).await?;
        Ok::<Up, io::Error>(Up::Done)
    };
    let quiet = activity.idle(idle);
    tokio::pin!(down, up, quiet);
    let (mut up_done, mut down_done) = (false, false);
    loop {
        tokio::select! {
            r = &mut up, if !up_done => match r {
                Ok(Up::Done) => up_done = true,
                Ok(Up::Refused(code, why)) => return End::Refused(code, why),
                Err(_) => return End::Done,
            },
            r = &mut down, if !down_done => match r {
                Ok(()) => down_done = true,
                Err(_) => return End::Done,
            },
            _ = &mut quiet => return End::Done,
        }
        if up_done && down_done {
            return End::Done;
        }
    }
}
