//! The sandbox's own resolver for transparent egress (DESIGN.md §6; not yet
//! wired into sessions: the connect hand-over that uses its addresses is the
//! next step). A sandboxed process that resolves a name itself asks this
//! responder (on a UDP socket inside the sandbox's network namespace, served
//! by the daemon):
//!
//! - a name the allowlist names (on any port) gets a **synthetic address**
//!   from 198.18.0.0/15 (RFC 2544's benchmarking range, never routed on the
//!   internet), the same one for the whole session ([`SyntheticNames`]), so a
//!   later connection to it maps back to exactly that name;
//! - every other name gets `NXDOMAIN` at once, and **no query ever leaves
//!   the machine**: the responder answers from the allowlist alone (the
//!   daemon resolves an allowed name on the host only when a connection to
//!   its synthetic address is made, through the proxy's decision path);
//! - `AAAA` and other types of an allowed name: an empty answer (`NOERROR`,
//!   no records: IPv4 only for now), so clients fall back to the `A` answer;
//! - what is not one well-formed standard query of class IN is `FORMERR`
//!   (several questions, a response, truncated bytes) or `NOTIMP` (another
//!   opcode); nothing is answered to what has not even a header.
//!
//! The message functions are pure; [`serve`] is the UDP loop.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use hickory_proto::serialize::binary::BinDecodable;
use tokio::net::UdpSocket;

/// The first address of the synthetic range, 198.18.0.0/15.
pub const RANGE_START: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
/// Its prefix length.
pub const RANGE_PREFIX: u8 = 15;
/// Seconds a synthetic answer may be cached: the address stays the name's for
/// the whole session, but a short TTL keeps a client asking (and so
/// recorded) rather than remembering across a policy change.
pub const TTL: u32 = 60;

/// Whether `addr` is in 198.18.0.0/15.
pub fn is_synthetic(addr: Ipv4Addr) -> bool {
    u32::from(addr) >> (32 - RANGE_PREFIX) == u32::from(RANGE_START) >> (32 - RANGE_PREFIX)
}

/// The synthetic addresses of one session: handed out in order from
/// 198.18.0.1 (the network and broadcast addresses of the range are
/// skipped), stable per name, and mapped back.
#[derive(Debug, Default)]
pub struct SyntheticNames {
    by_name: HashMap<String, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, String>,
    /// Offsets given out so far.
    used: u32,
}

impl SyntheticNames {
    /// How many addresses the range holds for names.
    pub const CAPACITY: u32 = (1 << (32 - RANGE_PREFIX)) - 2;

    /// The address of `name` (lower-case, no trailing dot), given out on
    /// first use; `None` once the range is used up.
    pub fn address_for(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(a) = self.by_name.get(name) {
            return Some(*a);
        }
        if self.used >= Self::CAPACITY {
            return None;
        }
        self.used += 1;
        let addr = Ipv4Addr::from(u32::from(RANGE_START) + self.used);
        self.by_name.insert(name.to_owned(), addr);
        self.by_addr.insert(addr, name.to_owned());
        Some(addr)
    }

