//! From a spawn request and its compiled policy to what the sandbox is given.
//!
//! Pure: what the daemon knows about itself and this machine (its uid, the
//! delegated cgroup, its one probe of the kernel and the protections judged
//! from it) comes in as a [`Host`], and what needs the filesystem (compiling
//! the policy, Warden's own paths) is done by the caller, `Daemon::prepare`.
//! Three steps:
//!
//! 1. [`request`]: the request's own fields, validated, become what the policy is
//!    compiled with ([`Compile`]).
//! 2. [`fit`]: the compiled policy meets the host: a default process limit where
//!    one can be enforced, and a refusal naming what is missing for a limit or a
//!    protection the policy needs (fail closed).
//! 3. [`spec`]: the [`SandboxSpec`], with the server's environment filtered to
//!    `env.allow` plus defaults, and the [`Layers`] it applies on this kernel
//!    (decided here, once: the sandbox applies them as given, and
//!    [`sandbox_facts`] records them in `session.start`).

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

#[cfg(target_os = "linux")]
use warden_audit::event;
use warden_core::policy::{self, CompileContext, CompiledPolicy, Overrides, Reserved};
use warden_proto::v1 as pb;
use warden_sandbox::spec::{FileWatch, Layers, SandboxSpec};
#[cfg(target_os = "linux")]
use warden_sandbox::Kernel;

#[cfg(target_os = "linux")]
use crate::cgroup::Delegation;
use crate::error::DaemonError;
#[cfg(target_os = "linux")]
use crate::features::WriteProtection;

/// Size of the private /tmp (and `$HOME`, `/dev/shm`) in MiB, without
/// `limits.tmp_mb`.
pub const TMP_SIZE_MB: u64 = 256;
/// The server's `PATH` unless the client passes its own through `env.allow`.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `limits.pids` of a policy that sets none: tasks (processes and threads)
/// of one sandbox, far above what an MCP server runs (a Node server: about
/// a dozen).
pub const DEFAULT_PIDS: u64 = 4096;

/// What the daemon knows about itself and this machine, for the native
/// sandbox (Linux).
#[cfg(target_os = "linux")]
pub struct Host<'a> {
    /// The daemon's uid and gid: the sandbox maps only these.
    pub uid: u32,
    pub gid: u32,
    /// The delegated cgroup v2 subtree, or why there is none.
    pub cgroup: &'a Result<Delegation, String>,
    /// Which write-grant protections this kernel offers.
    pub write_protection: &'a WriteProtection,
    /// What the kernel offers (the daemon's probe at start).
    pub kernel: &'a Kernel,
}

#[cfg(target_os = "linux")]
impl Host<'_> {
    fn cgroup_has(&self, controller: &str) -> bool {
        self.cgroup.as_ref().is_ok_and(|d| d.has(controller))
    }
}

/// The value of `name` in an environment (the last one wins, as for `getenv`
/// on a list built by appending).
pub fn env_get<'a>(env: &'a [pb::EnvVar], name: &str) -> Option<&'a [u8]> {
    env.iter()
        .rev()
        .find(|v| v.name == name.as_bytes())
        .map(|v| v.value.as_slice())
}

/// What the request's policy is compiled with.
#[derive(Debug, PartialEq, Eq)]
pub struct Compile {
    /// The policy file (absolute), `None` for a flags-only policy.
    pub policy_path: Option<PathBuf>,
    pub overrides: Overrides,
    /// The client's home, cwd and `PATH`, and the paths no grant may expose.
    pub ctx: CompileContext,
}

/// Validates the request's own fields. `home` is the daemon's idea of the
/// user's home, asked for only when the client passed no `HOME`.
pub fn request(
    req: &pb::SpawnRequest,
    home: impl FnOnce() -> Option<PathBuf>,
    reserved: Vec<Reserved>,
) -> Result<Compile, DaemonError> {
    let home = env_get(&req.env, "HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(OsString::from_vec(h.to_vec())))
        .or_else(home)
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
        home,
        cwd,
        path_env: env_get(&req.env, "PATH").map(|p| OsString::from_vec(p.to_vec())),
        reserved,
    };
    Ok(Compile {
        policy_path,
        overrides,
        ctx,
    })
}

