//! The daemon side: start the sandbox init (a re-exec of a binary that calls
//! [`crate::init_entry_if_requested`] first thing in `main`), hand it the spec, and
//! control the running sandbox.
//!
//! ```text
//! daemon ──socketpair (fd 3)──▶ launcher (host pid ns, new user ns)
//!                                  └─ PID 1 (new pid/mount/net/ipc/uts/cgroup ns)
//!                                       └─ server (execve, no privileges)
//! ```
//! PID 1 is signalled only through a pidfd the launcher passes back, so a recycled
//! pid can never be hit. Server signals and tree-wide SIGTERM go through PID 1 as
//! control messages. The server child passes the seccomp listener (on PID 1's
//! control socket, before its execve); the sandbox answers it on the shared notifier pool ([`crate::supervise::notify`]) whether or not anyone
//! reads the refused calls ([`Spawned::refused`]).
//!
//! Nothing here needs a thread per sandbox to notice its end: the control
//! socket ([`Sandbox::ended`]) becomes readable when PID 1 reports the
//! server's exit, which it does only once every other process of the pid
//! namespace is killed and reaped (or at its end, when it was killed), so an
//! event loop can wait on it and then call [`Sandbox::wait`], which no
//! longer blocks for long. The launcher's pidfd ([`Sandbox::exit_fd`])
//! becomes readable when the namespaces' teardown is over and the launcher
//! can be reaped ([`Sandbox::reap`]).

use crate::control::{self, Exit, Failure, FromInit, Recv, ToInit};
use crate::init;
use crate::spec::SandboxSpec;
use crate::supervise::classify::{FileAccesses, Watch};
use crate::supervise::notify::{Notifier, RefusedCalls, Wake};
use crate::sys;
use nix::errno::Errno;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use sys::process::SpawnedChild;

/// How the server (PID 1's child) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitOutcome {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl From<Exit> for ExitOutcome {
    fn from(e: Exit) -> Self {
        match e {
            Exit::Code(c) => ExitOutcome::Code(c),
            Exit::Signal(s) => ExitOutcome::Signal(s),
        }
    }
}

/// Errors of the sandbox launch and control. Setup failures carry the stage and the
/// child's own message.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The launch's gate refused to release the server (the daemon could not
    /// make its record durable): nothing was executed.
    #[error("the server was not started: {0}")]
    Release(#[source] std::io::Error),
    #[error("cannot start the sandbox init {}: {source}", exe.display())]
    Start {
        exe: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "unprivileged user namespaces are not available: {message}; check \
         kernel.unprivileged_userns_clone / apparmor_restrict_unprivileged_userns"
    )]
    UserNamespaceUnavailable { errno: i32, message: String },
    #[error("sandbox setup failed at {stage}: {message}")]
    Setup {
        stage: String,
        errno: Option<i32>,
        message: String,
    },
    #[error("cannot execute {program}: {message}")]
    Exec {
        program: String,
        errno: i32,
        message: String,
    },
    #[error("sandbox init exited before the server started ({status})")]
    InitDied { status: String },
    #[error("sandbox control channel: {0}")]
    Control(#[source] std::io::Error),
    #[error("sandbox control protocol: {0}")]
    Protocol(String),
}

impl From<Failure> for SandboxError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::UserNamespace { errno } => SandboxError::UserNamespaceUnavailable {
                errno,
                message: sys::errno_text(Errno::from_raw(errno)),
            },
            Failure::Exec { program, errno } => SandboxError::Exec {
                program,
                errno,
                message: sys::errno_text(Errno::from_raw(errno)),
            },
            Failure::Setup {
                stage,
                errno,
                message,
            } => SandboxError::Setup {
                stage,
                errno,
                message,
            },
        }
    }
}

fn control(e: Errno) -> SandboxError {
    SandboxError::Control(std::io::Error::from_raw_os_error(e as i32))
}

