//! The init role's raw process steps, and the server child between fork
//! and execve: the one module of the crate outside `sys` that allows
//! `unsafe_code` (`lib.rs`).
//!
//! - [`enter`]: the init role takes the control socket the daemon placed at
//!   fd 3, and closes whatever else it inherited.
//! - [`fork`]: `fork(2)` in the init role, which is single-threaded
//!   ([`InitRole`]).
//! - [`spawn_server`]: PID 1 forks the server, which resets its signals,
//!   drops every privilege, applies Landlock and the seccomp filter
//!   ([`Confinement::apply`]) and execs. Between fork and execve it makes
//!   system calls only, on data prepared before the fork (no allocation, no
//!   lock), and reports a failure as a [`Stage`] and an errno on its status
//!   socket ([`recv_status`] reads it in PID 1).
//!
//! # Invariants
//!
//! The init role is a fresh `execve` of the daemon's binary that dispatches
//! to [`super::run`] before any thread or runtime exists
//! ([`super::entry_if_requested`]), and never starts a thread. So the
//! launcher and PID 1 are single-threaded for their whole lives, and an
//! [`InitRole`], made once by [`enter`] and never sent to another thread,
//! stands for that: [`fork`] takes one.

use crate::confine::Confinement;
use crate::control::Failure;
use crate::spec::SandboxSpec;
use crate::sys;
use nix::errno::Errno;
use nix::unistd::{ForkResult, Pid};
use std::ffi::CString;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

/// The control socket's fd number in the init process.
pub(crate) const CONTROL_FD: RawFd = 3;

/// Proof that this is the init role's process, single-threaded (see the
/// module's invariants). Made by [`enter`] only; neither `Send` nor `Sync`.
pub(super) struct InitRole {
    _single_threaded: PhantomData<*const ()>,
}

