//! `network:` — the egress allowlist (DESIGN.md §6, §10) and the decisions the
//! daemon's proxy takes with it.
//!
//! Everything here is pure: no DNS, no sockets. The proxy normalises what a client
//! asked for with [`parse_host`], asks [`NetworkPolicy::check`] **before** any DNS
//! lookup, resolves in the daemon, and then vets each resolved address with
//! [`NetworkPolicy::check_address`] before connecting to exactly that address.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The most bytes a host name may have after normalisation (RFC 1035).
pub const MAX_NAME_LEN: usize = 253;

/// A normalised host as a client named it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Host {
    /// Lower-case ASCII (IDNA labels in punycode), no trailing dot, valid labels.
    Name(String),
    /// Any IP literal spelling (`2130706433`, `0x7f.1`, `127.1`, `[::ffff:127.0.0.1]`)
    /// ends here; IPv4-mapped IPv6 is folded to IPv4.
    Ip(IpAddr),
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
        }
    }
}

/// Which host(s) one allowlist entry names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum HostPattern {
    /// Exactly this normalised name.
    Name(String),
    /// `*.suffix`: any name strictly below `suffix` (not the apex).
    Suffix(String),
    /// One address.
    Ip(IpAddr),
    /// An address range, e.g. `10.0.0.0/8`, `fd00::/8`.
    Cidr { addr: IpAddr, prefix: u8 },
}

/// Which ports one allowlist entry opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortSpec {
    /// No port written: 80 and 443.
    Web,
    /// `:N`.
    One(u16),
    /// `:*`.
    Any,
}

/// One compiled `network.allow` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetRule {
    /// The entry exactly as written in the policy (for audit reasons).
    pub source: String,
    pub host: HostPattern,
    pub ports: PortSpec,
}

/// The compiled `network:` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPolicy {
    pub allow: Vec<NetRule>,
    /// `network.allow_private`: names may resolve to loopback, private, link-local,
    /// CGNAT, metadata (and other non-global) addresses.
    #[serde(default)]
    pub allow_private: bool,
}

/// Why a host or address was refused; `code()` is the short machine reason used in
/// audit records and the `X-Warden-Denied` header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    #[error("{host}:{port} is not in network.allow")]
    NotAllowed { host: String, port: u16 },
    #[error("{host} resolved to {addr}, a {class} address; set network.allow_private to reach it")]
    PrivateAddress {
        host: String,
        addr: IpAddr,
        class: &'static str,
    },
    #[error("invalid host name: {0}")]
    BadHost(String),
}

impl Denial {
    pub fn code(&self) -> &'static str {
        match self {
            Denial::NotAllowed { .. } => "not-allowed",
            Denial::PrivateAddress { .. } => "private-address",
            Denial::BadHost(_) => "bad-host",
        }
    }
}

/// Parses and normalises a host as a client sent it (request target, Host header,
/// CONNECT authority, SOCKS domain, TLS SNI). Accepts bracketed IPv6. Never does
/// DNS. Errors on empty, over-long, or invalid names.
pub fn parse_host(_raw: &str) -> Result<Host, Denial> {
    todo!("net: parse_host")
}

/// The class of a non-global address (`"loopback"`, `"private"`, `"link-local"`,
/// `"cgnat"`, `"metadata"`, `"unspecified"`, `"multicast"`, `"broadcast"`,
/// `"reserved"`, `"unique-local"`, …), or None for an ordinary global address.
/// IPv4-mapped/compatible IPv6 is judged by its IPv4 address.
pub fn address_class(_ip: IpAddr) -> Option<&'static str> {
    todo!("net: address_class")
}

impl NetworkPolicy {
    /// Compiles the entries of `network.allow` (each error is for one entry).
    pub fn compile(
        _entries: &[String],
        _allow_private: bool,
    ) -> Result<NetworkPolicy, Vec<(usize, String)>> {
        todo!("net: compile")
    }

    /// The allowlist decision, taken before any DNS lookup. An IP host matches only
    /// `Ip`/`Cidr` rules (never a name rule); a name host only `Name`/`Suffix` rules.
    pub fn check(&self, _host: &Host, _port: u16) -> Result<&NetRule, Denial> {
        todo!("net: check")
    }

    /// The address decision, after resolution in the daemon: a name that resolved
    /// to a non-global address is refused unless `allow_private`. An IP host the
    /// policy lists explicitly (`Ip`/`Cidr`) is allowed whatever its class.
    pub fn check_address(&self, _host: &Host, _addr: IpAddr) -> Result<(), Denial> {
        todo!("net: check_address")
    }
}
