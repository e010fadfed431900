//! HTTP/1.1 parsing for the forward proxy: request and response heads, request
//! targets and authorities, message framing and a strict incremental chunked
//! decoder. Pure functions, no I/O.
//!
//! Strictness is the point: anything two parsers could read differently (bare LF,
//! obs-fold, `Content-Length` next to `Transfer-Encoding`, several
//! `Content-Length`s, odd chunk sizes, a `Connection` header naming a framing
//! header) is an error, so that a second request can never hide inside the first
//! one's body and reach the upstream unchecked.

use std::fmt::Write as _;

/// The default limit of a request head, request line included.
pub const MAX_HEAD: usize = 16 * 1024;
/// The default limit on the number of header fields in a request head.
pub const MAX_HEADERS: usize = 100;
/// The longest chunk-size line (size and extensions).
pub const MAX_CHUNK_LINE: usize = 4096;
/// The most bytes of trailer fields after the last chunk.
pub const MAX_TRAILERS: usize = 16 * 1024;

/// Why a message could not be accepted. `Display` is a short lowercase message
/// for the client; the audit code is `bad-request`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    #[error("head larger than {0} bytes")]
    HeadTooLarge(usize),
    #[error("more than {0} header fields")]
    TooManyHeaders(usize),
    #[error("bare CR or LF in the head")]
    BareLineEnding,
    #[error("empty line before the request line")]
    LeadingEmptyLine,
    #[error("obsolete line folding")]
    ObsFold,
    #[error("malformed head: {0}")]
    Syntax(&'static str),
    #[error("unsupported HTTP version")]
    Version,
    #[error("request target: {0}")]
    Target(&'static str),
    #[error("authority: {0}")]
    Authority(&'static str),
    #[error("missing Host header")]
    MissingHost,
    #[error("more than one Host header")]
    DuplicateHost,
    #[error("both Content-Length and Transfer-Encoding")]
    LengthAndEncoding,
    #[error("invalid or repeated Content-Length")]
    ContentLength,
    #[error("unsupported Transfer-Encoding")]
    TransferEncoding,
    #[error("Connection names the framing header {0}")]
    ConnectionNamesFraming(&'static str),
    #[error("chunked body: {0}")]
    Chunked(&'static str),
}

/// A parsed request head. Header values are the raw bytes between the colon and
/// the line end, without surrounding whitespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    pub target: String,
    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub headers: Vec<(String, Vec<u8>)>,
    /// Bytes of the head, final empty line included.
    pub len: usize,
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub minor: u8,
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub len: usize,
}

/// A host and port as written in a request target, CONNECT authority or Host
/// header. `host` keeps IPv6 brackets; it still has to go through
/// `warden_core::policy::net::parse_host`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    pub host: String,
    pub port: u16,
}

/// How the body of a message is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLength {
    /// No body.
    None,
    /// Exactly this many bytes (never 0: that is `None`).
    Length(u64),
    /// `Transfer-Encoding: chunked`, up to the last chunk and its trailers.
    Chunked,
    /// Until the sender closes (responses only).
    UntilClose,
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Checks line endings and folding in (a prefix of) a head: every LF follows a
/// CR, every CR precedes an LF, no line starts with whitespace.
fn check_lines(buf: &[u8]) -> Result<(), HttpError> {
    for (i, &b) in buf.iter().enumerate() {
        match b {
            b'\n' if i == 0 || buf[i - 1] != b'\r' => return Err(HttpError::BareLineEnding),
            b'\r' if buf.get(i + 1).is_some_and(|&n| n != b'\n') => {
                return Err(HttpError::BareLineEnding)
            }
            b' ' | b'\t' if i > 0 && buf[i - 1] == b'\n' => return Err(HttpError::ObsFold),
            _ => {}
        }
    }
    Ok(())
}

fn map_httparse(e: httparse::Error, max_headers: usize) -> HttpError {
    match e {
        httparse::Error::TooManyHeaders => HttpError::TooManyHeaders(max_headers),
        httparse::Error::Version => HttpError::Version,
        httparse::Error::HeaderName => HttpError::Syntax("invalid header name"),
        httparse::Error::HeaderValue => HttpError::Syntax("invalid header value"),
        httparse::Error::NewLine => HttpError::BareLineEnding,
        httparse::Error::Status => HttpError::Syntax("invalid status"),
        httparse::Error::Token => HttpError::Syntax("invalid token"),
    }
}

fn collect_headers(headers: &[httparse::Header<'_>]) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|h| (h.name.to_string(), h.value.to_vec()))
        .collect()
}

/// Parses a request head from the start of `buf`. `Ok(None)`: incomplete, read
/// more (unless `buf` already holds `max_head` bytes, which is an error here).
pub fn parse_request_head(
    buf: &[u8],
    max_head: usize,
    max_headers: usize,
) -> Result<Option<RequestHead>, HttpError> {
    if buf.first().is_some_and(|&b| b == b'\r' || b == b'\n') {
        return Err(HttpError::LeadingEmptyLine);
    }
    let end = match find_head_end(buf) {
        Some(end) if end <= max_head => end,
        Some(_) => return Err(HttpError::HeadTooLarge(max_head)),
        None => {
            check_lines(buf)?;
            if buf.len() >= max_head {
                return Err(HttpError::HeadTooLarge(max_head));
            }
            // Refuse garbage early instead of waiting for a head that never ends.
            let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
            if let Err(e) = httparse::Request::new(&mut headers).parse(buf) {
                return Err(map_httparse(e, max_headers));
            }
            return Ok(None);
        }
    };
    let head = &buf[..end];
    check_lines(head)?;
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(n)) if n == end => {}
        Ok(_) => return Err(HttpError::Syntax("incomplete head")),
        Err(e) => return Err(map_httparse(e, max_headers)),
    }
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(HttpError::Syntax("incomplete request line"));
    };
    if !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(HttpError::Target("non-ASCII byte"));
    }
    Ok(Some(RequestHead {
        method: method.to_string(),
        target: target.to_string(),
        minor,
        headers: collect_headers(req.headers),
        len: end,
    }))
}