/// Launcher process and the server's outcome, behind one lock: `wait` holds it while
/// blocking, a second waiter then sees the cached outcome.
struct WaitState {
    launcher: SpawnedChild,
    outcome: Option<ExitOutcome>,
    /// PID 1's `Exited` report when it came before the launcher's `Launched`
    /// (a server that dies at once while the launcher is not scheduled):
    /// read by the start loop, kept for [`Sandbox::wait`].
    exited: Option<ExitOutcome>,
    /// Answers the seccomp listener; `None` without user notification.
    /// Stopped once the sandbox is gone.
    notifier: Option<Notifier>,
}

/// A running sandbox. `Send + Sync`: control calls may come from any thread while
/// another blocks in [`Sandbox::wait`].
pub struct Sandbox {
    sock: OwnedFd,
    pidfd: OwnedFd,
    /// The launcher's pidfd: readable once it has exited.
    launcher_pidfd: OwnedFd,
    pid: u32,
    state: Mutex<WaitState>,
    /// Rung when the notifier queues for a consumer that asked for it.
    wake: Option<Arc<Wake>>,
}

/// A sandbox that has started, and the channels it came with. Each is handed
/// out here, once, to whoever spawned it; none has to be used (refused calls
/// are answered and file accesses let through either way, and with the proxy
/// listener dropped the port is closed).
#[derive(Debug)]
pub struct Spawned {
    pub sandbox: Sandbox,
    /// The refused calls; `None` without user notification (the spec's
    /// [`Layers::notify`](crate::spec::Layers::notify)). The queue
    /// disconnects when [`Sandbox::wait`] returns.
    pub refused: Option<RefusedCalls>,
    /// The observed file accesses, when the layers watch them
    /// ([`Layers::watch_files`](crate::spec::Layers::watch_files)) or guard
    /// creations (then only the guard's refusals, at level `off`). The queue
    /// disconnects when [`Sandbox::wait`] returns.
    pub files: Option<FileAccesses>,
    /// The egress proxy's listening socket (TCP, `127.0.0.1:<proxy_port>`
    /// inside the sandbox's network namespace); `None` without `proxy_port`.
    pub proxy_listener: Option<OwnedFd>,
    /// The sandbox's resolver socket (UDP, `127.0.0.53:53` inside its network
    /// namespace); `None` without [`SandboxSpec::resolver`].
    pub resolver: Option<OwnedFd>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// Starts `exe` as the init role ([`init::INIT_ARG`]): `stdio` its fds 0, 1
/// and 2, `control` its fd [`init::CONTROL_FD`], with an empty environment
/// (the daemon's never reaches the sandbox) and without forking the caller
/// ([`sys::process::spawn_with_fds`]).
fn start_init(
    exe: &Path,
    stdio: [std::os::fd::BorrowedFd<'_>; 3],
    control: std::os::fd::BorrowedFd<'_>,
) -> std::io::Result<SpawnedChild> {
    use std::os::unix::ffi::OsStrExt;
    let argv0 = std::ffi::CString::new(exe.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let arg1 = std::ffi::CString::new(init::INIT_ARG)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    sys::process::spawn_with_fds(
        exe,
        &[argv0.as_c_str(), arg1.as_c_str()],
        stdio,
        control,
        init::CONTROL_FD,
    )
}

/// How a launch gets its init: a fresh `execve` of the binary, or a fork
/// of the [`ForkServer`] started from it.
#[derive(Clone, Copy)]
enum Start<'a> {
    Exec(&'a Path),
    Fork(&'a ForkServer),
}

impl Start<'_> {
    fn exe(&self) -> &Path {
        match self {
            Start::Exec(exe) => exe,
            Start::Fork(f) => &f.exe,
        }
    }

    fn init(
        &self,
        stdio: [std::os::fd::BorrowedFd<'_>; 3],
        control: std::os::fd::BorrowedFd<'_>,
    ) -> std::io::Result<SpawnedChild> {
        match self {
            Start::Exec(exe) => start_init(exe, stdio, control),
            Start::Fork(f) => f.start_init(stdio, control),
        }
    }
}

/// The init role's fork server (`init::forkserver`), for a daemon that
/// launches many sandboxes: started once from `exe` (the binary that would
/// otherwise be executed for every launch), it forks each launcher as the
/// daemon's own child, which saves the `execve` of the daemon's binary per
/// launch. Launches through it are the same sandbox in every respect; only
/// where the launcher's process image comes from differs.
///
/// Started at the first launch (or by [`ForkServer::warm`]); when it is
/// gone (killed, crashed) the next launch starts a new one. Launches are
/// served one at a time (a fork each: a tenth of a millisecond).
pub struct ForkServer {
    exe: PathBuf,
    running: Mutex<Option<Running>>,
}

/// A started fork server: our end of its socket, and the process.
struct Running {
    sock: OwnedFd,
    child: SpawnedChild,
}

impl Drop for Running {
    /// Closing our end ends it (EOF); it is killed too, in case it is not
    /// reading, and reaped.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why a launch through the fork server did not happen.
enum ForkError {
    /// The fork server is gone (or answered nonsense): start another.
    Gone(std::io::Error),
    /// It answered that the fork failed (e.g. EAGAIN at the process limit).
    Failed(std::io::Error),
}

impl ForkServer {
    /// A fork server for `exe`; nothing is started yet.
    pub fn new(exe: &Path) -> ForkServer {
        ForkServer {
            exe: exe.to_path_buf(),
            running: Mutex::new(None),
        }
    }

    /// Blocking. Starts the fork server now if it is not running, so the
    /// first launch does not wait for it.
    pub fn warm(&self) -> Result<(), SandboxError> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if running.is_none() {
            *running = Some(self.start().map_err(|source| SandboxError::Start {
                exe: self.exe.clone(),
                source,
            })?);
        }
        Ok(())
    }

    /// The fork server's pid, when one runs (for tests and diagnostics).
    pub fn pid(&self) -> Option<u32> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.as_ref().map(|r| r.child.id())
    }

    fn start(&self) -> std::io::Result<Running> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        use std::os::unix::ffi::OsStrExt;
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        let invalid = |_| std::io::Error::from_raw_os_error(libc::EINVAL);
        let argv0 = std::ffi::CString::new(self.exe.as_os_str().as_bytes()).map_err(invalid)?;
        let arg1 = std::ffi::CString::new(init::FORKSERVER_ARG).map_err(invalid)?;
        let child = sys::process::spawn_with_fds(
            &self.exe,
            &[argv0.as_c_str(), arg1.as_c_str()],
            [null.as_fd(), null.as_fd(), null.as_fd()],
            theirs.as_fd(),
            init::CONTROL_FD,
        )?;
        Ok(Running { sock: ours, child })
    }

    /// Blocking. A launcher with `stdio` on its fds 0-2 and `control` on
    /// fd 3, forked by the fork server (started or restarted as needed).
    fn start_init(
        &self,
        stdio: [std::os::fd::BorrowedFd<'_>; 3],
        control: std::os::fd::BorrowedFd<'_>,
    ) -> std::io::Result<SpawnedChild> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        // A fork server found gone is replaced once per launch.
        let mut restarted = false;
        loop {
            let r = match running.as_mut() {
                Some(r) => r,
                None => running.insert(self.start()?),
            };
            match r.launch(stdio, control) {
                Ok(child) => return Ok(child),
                Err(ForkError::Failed(e)) => return Err(e),
                Err(ForkError::Gone(e)) => {
                    // Reaps it (Drop).
                    *running = None;
                    if restarted {
                        return Err(e);
                    }
                    restarted = true
                }
            }
        }
    }
}

impl Running {
    fn launch(
        &mut self,
        stdio: [std::os::fd::BorrowedFd<'_>; 3],
        control: std::os::fd::BorrowedFd<'_>,
    ) -> Result<SpawnedChild, ForkError> {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
        use std::os::fd::AsRawFd;
        let fds = [
            stdio[0].as_raw_fd(),
            stdio[1].as_raw_fd(),
            stdio[2].as_raw_fd(),
            control.as_raw_fd(),
        ];
        let iov = [std::io::IoSlice::new(init::LAUNCH)];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        let gone = |e: Errno| ForkError::Gone(std::io::Error::from(e));
        loop {
            match sendmsg::<()>(
                self.sock.as_raw_fd(),
                &iov,
                &cmsg,
                MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Ok(_) => break,
                Err(Errno::EINTR) => {}
                Err(e) => return Err(gone(e)),
            }
        }
        match control::recv::<control::ForkReply>(self.sock.as_fd()) {
            Ok(Recv::Msg(control::ForkReply::Launched { pid }, _)) => {
                // Ours by CLONE_PARENT; anything else is not a launcher.
                SpawnedChild::adopt(pid).map_err(ForkError::Gone)
            }
            Ok(Recv::Msg(control::ForkReply::Failed { errno }, _)) => {
                Err(ForkError::Failed(std::io::Error::from_raw_os_error(errno)))
            }
            Ok(Recv::Eof) => Err(gone(Errno::ECONNRESET)),
            Err(e) => Err(gone(e)),
        }
    }
}

fn reap(child: &mut SpawnedChild) -> String {
    match child.wait() {
        Ok(st) => st.to_string(),
        Err(e) => format!("wait failed: {e}"),
    }
}

/// What the daemon answers for a sandbox besides its refused calls.
#[derive(Default)]
pub struct Hooks {
    /// Approvals: the opens the sandbox would deny.
    pub holder: Option<std::sync::Arc<dyn crate::supervise::FileHolder>>,
    /// Transparent egress: the connections to the resolver's synthetic addresses.
    pub connector: Option<std::sync::Arc<dyn crate::supervise::Connector>>,
}

/// A listing of a host directory for the sandbox: the root of a detached,
/// read-only tmpfs holding the directory's entries with their metadata and
/// no content (see `init::snapshot`).
#[derive(Debug)]
pub struct Snapshot {
    /// `O_RDONLY|O_DIRECTORY` fd of the snapshot's root.
    pub dir: OwnedFd,
    pub entries: u32,
    /// Entries left out: devices, entries gone while it was made.
    pub skipped: u32,
    /// The directory had more than the cap of entries.
    pub truncated: bool,
}

/// Blocking. Makes a [`Snapshot`] of host directory `dir` (absolute, no
/// symlink on the way) in a short-lived re-exec of `exe` (the init role's
/// binary), which enters its own user and mount namespace for it.
pub fn snapshot_dir(exe: &Path, dir: &Path) -> Result<Snapshot, SandboxError> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(control)?;
    let start = |source| SandboxError::Start {
        exe: exe.to_path_buf(),
        source,
    };
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(start)?;
    let mut child = start_init(
        exe,
        [null.as_fd(), null.as_fd(), null.as_fd()],
        theirs.as_fd(),
    )
    .map_err(start)?;
    drop(null);
    drop(theirs);
    let result = (|| {
        let ended = || SandboxError::InitDied {
            status: "the snapshot role ended without an answer".into(),
        };
        // A program that is not the role's exits at once: its end of the
        // channel may be gone before the request is written (EPIPE) or
        // before the answer (EOF); the same failure either way.
        control::send(ours.as_fd(), &ToInit::Snapshot(dir.to_path_buf()), None).map_err(|e| {
            if matches!(e, Errno::EPIPE | Errno::ECONNRESET) {
                ended()
            } else {
                control(e)
            }
        })?;
        match control::recv::<FromInit>(ours.as_fd()).map_err(|e| {
            if e == Errno::ECONNRESET {
                ended()
            } else {
                control(e)
            }
        })? {
            Recv::Msg(
                FromInit::Snapshot {
                    entries,
                    skipped,
                    truncated,
                },
                Some(fd),
            ) => Ok(Snapshot {
                dir: fd,
                entries,
                skipped,
                truncated,
            }),
            Recv::Msg(FromInit::Failed(f), _) => Err(f.into()),
            Recv::Msg(other, _) => Err(SandboxError::Protocol(format!(
                "unexpected message {other:?}"
            ))),
            Recv::Eof => Err(ended()),
        }
    })();
    if result.is_err() {
        let _ = child.kill();
    }
    reap(&mut child);
    result
}

impl Sandbox {
    /// Blocking. Re-executes `exe` with [`init::INIT_ARG`] and a control socketpair, sends
    /// `spec`, and returns once the server has been exec'd inside the sandbox, or the
    /// reason it was not (sent back as data by the child, including an execve
    /// failure of the program). `stdio` become the server's fds 0, 1, 2.
    /// The sandbox applies the spec's [`layers`](SandboxSpec::layers) and
    /// fails to start if the kernel lacks one of them.
    pub fn spawn(
        exe: &Path,
        spec: &SandboxSpec,
        stdio: [OwnedFd; 3],
    ) -> Result<Spawned, SandboxError> {
        Self::spawn_with(exe, spec, stdio, None)
    }

    /// [`Sandbox::spawn`], with approvals: the opens the sandbox would deny
    /// are handed to `holder` ([`crate::supervise::hold`]); needs the spec's
    /// file watching ([`SandboxSpec::hold_files`]).
    pub fn spawn_with(
        exe: &Path,
        spec: &SandboxSpec,
        stdio: [OwnedFd; 3],
        holder: Option<std::sync::Arc<dyn crate::supervise::FileHolder>>,
    ) -> Result<Spawned, SandboxError> {
        Self::spawn_hooked(
            exe,
            spec,
            stdio,
            Hooks {
                holder,
                connector: None,
            },
        )
    }

    /// [`Sandbox::spawn_with`], and with a resolver
    /// ([`SandboxSpec::resolver`]) the `connect` calls to its synthetic
    /// addresses handed to `hooks.connector` ([`crate::supervise::connect`]).
    pub fn spawn_hooked(
        exe: &Path,
        spec: &SandboxSpec,
        stdio: [OwnedFd; 3],
        hooks: Hooks,
    ) -> Result<Spawned, SandboxError> {
        Self::launch(Start::Exec(exe), spec, stdio, hooks, None)
    }

    /// [`Sandbox::spawn_hooked`], the launcher forked by `forks` instead of
    /// a fresh `execve` of its binary, and the server released by `gate`:
    /// the sandbox is built while `gate` runs (on this thread, after the init
    /// has its spec), and PID 1 forks the server only once it returned `Ok`
    /// (an `Err` ends the launch before anything ran:
    /// [`SandboxError::Release`]). The daemon's gate waits for its
    /// `session.start` to be on disk, so the fsync and the sandbox's
    /// construction overlap while the record still precedes the server.
    pub fn spawn_forked(
        forks: &ForkServer,
        spec: &SandboxSpec,
        stdio: [OwnedFd; 3],
        hooks: Hooks,
        gate: impl FnOnce() -> std::io::Result<()>,
    ) -> Result<Spawned, SandboxError> {
        Self::launch(Start::Fork(forks), spec, stdio, hooks, Some(Box::new(gate)))
    }

    fn launch(
        start: Start<'_>,
        spec: &SandboxSpec,
        stdio: [OwnedFd; 3],
        hooks: Hooks,
        gate: Option<Box<dyn FnOnce() -> std::io::Result<()> + '_>>,
    ) -> Result<Spawned, SandboxError> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        let exe = start.exe();
        let Hooks { holder, connector } = hooks;
        // SEQPACKET: message boundaries and EOF when the other side is gone.
        // CLOEXEC on both ends: only the dup2'd fd 3 reaches the init.
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(control)?;
        // The spec goes first, queued on the socket before the init exists:
        // it reads it as it starts instead of waiting for this thread to be
        // scheduled again after the spawn. A spec larger than the socket's
        // buffer (EAGAIN) goes after the spawn, as before.
        let spec_msg = ToInit::Spec(Box::new(spec.clone()));
        let sent_early = control::send_now(ours.as_fd(), &spec_msg).map_err(control)?;
        let [stdin, stdout, stderr] = stdio;
        let launcher = start
            .init(
                [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()],
                theirs.as_fd(),
            )
            .map_err(|source| SandboxError::Start {
                exe: exe.to_path_buf(),
                source,
            })?;
        // Drop our copies of their end and of the stdio fds.
        drop((stdin, stdout, stderr));
        drop(theirs);
        let mut launcher = launcher;
        // Our own unreaped child: its pid cannot be reused before we wait.
        let launcher_pidfd = match sys::process::pidfd_open(launcher.id() as libc::pid_t) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = launcher.kill();
                reap(&mut launcher);
                return Err(control(e));
            }
        };

