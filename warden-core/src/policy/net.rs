//! `network:` — the egress allowlist (DESIGN.md §6, §10) and the decisions the
//! daemon's proxy takes with it.
//!
//! Everything here is pure: no DNS, no sockets. The proxy normalises what a client
//! asked for with [`parse_host`], asks [`NetworkPolicy::check`] **before** any DNS
//! lookup, resolves in the daemon, and then vets each resolved address with
//! [`NetworkPolicy::check_address`] before connecting to exactly that address.
//!
//! Host names follow the WHATWG URL Standard's host parser (what browsers, curl and
//! Node do), so that what the policy decides about is what a client means:
//!
//! - IDNA (UTS #46, non-transitional) maps the name first: case, full-width forms,
//!   ideographic full stops (`１２７。０。０。１` is `127.0.0.1`), then punycode.
//! - A name whose last label is a number (`1`, `0x7f`) is an IPv4 address in one of
//!   the legacy spellings (`127.1`, `2130706433`, `0x7f.1`, `0177.0.0.1`), or it is
//!   an error: never a name, so no such string can reach DNS, where `inet_aton`
//!   would read it as an address.
//! - IPv4-mapped IPv6 (`::ffff:127.0.0.1`) and IPv4-compatible IPv6
//!   (`::127.0.0.1`) are the IPv4 address they embed.
//! - Labels are lenient LDH: ASCII letters, digits, `-` and also `_` (it occurs in
//!   real host names: CDN nodes, `_acme-challenge`-style service names), 1 to 63
//!   bytes each, at most 253 in all. Nothing else: no spaces, `@`, `/`, `%`,
//!   control characters, empty labels. One trailing dot (the DNS root) is dropped.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use idna::uts46::{AsciiDenyList, DnsLength, Hyphens, Uts46};
use serde::{Deserialize, Serialize};

/// The most bytes a host name may have after normalisation (RFC 1035).
pub const MAX_NAME_LEN: usize = 253;

/// The most bytes one label of a host name may have (RFC 1035).
pub const MAX_LABEL_LEN: usize = 63;

/// Input longer than this is refused before IDNA processing (bounds the work done on
/// a hostile Host header; nothing this long normalises to a valid name).
const MAX_INPUT_LEN: usize = 1024;

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

impl Host {
    /// The host for an address a client gave as bytes (SOCKS5 `ATYP` 1 or 4):
    /// IPv4-mapped and IPv4-compatible IPv6 folded to IPv4, as [`parse_host`] does.
    pub fn from_ip(ip: IpAddr) -> Host {
        Host::Ip(canonical_ip(ip))
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
    /// Every name: never written in a policy (`*` alone is refused there);
    /// only [`NetworkPolicy::record_all`], for `wardenctl trace`, makes it.
    AnyName,
}

impl HostPattern {
    /// Whether `host` is one this pattern names. A name pattern never matches an IP
    /// host, an address pattern never a name. `host` should come from
    /// [`parse_host`]; an IP host is compared in canonical form.
    pub fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (HostPattern::Name(n), Host::Name(h)) => n == h,
            (HostPattern::Suffix(s), Host::Name(h)) => is_strictly_below(h, s),
            (HostPattern::AnyName, Host::Name(_)) => true,
            (HostPattern::Ip(_) | HostPattern::Cidr { .. }, Host::Ip(ip)) => {
                self.contains_ip(canonical_ip(*ip))
            }
            _ => false,
        }
    }

    /// Whether this names exactly one address: an IP, or a range of one (`/32`,
    /// `/128`). Only such an entry reaches a loopback or metadata address.
    pub fn is_exact_address(&self) -> bool {
        match *self {
            HostPattern::Ip(_) => true,
            HostPattern::Cidr { addr, prefix } => prefix == full_prefix(addr),
            HostPattern::Name(_) | HostPattern::Suffix(_) | HostPattern::AnyName => false,
        }
    }

    /// Whether this is an address pattern that contains `ip` (compared as is).
    fn contains_ip(&self, ip: IpAddr) -> bool {
        match *self {
            HostPattern::Ip(a) => a == ip,
            HostPattern::Cidr { addr, prefix } => in_cidr(ip, addr, prefix),
            HostPattern::Name(_) | HostPattern::Suffix(_) | HostPattern::AnyName => false,
        }
    }
}

/// `name` is `x.suffix` for a non-empty `x`.
fn is_strictly_below(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

fn in_cidr(ip: IpAddr, addr: IpAddr, prefix: u8) -> bool {
    match (ip, addr) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            mask_v4(u32::from(ip), prefix) == mask_v4(u32::from(net), prefix)
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            mask_v6(u128::from(ip), prefix) == mask_v6(u128::from(net), prefix)
        }
        _ => false,
    }
}

/// 32 for IPv4, 128 for IPv6.
fn full_prefix(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

fn mask_v4(a: u32, prefix: u8) -> u32 {
    a & !(u32::MAX.checked_shr(u32::from(prefix)).unwrap_or(0))
}

fn mask_v6(a: u128, prefix: u8) -> u128 {
    a & !(u128::MAX.checked_shr(u32::from(prefix)).unwrap_or(0))
}

impl fmt::Display for HostPattern {
    /// The pattern in entry syntax: `api.github.com`, `*.github.com`, `10.0.0.1`,
    /// `[::1]`, `10.0.0.0/8`, `[fd00::/8]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Name(n) => f.write_str(n),
            HostPattern::Suffix(s) => write!(f, "*.{s}"),
            HostPattern::AnyName => f.write_str("*"),
            HostPattern::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            HostPattern::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            HostPattern::Cidr {
                addr: IpAddr::V4(a),
                prefix,
            } => write!(f, "{a}/{prefix}"),
            HostPattern::Cidr {
                addr: IpAddr::V6(a),
                prefix,
            } => write!(f, "[{a}/{prefix}]"),
        }
    }
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

impl PortSpec {
    /// Whether `port` is one of these. Port 0 never is.
    pub fn contains(&self, port: u16) -> bool {
        match *self {
            _ if port == 0 => false,
            PortSpec::Web => port == 80 || port == 443,
            PortSpec::One(p) => p == port,
            PortSpec::Any => true,
        }
    }
}

impl fmt::Display for PortSpec {
    /// `80,443`, `8080` or `*`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortSpec::Web => f.write_str("80,443"),
            PortSpec::One(p) => write!(f, "{p}"),
            PortSpec::Any => f.write_str("*"),
        }
    }
}

/// The option that lets one name entry resolve to non-global addresses.
pub const OPTION_PRIVATE: &str = "private";

/// The option that lets a tunnel to one name entry carry TLS without a server name.
pub const OPTION_NO_SNI: &str = "insecure-no-sni";

/// The option that hands transparent connections to one name entry over
/// without a relay (`network.mode: transparent | both`): the upstream socket
/// itself, no byte checked or counted by the daemon.
pub const OPTION_DIRECT: &str = "direct";

/// One compiled `network.allow` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetRule {
    /// The entry exactly as written in the policy (for audit reasons).
    pub source: String,
    pub host: HostPattern,
    pub ports: PortSpec,
    /// The `private` option (names only): the names of this entry may resolve to
    /// loopback, private, link-local, CGNAT and other non-global addresses; never
    /// to cloud metadata.
    #[serde(default, skip_serializing_if = "is_false")]
    pub private: bool,
    /// The `insecure-no-sni` option (names only): a CONNECT or SOCKS5 tunnel to
    /// this entry may carry a TLS ClientHello without a server name.
    #[serde(default, skip_serializing_if = "is_false")]
    pub no_sni: bool,
    /// The `direct` option (names only): a transparent connection to this
    /// entry is the upstream socket itself, handed over unrelayed (its bytes
    /// are neither checked nor counted).
    #[serde(default, skip_serializing_if = "is_false")]
    pub direct: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl fmt::Display for NetRule {
    /// The normalised rule with its ports spelled out, then its options:
    /// `api.github.com:80,443`, `*.example.com:*`, `[fd00::/8]:443`,
    /// `git.corp:443 private`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.ports)?;
        if self.private {
            write!(f, " {OPTION_PRIVATE}")?;
        }
        if self.no_sni {
            write!(f, " {OPTION_NO_SNI}")?;
        }
        if self.direct {
            write!(f, " {OPTION_DIRECT}")?;
        }
        Ok(())
    }
}

/// What a CONNECT or SOCKS5 tunnel to one host and port may carry besides a TLS
/// ClientHello that names that host ([`NetworkPolicy::tunnel_use`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TunnelUse {
    /// Bytes that are not TLS: an entry lists the port explicitly (`name:PORT` or
    /// `name:*`); a bare `name` (ports 80 and 443) does not.
    pub plain: bool,
    /// A ClientHello without a server name: always for an IP target (a server name
    /// cannot be an address), for a name only with `insecure-no-sni`.
    pub no_sni: bool,
    /// A transparent connection is handed over unrelayed (`direct`): none of
    /// the checks above apply to it.
    pub direct: bool,
}

/// The compiled `network:` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPolicy {
    pub allow: Vec<NetRule>,
    /// `network.allow_private`: every listed name may resolve to private,
    /// link-local, CGNAT (and other non-global) addresses, but not to loopback
    /// (except `localhost` and names below it) and never to cloud metadata. The
    /// per-entry `private` option is the narrower grant.
    #[serde(default)]
    pub allow_private: bool,
    /// `network.mode`: how the sandbox reaches the allowlist.
    #[serde(default, skip_serializing_if = "NetMode::is_default")]
    pub mode: NetMode,
}

/// `network.mode`: the proxy variables only (`proxy`), the sandbox's own
/// resolver and connect hand-over only (`transparent`), or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetMode {
    Proxy,
    Transparent,
    #[default]
    Both,
}

impl NetMode {
    pub fn is_proxy(&self) -> bool {
        *self == NetMode::Proxy
    }

    /// `both`, the default: clients that honour the proxy variables use the
    /// proxy, the others reach the same names transparently.
    pub fn is_default(&self) -> bool {
        *self == NetMode::Both
    }

    /// The sandbox gets its resolver and its connects to synthetic
    /// addresses are handed over.
    pub fn transparent(&self) -> bool {
        !self.is_proxy()
    }

    /// The proxy variables are set in the sandbox's environment.
    pub fn proxy_variables(&self) -> bool {
        *self != NetMode::Transparent
    }

    pub fn parse(s: &str) -> Option<NetMode> {
        match s {
            "proxy" => Some(NetMode::Proxy),
            "transparent" => Some(NetMode::Transparent),
            "both" => Some(NetMode::Both),
            _ => None,
        }
    }
}

