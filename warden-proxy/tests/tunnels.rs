//! CONNECT and SOCKS5 tunnels on loopback: the ClientHello check, SOCKS5
//! negotiation and refusals, with curl where it can drive the case and raw
//! sockets elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warden_proxy::tls::build_client_hello;
use warden_proxy::Protocol;

const GH: &str = "140.82.112.3";

/// A proxy allowing api.github.com on any port, resolved to GH, which the
/// connector maps (for `port`) to `target`.
async fn proxy_to(target: SocketAddr, port: u16) -> Proxy {
    let resolver = ScriptedResolver::with(&[("api.github.com", &[GH]), ("evil.com", &[GH])]);
    let connector = LoopbackConnector::with(&[(&format!("{GH}:{port}"), target)]);
    start(policy(&["api.github.com:*"], false), resolver, connector).await
}

/// Opens a CONNECT tunnel and reads the 200.
async fn connect_tunnel(proxy: SocketAddr, authority: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let expect = b"HTTP/1.1 200 Connection Established\r\n\r\n";
    let mut got = vec![0u8; expect.len()];
    tokio::time::timeout(HANG, s.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, expect);
    s
}

/// Sends `hello` through a new tunnel; returns what came back before the proxy
/// closed (the echo of an allowed hello, nothing for a refused one).
async fn send_hello(proxy: SocketAddr, authority: &str, hello: &[u8]) -> Vec<u8> {
    let mut s = connect_tunnel(proxy, authority).await;
    s.write_all(hello).await.unwrap();
    let mut got = vec![0u8; hello.len()];
    match tokio::time::timeout(HANG, s.read_exact(&mut got))
        .await
        .unwrap()
    {
        Ok(_) => got,
        Err(_) => Vec::new(),
    }
}