        let fail = |launcher: &mut SpawnedChild, err: SandboxError| -> SandboxError {
            let _ = launcher.kill();
            reap(launcher);
            err
        };
        if let Err(e) = match sent_early {
            true => Ok(()),
            false => control::send(ours.as_fd(), &spec_msg, None),
        } {
            // EPIPE: the init died before reading; report how.
            if matches!(e, Errno::EPIPE | Errno::ECONNRESET) {
                let status = reap(&mut launcher);
                return Err(SandboxError::InitDied { status });
            }
            // The init is alive and waiting for a spec that will not come:
            // end it (reaping alone would wait for it forever).
            let err = if e == Errno::EMSGSIZE {
                let n = serde_json::to_vec(&spec_msg).map_or(0, |b| b.len());
                SandboxError::Protocol(format!(
                    "the sandbox spec is {n} bytes, more than its control socket takes in one \
                     message (EMSGSIZE): fewer or smaller grants and environment values"
                ))
            } else {
                control(e)
            };
            return Err(fail(&mut launcher, err));
        }
        // The sandbox is being built; the server is released once the gate
        // lets it (the daemon's record on disk), and not at all if it fails.
        if let Some(gate) = gate {
            if let Err(e) = gate() {
                return Err(fail(&mut launcher, SandboxError::Release(e)));
            }
        }
        match control::send(ours.as_fd(), &ToInit::Go, None) {
            // EPIPE: the init is gone already, most likely after reporting
            // why (a setup failure comes before the release): what it sent
            // is still queued for the loop below, which ends at its EOF.
            Ok(()) | Err(Errno::EPIPE | Errno::ECONNRESET) => {}
            Err(e) => return Err(fail(&mut launcher, control(e))),
        }