/// Why a host or address was refused; `code()` is the short machine reason used in
/// audit records and the `X-Warden-Denied` header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    #[error("{host}:{port} is not in network.allow")]
    NotAllowed { host: String, port: u16 },
    /// A name resolved to a non-global address (or an address no policy opens, such
    /// as `0.0.0.0` or multicast, was asked for).
    #[error("{}", private_message(host, addr, class, hint))]
    PrivateAddress {
        host: String,
        addr: IpAddr,
        class: &'static str,
        /// What would reach it, if anything does (starts after "; ").
        hint: &'static str,
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

fn private_message(host: &str, addr: &IpAddr, class: &str, hint: &str) -> String {
    let a = article(class);
    let head = if host == Host::Ip(*addr).to_string() {
        format!("{host} is {a} {class} address")
    } else {
        format!("{host} resolved to {addr}, {a} {class} address")
    };
    format!("{head}; {hint}")
}

const HINT_NEVER: &str = "Warden never connects to one";
const HINT_NAME: &str =
    "add the `private` option to its network.allow entry (or set network.allow_private) to reach it";
const HINT_LOOPBACK_NAME: &str =
    "add the `private` option to its network.allow entry to reach it (network.allow_private opens loopback only to `localhost`)";
const HINT_METADATA_NAME: &str =
    "a name never reaches cloud metadata; list the address itself (e.g. `169.254.169.254:80`) and connect to it";
const HINT_EXACT: &str =
    "a range does not open loopback or metadata addresses; list the address itself (`127.0.0.1:PORT`)";
const HINT_UNLISTED: &str = "list the address in network.allow to reach it";

/// `localhost` and the names below it (RFC 6761: loopback by definition).
fn is_localhost(name: &str) -> bool {
    name == "localhost" || name.ends_with(".localhost")
}

/// "a" or "an" before an address class.
fn article(class: &str) -> &'static str {
    if class == "unspecified" {
        "an"
    } else {
        "a"
    }
}

/// Classes no policy opens: connecting to `0.0.0.0` or `::` reaches this machine,
/// and multicast or broadcast is not one peer.
fn is_never_connected(class: &str) -> bool {
    matches!(class, "unspecified" | "multicast" | "broadcast")
}

/// `raw` for an error message: escaped, and cut short if long.
fn shown(raw: &str) -> String {
    const MAX: usize = 100;
    let mut s: String = raw.chars().take(MAX).collect();
    if s.len() < raw.len() {
        s.push('…');
    }
    s.escape_debug().to_string()
}

/// Parses and normalises a host as a client sent it (request target, Host header,
/// CONNECT authority, SOCKS domain, TLS SNI). Accepts bracketed IPv6. Never does
/// DNS. Errors on empty, over-long, or invalid names.
pub fn parse_host(raw: &str) -> Result<Host, Denial> {
    normalise(raw).map_err(|why| Denial::BadHost(format!("`{}`: {why}", shown(raw))))
}

/// [`parse_host`] with the bare reason as the error.
fn normalise(raw: &str) -> Result<Host, String> {
    if raw.is_empty() {
        return Err("empty host".into());
    }
    if raw.len() > MAX_INPUT_LEN {
        return Err(format!("longer than {MAX_NAME_LEN} bytes"));
    }
    if let Some(rest) = raw.strip_prefix('[') {
        let inner = rest.strip_suffix(']').ok_or("`[` without a closing `]`")?;
        return ipv6_literal(inner);
    }
    if raw.contains(':') {
        // Only an IPv6 address has a `:` (a port is the caller's to strip).
        return ipv6_literal(raw).map_err(|why| format!("{why} (a host name cannot contain `:`)"));
    }
    // IDNA first, as the URL Standard does: full-width digits and dots map to ASCII
    // before the IPv4 check below sees them.
    let ascii = Uts46::new()
        .to_ascii(
            raw.as_bytes(),
            AsciiDenyList::URL,
            Hyphens::Allow,
            DnsLength::Ignore,
        )
        .map_err(|_| {
            match raw
                .chars()
                .find(|&c| c.is_ascii() && c != '.' && !is_label_char(c.to_ascii_lowercase() as u8))
            {
                Some(c) => forbidden_char(c),
                None => "not a valid internationalised domain name (IDNA)".to_owned(),
            }
        })?;
    let name = ascii.strip_suffix('.').unwrap_or(&ascii);
    if name.is_empty() {
        return Err("empty host".into());
    }
    if name.split('.').any(str::is_empty) {
        return Err("empty label (`..`, or a leading dot)".into());
    }
    if ends_in_number(name) {
        return whatwg_ipv4(name)
            .map(|a| Host::Ip(IpAddr::V4(a)))
            .ok_or_else(|| {
                "its last label is a number, so it is an IPv4 address, but not a valid one"
                    .to_owned()
            });
    }
    if let Some(c) = name.bytes().find(|&b| b != b'.' && !is_label_char(b)) {
        return Err(forbidden_char(char::from(c)));
    }
    if let Some(label) = name.split('.').find(|l| l.len() > MAX_LABEL_LEN) {
        return Err(format!(
            "label `{}…` is longer than {MAX_LABEL_LEN} bytes",
            &label[..20]
        ));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("longer than {MAX_NAME_LEN} bytes"));
    }
    Ok(Host::Name(name.to_owned()))
}

/// Lenient LDH: lower-case letters, digits, `-`, `_` (after IDNA nothing is upper-case).
fn is_label_char(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
}

fn forbidden_char(c: char) -> String {
    let c = if c == ' ' {
        "` ` (space)".to_owned()
    } else {
        format!("`{}`", c.escape_debug())
    };
    format!("{c} is not allowed in a host name (letters, digits, `-`, `_` and `.` are)")
}

fn ipv6_literal(inner: &str) -> Result<Host, String> {
    if inner.contains('%') {
        return Err("IPv6 zone ids (`%eth0`) are not accepted".into());
    }
    let a: Ipv6Addr = inner
        .parse()
        .map_err(|_| format!("`{}` is not a valid IPv6 address", shown(inner)))?;
    Ok(Host::from_ip(IpAddr::V6(a)))
}

/// The URL Standard's "ends in a number checker", for a name without a trailing
/// dot or empty labels.
fn ends_in_number(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    !last.is_empty() && (last.bytes().all(|b| b.is_ascii_digit()) || ipv4_number(last).is_some())
}

/// The URL Standard's "IPv4 number parser": `0x` hex, leading-`0` octal, decimal;
/// `0x` alone is 0. Values too large for `u64` saturate (they fail the range check
/// anyway).
fn ipv4_number(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) = if part.len() >= 2 && (part.starts_with("0x") || part.starts_with("0X")) {
        (&part[2..], 16)
    } else if part.len() >= 2 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    digits.chars().try_fold(0u64, |acc, c| {
        let d = c.to_digit(radix)?;
        Some(
            acc.saturating_mul(u64::from(radix))
                .saturating_add(u64::from(d)),
        )
    })
}

/// The URL Standard's "IPv4 parser": one to four parts, the last filling the
/// remaining bytes (`127.1` is 127.0.0.1, `2130706433` too).
fn whatwg_ipv4(name: &str) -> Option<Ipv4Addr> {
    let mut parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    if parts.len() > 4 {
        return None;
    }
    let numbers: Vec<u64> = parts
        .iter()
        .map(|p| ipv4_number(p))
        .collect::<Option<_>>()?;
    let (&last, init) = numbers.split_last()?;
    if init.iter().any(|&n| n > 255) {
        return None;
    }
    let exp = 5 - u32::try_from(numbers.len()).ok()?;
    if last >= 256u64.pow(exp) {
        return None;
    }
    let mut v = last;
    for (i, &n) in init.iter().enumerate() {
        v += n << (8 * (3 - i));
    }
    u32::try_from(v).ok().map(Ipv4Addr::from)
}

/// The address as the policy compares it: IPv4-mapped IPv6 (`::ffff:a.b.c.d`) and
/// IPv4-compatible IPv6 (`::a.b.c.d`, except `::` and `::1` and the rest of
/// `::/104`, which are not IPv4 addresses in disguise) become IPv4.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let s = a.segments();
            if s[..6] == [0; 6] && s[6] >> 8 != 0 {
                return IpAddr::V4(embedded_v4(a));
            }
            ip
        }
        IpAddr::V4(_) => ip,
    }
}

/// The low 32 bits of an IPv6 address as IPv4.
fn embedded_v4(a: Ipv6Addr) -> Ipv4Addr {
    let o = a.octets();
    Ipv4Addr::new(o[12], o[13], o[14], o[15])
}

/// The class of a non-global address (`"loopback"`, `"private"`, `"link-local"`,
/// `"cgnat"`, `"metadata"`, `"unspecified"`, `"multicast"`, `"broadcast"`,
/// `"reserved"`, `"unique-local"`, …), or None for an ordinary global address.
/// IPv4-mapped/compatible IPv6 is judged by its IPv4 address.
pub fn address_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) => v4_class(a),
        IpAddr::V6(a) => v6_class(a),
    }
}

/// Cloud instance metadata endpoints: AWS, GCP, Azure, Oracle, DigitalOcean
/// (169.254.169.254), AWS ECS task metadata (169.254.170.2), Alibaba
/// (100.100.100.200), Tencent (169.254.0.23), Azure's WireServer (168.63.129.16,
/// a global address that hands out VM configuration).
const METADATA_V4: [Ipv4Addr; 5] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(169, 254, 0, 23),
    Ipv4Addr::new(168, 63, 129, 16),
];

/// Instance metadata over IPv6: AWS (fd00:ec2::254), GCP (fd20:ce::254).
const METADATA_V6: [Ipv6Addr; 2] = [
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
    Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254),
];

fn v4_class(a: Ipv4Addr) -> Option<&'static str> {
    let [a0, a1, a2, _] = a.octets();
    let class = if METADATA_V4.contains(&a) {
        "metadata"
    } else if a0 == 0 {
        "unspecified"
    } else if a0 == 127 {
        "loopback"
    } else if a0 == 10 || (a0 == 172 && a1 & 0xf0 == 16) || (a0 == 192 && a1 == 168) {
        "private"
    } else if a0 == 169 && a1 == 254 {
        "link-local"
    } else if a0 == 100 && a1 & 0xc0 == 64 {
        "cgnat"
    } else if (a0, a1, a2) == (192, 0, 0) || (a0, a1, a2) == (192, 88, 99) {
        // IETF protocol assignments; the deprecated 6to4 relay anycast.
        "reserved"
    } else if matches!((a0, a1, a2), (192, 0, 2) | (198, 51, 100) | (203, 0, 113)) {
        "documentation"
    } else if a0 == 198 && a1 & 0xfe == 18 {
        "benchmarking"
    } else if a == Ipv4Addr::BROADCAST {
        "broadcast"
    } else if a0 & 0xf0 == 224 {
        "multicast"
    } else if a0 & 0xf0 == 240 {
        "reserved"
    } else {
        return None;
    };
    Some(class)
}