#[tokio::test]
async fn client_hello_must_name_the_connect_host() {
    let (echo, got) = echo_upstream(None).await;
    let proxy = proxy_to(echo, 443).await;
    let matching = build_client_hello(&["api.github.com"], &[(10, vec![0, 2, 0, 29])], 16384);
    assert_eq!(
        send_hello(proxy.addr, "api.github.com:443", &matching).await,
        matching
    );
    // Case and trailing dot are normalised on both sides.
    let upper = build_client_hello(&["API.GitHub.com."], &[], 16384);
    assert_eq!(
        send_hello(proxy.addr, "api.github.com:443", &upper).await,
        upper
    );
    // Split over many records, and split over several TCP writes.
    let split = build_client_hello(&["api.github.com"], &[], 7);
    assert_eq!(
        send_hello(proxy.addr, "api.github.com:443", &split).await,
        split
    );
    let mut s = connect_tunnel(proxy.addr, "api.github.com:443").await;
    for piece in matching.chunks(3) {
        s.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut back = vec![0u8; matching.len()];
    tokio::time::timeout(HANG, s.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, matching);
    drop(s);
    let before = got.lock().unwrap().len();
    let allowed = proxy.sink.decisions().len();
    assert!(proxy.sink.decisions().iter().all(|d| d.allowed));

    // Refusals: nothing of the hello reaches the upstream.
    for hello in [
        build_client_hello(&["evil.com"], &[], 16384),
        build_client_hello(&["evil.com"], &[], 5),
        build_client_hello(&["api.github.com.evil.com"], &[], 16384),
        build_client_hello(&["api.github.com", "evil.com"], &[], 16384),
        build_client_hello(&["api.github.com", "api.github.com"], &[], 16384),
        // Two server_name extensions (the second naming another host).
        build_client_hello(
            &["api.github.com"],
            &[(0, b"\x00\x0b\x00\x00\x08evil.com".to_vec())],
            16384,
        ),
        // A hello cut short by the client.
        build_client_hello(&["api.github.com"], &[], 16384)[..40].to_vec(),
        // Malformed: a zero-length record.
        b"\x16\x03\x01\x00\x00".to_vec(),
        // An invalid name.
        build_client_hello(&["api..github.com"], &[], 16384),
    ] {
        let mut s = connect_tunnel(proxy.addr, "api.github.com:443").await;
        s.write_all(&hello).await.unwrap();
        if hello.len() == 40 {
            s.shutdown().await.unwrap();
        }
        let rest = read_to_end(&mut s).await;
        assert!(rest.is_empty(), "refused tunnel answered {rest:?}");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        got.lock().unwrap().len(),
        before,
        "refused ClientHello bytes reached the upstream"
    );
    let d = proxy.sink.decisions();
    let refused: Vec<&str> = d[allowed..]
        .iter()
        .filter(|d| !d.allowed)
        .map(|d| d.reason.as_str())
        .collect();
    assert_eq!(refused, ["sni-mismatch"; 9]);
    proxy.stop().await;
}

#[tokio::test]
async fn tunnels_relay_non_tls_and_server_first_protocols() {
    let (echo, got) = echo_upstream(Some(b"SSH-2.0-banner\r\n")).await;
    let proxy = proxy_to(echo, 22).await;
    // The server speaks first: its banner arrives while the proxy still waits for
    // the client's first bytes.
    let mut s = connect_tunnel(proxy.addr, "api.github.com:22").await;
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
    assert_eq!(&got.lock().unwrap()[..], b"SSH-2.0-client\r\n");
    // Half-close: the client's EOF reaches the upstream, which closes too.
    s.shutdown().await.unwrap();
    assert!(read_to_end(&mut s).await.is_empty());
    let closed = proxy.sink.wait_closed(1).await;
    assert_eq!(closed[0].protocol, Protocol::Connect);
    assert_eq!((closed[0].bytes_up, closed[0].bytes_down), (16, 32));
    proxy.stop().await;
}

#[tokio::test]
async fn connect_refusals() {
    let (echo, got) = echo_upstream(None).await;
    let proxy = proxy_to(echo, 443).await;
    let cases: [(&str, u16, &str); 7] = [
        (
            "CONNECT evil.com:443 HTTP/1.1\r\nHost: evil.com:443\r\n\r\n",
            403,
            "not-allowed",
        ),
        (
            "CONNECT 140.82.112.3:443 HTTP/1.1\r\n\r\n",
            403,
            "not-allowed",
        ),
        (
            "CONNECT api.github.com:443 HTTP/1.1\r\nHost: evil.com:443\r\n\r\n",
            403,
            "host-mismatch",
        ),
        (
            "CONNECT api.github.com HTTP/1.1\r\n\r\n",
            400,
            "bad-request",
        ),
        (
            "CONNECT api.github.com:0 HTTP/1.1\r\n\r\n",
            400,
            "bad-request",
        ),
        (
            "CONNECT user@api.github.com:443 HTTP/1.1\r\n\r\n",
            400,
            "bad-request",
        ),
        (
            "CONNECT api.github.com:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            400,
            "bad-request",
        ),
    ];
    for (req, status, code) in cases {
        let resp = String::from_utf8_lossy(&raw(proxy.addr, req.as_bytes()).await).into_owned();
        assert!(
            resp.starts_with(&format!("HTTP/1.1 {status} ")),
            "{req}: {resp}"
        );
        assert!(
            resp.contains(&format!("X-Warden-Denied: {code}\r\n")),
            "{req}: {resp}"
        );
    }
    assert!(proxy.lookups().is_empty());
    assert!(got.lock().unwrap().is_empty());
    proxy.stop().await;
}

#[tokio::test]
async fn curl_https_through_connect_is_checked() {
    if !curl_available() {
        eprintln!("skipping: curl not found");
        return;
    }
    // The "TLS server" is an echo: curl's handshake fails, but what matters is
    // which ClientHello the proxy let through.
    let (echo, got) = echo_upstream(None).await;
    let proxy = proxy_to(echo, 443).await;
    let px = format!("http://{}", proxy.addr);
    let (code, _, _) = curl(&["-x", &px, "--max-time", "5", "https://api.github.com/"]).await;
    assert_ne!(code, 0);
    let hello = got.lock().unwrap().clone();
    assert!(
        hello.starts_with(&[0x16, 0x03]),
        "curl's ClientHello reached the upstream"
    );
    assert!(hello.windows(14).any(|w| w == b"api.github.com"));
    proxy.stop().await;
    // Domain fronting: CONNECT to the allowed host, SNI of another. A fresh
    // upstream and proxy: the first connection's last bytes (curl's alert
    // after the echoed garbage) may still be arriving at the first upstream.
    let (echo, got) = echo_upstream(None).await;
    let proxy = proxy_to(echo, 443).await;
    let px = format!("http://{}", proxy.addr);
    let (code, _, _) = curl(&[
        "-x",
        &px,
        "--max-time",
        "5",
        "--connect-to",
        "evil.com:443:api.github.com:443",
        "https://evil.com/",
    ])
    .await;
    assert_ne!(code, 0);
    let d = proxy.sink.wait_decisions(2).await;
    let last = d.last().unwrap();
    assert_eq!(
        (last.allowed, last.reason.as_str()),
        (false, "sni-mismatch"),
        "{d:?}"
    );
    assert!(
        got.lock().unwrap().is_empty(),
        "the fronted ClientHello reached the upstream"
    );
    proxy.stop().await;
}

/// SOCKS5 greeting (no auth) and request; returns the reply.
async fn socks_request(proxy: SocketAddr, request: &[u8]) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(b"\x05\x01\x00").await.unwrap();
    let mut choice = [0u8; 2];
    tokio::time::timeout(HANG, s.read_exact(&mut choice))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(choice, [5, 0]);
    s.write_all(request).await.unwrap();
    let mut reply = [0u8; 10];
    tokio::time::timeout(HANG, s.read_exact(&mut reply))
        .await
        .unwrap()
        .unwrap();
    (s, reply.to_vec())
}

