//! What the proxy reports: one [`ConnDecision`] per decision taken (a refusal
//! names its [`RefusalCode`]), one [`Closed`] per upstream connection that was
//! opened and has ended.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use warden_core::policy::net::Denial;

/// How the client asked for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// A plain HTTP/1.1 request in absolute form (`GET http://host/ HTTP/1.1`).
    Http,
    /// An HTTP `CONNECT host:port` tunnel.
    Connect,
    /// A SOCKS5 `CONNECT`.
    Socks5,
    /// A `connect()` of the sandbox to a synthetic address of its own
    /// resolver, handed over (transparent egress).
    Transparent,
}

impl Protocol {
    /// `"http"`, `"connect"`, `"socks5"` or `"transparent"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Connect => "connect",
            Protocol::Socks5 => "socks5",
            Protocol::Transparent => "transparent",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the proxy refused a request, a tunnel or a SOCKS5 connection: the `code`
/// of its `network.connect` record (`docs/audit-format.md`, where each is
/// explained) and of an HTTP refusal's `X-Warden-Denied` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalCode {
    /// No `network.allow` entry matches (decided before any DNS lookup).
    NotAllowed,
    /// The address, or every address the name resolved to, is of a class the
    /// matching entry does not open.
    PrivateAddress,
    BadHost,
    /// A malformed or ambiguous request (smuggling attempts, over-long heads...).
    BadRequest,
    /// The `Host` header does not match the request target.
    HostMismatch,
    /// A tunnel's ClientHello named another server, or was malformed.
    SniMismatch,
    /// A tunnel's ClientHello named no server (to a name whose entry has no
    /// `insecure-no-sni` option).
    NoSni,
    /// A tunnel's first bytes were not TLS, and no entry lists the port.
    PlainTunnel,
    /// `TRACE`, `TRACK`: answered 405.
    MethodRefused,
    /// A method the forward proxy does not forward: answered 501.
    MethodUnknown,
    DnsFailed,
    ConnectFailed,
    SocksIpNotListed,
    /// SOCKS5 `BIND` and `UDP ASSOCIATE`.
    SocksCommandRefused,
    /// A SOCKS5 greeting that does not offer "no authentication".
    SocksAuthRefused,
}

impl RefusalCode {
    /// Every code, in the order `docs/audit-format.md` lists them.
    pub const ALL: [RefusalCode; 15] = [
        RefusalCode::NotAllowed,
        RefusalCode::PrivateAddress,
        RefusalCode::BadHost,
        RefusalCode::BadRequest,
        RefusalCode::HostMismatch,
        RefusalCode::SniMismatch,
        RefusalCode::NoSni,
        RefusalCode::PlainTunnel,
        RefusalCode::MethodRefused,
        RefusalCode::MethodUnknown,
        RefusalCode::DnsFailed,
        RefusalCode::ConnectFailed,
        RefusalCode::SocksIpNotListed,
        RefusalCode::SocksCommandRefused,
        RefusalCode::SocksAuthRefused,
    ];

    /// The code as recorded and sent: `not-allowed`, `sni-mismatch`...
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::NotAllowed => "not-allowed",
            RefusalCode::PrivateAddress => "private-address",
            RefusalCode::BadHost => "bad-host",
            RefusalCode::BadRequest => "bad-request",
            RefusalCode::HostMismatch => "host-mismatch",
            RefusalCode::SniMismatch => "sni-mismatch",
            RefusalCode::NoSni => "no-sni",
            RefusalCode::PlainTunnel => "plain-tunnel",
            RefusalCode::MethodRefused => "method-refused",
            RefusalCode::MethodUnknown => "method-unknown",
            RefusalCode::DnsFailed => "dns-failed",
            RefusalCode::ConnectFailed => "connect-failed",
            RefusalCode::SocksIpNotListed => "socks-ip-not-listed",
            RefusalCode::SocksCommandRefused => "socks-command-refused",
            RefusalCode::SocksAuthRefused => "socks-auth-refused",
        }
    }

    /// The code spelled `s`, if it is one.
    pub fn parse(s: &str) -> Option<RefusalCode> {
        RefusalCode::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The status of the HTTP response a refusal gets: 400 for what cannot be
    /// parsed, 405 and 501 for methods, 502 when DNS or the upstream failed,
    /// else 403 (the policy).
    pub fn http_status(self) -> u16 {
        match self {
            RefusalCode::BadRequest | RefusalCode::BadHost => 400,
            RefusalCode::MethodRefused => 405,
            RefusalCode::MethodUnknown => 501,
            RefusalCode::DnsFailed | RefusalCode::ConnectFailed => 502,
            RefusalCode::NotAllowed
            | RefusalCode::PrivateAddress
            | RefusalCode::HostMismatch
            | RefusalCode::SniMismatch
            | RefusalCode::NoSni
            | RefusalCode::PlainTunnel
            | RefusalCode::SocksIpNotListed
            | RefusalCode::SocksCommandRefused
            | RefusalCode::SocksAuthRefused => 403,
        }
    }
}

