//! Processes and their credentials: pidfds, `kill`, capabilities,
//! `close_range`, and starting the sandbox init with its control socket
//! placed ([`spawn_with_fds`]). The launcher and PID 1 use them, the daemon signals PID 1 through
//! its pidfd, and the notifier threads drop their effective capabilities.

use super::{fd_result, unit_result};
use nix::errno::Errno;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// `pidfd_open(pid, 0)`.
pub(crate) fn pidfd_open(pid: libc::pid_t) -> Result<OwnedFd, Errno> {
    // SAFETY: plain integers; the fd returned is ours.
    fd_result(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })
}

/// `pidfd_getfd(pidfd, fd, 0)`: a duplicate of another process's fd (the same
/// open file description), close-on-exec. Needs ptrace access to it.
pub(crate) fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: RawFd) -> Result<OwnedFd, Errno> {
    // SAFETY: plain integers; the fd returned is ours.
    fd_result(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) })
}

/// `pidfd_send_signal(pidfd, sig, NULL, 0)`: signals exactly the process the pidfd
/// was opened for, never a process that later reused its pid.
pub(crate) fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: i32) -> Result<(), Errno> {
    // SAFETY: a NULL siginfo is allowed (the kernel fills in a SI_USER one).
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `capset` with empty effective, permitted and inheritable sets.
pub(crate) fn capset_empty() -> Result<(), Errno> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: header and two data structs as required by version 3.
    unit_result(unsafe {
        libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr())
    })
}

/// Clears the calling thread's effective capability set (permitted and
/// inheritable kept): only this thread, as capabilities are per thread.
pub(crate) fn drop_effective_caps() -> Result<(), Errno> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and two data structs as required by version 3.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut hdr as *mut CapHeader,
            data.as_mut_ptr(),
        )
    })?;
    for d in &mut data {
        d.effective = 0;
    }
    // SAFETY: as above; the new effective set is a subset of the permitted one.
    unit_result(unsafe {
        libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr())
    })
}

/// `kill(pid, sig)`, with any signal number (the daemon forwards what the
/// client sent; `nix`'s `Signal` has no real-time signals) and any pid
/// (`-1`: every process the caller may signal; from a pid namespace's init,
/// every other process of the namespace).
pub(crate) fn kill(pid: libc::pid_t, sig: i32) -> Result<(), Errno> {
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    unit_result(libc::c_long::from(unsafe { libc::kill(pid, sig) }))
}

/// Marks every fd >= `first` close-on-exec (`CLOSE_RANGE_CLOEXEC`): they
/// stay open until the next `execve`, which then closes them.
pub(crate) fn cloexec_from(first: u32) -> Result<(), Errno> {
    // SAFETY: only sets FD_CLOEXEC; no fd is closed before the exec.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    })
}

/// Closes every fd >= `first` (`close_range`).
///
/// # Safety
/// No fd >= `first` may be owned by anything that still uses or closes it
/// (an `OwnedFd`, a `File`...): for a process that has just started and
/// owns nothing above `first` yet (the sandbox init, closing what the
/// daemon may have leaked to it).
pub(crate) unsafe fn close_from(first: u32) -> Result<(), Errno> {
    // SAFETY: the caller guarantees nothing owns these fds.
    unit_result(unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) })
}

/// Replaces fds 0, 1 and 2 with `fd` (e.g. /dev/null), dropping whatever they were.
pub(crate) fn dup_over_stdio(fd: BorrowedFd<'_>) {
    let _ = nix::unistd::dup2_stdin(fd);
    let _ = nix::unistd::dup2_stdout(fd);
    let _ = nix::unistd::dup2_stderr(fd);
}

/// A child started by [`spawn_with_fds`], not yet reaped, or reaped once
/// (its status kept, as [`std::process::Child`] does).
#[derive(Debug)]
pub(crate) struct SpawnedChild {
    pid: libc::pid_t,
    status: Option<std::process::ExitStatus>,
}

