//! Transparent egress (`network.mode: transparent | both`): a connection the
//! sandbox made to the synthetic address its resolver gave a name, decided
//! as a CONNECT tunnel to that name is, then given to the sandbox one of two
//! ways ([`Handover`]):
//!
//! - **relayed** (the default): the sandbox gets its end of a loopback TCP
//!   pair made here, and the daemon relays its bytes to the upstream with the
//!   proxy's checks: TLS must name the host (`sni-mismatch`, `no-sni`);
//!   bytes that are not TLS pass only when an entry lists the port
//!   (`name:PORT`, `name:*`), and to a bare `name` (ports 80 and 443) only as
//!   HTTP whose every request names the host and port ([`forward::Fixed`]);
//! - **direct** (entries with the `direct` option): the upstream socket itself.
//!   No byte passes through the daemon, none is checked or counted.
//!
//! A caller that waits (a blocking socket) is answered once the upstream is
//! connected, so a refusal is its `connect`'s error. A non-blocking caller
//! (every event loop) is never made to wait for the upstream: what needs no
//! lookup (the allowlist, name and port) is refused at once, then a relayed
//! connection is handed over and the relay looks up, vets and connects
//! afterwards (or waits for an approval); if that fails, the sandbox's end
//! is reset (`ECONNRESET` where a blocking caller sees `ECONNREFUSED`). A direct connection needs the
//! upstream first, so a non-blocking caller waits for it.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};

use tokio::net::TcpStream;
use warden_core::policy::net::{parse_host, Denial, Host};

use super::decide::{self, Opened, Refusal};
use super::forward::{self, Fixed, Upstream};
use super::tunnel::{self, End, Expect};
use super::{allowed_event, decide_event, read_more, Link};
use crate::events::{printable, Protocol, RefusalCode};
use crate::tls::{self, Sniff, MAX_CLIENT_HELLO};
use crate::ProxyConfig;

const PROTOCOL: Protocol = Protocol::Transparent;

/// What the sandbox is given for one transparent connection.
pub enum Handover {
    /// The upstream socket itself (an entry with `direct`).
    Direct(std::net::TcpStream),
    /// The sandbox's end of a loopback pair, and the relay that serves the
    /// other end (run it once the sandbox has its end; dropped, the
    /// connection ends).
    Relayed(std::net::TcpStream, Relay),
}

/// The daemon's side of a relayed transparent connection.
pub struct Relay {
    ours: std::net::TcpStream,
    host: Host,
    port: u16,
    /// The upstream, when it was connected before the hand-over.
    opened: Option<Opened>,
}

/// Decides a transparent connection to `name` (the name the resolver gave
/// the synthetic address for) and `port`. `wait`: the caller waits for the
/// upstream (a blocking socket): it is connected before this returns, and a
/// refusal is an `Err` (recorded). Otherwise a relayed connection is handed
/// over at once and [`Relay::run`] makes the rest of the decision.
pub async fn open(
    cfg: &ProxyConfig,
    name: &str,
    port: u16,
    wait: bool,
) -> Result<Handover, RefusalCode> {
    let host = match parse_host(name) {
        Ok(h) => h,
        Err(_) => {
            let shown = printable(name.as_bytes());
            decide_event(
                cfg,
                PROTOCOL,
                &shown,
                port,
                None,
                Some(RefusalCode::BadHost),
                None,
            );
            return Err(RefusalCode::BadHost);
        }
    };
    let direct = cfg.policy.tunnel_use(&host, port).direct;
    // What needs no lookup is refused before any hand-over, also for a
    // caller that does not wait: a name or port the allowlist lacks (unless
    // a person may approve it, which the relay then waits for).
    if !wait && !direct {
        if let Err(d) = cfg.policy.check(&host, port) {
            if cfg.approver.is_none() || !matches!(d, Denial::NotAllowed { .. }) {
                let r = Refusal::denial(&d, None);
                decide_event(
                    cfg,
                    PROTOCOL,
                    &host.to_string(),
                    port,
                    None,
                    Some(r.code),
                    None,
                );
                return Err(r.code);
            }
        }
    }
    let opened = if wait || direct {
        Some(open_upstream(cfg, &host, port).await?)
    } else {
        None
    };
    match opened {
        Some(o) if direct => {
            allowed_event(cfg, PROTOCOL, &host.to_string(), port, o.addr, &o.grant);
            o.stream
                .into_std()
                .map(Handover::Direct)
                .map_err(|_| RefusalCode::ConnectFailed)
        }
        opened => {
            let (theirs, ours) = loopback_pair().map_err(|e| {
                tracing::warn!(session = %cfg.session, error = %e, "transparent: no loopback pair");
                RefusalCode::ConnectFailed
            })?;
            Ok(Handover::Relayed(
                theirs,
                Relay {
                    ours,
                    host,
                    port,
                    opened,
                },
            ))
        }
    }
}

