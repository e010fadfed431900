//! The HTTP/1.1 side: absolute-form forwarding with keep-alive and upgrades,
//! CONNECT tunnels, and the plain HTTP of a transparent connection to a name
//! whose entry lists no port ([`Fixed`]: origin-form requests whose `Host`
//! must name the connection's host and port, each decided again).

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use warden_core::policy::net::{parse_host, Host};

use super::decide::{self, Refusal};
use super::splice;
use super::{allowed_event, decide_event, read_idle, read_more, reply_and_close, tunnel, Link};
use crate::events::{printable, Protocol, RefusalCode};
use crate::http::{self, BodyLength, ChunkedDecoder, HttpError, MethodUse, RequestHead};
use crate::ProxyConfig;

/// How much is read at a time while relaying bodies.
const CHUNK: usize = 128 * 1024;

/// The one host and port a transparent connection reaches: every request on
/// it must name them (`Host`, or an absolute-form target).
pub(crate) struct Fixed {
    pub host: Host,
    pub port: u16,
}

/// The upstream connection kept between requests of one client connection.
pub(crate) struct Upstream {
    stream: TcpStream,
    host: Host,
    port: u16,
    addr: SocketAddr,
    /// What allowed it; a reused connection is decided again against its
    /// policy (an approval for this host and port covers the whole client
    /// connection).
    grant: decide::Grant,
    /// Bytes read from the upstream and not yet relayed.
    buf: Vec<u8>,
    link: Link,
}

impl Upstream {
    /// Whether the connection can carry another request: still open, and the
    /// upstream has sent nothing unasked.
    /// The connection a transparent connection's decision opened, for its
    /// first request.
    pub(crate) fn opened(cfg: &ProxyConfig, host: &Host, port: u16, o: decide::Opened) -> Self {
        let link = Link::new(cfg, Protocol::Transparent, &host.to_string(), port, o.addr);
        Upstream {
            stream: o.stream,
            host: host.clone(),
            port,
            addr: o.addr,
            grant: o.grant,
            buf: Vec::new(),
            link,
        }
    }