/// Fits the compiled policy to the host: gives it the default process limit
/// where that can be enforced, and refuses it, naming what is missing, when a
/// limit or protection it needs cannot be had here.
#[cfg(target_os = "linux")]
pub fn fit(policy: &mut CompiledPolicy, host: &Host) -> Result<(), DaemonError> {
    // Review F17: a fork bomb must not take the host's process table. A
    // policy without `limits.pids` gets a generous default where it can
    // be enforced (a cgroup, or RLIMIT_NPROC for a normal user; the
    // kernel exempts uid 0 from the latter).
    if policy.limits.pids.is_none() && (host.uid != 0 || host.cgroup_has("pids")) {
        policy.limits.pids = Some(DEFAULT_PIDS);
    }
    if policy.limits.pids.is_some()
        && host.uid == 0
        && !host.cgroup_has("pids")
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
        if !host.cgroup_has("cpu") && !policy.limits.best_effort {
            return Err(DaemonError::Policy(format!(
                "limits.cpu ({cpu} cores) cannot be enforced here: Warden enforces CPU limits only \
                 through a delegated cgroup v2 cpu controller, and this daemon has none ({}); \
                 remove limits.cpu or set limits.best_effort: true to run without a CPU limit",
                host.cgroup.as_ref().err().map(String::as_str).unwrap_or("the cpu controller is not delegated")
            )));
        }
    }
    if let Some(why) = host.write_protection.refusal(
        !policy.write.is_empty(),
        policy.sandbox.best_effort_write_protection,
    ) {
        return Err(DaemonError::Policy(why));
    }
    if let Some(why) = crate::files::refusal(
        file_watch(policy.audit.files),
        policy.audit.files_explicit,
        host.kernel.user_notif,
    ) {
        return Err(DaemonError::Policy(why));
    }
    Ok(())
}