fn domain_request(cmd: u8, name: &[u8], port: u16) -> Vec<u8> {
    let mut r = vec![5, cmd, 0, 3, name.len() as u8];
    r.extend_from_slice(name);
    r.extend_from_slice(&port.to_be_bytes());
    r
}

fn ipv4_request(ip: [u8; 4], port: u16) -> Vec<u8> {
    let mut r = vec![5, 1, 0, 1];
    r.extend_from_slice(&ip);
    r.extend_from_slice(&port.to_be_bytes());
    r
}

#[tokio::test]
async fn curl_socks5h() {
    if !curl_available() {
        eprintln!("skipping: curl not found");
        return;
    }
    let (origin, seen) = http_upstream().await;
    let port = origin.port();
    let resolver = ScriptedResolver::with(&[("api.github.com", &[GH])]);
    let connector = LoopbackConnector::with(&[(&format!("{GH}:{port}"), origin)]);
    let entry = format!("api.github.com:{port}");
    let proxy = start(policy(&[&entry], false), resolver, connector).await;
    let px = format!("socks5h://{}", proxy.addr);
    let (code, out, err) =
        curl(&["--proxy", &px, &format!("http://api.github.com:{port}/s")]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "ok GET /s body=0\n");
    assert_eq!(seen.requests().len(), 1);
    let (code, _, _) = curl(&["--proxy", &px, &format!("http://evil.com:{port}/")]).await;
    assert_ne!(code, 0);
    // socks5 (curl resolves): an IP literal the policy does not list.
    let px4 = format!("socks5://{}", proxy.addr);
    let (code, _, _) = curl(&["--proxy", &px4, &format!("http://127.0.0.1:{port}/")]).await;
    assert_ne!(code, 0);
    let d = proxy.sink.wait_decisions(3).await;
    let got: Vec<(Protocol, &str, bool, &str)> = d
        .iter()
        .map(|d| (d.protocol, d.host.as_str(), d.allowed, d.reason.as_str()))
        .collect();
    assert_eq!(got[0].0, Protocol::Socks5);
    assert_eq!((got[0].1, got[0].2), ("api.github.com", true));
    assert_eq!(
        (got[1].1, got[1].2, got[1].3),
        ("evil.com", false, "not-allowed")
    );
    assert_eq!(
        (got[2].1, got[2].2, got[2].3),
        ("127.0.0.1", false, "socks-ip-not-listed")
    );
    assert_eq!(proxy.lookups(), vec!["api.github.com"]);
    assert_eq!(seen.requests().len(), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn socks5_replies() {
    let (echo, got) = echo_upstream(None).await;
    let port = echo.port();
    let resolver = ScriptedResolver::with(&[("api.github.com", &[GH]), ("down.github.com", &[GH])]);
    let connector = LoopbackConnector::with(&[(&format!("{GH}:{port}"), echo)]);
    let listed = format!("127.0.0.1:{port}");
    let proxy = start(
        policy(&["api.github.com:*", "*.github.com:*", &listed], false),
        resolver.clone(),
        connector.clone(),
    )
    .await;

    // Allowed by name: success, BND.ADDR 0.0.0.0:0 (the host's own source
    // address is not told to the sandbox), then an echo tunnel.
    let (mut s, reply) =
        socks_request(proxy.addr, &domain_request(1, b"api.github.com", port)).await;
    assert_eq!(&reply[..4], &[5, 0, 0, 1]);
    assert_eq!(&reply[4..10], &[0, 0, 0, 0, 0, 0]);
    s.write_all(b"data").await.unwrap();
    let mut back = [0u8; 4];
    tokio::time::timeout(HANG, s.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"data");
    drop(s);
    // An IP literal the policy lists: allowed, no DNS.
    let (s, reply) = socks_request(proxy.addr, &ipv4_request([127, 0, 0, 1], port)).await;
    assert_eq!(reply[1], 0);
    drop(s);

    let refused = [
        (domain_request(1, b"evil.com", port), 0x02, "not-allowed"),
        (domain_request(1, b"github.com", port), 0x02, "not-allowed"),
        (
            domain_request(1, b"2130706433", port + 1),
            0x02,
            "not-allowed",
        ),
        (domain_request(1, b"a..b", port), 0x02, "bad-host"),
        (
            domain_request(1, b"evil\r\n.com\x00", port),
            0x02,
            "bad-host",
        ),
        (
            ipv4_request([127, 0, 0, 1], port + 1),
            0x02,
            "socks-ip-not-listed",
        ),
        (
            ipv4_request([140, 82, 112, 3], port),
            0x02,
            "socks-ip-not-listed",
        ),
        (
            domain_request(2, b"api.github.com", port),
            0x07,
            "socks-command-refused",
        ),
        (
            domain_request(3, b"api.github.com", port),
            0x07,
            "socks-command-refused",
        ),
        (
            domain_request(1, b"nxdomain.github.com", port),
            0x04,
            "dns-failed",
        ),
        (
            domain_request(1, b"down.github.com", port + 1),
            0x05,
            "connect-failed",
        ),
    ];
    let before = proxy.sink.decisions().len();
    for (req, code, _) in &refused {
        let (mut s, reply) = socks_request(proxy.addr, req).await;
        assert_eq!(reply[..2], [5, *code], "{req:?}");
        assert!(read_to_end(&mut s).await.is_empty());
    }
    let d = proxy.sink.decisions();
    let reasons: Vec<&str> = d[before..].iter().map(|d| d.reason.as_str()).collect();
    let expected: Vec<&str> = refused.iter().map(|r| r.2).collect();
    assert_eq!(reasons, expected);
    assert!(d[before..].iter().all(|d| !d.allowed));
    let hosts: Vec<&str> = d[before..].iter().map(|d| d.host.as_str()).collect();
    assert_eq!(hosts[4], "evil\\x0d\\x0a.com\\x00");
    // Lookups only for names that passed the allowlist.
    assert_eq!(
        resolver.lookups(),
        ["api.github.com", "nxdomain.github.com", "down.github.com"]
    );
    assert_eq!(got.lock().unwrap().as_slice(), b"data");

    // No acceptable method: 0xFF.
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"\x05\x01\x02").await.unwrap();
    assert_eq!(read_to_end(&mut s).await, [5, 0xff]);
    // Unknown address type: 0x08.
    let out = raw(proxy.addr, b"\x05\x01\x00\x05\x01\x00\x09").await;
    assert_eq!(&out[..4], &[5, 0, 5, 8]);
    // Garbage after the version byte: closed, no panic.
    let out = raw(proxy.addr, b"\x05\x00").await;
    assert!(out.is_empty());
    proxy.stop().await;
}

#[tokio::test]
async fn socks5_tunnels_get_the_client_hello_check() {
    let (echo, got) = echo_upstream(None).await;
    let proxy = proxy_to(echo, 443).await;
    let (mut s, reply) =
        socks_request(proxy.addr, &domain_request(1, b"api.github.com", 443)).await;
    assert_eq!(reply[1], 0);
    s.write_all(&build_client_hello(&["evil.com"], &[], 16384))
        .await
        .unwrap();
    assert!(read_to_end(&mut s).await.is_empty());
    assert!(got.lock().unwrap().is_empty());
    let d = proxy.sink.wait_decisions(2).await;
    assert_eq!(
        (d[1].protocol, d[1].reason.as_str()),
        (Protocol::Socks5, "sni-mismatch")
    );
    proxy.stop().await;
}

/// A proxy for the F4 tests: every name resolves to GH, whose ports 80, 443 and
/// 8022 lead to `target`.
async fn proxy_for(entries: &[&str], target: SocketAddr) -> Proxy {
    let names = [
        "web.test",
        "raw.test",
        "both.test",
        "legacy.test",
        "api.github.com",
    ];
    let answers: Vec<(&str, &[&str])> = names.iter().map(|n| (*n, &[GH][..])).collect();
    let resolver = ScriptedResolver::with(&answers);
    let map: Vec<String> = [80, 443, 8022]
        .iter()
        .map(|p| format!("{GH}:{p}"))
        .collect();
    let map: Vec<(&str, SocketAddr)> = map.iter().map(|a| (a.as_str(), target)).collect();
    start(
        policy(entries, false),
        resolver,
        LoopbackConnector::with(&map),
    )
    .await
}

/// Sends `first` through a SOCKS5 tunnel to `name:port`; returns what came back
/// (the echo when allowed, nothing when the tunnel was cut).
async fn socks_send(proxy: SocketAddr, name: &str, port: u16, first: &[u8]) -> Vec<u8> {
    let (mut s, reply) = socks_request(proxy, &domain_request(1, name.as_bytes(), port)).await;
    assert_eq!(reply[1], 0, "SOCKS5 CONNECT {name}:{port} refused");
    s.write_all(first).await.unwrap();
    let mut got = vec![0u8; first.len()];
    match tokio::time::timeout(HANG, s.read_exact(&mut got))
        .await
        .unwrap()
    {
        Ok(_) => got,
        Err(_) => Vec::new(),
    }
}

/// The refused decisions' (protocol, host, port, reason), in order.
fn refusals(proxy: &Proxy) -> Vec<(Protocol, String, u16, String)> {
    proxy
        .sink
        .decisions()
        .into_iter()
        .filter(|d| !d.allowed)
        .map(|d| (d.protocol, d.host, d.port, d.reason))
        .collect()
}

/// F4: a tunnel to a bare `name` entry (ports 80 and 443) carries TLS naming
/// that host, nothing else: plain HTTP with another `Host` (a shared front end
/// would route it anywhere) is cut before a byte reaches the upstream, through
/// CONNECT and SOCKS5 alike. Controls: TLS with the right name through both, and
/// plain bytes on a port an entry lists explicitly.
#[tokio::test]
async fn plain_tunnels_need_an_explicitly_listed_port() {
    let (echo, got) = echo_upstream(None).await;
    let proxy = proxy_for(
        &["web.test", "raw.test:8022", "both.test", "both.test:80"],
        echo,
    )
    .await;
    let fronted = b"GET / HTTP/1.1\r\nHost: attacker.example\r\n\r\n";
    for authority in ["web.test:80", "web.test:443"] {
        assert!(
            send_hello(proxy.addr, authority, fronted).await.is_empty(),
            "{authority}"
        );
    }
    assert!(socks_send(proxy.addr, "web.test", 80, fronted)
        .await
        .is_empty());
    // One byte is enough to tell (and no byte is forwarded).
    assert!(send_hello(proxy.addr, "web.test:443", b"G")
        .await
        .is_empty());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        got.lock().unwrap().is_empty(),
        "plain bytes of a refused tunnel reached the upstream"
    );
    let r = refusals(&proxy);
    let want = [
        (Protocol::Connect, "web.test", 80),
        (Protocol::Connect, "web.test", 443),
        (Protocol::Socks5, "web.test", 80),
        (Protocol::Connect, "web.test", 443),
    ];
    assert_eq!(r.len(), want.len(), "{r:?}");
    for ((p, h, port, reason), (wp, wh, wport)) in r.iter().zip(want) {
        assert_eq!(
            (p, h.as_str(), *port, reason.as_str()),
            (&wp, wh, wport, "plain-tunnel")
        );
    }

    // Controls: TLS naming the host, through CONNECT and SOCKS5.
    let hello = build_client_hello(&["web.test"], &[], 16384);
    assert_eq!(send_hello(proxy.addr, "web.test:443", &hello).await, hello);
    assert_eq!(socks_send(proxy.addr, "web.test", 443, &hello).await, hello);
    // Plain bytes on an explicitly listed port, through CONNECT and SOCKS5; and
    // on 80 when one entry lists it explicitly beside the bare one.
    let ssh = b"SSH-2.0-client\r\n";
    assert_eq!(send_hello(proxy.addr, "raw.test:8022", ssh).await, ssh);
    assert_eq!(socks_send(proxy.addr, "raw.test", 8022, ssh).await, ssh);
    assert_eq!(
        send_hello(proxy.addr, "both.test:80", fronted).await,
        fronted
    );
    assert_eq!(refusals(&proxy).len(), want.len());
    proxy.stop().await;
}

