//! Transparent egress's hand-over (`warden_proxy::open_transparent`): what a
//! relayed connection lets through (plain bytes on a listed port, TLS naming
//! the host, HTTP whose every request names the host), what a `direct` entry
//! hands over, and how a caller that does not wait learns of a refusal.
//!
//! Names resolve through a scripted resolver to made-up public addresses that a
//! loopback-only connector maps to the test's own upstreams, so nothing leaves
//! the machine; the upstreams record every byte they receive.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

mod common;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use warden_proxy::tls::build_client_hello;
use warden_proxy::{open_transparent, Handover, Protocol, ProxyConfig, RefusalCode};

/// Made-up public addresses the names resolve to (the connector maps them).
const A1: &str = "140.82.112.10";
const A2: &str = "140.82.112.11";

/// One session's configuration with a recording sink.
struct World {
    cfg: Arc<ProxyConfig>,
    sink: Arc<Sink>,
    resolver: Arc<ScriptedResolver>,
    connector: Arc<LoopbackConnector>,
}

/// A configuration allowing `entries`, resolving `names` (name, address) and
/// connecting the `map`ped `address:port`s to local upstreams.
fn world(entries: &[&str], names: &[(&str, &str)], map: &[(&str, SocketAddr)]) -> World {
    let sink = Arc::new(Sink::default());
    let resolver = ScriptedResolver::default();
    for (name, ip) in names {
        resolver.add(name, &[ip]);
    }
    let resolver = Arc::new(resolver);
    let connector = LoopbackConnector::with(map);
    let mut cfg = ProxyConfig::new("test-session", policy(entries, false), sink.clone());
    cfg.resolver = resolver.clone();
    cfg.connector = connector.clone();
    World {
        cfg: Arc::new(cfg),
        sink,
        resolver,
        connector,
    }
}

fn addr(ip: &str, port: u16) -> SocketAddr {
    format!("{ip}:{port}").parse().unwrap()
}

/// The sandbox's end of a relayed hand-over, made asynchronous for the test.
fn sandbox_end(s: std::net::TcpStream) -> TcpStream {
    s.set_nonblocking(true).unwrap();
    TcpStream::from_std(s).unwrap()
}

/// Opens a transparent connection that must be relayed, and runs its relay
/// as the daemon does once the sandbox has its end.
async fn relayed(w: &World, name: &str, port: u16, wait: bool) -> (TcpStream, JoinHandle<()>) {
    match open_transparent(&w.cfg, name, port, wait).await {
        Ok(Handover::Relayed(theirs, relay)) => {
            let cfg = w.cfg.clone();
            let task = tokio::spawn(async move { relay.run(&cfg).await });
            (sandbox_end(theirs), task)
        }
        Ok(Handover::Direct(_)) => panic!("{name}:{port}: handed over direct, not relayed"),
        Err(code) => panic!("{name}:{port}: refused with {code}"),
    }
}

/// Waits for a relay to end.
async fn finished(task: JoinHandle<()>) {
    tokio::time::timeout(HANG, task)
        .await
        .expect("the relay ends")
        .unwrap();
}

/// A loopback address nothing listens on (connections to it are refused).
fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Reads until the relay closes the sandbox's end: Ok(bytes) at a clean end,
/// Err at a reset.
async fn read_until_closed(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    tokio::time::timeout(HANG, s.read_to_end(&mut out))
        .await
        .expect("the relay closes the connection")
        .map(|_| out)
}

