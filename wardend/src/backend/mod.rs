//! Sandbox backends: which one runs a session (`backend:` in the policy,
//! `warden-shim --backend`), and why the others were not taken.
//!
//! `auto` tries this platform's order ([`order`]): Linux native → Docker on
//! Linux, Seatbelt → Docker on macOS, Docker elsewhere, and refuses when
//! none is available: there is never a plain, unsandboxed process. It moves
//! on only when a backend is *unavailable* here (no user namespaces, no
//! reachable Docker daemon); a backend that is available but cannot enforce
//! something the policy asks for refuses the session for that reason
//! (`session/plan.rs::fit`), it is never silently swapped for another.
//! A backend asked for by name is that backend or a refusal naming why.
//!
//! What exists in this build: the native Linux sandbox (`native`, built on
//! Linux only), Docker ([`docker`], available when an engine answers) and
//! macOS Seatbelt ([`seatbelt`]: the profile generator and what the
//! backend refuses, pure and tested everywhere; the launcher,
//! `seatbelt/launch.rs`, built on macOS only); all run behind one
//! interface, [`Process`] and [`Launched`]. Elsewhere (FreeBSD, Windows...)
//! only Docker can run a session, and without one `auto` refuses naming the
//! platform and every backend. [`bridge`] is the Docker backend's egress
//! bridge: the container entrypoint that hands the daemon a listener made
//! inside the container, and the daemon's side of it.

pub mod bridge;
pub mod docker;
#[cfg(target_os = "linux")]
pub mod native;
pub mod seatbelt;

use std::future::Future;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use warden_core::policy::Backend;

use crate::error::DaemonError;
use crate::stdio::Relay;

/// How a session's server ended, whichever backend ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitOutcome {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

/// A running session's process tree, whichever backend runs it. The
/// session (`session.rs`) drives every backend through this alone: it
/// signals, ends and waits; what ending means (a pid namespace's PID 1, a
/// container) is the backend's.
pub trait Process: Send + Sync {
    /// The host pid of the tree's root, for sampling (`wardenctl ps`'s
    /// memory and CPU); 0 when its processes are not visible from here.
    fn pid(&self) -> u32;
    /// Forwards `sig` to the server. A no-op once it has exited.
    fn signal(&self, sig: i32) -> Result<(), DaemonError>;
    /// SIGTERM to the whole tree. A no-op once it has exited.
    fn terminate_tree(&self) -> Result<(), DaemonError>;
    /// SIGKILL to the whole tree; nothing of it survives. A no-op once it
    /// has exited.
    fn kill_tree(&self) -> Result<(), DaemonError>;
    /// Resolves once the whole tree is gone (and whatever the backend made
    /// for it is removed), with how the server ended.
    fn wait(self: Arc<Self>) -> Pin<Box<dyn Future<Output = Result<ExitOutcome, String>> + Send>>;
    /// After [`Process::wait`]: whether the backend's own memory limit
    /// killed it (Docker's `OOMKilled`); the native sandbox's cgroup and
    /// sampling are the session's.
    fn memory_killed(&self) -> bool {
        false
    }
}

/// What a backend's spawn hands the session.
pub struct Launched {
    pub process: Arc<dyn Process>,
    /// Between the client's stdio and the server's.
    pub relay: Relay,
    /// The egress attachment, on which the daemon serves the session's
    /// proxy: a TCP listener on `127.0.0.1:PROXY_PORT` in the sandbox's own
    /// network namespace (native, Docker on Linux), or one the daemon bound
    /// on the host's loopback whose port the Seatbelt profile alone may
    /// reach. `None` only where the server has no network at all (Docker
    /// off Linux, for a policy that allows no host: `--network none` and
    /// no proxy).
    pub egress: Option<OwnedFd>,
    /// What only the native sandbox has: its seccomp notifier's queues and
    /// the transparent resolver's socket.
    #[cfg(target_os = "linux")]
    pub native: Option<native::Extras>,
}

/// What a backend made of a policy it can enforce (its `fit`), for the
/// session's start.
pub enum Fitted {
    /// The native Linux sandbox (`session/plan.rs::fit`).
    #[cfg(target_os = "linux")]
    Native,
    Docker(docker::Fitted),
    Seatbelt(seatbelt::Fitted),
}

