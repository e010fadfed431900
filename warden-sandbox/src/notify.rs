//! Recorded refusals: the seccomp user-notification listener of a sandbox.
//!
//! The filter ([`crate::seccomp`]) sends the refusals that matter (escape and
//! kernel-attack attempts, [`crate::seccomp::Action::Notify`]) to a listener
//! instead of failing them in the kernel. The server child installs the filter
//! with `SECCOMP_FILTER_FLAG_NEW_LISTENER`, passes the listener fd to PID 1
//! over its status socket and closes its own copy before `execve`; PID 1
//! forwards it to [`crate::launch::Sandbox::spawn`] over the control socket
//! (like the pidfd) and drops it. Nothing inside the sandbox holds it.
//!
//! The sandbox's [`Notifier`] thread answers every notification itself, always:
//! receive → queue a [`RefusedCall`] for whoever records them (a bounded
//! channel, never waited on: a full queue counts the call as lost) → reply
//! with the rule's errno. The call is refused, never continued
//! (`SECCOMP_USER_NOTIF_FLAG_CONTINUE` is not used), and the reply never waits
//! on the audit store, so a refused call cannot hang however slow (or absent)
//! the consumer is. The event is queued *before* the reply, so when the
//! server sees the errno the event is already in the queue.
//!
//! With `audit.files` on, the same listener also receives the path-taking
//! calls the file audit observes ([`crate::seccomp::WATCHED`]): for those the
//! thread reads what the call names ([`crate::files::Capturer`]), checks the
//! call is still pending, answers `SECCOMP_USER_NOTIF_FLAG_CONTINUE` (the
//! kernel then runs it with all its own checks) and only then queues the
//! capture, which the consumer classifies on its own thread
//! ([`FileAccesses`]). The one exception is the creation guard
//! ([`crate::guard`], with a write grant): the calls that create are
//! performed by [`Guard::handle`] on its own copy of the path and answered
//! with their result (or refused, for a protected name); the rest continue. The server's own
//! `execve` is such a call, so the listener reaches this thread before the
//! server starts (PID 1 forwards it at once).
//!
//! The thread ends when every task using the filter is gone (the listener
//! polls `POLLHUP`), or when the [`Sandbox`](crate::launch::Sandbox) stops it.
//! If the listener were ever closed with calls pending, the kernel fails them
//! with `ENOSYS` rather than leaving them blocked.

use crate::files::{Capturer, FileAccesses, Watch};
use crate::guard::{Answer, Guard};
use crate::queue::{QueueRx, QueueTx};
use crate::seccomp;
use nix::errno::Errno;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Events queued for the consumer before calls are counted as lost.
const QUEUE: usize = 1024;
/// Observed file accesses queued before they are counted as lost: a
/// server's start-up opens a few hundred files in a burst; at most 4096
/// paths of at most 4 KiB each (two for rename and link) wait in memory.
const FILE_QUEUE: usize = 4096;
/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6): wake the caller on the
/// answering thread's CPU, as the answer is the only thing it waits for.
const SYNC_WAKE_UP: u64 = 1;
/// How often the thread checks its stop flag while the listener is quiet.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// The notifier thread's stack: its work is bounded (no recursion; paths
/// live on the heap), far below the 2 MiB default.
const NOTIFIER_STACK: usize = 256 << 10;

/// A consumer's wake-up for one sandbox's queues (refused calls and file
/// accesses): an eventfd the notifier writes only when the consumer asked
/// for it ([`Wake::arm`]) and then queued something, and once when the
/// queues close. A consumer that drains on its own schedule while accesses
/// keep coming costs the notifier one atomic swap per queued event, no
/// system call; one that waits needs no thread of its own (poll the fd).
pub struct Wake {
    efd: OwnedFd,
    armed: AtomicBool,
}