impl SpawnedChild {
    /// A child of ours that another process started for us with
    /// `CLONE_PARENT` (the init role's fork server): checked to be our own
    /// child, not yet reaped (`waitid` with `WNOWAIT` answers ECHILD for
    /// any other pid, and leaves an exited one to [`SpawnedChild::wait`]).
    pub(crate) fn adopt(pid: libc::pid_t) -> std::io::Result<SpawnedChild> {
        use nix::sys::wait::{waitid, Id, WaitPidFlag};
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        if pid <= 0 {
            return Err(std::io::Error::from_raw_os_error(libc::ECHILD));
        }
        loop {
            match waitid(Id::Pid(nix::unistd::Pid::from_raw(pid)), flags) {
                Ok(_) => return Ok(SpawnedChild { pid, status: None }),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    pub(crate) fn id(&self) -> u32 {
        self.pid as u32
    }

    /// SIGKILL, until it has been reaped (our own unreaped child: its pid
    /// cannot have been reused).
    pub(crate) fn kill(&mut self) -> std::io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        kill(self.pid, libc::SIGKILL).map_err(std::io::Error::from)
    }

    /// Reaps it if it has exited, without waiting: `Ok(false)` while it
    /// runs.
    pub(crate) fn try_wait(&mut self) -> std::io::Result<bool> {
        use std::os::unix::process::ExitStatusExt;
        if self.status.is_some() {
            return Ok(true);
        }
        let mut raw: libc::c_int = 0;
        loop {
            // SAFETY: waitpid writes the status into our stack integer.
            match unsafe { libc::waitpid(self.pid, &mut raw, libc::WNOHANG) } {
                0 => return Ok(false),
                r if r > 0 => {
                    self.status = Some(std::process::ExitStatus::from_raw(raw));
                    return Ok(true);
                }
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Blocking: reaps it (once; later calls return the same status).
    pub(crate) fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        if let Some(st) = self.status {
            return Ok(st);
        }
        let mut raw: libc::c_int = 0;
        loop {
            // SAFETY: waitpid writes the status into our stack integer.
            if unsafe { libc::waitpid(self.pid, &mut raw, 0) } >= 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        let st = std::process::ExitStatus::from_raw(raw);
        self.status = Some(st);
        Ok(st)
    }
}

/// Starts `exe` with `argv` and an empty environment, `stdio` as its fds
/// 0, 1 and 2 and `fd` as its fd `target` (above 2), our close-on-exec fds
/// closed at its exec (one another thread made without `O_CLOEXEC` would
/// reach it, as with std; the init role closes every fd above its control
/// socket first thing, `init::exec::enter`), an empty signal mask
/// and SIGPIPE at its default: what [`std::process::Command`] makes with
/// `env_clear`, the stdio and a `pre_exec` `dup2`, but with `posix_spawn`,
/// whose `CLONE_VM|CLONE_VFORK` child shares our memory until its execve.
/// A `pre_exec` step makes std fork instead, and a fork of the daemon
/// copies the page tables of every thread's memory and leaves the daemon
/// to take a copy-on-write fault on each page it writes next: a cost on
/// every sandbox launch that grows with the daemon. A failed execve is
/// this call's error (glibc reports it before returning).
pub(crate) fn spawn_with_fds(
    exe: &std::path::Path,
    argv: &[&std::ffi::CStr],
    stdio: [BorrowedFd<'_>; 3],
    fd: BorrowedFd<'_>,
    target: RawFd,
) -> std::io::Result<SpawnedChild> {
    use std::os::unix::ffi::OsStrExt;
    let io_err = |e: libc::c_int| std::io::Error::from_raw_os_error(e);
    if target <= 2 {
        return Err(io_err(libc::EINVAL));
    }
    let path =
        std::ffi::CString::new(exe.as_os_str().as_bytes()).map_err(|_| io_err(libc::EINVAL))?;
    // Sources that are themselves target numbers (0..=target) are first
    // moved above them, so no dup2 below overwrites a source still to be
    // placed (and none is a dup2 onto itself, which would keep
    // FD_CLOEXEC).
    let mut moved: Vec<OwnedFd> = Vec::new();
    let mut source = |f: BorrowedFd<'_>| -> std::io::Result<RawFd> {
        if f.as_raw_fd() > target {
            return Ok(f.as_raw_fd());
        }
        let dup = nix::fcntl::fcntl(f, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(target + 1))
            .map_err(std::io::Error::from)?;
        // SAFETY: F_DUPFD_CLOEXEC returned a new fd that nothing else owns.
        let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(dup) };
        let raw = owned.as_raw_fd();
        moved.push(owned);
        Ok(raw)
    };
    let places = [
        (source(stdio[0])?, 0),
        (source(stdio[1])?, 1),
        (source(stdio[2])?, 2),
        (source(fd)?, target),
    ];
    let mut argv_ptrs: Vec<*mut libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr() as *mut libc::c_char)
        .collect();
    argv_ptrs.push(std::ptr::null_mut());
    let envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
    // SAFETY: the attribute and file-action objects are initialised before
    // use and destroyed on every path; every pointer passed (path, argv,
    // envp, the sigsets) outlives the posix_spawn call; the fds named are
    // open (borrowed or held in `moved`) until it returns.
    unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        let e = libc::posix_spawnattr_init(&mut attr);
        if e != 0 {
            return Err(io_err(e));
        }
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        let e = libc::posix_spawn_file_actions_init(&mut actions);
        if e != 0 {
            libc::posix_spawnattr_destroy(&mut attr);
            return Err(io_err(e));
        }
        let result = (|| {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            let mut pipe: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut pipe);
            libc::sigaddset(&mut pipe, libc::SIGPIPE);
            for e in [
                libc::posix_spawnattr_setsigmask(&mut attr, &empty),
                libc::posix_spawnattr_setsigdefault(&mut attr, &pipe),
                libc::posix_spawnattr_setflags(
                    &mut attr,
                    (libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF) as libc::c_short,
                ),
            ] {
                if e != 0 {
                    return Err(io_err(e));
                }
            }
            for (from, to) in places {
                let e = libc::posix_spawn_file_actions_adddup2(&mut actions, from, to);
                if e != 0 {
                    return Err(io_err(e));
                }
            }
            let mut pid: libc::pid_t = 0;
            let e = libc::posix_spawn(
                &mut pid,
                path.as_ptr(),
                &actions,
                &attr,
                argv_ptrs.as_ptr(),
                envp.as_ptr(),
            );
            if e != 0 {
                return Err(io_err(e));
            }
            Ok(SpawnedChild { pid, status: None })
        })();
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::posix_spawnattr_destroy(&mut attr);
        drop(moved);
        result
    }
}