/// Relayed, an entry listing its port (`raw.test:7000`): plain bytes pass both
/// ways, the half-close travels on, and the upstream connection is recorded
/// once allowed (protocol `transparent`, its entry) and once closed, with the
/// bytes of each direction.
#[tokio::test]
async fn relayed_plain_bytes_pass_on_a_listed_port_and_are_counted() {
    let (echo, got) = echo_upstream(None).await;
    let w = world(
        &["raw.test:7000"],
        &[("raw.test", A1)],
        &[(&format!("{A1}:7000"), echo)],
    );
    let (mut s, task) = relayed(&w, "raw.test", 7000, true).await;
    s.write_all(b"hello, relay\n").await.unwrap();
    let mut back = [0u8; 13];
    tokio::time::timeout(HANG, s.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"hello, relay\n");
    // The sandbox's end of stream reaches the upstream, which closes too.
    s.shutdown().await.unwrap();
    assert!(read_until_closed(&mut s).await.unwrap().is_empty());
    finished(task).await;
    assert_eq!(&got.lock().unwrap()[..], b"hello, relay\n");

    let d = w.sink.decisions();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].protocol, Protocol::Transparent);
    assert!(d[0].allowed, "{d:?}");
    assert_eq!(d[0].refusal, None);
    assert_eq!(
        (d[0].host.as_str(), d[0].port, d[0].address),
        ("raw.test", 7000, Some(addr(A1, 7000)))
    );
    assert_eq!(d[0].rule.as_deref(), Some("raw.test:7000"));
    let closed = w.sink.wait_closed(1).await;
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0].protocol, Protocol::Transparent);
    assert_eq!(
        (closed[0].host.as_str(), closed[0].port),
        ("raw.test", 7000)
    );
    assert_eq!(closed[0].address, addr(A1, 7000));
    assert_eq!((closed[0].bytes_up, closed[0].bytes_down), (13, 13));
}

/// Relayed to a listed port, the upstream may speak first: its banner reaches
/// the sandbox before the sandbox has sent anything (the relay does not hold
/// the upstream's bytes while it waits for the first bytes of the sandbox).
#[tokio::test]
async fn relayed_listed_port_carries_server_first_protocols() {
    let (echo, got) = echo_upstream(Some(b"SSH-2.0-banner\r\n")).await;
    let w = world(
        &["git.test:22"],
        &[("git.test", A1)],
        &[(&format!("{A1}:22"), echo)],
    );
    // A caller that does not wait: the relay connects after the hand-over.
    let (mut s, task) = relayed(&w, "git.test", 22, false).await;
    let mut banner = [0u8; 16];
    tokio::time::timeout(HANG, s.read_exact(&mut banner))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&banner, b"SSH-2.0-banner\r\n");
    s.write_all(b"SSH-2.0-client\r\n").await.unwrap();
    let mut back = [0u8; 16];
    tokio::time::timeout(HANG, s.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"SSH-2.0-client\r\n");
    s.shutdown().await.unwrap();
    assert!(read_until_closed(&mut s).await.unwrap().is_empty());
    finished(task).await;
    assert_eq!(&got.lock().unwrap()[..], b"SSH-2.0-client\r\n");
    let closed = w.sink.wait_closed(1).await;
    assert_eq!((closed[0].bytes_up, closed[0].bytes_down), (16, 32));
}

