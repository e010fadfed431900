//! PID 1 of the sandbox's pid namespace (non-dumpable): enters new
//! mount/net/ipc/uts/cgroup namespaces, builds the root filesystem
//! ([`crate::rootfs`]), binds the egress proxy's listener, prepares the
//! confinement ([`crate::confine`]) and forks the server
//! ([`super::exec::spawn_server`]); then forwards signals, reaps children,
//! obeys the daemon's control messages and reports the server's exit. When
//! it exits the kernel kills everything left in the namespace.

/// Where the sandbox's resolver listens (also in its `/etc/resolv.conf`).
pub(crate) const RESOLVER: &str = "127.0.0.53:53";

use super::exec::{self, ExecArgs, InitRole, Stage, MSG_LISTENER};
use crate::control::{self, Exit, Failure, FromInit, Recv, ToInit};
use crate::rootfs;
use crate::spec::SandboxSpec;
use crate::sys;
use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::{AsFd, BorrowedFd};

/// Signals PID 1 forwards to the server when they come from outside the sandbox.
const FORWARDED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

fn cap_last_cap() -> Result<u32, Failure> {
    let s = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").map_err(|e| {
        Failure::os(
            "read cap_last_cap",
            Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        )
    })?;
    s.trim()
        .parse()
        .map_err(|_| Failure::msg("read cap_last_cap", format!("unexpected content {s:?}")))
}