/// Starts the init role: takes ownership of the control socket at
/// [`CONTROL_FD`] (close-on-exec from now on) and closes every fd above it.
/// `None` when there is no fd 3 (the role started by hand, not by the
/// daemon). Call once, first thing in [`super::run`].
pub(super) fn enter() -> Option<(InitRole, OwnedFd)> {
    // SAFETY: F_GETFD only queries the fd flags.
    if unsafe { libc::fcntl(CONTROL_FD, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: fd 3 was placed by the daemon (`launch.rs`) for exactly this
    // role; we take ownership of it once, here.
    let sock = unsafe { OwnedFd::from_raw_fd(CONTROL_FD) };
    // Keep it off any exec; close anything else the daemon may have leaked to us.
    let _ = nix::fcntl::fcntl(
        &sock,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    // SAFETY: nothing of this process owns an fd above the control socket
    // yet: we are its first Rust code after `main`'s dispatch.
    let _ = unsafe { sys::process::close_from(CONTROL_FD as u32 + 1) };
    Some((
        InitRole {
            _single_threaded: PhantomData,
        },
        sock,
    ))
}

/// `fork(2)` in the init role: the child may run any code, as the process
/// it copies has no other thread.
pub(super) fn fork(_role: &InitRole) -> Result<ForkResult, Errno> {
    // SAFETY: an `InitRole` exists only in the init role's process, which is
    // single-threaded (the module's invariants): no lock can be held by a
    // thread the child lacks.
    unsafe { nix::unistd::fork() }
}

/// `clone3(CLONE_PARENT)` in the init role's fork server
/// ([`super::forkserver`]): a `fork(2)` whose child is the child of our
/// parent (the daemon), which can then wait for it, signal it and read its
/// exit status as for the init it would otherwise have started itself.
/// `Ok(None)` in the child, `Ok(Some(pid))` in the fork server. Falls back to
/// `clone(2)` with the same flags where `clone3` is refused (ENOSYS: a
/// seccomp filter of a service manager may do that to older system calls'
/// callers).
///
/// Unlike glibc's `fork`, neither the `atfork` handlers nor glibc's own
/// fix-ups of the child run, and the child's thread control block keeps the
/// fork server's thread id. The child only runs the init role's code, which
/// registers no handlers, takes no `pthread` lock that records its owner's
/// id, and itself forks through glibc (whose child sets its own id again):
/// nothing it does reads the stale id.
pub(super) fn fork_for_parent(_role: &InitRole) -> Result<Option<Pid>, Errno> {
    let mut args: libc::clone_args = {
        // SAFETY: clone_args is plain integers; all-zero is "no option".
        unsafe { std::mem::zeroed() }
    };
    // No exit signal of its own: with CLONE_PARENT the kernel gives the
    // child ours (SIGCHLD, as the daemon started us), and clone3 refuses
    // one (EINVAL).
    args.flags = libc::CLONE_PARENT as u64;
    // SAFETY: the init role is single-threaded (`InitRole`), so the copy the
    // child gets holds no lock of another thread; with no stack given, the
    // child continues on its copy of ours, as after fork(2). The struct
    // outlives the call, and its size is the one passed.
    let mut r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        )
    };
    if r < 0 && Errno::last() == Errno::ENOSYS {
        // SAFETY: as above; clone(2) with a null stack and no pointer
        // arguments (their order differs between architectures; all zero).
        r = unsafe {
            libc::syscall(
                libc::SYS_clone,
                libc::CLONE_PARENT as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        };
    }
    match r {
        r if r < 0 => Err(Errno::last()),
        0 => Ok(None),
        pid => Ok(Some(Pid::from_raw(pid as libc::pid_t))),
    }
}

/// In a child of the fork server: places a launch's stdio on fds 0, 1 and
/// 2 and its control socket on [`CONTROL_FD`] (over the fork server's own
/// socket, `server`, whose copy the child must not keep), closes every
/// other fd, and returns the control socket: the state a freshly started
/// init is in after [`enter`].
pub(super) fn take_launch_fds(
    server: OwnedFd,
    stdio: [OwnedFd; 3],
    control: OwnedFd,
) -> Result<OwnedFd, Errno> {
    use std::os::fd::IntoRawFd;
    // The fds move to their places; the originals above them are closed
    // below by number, so no owner may close them again.
    let server = server.into_raw_fd();
    let stdio = stdio.map(IntoRawFd::into_raw_fd);
    let control = control.into_raw_fd();
    for (fd, target) in stdio.into_iter().zip(0..) {
        // SAFETY: dup2 onto 0..=2, which the fork server holds open on
        // /dev/null; the sources are fds received for this launch (above
        // CONTROL_FD, as 0..=3 are taken), never one of the targets.
        if unsafe { libc::dup2(fd, target) } < 0 {
            return Err(Errno::last());
        }
    }
    // SAFETY: as above; this replaces the fork server's socket at
    // CONTROL_FD (`server`, given up above) in this child only.
    if unsafe { libc::dup3(control, CONTROL_FD, libc::O_CLOEXEC) } < 0 {
        return Err(Errno::last());
    }
    debug_assert_eq!(server, CONTROL_FD);
    // SAFETY: every fd above CONTROL_FD in this child is one of the
    // originals given up above or was the fork server's: nothing owns them.
    unsafe { sys::process::close_from(CONTROL_FD as u32 + 1) }?;
    // SAFETY: CONTROL_FD now holds the launch's control socket, owned by
    // nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(CONTROL_FD) })
}

/// `_exit(2)`: ends a forked copy without running the destructors or
/// `atexit` handlers of the process it was copied from.
pub(super) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes an integer and never returns.
    unsafe { libc::_exit(code) }
}

/// The steps of the server child, as it reports a failure (the number on the
/// status socket; [`Stage::as_str`] names it in the [`Failure`]). Also the
/// stages [`Confinement::apply`] fails at.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Not a step of the child: the status socket broke, or a report named
    /// no stage.
    Start = 0,
    UnblockSignals = 1,
    Setsid = 2,
    NoNewPrivs = 3,
    Securebits = 4,
    BoundingSet = 5,
    Capabilities = 6,
    Exec = 7,
    Landlock = 8,
    Seccomp = 9,
    Nproc = 10,
    PassListener = 11,
    SeccompListener = 12,
    SeccompWaitKillable = 13,
    CloseFds = 14,
    Dumpable = 15,
}

impl Stage {
    const ALL: [Stage; 16] = [
        Stage::Start,
        Stage::UnblockSignals,
        Stage::Setsid,
        Stage::NoNewPrivs,
        Stage::Securebits,
        Stage::BoundingSet,
        Stage::Capabilities,
        Stage::Exec,
        Stage::Landlock,
        Stage::Seccomp,
        Stage::Nproc,
        Stage::PassListener,
        Stage::SeccompListener,
        Stage::SeccompWaitKillable,
        Stage::CloseFds,
        Stage::Dumpable,
    ];

    /// The stage a report's number names, if any.
    pub(super) fn from_raw(n: u32) -> Option<Stage> {
        Stage::ALL.iter().copied().find(|s| *s as u32 == n)
    }