    fn reusable(&self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// A refusal answered with an HTTP error response.
struct Deny {
    protocol: Protocol,
    host: String,
    port: u16,
    code: RefusalCode,
    message: String,
    rule: Option<String>,
    address: Option<SocketAddr>,
}

impl Deny {
    fn bad_request(protocol: Protocol, host: String, port: u16, e: &HttpError) -> Deny {
        Deny {
            protocol,
            host,
            port,
            code: RefusalCode::BadRequest,
            message: format!("malformed request: {e}"),
            rule: None,
            address: None,
        }
    }

    fn refusal(protocol: Protocol, host: String, port: u16, r: Refusal) -> Deny {
        Deny {
            protocol,
            host,
            port,
            code: r.code,
            message: r.message,
            rule: r.rule,
            address: r.address,
        }
    }

    fn status(&self) -> u16 {
        self.code.http_status()
    }
}

/// The error response for a refusal (a 405 says which methods are forwarded).
pub(crate) fn denial_response(status: u16, code: &str, message: &str) -> Vec<u8> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Bad Gateway",
    };
    let allow = if status == 405 {
        format!("Allow: {}\r\n", http::FORWARDED_METHODS.join(", "))
    } else {
        String::new()
    };
    let body = format!("warden: {}\n", super::clean_message(message));
    format!(
        "HTTP/1.1 {status} {reason}\r\nX-Warden-Denied: {code}\r\n{allow}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The refusal of a method the proxy does not forward, or None.
fn vet_method(protocol: Protocol, method: &str, host: &str, port: u16) -> Option<Deny> {
    let (code, message) = match http::method_use(method) {
        MethodUse::Forward | MethodUse::Connect => return None,
        MethodUse::Refused => (
            RefusalCode::MethodRefused,
            format!("{method} is not forwarded (it reflects the request back)"),
        ),
        MethodUse::Unknown => (
            RefusalCode::MethodUnknown,
            format!(
                "method {} is not one the proxy forwards",
                printable(method.as_bytes())
            ),
        ),
    };
    Some(Deny {
        protocol,
        host: host.to_string(),
        port,
        code,
        message,
        rule: None,
        address: None,
    })
}

async fn refuse(client: &mut TcpStream, cfg: &ProxyConfig, d: Deny) {
    decide_event(
        cfg,
        d.protocol,
        &d.host,
        d.port,
        d.address,
        Some(d.code),
        d.rule.as_deref(),
    );
    let response = denial_response(d.status(), d.code.as_str(), &d.message);
    reply_and_close(client, &response).await;
}

enum HeadRead {
    Head(RequestHead),
    /// End of stream or timeout between requests, or a client gone mid-head.
    Gone,
    Bad(HttpError),
}

async fn read_head(client: &mut TcpStream, buf: &mut Vec<u8>, cfg: &ProxyConfig) -> HeadRead {
    let limits = &cfg.limits;
    let deadline = tokio::time::Instant::now() + limits.head_timeout;
    loop {
        match http::parse_request_head(buf, limits.max_head_bytes, limits.max_headers) {
            Ok(Some(h)) => return HeadRead::Head(h),
            Err(e) => return HeadRead::Bad(e),
            Ok(None) => {}
        }
        let room = limits.max_head_bytes.saturating_sub(buf.len()).max(1);
        match tokio::time::timeout_at(deadline, read_more(client, buf, room)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return HeadRead::Gone,
        }
    }
}

pub(crate) async fn serve(client: TcpStream, buf: Vec<u8>, cfg: &ProxyConfig) {
    serve_on(client, buf, cfg, None, None).await
}

/// [`serve`] for a transparent connection to `fixed`, its first request on
/// `upstream` (already decided and recorded).
pub(crate) async fn serve_fixed(
    client: TcpStream,
    buf: Vec<u8>,
    cfg: &ProxyConfig,
    fixed: Fixed,
    upstream: Upstream,
) {
    serve_on(client, buf, cfg, Some(&fixed), Some(upstream)).await
}

async fn serve_on(
    mut client: TcpStream,
    mut buf: Vec<u8>,
    cfg: &ProxyConfig,
    fixed: Option<&Fixed>,
    mut upstream: Option<Upstream>,
) {
    let protocol = protocol_of(fixed);
    loop {
        let head = match read_head(&mut client, &mut buf, cfg).await {
            HeadRead::Head(h) => h,
            HeadRead::Gone => return,
            HeadRead::Bad(e) => {
                let (host, port) =
                    fixed.map_or((String::new(), 0), |f| (f.host.to_string(), f.port));
                let d = Deny::bad_request(protocol, host, port, &e);
                return refuse(&mut client, cfg, d).await;
            }
        };
        buf.drain(..head.len);
        if head.method == "CONNECT" {
            drop(upstream.take());
            if let Some(f) = fixed {
                let d = Deny {
                    protocol,
                    host: f.host.to_string(),
                    port: f.port,
                    code: RefusalCode::MethodRefused,
                    message: "CONNECT is for proxies; this connection already reaches its host"
                        .into(),
                    rule: None,
                    address: None,
                };
                return refuse(&mut client, cfg, d).await;
            }
            return connect(client, buf, head, cfg).await;
        }
        match exchange(&mut client, &mut buf, &head, &mut upstream, cfg, fixed).await {
            Next::Continue => {}
            Next::Close => return,
        }
    }
}

enum Next {
    Continue,
    Close,
}

fn protocol_of(fixed: Option<&Fixed>) -> Protocol {
    if fixed.is_some() {
        Protocol::Transparent
    } else {
        Protocol::Http
    }
}

/// The checks of a request that need no DNS: the target and the Host header,
/// framing. Returns the normalised host, port and origin-form target. With
/// `fixed` (a transparent connection), an origin-form target is for the
/// connection's host and port, and the request must name exactly those.
fn vet_request(
    head: &RequestHead,
    fixed: Option<&Fixed>,
) -> Result<(Host, u16, String, BodyLength), Box<Deny>> {
    let protocol = protocol_of(fixed);
    let (host, port, path) = match fixed {
        Some(f) if head.target.starts_with('/') || head.target == "*" => {
            (f.host.clone(), f.port, head.target.clone())
        }
        _ => {
            let (authority, path) = http::parse_absolute_target(&head.target).map_err(|e| {
                Deny::bad_request(protocol, printable(head.target.as_bytes()), 0, &e)
            })?;
            let port = authority.port;
            let host = parse_host(&authority.host).map_err(|d| {
                Deny::refusal(
                    protocol,
                    printable(authority.host.as_bytes()),
                    port,
                    Refusal::denial(&d, None),
                )
            })?;
            (host, port, path)
        }
    };
    let shown = host.to_string();
    if let Some(f) = fixed.filter(|f| (&f.host, f.port) != (&host, port)) {
        return Err(Box::new(Deny {
            protocol,
            host: shown.clone(),
            port,
            code: RefusalCode::HostMismatch,
            message: format!(
                "the request names {shown}:{port}, but this connection reaches {}:{}",
                f.host, f.port
            ),
            rule: None,
            address: None,
        }));
    }
    let bad = |e: HttpError| Deny::bad_request(protocol, shown.clone(), port, &e);
    let host_value = http::host_header(&head.headers).map_err(bad)?;
    let mismatch = |what: String| Deny {
        protocol,
        host: shown.clone(),
        port,
        code: RefusalCode::HostMismatch,
        message: what,
        rule: None,
        address: None,
    };
    let Some(raw) = host_value else {
        return Err(Box::new(mismatch(format!(
            "the request to {shown}:{port} has no Host header"
        ))));
    };
    let named = std::str::from_utf8(raw)
        .ok()
        .and_then(|v| http::parse_authority(v, Some(80)).ok())
        .and_then(|a| parse_host(&a.host).ok().map(|h| (h, a.port)));
    if named.as_ref() != Some(&(host.clone(), port)) {
        return Err(Box::new(mismatch(format!(
            "Host header {} does not name the request target {shown}:{port}",
            printable(raw)
        ))));
    }
    let body = http::request_body(head).map_err(bad)?;
    if http::is_upgrade(&head.headers) && body != BodyLength::None {
        return Err(Box::new(bad(HttpError::Syntax(
            "upgrade request with a body",
        ))));
    }
    Ok((host, port, path, body))
}

async fn exchange(
    client: &mut TcpStream,
    buf: &mut Vec<u8>,
    head: &RequestHead,
    slot: &mut Option<Upstream>,
    cfg: &ProxyConfig,
    fixed: Option<&Fixed>,
) -> Next {
    let protocol = protocol_of(fixed);
    let (host, port, path, body) = match vet_request(head, fixed) {
        Ok(v) => v,
        Err(d) => {
            refuse(client, cfg, *d).await;
            return Next::Close;
        }
    };
    let shown = host.to_string();
    // Before any lookup or connection: TRACE, TRACK and unknown methods.
    if let Some(d) = vet_method(protocol, &head.method, &shown, port) {
        *slot = None;
        refuse(client, cfg, d).await;
        return Next::Close;
    }
    // Reuse the upstream only for the same host and port, and only after deciding
    // again (the allowlist and the address it was vetted with).
    if let Some(up) = slot.take() {
        if up.host == host && up.port == port && up.reusable() {
            *slot = Some(up);
        }
    }
    let up = match slot {
        Some(up) => {
            let policy = &up.grant.policy;
            let checked = policy
                .check(&host, port)
                .and_then(|_| policy.check_address(&host, port, up.addr.ip()))
                .map_err(|d| Refusal::denial(&d, None));
            if let Err(r) = checked {
                *slot = None;
                refuse(client, cfg, Deny::refusal(protocol, shown, port, r)).await;
                return Next::Close;
            }
            up
        }
        None => match decide::open(cfg, &host, port, protocol).await {
            Ok(o) => {
                let link = Link::new(cfg, protocol, &shown, port, o.addr);
                slot.insert(Upstream {
                    stream: o.stream,
                    host: host.clone(),
                    port,
                    addr: o.addr,
                    grant: o.grant,
                    buf: Vec::new(),
                    link,
                })
            }
            Err(r) => {
                refuse(client, cfg, Deny::refusal(protocol, shown, port, r)).await;
                return Next::Close;
            }
        },
    };
    allowed_event(cfg, protocol, &shown, port, up.addr, &up.grant);

    let upgrade = http::is_upgrade(&head.headers);
    let close = head.minor == 0
        || http::connection_tokens(&head.headers)
            .iter()
            .any(|t| t == "close");
    let host_value = if port == 80 {
        shown.clone()
    } else {
        format!("{shown}:{port}")
    };
    let request = http::rewrite_request(head, &path, &host_value, upgrade, close);
    let started = AtomicBool::new(false);
    let idle = cfg.limits.idle_timeout;
    let outcome = {
        let Upstream {
            stream,
            buf: ubuf,
            link,
            ..
        } = &mut *up;
        let link = &*link;
        let (mut cr, mut cw) = client.split();
        let (mut ur, mut uw) = stream.split();
        let send = async {
            uw.write_all(&request).await.map_err(Failure::Upstream)?;
            link.add_up(request.len());
            copy_request_body(&mut cr, &mut uw, buf, body, link, idle).await
        };
        let receive = relay_response(
            &mut ur,
            &mut cw,
            ubuf,
            &head.method,
            upgrade,
            close,
            link,
            &started,
            cfg,
        );
        tokio::try_join!(send, receive).map(|((), r)| r)
    };
    match outcome {
        Ok(Response::Done {
            reusable,
            close_client,
        }) => {
            if !reusable {
                *slot = None;
            }
            if close_client {
                let _ = client.shutdown().await;
                Next::Close
            } else {
                Next::Continue
            }
        }
        Ok(Response::Upgraded) => {
            let Some(mut up) = slot.take() else {
                return Next::Close;
            };
            let prefix = std::mem::take(buf);
            let upstream_prefix = std::mem::take(&mut up.buf);
            tunnel::run(
                client,
                &mut up.stream,
                prefix,
                upstream_prefix,
                None,
                &up.link,
                idle,
            )
            .await;
            Next::Close
        }
        Err(failure) => {
            *slot = None;
            let started = started.load(Ordering::Relaxed);
            tracing::debug!(session = %cfg.session, host = %shown, port, ?failure, "proxy: exchange failed");
            match failure {
                Failure::Client(e) => {
                    // The rest of the body was refused; what was forwarded was valid.
                    let d = Deny::bad_request(protocol, shown, port, &e);
                    if started {
                        decide_event(cfg, d.protocol, &d.host, port, None, Some(d.code), None);
                    } else {
                        refuse(client, cfg, d).await;
                    }
                }
                Failure::Upstream(e) if !started => {
                    let msg = format!("upstream {shown}:{port} failed: {e}");
                    reply_and_close(client, &denial_response(502, "upstream-failed", &msg)).await;
                }
                Failure::BadResponse(e) if !started => {
                    let msg = format!("upstream {shown}:{port} sent a bad response: {e}");
                    reply_and_close(client, &denial_response(502, "upstream-failed", &msg)).await;
                }
                Failure::Upstream(_) | Failure::BadResponse(_) | Failure::ClientGone => {}
            }
            Next::Close
        }
    }
}

#[derive(Debug)]
enum Failure {
    /// The client's body is malformed.
    Client(HttpError),
    /// The client went away or stalled.
    ClientGone,
    /// The upstream failed, closed early or stalled.
    Upstream(io::Error),
    BadResponse(HttpError),
}

enum Response {
    Done { reusable: bool, close_client: bool },
    Upgraded,
}

async fn copy_request_body<R, W>(
    cr: &mut R,
    uw: &mut W,
    buf: &mut Vec<u8>,
    body: BodyLength,
    link: &Link,
    idle: std::time::Duration,
) -> Result<(), Failure>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    match body {
        BodyLength::None | BodyLength::UntilClose => Ok(()),
        BodyLength::Length(mut left) => {
            while left > 0 {
                if buf.is_empty() {
                    let want = left.min(CHUNK as u64) as usize;
                    match read_idle(cr, buf, want, idle).await {
                        Ok(n) if n > 0 => {}
                        _ => return Err(Failure::ClientGone),
                    }
                }
                let take = (left.min(buf.len() as u64)) as usize;
                uw.write_all(&buf[..take])
                    .await
                    .map_err(Failure::Upstream)?;
                link.add_up(take);
                buf.drain(..take);
                left -= take as u64;
            }
            Ok(())
        }
        BodyLength::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            loop {
                if buf.is_empty() {
                    match read_idle(cr, buf, CHUNK, idle).await {
                        Ok(n) if n > 0 => {}
                        _ => return Err(Failure::ClientGone),
                    }
                }
                let used = decoder.feed(buf).map_err(Failure::Client)?;
                uw.write_all(&buf[..used])
                    .await
                    .map_err(Failure::Upstream)?;
                link.add_up(used);
                buf.drain(..used);
                if decoder.is_done() {
                    return Ok(());
                }
            }
        }
    }
}

