//! The HTTP forward proxy on loopback: real curl for the ordinary paths, raw
//! sockets for the adversarial ones. Names resolve through a scripted resolver to
//! made-up public addresses that a loopback-only connector maps to the test's own
//! servers, so nothing leaves the machine and every lookup and connection attempt
//! is counted.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

mod common;

use std::net::SocketAddr;

use common::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const GH: &str = "140.82.112.3";

/// A proxy allowing `entries`, where api.github.com and raw.github.com resolve
/// to GH, mapped to a local origin server for port 80.
async fn github_proxy(entries: &[&str]) -> (Proxy, std::sync::Arc<Seen>, SocketAddr) {
    let (origin, seen) = http_upstream().await;
    let resolver = ScriptedResolver::with(&[
        ("api.github.com", &[GH]),
        ("raw.github.com", &[GH]),
        ("github.com", &[GH]),
        ("evil-github.com", &[GH]),
        ("evil.com", &[GH]),
    ]);
    let connector = LoopbackConnector::with(&[(&format!("{GH}:80"), origin)]);
    let proxy = start(policy(entries, false), resolver, connector).await;
    (proxy, seen, origin)
}

fn assert_denied(resp: &[u8], status: u16, code: &str) -> String {
    let text = String::from_utf8_lossy(resp).into_owned();
    assert!(
        text.starts_with(&format!("HTTP/1.1 {status} ")),
        "expected {status}: {text}"
    );
    assert!(
        text.contains(&format!("\r\nX-Warden-Denied: {code}\r\n")),
        "expected {code}: {text}"
    );
    assert!(text.contains("\r\nContent-Type: text/plain"), "{text}");
    assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
    text
}

