//! Intercepted `connect(2)` calls (transparent egress, DESIGN.md §6; with
//! [`crate::spec::SandboxSpec::resolver`]): a connection to an address the
//! sandbox's resolver gave a name (a synthetic one from 198.18.0.0/15, or
//! the host's own address of a public name) or one the allowlist names
//! waits in the kernel while the daemon decides and dials the real upstream
//! itself; the socket it connected then **replaces** the caller's
//! (`SECCOMP_IOCTL_NOTIF_ADDFD` with `SECCOMP_ADDFD_FLAG_SETFD` on the
//! caller's fd number) and the call returns 0.
//!
//! What the notifier decides at once ([`judge`]):
//! - a TCP socket to a synthetic address, or to one the [`Connector`]
//!   [`reaches`](Connector::reaches) (either as IPv4 or its IPv4-mapped IPv6
//!   form): held, a [`HeldConnect`] for the connector. The notifier looks at
//!   the caller's socket through a duplicate of it (`pidfd_getfd`): one
//!   already connected gets `EISCONN` (a second `connect` after
//!   `EINPROGRESS` is a usual check; never a second connection);
//! - a UDP socket to such an address: `ENETUNREACH` (the resolver is the
//!   sandbox's one UDP service), recorded;
//! - loopback (the proxy's listener, the resolver), `AF_UNIX` and every other
//!   family: the kernel runs the call as it would (and refuses what the
//!   sandbox refuses);
//! - any other IPv4 or IPv6 address: `ENETUNREACH` at once (the sandbox's
//!   network has no route anywhere but loopback; the connector hears of it,
//!   for the record).
//!
//! The replacing socket gets the caller's `O_NONBLOCK` and close-on-exec
//! flags and the options it set before `connect` that mean something for a
//! connected TCP socket ([`COPIED_OPTIONS`]: timeouts, keepalive, linger,
//! `TCP_NODELAY`...; buffer sizes are not copied, which would turn off the
//! kernel's autotuning). A blocking caller returns 0; a non-blocking one
//! `EINPROGRESS`, then finds the socket writable with `SO_ERROR` 0, as after
//! any non-blocking connect.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

use nix::errno::Errno;

use super::notify::{respond, respond_continue};
use crate::sys;

/// Who decides about intercepted connections; called on the notifier thread,
/// so it must not block: take the call and answer it later.
pub trait Connector: Send + Sync {
    /// Whether a connection to `addr` (neither synthetic nor loopback) is
    /// to be decided by [`connect`](Self::connect): an address the sandbox's
    /// resolver gave a name, or one the allowlist names. A quick look-up: it
    /// runs for every such `connect`.
    fn reaches(&self, addr: Ipv4Addr) -> bool;
    /// A connection to a synthetic address or one it [`reaches`](Self::reaches):
    /// hand over a socket or refuse.
    fn connect(&self, call: HeldConnect);
    /// A connection refused at once, and why (after the caller was
    /// answered); `at`: when it was refused, taken before the caller was
    /// answered (what the caller did next, e.g. end the tool call it made
    /// the connection for, comes after it).
    fn refused(&self, pid: u32, to: SocketAddr, why: Unreachable, at: std::time::Instant);
    /// A connection about to be refused at once, before the caller is
    /// answered: for what must know of a refusal before the caller can act
    /// on it. Runs on the notifier's path: quick, never waiting.
    fn refusing(&self, _to: SocketAddr, _why: Unreachable) {}
}

/// Why a `connect` was refused at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreachable {
    /// An address that is neither loopback nor synthetic nor reached
    /// (`ENETUNREACH`).
    Address,
    /// A UDP (or other non-stream) socket to a synthetic or reached address
    /// (`ENETUNREACH`): only TCP is handed over.
    Datagram,
    /// The caller's socket could not be looked at (`pidfd_getfd` refused:
    /// `ECONNREFUSED`, never a guess).
    Unreadable,
}

/// The socket options copied from the caller's socket onto the one that
/// replaces it (`level`, `name`); those its family lacks are skipped.
pub const COPIED_OPTIONS: &[(libc::c_int, libc::c_int)] = &[
    (libc::SOL_SOCKET, libc::SO_KEEPALIVE),
    (libc::SOL_SOCKET, libc::SO_RCVTIMEO),
    (libc::SOL_SOCKET, libc::SO_SNDTIMEO),
    (libc::SOL_SOCKET, libc::SO_LINGER),
    (libc::SOL_SOCKET, libc::SO_OOBINLINE),
    (libc::SOL_SOCKET, libc::SO_RCVLOWAT),
    (libc::SOL_SOCKET, libc::SO_PRIORITY),
    (libc::IPPROTO_TCP, libc::TCP_NODELAY),
    (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE),
    (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL),
    (libc::IPPROTO_TCP, libc::TCP_KEEPCNT),
    (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT),
];

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
    /// Where it connects: a synthetic or reached address and the port.
    pub to: SocketAddrV4,
    /// The caller's socket is non-blocking: it must not wait for the upstream.
    pub nonblocking: bool,
    /// A duplicate of the caller's socket (its options are copied from it).
    theirs: OwnedFd,
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
        // Each of these is settable on any connected TCP socket: a failure
        // is the caller's socket gone strange, and leaves the default.
        for &(level, name) in COPIED_OPTIONS {
            let _ = sys::net::copy_sockopt(self.theirs.as_fd(), sock.as_fd(), level, name);
        }
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
                // Connected: connect(2) returns 0, or, non-blocking, what a
                // connect in progress returns (the socket is writable).
                if nonblocking {
                    respond(listener, self.id, libc::EINPROGRESS);
                } else {
                    super::notify::respond_value(listener, self.id, 0);
                }
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
    /// The caller's socket is connected already: `EISCONN`.
    Connected,
    Held(HeldConnect),
    /// Refused at once with this errno, to this address.
    Refused(i32, SocketAddr, Unreachable),
}