impl From<&Denial> for RefusalCode {
    fn from(d: &Denial) -> RefusalCode {
        match d {
            Denial::NotAllowed { .. } => RefusalCode::NotAllowed,
            Denial::PrivateAddress { .. } => RefusalCode::PrivateAddress,
            Denial::BadHost(_) => RefusalCode::BadHost,
        }
    }
}

impl fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One decision about one connection: a request, a tunnel or a SOCKS5
/// connection.
///
/// `allowed` is true exactly when the proxy opened (or, for a keep-alive HTTP
/// request to the same host and port, reused) an upstream connection for it; every
/// upstream connection is later reported once by [`EventSink::closed`]. A refused
/// SNI (`sni-mismatch`) is a second decision on a tunnel that was allowed first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnDecision {
    pub protocol: Protocol,
    /// The normalised host (`Host`'s `Display`: IPv6 in brackets), or for input
    /// that could not be parsed, a printable, escaped form of at most 255
    /// characters (see [`printable`]); empty when the client named no host.
    pub host: String,
    /// 0 when the client named no port.
    pub port: u16,
    /// The vetted address connected to (or, for `connect-failed`, tried first).
    pub address: Option<SocketAddr>,
    pub allowed: bool,
    /// Why it was refused; `None` exactly when `allowed`.
    pub refusal: Option<RefusalCode>,
    /// ``allowed by `ENTRY` `` (the entry as written in the policy), or the
    /// refusal's code ([`RefusalCode::as_str`]).
    pub reason: String,
    /// The `network.allow` entry that matched, as written in the policy (for
    /// an approved host, the entry the approval stands for).
    pub rule: Option<String>,
    /// The approval that allowed a host `network.allow` does not list.
    pub approval: Option<crate::approve::Approval>,
}

impl ConnDecision {
    /// The machine code of the decision: `"allowed"`, or the refusal's code.
    pub fn code(&self) -> &'static str {
        self.refusal.map_or("allowed", RefusalCode::as_str)
    }
}

/// An upstream connection that has ended (a tunnel, or the upstream connection of
/// one or more HTTP exchanges on it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    pub protocol: Protocol,
    pub host: String,
    pub port: u16,
    pub address: SocketAddr,
    /// Bytes written to the upstream (for HTTP: rewritten heads and bodies).
    pub bytes_up: u64,
    /// Bytes read from the upstream.
    pub bytes_down: u64,
    pub duration: Duration,
}

/// The proxy's listener could not accept connections, typically because the
/// process (`EMFILE`) or the system (`ENFILE`) is out of file descriptors.
/// Reported at most once a second per proxy, counting what happened since the
/// last report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptFailure {
    /// The last error, as text (`Too many open files (os error 24)`).
    pub error: String,
    /// Its errno, if it had one.
    pub errno: Option<i32>,
    /// Failed accepts since the last report (at least 1).
    pub failures: u64,
    /// Waiting clients that were accepted with the proxy's reserve descriptor,
    /// answered `503` (`X-Warden-Denied: proxy-overloaded`) and closed at once
    /// instead of being left to wait.
    pub shed: u64,
}

/// Where decisions and closed connections go (the daemon's audit writer). Called
/// from the proxy's tasks: keep it quick and non-blocking.
pub trait EventSink: Send + Sync {
    fn decision(&self, d: &ConnDecision);
    fn closed(&self, c: &Closed);
    /// The listener could not accept (see [`AcceptFailure`]); ignored by default.
    fn accept_failed(&self, _f: &AcceptFailure) {}
}

