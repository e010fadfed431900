//! Processes and their credentials: pidfds, `kill`, capabilities,
//! `close_range`, and placing the control socket for the sandbox init's
//! exec. The launcher and PID 1 use them, the daemon signals PID 1 through
//! its pidfd, and the notifier threads drop their effective capabilities.

use super::{fd_result, unit_result};
use nix::errno::Errno;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// `pidfd_open(pid, 0)`.
pub(crate) fn pidfd_open(pid: libc::pid_t) -> Result<OwnedFd, Errno> {
    // SAFETY: plain integers; the fd returned is ours.
    fd_result(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })
}

/// `pidfd_getfd(pidfd, fd, 0)`: a duplicate of another process's fd (the same
/// open file description), close-on-exec. Needs ptrace access to it.
pub(crate) fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: RawFd) -> Result<OwnedFd, Errno> {
    // SAFETY: plain integers; the fd returned is ours.
    fd_result(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) })
}

/// `pidfd_send_signal(pidfd, sig, NULL, 0)`: signals exactly the process the pidfd
/// was opened for, never a process that later reused its pid.
pub(crate) fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: i32) -> Result<(), Errno> {
    // SAFETY: a NULL siginfo is allowed (the kernel fills in a SI_USER one).
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `capset` with empty effective, permitted and inheritable sets.
pub(crate) fn capset_empty() -> Result<(), Errno> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: header and two data structs as required by version 3.
    unit_result(unsafe {
        libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr())
    })
}

/// Clears the calling thread's effective capability set (permitted and
/// inheritable kept): only this thread, as capabilities are per thread.
pub(crate) fn drop_effective_caps() -> Result<(), Errno> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and two data structs as required by version 3.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut hdr as *mut CapHeader,
            data.as_mut_ptr(),
        )
    })?;
    for d in &mut data {
        d.effective = 0;
    }
    // SAFETY: as above; the new effective set is a subset of the permitted one.
    unit_result(unsafe {
        libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr())
    })
}

/// `kill(pid, sig)`, with any signal number (the daemon forwards what the
/// client sent; `nix`'s `Signal` has no real-time signals) and any pid
/// (`-1`: every process the caller may signal; from a pid namespace's init,
/// every other process of the namespace).
pub(crate) fn kill(pid: libc::pid_t, sig: i32) -> Result<(), Errno> {
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    unit_result(libc::c_long::from(unsafe { libc::kill(pid, sig) }))
}

/// Marks every fd >= `first` close-on-exec (`CLOSE_RANGE_CLOEXEC`): they
/// stay open until the next `execve`, which then closes them.
pub(crate) fn cloexec_from(first: u32) -> Result<(), Errno> {
    // SAFETY: only sets FD_CLOEXEC; no fd is closed before the exec.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    })
}

/// Closes every fd >= `first` (`close_range`).
///
/// # Safety
/// No fd >= `first` may be owned by anything that still uses or closes it
/// (an `OwnedFd`, a `File`...): for a process that has just started and
/// owns nothing above `first` yet (the sandbox init, closing what the
/// daemon may have leaked to it).
pub(crate) unsafe fn close_from(first: u32) -> Result<(), Errno> {
    // SAFETY: the caller guarantees nothing owns these fds.
    unit_result(unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) })
}

/// Replaces fds 0, 1 and 2 with `fd` (e.g. /dev/null), dropping whatever they were.
pub(crate) fn dup_over_stdio(fd: BorrowedFd<'_>) {
    let _ = nix::unistd::dup2_stdin(fd);
    let _ = nix::unistd::dup2_stdout(fd);
    let _ = nix::unistd::dup2_stderr(fd);
}

/// Makes `fd` the child's fd `target` when `cmd` spawns (a `pre_exec`
/// step: `dup2`, or clearing `FD_CLOEXEC` when it already has that
/// number), after std has placed the child's stdio. `fd` must still be
/// open when `cmd` spawns; otherwise the spawn fails with `EBADF`.
pub(crate) fn place_fd_on_exec(cmd: &mut Command, fd: RawFd, target: RawFd) {
    // SAFETY: the closure runs in the forked child before exec and only calls
    // async-signal-safe dup2/fcntl on integers; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if fd == target {
                // dup2 onto itself keeps FD_CLOEXEC: clear it instead.
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(fd, target) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
