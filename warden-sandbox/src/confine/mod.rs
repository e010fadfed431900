//! The last two layers applied to the server, between fork and execve:
//! Landlock (an independent filesystem and network layer mirroring the grants)
//! and the seccomp filter. Both are *prepared* in PID 1 before the fork (all
//! allocation and every error with a message happens there) and *applied* in
//! the child with syscalls only: one `seccomp(2)` for the filter
//! ([`crate::sys::seccomp::install_filter`]), the `landlock` crate's
//! `try_clone` and `restrict_self` for Landlock, which make `fcntl`, `prctl`,
//! `landlock_restrict_self` and `close` and allocate nothing. No `unsafe`
//! here: what must be raw is in `sys`.
//!
//! What is applied is what the spec's [`Layers`](crate::spec::Layers) say:
//! the Landlock ABI, and whether the filter has a user-notification listener
//! (see [`crate::supervise::notify`]), watches file accesses, guards creations. With a
//! listener, `apply` returns its fd, which the child passes to PID 1 and
//! closes before execve.

#[cfg(target_os = "linux")]
pub(crate) mod landlock;
pub(crate) mod seccomp;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub(crate) use linux::*;
