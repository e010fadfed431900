//! The Docker backend: one container per session, driven through the
//! `docker` command line.
//!
//! Why the CLI and not the Engine API: the CLI is what the user's Docker is
//! configured through (`DOCKER_HOST`, contexts, rootless or Desktop
//! engines, TLS), its `start --attach --interactive` is Docker's own stdio
//! attach (the stream demultiplexing, half-close on stdin EOF), and it
//! keeps an HTTP client and Docker's wire formats out of the daemon. The
//! daemon runs it with fixed argument vectors, never through a shell; no
//! value from the client's environment is ever on its command line (the
//! server's environment goes through an `--env-file` in the daemon's
//! private directory, removed once the container exists).
//!
//! A session's container (`warden-<session id>`, labelled
//! `warden.session=<id>` and `warden.daemon=<this daemon>`):
//! `--network none`, `--cap-drop ALL`, `no-new-privileges`, a read-only
//! root, the daemon's own uid and gid, a size-limited `/tmp` (and `$HOME`
//! unless a grant holds it), `--memory` = `--memory-swap`, `--pids-limit`,
//! `--cpus`, Warden's seccomp profile (the native sandbox's deny list,
//! [`install_seccomp_profile`]) instead of Docker's default, the grants bind-mounted at their own paths, the protected
//! names inside write grants bound read-only over themselves, `--init`, no
//! log driver (the server's output is nowhere but the client's pipe), and
//! never a pull. Its entrypoint is Warden's static bridge ([`super::bridge`]),
//! which hands the daemon a listener on `127.0.0.1:3128` inside the
//! container's network namespace, then execs the server: the session's
//! egress proxy is served on it exactly as on the native sandbox's.
//!
//! The container is removed when the session ends, however it ends; one
//! left by a daemon that died is removed when the next one starts
//! ([`Engine::reap_stale`]).
//!
//! Off Linux there is no bridge ([`HAS_BRIDGE`]): it is a static Linux
//! program handed a listener over a Unix socket bind-mounted into the
//! container, which needs a Linux build of the daemon and an engine on the
//! daemon's own kernel (Docker Desktop runs its engine in a VM, where a
//! bind-mounted socket does not connect back to the host's daemon). There a
//! policy that allows any host is refused ("cannot enforce"), and one that
//! allows none runs with `--network none`, the program as the entrypoint,
//! and no proxy.

use std::ffi::OsString;
use std::future::Future;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use warden_core::policy::{self, CompiledPolicy};
use warden_proto::v1 as pb;
use warden_sandbox::spec::SandboxSpec;

use super::{ExitOutcome, Launched, Process};
use crate::error::DaemonError;
use crate::stdio::{pipe, Relay};

/// The label every container of a session carries, with the session id.
pub const LABEL_SESSION: &str = "warden.session";
/// The label naming the daemon that made it (`<uid>-<hash of its socket>`).
pub const LABEL_DAEMON: &str = "warden.daemon";
/// The image when the policy names none (`docker.image`).
pub const IMAGE_ENV: &str = "WARDEN_DOCKER_IMAGE";
/// Where the bridge and the egress socket appear inside the container.
pub const BRIDGE_IN: &str = "/.warden/bridge";
pub const EGRESS_IN: &str = "/.warden/egress.sock";

/// How long a positive engine check is trusted.
const CHECK_TTL: Duration = Duration::from_secs(10);
/// The longest a docker command other than the attach may take.
const CLI_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the container may take from `docker start` to the bridge's
/// hand-over.
const HANDOFF_TIMEOUT: Duration = Duration::from_secs(30);

/// The Docker engine as this daemon reaches it.
pub struct Engine {
    cli: Option<PathBuf>,
    /// This daemon's `warden.daemon` label value.
    pub instance: String,
    checked: Mutex<Option<(Instant, Result<String, String>)>>,
}

impl Engine {
    /// The engine reached by `docker` on the daemon's `PATH`.
    pub fn new(socket: &Path, uid: u32) -> Engine {
        let cli = std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("docker"))
                .find(|c| c.is_file())
        });
        Engine::with_cli(cli, instance_label(socket, uid))
    }

    pub fn with_cli(cli: Option<PathBuf>, instance: String) -> Engine {
        Engine {
            cli,
            instance,
            checked: Mutex::new(None),
        }
    }

    fn cli(&self) -> Result<&Path, String> {
        self.cli.as_deref().ok_or_else(|| {
            "the docker command is not installed (no `docker` on wardend's PATH)".to_string()
        })
    }

    /// Whether an engine answers, with its version, or why not. A failure is
    /// checked again on the next call; a success is trusted for a few
    /// seconds.
    pub fn available(&self) -> Result<String, String> {
        let mut c = self.checked.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, Ok(v))) = &*c {
            if at.elapsed() < CHECK_TTL {
                return Ok(v.clone());
            }
        }
        let r = self.cli().and_then(|cli| {
            run_blocking(
                cli,
                &["version", "--format", "{{.Server.Version}}"],
                CLI_TIMEOUT,
            )
            .map(|out| out.trim().to_string())
            .map_err(|e| format!("no Docker engine answers ({e})"))
        });
        *c = Some((Instant::now(), r.clone()));
        r
    }

    /// Removes the containers an earlier run of this daemon left (it died
    /// before it could). Quiet when there is no engine.
    pub async fn reap_stale(&self) {
        let Ok(cli) = self.cli() else { return };
        let filter = format!("label={LABEL_DAEMON}={}", self.instance);
        let Ok(out) = run(cli, &["ps", "-aq", "--filter", &filter], CLI_TIMEOUT).await else {
            return;
        };
        let ids: Vec<&str> = out.split_whitespace().collect();
        if ids.is_empty() {
            return;
        }
        let mut args = vec!["rm", "-f"];
        args.extend(&ids);
        match run(cli, &args, CLI_TIMEOUT).await {
            Ok(_) => {
                tracing::warn!(containers = ?ids, "removed containers an earlier wardend left")
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot remove containers an earlier wardend left")
            }
        }
    }
}

/// `<uid>-<16 hex of sha256(socket path)>`: one daemon's containers among
/// every user's on a shared engine.
pub fn instance_label(socket: &Path, uid: u32) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(socket.as_os_str().as_bytes());
    format!("{uid}-{}", &hex::encode(h)[..16])
}

/// The container of session `id`.
pub fn container_name(id: &str) -> String {
    format!("warden-{id}")
}

