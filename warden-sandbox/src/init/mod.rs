//! The sandbox side: a fresh, single-threaded re-exec of the daemon binary (see
//! [`crate::launch::init_entry_if_requested`]) with the control socket at fd 3.
//!
//! Process tree:
//! - **launcher** (host pid namespace): reads the spec, enters a new user namespace
//!   (only the caller's own uid/gid mapped) and a new pid namespace, forks PID 1,
//!   passes the daemon a pidfd of it, and waits for it.
//! - **PID 1** (non-dumpable): enters new mount/net/ipc/uts/cgroup namespaces, builds
//!   the root filesystem ([`crate::rootfs`]), forks the server, then forwards signals,
//!   reaps children and reports the server's exit. When it exits the kernel kills
//!   everything left in the pid namespace.
//! - **server**: drops every privilege and execs the program.
//!
//! Failures travel to the daemon as [`Failure`] values over the control socket.

use crate::control::{self, Exit, Failure, FromInit, Recv, ToInit};
use crate::rootfs;
use crate::spec::SandboxSpec;
use crate::sys;
use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{ForkResult, Pid};
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

/// The control socket's fd number in the init process.
pub(crate) const CONTROL_FD: RawFd = 3;

/// Signals PID 1 forwards to the server when they come from outside the sandbox.
const FORWARDED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Entry point of the init role. Never returns.
pub(crate) fn run() -> ! {
    // Started by hand, without the control socket: say so instead of guessing.
    // SAFETY: F_GETFD only queries the fd flags.
    if unsafe { libc::fcntl(CONTROL_FD, libc::F_GETFD) } < 0 {
        eprintln!("warden sandbox init: no control socket on fd 3; this role is started by the daemon only");
        std::process::exit(125);
    }
    // SAFETY: fd 3 was placed by the daemon (launch.rs) for exactly this role; we take
    // ownership of it once, here.
    let sock = unsafe { OwnedFd::from_raw_fd(CONTROL_FD) };
    // Keep it off any exec; close anything else the daemon may have leaked to us.
    let _ = nix::fcntl::fcntl(
        &sock,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    let _ = sys::close_range_from(CONTROL_FD as u32 + 1, false);
    let code = match launcher(sock.as_fd()) {
        Ok(code) => code,
        Err(f) => {
            let _ = control::send(sock.as_fd(), &FromInit::Failed(f), None);
            125
        }
    };
    std::process::exit(code)
}

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

/// The launcher: returns its exit code (PID 1's), or a failure to report.
fn launcher(sock: BorrowedFd<'_>) -> Result<i32, Failure> {
    let spec = match control::recv::<ToInit>(sock) {
        Ok(Recv::Msg(ToInit::Spec(spec), _)) => *spec,
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
    let parent = sys::pidfd_open(nix::unistd::getpid().as_raw())
        .map_err(|e| Failure::os("pidfd_open self", e))?;
    // SAFETY: this process is single-threaded (the init role runs before any thread
    // or runtime exists), so the child may run arbitrary code after fork.
    match unsafe { nix::unistd::fork() }.map_err(|e| Failure::os("fork pid 1", e))? {
        ForkResult::Child => {
            drop(devnull);
            let code = match pid1(sock, &spec, parent.as_fd()) {
                Ok(never) => match never {},
                Err(f) => {
                    let _ = control::send(sock, &FromInit::Failed(f), None);
                    125
                }
            };
            // SAFETY: plain _exit; no destructors or atexit handlers of the launcher
            // should run in this forked copy.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            drop(parent);
            // PID 1 holds the server's stdio now; our copies must go so EOF works.
            sys::dup_over_stdio(devnull.as_fd());
            drop(devnull);
            // A pidfd of our own unreaped child can never refer to a recycled pid;
            // the daemon gets it over SCM_RIGHTS and signals PID 1 through it only.
            let sent = sys::pidfd_open(child.as_raw()).and_then(|pidfd| {
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

/// Prepared execve arguments (allocated before the fork).
struct ExecArgs {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

fn exec_args(spec: &SandboxSpec) -> Result<ExecArgs, Failure> {
    let bad = |what: &str| Failure::msg("prepare exec", format!("{what} contains a NUL byte"));
    let program = CString::new(spec.program.as_os_str().as_bytes()).map_err(|_| bad("program"))?;
    let argv = spec
        .argv
        .iter()
        .map(|a| CString::new(a.clone()).map_err(|_| bad("argv")))
        .collect::<Result<Vec<_>, _>>()?;
    let envp = spec
        .env
        .iter()
        .map(|(k, v)| {
            if k.is_empty() || k.contains(&b'=') {
                return Err(Failure::msg(
                    "prepare exec",
                    "invalid environment variable name",
                ));
            }
            let mut kv = k.clone();
            kv.push(b'=');
            kv.extend_from_slice(v);
            CString::new(kv).map_err(|_| bad("environment"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if argv.is_empty() {
        return Err(Failure::msg("prepare exec", "argv is empty"));
    }
    Ok(ExecArgs {
        program,
        argv,
        envp,
    })
}

/// Brings `lo` up: the new network namespace has only a loopback device, down.
fn loopback_up() -> Result<(), Errno> {
    #[repr(C)]
    struct IfReqFlags {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    // SAFETY: plain socket call; the fd is owned below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(Errno::last());
    }
    // SAFETY: s was just returned to us.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    let mut req = IfReqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: req is a valid, 40-byte struct ifreq with the flags member filled/read.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(Errno::last());
    }
    req.flags |= libc::IFF_UP as libc::c_short;
    // SAFETY: as above.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

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
fn pid1(
    sock: BorrowedFd<'_>,
    spec: &SandboxSpec,
    launcher: BorrowedFd<'_>,
) -> Result<std::convert::Infallible, Failure> {
    // Die with the launcher (which is single-threaded, so "parent death" is exact);
    // re-check afterwards in case it died before the prctl took effect.
    sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0)
        .map_err(|e| Failure::os("set pdeathsig", e))?;
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
    sys::prctl(libc::PR_SET_DUMPABLE, 0, 0).map_err(|e| Failure::os("set non-dumpable", e))?;
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    // Read while the host /proc is still mounted (same value inside).
    let last_cap = cap_last_cap()?;

    // Namespaces owned by our new user namespace. CLONE_NEWCGROUP makes our current
    // cgroup the root of the cgroup view; CLONE_NEWNET leaves only a down loopback.
    nix::sched::unshare(
        CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWNET
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS
            | CloneFlags::CLONE_NEWCGROUP,
    )
    .map_err(|e| Failure::os("unshare namespaces", e))?;

    let short: String = spec.session_id.chars().take(8).collect();
    let hostname = format!("warden-{short}");
    rootfs::build_root(spec, &hostname)?;
    nix::unistd::sethostname(&hostname).map_err(|e| Failure::os("set hostname", e))?;
    loopback_up().map_err(|e| Failure::os("bring up lo", e))?;
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

    // Everything that can fail with a message happens before the fork.
    nix::unistd::chdir(&spec.cwd)
        .map_err(|e| Failure::os(format!("chdir {}", spec.cwd.display()), e))?;
    let args = exec_args(spec)?;
    let mut argv: Vec<*const libc::c_char> = args.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = args.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
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
    let (rd, wr) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| Failure::os("status socketpair", e))?;

    // SAFETY: single-threaded; the child only makes raw syscalls before execve/_exit.
    let server = match unsafe { nix::unistd::fork() }.map_err(|e| Failure::os("fork server", e))? {
        ForkResult::Child => {
            drop(rd);
            // SAFETY: raw syscalls on prepared data; never returns.
            unsafe {
                server_child(
                    wr.as_raw_fd(),
                    last_cap,
                    nproc_limit(spec),
                    &confinement,
                    &args.program,
                    &argv,
                    &envp,
                )
            }
        }
        ForkResult::Parent { child } => child,
    };
    drop(confinement);
    drop(wr);
    // Our copies of the server's stdio must go, so that the daemon sees EOF on the
    // server's stdout/stderr when the server closes them.
    sys::dup_over_stdio(devnull.as_fd());
    drop(devnull);

    // Reports until EOF: the listener (if any), then a failure or nothing.
    // The listener goes to the daemon the moment it arrives: with file
    // auditing on, the server's own execve waits on it. Our copy is dropped
    // at once (if the daemon never got it, closing the last copy fails the
    // waiting execve with ENOSYS rather than leaving it blocked).
    let mut passed_listener = false;
    let failure = loop {
        match recv_status(rd.as_fd()) {
            Ok(None) => break None,
            Ok(Some((MSG_LISTENER, _, Some(fd)))) => {
                let sent = control::send(sock, &FromInit::Listener, Some(fd.as_fd()));
                drop(fd);
                if let Err(e) = sent {
                    break Some((STAGE_LISTENER, e as i32));
                }
                passed_listener = true;
            }
            Ok(Some((stage, errno, _))) => break Some((stage, errno)),
            // The child is gone or the socket broke: treat like a failed start.
            Err(e) => break Some((0, e as i32)),
        }
    };
    drop(rd);
    if let Some((stage, errno)) = failure {
        let _ = waitpid(server, None);
        return Err(match stage {
            STAGE_EXEC => Failure::Exec {
                program: spec.program.display().to_string(),
                errno,
            },
            s => Failure::os(
                STAGES.get(s as usize).copied().unwrap_or("start server"),
                Errno::from_raw(errno),
            ),
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
                    // SAFETY: plain kill(2) of our own child.
                    unsafe { libc::kill(server.as_raw(), signo) };
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
                    // SAFETY: plain kill(2) of our own, not yet reaped, child.
                    unsafe { libc::kill(server.as_raw(), n) };
                }
                Ok(Recv::Msg(ToInit::TerminateTree, _)) => {
                    // kill(-1) from a pid namespace's init reaches every process in
                    // the namespace except the init itself.
                    // SAFETY: plain kill(2).
                    unsafe { libc::kill(-1, libc::SIGTERM) };
                }
                Ok(Recv::Msg(ToInit::Spec(_), _)) => {}
                Ok(Recv::Eof) | Err(_) => {
                    // The daemon is gone: nobody may control this sandbox any more.
                    return kill_all_and_wait(server);
                }
            }
        }
    }
}

fn kill_all_and_wait(server: Pid) -> Exit {
    // SAFETY: plain kill(2) of everything in our pid namespace.
    unsafe { libc::kill(-1, libc::SIGKILL) };
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

const STAGE_NPROC: u32 = 10;
const STAGE_LISTENER: u32 = 11;
/// Not a stage: the status message that carries the seccomp listener.
const MSG_LISTENER: u32 = u32::MAX;

const STAGES: [&str; 14] = [
    "start server",
    "unblock signals",
    "setsid",
    "set no_new_privs",
    "set securebits",
    "drop capability bounding set",
    "drop capabilities",
    "execve",
    "apply landlock",
    "install seccomp filter",
    "set RLIMIT_NPROC",
    "pass the seccomp listener",
    "install seccomp filter with a user-notification listener",
    "install seccomp filter with a user-notification listener and \
     SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV",
];
const STAGE_EXEC: u32 = 7;

/// Reports (stage, errno) on the status socket and exits.
unsafe fn child_fail(pipe: RawFd, stage: u32, errno: i32) -> ! {
    let mut buf = [0u8; 8];
    buf[..4].copy_from_slice(&stage.to_ne_bytes());
    buf[4..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: writing a stack buffer to our socket, then _exit.
    unsafe {
        libc::write(pipe, buf.as_ptr() as *const libc::c_void, buf.len());
        libc::_exit(127)
    }
}

/// Sends `fd` (SCM_RIGHTS) on the status socket as a [`MSG_LISTENER`] report.
/// Raw `sendmsg` on stack buffers: async-signal-safe, for the server child.
unsafe fn child_send_fd(sock: RawFd, fd: RawFd) -> Result<(), i32> {
    let mut buf = [0u8; 8];
    buf[..4].copy_from_slice(&MSG_LISTENER.to_ne_bytes());
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // u64 alignment is enough for cmsghdr; CMSG_SPACE(4) is 24 bytes.
    let mut cbuf = [0u64; 4];
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the
    // call, and the control buffer holds one cmsg with one int.
    unsafe {
        let mut hdr: libc::msghdr = std::mem::zeroed();
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        hdr.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let c = libc::CMSG_FIRSTHDR(&hdr);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd);
        loop {
            if libc::sendmsg(sock, &hdr, libc::MSG_NOSIGNAL) >= 0 {
                return Ok(());
            }
            let e = *libc::__errno_location();
            if e != libc::EINTR {
                return Err(e);
            }
        }
    }
}

/// One report from the server child: `None` at EOF (the exec happened), else
/// (stage, errno) and the fd it carried (received close-on-exec).
fn recv_status(sock: BorrowedFd<'_>) -> Result<Option<(u32, i32, Option<OwnedFd>)>, Errno> {
    let mut buf = [0u8; 8];
    let (n, fds) = crate::sys::fdpass::recv_with_fds(sock, &mut buf, false)
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    // At most one fd is expected; extra ones are closed when dropped here.
    let fd = fds.into_iter().next();
    if n == 0 {
        return Ok(None);
    }
    if n != buf.len() {
        return Err(Errno::EBADMSG);
    }
    let stage = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let errno = i32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]);
    Ok(Some((stage, errno, fd)))
}

/// The server, between fork and execve. Raw syscalls only.
///
/// # Safety
/// Must only be called in a freshly forked child; the pointers must be valid
/// NUL-terminated arrays of C strings.
unsafe fn server_child(
    pipe: RawFd,
    last_cap: u32,
    nproc: Option<u64>,
    confinement: &crate::confine::Confinement,
    program: &CString,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> ! {
    // SAFETY: for the whole body: async-signal-safe syscalls on data prepared before fork.
    unsafe {
        let errno = || *libc::__errno_location();
        // Default dispositions for everything (Rust ignores SIGPIPE; ignored signals
        // would survive execve), then an empty mask.
        for s in 1..=libc::SIGRTMAX() {
            if s != libc::SIGKILL && s != libc::SIGSTOP {
                libc::signal(s, libc::SIG_DFL);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) < 0 {
            child_fail(pipe, 1, errno());
        }
        // A new session: no controlling terminal, so no TIOCSTI-style injection
        // into a terminal outside.
        if libc::setsid() < 0 {
            child_fail(pipe, 2, errno());
        }
        // Nothing exec'd from here on may gain privileges (setuid bits, file caps).
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
            child_fail(pipe, 3, errno());
        }
        // Locked securebits: uid 0 (root caller) gets no capabilities on execve,
        // setuid transitions do not fix up caps, and none of this can be undone.
        let bits = libc::SECBIT_NOROOT
            | libc::SECBIT_NOROOT_LOCKED
            | libc::SECBIT_NO_SETUID_FIXUP
            | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
            | libc::SECBIT_KEEP_CAPS_LOCKED
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        if libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0) < 0 {
            child_fail(pipe, 4, errno());
        }
        // Empty bounding set (needs CAP_SETPCAP, so before capset).
        for cap in 0..=last_cap {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0 {
                child_fail(pipe, 5, errno());
            }
        }
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        ) < 0
        {
            child_fail(pipe, 6, errno());
        }
        if let Err(e) = sys::capset_empty() {
            child_fail(pipe, 6, e as i32);
        }
        // Every fd but 0/1/2 closes at exec (the status pipe must survive until then).
        if let Err(e) = sys::close_range_from(3, true) {
            child_fail(pipe, 0, e as i32);
        }
        if let Some(n) = nproc {
            let lim = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NPROC, &lim) < 0 {
                child_fail(pipe, STAGE_NPROC, errno());
            }
        }
        // Dumpable again (forked from PID 1, which is not): the daemon reads
        // the path of our own execve below from our memory when file auditing
        // is on, and an unprivileged daemon may only read a dumpable process
        // (this mm still belongs to the host's user namespace). Nothing else
        // runs in the sandbox yet, and execve sets it again for the server.
        if libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) < 0 {
            child_fail(pipe, 0, errno());
        }
        // Landlock, then the seccomp filter: the last things before execve.
        match confinement.apply() {
            Err((stage, e)) => child_fail(pipe, stage, e),
            Ok(Some(listener)) => {
                // To PID 1 (which forwards it to the daemon), then our copy
                // goes: the server must never hold the listener (with it, it
                // could answer its own refused calls). It is O_CLOEXEC too.
                let sent = child_send_fd(pipe, listener);
                libc::close(listener);
                if let Err(e) = sent {
                    child_fail(pipe, STAGE_LISTENER, e);
                }
            }
            Ok(None) => {}
        }
        libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
        child_fail(pipe, STAGE_EXEC, errno())
    }
}