/// An [`EventSink`] that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullSink;

impl EventSink for NullSink {
    fn decision(&self, _: &ConnDecision) {}
    fn closed(&self, _: &Closed) {}
}

/// The most characters [`printable`] returns.
pub const MAX_PRINTABLE: usize = 255;

/// A printable, single-line rendering of untrusted bytes for events and messages:
/// ASCII graphic characters stay, a backslash becomes `\\`, anything else
/// (space, controls, non-ASCII) becomes `\xNN`; the result is cut to at most
/// [`MAX_PRINTABLE`] characters, ending in `...` when cut.
pub fn printable(raw: &[u8]) -> String {
    let mut out = String::new();
    // The longest prefix (ending on a whole escape) that leaves room for "...".
    let mut cut_at = 0;
    for &b in raw {
        match b {
            b'\\' => out.push_str("\\\\"),
            0x21..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
        if out.len() <= MAX_PRINTABLE - 3 {
            cut_at = out.len();
        }
        if out.len() > MAX_PRINTABLE {
            out.truncate(cut_at);
            out.push_str("...");
            return out;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes_and_truncates() {
        assert_eq!(printable(b"api.github.com"), "api.github.com");
        assert_eq!(printable(b"a\r\nb c\\"), "a\\x0d\\x0ab\\x20c\\\\");
        assert_eq!(printable("é".as_bytes()), "\\xc3\\xa9");
        assert_eq!(printable(&[b'a'; 255]).len(), 255);
        let long = printable(&[b'a'; 1000]);
        assert!(long.len() <= MAX_PRINTABLE && long.ends_with("..."));
        let long = printable(&[0u8; 1000]);
        assert!(long.len() <= MAX_PRINTABLE && long.ends_with("..."));
        assert!(long.bytes().all(|b| b.is_ascii_graphic()));
    }

    /// The `code` row of `network.connect` in docs/audit-format.md, as its
    /// codes: the backticked names outside parentheses (which hold the
    /// explanations).
    fn documented_codes() -> Vec<String> {
        const DOC: &str = include_str!("../../docs/audit-format.md");
        let section = DOC
            .split("### `network.connect`")
            .nth(1)
            .expect("a network.connect section");
        let row = section
            .lines()
            .find(|l| l.starts_with("| `code` |"))
            .expect("a code row");
        let cell = row.trim_start_matches("| `code` |").trim_end_matches('|');
        let mut top = String::new();
        let mut depth = 0usize;
        for c in cell.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ if depth == 0 => top.push(c),
                _ => {}
            }
        }
        top.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn every_documented_code_is_a_variant_and_every_variant_is_documented() {
        let documented = documented_codes();
        assert_eq!(documented.first().map(String::as_str), Some("allowed"));
        let ours: Vec<&str> = RefusalCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(documented[1..], ours, "docs/audit-format.md vs RefusalCode");
        for c in RefusalCode::ALL {
            assert_eq!(RefusalCode::parse(c.as_str()), Some(c));
        }
        assert_eq!(RefusalCode::parse("allowed"), None);
    }

    #[test]
    fn denials_of_the_policy_keep_their_codes() {
        let denials = [
            Denial::NotAllowed {
                host: "example.com".into(),
                port: 80,
            },
            Denial::PrivateAddress {
                host: "example.com".into(),
                addr: std::net::Ipv4Addr::LOCALHOST.into(),
                class: "loopback",
                hint: "",
            },
            Denial::BadHost("x".into()),
        ];
        for d in &denials {
            assert_eq!(RefusalCode::from(d).as_str(), d.code());
        }
    }

    #[test]
    fn refusals_are_answered_with_the_statuses_of_before() {
        let status = |c: &str| RefusalCode::parse(c).map(RefusalCode::http_status);
        assert_eq!(status("bad-request"), Some(400));
        assert_eq!(status("bad-host"), Some(400));
        assert_eq!(status("method-refused"), Some(405));
        assert_eq!(status("method-unknown"), Some(501));
        assert_eq!(status("dns-failed"), Some(502));
        assert_eq!(status("connect-failed"), Some(502));
        for c in [
            "not-allowed",
            "private-address",
            "host-mismatch",
            "sni-mismatch",
        ] {
            assert_eq!(status(c), Some(403), "{c}");
        }
    }
}