/// What the forward proxy does with a request's method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodUse {
    /// Forwarded: one of [`FORWARDED_METHODS`].
    Forward,
    /// `CONNECT`: a tunnel.
    Connect,
    /// A known method the proxy refuses (405): `TRACE` and `TRACK` echo the
    /// request back, headers added on the way included, which has no business
    /// crossing a sandbox's proxy (cross-site tracing, probing what intermediaries
    /// add).
    Refused,
    /// Any other token (501): extension methods have semantics the proxy cannot
    /// vouch for. Methods are case-sensitive (`get` is not `GET`).
    Unknown,
}

/// The methods the forward proxy passes on: RFC 9110's (without `TRACE` and
/// `CONNECT`), `PATCH` (RFC 5789), and WebDAV's (RFC 4918, and `REPORT` of RFC
/// 3253, for CalDAV and CardDAV): ordinary requests to the one host the request
/// names, framed like any other.
pub const FORWARDED_METHODS: &[&str] = &[
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "DELETE",
    "OPTIONS",
    "PATCH",
    "PROPFIND",
    "PROPPATCH",
    "MKCOL",
    "COPY",
    "MOVE",
    "LOCK",
    "UNLOCK",
    "REPORT",
];

/// The methods refused with 405.
pub const REFUSED_METHODS: &[&str] = &["TRACE", "TRACK"];

/// How the forward proxy treats `method` (exact, case-sensitive).
pub fn method_use(method: &str) -> MethodUse {
    if method == "CONNECT" {
        MethodUse::Connect
    } else if FORWARDED_METHODS.contains(&method) {
        MethodUse::Forward
    } else if REFUSED_METHODS.contains(&method) {
        MethodUse::Refused
    } else {
        MethodUse::Unknown
    }
}

/// Parses a response head. Bare LF line ends are tolerated here (the proxy writes
/// a fresh head to its client); obs-fold is not.
pub fn parse_response_head(
    buf: &[u8],
    max_head: usize,
    max_headers: usize,
) -> Result<Option<ResponseHead>, HttpError> {
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
    let mut resp = httparse::Response::new(&mut headers);
    let limit = buf.len().min(max_head);
    match resp.parse(&buf[..limit]) {
        Ok(httparse::Status::Complete(n)) => {
            let (Some(minor), Some(status)) = (resp.version, resp.code) else {
                return Err(HttpError::Syntax("incomplete status line"));
            };
            if !(100..=999).contains(&status) {
                return Err(HttpError::Syntax("invalid status"));
            }
            let reason = resp
                .reason
                .unwrap_or("")
                .chars()
                .filter(|c| (' '..='~').contains(c))
                .collect();
            Ok(Some(ResponseHead {
                minor,
                status,
                reason,
                headers: collect_headers(resp.headers),
                len: n,
            }))
        }
        Ok(httparse::Status::Partial) if buf.len() >= max_head => {
            Err(HttpError::HeadTooLarge(max_head))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(map_httparse(e, max_headers)),
    }
}

fn is_host_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn parse_port(s: &str) -> Result<u16, HttpError> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HttpError::Authority("invalid port"));
    }
    match s.parse::<u32>() {
        Ok(p @ 1..=65535) => Ok(p as u16),
        _ => Err(HttpError::Authority("port out of range")),
    }
}