/// Relayed TLS must name the host: a ClientHello whose server name is another
/// host ends the connection (reset) before any byte of it reaches the
/// upstream, and is recorded as a second decision, `sni-mismatch`, after the
/// connection's allowed one. Shown for a bare name on 443 (where the relay
/// tells TLS from HTTP) and for a listed port (where plain bytes would pass,
/// but TLS naming another host still does not). Control: a ClientHello naming
/// the host reaches the upstream whole (and is echoed back).
#[tokio::test]
async fn relayed_tls_must_name_the_host() {
    let (echo, got) = echo_upstream(None).await;
    let w = world(
        &["tls.test", "tls.test:8443"],
        &[("tls.test", A1)],
        &[(&format!("{A1}:443"), echo), (&format!("{A1}:8443"), echo)],
    );
    for port in [443, 8443] {
        for hello in [
            build_client_hello(&["evil.test"], &[], 16384),
            // Split into small records: still refused, still nothing passes.
            build_client_hello(&["evil.test"], &[], 5),
            build_client_hello(&["tls.test.evil.test"], &[], 16384),
        ] {
            let before = w.sink.decisions().len();
            let (mut s, task) = relayed(&w, "tls.test", port, false).await;
            s.write_all(&hello).await.unwrap();
            let end = read_until_closed(&mut s).await;
            assert!(
                matches!(&end, Err(e) if e.kind() == io::ErrorKind::ConnectionReset),
                "port {port}: a refused ClientHello ends in a reset, got {end:?}"
            );
            finished(task).await;
            let d = w.sink.decisions();
            let codes: Vec<&str> = d[before..].iter().map(|d| d.code()).collect();
            assert_eq!(codes, ["allowed", "sni-mismatch"], "port {port}");
            let refused = &d[before + 1];
            assert_eq!(refused.protocol, Protocol::Transparent);
            assert_eq!(refused.refusal, Some(RefusalCode::SniMismatch));
            assert_eq!(
                (refused.host.as_str(), refused.port, refused.address),
                ("tls.test", port, Some(addr(A1, port)))
            );
        }
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        got.lock().unwrap().is_empty(),
        "bytes of a refused ClientHello reached the upstream"
    );
    // The relay's own count agrees: each refused connection is closed having
    // sent nothing upstream.
    let closed = w.sink.wait_closed(6).await;
    assert_eq!(closed.len(), 6, "{closed:?}");
    assert!(
        closed
            .iter()
            .all(|c| c.protocol == Protocol::Transparent && c.bytes_up == 0),
        "{closed:?}"
    );

    // Control: the host's own name passes, every byte of it.
    for port in [443, 8443] {
        got.lock().unwrap().clear();
        let hello = build_client_hello(&["tls.test"], &[(10, vec![0, 2, 0, 29])], 16384);
        let (mut s, task) = relayed(&w, "tls.test", port, false).await;
        s.write_all(&hello).await.unwrap();
        let mut back = vec![0u8; hello.len()];
        tokio::time::timeout(HANG, s.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back, hello, "port {port}");
        assert_eq!(*got.lock().unwrap(), hello, "port {port}");
        drop(s);
        finished(task).await;
    }
}

/// Relayed plain HTTP to a bare name (`web.test`, port 80): a request whose
/// `Host` names the host reaches the upstream in origin form; the next
/// request on the same keep-alive connection naming another host is refused
/// with `403` and `X-Warden-Denied: host-mismatch`, recorded, and never
/// reaches the upstream; the connection then ends.
#[tokio::test]
async fn relayed_http_to_a_bare_name_is_decided_per_request() {
    let (origin, seen) = http_upstream().await;
    let w = world(
        &["web.test"],
        &[("web.test", A1)],
        &[(&format!("{A1}:80"), origin)],
    );
    let (mut s, task) = relayed(&w, "web.test", 80, false).await;
    s.write_all(b"GET /first HTTP/1.1\r\nHost: web.test\r\n\r\n")
        .await
        .unwrap();
    let first = read_response(&mut s).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.ends_with("ok GET /first body=0\n"), "{first}");
    // The same connection, the default port spelled out: the same host.
    s.write_all(b"GET /second HTTP/1.1\r\nHost: web.test:80\r\n\r\n")
        .await
        .unwrap();
    let second = read_response(&mut s).await;
    assert!(second.ends_with("ok GET /second body=0\n"), "{second}");
    let requests = seen.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(
        requests[0].starts_with("GET /first HTTP/1.1\r\n"),
        "{requests:?}"
    );
    assert!(
        requests[0]
            .to_ascii_lowercase()
            .contains("\r\nhost: web.test\r\n"),
        "{requests:?}"
    );
    // Keep-alive: the second request went on the same upstream connection.
    assert_eq!(seen.connections(), 1);

    // Another host on the same connection: refused, never forwarded.
    s.write_all(b"GET /stolen HTTP/1.1\r\nHost: evil.test\r\n\r\n")
        .await
        .unwrap();
    let refused = read_response(&mut s).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(
        refused
            .to_ascii_lowercase()
            .contains("\r\nx-warden-denied: host-mismatch\r\n"),
        "{refused}"
    );
    // The sandbox's end of stream lets the refusal's close finish at once.
    s.shutdown().await.unwrap();
    assert!(read_until_closed(&mut s).await.unwrap().is_empty());
    finished(task).await;
    assert_eq!(
        seen.requests().len(),
        2,
        "the refused request was forwarded"
    );
    let d = w.sink.decisions();
    let last = d.last().unwrap();
    assert_eq!(last.protocol, Protocol::Transparent);
    assert_eq!(last.refusal, Some(RefusalCode::HostMismatch));
    // Recorded for the connection's host and port (the request target); the
    // Host header that named another is the refusal's message.
    assert_eq!((last.host.as_str(), last.port), ("web.test", 80));
    assert!(
        d[..d.len() - 1].iter().all(|d| d.allowed),
        "only the last request was refused: {d:?}"
    );

    // Every other way of naming another host or port, each on a connection of
    // its own as a first request: refused the same way, never forwarded.
    for request in [
        "GET / HTTP/1.1\r\nHost: web.test:8080\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
        "GET / HTTP/1.1\r\n\r\n",
        "GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n",
        "GET http://web.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n",
    ] {
        let (mut s, task) = relayed(&w, "web.test", 80, false).await;
        s.write_all(request.as_bytes()).await.unwrap();
        let answer = read_response(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{request:?}: {answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("\r\nx-warden-denied: host-mismatch\r\n"),
            "{request:?}: {answer}"
        );
        drop(s);
        finished(task).await;
        assert_eq!(
            w.sink.decisions().last().unwrap().refusal,
            Some(RefusalCode::HostMismatch),
            "{request:?}"
        );
    }
    assert_eq!(seen.requests().len(), 2, "a refused request was forwarded");
}