impl Wake {
    fn new() -> std::io::Result<Wake> {
        // SAFETY: eventfd returns a new fd or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Wake {
            // SAFETY: a fresh fd that nothing else owns.
            efd: unsafe { OwnedFd::from_raw_fd(fd) },
            armed: AtomicBool::new(false),
        })
    }

    /// The eventfd: readable after a ring.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.efd.as_fd()
    }

    /// Asks to be rung by the next queued event. Arm *before* the last look
    /// at the queues: an event queued after that look then rings (the
    /// fences pair with the notifier's in [`Wake::notify`]).
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// No ring needed any more (the consumer found events after arming).
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
    }

    /// A waiter for rings on the current tokio runtime (registers the
    /// eventfd once; keep it for the consumer's lifetime).
    pub fn waiter(self: &Arc<Self>) -> std::io::Result<WakeWaiter> {
        crate::readiness::readable(self.clone(), |w: &Wake| w.fd()).map(WakeWaiter)
    }

    /// Consumes the rings so far; `WouldBlock` when there were none.
    fn clear(&self) -> std::io::Result<()> {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a u64 we own from our own eventfd.
        let r = unsafe {
            libc::read(
                self.efd.as_raw_fd(),
                &mut v as *mut u64 as *mut libc::c_void,
                8,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// After queueing: rings if the consumer armed.
    fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.armed.swap(false, Ordering::SeqCst) {
            self.ring();
        }
    }

    fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a u64 we own to our own eventfd; a
        // full counter (EAGAIN) is already readable.
        unsafe {
            libc::write(
                self.efd.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }
}

/// Waits for a [`Wake`]'s rings on a tokio runtime, without a thread.
pub struct WakeWaiter(tokio::io::unix::AsyncFd<crate::readiness::Held<Wake>>);

impl WakeWaiter {
    /// Resolves once the wake-up was rung (since the last time this
    /// resolved), consuming the rings; `Err` if the eventfd cannot be
    /// polled.
    pub async fn rung(&self) -> std::io::Result<()> {
        loop {
            let mut guard = self.0.readable().await?;
            // WouldBlock (rings consumed already) clears the readiness.
            if let Ok(r) = guard.try_io(|held| held.get_ref().owner().clear()) {
                return r;
            }
        }
    }
}

impl std::fmt::Debug for WakeWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeWaiter").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wake").finish_non_exhaustive()
    }
}

/// True when this kernel offers `SECCOMP_RET_USER_NOTIF`
/// (`/proc/sys/kernel/seccomp/actions_avail` lists `user_notif`).
pub fn available() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
        .is_ok_and(|s| s.split_whitespace().any(|a| a == "user_notif"))
}

/// One refused call, as the filter's rule describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedCall {
    /// The calling task's pid in the pid namespace of the process that runs
    /// the notifier (for the daemon: a host pid).
    pub pid: u32,
    /// Syscall number (this architecture's).
    pub nr: i64,
    /// Syscall name, as in `man 2` (`unshare`, `ioctl`...).
    pub syscall: &'static str,
    /// The six raw arguments.
    pub args: [u64; 6],
    /// The argument the rule inspected (index, low 32 bits), for conditional
    /// rules: the namespace flags, the ioctl command, the personality.
    pub checked_arg: Option<(u8, u32)>,
    /// The errno the caller got.
    pub errno: i32,
    /// The rule's one-line reason.
    pub reason: &'static str,
}

impl RefusedCall {
    fn from_notif(n: &libc::seccomp_notif) -> RefusedCall {
        let nr = i64::from(n.data.nr);
        let args = n.data.args;
        match seccomp::rule_for(nr as libc::c_long, &args) {
            Some(rule) => RefusedCall {
                pid: n.pid,
                nr,
                syscall: rule.name.strip_prefix("SYS_").unwrap_or(rule.name),
                args,
                checked_arg: rule
                    .cond
                    .map(|c| (c.arg(), args[usize::from(c.arg())] as u32)),
                errno: rule.action.errno(),
                reason: rule.why,
            },
            // Only our own filter notifies this listener, so this cannot happen;
            // refuse anyway.
            None => RefusedCall {
                pid: n.pid,
                nr,
                syscall: "unknown",
                args,
                checked_arg: None,
                errno: libc::EPERM,
                reason: "no rule matches this notification",
            },
        }
    }
}

/// The consumer's end of a sandbox's refused calls.
pub struct RefusedCalls {
    rx: QueueRx<RefusedCall>,
    lost: Arc<AtomicU64>,
}

impl RefusedCalls {
    /// The next refused call; `Disconnected` once the sandbox is gone and every
    /// queued call has been taken.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<RefusedCall, RecvTimeoutError> {
        self.rx.recv_timeout(timeout)
    }

    /// The next refused call if one is queued; never waits.
    pub fn try_recv(&self) -> Result<RefusedCall, TryRecvError> {
        self.rx.try_recv()
    }

    /// Calls refused but not queued because the queue was full.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for RefusedCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefusedCalls")
            .field("lost", &self.lost())
            .finish_non_exhaustive()
    }
}

