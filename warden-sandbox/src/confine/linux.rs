//! Preparing and applying the two layers (see the parent module).

use crate::control::Failure;
use crate::init::Stage;
use crate::spec::SandboxSpec;
use crate::sys;
use ::landlock::{RulesetCreated, RulesetStatus};
use std::os::fd::OwnedFd;

/// What [`apply`](Confinement::apply) installs.
pub(crate) struct Confinement {
    /// The Landlock ruleset (its fd and what the crate asked of it), when the
    /// layers apply Landlock.
    pub landlock: Option<RulesetCreated>,
    /// The compiled seccomp-BPF program, when there is one.
    pub seccomp: Option<Vec<libc::sock_filter>>,
    /// Install the filter with `SECCOMP_FILTER_FLAG_NEW_LISTENER` (its
    /// `Notify` rules compiled to `SECCOMP_RET_USER_NOTIF`).
    pub notify: bool,
    /// Also `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (Linux 5.19): once the
    /// daemon has received a notification, only a fatal signal interrupts the
    /// caller. The creation guard performs calls itself: an ordinary signal
    /// arriving meanwhile would otherwise restart a call already done
    /// (`mkdir` answering EEXIST the second time).
    pub wait_killable: bool,
}

impl Confinement {
    /// Builds both layers for `spec`, as its [`Layers`](crate::spec::Layers)
    /// say (decided by the daemon from its probe of the kernel; nothing is
    /// decided here). Runs in PID 1 after the new root is in place, so paths
    /// are the sandbox's own. Refuses layers that cannot go together, and a
    /// Landlock ABI the kernel does not offer.
    pub(crate) fn prepare(spec: &SandboxSpec) -> Result<Confinement, Failure> {
        if spec.dangerously_skip_confinement {
            return Ok(Confinement {
                landlock: None,
                seccomp: None,
                notify: false,
                wait_killable: false,
            });
        }
        let layers = spec.layers;
        if let Some(why) = layers.inconsistency() {
            return Err(Failure::msg("check the sandbox's layers", why));
        }
        if spec.resolver && !layers.notify {
            return Err(Failure::msg(
                "check the sandbox's layers",
                "transparent egress (the sandbox's resolver) needs seccomp user notification, to hand connections over",
            ));
        }
        Ok(Confinement {
            landlock: crate::confine::landlock::ruleset(spec)?,
            seccomp: Some(crate::confine::seccomp::program_with(
                layers.notify,
                layers.watch_files,
                layers.guard,
                !spec.write.is_empty(),
                spec.resolver,
            )?),
            notify: layers.notify,
            wait_killable: layers.wait_killable,
        })
    }

    /// Applies Landlock, then seccomp (last, so that nothing after it needs a
    /// call it refuses), to the calling thread. Requires `no_new_privs`
    /// already set. Returns the listener (close-on-exec) when the filter has
    /// one; a failure names its [`Stage`].
    ///
    /// System calls only, no allocation: for the forked server child just
    /// before execve ([`crate::init`]).
    pub(crate) fn apply(&self) -> Result<Option<OwnedFd>, (Stage, i32)> {
        if let Some(ruleset) = &self.landlock {
            // `restrict_self` consumes its ruleset; a duplicate of the fd
            // (F_DUPFD_CLOEXEC) keeps `apply` on `&self`. Then no_new_privs
            // (already set by the caller: a no-op), landlock_restrict_self(fd,
            // 0) and close. Errors carry the io::Error of the failed call.
            let status = ruleset
                .try_clone()
                .map_err(|e| (Stage::Landlock, e.raw_os_error().unwrap_or(libc::EBADF)))?
                .restrict_self()
                .map_err(|e| (Stage::Landlock, *::landlock::Errno::from(e)))?;
            // Every right was asked for as a hard requirement, so anything but
            // full enforcement means the kernel applies less than the table.
            if status.ruleset != RulesetStatus::FullyEnforced {
                return Err((Stage::Landlock, libc::EOPNOTSUPP));
            }
        }
        if let Some(prog) = &self.seccomp {
            // NEW_LISTENER: the kernel returns a new fd (always O_CLOEXEC) on
            // which the Notify rules' calls wait for an answer. A flag the
            // kernel lacks fails the install (EINVAL) and with it the start:
            // the layers said it would be there. The stage names the flags.
            let (flags, stage) = match (self.notify, self.wait_killable) {
                (false, _) => (0, Stage::Seccomp),
                (true, false) => (
                    libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                    Stage::SeccompListener,
                ),
                (true, true) => (
                    libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
                        | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
                    Stage::SeccompWaitKillable,
                ),
            };
            return sys::seccomp::install_filter(prog, flags).map_err(|e| (stage, e as i32));
        }
        Ok(None)
    }
}
