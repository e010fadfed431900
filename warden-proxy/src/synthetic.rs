//! The sandbox's own resolver for transparent egress (DESIGN.md §6). A
//! sandboxed process that resolves a name itself asks this responder (on a
//! UDP socket inside the sandbox's network namespace, served by the daemon):
//!
//! - a name the allowlist names (on any port) is looked up **on the host**,
//!   by the daemon's resolver. When the host's answer is ordinary global
//!   addresses, the sandbox gets its IPv4 ones (`resolved`): a client that
//!   checks addresses itself before it connects or uses a proxy (the SSRF
//!   guards of fetching servers) sees what it would see unsandboxed. Every
//!   other answer (a private or loopback address, which only an entry with
//!   `private` reaches; IPv6 only; a failed lookup; addresses another name
//!   was given already) gets a **synthetic address** from 198.18.0.0/15
//!   (RFC 2544's benchmarking range, never routed on the internet), the same
//!   one for the whole session. The sandbox never learns a private address.
//!   Either way each address given out maps back to exactly one name
//!   ([`AddressBook`]), and a connection to it is decided for that name, by
//!   the proxy's decision path (which vets the addresses again);
//! - every other name gets `NXDOMAIN` at once, and **no query for it ever
//!   leaves the machine**: the allowlist decides before any lookup;
//! - `AAAA` and other types of an allowed name: an empty answer (`NOERROR`,
//!   no records: IPv4 only inside), so clients fall back to the `A` answer;
//! - what is not one well-formed standard query of class IN is `FORMERR`
//!   (several questions, a response, truncated bytes) or `NOTIMP` (another
//!   opcode); nothing is answered to what has not even a header.
//!
//! The message functions are pure ([`read`], [`Question::answer`]); [`serve`]
//! is the UDP loop, which looks names up concurrently.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use hickory_proto::serialize::binary::BinDecodable;
use tokio::net::UdpSocket;
use warden_core::policy::net::{address_class, canonical_ip};

use crate::resolve::Resolver;

/// The first address of the synthetic range, 198.18.0.0/15.
pub const RANGE_START: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
/// Its prefix length.
pub const RANGE_PREFIX: u8 = 15;
/// Seconds an answer may be cached: the addresses stay the name's for the
/// whole session, but a short TTL keeps a client asking (and so recorded)
/// rather than remembering across a policy change.
pub const TTL: u32 = 60;
/// How long the host's lookup of a name may take before the name gets a
/// synthetic address (under the 5 s a stub resolver waits by default).
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);
/// Queries looked up at once; more get `SERVFAIL` (a client retries).
pub const MAX_PENDING: usize = 64;

/// Whether `addr` is in 198.18.0.0/15.
pub fn is_synthetic(addr: Ipv4Addr) -> bool {
    u32::from(addr) >> (32 - RANGE_PREFIX) == u32::from(RANGE_START) >> (32 - RANGE_PREFIX)
}

/// The addresses one session's resolver gave out, and to which name: the
/// synthetic ones, handed out in order from 198.18.0.1 (the network and
/// broadcast addresses of the range are skipped) and stable per name, and
/// the host's own addresses of names that got them, each given to one name
/// only.
#[derive(Debug, Default)]
pub struct AddressBook {
    synthetic: HashMap<String, Ipv4Addr>,
    /// Names given host addresses.
    resolved: HashMap<String, Vec<Ipv4Addr>>,
    by_addr: HashMap<Ipv4Addr, String>,
    /// Synthetic offsets given out so far.
    used: u32,
    /// Host addresses given out so far.
    real: usize,
}

impl AddressBook {
    /// How many synthetic addresses the range holds for names.
    pub const CAPACITY: u32 = (1 << (32 - RANGE_PREFIX)) - 2;
    /// Host addresses remembered at most; beyond, names get synthetic ones.
    pub const MAX_RESOLVED: usize = 1 << 16;

