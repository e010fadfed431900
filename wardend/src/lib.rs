//! `wardend`: the Warden daemon.
//!
//! It owns the sessions (each a sandboxed MCP server), their sandbox lifecycle
//! and the audit store, and serves the `warden.v1` gRPC API on a Unix socket.
//!
//! - [`run`]: the entry point; `main.rs` only parses flags, takes the
//!   single-instance lock, binds the socket and calls it. Tests start a real
//!   daemon the same way.
//! - [`activation`]: the listening socket a service manager passes (socket
//!   activation: `wardend.socket`, `systemd-socket-activate`), checked and
//!   reconciled with `--socket`; `main.rs` binds one itself otherwise.
//! - [`conn`]: accepting connections and the stdio preamble (fd passing).
//! - [`service`]: the gRPC methods and the peer checks (uid; [`peer`]: not
//!   inside a sandbox).
//! - [`session`]: policy → audit → sandbox → stdio pumps → exit; what a
//!   session's sandbox gets from the request, the policy and the host is
//!   planned in `session/plan.rs`, a pure module.
//! - [`features`]: the daemon's one kernel probe as `wardenctl status` shows
//!   it, and what it means for write grants.
//! - [`stdio`]: the stdio relay between the client's fds (passed by the shim)
//!   and the server's pipes, on daemon threads.
//! - [`egress`]: the per-session egress proxy (crate `warden-proxy`) wired to
//!   the session's listener, the audit store and the `ps` counters.
//! - [`cgroup`]: limits through a delegated cgroup v2 subtree (a cgroup per
//!   session), when the daemon runs in one; [`limits`]: otherwise, the memory
//!   limit by sampling the sandbox's resident memory (procfs; off Linux,
//!   [`ps`]: a process group's or tree's memory and CPU time from `ps`).
//! - [`wake`]: a pollable wake-up (an eventfd on Linux, a pipe elsewhere).
//! - [`syscalls`]: refused system calls → rate-limited `policy.syscall` records;
//!   [`files`]: observed file accesses → `file` records; [`recorder`]: drains
//!   both queues of every session on the event loop (no thread per session);
//!   [`ratelimit`]: the one rate limit of every record a server can cause at
//!   will (those two, network decisions, refused peers).
//! - The audit store and the type of every record are in `warden_audit`;
//!   the modules above decide what to record and build it from those types.
//! - [`approvals`]: held accesses, the people asked about them, their
//!   answers and what they grant; [`desktop`]: the desktop notifications
//!   that ask them on the session bus.
//! - [`backend`]: which sandbox backend runs a session (`backend:`,
//!   `--backend`), per platform: the native Linux sandbox, Docker, macOS
//!   Seatbelt (`backend::seatbelt`: the profile generator, and the launcher
//!   on macOS).
//!
//! Off Linux the native sandbox's modules (`cgroup`, `features`, `files`,
//! `limits`, `recorder`, `syscalls`, `transparent`, `backend::native`) are
//! not built; everything else is.
//! - [`logs`]: the `Logs` stream (stored records, then live ones).
//! - [`error`]: errors, with their sources, and their one mapping to gRPC
//!   statuses.
#![forbid(unsafe_code)]

pub mod activation;
pub mod approvals;
pub mod backend;
pub mod conn;
pub mod desktop;
pub mod egress;
pub mod error;
pub mod explain;
pub mod gate;
pub mod logs;
pub mod mcp;
pub mod peer;
pub mod ps;
pub mod ratelimit;
pub mod service;
pub mod session;
pub mod stdio;
pub mod wake;

// What only the native Linux sandbox has: its kernel probe, the delegated
// cgroup, sampling through procfs, the seccomp notifier's records and
// transparent egress. Off Linux none of it is built; the daemon there runs
// Docker and, on macOS, Seatbelt (`backend/`), or refuses.
#[cfg(target_os = "linux")]
pub mod cgroup;
#[cfg(target_os = "linux")]
pub mod features;
#[cfg(target_os = "linux")]
pub mod files;
#[cfg(target_os = "linux")]
pub mod limits;
#[cfg(target_os = "linux")]
pub mod recorder;
#[cfg(target_os = "linux")]
pub mod syscalls;
#[cfg(target_os = "linux")]
pub mod transparent;