/// The platform the daemon runs on, for the order `auto` tries. A
/// parameter of [`select`], so every platform's table is tested on any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    Linux,
    Macos,
    /// Any other system, by its `std::env::consts::OS` name (`freebsd`,
    /// `windows`...).
    Other(&'static str),
}

impl Os {
    pub fn this() -> Os {
        if cfg!(target_os = "linux") {
            Os::Linux
        } else if cfg!(target_os = "macos") {
            Os::Macos
        } else {
            Os::Other(std::env::consts::OS)
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Os::Linux => "Linux",
            Os::Macos => "macOS",
            Os::Other(name) => name,
        }
    }
}

/// The backends `auto` tries on `os`, in order.
pub fn order(os: Os) -> &'static [Backend] {
    match os {
        Os::Linux => &[Backend::Linux, Backend::Docker],
        Os::Macos => &[Backend::Macos, Backend::Docker],
        Os::Other(_) => &[Backend::Docker],
    }
}

/// Every concrete backend, for `wardenctl status`: this platform's order,
/// then the rest.
pub fn listed(os: Os) -> Vec<Backend> {
    let mut v = order(os).to_vec();
    for b in [Backend::Linux, Backend::Macos, Backend::Docker] {
        if !v.contains(&b) {
            v.push(b);
        }
    }
    v
}

/// A backend `auto` passed over, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub backend: Backend,
    pub reason: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.backend, self.reason)
    }
}

/// The backend that runs a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub backend: Backend,
    /// What the request or the policy asked for (`auto` by default).
    pub requested: Backend,
    /// The backends tried before it (only with `auto`).
    pub skipped: Vec<Skipped>,
}

impl Choice {
    /// `session.start`'s `sandbox.backend_skipped`.
    pub fn skipped_facts(&self) -> Vec<warden_audit::event::SkippedBackend> {
        self.skipped
            .iter()
            .map(|s| warden_audit::event::SkippedBackend {
                backend: s.backend.to_string(),
                reason: s.reason.clone(),
            })
            .collect()
    }
}

/// Picks the backend for `requested` on `os`; `available` says whether a
/// backend can run a session here now, or why not. The error is the
/// refusal, one line naming each backend considered and why.
pub fn select(
    requested: Backend,
    os: Os,
    available: impl Fn(Backend) -> Result<(), String>,
) -> Result<Choice, String> {
    if !requested.is_auto() {
        return available(requested)
            .map(|()| Choice {
                backend: requested,
                requested,
                skipped: Vec::new(),
            })
            .map_err(|why| format!("backend `{requested}` is not available here: {why}"));
    }
    let mut skipped = Vec::new();
    for &b in order(os) {
        match available(b) {
            Ok(()) => {
                return Ok(Choice {
                    backend: b,
                    requested,
                    skipped,
                })
            }
            Err(reason) => skipped.push(Skipped { backend: b, reason }),
        }
    }
    // Where neither platform backend exists, the refusal says so too: a
    // reader on FreeBSD learns why only Docker was tried.
    let mut reasons: Vec<String> = Vec::new();
    if let Os::Other(_) = os {
        for b in [Backend::Linux, Backend::Macos] {
            if let Some(why) = not_in_this_build(b, os) {
                reasons.push(format!("{b}: {why}"));
            }
        }
    }
    reasons.extend(skipped.iter().map(ToString::to_string));
    Err(format!(
        "no sandbox backend is available on {} (Warden never runs a server unsandboxed): {}",
        os.name(),
        reasons.join("; ")
    ))
}

/// Why a backend cannot exist on `os` at all (this build has no launcher
/// for it there); `None` when it may be available (decided live).
pub fn not_in_this_build(b: Backend, os: Os) -> Option<String> {
    match (b, os) {
        (Backend::Linux, Os::Linux) | (Backend::Auto, _) => None,
        (Backend::Linux, _) => Some(format!(
            "the native sandbox needs Linux (namespaces, seccomp, Landlock); this is {}",
            os.name()
        )),
        (Backend::Macos, Os::Macos) => None,
        (Backend::Macos, _) => Some(format!(
            "Seatbelt (sandbox-exec) exists only on macOS; this is {}",
            os.name()
        )),
        (Backend::Docker, _) => None,
    }
}