/// Relayed to a bare name, bytes that are neither TLS nor HTTP are not
/// tunnelled: the sandbox is answered `400` (`bad-request`) and none of them
/// reach the upstream.
#[tokio::test]
async fn relayed_bare_name_does_not_tunnel_other_bytes() {
    let (echo, got) = echo_upstream(None).await;
    let w = world(
        &["web.test"],
        &[("web.test", A1)],
        &[(&format!("{A1}:80"), echo)],
    );
    for garbage in [
        &b"\x00\x01\x02\x03 not a protocol\r\n\r\n"[..],
        // A TLS record type with a version that is not TLS's.
        &b"\x16\x02\x00\x05hello\r\n\r\n"[..],
        &b"SSH-2.0-client\r\n\r\n"[..],
    ] {
        let (mut s, task) = relayed(&w, "web.test", 80, false).await;
        s.write_all(garbage).await.unwrap();
        let answer = read_response(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{garbage:?}: {answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("\r\nx-warden-denied: bad-request\r\n"),
            "{garbage:?}: {answer}"
        );
        drop(s);
        finished(task).await;
        assert_eq!(
            w.sink.decisions().last().unwrap().refusal,
            Some(RefusalCode::BadRequest),
            "{garbage:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        got.lock().unwrap().is_empty(),
        "bytes to a bare name that are not HTTP reached the upstream: {:?}",
        got.lock().unwrap()
    );
}

/// An entry with `direct`: the hand-over is the upstream socket itself
/// (connected to the upstream, also for a caller that does not wait), the
/// decision is recorded, and its bytes are neither checked (TLS naming
/// another host passes) nor counted (no closed event).
#[tokio::test]
async fn direct_entries_hand_over_the_upstream_socket() {
    let (echo, got) = echo_upstream(None).await;
    let w = world(
        &["fast.test direct"],
        &[("fast.test", A2)],
        &[(&format!("{A2}:443"), echo)],
    );
    let handover = open_transparent(&w.cfg, "fast.test", 443, false).await;
    let Ok(Handover::Direct(up)) = handover else {
        panic!("fast.test:443 was not handed over direct");
    };
    assert_eq!(up.peer_addr().unwrap(), echo, "not the upstream's socket");
    let d = w.sink.decisions();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].protocol, Protocol::Transparent);
    assert!(d[0].allowed);
    assert_eq!(d[0].address, Some(addr(A2, 443)));
    assert_eq!(d[0].rule.as_deref(), Some("fast.test direct"));

    let mut up = sandbox_end(up);
    let hello = build_client_hello(&["evil.test"], &[], 16384);
    up.write_all(&hello).await.unwrap();
    let mut back = vec![0u8; hello.len()];
    tokio::time::timeout(HANG, up.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, hello);
    assert_eq!(*got.lock().unwrap(), hello);
    drop(up);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(w.sink.closed().is_empty(), "{:?}", w.sink.closed());
    assert_eq!(w.sink.decisions().len(), 1);
}