#[tokio::test]
async fn curl_allowed_request_reaches_the_origin() {
    if !curl_available() {
        eprintln!("skipping: curl not found");
        return;
    }
    let (proxy, seen, _) = github_proxy(&["api.github.com"]).await;
    let px = format!("http://{}", proxy.addr);
    let (code, out, err) = curl(&["-x", &px, "http://api.github.com/repos?x=1"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "ok GET /repos?x=1 body=0\n");
    let reqs = seen.requests();
    assert_eq!(reqs.len(), 1);
    assert!(
        reqs[0].starts_with("GET /repos?x=1 HTTP/1.1\r\nHost: api.github.com\r\n"),
        "{}",
        reqs[0]
    );
    assert!(
        !reqs[0].to_ascii_lowercase().contains("proxy-connection"),
        "{}",
        reqs[0]
    );
    assert_eq!(proxy.lookups(), vec!["api.github.com"]);
    let d = proxy.sink.decisions();
    assert_eq!(d.len(), 1);
    assert!(d[0].allowed);
    assert_eq!(d[0].host, "api.github.com");
    assert_eq!(d[0].port, 80);
    assert_eq!(d[0].reason, "allowed by `api.github.com`");
    assert_eq!(d[0].rule.as_deref(), Some("api.github.com"));
    assert_eq!(d[0].address, Some(format!("{GH}:80").parse().unwrap()));
    let closed = proxy.sink.wait_closed(1).await;
    assert_eq!(closed[0].host, "api.github.com");
    assert!(
        closed[0].bytes_up > 30 && closed[0].bytes_down > 30,
        "{closed:?}"
    );

    // POST bodies (curl sends Content-Length) go through too.
    let (code, out, err) = curl(&["-x", &px, "-d", "hello=1", "http://api.github.com/p"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "ok POST /p body=7\n");
    proxy.stop().await;
}

#[tokio::test]
async fn curl_not_listed_is_refused_without_dns() {
    if !curl_available() {
        eprintln!("skipping: curl not found");
        return;
    }
    let (proxy, seen, _) = github_proxy(&["api.github.com"]).await;
    let px = format!("http://{}", proxy.addr);
    let (code, out, err) = curl(&["-x", &px, "-i", "http://evil.com/"]).await;
    assert_eq!(code, 0, "{err}");
    let text = assert_denied(out.as_bytes(), 403, "not-allowed");
    assert!(
        text.ends_with("\r\n\r\nwarden: evil.com:80 is not in network.allow\n"),
        "{text}"
    );
    assert!(proxy.lookups().is_empty(), "a refused name was looked up");
    assert!(proxy.connector.attempts().is_empty());
    assert!(seen.requests().is_empty());
    let d = proxy.sink.decisions();
    assert_eq!(
        (d.len(), d[0].allowed, d[0].reason.as_str()),
        (1, false, "not-allowed")
    );
    // Control: the same proxy lets the listed name through.
    let (code, out, _) = curl(&["-x", &px, "http://api.github.com/"]).await;
    assert_eq!((code, out.as_str()), (0, "ok GET / body=0\n"));
    proxy.stop().await;
}

async fn get(proxy: SocketAddr, target: &str, host: &str) -> Vec<u8> {
    raw(
        proxy,
        format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
}

#[tokio::test]
async fn suffix_rules_and_name_spellings() {
    let (proxy, seen, _) = github_proxy(&["*.github.com"]).await;
    for (target, host) in [
        ("http://evil-github.com/", "evil-github.com"),
        ("http://github.com/", "github.com"),
        ("http://github.com./", "github.com."),
        ("http://api.github.com.evil.com/", "api.github.com.evil.com"),
    ] {
        let resp = get(proxy.addr, target, host).await;
        assert_denied(&resp, 403, "not-allowed");
    }
    assert!(proxy.lookups().is_empty(), "{:?}", proxy.lookups());
    assert!(seen.requests().is_empty());
    // Controls: a subdomain in any case, with a trailing dot, is allowed and
    // normalised (the origin sees the normal form).
    for (target, host) in [
        ("http://raw.github.com/a", "raw.github.com"),
        ("http://RAW.GitHub.com./a", "raw.github.com"),
        ("http://raw.github.com/a", "RAW.GITHUB.COM."),
        ("http://raw.github.com:80/a", "raw.github.com"),
    ] {
        let resp = get(proxy.addr, target, host).await;
        let text = String::from_utf8_lossy(&resp);
        assert!(
            text.starts_with("HTTP/1.1 200 OK\r\n"),
            "{target} {host}: {text}"
        );
        assert!(text.ends_with("ok GET /a body=0\n"), "{text}");
    }
    for r in seen.requests() {
        assert!(
            r.starts_with("GET /a HTTP/1.1\r\nHost: raw.github.com\r\n"),
            "{r}"
        );
    }
    let hosts: Vec<String> = proxy
        .sink
        .decisions()
        .iter()
        .map(|d| d.host.clone())
        .collect();
    assert!(
        hosts
            .iter()
            .all(|h| !h.ends_with('.') && *h == h.to_ascii_lowercase()),
        "{hosts:?}"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn ip_literals_in_any_spelling_are_ips() {
    let (origin, seen) = http_upstream().await;
    let port = origin.port();
    let resolver = ScriptedResolver::with(&[]);
    let connector = LoopbackConnector::with(&[]);
    // Names only: no spelling of 127.0.0.1 may pass as a name.
    let proxy = start(
        policy(&["api.github.com", "localhost"], false),
        resolver.clone(),
        connector.clone(),
    )
    .await;
    for host in [
        "127.0.0.1",
        "2130706433",
        "0x7f000001",
        "0x7f.1",
        "127.1",
        "0177.0.0.1",
        "[::ffff:127.0.0.1]",
        "[::1]",
        "[0:0:0:0:0:0:0:1]",
    ] {
        let resp = get(
            proxy.addr,
            &format!("http://{host}:{port}/"),
            &format!("{host}:{port}"),
        )
        .await;
        let text = assert_denied(&resp, 403, "not-allowed");
        assert!(text.contains("is not in network.allow"), "{text}");
    }
    assert!(resolver.lookups().is_empty());
    assert!(connector.attempts().is_empty());
    let hosts: Vec<String> = proxy
        .sink
        .decisions()
        .iter()
        .map(|d| d.host.clone())
        .collect();
    assert_eq!(&hosts[..7], ["127.0.0.1"; 7]);
    assert_eq!(&hosts[7..], ["[::1]", "[::1]"]);
    proxy.stop().await;

    // Control: a policy listing the IP lets every spelling of it through, to
    // exactly that address and without DNS.
    let allow = format!("127.0.0.1:{port}");
    let proxy = start(
        policy(&[&allow], false),
        resolver.clone(),
        connector.clone(),
    )
    .await;
    for host in [
        "127.0.0.1",
        "2130706433",
        "0x7f.1",
        "127.1",
        "[::ffff:127.0.0.1]",
    ] {
        let resp = get(
            proxy.addr,
            &format!("http://{host}:{port}/"),
            &format!("{host}:{port}"),
        )
        .await;
        let text = String::from_utf8_lossy(&resp);
        assert!(text.starts_with("HTTP/1.1 200 OK"), "{host}: {text}");
    }
    assert_eq!(seen.requests().len(), 5);
    assert!(resolver.lookups().is_empty());
    assert!(connector.attempts().iter().all(|a| *a == origin));
    proxy.stop().await;
}

#[tokio::test]
async fn names_resolving_to_private_addresses_are_refused() {
    let (origin, seen) = http_upstream().await;
    let port = origin.port();
    let resolver = ScriptedResolver::with(&[("internal.test", &["127.0.0.1"])]);
    let connector = LoopbackConnector::with(&[]);
    let entry = format!("internal.test:{port}");
    let proxy = start(
        policy(&[&entry], false),
        resolver.clone(),
        connector.clone(),
    )
    .await;
    let resp = get(
        proxy.addr,
        &format!("http://internal.test:{port}/"),
        &format!("internal.test:{port}"),
    )
    .await;
    let text = assert_denied(&resp, 403, "private-address");
    assert!(text.contains("127.0.0.1"), "{text}");
    assert_eq!(resolver.lookups(), vec!["internal.test"]);
    assert!(
        connector.attempts().is_empty(),
        "connected to a refused address"
    );
    assert!(seen.requests().is_empty());
    let d = proxy.sink.decisions();
    assert_eq!(
        (d[0].allowed, d[0].reason.as_str()),
        (false, "private-address")
    );
    proxy.stop().await;

    // allow_private no longer opens loopback to every listed name (F11): still
    // refused, after the one lookup, without a connection.
    let proxy = start(policy(&[&entry], true), resolver.clone(), connector.clone()).await;
    let resp = get(
        proxy.addr,
        &format!("http://internal.test:{port}/"),
        &format!("internal.test:{port}"),
    )
    .await;
    let text = assert_denied(&resp, 403, "private-address");
    assert!(text.contains("`private` option"), "{text}");
    assert!(connector.attempts().is_empty());
    proxy.stop().await;

    // Control: the entry's own `private` option opens it, and the origin is reached.
    let private_entry = format!("internal.test:{port} private");
    let proxy = start(
        policy(&[&private_entry], false),
        resolver.clone(),
        connector.clone(),
    )
    .await;
    let resp = get(
        proxy.addr,
        &format!("http://internal.test:{port}/"),
        &format!("internal.test:{port}"),
    )
    .await;
    assert!(String::from_utf8_lossy(&resp).starts_with("HTTP/1.1 200 OK"));
    assert_eq!(seen.requests().len(), 1);
    assert_eq!(connector.attempts(), vec![origin]);
    proxy.stop().await;
}

/// F11: `allow_private` opens private classes to every listed name, but not
/// loopback (except `localhost`) and never cloud metadata; `private` on one entry
/// opens loopback for that entry only; metadata only by its exact address.
#[tokio::test]
async fn allow_private_no_longer_opens_loopback_and_metadata() {
    let (origin, seen) = http_upstream().await;
    let port = origin.port();
    let resolver = ScriptedResolver::with(&[
        ("corp.test", &["10.0.0.7"]),
        ("rebound.test", &["127.0.0.1"]),
        ("meta.test", &["169.254.169.254"]),
        ("meta6.test", &["fd00:ec2::254"]),
        ("localhost", &["127.0.0.1"]),
        ("dev.test", &["127.0.0.1"]),
    ]);
    // Every address the proxy might try goes to the origin (it is loopback, but
    // the connector is told where each would go): a refusal is the policy's.
    let map: Vec<(String, SocketAddr)> = ["10.0.0.7", "169.254.169.254", "[fd00:ec2::254]"]
        .iter()
        .map(|a| (format!("{a}:{port}"), origin))
        .collect();
    let map: Vec<(&str, SocketAddr)> = map.iter().map(|(a, o)| (a.as_str(), *o)).collect();
    let connector = LoopbackConnector::with(&map);
    let entries: Vec<String> = [
        "corp.test",
        "rebound.test",
        "meta.test",
        "meta6.test",
        "localhost",
        "dev.test",
    ]
    .iter()
    .map(|n| format!("{n}:{port}"))
    .collect();
    let mut entries: Vec<&str> = entries.iter().map(String::as_str).collect();
    let dev_private = format!("dev.test:{port} private");
    entries[5] = &dev_private;
    let meta_ip = format!("169.254.169.254:{port}");
    entries.push(&meta_ip);
    let proxy = start(policy(&entries, true), resolver.clone(), connector.clone()).await;
    let fetch = |host: &'static str| {
        let addr = proxy.addr;
        async move {
            let resp = get(
                addr,
                &format!("http://{host}:{port}/"),
                &format!("{host}:{port}"),
            )
            .await;
            String::from_utf8_lossy(&resp).into_owned()
        }
    };
    // Refused: a name pointed at loopback or metadata.
    for host in ["rebound.test", "meta.test", "meta6.test"] {
        let text = fetch(host).await;
        assert!(text.starts_with("HTTP/1.1 403 "), "{host}: {text}");
        assert!(
            text.contains("X-Warden-Denied: private-address"),
            "{host}: {text}"
        );
    }
    assert!(
        connector.attempts().is_empty(),
        "{:?}",
        connector.attempts()
    );
    assert!(seen.requests().is_empty());
    // Controls: private class with allow_private, `localhost`, the entry with
    // `private`, and metadata by its listed address.
    for host in ["corp.test", "localhost", "dev.test", "169.254.169.254"] {
        let text = fetch(host).await;
        assert!(text.starts_with("HTTP/1.1 200 OK"), "{host}: {text}");
    }
    assert_eq!(seen.requests().len(), 4);
    let d = proxy.sink.decisions();
    let refused: Vec<(&str, &str)> = d
        .iter()
        .filter(|d| !d.allowed)
        .map(|d| (d.host.as_str(), d.reason.as_str()))
        .collect();
    assert_eq!(
        refused,
        [
            ("rebound.test", "private-address"),
            ("meta.test", "private-address"),
            ("meta6.test", "private-address"),
        ]
    );
    proxy.stop().await;
}

#[tokio::test]
async fn one_lookup_per_decision_defeats_rebinding() {
    let (origin, seen) = http_upstream().await;
    let resolver = ScriptedResolver::default();
    // First lookup: a public address (and a loopback one, refused); any later
    // lookup would say loopback only.
    resolver.add("rebind.example", &[GH, "127.0.0.1"]);
    resolver.add("rebind.example", &["127.0.0.1"]);
    let resolver = std::sync::Arc::new(resolver);
    let connector = LoopbackConnector::with(&[(&format!("{GH}:80"), origin)]);
    let proxy = start(
        policy(&["rebind.example"], false),
        resolver.clone(),
        connector.clone(),
    )
    .await;
    let resp = get(proxy.addr, "http://rebind.example/", "rebind.example").await;
    assert!(String::from_utf8_lossy(&resp).starts_with("HTTP/1.1 200 OK"));
    assert_eq!(resolver.lookups().len(), 1, "resolved more than once");
    assert_eq!(
        connector.attempts(),
        vec![format!("{GH}:80").parse().unwrap()]
    );
    assert_eq!(seen.requests().len(), 1);
    // The next decision looks up again and gets the loopback answer: refused.
    let resp = get(proxy.addr, "http://rebind.example/", "rebind.example").await;
    assert_denied(&resp, 403, "private-address");
    assert_eq!(resolver.lookups().len(), 2);
    assert_eq!(connector.attempts().len(), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn host_header_must_name_the_target() {
    let (proxy, seen, _) = github_proxy(&["api.github.com", "evil.com"]).await;
    for host_line in [
        "Host: evil.com\r\n",
        "Host: api.github.com:8080\r\n",
        "Host: api.github.com.evil.com\r\n",
        "",
        "Host: \r\n",
        "Host: api.github.com@evil.com\r\n",
    ] {
        let req = format!("GET http://api.github.com/ HTTP/1.1\r\n{host_line}\r\n");
        let resp = raw(proxy.addr, req.as_bytes()).await;
        assert_denied(&resp, 403, "host-mismatch");
    }
    let req =
        "GET http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\nHost: evil.com\r\n\r\n";
    assert_denied(&raw(proxy.addr, req.as_bytes()).await, 400, "bad-request");
    assert!(proxy.lookups().is_empty());
    assert!(seen.requests().is_empty());
    proxy.stop().await;
}

#[tokio::test]
async fn keep_alive_decides_every_request() {
    let (proxy, seen, _) = github_proxy(&["api.github.com", "raw.github.com"]).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    // Two requests to the same host share one upstream connection.
    for path in ["/1", "/2"] {
        let req =
            format!("GET http://api.github.com{path} HTTP/1.1\r\nHost: api.github.com\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let resp = read_response(&mut s).await;
        assert!(resp.ends_with(&format!("ok GET {path} body=0\n")), "{resp}");
    }
    assert_eq!(seen.connections(), 1);
    // Another allowed host: decided afresh, a new upstream connection.
    s.write_all(b"GET http://raw.github.com/3 HTTP/1.1\r\nHost: raw.github.com\r\n\r\n")
        .await
        .unwrap();
    let resp = read_response(&mut s).await;
    assert!(resp.ends_with("ok GET /3 body=0\n"), "{resp}");
    assert_eq!(seen.connections(), 2);
    // A host not listed: refused, and the connection ends.
    s.write_all(b"GET http://evil.com/4 HTTP/1.1\r\nHost: evil.com\r\n\r\n")
        .await
        .unwrap();
    let rest = read_to_end(&mut s).await;
    assert_denied(&rest, 403, "not-allowed");
    assert_eq!(seen.requests().len(), 3);
    let d = proxy.sink.decisions();
    let summary: Vec<(&str, bool)> = d.iter().map(|d| (d.host.as_str(), d.allowed)).collect();
    assert_eq!(
        summary,
        [
            ("api.github.com", true),
            ("api.github.com", true),
            ("raw.github.com", true),
            ("evil.com", false)
        ]
    );
    assert_eq!(proxy.lookups(), vec!["api.github.com", "raw.github.com"]);
    let closed = proxy.sink.wait_closed(2).await;
    assert_eq!(closed.len(), 2);
    proxy.stop().await;
}

#[tokio::test]
async fn pipelined_requests_are_each_decided() {
    let (proxy, seen, _) = github_proxy(&["api.github.com"]).await;
    // A body (by Content-Length) followed at once by a request to another host:
    // the second request must be parsed on its own and refused.
    let req = "POST http://api.github.com/a HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 5\r\n\r\nhelloGET http://evil.com/ HTTP/1.1\r\nHost: evil.com\r\n\r\n";
    let resp = raw(proxy.addr, req.as_bytes()).await;
    let text = String::from_utf8_lossy(&resp);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("ok POST /a body=5\n"), "{text}");
    assert!(text.contains("X-Warden-Denied: not-allowed"), "{text}");
    let reqs = seen.requests();
    assert_eq!(reqs.len(), 1);
    assert!(!reqs[0].contains("evil"), "{reqs:?}");
    // Same with a chunked body.
    let req = "POST http://api.github.com/b HTTP/1.1\r\nHost: api.github.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET http://evil.com/ HTTP/1.1\r\nHost: evil.com\r\n\r\n";
    let resp = raw(proxy.addr, req.as_bytes()).await;
    let text = String::from_utf8_lossy(&resp);
    assert!(text.contains("ok POST /b body=15\n"), "{text}");
    assert!(text.contains("X-Warden-Denied: not-allowed"), "{text}");
    assert!(seen.requests().iter().all(|r| !r.contains("evil")));
    assert!(proxy.lookups().iter().all(|n| n == "api.github.com"));
    proxy.stop().await;
}

#[tokio::test]
async fn smuggling_attempts_are_refused() {
    let (proxy, seen, _) = github_proxy(&["api.github.com"]).await;
    let smuggled = "GET http://evil.com/ HTTP/1.1\r\nHost: evil.com\r\n\r\n";
    for framing in [
        // CL.TE and TE.CL
        "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
        // Two lengths, equal or not, or a list.
        "Content-Length: 4\r\nContent-Length: 60\r\n",
        "Content-Length: 4\r\nContent-Length: 4\r\n",
        "Content-Length: 4, 60\r\n",
        // Obfuscated Transfer-Encoding.
        "Transfer-Encoding: xchunked\r\n",
        "Transfer-Encoding: chunked, identity\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
        "Transfer-Encoding:\tchunked\r\nX: y\r\n folded\r\n",
        // A hop that honours Connection would drop the framing header.
        "Content-Length: 4\r\nConnection: Content-Length\r\n",
        // Bare LF inside the head.
        "Content-Length: 4\nX: y\r\n",
    ] {
        let req = format!("POST http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\n{framing}\r\n0\r\n\r\n{smuggled}");
        let resp = raw(proxy.addr, req.as_bytes()).await;
        assert_denied(&resp, 400, "bad-request");
        assert!(
            !String::from_utf8_lossy(&resp).contains("X-Upstream"),
            "{framing}"
        );
    }
    assert!(seen.requests().is_empty(), "{:?}", seen.requests());
    assert!(proxy.lookups().is_empty());
    // Invalid chunk sizes: the upstream gets at most the valid prefix, never the
    // bytes after it.
    for body in [
        "5 \r\nhello\r\n0\r\n\r\n",
        "0x5\r\nhello\r\n0\r\n\r\n",
        "-1\r\n",
        "5\r\nhelloX\r\n0\r\n\r\n",
        "5\nhello\r\n0\r\n\r\n",
    ] {
        let req = format!("POST http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\nTransfer-Encoding: chunked\r\n\r\n{body}{smuggled}");
        let resp = raw(proxy.addr, req.as_bytes()).await;
        let text = String::from_utf8_lossy(&resp);
        assert!(
            text.is_empty() || text.contains("X-Warden-Denied: bad-request"),
            "{body:?}: {text}"
        );
    }
    assert!(seen.requests().iter().all(|r| !r.contains("evil")));
    assert!(proxy.lookups().iter().all(|n| n == "api.github.com"));
    proxy.stop().await;
}

#[tokio::test]
async fn malformed_requests_get_400_and_no_lookup() {
    let (proxy, seen, _) = github_proxy(&["api.github.com"]).await;
    let long_label = "a".repeat(63);
    let long_name = [long_label.as_str(); 4].join("."); // 255 bytes
    let overlong_target = format!("GET http://{long_name}/ HTTP/1.1\r\nHost: {long_name}\r\n\r\n");
    let huge_target = format!(
        "GET http://{}.com/ HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(400)
    );
    let many_headers = format!(
        "GET http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\n{}\r\n",
        (0..101)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect::<String>()
    );
    let big_head = format!(
        "GET http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\nX: {}\r\n\r\n",
        "v".repeat(17 * 1024)
    );
    let cases: Vec<(&[u8], &str)> = vec![
        (
            b"GET / HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
            "bad-request",
        ),
        (
            b"GET api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
            "bad-request",
        ),
        (
            b"GET https://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
            "bad-request",
        ),
        (
            b"GET http://user@api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
            "bad-request",
        ),
        (
            b"GET http://api.github.com@evil.com/ HTTP/1.1\r\nHost: evil.com\r\n\r\n",
            "bad-request",
        ),
        (
            b"GET http://api.github.com/ HTTP/2.0\r\nHost: api.github.com\r\n\r\n",
            "bad-request",
        ),
        (b"GET http://api.github.com/ FTP/1.1\r\n\r\n", "bad-request"),
        (
            b"GET  http://api.github.com/ HTTP/1.1\r\n\r\n",
            "bad-request",
        ),
        (
            b"GET http://api.github.com/\x01 HTTP/1.1\r\n\r\n",
            "bad-request",
        ),
        (
            b"G\x00T http://api.github.com/ HTTP/1.1\r\n\r\n",
            "bad-request",
        ),
        (
            b"GET http://api.github.com/ HTTP/1.1\nHost: api.github.com\n\n",
            "bad-request",
        ),
        (
            b"\r\nGET http://api.github.com/ HTTP/1.1\r\n\r\n",
            "bad-request",
        ),
        (
            b"GET http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\n folded\r\n\r\n",
            "bad-request",
        ),
        (
            b"GET http://api.git%68ub.com/ HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
            "bad-request",
        ),
        (
            b"GET http://api..github.com/ HTTP/1.1\r\nHost: api..github.com\r\n\r\n",
            "bad-host",
        ),
        (
            b"GET http://api.github.com:99999/ HTTP/1.1\r\nHost: api.github.com\r\n\r\n",
            "bad-request",
        ),
        (overlong_target.as_bytes(), "bad-host"),
        (huge_target.as_bytes(), "bad-request"),
        (many_headers.as_bytes(), "bad-request"),
        (big_head.as_bytes(), "bad-request"),
        (b"\x16\x03\x01\x00\x05hello", "bad-request"),
    ];
    for (req, code) in &cases {
        eprintln!(
            "case: {}",
            String::from_utf8_lossy(&req[..req.len().min(60)])
        );
        let resp = raw(proxy.addr, req).await;
        assert_denied(&resp, 400, code);
    }
    assert!(proxy.lookups().is_empty());
    assert!(seen.requests().is_empty());
    let d = proxy.sink.decisions();
    assert_eq!(d.len(), cases.len());
    assert!(d.iter().all(|d| !d.allowed));
    proxy.stop().await;
}

#[tokio::test]
async fn upgrades_splice_only_to_the_checked_target() {
    let (proxy, seen, _) = github_proxy(&["api.github.com"]).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"GET http://api.github.com/ws HTTP/1.1\r\nHost: api.github.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut tmp = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains("hello from ws\n") {
        let n = tokio::time::timeout(HANG, tokio::io::AsyncReadExt::read(&mut s, &mut tmp))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        got.extend_from_slice(&tmp[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{text}"
    );
    assert!(
        text.contains("Upgrade: websocket\r\n") && text.contains("Connection: upgrade\r\n"),
        "{text}"
    );
    let r = &seen.requests()[0];
    assert!(
        r.contains("Upgrade: websocket\r\n") && r.contains("Connection: upgrade\r\n"),
        "{r}"
    );
    // Now a tunnel: bytes are echoed by the origin.
    s.write_all(b"ping").await.unwrap();
    let mut echo = [0u8; 4];
    tokio::time::timeout(HANG, tokio::io::AsyncReadExt::read_exact(&mut s, &mut echo))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&echo, b"ping");
    drop(s);
    let closed = proxy.sink.wait_closed(1).await;
    assert!(closed[0].bytes_up >= 4);

    // An upgrade whose Host is another host, or whose target is not listed, is a
    // plain refusal.
    let resp = raw(proxy.addr, b"GET http://api.github.com/ws HTTP/1.1\r\nHost: evil.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n").await;
    assert_denied(&resp, 403, "host-mismatch");
    let resp = raw(proxy.addr, b"GET http://evil.com/ws HTTP/1.1\r\nHost: evil.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n").await;
    assert_denied(&resp, 403, "not-allowed");
    // And after an allowed request on the same connection, an upgrade to another
    // host is decided on its own.
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"GET http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\n\r\n")
        .await
        .unwrap();
    let _ = read_response(&mut s).await;
    s.write_all(b"GET http://evil.com/ws HTTP/1.1\r\nHost: evil.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n").await.unwrap();
    assert_denied(&read_to_end(&mut s).await, 403, "not-allowed");
    assert_eq!(seen.requests().len(), 2);
    proxy.stop().await;
}

#[tokio::test]
async fn response_framings_are_relayed() {
    let (proxy, _seen, _) = github_proxy(&["api.github.com"]).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    // Chunked response, then HEAD (no body despite Content-Length), on one connection.
    s.write_all(b"GET http://api.github.com/chunked HTTP/1.1\r\nHost: api.github.com\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"0\r\n\r\n") {
        let mut tmp = [0u8; 1024];
        let n = tokio::time::timeout(HANG, tokio::io::AsyncReadExt::read(&mut s, &mut tmp))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        got.extend_from_slice(&tmp[..n]);
    }
    assert!(String::from_utf8_lossy(&got).contains("6\r\nchunk \r\n5\r\nbody\n\r\n0\r\n\r\n"));
    s.write_all(b"HEAD http://api.github.com/h HTTP/1.1\r\nHost: api.github.com\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        tokio::io::AsyncReadExt::read_exact(&mut s, &mut b)
            .await
            .unwrap();
        head.push(b[0]);
    }
    assert!(String::from_utf8_lossy(&head).contains("Content-Length: "));
    // Close-delimited: the proxy says Connection: close and closes after it.
    s.write_all(b"GET http://api.github.com/close HTTP/1.1\r\nHost: api.github.com\r\n\r\n")
        .await
        .unwrap();
    let rest = String::from_utf8_lossy(&read_to_end(&mut s).await).into_owned();
    assert!(rest.starts_with("HTTP/1.1 200 OK\r\n"), "{rest}");
    assert!(
        rest.contains("Connection: close\r\n") && rest.ends_with("until close\n"),
        "{rest}"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn large_bodies_arrive_intact_and_keep_alive_goes_on() {
    // 3 MiB + 7 bytes: far above the size from which the proxy splices bodies
    // socket to socket; the same connection then carries a small request.
    let (proxy, seen, _) = github_proxy(&["api.github.com"]).await;
    let n = 3 * 1024 * 1024 + 7;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    let req =
        format!("GET http://api.github.com/bytes/{n} HTTP/1.1\r\nHost: api.github.com\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let body_at = loop {
        let mut tmp = vec![0u8; 64 * 1024];
        let k = tokio::time::timeout(HANG, tokio::io::AsyncReadExt::read(&mut s, &mut tmp))
            .await
            .unwrap()
            .unwrap();
        assert!(k > 0, "closed early after {} bytes", got.len());
        got.extend_from_slice(&tmp[..k]);
        if let Some(p) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            if got.len() >= p + 4 + n {
                break p + 4;
            }
        }
    };
    let head = String::from_utf8_lossy(&got[..body_at]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert_eq!(got.len(), body_at + n, "no byte beyond the body");
    assert!(
        got[body_at..]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8),
        "body corrupted"
    );
    s.write_all(b"GET http://api.github.com/after HTTP/1.1\r\nHost: api.github.com\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let rest = String::from_utf8_lossy(&read_to_end(&mut s).await).into_owned();
    assert!(rest.contains("ok GET /after"), "{rest}");
    assert_eq!(
        *seen.connections.lock().unwrap(),
        1,
        "the upstream connection was reused"
    );
    proxy.stop().await;
}

#[tokio::test]
async fn curl_through_a_connect_tunnel() {
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
    let px = format!("http://{}", proxy.addr);
    // -p: CONNECT, then plain HTTP inside the tunnel (not TLS: allowed as is).
    let url = format!("http://api.github.com:{port}/t");
    let (code, out, err) = curl(&["-p", "-x", &px, &url]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "ok GET /t body=0\n");
    assert_eq!(seen.requests().len(), 1);
    let d = proxy.sink.decisions();
    assert_eq!(
        (d[0].protocol, d[0].allowed),
        (warden_proxy::Protocol::Connect, true)
    );
    // CONNECT to a host not listed.
    let (code, _, _) = curl(&["-p", "-x", &px, &format!("http://evil.com:{port}/")]).await;
    assert_ne!(code, 0);
    let d = proxy.sink.wait_decisions(2).await;
    assert_eq!(
        (d[1].host.as_str(), d[1].reason.as_str()),
        ("evil.com", "not-allowed")
    );
    assert_eq!(proxy.lookups(), vec!["api.github.com"]);
    let closed = proxy.sink.wait_closed(1).await;
    assert_eq!(closed[0].protocol, warden_proxy::Protocol::Connect);
    assert!(closed[0].bytes_up > 0 && closed[0].bytes_down > 0);
    proxy.stop().await;
}

#[tokio::test]
async fn url_confusion_never_reaches_another_host() {
    // Spellings where URL parsers have disagreed about the host (userinfo,
    // fragment, backslash, query, percent-encoding, homoglyphs, suffix
    // lookalikes): each is refused, and nothing reaches the only allowed
    // origin, which would answer for api.github.com.
    let (proxy, seen, _) = github_proxy(&["api.github.com"]).await;
    let targets = [
        ("http://evil.com#@api.github.com/", "api.github.com"),
        ("http://evil.com?@api.github.com/", "api.github.com"),
        ("http://evil.com\\@api.github.com/", "api.github.com"),
        ("http://api.github.com\\@evil.com/", "evil.com"),
        ("http://api.github.com:80@evil.com/", "evil.com"),
        ("http://api.github.com@evil.com/", "evil.com"),
        ("http://%61pi.github.com/", "api.github.com"),
        ("http://api%2egithub.com/", "api.github.com"),
        ("http://\u{430}pi.github.com/", "\u{430}pi.github.com"),
        ("http://api.github.com.evil.com/", "api.github.com.evil.com"),
        ("http://evil.com/http://api.github.com/", "api.github.com"),
        ("http://api.github.com:80:80/", "api.github.com"),
        ("http://[api.github.com]/", "api.github.com"),
    ];
    for (target, host) in targets {
        let resp = get(proxy.addr, target, host).await;
        let text = String::from_utf8_lossy(&resp).into_owned();
        assert!(
            text.starts_with("HTTP/1.1 4") && text.contains("\r\nX-Warden-Denied: "),
            "{target} (Host: {host}) was not refused: {text}"
        );
    }
    assert_eq!(seen.connections(), 0, "{:?}", seen.requests());
    // Control: the plain spelling goes through to that origin.
    let resp = get(proxy.addr, "http://api.github.com/", "api.github.com").await;
    let text = String::from_utf8_lossy(&resp).into_owned();
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert_eq!(seen.connections(), 1);
    proxy.stop().await;
}

/// TRACE and TRACK (which reflect the request, headers added on the way
/// included) are refused with 405 and an `Allow` list, any method the proxy does
/// not know with 501, before any lookup or connection; each is one audited
/// denial. Controls: GET, POST and a WebDAV PROPFIND reach the origin, and a
/// refused method after a good request on the same connection is refused too.
#[tokio::test]
async fn trace_track_and_unknown_methods_are_refused() {
    let (proxy, seen, _) = github_proxy(&["api.github.com"]).await;
    let request = |method: &str| {
        format!("{method} http://api.github.com/m HTTP/1.1\r\nHost: api.github.com\r\nContent-Length: 0\r\n\r\n")
    };
    for (method, status, code) in [
        ("TRACE", 405, "method-refused"),
        ("TRACK", 405, "method-refused"),
        ("FOO", 501, "method-unknown"),
        ("get", 501, "method-unknown"),
        ("PURGE", 501, "method-unknown"),
        ("QUERY", 501, "method-unknown"),
    ] {
        let resp = raw(proxy.addr, request(method).as_bytes()).await;
        let text = assert_denied(&resp, status, code);
        if status == 405 {
            assert!(
                text.contains("\r\nAllow: GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH,"),
                "{text}"
            );
            assert!(!text.contains("TRACE,"), "{text}");
        }
    }
    assert!(proxy.lookups().is_empty(), "{:?}", proxy.lookups());
    assert!(proxy.connector.attempts().is_empty());
    assert!(seen.requests().is_empty());
    let d = proxy.sink.decisions();
    let got: Vec<(&str, u16, bool, &str)> = d
        .iter()
        .map(|d| (d.host.as_str(), d.port, d.allowed, d.reason.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("api.github.com", 80, false, "method-refused"),
            ("api.github.com", 80, false, "method-refused"),
            ("api.github.com", 80, false, "method-unknown"),
            ("api.github.com", 80, false, "method-unknown"),
            ("api.github.com", 80, false, "method-unknown"),
            ("api.github.com", 80, false, "method-unknown"),
        ]
    );

    // Controls.
    for method in ["GET", "POST", "PROPFIND"] {
        let mut s = TcpStream::connect(proxy.addr).await.unwrap();
        s.write_all(request(method).as_bytes()).await.unwrap();
        let resp = read_response(&mut s).await;
        assert!(resp.starts_with("HTTP/1.1 200"), "{method}: {resp}");
        assert!(
            resp.ends_with(&format!("ok {method} /m body=0\n")),
            "{resp}"
        );
    }
    // Keep-alive: GET answered, then TRACE on the same connection refused.
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(request("GET").as_bytes()).await.unwrap();
    assert!(read_response(&mut s).await.starts_with("HTTP/1.1 200"));
    s.write_all(request("TRACE").as_bytes()).await.unwrap();
    assert_denied(&read_to_end(&mut s).await, 405, "method-refused");
    let methods: Vec<String> = seen
        .requests()
        .iter()
        .map(|r| r.split(' ').next().unwrap_or("").to_string())
        .collect();
    assert_eq!(methods, ["GET", "POST", "PROPFIND", "GET"]);
    proxy.stop().await;
}