/// `audit.files` as the sandbox takes it.
pub fn file_watch(level: policy::FileAudit) -> FileWatch {
    match level {
        policy::FileAudit::Denied => FileWatch::Denied,
        policy::FileAudit::All => FileWatch::All,
        policy::FileAudit::Off => FileWatch::Off,
    }
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

/// The user name in the sandbox's `/etc/passwd`: the client's `USER` (or
/// `LOGNAME`) when it is a plain name, else `user`.
fn user_name(client: &[pb::EnvVar]) -> String {
    env_get(client, "USER")
        .or_else(|| env_get(client, "LOGNAME"))
        .and_then(|u| std::str::from_utf8(u).ok())
        .filter(|u| {
            !u.is_empty()
                && u.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        })
        .unwrap_or("user")
        .to_string()
}

/// The sandbox for session `id`, and the environment names passed through
/// (for `session.start`). `warden_paths`: Warden's own files, protected in
/// every write grant that covers them. Its layers are what this kernel
/// offers a sandbox like it ([`Kernel::layers`]).
#[cfg(target_os = "linux")]
pub fn spec(
    id: &str,
    policy: &CompiledPolicy,
    client_env: &[pb::EnvVar],
    home: PathBuf,
    host: &Host,
    warden_paths: Vec<PathBuf>,
) -> (SandboxSpec, Vec<String>) {
    let (mut spec, env_names) = base_spec(
        id,
        policy,
        client_env,
        home,
        host.uid,
        host.gid,
        warden_paths,
    );
    spec.layers = host.kernel.layers(&spec);
    (spec, env_names)
}

/// [`spec`] without the native sandbox's layers (`Layers::NONE`): what
/// every backend is given, the server's environment filtered the same way
/// for all (Docker and Seatbelt read the rest of it as they can enforce
/// it). `uid`, `gid`: the daemon's.
pub fn base_spec(
    id: &str,
    policy: &CompiledPolicy,
    client_env: &[pb::EnvVar],
    home: PathBuf,
    uid: u32,
    gid: u32,
    warden_paths: Vec<PathBuf>,
) -> (SandboxSpec, Vec<String>) {
    let (mut env, env_names) = build_env(client_env, &policy.env_allow, &home);
    // `network.mode: transparent`: no proxy variables (a client that honours
    // them would go through the proxy anyway; the mode says it should not).
    if !policy.network.mode.proxy_variables() {
        let proxy = crate::egress::proxy_env();
        env.retain(|(n, _)| !proxy.iter().any(|(k, _)| k.as_bytes() == n.as_slice()));
    }
    let spec = SandboxSpec {
        session_id: id.to_string(),
        program: policy.program.clone(),
        argv: policy.argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
        env,
        cwd: policy.cwd.clone(),
        read: policy.read.clone(),
        write: policy.write.clone(),
        home,
        uid,
        gid,
        user: user_name(client_env),
        tmp_size_mb: policy.limits.tmp_mb.unwrap_or(TMP_SIZE_MB),
        pids_max: policy.limits.pids,
        landlock_min_abi: policy.sandbox.landlock_min_abi,
        proxy_port: Some(crate::egress::PROXY_PORT),
        resolver: policy.network.transparent(),
        cgroup: None,
        audit_files: file_watch(policy.audit.files),
        hold_files: false,
        warden_paths,
        hide: Vec::new(),
        allow_git_init: policy.allow_git_init,
        // Never skipped by the daemon: the field exists for benchmarks only.
        dangerously_skip_confinement: false,
        // The native sandbox decides them from the rest of the spec (`spec`).
        layers: Layers::NONE,
    };
    (spec, env_names)
}

/// Host directories `wardenctl trace` never shows as such: the sandbox has
/// its own (`/proc`, `/dev`, `/tmp`...) or they are its runtime already.
#[cfg(target_os = "linux")]
const TRACE_SKIP: &[&str] = &[
    "proc",
    "sys",
    "dev",
    "run",
    "tmp",
    "usr",
    "bin",
    "sbin",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "boot",
    "lost+found",
];

/// The observe-everything sandbox of `wardenctl trace` (docs/init.md), made
/// from the session's plan: every other top-level directory of the host
/// (`top`: the directories of `/`) shown read-only — read-write with
/// `allow_writes`, except `/etc` — with Warden's own directories in them
/// hidden under empty read-only tmpfs, every file access recorded, every
/// host reachable through the proxy ([`NetworkPolicy::record_all`]) and the
/// client's whole environment. The policy (what `session.start` records)
/// says the same. Returns the environment names passed.
#[allow(clippy::too_many_arguments)]
#[cfg(target_os = "linux")]
pub fn trace(
    policy: &mut CompiledPolicy,
    spec: &mut SandboxSpec,
    client_env: &[pb::EnvVar],
    client_cwd: &Path,
    allow_writes: bool,
    top: &[PathBuf],
    named: &[PathBuf],
    kernel: &Kernel,
) -> Vec<String> {
    let mut shown: Vec<PathBuf> = top
        .iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| !TRACE_SKIP.contains(&n.to_string_lossy().as_ref()))
        })
        .cloned()
        .collect();
    // The sandbox's /tmp is its own (writable even in a read-only trace);
    // the entries of the host's /tmp that the command line, the cwd or
    // $HOME lie in are shown in it.
    for p in named.iter().chain(
        [client_cwd, spec.home.as_path()]
            .map(Path::to_path_buf)
            .iter(),
    ) {
        let Ok(rest) = p.strip_prefix("/tmp") else {
            continue;
        };
        let Some(first) = rest.components().next() else {
            continue;
        };
        let entry = Path::new("/tmp").join(first);
        if entry.is_dir() && !shown.contains(&entry) {
            shown.push(entry);
        }
    }
    let write: Vec<PathBuf> = if allow_writes {
        shown
            .iter()
            .filter(|p| p.as_path() != Path::new("/etc"))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let read: Vec<PathBuf> = shown
        .iter()
        .filter(|p| !write.contains(p))
        .cloned()
        .collect();
    // Every name of the client's environment (the proxy's variables win).
    let names: Vec<String> = client_env
        .iter()
        .filter_map(|v| String::from_utf8(v.name.clone()).ok())
        // WARDEN_* configure Warden (its socket, its logs), never a server.
        .filter(|n| !n.is_empty() && !n.contains('=') && !n.starts_with("WARDEN_"))
        .collect();
    let (env, passed) = build_env(client_env, &names, &spec.home);
    spec.env = env;
    spec.read = read.clone();
    spec.write = write.clone();
    spec.hide = spec
        .warden_paths
        .iter()
        .filter(|p| p.is_dir())
        .cloned()
        .collect();
    spec.audit_files = FileWatch::All;
    if shown.iter().any(|d| client_cwd.starts_with(d)) {
        spec.cwd = client_cwd.to_path_buf();
    }
    spec.layers = kernel.layers(spec);
    policy.read = read;
    policy.write = write;
    policy.cwd = spec.cwd.clone();
    policy.network = warden_core::policy::net::NetworkPolicy::record_all();
    policy.warnings.push(format!(
        "trace: the host's directories are visible {} (Warden's own hidden), every host is reachable through the proxy, and the whole environment is passed; everything is recorded",
        if allow_writes { "read-write (/etc read-only)" } else { "read-only" }
    ));
    passed
}