/// Runs a docker command to completion (blocking), stdout on success, the
/// first lines of stderr otherwise.
fn run_blocking(cli: &Path, args: &[&str], timeout: Duration) -> Result<String, String> {
    let mut child = std::process::Command::new(cli)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", cli.display()))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("`docker {}` took more than {timeout:?}", args[0]));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    outcome(args, out)
}

/// Runs a docker command to completion on the event loop.
async fn run(cli: &Path, args: &[&str], timeout: Duration) -> Result<String, String> {
    run_with(cli, args, timeout, &[]).await
}

async fn run_with(
    cli: &Path,
    args: &[&str],
    timeout: Duration,
    extra: &[OsString],
) -> Result<String, String> {
    let child = tokio::process::Command::new(cli)
        .args(args)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", cli.display()))?;
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => outcome(args, out),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("`docker {}` took more than {timeout:?}", args[0])),
    }
}

fn outcome(args: &[&str], out: std::process::Output) -> Result<String, String> {
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let err: Vec<&str> = err
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(3)
        .collect();
    let err = if err.is_empty() {
        format!("exited with {}", out.status)
    } else {
        err.join(" ")
    };
    Err(format!("`docker {}`: {err}", args[0]))
}

/// Sends `docker kill -s SIG` without waiting for it (a signal of a
/// session that ends is not worth holding the caller for).
fn kill_detached(cli: &Path, name: &str, sig: &str) {
    let cli = cli.to_path_buf();
    let (name, sig) = (name.to_string(), sig.to_string());
    let go = async move {
        if let Err(e) = run(&cli, &["kill", "-s", &sig, &name], CLI_TIMEOUT).await {
            // Gone already is the usual reason; anything else is worth a line.
            if !e.contains("is not running") && !e.contains("No such container") {
                tracing::warn!(container = %name, signal = %sig, error = %e, "docker kill failed");
            }
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) => {
            h.spawn(go);
        }
        Err(_) => tracing::warn!("docker kill outside the runtime"),
    }
}

/// Whether this build has the egress bridge (`warden_sandbox::bridge`, a
/// static Linux program): on Linux only.
pub const HAS_BRIDGE: bool = cfg!(target_os = "linux");

/// What the Docker backend decided for a policy before anything starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    pub image: String,
    /// What this backend does differently from the native one, recorded in
    /// `session.start` (one sentence each).
    pub notes: Vec<String>,
    /// The container's egress goes through the bridge and the session's
    /// proxy; false: no network at all (off Linux, a policy with no host).
    pub bridge: bool,
}

/// Fits `policy` to the Docker backend: refuses what it cannot enforce
/// (never silently weaker), turns off what is only the native sandbox's
/// to record, and finds the image. `client_env` is the request's.
pub fn fit(
    policy: &mut CompiledPolicy,
    client_env: &[pb::EnvVar],
    trace: bool,
    approve: bool,
) -> Result<Fitted, DaemonError> {
    fit_with(policy, client_env, trace, approve, HAS_BRIDGE)
}

/// [`fit`] on a build that has the egress bridge (`bridge`) or not.
pub fn fit_with(
    policy: &mut CompiledPolicy,
    client_env: &[pb::EnvVar],
    trace: bool,
    approve: bool,
    bridge: bool,
) -> Result<Fitted, DaemonError> {
    let refuse = |what: &str| {
        DaemonError::Policy(format!(
            "the Docker backend cannot enforce {what}; use the native sandbox \
             (backend: linux) for this policy"
        ))
    };
    super::refuse_notifier_only(policy, trace, approve, refuse)?;
    let mut notes = Vec::new();
    if !bridge {
        if !policy.network.allow.is_empty() {
            return Err(DaemonError::Policy(format!(
                "the Docker backend cannot enforce network.allow on {}: its egress bridge is a \
                 static Linux program handed a listener over a Unix socket bind-mounted into \
                 the container, which needs wardend on Linux with the engine on the same \
                 kernel (Docker Desktop's engine runs in a VM); remove network.allow to run \
                 with no network at all (--network none, no proxy)",
                std::env::consts::OS
            )));
        }
        notes.push(
            "no network at all: --network none and no egress proxy (no bridge off Linux)".into(),
        );
    }
    super::fit_without_notifier(policy, "the container", refuse, &mut notes)?;
    if !policy.write.is_empty() && !policy.sandbox.best_effort_write_protection {
        return Err(DaemonError::Policy(
            "this policy has write grants, and the Docker backend protects only the \
             protected names that exist when the session starts (.git/hooks, .bashrc, \
             .mcp.json... bound read-only): it has no creation guard and no Landlock, so a \
             server could create them where they are missing; set \
             sandbox.best_effort_write_protection: true to run anyway (recorded in \
             session.start), or use the native sandbox (backend: linux)"
                .into(),
        ));
    }
    // Never the engine's socket, whatever `filesystem.dangerously_expose`
    // says: reaching it is root on the host, and out of the container.
    for g in policy.read.iter().chain(&policy.write) {
        for sock in engine_sockets(client_env) {
            if sock.starts_with(g) {
                return Err(DaemonError::Policy(format!(
                    "the grant {} holds the Docker engine's socket {}; the Docker backend \
                     never mounts it into a container (whoever reaches it is root on the \
                     host): grant a narrower path",
                    g.display(),
                    sock.display()
                )));
            }
        }
    }
    if policy.limits.pids.is_none() {
        policy.limits.pids = Some(crate::session::DEFAULT_PIDS);
    }
    // A program no grant shows is the image's: `command[0]` as written,
    // found on the container's PATH (the host's resolution means nothing
    // there), and so recorded.
    let shown = |p: &Path| {
        policy
            .read
            .iter()
            .chain(&policy.write)
            .any(|g| p.starts_with(g))
    };
    if !shown(&policy.program) {
        if let Some(first) = policy.argv.first() {
            policy.program = PathBuf::from(first);
        }
    }
    let image = match &policy.docker_image {
        Some(i) => i.clone(),
        None => {
            let from_client = crate::session::env_get(client_env, IMAGE_ENV)
                .map(|v| String::from_utf8_lossy(v).into_owned());
            let from_daemon = std::env::var(IMAGE_ENV).ok();
            let Some(raw) = from_client.or(from_daemon).filter(|v| !v.is_empty()) else {
                return Err(DaemonError::Policy(format!(
                    "the Docker backend needs an image: set docker.image in the policy or \
                     {IMAGE_ENV} (Warden never pulls one: it must be present in the engine)"
                )));
            };
            policy::docker_image(&raw)
                .map_err(|e| DaemonError::Policy(format!("{IMAGE_ENV}: {e}")))?
        }
    };
    policy.docker_image = Some(image.clone());
    Ok(Fitted {
        image,
        notes,
        bridge,
    })
}

