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
//! What exists in this build: the native Linux sandbox ([`native`]) and
//! Docker ([`docker`], available when an engine answers); both run behind
//! one interface, [`Process`] and [`Launched`]. Seatbelt is reported
//! unavailable with that reason, so `auto` on a host without user
//! namespaces or Docker refuses with every reason instead of running
//! anything weaker. [`seatbelt`] is the macOS profile generator, pure and
//! tested on Linux; its launcher is not written yet. [`bridge`] is the Docker
//! backend's egress bridge: the container entrypoint that hands the daemon
//! a listener made inside the container, and the daemon's side of it.

pub mod bridge;
pub mod docker;
pub mod native;
pub mod seatbelt;

use std::future::Future;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;

use warden_core::policy::Backend;
use warden_sandbox::launch::ExitOutcome;

use crate::error::DaemonError;
use crate::stdio::Relay;

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
    /// The egress attachment: a TCP listener on `127.0.0.1:PROXY_PORT` in
    /// the sandbox's own network namespace, on which the daemon serves the
    /// session's proxy. Every backend hands one over or fails.
    pub egress: OwnedFd,
    /// What only the native sandbox has: its seccomp notifier's queues and
    /// the transparent resolver's socket.
    pub native: Option<native::Extras>,
}

/// The platform the daemon runs on, for the order `auto` tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    Linux,
    Macos,
    Other,
}

impl Os {
    pub fn this() -> Os {
        if cfg!(target_os = "linux") {
            Os::Linux
        } else if cfg!(target_os = "macos") {
            Os::Macos
        } else {
            Os::Other
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Os::Linux => "Linux",
            Os::Macos => "macOS",
            Os::Other => std::env::consts::OS,
        }
    }
}

/// The backends `auto` tries on `os`, in order.
pub fn order(os: Os) -> &'static [Backend] {
    match os {
        Os::Linux => &[Backend::Linux, Backend::Docker],
        Os::Macos => &[Backend::Macos, Backend::Docker],
        Os::Other => &[Backend::Docker],
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
    Err(format!(
        "no sandbox backend is available on {} (Warden never runs a server unsandboxed): {}",
        os.name(),
        skipped
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    ))
}

/// Why a backend this build has no launcher for is unavailable on `os`.
pub fn not_in_this_build(b: Backend, os: Os) -> Option<String> {
    match (b, os) {
        (Backend::Linux, Os::Linux) | (Backend::Auto, _) => None,
        (Backend::Linux, _) => Some(format!(
            "the native sandbox needs Linux (namespaces, seccomp, Landlock); this is {}",
            os.name()
        )),
        (Backend::Macos, Os::Macos) => {
            Some("the Seatbelt launcher (sandbox-exec) is not part of this build yet".into())
        }
        (Backend::Macos, _) => Some(format!(
            "Seatbelt (sandbox-exec) exists only on macOS; this is {}",
            os.name()
        )),
        (Backend::Docker, _) => None,
    }
}

/// Whether the native sandbox starts here: the sysctls allow unprivileged
/// user namespaces and a real one is made (`exe` re-executed in the
/// sandbox's snapshot role; AppArmor's restriction or an exhausted
/// `user.max_user_namespaces` show here, not in the sysctls).
pub fn native_trial(kernel: &warden_sandbox::Kernel, exe: &std::path::Path) -> Result<(), String> {
    if let Some(why) = not_in_this_build(Backend::Linux, Os::this()) {
        return Err(why);
    }
    if !kernel.user_namespaces() {
        return Err(format!(
            "unprivileged user namespaces are turned off ({}); `wardenctl doctor` says how \
             to turn them on",
            kernel.userns_settings()
        ));
    }
    warden_sandbox::kernel::userns_trial(exe).map_err(|e| {
        format!("cannot make the sandbox's user namespace ({e}); `wardenctl doctor` says why and what to do")
    })
}

impl crate::Daemon {
    /// Whether backend `b` can run a session here now, or why not.
    pub fn backend_available(&self, b: Backend) -> Result<(), String> {
        if let Some(why) = not_in_this_build(b, Os::this()) {
            return Err(why);
        }
        match b {
            Backend::Linux => {
                let mut native = self.native.lock().unwrap_or_else(|p| p.into_inner());
                if native.is_err() {
                    *native = native_trial(&self.kernel, &self.config.sandbox_exe);
                }
                native.clone()
            }
            Backend::Docker => self.docker.available().map(|_| ()),
            _ => Ok(()),
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
        let c = select(Backend::Auto, Os::Other, only(&[Backend::Docker])).unwrap();
        assert_eq!(c.backend, Backend::Docker);
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
            Os::Other,
            only(&[Backend::Linux, Backend::Macos]),
        )
        .unwrap_err();
        assert!(e.ends_with(": docker: no docker here"), "{e}");
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
        for os in [Os::Linux, Os::Macos, Os::Other] {
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