    /// What failed, for the [`Failure`]'s stage. A `match` on constants:
    /// async-signal-safe.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stage::Start => "start server",
            Stage::UnblockSignals => "unblock signals",
            Stage::Setsid => "setsid",
            Stage::NoNewPrivs => "set no_new_privs",
            Stage::Securebits => "set securebits",
            Stage::BoundingSet => "drop capability bounding set",
            Stage::Capabilities => "drop capabilities",
            Stage::Exec => "execve",
            Stage::Landlock => "apply landlock",
            Stage::Seccomp => "install seccomp filter",
            Stage::Nproc => "set RLIMIT_NPROC",
            Stage::PassListener => "pass the seccomp listener",
            Stage::SeccompListener => "install seccomp filter with a user-notification listener",
            Stage::SeccompWaitKillable => {
                "install seccomp filter with a user-notification listener and \
                 SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"
            }
            Stage::CloseFds => "mark inherited fds close-on-exec",
            Stage::Dumpable => "set dumpable",
        }
    }
}

/// Not a stage: the status message that says the seccomp listener went to
/// the daemon (it carries no fd: the child sends the listener itself).
pub(super) const MSG_LISTENER: u32 = u32::MAX;

/// Forks the server child, which execs `args` with every privilege dropped
/// and `confinement` applied, or reports why not on `status.1` (the write
/// end; `status.0`, the read end, is closed in the child). Returns its pid
/// and the read end; the write end is closed here once the child has it.
/// `nproc`: RLIMIT_NPROC for the server.
pub(super) fn spawn_server(
    role: &InitRole,
    control: BorrowedFd<'_>,
    status: (OwnedFd, OwnedFd),
    last_cap: u32,
    nproc: Option<u64>,
    confinement: &Confinement,
    args: &ExecArgs,
) -> Result<(Pid, OwnedFd), Errno> {
    let (rd, wr) = status;
    match fork(role)? {
        ForkResult::Child => {
            drop(rd);
            // SAFETY: a child just forked from the single-threaded PID 1, with
            // `args` prepared before the fork; never returns.
            unsafe {
                server_child(
                    wr.as_raw_fd(),
                    control.as_raw_fd(),
                    last_cap,
                    nproc,
                    confinement,
                    args,
                )
            }
        }
        ForkResult::Parent { child } => {
            drop(wr);
            Ok((child, rd))
        }
    }
}

/// Prepared execve arguments (allocated before the fork): the C strings and
/// the NULL-terminated pointer arrays over them that `execve` takes (moving
/// the struct moves no string: the pointers stay valid while it lives).
pub(super) struct ExecArgs {
    program: CString,
    _argv: Vec<CString>,
    _envp: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    envp_ptrs: Vec<*const libc::c_char>,
}

impl ExecArgs {
    /// The spec's program, argv and environment, checked (no NUL byte, no
    /// `=` in a name, a non-empty argv).
    pub(super) fn new(spec: &SandboxSpec) -> Result<ExecArgs, Failure> {
        exec_args(spec)
    }
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
    let nul_terminated = |v: &[CString]| {
        let mut p: Vec<*const libc::c_char> = v.iter().map(|a| a.as_ptr()).collect();
        p.push(std::ptr::null());
        p
    };
    Ok(ExecArgs {
        program,
        argv_ptrs: nul_terminated(&argv),
        envp_ptrs: nul_terminated(&envp),
        _argv: argv,
        _envp: envp,
    })
}

/// Reports (stage, errno) on the status socket and exits. Async-signal-safe:
/// a stack buffer, `write` and `_exit`.
fn child_fail(pipe: RawFd, stage: Stage, errno: i32) -> ! {
    let mut buf = [0u8; 8];
    buf[..4].copy_from_slice(&(stage as u32).to_ne_bytes());
    buf[4..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: writing a stack buffer to our socket, then _exit.
    unsafe {
        libc::write(pipe, buf.as_ptr() as *const libc::c_void, buf.len());
        libc::_exit(127)
    }
}

/// Sends one message of `payload` on `sock`, with `fd` attached
/// (SCM_RIGHTS) when there is one. Raw `sendmsg` on stack buffers:
/// async-signal-safe, for the server child.
fn child_send(sock: RawFd, payload: &[u8], fd: Option<RawFd>) -> Result<(), i32> {
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    // u64 alignment is enough for cmsghdr; CMSG_SPACE(4) is 24 bytes.
    let mut cbuf = [0u64; 4];
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the
    // call (sendmsg only reads through `iov_base`), and the control buffer
    // holds one cmsg with one int.
    unsafe {
        let mut hdr: libc::msghdr = std::mem::zeroed();
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        if let Some(fd) = fd {
            hdr.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
            hdr.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
            let c = libc::CMSG_FIRSTHDR(&hdr);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd);
        }
        // These exact flags: the transparent-egress filter, installed by now,
        // lets them through unnotified (nobody holds the listener yet to
        // answer it). Non-blocking: a full socket is retried.
        let flags = crate::confine::seccomp::LISTENER_SEND_FLAGS;
        loop {
            if libc::sendmsg(sock, &hdr, flags) >= 0 {
                return Ok(());
            }
            let e = Errno::last_raw();
            if e == libc::EAGAIN {
                libc::sched_yield();
            } else if e != libc::EINTR {
                return Err(e);
            }
        }
    }
}

