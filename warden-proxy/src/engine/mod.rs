//! The proxy itself: accept loop, protocol sniffing, and what the three protocols
//! share (decisions, events, bounded reads, closing).

mod decide;
mod forward;
mod socks5;
mod splice;
pub(crate) mod transparent;
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

use crate::events::{AcceptFailure, Closed, ConnDecision, EventSink, Protocol, RefusalCode};
use crate::ProxyConfig;

pub(crate) async fn serve<F: Future>(listener: TcpListener, cfg: Arc<ProxyConfig>, shutdown: F) {
    let permits = Arc::new(Semaphore::new(cfg.limits.max_connections.max(1)));
    let mut tasks = JoinSet::new();
    let mut trouble = AcceptTrouble::default();
    reserve::refill();
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
        let flush_at = trouble.flush_at();
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            // Failures counted since the last report are reported once due,
            // also when no further accept fails.
            _ = tokio::time::sleep_until(flush_at.unwrap_or_else(tokio::time::Instant::now)),
                if flush_at.is_some() => {
                trouble.report(&cfg);
                continue;
            }
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    drop(permit);
                    let wait = trouble.failed(&e, &listener, &cfg).await;
                    tokio::select! {
                        _ = &mut shutdown => break,
                        _ = tokio::time::sleep(wait) => {}
                    }
                    continue;
                }
            },
        };
        trouble.recovered(&cfg);
        let cfg = cfg.clone();
        tasks.spawn(async move {
            let _permit = permit;
            tracing::debug!(session = %cfg.session, %peer, "proxy: connection");
            handle(stream, &cfg).await;
        });
    }
    trouble.report(&cfg);
    drop(listener);
    tasks.shutdown().await;
}

/// The first wait after a failed `accept`; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one [`AcceptFailure`] report per this long.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// What a client accepted with the reserve descriptor is told.
const OVERLOADED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nX-Warden-Denied: proxy-overloaded\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 56\r\nConnection: close\r\n\r\nwarden: the proxy is out of file descriptors; try again\n";

/// Failed accepts not yet reported, and the backoff.
#[derive(Default)]
struct AcceptTrouble {
    failures: u64,
    shed: u64,
    last_error: Option<(String, Option<i32>)>,
    last_report: Option<Instant>,
    backoff: Option<Duration>,
}

impl AcceptTrouble {
    /// Handles one failed accept: sheds a waiting client when descriptors ran
    /// out, reports (rate-limited), and returns how long to wait.
    async fn failed(
        &mut self,
        e: &io::Error,
        listener: &TcpListener,
        cfg: &ProxyConfig,
    ) -> Duration {
        let errno = e.raw_os_error();
        tracing::warn!(session = %cfg.session, error = %e, "proxy: accept failed");
        self.failures += 1;
        self.last_error = Some((e.to_string(), errno));
        if matches!(errno, Some(libc_errno::EMFILE | libc_errno::ENFILE))
            && shed_one(listener).await
        {
            self.shed += 1;
        }
        let due = self.last_report.is_none_or(|t| t.elapsed() >= REPORT_EVERY);
        if due {
            self.report(cfg);
        }
        let wait = self
            .backoff
            .map_or(BACKOFF_MIN, |b| (b * 2).min(BACKOFF_MAX));
        self.backoff = Some(wait);
        wait
    }

    /// When the failures not yet reported are due to be, if there are any.
    fn flush_at(&self) -> Option<tokio::time::Instant> {
        match (self.failures, self.last_report) {
            (0, _) => None,
            (_, None) => Some(tokio::time::Instant::now()),
            (_, Some(t)) => Some(tokio::time::Instant::from_std(t + REPORT_EVERY)),
        }
    }

    /// An accept worked again: reports what is left, resets the backoff.
    fn recovered(&mut self, cfg: &ProxyConfig) {
        if self.backoff.take().is_some() {
            self.report(cfg);
            reserve::refill();
        }
    }