/// F4: a ClientHello without a server name to a name target is refused (it would
/// reach a shared front end's default site), through CONNECT and SOCKS5; the
/// `insecure-no-sni` option opens it for one entry, and an IP target needs no
/// name (a client never sends an address as SNI). Controls: the same tunnels
/// with the name.
#[tokio::test]
async fn client_hello_without_sni_needs_the_option() {
    let (echo, got) = echo_upstream(None).await;
    let ip_entry = format!("{GH}:443");
    let proxy = proxy_for(
        &[
            "api.github.com:443",
            "legacy.test:443 insecure-no-sni",
            &ip_entry,
        ],
        echo,
    )
    .await;
    let none = build_client_hello(&[], &[], 16384);
    let split_none = build_client_hello(&[], &[], 9);
    assert!(send_hello(proxy.addr, "api.github.com:443", &none)
        .await
        .is_empty());
    assert!(send_hello(proxy.addr, "api.github.com:443", &split_none)
        .await
        .is_empty());
    assert!(socks_send(proxy.addr, "api.github.com", 443, &none)
        .await
        .is_empty());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        got.lock().unwrap().is_empty(),
        "a ClientHello without SNI reached the upstream"
    );
    let r = refusals(&proxy);
    let reasons: Vec<(Protocol, &str)> = r.iter().map(|d| (d.0, d.3.as_str())).collect();
    assert_eq!(
        reasons,
        [
            (Protocol::Connect, "no-sni"),
            (Protocol::Connect, "no-sni"),
            (Protocol::Socks5, "no-sni"),
        ]
    );

    // Controls: with the name, through both.
    let named = build_client_hello(&["api.github.com"], &[], 16384);
    assert_eq!(
        send_hello(proxy.addr, "api.github.com:443", &named).await,
        named
    );
    assert_eq!(
        socks_send(proxy.addr, "api.github.com", 443, &named).await,
        named
    );
    // The option, through both.
    assert_eq!(send_hello(proxy.addr, "legacy.test:443", &none).await, none);
    assert_eq!(
        socks_send(proxy.addr, "legacy.test", 443, &none).await,
        none
    );
    // An IP target: no name is the norm, and is let through; a name is still
    // compared (and an address never matches one).
    assert_eq!(send_hello(proxy.addr, &ip_entry, &none).await, none);
    let (mut s, reply) = socks_request(proxy.addr, &ipv4_request([140, 82, 112, 3], 443)).await;
    assert_eq!(reply[1], 0);
    s.write_all(&none).await.unwrap();
    let mut back = vec![0u8; none.len()];
    tokio::time::timeout(HANG, s.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, none);
    drop(s);
    assert!(send_hello(proxy.addr, &ip_entry, &named).await.is_empty());
    let r = refusals(&proxy);
    assert_eq!(r.len(), 4, "{r:?}");
    assert_eq!((r[3].1.as_str(), r[3].3.as_str()), (GH, "sni-mismatch"));
    proxy.stop().await;
}

