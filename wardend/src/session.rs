//! Sessions: compile the policy (what the sandbox gets is planned in
//! [`plan`]), audit, start the sandbox, splice stdio,
//! enforce the timeout, and end with exactly one exit record and event.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Notify};
use warden_audit::event;
use warden_core::policy::Backend;
use warden_core::policy::{self, CompiledPolicy, PolicyInput};
use warden_proto::v1 as pb;
use warden_sandbox::spec::SandboxSpec;

use crate::backend::{ExitOutcome, Fitted, Launched, Process};
use crate::error::DaemonError;
use crate::stdio::Relay;
use crate::Daemon;

pub(crate) mod plan;
pub use plan::{env_get, DEFAULT_PIDS, TMP_SIZE_MB};

/// Grace between SIGTERM to the tree and SIGKILL (DESIGN.md §5 "Limits").
pub const KILL_GRACE: Duration = Duration::from_millis(750);
/// How long the server's last output may take to reach the client once it
/// has exited, before the relay is abandoned.
const DRAIN_GRACE: Duration = Duration::from_secs(5);
/// How long the session's last refused-call records may take to be written
/// before `session.exit` goes first.
const RECORDER_GRACE: Duration = Duration::from_secs(2);

/// Why Warden (rather than the server) ended a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndCause {
    Timeout,
    Memory,
    Killed,
    ClientGone,
    Shutdown,
}

impl EndCause {
    fn reason(self) -> &'static str {
        match self {
            EndCause::Timeout => "limits.timeout_s passed",
            EndCause::Memory => "limits.memory_mb exceeded",
            EndCause::Killed => "killed by wardenctl kill",
            EndCause::ClientGone => "the client (warden-shim) went away",
            EndCause::Shutdown => "wardend is shutting down",
        }
    }
}

pub struct Session {
    pub id: String,
    pub name: String,
    pub argv: Vec<String>,
    pub policy_path: String,
    pub started_at_ms: i64,
    pub started: Instant,
    pub client_pid: u32,
    pub pid: u32,
    pub limits: Vec<String>,
    /// The backend that runs it, and what `auto` skipped first.
    pub backend: crate::backend::Choice,
    pub net: Arc<crate::egress::NetCounters>,
    /// `limits.memory_mb` in bytes.
    pub memory_limit: Option<u64>,
    /// Bytes relayed on stdin, stdout, stderr.
    pub stdio: [Arc<std::sync::atomic::AtomicU64>; 3],
    /// The session's cgroup in the daemon's delegated subtree (native
    /// sandbox only).
    pub cgroup: Option<PathBuf>,
    /// The server's process tree, as its backend runs it.
    process: Arc<dyn Process>,
    /// Denied file accesses recorded so far.
    pub files_denied: Arc<std::sync::atomic::AtomicU64>,
    /// A trace's peak footprint, sampled until it ends.
    peak: Option<Arc<Mutex<event::Peak>>>,
    /// The sandbox's resolver (transparent egress), ended with the session.
    resolver_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Transparent egress, whose relayed connections end with the session.
    #[cfg(target_os = "linux")]
    transparent: Option<Arc<crate::transparent::Transparent>>,
    /// The MCP stream's observer (`mcp.rs`), joined before `session.exit`.
    mcp_watch: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The tool calls in flight, as the observer sees them.
    pub(crate) tool_calls: crate::mcp::InFlight,
    /// Its tool definitions against the profile's pin.
    pin_note: crate::mcp::PinNote,
    cause: Mutex<Option<EndCause>>,
    end: Notify,
    ended: AtomicBool,
}

impl Session {
    /// Asks the session to end (first cause wins). Returns false if it was
    /// already ending.
    pub fn request_end(&self, cause: EndCause) -> bool {
        let mut c = self.cause.lock().unwrap_or_else(|p| p.into_inner());
        if c.is_some() {
            return false;
        }
        *c = Some(cause);
        self.end.notify_one();
        true
    }