    fn report(&mut self, cfg: &ProxyConfig) {
        if self.failures == 0 {
            return;
        }
        let (error, errno) = self.last_error.clone().unwrap_or_default();
        cfg.events.accept_failed(&AcceptFailure {
            error,
            errno,
            failures: std::mem::take(&mut self.failures),
            shed: std::mem::take(&mut self.shed),
        });
        self.last_report = Some(Instant::now());
    }
}

/// The errno values the accept loop tells apart.
mod libc_errno {
    pub const EMFILE: i32 = nix::errno::Errno::EMFILE as i32;
    pub const ENFILE: i32 = nix::errno::Errno::ENFILE as i32;
}

/// One descriptor held in reserve for the whole process, so that a proxy out of
/// descriptors can still accept a waiting client to answer and close it, rather
/// than leave it hanging in the backlog.
mod reserve {
    use std::fs::File;
    use std::sync::Mutex;

    static RESERVE: Mutex<Option<File>> = Mutex::new(None);

    fn slot() -> std::sync::MutexGuard<'static, Option<File>> {
        RESERVE.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the reserve if it is not held (fails quietly when out of descriptors).
    pub(super) fn refill() {
        let mut slot = slot();
        if slot.is_none() {
            *slot = File::open("/dev/null").ok();
        }
    }

    /// Closes the reserve, freeing its descriptor; false if none was held.
    pub(super) fn release() -> bool {
        slot().take().is_some()
    }
}

/// Frees the reserve descriptor, accepts one waiting client on it, answers `503`
/// and closes it; then takes the reserve back. False if there was no reserve or
/// no client.
async fn shed_one(listener: &TcpListener) -> bool {
    if !reserve::release() {
        return false;
    }
    let accepted = tokio::time::timeout(Duration::from_millis(10), listener.accept()).await;
    let shed = match accepted {
        Ok(Ok((stream, _))) => {
            // Whatever the client sent is read first, so that closing sends a FIN
            // after the answer rather than a reset.
            let mut sink = [0u8; 4096];
            while matches!(stream.try_read(&mut sink), Ok(n) if n > 0) {}
            let _ = stream.try_write(OVERLOADED);
            if let Ok(std) = stream.into_std() {
                let _ = std.shutdown(std::net::Shutdown::Write);
            }
            true
        }
        _ => false,
    };
    reserve::refill();
    shed
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

/// Reports one decision: allowed by `rule` when `refusal` is `None`, else
/// refused with that code (`rule`: the entry that matched, if one did).
pub(crate) fn decide_event(
    cfg: &ProxyConfig,
    protocol: Protocol,
    host: &str,
    port: u16,
    address: Option<SocketAddr>,
    refusal: Option<RefusalCode>,
    rule: Option<&str>,
) {
    let reason = match refusal {
        None => allowed_reason(rule.unwrap_or_default()),
        Some(code) => code.as_str().to_owned(),
    };
    let allowed = refusal.is_none();
    tracing::debug!(
        session = %cfg.session, %protocol, host, port, ?address, allowed, reason,
        "proxy: decision"
    );
    cfg.events.decision(&ConnDecision {
        protocol,
        host: host.to_string(),
        port,
        address,
        allowed,
        refusal,
        reason,
        rule: rule.map(str::to_string),
        approval: None,
    });
}

/// Reports an allowed decision.
pub(crate) fn allowed_event(
    cfg: &ProxyConfig,
    protocol: Protocol,
    host: &str,
    port: u16,
    address: SocketAddr,
    grant: &decide::Grant,
) {
    let reason = grant.reason();
    tracing::debug!(
        session = %cfg.session, %protocol, host, port, %address, reason,
        "proxy: decision"
    );
    cfg.events.decision(&ConnDecision {
        protocol,
        host: host.to_string(),
        port,
        address: Some(address),
        allowed: true,
        refusal: None,
        reason,
        rule: Some(grant.rule.clone()),
        approval: grant.approval.clone(),
    });
}

/// The reason of an allowed decision.
fn allowed_reason(rule: &str) -> String {
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