/// Parses `host[:port]` / `[v6][:port]` (no userinfo, no percent-encoding, ASCII
/// letters, digits, `-._~` only). `default_port: None` makes the port mandatory
/// (CONNECT).
pub fn parse_authority(s: &str, default_port: Option<u16>) -> Result<Authority, HttpError> {
    if s.is_empty() {
        return Err(HttpError::Authority("empty"));
    }
    if s.len() > 300 {
        return Err(HttpError::Authority("too long"));
    }
    let (host, rest) = if let Some(inner) = s.strip_prefix('[') {
        let close = inner
            .find(']')
            .ok_or(HttpError::Authority("unclosed bracket"))?;
        let addr = &inner[..close];
        if addr.is_empty()
            || !addr
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err(HttpError::Authority("invalid IPv6 literal"));
        }
        (&s[..close + 2], &inner[close + 1..])
    } else {
        match s.find(':') {
            Some(i) => (&s[..i], &s[i..]),
            None => (s, ""),
        }
    };
    if !host.starts_with('[') {
        if host.is_empty() {
            return Err(HttpError::Authority("empty host"));
        }
        if let Some(b) = host.bytes().find(|&b| !is_host_char(b)) {
            return Err(match b {
                b'@' => HttpError::Authority("userinfo"),
                b'%' => HttpError::Authority("percent-encoding"),
                _ => HttpError::Authority("invalid character in host"),
            });
        }
    }
    let port = match rest.strip_prefix(':') {
        Some(p) => parse_port(p)?,
        None if rest.is_empty() => default_port.ok_or(HttpError::Authority("missing port"))?,
        None => return Err(HttpError::Authority("junk after host")),
    };
    Ok(Authority {
        host: host.to_string(),
        port,
    })
}

/// Parses an absolute-form request target `http://authority[/path][?query]`
/// into its authority (default port 80) and the origin-form to send upstream
/// (`/` when the path is empty). Origin-form, `*`, other schemes, userinfo and
/// fragments are errors.
pub fn parse_absolute_target(target: &str) -> Result<(Authority, String), HttpError> {
    if target.starts_with('/') {
        return Err(HttpError::Target(
            "origin-form (this is a proxy: use http://host/path)",
        ));
    }
    if target.contains('#') {
        return Err(HttpError::Target("fragment"));
    }
    let Some(colon) = target.find("://") else {
        return Err(HttpError::Target("not absolute-form"));
    };
    let scheme = &target[..colon];
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(HttpError::Target("only http:// (use CONNECT for https)"));
    }
    let rest = &target[colon + 3..];
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.contains('@') {
        return Err(HttpError::Authority("userinfo"));
    }
    let authority = parse_authority(authority, Some(80))?;
    let path = if path.is_empty() {
        "/".to_string()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    Ok((authority, path))
}

/// The values of every header called `name` (case-insensitive).
pub fn header_values<'a>(
    headers: &'a [(String, Vec<u8>)],
    name: &'a str,
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// The single Host header of a request; none or several are errors.
pub fn host_header(headers: &[(String, Vec<u8>)]) -> Result<Option<&[u8]>, HttpError> {
    let mut it = header_values(headers, "host");
    let first = it.next();
    if it.next().is_some() {
        return Err(HttpError::DuplicateHost);
    }
    Ok(first)
}

/// The lower-case tokens of every `Connection` header.
pub fn connection_tokens(headers: &[(String, Vec<u8>)]) -> Vec<String> {
    header_values(headers, "connection")
        .flat_map(|v| v.split(|&b| b == b','))
        .map(|t| String::from_utf8_lossy(t.trim_ascii()).to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

fn parse_length(v: &[u8]) -> Result<u64, HttpError> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return Err(HttpError::ContentLength);
    }
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(HttpError::ContentLength)
}