/// `session.start`'s limits, as the engine enforces them.
pub fn describe_limits(p: &CompiledPolicy) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(t) = p.limits.timeout_s {
        out.push(format!(
            "timeout_s={t} (daemon timer; the container is killed)"
        ));
    }
    if let Some(n) = p.limits.pids {
        out.push(format!("pids={n} (Docker --pids-limit)"));
    }
    out.push(format!(
        "tmp_mb={} (size of the container's private /tmp)",
        p.limits.tmp_mb.unwrap_or(crate::session::TMP_SIZE_MB)
    ));
    if let Some(c) = p.limits.cpu {
        out.push(format!("cpu={c} (Docker --cpus)"));
    }
    if let Some(m) = p.limits.memory_mb {
        out.push(format!(
            "memory_mb={m} (Docker --memory, --memory-swap equal: no swap)"
        ));
    }
    out
}

/// What the container gets, for `session.start`.
pub const OPTIONS: &[&str] = &[
    "--network none (egress only through the session's proxy)",
    "--cap-drop ALL",
    "--security-opt no-new-privileges",
    "--read-only root",
    "--user (the daemon's uid and gid)",
    "--init",
    "--log-driver none",
    "--pull never",
    "Warden's seccomp deny list (the native sandbox's), Docker's default AppArmor profile",
];

/// `session.start`'s `sandbox` for a container.
pub fn sandbox_facts(
    policy: &CompiledPolicy,
    backend: &super::Choice,
    fitted: &Fitted,
    id: &str,
    engine: Option<String>,
) -> warden_audit::event::SandboxFacts {
    use warden_audit::event;
    let has_writes = !policy.write.is_empty();
    event::SandboxFacts {
        backend: backend.backend.to_string(),
        backend_requested: backend.requested.to_string(),
        backend_skipped: backend.skipped_facts(),
        namespaces: ["mount", "pid", "net", "ipc", "uts"]
            .map(String::from)
            .to_vec(),
        landlock_abi: None,
        landlock_min_abi: policy.sandbox.landlock_min_abi,
        syscall_audit: "unavailable".into(),
        file_audit: "unavailable".into(),
        create_guard: false,
        host_root: warden_core::paths::current_uid() == 0,
        write_protection: event::WriteProtection {
            mode: if has_writes {
                "best effort"
            } else {
                "no write grants"
            }
            .into(),
            active: vec!["protected names bound read-only (those that exist at start)".into()],
            missing: vec![
                "the creation guard: Docker cannot keep a protected name from being created \
                 in a write grant"
                    .into(),
                "Landlock".into(),
            ],
        },
        best_effort_write_protection: policy.sandbox.best_effort_write_protection,
        docker: Some(event::DockerFacts {
            image: fitted.image.clone(),
            container: container_name(id),
            engine,
            options: OPTIONS.iter().map(|s| s.to_string()).collect(),
            notes: fitted.notes.clone(),
        }),
    }
}

/// Where a Docker engine's socket may be: the system's, the rootless
/// engine's, and `DOCKER_HOST` (the daemon's and the client's), each also
/// as its real path.
fn engine_sockets(client_env: &[pb::EnvVar]) -> Vec<PathBuf> {
    let mut v = vec![
        PathBuf::from("/var/run/docker.sock"),
        PathBuf::from("/run/docker.sock"),
    ];
    let client = |k: &str| {
        crate::session::env_get(client_env, k).map(|b| String::from_utf8_lossy(b).into_owned())
    };
    for rt in [
        client("XDG_RUNTIME_DIR"),
        std::env::var("XDG_RUNTIME_DIR").ok(),
    ]
    .into_iter()
    .flatten()
    {
        v.push(Path::new(&rt).join("docker.sock"));
    }
    for h in [client("DOCKER_HOST"), std::env::var("DOCKER_HOST").ok()]
        .into_iter()
        .flatten()
    {
        if let Some(p) = h.strip_prefix("unix://").filter(|p| p.starts_with('/')) {
            v.push(PathBuf::from(p));
        }
    }
    let real: Vec<PathBuf> = v
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    v.extend(real);
    v.sort();
    v.dedup();
    v
}

/// One `--mount` value: `type=bind,source=…,target=…[,readonly]`, each
/// field CSV-quoted when it holds a comma or a quote (Docker reads the
/// value as one CSV record).
fn bind_mount(source: &Path, target: &Path, readonly: bool) -> Result<OsString, DaemonError> {
    let field = |k: &str, p: &Path| -> Result<Vec<u8>, DaemonError> {
        let b = p.as_os_str().as_bytes();
        if b.iter().any(|&c| c == b'\n' || c == b'\r' || c == 0) {
            return Err(DaemonError::Policy(format!(
                "the Docker backend cannot mount {}: the path holds a line break",
                p.display()
            )));
        }
        let mut f = format!("{k}=").into_bytes();
        f.extend_from_slice(b);
        if f.iter().any(|&c| c == b',' || c == b'"') {
            let mut q = vec![b'"'];
            for &c in &f {
                if c == b'"' {
                    q.push(b'"');
                }
                q.push(c);
            }
            q.push(b'"');
            f = q;
        }
        Ok(f)
    };
    let mut v = b"type=bind,".to_vec();
    v.extend(field("source", source)?);
    v.push(b',');
    v.extend(field("target", target)?);
    if readonly {
        v.extend_from_slice(b",readonly");
    }
    Ok(std::os::unix::ffi::OsStringExt::from_vec(v))
}

