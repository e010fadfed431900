//! The relay's zero-copy calls, per platform. On Linux: `splice(2)`,
//! `tee(2)`, `pipe2(2)` and `F_SETPIPE_SZ`, through safe `nix` wrappers.
//! Elsewhere there is no `splice` or `tee`: they answer `ENOSYS`, which the
//! relay takes as "copy through a buffer" (a [`super::Pump`] reads and
//! writes, and copies what it read into its tap); [`super::duplex_capable`]
//! is false there, so the duplex thread, which needs a non-blocking
//! `splice` into the client's blocking fds, is never used.

use std::io;
use std::os::fd::OwnedFd;

use nix::errno::Errno;

/// Whether this platform has `splice(2)` and `tee(2)`.
pub const SPLICE: bool = cfg!(target_os = "linux");

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use nix::fcntl::{fcntl, splice, tee, FcntlArg, OFlag, SpliceFFlags};
    use nix::unistd::pipe2;

    /// A close-on-exec pipe (`O_NONBLOCK` too with `nonblocking`).
    pub fn pipe(nonblocking: bool) -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fl = OFlag::O_CLOEXEC;
        if nonblocking {
            fl |= OFlag::O_NONBLOCK;
        }
        pipe2(fl).map_err(io::Error::from)
    }

    /// Asks for a pipe buffer of `size` bytes (best effort).
    pub fn set_pipe_size(w: &OwnedFd, size: i32) {
        let _ = fcntl(w, FcntlArg::F_SETPIPE_SZ(size));
    }

    /// `splice(2)` of up to `len` bytes at both fds' positions.
    pub fn splice_some(
        src: &OwnedFd,
        dst: &OwnedFd,
        len: usize,
        nonblocking: bool,
    ) -> Result<usize, Errno> {
        let mut flags = SpliceFFlags::SPLICE_F_MOVE;
        if nonblocking {
            flags |= SpliceFFlags::SPLICE_F_NONBLOCK;
        }
        splice(src, None, dst, None, len, flags)
    }

    /// Non-blocking `tee(2)` of up to `len` bytes.
    pub fn tee_some(src: &OwnedFd, dst: &OwnedFd, len: usize) -> Result<usize, Errno> {
        tee(src, dst, len, SpliceFFlags::SPLICE_F_NONBLOCK)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;
    use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};

    /// A close-on-exec pipe (`O_NONBLOCK` too with `nonblocking`). Without
    /// `pipe2` (macOS has none) the flag is set just after, as std does
    /// there: a child forked by another thread in between would hold the
    /// fds until its exec.
    pub fn pipe(nonblocking: bool) -> io::Result<(OwnedFd, OwnedFd)> {
        let (r, w) = nix::unistd::pipe()?;
        for fd in [&r, &w] {
            fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
            if nonblocking {
                let fl = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
                fcntl(fd, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK))?;
            }
        }
        Ok((r, w))
    }

    /// No way to size a pipe here.
    pub fn set_pipe_size(_w: &OwnedFd, _size: i32) {}

    /// No `splice(2)`: the caller copies through a buffer.
    pub fn splice_some(
        _src: &OwnedFd,
        _dst: &OwnedFd,
        _len: usize,
        _nonblocking: bool,
    ) -> Result<usize, Errno> {
        Err(Errno::ENOSYS)
    }

    /// No `tee(2)`: a tap that would need it is off.
    pub fn tee_some(_src: &OwnedFd, _dst: &OwnedFd, _len: usize) -> Result<usize, Errno> {
        Err(Errno::ENOSYS)
    }
}

pub use imp::{pipe, set_pipe_size, splice_some, tee_some};