    fn cause(&self) -> Option<EndCause> {
        *self.cause.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn signal(&self, sig: i32) -> Result<(), DaemonError> {
        self.process.signal(sig)
    }

    pub fn to_proto(&self) -> pb::Session {
        let (tools_unpinned, tools_withheld) = self
            .pin_note
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .shown();
        pb::Session {
            id: self.id.clone(),
            name: self.name.clone(),
            pid: self.pid,
            command: self.argv.clone(),
            policy_path: self.policy_path.clone(),
            started_at_ms: self.started_at_ms,
            uptime_ms: self.started.elapsed().as_millis() as u64,
            client_pid: self.client_pid,
            limits: self.limits.clone(),
            network_allowed: self.net.allowed(),
            network_denied: self.net.denied(),
            last_denial: self.net.last_denial().unwrap_or_default(),
            memory_bytes: if self.pid == 0 {
                0
            } else {
                crate::limits::tree_rss(self.pid)
            },
            memory_limit_bytes: self.memory_limit.unwrap_or(0),
            cpu_ms: if self.pid == 0 {
                0
            } else {
                crate::limits::tree_cpu_ms(self.pid)
            },
            stdin_bytes: self.stdio[0].load(Ordering::Relaxed),
            stdout_bytes: self.stdio[1].load(Ordering::Relaxed),
            stderr_bytes: self.stdio[2].load(Ordering::Relaxed),
            approve: false,
            approvals_pending: 0,
            files_denied: self.files_denied.load(Ordering::Relaxed),
            tool_calls: self
                .tool_calls
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .in_flight()
                .iter()
                .map(|c| format!("{} (id {})", c.tool, c.id))
                .collect(),
            tools_unpinned,
            tools_withheld,
            backend: self.backend.backend.to_string(),
            backend_skipped: self
                .backend
                .skipped
                .iter()
                .map(ToString::to_string)
                .collect(),
        }
    }
}

fn new_session_id() -> String {
    let mut b = [0u8; 6];
    if getrandom::fill(&mut b).is_err() {
        // Ids need to be unique, not secret: the clock and a counter.
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        b.copy_from_slice(&(nanos ^ n.rotate_left(40)).to_le_bytes()[..6]);
    }
    hex::encode(b)
}

/// What a spawn needs after validation.
pub struct Prepared {
    id: String,
    policy: CompiledPolicy,
    spec: SandboxSpec,
    env_names: Vec<String>,
    client: pb::ClientInfo,
    /// Approvals, when the session has them on.
    approve: Option<crate::approvals::SessionConfig>,
    /// Approvals of the tools `mcp.pin: enforce` withholds (also without
    /// `approve`).
    tool_approvals: Option<crate::approvals::SessionConfig>,
    /// A `wardenctl trace` session: its peak footprint is sampled.
    trace: bool,
    backend: crate::backend::Choice,
    /// What the backend made of the policy (Docker's image, what Docker or
    /// Seatbelt run differently).
    fitted: Fitted,
}

/// File descriptors an idle session holds in the daemon (stdio, sandbox
/// control, pidfd, seccomp listener, proxy listener, cgroup...), rounded up.
pub const FDS_PER_SESSION: u64 = 24;
/// File descriptors kept free whatever happens: the audit store's rotation
/// and head, the control socket's accepts, the proxies' reserve.
pub const FD_RESERVE: u64 = 128;

/// Whether one more session fits: under `max` (0: the file descriptor limit
/// decides) and with [`FD_RESERVE`] plus one session's descriptors still free
/// of `limit` (the soft `RLIMIT_NOFILE`) with `open` in use. `Err`: why not,
/// naming the limit.
pub fn capacity(live: usize, max: usize, open: u64, limit: u64) -> Result<(), String> {
    let by_fds = (limit.saturating_sub(FD_RESERVE) / FDS_PER_SESSION) as usize;
    let max = if max == 0 { by_fds } else { max };
    if live >= max {
        return Err(format!(
            "{live} are running, the limit is {max} (wardend --max-sessions; \
             {by_fds} fit in its file descriptor limit of {limit})"
        ));
    }
    if open + FD_RESERVE + FDS_PER_SESSION > limit {
        return Err(format!(
            "{open} of the daemon's {limit} file descriptors are in use, and {FD_RESERVE} \
             stay free for the audit store (raise wardend's RLIMIT_NOFILE, e.g. \
             LimitNOFILE= in its unit)"
        ));
    }
    Ok(())
}

/// The daemon's open file descriptors.
fn open_fds() -> u64 {
    // Linux's procfs; elsewhere (macOS, the BSDs) the fd file system.
    const FD_DIR: &str = if cfg!(target_os = "linux") {
        "/proc/self/fd"
    } else {
        "/dev/fd"
    };
    std::fs::read_dir(FD_DIR).map_or(0, |d| d.count() as u64)
}

/// An rlimit value (unsigned on Linux and macOS, signed on FreeBSD) as u64.
fn rlim_u64(v: impl TryInto<u64>) -> u64 {
    v.try_into().unwrap_or(u64::MAX)
}

/// The soft `RLIMIT_NOFILE`.
fn nofile_limit() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| rlim_u64(soft))
}

impl Daemon {
    /// Audits a spawn that was refused before anything started.
    pub fn refuse(&self, id: Option<&str>, req: &pb::SpawnRequest, reason: &str) {
        let rec = event::SessionRefused {
            session: id.map(str::to_owned),
            command: req.command.join(" "),
            reason: reason.to_owned(),
            policy_path: req.policy_path.clone(),
            client_pid: req.client.as_ref().map(|c| c.pid),
        };
        if let Err(e) = self.audit.append(rec, true) {
            tracing::error!(error = %e, "cannot write audit record for a refused spawn");
        }
    }

    /// The paths no grant may expose, from the daemon's real paths (its
    /// socket, state directory and config directory) and from both the
    /// daemon's and the client's environment (runtime directory, agent and
    /// bus sockets, the client's config directory).
    fn reserved(&self, client_env: &[pb::EnvVar]) -> Vec<policy::Reserved> {
        use warden_core::policy::reserved;
        let client = |k: &str| env_get(client_env, k).map(|v| OsString::from_vec(v.to_vec()));
        let mut out = reserved::warden(
            Some(&self.config.socket),
            Some(&self.config.state_dir),
            warden_core::paths::config_dir().ok().as_deref(),
        );
        if let Ok(c) = warden_core::paths::config_dir_from(client) {
            out.extend(reserved::warden(None, None, Some(&c)));
        }
        out.extend(reserved::user(client, self.uid));
        out.extend(reserved::user(|k| std::env::var_os(k), self.uid));
        out
    }

    /// Compiles the request's policy; a refusal is audited.
    /// Warden's own files, protected inside every write grant that covers
    /// them: the state directory (audit store), the policies directory, the
    /// socket's directory, the policy file, and the installed binaries next to
    /// the running daemon. Canonical host paths; missing ones are left out.
    fn warden_paths(&self, policy: Option<&Path>) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = vec![self.config.state_dir.clone()];
        if let Some(dir) = warden_core::paths::profiles_dir()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
        {
            v.push(dir);
        }
        if let Some(dir) = self.config.socket.parent() {
            v.push(dir.to_path_buf());
        }
        v.extend(policy.map(Path::to_path_buf));
        if let Some(dir) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
        {
            for bin in ["wardend", "warden-shim", "wardenctl"] {
                v.push(dir.join(bin));
            }
        }
        let mut v: Vec<PathBuf> = v
            .into_iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    pub fn prepare(&self, req: &pb::SpawnRequest) -> Result<Prepared, DaemonError> {
        let id = new_session_id();
        let result = self.prepare_inner(&id, req);
        if let Err(e) = &result {
            self.refuse(Some(&id), req, &e.to_string());
        }
        result
    }