        // Launched (from the launcher) and Started/Failed (from PID 1) may arrive in
        // either order.
        let mut pidfd: Option<(OwnedFd, u32)> = None;
        let mut started = false;
        let mut notifier = None;
        let mut wake = None;
        let mut files = None;
        let mut proxy = None;
        let mut resolver = None;
        let mut exited = None;
        while pidfd.is_none() || !started {
            match control::recv::<FromInit>(ours.as_fd()) {
                Ok(Recv::Msg(FromInit::Launched { pid }, Some(fd))) => {
                    pidfd = Some((fd, pid as u32))
                }
                // Once: a second listener is a protocol error (below).
                Ok(Recv::Msg(FromInit::Listener, Some(fd)))
                    if spec.layers.notify && notifier.is_none() =>
                {
                    // Answered from now on, before the server can make a call.
                    let g = spec
                        .layers
                        .guard
                        .then(|| crate::supervise::guard::Guard::new(spec));
                    let h = holder
                        .clone()
                        .filter(|_| spec.layers.watch_files)
                        .map(|holder| crate::supervise::hold::Holder {
                            holder,
                            exe: exe.into(),
                            snapshots: Default::default(),
                        });
                    match Notifier::start(
                        fd,
                        Watch::from_spec(spec),
                        g,
                        h,
                        connector.clone().filter(|_| spec.resolver),
                        spec.layers.sync_wake_up,
                    ) {
                        Ok((n, calls, f, w)) => {
                            notifier = Some((n, calls));
                            wake = Some(w);
                            files = f;
                        }
                        Err(e) => {
                            return Err(fail(&mut launcher, SandboxError::Control(e)));
                        }
                    }
                }
                Ok(Recv::Msg(FromInit::ProxyListener, Some(fd))) => proxy = Some(fd),
                Ok(Recv::Msg(FromInit::Resolver, Some(fd))) if spec.resolver => resolver = Some(fd),
                Ok(Recv::Msg(FromInit::Started, _)) => {
                    // The server child sends its listener before its execve,
                    // and PID 1 reports Started only after that execve: a
                    // filter that notifies without the listener here would
                    // leave the server unsupervised (its notified calls
                    // ENOSYS, unrecorded). PID 1 checks this too, from the
                    // child's report; this is the check that holds the fd.
                    if spec.layers.notify && notifier.is_none() {
                        return Err(fail(
                            &mut launcher,
                            SandboxError::Protocol(
                                "the sandbox started without handing over its seccomp listener"
                                    .into(),
                            ),
                        ));
                    }
                    started = true
                }
                // A server that ends at once can be reported by PID 1 before
                // the launcher (preempted after its fork) sends Launched.
                Ok(Recv::Msg(FromInit::Exited(e), _)) if started && exited.is_none() => {
                    exited = Some(e.into())
                }
                Ok(Recv::Msg(FromInit::Failed(f), _)) => {
                    // The init exits by itself after reporting; reap it.
                    reap(&mut launcher);
                    return Err(f.into());
                }
                Ok(Recv::Msg(other, _)) => {
                    return Err(fail(
                        &mut launcher,
                        SandboxError::Protocol(format!("unexpected message {other:?}")),
                    ))
                }
                Ok(Recv::Eof) => {
                    let status = reap(&mut launcher);
                    return Err(SandboxError::InitDied { status });
                }
                Err(e) => return Err(fail(&mut launcher, control(e))),
            }
        }
        // The loop ends only with a pidfd.
        let Some((pidfd, pid)) = pidfd else {
            return Err(fail(
                &mut launcher,
                SandboxError::Protocol("no pidfd from the launcher".into()),
            ));
        };
        let (notifier, refused) = notifier.unzip();
        Ok(Spawned {
            sandbox: Sandbox {
                sock: ours,
                pidfd,
                launcher_pidfd,
                pid,
                state: Mutex::new(WaitState {
                    launcher,
                    outcome: None,
                    exited,
                    notifier,
                }),
                wake,
            },
            refused,
            files,
            proxy_listener: proxy,
            resolver,
        })
    }

    /// Rung (made readable, an eventfd) when a refused call or a file
    /// access is queued after [`Wake::arm`], and when the queues close:
    /// lets one event loop wait for every sandbox's queues without a thread
    /// each. `None` without user notification.
    pub fn recorder_wake(&self) -> Option<Arc<Wake>> {
        self.wake.clone()
    }

    /// Readable (`POLLIN`) once the sandbox is gone: the launcher's pidfd,
    /// which the launcher's exit makes readable, and it exits only after
    /// reaping PID 1, whose exit completes only when every other process of
    /// the pid namespace is gone. [`Sandbox::wait`] then returns at once
    /// (it reads the buffered exit message and reaps the launcher). Lets an
    /// event loop wait for many sandboxes without a blocked thread each.
    pub fn exit_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.launcher_pidfd.as_fd()
    }

    /// Resolves once the sandbox is gone ([`Sandbox::exit_fd`] readable), on
    /// the current tokio runtime, without a thread; [`Sandbox::wait`] then
    /// returns at once. `Err`: the fd could not be registered (then
    /// [`Sandbox::wait`] on a blocking thread does the waiting).
    pub async fn exited(self: &Arc<Self>) -> std::io::Result<()> {
        let fd = crate::sys::readiness::readable(self.clone(), |s: &Sandbox| s.exit_fd())?;
        // A pidfd stays readable once its process has exited.
        let _ = fd.readable().await?;
        Ok(())
    }

    /// Host pid of the sandbox's PID 1.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends a control message; a sandbox that is already gone is not an error.
    fn send(&self, msg: &ToInit) -> Result<(), SandboxError> {
        match control::send(self.sock.as_fd(), msg, None) {
            Ok(()) | Err(Errno::EPIPE | Errno::ECONNRESET | Errno::ECONNREFUSED) => Ok(()),
            Err(e) => Err(control(e)),
        }
    }

    /// Forwards `sig` to the server process (not the whole tree). A no-op once the
    /// sandbox has exited.
    pub fn signal(&self, sig: i32) -> Result<(), SandboxError> {
        self.send(&ToInit::Signal(sig))
    }

    /// SIGTERM to every process in the sandbox (PID 1 itself excepted; it exits when
    /// the server does). A no-op once the sandbox has exited.
    pub fn terminate_tree(&self) -> Result<(), SandboxError> {
        self.send(&ToInit::TerminateTree)
    }

    /// SIGKILL to PID 1 through its pidfd: the kernel then kills every process in
    /// the pid namespace. A no-op once the sandbox has exited.
    pub fn kill_tree(&self) -> Result<(), SandboxError> {
        match sys::process::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(e) => Err(control(e)),
        }
    }

    /// Blocking: waits until the server has exited and returns how. When it
    /// returns, no process of the sandbox runs any more: PID 1 kills and
    /// reaps every other process before it reports the server's exit, and
    /// is itself past its last action (it exits; the launcher, which
    /// reports that, is reaped by [`Sandbox::reap`] or on drop). If PID 1
    /// was killed ([`Sandbox::kill_tree`]) there is no report: this waits
    /// for the launcher, so for the whole pid namespace, and the server
    /// died with it: `Signal(SIGKILL)`.
    pub fn wait(&self) -> Result<ExitOutcome, SandboxError> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(o) = st.outcome {
            return Ok(o);
        }
        let mut outcome = st.exited.take();
        while outcome.is_none() {
            match control::recv::<FromInit>(self.sock.as_fd()) {
                Ok(Recv::Msg(FromInit::Exited(e), _)) => outcome = Some(e.into()),
                Ok(Recv::Msg(_, _)) => {}
                Ok(Recv::Eof) => break,
                Err(Errno::EINTR) => {}
                Err(e) => return Err(control(e)),
            }
        }
        match outcome {
            // The namespaces' teardown (PID 1's exit, then the launcher's)
            // is not waited for; reaped already if it is over.
            Some(_) => {
                st.launcher.try_wait().map_err(SandboxError::Control)?;
            }
            None => {
                st.launcher.wait().map_err(SandboxError::Control)?;
            }
        }
        // Every task under the filter is gone (reaped): the notifier sees
        // POLLHUP and ends, which closes the refused-call queue behind the
        // last call.
        if let Some(n) = st.notifier.as_mut() {
            n.stop_and_join();
        }
        let o = outcome.unwrap_or(ExitOutcome::Signal(libc::SIGKILL));
        st.outcome = Some(o);
        Ok(o)
    }

    /// Resolves once [`Sandbox::wait`] would not block for long: PID 1
    /// reported the server's exit, or closed its end (it was killed), on
    /// the current tokio runtime, without a thread. `Err`: the socket could
    /// not be registered (then [`Sandbox::wait`] on a blocking thread does
    /// the waiting).
    pub async fn ended(self: &Arc<Self>) -> std::io::Result<()> {
        let fd = crate::sys::readiness::readable(self.clone(), |s: &Sandbox| s.sock.as_fd())?;
        // Nothing else comes from the sandbox after `Started`: readable is
        // the report or the end.
        let _ = fd.readable().await?;
        Ok(())
    }

    /// Blocking: reaps the launcher once it has exited (after [`Sandbox::wait`]
    /// returned; at once after [`Sandbox::exited`] resolved).
    pub fn reap(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let _ = st.launcher.wait();
    }
}

impl Drop for Sandbox {
    /// A sandbox dropped without [`Sandbox::wait`] is killed and reaped; one
    /// whose launcher was not reaped yet is reaped (it is exiting).
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if st.outcome.is_none() {
            let _ = sys::process::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL);
        }
        let _ = st.launcher.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Sandbox>();
    }

    #[test]
    fn errors_name_the_stage() {
        let e: SandboxError = Failure::os("bind-mount /home/u/data", Errno::ENOENT).into();
        assert_eq!(
            e.to_string(),
            "sandbox setup failed at bind-mount /home/u/data: No such file or directory"
        );
        let e: SandboxError = Failure::Exec {
            program: "/x/y".into(),
            errno: libc::ENOENT,
        }
        .into();
        assert_eq!(
            e.to_string(),
            "cannot execute /x/y: No such file or directory"
        );
    }
}
