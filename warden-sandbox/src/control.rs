//! The typed control protocol between the daemon ([`crate::launch`]) and the sandbox
//! init ([`crate::init`]): one JSON document per `SOCK_SEQPACKET` message, so message
//! boundaries come from the kernel. The child reports failures as data
//! ([`Failure`]), never as log lines.

use crate::spec::SandboxSpec;
use nix::errno::Errno;
use nix::sys::socket::{self, ControlMessage, MsgFlags};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::io::IoSlice;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

/// Daemon → sandbox init.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToInit {
    /// First and only once: what to build and run.
    Spec(Box<SandboxSpec>),
    /// First and only once, instead of a spec: make a listing of this host
    /// directory (`init::snapshot`) and exit.
    Snapshot(std::path::PathBuf),
    /// Second, to PID 1: the server may be started now (the daemon's
    /// audit-before-execute: its `session.start` is on disk). PID 1 builds
    /// the sandbox meanwhile and waits for this before it forks the server.
    Go,
    /// Forward this signal to the server process.
    Signal(i32),
    /// SIGTERM every process in the sandbox except PID 1.
    TerminateTree,
}

/// [`FromInit::Listener`] as [`send`] writes it: the bytes the server child
/// sends with the listener, with no allocation between fork and execve
/// (a test holds them to serde's).
pub(crate) const LISTENER_MSG: &[u8] = b"\"Listener\"";

/// Sandbox init → daemon.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum FromInit {
    /// From the launcher, carrying a pidfd of PID 1 as SCM_RIGHTS, and its host pid.
    Launched { pid: i32 },
    /// From the server child (on PID 1's control socket, before its
    /// execve, so before `Started`), carrying the seccomp user-notification
    /// listener as SCM_RIGHTS (absent when the kernel lacks user
    /// notification). Always the bytes of [`LISTENER_MSG`].
    Listener,
    /// From PID 1, before `Started`, carrying the egress proxy's listening TCP
    /// socket (bound inside the sandbox's network namespace) as SCM_RIGHTS.
    ProxyListener,
    /// From PID 1, before `Started`, carrying the sandbox's resolver socket
    /// (UDP, bound to 127.0.0.53:53 inside its network namespace) as
    /// SCM_RIGHTS ([`crate::spec::SandboxSpec::resolver`]).
    Resolver,
    /// From PID 1: the server was exec'd.
    Started,
    /// From the launcher or PID 1: setup failed; nothing was executed.
    Failed(Failure),
    /// From PID 1: the server exited.
    Exited(Exit),
    /// From the snapshot role, carrying the snapshot's root directory as
    /// SCM_RIGHTS: how many entries it holds, how many were left out
    /// (devices, entries gone meanwhile), and whether it stopped at the cap.
    Snapshot {
        entries: u32,
        skipped: u32,
        truncated: bool,
    },
}

/// The init role's fork server → daemon, once per launch request
/// (`init::forkserver`).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ForkReply {
    /// The launcher runs: a child of the daemon (`CLONE_PARENT`), this pid.
    Launched { pid: i32 },
    /// No launcher: the fork failed, or the request was malformed.
    Failed { errno: i32 },
}

/// How the server ended, on the wire.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) enum Exit {
    Code(i32),
    Signal(i32),
}

/// A setup failure: which stage, and the OS error if there was one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Failure {
    /// `unshare(CLONE_NEWUSER)` failed.
    UserNamespace { errno: i32 },
    /// `execve` of the program failed.
    Exec { program: String, errno: i32 },
    /// Any other stage.
    Setup {
        stage: String,
        errno: Option<i32>,
        message: String,
    },
}

impl Failure {
    pub(crate) fn os(stage: impl Into<String>, e: Errno) -> Failure {
        Failure::Setup {
            stage: stage.into(),
            errno: Some(e as i32),
            message: crate::sys::errno_text(e),
        }
    }

    pub(crate) fn msg(stage: impl Into<String>, message: impl Into<String>) -> Failure {
        Failure::Setup {
            stage: stage.into(),
            errno: None,
            message: message.into(),
        }
    }
}

