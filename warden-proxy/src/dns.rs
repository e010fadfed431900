//! A minimal DNS stub client ([`DnsResolver`]): A and AAAA queries over UDP to
//! one server, retried over TCP when truncated, CNAME chains followed within the
//! answer section. The messages are encoded and decoded with `hickory-proto`;
//! what this module adds is the strictness of a stub that must not be fooled:
//! a response counts only if it answers *this* query (id, one question with
//! our name, type and class), only the answer section is read, and a CNAME
//! chain is followed from the query name for at most [`MAX_CNAME_CHAIN`]
//! links. The message functions are pure and public for tests and fuzzing.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Header, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{DNSClass, Name as DnsName, RData, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, DecodeError, Restrict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::resolve::{BoxFuture, Resolver};

pub const TYPE_A: u16 = 1;
pub const TYPE_CNAME: u16 = 5;
pub const TYPE_AAAA: u16 = 28;
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
    /// The decoder's message, or what is wrong with a record it decoded.
    #[error("malformed response: {0}")]
    Malformed(String),
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

fn malformed(e: DecodeError) -> DnsError {
    DnsError::Malformed(e.to_string())
}

/// A name as lower-case labels.
type Name = Vec<Vec<u8>>;

/// Lower-case labels of a dotted name (trailing dot allowed), checked for DNS:
/// 1 to 63 printable ASCII bytes each, 253 in all. Stricter than hickory's
/// text parsers on purpose: no escapes, no IDNA (the proxy has normalised the
/// name already), nothing the policy matcher did not see.
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

/// The lower-case labels of a decoded name (DNS names compare without case).
fn lower(name: &DnsName) -> Name {
    name.iter().map(|l| l.to_ascii_lowercase()).collect()
}

/// A recursive query for `name` of type `qtype` with this id: one question,
/// RD set, nothing else (no EDNS).
pub fn encode_query(id: u16, name: &str, qtype: u16) -> Result<Vec<u8>, DnsError> {
    let name = DnsName::from_labels(labels(name)?).map_err(|_| DnsError::BadName)?;
    let mut msg = Message::new(id, MessageType::Query, OpCode::Query);
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(name, RecordType::from(qtype)));
    msg.to_vec().map_err(|_| DnsError::BadName)
}