/// The directories of the host's `/` (not symlinks) this user may list and
/// enter (another user's `/root` is of no use to a trace, and binding what
/// is below it would fail), sorted.
#[cfg(target_os = "linux")]
pub fn host_top_dirs() -> Vec<PathBuf> {
    use nix::unistd::{access, AccessFlags};
    let mut v: Vec<PathBuf> = std::fs::read_dir("/")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .filter(|p| access(p, AccessFlags::R_OK | AccessFlags::X_OK).is_ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The session's approvals (`--approve` or `approve: true`), or None: the
/// timeout (0: the default), the policy file `--always` edits (the text the
/// session compiled is what the file held), and whether the shim prompts.
pub fn approvals(
    id: &str,
    req: &pb::SpawnRequest,
    policy: &CompiledPolicy,
) -> Result<Option<crate::approvals::SessionConfig>, DaemonError> {
    if !req.approve && !policy.approve {
        return Ok(None);
    }
    approval_config(id, req, policy).map(Some)
}

/// The approvals of a session that asks a person about anything: held
/// accesses (`approve`), tools withheld by `mcp.pin: enforce`.
pub fn approval_config(
    id: &str,
    req: &pb::SpawnRequest,
    policy: &CompiledPolicy,
) -> Result<crate::approvals::SessionConfig, DaemonError> {
    use crate::approvals::{PolicyFile, SessionConfig, DEFAULT_TIMEOUT, MAX_TIMEOUT};
    let timeout = match req.approve_timeout_ms {
        0 => DEFAULT_TIMEOUT,
        ms => std::time::Duration::from_millis(ms),
    };
    if timeout > MAX_TIMEOUT || timeout < std::time::Duration::from_secs(1) {
        return Err(DaemonError::BadRequest(format!(
            "approve_timeout_ms must be 1000 to {} (1 s to 1 h), got {}",
            MAX_TIMEOUT.as_millis(),
            req.approve_timeout_ms
        )));
    }
    Ok(SessionConfig {
        session: id.to_owned(),
        server: policy.name.clone(),
        timeout,
        policy: policy.source.as_ref().map(|path| PolicyFile {
            path: path.clone(),
            text_at_start: req.policy_text.as_bytes().to_vec(),
        }),
        terminal: req.approve_terminal,
        calls: None,
    })
}

/// `details.sandbox` of `session.start`: the layers of `spec` (what the
/// sandbox is given to apply, not a second guess of it) and what protects
/// write grants.
#[cfg(target_os = "linux")]
pub fn sandbox_facts(
    spec: &SandboxSpec,
    policy: &CompiledPolicy,
    write_protection: &WriteProtection,
    backend: &crate::backend::Choice,
) -> event::SandboxFacts {
    let layers = &spec.layers;
    event::SandboxFacts {
        backend: backend.backend.to_string(),
        backend_requested: backend.requested.to_string(),
        backend_skipped: backend.skipped_facts(),
        namespaces: ["user", "mount", "pid", "net", "ipc", "uts", "cgroup"]
            .map(String::from)
            .to_vec(),
        landlock_abi: layers.landlock_abi,
        landlock_min_abi: policy.sandbox.landlock_min_abi,
        syscall_audit: if layers.notify {
            "seccomp user notification"
        } else {
            "unavailable"
        }
        .into(),
        file_audit: crate::files::level_in_use(spec).into(),
        create_guard: layers.guard,
        host_root: spec.uid == 0,
        write_protection: write_protection.record(!policy.write.is_empty()),
        best_effort_write_protection: policy.sandbox.best_effort_write_protection,
        docker: None,
    }
}

/// A compiled policy for unit tests: a server `srv` at `program`, a read
/// grant `/data`, `TOKEN` passed through; every other key at its default.
#[cfg(test)]
pub(crate) fn test_policy(program: &str) -> CompiledPolicy {
    use warden_core::policy::{self, AuditPolicy, Limits, SandboxReq};
    CompiledPolicy {
        version: 1,
        name: Some("srv".into()),
        source: Some("/p/policy.yaml".into()),
        digest: policy::digest(""),
        argv: vec!["srv".into(), "--flag".into()],
        program: program.into(),
        cwd: "/work".into(),
        read: vec!["/data".into()],
        write: vec![],
        allow_git_init: false,
        env_allow: vec!["TOKEN".into()],
        network: Default::default(),
        limits: Limits::default(),
        sandbox: SandboxReq::default(),
        audit: AuditPolicy::default(),
        exposed: vec![],
        warnings: vec![],
        approve: false,
        backend: Default::default(),
        docker_image: None,
        mcp: Default::default(),
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use warden_core::policy::Limits;

    fn var(n: &str, v: &str) -> pb::EnvVar {
        pb::EnvVar {
            name: n.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
        }
    }

    fn req(env: &[(&str, &str)], cwd: &str, policy_path: &str) -> pb::SpawnRequest {
        pb::SpawnRequest {
            policy_path: policy_path.into(),
            cwd: cwd.into(),
            env: env.iter().map(|(n, v)| var(n, v)).collect(),
            ..Default::default()
        }
    }

    fn bad_request(r: Result<Compile, DaemonError>) -> String {
        match r {
            Err(DaemonError::BadRequest(why)) => why,
            other => panic!("not a bad request: {other:?}"),
        }
    }

    #[test]
    fn a_request_becomes_what_the_policy_is_compiled_with() {
        let mut r = req(
            &[("HOME", "/home/u"), ("PATH", "/bin"), ("HOME", "/home/v")],
            "/work",
            "/p/policy.yaml",
        );
        r.name = "fs".into();
        r.command = vec!["srv".into(), "-x".into()];
        r.extra = Some(pb::PolicyGrants {
            read: vec!["./r".into()],
            write: vec!["./w".into()],
            allow_env: vec!["TOKEN".into()],
        });
        let reserved = vec![Reserved {
            path: "/run/warden".into(),
            what: "the socket".into(),
            subtree: true,
        }];
        assert_eq!(
            request(&r, || panic!("HOME was given"), reserved.clone()).unwrap(),
            Compile {
                policy_path: Some("/p/policy.yaml".into()),
                overrides: Overrides {
                    read: vec!["./r".into()],
                    write: vec!["./w".into()],
                    allow_env: vec!["TOKEN".into()],
                    name: Some("fs".into()),
                    command: vec!["srv".into(), "-x".into()],
                },
                ctx: CompileContext {
                    // The last HOME wins.
                    home: "/home/v".into(),
                    cwd: "/work".into(),
                    path_env: Some("/bin".into()),
                    reserved,
                },
            }
        );
        // A flags-only policy, an unnamed one, and the daemon's home when the
        // client has none (or an empty one).
        let c = request(
            &req(&[("HOME", "")], "/", ""),
            || Some("/root".into()),
            vec![],
        )
        .unwrap();
        assert_eq!(
            (c.policy_path, c.overrides.name, c.ctx.home, c.ctx.path_env),
            (None, None, PathBuf::from("/root"), None)
        );
    }

    #[test]
    fn malformed_requests_are_refused() {
        let none = || None;
        for (r, want) in [
            (req(&[], "/", ""), "HOME is not set"),
            (
                req(&[("HOME", "home/u")], "/", ""),
                "HOME must be absolute, got home/u",
            ),
            (
                req(&[("HOME", "/h")], "work", ""),
                "cwd must be absolute, got `work`",
            ),
            (
                req(&[("HOME", "/h")], "/", "policy.yaml"),
                "policy_path must be absolute, got `policy.yaml`",
            ),
        ] {
            assert_eq!(bad_request(request(&r, none, vec![])), want);
        }
    }

    fn native() -> crate::backend::Choice {
        crate::backend::Choice {
            backend: warden_core::policy::Backend::Linux,
            requested: warden_core::policy::Backend::Auto,
            skipped: vec![],
        }
    }

    fn policy() -> CompiledPolicy {
        crate::session::plan::test_policy("/usr/bin/srv")
    }

    struct Machine {
        cgroup: Result<Delegation, String>,
        write_protection: WriteProtection,
        /// Everything the sandbox uses, and the same without seccomp user
        /// notification.
        kernel: Kernel,
        no_notify: Kernel,
    }

    fn without_notify(k: &Kernel) -> Kernel {
        Kernel {
            seccomp_actions: Some("kill_process kill_thread trap errno trace log allow".into()),
            user_notif: false,
            wait_killable_recv: false,
            addfd_send: false,
            sync_wake_up: false,
            ..k.clone()
        }
    }

    fn machine(controllers: &[&str], protections: bool) -> Machine {
        let missing = |what: &str| {
            if protections {
                Ok(())
            } else {
                Err(format!("no {what} here"))
            }
        };
        Machine {
            cgroup: if controllers.is_empty() {
                Err("not delegated".into())
            } else {
                Ok(Delegation {
                    root: "/sys/fs/cgroup/wardend".into(),
                    controllers: controllers.iter().map(|c| c.to_string()).collect(),
                })
            },
            write_protection: WriteProtection {
                landlock: missing("landlock").map(|()| 7),
                create_guard: missing("guard"),
                pretended: false,
            },
            kernel: crate::features::full_kernel(),
            no_notify: without_notify(&crate::features::full_kernel()),
        }
    }

    fn host(m: &Machine, uid: u32, notify: bool) -> Host<'_> {
        Host {
            uid,
            gid: uid + 1,
            cgroup: &m.cgroup,
            write_protection: &m.write_protection,
            kernel: if notify { &m.kernel } else { &m.no_notify },
        }
    }

    #[test]
    fn a_default_process_limit_where_it_can_be_enforced() {
        let bare = machine(&[], true);
        let pids = machine(&["pids"], true);
        for (m, uid, want) in [
            (&bare, 1000, Some(DEFAULT_PIDS)),
            (&pids, 1000, Some(DEFAULT_PIDS)),
            (&pids, 0, Some(DEFAULT_PIDS)),
            // RLIMIT_NPROC does not hold uid 0.
            (&bare, 0, None),
        ] {
            let mut p = policy();
            fit(&mut p, &host(m, uid, true)).unwrap();
            assert_eq!(p.limits.pids, want, "uid {uid}");
        }
        let mut p = policy();
        p.limits.pids = Some(7);
        fit(&mut p, &host(&bare, 1000, true)).unwrap();
        assert_eq!(p.limits.pids, Some(7));
    }

    #[test]
    fn what_cannot_be_had_here_is_refused_unless_best_effort() {
        let refusal = |p: &mut CompiledPolicy, m: &Machine, uid: u32, notify: bool| match fit(
            p,
            &host(m, uid, notify),
        ) {
            Ok(()) => None,
            Err(DaemonError::Policy(why)) => Some(why),
            Err(e) => panic!("{e}"),
        };
        let bare = machine(&[], true);
        let cpu = machine(&["cpu"], true);

        let mut p = policy();
        p.limits.pids = Some(10);
        let why = refusal(&mut p, &bare, 0, true).unwrap();
        assert!(why.starts_with("limits.pids cannot be enforced when wardend runs as root"));
        p.limits.best_effort = true;
        assert_eq!(refusal(&mut p, &bare, 0, true), None);

        let mut p = policy();
        p.limits.cpu = Some(0.5);
        let why = refusal(&mut p, &bare, 1000, true).unwrap();
        assert!(
            why.starts_with("limits.cpu (0.5 cores) cannot be enforced here")
                && why.contains("(not delegated)"),
            "{why}"
        );
        assert_eq!(refusal(&mut p, &cpu, 1000, true), None);
        let pids_only = machine(&["pids"], true);
        let why = refusal(&mut p, &pids_only, 1000, true).unwrap();
        assert!(
            why.contains("(the cpu controller is not delegated)"),
            "{why}"
        );
        p.limits.best_effort = true;
        assert_eq!(refusal(&mut p, &bare, 1000, true), None);

        // Write grants need the creation guard and Landlock.
        let weak = machine(&[], false);
        let mut p = policy();
        assert_eq!(refusal(&mut p, &weak, 1000, true), None);
        p.write = vec!["/out".into()];
        let why = refusal(&mut p, &weak, 1000, true).unwrap();
        assert!(why.starts_with("this policy has write grants"), "{why}");
        p.sandbox.best_effort_write_protection = true;
        assert_eq!(refusal(&mut p, &weak, 1000, true), None);

        // An audit.files level asked for needs user notification; the default
        // runs without it.
        let mut p = policy();
        assert_eq!(refusal(&mut p, &bare, 1000, false), None);
        p.audit.files_explicit = true;
        let why = refusal(&mut p, &bare, 1000, false).unwrap();
        assert!(why.starts_with("audit.files: denied needs seccomp user notification"));
        assert_eq!(refusal(&mut p, &bare, 1000, true), None);
    }

    #[test]
    fn every_file_audit_level_keeps_its_name() {
        for level in [
            policy::FileAudit::Denied,
            policy::FileAudit::All,
            policy::FileAudit::Off,
        ] {
            assert_eq!(file_watch(level).as_str(), level.as_str());
        }
        // The policy's default is the sandbox's `denied`, not the spec's `off`.
        assert_eq!(file_watch(policy::FileAudit::default()), FileWatch::Denied);
    }

    #[test]
    fn a_trace_shows_the_host_but_its_own_and_the_runtime_and_records_everything() {
        let m = machine(&[], true);
        let mut p = policy();
        let env = [var("USER", "alice"), var("TOKEN", "t")];
        let state = tempfile::tempdir().unwrap();
        let (mut sp, _) = spec(
            "abc",
            &p,
            &env,
            "/home/a".into(),
            &host(&m, 1000, true),
            vec![state.path().to_path_buf(), "/nonexistent-bin".into()],
        );
        // A directory under /tmp named by the command line.
        let named = tempfile::tempdir().unwrap();
        let top: Vec<PathBuf> = ["/etc", "/home", "/opt", "/proc", "/tmp", "/usr", "/var"]
            .iter()
            .map(PathBuf::from)
            .collect();
        let names = trace(
            &mut p,
            &mut sp,
            &env,
            Path::new("/home/a/proj"),
            true,
            &top,
            &[named.path().join("server.js")],
            &m.kernel,
        );
        assert_eq!(sp.read, vec![PathBuf::from("/etc")]);
        let mut want: Vec<PathBuf> = vec!["/home".into(), "/opt".into(), "/var".into()];
        want.push(named.path().to_path_buf());
        assert_eq!(sp.write, want);
        assert_eq!(sp.hide, vec![state.path().to_path_buf()]);
        assert_eq!(sp.audit_files, FileWatch::All);
        assert_eq!(sp.cwd, PathBuf::from("/home/a/proj"));
        assert!(names.contains(&"TOKEN".to_string()) && names.contains(&"USER".to_string()));
        assert_eq!(p.write, sp.write);
        assert_eq!(p.network.allow[0].host.to_string(), "*");
        assert!(p.warnings.iter().any(|w| w.starts_with("trace: ")));
    }

    #[test]
    fn the_spec_carries_the_policy() {
        let m = machine(&[], true);
        let mut p = policy();
        p.write = vec!["/out".into()];
        p.allow_git_init = true;
        p.limits = Limits {
            tmp_mb: Some(64),
            pids: Some(9),
            ..Limits::default()
        };
        p.sandbox.landlock_min_abi = 3;
        p.audit.files = policy::FileAudit::All;
        let env = [var("USER", "alice"), var("TOKEN", "t"), var("SECRET", "s")];
        let (got, names) = spec(
            "abc",
            &p,
            &env,
            "/home/a".into(),
            &host(&m, 1000, true),
            vec!["/state".into()],
        );
        assert_eq!(names, ["TOKEN"]);
        let (env, _) = build_env(&env, &p.env_allow, Path::new("/home/a"));
        assert_eq!(
            got,
            SandboxSpec {
                session_id: "abc".into(),
                program: "/usr/bin/srv".into(),
                argv: vec![b"srv".to_vec(), b"--flag".to_vec()],
                env,
                cwd: "/work".into(),
                read: vec!["/data".into()],
                write: vec!["/out".into()],
                home: "/home/a".into(),
                uid: 1000,
                gid: 1001,
                user: "alice".into(),
                tmp_size_mb: 64,
                pids_max: Some(9),
                landlock_min_abi: 3,
                proxy_port: Some(crate::egress::PROXY_PORT),
                resolver: false,
                cgroup: None,
                audit_files: FileWatch::All,
                hold_files: false,
                warden_paths: vec!["/state".into()],
                hide: vec![],
                allow_git_init: true,
                dangerously_skip_confinement: false,
                layers: Layers {
                    landlock_abi: Some(7),
                    notify: true,
                    watch_files: true,
                    guard: true,
                    wait_killable: true,
                    sync_wake_up: true,
                },
            }
        );
        // Defaults: the private /tmp's size; the policy's file audit level.
        let (spec, _) = spec(
            "abc",
            &policy(),
            &[],
            "/h".into(),
            &host(&m, 1000, true),
            vec![],
        );
        assert_eq!(
            (spec.tmp_size_mb, spec.pids_max, spec.audit_files),
            (TMP_SIZE_MB, None, FileWatch::Denied)
        );
    }

    /// `session.start` says what the sandbox is given to apply: its facts
    /// are the spec's layers, which are the daemon's probe of the kernel
    /// applied to the policy, whatever the kernel lacks.
    #[test]
    fn session_start_records_the_layers_the_probe_gave() {
        let full = crate::features::full_kernel();
        let kernels = [
            ("everything", full.clone()),
            ("no user notification", without_notify(&full)),
            (
                "landlock ABI 3",
                Kernel {
                    landlock: Ok(3),
                    ..full.clone()
                },
            ),
            (
                "a newer landlock",
                Kernel {
                    landlock: Ok(9),
                    ..full.clone()
                },
            ),
            (
                "no landlock",
                Kernel {
                    landlock: Err(nix::errno::Errno::EOPNOTSUPP),
                    ..full.clone()
                },
            ),
            (
                "no SECCOMP_ADDFD_FLAG_SEND",
                Kernel {
                    addfd_send: false,
                    ..full.clone()
                },
            ),
        ];
        let cgroup = Err("not delegated".to_string());
        for (what, kernel) in &kernels {
            for pretend in [None, Some("create_guard,landlock")] {
                for (write, level) in [
                    (false, policy::FileAudit::Off),
                    (true, policy::FileAudit::Denied),
                    (true, policy::FileAudit::All),
                ] {
                    let wp = WriteProtection::judge(kernel, pretend);
                    let host = Host {
                        uid: 1000,
                        gid: 1000,
                        cgroup: &cgroup,
                        write_protection: &wp,
                        kernel,
                    };
                    let mut p = policy();
                    if write {
                        p.write = vec!["/out".into()];
                    }
                    p.audit.files = level;
                    let (spec, _) = spec("abc", &p, &[], "/h".into(), &host, vec![]);
                    let facts = sandbox_facts(&spec, &p, &wp, &native());
                    let ctx = format!("{what}, {pretend:?}, {level:?}");
                    // What the probe found...
                    assert_eq!(facts.landlock_abi, kernel.landlock_abi(), "{ctx}");
                    assert_eq!(
                        facts.syscall_audit,
                        if kernel.user_notif {
                            "seccomp user notification"
                        } else {
                            "unavailable"
                        },
                        "{ctx}"
                    );
                    assert_eq!(
                        facts.file_audit,
                        match (level, kernel.user_notif) {
                            (policy::FileAudit::Off, _) => "off",
                            (_, false) => "unavailable",
                            (l, true) => l.as_str(),
                        },
                        "{ctx}"
                    );
                    // ...(the test setting only refuses more: the sandbox
                    // keeps what the kernel has)...
                    assert_eq!(
                        facts.create_guard,
                        write && kernel.guard_available(),
                        "{ctx}"
                    );
                    // ...is what the sandbox is told to apply.
                    let l = spec.layers;
                    assert_eq!(l, kernel.layers(&spec), "{ctx}");
                    assert_eq!(
                        (facts.landlock_abi, facts.create_guard),
                        (l.landlock_abi, l.guard),
                        "{ctx}"
                    );
                    assert_eq!(l.notify, kernel.user_notif, "{ctx}");
                    assert_eq!(
                        l.watch_files,
                        level != policy::FileAudit::Off && facts.file_audit == level.as_str(),
                        "{ctx}"
                    );
                    assert_eq!(facts.write_protection, wp.record(write), "{ctx}");
                }
            }
        }
        // The record's fields and values, as docs/audit-format.md shows them.
        let wp = WriteProtection::judge(&full, None);
        let m = machine(&[], true);
        let host = Host {
            write_protection: &wp,
            ..host(&m, 1000, true)
        };
        let mut p = policy();
        p.write = vec!["/out".into()];
        let (spec, _) = spec("abc", &p, &[], "/h".into(), &host, vec![]);
        assert_eq!(
            serde_json::to_value(sandbox_facts(&spec, &p, &wp, &native())).unwrap(),
            serde_json::json!({
                "backend": "linux", "backend_requested": "auto", "backend_skipped": [],
                "best_effort_write_protection": false,
                "create_guard": true, "file_audit": "denied", "host_root": false,
                "landlock_abi": 7, "landlock_min_abi": 0,
                "namespaces": ["user", "mount", "pid", "net", "ipc", "uts", "cgroup"],
                "syscall_audit": "seccomp user notification",
                "write_protection": {
                    "active": ["protected names bound read-only", "creation guard", "Landlock ABI 7"],
                    "missing": [], "mode": "full"
                }
            })
        );
    }

    #[test]
    fn the_user_name_is_a_plain_name_or_user() {
        for (env, want) in [
            (vec![var("USER", "alice"), var("LOGNAME", "bob")], "alice"),
            (vec![var("LOGNAME", "bob")], "bob"),
            (vec![var("USER", "a.b_c-1")], "a.b_c-1"),
            (vec![var("USER", "")], "user"),
            (vec![var("USER", "root:x:0:0")], "user"),
            (vec![var("USER", "al ice")], "user"),
            (vec![var("USER", "élise")], "user"),
            (vec![], "user"),
        ] {
            assert_eq!(user_name(&env), want, "{env:?}");
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

    #[test]
    fn the_proxy_variables_win_over_the_clients() {
        let (env, names) = build_env(
            &[var("HTTPS_PROXY", "http://evil:1")],
            &["HTTPS_PROXY".into()],
            Path::new("/h"),
        );
        assert!(names.is_empty());
        let https: Vec<&[u8]> = env
            .iter()
            .filter(|(n, _)| n == b"HTTPS_PROXY")
            .map(|(_, v)| v.as_slice())
            .collect();
        assert_eq!(
            https,
            [format!("http://127.0.0.1:{}", crate::egress::PROXY_PORT).as_bytes()]
        );
    }
}
