//! Bounds: concurrent connections, the head timeout, the idle timeout, and
//! shutdown ending open tunnels (with their `closed` events).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

mod common;

use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warden_proxy::Limits;

const GH: &str = "140.82.112.3";

#[tokio::test]
async fn connections_beyond_the_limit_wait() {
    let (origin, _) = http_upstream().await;
    let resolver = ScriptedResolver::with(&[("api.github.com", &[GH])]);
    let connector = LoopbackConnector::with(&[(&format!("{GH}:80"), origin)]);
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let proxy = start_with(
        policy(&["api.github.com"], false),
        resolver,
        connector,
        limits,
    )
    .await;
    let req = b"GET http://api.github.com/ HTTP/1.1\r\nHost: api.github.com\r\n\r\n";
    let mut a = TcpStream::connect(proxy.addr).await.unwrap();
    let mut b = TcpStream::connect(proxy.addr).await.unwrap();
    for s in [&mut a, &mut b] {
        s.write_all(req).await.unwrap();
        assert!(read_response(s).await.starts_with("HTTP/1.1 200"));
    }
    // A third connection is accepted by the kernel but not served...
    let mut c = TcpStream::connect(proxy.addr).await.unwrap();
    c.write_all(req).await.unwrap();
    let mut one = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), c.read(&mut one)).await;
    assert!(early.is_err(), "served beyond max_connections");
    // ...until one of the two ends.
    drop(a);
    assert!(read_response(&mut c).await.starts_with("HTTP/1.1 200"));
    proxy.stop().await;
}

/// F10: one session holds at most 64 client connections by default (each tunnel
/// costs the daemon about six descriptors).
#[test]
fn the_default_connection_limit_is_modest() {
    assert_eq!(Limits::default().max_connections, 64);
    assert_eq!(warden_proxy::DEFAULT_MAX_CONNECTIONS, 64);
}

#[tokio::test]
async fn slow_heads_are_cut_off() {
    let resolver = ScriptedResolver::with(&[]);
    let connector = LoopbackConnector::with(&[]);
    let limits = Limits {
        head_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let proxy = start_with(
        policy(&["api.github.com"], false),
        resolver,
        connector,
        limits,
    )
    .await;
    for partial in [
        &b""[..],
        b"GET http://api.github.com/ HTTP/1.1\r\nHost: api",
        b"\x05\x01",
    ] {
        let mut s = TcpStream::connect(proxy.addr).await.unwrap();
        s.write_all(partial).await.unwrap();
        // Closed by the proxy well before the generous bound.
        let out = read_to_end(&mut s).await;
        assert!(out.is_empty(), "{out:?}");
    }
    assert!(proxy.sink.decisions().is_empty());
    proxy.stop().await;
}

#[tokio::test]
async fn idle_tunnels_are_closed() {
    let (echo, _) = echo_upstream(None).await;
    let resolver = ScriptedResolver::with(&[("api.github.com", &[GH])]);
    let connector = LoopbackConnector::with(&[(&format!("{GH}:22"), echo)]);
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let proxy = start_with(
        policy(&["api.github.com:22"], false),
        resolver,
        connector,
        limits,
    )
    .await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"CONNECT api.github.com:22 HTTP/1.1\r\n\r\nhi")
        .await
        .unwrap();
    let out = read_to_end(&mut s).await;
    assert_eq!(out, b"HTTP/1.1 200 Connection Established\r\n\r\nhi");
    let closed = proxy.sink.wait_closed(1).await;
    assert_eq!((closed[0].bytes_up, closed[0].bytes_down), (2, 2));
    proxy.stop().await;
}

#[tokio::test]
async fn shutdown_ends_tunnels_and_reports_them() {
    let (echo, _) = echo_upstream(None).await;
    let resolver = ScriptedResolver::with(&[("api.github.com", &[GH])]);
    let connector = LoopbackConnector::with(&[(&format!("{GH}:443"), echo)]);
    // Plain bytes through a tunnel need the port listed explicitly.
    let proxy = start(policy(&["api.github.com:443"], false), resolver, connector).await;
    let mut tunnels = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(proxy.addr).await.unwrap();
        s.write_all(b"CONNECT api.github.com:443 HTTP/1.1\r\n\r\nping")
            .await
            .unwrap();
        let mut got = [0u8; 43];
        tokio::time::timeout(HANG, s.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert!(got.ends_with(b"ping"));
        tunnels.push(s);
    }
    let sink = proxy.sink.clone();
    proxy.stop().await;
    for mut s in tunnels {
        assert!(read_to_end(&mut s).await.is_empty());
    }
    let closed = sink.closed();
    assert_eq!(closed.len(), 3);
    assert!(closed.iter().all(|c| c.bytes_up == 4 && c.bytes_down == 4));
}