/// The framing of a request body. Strict: one `Content-Length` of digits, or one
/// `Transfer-Encoding: chunked` on HTTP/1.1, never both; a `Connection` header
/// naming `Content-Length`, `Transfer-Encoding` or `Host` is refused too (a hop
/// that honours it would drop the framing the proxy relied on).
pub fn request_body(head: &RequestHead) -> Result<BodyLength, HttpError> {
    for token in connection_tokens(&head.headers) {
        match token.as_str() {
            "content-length" => return Err(HttpError::ConnectionNamesFraming("Content-Length")),
            "transfer-encoding" => {
                return Err(HttpError::ConnectionNamesFraming("Transfer-Encoding"))
            }
            "host" => return Err(HttpError::ConnectionNamesFraming("Host")),
            _ => {}
        }
    }
    let te: Vec<&[u8]> = header_values(&head.headers, "transfer-encoding").collect();
    let cl: Vec<&[u8]> = header_values(&head.headers, "content-length").collect();
    if !te.is_empty() && !cl.is_empty() {
        return Err(HttpError::LengthAndEncoding);
    }
    if !te.is_empty() {
        if te.len() > 1 || head.minor == 0 || !te[0].trim_ascii().eq_ignore_ascii_case(b"chunked") {
            return Err(HttpError::TransferEncoding);
        }
        return Ok(BodyLength::Chunked);
    }
    match cl.as_slice() {
        [] => Ok(BodyLength::None),
        [one] => match parse_length(one)? {
            0 => Ok(BodyLength::None),
            n => Ok(BodyLength::Length(n)),
        },
        _ => Err(HttpError::ContentLength),
    }
}

/// The framing of a response body (RFC 9112 §6.3). 1xx, 204, 304 and responses
/// to HEAD have none; `Transfer-Encoding` ending in `chunked` is chunked (with a
/// `Content-Length` too, an error); other codings are close-delimited; several
/// `Content-Length` values must agree.
pub fn response_body(
    request_method: &str,
    status: u16,
    headers: &[(String, Vec<u8>)],
) -> Result<BodyLength, HttpError> {
    if request_method.eq_ignore_ascii_case("HEAD")
        || (100..200).contains(&status)
        || status == 204
        || status == 304
    {
        return Ok(BodyLength::None);
    }
    let te: Vec<&[u8]> = header_values(headers, "transfer-encoding").collect();
    let has_cl = header_values(headers, "content-length").next().is_some();
    if !te.is_empty() {
        if has_cl {
            return Err(HttpError::LengthAndEncoding);
        }
        let last = te
            .iter()
            .flat_map(|v| v.split(|&b| b == b','))
            .map(|t| t.trim_ascii())
            .rfind(|t| !t.is_empty());
        return Ok(match last {
            Some(t) if t.eq_ignore_ascii_case(b"chunked") => BodyLength::Chunked,
            _ => BodyLength::UntilClose,
        });
    }
    let mut length = None;
    for v in header_values(headers, "content-length") {
        for part in v.split(|&b| b == b',') {
            let n = parse_length(part)?;
            if length.is_some_and(|l| l != n) {
                return Err(HttpError::ContentLength);
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(0) => BodyLength::None,
        Some(n) => BodyLength::Length(n),
        None => BodyLength::UntilClose,
    })
}

/// Hop-by-hop fields never forwarded (RFC 9110 §7.6.1 and the usual extras).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
];

/// True when the request asks for a protocol upgrade (`Connection: upgrade` and
/// an `Upgrade` header).
pub fn is_upgrade(headers: &[(String, Vec<u8>)]) -> bool {
    connection_tokens(headers).iter().any(|t| t == "upgrade")
        && header_values(headers, "upgrade").next().is_some()
}

fn forwardable<'a>(
    headers: &'a [(String, Vec<u8>)],
    keep_upgrade: bool,
) -> impl Iterator<Item = &'a (String, Vec<u8>)> + 'a {
    let listed = connection_tokens(headers);
    headers.iter().filter(move |(name, _)| {
        let lower = name.to_ascii_lowercase();
        if keep_upgrade && lower == "upgrade" {
            return true;
        }
        // Framing fields stay even when listed (request_body refuses that case).
        let framing = lower == "content-length" || lower == "transfer-encoding" || lower == "host";
        !HOP_BY_HOP.contains(&lower.as_str()) && (framing || !listed.contains(&lower))
    })
}

