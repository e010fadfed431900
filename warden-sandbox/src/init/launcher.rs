//! The launcher: the init role's first process, in the host's pid
//! namespace. It reads the spec, joins the session's cgroup, enters a new
//! user namespace (only the caller's own uid/gid mapped) and a new pid
//! namespace, forks PID 1 ([`super::pid1`]), passes the daemon a pidfd of
//! it, and waits for it: its exit code is PID 1's.

use super::exec::{self, InitRole};
use super::pid1;
use crate::control::{self, Failure, FromInit, Recv, ToInit};
use crate::sys;
use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::ForkResult;
use std::os::fd::{AsFd, BorrowedFd};

fn exit_code(st: WaitStatus) -> i32 {
    match st {
        WaitStatus::Exited(_, c) => c,
        WaitStatus::Signaled(_, s, _) => 128 + s as i32,
        _ => 125,
    }
}

fn write_proc(path: &str, content: &str) -> Result<(), Failure> {
    std::fs::write(path, content).map_err(|e| {
        Failure::os(
            format!("write {path}"),
            Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        )
    })
}

/// Creates a network namespace (we are in the sandbox's user namespace, so
/// it is owned by it) and sends it to PID 1 on `to_pid1`, which then closes.
fn make_netns(to_pid1: std::os::fd::OwnedFd) -> Result<(), Failure> {
    nix::sched::unshare(CloneFlags::CLONE_NEWNET)
        .map_err(|e| Failure::os("unshare network namespace", e))?;
    let ns = std::fs::File::open("/proc/self/ns/net").map_err(|e| {
        Failure::os(
            "open /proc/self/ns/net",
            Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        )
    })?;
    control::send(to_pid1.as_fd(), &NETNS_MSG, Some(ns.as_fd()))
        .map_err(|e| Failure::os("hand over the network namespace", e))
}

/// The one message on the network namespace channel (with the fd).
pub(super) const NETNS_MSG: &str = "netns";

/// The launcher: returns its exit code (PID 1's), or a failure to report.
pub(super) fn launcher(role: &InitRole, sock: BorrowedFd<'_>) -> Result<i32, Failure> {
    let spec = match control::recv::<ToInit>(sock) {
        Ok(Recv::Msg(ToInit::Spec(spec), _)) => *spec,
        Ok(Recv::Msg(ToInit::Snapshot(dir), _)) => {
            return super::snapshot::snapshot(role, sock, &dir)
        }
        Ok(Recv::Eof) => return Ok(125),
        Ok(_) => return Err(Failure::msg("read spec", "unexpected first message")),
        Err(e) => return Err(Failure::os("read spec", e)),
    };
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    if spec.uid != uid || spec.gid != gid {
        return Err(Failure::msg(
            "check ids",
            format!(
                "spec asks for uid {} gid {} but the sandbox runs as uid {uid} gid {gid}",
                spec.uid, spec.gid
            ),
        ));
    }
    if let Some(cg) = &spec.cgroup {
        // Before anything else exists: every process the sandbox will hold
        // descends from us, so all of them are under the cgroup's limits.
        write_proc(&cg.join("cgroup.procs").to_string_lossy(), "0")?;
    }
    // Kept for dropping our copies of the server's stdio after the fork.
    let devnull = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| {
            Failure::os(
                "open /dev/null",
                Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            )
        })?;

    // A user namespace first: it gives us the capabilities to create the others
    // without being root, and (for root) confines them to this namespace.
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER)
        .map_err(|e| Failure::UserNamespace { errno: e as i32 })?;
    // setgroups must be denied before an unprivileged process may write gid_map
    // (CVE-2014-8989: otherwise dropping groups could gain access).
    write_proc("/proc/self/setgroups", "deny")?;
    // Map only our own ids: nothing else (in particular no other user's files)
    // can be represented inside.
    write_proc("/proc/self/uid_map", &format!("{uid} {uid} 1\n"))?;
    write_proc("/proc/self/gid_map", &format!("{gid} {gid} 1\n"))?;
    // CLONE_NEWPID only affects children: our next fork is PID 1 of the new namespace.
    nix::sched::unshare(CloneFlags::CLONE_NEWPID)
        .map_err(|e| Failure::os("unshare pid namespace", e))?;

    // PID 1 cannot see its parent's pid (it is outside the new pid namespace), so
    // it watches the launcher through a pidfd opened here.
    let parent = sys::process::pidfd_open(nix::unistd::getpid().as_raw())
        .map_err(|e| Failure::os("pidfd_open self", e))?;
    // PID 1's network namespace is made here, after the fork, while PID 1
    // builds the root filesystem on another CPU (it is the costliest
    // namespace to create: a loopback device and every protocol's state),
    // and handed over on this channel; PID 1 joins it before it needs it.
    let (netns_tx, netns_rx) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| Failure::os("network namespace socketpair", e))?;
    // The child may run arbitrary code after this fork: the init role is
    // single-threaded (`role`).
    match exec::fork(role).map_err(|e| Failure::os("fork pid 1", e))? {
        ForkResult::Child => {
            drop(devnull);
            drop(netns_tx);
            let code = match pid1::pid1(role, sock, &spec, parent.as_fd(), netns_rx) {
                Ok(never) => match never {},
                Err(f) => {
                    let _ = control::send(sock, &FromInit::Failed(f), None);
                    125
                }
            };
            // No destructors or atexit handlers of the launcher should run in
            // this forked copy.
            exec::exit_now(code)
        }
        ForkResult::Parent { child } => {
            drop(parent);
            // PID 1 holds the server's stdio now; our copies must go so EOF works.
            sys::process::dup_over_stdio(devnull.as_fd());
            drop(devnull);
            // A pidfd of our own unreaped child can never refer to a recycled pid;
            // the daemon gets it over SCM_RIGHTS and signals PID 1 through it only.
            let sent = sys::process::pidfd_open(child.as_raw()).and_then(|pidfd| {
                control::send(
                    sock,
                    &FromInit::Launched {
                        pid: child.as_raw(),
                    },
                    Some(pidfd.as_fd()),
                )
            });
            if let Err(e) = sent {
                // No way to control it: do not let it run.
                let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
                let _ = waitpid(child, None);
                return Err(Failure::os("send pidfd", e));
            }
            drop(netns_rx);
            if let Err(f) = make_netns(netns_tx) {
                // Said before PID 1 finds the channel closed and fails too.
                let _ = control::send(sock, &FromInit::Failed(f), None);
            }
            loop {
                match waitpid(child, None) {
                    Ok(st @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => {
                        return Ok(exit_code(st))
                    }
                    Ok(_) | Err(Errno::EINTR) => continue,
                    Err(e) => return Err(Failure::os("wait pid 1", e)),
                }
            }
        }
    }
}
