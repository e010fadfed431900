//! `DnsResolver` against a recording DNS server on loopback (UDP, and TCP for
//! truncated answers), alone and as the proxy's resolver.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use warden_core::policy::net::NetworkPolicy;
use warden_proxy::{DnsResolver, ProxyConfig, Resolver};

/// How the server answers one name.
#[derive(Clone, Default)]
struct Zone {
    a: Vec<[u8; 4]>,
    aaaa: Vec<[u8; 16]>,
    /// Answer with a CNAME to this name, followed by the target's records.
    cname: Option<(String, Box<Zone>)>,
    nxdomain: bool,
    /// Set TC over UDP (the full answer comes over TCP).
    truncate: bool,
    /// Send a response with a wrong id (and one for another name) first.
    decoys: bool,
    /// Never answer.
    silent: bool,
}

/// (transport, name, type) of one query received.
type Query = (&'static str, String, u16);

/// A DNS server for tests: answers A/AAAA from a table, records every query
/// as (transport, name, type).
struct DnsServer {
    addr: SocketAddr,
    queries: Arc<Mutex<Vec<Query>>>,
}

impl DnsServer {
    async fn start(zones: HashMap<&'static str, Zone>) -> DnsServer {
        // UDP and TCP on the same port.
        let (udp, tcp) = loop {
            let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            if let Ok(tcp) = TcpListener::bind(udp.local_addr().unwrap()).await {
                break (udp, tcp);
            }
        };
        let addr = udp.local_addr().unwrap();
        let zones: Arc<HashMap<String, Zone>> =
            Arc::new(zones.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        let queries = Arc::new(Mutex::new(Vec::new()));
        let (z, q) = (zones.clone(), queries.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, peer)) = udp.recv_from(&mut buf).await else {
                    return;
                };
                let Some((id, name, qtype, question)) = parse_query(&buf[..n]) else {
                    continue;
                };
                q.lock().unwrap().push(("udp", name.clone(), qtype));
                let zone = z.get(&name).cloned().unwrap_or(Zone {
                    nxdomain: true,
                    ..Zone::default()
                });
                if zone.silent {
                    continue;
                }
                if zone.decoys {
                    let wrong = answer(id.wrapping_add(1), &question, qtype, &zone, false);
                    let _ = udp.send_to(&wrong, peer).await;
                    let other = parse_query(&query_for(id, "other.test", qtype)).unwrap().3;
                    let _ = udp
                        .send_to(&answer(id, &other, qtype, &zone, false), peer)
                        .await;
                }
                let msg = answer(id, &question, qtype, &zone, zone.truncate);
                let _ = udp.send_to(&msg, peer).await;
            }
        });
        let (z, q) = (zones, queries.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = tcp.accept().await else {
                    return;
                };
                let (z, q) = (z.clone(), q.clone());
                tokio::spawn(async move {
                    let Ok(len) = s.read_u16().await else { return };
                    let mut msg = vec![0u8; len as usize];
                    if s.read_exact(&mut msg).await.is_err() {
                        return;
                    }
                    let Some((id, name, qtype, question)) = parse_query(&msg) else {
                        return;
                    };
                    q.lock().unwrap().push(("tcp", name.clone(), qtype));
                    let zone = z.get(&name).cloned().unwrap_or_default();
                    let out = answer(id, &question, qtype, &zone, false);
                    let _ = s.write_u16(out.len() as u16).await;
                    let _ = s.write_all(&out).await;
                });
            }
        });
        DnsServer { addr, queries }
    }

    fn queries(&self) -> Vec<Query> {
        self.queries.lock().unwrap().clone()
    }
}

fn query_for(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for l in name.split('.') {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    q
}

/// (id, lower-case name, qtype, the question section bytes).
fn parse_query(msg: &[u8]) -> Option<(u16, String, u16, Vec<u8>)> {
    let id = u16::from_be_bytes([*msg.first()?, *msg.get(1)?]);
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = *msg.get(pos)? as usize;
        pos += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(msg.get(pos..pos + len)?).to_ascii_lowercase());
        pos += len;
    }
    let qtype = u16::from_be_bytes([*msg.get(pos)?, *msg.get(pos + 1)?]);
    Some((id, labels.join("."), qtype, msg.get(12..pos + 4)?.to_vec()))
}

