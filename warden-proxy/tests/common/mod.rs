//! Shared test parts: the proxy on 127.0.0.1:0 with a recording sink, a scripted
//! resolver and a connector that only ever reaches loopback, small upstream
//! servers, and raw-socket helpers.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use warden_core::policy::net::NetworkPolicy;
use warden_proxy::{
    AcceptFailure, BoxFuture, Closed, ConnDecision, Connector, EventSink, Limits, ProxyConfig,
    Resolver,
};

/// A generous bound that only catches hangs.
pub const HANG: Duration = Duration::from_secs(20);

#[derive(Default)]
pub struct Sink {
    pub decisions: Mutex<Vec<ConnDecision>>,
    pub closed: Mutex<Vec<Closed>>,
    pub accept_failures: Mutex<Vec<AcceptFailure>>,
}

impl EventSink for Sink {
    fn decision(&self, d: &ConnDecision) {
        assert!(
            d.host.len() <= 255 && d.host.bytes().all(|b| b.is_ascii_graphic()),
            "unprintable host in {d:?}"
        );
        self.decisions.lock().unwrap().push(d.clone());
    }
    fn closed(&self, c: &Closed) {
        self.closed.lock().unwrap().push(c.clone());
    }
    fn accept_failed(&self, f: &AcceptFailure) {
        self.accept_failures.lock().unwrap().push(f.clone());
    }
}

