//! What the proxy reports: one [`Decision`] per decision taken, one [`Closed`] per
//! upstream connection that was opened and has ended.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// How the client asked for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// A plain HTTP/1.1 request in absolute form (`GET http://host/ HTTP/1.1`).
    Http,
    /// An HTTP `CONNECT host:port` tunnel.
    Connect,
    /// A SOCKS5 `CONNECT`.
    Socks5,
}

impl Protocol {
    /// `"http"`, `"connect"` or `"socks5"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Connect => "connect",
            Protocol::Socks5 => "socks5",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One decision about one request, tunnel or SOCKS connection.
///
/// `allowed` is true exactly when the proxy opened (or, for a keep-alive HTTP
/// request to the same host and port, reused) an upstream connection for it; every
/// upstream connection is later reported once by [`EventSink::closed`]. A refused
/// SNI (`sni-mismatch`) is a second decision on a tunnel that was allowed first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
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
    /// ``allowed by `ENTRY` `` (the entry as written in the policy), or a short
    /// code: `not-allowed`, `private-address`, `bad-host`, `bad-request`,
    /// `host-mismatch`, `sni-mismatch`, `dns-failed`, `connect-failed`,
    /// `socks-ip-not-listed`, `socks-command-refused`, `socks-auth-refused`.
    pub reason: String,
    /// The `network.allow` entry that matched, as written in the policy (for
    /// an approved host, the entry the approval stands for).
    pub rule: Option<String>,
    /// The approval that allowed a host `network.allow` does not list.
    pub approval: Option<crate::approve::Approval>,
}

impl Decision {
    /// The machine code of the reason: `"allowed"` for allowed decisions, else
    /// [`Decision::reason`].
    pub fn code(&self) -> &str {
        if self.allowed {
            "allowed"
        } else {
            &self.reason
        }
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
    fn decision(&self, d: &Decision);
    fn closed(&self, c: &Closed);
    /// The listener could not accept (see [`AcceptFailure`]); ignored by default.
    fn accept_failed(&self, _f: &AcceptFailure) {}
}

/// An [`EventSink`] that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullSink;

impl EventSink for NullSink {
    fn decision(&self, _: &Decision) {}
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
}