    /// The name a synthetic address was given to.
    pub fn name_of(&self, addr: Ipv4Addr) -> Option<&str> {
        self.by_addr.get(&addr).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// What one query got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// An allowed name's synthetic address.
    Synthetic { name: String, addr: Ipv4Addr },
    /// An allowed name asked for another type: an empty answer.
    NoData { name: String, qtype: u16 },
    /// A name the allowlist does not name.
    NxDomain { name: String },
    /// The range is used up: `SERVFAIL`.
    Exhausted { name: String },
    /// Not one standard query of class IN.
    Malformed,
}

/// The answer to the query `msg` (bytes of one DNS message), deciding with
/// `allowed` (given the lower-case name without its trailing dot), and what
/// it was. `None`: not even a header, so no answer.
pub fn answer(
    msg: &[u8],
    allowed: &dyn Fn(&str) -> bool,
    names: &mut SyntheticNames,
) -> Option<(Vec<u8>, Outcome)> {
    let id = u16::from_be_bytes([*msg.first()?, *msg.get(1)?]);
    let reply = |rcode: ResponseCode, query: Option<Query>, answers: Vec<Record>| {
        let mut m = Message::new(id, MessageType::Response, OpCode::Query);
        m.metadata.authoritative = true;
        m.metadata.recursion_desired = true;
        m.metadata.recursion_available = true;
        m.metadata.response_code = rcode;
        if let Some(q) = query {
            m.add_query(q);
        }
        for a in answers {
            m.add_answer(a);
        }
        m.to_vec().ok()
    };
    let parsed = Message::from_bytes(msg).ok();
    let Some(query) = parsed.as_ref().and_then(|m| {
        let ok = m.metadata.message_type == MessageType::Query
            && m.metadata.op_code == OpCode::Query
            && m.queries.len() == 1
            && m.answers.is_empty()
            && m.authorities.is_empty();
        ok.then(|| m.queries[0].clone())
    }) else {
        let rcode = match parsed.as_ref().map(|m| m.metadata.op_code) {
            Some(op) if op != OpCode::Query => ResponseCode::NotImp,
            _ => ResponseCode::FormErr,
        };
        return Some((reply(rcode, None, vec![])?, Outcome::Malformed));
    };
    if query.query_class() != DNSClass::IN {
        return Some((
            reply(ResponseCode::FormErr, Some(query), vec![])?,
            Outcome::Malformed,
        ));
    }
    let name = query.name().to_ascii().to_ascii_lowercase();
    let name = name.strip_suffix('.').unwrap_or(&name).to_owned();
    if name.is_empty() || !allowed(&name) {
        return Some((
            reply(ResponseCode::NXDomain, Some(query), vec![])?,
            Outcome::NxDomain { name },
        ));
    }
    if query.query_type() != RecordType::A {
        let qtype = u16::from(query.query_type());
        return Some((
            reply(ResponseCode::NoError, Some(query), vec![])?,
            Outcome::NoData { name, qtype },
        ));
    }
    let Some(addr) = names.address_for(&name) else {
        return Some((
            reply(ResponseCode::ServFail, Some(query), vec![])?,
            Outcome::Exhausted { name },
        ));
    };
    let record = Record::from_rdata(query.name().clone(), TTL, RData::A(A(addr)));
    Some((
        reply(ResponseCode::NoError, Some(query), vec![record])?,
        Outcome::Synthetic { name, addr },
    ))
}

/// Whether the allowlist names a name ([`answer`]'s `allowed`).
pub type Names = Arc<dyn Fn(&str) -> bool + Send + Sync>;
/// Hears each query's outcome and its asker.
pub type Hear = Arc<dyn Fn(SocketAddr, &Outcome) + Send + Sync>;

/// Answers queries on `socket` until it fails; `on` hears every outcome
/// (with the asker), for the audit records.
pub async fn serve(
    socket: UdpSocket,
    allowed: Names,
    names: Arc<Mutex<SyntheticNames>>,
    on: Hear,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, from) = socket.recv_from(&mut buf).await?;
        let got = {
            let mut names = names.lock().unwrap_or_else(|e| e.into_inner());
            answer(&buf[..n], &*allowed, &mut names)
        };
        if let Some((bytes, outcome)) = got {
            on(from, &outcome);
            // A client gone meanwhile is not the responder's failure.
            let _ = socket.send_to(&bytes, from).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::{encode_query, parse_response, DnsError, TYPE_A, TYPE_AAAA};
    use std::net::IpAddr;

    fn allowed(name: &str) -> bool {
        name == "api.example.com" || name.ends_with(".githubusercontent.com")
    }

    fn ask(
        names: &mut SyntheticNames,
        name: &str,
        qtype: u16,
    ) -> (Result<Vec<IpAddr>, DnsError>, Outcome) {
        let q = encode_query(7, name, qtype).unwrap();
        let (bytes, outcome) = answer(&q, &allowed, names).unwrap();
        (parse_response(&bytes, 7, name, qtype), outcome)
    }

    #[test]
    fn allowed_names_get_stable_synthetic_addresses_and_map_back() {
        let mut n = SyntheticNames::default();
        let (a, o) = ask(&mut n, "api.example.com", TYPE_A);
        assert_eq!(a.unwrap(), vec![IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1))]);
        assert!(matches!(o, Outcome::Synthetic { .. }));
        let (b, _) = ask(&mut n, "raw.githubusercontent.com", TYPE_A);
        assert_eq!(b.unwrap(), vec![IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2))]);
        // The same name, any case, trailing dot: the same address.
        let (c, _) = ask(&mut n, "API.Example.COM.", TYPE_A);
        assert_eq!(c.unwrap(), vec![IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1))]);
        assert_eq!(
            n.name_of(Ipv4Addr::new(198, 18, 0, 2)),
            Some("raw.githubusercontent.com")
        );
        assert_eq!(n.name_of(Ipv4Addr::new(198, 18, 0, 9)), None);
        assert_eq!(n.len(), 2);
        assert!(is_synthetic(Ipv4Addr::new(198, 19, 255, 254)));
        assert!(!is_synthetic(Ipv4Addr::new(198, 20, 0, 1)));
        assert!(!is_synthetic(Ipv4Addr::new(127, 0, 0, 1)));
    }

    #[test]
    fn other_names_are_nxdomain_and_other_types_empty() {
        let mut n = SyntheticNames::default();
        let (r, o) = ask(&mut n, "evil.example", TYPE_A);
        assert_eq!(r, Err(DnsError::NxDomain));
        assert_eq!(
            o,
            Outcome::NxDomain {
                name: "evil.example".into()
            }
        );
        // The apex of a wildcard entry is not below it.
        let (r, _) = ask(&mut n, "githubusercontent.com", TYPE_A);
        assert_eq!(r, Err(DnsError::NxDomain));
        let (r, o) = ask(&mut n, "api.example.com", TYPE_AAAA);
        assert_eq!(r.unwrap(), Vec::<IpAddr>::new());
        assert_eq!(
            o,
            Outcome::NoData {
                name: "api.example.com".into(),
                qtype: TYPE_AAAA
            }
        );
        assert!(
            n.is_empty(),
            "no address handed out for AAAA or denied names"
        );
    }

    #[test]
    fn malformed_queries_get_formerr_or_nothing() {
        let mut n = SyntheticNames::default();
        assert!(answer(&[], &allowed, &mut n).is_none());
        assert!(answer(&[1], &allowed, &mut n).is_none());
        // A header only, cut after the id and flags.
        let (bytes, o) = answer(&[0, 9, 1, 0], &allowed, &mut n).unwrap();
        assert_eq!(o, Outcome::Malformed);
        let m = Message::from_bytes(&bytes).unwrap();
        assert_eq!(m.metadata.id, 9);
        assert_eq!(m.metadata.response_code, ResponseCode::FormErr);
        // Two questions.
        let mut q = Message::new(3, MessageType::Query, OpCode::Query);
        for name in ["api.example.com.", "evil.example."] {
            q.add_query(Query::query(name.parse().unwrap(), RecordType::A));
        }
        let (bytes, o) = answer(&q.to_vec().unwrap(), &allowed, &mut n).unwrap();
        assert_eq!(o, Outcome::Malformed);
        assert_eq!(
            Message::from_bytes(&bytes).unwrap().metadata.response_code,
            ResponseCode::FormErr
        );
        // A response sent to us, and another opcode.
        let mut r = Message::new(4, MessageType::Response, OpCode::Query);
        r.add_query(Query::query(
            "api.example.com.".parse().unwrap(),
            RecordType::A,
        ));
        assert_eq!(
            answer(&r.to_vec().unwrap(), &allowed, &mut n).unwrap().1,
            Outcome::Malformed
        );
        let mut s = Message::new(5, MessageType::Query, OpCode::Status);
        s.add_query(Query::query(
            "api.example.com.".parse().unwrap(),
            RecordType::A,
        ));
        let (bytes, _) = answer(&s.to_vec().unwrap(), &allowed, &mut n).unwrap();
        assert_eq!(
            Message::from_bytes(&bytes).unwrap().metadata.response_code,
            ResponseCode::NotImp
        );
        assert!(n.is_empty());
    }

    #[test]
    fn the_range_runs_out_with_servfail_not_a_reused_address() {
        let mut n = SyntheticNames {
            used: SyntheticNames::CAPACITY - 1,
            ..SyntheticNames::default()
        };
        let last = n.address_for("a.example").unwrap();
        assert_eq!(last, Ipv4Addr::new(198, 19, 255, 254));
        assert_eq!(n.address_for("b.example"), None);
        assert_eq!(n.address_for("a.example"), Some(last));
        let q = encode_query(1, "api.example.com", TYPE_A).unwrap();
        let (_, o) = answer(&q, &allowed, &mut n).unwrap();
        assert_eq!(
            o,
            Outcome::Exhausted {
                name: "api.example.com".into()
            }
        );
    }

    /// Over a real UDP socket, with the stub client the proxy uses: answers
    /// come back, and nothing is sent anywhere but to the asker.
    #[tokio::test]
    async fn serves_over_udp() {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Outcome>>> = Arc::default();
        let record = seen.clone();
        let task = tokio::spawn(serve(
            socket,
            Arc::new(allowed),
            Arc::default(),
            Arc::new(move |_, o: &Outcome| record.lock().unwrap().push(o.clone())),
        ));
        use crate::resolve::Resolver;
        let stub = crate::dns::DnsResolver::new(addr);
        let got = stub.resolve("api.example.com", 443).await.unwrap();
        assert_eq!(got, vec![IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1))]);
        let err = stub.resolve("evil.example", 443).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
        let seen = seen.lock().unwrap().clone();
        assert!(
            seen.contains(&Outcome::NxDomain {
                name: "evil.example".into()
            }),
            "{seen:?}"
        );
        task.abort();
    }
}
