//! Sessions: compile the policy, audit, start the sandbox, splice stdio,
//! enforce the timeout, and end with exactly one exit record and event.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::{mpsc, Notify};
use warden_core::audit::{Decision, Record, RecordType};
use warden_core::policy::{self, CompileContext, CompiledPolicy, Overrides, PolicyInput};
use warden_proto::v1 as pb;
use warden_sandbox::launch::{ExitOutcome, Sandbox};
use warden_sandbox::spec::{FileAudit, SandboxSpec};

use crate::error::DaemonError;
use crate::stdio::{pipe, Relay};
use crate::Daemon;

/// Grace between SIGTERM to the tree and SIGKILL (DESIGN.md §5 "Limits").
pub const KILL_GRACE: Duration = Duration::from_millis(750);
/// How long the server's last output may take to reach the client once it
/// has exited, before the relay is abandoned.
const DRAIN_GRACE: Duration = Duration::from_secs(5);
/// How long the session's last refused-call records may take to be written
/// before `session.exit` goes first.
const RECORDER_GRACE: Duration = Duration::from_secs(2);
/// Size of the private /tmp.
const TMP_SIZE_MB: u64 = 256;
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

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
    pub net: Arc<crate::egress::NetCounters>,
    /// `limits.memory_mb` in bytes.
    pub memory_limit: Option<u64>,
    /// Bytes relayed on stdin, stdout, stderr.
    pub stdio: [Arc<std::sync::atomic::AtomicU64>; 3],
    /// The session's cgroup in the daemon's delegated subtree.
    pub cgroup: Option<PathBuf>,
    sandbox: Arc<Sandbox>,
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
        self.sandbox
            .signal(sig)
            .map_err(|e| DaemonError::Sandbox(e.to_string()))
    }

    pub fn to_proto(&self) -> pb::Session {
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
            memory_bytes: crate::limits::tree_rss(self.pid),
            memory_limit_bytes: self.memory_limit.unwrap_or(0),
            cpu_ms: crate::limits::tree_cpu_ms(self.pid),
            stdin_bytes: self.stdio[0].load(Ordering::Relaxed),
            stdout_bytes: self.stdio[1].load(Ordering::Relaxed),
            stderr_bytes: self.stdio[2].load(Ordering::Relaxed),
        }
    }
}

fn new_session_id() -> String {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).expect("getrandom");
    hex::encode(b)
}

fn env_get<'a>(env: &'a [pb::EnvVar], name: &str) -> Option<&'a [u8]> {
    env.iter()
        .rev()
        .find(|v| v.name == name.as_bytes())
        .map(|v| v.value.as_slice())
}

/// One environment entry, raw bytes.
type EnvPair = (Vec<u8>, Vec<u8>);

/// The server's environment: only `env.allow` names from the client's
/// environment, plus PATH, HOME, LANG and TERM defaults (DESIGN.md §5), and the
/// egress proxy's variables (DESIGN.md §6).
/// Returns the environment and the names passed through (for the audit).
fn build_env(client: &[pb::EnvVar], allow: &[String], home: &Path) -> (Vec<EnvPair>, Vec<String>) {
    let mut out: Vec<EnvPair> = Vec::new();
    let mut passed = Vec::new();
    for name in allow {
        if let Some(v) = env_get(client, name) {
            out.push((name.as_bytes().to_vec(), v.to_vec()));
            passed.push(name.clone());
        }
    }
    // The egress proxy's variables win over the client's.
    let proxy = crate::egress::proxy_env();
    out.retain(|(n, _)| !proxy.iter().any(|(k, _)| k.as_bytes() == n.as_slice()));
    passed.retain(|n| !proxy.iter().any(|(k, _)| k == n));
    for (k, v) in proxy {
        out.push((k.as_bytes().to_vec(), v.into_bytes()));
    }
    let defaults: [(&str, Vec<u8>); 4] = [
        ("PATH", DEFAULT_PATH.as_bytes().to_vec()),
        ("HOME", home.as_os_str().as_bytes().to_vec()),
        ("LANG", b"C.UTF-8".to_vec()),
        ("TERM", b"dumb".to_vec()),
    ];
    for (k, v) in defaults {
        if !out.iter().any(|(n, _)| n == k.as_bytes()) {
            out.push((k.as_bytes().to_vec(), v));
        }
    }
    (out, passed)
}

