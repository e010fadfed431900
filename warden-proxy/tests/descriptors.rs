//! F10: the proxy out of file descriptors. Its own test binary, because it
//! lowers this process's `RLIMIT_NOFILE` and fills it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

mod common;

use std::fs::File;
use std::time::Duration;

use common::*;
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const GH: &str = "140.82.112.3";

/// The highest open descriptor number of this process.
fn highest_fd() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap_or(2)
}

/// Out of descriptors (`EMFILE` at accept), the proxy neither crashes nor leaves
/// clients hanging: each waiting client is accepted on the reserve descriptor,
/// answered `503 proxy-overloaded` and closed, and the failure is reported once
/// (rate-limited) with its errno. Control: with descriptors back, the same proxy
/// serves a request.
#[tokio::test]
async fn out_of_descriptors_clients_get_503_and_the_proxy_recovers() {
    let (origin, seen) = http_upstream().await;
    let resolver = ScriptedResolver::with(&[("api.github.com", &[GH])]);
    let connector = LoopbackConnector::with(&[(&format!("{GH}:80"), origin)]);
    let proxy = start(policy(&["api.github.com"], false), resolver, connector).await;
    // Let the proxy take its reserve before the limit drops.
    let mut warm = TcpStream::connect(proxy.addr).await.unwrap();
    warm.write_all(b"GET http://api.github.com/w HTTP/1.1\r\nHost: api.github.com\r\n\r\n")
        .await
        .unwrap();
    assert!(read_response(&mut warm).await.starts_with("HTTP/1.1 200"));
    drop(warm);
    // ...and close that connection's descriptors (client, upstream, the origin's
    // end), which would otherwise free up under the test's feet.
    proxy.sink.wait_closed(1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, highest_fd() + 64, hard).unwrap();
    let mut hog = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(f) => hog.push(f),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(nix::libc::EMFILE), "{e}");
                break;
            }
        }
    }
    // Three clients, each on a descriptor freed for it; the proxy has none left
    // to accept them with.
    let mut clients = Vec::new();
    for _ in 0..3 {
        hog.pop();
        clients.push(TcpStream::connect(proxy.addr).await.unwrap());
    }
    let mut answers = Vec::new();
    for c in &mut clients {
        answers.push(String::from_utf8_lossy(&read_to_end(c).await).into_owned());
    }
    drop(clients);
    let failures = tokio::time::timeout(HANG, async {
        loop {
            let f = proxy.sink.accept_failures.lock().unwrap().clone();
            if f.iter().map(|f| f.shed).sum::<u64>() >= 3 {
                return f;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Descriptors back before asserting anything.
    drop(hog);
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();

    for a in &answers {
        assert!(a.starts_with("HTTP/1.1 503 "), "{a}");
        assert!(
            a.contains("\r\nX-Warden-Denied: proxy-overloaded\r\n"),
            "{a}"
        );
        assert!(a.ends_with("out of file descriptors; try again\n"), "{a}");
    }
    let failures = failures.expect("the accept failures are reported");
    assert!(failures
        .iter()
        .all(|f| f.errno == Some(nix::libc::EMFILE) && f.failures >= 1));
    assert!(
        failures[0].error.contains("Too many open files"),
        "{failures:?}"
    );
    // Rate-limited and backed off: a handful of failed accepts, not a spin.
    let total: u64 = failures.iter().map(|f| f.failures).sum();
    assert!(
        total <= 20,
        "{total} failed accepts for 3 clients: {failures:?}"
    );
    assert!(proxy.sink.decisions().iter().all(|d| d.allowed));

    // Control: the same proxy serves again.
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"GET http://api.github.com/again HTTP/1.1\r\nHost: api.github.com\r\n\r\n")
        .await
        .unwrap();
    let resp = read_response(&mut s).await;
    assert!(resp.ends_with("ok GET /again body=0\n"), "{resp}");
    assert_eq!(seen.requests().len(), 2);
    drop(s);
    proxy.stop().await;
}
