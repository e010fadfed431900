//! The proxy itself: accept loop, protocol sniffing, and what the three protocols
//! share (decisions, events, bounded reads, closing).

mod decide;
mod forward;
mod socks5;
mod splice;
mod tunnel;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::events::{Closed, Decision, EventSink, Protocol};
use crate::ProxyConfig;

pub(crate) async fn serve<F: Future>(listener: TcpListener, cfg: Arc<ProxyConfig>, shutdown: F) {
    let permits = Arc::new(Semaphore::new(cfg.limits.max_connections.max(1)));
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while tasks.try_join_next().is_some() {}
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(session = %cfg.session, error = %e, "proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let cfg = cfg.clone();
        tasks.spawn(async move {
            let _permit = permit;
            tracing::debug!(session = %cfg.session, %peer, "proxy: connection");
            handle(stream, &cfg).await;
        });
    }
    drop(listener);
    tasks.shutdown().await;
}

async fn handle(mut client: TcpStream, cfg: &ProxyConfig) {
    let _ = client.set_nodelay(true);
    let mut buf = Vec::with_capacity(1024);
    match tokio::time::timeout(
        cfg.limits.head_timeout,
        read_more(&mut client, &mut buf, cfg.limits.max_head_bytes),
    )
    .await
    {
        Ok(Ok(n)) if n > 0 => {}
        _ => return,
    }
    if buf[0] == crate::socks::VERSION {
        socks5::serve(client, buf, cfg).await
    } else {
        forward::serve(client, buf, cfg).await
    }
}

/// Appends at most `max` bytes read from `r` to `buf`; 0 at end of stream.
/// Cancel-safe: nothing is appended unless the read completed.
pub(crate) async fn read_more<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<usize> {
    buf.reserve(max.min(64 * 1024));
    r.take(max as u64).read_buf(buf).await
}

/// [`read_more`] bounded by `idle`.
pub(crate) async fn read_idle<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
    idle: Duration,
) -> io::Result<usize> {
    match tokio::time::timeout(idle, read_more(r, buf, max)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "idle timeout")),
    }
}

/// Reports one decision.
#[allow(clippy::too_many_arguments)]
pub(crate) fn decide_event(
    cfg: &ProxyConfig,
    protocol: Protocol,
    host: &str,
    port: u16,
    address: Option<SocketAddr>,
    allowed: bool,
    reason: &str,
    rule: Option<&str>,
) {
    tracing::debug!(
        session = %cfg.session, %protocol, host, port, ?address, allowed, reason,
        "proxy: decision"
    );
    cfg.events.decision(&Decision {
        protocol,
        host: host.to_string(),
        port,
        address,
        allowed,
        reason: reason.to_string(),
        rule: rule.map(str::to_string),
    });
}

/// The reason of an allowed decision.
pub(crate) fn allowed_reason(rule: &str) -> String {
    format!("allowed by `{rule}`")
}

/// One open upstream connection; reports [`Closed`] when dropped (also when the
/// task is aborted at shutdown).
pub(crate) struct Link {
    sink: Arc<dyn EventSink>,
    protocol: Protocol,
    host: String,
    port: u16,
    address: SocketAddr,
    start: Instant,
    pub up: AtomicU64,
    pub down: AtomicU64,
}

impl Link {
    pub(crate) fn new(
        cfg: &ProxyConfig,
        protocol: Protocol,
        host: &str,
        port: u16,
        address: SocketAddr,
    ) -> Link {
        Link {
            sink: cfg.events.clone(),
            protocol,
            host: host.to_string(),
            port,
            address,
            start: Instant::now(),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
        }
    }

    pub(crate) fn add_up(&self, n: usize) {
        self.up.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn add_down(&self, n: usize) {
        self.down.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.sink.closed(&Closed {
            protocol: self.protocol,
            host: std::mem::take(&mut self.host),
            port: self.port,
            address: self.address,
            bytes_up: self.up.load(Ordering::Relaxed),
            bytes_down: self.down.load(Ordering::Relaxed),
            duration: self.start.elapsed(),
        });
    }
}

/// Writes `bytes` (bounded in time), half-closes, and reads what the client still
/// sends for a moment, so that closing does not reset the connection before the
/// client has read the reply.
pub(crate) async fn reply_and_close(client: &mut TcpStream, bytes: &[u8]) {
    let wait = Duration::from_secs(2);
    let write = async {
        client.write_all(bytes).await?;
        client.shutdown().await
    };
    if !matches!(tokio::time::timeout(wait, write).await, Ok(Ok(()))) {
        return;
    }
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut total = 0usize;
        while total < 256 * 1024 {
            match client.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}

/// A message for a client: control characters removed, bounded.
pub(crate) fn clean_message(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(512)
        .collect()
}