/// The `--env-file` text: `NAME=VALUE` lines. Docker reads it line by line
/// as UTF-8, so a value with a line break or invalid UTF-8 cannot be
/// carried: refused naming the variable (never its value).
pub fn env_file(env: &[(Vec<u8>, Vec<u8>)]) -> Result<Vec<u8>, DaemonError> {
    let mut out = Vec::new();
    for (k, v) in env {
        let name = String::from_utf8_lossy(k);
        if v.iter().any(|&c| c == b'\n' || c == b'\r') || std::str::from_utf8(v).is_err() {
            return Err(DaemonError::Policy(format!(
                "the Docker backend cannot pass the environment variable {name}: its value \
                 holds a line break or is not UTF-8 (Docker's env file cannot carry it)"
            )));
        }
        if v.len() > 60 * 1024 {
            return Err(DaemonError::Policy(format!(
                "the Docker backend cannot pass the environment variable {name}: its value \
                 is longer than 60 KiB"
            )));
        }
        out.extend_from_slice(k);
        out.push(b'=');
        out.extend_from_slice(v);
        out.push(b'\n');
    }
    Ok(out)
}

/// Where the session's own files live on the host (the daemon's, 0700).
pub struct Paths {
    /// The egress bridge and its Unix socket; `None` without a bridge
    /// (off Linux): then the program is the entrypoint, with no network.
    pub bridge: Option<(PathBuf, PathBuf)>,
    /// Warden's seccomp profile ([`install_seccomp_profile`]).
    pub seccomp: PathBuf,
    pub env_file: PathBuf,
}

/// The arguments of `docker create` for a session (after `create`).
pub fn create_args(
    id: &str,
    instance: &str,
    spec: &SandboxSpec,
    policy: &CompiledPolicy,
    image: &str,
    paths: &Paths,
    proxy_port: u16,
) -> Result<Vec<OsString>, DaemonError> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |s: &str| a.push(s.into());
    for s in [
        "--interactive",
        "--init",
        "--name",
        &container_name(id),
        "--label",
        &format!("{LABEL_SESSION}={id}"),
        "--label",
        &format!("{LABEL_DAEMON}={instance}"),
        "--network",
        "none",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--read-only",
        "--user",
        &format!("{}:{}", spec.uid, spec.gid),
        "--pull",
        "never",
        "--log-driver",
        "none",
        "--tmpfs",
        &format!("/tmp:rw,nosuid,nodev,size={}m,mode=1777", spec.tmp_size_mb),
    ] {
        push(s);
    }
    let grants: Vec<&PathBuf> = spec.write.iter().chain(&spec.read).collect();
    if !grants.iter().any(|g| spec.home.starts_with(g)) {
        let home = spec
            .home
            .to_str()
            .filter(|h| !h.contains([':', ',']))
            .ok_or_else(|| {
                DaemonError::Policy(format!(
                "the Docker backend cannot make a private home at {}: the path holds `:` or `,` \
                 or is not UTF-8",
                spec.home.display()
            ))
            })?;
        push("--tmpfs");
        push(&format!(
            "{home}:rw,nosuid,nodev,size={}m,mode=0700,uid={},gid={}",
            spec.tmp_size_mb, spec.uid, spec.gid
        ));
    }
    if let Some(mb) = policy.limits.memory_mb {
        push("--memory");
        push(&format!("{mb}m"));
        push("--memory-swap");
        push(&format!("{mb}m"));
    }
    if let Some(n) = policy.limits.pids {
        push("--pids-limit");
        push(&n.to_string());
    }
    if let Some(c) = policy.limits.cpu {
        push("--cpus");
        push(&format!("{c}"));
    }
    // The native sandbox's seccomp deny list, instead of Docker's default
    // profile (which lets `chmod u+s` plant setuid files in write grants).
    // The CLI reads the file and sends its content to the engine.
    let mut seccomp = OsString::from("seccomp=");
    seccomp.push(&paths.seccomp);
    a.push("--security-opt".into());
    a.push(seccomp);
    a.push("--env-file".into());
    a.push(paths.env_file.clone().into_os_string());
    a.push("--workdir".into());
    a.push(spec.cwd.clone().into_os_string());
    let mut mount = |src: &Path, dst: &Path, ro: bool| -> Result<(), DaemonError> {
        a.push("--mount".into());
        a.push(bind_mount(src, dst, ro)?);
        Ok(())
    };
    for w in &spec.write {
        mount(w, w, false)?;
    }
    for r in spec.read.iter().filter(|r| !spec.write.contains(r)) {
        mount(r, r, true)?;
    }
    // Inside write grants: the directories leading to protected names stay
    // where they are (a mount point cannot be renamed), and the protected
    // names that exist now are read-only.
    let plan = warden_sandbox::protected::plan(spec);
    for p in &plan.pin {
        if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
            mount(p, p, false)?;
        }
    }
    for p in protected_now(spec) {
        mount(&p, &p, true)?;
    }
    // The program, when no grant shows it, is the image's own (found on
    // the container's PATH by the bridge).
    let program: OsString = if grants.iter().any(|g| spec.program.starts_with(g)) {
        spec.program.clone().into_os_string()
    } else {
        policy
            .argv
            .first()
            .map(OsString::from)
            .unwrap_or_else(|| spec.program.clone().into_os_string())
    };
    match &paths.bridge {
        Some((bridge, egress)) => {
            mount(bridge, Path::new(BRIDGE_IN), true)?;
            mount(egress, Path::new(EGRESS_IN), false)?;
            a.push("--entrypoint".into());
            a.push(BRIDGE_IN.into());
            a.push(image.into());
            a.push(EGRESS_IN.into());
            a.push(proxy_port.to_string().into());
            a.push("--".into());
            a.push(program);
        }
        None => {
            a.push("--entrypoint".into());
            a.push(program);
            a.push(image.into());
        }
    }
    for arg in spec.argv.iter().skip(1) {
        a.push(std::os::unix::ffi::OsStringExt::from_vec(arg.clone()));
    }
    Ok(a)
}

/// Writes Warden's seccomp profile
/// ([`warden_sandbox::docker_seccomp::docker_profile`]: the native sandbox's
/// deny list) to `dir/seccomp-<16 hex of its sha256>.json`, mode 0644, as
/// the bridge is installed, and returns its path.
pub fn install_seccomp_profile(dir: &Path) -> std::io::Result<PathBuf> {
    use sha2::Digest;
    let json = warden_sandbox::docker_seccomp::docker_profile().to_string();
    let hash = hex::encode(sha2::Sha256::digest(json.as_bytes()));
    let name = format!("seccomp-{}.json", &hash[..16]);
    super::bridge::install_file(dir, &name, json.as_bytes(), 0o644)
}

