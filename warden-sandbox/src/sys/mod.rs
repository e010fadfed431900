//! The kernel boundary: the calls the sandbox needs that `nix` does not wrap
//! safely, as safe functions (new mount API, openat2 in a root, statx,
//! pidfd, capabilities, close_range, the seccomp listener's ioctls, the
//! Landlock version call, `SCM_RIGHTS` reception, the descriptors socket
//! activation passes). Every wrapper returns
//! `Errno` (or `io::Error`) so callers can attach the stage they were in.
//!
//! # Invariants
//!
//! - This module and `init::exec` (the server child between fork and
//!   execve) are the only ones of the crate that allow `unsafe_code`
//!   (`lib.rs`); every block has its `// SAFETY:` line.
//! - Every function here is safe to call with any arguments: pointers are
//!   made from Rust references and slices that outlive the call, fds are
//!   borrowed (`BorrowedFd`) or handed out owned (`OwnedFd`) exactly once,
//!   the moment the kernel returns them.
//! - Where `nix` has a safe wrapper, it is used, here too; what stays raw
//!   says why next to it.
//!
//! Which process runs what: [`mount`] and [`net`] run in PID 1, [`process`]
//! in the launcher, PID 1 and the daemon, [`fs`], [`seccomp`]'s
//! notification calls and [`readiness`] on the daemon's threads, [`fdpass`]
//! on both sides of every socket that carries fds, [`activation`] in the
//! daemon's `main`, before anything else.

pub mod activation;
pub mod fdpass;
#[cfg(target_os = "linux")]
pub(crate) mod fs;
#[cfg(target_os = "linux")]
pub(crate) mod landlock;
#[cfg(target_os = "linux")]
pub(crate) mod mount;
#[cfg(target_os = "linux")]
pub(crate) mod net;
#[cfg(target_os = "linux")]
pub(crate) mod process;
#[cfg(target_os = "linux")]
pub(crate) mod readiness;
#[cfg(target_os = "linux")]
pub(crate) mod seccomp;

#[cfg(target_os = "linux")]
use nix::errno::Errno;
#[cfg(target_os = "linux")]
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

#[cfg(target_os = "linux")]
/// Converts the return value of a syscall that returns a new fd. Only for
/// such return values (private: every caller passes one straight from
/// `libc::syscall`).
fn fd_result(ret: libc::c_long) -> Result<OwnedFd, Errno> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        // SAFETY: the kernel just returned this fd to us; nobody else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
    }
}

#[cfg(target_os = "linux")]
fn unit_result(ret: libc::c_long) -> Result<(), Errno> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

#[cfg(target_os = "linux")]
/// The human text of an errno, without the "(os error N)" suffix.
pub(crate) fn errno_text(e: Errno) -> String {
    e.desc().to_string()
}
