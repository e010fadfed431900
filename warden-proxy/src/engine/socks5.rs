//! The SOCKS5 side: negotiation, the decision, the tunnel.

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use warden_core::policy::net::{parse_host, Denial, Host};

use super::decide::{self, Refusal};
use super::{decide_event, read_more, reply_and_close, tunnel};
use crate::events::{printable, Protocol, RefusalCode};
use crate::socks::{self, SocksAddr, SocksError, SocksRequest};
use crate::ProxyConfig;

const P: Protocol = Protocol::Socks5;

/// Reads until `parse` has a message (or the negotiation deadline passes).
async fn read_message<T>(
    client: &mut TcpStream,
    buf: &mut Vec<u8>,
    max: usize,
    deadline: tokio::time::Instant,
    parse: impl Fn(&[u8]) -> Result<Option<(T, usize)>, SocksError>,
) -> Option<Result<T, SocksError>> {
    loop {
        match parse(buf) {
            Ok(Some((msg, used))) => {
                buf.drain(..used);
                return Some(Ok(msg));
            }
            Err(e) => return Some(Err(e)),
            Ok(None) => {}
        }
        let room = max.saturating_sub(buf.len()).max(1);
        match tokio::time::timeout_at(deadline, read_more(client, buf, room)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return None,
        }
    }
}

fn refuse_event(cfg: &ProxyConfig, host: &str, port: u16, code: RefusalCode, rule: Option<&str>) {
    decide_event(cfg, P, host, port, None, Some(code), rule);
}

pub(crate) async fn serve(mut client: TcpStream, mut buf: Vec<u8>, cfg: &ProxyConfig) {
    let deadline = tokio::time::Instant::now() + cfg.limits.head_timeout;
    let greeting = match read_message(
        &mut client,
        &mut buf,
        socks::MAX_GREETING,
        deadline,
        socks::parse_greeting,
    )
    .await
    {
        Some(Ok(g)) => g,
        Some(Err(_)) => {
            refuse_event(cfg, "", 0, RefusalCode::BadRequest, None);
            return;
        }
        None => return,
    };
    if !greeting.offers_no_auth() {
        refuse_event(cfg, "", 0, RefusalCode::SocksAuthRefused, None);
        let reply = [socks::VERSION, socks::METHOD_NONE_ACCEPTABLE];
        return reply_and_close(&mut client, &reply).await;
    }
    if client
        .write_all(&[socks::VERSION, socks::METHOD_NO_AUTH])
        .await
        .is_err()
    {
        return;
    }
    let request = match read_message(
        &mut client,
        &mut buf,
        socks::MAX_REQUEST,
        deadline,
        socks::parse_request,
    )
    .await
    {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            refuse_event(cfg, "", 0, RefusalCode::BadRequest, None);
            let code = match e {
                SocksError::AddressType(_) => socks::REP_ADDRESS_TYPE_NOT_SUPPORTED,
                _ => socks::REP_GENERAL_FAILURE,
            };
            return reply_and_close(&mut client, &socks::reply(code, None)).await;
        }
        None => return,
    };
    let SocksRequest {
        command,
        addr,
        port,
    } = request;
    let (host, by_ip) = match &addr {
        SocksAddr::Ip(ip) => (Ok(Host::from_ip(*ip)), true),
        SocksAddr::Domain(raw) => match std::str::from_utf8(raw) {
            Ok(name) => (parse_host(name).map_err(|d| (printable(raw), d)), false),
            Err(_) => {
                let why = format!("`{}`: not UTF-8", printable(raw));
                (Err((printable(raw), Denial::BadHost(why))), false)
            }
        },
    };
    let shown = match &host {
        Ok(h) => h.to_string(),
        Err((raw, _)) => raw.clone(),
    };
    if command != socks::CMD_CONNECT {
        refuse_event(cfg, &shown, port, RefusalCode::SocksCommandRefused, None);
        let reply = socks::reply(socks::REP_COMMAND_NOT_SUPPORTED, None);
        return reply_and_close(&mut client, &reply).await;
    }
    let host = match host {
        Ok(h) => h,
        Err((_, d)) => {
            refuse_event(cfg, &shown, port, RefusalCode::from(&d), None);
            let reply = socks::reply(socks::REP_NOT_ALLOWED, None);
            return reply_and_close(&mut client, &reply).await;
        }
    };
    let opened = match decide::open(cfg, &host, port, P).await {
        Ok(o) => o,
        Err(Refusal {
            code,
            rule,
            address,
            ..
        }) => {
            let (reason, reply) = match code {
                RefusalCode::NotAllowed if by_ip => {
                    (RefusalCode::SocksIpNotListed, socks::REP_NOT_ALLOWED)
                }
                RefusalCode::DnsFailed => (code, socks::REP_HOST_UNREACHABLE),
                RefusalCode::ConnectFailed => (code, socks::REP_REFUSED),
                _ => (code, socks::REP_NOT_ALLOWED),
            };
            decide_event(cfg, P, &shown, port, address, Some(reason), rule.as_deref());
            return reply_and_close(&mut client, &socks::reply(reply, None)).await;
        }
    };
    // BND.ADDR stays 0.0.0.0:0: the host's own source address is none of the
    // sandbox's business, and clients of CONNECT do not use it.
    tunnel::serve_allowed(
        cfg,
        P,
        &mut client,
        opened,
        &host,
        &shown,
        port,
        buf,
        &socks::reply(socks::REP_SUCCEEDED, None),
    )
    .await;
}