fn v6_class(a: Ipv6Addr) -> Option<&'static str> {
    let s = a.segments();
    if METADATA_V6.contains(&a) {
        return Some("metadata");
    }
    if a.is_unspecified() {
        return Some("unspecified");
    }
    if a.is_loopback() {
        return Some("loopback");
    }
    // Forms that carry an IPv4 address are judged by it: IPv4-mapped, IPv4-compatible
    // (::/96), NAT64 (64:ff9b::/96), 6to4 (2002::/16, the address in bits 16..48).
    if let Some(v4) = a.to_ipv4_mapped() {
        return v4_class(v4);
    }
    if s[..6] == [0; 6] || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return v4_class(embedded_v4(a));
    }
    if s[0] == 0x2002 {
        let o = a.octets();
        return v4_class(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    let class = if (s[0], s[1]) == (0x2001, 0) {
        // Teredo: the peer is behind a NAT the tunnel reaches from anywhere.
        "reserved"
    } else if (s[0], s[1]) == (0x2001, 0xdb8) || (s[0] == 0x3fff && s[1] < 0x1000) {
        "documentation"
    } else if (s[0], s[1], s[2]) == (0x2001, 2, 0) {
        "benchmarking"
    } else if s[0] & 0xffc0 == 0xfe80 {
        "link-local"
    } else if s[0] & 0xfe00 == 0xfc00 {
        "unique-local"
    } else if s[0] & 0xff00 == 0xff00 {
        "multicast"
    } else if s[0] & 0xe000 != 0x2000 {
        // Outside 2000::/3, the only global unicast space: 100::/64 (discard),
        // 64:ff9b:1::/48 (local NAT64), fec0::/10 (old site-local), unassigned.
        "reserved"
    } else {
        return None;
    };
    Some(class)
}

impl NetworkPolicy {
    /// What `wardenctl trace` runs under: every name on every port (its
    /// names may resolve to private and loopback addresses), every address
    /// range; cloud metadata, unspecified, multicast and broadcast addresses
    /// stay refused, as do loopback and metadata IP literals (only an exact
    /// address entry reaches those). Mode `both`: what a client that ignores
    /// the proxy variables reaches is traced too.
    pub fn record_all() -> NetworkPolicy {
        let rule = |source: &str, host| NetRule {
            source: source.to_owned(),
            host,
            ports: PortSpec::Any,
            private: true,
            no_sni: true,
            direct: false,
        };
        NetworkPolicy {
            allow: vec![
                rule("* (trace)", HostPattern::AnyName),
                rule(
                    "0.0.0.0/0 (trace)",
                    HostPattern::Cidr {
                        addr: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                        prefix: 0,
                    },
                ),
                rule(
                    "[::/0] (trace)",
                    HostPattern::Cidr {
                        addr: IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
                        prefix: 0,
                    },
                ),
            ],
            allow_private: false,
            mode: NetMode::Both,
        }
    }

    /// Whether the sandbox gets its resolver and connect hand-over: a mode
    /// with it and something to reach (an empty allowlist has no name to
    /// answer, and every `connect` would be a notification for nothing).
    pub fn transparent(&self) -> bool {
        self.mode.transparent() && !self.allow.is_empty()
    }

    /// Compiles the entries of `network.allow` (each error is for one entry).
    pub fn compile(
        entries: &[String],
        allow_private: bool,
    ) -> Result<NetworkPolicy, Vec<(usize, String)>> {
        let mut allow = Vec::with_capacity(entries.len());
        let mut errors = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            match compile_entry(entry) {
                Ok(rule) => allow.push(rule),
                Err(why) => errors.push((i, format!("`{}`: {why}", shown(entry)))),
            }
        }
        if errors.is_empty() {
            Ok(NetworkPolicy {
                allow,
                allow_private,
                mode: NetMode::default(),
            })
        } else {
            Err(errors)
        }
    }

    /// The entry an approval of `host` on `port` adds: exactly that host
    /// (normal form) and that port, no options (`api.example.com:443`,
    /// `[2001:db8::1]:8443`).
    pub fn approved_entry(host: &Host, port: u16) -> Result<String, Denial> {
        Ok(format!("{}:{port}", Self::normal(host)?))
    }

    /// This policy with [`approved_entry`](Self::approved_entry) of `host`
    /// and `port` added: an approved host is then decided exactly as a listed
    /// one (address classes and `allow_private` included).
    pub fn with_approved(&self, host: &Host, port: u16) -> Result<NetworkPolicy, Denial> {
        let entry = Self::approved_entry(host, port)?;
        let rule = compile_entry(&entry).map_err(Denial::BadHost)?;
        let mut p = self.clone();
        p.allow.push(rule);
        Ok(p)
    }

    /// `host` in the normal form [`parse_host`] gives, or [`Denial::BadHost`].
    fn normal(host: &Host) -> Result<Host, Denial> {
        match host {
            Host::Name(n) => match parse_host(n)? {
                Host::Name(m) if m == *n => Ok(Host::Name(m)),
                other => Err(Denial::BadHost(format!(
                    "`{}` is not a normalised host name (it normalises to `{other}`)",
                    shown(n)
                ))),
            },
            Host::Ip(ip) => Ok(Host::from_ip(*ip)),
        }
    }

    /// Every entry that allows `host` (normal form) on `port`, in policy order.
    fn matching<'a>(&'a self, host: &'a Host, port: u16) -> impl Iterator<Item = &'a NetRule> {
        self.allow
            .iter()
            .filter(move |r| r.ports.contains(port) && r.host.matches(host))
    }

    /// The allowlist decision, taken before any DNS lookup. An IP host matches only
    /// `Ip`/`Cidr` rules (never a name rule); a name host only `Name`/`Suffix` rules.
    ///
    /// A [`Host::Name`] not in the normal form [`parse_host`] gives is refused as
    /// [`Denial::BadHost`] (so a host built by hand, e.g. with a NUL byte, cannot
    /// match a suffix); an IP host is compared in canonical form ([`canonical_ip`]).
    pub fn check(&self, host: &Host, port: u16) -> Result<&NetRule, Denial> {
        let host = Self::normal(host)?;
        self.allow
            .iter()
            .find(|r| r.ports.contains(port) && r.host.matches(&host))
            .ok_or_else(|| Denial::NotAllowed {
                host: host.to_string(),
                port,
            })
    }

    /// Whether some entry names `name` (on any port): what the sandbox's own
    /// resolver answers with a synthetic address (`warden_proxy::synthetic`);
    /// the port is decided when a connection is made. A name not in the
    /// normal form is never named.
    pub fn names(&self, name: &str) -> bool {
        let Ok(host) = Self::normal(&Host::Name(name.to_owned())) else {
            return false;
        };
        self.allow.iter().any(|r| r.host.matches(&host))
    }

    /// Whether some entry names the address `ip` itself (an IP or a range, on
    /// any port): a transparent `connect` to it is decided as a connection
    /// to that IP host.
    pub fn names_address(&self, ip: IpAddr) -> bool {
        let host = Host::from_ip(ip);
        self.allow.iter().any(|r| r.host.matches(&host))
    }

    /// The address decision, after resolution in the daemon, for `host` on `port`
    /// (which [`check`](Self::check) allowed) and one address it resolved to.
    ///
    /// - Unspecified (`0.0.0.0`, `::`: connecting there reaches this machine),
    ///   multicast and broadcast addresses are refused always.
    /// - An IP host: `addr` must be that IP (canonical form). An entry for exactly
    ///   that address (`127.0.0.1:8080`, `/32`, `/128`) reaches it whatever its
    ///   class; a range (`10.0.0.0/8`) reaches every class except loopback and
    ///   cloud metadata.
    /// - A name: a global address is fine. Cloud metadata never. Loopback only
    ///   through an entry with the `private` option, or with `allow_private` for
    ///   `localhost` and names below it. Other non-global classes through an entry
    ///   with `private`, or with `allow_private`.
    pub fn check_address(&self, host: &Host, port: u16, addr: IpAddr) -> Result<(), Denial> {
        let addr = canonical_ip(addr);
        let Some(class) = address_class(addr) else {
            return Ok(());
        };
        let refuse = |hint| Denial::PrivateAddress {
            host: host.to_string(),
            addr,
            class,
            hint,
        };
        if is_never_connected(class) {
            return Err(refuse(HINT_NEVER));
        }
        let exact_only = matches!(class, "loopback" | "metadata");
        let normal = Self::normal(host).map_err(|_| refuse(HINT_UNLISTED))?;
        let mut rules = self.matching(&normal, port);
        match &normal {
            Host::Ip(ip) => {
                if *ip != addr {
                    return Err(refuse(HINT_UNLISTED));
                }
                let mut listed = false;
                for r in rules {
                    listed = true;
                    if !exact_only || r.host.is_exact_address() {
                        return Ok(());
                    }
                }
                Err(refuse(if listed { HINT_EXACT } else { HINT_UNLISTED }))
            }
            Host::Name(name) => match class {
                "metadata" => Err(refuse(HINT_METADATA_NAME)),
                "loopback" => {
                    if rules.any(|r| r.private) || (self.allow_private && is_localhost(name)) {
                        Ok(())
                    } else {
                        Err(refuse(HINT_LOOPBACK_NAME))
                    }
                }
                _ => {
                    if self.allow_private || rules.any(|r| r.private) {
                        Ok(())
                    } else {
                        Err(refuse(HINT_NAME))
                    }
                }
            },
        }
    }

    /// What a CONNECT or SOCKS5 tunnel to `host` on `port` may carry besides TLS
    /// naming `host`, over every entry that allows it (see [`TunnelUse`]).
    pub fn tunnel_use(&self, host: &Host, port: u16) -> TunnelUse {
        let Ok(normal) = Self::normal(host) else {
            return TunnelUse::default();
        };
        let mut out = TunnelUse {
            plain: false,
            no_sni: matches!(normal, Host::Ip(_)),
            direct: false,
        };
        for r in self.matching(&normal, port) {
            out.plain |= r.ports != PortSpec::Web;
            out.no_sni |= r.no_sni;
            out.direct |= r.direct;
        }
        out
    }
}

/// One `network.allow` entry: `HOST[:PORT]`, `*.SUFFIX[:PORT]`, `IP[:PORT]`,
/// `[IPV6][:PORT]`, `V4/PREFIX[:PORT]`, `V6/PREFIX`, `[V6/PREFIX][:PORT]`; PORT is a
/// number or `*`, and absent means 80 and 443. Options may follow after spaces:
/// `private`, `insecure-no-sni` (name entries only).
fn compile_entry(entry: &str) -> Result<NetRule, String> {
    if entry.is_empty() {
        return Err("empty entry; write a host such as `api.example.com`".into());
    }
    let (target, options) = match entry.split_once(' ') {
        Some((t, rest)) if !t.is_empty() => (t, rest),
        _ => (entry, ""),
    };
    let (host, port, bracketed) = split_entry(target)?;
    let ports = match port {
        None => PortSpec::Web,
        Some(p) => port_spec(p)?,
    };
    let pattern = if let Some((addr, prefix)) = host.split_once('/') {
        cidr(addr, prefix, bracketed)?
    } else if bracketed {
        match ipv6_literal(host) {
            Ok(Host::Ip(ip)) => HostPattern::Ip(ip),
            Ok(Host::Name(_)) => unreachable!("ipv6_literal gives an address"),
            Err(_) if whatwg_ipv4(host).is_some() => {
                return Err(format!(
                    "brackets are for IPv6 addresses; write `{host}` without them"
                ))
            }
            Err(why) => return Err(why),
        }
    } else {
        host_pattern(host)?
    };
    if let HostPattern::Ip(ip) = pattern {
        if let Some(class) = address_class(ip).filter(|c| is_never_connected(c)) {
            return Err(format!(
                "{ip} is {} {class} address, which Warden never connects to",
                article(class)
            ));
        }
    }
    let mut rule = NetRule {
        source: entry.to_owned(),
        host: pattern,
        ports,
        private: false,
        no_sni: false,
        direct: false,
    };
    entry_options(&mut rule, options)?;
    Ok(rule)
}