/// Off Linux there is no procfs: a process tree's memory and CPU time come
/// from `ps` ([`ps`]).
#[cfg(not(target_os = "linux"))]
pub use ps as limits;

/// Off Linux there is no kernel probe: `wardend --features` and `wardenctl
/// status` list no kernel features (only the backends).
#[cfg(not(target_os = "linux"))]
pub mod features {
    /// No kernel features off Linux.
    pub fn report_now() -> Vec<warden_proto::v1::KernelFeature> {
        Vec::new()
    }
}

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use dashmap::DashMap;
use tokio::net::UnixListener;
use tokio_stream::wrappers::ReceiverStream;
use warden_audit::event::{DaemonPeer, DaemonPeerSummary, DaemonStart, DaemonStop};
use warden_audit::AuditStore;
use warden_proto::v1::warden_server::WardenServer;

use crate::session::{EndCause, Session};

/// How long open connections may linger once every session has ended.
const CONNECTION_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Where the daemon lives.
#[derive(Debug, Clone)]
pub struct Config {
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    /// The binary re-executed as the sandbox init: `/proc/self/exe` in
    /// production, which always names the running daemon's own image.
    pub sandbox_exe: PathBuf,
    /// `--dns`: the DNS server the egress proxy resolves with; None: the
    /// system resolver (getaddrinfo).
    pub dns: Option<std::net::SocketAddr>,
    /// `--audit-max-bytes`, `--audit-keep`: rotation and retention.
    pub audit: warden_audit::Options,
    /// `--max-sessions`: most sessions at once (0: as many as the file
    /// descriptors allow, see [`session::capacity`]).
    pub max_sessions: usize,
    /// Follow each session's MCP stream for `mcp` records (`--no-mcp-records`
    /// turns it off).
    pub mcp_records: bool,
    /// `--dangerously-run-servers-as-root` (or [`ROOT_SERVERS_ENV`]`=1`): a
    /// daemon running as root starts sessions, whose servers are then the
    /// host's root (without capabilities). Off: refused.
    pub servers_as_root: bool,
}

/// The environment variable that has the same effect as
/// `--dangerously-run-servers-as-root` (an autostarted daemon gets it from
/// the shim's environment).
pub const ROOT_SERVERS_ENV: &str = "WARDEN_DANGEROUSLY_RUN_SERVERS_AS_ROOT";

/// Shared state of one daemon.
pub struct Daemon {
    pub config: Config,
    pub audit: Arc<AuditStore>,
    /// Pending approvals and what sessions were granted by them.
    pub approvals: Arc<approvals::Broker>,
    pub sessions: DashMap<String, Arc<Session>>,
    pub uid: u32,
    pub started: Instant,
    pub shutting_down: AtomicBool,
    /// What the native sandbox knows of this host, probed once at start:
    /// the kernel, the delegated cgroup, the write-grant protections, and
    /// whether a user namespace can be made (`backend::native::Host`).
    #[cfg(target_os = "linux")]
    pub native: backend::native::Host,
    /// `daemon.peer` refusals: a refused peer may reconnect in a loop.
    pub peer_records: std::sync::Mutex<PeerLimit>,
    /// The Docker engine the Docker backend runs containers on.
    pub docker: backend::docker::Engine,
}

/// Refused peers: 10 `daemon.peer` records per second per reason, the rest
/// counted into a summary (reason, resource `*`, count).
pub type PeerLimit = ratelimit::Limiter<String, (), (String, u64)>;

impl Daemon {
    /// Writes a `daemon.peer` record unless refusals of that reason flood in
    /// (then counted, and summarised once their second is over, or at
    /// shutdown with `all`).
    pub fn record_peer(&self, rec: Option<DaemonPeer>, all: bool) {
        let now = Instant::now();
        let (admitted, summaries) = {
            let mut l = self.peer_records.lock().unwrap_or_else(|p| p.into_inner());
            let summaries = l.take_summaries(now, all);
            let admitted = rec.as_ref().is_some_and(|r| {
                let reason = r.reason.clone();
                l.admit(reason.clone(), (), now, |_| (reason, 0), |s| s.1 += 1)
            });
            (admitted.then_some(rec).flatten(), summaries)
        };
        for (reason, count) in summaries {
            self.audit.record(DaemonPeerSummary {
                reason,
                suppressed: count,
                rate_limit: "10 records per second per reason".into(),
            });
        }
        if let Some(r) = admitted {
            self.audit.record(r);
        }
    }
}