/// Reads into `ubuf` from the upstream, counting; end of stream is an error.
async fn fill<R: AsyncRead + Unpin>(
    ur: &mut R,
    ubuf: &mut Vec<u8>,
    link: &Link,
    idle: std::time::Duration,
) -> Result<(), Failure> {
    match read_idle(ur, ubuf, CHUNK, idle).await {
        Ok(0) => Err(Failure::Upstream(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ))),
        Ok(n) => {
            link.add_down(n);
            Ok(())
        }
        Err(e) => Err(Failure::Upstream(e)),
    }
}

/// Bodies longer than this are spliced rather than copied.
const SPLICE_MIN: u64 = 256 * 1024;

/// A response body moved upstream → client by [`splice::relay`]. A failure to
/// write to the client ends the exchange like a failed copy does.
async fn splice_body(
    src: &TcpStream,
    dst: &TcpStream,
    limit: Option<u64>,
    idle: std::time::Duration,
    progress: impl FnMut(usize),
) -> Result<(), Failure> {
    let mut pipe = splice::Pipe::new().map_err(Failure::Upstream)?;
    // Which side failed is not told apart here: either way the exchange is
    // over, and the client connection closes.
    splice::relay(src, dst, &mut pipe, limit, Some(idle), progress)
        .await
        .map(|_| ())
        .map_err(Failure::Upstream)
}