/// The options after an entry's host and port, separated by spaces.
fn entry_options(rule: &mut NetRule, options: &str) -> Result<(), String> {
    let is_name = matches!(rule.host, HostPattern::Name(_) | HostPattern::Suffix(_));
    for option in options.split(' ').filter(|o| !o.is_empty()) {
        let slot = match option {
            OPTION_PRIVATE => &mut rule.private,
            OPTION_NO_SNI => &mut rule.no_sni,
            OPTION_DIRECT => &mut rule.direct,
            other if other.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') => {
                return Err(format!(
                    "unknown option `{other}`: after a space only the options `{OPTION_PRIVATE}`, \
                     `{OPTION_NO_SNI}` and `{OPTION_DIRECT}` may follow"
                ))
            }
            _ => return Err(forbidden_char(' ')),
        };
        if *slot {
            return Err(format!("option `{option}` is written twice"));
        }
        if !is_name {
            return Err(match option {
                OPTION_PRIVATE => format!(
                    "`{OPTION_PRIVATE}` is for names: an address entry reaches its own addresses \
                     whatever their class (loopback and metadata only by an entry for the exact address)"
                ),
                OPTION_NO_SNI => format!(
                    "`{OPTION_NO_SNI}` is for names: a TLS client never sends an address as the \
                     server name, so tunnels to an address entry accept a ClientHello without one already"
                ),
                _ => format!(
                    "`{OPTION_DIRECT}` is for names: transparent egress reaches names only \
                     (a connection to an address is refused)"
                ),
            });
        }
        *slot = true;
    }
    Ok(())
}

/// Splits an entry into host, port (if written) and whether the host was in
/// brackets.
fn split_entry(entry: &str) -> Result<(&str, Option<&str>, bool), String> {
    if let Some(rest) = entry.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or("`[` without a closing `]`")?;
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or("unexpected text after `]`; write `[IPV6]` or `[IPV6]:PORT`")?,
            ),
        };
        return Ok((inner, port, true));
    }
    if let Some((addr, rest)) = entry.split_once('/') {
        if addr.contains(':') {
            // A bare IPv6 range: its `:`s leave no room for a port.
            if rest.contains(':') {
                return Err(format!(
                    "write an IPv6 range with a port in brackets, as in `[{addr}/{}]:PORT`",
                    rest.split(':').next().unwrap_or_default()
                ));
            }
            return Ok((entry, None, false));
        }
    }
    if entry.matches(':').count() > 1 {
        return Err(if entry.parse::<Ipv6Addr>().is_ok() {
            format!(
                "write an IPv6 address in brackets: `[{entry}]`, or `[{entry}]:PORT` for one port"
            )
        } else {
            "more than one `:`; write `HOST:PORT`, or `[IPV6]:PORT` for an IPv6 address".into()
        });
    }
    Ok(match entry.split_once(':') {
        Some((host, port)) => (host, Some(port), false),
        None => (entry, None, false),
    })
}

fn port_spec(p: &str) -> Result<PortSpec, String> {
    if p == "*" {
        return Ok(PortSpec::Any);
    }
    if p.is_empty() {
        return Err("missing port after `:`; write a port number or `*` for any port".into());
    }
    let n: u32 = p
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| p.parse().ok())
        .flatten()
        .ok_or_else(|| {
            format!(
                "invalid port `{}`: write a number from 1 to 65535, or `*` for any port",
                shown(p)
            )
        })?;
    match u16::try_from(n) {
        Ok(0) => Err(
            "port 0 cannot be connected to; write a port from 1 to 65535, or `*` for any port"
                .into(),
        ),
        Ok(n) => Ok(PortSpec::One(n)),
        Err(_) => Err(format!(
            "port {n} is out of range: write a number from 1 to 65535, or `*` for any port"
        )),
    }
}

/// `ADDR/PREFIX` (IPv6 if bracketed or containing `:`, else IPv4 in any spelling).
fn cidr(addr: &str, prefix: &str, bracketed: bool) -> Result<HostPattern, String> {
    let ip = if bracketed || addr.contains(':') {
        if addr.contains('%') {
            return Err("IPv6 zone ids (`%eth0`) are not accepted".into());
        }
        match addr.parse::<Ipv6Addr>() {
            // Not folded yet: an IPv4-mapped range is folded below, whole.
            Ok(a) => IpAddr::V6(a),
            Err(_) if bracketed && whatwg_ipv4(addr).is_some() => {
                return Err(format!(
                    "brackets are for IPv6 ranges; write `{addr}/{prefix}` without them"
                ))
            }
            Err(_) => return Err(format!("`{}` is not a valid IPv6 address", shown(addr))),
        }
    } else {
        match normalise(addr)? {
            Host::Ip(ip) => ip,
            Host::Name(_) => {
                return Err(format!(
                    "`{}` is not an IP address; a range is written as in `10.0.0.0/8`",
                    shown(addr)
                ))
            }
        }
    };
    let max: u8 = if ip.is_ipv4() { 32 } else { 128 };
    let prefix: u8 = prefix
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| prefix.parse().ok())
        .flatten()
        .filter(|p| (1..=3).contains(&prefix.len()) && *p <= max)
        .ok_or_else(|| {
            format!(
                "invalid prefix length `/{}`: write a number from 0 to {max}",
                shown(prefix)
            )
        })?;
    let network = match ip {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(mask_v4(u32::from(a), prefix))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(mask_v6(u128::from(a), prefix))),
    };
    if network != ip {
        let (net, one) = match ip {
            IpAddr::V4(_) => (format!("{network}/{prefix}"), ip.to_string()),
            IpAddr::V6(_) => (format!("[{network}/{prefix}]"), format!("[{ip}]")),
        };
        return Err(format!(
            "host bits are set after the /{prefix} prefix: write the range as `{net}`, or `{one}` for the one address"
        ));
    }
    // An IPv4-mapped range is an IPv4 range (hosts are folded the same way).
    let (ip, prefix) = match ip {
        IpAddr::V6(a) => match (a.to_ipv4_mapped(), prefix >= 96) {
            (Some(v4), true) => (IpAddr::V4(v4), prefix - 96),
            _ => (ip, prefix),
        },
        IpAddr::V4(_) => (ip, prefix),
    };
    cidr_breadth(ip, prefix)?;
    Ok(HostPattern::Cidr { addr: ip, prefix })
}

/// The shortest prefix accepted: a wider range is a large part of the internet,
/// which no server needs (and which would hide a typo). IPv6 allows `fc00::/7`,
/// all unique-local addresses, and refuses `2000::/3`, all global ones.
const MIN_PREFIX_V4: u8 = 8;
const MIN_PREFIX_V6: u8 = 7;

/// Ranges that are too broad, or that could only ever reach loopback (which a
/// range never opens).
fn cidr_breadth(ip: IpAddr, prefix: u8) -> Result<(), String> {
    let shown = match ip {
        IpAddr::V4(a) => format!("{a}/{prefix}"),
        IpAddr::V6(a) => format!("[{a}/{prefix}]"),
    };
    if prefix == 0 {
        return Err(format!(
            "`{shown}` would allow every address; list the hosts or ranges the server needs"
        ));
    }
    let min = if ip.is_ipv4() {
        MIN_PREFIX_V4
    } else {
        MIN_PREFIX_V6
    };
    if prefix < min {
        return Err(format!(
            "`{shown}` is too broad: a range needs a prefix of at least /{min} (IPv{})",
            if ip.is_ipv4() { 4 } else { 6 }
        ));
    }
    if let IpAddr::V4(a) = ip {
        if a.octets()[0] == 127 && prefix < 32 {
            return Err(format!(
                "`{shown}` is a loopback range: a range never opens loopback addresses; \
                 list each address, as in `127.0.0.1:PORT`"
            ));
        }
    }
    Ok(())
}

/// `NAME`, `*.SUFFIX`, or an IPv4 address in any spelling.
fn host_pattern(host: &str) -> Result<HostPattern, String> {
    if host == "*" {
        return Err(
            "`*` alone would allow every host; list the hosts the server needs (`*.example.com` allows the subdomains of one domain)"
                .into(),
        );
    }
    if let Some(suffix) = host.strip_prefix("*.") {
        if suffix.contains('*') {
            return Err(wildcard_position());
        }
        return match normalise(suffix)? {
            Host::Ip(_) => Err("a wildcard needs a domain name after `*.`, not an IP address".into()),
            Host::Name(n) if !n.contains('.') => Err(format!(
                "`*.{n}` is too broad: a wildcard needs a suffix of at least two labels, as in `*.example.{n}`"
            )),
            Host::Name(n) => Ok(HostPattern::Suffix(n)),
        };
    }
    if host.contains('*') {
        return Err(wildcard_position());
    }
    Ok(match normalise(host)? {
        Host::Name(n) => HostPattern::Name(n),
        Host::Ip(ip) => HostPattern::Ip(ip),
    })
}