/// PID 1 of the sandbox. Returns only on failure.
pub(super) fn pid1(
    role: &InitRole,
    sock: BorrowedFd<'_>,
    spec: &SandboxSpec,
    launcher: BorrowedFd<'_>,
    netns: std::os::fd::OwnedFd,
) -> Result<std::convert::Infallible, Failure> {
    // Die with the launcher (which is single-threaded, so "parent death" is exact);
    // re-check afterwards in case it died before the prctl took effect.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| Failure::os("set pdeathsig", e))?;
    // A pidfd polls readable once its process has exited.
    let mut pfd = [nix::poll::PollFd::new(
        launcher,
        nix::poll::PollFlags::POLLIN,
    )];
    if nix::poll::poll(&mut pfd, nix::poll::PollTimeout::ZERO)
        .map_err(|e| Failure::os("poll launcher", e))?
        > 0
    {
        return Err(Failure::msg("start pid 1", "the launcher exited"));
    }
    // Non-dumpable: no ptrace attach and no /proc/1/{mem,environ,...} for the
    // processes inside, which share our uid.
    nix::sys::prctl::set_dumpable(false).map_err(|e| Failure::os("set non-dumpable", e))?;
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    // Read while the host /proc is still mounted (same value inside).
    let last_cap = cap_last_cap()?;

    // Namespaces owned by our new user namespace. CLONE_NEWCGROUP makes our current
    // cgroup the root of the cgroup view. The network namespace (only a down
    // loopback) is being made by the launcher meanwhile; joined below.
    nix::sched::unshare(
        CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS
            | CloneFlags::CLONE_NEWCGROUP,
    )
    .map_err(|e| Failure::os("unshare namespaces", e))?;

    let short: String = spec.session_id.chars().take(8).collect();
    let hostname = format!("warden-{short}");
    rootfs::build_root(spec, &hostname)?;
    nix::unistd::sethostname(&hostname).map_err(|e| Failure::os("set hostname", e))?;
    join_netns(netns)?;
    sys::net::loopback_up().map_err(|e| Failure::os("bring up lo", e))?;
    if let Some(port) = spec.proxy_port {
        // The egress proxy's listener, inside our network namespace; the daemon
        // serves it, so nothing of Warden runs in here for the network. Sent now and
        // closed at once: the server never holds it (fds are closed before exec
        // anyway, and it is CLOEXEC).
        let listener =
            std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port)).map_err(|e| {
                Failure::os(
                    format!("listen on 127.0.0.1:{port} for the egress proxy"),
                    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                )
            })?;
        control::send(sock, &FromInit::ProxyListener, Some(listener.as_fd()))
            .map_err(|e| Failure::os("pass the egress proxy listener", e))?;
        drop(listener);
    }
    if spec.resolver {
        // The sandbox's resolver: like the proxy's listener, made here and
        // served by the daemon. Port 53: PID 1 holds CAP_NET_BIND_SERVICE in
        // the user namespace that owns this network namespace.
        let resolver = std::net::UdpSocket::bind(RESOLVER).map_err(|e| {
            Failure::os(
                format!("bind {RESOLVER} for the sandbox's resolver"),
                Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            )
        })?;
        control::send(sock, &FromInit::Resolver, Some(resolver.as_fd()))
            .map_err(|e| Failure::os("pass the resolver socket", e))?;
        drop(resolver);
    }

    // Everything that can fail with a message happens before the fork.
    nix::unistd::chdir(&spec.cwd)
        .map_err(|e| Failure::os(format!("chdir {}", spec.cwd.display()), e))?;
    let args = ExecArgs::new(spec)?;
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

    // Block the signals we handle through signalfd before forking, so none is lost
    // between fork and the loop; the child unblocks everything before exec. Blocked
    // signals are queued even for a namespace init, which otherwise drops signals
    // with default disposition.
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    for s in FORWARDED {
        mask.add(s);
    }
    mask.thread_block()
        .map_err(|e| Failure::os("block signals", e))?;
    let sfd = nix::sys::signalfd::SignalFd::with_flags(
        &mask,
        nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK,
    )
    .map_err(|e| Failure::os("signalfd", e))?;

    // Landlock and seccomp as the spec's layers say (without user
    // notification the recorded rules fall back to plain errno returns: still
    // refused, just not audited, as session.start says), built now (errors
    // with messages), applied in the child.
    let confinement = crate::confine::Confinement::prepare(spec)?;
    let confinement_notifies = confinement.notify;

    // Exec status socket: CLOEXEC, so a successful exec closes the child's end
    // (EOF = success); on failure the child sends (stage, errno). Before that it
    // sends the seccomp listener fd (SCM_RIGHTS), hence a socket, not a pipe;
    // SEQPACKET keeps each report one message.
    let status = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| Failure::os("status socketpair", e))?;

    // Nothing runs before the daemon says so: its record of the session is
    // on disk by then (audit-before-execute), written while we built all of
    // the above. EOF: the daemon gave up on the launch.
    match control::recv::<ToInit>(sock) {
        Ok(Recv::Msg(ToInit::Go, _)) => {}
        Ok(Recv::Eof) => return Err(Failure::msg("wait for the daemon", "the daemon went away")),
        Ok(Recv::Msg(other, _)) => {
            return Err(Failure::msg(
                "wait for the daemon",
                format!("unexpected message {other:?} before Go"),
            ))
        }
        Err(e) => return Err(Failure::os("wait for the daemon", e)),
    }
    // The child only makes raw syscalls before execve/_exit.
    let (server, rd) = exec::spawn_server(
        role,
        sock,
        status,
        last_cap,
        nproc_limit(spec),
        &confinement,
        &args,
    )
    .map_err(|e| Failure::os("fork server", e))?;
    drop(confinement);
    // Our copies of the server's stdio must go, so that the daemon sees EOF on the
    // server's stdout/stderr when the server closes them.
    sys::process::dup_over_stdio(devnull.as_fd());
    drop(devnull);

    // Reports until EOF: that the listener (if any) went to the daemon (the
    // server child sends it there itself, on our control socket: with file
    // auditing on, its own execve waits on whoever holds it), then a
    // failure or nothing.
    let mut passed_listener = false;
    let failure = loop {
        match exec::recv_status(rd.as_fd()) {
            Ok(None) => break None,
            Ok(Some((MSG_LISTENER, _, None))) => passed_listener = true,
            Ok(Some((stage, errno, _))) => break Some((stage, errno)),
            // The child is gone or the socket broke: treat like a failed start.
            Err(e) => break Some((Stage::Start as u32, e as i32)),
        }
    };
    drop(rd);
    if let Some((stage, errno)) = failure {
        let _ = waitpid(server, None);
        return Err(match Stage::from_raw(stage).unwrap_or(Stage::Start) {
            Stage::Exec => Failure::Exec {
                program: spec.program.display().to_string(),
                errno,
            },
            s => Failure::os(s.as_str(), Errno::from_raw(errno)),
        });
    }
    if !passed_listener && confinement_notifies {
        return Err(Failure::msg(
            "pass the seccomp listener",
            "the server did not send its listener",
        ));
    }
    control::send(sock, &FromInit::Started, None).map_err(|e| Failure::os("report start", e))?;
    let exit = supervise(sock, &sfd, server);
    // Nothing of the sandbox outlives the report: every other process is
    // killed and reaped first, so the daemon can end the session at the
    // report instead of after the namespaces' teardown (our own exit).
    end_everything();
    let _ = control::send(sock, &FromInit::Exited(exit), None);
    let code = match exit {
        Exit::Code(c) => c,
        Exit::Signal(s) => 128 + s,
    };
    // Exiting as PID 1 makes the kernel SIGKILL everything left in the namespace.
    std::process::exit(code)
}