fn encode_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for l in name.split('.') {
        out.push(l.len() as u8);
        out.extend_from_slice(l.as_bytes());
    }
    out.push(0);
    out
}

fn rr(owner: &[u8], rtype: u16, rdata: &[u8]) -> Vec<u8> {
    let mut r = owner.to_vec();
    r.extend_from_slice(&rtype.to_be_bytes());
    r.extend_from_slice(&[0, 1, 0, 0, 0, 30]);
    r.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    r.extend_from_slice(rdata);
    r
}

fn records(owner: &[u8], qtype: u16, zone: &Zone, out: &mut Vec<Vec<u8>>) {
    if let Some((target, tz)) = &zone.cname {
        let t = encode_name(target);
        out.push(rr(owner, 5, &t));
        records(&t, qtype, tz, out);
        return;
    }
    if qtype == 1 {
        out.extend(zone.a.iter().map(|a| rr(owner, 1, a)));
    } else if qtype == 28 {
        out.extend(zone.aaaa.iter().map(|a| rr(owner, 28, a)));
    }
}

fn answer(id: u16, question: &[u8], qtype: u16, zone: &Zone, truncate: bool) -> Vec<u8> {
    let mut flags: u16 = 0x8180;
    if zone.nxdomain {
        flags |= 3;
    }
    if truncate {
        flags |= 0x0200;
    }
    let mut answers = Vec::new();
    if !truncate && !zone.nxdomain {
        records(b"\xc0\x0c", qtype, zone, &mut answers);
    }
    let mut out = id.to_be_bytes().to_vec();
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&[0, 1]);
    out.extend_from_slice(&(answers.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(question);
    for a in answers {
        out.extend_from_slice(&a);
    }
    out
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn zone_a(a: [u8; 4]) -> Zone {
    Zone {
        a: vec![a],
        ..Zone::default()
    }
}

#[tokio::test]
async fn resolves_a_aaaa_and_cname_chains() {
    let mut v6 = [0u8; 16];
    v6[15] = 2;
    v6[0] = 0x20;
    let zones = HashMap::from([
        (
            "both.test",
            Zone {
                a: vec![[93, 184, 215, 14], [93, 184, 215, 15]],
                aaaa: vec![v6],
                ..Zone::default()
            },
        ),
        (
            "www.alias.test",
            Zone {
                cname: Some((
                    "edge.cdn.test".into(),
                    Box::new(Zone {
                        cname: Some(("node.cdn.test".into(), Box::new(zone_a([1, 1, 1, 1])))),
                        ..Zone::default()
                    }),
                )),
                ..Zone::default()
            },
        ),
        ("v4only.test", zone_a([8, 8, 4, 4])),
    ]);
    let server = DnsServer::start(zones).await;
    let r = DnsResolver::new(server.addr);
    assert_eq!(
        r.resolve("both.test", 443).await.unwrap(),
        ips(&["93.184.215.14", "93.184.215.15", "2000::2"])
    );
    assert_eq!(
        r.resolve("www.alias.test", 443).await.unwrap(),
        ips(&["1.1.1.1"])
    );
    assert_eq!(
        r.resolve("v4only.test", 443).await.unwrap(),
        ips(&["8.8.4.4"])
    );
    let mut q = server.queries();
    q.sort();
    assert_eq!(
        q,
        [
            ("udp", "both.test".to_string(), 1),
            ("udp", "both.test".to_string(), 28),
            ("udp", "v4only.test".to_string(), 1),
            ("udp", "v4only.test".to_string(), 28),
            ("udp", "www.alias.test".to_string(), 1),
            ("udp", "www.alias.test".to_string(), 28),
        ]
    );
}

#[tokio::test]
async fn failures_truncation_and_spoofing() {
    let zones = HashMap::from([
        (
            "big.test",
            Zone {
                a: vec![[9, 9, 9, 9]],
                truncate: true,
                ..Zone::default()
            },
        ),
        (
            "spoofed.test",
            Zone {
                a: vec![[7, 7, 7, 7]],
                decoys: true,
                ..Zone::default()
            },
        ),
        (
            "silent.test",
            Zone {
                silent: true,
                ..Zone::default()
            },
        ),
        ("empty.test", Zone::default()),
    ]);
    let server = DnsServer::start(zones).await;
    let r = DnsResolver::new(server.addr);
    // TC over UDP: retried over TCP.
    assert_eq!(r.resolve("big.test", 80).await.unwrap(), ips(&["9.9.9.9"]));
    assert!(server.queries().contains(&("tcp", "big.test".into(), 1)));
    // A wrong id and an answer for another name come first: both ignored.
    assert_eq!(
        r.resolve("spoofed.test", 80).await.unwrap(),
        ips(&["7.7.7.7"])
    );
    // NXDOMAIN and no data are errors.
    let e = r.resolve("missing.test", 80).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
    assert!(r.resolve("empty.test", 80).await.is_err());
    // No answer: bounded by the timeout (2 s by default).
    let started = Instant::now();
    let e = r.resolve("silent.test", 80).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(10));
    let quick = DnsResolver::new(server.addr).with_timeout(Duration::from_millis(200));
    assert!(quick.resolve("silent.test", 80).await.is_err());
    // Nothing listening: an error, not a hang.
    let closed = UdpSocket::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let e = tokio::time::timeout(HANG, DnsResolver::new(closed).resolve("x.test", 80))
        .await
        .unwrap();
    assert!(e.is_err());
}

#[tokio::test]
async fn the_proxy_looks_up_only_allowed_names_once() {
    if !curl_available() {
        eprintln!("skipping: curl not found");
        return;
    }
    let (origin, seen) = http_upstream().await;
    let port = origin.port();
    let zones = HashMap::from([
        ("api.test", zone_a([127, 0, 0, 1])),
        ("evil.test", zone_a([127, 0, 0, 1])),
        ("private.test", zone_a([127, 0, 0, 1])),
    ]);
    let server = DnsServer::start(zones).await;
    // The names here resolve to loopback: the entry opens it with `private`.
    let entries = vec![format!("api.test:{port} private")];
    let sink = Arc::new(Sink::default());
    let mut cfg = ProxyConfig::new(
        "dns-test",
        Arc::new(NetworkPolicy::compile(&entries, false).unwrap()),
        sink.clone(),
    );
    cfg.resolver = Arc::new(DnsResolver::new(server.addr));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(warden_proxy::serve(listener, Arc::new(cfg), async move {
        let _ = stopped.await;
    }));
    let px = format!("socks5h://{addr}");
    let (code, out, err) = curl(&["--proxy", &px, &format!("http://api.test:{port}/d")]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "ok GET /d body=0\n");
    let (code, _, _) = curl(&["--proxy", &px, &format!("http://evil.test:{port}/")]).await;
    assert_ne!(code, 0);
    let mut q = server.queries();
    q.sort();
    assert_eq!(
        q,
        [
            ("udp", "api.test".to_string(), 1),
            ("udp", "api.test".to_string(), 28)
        ]
    );
    assert_eq!(seen.requests().len(), 1);
    let _ = stop.send(());
    task.await.unwrap();

    // Without the option the same answer is refused after one lookup.
    let entries = vec![format!("private.test:{port}")];
    let mut cfg = ProxyConfig::new(
        "dns-test",
        Arc::new(NetworkPolicy::compile(&entries, false).unwrap()),
        sink.clone(),
    );
    cfg.resolver = Arc::new(DnsResolver::new(server.addr));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(warden_proxy::serve(listener, Arc::new(cfg), async move {
        let _ = stopped.await;
    }));
    let (code, _, _) = curl(&[
        "--proxy",
        &format!("socks5h://{addr}"),
        &format!("http://private.test:{port}/"),
    ])
    .await;
    assert_ne!(code, 0);
    let private: Vec<_> = server
        .queries()
        .into_iter()
        .filter(|q| q.1 == "private.test")
        .collect();
    assert_eq!(private.len(), 2, "{private:?}");
    let last = sink.decisions().pop().unwrap();
    assert_eq!(
        (last.host.as_str(), last.reason.as_str()),
        ("private.test", "private-address")
    );
    assert_eq!(seen.requests().len(), 1);
    let _ = stop.send(());
    task.await.unwrap();
}