/// Parses a response to the query (`id`, `name`, `qtype`): the addresses of
/// `qtype` for `name`, following CNAMEs in the answer section. `Mismatch` means
/// "not the answer to this query" (keep waiting); `Truncated` means retry over TCP.
///
/// Only the header, the question and the answer section are decoded; the
/// authority and additional sections are never read, and in the answer
/// section only the rdata of records this lookup uses (addresses of `qtype`
/// and CNAMEs, of class IN). Name pointers must point before the name they
/// continue (no loops), as hickory's decoder requires.
pub fn parse_response(
    msg: &[u8],
    id: u16,
    name: &str,
    qtype: u16,
) -> Result<Vec<IpAddr>, DnsError> {
    let want = labels(name)?;
    let mut d = BinDecoder::new(msg);
    // Shorter than a header, another id, not a response, another opcode,
    // not exactly one question: not ours.
    let header = Header::read(&mut d).map_err(|_| DnsError::Mismatch)?;
    if header.id != id
        || header.message_type != MessageType::Response
        || header.op_code != OpCode::Query
        || header.counts.queries != 1
    {
        return Err(DnsError::Mismatch);
    }
    // Another question: not ours either. (In this order: a cut-off question
    // with our name is malformed, one with another name a mismatch.)
    let qname = DnsName::read(&mut d).map_err(|_| DnsError::Mismatch)?;
    if lower(&qname) != want {
        return Err(DnsError::Mismatch);
    }
    if u16::from(RecordType::read(&mut d).map_err(malformed)?) != qtype {
        return Err(DnsError::Mismatch);
    }
    if DNSClass::read(&mut d).map_err(malformed)? != DNSClass::IN {
        return Err(DnsError::Mismatch);
    }
    if header.truncation {
        return Err(DnsError::Truncated);
    }
    match header.response_code.low() {
        0 => {}
        3 => return Err(DnsError::NxDomain),
        rcode => return Err(DnsError::Rcode(rcode)),
    }
    let mut cnames: Vec<(Name, Name)> = Vec::new();
    let mut addrs: Vec<(Name, IpAddr)> = Vec::new();
    for _ in 0..header.counts.answers {
        // The record's frame: owner, type, class, TTL, rdata length, and
        // rdata within the message.
        let owner = lower(&DnsName::read(&mut d).map_err(malformed)?);
        let rtype = RecordType::read(&mut d).map_err(malformed)?;
        let class = DNSClass::read(&mut d).map_err(malformed)?;
        d.read_u32().map_err(malformed)?;
        let rdlen = d.read_u16().map_err(malformed)?.unverified(/* checked by read_slice */);
        let start = d.index();
        d.read_slice(usize::from(rdlen)).map_err(malformed)?;
        if class != DNSClass::IN {
            continue;
        }
        // Only the rdata this lookup uses is decoded (hickory's decoders for
        // the other types never see these bytes): an address of the type
        // asked for, or a CNAME target. Either must fill its rdata exactly.
        // From a decoder over the whole message, since a target may point
        // back into it.
        let used = matches!(
            (rtype, qtype),
            (RecordType::A, TYPE_A) | (RecordType::AAAA, TYPE_AAAA) | (RecordType::CNAME, _)
        );
        if !used {
            continue;
        }
        let mut rd = BinDecoder::new(msg);
        rd.read_slice(start).map_err(malformed)?;
        match RData::read(&mut rd, rtype, Restrict::new(rdlen)).map_err(malformed)? {
            RData::A(a) => addrs.push((owner, IpAddr::V4(a.0))),
            RData::AAAA(a) => addrs.push((owner, IpAddr::V6(a.0))),
            RData::CNAME(target) => cnames.push((owner, lower(&target.0))),
            _ => return Err(DnsError::Malformed("rdata".into())),
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

    const CLASS_IN: u16 = 1;

    #[test]
    fn type_numbers_are_hickorys() {
        assert_eq!(u16::from(RecordType::A), TYPE_A);
        assert_eq!(u16::from(RecordType::CNAME), TYPE_CNAME);
        assert_eq!(u16::from(RecordType::AAAA), TYPE_AAAA);
        assert_eq!(u16::from(DNSClass::IN), CLASS_IN);
    }

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
    fn only_what_the_lookup_uses_is_decoded() {
        let q = encode_query(7, "a.example", TYPE_A).unwrap();
        let a = rr(b"\xc0\x0c", TYPE_A, &[1, 2, 3, 4]);
        let mut ch = rr(b"\xc0\x0c", TYPE_A, &[1, 2, 3]);
        ch[4..6].copy_from_slice(&3u16.to_be_bytes()); // class CH
        let skipped = [
            rr(b"\xc0\x0c", 16, b"\xff"), // a TXT whose string overruns its rdata
            ch,                           // any rdata in another class
            rr(b"\xc0\x0c", TYPE_AAAA, &[1, 2, 3, 4, 5]), // not the type asked for
            rr(b"\xc0\x0c", 0, b"\x01b\x00"), // type 0
        ];
        for s in &skipped {
            let r = response(&q, 0x8180, &[s.clone(), a.clone()]);
            assert_eq!(
                parse_response(&r, 7, "a.example", TYPE_A),
                Ok(vec!["1.2.3.4".parse().unwrap()]),
                "{s:02x?}"
            );
        }
        // The authority and additional sections are not read at all.
        let mut r = response(&q, 0x8180, std::slice::from_ref(&a));
        r[9] = 1;
        r[11] = 1;
        r.extend_from_slice(b"\xc0\xff garbage");
        assert_eq!(
            parse_response(&r, 7, "a.example", TYPE_A),
            Ok(vec!["1.2.3.4".parse().unwrap()])
        );
        // A CNAME's rdata must be exactly its name.
        let cname = rr(b"\xc0\x0c", TYPE_CNAME, b"\x01b\x00\x00");
        assert!(matches!(
            parse_response(&response(&q, 0x8180, &[cname]), 7, "a.example", TYPE_A),
            Err(DnsError::Malformed(_))
        ));
        // A pointer backwards into data whose labels run on into the name that
        // points there (the second owner, at 43, points at 28, inside the
        // first record): hickory refuses it (the hand-written parser before
        // it read a garbage name and skipped the record).
        let overlap = response(
            &q,
            0x8180,
            &[a.clone(), rr(b"\xc0\x1c", TYPE_A, &[5, 6, 7, 8])],
        );
        assert!(matches!(
            parse_response(&overlap, 7, "a.example", TYPE_A),
            Err(DnsError::Malformed(_))
        ));
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