impl crate::Daemon {
    /// Whether backend `b` can run a session here now, or why not.
    pub fn backend_available(&self, b: Backend) -> Result<(), String> {
        if let Some(why) = not_in_this_build(b, Os::this()) {
            return Err(why);
        }
        match b {
            #[cfg(target_os = "linux")]
            Backend::Linux => self.native.available(&self.config.sandbox_exe),
            #[cfg(target_os = "macos")]
            Backend::Macos => seatbelt::launch::available(),
            Backend::Docker => self.docker.available().map(|_| ()),
            other => Err(format!("no launcher for `{other}` in this build")),
        }
    }

    /// The backend for a request: `--backend` (the request's), else the
    /// policy's `backend:`.
    pub fn choose_backend(
        &self,
        request: &str,
        policy: Backend,
    ) -> Result<Choice, crate::error::DaemonError> {
        use crate::error::DaemonError;
        let requested = if request.is_empty() {
            policy
        } else {
            Backend::parse(request).ok_or_else(|| {
                DaemonError::BadRequest(format!(
                    "unknown backend `{request}`: use auto, linux, docker or macos"
                ))
            })?
        };
        select(requested, Os::this(), |b| self.backend_available(b)).map_err(DaemonError::Backend)
    }
}

/// What a backend without the native sandbox's seccomp notifier (Docker,
/// Seatbelt) refuses first, the same for both: a trace and approvals, from
/// the policy or the client (`--approve`), both of which live in that
/// notifier. `refuse` words the refusal for the backend.
pub fn refuse_notifier_only(
    policy: &warden_core::policy::CompiledPolicy,
    trace: bool,
    approve: bool,
    refuse: impl Fn(&str) -> crate::error::DaemonError,
) -> Result<(), crate::error::DaemonError> {
    if trace {
        return Err(refuse(
            "a trace: `wardenctl trace` records through the native sandbox's seccomp notifier",
        ));
    }
    // A file open held for a person is the native notifier's: without it
    // held opens would silently never be asked about.
    if policy.approve || approve {
        return Err(refuse(
            "approvals (approve: true, --approve): they hold file opens and connections in \
             the native sandbox's seccomp notifier",
        ));
    }
    Ok(())
}

/// The egress mode and file records of a backend without the native
/// sandbox's notifier: transparent egress is refused (`who`, the container
/// or the server, reaches the network only through the proxy) and `both`
/// runs as `proxy`; file access records are refused when the policy asks
/// for them and turned off when they are only the default. What is turned
/// off is said in `notes` (recorded in `session.start`).
pub fn fit_without_notifier(
    policy: &mut warden_core::policy::CompiledPolicy,
    who: &str,
    refuse: impl Fn(&str) -> crate::error::DaemonError,
    notes: &mut Vec<String>,
) -> Result<(), crate::error::DaemonError> {
    use warden_core::policy::{net::NetMode, FileAudit};
    match policy.network.mode {
        NetMode::Transparent => {
            return Err(refuse(&format!(
                "network.mode: transparent: {who} reaches the network only through the \
                 egress proxy (set network.mode: proxy)"
            )))
        }
        NetMode::Both => {
            policy.network.mode = NetMode::Proxy;
            notes.push(
                "network.mode both runs as proxy: transparent egress needs the native sandbox"
                    .into(),
            );
        }
        NetMode::Proxy => {}
    }
    if policy.audit.files != FileAudit::Off {
        if policy.audit.files_explicit {
            return Err(refuse(
                "audit.files: file access records come from the native sandbox's seccomp \
                 notifier (set audit.files: off)",
            ));
        }
        policy.audit.files = FileAudit::Off;
        notes.push("no file access records: they need the native sandbox".into());
    }
    Ok(())
}