fn wildcard_position() -> String {
    "a wildcard may only be the whole first label, as in `*.example.com`".into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_is_the_allowlist_on_any_port() {
        let entries: Vec<String> = ["api.example.com:443", "*.cdn.example", "10.0.0.0/8:22"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let p = NetworkPolicy::compile(&entries, false).unwrap();
        assert!(p.names("api.example.com"));
        assert!(p.names("img.cdn.example"));
        assert!(!p.names("cdn.example"));
        assert!(!p.names("evil.example"));
        assert!(!p.names("10.1.2.3"), "addresses are not names");
        assert!(!p.names("API.EXAMPLE.COM\u{0}"));
    }

    #[test]
    fn record_all_allows_every_name_and_range_but_never_metadata() {
        let p = NetworkPolicy::record_all();
        let name = Host::Name("api.example.com".into());
        assert!(p.check(&name, 8443).is_ok());
        assert!(p.check(&Host::Name("localhost".into()), 22).is_ok());
        let ip: IpAddr = "93.184.215.14".parse().unwrap();
        assert!(p.check(&Host::Ip(ip), 443).is_ok());
        assert!(p
            .check(&Host::Ip("2001:db8::1".parse().unwrap()), 443)
            .is_ok());
        // Names may reach private and loopback addresses, never metadata.
        assert!(p
            .check_address(&name, 443, "10.0.0.1".parse().unwrap())
            .is_ok());
        assert!(p
            .check_address(&name, 443, "127.0.0.1".parse().unwrap())
            .is_ok());
        assert!(p
            .check_address(&name, 80, "169.254.169.254".parse().unwrap())
            .is_err());
        assert!(p
            .check_address(&name, 80, "0.0.0.0".parse().unwrap())
            .is_err());
        // An IP literal of loopback or metadata: only an exact entry reaches it.
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(p.check_address(&Host::Ip(lo), 80, lo).is_err());
        assert_eq!(p.allow[0].host.to_string(), "*");
    }

    use super::*;

    fn name(s: &str) -> Host {
        Host::Name(s.to_owned())
    }

    fn ip(s: &str) -> Host {
        Host::Ip(s.parse().unwrap())
    }

    fn policy(entries: &[&str]) -> NetworkPolicy {
        let entries: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        NetworkPolicy::compile(&entries, false).unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn entry_error(entry: &str) -> String {
        match NetworkPolicy::compile(&[entry.to_owned()], false) {
            Ok(p) => panic!("`{entry}` compiled to {:?}", p.allow),
            Err(e) => {
                assert_eq!(e.len(), 1);
                assert_eq!(e[0].0, 0);
                e[0].1.clone()
            }
        }
    }

    fn rule(entry: &str) -> (HostPattern, PortSpec) {
        let p = policy(&[entry]);
        let r = &p.allow[0];
        assert_eq!(r.source, entry);
        (r.host.clone(), r.ports)
    }

    #[test]
    fn names_are_normalised() {
        let cases = [
            ("api.github.com", "api.github.com"),
            ("API.GitHub.COM", "api.github.com"),
            ("api.github.com.", "api.github.com"),
            ("localhost", "localhost"),
            ("BÜCHER.example.", "xn--bcher-kva.example"),
            ("bücher.example", "xn--bcher-kva.example"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("XN--BCHER-KVA.example", "xn--bcher-kva.example"),
            // Full-width letters and the ideographic full stop map to ASCII.
            ("ｅｘａｍｐｌｅ。com", "example.com"),
            ("_acme-challenge.example.com", "_acme-challenge.example.com"),
            ("r1---sn-abc.googlevideo.com", "r1---sn-abc.googlevideo.com"),
            ("-leading.example", "-leading.example"),
            ("1.2.3.a", "1.2.3.a"),
            ("1e1", "1e1"),
            ("0x1g.example", "0x1g.example"),
            ("a.0xg", "a.0xg"),
            ("123abc", "123abc"),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_host(raw), Ok(name(want)), "{raw}");
        }
    }

    #[test]
    fn every_ipv4_spelling_is_an_ip() {
        let cases = [
            ("127.0.0.1", "127.0.0.1"),
            ("127.0.0.1.", "127.0.0.1"),
            ("127.1", "127.0.0.1"),
            ("127.0.1", "127.0.0.1"),
            ("2130706433", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("0X7F000001", "127.0.0.1"),
            ("0x7f.1", "127.0.0.1"),
            ("0x7F.0x0.0x0.0x1", "127.0.0.1"),
            ("0177.0.0.1", "127.0.0.1"),
            ("0177.0.0.01", "127.0.0.1"),
            ("017700000001", "127.0.0.1"),
            ("0x7f.0.1", "127.0.0.1"),
            ("0x7f.000.0x00.1", "127.0.0.1"),
            ("0", "0.0.0.0"),
            ("0x", "0.0.0.0"),
            ("0.0x.0.0", "0.0.0.0"),
            ("10.0.0.0x1", "10.0.0.1"),
            ("169.254.43518", "169.254.169.254"),
            ("0xa9fea9fe", "169.254.169.254"),
            ("4294967295", "255.255.255.255"),
            ("1.2.3.4", "1.2.3.4"),
            ("８.８.８.８", "8.8.8.8"),
            ("１２７。０。０。１", "127.0.0.1"),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_host(raw), Ok(ip(want)), "{raw}");
        }
    }

    #[test]
    fn ipv6_literals_fold_ipv4_forms() {
        let cases = [
            ("[::1]", "::1"),
            ("::1", "::1"),
            ("[::]", "::"),
            ("[2001:DB8::1]", "2001:db8::1"),
            ("[fe80::1]", "fe80::1"),
            ("::ffff:127.0.0.1", "127.0.0.1"),
            ("[::ffff:127.0.0.1]", "127.0.0.1"),
            ("[::ffff:7f00:1]", "127.0.0.1"),
            ("[::FFFF:a9fe:a9fe]", "169.254.169.254"),
            ("[::127.0.0.1]", "127.0.0.1"),
            ("[::7f00:1]", "127.0.0.1"),
            ("[::8.8.8.8]", "8.8.8.8"),
            // NAT64 and 6to4 are real IPv6 addresses (judged by address_class).
            ("[64:ff9b::7f00:1]", "64:ff9b::7f00:1"),
            ("[2002:7f00:1::]", "2002:7f00:1::"),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_host(raw), Ok(ip(want)), "{raw}");
        }
    }

    #[test]
    fn invalid_hosts_are_errors() {
        let cases = [
            ("", "empty host"),
            (".", "empty host"),
            ("..", "empty label"),
            ("a..b", "empty label"),
            (".a", "empty label"),
            ("a.b..", "empty label"),
            ("a b.com", "` ` (space) is not allowed"),
            ("user@evil.com", "`@` is not allowed"),
            ("evil.com/x", "`/` is not allowed"),
            ("evil.com%00", "`%` is not allowed"),
            ("evil.com\0.good.com", "`\\0` is not allowed"),
            ("a\nb", "`\\n` is not allowed"),
            ("a\tb", "`\\t` is not allowed"),
            ("a!b.com", "`!` is not allowed"),
            ("a*b.com", "`*` is not allowed"),
            ("a,b.com", "`,` is not allowed"),
            ("example.com:443", "not a valid IPv6 address"),
            (
                "1.2.3.4.5",
                "is a number, so it is an IPv4 address, but not a valid one",
            ),
            ("0x1g.1", "is a number"),
            ("256.0.0.1", "is a number"),
            ("1.2.3.256", "is a number"),
            ("1.2.65536", "is a number"),
            ("4294967296", "is a number"),
            ("09.1.2.3", "is a number"),
            ("08", "is a number"),
            ("a.1", "is a number"),
            ("example.0x", "is a number"),
            ("foo.123", "is a number"),
            ("99999999999999999999999999", "is a number"),
            ("1.2.3.4..", "empty label"),
            ("[::1", "without a closing `]`"),
            ("[fe80::1%eth0]", "zone ids"),
            ("fe80::1%eth0", "zone ids"),
            ("[127.0.0.1]", "not a valid IPv6 address"),
            ("[::1]:80", "without a closing `]`"),
            ("[:::1]", "not a valid IPv6 address"),
            ("xn--a.example", "IDNA"),
            ("xn--.example", "IDNA"),
        ];
        for (raw, want) in cases {
            let e = parse_host(raw).expect_err(raw);
            assert!(matches!(e, Denial::BadHost(_)), "{raw}: {e:?}");
            assert_eq!(e.code(), "bad-host");
            assert!(e.to_string().contains(want), "{raw}: {e}");
            assert!(e.to_string().starts_with("invalid host name: `"), "{e}");
        }
    }

    #[test]
    fn lengths() {
        let label = "a".repeat(63);
        assert_eq!(parse_host(&label), Ok(name(&label)));
        let e = parse_host(&format!("{label}a.com")).unwrap_err();
        assert!(e.to_string().contains("longer than 63 bytes"), "{e}");
        // 4 labels of 63 + 3 dots = 255 > 253; 253 exactly is fine.
        let long = [label.as_str(); 4].join(".");
        assert!(parse_host(&long)
            .unwrap_err()
            .to_string()
            .contains("longer than 253"));
        let ok = format!("{}.{}", [label.as_str(); 3].join("."), "a".repeat(61));
        assert_eq!(ok.len(), 253);
        assert_eq!(parse_host(&ok), Ok(name(&ok)));
        assert_eq!(parse_host(&format!("{ok}.")), Ok(name(&ok)));
        assert!(parse_host(&"a.".repeat(600)).is_err());
    }

    #[test]
    fn error_messages_escape_and_cut_the_input() {
        let e = parse_host("a\u{1b}[31m").unwrap_err().to_string();
        assert!(!e.contains('\u{1b}'), "{e}");
        let long = format!("{} x", "a".repeat(400));
        let e = parse_host(&long).unwrap_err().to_string();
        assert!(e.len() < 300, "{e}");
    }

    #[test]
    fn address_classes_v4() {
        let cases = [
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("140.82.112.3", None),
            ("0.0.0.0", Some("unspecified")),
            ("0.1.2.3", Some("unspecified")),
            ("127.0.0.1", Some("loopback")),
            ("127.255.255.254", Some("loopback")),
            ("10.1.2.3", Some("private")),
            ("172.16.0.1", Some("private")),
            ("172.31.255.255", Some("private")),
            ("172.15.0.1", None),
            ("172.32.0.1", None),
            ("192.168.1.1", Some("private")),
            ("169.254.1.1", Some("link-local")),
            ("169.254.169.254", Some("metadata")),
            ("169.254.170.2", Some("metadata")),
            ("100.100.100.200", Some("metadata")),
            ("100.64.0.1", Some("cgnat")),
            ("100.127.255.255", Some("cgnat")),
            ("100.128.0.1", None),
            ("100.63.255.255", None),
            ("192.0.0.8", Some("reserved")),
            ("192.0.2.1", Some("documentation")),
            ("198.51.100.7", Some("documentation")),
            ("203.0.113.9", Some("documentation")),
            ("198.18.0.1", Some("benchmarking")),
            ("198.19.255.255", Some("benchmarking")),
            ("198.20.0.1", None),
            ("224.0.0.1", Some("multicast")),
            ("239.255.255.250", Some("multicast")),
            ("240.0.0.1", Some("reserved")),
            ("255.255.255.254", Some("reserved")),
            ("255.255.255.255", Some("broadcast")),
        ];
        for (a, want) in cases {
            assert_eq!(address_class(a.parse().unwrap()), want, "{a}");
        }
    }

    #[test]
    fn address_classes_v6() {
        let cases = [
            ("2606:4700:4700::1111", None),
            ("2a00:1450:4001:80b::200e", None),
            ("::", Some("unspecified")),
            ("::1", Some("loopback")),
            ("fe80::1", Some("link-local")),
            ("febf::1", Some("link-local")),
            ("fc00::1", Some("unique-local")),
            ("fd12:3456::1", Some("unique-local")),
            ("fd00:ec2::254", Some("metadata")),
            ("fd00:ec2::253", Some("unique-local")),
            ("ff02::1", Some("multicast")),
            ("2001:db8::1", Some("documentation")),
            ("3fff::1", Some("documentation")),
            ("2001:2::1", Some("benchmarking")),
            ("2001::1", Some("reserved")),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Some("reserved")),
            ("100::1", Some("reserved")),
            ("fec0::1", Some("reserved")),
            ("64:ff9b:1::1", Some("reserved")),
            ("4000::1", Some("reserved")),
            // Judged by the IPv4 address they carry.
            ("::ffff:127.0.0.1", Some("loopback")),
            ("::ffff:8.8.8.8", None),
            ("::ffff:169.254.169.254", Some("metadata")),
            ("::10.0.0.1", Some("private")),
            ("::8.8.8.8", None),
            ("64:ff9b::7f00:1", Some("loopback")),
            ("64:ff9b::a9fe:a9fe", Some("metadata")),
            ("64:ff9b::808:808", None),
            ("2002:7f00:1::", Some("loopback")),
            ("2002:c0a8:101::1", Some("private")),
            ("2002:808:808::1", None),
            ("2002::1", Some("unspecified")),
        ];
        for (a, want) in cases {
            assert_eq!(address_class(a.parse().unwrap()), want, "{a}");
        }
    }

    /// Each entry form, and the rule it compiles to (in [`NetRule`]'s display form,
    /// which `display_is_entry_syntax` pins to the structure).
    #[test]
    fn entry_forms() {
        let cases = [
            ("api.github.com", "api.github.com:80,443"),
            ("API.GitHub.com.", "api.github.com:80,443"),
            ("registry.npmjs.org:443", "registry.npmjs.org:443"),
            ("example.com:*", "example.com:*"),
            ("localhost:3000", "localhost:3000"),
            ("a:1", "a:1"),
            ("a:65535", "a:65535"),
            ("*.github.com", "*.github.com:80,443"),
            ("*.GitHub.com.:8443", "*.github.com:8443"),
            ("*.co.uk:*", "*.co.uk:*"),
            ("*.BÜCHER.example", "*.xn--bcher-kva.example:80,443"),
            ("1.2.3.4", "1.2.3.4:80,443"),
            ("1.2.3.4:*", "1.2.3.4:*"),
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("2130706433:8080", "127.0.0.1:8080"),
            ("0x7f.1", "127.0.0.1:80,443"),
            ("[::1]", "[::1]:80,443"),
            ("[::1]:8080", "[::1]:8080"),
            ("[::ffff:10.0.0.1]:22", "10.0.0.1:22"),
            ("10.0.0.0/8", "10.0.0.0/8:80,443"),
            ("10.0.0.0/8:443", "10.0.0.0/8:443"),
            ("0.0.0.0/8:*", "0.0.0.0/8:*"),
            ("git.corp:443 private", "git.corp:443 private"),
            ("*.corp.example private", "*.corp.example:80,443 private"),
            (
                "legacy.example:443  insecure-no-sni",
                "legacy.example:443 insecure-no-sni",
            ),
            (
                "x.example insecure-no-sni private",
                "x.example:80,443 private insecure-no-sni",
            ),
            ("[2001::/16]", "[2001::/16]:80,443"),
            ("[fc00::/7]:*", "[fc00::/7]:*"),
            ("127.0.0.1/32:80", "127.0.0.1/32:80"),
            ("192.168.1.7/32", "192.168.1.7/32:80,443"),
            ("fd00::/8", "[fd00::/8]:80,443"),
            ("[fd00::/8]:443", "[fd00::/8]:443"),
            ("[fd00::/8]", "[fd00::/8]:80,443"),
            ("[::ffff:10.0.0.0/104]", "10.0.0.0/8:80,443"),
            ("[2001:DB8::/32]:*", "[2001:db8::/32]:*"),
        ];
        for (entry, want) in cases {
            let p = policy(&[entry]);
            assert_eq!(p.allow[0].source, entry);
            assert_eq!(p.allow[0].to_string(), want, "{entry}");
        }
        // The kinds, for a few.
        use HostPattern as H;
        let v4 = |s: &str| IpAddr::V4(s.parse().unwrap());
        assert_eq!(rule("x.com:*"), (H::Name("x.com".into()), PortSpec::Any));
        assert_eq!(
            rule("*.x.com:1"),
            (H::Suffix("x.com".into()), PortSpec::One(1))
        );
        assert_eq!(rule("127.1"), (H::Ip(v4("127.0.0.1")), PortSpec::Web));
        assert_eq!(
            rule("10.0.0.0/8"),
            (
                H::Cidr {
                    addr: v4("10.0.0.0"),
                    prefix: 8
                },
                PortSpec::Web
            )
        );
    }

    #[test]
    fn entry_errors_name_the_entry_and_the_problem() {
        let cases = [
            ("", "empty entry"),
            ("*", "`*` alone would allow every host"),
            ("*:443", "`*` alone would allow every host"),
            ("*.com", "`*.com` is too broad: a wildcard needs a suffix of at least two labels, as in `*.example.com`"),
            ("*.COM.", "`*.com` is too broad"),
            ("*.*.example.com", "a wildcard may only be the whole first label"),
            ("a.*.example.com", "a wildcard may only be the whole first label"),
            ("*a.example.com", "a wildcard may only be the whole first label"),
            ("**.example.com", "a wildcard may only be the whole first label"),
            ("example.*", "a wildcard may only be the whole first label"),
            ("*.1.2.3.4", "a wildcard needs a domain name after `*.`, not an IP address"),
            ("*.", "empty host"),
            ("a b.com", "`a b.com`: ` ` (space) is not allowed in a host name (letters, digits, `-`, `_` and `.` are)"),
            ("example.com:0", "port 0 cannot be connected to"),
            ("example.com:", "missing port after `:`"),
            ("example.com:65536", "port 65536 is out of range"),
            ("example.com:http", "invalid port `http`"),
            ("example.com:+80", "invalid port `+80`"),
            ("example.com:-1", "invalid port `-1`"),
            ("example.com:99999999999", "invalid port"),
            ("::1", "write an IPv6 address in brackets: `[::1]`, or `[::1]:PORT` for one port"),
            ("::1:8080", "write an IPv6 address in brackets: `[::1:8080]`"),
            ("a:b:c", "more than one `:`"),
            ("fd00::/8:443", "write an IPv6 range with a port in brackets, as in `[fd00::/8]:PORT`"),
            ("[::1", "`[` without a closing `]`"),
            ("[::1]x", "unexpected text after `]`"),
            ("[::1]:0", "port 0"),
            ("[1.2.3.4]", "brackets are for IPv6 addresses; write `1.2.3.4` without them"),
            ("[10.0.0.0/8]", "brackets are for IPv6 ranges; write `10.0.0.0/8` without them"),
            ("[fe80::1%eth0]", "zone ids"),
            ("10.0.0.1/8", "host bits are set after the /8 prefix: write the range as `10.0.0.0/8`, or `10.0.0.1` for the one address"),
            ("fd00::1/8", "write the range as `[fd00::/8]`, or `[fd00::1]` for the one address"),
            ("10.0.0.0/33", "invalid prefix length `/33`: write a number from 0 to 32"),
            ("10.0.0.0/", "invalid prefix length `/`"),
            ("10.0.0.0/x", "invalid prefix length `/x`"),
            ("10.0.0.0/0008", "invalid prefix length"),
            ("fd00::/129", "write a number from 0 to 128"),
            ("example.com/8", "`example.com` is not an IP address; a range is written as in `10.0.0.0/8`"),
            ("1.2.3.4.5", "is a number, so it is an IPv4 address"),
            ("1.2.3.4.5:443", "is a number, so it is an IPv4 address"),
            ("0.0.0.0", "0.0.0.0 is an unspecified address, which Warden never connects to"),
            ("0:443", "0.0.0.0 is an unspecified address"),
            ("[::]", ":: is an unspecified address"),
            ("224.0.0.1", "multicast"),
            ("[ff02::1]:*", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("0.0.0.0/0", "`0.0.0.0/0` would allow every address"),
            ("0.0.0.0/0:443", "would allow every address"),
            ("[::/0]:*", "`[::/0]` would allow every address"),
            ("::/0", "would allow every address"),
            ("[::ffff:0.0.0.0/96]", "`0.0.0.0/0` would allow every address"),
            ("0.0.0.0/1", "`0.0.0.0/1` is too broad: a range needs a prefix of at least /8 (IPv4)"),
            ("64.0.0.0/7:443", "too broad"),
            ("[2000::/3]", "`[2000::/3]` is too broad: a range needs a prefix of at least /7 (IPv6)"),
            ("127.0.0.0/8:8080", "`127.0.0.0/8` is a loopback range: a range never opens loopback addresses"),
            ("127.0.0.0/31", "loopback range"),
            ("a.com private private", "option `private` is written twice"),
            ("a.com public", "unknown option `public`: after a space only the options `private`, `insecure-no-sni` and `direct` may follow"),
            ("a.com 1", "` ` (space) is not allowed in a host name"),
            (" a.com", "` ` (space) is not allowed"),
            ("10.0.0.1 private", "`private` is for names"),
            ("10.0.0.0/8:443 private", "`private` is for names"),
            ("[::1]:22 insecure-no-sni", "`insecure-no-sni` is for names"),
        ];
        for (entry, want) in cases {
            let e = entry_error(entry);
            assert!(e.starts_with(&format!("`{entry}`: ")), "{entry}: {e}");
            assert!(e.contains(want), "{entry}: {e}");
        }
    }

    #[test]
    fn errors_are_per_entry() {
        let entries: Vec<String> = ["ok.com", "*", "fine.org:443", "x:0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let e = NetworkPolicy::compile(&entries, true).unwrap_err();
        assert_eq!(e.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![1, 3]);
        let p = NetworkPolicy::compile(&entries[..1], true).unwrap();
        assert!(p.allow_private);
        assert_eq!(
            NetworkPolicy::compile(&[], false),
            Ok(NetworkPolicy::default())
        );
    }

    #[test]
    fn suffix_matches_strictly_below() {
        let p = policy(&["*.github.com"]);
        for ok in [
            "api.github.com",
            "a.b.github.com",
            "x-y.github.com",
            "API.GITHUB.COM.",
        ] {
            let h = parse_host(ok).unwrap();
            assert_eq!(
                p.check(&h, 443).map(|r| &r.source[..]),
                Ok("*.github.com"),
                "{ok}"
            );
        }
        for no in [
            "github.com",
            "evil-github.com",
            "github.com.evil.com",
            "agithub.com",
            "githubXcom",
            "hub.com",
            "com",
        ] {
            let h = parse_host(no).unwrap();
            assert_eq!(
                p.check(&h, 443),
                Err(Denial::NotAllowed {
                    host: h.to_string(),
                    port: 443
                }),
                "{no}"
            );
        }
    }

    #[test]
    fn names_match_exactly() {
        let p = policy(&["github.com"]);
        assert!(p.check(&name("github.com"), 80).is_ok());
        assert!(p.check(&parse_host("GitHub.com.").unwrap(), 443).is_ok());
        for no in [
            "api.github.com",
            "github.co",
            "ithub.com",
            "github.com.evil",
        ] {
            assert!(p.check(&name(no), 443).is_err(), "{no}");
        }
    }

    #[test]
    fn ports() {
        let p = policy(&["web.com", "one.com:8080", "any.com:*"]);
        let ok = |h: &str, port| p.check(&name(h), port).is_ok();
        assert!(ok("web.com", 80) && ok("web.com", 443));
        assert!(!ok("web.com", 8080) && !ok("web.com", 22) && !ok("web.com", 0));
        assert!(ok("one.com", 8080));
        assert!(!ok("one.com", 80) && !ok("one.com", 443) && !ok("one.com", 8081));
        assert!(ok("any.com", 1) && ok("any.com", 22) && ok("any.com", 65535));
        assert!(!ok("any.com", 0));
        assert_eq!(
            p.check(&name("web.com"), 22).unwrap_err().to_string(),
            "web.com:22 is not in network.allow"
        );
    }

    #[test]
    fn first_matching_rule_is_returned() {
        let p = policy(&["a.example.com:443", "*.example.com:*"]);
        assert_eq!(
            p.check(&name("a.example.com"), 443).unwrap().source,
            "a.example.com:443"
        );
        assert_eq!(
            p.check(&name("a.example.com"), 22).unwrap().source,
            "*.example.com:*"
        );
    }

    #[test]
    fn ip_hosts_match_only_address_rules() {
        let p = policy(&[
            "127.0.0.1:*",
            "10.0.0.0/8:443",
            "[fd00::/8]:*",
            "[::1]:8080",
        ]);
        let allowed = |h: &str, port| p.check(&parse_host(h).unwrap(), port).is_ok();
        for h in [
            "127.0.0.1",
            "127.1",
            "2130706433",
            "0x7f.1",
            "[::ffff:127.0.0.1]",
            "[::ffff:7f00:1]",
            "0177.0.0.1",
            "127.0.0.1.",
        ] {
            assert!(allowed(h, 22), "{h}");
        }
        assert!(!allowed("127.0.0.2", 22));
        assert!(allowed("10.1.2.3", 443) && allowed("10.255.255.255", 443));
        assert!(
            !allowed("10.1.2.3", 80) && !allowed("11.0.0.1", 443) && !allowed("9.255.255.255", 443)
        );
        assert!(allowed("[fd12::1]", 1) && !allowed("[fe80::1]", 1));
        assert!(allowed("[::1]", 8080) && !allowed("[::1]", 80));
        // Hand-built IPv4-mapped hosts (e.g. from SOCKS5 bytes) are folded too.
        let mapped = Host::Ip("::ffff:10.0.0.1".parse().unwrap());
        assert!(p.check(&mapped, 443).is_ok());

        // A name rule never matches an address, nor an address rule a name.
        let p = policy(&["localhost:*", "*.example.com:*", "1.2.3.4:*"]);
        assert!(p.check(&ip("127.0.0.1"), 80).is_err());
        assert!(p.check(&name("1-2-3-4.example.com"), 80).is_ok());
        assert!(p.check(&parse_host("1.2.3.4").unwrap(), 80).is_ok());
    }

    #[test]
    fn check_refuses_hand_built_names_that_are_not_normalised() {
        let p = policy(&["*.example.com:*", "example.com"]);
        for raw in [
            "evil.com\0.example.com",
            "Foo.example.com",
            "a.example.com.",
            "x y.example.com",
            "127.0.0.1",
            "",
        ] {
            let e = p.check(&name(raw), 443).unwrap_err();
            assert_eq!(e.code(), "bad-host", "{raw:?}: {e}");
        }
    }

    #[test]
    fn check_address_refuses_private_answers_for_names() {
        let strict = policy(&["*.example.com:*"]);
        let h = name("a.example.com");
        let at = |p: &NetworkPolicy, addr: &str| p.check_address(&h, 443, addr.parse().unwrap());
        assert_eq!(at(&strict, "93.184.216.34"), Ok(()));
        assert_eq!(at(&strict, "2606:2800:220:1::1"), Ok(()));
        for (addr, class) in [
            ("127.0.0.1", "loopback"),
            ("10.0.0.5", "private"),
            ("169.254.169.254", "metadata"),
            ("169.254.0.23", "metadata"),
            ("168.63.129.16", "metadata"),
            ("100.64.1.1", "cgnat"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("64:ff9b::a9fe:a9fe", "metadata"),
            ("fd00:ec2::254", "metadata"),
            ("fd20:ce::254", "metadata"),
            ("2001::1", "reserved"),
        ] {
            let e = at(&strict, addr).unwrap_err();
            assert!(
                matches!(&e, Denial::PrivateAddress { class: c, .. } if *c == class),
                "{addr}: {e:?}"
            );
            assert_eq!(e.code(), "private-address");
        }
        assert_eq!(
            at(&strict, "10.0.0.5").unwrap_err().to_string(),
            "a.example.com resolved to 10.0.0.5, a private address; add the `private` option to its network.allow entry (or set network.allow_private) to reach it"
        );

        // allow_private: private classes for every name, but not loopback and
        // never metadata (F11).
        let lax = NetworkPolicy {
            allow_private: true,
            ..strict.clone()
        };
        for addr in ["10.0.0.5", "169.254.1.1", "fd12::1", "100.64.1.1"] {
            assert_eq!(at(&lax, addr), Ok(()), "{addr}");
        }
        for addr in ["127.0.0.1", "::1", "::ffff:127.0.0.2"] {
            let e = at(&lax, addr).unwrap_err();
            assert!(e.to_string().contains("add the `private` option"), "{e}");
        }
        for addr in ["169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254"] {
            let e = at(&lax, addr).unwrap_err();
            assert!(
                e.to_string()
                    .contains("a name never reaches cloud metadata"),
                "{e}"
            );
        }
        // ... except that `localhost` is loopback by definition.
        let local =
            NetworkPolicy::compile(&["localhost:3000".into(), "a.localhost:*".into()], true)
                .unwrap();
        for (host, addr) in [("localhost", "127.0.0.1"), ("a.localhost", "::1")] {
            assert_eq!(
                local.check_address(&name(host), 3000, addr.parse().unwrap()),
                Ok(()),
                "{host}"
            );
        }
        let e = local
            .check_address(&name("localhost"), 3000, "169.254.169.254".parse().unwrap())
            .unwrap_err();
        assert_eq!(e.code(), "private-address");
        let local_strict = NetworkPolicy::compile(&["localhost:3000".into()], false).unwrap();
        assert!(local_strict
            .check_address(&name("localhost"), 3000, "127.0.0.1".parse().unwrap())
            .is_err());

        // The per-entry option: loopback and private for that entry only, never
        // metadata.
        let per = policy(&["dev.test:3000 private", "*.example.com:*"]);
        let dev = name("dev.test");
        for addr in ["127.0.0.1", "::1", "10.0.0.5", "fd12::1"] {
            assert_eq!(
                per.check_address(&dev, 3000, addr.parse().unwrap()),
                Ok(()),
                "{addr}"
            );
        }
        assert!(per
            .check_address(&dev, 3000, "169.254.169.254".parse().unwrap())
            .is_err());
        assert!(per
            .check_address(&h, 3000, "127.0.0.1".parse().unwrap())
            .is_err());
        assert!(per
            .check_address(&h, 3000, "10.0.0.5".parse().unwrap())
            .is_err());
        // On another port the entry does not apply (and check refuses it anyway).
        assert!(per
            .check_address(&dev, 3001, "127.0.0.1".parse().unwrap())
            .is_err());

        // Never, whatever allow_private or the option says.
        let both = NetworkPolicy {
            allow_private: true,
            ..per.clone()
        };
        for (addr, class) in [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("::", "unspecified"),
            ("::ffff:0.0.0.0", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
            ("255.255.255.255", "broadcast"),
        ] {
            let e = both
                .check_address(&dev, 3000, addr.parse().unwrap())
                .unwrap_err();
            assert!(
                matches!(&e, Denial::PrivateAddress { class: c, .. } if *c == class),
                "{addr}: {e:?}"
            );
            assert!(
                e.to_string().ends_with("; Warden never connects to one"),
                "{e}"
            );
        }
    }

    #[test]
    fn check_address_allows_listed_ips_whatever_their_class() {
        let p = policy(&[
            "127.0.0.1:8080",
            "10.0.0.0/8:*",
            "[::1]:*",
            "169.254.169.254:80",
            "169.254.0.0/16:*",
            "127.0.0.2/32:*",
        ]);
        for (h, port) in [
            ("127.0.0.1", 8080),
            ("10.9.9.9", 1),
            ("[::1]", 9),
            ("[::ffff:127.0.0.1]", 8080),
            ("169.254.169.254", 80),
            ("169.254.1.1", 22),
            ("127.0.0.2", 5),
        ] {
            let host = parse_host(h).unwrap();
            let Host::Ip(addr) = host else { unreachable!() };
            assert_eq!(p.check_address(&host, port, addr), Ok(()), "{h}:{port}");
        }
        // Loopback and metadata only through an entry for exactly that address on
        // that port: the range 169.254.0.0/16 does not open metadata (F11).
        let meta = parse_host("169.254.169.254").unwrap();
        let Host::Ip(addr) = meta else { unreachable!() };
        let e = p.check_address(&meta, 443, addr).unwrap_err();
        assert_eq!(
            e.to_string(),
            "169.254.169.254 is a metadata address; a range does not open loopback or metadata addresses; list the address itself (`127.0.0.1:PORT`)"
        );
        let wide = policy(&["10.0.0.0/8:443", "127.0.0.1:8080", "[::/8]:443"]);
        let lo = parse_host("[::1]").unwrap();
        assert!(wide.check(&lo, 443).is_ok());
        assert_eq!(
            wide.check_address(&lo, 443, "::1".parse().unwrap())
                .unwrap_err()
                .code(),
            "private-address"
        );
        // The address must be the host's own, and listed.
        let host = parse_host("127.0.0.1").unwrap();
        let e = p
            .check_address(&host, 8080, "127.0.0.2".parse().unwrap())
            .unwrap_err();
        assert_eq!(e.code(), "private-address");
        let unlisted = parse_host("192.168.0.1").unwrap();
        let Host::Ip(addr) = unlisted else {
            unreachable!()
        };
        assert_eq!(
            p.check_address(&unlisted, 80, addr)
                .unwrap_err()
                .to_string(),
            "192.168.0.1 is a private address; list the address in network.allow to reach it"
        );
        // A range that holds 0.0.0.0 still never reaches it.
        let zeros = policy(&["0.0.0.0/8:*"]);
        let zero = Host::Ip("0.0.0.0".parse().unwrap());
        assert!(zeros.check(&zero, 80).is_ok());
        assert_eq!(
            zeros
                .check_address(&zero, 80, "0.0.0.0".parse().unwrap())
                .unwrap_err()
                .to_string(),
            "0.0.0.0 is an unspecified address; Warden never connects to one"
        );
    }

    #[test]
    fn an_approved_host_is_decided_as_a_listed_one() {
        let p = NetworkPolicy::compile(&["api.example.com".to_string()], false).unwrap();
        let name = parse_host("Other.Example.").unwrap();
        assert!(p.check(&name, 443).is_err());
        assert_eq!(
            NetworkPolicy::approved_entry(&name, 443).unwrap(),
            "other.example:443"
        );
        let q = p.with_approved(&name, 443).unwrap();
        assert_eq!(q.check(&name, 443).unwrap().source, "other.example:443");
        // Only that port, and not the subdomains.
        assert!(q.check(&name, 80).is_err());
        assert!(q
            .check(&parse_host("a.other.example").unwrap(), 443)
            .is_err());
        // Address classes apply as to a listed name: no private addresses
        // without `allow_private`, never metadata.
        let private: IpAddr = "10.1.2.3".parse().unwrap();
        assert!(q.check_address(&name, 443, private).is_err());
        let open = NetworkPolicy::compile(&[], true)
            .unwrap()
            .with_approved(&name, 443)
            .unwrap();
        assert!(open.check_address(&name, 443, private).is_ok());
        let metadata: IpAddr = "169.254.169.254".parse().unwrap();
        assert!(open.check_address(&name, 443, metadata).is_err());
        // An IPv6 literal keeps its brackets.
        let v6 = parse_host("[2001:DB8::1]").unwrap();
        let r = NetworkPolicy::compile(&[], false)
            .unwrap()
            .with_approved(&v6, 8443)
            .unwrap();
        assert_eq!(r.check(&v6, 8443).unwrap().source, "[2001:db8::1]:8443");
    }

    #[test]
    fn tunnel_use_needs_an_explicit_port_or_the_option() {
        let p = policy(&[
            "web.example",
            "ssh.example:22",
            "both.example",
            "both.example:80",
            "any.example:*",
            "old.example:443 insecure-no-sni",
            "*.wild.example:8443",
            "10.0.0.0/8",
            "10.0.0.1:5432",
        ]);
        let use_of = |h: &str, port| p.tunnel_use(&parse_host(h).unwrap(), port);
        let plain = TunnelUse {
            plain: true,
            no_sni: false,
            direct: false,
        };
        let neither = TunnelUse::default();
        assert_eq!(use_of("web.example", 443), neither);
        assert_eq!(use_of("web.example", 80), neither);
        assert_eq!(use_of("ssh.example", 22), plain);
        assert_eq!(use_of("both.example", 80), plain);
        assert_eq!(use_of("both.example", 443), neither);
        assert_eq!(use_of("any.example", 80), plain);
        assert_eq!(
            use_of("old.example", 443),
            TunnelUse {
                plain: true,
                no_sni: true,
                direct: false,
            }
        );
        assert_eq!(use_of("a.wild.example", 8443), plain);
        // Addresses: no server name is the norm; plain bytes as for names.
        assert_eq!(
            use_of("10.2.3.4", 443),
            TunnelUse {
                plain: false,
                no_sni: true,
                direct: false,
            }
        );
        assert_eq!(
            use_of("10.0.0.1", 5432),
            TunnelUse {
                plain: true,
                no_sni: true,
                direct: false,
            }
        );
        // Not allowed at all: nothing (check refuses first anyway).
        assert_eq!(use_of("other.example", 22), neither);
        assert_eq!(p.tunnel_use(&Host::Name("WEB.example".into()), 22), neither);
    }

    #[test]
    fn display_is_entry_syntax() {
        let v6: IpAddr = "fd00::".parse().unwrap();
        let v4: IpAddr = "10.0.0.0".parse().unwrap();
        let cases = [
            (
                HostPattern::Name("a.com".into()),
                PortSpec::Web,
                "a.com:80,443",
            ),
            (
                HostPattern::Suffix("a.com".into()),
                PortSpec::Any,
                "*.a.com:*",
            ),
            (HostPattern::Ip(v4), PortSpec::One(22), "10.0.0.0:22"),
            (HostPattern::Ip(v6), PortSpec::One(22), "[fd00::]:22"),
            (
                HostPattern::Cidr {
                    addr: v4,
                    prefix: 8,
                },
                PortSpec::Any,
                "10.0.0.0/8:*",
            ),
            (
                HostPattern::Cidr {
                    addr: v6,
                    prefix: 8,
                },
                PortSpec::Web,
                "[fd00::/8]:80,443",
            ),
        ];
        for (host, ports, want) in cases {
            let r = NetRule {
                source: String::new(),
                host,
                ports,
                private: false,
                no_sni: false,
                direct: false,
            };
            assert_eq!(r.to_string(), want);
        }
    }

    #[test]
    fn display_forms() {
        let p = policy(&[
            "API.github.com",
            "*.example.com:*",
            "1.2.3.4:22",
            "[::1]",
            "10.0.0.0/8:443",
            "fd00::/8",
        ]);
        let shown: Vec<String> = p.allow.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            shown,
            vec![
                "api.github.com:80,443",
                "*.example.com:*",
                "1.2.3.4:22",
                "[::1]:80,443",
                "10.0.0.0/8:443",
                "[fd00::/8]:80,443",
            ]
        );
        // The canonical host form compiles back to the same pattern.
        for r in &p.allow {
            let again = policy(&[&format!(
                "{}:{}",
                r.host,
                match r.ports {
                    PortSpec::Web => "80".to_owned(),
                    other => other.to_string(),
                }
            )]);
            assert_eq!(again.allow[0].host, r.host);
        }
    }

    #[test]
    fn serde_round_trip() {
        let p = policy(&[
            "a.com",
            "*.b.com:*",
            "1.2.3.4:22",
            "10.0.0.0/8",
            "[fd00::/8]:443",
        ]);
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<NetworkPolicy>(&json).unwrap(), p);
        assert!(
            json.contains(r#""host":{"kind":"suffix","value":"b.com"}"#),
            "{json}"
        );
    }

    #[test]
    fn mask_helpers() {
        assert_eq!(mask_v4(0xffff_ffff, 0), 0);
        assert_eq!(mask_v4(0xffff_ffff, 8), 0xff00_0000);
        assert_eq!(mask_v4(0xffff_ffff, 32), 0xffff_ffff);
        assert_eq!(mask_v6(u128::MAX, 0), 0);
        assert_eq!(mask_v6(u128::MAX, 128), u128::MAX);
        assert!(in_cidr(
            "1.2.3.4".parse().unwrap(),
            "0.0.0.0".parse().unwrap(),
            0
        ));
        assert!(!in_cidr(
            "::1".parse().unwrap(),
            "0.0.0.0".parse().unwrap(),
            0
        ));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// What the WHATWG URL Standard's host parser (the `url` crate) makes of `s`.
        fn whatwg(s: &str) -> Option<url::Host<String>> {
            url::Host::parse(s).ok()
        }

        /// An IPv4 address spelled as one to four parts, each in decimal, octal or hex.
        fn ipv4_spelling() -> impl Strategy<Value = (u32, String)> {
            (
                any::<u32>(),
                1usize..=4,
                proptest::collection::vec(0u8..4, 4),
                any::<bool>(),
            )
                .prop_map(|(v, n, radixes, dot)| {
                    let b = v.to_be_bytes();
                    let mut values: Vec<u64> = b[..n - 1].iter().map(|&x| u64::from(x)).collect();
                    // The last part holds the remaining 5 - n bytes.
                    values.push(u64::from(v) & ((1u64 << (8 * (5 - n))) - 1));
                    let parts: Vec<String> = values
                        .iter()
                        .zip(radixes)
                        .map(|(&x, r)| match r {
                            0 => format!("{x}"),
                            1 => format!("0{x:o}"),
                            2 => format!("0x{x:x}"),
                            _ => format!("0X{x:X}"),
                        })
                        .collect();
                    let mut s = parts.join(".");
                    if dot {
                        s.push('.');
                    }
                    (v, s)
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            /// Numeric-looking strings: we agree with the URL Standard exactly on
            /// which are IPv4 addresses, and which address.
            #[test]
            fn numeric_strings_agree_with_whatwg(s in "[0-9a-fxX.]{1,24}") {
                let ours = parse_host(&s);
                match whatwg(&s) {
                    Some(url::Host::Ipv4(a)) => prop_assert_eq!(ours, Ok(Host::Ip(IpAddr::V4(a)))),
                    _ => prop_assert!(!matches!(ours, Ok(Host::Ip(_))), "{s}: {ours:?}"),
                }
            }

            /// Anything at all: a name we return is never an address to the URL
            /// Standard, and an address to it is that address to us (or an error).
            #[test]
            fn no_name_is_an_address(s in "\\PC{0,30}|[0-9a-zA-Z.:\\[\\]%_-]{0,30}") {
                let ours = parse_host(&s);
                match (&ours, whatwg(&s)) {
                    (Ok(Host::Name(n)), w) => {
                        prop_assert!(!matches!(w, Some(url::Host::Ipv4(_) | url::Host::Ipv6(_))), "{s}: {n} vs {w:?}");
                        prop_assert!(!ends_in_number(n));
                        prop_assert!(n.bytes().all(|b| b == b'.' || is_label_char(b)));
                        prop_assert!(n.len() <= MAX_NAME_LEN);
                        // Normal form is a fixed point.
                        prop_assert_eq!(parse_host(n), Ok(Host::Name(n.clone())));
                    }
                    (_, Some(url::Host::Ipv4(a))) => {
                        prop_assert!(ours.is_err() || ours == Ok(Host::Ip(IpAddr::V4(a))), "{s}: {ours:?}");
                    }
                    (_, Some(url::Host::Ipv6(a))) => {
                        prop_assert!(ours.is_err() || ours == Ok(Host::from_ip(IpAddr::V6(a))), "{s}: {ours:?}");
                    }
                    _ => {}
                }
            }

            /// Every legacy spelling of every IPv4 address is that address.
            #[test]
            fn every_spelling_is_the_address((v, s) in ipv4_spelling()) {
                let want = Ipv4Addr::from(v);
                prop_assert_eq!(parse_host(&s), Ok(Host::Ip(IpAddr::V4(want))), "{}", s);
                prop_assert_eq!(whatwg(&s), Some(url::Host::Ipv4(want)), "{}", s);
            }

            /// IPv4-mapped spellings fold to the IPv4 address.
            #[test]
            fn mapped_folds(v in any::<u32>()) {
                let a = Ipv4Addr::from(v);
                let mapped = a.to_ipv6_mapped();
                prop_assert_eq!(parse_host(&format!("[{mapped}]")), Ok(Host::Ip(IpAddr::V4(a))));
                prop_assert_eq!(parse_host(&format!("::ffff:{a}")), Ok(Host::Ip(IpAddr::V4(a))));
                prop_assert_eq!(address_class(IpAddr::V6(mapped)), address_class(IpAddr::V4(a)));
            }

            /// An IP host only ever matches an address rule, a name only a name rule.
            #[test]
            fn rule_kinds_never_cross(
                picks in proptest::collection::vec(0usize..ENTRIES.len(), 1..8),
                host in "[0-9a-z.:\\[\\]x]{1,20}",
                port in any::<u16>(),
            ) {
                let entries: Vec<String> = picks.iter().map(|&i| ENTRIES[i].to_owned()).collect();
                let p = NetworkPolicy::compile(&entries, false).unwrap();
                if let Ok(h) = parse_host(&host) {
                    if let Ok(rule) = p.check(&h, port) {
                        let ip_rule = matches!(rule.host, HostPattern::Ip(_) | HostPattern::Cidr { .. });
                        prop_assert_eq!(matches!(h, Host::Ip(_)), ip_rule, "{} matched {:?}", host, rule);
                        prop_assert!(rule.ports.contains(port));
                    }
                }
            }
        }

        const ENTRIES: &[&str] = &[
            "127.0.0.1:*",
            "1.2.3.4",
            "localhost:*",
            "example.com",
            "*.example.com:*",
            "1.1:*",
            "10.0.0.0/8:*",
            "0.0.0.0/8:*",
            "fd00::/8",
            "[::1]:*",
            "x.x:*",
            "*.x.x:*",
            "a0.b0:*",
        ];
    }
}