/// The protected paths inside write grants that exist now as files or
/// directories (a symlink cannot be bound over itself; those are among
/// what the Docker backend cannot protect), and Warden's own paths.
pub fn protected_now(spec: &SandboxSpec) -> Vec<PathBuf> {
    super::protected_now(spec, |m, unless_dir| {
        !(m.file_type().is_symlink() || (m.is_dir() && unless_dir))
    })
}

/// Starts session `id` in a container. The image must exist; the limits
/// the engine accepted are checked against the policy's (Docker drops one
/// its kernel lacks with only a warning: refused here instead).
#[allow(clippy::too_many_arguments)]
pub async fn spawn(
    engine: &Engine,
    state_dir: &Path,
    id: &str,
    spec: &SandboxSpec,
    policy: &CompiledPolicy,
    fitted: &Fitted,
    stdio: [OwnedFd; 3],
    watch: crate::stdio::Watch,
) -> Result<Launched, DaemonError> {
    let cli = engine.cli().map_err(DaemonError::Docker)?.to_path_buf();
    let image = policy.docker_image.clone().ok_or_else(|| {
        DaemonError::Docker("no image (internal: the policy was not fitted)".into())
    })?;
    let port = spec.proxy_port.unwrap_or(crate::egress::PROXY_PORT);
    run(
        &cli,
        &["image", "inspect", "--format", "{{.Id}}", &image],
        CLI_TIMEOUT,
    )
    .await
    .map_err(|e| {
        DaemonError::Docker(format!(
            "the image `{image}` is not present in the Docker engine ({e}); Warden never \
                 pulls: `docker pull {image}`, or build or import it first"
        ))
    })?;
    let root = state_dir.join("docker");
    let dir = root.join(id);
    let io = |what: &str, e: std::io::Error| DaemonError::Docker(format!("{what}: {e}"));
    let bridge = if fitted.bridge {
        Some(super::bridge::install(&root).map_err(|e| io("cannot install the egress bridge", e))?)
    } else {
        None
    };
    let seccomp =
        install_seccomp_profile(&root).map_err(|e| io("cannot install the seccomp profile", e))?;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&dir)
        .map_err(|e| io(&format!("cannot create {}", dir.display()), e))?;
    let session = SessionDir(dir.clone());
    let paths = Paths {
        bridge: bridge.map(|b| (b, dir.join("egress.sock"))),
        seccomp,
        env_file: dir.join("env"),
    };
    let listener = match &paths.bridge {
        Some((_, egress)) => Some(
            super::bridge::listen(egress)
                .map_err(|e| io("cannot listen for the egress bridge", e))?,
        ),
        None => None,
    };
    write_private(&paths.env_file, &env_file(&spec.env)?)
        .map_err(|e| io("cannot write the environment file", e))?;
    let args = create_args(id, &engine.instance, spec, policy, &image, &paths, port)?;
    let name = container_name(id);
    let created = run_with(&cli, &["create"], CLI_TIMEOUT, &args).await;
    // The values are in the engine's container config now; not on disk here.
    let _ = std::fs::remove_file(&paths.env_file);
    let container = Container {
        cli: cli.clone(),
        name: name.clone(),
        child: Mutex::new(None),
        pid: std::sync::atomic::AtomicU32::new(0),
        oom: AtomicBool::new(false),
        dir: Mutex::new(Some(session)),
    };
    if let Err(e) = created {
        container.remove().await;
        return Err(DaemonError::Docker(format!(
            "cannot create the container: {e}"
        )));
    }
    if let Err(e) = check_limits(&cli, &name, policy).await {
        container.remove().await;
        return Err(e);
    }
    let (in_r, in_w) = pipe().map_err(DaemonError::StdioPipes)?;
    let (out_r, out_w) = pipe().map_err(DaemonError::StdioPipes)?;
    let (err_r, err_w) = pipe().map_err(DaemonError::StdioPipes)?;
    let child = tokio::process::Command::new(&cli)
        .args(["start", "--attach", "--interactive", &name])
        .stdin(Stdio::from(in_r))
        .stdout(Stdio::from(out_w))
        .stderr(Stdio::from(err_w))
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            container.remove().await;
            return Err(DaemonError::Docker(format!(
                "cannot run {}: {e}",
                cli.display()
            )));
        }
    };
    // Our copies of the CLI's ends are closed (moved into the child's
    // Stdio), so EOF travels both ways.
    *container.child.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
    let container = Arc::new(container);
    let relay = match Relay::start_watched(stdio, [in_w, out_r, err_r], watch) {
        Ok(r) => r,
        Err(e) => {
            container.kill_tree().ok();
            let _ = container.clone().wait().await;
            return Err(DaemonError::StdioPipes(e));
        }
    };
    let fail = |e: DaemonError, relay: Relay, c: Arc<Container>| async move {
        let _ = c.kill_tree();
        let _ = c.clone().wait().await;
        let _ = tokio::task::spawn_blocking(move || relay.finish(Duration::from_secs(2))).await;
        Err(e)
    };
    let egress = match listener {
        Some(listener) => match receive(listener, port, &container).await {
            Ok(fd) => Some(fd),
            Err(e) => return fail(DaemonError::Docker(e), relay, container).await,
        },
        None => None,
    };
    // The host pid of the container's init, for `wardenctl ps` (0 when the
    // engine's processes are not visible here, e.g. in a VM).
    if let Ok(out) = run(
        &cli,
        &["inspect", "--format", "{{.State.Pid}}", &name],
        CLI_TIMEOUT,
    )
    .await
    {
        let pid: u32 = out.trim().parse().unwrap_or(0);
        let visible = pid != 0 && Path::new(&format!("/proc/{pid}")).exists();
        container
            .pid
            .store(if visible { pid } else { 0 }, Ordering::Relaxed);
    }
    Ok(Launched {
        process: container,
        relay,
        egress,
        #[cfg(target_os = "linux")]
        native: None,
    })
}

/// Waits for the bridge's hand-over, or for the container to end first.
async fn receive(
    listener: std::os::unix::net::UnixListener,
    port: u16,
    container: &Arc<Container>,
) -> Result<OwnedFd, String> {
    let handoff = tokio::task::spawn_blocking(move || {
        super::bridge::receive(&listener, Some(port), HANDOFF_TIMEOUT)
    });
    tokio::pin!(handoff);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            r = &mut handoff => {
                return r.map_err(|e| e.to_string()).and_then(|r| r);
            }
            _ = tick.tick() => {
                if let Some(status) = container.exited_early() {
                    return Err(format!(
                        "the container ended ({status}) before the egress bridge handed over \
                         its listener (the docker error, if any, is on the server's stderr)"
                    ));
                }
            }
        }
    }
}