/// PID 1's loop: forward signals, reap children, obey the daemon; returns how the
/// server ended.
fn supervise(sock: BorrowedFd<'_>, sfd: &nix::sys::signalfd::SignalFd, server: Pid) -> Exit {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    loop {
        let mut fds = [
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(sock, PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return kill_all_and_wait(server),
        }
        let sig_ready = fds[0].revents().is_some_and(|r| !r.is_empty());
        let sock_ready = fds[1].revents().is_some_and(|r| !r.is_empty());
        if sig_ready {
            while let Ok(Some(info)) = sfd.read_signal() {
                let signo = info.ssi_signo as i32;
                if signo == libc::SIGCHLD {
                    continue;
                }
                // Only signals from outside the sandbox (sender pid not visible in
                // our namespace reads as 0) are forwarded.
                if info.ssi_pid == 0 {
                    let _ = sys::process::kill(server.as_raw(), signo);
                }
            }
            // Reap everything: orphans in the namespace are re-parented to us.
            loop {
                match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::Exited(p, c)) if p == server => return Exit::Code(c),
                    Ok(WaitStatus::Signaled(p, s, _)) if p == server => {
                        return Exit::Signal(s as i32)
                    }
                    Ok(WaitStatus::StillAlive) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
        }
        if sock_ready {
            match control::recv::<ToInit>(sock) {
                Ok(Recv::Msg(ToInit::Signal(n), _)) => {
                    // Our own, not yet reaped, child.
                    let _ = sys::process::kill(server.as_raw(), n);
                }
                Ok(Recv::Msg(ToInit::TerminateTree, _)) => {
                    // kill(-1) from a pid namespace's init reaches every process in
                    // the namespace except the init itself.
                    let _ = sys::process::kill(-1, libc::SIGTERM);
                }
                Ok(Recv::Msg(ToInit::Spec(_) | ToInit::Snapshot(_) | ToInit::Go, _)) => {}
                Ok(Recv::Eof) | Err(_) => {
                    // The daemon is gone: nobody may control this sandbox any more.
                    return kill_all_and_wait(server);
                }
            }
        }
    }
}

/// Joins the network namespace the launcher made for us (a new one, owned
/// by the sandbox's user namespace, with nothing in it but a down
/// loopback), from the fd it sends on `channel`; without it there is no
/// sandbox.
fn join_netns(channel: std::os::fd::OwnedFd) -> Result<(), Failure> {
    let stage = "join the network namespace";
    let ns = match control::recv::<String>(channel.as_fd()) {
        Ok(Recv::Msg(m, Some(fd))) if m == super::launcher::NETNS_MSG => fd,
        Ok(_) => return Err(Failure::msg(stage, "the launcher sent none")),
        Err(e) => return Err(Failure::os(stage, e)),
    };
    nix::sched::setns(ns, CloneFlags::CLONE_NEWNET).map_err(|e| Failure::os(stage, e))
}

/// Kills every other process of the pid namespace and reaps them all,
/// orphans included (they are re-parented to us as their parents die):
/// returns once we have no child left. `kill(-1)` again on every round, for
/// a process forked while the last one was being delivered.
fn end_everything() {
    loop {
        // From a pid namespace's init: every process in it except the init.
        let _ = sys::process::kill(-1, libc::SIGKILL);
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::__WALL)) {
            Ok(_) | Err(Errno::EINTR) => continue,
            // ECHILD: none left.
            Err(_) => return,
        }
    }
}

fn kill_all_and_wait(server: Pid) -> Exit {
    // Everything in our pid namespace.
    let _ = sys::process::kill(-1, libc::SIGKILL);
    loop {
        match waitpid(server, None) {
            Ok(WaitStatus::Exited(_, c)) => return Exit::Code(c),
            Ok(WaitStatus::Signaled(_, s, _)) => return Exit::Signal(s as i32),
            Err(Errno::EINTR) | Ok(_) => continue,
            Err(_) => return Exit::Signal(libc::SIGKILL),
        }
    }
}

/// RLIMIT_NPROC for the server: `limits.pids` plus the launcher and PID 1,
/// which live in the same user namespace and so count against the same limit
/// (since Linux 5.14 the count is per user namespace, so nothing outside the
/// sandbox counts).
fn nproc_limit(spec: &SandboxSpec) -> Option<u64> {
    spec.pids_max.map(|n| n + 2)
}
