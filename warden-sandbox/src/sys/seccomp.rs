//! `seccomp(2)` and the ioctls of a user-notification listener, which
//! neither `nix` nor `libc` wrap: installing a filter (the server child,
//! the kernel probe's trial thread) and answering its listener (the
//! daemon's notifier pool, [`crate::supervise::notify`]).
//!
//! [`install_filter`] is async-signal-safe (one system call, no
//! allocation), for the server child between fork and execve.

use super::fd_result;
use nix::errno::Errno;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6): wake the caller on the
/// answering thread's CPU, as the answer is the only thing it waits for.
pub(crate) const USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, prog)` on the calling thread.
/// With `SECCOMP_FILTER_FLAG_NEW_LISTENER` in `flags`, the listener the
/// kernel returns (always close-on-exec); otherwise `None`. A flag the
/// kernel does not know is `EINVAL`, and nothing is installed.
pub(crate) fn install_filter(
    prog: &[libc::sock_filter],
    flags: libc::c_ulong,
) -> Result<Option<OwnedFd>, Errno> {
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: seccomp(SECCOMP_SET_MODE_FILTER) with a valid program that
    // outlives the call (the kernel copies it, and only reads it).
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    };
    if flags & libc::SECCOMP_FILTER_FLAG_NEW_LISTENER != 0 {
        fd_result(r).map(Some)
    } else if r < 0 {
        Err(Errno::last())
    } else {
        Ok(None)
    }
}

/// A `struct seccomp_notif` of zeros, as `SECCOMP_IOCTL_NOTIF_RECV` wants it.
pub(crate) fn blank_notif() -> libc::seccomp_notif {
    // SAFETY: seccomp_notif is plain integers; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// `SECCOMP_IOCTL_NOTIF_RECV`; `None` when the caller died in between
/// (`ENOENT`) or the call was interrupted.
pub(crate) fn receive(listener: BorrowedFd<'_>) -> Option<libc::seccomp_notif> {
    let mut n = blank_notif();
    // SAFETY: RECV fills the seccomp_notif we own, whose size the ioctl encodes.
    let r = unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n) };
    (r == 0).then_some(n)
}

/// `SECCOMP_IOCTL_NOTIF_SEND` of `resp`, again after `EINTR`. `ENOENT` (the
/// caller died, or a signal interrupted its call) needs nothing more.
pub(crate) fn send(listener: BorrowedFd<'_>, resp: &libc::seccomp_notif_resp) {
    loop {
        // SAFETY: SEND reads the seccomp_notif_resp we own.
        let r = unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, resp) };
        if r == 0 || Errno::last() != Errno::EINTR {
            return;
        }
    }
}

/// Whether notification `id` is still pending (its caller still waits in
/// the call, so its pid still names it): `SECCOMP_IOCTL_NOTIF_ID_VALID`.
pub(crate) fn id_valid(listener: BorrowedFd<'_>, id: u64) -> bool {
    // SAFETY: ID_VALID reads the u64 we pass.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &id,
        ) == 0
    }
}

/// `SECCOMP_IOCTL_NOTIF_ADDFD`: installs `addfd.srcfd` in the caller of
/// notification `addfd.id` (with `SECCOMP_ADDFD_FLAG_SEND`, also answering
/// it with the new fd's number). Returns that number.
pub(crate) fn add_fd(
    listener: BorrowedFd<'_>,
    addfd: &libc::seccomp_notif_addfd,
) -> Result<i32, Errno> {
    // SAFETY: ADDFD reads the struct we own.
    let r = unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ADDFD, addfd) };
    if r >= 0 {
        Ok(r)
    } else {
        Err(Errno::last())
    }
}

/// `SECCOMP_IOCTL_NOTIF_SET_FLAGS` (Linux 6.6; before, an unknown ioctl:
/// `EINVAL`).
pub(crate) fn set_flags(listener: BorrowedFd<'_>, flags: u64) -> Result<(), Errno> {
    // SAFETY: SET_FLAGS takes its flags by value, not through a pointer.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
            flags as libc::c_ulong,
        )
    };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}
