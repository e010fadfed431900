//! SOCKS5 (RFC 1928) message parsing and replies. Pure functions, no I/O.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The protocol version byte.
pub const VERSION: u8 = 5;
/// "No authentication required", the only method the proxy accepts.
pub const METHOD_NO_AUTH: u8 = 0x00;
/// "No acceptable methods".
pub const METHOD_NONE_ACCEPTABLE: u8 = 0xff;

pub const CMD_CONNECT: u8 = 1;
pub const CMD_BIND: u8 = 2;
pub const CMD_UDP_ASSOCIATE: u8 = 3;

/// Reply codes.
pub const REP_SUCCEEDED: u8 = 0x00;
pub const REP_GENERAL_FAILURE: u8 = 0x01;
pub const REP_NOT_ALLOWED: u8 = 0x02;
pub const REP_HOST_UNREACHABLE: u8 = 0x04;
pub const REP_REFUSED: u8 = 0x05;
pub const REP_COMMAND_NOT_SUPPORTED: u8 = 0x07;
pub const REP_ADDRESS_TYPE_NOT_SUPPORTED: u8 = 0x08;

/// The longest greeting (version, count, 255 methods).
pub const MAX_GREETING: usize = 2 + 255;
/// The longest request (header, domain of 255 bytes, port).
pub const MAX_REQUEST: usize = 4 + 1 + 255 + 2;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SocksError {
    #[error("not SOCKS version 5")]
    Version,
    #[error("no authentication methods offered")]
    NoMethods,
    #[error("reserved byte is not zero")]
    Reserved,
    #[error("unsupported address type {0}")]
    AddressType(u8),
    #[error("empty domain name")]
    EmptyDomain,
}

/// The client's greeting: the authentication methods it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    pub methods: Vec<u8>,
}

impl Greeting {
    /// Whether "no authentication" was offered.
    pub fn offers_no_auth(&self) -> bool {
        self.methods.contains(&METHOD_NO_AUTH)
    }
}

/// The destination of a request as the client wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocksAddr {
    Ip(IpAddr),
    /// ATYP 3: raw bytes, not yet validated (1 to 255 of them).
    Domain(Vec<u8>),
}

/// A client request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocksRequest {
    pub command: u8,
    pub addr: SocksAddr,
    pub port: u16,
}

/// Parses a greeting at the start of `buf`: `Ok(None)` when incomplete, else the
/// greeting and its length.
pub fn parse_greeting(buf: &[u8]) -> Result<Option<(Greeting, usize)>, SocksError> {
    let Some(&version) = buf.first() else {
        return Ok(None);
    };
    if version != VERSION {
        return Err(SocksError::Version);
    }
    let Some(&count) = buf.get(1) else {
        return Ok(None);
    };
    if count == 0 {
        return Err(SocksError::NoMethods);
    }
    let end = 2 + usize::from(count);
    match buf.get(2..end) {
        Some(methods) => Ok(Some((
            Greeting {
                methods: methods.to_vec(),
            },
            end,
        ))),
        None => Ok(None),
    }
}