    /// The synthetic address of `name` (lower-case, no trailing dot), given
    /// out on first use; `None` once the range is used up.
    pub fn synthetic_for(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(a) = self.synthetic.get(name) {
            return Some(*a);
        }
        if self.used >= Self::CAPACITY {
            return None;
        }
        self.used += 1;
        let addr = Ipv4Addr::from(u32::from(RANGE_START) + self.used);
        self.synthetic.insert(name.to_owned(), addr);
        self.by_addr.insert(addr, name.to_owned());
        Some(addr)
    }

    /// Of the host's addresses `host` of `name`, those that are (or now
    /// become) its own: not given to another name, and none at all for a
    /// name that has a synthetic address (it keeps it). Empty: the name is
    /// to get a synthetic address.
    pub fn claim(&mut self, name: &str, host: &[Ipv4Addr]) -> Vec<Ipv4Addr> {
        if self.synthetic.contains_key(name) {
            return Vec::new();
        }
        let mut mine = Vec::new();
        for a in host {
            match self.by_addr.get(a) {
                Some(n) if n == name => mine.push(*a),
                Some(_) => {}
                None if self.real < Self::MAX_RESOLVED && !is_synthetic(*a) => {
                    self.by_addr.insert(*a, name.to_owned());
                    self.resolved.entry(name.to_owned()).or_default().push(*a);
                    self.real += 1;
                    mine.push(*a);
                }
                None => {}
            }
        }
        mine
    }

    /// The name an address was given to.
    pub fn name_of(&self, addr: Ipv4Addr) -> Option<&str> {
        self.by_addr.get(&addr).map(String::as_str)
    }

    /// Names given an address.
    pub fn len(&self) -> usize {
        self.synthetic.len() + self.resolved.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What one query got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// An allowed name's synthetic address.
    Synthetic { name: String, addr: Ipv4Addr },
    /// An allowed name's own (global) addresses, as the host resolved them.
    Resolved { name: String, addrs: Vec<Ipv4Addr> },
    /// An allowed name asked for another type: an empty answer.
    NoData { name: String, qtype: u16 },
    /// A name the allowlist does not name.
    NxDomain { name: String },
    /// The range is used up: `SERVFAIL`.
    Exhausted { name: String },
    /// Too many lookups at once: `SERVFAIL`.
    Busy { name: String },
    /// Not one standard query of class IN.
    Malformed,
}

/// What a query needs: an answer now, or the host's lookup of an allowed
/// name first.
#[derive(Debug)]
pub enum Read {
    Reply(Vec<u8>, Outcome),
    Lookup(Question),
}

/// An `A` query for an allowed name, waiting for the host's lookup.
#[derive(Debug)]
pub struct Question {
    id: u16,
    query: Query,
    /// Lower-case, no trailing dot.
    pub name: String,
}

/// A response to query `id` (the question echoed) with `rcode` and `answers`.
fn reply(
    id: u16,
    rcode: ResponseCode,
    query: Option<Query>,
    answers: Vec<Record>,
) -> Option<Vec<u8>> {
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
}

/// Reads the query `msg` (bytes of one DNS message), deciding with `allowed`
/// (given the lower-case name without its trailing dot). `None`: not even a
/// header, so no answer.
pub fn read(msg: &[u8], allowed: &dyn Fn(&str) -> bool) -> Option<Read> {
    let id = u16::from_be_bytes([*msg.first()?, *msg.get(1)?]);
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
        return Some(Read::Reply(
            reply(id, rcode, None, vec![])?,
            Outcome::Malformed,
        ));
    };
    if query.query_class() != DNSClass::IN {
        return Some(Read::Reply(
            reply(id, ResponseCode::FormErr, Some(query), vec![])?,
            Outcome::Malformed,
        ));
    }
    let name = query.name().to_ascii().to_ascii_lowercase();
    let name = name.strip_suffix('.').unwrap_or(&name).to_owned();
    if name.is_empty() || !allowed(&name) {
        return Some(Read::Reply(
            reply(id, ResponseCode::NXDomain, Some(query), vec![])?,
            Outcome::NxDomain { name },
        ));
    }
    if query.query_type() != RecordType::A {
        let qtype = u16::from(query.query_type());
        return Some(Read::Reply(
            reply(id, ResponseCode::NoError, Some(query), vec![])?,
            Outcome::NoData { name, qtype },
        ));
    }
    Some(Read::Lookup(Question { id, query, name }))
}