/// One report from the server child: `None` at EOF (the exec happened), else
/// (stage, errno) and the fd it carried (received close-on-exec).
pub(super) fn recv_status(
    sock: BorrowedFd<'_>,
) -> Result<Option<(u32, i32, Option<OwnedFd>)>, Errno> {
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
/// Only in a child just forked from the single-threaded PID 1 ([`spawn_server`]),
/// which never returns from here: it execs or `_exit`s. `args` was built before
/// the fork (its pointer arrays name its own C strings).
unsafe fn server_child(
    pipe: RawFd,
    control: RawFd,
    last_cap: u32,
    nproc: Option<u64>,
    confinement: &Confinement,
    args: &ExecArgs,
) -> ! {
    // SAFETY: for the whole body: async-signal-safe syscalls on data prepared before fork.
    unsafe {
        let errno = Errno::last_raw;
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
            child_fail(pipe, Stage::UnblockSignals, errno());
        }
        // A new session: no controlling terminal, so no TIOCSTI-style injection
        // into a terminal outside.
        if libc::setsid() < 0 {
            child_fail(pipe, Stage::Setsid, errno());
        }
        // Nothing exec'd from here on may gain privileges (setuid bits, file caps).
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
            child_fail(pipe, Stage::NoNewPrivs, errno());
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
            child_fail(pipe, Stage::Securebits, errno());
        }
        // Empty bounding set (needs CAP_SETPCAP, so before capset).
        for cap in 0..=last_cap {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0 {
                child_fail(pipe, Stage::BoundingSet, errno());
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
            child_fail(pipe, Stage::Capabilities, errno());
        }
        if let Err(e) = sys::process::capset_empty() {
            child_fail(pipe, Stage::Capabilities, e as i32);
        }
        // Every fd but 0/1/2 closes at exec (the status pipe must survive until then).
        if let Err(e) = sys::process::cloexec_from(3) {
            child_fail(pipe, Stage::CloseFds, e as i32);
        }
        if let Some(n) = nproc {
            let lim = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NPROC, &lim) < 0 {
                child_fail(pipe, Stage::Nproc, errno());
            }
        }
        // Dumpable again (forked from PID 1, which is not): the daemon reads
        // the path of our own execve below from our memory when file auditing
        // is on, and an unprivileged daemon may only read a dumpable process
        // (this mm still belongs to the host's user namespace). Nothing else
        // runs in the sandbox yet, and execve sets it again for the server.
        if libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) < 0 {
            child_fail(pipe, Stage::Dumpable, errno());
        }
        // Landlock, then the seccomp filter: the last things before execve.
        match confinement.apply() {
            Err((stage, e)) => child_fail(pipe, stage, e),
            Ok(Some(listener)) => {
                // Straight to the daemon, on PID 1's control socket (which
                // we hold until execve: it is close-on-exec), so that the
                // execve below, which waits on whoever holds the listener,
                // waits for no hop through PID 1. Then our copy goes: the
                // server must never hold the listener (with it, it could
                // answer its own refused calls). It is O_CLOEXEC too.
                let sent = child_send(
                    control,
                    crate::control::LISTENER_MSG,
                    Some(listener.as_raw_fd()),
                );
                drop(listener);
                if let Err(e) = sent {
                    child_fail(pipe, Stage::PassListener, e);
                }
                // PID 1 checks that a filter that notifies was handed over.
                let mut buf = [0u8; 8];
                buf[..4].copy_from_slice(&MSG_LISTENER.to_ne_bytes());
                if let Err(e) = child_send(pipe, &buf, None) {
                    child_fail(pipe, Stage::PassListener, e);
                }
            }
            Ok(None) => {}
        }
        libc::execve(
            args.program.as_ptr(),
            args.argv_ptrs.as_ptr(),
            args.envp_ptrs.as_ptr(),
        );
        child_fail(pipe, Stage::Exec, errno())
    }
}