#[allow(clippy::too_many_arguments)]
async fn relay_response(
    ur: &mut tokio::net::tcp::ReadHalf<'_>,
    cw: &mut tokio::net::tcp::WriteHalf<'_>,
    ubuf: &mut Vec<u8>,
    method: &str,
    upgrade: bool,
    close: bool,
    link: &Link,
    started: &AtomicBool,
    cfg: &ProxyConfig,
) -> Result<Response, Failure> {
    let limits = &cfg.limits;
    let idle = limits.idle_timeout;
    let write = |e: io::Error| {
        tracing::trace!(error = %e, "proxy: client write failed");
        Failure::ClientGone
    };
    loop {
        let resp = loop {
            match http::parse_response_head(
                ubuf,
                limits.max_response_head_bytes,
                limits.max_response_headers,
            ) {
                Ok(Some(r)) => break r,
                Ok(None) => fill(ur, ubuf, link, idle).await?,
                Err(e) => return Err(Failure::BadResponse(e)),
            }
        };
        ubuf.drain(..resp.len);
        if resp.status == 101 {
            if !upgrade {
                return Err(Failure::BadResponse(HttpError::Syntax(
                    "101 without an upgrade request",
                )));
            }
            started.store(true, Ordering::Relaxed);
            cw.write_all(&http::rewrite_response(&resp, false))
                .await
                .map_err(write)?;
            return Ok(Response::Upgraded);
        }
        if resp.status < 200 {
            cw.write_all(&http::rewrite_response(&resp, false))
                .await
                .map_err(write)?;
            continue;
        }
        let body = http::response_body(method, resp.status, &resp.headers)
            .map_err(Failure::BadResponse)?;
        let tokens = http::connection_tokens(&resp.headers);
        let upstream_closes = tokens.iter().any(|t| t == "close")
            || (resp.minor == 0 && !tokens.iter().any(|t| t == "keep-alive"));
        let close_client = close || body == BodyLength::UntilClose;
        started.store(true, Ordering::Relaxed);
        cw.write_all(&http::rewrite_response(&resp, close_client))
            .await
            .map_err(write)?;
        match body {
            BodyLength::None => {}
            BodyLength::Length(mut left) => {
                // What was read with the head goes first; a large rest moves
                // socket to socket in the kernel.
                if !ubuf.is_empty() {
                    let take = (left.min(ubuf.len() as u64)) as usize;
                    cw.write_all(&ubuf[..take]).await.map_err(write)?;
                    ubuf.drain(..take);
                    left -= take as u64;
                }
                if left > SPLICE_MIN {
                    splice_body(ur.as_ref(), cw.as_ref(), Some(left), idle, |n| {
                        link.add_down(n)
                    })
                    .await?;
                    left = 0;
                }
                while left > 0 {
                    if ubuf.is_empty() {
                        fill(ur, ubuf, link, idle).await?;
                    }
                    let take = (left.min(ubuf.len() as u64)) as usize;
                    cw.write_all(&ubuf[..take]).await.map_err(write)?;
                    ubuf.drain(..take);
                    left -= take as u64;
                }
            }
            BodyLength::Chunked => {
                let mut decoder = ChunkedDecoder::new();
                loop {
                    if ubuf.is_empty() {
                        fill(ur, ubuf, link, idle).await?;
                    }
                    let used = decoder.feed(ubuf).map_err(Failure::BadResponse)?;
                    cw.write_all(&ubuf[..used]).await.map_err(write)?;
                    ubuf.drain(..used);
                    if decoder.is_done() {
                        break;
                    }
                }
            }
            BodyLength::UntilClose => {
                cw.write_all(ubuf).await.map_err(write)?;
                ubuf.clear();
                splice_body(ur.as_ref(), cw.as_ref(), None, idle, |n| link.add_down(n)).await?;
            }
        }
        return Ok(Response::Done {
            reusable: !upstream_closes && body != BodyLength::UntilClose && ubuf.is_empty(),
            close_client,
        });
    }
}

