//! A minimal DNS stub client ([`DnsResolver`]): A and AAAA queries over UDP to
//! one server, retried over TCP when truncated, CNAME chains followed within the
//! answer section. The message functions are pure and public for tests.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::resolve::{BoxFuture, Resolver};

pub const TYPE_A: u16 = 1;
pub const TYPE_CNAME: u16 = 5;
pub const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
/// The most CNAME records followed from the query name.
pub const MAX_CNAME_CHAIN: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    #[error("invalid query name")]
    BadName,
    #[error("response does not match the query")]
    Mismatch,
    #[error("truncated response")]
    Truncated,
    #[error("no such name")]
    NxDomain,
    #[error("server answered rcode {0}")]
    Rcode(u8),
    #[error("malformed response: {0}")]
    Malformed(&'static str),
    #[error("CNAME chain longer than {MAX_CNAME_CHAIN}")]
    LongChain,
}

impl From<DnsError> for io::Error {
    fn from(e: DnsError) -> io::Error {
        let kind = match e {
            DnsError::NxDomain => io::ErrorKind::NotFound,
            DnsError::BadName => io::ErrorKind::InvalidInput,
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    }
}

/// A name as lower-case labels.
type Name = Vec<Vec<u8>>;

/// Lower-case labels of a dotted name (trailing dot allowed), checked for DNS.
fn labels(name: &str) -> Result<Name, DnsError> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > 253 {
        return Err(DnsError::BadName);
    }
    name.split('.')
        .map(|l| {
            if l.is_empty() || l.len() > 63 || !l.bytes().all(|b| b.is_ascii_graphic()) {
                Err(DnsError::BadName)
            } else {
                Ok(l.to_ascii_lowercase().into_bytes())
            }
        })
        .collect()
}

/// A recursive query for `name` of type `qtype` with this id.
pub fn encode_query(id: u16, name: &str, qtype: u16) -> Result<Vec<u8>, DnsError> {
    let mut out = Vec::with_capacity(18 + name.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&[0x01, 0x00]); // RD
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]); // one question
    for label in labels(name)? {
        out.push(label.len() as u8);
        out.extend_from_slice(&label);
    }
    out.push(0);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(out)
}

/// Reads a (possibly compressed) name at `pos`; returns its lower-case labels
/// and the position after it. Pointers must point backwards (no loops).
fn read_name(msg: &[u8], mut pos: usize) -> Result<(Name, usize), DnsError> {
    let mut labels = Vec::new();
    let mut total = 0;
    let mut after = None;
    loop {
        let &len = msg.get(pos).ok_or(DnsError::Malformed("name"))?;
        match len {
            0 => {
                return Ok((labels, after.unwrap_or(pos + 1)));
            }
            1..=63 => {
                let label = msg
                    .get(pos + 1..pos + 1 + usize::from(len))
                    .ok_or(DnsError::Malformed("name"))?;
                total += label.len() + 1;
                if total > 255 {
                    return Err(DnsError::Malformed("name too long"));
                }
                labels.push(label.to_ascii_lowercase());
                pos += 1 + usize::from(len);
            }
            0xc0..=0xff => {
                let &low = msg.get(pos + 1).ok_or(DnsError::Malformed("name"))?;
                let target = (usize::from(len & 0x3f) << 8) | usize::from(low);
                if target >= pos {
                    return Err(DnsError::Malformed("forward name pointer"));
                }
                after.get_or_insert(pos + 2);
                pos = target;
            }
            _ => return Err(DnsError::Malformed("label type")),
        }
    }
}