/// F4 with a real client: `curl --proxytunnel` sends plain HTTP through a
/// CONNECT tunnel. To a bare entry it is cut; with the port listed it works, as
/// does plain HTTP through the forward proxy.
#[tokio::test]
async fn curl_plain_http_through_a_tunnel() {
    if !curl_available() {
        eprintln!("skipping: curl not found");
        return;
    }
    let (origin, seen) = http_upstream().await;
    let port = origin.port();
    let resolver = ScriptedResolver::with(&[("web.test", &[GH]), ("raw.test", &[GH])]);
    let connector = LoopbackConnector::with(&[
        (&format!("{GH}:80"), origin),
        (&format!("{GH}:{port}"), origin),
    ]);
    let raw_entry = format!("raw.test:{port}");
    let proxy = start(
        policy(&["web.test", &raw_entry], false),
        resolver,
        connector,
    )
    .await;
    let px = format!("http://{}", proxy.addr);
    let (code, out, _) = curl(&["-p", "-x", &px, "http://web.test/t"]).await;
    assert_ne!(code, 0, "{out}");
    assert!(seen.requests().is_empty(), "{:?}", seen.requests());
    let d = proxy.sink.wait_decisions(2).await;
    assert_eq!(
        (d[1].allowed, d[1].reason.as_str()),
        (false, "plain-tunnel")
    );
    // Controls.
    let (code, out, err) = curl(&["-p", "-x", &px, &format!("http://raw.test:{port}/t")]).await;
    assert_eq!((code, out.as_str()), (0, "ok GET /t body=0\n"), "{err}");
    let (code, out, err) = curl(&["-x", &px, "http://web.test/f"]).await;
    assert_eq!((code, out.as_str()), (0, "ok GET /f body=0\n"), "{err}");
    assert_eq!(seen.requests().len(), 2);
    proxy.stop().await;
}