/// The thread answering one sandbox's listener.
pub(crate) struct Notifier {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Notifier {
    /// Starts answering `listener`; returns the thread and the consumers'
    /// ends: refused calls, and observed file accesses when `watch` asks for
    /// them (the filter was then compiled with the watched calls).
    pub(crate) fn start(
        listener: OwnedFd,
        watch: Option<Watch>,
        guard: Option<Guard>,
    ) -> std::io::Result<(Notifier, RefusedCalls, Option<FileAccesses>, Arc<Wake>)> {
        let (tx, rx) = crate::queue::bounded(QUEUE);
        let lost = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(Wake::new()?);
        let (lost2, stop2, wake2) = (lost.clone(), stop.clone(), wake.clone());
        let (capturer, files) = match watch {
            Some(w) => {
                let (ftx, frx) = crate::queue::bounded(FILE_QUEUE);
                let flost = Arc::new(AtomicU64::new(0));
                // Best effort: kernels before 6.6 answer EINVAL and wake the
                // caller the ordinary way. The flags are the argument itself,
                // not a pointer.
                // SAFETY: SET_FLAGS takes its flags by value.
                let sync = unsafe {
                    libc::ioctl(
                        listener.as_raw_fd(),
                        libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                        SYNC_WAKE_UP as libc::c_ulong,
                    )
                } == 0;
                (
                    Some(Capturer::new(ftx, flost.clone())),
                    Some(FileAccesses::new(frx, flost, w, sync)),
                )
            }
            None => (None, None),
        };
        let thread = std::thread::Builder::new()
            .name("warden-seccomp-notify".into())
            .stack_size(NOTIFIER_STACK)
            .spawn(move || {
                let mut guard = guard;
                // The guard creates with each caller's umask, applied by hand,
                // and without the daemon's capabilities.
                if guard.is_some() && crate::guard::prepare_thread().is_err() {
                    guard = None; // every creation then fails (Landlock): closed
                }
                serve(&listener, &tx, &lost2, &stop2, capturer, guard, &wake2);
                // Both queues are closed now (the capturer went with
                // `serve`): the consumer learns it even if it never armed.
                drop(tx);
                wake2.ring();
            })?;
        Ok((
            Notifier {
                stop,
                thread: Some(thread),
            },
            RefusedCalls { rx, lost },
            files,
            wake,
        ))
    }

    /// Stops the thread (at once if the sandbox is gone, else within
    /// [`POLL_INTERVAL`]) and waits for it; its queue then disconnects.
    pub(crate) fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        // Not joined: it ends by itself within POLL_INTERVAL.
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(
    listener: &OwnedFd,
    tx: &QueueTx<RefusedCall>,
    lost: &AtomicU64,
    stop: &AtomicBool,
    mut capturer: Option<Capturer>,
    mut guard: Option<Guard>,
    wake: &Wake,
) {
    let fd = listener.as_raw_fd();
    loop {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, POLL_INTERVAL.as_millis() as libc::c_int) };
        if r < 0 {
            if Errno::last() == Errno::EINTR {
                continue;
            }
            return;
        }
        if pfd.revents & libc::POLLIN != 0 {
            if let Some(n) = receive(fd) {
                let nr = n.data.nr as libc::c_long;
                // A refusing rule first: a watched call can also be refused
                // on some arguments (chmod with a set-id bit), and the filter
                // then notified it as a refusal, on these same arguments.
                let refused = seccomp::rule_for(nr, &n.data.args).is_some();
                if let Some(w) = seccomp::watched(nr).filter(|_| !refused) {
                    // Observed, never refused: read, check, continue, then
                    // queue. Continued even if nobody captures (cannot
                    // happen: the filter watches only when asked to).
                    let mut captured = capturer.as_mut().and_then(|c| c.capture(fd, &n, w));
                    // The creation guard answers the calls that create; the
                    // rest (and everything when it is off) continue.
                    let answer = match (&mut guard, &captured) {
                        (Some(g), Some(c)) => g.handle(fd, &n, c),
                        _ => Answer::Continue,
                    };
                    match answer {
                        Answer::Continue => respond_continue(fd, n.id),
                        Answer::Value(v) => respond_value(fd, n.id, v),
                        Answer::Error(e) => respond(fd, n.id, e),
                        Answer::Refused { errno, why } => {
                            respond(fd, n.id, errno);
                            if let Some(c) = captured.as_mut() {
                                c.guard = Some((errno, why));
                            }
                        }
                        Answer::Answered => {}
                    }
                    if let (Some(c), Some(captured)) = (&capturer, captured) {
                        c.queue(captured);
                        wake.notify();
                    }
                    continue;
                }
                let call = RefusedCall::from_notif(&n);
                let errno = call.errno;
                // Queued before the reply; never waits for the consumer.
                match tx.try_send(call) {
                    Ok(()) => wake.notify(),
                    Err(TrySendError::Full(_)) => {
                        lost.fetch_add(1, Ordering::Relaxed);
                    }
                    // Nobody records them (a consumer that went away): still answer.
                    Err(TrySendError::Disconnected(_)) => {}
                }
                respond(fd, n.id, errno);
            }
            continue;
        }
        // POLLHUP: no task uses the filter any more. POLLERR/POLLNVAL: unusable.
        if pfd.revents != 0 || stop.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// `SECCOMP_IOCTL_NOTIF_RECV`; `None` when the caller died in between
/// (`ENOENT`) or the call was interrupted.
fn receive(fd: libc::c_int) -> Option<libc::seccomp_notif> {
    // SAFETY: seccomp_notif is plain integers; the kernel requires it zeroed.
    let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: RECV fills the seccomp_notif we own, whose size the ioctl encodes.
    let r = unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n) };
    (r == 0).then_some(n)
}

