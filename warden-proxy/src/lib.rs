//! Warden's per-session egress proxy (DESIGN.md §6).
//!
//! The sandbox has a network namespace with only `lo`; its init creates a TCP
//! listener on `127.0.0.1:<port>` inside and hands the fd to the daemon, which
//! runs [`serve`] on it with the session's [`ProxyConfig`]. Everything the
//! sandboxed server reaches on the network goes through here.
//!
//! # Protocols
//!
//! The first byte of a connection decides: `0x05` is SOCKS5, anything else HTTP/1.1.
//!
//! - **HTTP forward proxy**, absolute-form only (`GET http://host[:port]/path
//!   HTTP/1.1`). The `Host` header must be present and name the same host and port.
//!   The request is sent upstream in origin-form with hop-by-hop fields removed
//!   (an `Upgrade` request keeps `Connection: upgrade` and `Upgrade`, and a `101`
//!   turns the connection into a tunnel to the same, already checked, target).
//!   Keep-alive: every request on a client connection is parsed and decided again
//!   from scratch; the upstream connection is reused only for the same host and
//!   port. Heads are parsed strictly ([`http`]) so that no second request can hide
//!   in the framing of the first.
//!   Only [`http::FORWARDED_METHODS`] are forwarded: `TRACE` and `TRACK` are
//!   refused with `405` (`method-refused`), any other method with `501`
//!   (`method-unknown`), before any lookup.
//! - **CONNECT** `host:port`: decided the same way, then `200 Connection
//!   Established`. The client's first bytes must then be a TLS ClientHello whose
//!   server name is the CONNECT host ([`tls`]; `sni-mismatch` otherwise). A
//!   ClientHello without a server name passes only for an IP target or an entry
//!   with the `insecure-no-sni` option (`no-sni`); bytes that are not TLS only
//!   when an entry lists the port explicitly, `name:PORT` or `name:*`
//!   (`plain-tunnel`): a bare `name` is for HTTPS, plain HTTP goes through the
//!   forward proxy, which checks every `Host` header. A refused tunnel is closed
//!   before any of those bytes reach the upstream.
//! - **SOCKS5** ([`socks`]): no authentication; `CONNECT` to a domain (resolved
//!   here) or to an IP literal the policy lists; `BIND` and `UDP ASSOCIATE` are
//!   refused. The tunnel gets the same first-bytes check as CONNECT.
//!
//! # Decision order
//!
//! Normalise the name with [`parse_host`](warden_core::policy::net::parse_host)
//! (case, trailing dot, IDNA, IP-literal spellings), check the allowlist with
//! [`NetworkPolicy::check`] **before any DNS lookup**, resolve once through the
//! [`Resolver`], vet every address with [`NetworkPolicy::check_address`], and
//! connect (through the [`Connector`]) only to vetted addresses of that one
//! lookup, first one first (at most three are tried). Nothing resolves the name
//! again, so a rebinding answer cannot change where the connection goes.
//!
//! # What the client sees
//!
//! HTTP refusals are `403` (policy), `400` (malformed) or `502` (DNS or upstream
//! failure) with `X-Warden-Denied: <code>`, `Content-Type: text/plain`, a one-line
//! body (`warden: evil.com:443 is not in network.allow`) and `Connection: close`.
//! SOCKS5 refusals are reply codes: `0x02` (not allowed), `0x04` (DNS failure),
//! `0x05` (connect failure), `0x07` (command not supported).
//!
//! # Events
//!
//! Every decision is reported once to [`EventSink::decision`] as a
//! [`ConnDecision`] (a refusal with its [`RefusalCode`]); every upstream connection, once it ends, to
//! [`EventSink::closed`] with the bytes each way and its duration — also when
//! [`serve`] is shut down while it is open.
//!
//! # Limits
//!
//! See [`Limits`]: head size and header count, time to send a head, idle time of
//! exchanges and tunnels, concurrent connections (64 per session by default).
//! Buffers are bounded.
//!
//! When `accept` fails (`EMFILE`, `ENFILE`: the daemon or the system is out of
//! file descriptors), the proxy neither spins nor gives up: it backs off (10 ms,
//! doubling up to 1 s, reset by the next success), uses a reserve descriptor
//! shared by every proxy of the process to accept one waiting client, answer it
//! `503` with `X-Warden-Denied: proxy-overloaded` and close it at once, and
//! reports [`EventSink::accept_failed`] at most once a second.
//!
//! # Parsers and fuzzing
//!
//! The wire formats are parsed by pure functions in [`http`], [`socks`], [`tls`]
//! and [`dns`]. `warden-proxy/fuzz/` is a cargo-fuzz project (nightly, not a
//! workspace member) with the targets `http_request`, `connect_target`, `socks5`,
//! `client_hello` and `dns_response`:
//!
//! ```text
//! cd warden-proxy/fuzz && cargo +nightly fuzz run http_request -- -max_total_time=60
//! ```
//!
//! Their bodies (and invariants) live in the hidden `fuzzing` module, which
//! `tests/fuzz_smoke.rs` also runs on stable with a few hundred thousand
//! deterministic inputs per target.
#![forbid(unsafe_code)]