/// The global IPv4 addresses of a host answer, or `None` when it holds a
/// non-global address (of either family) or no global IPv4 one.
fn global_v4(host: &[IpAddr]) -> Option<Vec<Ipv4Addr>> {
    let mut out = Vec::new();
    for ip in host {
        let ip = canonical_ip(*ip);
        if address_class(ip).is_some() {
            return None;
        }
        if let IpAddr::V4(a) = ip {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

impl Question {
    /// The answer, given the host's addresses of the name (`None`: the
    /// lookup failed), and what it was.
    pub fn answer(
        self,
        host: Option<&[IpAddr]>,
        book: &mut AddressBook,
    ) -> Option<(Vec<u8>, Outcome)> {
        let Question { id, query, name } = self;
        let record = |a: Ipv4Addr| Record::from_rdata(query.name().clone(), TTL, RData::A(A(a)));
        let own = host
            .and_then(global_v4)
            .map(|g| book.claim(&name, &g))
            .unwrap_or_default();
        if !own.is_empty() {
            let records = own.iter().map(|a| record(*a)).collect();
            return Some((
                reply(id, ResponseCode::NoError, Some(query), records)?,
                Outcome::Resolved { name, addrs: own },
            ));
        }
        let Some(addr) = book.synthetic_for(&name) else {
            return Some((
                reply(id, ResponseCode::ServFail, Some(query), vec![])?,
                Outcome::Exhausted { name },
            ));
        };
        let r = record(addr);
        Some((
            reply(id, ResponseCode::NoError, Some(query), vec![r])?,
            Outcome::Synthetic { name, addr },
        ))
    }

    /// `SERVFAIL`: too many lookups at once.
    fn busy(self) -> Option<(Vec<u8>, Outcome)> {
        let Question { id, query, name } = self;
        Some((
            reply(id, ResponseCode::ServFail, Some(query), vec![])?,
            Outcome::Busy { name },
        ))
    }
}

/// Whether the allowlist names a name ([`read`]'s `allowed`).
pub type Names = Arc<dyn Fn(&str) -> bool + Send + Sync>;
/// Hears each query's outcome and its asker.
pub type Hear = Arc<dyn Fn(SocketAddr, &Outcome) + Send + Sync>;

/// Answers queries on `socket` until it fails, looking allowed names up with
/// `host` (at most [`MAX_PENDING`] at once, each for at most
/// [`LOOKUP_TIMEOUT`]); `on` hears every outcome (with the asker), for the
/// audit records. Lookups in flight end with it.
pub async fn serve(
    socket: UdpSocket,
    allowed: Names,
    book: Arc<Mutex<AddressBook>>,
    host: Arc<dyn Resolver>,
    on: Hear,
) -> std::io::Result<()> {
    let socket = Arc::new(socket);
    let mut pending = tokio::task::JoinSet::new();
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, from) = socket.recv_from(&mut buf).await?;
        while pending.try_join_next().is_some() {}
        let got = match read(&buf[..n], &*allowed) {
            None => continue,
            Some(Read::Reply(bytes, outcome)) => (bytes, outcome),
            Some(Read::Lookup(q)) if pending.len() >= MAX_PENDING => match q.busy() {
                Some(r) => r,
                None => continue,
            },
            Some(Read::Lookup(q)) => {
                let (socket, book, host, on) =
                    (socket.clone(), book.clone(), host.clone(), on.clone());
                pending.spawn(async move {
                    let found =
                        tokio::time::timeout(LOOKUP_TIMEOUT, host.resolve(&q.name, 0)).await;
                    let found = match found {
                        Ok(Ok(a)) => Some(a),
                        _ => None,
                    };
                    let got = {
                        let mut book = book.lock().unwrap_or_else(|e| e.into_inner());
                        q.answer(found.as_deref(), &mut book)
                    };
                    if let Some((bytes, outcome)) = got {
                        on(from, &outcome);
                        let _ = socket.send_to(&bytes, from).await;
                    }
                });
                continue;
            }
        };
        on(from, &got.1);
        // A client gone meanwhile is not the responder's failure.
        let _ = socket.send_to(&got.0, from).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::{encode_query, parse_response, DnsError, TYPE_A, TYPE_AAAA};

    fn allowed(name: &str) -> bool {
        name == "api.example.com"
            || name == "cdn.example.com"
            || name.ends_with(".githubusercontent.com")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The whole answer of one query, `host` being the host's lookup.
    fn respond(
        msg: &[u8],
        host: Option<&[IpAddr]>,
        book: &mut AddressBook,
    ) -> Option<(Vec<u8>, Outcome)> {
        match read(msg, &allowed)? {
            Read::Reply(b, o) => Some((b, o)),
            Read::Lookup(q) => q.answer(host, book),
        }
    }

    fn ask(
        book: &mut AddressBook,
        name: &str,
        qtype: u16,
        host: Option<&[IpAddr]>,
    ) -> (Result<Vec<IpAddr>, DnsError>, Outcome) {
        let q = encode_query(7, name, qtype).unwrap();
        let (bytes, outcome) = respond(&q, host, book).unwrap();
        (parse_response(&bytes, 7, name, qtype), outcome)
    }

    const LOOPBACK: &[IpAddr] = &[IpAddr::V4(Ipv4Addr::LOCALHOST)];

    #[test]
    fn names_without_global_addresses_get_stable_synthetic_ones_that_map_back() {
        let mut n = AddressBook::default();
        // Loopback on the host (an entry with `private` reaches it).
        let (a, o) = ask(&mut n, "api.example.com", TYPE_A, Some(LOOPBACK));
        assert_eq!(a.unwrap(), vec![ip("198.18.0.1")]);
        assert!(matches!(o, Outcome::Synthetic { .. }));
        // A failed lookup.
        let (b, _) = ask(&mut n, "raw.githubusercontent.com", TYPE_A, None);
        assert_eq!(b.unwrap(), vec![ip("198.18.0.2")]);
        // The same name, any case, trailing dot: the same address, even once
        // the host has a global answer for it.
        let (c, _) = ask(
            &mut n,
            "API.Example.COM.",
            TYPE_A,
            Some(&[ip("140.82.112.5")]),
        );
        assert_eq!(c.unwrap(), vec![ip("198.18.0.1")]);
        assert_eq!(
            n.name_of(Ipv4Addr::new(198, 18, 0, 2)),
            Some("raw.githubusercontent.com")
        );
        assert_eq!(n.name_of(Ipv4Addr::new(198, 18, 0, 9)), None);
        assert_eq!(n.name_of(Ipv4Addr::new(140, 82, 112, 5)), None);
        // A mixed answer (a private address among global ones), IPv6 only, a
        // non-global IPv6 address: synthetic, the private address never shown.
        for (name, host) in [
            (
                "a.githubusercontent.com",
                vec![ip("140.82.112.6"), ip("10.1.2.3")],
            ),
            ("b.githubusercontent.com", vec![ip("2606:50c0:8000::154")]),
            (
                "c.githubusercontent.com",
                vec![ip("140.82.112.7"), ip("fd00::1")],
            ),
        ] {
            let (r, o) = ask(&mut n, name, TYPE_A, Some(&host));
            let got = r.unwrap();
            assert_eq!(got.len(), 1, "{name}: {got:?}");
            assert!(
                matches!(got[0], IpAddr::V4(a) if is_synthetic(a)),
                "{name}: {got:?}"
            );
            assert!(matches!(o, Outcome::Synthetic { .. }), "{o:?}");
        }
        assert_eq!(n.len(), 5);
        assert!(is_synthetic(Ipv4Addr::new(198, 19, 255, 254)));
        assert!(!is_synthetic(Ipv4Addr::new(198, 20, 0, 1)));
        assert!(!is_synthetic(Ipv4Addr::new(127, 0, 0, 1)));
    }

    #[test]
    fn names_with_global_addresses_get_them_each_address_for_one_name() {
        let mut n = AddressBook::default();
        let host = [
            ip("140.82.112.5"),
            ip("140.82.112.6"),
            ip("2606:50c0:8000::154"),
        ];
        let (a, o) = ask(&mut n, "api.example.com", TYPE_A, Some(&host));
        assert_eq!(a.unwrap(), vec![ip("140.82.112.5"), ip("140.82.112.6")]);
        assert_eq!(
            o,
            Outcome::Resolved {
                name: "api.example.com".into(),
                addrs: vec![
                    Ipv4Addr::new(140, 82, 112, 5),
                    Ipv4Addr::new(140, 82, 112, 6)
                ],
            }
        );
        assert_eq!(
            n.name_of(Ipv4Addr::new(140, 82, 112, 6)),
            Some("api.example.com")
        );
        // Another name sharing one address gets only the one it has alone...
        let (b, _) = ask(
            &mut n,
            "cdn.example.com",
            TYPE_A,
            Some(&[ip("140.82.112.6"), ip("151.101.1.1")]),
        );
        assert_eq!(b.unwrap(), vec![ip("151.101.1.1")]);
        assert_eq!(
            n.name_of(Ipv4Addr::new(140, 82, 112, 6)),
            Some("api.example.com")
        );
        // ...and one sharing all of them a synthetic address.
        let (c, o) = ask(
            &mut n,
            "x.githubusercontent.com",
            TYPE_A,
            Some(&[ip("151.101.1.1")]),
        );
        assert_eq!(c.unwrap(), vec![ip("198.18.0.1")]);
        assert!(matches!(o, Outcome::Synthetic { .. }));
        // The first name asked again, its host answer rotated: the new
        // address is its own too.
        let (d, _) = ask(
            &mut n,
            "api.example.com",
            TYPE_A,
            Some(&[ip("140.82.112.9")]),
        );
        assert_eq!(d.unwrap(), vec![ip("140.82.112.9")]);
        assert_eq!(
            n.name_of(Ipv4Addr::new(140, 82, 112, 5)),
            Some("api.example.com")
        );
        assert_eq!(n.len(), 3);
    }

    #[test]
    fn other_names_are_nxdomain_and_other_types_empty() {
        let mut n = AddressBook::default();
        let (r, o) = ask(&mut n, "evil.example", TYPE_A, Some(&[ip("140.82.112.5")]));
        assert_eq!(r, Err(DnsError::NxDomain));
        assert_eq!(
            o,
            Outcome::NxDomain {
                name: "evil.example".into()
            }
        );
        // The apex of a wildcard entry is not below it.
        let (r, _) = ask(&mut n, "githubusercontent.com", TYPE_A, None);
        assert_eq!(r, Err(DnsError::NxDomain));
        let (r, o) = ask(&mut n, "api.example.com", TYPE_AAAA, None);
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
        // Neither a denied name nor another type is looked up.
        for (name, qtype) in [("evil.example", TYPE_A), ("api.example.com", TYPE_AAAA)] {
            let q = encode_query(1, name, qtype).unwrap();
            assert!(
                matches!(read(&q, &allowed), Some(Read::Reply(..))),
                "{name}"
            );
        }
        let q = encode_query(1, "api.example.com", TYPE_A).unwrap();
        assert!(matches!(read(&q, &allowed), Some(Read::Lookup(q)) if q.name == "api.example.com"));
    }

    #[test]
    fn malformed_queries_get_formerr_or_nothing() {
        let mut n = AddressBook::default();
        assert!(respond(&[], None, &mut n).is_none());
        assert!(respond(&[1], None, &mut n).is_none());
        // A header only, cut after the id and flags.
        let (bytes, o) = respond(&[0, 9, 1, 0], None, &mut n).unwrap();
        assert_eq!(o, Outcome::Malformed);
        let m = Message::from_bytes(&bytes).unwrap();
        assert_eq!(m.metadata.id, 9);
        assert_eq!(m.metadata.response_code, ResponseCode::FormErr);
        // Two questions.
        let mut q = Message::new(3, MessageType::Query, OpCode::Query);
        for name in ["api.example.com.", "evil.example."] {
            q.add_query(Query::query(name.parse().unwrap(), RecordType::A));
        }
        let (bytes, o) = respond(&q.to_vec().unwrap(), None, &mut n).unwrap();
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
            respond(&r.to_vec().unwrap(), None, &mut n).unwrap().1,
            Outcome::Malformed
        );
        let mut s = Message::new(5, MessageType::Query, OpCode::Status);
        s.add_query(Query::query(
            "api.example.com.".parse().unwrap(),
            RecordType::A,
        ));
        let (bytes, _) = respond(&s.to_vec().unwrap(), None, &mut n).unwrap();
        assert_eq!(
            Message::from_bytes(&bytes).unwrap().metadata.response_code,
            ResponseCode::NotImp
        );
        assert!(n.is_empty());
    }

    #[test]
    fn the_range_runs_out_with_servfail_not_a_reused_address() {
        let mut n = AddressBook {
            used: AddressBook::CAPACITY - 1,
            ..AddressBook::default()
        };
        let last = n.synthetic_for("a.example").unwrap();
        assert_eq!(last, Ipv4Addr::new(198, 19, 255, 254));
        assert_eq!(n.synthetic_for("b.example"), None);
        assert_eq!(n.synthetic_for("a.example"), Some(last));
        let q = encode_query(1, "api.example.com", TYPE_A).unwrap();
        let (_, o) = respond(&q, None, &mut n).unwrap();
        assert_eq!(
            o,
            Outcome::Exhausted {
                name: "api.example.com".into()
            }
        );
        // Host addresses run out too: then names get synthetic ones.
        let mut n = AddressBook {
            real: AddressBook::MAX_RESOLVED,
            ..AddressBook::default()
        };
        assert!(n
            .claim("api.example.com", &[Ipv4Addr::new(140, 82, 112, 5)])
            .is_empty());
    }

    /// A host resolver answering from a table, counting what it is asked.
    struct Table(Mutex<Vec<String>>);

    impl Resolver for Table {
        fn resolve<'a>(
            &'a self,
            name: &'a str,
            _port: u16,
        ) -> crate::resolve::BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
            self.0.lock().unwrap().push(name.to_owned());
            Box::pin(async move {
                match name {
                    "api.example.com" => Ok(vec![ip("140.82.112.5")]),
                    "slow.githubusercontent.com" => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Ok(vec![])
                    }
                    _ => Ok(vec![ip("127.0.0.1")]),
                }
            })
        }
    }

    /// Over a real UDP socket, with the stub client the proxy uses: answers
    /// come back, a slow lookup holds up no other query, and only allowed
    /// names are looked up.
    #[tokio::test]
    async fn serves_over_udp() {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Outcome>>> = Arc::default();
        let record = seen.clone();
        let host = Arc::new(Table(Mutex::default()));
        let task = tokio::spawn(serve(
            socket,
            Arc::new(allowed),
            Arc::default(),
            host.clone(),
            Arc::new(move |_, o: &Outcome| record.lock().unwrap().push(o.clone())),
        ));
        let stub = crate::dns::DnsResolver::new(addr);
        let slow = tokio::spawn({
            let stub = crate::dns::DnsResolver::new(addr);
            async move { stub.resolve("slow.githubusercontent.com", 443).await }
        });
        let got = stub.resolve("api.example.com", 443).await.unwrap();
        assert_eq!(got, vec![ip("140.82.112.5")]);
        let got = stub
            .resolve("raw.githubusercontent.com", 443)
            .await
            .unwrap();
        assert_eq!(got, vec![ip("198.18.0.1")]);
        let err = stub.resolve("evil.example", 443).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
        let seen = seen.lock().unwrap().clone();
        assert!(
            seen.contains(&Outcome::NxDomain {
                name: "evil.example".into()
            }),
            "{seen:?}"
        );
        let asked = host.0.lock().unwrap().clone();
        assert!(!asked.iter().any(|n| n == "evil.example"), "{asked:?}");
        task.abort();
        slow.abort();
    }
}