/// Parses a request at the start of `buf`: `Ok(None)` when incomplete, else the
/// request and its length. Every command is parsed (refusing BIND and UDP
/// ASSOCIATE is the caller's decision).
pub fn parse_request(buf: &[u8]) -> Result<Option<(SocksRequest, usize)>, SocksError> {
    if buf.len() < 4 {
        if buf.first().is_some_and(|&v| v != VERSION) {
            return Err(SocksError::Version);
        }
        return Ok(None);
    }
    if buf[0] != VERSION {
        return Err(SocksError::Version);
    }
    if buf[2] != 0 {
        return Err(SocksError::Reserved);
    }
    let command = buf[1];
    let (addr, at) = match buf[3] {
        1 => {
            let Some(b) = buf.get(4..8) else {
                return Ok(None);
            };
            (
                SocksAddr::Ip(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
                8,
            )
        }
        3 => {
            let Some(&len) = buf.get(4) else {
                return Ok(None);
            };
            if len == 0 {
                return Err(SocksError::EmptyDomain);
            }
            let end = 5 + usize::from(len);
            let Some(name) = buf.get(5..end) else {
                return Ok(None);
            };
            (SocksAddr::Domain(name.to_vec()), end)
        }
        4 => {
            let Some(b) = buf.get(4..20) else {
                return Ok(None);
            };
            let mut octets = [0u8; 16];
            octets.copy_from_slice(b);
            (SocksAddr::Ip(IpAddr::V6(Ipv6Addr::from(octets))), 20)
        }
        other => return Err(SocksError::AddressType(other)),
    };
    let Some(p) = buf.get(at..at + 2) else {
        return Ok(None);
    };
    let port = u16::from_be_bytes([p[0], p[1]]);
    Ok(Some((
        SocksRequest {
            command,
            addr,
            port,
        },
        at + 2,
    )))
}

/// A reply: `bound` is BND.ADDR/BND.PORT (0.0.0.0:0 when None).
pub fn reply(code: u8, bound: Option<SocketAddr>) -> Vec<u8> {
    let bound = bound.unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut out = vec![VERSION, code, 0];
    match bound.ip() {
        IpAddr::V4(a) => {
            out.push(1);
            out.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            out.push(4);
            out.extend_from_slice(&a.octets());
        }
    }
    out.extend_from_slice(&bound.port().to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greetings() {
        assert_eq!(parse_greeting(b""), Ok(None));
        assert_eq!(parse_greeting(b"\x05"), Ok(None));
        assert_eq!(parse_greeting(b"\x05\x02\x00"), Ok(None));
        let (g, n) = parse_greeting(b"\x05\x02\x02\x00rest").unwrap().unwrap();
        assert_eq!((g.methods.as_slice(), n), (&[2u8, 0][..], 4));
        assert!(g.offers_no_auth());
        assert!(!parse_greeting(b"\x05\x01\x02")
            .unwrap()
            .unwrap()
            .0
            .offers_no_auth());
        assert_eq!(parse_greeting(b"\x04\x01\x00"), Err(SocksError::Version));
        assert_eq!(parse_greeting(b"\x05\x00"), Err(SocksError::NoMethods));
    }

    #[test]
    fn requests() {
        let (r, n) = parse_request(b"\x05\x01\x00\x03\x0aapi.gh.com\x01\xbbX")
            .unwrap()
            .unwrap();
        assert_eq!(n, 17);
        assert_eq!(r.command, CMD_CONNECT);
        assert_eq!(r.addr, SocksAddr::Domain(b"api.gh.com".to_vec()));
        assert_eq!(r.port, 443);
        let (r, n) = parse_request(b"\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50")
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.addr, r.port, n),
            (SocksAddr::Ip([127, 0, 0, 1].into()), 80, 10)
        );
        let mut v6 = b"\x05\x02\x00\x04".to_vec();
        v6.extend_from_slice(&[0; 15]);
        v6.extend_from_slice(&[1, 0, 22]);
        let (r, n) = parse_request(&v6).unwrap().unwrap();
        assert_eq!(
            (r.command, r.addr, r.port, n),
            (CMD_BIND, SocksAddr::Ip("::1".parse().unwrap()), 22, 22)
        );
        for i in 0..v6.len() {
            assert_eq!(parse_request(&v6[..i]), Ok(None));
        }
        assert_eq!(parse_request(b"\x04"), Err(SocksError::Version));
        assert_eq!(
            parse_request(b"\x05\x01\x01\x01"),
            Err(SocksError::Reserved)
        );
        assert_eq!(
            parse_request(b"\x05\x01\x00\x05"),
            Err(SocksError::AddressType(5))
        );
        assert_eq!(
            parse_request(b"\x05\x01\x00\x03\x00\x00\x50"),
            Err(SocksError::EmptyDomain)
        );
    }

    #[test]
    fn replies() {
        assert_eq!(
            reply(REP_NOT_ALLOWED, None),
            b"\x05\x02\x00\x01\x00\x00\x00\x00\x00\x00"
        );
        assert_eq!(
            reply(REP_SUCCEEDED, Some("127.0.0.1:8080".parse().unwrap())),
            b"\x05\x00\x00\x01\x7f\x00\x00\x01\x1f\x90"
        );
        assert_eq!(reply(0, Some("[::1]:1".parse().unwrap())).len(), 22);
    }
}