fn push_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The head sent upstream: origin-form target, `host_value` as the only Host,
/// hop-by-hop fields dropped (an upgrade keeps `Connection: upgrade` and
/// `Upgrade`), `Connection: close` when `close`.
pub fn rewrite_request(
    head: &RequestHead,
    origin_target: &str,
    host_value: &str,
    upgrade: bool,
    close: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len + 64);
    let _ = write!(
        Sink(&mut out),
        "{} {} HTTP/1.{}\r\nHost: {}\r\n",
        head.method,
        origin_target,
        head.minor,
        host_value
    );
    for (name, value) in forwardable(&head.headers, upgrade) {
        if !name.eq_ignore_ascii_case("host") {
            push_header(&mut out, name, value);
        }
    }
    if upgrade {
        out.extend_from_slice(b"Connection: upgrade\r\n");
    } else if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The head sent to the client for an upstream response: hop-by-hop fields
/// dropped (a 101 keeps `Connection: upgrade` and `Upgrade`), `Connection: close`
/// when the proxy will close the client connection after this response.
pub fn rewrite_response(head: &ResponseHead, close: bool) -> Vec<u8> {
    let upgrade = head.status == 101;
    let mut out = Vec::with_capacity(head.len + 32);
    let _ = write!(
        Sink(&mut out),
        "HTTP/1.{} {} {}\r\n",
        head.minor,
        head.status,
        head.reason
    );
    for (name, value) in forwardable(&head.headers, upgrade) {
        push_header(&mut out, name, value);
    }
    if upgrade {
        out.extend_from_slice(b"Connection: upgrade\r\n");
    } else if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

struct Sink<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Sink<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading the hex size (`digits` so far).
    Size {
        digits: u8,
    },
    /// After `;`: extensions up to CR.
    Ext,
    /// CR seen after the size line, LF expected.
    SizeLf,
    /// This many data bytes left.
    Data(u64),
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    /// Inside a trailer field; whether the colon was seen.
    Trailer {
        colon: bool,
    },
    TrailerLf,
    FinalLf,
    Done,
}

