//! Intercepted `connect(2)` calls (transparent egress, DESIGN.md §6; with
//! [`crate::spec::SandboxSpec::resolver`]): a connection to a synthetic
//! address of the sandbox's resolver (198.18.0.0/15) waits in the kernel
//! while the daemon decides and dials the real upstream itself; the socket it
//! connected then **replaces** the caller's (`SECCOMP_IOCTL_NOTIF_ADDFD` with
//! `SECCOMP_ADDFD_FLAG_SETFD` on the caller's fd number) and the call returns
//! 0. No byte of the connection passes through the daemon.
//!
//! What the notifier decides at once ([`judge`]):
//! - `AF_INET` to a synthetic address (or its IPv4-mapped IPv6 form): held,
//!   a [`HeldConnect`] for the [`Connector`];
//! - loopback (the proxy's listener, the resolver), `AF_UNIX` and every other
//!   family: the kernel runs the call as it would (and refuses what the
//!   sandbox refuses);
//! - any other IPv4 or IPv6 address: `ENETUNREACH` at once (the sandbox's
//!   network has no route anywhere but loopback; the connector hears of it,
//!   for the record).
//!
//! The replacing socket gets the caller's `O_NONBLOCK` and close-on-exec
//! flags; a non-blocking caller sees 0 (connected) rather than `EINPROGRESS`,
//! which every event loop accepts. Socket options the caller set before
//! `connect` are not copied.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

use nix::errno::Errno;

use super::notify::{respond, respond_continue};
use crate::sys;

/// Who decides about intercepted connections; called on the notifier thread,
/// so it must not block: take the call and answer it later.
pub trait Connector: Send + Sync {
    /// A connection to a synthetic address: hand over a socket or refuse.
    fn connect(&self, call: HeldConnect);
    /// A connection refused at once (a non-loopback, non-synthetic address).
    fn refused(&self, pid: u32, to: SocketAddr);
}

/// Whether `addr` is in 198.18.0.0/15.
pub fn synthetic(addr: Ipv4Addr) -> bool {
    let o = addr.octets();
    o[0] == 198 && (o[1] & 0xfe) == 18
}

/// One `connect` waiting in the kernel for its socket.
pub struct HeldConnect {
    listener: Arc<OwnedFd>,
    id: u64,
    /// The caller, as a pid of the daemon's pid namespace.
    pub pid: u32,
    /// The caller's socket fd.
    pub fd: i32,
    /// Where it connects: a synthetic address and the port.
    pub to: SocketAddrV4,
    answered: bool,
}

impl std::fmt::Debug for HeldConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldConnect")
            .field("pid", &self.pid)
            .field("fd", &self.fd)
            .field("to", &self.to)
            .finish_non_exhaustive()
    }
}

/// `flags:` of `/proc/<pid>/fdinfo/<fd>` (octal open flags).
fn fd_flags(pid: u32, fd: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    let v = s.lines().find_map(|l| l.strip_prefix("flags:"))?;
    i32::from_str_radix(v.trim(), 8).ok()
}

impl HeldConnect {
    /// Puts the connected `sock` in place of the caller's socket and lets
    /// the call return 0. `Err` when the caller is gone (or the fd was
    /// replaced meanwhile): the socket is then closed.
    pub fn hand_over(mut self, sock: OwnedFd) -> Result<(), Errno> {
        self.answered = true;
        let listener = self.listener.as_fd();
        // The caller's flags decide the new socket's; unreadable (the caller
        // is gone, or the fd is not there): refused, never guessed (a
        // non-blocking caller handed a blocking socket would hang).
        let Some(flags) = fd_flags(self.pid, self.fd) else {
            respond(listener, self.id, libc::ECONNREFUSED);
            return Err(Errno::EBADF);
        };
        let nonblocking = flags & libc::O_NONBLOCK != 0;
        let fl = nix::fcntl::fcntl(&sock, nix::fcntl::FcntlArg::F_GETFL)?;
        let mut fl = nix::fcntl::OFlag::from_bits_retain(fl);
        fl.set(nix::fcntl::OFlag::O_NONBLOCK, nonblocking);
        nix::fcntl::fcntl(&sock, nix::fcntl::FcntlArg::F_SETFL(fl))?;
        // The pid named the caller while it waits: check before touching its fds.
        if !sys::seccomp::id_valid(listener, self.id) {
            return Err(Errno::ESRCH);
        }
        let addfd = libc::seccomp_notif_addfd {
            id: self.id,
            flags: libc::SECCOMP_ADDFD_FLAG_SETFD as u32,
            srcfd: sock.as_raw_fd() as u32,
            newfd: self.fd as u32,
            newfd_flags: if flags & libc::O_CLOEXEC != 0 {
                libc::O_CLOEXEC as u32
            } else {
                0
            },
        };
        match sys::seccomp::add_fd(listener, &addfd) {
            Ok(_) => {
                // Connected: connect(2) returns 0.
                super::notify::respond_value(listener, self.id, 0);
                Ok(())
            }
            Err(e) => {
                respond(listener, self.id, libc::ECONNREFUSED);
                Err(e)
            }
        }
    }