impl Sink {
    pub fn decisions(&self) -> Vec<ConnDecision> {
        self.decisions.lock().unwrap().clone()
    }
    pub fn closed(&self) -> Vec<Closed> {
        self.closed.lock().unwrap().clone()
    }
    /// Waits until `n` closed events arrived (they come when connections end).
    pub async fn wait_closed(&self, n: usize) -> Vec<Closed> {
        tokio::time::timeout(HANG, async {
            loop {
                if self.closed.lock().unwrap().len() >= n {
                    return self.closed();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("closed events")
    }
    pub async fn wait_decisions(&self, n: usize) -> Vec<ConnDecision> {
        tokio::time::timeout(HANG, async {
            loop {
                if self.decisions.lock().unwrap().len() >= n {
                    return self.decisions();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("decisions")
    }
}

/// Answers from a table; each name has a list of answers, one per lookup (the
/// last one repeats). Records every lookup.
#[derive(Default)]
pub struct ScriptedResolver {
    pub answers: Mutex<HashMap<String, Vec<Vec<IpAddr>>>>,
    pub lookups: Mutex<Vec<String>>,
}

impl ScriptedResolver {
    pub fn with(entries: &[(&str, &[&str])]) -> Arc<Self> {
        let r = ScriptedResolver::default();
        for (name, ips) in entries {
            r.add(name, ips);
        }
        Arc::new(r)
    }
    /// Adds one more answer for `name` (for the next lookup after the earlier ones).
    pub fn add(&self, name: &str, ips: &[&str]) {
        let ips = ips.iter().map(|s| s.parse().unwrap()).collect();
        self.answers
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default()
            .push(ips);
    }
    pub fn lookups(&self) -> Vec<String> {
        self.lookups.lock().unwrap().clone()
    }
}

impl Resolver for ScriptedResolver {
    fn resolve<'a>(&'a self, name: &'a str, _port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        let mut lookups = self.lookups.lock().unwrap();
        let nth = lookups.iter().filter(|n| *n == name).count();
        lookups.push(name.to_string());
        let answer = self
            .answers
            .lock()
            .unwrap()
            .get(name)
            .map(|list| list.get(nth).or(list.last()).cloned().unwrap_or_default());
        Box::pin(async move {
            answer.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such name"))
        })
    }
}

/// Connects only to loopback: an address in `map` goes to its mapped local
/// address, a loopback address as is, anything else is refused (these tests never
/// send a packet off the machine). Records every attempt.
#[derive(Default)]
pub struct LoopbackConnector {
    pub map: Mutex<HashMap<SocketAddr, SocketAddr>>,
    pub attempts: Mutex<Vec<SocketAddr>>,
}

impl LoopbackConnector {
    pub fn with(map: &[(&str, SocketAddr)]) -> Arc<Self> {
        let c = LoopbackConnector::default();
        for (from, to) in map {
            c.map.lock().unwrap().insert(from.parse().unwrap(), *to);
        }
        Arc::new(c)
    }
    pub fn attempts(&self) -> Vec<SocketAddr> {
        self.attempts.lock().unwrap().clone()
    }
}

impl Connector for LoopbackConnector {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        self.attempts.lock().unwrap().push(addr);
        let target = self.map.lock().unwrap().get(&addr).copied();
        Box::pin(async move {
            match target {
                Some(t) => TcpStream::connect(t).await,
                None if addr.ip().is_loopback() => TcpStream::connect(addr).await,
                None => Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    "test connector: not a loopback address",
                )),
            }
        })
    }
}

pub struct Proxy {
    pub addr: SocketAddr,
    pub sink: Arc<Sink>,
    pub resolver: Arc<ScriptedResolver>,
    pub connector: Arc<LoopbackConnector>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Stops the proxy and waits for `serve` to return.
    pub async fn stop(mut self) {
        let _ = self.shutdown.take().unwrap().send(());
        tokio::time::timeout(HANG, self.task.take().unwrap())
            .await
            .expect("serve returns after shutdown")
            .unwrap();
    }

    pub fn lookups(&self) -> Vec<String> {
        self.resolver.lookups()
    }
}

pub fn policy(entries: &[&str], allow_private: bool) -> Arc<NetworkPolicy> {
    let entries: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
    Arc::new(NetworkPolicy::compile(&entries, allow_private).expect("test policy compiles"))
}

pub async fn start(
    policy: Arc<NetworkPolicy>,
    resolver: Arc<ScriptedResolver>,
    connector: Arc<LoopbackConnector>,
) -> Proxy {
    start_with(policy, resolver, connector, Limits::default()).await
}

pub async fn start_with(
    policy: Arc<NetworkPolicy>,
    resolver: Arc<ScriptedResolver>,
    connector: Arc<LoopbackConnector>,
    limits: Limits,
) -> Proxy {
    let sink = Arc::new(Sink::default());
    let mut cfg = ProxyConfig::new("test-session", policy, sink.clone());
    cfg.resolver = resolver.clone();
    cfg.connector = connector.clone();
    cfg.limits = limits;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(warden_proxy::serve(listener, Arc::new(cfg), async move {
        let _ = rx.await;
    }));
    Proxy {
        addr,
        sink,
        resolver,
        connector,
        shutdown: Some(tx),
        task: Some(task),
    }
}

/// What the upstream HTTP server saw: one entry per request (head + body bytes).
#[derive(Default)]
pub struct Seen {
    pub requests: Mutex<Vec<String>>,
    pub connections: Mutex<usize>,
}

impl Seen {
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
    pub fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }
}

/// A small HTTP/1.1 origin server written independently of the proxy's parser.
/// Paths: `/bytes/N` answers N pattern bytes (byte i is i % 251), `/close` answers close-delimited, `/chunked` answers chunked, `/ws`
/// with `Upgrade` answers 101 and then echoes, anything else answers
/// `Content-Length` with `ok <method> <path> body=<n>`.
pub async fn http_upstream() -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            *s.connections.lock().unwrap() += 1;
            let s = s.clone();
            tokio::spawn(async move {
                let _ = serve_origin(stream, &s).await;
            });
        }
    });
    (addr, seen)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<bool> {
    let mut tmp = [0u8; 4096];
    let n = stream.read(&mut tmp).await?;
    buf.extend_from_slice(&tmp[..n]);
    Ok(n > 0)
}