    fn prepare_inner(&self, id: &str, req: &pb::SpawnRequest) -> Result<Prepared, DaemonError> {
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(DaemonError::ShuttingDown);
        }
        // Review F8: a root daemon's servers would be the host's root.
        if warden_core::paths::current_uid() == 0 && !self.config.servers_as_root {
            return Err(DaemonError::RootDaemon);
        }
        capacity(
            self.sessions.len(),
            self.config.max_sessions,
            open_fds(),
            nofile_limit(),
        )
        .map_err(DaemonError::TooManySessions)?;
        if req.trace && req.approve {
            return Err(DaemonError::BadRequest(
                "trace and approve cannot be combined: a trace allows everything and records it"
                    .into(),
            ));
        }
        let plan::Compile {
            policy_path,
            overrides,
            ctx,
        } = plan::request(
            req,
            || warden_core::paths::home_dir().ok(),
            self.reserved(&req.env),
        )?;
        let input = PolicyInput {
            path: policy_path.as_deref(),
            text: &req.policy_text,
        };
        let mut policy = policy::compile(&input, &overrides, &ctx)?;
        // Before anything is fitted to this host: the backend that runs it.
        let backend = self.choose_backend(&req.backend, policy.backend)?;
        policy.backend = backend.backend;
        #[cfg(target_os = "linux")]
        let host = self
            .native
            .plan(self.uid, warden_core::paths::current_gid());
        // What the backend cannot enforce is refused here, for that backend
        // (`auto` never moves on for it).
        let fitted = match backend.backend {
            Backend::Docker => Fitted::Docker(crate::backend::docker::fit(
                &mut policy,
                &req.env,
                req.trace,
                req.approve,
            )?),
            Backend::Macos => Fitted::Seatbelt(crate::backend::seatbelt::fit(
                &mut policy,
                req.trace,
                req.approve,
            )?),
            #[cfg(target_os = "linux")]
            _ => {
                plan::fit(&mut policy, &host)?;
                Fitted::Native
            }
            #[cfg(not(target_os = "linux"))]
            other => {
                return Err(DaemonError::Backend(format!(
                    "no launcher for `{other}` in this build"
                )))
            }
        };
        let warden_paths = self.warden_paths(policy.source.as_deref());
        let approve = plan::approvals(id, req, &policy)?;
        let tool_approvals = match policy.mcp.pin {
            warden_core::policy::PinMode::Enforce => Some(plan::approval_config(id, req, &policy)?),
            _ => None,
        };
        #[cfg(not(target_os = "linux"))]
        let (spec, env_names) = plan::base_spec(
            id,
            &policy,
            &req.env,
            ctx.home,
            self.uid,
            warden_core::paths::current_gid(),
            warden_paths,
        );
        #[cfg(target_os = "linux")]
        let (spec, env_names) = {
            let (mut spec, mut env_names) =
                plan::spec(id, &policy, &req.env, ctx.home, &host, warden_paths);
            self.plan_native(req, &host, &mut policy, &mut spec, &mut env_names, &approve);
            (spec, env_names)
        };
        Ok(Prepared {
            id: id.to_string(),
            policy,
            spec,
            env_names,
            client: req.client.clone().unwrap_or_default(),
            approve,
            tool_approvals,
            trace: req.trace,
            backend,
            fitted,
        })
    }

    /// The native sandbox's part of the plan: a trace's sandbox, and the
    /// held opens of approvals.
    #[cfg(target_os = "linux")]
    fn plan_native(
        &self,
        req: &pb::SpawnRequest,
        host: &plan::Host,
        policy: &mut CompiledPolicy,
        spec: &mut SandboxSpec,
        env_names: &mut Vec<String>,
        approve: &Option<crate::approvals::SessionConfig>,
    ) {
        if req.trace {
            *env_names = plan::trace(
                policy,
                spec,
                &req.env,
                Path::new(&req.cwd),
                req.trace_allow_writes,
                &plan::host_top_dirs(),
                &req.command
                    .iter()
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
                    .collect::<Vec<_>>(),
                host.kernel,
            );
        }
        if approve.is_some() {
            // Opens the sandbox would deny are held for a person.
            spec.hold_files = true;
            spec.layers = host.kernel.layers(spec);
        }
    }

    /// Audits `session.start` (fsynced), starts the sandbox and the stdio
    /// pumps, and supervises the session until it ends.
    pub async fn start(
        self: &Arc<Self>,
        p: Prepared,
        stdio: [OwnedFd; 3],
        events: mpsc::Sender<Result<pb::SpawnEvent, tonic::Status>>,
    ) -> Result<(), DaemonError> {
        #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
        let Prepared {
            id,
            policy,
            mut spec,
            env_names,
            client,
            approve,
            tool_approvals,
            trace,
            backend,
            fitted,
        } = p;
        let limits = match &fitted {
            #[cfg(target_os = "linux")]
            Fitted::Native => describe_limits(&policy, self.native.cgroup.as_ref().ok()),
            Fitted::Docker(_) => crate::backend::docker::describe_limits(&policy),
            Fitted::Seatbelt(_) => crate::backend::seatbelt::describe_limits(&policy),
        };
        // Paths inside write grants that the sandbox binds read-only because
        // the host runs or trusts them (those that exist now).
        let protected: Vec<PathBuf> = match &fitted {
            Fitted::Docker(_) => crate::backend::docker::protected_now(&spec),
            // The native sandbox binds them; Seatbelt's profile denies
            // writes to them (and to those that do not exist yet).
            _ => crate::backend::protected_now(&spec, |m, unless_dir| !(m.is_dir() && unless_dir)),
        };
        let start = event::SessionStart {
            session: id.clone(),
            name: policy.name.clone(),
            argv: policy.argv.clone(),
            program: policy.program.clone(),
            cwd: policy.cwd.clone(),
            policy_path: policy.source.clone(),
            policy_digest: policy.digest.clone(),
            read: policy.read.clone(),
            write: policy.write.clone(),
            protected,
            exposed: policy.exposed.clone(),
            warnings: policy.warnings.clone(),
            network_allow: policy
                .network
                .allow
                .iter()
                .map(|r| r.source.clone())
                .collect(),
            env_names,
            limits: limits.clone(),
            client: event::Client {
                pid: client.pid,
                program: client.program.clone(),
                version: client.version.clone(),
            },
            // What the spec's layers apply, as the sandbox is given them.
            sandbox: match &fitted {
                #[cfg(target_os = "linux")]
                Fitted::Native => {
                    plan::sandbox_facts(&spec, &policy, &self.native.write_protection, &backend)
                }
                Fitted::Docker(d) => crate::backend::docker::sandbox_facts(
                    &policy,
                    &backend,
                    d,
                    &id,
                    self.docker.available().ok(),
                ),
                Fitted::Seatbelt(f) => {
                    crate::backend::seatbelt::sandbox_facts(&policy, &backend, f)
                }
            },
        };
        // Audit-before-execute: the start record is on disk before the server
        // runs. Written now; the fsync it waits for overlaps with building the
        // native sandbox, whose server is released only once it is done (the
        // launch's gate); the Docker backend waits for it before it starts.
        let start_seq = self
            .audit
            .append(start, false)
            .map_err(DaemonError::Audit)?
            .seq;

        let started = Instant::now();
        // In a delegated cgroup subtree every session gets its own cgroup, with
        // the limits its controllers enforce. Delegated but unusable: refuse
        // (a limit may rely on it).
        #[cfg(target_os = "linux")]
        if let (Fitted::Native, Ok(d)) = (&fitted, &self.native.cgroup) {
            let l = crate::cgroup::SessionLimits {
                memory_bytes: policy.limits.memory_mb.map(|m| m << 20),
                pids: policy.limits.pids,
                cpu: policy.limits.cpu,
            };
            match crate::cgroup::create_session(d, &id, &l) {
                Ok(dir) => spec.cgroup = Some(dir),
                Err(e) => {
                    let e = DaemonError::Cgroup(e);
                    self.audit_exit(&id, started, None, None, &e.to_string());
                    return Err(e);
                }
            }
        }
        // The session's tool calls, as the MCP observer follows them; the
        // approvals name the one they were raised during.
        let tool_calls = crate::mcp::InFlight::default();
        let pin_note = crate::mcp::PinNote::default();
        let approve = approve.map(|cfg| crate::approvals::SessionConfig {
            calls: Some(tool_calls.clone()),
            ..cfg
        });
        let tool_approvals = tool_approvals.map(|cfg| crate::approvals::SessionConfig {
            calls: Some(tool_calls.clone()),
            ..cfg
        });
        // Approvals are on before the server runs: its first opens may be held.
        if let Some(cfg) = approve.clone() {
            self.approvals.open_session(cfg);
        }
        #[cfg(target_os = "linux")]
        let holder: Option<Arc<dyn warden_sandbox::supervise::FileHolder>> =
            approve.as_ref().map(|_| {
                Arc::new(crate::approvals::FileApprover {
                    broker: self.approvals.clone(),
                    session: id.clone(),
                    runtime: tokio::runtime::Handle::current(),
                    home: spec.home.clone(),
                    warden_paths: spec.warden_paths.clone(),
                }) as Arc<dyn warden_sandbox::supervise::FileHolder>
            });
        // Transparent egress: its connector is the sandbox's from the start
        // (a server may connect at once); it decides once the proxy runs.
        let net = Arc::new(crate::egress::NetCounters::default());
        // `mcp.explain_denials`: what is denied, for the gate to name in a
        // tool call's error answer.
        let denials = policy
            .mcp
            .explain_denials
            .then(crate::explain::Denials::new);
        #[cfg(target_os = "linux")]
        let transparent = policy.network.transparent().then(|| {
            crate::transparent::Transparent::new(
                self.clone(),
                &id,
                net.clone(),
                &policy.network,
                denials.clone(),
            )
        });
        #[cfg(target_os = "linux")]
        let hooks = warden_sandbox::Hooks {
            holder,
            connector: transparent
                .as_ref()
                .map(|(t, _)| t.clone() as Arc<dyn warden_sandbox::supervise::Connector>),
        };
        // Copies of the MCP stream for its observer, which runs until the
        // relay closes them. Without them (no pipes, no thread) the session
        // runs unobserved rather than not at all.
        let taps = self
            .config
            .mcp_records
            .then(|| (crate::stdio::tap(), crate::stdio::tap()));
        let (taps, mcp_watch) = match taps {
            None => (None, None),
            Some((Ok((ti, ri)), Ok((to, ro)))) => {
                tool_calls.lock().unwrap_or_else(|p| p.into_inner()).taps = Some([
                    (ri.marks.clone(), ri.wake.clone()),
                    (ro.marks.clone(), ro.wake.clone()),
                ]);
                let profile = crate::mcp::Profile::of(
                    policy.name.as_deref(),
                    policy.source.as_deref(),
                    &policy.argv,
                );
                match crate::mcp::watch(
                    self.clone(),
                    id.clone(),
                    [ri, ro],
                    tool_calls.clone(),
                    (profile, pin_note.clone()),
                    policy.mcp.clone(),
                    policy.audit.mcp_arguments.then(|| {
                        // The values passed from the client: what the
                        // recorded arguments must not hold.
                        crate::mcp::Redact::new(spec.env.iter().filter_map(|(k, v)| {
                            let k = String::from_utf8_lossy(k).into_owned();
                            policy
                                .env_allow
                                .contains(&k)
                                .then(|| (k, String::from_utf8_lossy(v).into_owned()))
                        }))
                    }),
                ) {
                    Ok(h) => (Some([ti, to]), Some(h)),
                    Err(e) => {
                        tracing::warn!(session = %id, error = %e, "no MCP observer");
                        (None, None)
                    }
                }
            }
            Some((Err(e), _) | (_, Err(e))) => {
                tracing::warn!(session = %id, error = %e, "no MCP observer");
                (None, None)
            }
        };
        // The per-tool policy: the stream passes through a gate (never
        // without one when the policy restricts tools: a gate that cannot
        // start fails the launch).
        let gate = match policy.mcp.gates() {
            false => None,
            true => match self.gate(&id, &policy, tool_approvals, denials.clone(), &pin_note) {
                Ok(g) => Some(g),
                Err(e) => {
                    self.audit_exit(&id, started, None, None, &e.to_string());
                    return Err(e);
                }
            },
        };
        let watch = crate::stdio::Watch { taps, gate };
        // The native sandbox is built while the record's fsync runs and
        // released by it; the other backends start their server as soon as
        // they are asked, so the record is on disk first.
        let synced = match &fitted {
            #[cfg(target_os = "linux")]
            Fitted::Native => Ok(()),
            _ => {
                let audit = self.audit.clone();
                match tokio::task::spawn_blocking(move || audit.sync_through(start_seq)).await {
                    Ok(r) => r.map_err(DaemonError::Audit),
                    Err(e) => Err(DaemonError::Task(e)),
                }
            }
        };
        let result = match (synced, &fitted) {
            (Err(e), _) => Err(e),
            #[cfg(target_os = "linux")]
            (Ok(()), Fitted::Native) => {
                let audit = self.audit.clone();
                let durable = move || audit.sync_through(start_seq);
                crate::backend::native::spawn(self, &spec, stdio, hooks, watch, durable).await
            }
            (Ok(()), Fitted::Docker(d)) => {
                crate::backend::docker::spawn(
                    &self.docker,
                    &self.config.state_dir,
                    &id,
                    &spec,
                    &policy,
                    d,
                    stdio,
                    watch,
                )
                .await
            }
            (Ok(()), Fitted::Seatbelt(f)) => {
                crate::backend::seatbelt::spawn(
                    &self.config.state_dir,
                    &id,
                    &spec,
                    &policy,
                    f,
                    stdio,
                    watch,
                )
                .await
            }
        };
        let launched = match result {
            Ok(v) => v,
            Err(e) => return Err(self.start_failed(&id, spec.cgroup.clone(), started, e)),
        };
        let Launched {
            process,
            relay,
            egress,
            #[cfg(target_os = "linux")]
                native: extras,
        } = launched;
        #[cfg(target_os = "linux")]
        let (sandbox, refused, files, resolver) = match extras {
            Some(x) => (Some(x.sandbox), x.refused, x.files, x.resolver),
            None => (None, None, None, None),
        };
        // The sandbox's resolver, served until the session ends.
        #[cfg(not(target_os = "linux"))]
        let resolver_task = None;
        #[cfg(target_os = "linux")]
        let resolver_task = match (&transparent, resolver) {
            (Some((t, _)), Some(fd)) => match t.serve_resolver(fd) {
                Ok(task) => Some(task),
                Err(e) => {
                    let e = DaemonError::Proxy(e);
                    self.abandon(&process, relay).await;
                    self.approvals.close_session(&id, "session-ended");
                    self.audit_exit(&id, started, None, None, &e.to_string());
                    return Err(e);
                }
            },
            _ => None,
        };
        let approver: Option<Arc<dyn warden_proxy::Approver>> = approve.map(|_| {
            Arc::new(crate::egress::NetApprover {
                broker: self.approvals.clone(),
                session: id.clone(),
            }) as Arc<dyn warden_proxy::Approver>
        });
        // The egress proxy, on the listener made inside the sandbox's network
        // namespace (the native sandbox's PID 1, the container's bridge) or
        // on the host's loopback for Seatbelt. None only for a server with
        // no network at all.
        let proxy = match egress.map(|egress| {
            crate::egress::Proxy::start(
                egress,
                policy.network.clone(),
                self.clone(),
                &id,
                net.clone(),
                approver.clone(),
                denials.clone(),
            )
        }) {
            None => None,
            Some(Ok(p)) => Some(p),
            Some(Err(e)) => {
                let e = DaemonError::Proxy(e);
                self.abandon(&process, relay).await;
                self.approvals.close_session(&id, "session-ended");
                self.audit_exit(&id, started, None, None, &e.to_string());
                return Err(e);
            }
        };
        #[cfg(target_os = "linux")]
        if let (Some((_, tx)), Some(proxy)) = (&transparent, &proxy) {
            let _ = tx.send(Some(proxy.cfg.clone()));
        }
        // Refused escape and kernel-attack calls and observed file accesses,
        // recorded until the sandbox is gone (a task, no thread of its own).
        let files_denied = Arc::new(std::sync::atomic::AtomicU64::new(0));
        #[cfg(not(target_os = "linux"))]
        let recorder = None;
        #[cfg(target_os = "linux")]
        let recorder = sandbox.as_ref().and_then(|sb| {
            crate::recorder::start(
                self,
                &id,
                sb,
                refused,
                files,
                files_denied.clone(),
                denials.clone(),
            )
        });
        let session = Arc::new(Session {
            id: id.clone(),
            name: policy.name.clone().unwrap_or_default(),
            argv: policy.argv.clone(),
            policy_path: policy
                .source
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            started_at_ms: (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000)
                as i64,
            started,
            client_pid: client.pid,
            pid: process.pid(),
            limits,
            backend,
            net,
            memory_limit: policy.limits.memory_mb.map(|m| m << 20),
            stdio: relay.counters(),
            cgroup: spec.cgroup.clone(),
            process: process.clone(),
            files_denied,
            peak: trace.then(|| {
                Arc::new(Mutex::new(event::Peak {
                    memory_bytes: 0,
                    processes: 0,
                }))
            }),
            resolver_task: Mutex::new(resolver_task),
            #[cfg(target_os = "linux")]
            transparent: transparent.as_ref().map(|(t, _)| t.clone()),
            mcp_watch: Mutex::new(mcp_watch),
            tool_calls,
            pin_note,
            cause: Mutex::new(None),
            end: Notify::new(),
            ended: AtomicBool::new(false),
        });
        self.sessions.insert(id.clone(), session.clone());
        let _ = events
            .send(Ok(pb::SpawnEvent {
                event: Some(pb::spawn_event::Event::Started(pb::Started {
                    session_id: id.clone(),
                    pid: session.pid,
                })),
            }))
            .await;
        let daemon = self.clone();
        let timeout = policy.limits.timeout_s.map(Duration::from_secs);
        // The Docker engine enforces the container's memory itself; the
        // native sandbox's and Seatbelt's are sampled.
        let sampler = match &fitted {
            #[cfg(target_os = "linux")]
            Fitted::Native => Some((crate::limits::SAMPLE_INTERVAL, native_memory as Sampler)),
            Fitted::Seatbelt(_) => Some((crate::ps::SAMPLE_INTERVAL, ps_memory as Sampler)),
            Fitted::Docker(_) => None,
        };
        if let (Some((every, sample)), Some(mb)) = (sampler, policy.limits.memory_mb) {
            tokio::spawn(
                self.clone()
                    .watch_memory(session.clone(), mb, every, sample),
            );
        }
        if let Some(peak) = session.peak.clone() {
            tokio::spawn(sample_peak(session.clone(), peak));
        }
        tokio::spawn(async move {
            daemon
                .supervise(session, relay, recorder, proxy, timeout, events)
                .await;
        });
        Ok(())
    }

    /// A launch that failed after `session.start` was written: its cgroup
    /// goes, its approvals close, and `session.exit` says why.
    fn start_failed(
        &self,
        id: &str,
        cgroup: Option<PathBuf>,
        started: Instant,
        e: DaemonError,
    ) -> DaemonError {
        #[cfg(target_os = "linux")]
        if let Some(dir) = cgroup {
            tokio::spawn(crate::cgroup::remove_session(dir));
        }
        #[cfg(not(target_os = "linux"))]
        let _ = cgroup;
        self.approvals.close_session(id, "session-ended");
        self.audit_exit(id, started, None, None, &e.to_string());
        e
    }

    /// Ends a process that started but whose session cannot go on, and its
    /// relay.
    async fn abandon(&self, process: &Arc<dyn Process>, relay: Relay) {
        let _ = process.kill_tree();
        let _ = process.clone().wait().await;
        let _ = tokio::task::spawn_blocking(move || relay.finish(DRAIN_GRACE)).await;
    }

    /// Samples the sandbox's total RSS every `every` with `sample` until the
    /// session ends; a breach is audited and ends the session (exit 137).
    async fn watch_memory(
        self: Arc<Self>,
        session: Arc<Session>,
        limit_mb: u64,
        every: Duration,
        sample: Sampler,
    ) {
        let limit = limit_mb * 1024 * 1024;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !session.ended.load(Ordering::SeqCst) && session.cause().is_none() {
            tick.tick().await;
            let pid = session.pid;
            let breach = tokio::task::spawn_blocking(move || sample(pid, limit))
                .await
                .unwrap_or_default();
            if let Some(mechanism) = breach {
                if session.request_end(EndCause::Memory) {
                    self.audit.record(event::LimitBreach {
                        session: session.id.clone(),
                        mechanism,
                    });
                }
                return;
            }
        }
    }

    async fn supervise(
        self: Arc<Self>,
        session: Arc<Session>,
        relay: Relay,
        recorder: Option<tokio::task::JoinHandle<()>>,
        proxy: Option<crate::egress::Proxy>,
        timeout: Option<Duration>,
        events: mpsc::Sender<Result<pb::SpawnEvent, tonic::Status>>,
    ) {
        let mut wait = session.process.clone().wait();
        let deadline = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        let outcome = tokio::select! {
            r = &mut wait => Some(r),
            _ = &mut deadline => { session.request_end(EndCause::Timeout); None }
            _ = events.closed() => { session.request_end(EndCause::ClientGone); None }
            _ = session.end.notified() => None,
        };
        let outcome = match outcome {
            Some(r) => r,
            None => {
                // Warden ends it: SIGTERM to the whole tree, SIGKILL after the grace.
                let _ = session.process.terminate_tree();
                match tokio::time::timeout(KILL_GRACE, &mut wait).await {
                    Ok(r) => r,
                    Err(_) => {
                        let _ = session.process.kill_tree();
                        wait.await
                    }
                }
            }
        };
        if let Some(t) = session
            .resolver_task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            t.abort();
        }
        // What is still held is denied now, before the last records.
        let ending = if self.shutting_down.load(Ordering::SeqCst) {
            "daemon-stopped"
        } else {
            "session-ended"
        };
        self.approvals.close_session(&session.id, ending);
        // The backend's own memory limit (Docker's) is a breach like ours.
        if session.process.memory_killed() && session.request_end(EndCause::Memory) {
            self.audit.record(event::LimitBreach {
                session: session.id.clone(),
                mechanism: event::Breach::Docker {
                    limit_bytes: session.memory_limit.unwrap_or(0),
                },
            });
        }
        // Let the server's last bytes reach the client before saying it exited.
        tokio::task::spawn_blocking(move || relay.finish(DRAIN_GRACE))
            .await
            .ok();
        // The MCP observer's last records (what was still in flight) too:
        // the relay has closed its taps.
        let watch = session
            .mcp_watch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(w) = watch {
            if tokio::time::timeout(RECORDER_GRACE, w).await.is_err() {
                tracing::warn!(session = %session.id, "mcp records still being written at session end");
            }
        }
        // The proxy's last records (connections cut by the end) precede
        // session.exit too.
        if let Some(proxy) = proxy {
            proxy.stop().await;
        }
        #[cfg(target_os = "linux")]
        if let Some(t) = &session.transparent {
            t.stop().await;
        }
        // The refused calls' records precede session.exit: the queue closed
        // when the sandbox was gone, so this waits only for the last writes.
        if let Some(r) = recorder {
            if tokio::time::timeout(RECORDER_GRACE, r).await.is_err() {
                tracing::warn!(session = %session.id, "refused-call records still being written at session end");
            }
        }
        // An OOM kill inside the session's cgroup (memory.max, whole group) is a
        // memory breach like one found by sampling.
        #[cfg(target_os = "linux")]
        if let Some(dir) = &session.cgroup {
            let kills = crate::cgroup::oom_kills(dir);
            if kills > 0 && session.request_end(EndCause::Memory) {
                self.audit.record(event::LimitBreach {
                    session: session.id.clone(),
                    mechanism: event::Breach::Cgroup { oom_kills: kills },
                });
            }
            tokio::spawn(crate::cgroup::remove_session(dir.clone()));
        }
        session.ended.store(true, Ordering::SeqCst);
        self.sessions.remove(&session.id);

        let cause = session.cause();
        let (exit, reason) = exit_event(&session, cause, &outcome);
        let (code, signal) = match &outcome {
            Ok(ExitOutcome::Code(c)) => (Some(*c), None),
            Ok(ExitOutcome::Signal(s)) => (None, Some(*s)),
            Err(_) => (None, None),
        };
        let peak = session
            .peak
            .as_ref()
            .map(|p| *p.lock().unwrap_or_else(|e| e.into_inner()));
        self.audit_exit_with(&session.id, session.started, code, signal, &reason, peak);
        let _ = events
            .send(Ok(pb::SpawnEvent {
                event: Some(pb::spawn_event::Event::Exited(exit)),
            }))
            .await;
    }

    /// The gate of a session whose policy restricts tools or enforces the
    /// pin (see `gate.rs`). With `mcp.pin: enforce` the session's approvals
    /// are opened (if `approve` has not) so a withheld tool can be accepted.
    fn gate(
        self: &Arc<Self>,
        id: &str,
        policy: &warden_core::policy::CompiledPolicy,
        tool_approvals: Option<crate::approvals::SessionConfig>,
        denials: Option<Arc<crate::explain::Denials>>,
        pin_note: &crate::mcp::PinNote,
    ) -> Result<crate::stdio::GateRun, DaemonError> {
        use crate::approvals::{Kind, Outcome, Request, Scope};
        use crate::gate::{Enforce, Gate, GateEvent, ToolAsk};
        let mut gate = Gate::new(policy.mcp.clone());
        if let Some(d) = denials {
            gate = gate.with_explain(id, d);
        }
        if let Some(cfg) = tool_approvals {
            let profile = crate::mcp::Profile::of(
                policy.name.as_deref(),
                policy.source.as_deref(),
                &policy.argv,
            );
            let pins = crate::mcp::Pins::load(&self.config.state_dir, profile, policy.mcp.clone());
            let enforce = Enforce::new(pins).map_err(DaemonError::StdioPipes)?;
            pin_note
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .enforced_by(enforce.clone());
            if !self.approvals.enabled(id) {
                self.approvals.open_session(cfg);
            }
            let (daemon, session, e) = (self.clone(), id.to_owned(), enforce.clone());
            let note = pin_note.clone();
            let handle = tokio::runtime::Handle::current();
            let ask = move |a: ToolAsk| {
                let (daemon, session, e) = (daemon.clone(), session.clone(), e.clone());
                let note = note.clone();
                handle.spawn(async move {
                    let req = Request {
                        kind: Kind::Tool,
                        resource: a.tool.clone(),
                        operation: a.what.to_owned(),
                    };
                    match daemon.approvals.ask(&session, req, None).await {
                        Outcome::Allowed { scope, .. } => {
                            if let Some(p) = e.accept(&session, &a, scope == Scope::Always) {
                                crate::mcp::record_pin(&daemon, &note, p);
                            }
                        }
                        Outcome::Denied => e.declined(&a),
                    }
                });
            };
            gate = gate.with_pin(enforce, Box::new(ask));
        }
        let daemon = self.clone();
        let session = id.to_owned();
        let note = pin_note.clone();
        Ok(crate::stdio::GateRun {
            gate,
            report: Box::new(move |e: GateEvent| {
                if let GateEvent::Pin(p) = &e {
                    note.lock().unwrap_or_else(|p| p.into_inner()).note(p);
                }
                daemon.audit.record(e.record(&session));
            }),
        })
    }

    fn audit_exit(
        &self,
        id: &str,
        started: Instant,
        code: Option<i32>,
        signal: Option<i32>,
        reason: &str,
    ) {
        self.audit_exit_with(id, started, code, signal, reason, None);
    }

    fn audit_exit_with(
        &self,
        id: &str,
        started: Instant,
        code: Option<i32>,
        signal: Option<i32>,
        reason: &str,
        peak: Option<event::Peak>,
    ) {
        let rec = event::SessionExit {
            session: id.to_owned(),
            reason: reason.to_owned(),
            code,
            signal,
            duration_ms: started.elapsed().as_millis() as u64,
            peak,
        };
        if let Err(e) = self.audit.append(rec, true) {
            tracing::error!(error = %e, session = id, "cannot write session.exit");
        }
    }

    /// Ends every live session (daemon shutdown) and waits for them.
    pub async fn end_all(&self, cause: EndCause) {
        self.approvals.close_all();
        for s in self.sessions.iter() {
            s.request_end(cause);
        }
        let deadline = Instant::now() + KILL_GRACE + Duration::from_secs(3);
        while !self.sessions.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A session by id or unique id prefix.
    pub fn find(&self, id: &str) -> Result<Arc<Session>, DaemonError> {
        if id.is_empty() {
            return Err(DaemonError::BadRequest("empty session id".into()));
        }
        if let Some(s) = self.sessions.get(id) {
            return Ok(s.clone());
        }
        let matches: Vec<Arc<Session>> = self
            .sessions
            .iter()
            .filter(|s| s.id.starts_with(id))
            .map(|s| s.clone())
            .collect();
        match matches.len() {
            0 => Err(DaemonError::NoSuchSession(id.to_string())),
            1 => matches
                .into_iter()
                .next()
                .ok_or_else(|| DaemonError::NoSuchSession(id.to_string())),
            _ => Err(DaemonError::AmbiguousSession(id.to_string())),
        }
    }
}