/// A caller that does not wait is refused at once for what needs no lookup
/// (a port or a name the allowlist lacks: `Err`, `not-allowed` recorded, no
/// lookup, no connection attempt). An allowed name is handed over before any
/// lookup; when its upstream then refuses the connection, the relay records
/// `connect-failed` and resets the sandbox's end. A caller that waits sees
/// the same failure as `Err(ConnectFailed)`, with nothing handed over.
#[tokio::test]
async fn callers_that_do_not_wait_are_refused_at_once_or_reset_later() {
    let w = world(
        &["raw.test:7000", "down.test:7002"],
        &[("raw.test", A1), ("down.test", A2)],
        &[(&format!("{A2}:7002"), closed_port())],
    );
    for (name, port) in [("raw.test", 7001), ("raw.test", 80), ("evil.test", 7000)] {
        match open_transparent(&w.cfg, name, port, false).await {
            Err(code) => assert_eq!(code, RefusalCode::NotAllowed, "{name}:{port}"),
            Ok(_) => panic!("{name}:{port}: handed over"),
        }
        let d = w.sink.decisions();
        let last = d.last().unwrap();
        assert_eq!(last.protocol, Protocol::Transparent);
        assert_eq!(last.refusal, Some(RefusalCode::NotAllowed), "{name}:{port}");
        assert_eq!((last.host.as_str(), last.port), (name, port));
    }
    assert_eq!(w.sink.decisions().len(), 3);
    assert!(
        w.resolver.lookups().is_empty(),
        "{:?}",
        w.resolver.lookups()
    );
    assert!(w.connector.attempts().is_empty());

    // Allowed, but the upstream refuses: handed over first (nothing looked
    // up yet), then reset.
    let handover = open_transparent(&w.cfg, "down.test", 7002, false).await;
    let Ok(Handover::Relayed(theirs, relay)) = handover else {
        panic!("down.test:7002 was not handed over relayed");
    };
    assert!(
        w.resolver.lookups().is_empty(),
        "looked up before the hand-over"
    );
    assert_eq!(w.sink.decisions().len(), 3, "decided before the hand-over");
    let mut s = sandbox_end(theirs);
    relay.run(&w.cfg).await;
    let end = read_until_closed(&mut s).await;
    assert!(
        matches!(&end, Err(e) if e.kind() == io::ErrorKind::ConnectionReset),
        "the sandbox's end is reset, got {end:?}"
    );
    let d = w.sink.decisions();
    assert_eq!(d.len(), 4, "{d:?}");
    assert_eq!(d[3].protocol, Protocol::Transparent);
    assert_eq!(d[3].refusal, Some(RefusalCode::ConnectFailed));
    assert_eq!(
        (d[3].host.as_str(), d[3].port, d[3].address),
        ("down.test", 7002, Some(addr(A2, 7002)))
    );
    assert_eq!(w.connector.attempts(), [addr(A2, 7002)]);

    // A caller that waits: the refusal is the answer itself.
    match open_transparent(&w.cfg, "down.test", 7002, true).await {
        Err(code) => assert_eq!(code, RefusalCode::ConnectFailed),
        Ok(_) => panic!("down.test:7002 handed over although its upstream refuses"),
    }
    let d = w.sink.decisions();
    assert_eq!(d.len(), 5, "{d:?}");
    assert_eq!(d[4].refusal, Some(RefusalCode::ConnectFailed));
    assert!(w.sink.closed().is_empty(), "{:?}", w.sink.closed());
}