/// `CONNECT host:port`: decide, connect, `200`, then the tunnel with the
/// ClientHello check.
async fn connect(mut client: TcpStream, buf: Vec<u8>, head: RequestHead, cfg: &ProxyConfig) {
    let p = Protocol::Connect;
    let authority = match http::parse_authority(&head.target, None) {
        Ok(a) => a,
        Err(e) => {
            let d = Deny::bad_request(p, printable(head.target.as_bytes()), 0, &e);
            return refuse(&mut client, cfg, d).await;
        }
    };
    let port = authority.port;
    let host = match parse_host(&authority.host) {
        Ok(h) => h,
        Err(d) => {
            let r = Refusal::denial(&d, None);
            let d = Deny::refusal(p, printable(authority.host.as_bytes()), port, r);
            return refuse(&mut client, cfg, d).await;
        }
    };
    let shown = host.to_string();
    let framing =
        http::host_header(&head.headers).and_then(|h| http::request_body(&head).map(|b| (h, b)));
    let host_value = match framing {
        Ok((h, BodyLength::None)) => h,
        Ok(_) => {
            let e = HttpError::Syntax("CONNECT with a body");
            return refuse(&mut client, cfg, Deny::bad_request(p, shown, port, &e)).await;
        }
        Err(e) => return refuse(&mut client, cfg, Deny::bad_request(p, shown, port, &e)).await,
    };
    if let Some(raw) = host_value {
        let named = std::str::from_utf8(raw)
            .ok()
            .and_then(|v| http::parse_authority(v, Some(port)).ok())
            .and_then(|a| parse_host(&a.host).ok().map(|h| (h, a.port)));
        if named.as_ref() != Some(&(host.clone(), port)) {
            let d = Deny {
                protocol: p,
                host: shown.clone(),
                port,
                code: RefusalCode::HostMismatch,
                message: format!(
                    "Host header {} does not name the CONNECT target {shown}:{port}",
                    printable(raw)
                ),
                rule: None,
                address: None,
            };
            return refuse(&mut client, cfg, d).await;
        }
    }
    let opened = match decide::open(cfg, &host, port, p).await {
        Ok(o) => o,
        Err(r) => return refuse(&mut client, cfg, Deny::refusal(p, shown, port, r)).await,
    };
    tunnel::serve_allowed(
        cfg,
        p,
        &mut client,
        opened,
        &host,
        &shown,
        port,
        buf,
        b"HTTP/1.1 200 Connection Established\r\n\r\n",
    )
    .await;
}