/// Docker accepts a limit its kernel cannot apply with only a warning, and
/// runs without it: compare what the engine recorded with the policy.
async fn check_limits(cli: &Path, name: &str, policy: &CompiledPolicy) -> Result<(), DaemonError> {
    let out = run(
        cli,
        &[
            "inspect",
            "--format",
            "{{.HostConfig.Memory}} {{.HostConfig.MemorySwap}} {{.HostConfig.PidsLimit}} {{.HostConfig.NanoCpus}}",
            name,
        ],
        CLI_TIMEOUT,
    )
    .await
    .map_err(DaemonError::Docker)?;
    let got: Vec<i64> = out
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let got = |i: usize| got.get(i).copied().unwrap_or(0);
    let mut lost = Vec::new();
    if let Some(mb) = policy.limits.memory_mb {
        let want = (mb as i64) << 20;
        if got(0) != want || got(1) != want {
            lost.push(format!("limits.memory_mb ({mb})"));
        }
    }
    if let Some(n) = policy.limits.pids {
        if got(2) != n as i64 {
            lost.push(format!("limits.pids ({n})"));
        }
    }
    if let Some(c) = policy.limits.cpu {
        if got(3) != (c * 1e9).round() as i64 {
            lost.push(format!("limits.cpu ({c})"));
        }
    }
    if lost.is_empty() || policy.limits.best_effort {
        return Ok(());
    }
    Err(DaemonError::Policy(format!(
        "the Docker engine dropped {} (its kernel or cgroup setup cannot apply them; `docker \
         info` warns which); set limits.best_effort: true to run without them",
        lost.join(", ")
    )))
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

use std::os::unix::fs::DirBuilderExt;

/// The session's directory under the daemon's state (egress socket, env
/// file), removed with the session.
struct SessionDir(PathBuf);

impl Drop for SessionDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A session's container, as a [`Process`].
pub struct Container {
    cli: PathBuf,
    pub name: String,
    /// `docker start --attach --interactive`: the server's stdio.
    child: Mutex<Option<tokio::process::Child>>,
    pid: std::sync::atomic::AtomicU32,
    oom: AtomicBool,
    dir: Mutex<Option<SessionDir>>,
}

impl Container {
    /// The attach's exit status, if it has ended.
    fn exited_early(&self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.lock().unwrap_or_else(|p| p.into_inner());
        c.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// `docker rm -f`, and the session's directory.
    async fn remove(&self) {
        if let Err(e) = run(&self.cli, &["rm", "-f", &self.name], CLI_TIMEOUT).await {
            if !e.contains("No such container") {
                tracing::warn!(container = %self.name, error = %e, "cannot remove the container");
            }
        }
        self.dir.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl Process for Container {
    fn pid(&self) -> u32 {
        self.pid.load(Ordering::Relaxed)
    }

    fn signal(&self, sig: i32) -> Result<(), DaemonError> {
        kill_detached(&self.cli, &self.name, &sig.to_string());
        Ok(())
    }

    fn terminate_tree(&self) -> Result<(), DaemonError> {
        kill_detached(&self.cli, &self.name, "TERM");
        Ok(())
    }

    fn kill_tree(&self) -> Result<(), DaemonError> {
        kill_detached(&self.cli, &self.name, "KILL");
        Ok(())
    }

    /// The attach ends when the container does (or when the CLI dies);
    /// then the container's state says how the server ended, and the
    /// container is removed whatever it says.
    fn wait(self: Arc<Self>) -> Pin<Box<dyn Future<Output = Result<ExitOutcome, String>> + Send>> {
        Box::pin(async move {
            let child = self.child.lock().unwrap_or_else(|p| p.into_inner()).take();
            let attach = match child {
                Some(mut c) => c.wait().await.ok(),
                None => None,
            };
            let state = run(
                &self.cli,
                &[
                    "inspect",
                    "--format",
                    "{{.State.Running}} {{.State.ExitCode}} {{.State.OOMKilled}}",
                    &self.name,
                ],
                CLI_TIMEOUT,
            )
            .await;
            let outcome = match state.as_deref().map(str::split_whitespace) {
                Ok(mut f) => match (f.next(), f.next(), f.next()) {
                    (Some("false"), Some(code), Some(oom)) => {
                        self.oom.store(oom == "true", Ordering::Relaxed);
                        code.parse::<i32>()
                            .map(ExitOutcome::Code)
                            .map_err(|_| format!("docker reported exit code `{code}`"))
                    }
                    _ => Err(format!(
                        "the docker attach ended ({}) while the container was still running",
                        attach.map_or("unknown status".into(), |s| s.to_string())
                    )),
                },
                Err(e) => match attach.and_then(|s| s.code()) {
                    Some(c) => Ok(ExitOutcome::Code(c)),
                    None => Err(e.clone()),
                },
            };
            self.remove().await;
            outcome
        })
    }

    fn memory_killed(&self) -> bool {
        self.oom.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_quote_what_docker_would_split() {
        let m = bind_mount(Path::new("/a,b/c\"d"), Path::new("/t"), true).unwrap();
        assert_eq!(
            m.to_str().unwrap(),
            r#"type=bind,"source=/a,b/c""d",target=/t,readonly"#
        );
        let m = bind_mount(Path::new("/plain dir"), Path::new("/plain dir"), false).unwrap();
        assert_eq!(
            m.to_str().unwrap(),
            "type=bind,source=/plain dir,target=/plain dir"
        );
        assert!(bind_mount(Path::new("/a\nb"), Path::new("/t"), false).is_err());
    }

    #[test]
    fn the_env_file_carries_values_or_refuses_naming_the_variable() {
        let ok = env_file(&[
            (b"A".to_vec(), b"x = y # z".to_vec()),
            (b"B".to_vec(), vec![]),
        ])
        .unwrap();
        assert_eq!(ok, b"A=x = y # z\nB=\n");
        for bad in [b"a\nB=evil".to_vec(), vec![0xff, 0xfe]] {
            let e = env_file(&[(b"SECRET".to_vec(), bad)])
                .unwrap_err()
                .to_string();
            assert!(e.contains("SECRET") && !e.contains("evil"), "{e}");
        }
    }

    #[test]
    fn no_grant_may_hold_the_engines_socket() {
        let env = [pb::EnvVar {
            name: b"DOCKER_HOST".to_vec(),
            value: b"unix:///srv/engine/docker.sock".to_vec(),
        }];
        let socks = engine_sockets(&env);
        assert!(
            socks.contains(&PathBuf::from("/srv/engine/docker.sock")),
            "{socks:?}"
        );
        assert!(
            socks.contains(&PathBuf::from("/var/run/docker.sock")),
            "{socks:?}"
        );
        let mut p = policy_with_grant("/srv");
        let e = fit(&mut p, &env, false, false).unwrap_err().to_string();
        assert!(
            e.contains("holds the Docker engine's socket /srv/engine/docker.sock"),
            "{e}"
        );
        let mut p = policy_with_grant("/srv/other");
        p.docker_image = Some("img:1".into());
        fit(&mut p, &env, false, false).unwrap();
    }

    fn policy_with_grant(g: &str) -> CompiledPolicy {
        CompiledPolicy {
            version: 1,
            name: None,
            source: None,
            digest: String::new(),
            argv: vec!["server".into()],
            program: "/bin/server".into(),
            cwd: "/tmp".into(),
            read: vec![PathBuf::from(g)],
            write: vec![],
            allow_git_init: false,
            env_allow: vec![],
            network: Default::default(),
            limits: Default::default(),
            sandbox: Default::default(),
            audit: Default::default(),
            exposed: vec![],
            warnings: vec![],
            approve: false,
            backend: policy::Backend::Docker,
            docker_image: None,
            mcp: Default::default(),
        }
    }

    #[test]
    fn what_docker_cannot_enforce_is_refused_and_what_it_only_records_is_noted() {
        let mut p = policy_with_grant("/srv/data");
        p.docker_image = Some("img:1".into());
        p.approve = true;
        assert!(fit(&mut p.clone(), &[], false, false)
            .unwrap_err()
            .to_string()
            .contains("approve"));
        p.approve = false;
        // The client's --approve as well as the policy's.
        assert!(fit(&mut p.clone(), &[], false, true)
            .unwrap_err()
            .to_string()
            .contains("--approve"));
        assert!(fit(&mut p.clone(), &[], true, false)
            .unwrap_err()
            .to_string()
            .contains("trace"));
        let mut t = p.clone();
        t.network.mode = policy::net::NetMode::Transparent;
        assert!(fit(&mut t, &[], false, false)
            .unwrap_err()
            .to_string()
            .contains("transparent"));
        let mut w = p.clone();
        w.write = vec![PathBuf::from("/srv/out")];
        let e = fit(&mut w, &[], false, false).unwrap_err().to_string();
        assert!(e.contains("best_effort_write_protection"), "{e}");
        w.sandbox.best_effort_write_protection = true;
        fit(&mut w, &[], false, false).unwrap();
        let mut f = p.clone();
        f.audit.files = policy::FileAudit::All;
        f.audit.files_explicit = true;
        assert!(fit(&mut f, &[], false, false)
            .unwrap_err()
            .to_string()
            .contains("audit.files"));
        // The defaults: both becomes proxy, file records off, pids bounded.
        let mut d = p.clone();
        let fitted = fit(&mut d, &[], false, false).unwrap();
        assert_eq!(d.network.mode, policy::net::NetMode::Proxy);
        assert_eq!(d.audit.files, policy::FileAudit::Off);
        assert_eq!(d.limits.pids, Some(crate::session::DEFAULT_PIDS));
        assert_eq!(fitted.image, "img:1");
        assert_eq!(fitted.notes.len(), 2, "{:?}", fitted.notes);
    }

    fn spec(root: &Path) -> SandboxSpec {
        SandboxSpec {
            session_id: "abc123".into(),
            program: root.join("ro/server"),
            argv: vec![b"server".to_vec(), b"--flag".to_vec(), b"a b".to_vec()],
            env: vec![(b"TOKEN".to_vec(), b"s3cret-value".to_vec())],
            cwd: root.join("rw"),
            read: vec![root.join("ro")],
            write: vec![root.join("rw")],
            home: "/home/u".into(),
            uid: 1000,
            gid: 1001,
            user: "u".into(),
            tmp_size_mb: 64,
            pids_max: Some(100),
            landlock_min_abi: 0,
            proxy_port: Some(3128),
            resolver: false,
            cgroup: None,
            audit_files: warden_sandbox::spec::FileWatch::Off,
            hold_files: false,
            warden_paths: vec![],
            hide: vec![],
            allow_git_init: false,
            dangerously_skip_confinement: false,
            layers: warden_sandbox::spec::Layers::NONE,
        }
    }

    /// The protected paths that exist are found as by looking at every one,
    /// though those under a missing directory are skipped.
    #[test]
    fn protected_now_finds_what_a_look_at_every_path_finds() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let spec = spec(&root);
        let every = |spec: &SandboxSpec| -> Vec<PathBuf> {
            let plan = warden_sandbox::protected::plan(spec);
            plan.protect
                .iter()
                .filter(|p| std::fs::symlink_metadata(p).is_ok())
                .cloned()
                .collect()
        };
        let all = |spec: &SandboxSpec| super::super::protected_now(spec, |_, _| true);
        std::fs::create_dir_all(root.join("rw")).unwrap();
        assert_eq!(all(&spec), every(&spec));
        assert!(all(&spec).is_empty());
        std::fs::create_dir_all(root.join("rw/.git/hooks")).unwrap();
        std::fs::write(root.join("rw/.git/config"), "").unwrap();
        std::fs::write(root.join("rw/.mcp.json"), "{}").unwrap();
        std::fs::write(root.join("rw/.envrc"), "").unwrap();
        assert_eq!(all(&spec), every(&spec));
        assert!(
            all(&spec).contains(&root.join("rw/.git/config")),
            "{:?}",
            all(&spec)
        );
        assert!(
            all(&spec).contains(&root.join("rw/.mcp.json")),
            "{:?}",
            all(&spec)
        );
    }

    #[test]
    fn the_container_gets_every_restriction_and_no_secret_on_its_command_line() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("ro")).unwrap();
        std::fs::create_dir_all(root.join("rw/.git/hooks")).unwrap();
        std::fs::write(root.join("rw/.mcp.json"), "{}").unwrap();
        let spec = spec(&root);
        let mut p = policy_with_grant(root.join("ro").to_str().unwrap());
        p.write = vec![root.join("rw")];
        p.limits.memory_mb = Some(64);
        p.limits.pids = Some(100);
        p.limits.cpu = Some(0.5);
        let paths = Paths {
            bridge: Some((root.join("bridge"), root.join("egress.sock"))),
            seccomp: root.join("seccomp-0123.json"),
            env_file: root.join("env"),
        };
        let a = create_args("abc123", "1000-x", &spec, &p, "img:1", &paths, 3128).unwrap();
        let a: Vec<String> = a.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        let joined = a.join(" ");
        for want in [
            "--interactive --init --name warden-abc123",
            "--label warden.session=abc123 --label warden.daemon=1000-x",
            "--network none --cap-drop ALL --security-opt no-new-privileges --read-only",
            "--user 1000:1001 --pull never --log-driver none",
            &format!(
                "--security-opt seccomp={}/seccomp-0123.json --env-file",
                root.display()
            ),
            "--tmpfs /tmp:rw,nosuid,nodev,size=64m,mode=1777",
            "--tmpfs /home/u:rw,nosuid,nodev,size=64m,mode=0700,uid=1000,gid=1001",
            "--memory 64m --memory-swap 64m --pids-limit 100 --cpus 0.5",
        ] {
            assert!(joined.contains(want), "`{want}` not in {joined}");
        }
        let r = root.display();
        for m in [
            format!("type=bind,source={r}/rw,target={r}/rw"),
            format!("type=bind,source={r}/ro,target={r}/ro,readonly"),
            format!("type=bind,source={r}/rw/.mcp.json,target={r}/rw/.mcp.json,readonly"),
            format!("type=bind,source={r}/rw/.git/hooks,target={r}/rw/.git/hooks,readonly"),
            format!("type=bind,source={r}/bridge,target=/.warden/bridge,readonly"),
            format!("type=bind,source={r}/egress.sock,target=/.warden/egress.sock"),
        ] {
            assert!(a.contains(&m), "no --mount {m} in {a:?}");
        }
        // The entrypoint, then the image, then the bridge's own arguments and
        // the server's argv, each one argument.
        let at = a.iter().position(|x| x == "--entrypoint").unwrap();
        assert_eq!(
            a[at..],
            [
                "--entrypoint",
                "/.warden/bridge",
                "img:1",
                "/.warden/egress.sock",
                "3128",
                "--",
                &format!("{r}/ro/server"),
                "--flag",
                "a b"
            ]
        );
        // Values travel in the env file only.
        assert!(!joined.contains("s3cret"), "{joined}");
        assert!(joined.contains(&format!("--env-file {r}/env")), "{joined}");
        // A program no grant shows is the image's, by its name.
        let mut spec2 = spec.clone();
        spec2.program = "/usr/bin/python3".into();
        let mut p2 = p.clone();
        p2.argv = vec!["python3".into(), "-m".into(), "srv".into()];
        spec2.argv = vec![b"python3".to_vec(), b"-m".to_vec(), b"srv".to_vec()];
        let a = create_args("abc123", "1000-x", &spec2, &p2, "img:1", &paths, 3128).unwrap();
        let tail: Vec<String> = a[a.len() - 3..]
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        assert_eq!(tail, ["python3", "-m", "srv"]);
        // Without a bridge (off Linux): the program is the entrypoint, no
        // bridge or socket is mounted, and the container has no network.
        let none = Paths {
            bridge: None,
            ..paths
        };
        let a = create_args("abc123", "1000-x", &spec, &p, "img:1", &none, 3128).unwrap();
        let a: Vec<String> = a.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        assert!(a.join(" ").contains("--network none"), "{a:?}");
        assert!(!a.iter().any(|x| x.contains("/.warden/")), "{a:?}");
        let at = a.iter().position(|x| x == "--entrypoint").unwrap();
        assert_eq!(
            a[at..],
            [
                "--entrypoint",
                &format!("{r}/ro/server"),
                "img:1",
                "--flag",
                "a b"
            ]
        );
    }

    #[test]
    fn without_the_bridge_a_policy_allowing_hosts_is_refused_and_none_runs_offline() {
        let mut p = policy_with_grant("/srv/data");
        p.docker_image = Some("img:1".into());
        p.network = warden_core::policy::net::NetworkPolicy::default();
        let f = fit_with(&mut p.clone(), &[], false, false, false).unwrap();
        assert!(!f.bridge);
        assert!(
            f.notes.iter().any(|n| n.contains("--network none")),
            "{:?}",
            f.notes
        );
        let mut hosts = p.clone();
        hosts.network = warden_core::policy::net::NetworkPolicy::record_all();
        assert!(!hosts.network.allow.is_empty());
        let e = fit_with(&mut hosts, &[], false, false, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot enforce network.allow"), "{e}");
        assert!(e.contains("bridge"), "{e}");
        // With the bridge (Linux), the same policy runs through the proxy.
        assert!(
            fit_with(&mut hosts, &[], false, false, true)
                .unwrap()
                .bridge
        );
    }

    #[test]
    fn the_seccomp_profile_is_written_once_by_its_hash_world_readable() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("docker");
        let a = install_seccomp_profile(&dir).unwrap();
        assert_eq!(a.parent(), Some(dir.as_path()));
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("seccomp-") && name.ends_with(".json"),
            "{name}"
        );
        let m = std::fs::metadata(&a).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o644);
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&a).unwrap()).unwrap();
        assert_eq!(v["defaultAction"], "SCMP_ACT_ALLOW");
        assert!(v["syscalls"].as_array().unwrap().iter().any(|s| s["names"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "fchmodat")));
        // Reused as it is; a changed file is replaced.
        assert_eq!(install_seccomp_profile(&dir).unwrap(), a);
        std::fs::write(&a, "{}").unwrap();
        assert_eq!(install_seccomp_profile(&dir).unwrap(), a);
        assert_ne!(std::fs::read(&a).unwrap(), b"{}");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    }

    #[test]
    fn instance_labels_differ_by_socket_and_user() {
        let a = instance_label(Path::new("/run/user/1000/warden/wardend.sock"), 1000);
        let b = instance_label(Path::new("/tmp/other.sock"), 1000);
        assert_ne!(a, b);
        assert!(a.starts_with("1000-") && a.len() == 5 + 16, "{a}");
        assert_ne!(
            a,
            instance_label(Path::new("/run/user/1000/warden/wardend.sock"), 1001)
        );
    }
}