/// The whole decision ([`decide::open`]), its refusal recorded.
async fn open_upstream(cfg: &ProxyConfig, host: &Host, port: u16) -> Result<Opened, RefusalCode> {
    decide::open(cfg, host, port, PROTOCOL).await.map_err(|r| {
        decide_event(
            cfg,
            PROTOCOL,
            &host.to_string(),
            port,
            r.address,
            Some(r.code),
            r.rule.as_deref(),
        );
        r.code
    })
}

impl Relay {
    /// Serves the connection to its end: the rest of the decision if it was
    /// handed over before it, then the bytes with the checks of the module doc.
    pub async fn run(self, cfg: &ProxyConfig) {
        let Relay {
            ours,
            host,
            port,
            opened,
        } = self;
        let Ok(mut client) = ours
            .set_nonblocking(true)
            .and_then(|()| TcpStream::from_std(ours))
        else {
            return;
        };
        let _ = client.set_nodelay(true);
        let shown = host.to_string();
        let opened = match opened {
            Some(o) => o,
            None => match open_upstream(cfg, &host, port).await {
                Ok(o) => o,
                Err(_) => return reset(client),
            },
        };
        let allowed = opened.grant.policy.tunnel_use(&host, port);
        allowed_event(cfg, PROTOCOL, &shown, port, opened.addr, &opened.grant);
        if !allowed.plain {
            // A bare name: TLS or HTTP, both of which the client speaks
            // first; which one decides how the bytes are checked.
            let mut prefix = Vec::new();
            let sniffed = tokio::time::timeout(cfg.limits.head_timeout, async {
                loop {
                    match tls::sniff(&prefix) {
                        Ok(Sniff::NeedMore) => {
                            let room = MAX_CLIENT_HELLO - prefix.len();
                            if read_more(&mut client, &mut prefix, room).await? == 0 {
                                return Ok(None);
                            }
                        }
                        Ok(Sniff::NotTls) => return Ok(Some(false)),
                        _ => return Ok::<_, io::Error>(Some(true)),
                    }
                }
            })
            .await;
            match sniffed {
                Ok(Ok(Some(false))) => {
                    let fixed = Fixed {
                        host: host.clone(),
                        port,
                    };
                    let up = Upstream::opened(cfg, &host, port, opened);
                    return forward::serve_fixed(client, prefix, cfg, fixed, up).await;
                }
                Ok(Ok(Some(true))) => {
                    return tunnel_to(cfg, client, opened, &host, port, prefix).await;
                }
                _ => return,
            }
        }
        tunnel_to(cfg, client, opened, &host, port, Vec::new()).await
    }
}

/// The tunnel with the first-bytes check of a CONNECT tunnel.
async fn tunnel_to(
    cfg: &ProxyConfig,
    mut client: TcpStream,
    mut opened: Opened,
    host: &Host,
    port: u16,
    prefix: Vec<u8>,
) {
    let shown = host.to_string();
    let link = Link::new(cfg, PROTOCOL, &shown, port, opened.addr);
    let expect = Expect {
        host,
        allowed: opened.grant.policy.tunnel_use(host, port),
    };
    let end = tunnel::run(
        &mut client,
        &mut opened.stream,
        prefix,
        Vec::new(),
        Some(expect),
        &link,
        cfg.limits.idle_timeout,
    )
    .await;
    if let End::Refused(code, why) = end {
        decide_event(
            cfg,
            PROTOCOL,
            &shown,
            port,
            Some(opened.addr),
            Some(code),
            Some(&opened.grant.rule),
        );
        tracing::debug!(session = %cfg.session, host = %shown, port, code = code.as_str(), why = %why, "transparent: refused");
        reset(client);
    }
}

/// Closes the sandbox's connection with a reset, so its reads and writes
/// fail rather than see a clean end.
fn reset(client: TcpStream) {
    if let Ok(s) = client.into_std() {
        let _ = socket2_linger_zero(&s);
    }
}

/// `SO_LINGER {on, 0}`: the close sends RST.
fn socket2_linger_zero(s: &std::net::TcpStream) -> io::Result<()> {
    nix::sys::socket::setsockopt(
        s,
        nix::sys::socket::sockopt::Linger,
        &nix::libc::linger {
            l_onoff: 1,
            l_linger: 0,
        },
    )
    .map_err(io::Error::from)
}

/// A connected pair of TCP sockets on the host's loopback: (the sandbox's
/// end, ours), both blocking. The listener lives for one accept; a stranger
/// who connects to it first is turned away (the accepted peer must be our
/// own end).
pub(crate) fn loopback_pair() -> io::Result<(std::net::TcpStream, std::net::TcpStream)> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let theirs = std::net::TcpStream::connect(listener.local_addr()?)?;
    let want: SocketAddr = theirs.local_addr()?;
    // Our own connection is in the accept queue already (loopback); a few
    // strangers at most before it.
    listener.set_nonblocking(true)?;
    for _ in 0..16 {
        match listener.accept() {
            Ok((ours, peer)) if peer == want => {
                ours.set_nonblocking(false)?;
                return Ok((theirs, ours));
            }
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::yield_now();
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(
        "the loopback pair's own connection never arrived",
    ))
}