/// The protected paths of `spec`'s write grants that exist now (`lstat`),
/// as `session.start` lists them, those `keep` accepts (given the metadata
/// and whether the row leaves a directory alone). A path under one found
/// missing is not looked at: most rows are inside a `.git` that a grant
/// usually lacks (tens of `lstat` calls per launch otherwise).
pub fn protected_now(
    spec: &warden_sandbox::spec::SandboxSpec,
    keep: impl Fn(&std::fs::Metadata, bool) -> bool,
) -> Vec<PathBuf> {
    let plan = warden_sandbox::protected::plan(spec);
    let mut missing: std::collections::HashSet<&Path> = std::collections::HashSet::new();
    let mut found = Vec::new();
    // Parents come before their children (the plan's order).
    for p in &plan.protect {
        if p.ancestors().skip(1).any(|a| missing.contains(a)) {
            continue;
        }
        match std::fs::symlink_metadata(p) {
            Ok(m) => {
                if keep(&m, plan.unless_dir.contains(p)) {
                    found.push(p.clone());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.insert(p);
            }
            Err(_) => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn only(ok: &'static [Backend]) -> impl Fn(Backend) -> Result<(), String> {
        move |b| {
            if ok.contains(&b) {
                Ok(())
            } else {
                Err(format!("no {b} here"))
            }
        }
    }

    #[test]
    fn auto_takes_the_platforms_own_backend_first() {
        let c = select(
            Backend::Auto,
            Os::Linux,
            only(&[Backend::Linux, Backend::Docker]),
        )
        .unwrap();
        assert_eq!(c.backend, Backend::Linux);
        assert!(c.skipped.is_empty());
        let c = select(
            Backend::Auto,
            Os::Macos,
            only(&[Backend::Macos, Backend::Docker]),
        )
        .unwrap();
        assert_eq!(c.backend, Backend::Macos);
    }

    #[test]
    fn auto_falls_back_to_docker_and_says_why() {
        let c = select(Backend::Auto, Os::Linux, only(&[Backend::Docker])).unwrap();
        assert_eq!(c.backend, Backend::Docker);
        assert_eq!(c.requested, Backend::Auto);
        assert_eq!(
            c.skipped,
            [Skipped {
                backend: Backend::Linux,
                reason: "no linux here".into()
            }]
        );
        let c = select(
            Backend::Auto,
            Os::Other("freebsd"),
            only(&[Backend::Docker]),
        )
        .unwrap();
        assert_eq!(c.backend, Backend::Docker);
        assert!(c.skipped.is_empty());
    }

    #[test]
    fn auto_refuses_when_nothing_is_available_naming_each() {
        let e = select(Backend::Auto, Os::Linux, only(&[])).unwrap_err();
        assert_eq!(
            e,
            "no sandbox backend is available on Linux (Warden never runs a server unsandboxed): \
             linux: no linux here; docker: no docker here"
        );
        // Seatbelt is never tried off macOS, nor the native sandbox off Linux.
        let e = select(
            Backend::Auto,
            Os::Other("freebsd"),
            only(&[Backend::Linux, Backend::Macos]),
        )
        .unwrap_err();
        assert!(e.ends_with("; docker: no docker here"), "{e}");
        assert!(
            !e.contains("no linux here") && !e.contains("no macos here"),
            "{e}"
        );
    }

    #[test]
    fn every_platforms_table() {
        // What `auto` tries, in order, on each platform.
        assert_eq!(order(Os::Linux), [Backend::Linux, Backend::Docker]);
        assert_eq!(order(Os::Macos), [Backend::Macos, Backend::Docker]);
        for name in ["freebsd", "windows", "openbsd"] {
            assert_eq!(order(Os::Other(name)), [Backend::Docker]);
        }
        // Each platform's own backend, when available, wins; Docker is the
        // fallback everywhere; a platform's own is never tried elsewhere.
        const ALL: &[Backend] = &[Backend::Linux, Backend::Macos, Backend::Docker];
        for (os, first) in [
            (Os::Linux, Backend::Linux),
            (Os::Macos, Backend::Macos),
            (Os::Other("freebsd"), Backend::Docker),
        ] {
            let tried = std::cell::RefCell::new(Vec::new());
            let c = select(Backend::Auto, os, |b| {
                tried.borrow_mut().push(b);
                only(ALL)(b)
            })
            .unwrap();
            assert_eq!(c.backend, first, "{os:?}");
            assert_eq!(tried.into_inner(), [first], "{os:?}");
            let c = select(Backend::Auto, os, only(&[Backend::Docker])).unwrap();
            assert_eq!(c.backend, Backend::Docker, "{os:?}");
            assert_eq!(
                c.skipped.iter().map(|s| s.backend).collect::<Vec<_>>(),
                order(os)[..order(os).len() - 1],
                "{os:?}"
            );
        }
        // `listed` (wardenctl status): the platform's order, then the rest.
        assert_eq!(
            listed(Os::Macos),
            [Backend::Macos, Backend::Docker, Backend::Linux]
        );
        assert_eq!(
            listed(Os::Other("freebsd")),
            [Backend::Docker, Backend::Linux, Backend::Macos]
        );
    }

    #[test]
    fn the_refusal_names_the_platform_and_every_backend() {
        // The real reasons, as `backend_available` gives them off the
        // platforms that have a backend of their own.
        let os = Os::Other("freebsd");
        let available = |b: Backend| match not_in_this_build(b, os) {
            Some(why) => Err(why),
            None => Err(
                "the docker command is not installed (no `docker` on wardend's PATH)".to_string(),
            ),
        };
        let e = select(Backend::Auto, os, available).unwrap_err();
        assert_eq!(
            e,
            "no sandbox backend is available on freebsd (Warden never runs a server \
             unsandboxed): linux: the native sandbox needs Linux (namespaces, seccomp, \
             Landlock); this is freebsd; macos: Seatbelt (sandbox-exec) exists only on \
             macOS; this is freebsd; docker: the docker command is not installed (no \
             `docker` on wardend's PATH)"
        );
        // One line: the shim prints it after `warden: `.
        assert!(!e.contains('\n'));
        // On macOS: Seatbelt first, then Docker.
        let e = select(Backend::Auto, Os::Macos, only(&[])).unwrap_err();
        assert_eq!(
            e,
            "no sandbox backend is available on macOS (Warden never runs a server \
             unsandboxed): macos: no macos here; docker: no docker here"
        );
        // A backend the platform does not have, asked for by name.
        for (b, os, want) in [
            (Backend::Linux, Os::Macos, "needs Linux"),
            (Backend::Linux, Os::Other("windows"), "this is windows"),
            (
                Backend::Macos,
                Os::Other("freebsd"),
                "only on macOS; this is freebsd",
            ),
            (Backend::Macos, Os::Linux, "only on macOS; this is Linux"),
        ] {
            let e = select(b, os, |x| not_in_this_build(x, os).map_or(Ok(()), Err)).unwrap_err();
            assert!(
                e.starts_with(&format!("backend `{b}` is not available here: "))
                    && e.contains(want),
                "{e}"
            );
        }
        // Each platform's own backend exists in its build.
        assert_eq!(not_in_this_build(Backend::Macos, Os::Macos), None);
        assert_eq!(not_in_this_build(Backend::Linux, Os::Linux), None);
    }

    #[test]
    fn a_backend_asked_for_by_name_is_that_one_or_a_refusal() {
        let c = select(Backend::Linux, Os::Linux, only(&[Backend::Linux])).unwrap();
        assert_eq!((c.backend, c.requested), (Backend::Linux, Backend::Linux));
        // Never a fallback from a named backend.
        let e = select(
            Backend::Macos,
            Os::Linux,
            only(&[Backend::Linux, Backend::Docker]),
        )
        .unwrap_err();
        assert_eq!(e, "backend `macos` is not available here: no macos here");
    }

    #[test]
    fn this_build_says_what_it_lacks() {
        assert_eq!(not_in_this_build(Backend::Linux, Os::Linux), None);
        assert!(not_in_this_build(Backend::Macos, Os::Linux)
            .unwrap()
            .contains("only on macOS; this is Linux"));
        // Docker is in every build; whether an engine answers is decided live.
        for os in [Os::Linux, Os::Macos, Os::Other("freebsd")] {
            assert_eq!(not_in_this_build(Backend::Docker, os), None);
        }
        assert!(not_in_this_build(Backend::Linux, Os::Macos)
            .unwrap()
            .contains("needs Linux"));
        assert_eq!(
            listed(Os::Linux),
            [Backend::Linux, Backend::Docker, Backend::Macos]
        );
    }
}
