//! The last two layers applied to the server, between fork and execve:
//! Landlock (an independent filesystem and network layer mirroring the grants)
//! and the seccomp filter. Both are *prepared* in PID 1 before the fork (all
//! allocation and every error with a message happens there) and *applied* in
//! the child with syscalls only: raw ones for seccomp, the `landlock` crate's
//! `try_clone` and `restrict_self` for Landlock, which make `fcntl`, `prctl`,
//! `landlock_restrict_self` and `close` and allocate nothing.
//!
//! With `notify`, the filter is installed with a user-notification listener
//! (see [`crate::notify`]): `apply` returns its fd, which the child passes to
//! PID 1 and closes before execve.

use crate::proto::Failure;
use crate::spec::SandboxSpec;
use landlock::{RulesetCreated, RulesetStatus};
use std::os::fd::RawFd;

/// What [`apply`](Confinement::apply) installs.
pub(crate) struct Confinement {
    /// The Landlock ruleset (its fd and what the crate asked of it), when the
    /// kernel offers Landlock.
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

/// `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (not in the libc crate).
const WAIT_KILLABLE_RECV: libc::c_ulong = 1 << 5;

/// Stage numbers reported by [`Confinement::apply`] (see init.rs `STAGES`).
pub(crate) const STAGE_LANDLOCK: u32 = 8;
pub(crate) const STAGE_SECCOMP: u32 = 9;

impl Confinement {
    /// Builds both layers for `spec`. Runs in PID 1 after the new root is in
    /// place, so paths are the sandbox's own. `notify`: the kernel offers user
    /// notification (checked by the caller on the host's /proc).
    pub(crate) fn prepare(spec: &SandboxSpec, notify: bool) -> Result<Confinement, Failure> {
        if spec.dangerously_skip_confinement {
            return Ok(Confinement {
                landlock: None,
                seccomp: None,
                notify: false,
                wait_killable: false,
            });
        }
        let guard = crate::guard::active(spec, notify);
        Ok(Confinement {
            landlock: crate::landlock::ruleset(spec, guard)?,
            seccomp: Some(crate::seccomp::program(
                notify,
                notify && !spec.audit_files.is_off(),
                guard,
                !spec.write.is_empty(),
            )?),
            notify,
            wait_killable: guard && crate::guard::kernel_at_least(5, 19),
        })
    }

    /// Applies Landlock, then seccomp (last, so that nothing after it needs a
    /// call it refuses). Requires `no_new_privs` already set. Returns the
    /// listener fd (close-on-exec) when the filter has one; the caller owns it.
    ///
    /// # Safety
    /// Syscalls only, no allocation; for the forked server child just before
    /// execve.
    pub(crate) unsafe fn apply(&self) -> Result<Option<RawFd>, (u32, i32)> {
        if let Some(ruleset) = &self.landlock {
            // `restrict_self` consumes its ruleset; a duplicate of the fd
            // (F_DUPFD_CLOEXEC) keeps `apply` on `&self`. Then no_new_privs
            // (already set by the caller: a no-op), landlock_restrict_self(fd,
            // 0) and close. Errors carry the io::Error of the failed call.
            let status = ruleset
                .try_clone()
                .map_err(|e| (STAGE_LANDLOCK, e.raw_os_error().unwrap_or(libc::EBADF)))?
                .restrict_self()
                .map_err(|e| (STAGE_LANDLOCK, *landlock::Errno::from(e)))?;
            // Every right was asked for as a hard requirement, so anything but
            // full enforcement means the kernel applies less than the table.
            if status.ruleset != RulesetStatus::FullyEnforced {
                return Err((STAGE_LANDLOCK, libc::EOPNOTSUPP));
            }
        }
        if let Some(prog) = &self.seccomp {
            let fprog = libc::sock_fprog {
                len: prog.len() as libc::c_ushort,
                filter: prog.as_ptr() as *mut libc::sock_filter,
            };
            // NEW_LISTENER: the kernel returns a new fd (always O_CLOEXEC) on
            // which the Notify rules' calls wait for an answer.
            let mut flags = if self.notify {
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
            } else {
                0
            };
            if self.notify && self.wait_killable {
                flags |= WAIT_KILLABLE_RECV;
            }
            // SAFETY: seccomp(SECCOMP_SET_MODE_FILTER) with a valid program that
            // outlives the call (the kernel copies it).
            let mut r = unsafe {
                libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    flags,
                    &fprog as *const libc::sock_fprog,
                )
            };
            if r < 0
                && flags & WAIT_KILLABLE_RECV != 0
                // SAFETY: reading this thread's errno.
                && unsafe { *libc::__errno_location() } == libc::EINVAL
            {
                // A kernel that reports 5.19+ but lacks the flag (a backport
                // mismatch): the narrow restart window stays, nothing else changes.
                // SAFETY: as above.
                r = unsafe {
                    libc::syscall(
                        libc::SYS_seccomp,
                        libc::SECCOMP_SET_MODE_FILTER,
                        flags & !WAIT_KILLABLE_RECV,
                        &fprog as *const libc::sock_fprog,
                    )
                };
            }
            if r < 0 {
                // SAFETY: reading errno.
                return Err((STAGE_SECCOMP, unsafe { *libc::__errno_location() }));
            }
            if self.notify {
                return Ok(Some(r as RawFd));
            }
        }
        Ok(None)
    }
}