/// `SECCOMP_IOCTL_NOTIF_SEND`: the call fails with `errno` (refused calls). `ENOENT` (the
/// caller died, or a signal interrupted the call) needs nothing more.
fn respond(fd: libc::c_int, id: u64, errno: i32) {
    let resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: -errno,
        // Never SECCOMP_USER_NOTIF_FLAG_CONTINUE: the call is refused.
        flags: 0,
    };
    loop {
        // SAFETY: SEND reads the seccomp_notif_resp we own.
        let r = unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) };
        if r == 0 || Errno::last() != Errno::EINTR {
            return;
        }
    }
}

/// `SECCOMP_IOCTL_NOTIF_SEND`: the call returns `val` (a call the creation
/// guard performed).
fn respond_value(fd: libc::c_int, id: u64, val: i64) {
    let resp = libc::seccomp_notif_resp {
        id,
        val,
        error: 0,
        flags: 0,
    };
    loop {
        // SAFETY: SEND reads the seccomp_notif_resp we own.
        let r = unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) };
        if r == 0 || Errno::last() != Errno::EINTR {
            return;
        }
    }
}

/// `SECCOMP_IOCTL_NOTIF_SEND` with `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the
/// kernel runs the call as if the filter had allowed it. `ENOENT` (the
/// caller died or was interrupted; a restarted call notifies again) needs
/// nothing more.
fn respond_continue(fd: libc::c_int, id: u64) {
    let resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: 0,
        flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    };
    loop {
        // SAFETY: SEND reads the seccomp_notif_resp we own.
        let r = unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) };
        if r == 0 || Errno::last() != Errno::EINTR {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notif(nr: libc::c_long, args: [u64; 6]) -> libc::seccomp_notif {
        // SAFETY: plain integers.
        let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        n.id = 9;
        n.pid = 4242;
        n.data.nr = nr as i32;
        n.data.args = args;
        n
    }

    #[test]
    fn a_notification_becomes_the_rules_record() {
        let newuser = libc::CLONE_NEWUSER as u64 | 1 << 40;
        let c = RefusedCall::from_notif(&notif(libc::SYS_unshare, [newuser, 0, 0, 0, 0, 0]));
        assert_eq!(c.syscall, "unshare");
        assert_eq!((c.pid, c.nr), (4242, libc::SYS_unshare));
        assert_eq!(c.checked_arg, Some((0, libc::CLONE_NEWUSER as u32)));
        assert_eq!(c.errno, libc::EPERM);
        assert!(c.reason.contains("namespaces"), "{}", c.reason);

        let tiocsti = notif(libc::SYS_ioctl, [0, libc::TIOCSTI, 0, 0, 0, 0]);
        let c = RefusedCall::from_notif(&tiocsti);
        assert_eq!(c.syscall, "ioctl");
        assert_eq!(c.checked_arg, Some((1, libc::TIOCSTI as u32)));
        assert!(c.reason.starts_with("TIOCSTI"), "{}", c.reason);

        let c = RefusedCall::from_notif(&notif(libc::SYS_ptrace, [0; 6]));
        assert_eq!(
            (c.syscall, c.checked_arg, c.errno),
            ("ptrace", None, libc::EPERM)
        );

        let c = RefusedCall::from_notif(&notif(libc::SYS_getpid, [0; 6]));
        assert_eq!((c.syscall, c.errno), ("unknown", libc::EPERM));

        // A watched call refused on its arguments: a refusal with the mode.
        let suid = notif(libc::SYS_fchmodat, [3, 0, 0o4755, 0, 0, 0]);
        let c = RefusedCall::from_notif(&suid);
        assert_eq!(
            (c.syscall, c.checked_arg, c.errno),
            ("fchmodat", Some((2, 0o4755)), libc::EPERM)
        );
        assert!(c.reason.contains("setuid"), "{}", c.reason);
        let creat = libc::O_CREAT as u64 | libc::O_WRONLY as u64;
        let c = RefusedCall::from_notif(&notif(libc::SYS_openat, [3, 0, creat, 0o2755, 0, 0]));
        assert_eq!((c.syscall, c.checked_arg), ("openat", Some((3, 0o2755))));
        assert!(seccomp::rule_for(libc::SYS_fchmodat, &[3, 0, 0o755, 0, 0, 0]).is_none());
    }
}