/// How often a trace's footprint is sampled.
const PEAK_INTERVAL: Duration = Duration::from_millis(100);

/// Samples a trace session's memory and process count until it ends,
/// keeping the largest (`session.exit`'s `peak`).
async fn sample_peak(session: Arc<Session>, peak: Arc<Mutex<event::Peak>>) {
    let mut tick = tokio::time::interval(PEAK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !session.ended.load(Ordering::SeqCst) {
        tick.tick().await;
        let pid = session.pid;
        let Ok((memory, processes)) = tokio::task::spawn_blocking(move || {
            // What `limits.memory_mb` counts (resident, tmpfs and memfd).
            (
                crate::limits::tree_rss(pid),
                crate::limits::tree(pid).len() as u32,
            )
        })
        .await
        else {
            return;
        };
        let mut p = peak.lock().unwrap_or_else(|e| e.into_inner());
        p.memory_bytes = p.memory_bytes.max(memory);
        // The sandbox's own init is not the server's.
        p.processes = p.processes.max(processes.saturating_sub(1));
    }
}

/// How a session's memory is sampled: `(pid, limit)` → the breach, if the
/// sandbox holds more than `limit` bytes.
type Sampler = fn(u32, u64) -> Option<event::Breach>;

/// The native sandbox's memory, through procfs (`limits.rs`).
#[cfg(target_os = "linux")]
fn native_memory(pid: u32, limit: u64) -> Option<event::Breach> {
    let mem = crate::limits::tree_memory(pid);
    let total = mem.total();
    (total > limit).then_some(event::Breach::RssSampling {
        limit_bytes: limit,
        rss_bytes: total,
        resident_bytes: mem.resident,
        shmem_mapped_bytes: mem.shmem_mapped,
        tmpfs_bytes: mem.tmpfs,
        memfd_bytes: mem.memfd,
    })
}

/// A Seatbelt session's memory: the resident memory of its process group
/// and descendants, from `ps` (no procfs there; no tmpfs or memfd either).
fn ps_memory(pid: u32, limit: u64) -> Option<event::Breach> {
    let rows = crate::ps::snapshot().ok()?;
    let rss: u64 = crate::ps::session(&rows, pid).iter().map(|r| r.rss).sum();
    (rss > limit).then_some(event::Breach::RssSampling {
        limit_bytes: limit,
        rss_bytes: rss,
        resident_bytes: rss,
        shmem_mapped_bytes: 0,
        tmpfs_bytes: 0,
        memfd_bytes: 0,
    })
}

#[cfg(target_os = "linux")]
fn describe_limits(p: &CompiledPolicy, cg: Option<&crate::cgroup::Delegation>) -> Vec<String> {
    let has = |c: &str| cg.is_some_and(|d| d.has(c));
    let mut out = Vec::new();
    if let Some(t) = p.limits.timeout_s {
        out.push(format!("timeout_s={t} (daemon timer)"));
    }
    if let Some(n) = p.limits.pids {
        if has("pids") {
            out.push(format!("pids={n} (cgroup pids.max)"));
        } else if warden_core::paths::current_uid() == 0 {
            out.push(format!(
                "pids={n} (NOT enforced for root: limits.best_effort)"
            ));
        } else {
            out.push(format!(
                "pids={n} (RLIMIT_NPROC in the sandbox's user namespace)"
            ));
        }
    }
    out.push(format!(
        "tmp_mb={} (size of the private /tmp)",
        p.limits.tmp_mb.unwrap_or(TMP_SIZE_MB)
    ));
    if let Some(c) = p.limits.cpu {
        if has("cpu") {
            out.push(format!(
                "cpu={c} (cgroup cpu.max {})",
                crate::cgroup::cpu_max(c)
            ));
        } else {
            out.push(format!("cpu={c} (NOT enforced: limits.best_effort)"));
        }
    }
    if let Some(m) = p.limits.memory_mb {
        let sampled = format!(
            "RSS of the whole sandbox sampled every {} ms",
            crate::limits::SAMPLE_INTERVAL.as_millis()
        );
        if has("memory") {
            out.push(format!(
                "memory_mb={m} (cgroup memory.max, swap 0; and {sampled})"
            ));
        } else {
            out.push(format!("memory_mb={m} ({sampled})"));
        }
    }
    out
}

/// The `Exited` event for the shim, and the reason for the audit record
/// (which names the session in its own field).
fn exit_event(
    session: &Session,
    cause: Option<EndCause>,
    outcome: &Result<ExitOutcome, String>,
) -> (pb::Exited, String) {
    use pb::exited::Outcome;
    let (outcome_pb, reason) = match (cause, outcome) {
        (_, Err(e)) => (Outcome::Error(e.clone()), format!("sandbox failed: {e}")),
        (Some(EndCause::Memory), _) => (Outcome::Memory(true), EndCause::Memory.reason().into()),
        (Some(EndCause::Timeout), _) => (Outcome::Timeout(true), EndCause::Timeout.reason().into()),
        (Some(c), Ok(ExitOutcome::Signal(s))) => (Outcome::Signal(*s), c.reason().into()),
        (Some(c), Ok(ExitOutcome::Code(code))) => (Outcome::Code(*code), c.reason().into()),
        (None, Ok(ExitOutcome::Code(c))) => (Outcome::Code(*c), String::new()),
        (None, Ok(ExitOutcome::Signal(s))) => (Outcome::Signal(*s), String::new()),
    };
    let shown = match (&outcome_pb, reason.is_empty()) {
        (_, true) => String::new(),
        (Outcome::Error(_), _) => reason.clone(),
        _ => format!("session {} ended: {reason}", session.id),
    };
    (
        pb::Exited {
            session_id: session.id.clone(),
            outcome: Some(outcome_pb),
            reason: shown,
            duration_ms: session.started.elapsed().as_millis() as u64,
        },
        reason,
    )
}

#[cfg(test)]
mod capacity_tests {
    use super::*;

    #[test]
    fn sessions_fit_under_the_limit_and_the_descriptor_reserve() {
        // An explicit limit.
        assert_eq!(capacity(1, 2, 100, 20000), Ok(()));
        assert_eq!(
            capacity(2, 2, 100, 20000).unwrap_err(),
            "2 are running, the limit is 2 (wardend --max-sessions; 828 fit in its file \
             descriptor limit of 20000)"
        );
        // The default: what the descriptors allow, keeping the reserve.
        let fit = ((1024 - FD_RESERVE) / FDS_PER_SESSION) as usize;
        assert_eq!(capacity(fit - 1, 0, 100, 1024), Ok(()));
        assert!(capacity(fit, 0, 100, 1024)
            .unwrap_err()
            .starts_with(&format!("{fit} are running, the limit is {fit}")));
        // Descriptors taken by something else (a proxy's tunnels): refused
        // before the reserve is touched.
        let e = capacity(1, 0, 20000 - FD_RESERVE, 20000).unwrap_err();
        assert!(e.contains("file descriptors are in use"), "{e}");
    }
}