/// A strict, incremental validator of a chunked body: [`feed`](Self::feed) it
/// bytes, forward exactly the bytes it consumed, stop when [`is_done`](Self::is_done).
/// Bytes after the final CRLF are not consumed (they belong to the next message).
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: Chunk,
    size: u64,
    line: usize,
    trailers: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder {
            state: Chunk::Size { digits: 0 },
            size: 0,
            line: 0,
            trailers: 0,
        }
    }

    /// True once the last chunk and the trailer section have been consumed.
    pub fn is_done(&self) -> bool {
        self.state == Chunk::Done
    }

    /// Consumes a prefix of `input`; returns how many bytes (all of them unless
    /// the body ended inside `input`).
    pub fn feed(&mut self, input: &[u8]) -> Result<usize, HttpError> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                Chunk::Done => break,
                Chunk::Data(left) => {
                    let take = left.min((input.len() - i) as u64);
                    i += take as usize;
                    self.state = if take == left {
                        Chunk::DataCr
                    } else {
                        Chunk::Data(left - take)
                    };
                    continue;
                }
                Chunk::Size { digits } => {
                    self.line += 1;
                    if let Some(d) = (b as char).to_digit(16) {
                        if digits >= 16 {
                            return Err(HttpError::Chunked("chunk size too long"));
                        }
                        self.size = self.size << 4 | u64::from(d);
                        self.state = Chunk::Size { digits: digits + 1 };
                    } else if digits == 0 {
                        return Err(HttpError::Chunked("invalid chunk size"));
                    } else if b == b';' {
                        self.state = Chunk::Ext;
                    } else if b == b'\r' {
                        self.state = Chunk::SizeLf;
                    } else {
                        return Err(HttpError::Chunked("invalid chunk size"));
                    }
                }
                Chunk::Ext => {
                    self.line += 1;
                    if self.line > MAX_CHUNK_LINE {
                        return Err(HttpError::Chunked("chunk line too long"));
                    }
                    match b {
                        b'\r' => self.state = Chunk::SizeLf,
                        b'\t' | 0x20..=0x7e => {}
                        _ => return Err(HttpError::Chunked("invalid chunk extension")),
                    }
                }
                Chunk::SizeLf => {
                    if b != b'\n' {
                        return Err(HttpError::Chunked("bare CR"));
                    }
                    self.line = 0;
                    self.state = if self.size == 0 {
                        Chunk::TrailerStart
                    } else {
                        Chunk::Data(self.size)
                    };
                    self.size = 0;
                }
                Chunk::DataCr => {
                    if b != b'\r' {
                        return Err(HttpError::Chunked("chunk data longer than its size"));
                    }
                    self.state = Chunk::DataLf;
                }
                Chunk::DataLf => {
                    if b != b'\n' {
                        return Err(HttpError::Chunked("bare CR"));
                    }
                    self.state = Chunk::Size { digits: 0 };
                }
                Chunk::TrailerStart => {
                    self.trailers += 1;
                    if b == b'\r' {
                        self.state = Chunk::FinalLf;
                    } else if is_token(b) {
                        self.state = Chunk::Trailer { colon: false };
                    } else if b == b' ' || b == b'\t' {
                        return Err(HttpError::ObsFold);
                    } else {
                        return Err(HttpError::Chunked("invalid trailer"));
                    }
                }
                Chunk::Trailer { colon } => {
                    self.trailers += 1;
                    if self.trailers > MAX_TRAILERS {
                        return Err(HttpError::Chunked("trailers too large"));
                    }
                    match b {
                        b'\r' if colon => self.state = Chunk::TrailerLf,
                        b':' if !colon => self.state = Chunk::Trailer { colon: true },
                        _ if !colon && is_token(b) => {}
                        b'\t' | 0x20..=0x7e | 0x80..=0xff if colon => {}
                        _ => return Err(HttpError::Chunked("invalid trailer")),
                    }
                }
                Chunk::TrailerLf => {
                    if b != b'\n' {
                        return Err(HttpError::Chunked("bare CR"));
                    }
                    self.state = Chunk::TrailerStart;
                }
                Chunk::FinalLf => {
                    if b != b'\n' {
                        return Err(HttpError::Chunked("bare CR"));
                    }
                    self.state = Chunk::Done;
                }
            }
            i += 1;
        }
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(s: &str) -> Result<Option<RequestHead>, HttpError> {
        parse_request_head(s.as_bytes(), MAX_HEAD, MAX_HEADERS)
    }

    fn body(s: &str) -> Result<BodyLength, HttpError> {
        request_body(&req(s).unwrap().unwrap())
    }

    #[test]
    fn request_heads() {
        let h = req("GET http://a.com/x HTTP/1.1\r\nHost: a.com\r\n\r\nrest")
            .unwrap()
            .unwrap();
        assert_eq!(h.method, "GET");
        assert_eq!(h.target, "http://a.com/x");
        assert_eq!(h.minor, 1);
        assert_eq!(h.headers, vec![("Host".into(), b"a.com".to_vec())]);
        assert_eq!(h.len, 44);
        assert_eq!(req("GET http://a.com/ HTTP/1.1\r\nHost: a"), Ok(None));
        assert!(req("\x16\x03\x01\x00").is_err());
        assert!(req("GET http://a.com/ HTTP/3").is_err());
        assert_eq!(
            req("GET http://a.com/ HTTP/1.1\r\nHost: a\nX: y\r\n\r\n"),
            Err(HttpError::BareLineEnding)
        );
        assert_eq!(
            req("GET http://a.com/ HTTP/1.1\nHost: a\n\n"),
            Err(HttpError::BareLineEnding)
        );
        assert_eq!(
            req("GET http://a.com/ HTTP/1.1\r\nHost: a\rX: y\r\n\r\n"),
            Err(HttpError::BareLineEnding)
        );
        assert_eq!(
            req("GET http://a.com/ HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n"),
            Err(HttpError::ObsFold)
        );
        assert_eq!(
            req("\r\nGET http://a.com/ HTTP/1.1\r\n\r\n"),
            Err(HttpError::LeadingEmptyLine)
        );
        assert!(req("GET  http://a.com/ HTTP/1.1\r\n\r\n").is_err());
        assert!(req("GET http://a.com/ HTTP/2.0\r\n\r\n").is_err());
        assert!(req("GET http://a.com/ HTTP/1.1\r\nHost : a\r\n\r\n").is_err());
        assert!(req("GET http://a.com/\u{e9} HTTP/1.1\r\n\r\n").is_err());
        let big = format!(
            "GET http://a.com/ HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD)
        );
        assert_eq!(req(&big), Err(HttpError::HeadTooLarge(MAX_HEAD)));
        assert_eq!(
            req(&big[..MAX_HEAD + 10]),
            Err(HttpError::HeadTooLarge(MAX_HEAD))
        );
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X{i}: v\r\n")).collect();
        assert_eq!(
            req(&format!("GET http://a.com/ HTTP/1.1\r\n{many}\r\n")),
            Err(HttpError::TooManyHeaders(MAX_HEADERS))
        );
    }

    #[test]
    fn targets_and_authorities() {
        let (a, p) = parse_absolute_target("http://api.github.com/x?y").unwrap();
        assert_eq!(
            (a.host.as_str(), a.port, p.as_str()),
            ("api.github.com", 80, "/x?y")
        );
        let (a, p) = parse_absolute_target("HTTP://h:8080").unwrap();
        assert_eq!((a.host.as_str(), a.port, p.as_str()), ("h", 8080, "/"));
        let (a, p) = parse_absolute_target("http://h?q").unwrap();
        assert_eq!((a.host.as_str(), p.as_str()), ("h", "/?q"));
        let (a, _) = parse_absolute_target("http://[::1]:81/").unwrap();
        assert_eq!((a.host.as_str(), a.port), ("[::1]", 81));
        for bad in [
            "/x",
            "*",
            "https://h/",
            "ftp://h/",
            "http://user@h/",
            "http://a.com@evil.com/",
            "http://h/#f",
            "http://h:0/",
            "http://h:65536/",
            "http://h:/",
            "http://h:80:80/",
            "http://h%2ecom/",
            "http://[::1/",
            "http://[::1]x/",
            "http:///",
            "http://h\\@evil/",
        ] {
            assert!(parse_absolute_target(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_authority("h.com:443", None).unwrap(),
            Authority {
                host: "h.com".into(),
                port: 443
            }
        );
        assert!(parse_authority("h.com", None).is_err());
        assert!(parse_authority("1.2.3.4:+1", None).is_err());
        assert!(parse_authority(&"a".repeat(400), Some(80)).is_err());
    }

    #[test]
    fn request_framing() {
        assert_eq!(
            body("GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n"),
            Ok(BodyLength::None)
        );
        assert_eq!(
            body("POST http://h/ HTTP/1.1\r\nContent-Length: 5\r\n\r\n"),
            Ok(BodyLength::Length(5))
        );
        assert_eq!(
            body("POST http://h/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
            Ok(BodyLength::None)
        );
        assert_eq!(
            body("POST http://h/ HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n"),
            Ok(BodyLength::Chunked)
        );
        for bad in [
            "POST http://h/ HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nContent-Length: 0x5\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
            "POST http://h/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nConnection: content-length\r\nContent-Length: 5\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nConnection: close, Transfer-Encoding\r\n\r\n",
        ] {
            assert!(body(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn response_framing() {
        let h = |s: &str| {
            vec![(
                s.split(':').next().unwrap().to_string(),
                s.split(':').nth(1).unwrap().trim().as_bytes().to_vec(),
            )]
        };
        assert_eq!(
            response_body("GET", 200, &h("Content-Length: 3")),
            Ok(BodyLength::Length(3))
        );
        assert_eq!(
            response_body("HEAD", 200, &h("Content-Length: 3")),
            Ok(BodyLength::None)
        );
        assert_eq!(response_body("GET", 204, &[]), Ok(BodyLength::None));
        assert_eq!(response_body("GET", 304, &[]), Ok(BodyLength::None));
        assert_eq!(response_body("GET", 200, &[]), Ok(BodyLength::UntilClose));
        assert_eq!(
            response_body("GET", 200, &h("Transfer-Encoding: gzip, chunked")),
            Ok(BodyLength::Chunked)
        );
        assert_eq!(
            response_body("GET", 200, &h("Transfer-Encoding: gzip")),
            Ok(BodyLength::UntilClose)
        );
        assert_eq!(
            response_body("GET", 200, &h("Content-Length: 3, 3")),
            Ok(BodyLength::Length(3))
        );
        assert!(response_body("GET", 200, &h("Content-Length: 3, 4")).is_err());
        let mut both = h("Content-Length: 3");
        both.extend(h("Transfer-Encoding: chunked"));
        assert!(response_body("GET", 200, &both).is_err());
    }

    #[test]
    fn rewrites_drop_hop_by_hop() {
        let h = req("GET http://H.com/x HTTP/1.1\r\nHost: H.com\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nProxy-Authorization: b\r\nKeep-Alive: 5\r\nTE: trailers\r\nTrailer: x\r\nProxy-Connection: keep-alive\r\nUpgrade: websocket\r\nAccept: */*\r\n\r\n")
            .unwrap()
            .unwrap();
        let out = String::from_utf8(rewrite_request(&h, "/x", "h.com", false, false)).unwrap();
        assert_eq!(out, "GET /x HTTP/1.1\r\nHost: h.com\r\nAccept: */*\r\n\r\n");
        let out = String::from_utf8(rewrite_request(&h, "/x", "h.com", false, true)).unwrap();
        assert_eq!(
            out,
            "GET /x HTTP/1.1\r\nHost: h.com\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let up = req("GET http://h.com/ws HTTP/1.1\r\nHost: h.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(is_upgrade(&up.headers));
        assert!(!is_upgrade(&h.headers));
        let out = String::from_utf8(rewrite_request(&up, "/ws", "h.com", true, false)).unwrap();
        assert_eq!(out, "GET /ws HTTP/1.1\r\nHost: h.com\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\nConnection: upgrade\r\n\r\n");
        let resp = parse_response_head(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nKeep-Alive: 1\r\nContent-Length: 2\r\n\r\nhi",
            4096,
            10,
        )
        .unwrap()
        .unwrap();
        assert_eq!(resp.len, 72);
        let out = String::from_utf8(rewrite_response(&resp, false)).unwrap();
        assert_eq!(out, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n");
    }

    #[test]
    fn response_heads() {
        assert_eq!(
            parse_response_head(b"HTTP/1.1 200 OK\r\n", 4096, 10),
            Ok(None)
        );
        assert!(parse_response_head(b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", 4096, 10).is_err());
        assert!(parse_response_head(b"HTTP/1.1 2000 OK\r\n\r\n", 4096, 10).is_err());
        assert!(parse_response_head(&[b'a'; 10], 5, 10).is_err());
        assert_eq!(
            parse_response_head(b"HTTP/1.1 200 OK\r\nA: b", 20, 10),
            Err(HttpError::HeadTooLarge(20))
        );
        let r = parse_response_head(b"HTTP/1.0 404 Not\x01Found\r\n\r\n", 4096, 10);
        assert!(r.is_err() || r.unwrap().unwrap().reason.chars().all(|c| c != '\u{1}'));
    }

    fn dechunk(input: &[u8]) -> Result<(usize, bool), HttpError> {
        let mut d = ChunkedDecoder::new();
        let n = d.feed(input)?;
        Ok((n, d.is_done()))
    }

    #[test]
    fn chunked_decoder() {
        let body = b"5\r\nhello\r\n0\r\n\r\nGET";
        assert_eq!(dechunk(body), Ok((body.len() - 3, true)));
        // Byte by byte gives the same result.
        let mut d = ChunkedDecoder::new();
        let mut used = 0;
        for i in 0..body.len() {
            used += d.feed(&body[i..i + 1]).unwrap();
            if d.is_done() {
                break;
            }
        }
        assert_eq!(used, body.len() - 3);
        assert_eq!(
            dechunk(b"A;name=\"v\"\r\n0123456789\r\n0\r\nX-T: 1\r\nY: \r\n\r\n").map(|r| r.1),
            Ok(true)
        );
        assert_eq!(dechunk(b"5\r\nhel"), Ok((6, false)));
        for bad in [
            &b"\r\n"[..],
            b"-1\r\n",
            b"0x5\r\nhello\r\n",
            b" 5\r\nhello\r\n",
            b"5 \r\nhello\r\n",
            b"5\nhello\r\n",
            b"5\r\nhello!\r\n",
            b"5\r\nhello\n",
            b"11111111111111111\r\n",
            b"0\r\nX\r\n\r\n",
            b"0\r\n folded: x\r\n\r\n",
            b"0\r\nX: a\rb\r\n\r\n",
            b"0\r\n\r\r",
            b"1;\x00\r\n",
        ] {
            assert!(dechunk(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let long = format!("1;{}\r\n", "a".repeat(MAX_CHUNK_LINE));
        assert!(dechunk(long.as_bytes()).is_err());
        assert_eq!(dechunk(b"ffffffffffffffff\r\n").map(|r| r.1), Ok(false));
    }
}
