//! A wake-up a thread can wait on in `poll(2)` beside its other fds: rung
//! from another thread, cleared by the waiter. The relay's cancel
//! ([`crate::stdio`]) and the tool gate's "a tool was accepted"
//! ([`crate::gate`]) use it.
//!
//! On Linux it is an `eventfd(2)` (one fd, a counter); elsewhere, where
//! there is no eventfd, a non-blocking pipe whose read end is polled (a
//! byte per ring, drained when cleared). Both are close-on-exec.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

#[cfg(target_os = "linux")]
pub use eventfd::Wake;
#[cfg(not(target_os = "linux"))]
pub use pipe::Wake;

#[cfg(target_os = "linux")]
mod eventfd {
    use super::*;
    use nix::sys::eventfd::{EfdFlags, EventFd};

    /// An eventfd, non-blocking, close-on-exec.
    pub struct Wake(EventFd);

    impl Wake {
        pub fn new() -> io::Result<Wake> {
            Ok(Wake(EventFd::from_value_and_flags(
                0,
                EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
            )?))
        }

        /// Makes the fd readable until [`Wake::clear`]. Only fails when the
        /// counter would overflow, which leaves it readable.
        pub fn ring(&self) {
            let _ = self.0.write(1);
        }

        /// Clears what was rung (the counter back to 0).
        pub fn clear(&self) {
            let _ = self.0.read();
        }
    }

    impl AsFd for Wake {
        fn as_fd(&self) -> BorrowedFd<'_> {
            self.0.as_fd()
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod pipe {
    use super::*;
    use std::os::fd::OwnedFd;

    use nix::errno::Errno;
    use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};

    /// A pipe: the read end is polled, a byte written rings it.
    pub struct Wake {
        r: OwnedFd,
        w: OwnedFd,
    }

    impl Wake {
        pub fn new() -> io::Result<Wake> {
            let (r, w) = nix::unistd::pipe()?;
            for fd in [&r, &w] {
                fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
                let fl = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
                fcntl(fd, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK))?;
            }
            Ok(Wake { r, w })
        }

        /// Makes the read end readable until [`Wake::clear`]. A full pipe
        /// (EAGAIN) is readable already.
        pub fn ring(&self) {
            let _ = nix::unistd::write(&self.w, &[1]);
        }

        /// Drains what was rung.
        pub fn clear(&self) {
            let mut buf = [0u8; 64];
            loop {
                match nix::unistd::read(&self.r, &mut buf) {
                    Ok(n) if n == buf.len() => continue,
                    Err(Errno::EINTR) => continue,
                    _ => return,
                }
            }
        }
    }

    impl AsFd for Wake {
        fn as_fd(&self) -> BorrowedFd<'_> {
            self.r.as_fd()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

    fn readable(w: &Wake) -> bool {
        let mut p = [PollFd::new(w.as_fd(), PollFlags::POLLIN)];
        matches!(poll(&mut p, PollTimeout::ZERO), Ok(n) if n > 0)
    }

    #[test]
    fn rung_until_cleared() {
        let w = Wake::new().unwrap();
        assert!(!readable(&w));
        w.ring();
        w.ring();
        assert!(readable(&w));
        w.clear();
        assert!(!readable(&w));
    }
}
