//! Waiting on a tokio event loop for an fd that a shared (`Arc`) owner keeps
//! open: the sandbox's exit fd and the recorders' wake-up, so that the daemon
//! needs no thread per session to notice either.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// An fd field of `owner`, kept open by the `Arc`.
pub(crate) struct Held<T> {
    owner: Arc<T>,
    fd: fn(&T) -> BorrowedFd<'_>,
}

impl<T> Held<T> {
    pub(crate) fn owner(&self) -> &T {
        &self.owner
    }
}

impl<T> AsRawFd for Held<T> {
    fn as_raw_fd(&self) -> RawFd {
        (self.fd)(&self.owner).as_raw_fd()
    }
}

/// Registers `fd(owner)` for readability with the current tokio runtime.
/// `fd` must return an `OwnedFd` field of `T` that is never replaced.
pub(crate) fn readable<T>(
    owner: Arc<T>,
    fd: fn(&T) -> BorrowedFd<'_>,
) -> io::Result<AsyncFd<Held<T>>> {
    let held = Held { owner, fd };
    // SAFETY: the fd is an `OwnedFd` field of `owner` that is never replaced
    // (the callers' contract), and the `Arc` inside `held` keeps `owner`
    // alive for as long as the `AsyncFd` exists: the fd stays open, names
    // the same file description, and `as_raw_fd` returns it every time.
    unsafe { AsyncFd::register_with_interest(held, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}