async fn serve_origin(mut stream: TcpStream, seen: &Seen) -> io::Result<()> {
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(p) = find(&buf, b"\r\n\r\n") {
                break p + 4;
            }
            if !fill(&mut stream, &mut buf).await? {
                return Ok(());
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end);
        let lower = head.to_ascii_lowercase();
        let mut body = Vec::new();
        if let Some(cl) = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
        {
            let n: usize = cl.trim().parse().unwrap();
            while buf.len() < n {
                if !fill(&mut stream, &mut buf).await? {
                    return Ok(());
                }
            }
            body = buf.drain(..n).collect();
        } else if lower.contains("transfer-encoding: chunked") {
            // Keep the raw chunked bytes up to the end of the trailers.
            loop {
                if let Some(p) = find(&buf, b"0\r\n\r\n") {
                    body = buf.drain(..p + 5).collect();
                    break;
                }
                if !fill(&mut stream, &mut buf).await? {
                    return Ok(());
                }
            }
        }
        let mut line = head.lines().next().unwrap_or("").split(' ');
        let method = line.next().unwrap_or("").to_string();
        let path = line.next().unwrap_or("").to_string();
        seen.requests
            .lock()
            .unwrap()
            .push(format!("{head}{}", String::from_utf8_lossy(&body)));
        let close = lower.contains("connection: close");
        if path == "/ws" && lower.contains("upgrade: websocket") {
            stream
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nhello from ws\n")
                .await?;
            if !buf.is_empty() {
                stream.write_all(&buf).await?;
            }
            let (mut r, mut w) = stream.split();
            tokio::io::copy(&mut r, &mut w).await?;
            return Ok(());
        }
        if path == "/close" {
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close\n")
                .await?;
            return Ok(());
        }
        if let Some(n) = path
            .strip_prefix("/bytes/")
            .and_then(|n| n.parse::<usize>().ok())
        {
            // A large body of known length (the proxy splices it): a pattern the
            // client can check, then the connection stays open for more.
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n");
            stream.write_all(head.as_bytes()).await?;
            let body: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            stream.write_all(&body).await?;
            continue;
        }
        if path == "/chunked" {
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nchunk \r\n5\r\nbody\n\r\n0\r\n\r\n")
                .await?;
            continue;
        }
        let text = format!("ok {method} {path} body={}\n", body.len());
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Upstream: 1\r\n{}\r\n{}",
            text.len(),
            if close { "Connection: close\r\n" } else { "" },
            if method == "HEAD" { "" } else { &text }
        );
        stream.write_all(resp.as_bytes()).await?;
        if close {
            return Ok(());
        }
    }
}

/// A TCP server that records what it receives and echoes it; with `banner`, it
/// speaks first.
pub async fn echo_upstream(banner: Option<&'static [u8]>) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let g = g.clone();
            tokio::spawn(async move {
                if let Some(b) = banner {
                    let _ = stream.write_all(b).await;
                }
                let mut buf = [0u8; 4096];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            g.lock().unwrap().extend_from_slice(&buf[..n]);
                            if stream.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (addr, got)
}

/// Sends `bytes` on a new connection and reads until the proxy closes (bounded).
pub async fn raw(proxy: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(bytes).await.unwrap();
    read_to_end(&mut s).await
}

pub async fn read_to_end(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(HANG, s.read_to_end(&mut out))
        .await
        .expect("the proxy closes the connection");
    out
}

/// Reads one HTTP response with a Content-Length body (or none) from `s`.
pub async fn read_response(s: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    tokio::time::timeout(HANG, async {
        loop {
            if let Some(p) = find(&buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..p]).to_ascii_lowercase();
                let n: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().unwrap())
                    .unwrap_or(0);
                if buf.len() >= p + 4 + n {
                    return;
                }
            }
            let mut tmp = [0u8; 4096];
            let n = s.read(&mut tmp).await.unwrap();
            assert!(
                n > 0,
                "connection closed mid-response: {}",
                String::from_utf8_lossy(&buf)
            );
            buf.extend_from_slice(&tmp[..n]);
        }
    })
    .await
    .expect("a response");
    String::from_utf8_lossy(&buf).into_owned()
}

/// Runs curl with a clean environment; returns (exit code, stdout, stderr).
pub async fn curl(args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(
        HANG,
        tokio::process::Command::new("curl")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .args(["-sS", "--max-time", "15"])
            .args(args)
            .output(),
    )
    .await
    .expect("curl finishes")
    .expect("curl runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn curl_available() -> bool {
    std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}