/// Serves on `listener` until `shutdown` resolves, then ends every session
/// (SIGTERM, SIGKILL after the grace), writes their exit records and flushes
/// the audit store.
pub async fn run(
    listener: UnixListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
    ready: impl FnOnce() + Send,
) -> anyhow::Result<()> {
    #[cfg(target_os = "linux")]
    let native = backend::native::Host::probe(warden_core::paths::current_uid(), &config);
    // Every peer must share these (a sandboxed process never does).
    let own_ns = peer::own().map_err(|e| {
        anyhow::anyhow!("cannot read the daemon's own namespaces in /proc/self/ns: {e}")
    })?;
    let audit = Arc::new(AuditStore::open_with(
        &config.state_dir,
        config.audit.clone(),
    )?);
    let approvals = Arc::new(approvals::Broker::new(
        audit.clone(),
        approvals::policy_editor(),
    ));
    // In the background: a missing or failing bus only means no desktop
    // notifications.
    let desktop = desktop::Desktop::start(approvals.clone(), std::env::var(desktop::BUS_ENV).ok());
    let config_socket = config.socket.clone();
    let daemon = Arc::new(Daemon {
        config,
        audit,
        approvals,
        sessions: DashMap::new(),
        uid: warden_core::paths::current_uid(),
        started: Instant::now(),
        shutting_down: AtomicBool::new(false),
        #[cfg(target_os = "linux")]
        native,
        peer_records: std::sync::Mutex::new(PeerLimit::new(10, u32::MAX, Instant::now())),
        docker: backend::docker::Engine::new(&config_socket, warden_core::paths::current_uid()),
    });
    // The fork server is started now, not by the first launch; a failure
    // here is only logged (each launch starts it again if need be, and
    // reports why it cannot).
    #[cfg(target_os = "linux")]
    if daemon.native.trial_ok() {
        let d = daemon.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = d.native.forks.warm() {
                tracing::warn!(error = %e, "the sandbox init's fork server did not start");
            }
        });
    }
    // Containers an earlier run of this daemon could not remove.
    {
        let d = daemon.clone();
        tokio::spawn(async move { d.docker.reap_stale().await });
    }
    daemon.audit.append(
        DaemonStart {
            socket: daemon.config.socket.display().to_string(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        true,
    )?;
    let svc = service::Service {
        daemon: daemon.clone(),
    };
    let checker = daemon.clone();
    let server = WardenServer::with_interceptor(svc, move |req: tonic::Request<()>| {
        service::check_peer(&checker, &req)?;
        Ok(req)
    });
    let auditor = daemon.clone();
    let on_refused: conn::OnRefused = Arc::new(move |info, refusal| {
        tracing::warn!(pid = ?info.pid, reason = %refusal.reason, "refused a peer");
        service::audit_refused_peer(&auditor, info, refusal);
    });
    let incoming = ReceiverStream::new(conn::incoming(listener, daemon.uid, own_ns, on_refused));
    let d2 = daemon.clone();
    let stopped = Arc::new(tokio::sync::Notify::new());
    let stopped2 = stopped.clone();
    let stop = async move {
        shutdown.await;
        tracing::info!("shutting down");
        d2.shutting_down.store(true, Ordering::SeqCst);
        d2.end_all(EndCause::Shutdown).await;
        desktop.close_all().await;
        stopped2.notify_one();
    };
    ready();
    tracing::info!(socket = %daemon.config.socket.display(), "listening");
    let serve =
        tonic::transport::Server::builder().serve_with_incoming_shutdown(server, incoming, stop);
    // Graceful shutdown waits for every connection to close; a client that
    // keeps one open must not keep the daemon alive once sessions are ended.
    tokio::select! {
        r = serve => r?,
        _ = async {
            stopped.notified().await;
            tokio::time::sleep(CONNECTION_GRACE).await;
        } => tracing::warn!("clients still connected after shutdown; closing anyway"),
    }
    daemon.record_peer(None, true);
    daemon.audit.record(DaemonStop {
        socket: daemon.config.socket.display().to_string(),
    });
    daemon.audit.sync()?;
    Ok(())
}