/// What the caller's socket is: a duplicate of it, whether it is a stream
/// socket and whether it is connected already. The pid is checked to still
/// name the caller after the pidfd is opened.
fn look_at(
    listener: &Arc<OwnedFd>,
    n: &libc::seccomp_notif,
    fd: i32,
) -> Result<(OwnedFd, bool, bool), Errno> {
    let pidfd = sys::process::pidfd_open(n.pid as libc::pid_t)?;
    if !sys::seccomp::id_valid(listener.as_fd(), n.id) {
        return Err(Errno::ESRCH);
    }
    let theirs = sys::process::pidfd_getfd(pidfd.as_fd(), fd)?;
    let stream = nix::sys::socket::getsockopt(&theirs, nix::sys::socket::sockopt::SockType)?
        == nix::sys::socket::SockType::Stream;
    let connected =
        nix::sys::socket::getpeername::<nix::sys::socket::SockaddrStorage>(theirs.as_raw_fd())
            .is_ok();
    Ok((theirs, stream, connected))
}

/// The IP address a `sockaddr` of `len` bytes at `ptr` in `pid` names;
/// `None` when it is unreadable, too short or of another family (the kernel
/// then decides, as it would).
fn sockaddr_at(pid: u32, ptr: u64, len: usize) -> Option<SocketAddr> {
    let mut buf = [0u8; 28];
    let want = len.min(buf.len());
    let got = super::memory::read_memory(pid, ptr, &mut buf[..want]).ok()?;
    let b = &buf[..got];
    if b.len() < 2 {
        return None;
    }
    let family = u16::from_ne_bytes([b[0], b[1]]) as i32;
    match family {
        libc::AF_INET if b.len() >= 8 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])),
                port,
            ))
        }
        libc::AF_INET6 if b.len() >= 24 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[8..24]);
            Some(SocketAddr::new(
                IpAddr::V6(std::net::Ipv6Addr::from(a)),
                port,
            ))
        }
        _ => None,
    }
}

/// `to` as IPv4 (an IPv4-mapped IPv6 address too), and whether it is the
/// sandbox's own loopback (or unspecified, which connects there).
fn classify(to: &SocketAddr) -> (Option<Ipv4Addr>, bool) {
    let v4 = match to.ip() {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(a) => a.to_ipv4_mapped(),
    };
    let loopback = to.ip().is_loopback()
        || to.ip().is_unspecified()
        || v4.is_some_and(|a| a.is_loopback() || a.is_unspecified());
    (v4, loopback)
}

/// `struct msghdr`'s size and `struct mmsghdr`'s (64-bit Linux: x86_64 and
/// aarch64, the filter's architectures).
const MSGHDR: usize = 56;
const MMSGHDR: usize = 64;

/// Judges a datagram send that names its destination (`sendto` with an
/// address, `sendmsg`, `sendmmsg`: the filter notifies only those, only with
/// transparent egress): a destination outside the sandbox's loopback is
/// refused at once (`ENETUNREACH`, what the missing route answers) with a
/// record; loopback (the resolver), no destination (a connected socket) and
/// what cannot be read continue, and the kernel decides as it would (it has
/// no route out: a destination changed after this look is refused too).
pub(crate) fn judge_send(n: &libc::seccomp_notif) -> Judged {
    let args = n.data.args;
    let mut names: Vec<(u64, usize)> = Vec::new();
    match n.data.nr as libc::c_long {
        libc::SYS_sendto => names.push((args[4], args[5] as usize)),
        libc::SYS_sendmsg | libc::SYS_sendmmsg => {
            let (count, stride) = if n.data.nr as libc::c_long == libc::SYS_sendmsg {
                (1, MSGHDR)
            } else {
                // The kernel sends at most UIO_MAXIOV messages per call.
                ((args[2] as u32).min(1024) as usize, MMSGHDR)
            };
            let mut headers = vec![0u8; count * stride];
            let Ok(got) = super::memory::read_memory(n.pid, args[1], &mut headers) else {
                return Judged::Continue;
            };
            for h in headers[..got].chunks_exact(stride) {
                let ptr = u64::from_ne_bytes(h[0..8].try_into().unwrap_or_default());
                let len = u32::from_ne_bytes(h[8..12].try_into().unwrap_or_default());
                names.push((ptr, len as usize));
            }
        }
        _ => return Judged::Continue,
    }
    for (ptr, len) in names {
        if ptr == 0 || len == 0 {
            continue;
        }
        let Some(to) = sockaddr_at(n.pid, ptr, len) else {
            continue;
        };
        if !classify(&to).1 {
            return Judged::Refused(libc::ENETUNREACH, to, Unreachable::Datagram);
        }
    }
    Judged::Continue
}