    /// The call fails with `errno` (`ECONNREFUSED` for a refused host).
    pub fn refuse(mut self, errno: i32) {
        self.answered = true;
        respond(self.listener.as_fd(), self.id, errno);
    }
}

impl Drop for HeldConnect {
    fn drop(&mut self) {
        if !self.answered {
            respond(self.listener.as_fd(), self.id, libc::ECONNREFUSED);
        }
    }
}

/// What the notifier does with one `connect`.
pub(crate) enum Judged {
    Continue,
    Held(HeldConnect),
    /// Refused at once with this errno, to this address.
    Refused(i32, SocketAddr),
}

/// Reads the address `n` connects to and judges it (module doc).
pub(crate) fn judge(listener: &Arc<OwnedFd>, n: &libc::seccomp_notif) -> Judged {
    let (fd, ptr, len) = (
        n.data.args[0] as i32,
        n.data.args[1],
        n.data.args[2] as usize,
    );
    let mut buf = [0u8; 28];
    let want = len.min(buf.len());
    let Ok(got) = super::memory::read_memory(n.pid, ptr, &mut buf[..want]) else {
        // Unreadable: the kernel fails it (EFAULT) as it would.
        return Judged::Continue;
    };
    let b = &buf[..got];
    if b.len() < 2 {
        return Judged::Continue;
    }
    let family = u16::from_ne_bytes([b[0], b[1]]) as i32;
    let to: SocketAddr = match family {
        libc::AF_INET if b.len() >= 8 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            SocketAddr::new(IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])), port)
        }
        libc::AF_INET6 if b.len() >= 24 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[8..24]);
            SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::from(a)), port)
        }
        _ => return Judged::Continue,
    };
    let v4 = match to.ip() {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(a) => a.to_ipv4_mapped(),
    };
    match v4 {
        Some(a) if synthetic(a) => Judged::Held(HeldConnect {
            listener: listener.clone(),
            id: n.id,
            pid: n.pid,
            fd,
            to: SocketAddrV4::new(a, to.port()),
            answered: false,
        }),
        _ if to.ip().is_loopback() || to.ip().is_unspecified() => Judged::Continue,
        Some(a) if a.is_loopback() => Judged::Continue,
        _ => Judged::Refused(libc::ENETUNREACH, to),
    }
}

/// Answers a `connect` notification with `connector` (see [`judge`]).
pub(crate) fn handle(
    listener: &Arc<OwnedFd>,
    n: &libc::seccomp_notif,
    connector: &Arc<dyn Connector>,
) {
    match judge(listener, n) {
        Judged::Continue => respond_continue(listener.as_fd(), n.id),
        Judged::Held(call) => connector.connect(call),
        Judged::Refused(errno, to) => {
            respond(listener.as_fd(), n.id, errno);
            connector.refused(n.pid, to);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_synthetic_range_is_198_18_slash_15() {
        use super::synthetic;
        assert!(synthetic("198.18.0.1".parse().unwrap()));
        assert!(synthetic("198.19.255.254".parse().unwrap()));
        assert!(!synthetic("198.20.0.1".parse().unwrap()));
        assert!(!synthetic("198.17.255.255".parse().unwrap()));
        assert!(!synthetic("127.0.0.1".parse().unwrap()));
    }
}