pub mod approve;
pub mod dns;
mod engine;
pub mod events;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod resolve;
pub mod socks;
pub mod synthetic;
pub mod tls;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use warden_core::policy::net::NetworkPolicy;

pub use approve::{Answer, Approval, Approver, Ask};
pub use dns::DnsResolver;
pub use engine::transparent::{open as open_transparent, Handover, Relay};
pub use events::{AcceptFailure, Closed, ConnDecision, EventSink, NullSink, Protocol, RefusalCode};
pub use resolve::{
    BoxFuture, Cached, Connector, LookupCache, Resolver, SystemResolver, TcpConnector,
};

/// The default of [`Limits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// Bounds on what one client can make the proxy hold or wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest request head (request line and header fields). Default 16 KiB.
    pub max_head_bytes: usize,
    /// Most header fields in a request head. Default 100.
    pub max_headers: usize,
    /// Largest response head from an upstream. Default 64 KiB.
    pub max_response_head_bytes: usize,
    /// Most header fields in a response head. Default 256.
    pub max_response_headers: usize,
    /// Time a client has to send a complete request head or SOCKS negotiation,
    /// also how long an idle keep-alive connection waits for its next request.
    /// Default 30 s.
    pub head_timeout: Duration,
    /// Bound of one DNS lookup. Default 10 s.
    pub resolve_timeout: Duration,
    /// Bound of one upstream connection attempt. Default 10 s.
    pub connect_timeout: Duration,
    /// An exchange or tunnel with no byte read for this long is closed (each
    /// direction of an HTTP exchange separately; for a tunnel, no byte in either
    /// direction). Default 10 min.
    pub idle_timeout: Duration,
    /// Client connections served at once; further ones wait in the listen backlog.
    /// Default 64: a tunnel holds about six descriptors of the daemon (client,
    /// upstream, a pipe each way), so one session can hold about 400, not the
    /// whole process's share.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: http::MAX_HEAD,
            max_headers: http::MAX_HEADERS,
            max_response_head_bytes: 64 * 1024,
            max_response_headers: 256,
            head_timeout: Duration::from_secs(30),
            resolve_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Everything one session's proxy needs.
#[derive(Clone)]
pub struct ProxyConfig {
    /// The session id (for operational logs).
    pub session: String,
    pub policy: Arc<NetworkPolicy>,
    pub resolver: Arc<dyn Resolver>,
    pub connector: Arc<dyn Connector>,
    pub events: Arc<dyn EventSink>,
    pub limits: Limits,
    /// Approvals (`approve`): asked about every connection `network.allow`
    /// does not list, which is held until it answers. None: refused at once.
    pub approver: Option<Arc<dyn Approver>>,
}

impl ProxyConfig {
    /// A configuration with the [`SystemResolver`], the [`TcpConnector`] and
    /// default [`Limits`].
    pub fn new(
        session: impl Into<String>,
        policy: Arc<NetworkPolicy>,
        events: Arc<dyn EventSink>,
    ) -> Self {
        ProxyConfig {
            session: session.into(),
            policy,
            resolver: Arc::new(SystemResolver),
            connector: Arc::new(TcpConnector),
            events,
            limits: Limits::default(),
            approver: None,
        }
    }
}

impl std::fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyConfig")
            .field("session", &self.session)
            .field("policy", &self.policy)
            .field("limits", &self.limits)
            .field("approver", &self.approver.is_some())
            .finish_non_exhaustive()
    }
}

/// Serves the proxy on `listener` until `shutdown` completes, then ends every
/// connection (tunnels included; their `closed` events are still reported) and
/// returns.
pub async fn serve<F: Future>(listener: TcpListener, cfg: Arc<ProxyConfig>, shutdown: F) {
    engine::serve(listener, cfg, shutdown).await
}