/// Reads the address `n` connects to and judges it (module doc).
pub(crate) fn judge(
    listener: &Arc<OwnedFd>,
    n: &libc::seccomp_notif,
    reaches: &dyn Fn(Ipv4Addr) -> bool,
) -> Judged {
    let (fd, ptr, len) = (
        n.data.args[0] as i32,
        n.data.args[1],
        n.data.args[2] as usize,
    );
    let Some(to) = sockaddr_at(n.pid, ptr, len) else {
        // Unreadable, short or another family: the kernel decides.
        return Judged::Continue;
    };
    let (v4, loopback) = classify(&to);
    match v4 {
        Some(a) if synthetic(a) || (!loopback && reaches(a)) => match look_at(listener, n, fd) {
            Ok((_, false, _)) => Judged::Refused(libc::ENETUNREACH, to, Unreachable::Datagram),
            // Answered here: the kernel would check its own rules first
            // (Landlock's TCP connect ports: EACCES), where the caller
            // expects what a connected socket answers.
            Ok((_, true, true)) => Judged::Connected,
            Ok((theirs, true, false)) => Judged::Held(HeldConnect {
                listener: listener.clone(),
                id: n.id,
                pid: n.pid,
                fd,
                to: SocketAddrV4::new(a, to.port()),
                nonblocking: fd_flags(n.pid, fd).is_some_and(|f| f & libc::O_NONBLOCK != 0),
                theirs,
                answered: false,
            }),
            Err(_) => Judged::Refused(libc::ECONNREFUSED, to, Unreachable::Unreadable),
        },
        _ if loopback => Judged::Continue,
        _ => Judged::Refused(libc::ENETUNREACH, to, Unreachable::Address),
    }
}

/// Answers a `connect` notification with `connector` (see [`judge`]), or a
/// datagram send's ([`judge_send`]).
pub(crate) fn handle(
    listener: &Arc<OwnedFd>,
    n: &libc::seccomp_notif,
    connector: &Arc<dyn Connector>,
) {
    let judged = if n.data.nr as libc::c_long == libc::SYS_connect {
        judge(listener, n, &|a| connector.reaches(a))
    } else {
        judge_send(n)
    };
    match judged {
        Judged::Continue => respond_continue(listener.as_fd(), n.id),
        Judged::Connected => respond(listener.as_fd(), n.id, libc::EISCONN),
        Judged::Held(call) => connector.connect(call),
        Judged::Refused(errno, to, why) => {
            let at = std::time::Instant::now();
            connector.refusing(to, why);
            respond(listener.as_fd(), n.id, errno);
            connector.refused(n.pid, to, why, at);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    use super::*;

    /// Notes when it was told of a refusal, and the time the refusal came
    /// with.
    #[derive(Default)]
    struct Timed {
        refusing: Mutex<Option<Instant>>,
        at: Mutex<Option<Instant>>,
    }

    impl Connector for Timed {
        fn reaches(&self, _: Ipv4Addr) -> bool {
            false
        }
        fn connect(&self, _: HeldConnect) {}
        fn refusing(&self, _: SocketAddr, _: Unreachable) {
            *self.refusing.lock().unwrap() = Some(Instant::now());
        }
        fn refused(&self, _: u32, _: SocketAddr, _: Unreachable, at: Instant) {
            *self.at.lock().unwrap() = Some(at);
        }
    }

    #[test]
    fn a_refusal_is_timed_before_its_caller_is_answered() {
        // A connect to an outside address, as the notifier hands it over
        // (the address read from the caller's memory: here, ours). Before
        // the time came with it, the daemon timed the record after the
        // caller had its answer, so the record could name the tool call
        // after the one the connect was made during.
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 443u16.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([93, 184, 215, 14]),
            },
            sin_zero: [0; 8],
        };
        let n = libc::seccomp_notif {
            id: 1,
            pid: std::process::id(),
            flags: 0,
            data: libc::seccomp_data {
                nr: libc::SYS_connect as i32,
                arch: 0,
                instruction_pointer: 0,
                args: [
                    u64::MAX,
                    std::ptr::addr_of!(sa) as u64,
                    std::mem::size_of::<libc::sockaddr_in>() as u64,
                    0,
                    0,
                    0,
                ],
            },
        };
        // Not a listener: the answer goes nowhere (its error is ignored).
        let listener = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let timed = Arc::new(Timed::default());
        let connector: Arc<dyn Connector> = timed.clone();
        handle(&listener, &n, &connector);
        let refusing = timed
            .refusing
            .lock()
            .unwrap()
            .expect("told before the answer");
        let at = timed.at.lock().unwrap().expect("told after the answer");
        assert!(at <= refusing, "{at:?} after {refusing:?}");
    }

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