/// Sends one message, optionally with one fd attached (SCM_RIGHTS).
/// `MSG_NOSIGNAL`: a gone peer is an `EPIPE`, not a SIGPIPE.
pub(crate) fn send<T: Serialize>(
    sock: BorrowedFd<'_>,
    msg: &T,
    fd: Option<BorrowedFd<'_>>,
) -> Result<(), Errno> {
    let bytes = serde_json::to_vec(msg).map_err(|_| Errno::EINVAL)?;
    let iov = [IoSlice::new(&bytes)];
    let fds = fd.map(|f| [f.as_raw_fd()]);
    let cmsg = match &fds {
        Some(fds) => vec![ControlMessage::ScmRights(fds)],
        None => vec![],
    };
    loop {
        match socket::sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// [`send`] without an fd and without waiting: `Ok(false)` when the
/// socket's buffer cannot take the message now (EAGAIN), nothing sent.
pub(crate) fn send_now<T: Serialize>(sock: BorrowedFd<'_>, msg: &T) -> Result<bool, Errno> {
    let bytes = serde_json::to_vec(msg).map_err(|_| Errno::EINVAL)?;
    let iov = [IoSlice::new(&bytes)];
    loop {
        let flags = MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT;
        match socket::sendmsg::<()>(sock.as_raw_fd(), &iov, &[], flags, None) {
            Ok(_) => return Ok(true),
            Err(Errno::EINTR) => {}
            // EMSGSIZE: larger than the socket's buffer could ever hold at
            // once; the blocking send after the spawn reports it as before.
            Err(Errno::EAGAIN | Errno::EMSGSIZE) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
}

/// Outcome of [`recv`].
pub(crate) enum Recv<T> {
    Msg(T, Option<OwnedFd>),
    /// The peer closed (all copies of) its end.
    Eof,
}

/// Receives one message of any size (peeking at its length first) and an fd if one
/// was attached (received close-on-exec).
pub(crate) fn recv<T: DeserializeOwned>(sock: BorrowedFd<'_>) -> Result<Recv<T>, Errno> {
    let mut reset = false;
    let len = loop {
        // MSG_PEEK|MSG_TRUNC with an empty buffer only reports the length.
        match socket::recv(
            sock.as_raw_fd(),
            &mut [],
            MsgFlags::MSG_PEEK | MsgFlags::MSG_TRUNC,
        ) {
            Ok(n) => break n,
            Err(Errno::EINTR) => {}
            // The peer closed with a message of ours unread. The kernel
            // reports that once, before what the peer sent before closing
            // (still queued: a failure report, an exit): look again; then
            // it is that, or EOF.
            Err(Errno::ECONNRESET) if !reset => reset = true,
            Err(Errno::ECONNRESET) => return Ok(Recv::Eof),
            Err(e) => return Err(e),
        }
    };
    let mut buf = vec![0u8; len.max(1)];
    let (n, fds) = crate::sys::fdpass::recv_with_fds(sock, &mut buf, false)
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    // At most one fd is expected; extra ones are closed when dropped here.
    let fd = fds.into_iter().next();
    if n == 0 && len == 0 {
        return Ok(Recv::Eof);
    }
    let msg = serde_json::from_slice(&buf[..n]).map_err(|_| Errno::EBADMSG)?;
    Ok(Recv::Msg(msg, fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that closes with a message of ours unread makes the kernel
    /// report a reset, once, before what the peer sent before closing: that
    /// is still read (the init's failure report, not "it died").
    #[test]
    fn what_a_peer_sent_before_closing_on_unread_data_is_read() {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        use std::os::fd::AsFd;
        let (daemon, init) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        send(daemon.as_fd(), &ToInit::Go, None).unwrap();
        let failed = FromInit::Failed(Failure::msg("check ids", "stand-in"));
        send(init.as_fd(), &failed, None).unwrap();
        drop(init);
        match recv::<FromInit>(daemon.as_fd()).unwrap() {
            Recv::Msg(FromInit::Failed(Failure::Setup { stage, .. }), _) => {
                assert_eq!(stage, "check ids")
            }
            Recv::Msg(other, _) => panic!("{other:?}"),
            Recv::Eof => panic!("the report was lost to the reset"),
        }
        assert!(matches!(
            recv::<FromInit>(daemon.as_fd()).unwrap(),
            Recv::Eof
        ));
    }

    #[test]
    fn the_childs_listener_message_is_what_serde_writes_and_reads() {
        assert_eq!(
            serde_json::to_vec(&FromInit::Listener).unwrap(),
            LISTENER_MSG
        );
        assert!(matches!(
            serde_json::from_slice::<FromInit>(LISTENER_MSG).unwrap(),
            FromInit::Listener
        ));
    }
}
