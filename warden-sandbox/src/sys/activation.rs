//! Socket activation's inherited descriptors (`sd_listen_fds(3)`): a service
//! manager (systemd's `wardend.socket`, `systemd-socket-activate`) binds the
//! daemon's control socket itself and passes it across `execve` as fd 3
//! ([`LISTEN_FDS_START`]), saying so in `LISTEN_PID`/`LISTEN_FDS`. Taking
//! ownership of such an fd is the one step no safe wrapper offers: nothing
//! in the process created it, so only its number is known. Reading and
//! judging the variables, and checking what the socket is, stay with the
//! daemon (`wardend/src/activation.rs`), in safe `nix`.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// The first descriptor a service manager passes (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;

/// Most descriptors [`take_listen_fds`] accepts: far more than any unit
/// names, few enough that a bogus `LISTEN_FDS` cannot make it walk the table.
pub const MAX_LISTEN_FDS: u32 = 64;

/// Set by the first [`take_listen_fds`]: the descriptors have one owner.
static TAKEN: AtomicBool = AtomicBool::new(false);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InheritError {
    #[error("the descriptors passed by the service manager were already taken")]
    AlreadyTaken,
    #[error("{count} descriptors is more than the {MAX_LISTEN_FDS} accepted")]
    TooMany { count: u32 },
    #[error("fd {fd} is not open")]
    NotOpen { fd: RawFd },
    #[error(
        "fd {fd} is close-on-exec: it was opened by this process, not passed by the service manager"
    )]
    NotInherited { fd: RawFd },
}

/// Takes ownership of the `count` descriptors a service manager passed
/// (fds 3, 4, ...), each made close-on-exec. Once per process: a second call
/// is [`InheritError::AlreadyTaken`]. Each must be open and must not be
/// close-on-exec, which is what an fd inherited across `execve` looks like
/// (every fd Rust's standard library, tokio and `nix` open here is
/// close-on-exec); otherwise nothing is taken.
pub fn take_listen_fds(count: u32) -> Result<Vec<OwnedFd>, InheritError> {
    if count > MAX_LISTEN_FDS {
        return Err(InheritError::TooMany { count });
    }
    if TAKEN.swap(true, Ordering::SeqCst) {
        return Err(InheritError::AlreadyTaken);
    }
    let fds: Vec<RawFd> = (0..count as RawFd).map(|i| LISTEN_FDS_START + i).collect();
    for &fd in &fds {
        // SAFETY: F_GETFD only reads the descriptor's flags; on a number
        // that is not open it fails with EBADF and touches nothing.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags < 0 {
            return Err(InheritError::NotOpen { fd });
        }
        if flags & libc::FD_CLOEXEC != 0 {
            return Err(InheritError::NotInherited { fd });
        }
    }
    Ok(fds
        .into_iter()
        .map(|fd| {
            // SAFETY: `fd` is open and not close-on-exec, so it came across
            // execve (the service manager's socket) rather than from code of
            // this process, which opens everything close-on-exec: nobody here
            // owns it. `TAKEN` makes this the one place that takes it, once.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            // Kept off the sandbox's execs (they close everything anyway).
            let _ = nix::fcntl::fcntl(
                &owned,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
            );
            owned
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever fd 3 of the test process is (usually one the harness opened
    /// close-on-exec; a leaked jobserver pipe would be inherited), the second
    /// call is refused.
    #[test]
    fn takes_once() {
        assert_eq!(
            take_listen_fds(MAX_LISTEN_FDS + 1).err(),
            Some(InheritError::TooMany {
                count: MAX_LISTEN_FDS + 1
            })
        );
        let f = std::fs::File::open("/dev/null").unwrap();
        match take_listen_fds(1) {
            Err(InheritError::NotOpen { fd: 3 }) | Err(InheritError::NotInherited { fd: 3 }) => {}
            // Not ours to close.
            Ok(fds) => fds.into_iter().for_each(std::mem::forget),
            Err(other) => panic!("{other:?}"),
        }
        drop(f);
        assert_eq!(take_listen_fds(0).err(), Some(InheritError::AlreadyTaken));
    }
}