fn u16_at(msg: &[u8], pos: usize) -> Result<u16, DnsError> {
    msg.get(pos..pos + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .ok_or(DnsError::Malformed("short"))
}

/// Parses a response to the query (`id`, `name`, `qtype`): the addresses of
/// `qtype` for `name`, following CNAMEs in the answer section. `Mismatch` means
/// "not the answer to this query" (keep waiting); `Truncated` means retry over TCP.
pub fn parse_response(
    msg: &[u8],
    id: u16,
    name: &str,
    qtype: u16,
) -> Result<Vec<IpAddr>, DnsError> {
    let want = labels(name)?;
    if msg.len() < 12 {
        return Err(DnsError::Mismatch);
    }
    let flags = u16_at(msg, 2)?;
    if u16_at(msg, 0)? != id || flags & 0x8000 == 0 || (flags >> 11) & 0xf != 0 {
        return Err(DnsError::Mismatch);
    }
    if u16_at(msg, 4)? != 1 {
        return Err(DnsError::Mismatch);
    }
    let (qname, pos) = read_name(msg, 12).map_err(|_| DnsError::Mismatch)?;
    if qname != want || u16_at(msg, pos)? != qtype || u16_at(msg, pos + 2)? != CLASS_IN {
        return Err(DnsError::Mismatch);
    }
    if flags & 0x0200 != 0 {
        return Err(DnsError::Truncated);
    }
    match (flags & 0xf) as u8 {
        0 => {}
        3 => return Err(DnsError::NxDomain),
        rcode => return Err(DnsError::Rcode(rcode)),
    }
    let ancount = u16_at(msg, 6)?;
    let mut pos = pos + 4;
    let mut cnames: Vec<(Name, Name)> = Vec::new();
    let mut addrs: Vec<(Name, IpAddr)> = Vec::new();
    for _ in 0..ancount {
        let (owner, at) = read_name(msg, pos)?;
        let rtype = u16_at(msg, at)?;
        let class = u16_at(msg, at + 2)?;
        let rdlen = usize::from(u16_at(msg, at + 8)?);
        let start = at + 10;
        let rdata = msg
            .get(start..start + rdlen)
            .ok_or(DnsError::Malformed("rdata"))?;
        pos = start + rdlen;
        if class != CLASS_IN {
            continue;
        }
        match (rtype, rdata.len()) {
            (TYPE_A, 4) if qtype == TYPE_A => {
                let ip = Ipv4Addr::new(rdata[0], rdata[1], rdata[2], rdata[3]);
                addrs.push((owner, IpAddr::V4(ip)));
            }
            (TYPE_AAAA, 16) if qtype == TYPE_AAAA => {
                let mut o = [0u8; 16];
                o.copy_from_slice(rdata);
                addrs.push((owner, IpAddr::V6(Ipv6Addr::from(o))));
            }
            (TYPE_A, _) | (TYPE_AAAA, _) if rtype == qtype => {
                return Err(DnsError::Malformed("address length"))
            }
            (TYPE_CNAME, _) => {
                let (target, end) = read_name(msg, start)?;
                if end != start + rdlen {
                    return Err(DnsError::Malformed("cname length"));
                }
                cnames.push((owner, target));
            }
            _ => {}
        }
    }
    let mut current = want;
    for _ in 0..=MAX_CNAME_CHAIN {
        let found: Vec<IpAddr> = addrs
            .iter()
            .filter(|(owner, _)| *owner == current)
            .map(|(_, ip)| *ip)
            .collect();
        if !found.is_empty() {
            return Ok(found);
        }
        match cnames.iter().find(|(owner, _)| *owner == current) {
            Some((_, target)) => current = target.clone(),
            None => return Ok(Vec::new()),
        }
    }
    Err(DnsError::LongChain)
}

/// A DNS stub client asking one server (the daemon's `--dns ADDR:PORT`).
#[derive(Debug, Clone)]
pub struct DnsResolver {
    server: SocketAddr,
    timeout: Duration,
}

impl DnsResolver {
    /// Queries go to `server`; the whole lookup (A and AAAA in parallel, TCP
    /// retries included) is bounded by 2 s.
    pub fn new(server: SocketAddr) -> Self {
        DnsResolver {
            server,
            timeout: Duration::from_secs(2),
        }
    }

    /// Changes the bound of one lookup.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn server(&self) -> SocketAddr {
        self.server
    }

    async fn query(&self, name: &str, qtype: u16) -> io::Result<Vec<IpAddr>> {
        let mut id = [0u8; 2];
        getrandom::fill(&mut id).map_err(|e| io::Error::other(e.to_string()))?;
        let id = u16::from_be_bytes(id);
        let query = encode_query(id, name, qtype)?;
        let bind: SocketAddr = if self.server.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(bind).await?;
        sock.connect(self.server).await?;
        sock.send(&query).await?;
        let mut buf = vec![0u8; 65535];
        loop {
            let n = sock.recv(&mut buf).await?;
            match parse_response(&buf[..n], id, name, qtype) {
                Err(DnsError::Mismatch) => continue,
                Err(DnsError::Truncated) => return self.query_tcp(&query, id, name, qtype).await,
                other => return Ok(other?),
            }
        }
    }

    async fn query_tcp(
        &self,
        query: &[u8],
        id: u16,
        name: &str,
        qtype: u16,
    ) -> io::Result<Vec<IpAddr>> {
        let mut stream = TcpStream::connect(self.server).await?;
        let mut framed = (query.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(query);
        stream.write_all(&framed).await?;
        let len = stream.read_u16().await?;
        let mut msg = vec![0u8; usize::from(len)];
        stream.read_exact(&mut msg).await?;
        Ok(parse_response(&msg, id, name, qtype)?)
    }
}

impl Resolver for DnsResolver {
    fn resolve<'a>(&'a self, name: &'a str, _port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let both =
                async { tokio::join!(self.query(name, TYPE_A), self.query(name, TYPE_AAAA)) };
            let (v4, v6) = tokio::time::timeout(self.timeout, both)
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "dns: no answer in time"))?;
            let mut out = Vec::new();
            let mut error = None;
            for r in [v4, v6] {
                match r {
                    Ok(ips) => out.extend(ips),
                    Err(e) => {
                        error.get_or_insert(e);
                    }
                }
            }
            match (out.is_empty(), error) {
                (true, Some(e)) => Err(e),
                (true, None) => Err(io::Error::new(io::ErrorKind::NotFound, "dns: no addresses")),
                (false, _) => Ok(out),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response to `q` with the given raw answer records appended.
    fn response(q: &[u8], flags: u16, answers: &[Vec<u8>]) -> Vec<u8> {
        let mut r = q.to_vec();
        r[2..4].copy_from_slice(&flags.to_be_bytes());
        r[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
        for a in answers {
            r.extend_from_slice(a);
        }
        r
    }

    fn rr(owner: &[u8], rtype: u16, rdata: &[u8]) -> Vec<u8> {
        let mut r = owner.to_vec();
        r.extend_from_slice(&rtype.to_be_bytes());
        r.extend_from_slice(&CLASS_IN.to_be_bytes());
        r.extend_from_slice(&[0, 0, 0, 60]);
        r.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        r.extend_from_slice(rdata);
        r
    }

    #[test]
    fn query_encoding() {
        let q = encode_query(0x1234, "Api.GitHub.com.", TYPE_A).unwrap();
        assert_eq!(
            &q[..12],
            b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
        );
        assert_eq!(&q[12..], b"\x03api\x06github\x03com\x00\x00\x01\x00\x01");
        assert!(encode_query(1, "", TYPE_A).is_err());
        assert!(encode_query(1, "a..b", TYPE_A).is_err());
        assert!(encode_query(1, &"a".repeat(64), TYPE_A).is_err());
    }

    #[test]
    fn answers_and_cname_chains() {
        let q = encode_query(7, "a.example", TYPE_A).unwrap();
        // Owner by pointer to the question name (offset 12).
        let r = response(
            &q,
            0x8180,
            &[
                rr(b"\xc0\x0c", TYPE_A, &[1, 2, 3, 4]),
                rr(b"\xc0\x0c", TYPE_A, &[5, 6, 7, 8]),
            ],
        );
        assert_eq!(
            parse_response(&r, 7, "a.example", TYPE_A),
            Ok(vec!["1.2.3.4".parse().unwrap(), "5.6.7.8".parse().unwrap()])
        );
        // a.example CNAME b.other; b.other A 9.9.9.9; an unrelated A is ignored.
        let r = response(
            &q,
            0x8180,
            &[
                rr(b"\xc0\x0c", TYPE_CNAME, b"\x01b\x05other\x00"),
                rr(b"\x01x\x05other\x00", TYPE_A, &[6, 6, 6, 6]),
                rr(b"\x01B\x05OTHER\x00", TYPE_A, &[9, 9, 9, 9]),
            ],
        );
        assert_eq!(
            parse_response(&r, 7, "a.example", TYPE_A),
            Ok(vec!["9.9.9.9".parse().unwrap()])
        );
        // A CNAME loop ends in an error, not a hang.
        let r = response(&q, 0x8180, &[rr(b"\xc0\x0c", TYPE_CNAME, b"\xc0\x0c")]);
        assert_eq!(
            parse_response(&r, 7, "a.example", TYPE_A),
            Err(DnsError::LongChain)
        );
        // No data.
        assert_eq!(
            parse_response(&response(&q, 0x8180, &[]), 7, "a.example", TYPE_A),
            Ok(vec![])
        );
    }

    #[test]
    fn mismatches_and_errors() {
        let q = encode_query(7, "a.example", TYPE_A).unwrap();
        let ok = response(&q, 0x8180, &[rr(b"\xc0\x0c", TYPE_A, &[1, 2, 3, 4])]);
        assert_eq!(
            parse_response(&ok, 8, "a.example", TYPE_A),
            Err(DnsError::Mismatch)
        );
        assert_eq!(
            parse_response(&ok, 7, "b.example", TYPE_A),
            Err(DnsError::Mismatch)
        );
        assert_eq!(
            parse_response(&ok, 7, "a.example", TYPE_AAAA),
            Err(DnsError::Mismatch)
        );
        assert_eq!(
            parse_response(&q, 7, "a.example", TYPE_A),
            Err(DnsError::Mismatch)
        ); // QR=0
        assert_eq!(
            parse_response(&ok[..5], 7, "a.example", TYPE_A),
            Err(DnsError::Mismatch)
        );
        assert_eq!(
            parse_response(&response(&q, 0x8183, &[]), 7, "a.example", TYPE_A),
            Err(DnsError::NxDomain)
        );
        assert_eq!(
            parse_response(&response(&q, 0x8182, &[]), 7, "a.example", TYPE_A),
            Err(DnsError::Rcode(2))
        );
        assert_eq!(
            parse_response(&response(&q, 0x8380, &[]), 7, "a.example", TYPE_A),
            Err(DnsError::Truncated)
        );
        let bad = response(&q, 0x8180, &[rr(b"\xc0\x0c", TYPE_A, &[1, 2, 3])]);
        assert!(matches!(
            parse_response(&bad, 7, "a.example", TYPE_A),
            Err(DnsError::Malformed(_))
        ));
        let fwd = response(&q, 0x8180, &[rr(b"\xc0\xff", TYPE_A, &[1, 2, 3, 4])]);
        assert!(matches!(
            parse_response(&fwd, 7, "a.example", TYPE_A),
            Err(DnsError::Malformed(_))
        ));
        let short = &ok[..ok.len() - 2];
        assert!(matches!(
            parse_response(short, 7, "a.example", TYPE_A),
            Err(DnsError::Malformed(_))
        ));
    }
}