/// What a spawn needs after validation.
pub struct Prepared {
    id: String,
    policy: CompiledPolicy,
    spec: SandboxSpec,
    env_names: Vec<String>,
    client: pb::ClientInfo,
}

/// `limits.pids` of a policy that sets none: tasks (processes and threads)
/// of one sandbox, far above what an MCP server runs (a Node server: about
/// a dozen).
pub const DEFAULT_PIDS: u64 = 4096;

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
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// The soft `RLIMIT_NOFILE`.
fn nofile_limit() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft)
}

impl Daemon {
    /// Audits a spawn that was refused before anything started.
    pub fn refuse(&self, id: Option<&str>, req: &pb::SpawnRequest, reason: &str) {
        let rec = Record::new(
            RecordType::Session,
            "refused",
            id,
            req.command.join(" "),
            Decision::Deny,
            reason,
        )
        .with_details(json!({
            "policy_path": req.policy_path,
            "client_pid": req.client.as_ref().map(|c| c.pid),
        }));
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
        let home = env_get(&req.env, "HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(OsString::from_vec(h.to_vec())))
            .or_else(|| warden_core::paths::home_dir().ok())
            .ok_or_else(|| DaemonError::BadRequest("HOME is not set".into()))?;
        if !home.is_absolute() {
            return Err(DaemonError::BadRequest(format!(
                "HOME must be absolute, got {}",
                home.display()
            )));
        }
        let cwd = PathBuf::from(&req.cwd);
        if !cwd.is_absolute() {
            return Err(DaemonError::BadRequest(format!(
                "cwd must be absolute, got `{}`",
                req.cwd
            )));
        }
        let policy_path = (!req.policy_path.is_empty()).then(|| PathBuf::from(&req.policy_path));
        if let Some(p) = &policy_path {
            if !p.is_absolute() {
                return Err(DaemonError::BadRequest(format!(
                    "policy_path must be absolute, got `{}`",
                    p.display()
                )));
            }
        }
        let extra = req.extra.clone().unwrap_or_default();
        let overrides = Overrides {
            read: extra.read,
            write: extra.write,
            allow_env: extra.allow_env,
            name: (!req.name.is_empty()).then(|| req.name.clone()),
            command: req.command.clone(),
        };
        let ctx = CompileContext {
            home: home.clone(),
            cwd,
            path_env: env_get(&req.env, "PATH").map(|p| OsString::from_vec(p.to_vec())),
            reserved: self.reserved(&req.env),
        };
        let input = PolicyInput {
            path: policy_path.as_deref(),
            text: &req.policy_text,
        };
        let mut policy = policy::compile(&input, &overrides, &ctx)
            .map_err(|e| DaemonError::Policy(e.to_string()))?;
        let cg_has = |c: &str| self.cgroup.as_ref().is_ok_and(|d| d.has(c));
        // Review F17: a fork bomb must not take the host's process table. A
        // policy without `limits.pids` gets a generous default where it can
        // be enforced (a cgroup, or RLIMIT_NPROC for a normal user; the
        // kernel exempts uid 0 from the latter).
        if policy.limits.pids.is_none() && (self.uid != 0 || cg_has("pids")) {
            policy.limits.pids = Some(DEFAULT_PIDS);
        }
        if policy.limits.pids.is_some()
            && self.uid == 0
            && !cg_has("pids")
            && !policy.limits.best_effort
        {
            return Err(DaemonError::Policy(
                "limits.pids cannot be enforced when wardend runs as root: the kernel does not \
                 apply RLIMIT_NPROC to uid 0; run wardend as a normal user, or set \
                 limits.best_effort: true to run without a process limit"
                    .into(),
            ));
        }
        if let Some(cpu) = policy.limits.cpu {
            if !cg_has("cpu") && !policy.limits.best_effort {
                return Err(DaemonError::Policy(format!(
                    "limits.cpu ({cpu} cores) cannot be enforced here: Warden enforces CPU limits only \
                     through a delegated cgroup v2 cpu controller, and this daemon has none ({}); \
                     remove limits.cpu or set limits.best_effort: true to run without a CPU limit",
                    self.cgroup.as_ref().err().map(String::as_str).unwrap_or("the cpu controller is not delegated")
                )));
            }
        }
        if let Some(why) = self.write_protection.refusal(
            !policy.write.is_empty(),
            policy.sandbox.best_effort_write_protection,
        ) {
            return Err(DaemonError::Policy(why));
        }
        if let Some(why) = crate::files::refusal(
            policy.audit.files,
            policy.audit.files_explicit,
            warden_sandbox::notify::available(),
        ) {
            return Err(DaemonError::Policy(why));
        }
        let (env, env_names) = build_env(&req.env, &policy.env_allow, &home);
        let user = env_get(&req.env, "USER")
            .or_else(|| env_get(&req.env, "LOGNAME"))
            .and_then(|u| std::str::from_utf8(u).ok())
            .filter(|u| {
                !u.is_empty()
                    && u.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            })
            .unwrap_or("user")
            .to_string();
        let spec = SandboxSpec {
            session_id: id.to_string(),
            program: policy.program.clone(),
            argv: policy.argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env,
            cwd: policy.cwd.clone(),
            read: policy.read.clone(),
            write: policy.write.clone(),
            home,
            uid: warden_core::paths::current_uid(),
            gid: warden_core::paths::current_gid(),
            user,
            tmp_size_mb: policy.limits.tmp_mb.unwrap_or(TMP_SIZE_MB),
            pids_max: policy.limits.pids,
            landlock_min_abi: policy.sandbox.landlock_min_abi,
            proxy_port: Some(crate::egress::PROXY_PORT),
            cgroup: None,
            audit_files: match policy.audit.files {
                policy::FileAudit::Denied => FileAudit::Denied,
                policy::FileAudit::All => FileAudit::All,
                policy::FileAudit::Off => FileAudit::Off,
            },
            warden_paths: self.warden_paths(policy.source.as_deref()),
            allow_git_init: policy.allow_git_init,
            // Never skipped by the daemon: the field exists for benchmarks only.
            dangerously_skip_confinement: false,
        };
        Ok(Prepared {
            id: id.to_string(),
            policy,
            spec,
            env_names,
            client: req.client.clone().unwrap_or_default(),
        })
    }

    /// Audits `session.start` (fsynced), starts the sandbox and the stdio
    /// pumps, and supervises the session until it ends.
    pub async fn start(
        self: &Arc<Self>,
        p: Prepared,
        stdio: [OwnedFd; 3],
        events: mpsc::Sender<Result<pb::SpawnEvent, tonic::Status>>,
    ) -> Result<(), DaemonError> {
        let Prepared {
            id,
            policy,
            mut spec,
            env_names,
            client,
        } = p;
        let limits = describe_limits(&policy, self.cgroup.as_ref().ok());
        // Paths inside write grants that the sandbox binds read-only because
        // the host runs or trusts them (those that exist now).
        let plan = warden_sandbox::protect::plan(&spec);
        let protected: Vec<PathBuf> = plan
            .protect
            .iter()
            .filter(|p| {
                std::fs::symlink_metadata(p)
                    .is_ok_and(|m| !(m.is_dir() && plan.unless_dir.contains(p)))
            })
            .cloned()
            .collect();
        let start = Record::new(
            RecordType::Session,
            "start",
            Some(&id),
            policy.program.display().to_string(),
            Decision::Allow,
            "",
        )
        .with_details(json!({
            "name": policy.name,
            "argv": policy.argv,
            "program": policy.program,
            "cwd": policy.cwd,
            "policy_path": policy.source,
            "policy_digest": policy.digest,
            "read": policy.read,
            "write": policy.write,
            "protected": protected,
            "exposed": policy.exposed,
            "warnings": policy.warnings,
            "network_allow": policy.network.allow.iter().map(|r| r.source.as_str()).collect::<Vec<_>>(),
            "env_names": env_names,
            "limits": limits,
            "client": { "pid": client.pid, "program": client.program, "version": client.version },
            "sandbox": {
                "backend": "linux",
                "namespaces": ["user", "mount", "pid", "net", "ipc", "uts", "cgroup"],
                "landlock_abi": warden_sandbox::landlock_abi(),
                "landlock_min_abi": policy.sandbox.landlock_min_abi,
                "syscall_audit": if warden_sandbox::notify::available() {
                    "seccomp user notification"
                } else {
                    "unavailable"
                },
                "file_audit": crate::files::level_in_use(spec.audit_files),
                "create_guard": warden_sandbox::guard::active(&spec, warden_sandbox::notify::available()),
                "host_root": spec.uid == 0,
                "write_protection": self.write_protection.record(!policy.write.is_empty()),
                "best_effort_write_protection": policy.sandbox.best_effort_write_protection,
            },
        }));
        // Audit-before-execute: the start record is on disk before the server runs.
        self.audit.append(start, true).map_err(DaemonError::Audit)?;

        let started = Instant::now();
        // In a delegated cgroup subtree every session gets its own cgroup, with
        // the limits its controllers enforce. Delegated but unusable: refuse
        // (a limit may rely on it).
        if let Ok(d) = &self.cgroup {
            let l = crate::cgroup::SessionLimits {
                memory_bytes: policy.limits.memory_mb.map(|m| m << 20),
                pids: policy.limits.pids,
                cpu: policy.limits.cpu,
            };
            match crate::cgroup::create_session(d, &id, &l) {
                Ok(dir) => spec.cgroup = Some(dir),
                Err(e) => {
                    let why = format!("cannot create the session's cgroup: {e}");
                    self.audit_exit(&id, started, None, None, &why);
                    return Err(DaemonError::Sandbox(why));
                }
            }
        }
        let result = self.launch(&spec, stdio).await;
        let (sandbox, relay) = match result {
            Ok(v) => v,
            Err(e) => {
                if let Some(dir) = spec.cgroup.clone() {
                    tokio::spawn(crate::cgroup::remove_session(dir));
                }
                self.audit_exit(&id, started, None, None, &e.to_string());
                return Err(e);
            }
        };
        let sandbox = Arc::new(sandbox);
        let net = Arc::new(crate::egress::NetCounters::default());
        // The egress proxy, on the listener PID 1 made inside the sandbox. Without
        // it the server would run with no way out but also no record of its
        // attempts: refuse instead.
        let proxy = match sandbox.take_proxy_listener().map(|fd| {
            crate::egress::Proxy::start(fd, policy.network.clone(), self.clone(), &id, net.clone())
        }) {
            Some(Ok(p)) => p,
            failed => {
                let why = match failed {
                    Some(Err(e)) => format!("cannot serve the egress proxy: {e}"),
                    _ => "the sandbox did not hand over the egress proxy listener".to_string(),
                };
                let _ = sandbox.kill_tree();
                let sb = sandbox.clone();
                let _ = tokio::task::spawn_blocking(move || sb.wait()).await;
                let _ = tokio::task::spawn_blocking(move || relay.finish(DRAIN_GRACE)).await;
                self.audit_exit(&id, started, None, None, &why);
                return Err(DaemonError::Sandbox(why));
            }
        };
        // Refused escape and kernel-attack calls and observed file accesses,
        // recorded until the sandbox is gone (a task, no thread of its own).
        let recorder = crate::recorder::start(self, &id, &sandbox);
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
            pid: sandbox.pid(),
            limits,
            net,
            memory_limit: policy.limits.memory_mb.map(|m| m << 20),
            stdio: relay.counters(),
            cgroup: spec.cgroup.clone(),
            sandbox: sandbox.clone(),
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
        if let Some(mb) = policy.limits.memory_mb {
            tokio::spawn(self.clone().watch_memory(session.clone(), mb));
        }
        tokio::spawn(async move {
            daemon
                .supervise(session, relay, recorder, proxy, timeout, events)
                .await;
        });
        Ok(())
    }

    async fn launch(
        &self,
        spec: &SandboxSpec,
        stdio: [OwnedFd; 3],
    ) -> Result<(Sandbox, Relay), DaemonError> {
        let io = |e: std::io::Error| DaemonError::Internal(format!("stdio pipes: {e}"));
        let (in_r, in_w) = pipe().map_err(io)?;
        let (out_r, out_w) = pipe().map_err(io)?;
        let (err_r, err_w) = pipe().map_err(io)?;
        let exe = self.config.sandbox_exe.clone();
        let spec2 = spec.clone();
        let sandbox =
            tokio::task::spawn_blocking(move || Sandbox::spawn(&exe, &spec2, [in_r, out_w, err_w]))
                .await
                .map_err(|e| DaemonError::Internal(e.to_string()))?
                .map_err(|e| DaemonError::Sandbox(e.to_string()))?;
        // The server's ends now live only in the sandbox; ours are closed, so
        // EOF travels both ways.
        let relay = Relay::start(stdio, [in_w, out_r, err_r]);
        match relay {
            Ok(r) => Ok((sandbox, r)),
            Err(e) => {
                let _ = sandbox.kill_tree();
                let _ = sandbox.wait();
                Err(io(e))
            }
        }
    }

    /// Samples the sandbox's total RSS until the session ends; a breach is
    /// audited and ends the session (exit 137).
    async fn watch_memory(self: Arc<Self>, session: Arc<Session>, limit_mb: u64) {
        let limit = limit_mb * 1024 * 1024;
        let mut tick = tokio::time::interval(crate::limits::SAMPLE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !session.ended.load(Ordering::SeqCst) && session.cause().is_none() {
            tick.tick().await;
            let pid = session.pid;
            let mem = tokio::task::spawn_blocking(move || crate::limits::tree_memory(pid))
                .await
                .unwrap_or_default();
            let total = mem.total();
            if total > limit && session.request_end(EndCause::Memory) {
                self.audit.record(
                    Record::new(
                        RecordType::Limit,
                        "breach",
                        Some(&session.id),
                        "memory_mb",
                        Decision::Deny,
                        format!(
                            "memory {} MiB (resident, tmpfs and memfd) exceeds memory_mb={limit_mb}",
                            total >> 20
                        ),
                    )
                    .with_details(json!({
                        "rss_bytes": total,
                        "resident_bytes": mem.resident,
                        "shmem_mapped_bytes": mem.shmem_mapped,
                        "tmpfs_bytes": mem.tmpfs,
                        "memfd_bytes": mem.memfd,
                        "limit_bytes": limit,
                        "mechanism": "rss-sampling",
                    })),
                );
                return;
            }
        }
    }

    async fn supervise(
        self: Arc<Self>,
        session: Arc<Session>,
        relay: Relay,
        recorder: Option<tokio::task::JoinHandle<()>>,
        proxy: crate::egress::Proxy,
        timeout: Option<Duration>,
        events: mpsc::Sender<Result<pb::SpawnEvent, tonic::Status>>,
    ) {
        let mut wait = Box::pin(wait_exit(session.sandbox.clone()));
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
                let _ = session.sandbox.terminate_tree();
                match tokio::time::timeout(KILL_GRACE, &mut wait).await {
                    Ok(r) => r,
                    Err(_) => {
                        let _ = session.sandbox.kill_tree();
                        wait.await
                    }
                }
            }
        };
        let outcome = match outcome {
            Ok(Ok(o)) => Ok(o),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        // Let the server's last bytes reach the client before saying it exited.
        tokio::task::spawn_blocking(move || relay.finish(DRAIN_GRACE))
            .await
            .ok();
        // The proxy's last records (connections cut by the end) precede
        // session.exit too.
        proxy.stop().await;
        // The refused calls' records precede session.exit: the queue closed
        // when the sandbox was gone, so this waits only for the last writes.
        if let Some(r) = recorder {
            if tokio::time::timeout(RECORDER_GRACE, r).await.is_err() {
                tracing::warn!(session = %session.id, "refused-call records still being written at session end");
            }
        }
        // An OOM kill inside the session's cgroup (memory.max, whole group) is a
        // memory breach like one found by sampling.
        if let Some(dir) = &session.cgroup {
            let kills = crate::cgroup::oom_kills(dir);
            if kills > 0 && session.request_end(EndCause::Memory) {
                self.audit.record(
                    Record::new(
                        RecordType::Limit,
                        "breach",
                        Some(&session.id),
                        "memory_mb",
                        Decision::Deny,
                        "the session's cgroup reached memory.max; the kernel killed it",
                    )
                    .with_details(json!({ "oom_kills": kills, "mechanism": "cgroup" })),
                );
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
        self.audit_exit(&session.id, session.started, code, signal, &reason);
        let _ = events
            .send(Ok(pb::SpawnEvent {
                event: Some(pb::spawn_event::Event::Exited(exit)),
            }))
            .await;
    }

    fn audit_exit(
        &self,
        id: &str,
        started: Instant,
        code: Option<i32>,
        signal: Option<i32>,
        reason: &str,
    ) {
        let rec = Record::new(
            RecordType::Session,
            "exit",
            Some(id),
            "",
            Decision::Info,
            reason,
        )
        .with_details(json!({
            "code": code,
            "signal": signal,
            "duration_ms": started.elapsed().as_millis() as u64,
        }));
        if let Err(e) = self.audit.append(rec, true) {
            tracing::error!(error = %e, session = id, "cannot write session.exit");
        }
    }

    /// Ends every live session (daemon shutdown) and waits for them.
    pub async fn end_all(&self, cause: EndCause) {
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
            1 => Ok(matches.into_iter().next().unwrap()),
            _ => Err(DaemonError::AmbiguousSession(id.to_string())),
        }
    }
}

/// Waits for the sandbox's end on the event loop (its exit fd, a pidfd),
/// then collects the outcome on a blocking thread, which then takes
/// moments: an idle session holds no thread for its exit.
async fn wait_exit(
    sb: Arc<Sandbox>,
) -> Result<Result<ExitOutcome, warden_sandbox::SandboxError>, tokio::task::JoinError> {
    // If the pidfd cannot be polled, the blocking wait below does it all.
    let _ = sb.exited().await;
    tokio::task::spawn_blocking(move || sb.wait()).await
}

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
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn var(n: &str, v: &str) -> pb::EnvVar {
        pb::EnvVar {
            name: n.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
        }
    }

    #[test]
    fn env_is_filtered_to_allow_list_plus_defaults() {
        let client = vec![
            var("SECRET", "x"),
            var("GITHUB_TOKEN", "t"),
            var("PATH", "/evil"),
            var("TERM", "xterm"),
        ];
        let (env, names) = build_env(
            &client,
            &["GITHUB_TOKEN".into(), "MISSING".into()],
            Path::new("/home/u"),
        );
        let got: BTreeSet<(String, String)> = env
            .into_iter()
            .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
            .collect();
        let want: BTreeSet<(String, String)> = [
            ("GITHUB_TOKEN", "t"),
            ("PATH", DEFAULT_PATH),
            ("HOME", "/home/u"),
            ("LANG", "C.UTF-8"),
            ("TERM", "dumb"),
        ]
        .into_iter()
        .chain(
            crate::egress::proxy_env()
                .into_iter()
                .map(|(k, v)| (k, Box::leak(v.into_boxed_str()) as &str)),
        )
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(got, want);
        assert_eq!(names, vec!["GITHUB_TOKEN".to_string()]);
    }
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
