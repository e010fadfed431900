//! Recorded refusals: the seccomp user-notification listener of a sandbox,
//! answered by the daemon's notifier pool.
//!
//! # Mechanism
//!
//! The filter (`confine::seccomp`) sends the refusals that matter
//! (escape and kernel-attack attempts, the rules whose action is `Notify`)
//! to a listener instead of failing them in the kernel. The server child
//! installs the filter with `SECCOMP_FILTER_FLAG_NEW_LISTENER`, passes the
//! listener fd to PID 1 over its status socket and closes its own copy
//! before `execve`; PID 1 forwards it to [`crate::launch::Sandbox::spawn`]
//! over the control socket (like the pidfd) and drops it. Nothing inside the
//! sandbox holds it.
//!
//! The daemon's notifier threads (a `Pool` shared by all sandboxes, so an
//! idle sandbox holds none) answer every notification themselves, always:
//! receive → queue a [`RefusedCall`] for whoever records them → reply with
//! the rule's errno.
//!
//! With `audit.files` on, the same listener also receives the path-taking
//! calls the file audit observes (the seccomp table's `WATCHED`): for those
//! the thread reads what the call names (`capture`), checks the call is
//! still pending, answers `SECCOMP_USER_NOTIF_FLAG_CONTINUE` (the kernel then
//! runs it with all its own checks) and only then queues the capture, which
//! the consumer classifies on its own thread ([`FileAccesses`]). The one
//! exception is the creation guard (`guard`, with a write grant): the calls
//! that create are performed by `Guard::handle` on its own copy of the path
//! and answered with their result (or refused, for a protected name); the
//! rest continue. The server's own `execve` is such a call, so the listener
//! reaches this thread before the server starts (PID 1 forwards it at once).
//!
//! # Invariants
//!
//! - A refused call is refused, never continued
//!   (`SECCOMP_USER_NOTIF_FLAG_CONTINUE` is not used for it), and the reply
//!   never waits on the audit store, so a refused call cannot hang however
//!   slow (or absent) the consumer is: the queues are bounded and never
//!   waited on (a full queue counts the call as lost).
//! - The event is queued *before* the reply, so when the server sees the
//!   errno the event is already in the queue.
//! - One sandbox's calls are answered one at a time, in order (`Pool`).
//!
//! # Lifetime
//!
//! A sandbox's listener leaves the pool when every task using the filter is
//! gone (the listener polls `POLLHUP`), or when the
//! [`Sandbox`](crate::launch::Sandbox) stops it. If the listener were ever
//! closed with calls pending, the kernel fails them with `ENOSYS` rather than
//! leaving them blocked.

use crate::confine::seccomp;
use crate::supervise::capture::Capturer;
use crate::supervise::classify::{FileAccesses, Watch};
use crate::supervise::guard::{Answer, Guard};
use crate::supervise::hold::Holder;
use crate::supervise::layout::Layout;
use crate::supervise::queue::{QueueRx, QueueTx};
use crate::sys;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{RecvTimeoutError, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Events queued for the consumer before calls are counted as lost.
const QUEUE: usize = 1024;
/// Observed file accesses queued before they are counted as lost: a
/// server's start-up opens a few hundred files in a burst; at most 4096
/// paths of at most 4 KiB each (two for rename and link) wait in memory.
const FILE_QUEUE: usize = 4096;
/// A pool thread's stack: its work is bounded (no recursion; paths
/// live on the heap), far below the 2 MiB default.
const NOTIFIER_STACK: usize = 256 << 10;

/// A consumer's wake-up for one sandbox's queues (refused calls and file
/// accesses): an eventfd the notifier writes only when the consumer asked
/// for it ([`Wake::arm`]) and then queued something, and once when the
/// queues close. A consumer that drains on its own schedule while accesses
/// keep coming costs the notifier one atomic swap per queued event, no
/// system call; one that waits needs no thread of its own (poll the fd).
pub struct Wake {
    efd: EventFd,
    armed: AtomicBool,
}

impl Wake {
    fn new() -> std::io::Result<Wake> {
        Ok(Wake {
            efd: EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?,
            armed: AtomicBool::new(false),
        })
    }

    /// The eventfd: readable after a ring.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.efd.as_fd()
    }

    /// Asks to be rung by the next queued event. Arm *before* the last look
    /// at the queues: an event queued after that look then rings (the
    /// fences pair with the notifier's in `Wake::notify`).
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
        crate::sys::readiness::readable(self.clone(), |w: &Wake| w.fd()).map(WakeWaiter)
    }

    /// Consumes the rings so far; `WouldBlock` when there were none.
    fn clear(&self) -> std::io::Result<()> {
        self.efd.read()?;
        Ok(())
    }

    /// After queueing: rings if the consumer armed.
    fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.armed.swap(false, Ordering::SeqCst) {
            self.ring();
        }
    }

    /// Rings now, armed or not: someone needs what is queued taken soon (a
    /// stale ring only brings one drain forward).
    pub fn ring(&self) {
        // A full counter (EAGAIN) is already readable.
        let _ = self.efd.write(1);
    }
}

/// Waits for a [`Wake`]'s rings on a tokio runtime, without a thread.
pub struct WakeWaiter(tokio::io::unix::AsyncFd<crate::sys::readiness::Held<Wake>>);

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
    /// When the notifier took the call.
    pub at: std::time::Instant,
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
                at: std::time::Instant::now(),
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
                at: std::time::Instant::now(),
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

/// One sandbox's place in the shared [`Pool`]: its listener is answered by
/// whichever pool thread takes its next event. Dropping it (or
/// [`Notifier::stop_and_join`]) takes the listener out of the pool.
pub(crate) struct Notifier {
    slot: Arc<Slot>,
}

impl Notifier {
    /// Starts answering `listener` on the shared pool; returns the
    /// consumers' ends: refused calls, and observed file accesses when
    /// `watch` asks for them (the filter was then compiled with the watched
    /// calls). `sync_wake_up`: set `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` on
    /// the listener (the spec's layers say so; a kernel that refuses fails
    /// the start).
    pub(crate) fn start(
        listener: OwnedFd,
        watch: Option<Watch>,
        guard: Option<Guard>,
        holder: Option<Holder>,
        connector: Option<Arc<dyn crate::supervise::connect::Connector>>,
        sync_wake_up: bool,
    ) -> std::io::Result<(Notifier, RefusedCalls, Option<FileAccesses>, Arc<Wake>)> {
        let (tx, rx) = crate::supervise::queue::bounded(QUEUE);
        let lost = Arc::new(AtomicU64::new(0));
        let wake = Arc::new(Wake::new()?);
        if sync_wake_up {
            if let Err(e) =
                sys::seccomp::set_flags(listener.as_fd(), sys::seccomp::USER_NOTIF_FD_SYNC_WAKE_UP)
            {
                let e = std::io::Error::from(e);
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("set SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP on the seccomp listener: {e}"),
                ));
            }
        }
        let hold = match (&watch, holder) {
            (Some(w), Some(h)) => Some((h, w.layout.clone())),
            _ => None,
        };
        let (capturer, files) = match watch {
            Some(w) => {
                let (ftx, frx) = crate::supervise::queue::bounded(FILE_QUEUE);
                let flost = Arc::new(AtomicU64::new(0));
                let mut capturer = Capturer::new(ftx, flost.clone());
                capturer.snapshots = hold.as_ref().map(|(h, _)| h.snapshots.clone());
                let progress = capturer.progress.clone();
                (
                    Some(capturer),
                    Some(FileAccesses::new(frx, flost, progress, w, sync_wake_up)),
                )
            }
            None => (None, None),
        };
        let served = Served {
            listener: Arc::new(listener),
            tx,
            lost: lost.clone(),
            capturer,
            guard,
            hold,
            connector,
            wake: wake.clone(),
        };
        let slot = Pool::get()?.add(served)?;
        Ok((Notifier { slot }, RefusedCalls { rx, lost }, files, wake))
    }

    /// Takes the listener out of the pool, waiting for a call being answered
    /// right now; its queues then disconnect.
    pub(crate) fn stop_and_join(&mut self) {
        if let Ok(pool) = Pool::get() {
            pool.remove(&self.slot, true);
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        // Never waits: a pool thread answering a call right now closes it
        // after that call.
        if let Ok(pool) = Pool::get() {
            pool.remove(&self.slot, false);
        }
    }
}

/// One sandbox's listener and what answering it needs.
struct Served {
    /// Shared with the opens held for an answer ([`crate::supervise::hold::HeldOpen`]), which answer
    /// later from other threads.
    listener: Arc<OwnedFd>,
    tx: QueueTx<RefusedCall>,
    lost: Arc<AtomicU64>,
    capturer: Option<Capturer>,
    guard: Option<Guard>,
    /// Approvals: who is given the opens the sandbox would deny, and the
    /// layout that judges them.
    hold: Option<(Holder, Layout)>,
    /// Transparent egress: who is given the `connect` calls to synthetic
    /// addresses ([`crate::supervise::connect`]).
    connector: Option<Arc<dyn crate::supervise::connect::Connector>>,
    wake: Arc<Wake>,
}

impl Served {
    /// Answers one pending notification.
    fn answer_one(&mut self) {
        let fd = self.listener.as_fd();
        let Some(n) = sys::seccomp::receive(fd) else {
            return;
        };
        let nr = n.data.nr as libc::c_long;
        // Intercepted connects and datagram sends with a destination (the
        // filter notifies them only with a connector).
        if matches!(
            nr,
            libc::SYS_connect | libc::SYS_sendto | libc::SYS_sendmsg | libc::SYS_sendmmsg
        ) {
            match &self.connector {
                Some(c) => crate::supervise::connect::handle(&self.listener, &n, c),
                // Nobody to hand it to (a resolver without a connector):
                // the kernel decides, as without interception.
                None => respond_continue(fd, n.id),
            }
            return;
        }
        // A refusing rule first: a watched call can also be refused on some
        // arguments (chmod with a set-id bit), and the filter then notified
        // it as a refusal, on these same arguments.
        let refused = seccomp::rule_for(nr, &n.data.args).is_some();
        if let Some(w) = seccomp::watched(nr).filter(|_| !refused) {
            // Observed, never refused: read, check, continue, then queue.
            // Continued even if nobody captures (cannot happen: the filter
            // watches only when asked to).
            let mut captured = self.capturer.as_mut().and_then(|c| c.capture(fd, &n, w));
            // Approvals: an open the sandbox would deny waits for a person
            // (answered later, from another thread); it is recorded by the
            // approval records, not queued as a file access.
            if let (Some((holder, layout)), Some(c)) = (&self.hold, &captured) {
                if let Some((path, op)) = crate::supervise::hold::holdable(c, layout) {
                    let call =
                        crate::supervise::hold::held(&self.listener, &n, path, op, c, holder);
                    holder.holder.hold(call);
                    return;
                }
            }
            // The creation guard answers the calls that create; the rest
            // (and everything when it is off) continue.
            let answer = match (&mut self.guard, &captured) {
                (Some(g), Some(c)) => g.handle(fd, &n, c),
                _ => Answer::Continue,
            };
            if let (Some(c), Some(_)) = (&self.capturer, &captured) {
                c.answering();
            }
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
            if let (Some(c), Some(mut captured)) = (self.capturer.as_mut(), captured) {
                c.after_answer(&mut captured);
                c.queue(captured);
                self.wake.notify();
            }
            return;
        }
        let call = RefusedCall::from_notif(&n);
        let errno = call.errno;
        // Queued before the reply; never waits for the consumer.
        match self.tx.try_send(call) {
            Ok(()) => self.wake.notify(),
            Err(TrySendError::Full(_)) => {
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
            // Nobody records them (a consumer that went away): still answer.
            Err(TrySendError::Disconnected(_)) => {}
        }
        respond(fd, n.id, errno);
    }

    /// Closes both queues and tells the consumer, even if it never armed;
    /// then closes the listener (the kernel fails calls still pending with
    /// `ENOSYS`: none are, once every task of the sandbox is gone).
    fn finish(self) {
        let Served {
            listener,
            tx,
            capturer,
            guard,
            hold,
            wake,
            ..
        } = self;
        drop((capturer, guard, hold, tx));
        wake.ring();
        drop(listener);
    }
}

/// A sandbox's entry in the pool.
struct Slot {
    key: u64,
    /// Set when the sandbox's handle lets go: whoever holds `served` next
    /// closes it.
    stop: AtomicBool,
    /// `None` once closed. Held by a pool thread while it answers a call.
    served: Mutex<Option<Served>>,
}

/// Threads shared by every sandbox's listener, so that an idle session
/// costs none (issue 9: 500 concurrent sessions).
///
/// The listeners are registered with one epoll instance, each
/// `EPOLLONESHOT`: a ready listener is handed to exactly one of the threads
/// waiting in `epoll_wait`, which answers its calls until none has come for
/// [`LINGER`], then re-arms it. So one sandbox's calls are answered one at a
/// time, in order, as before, and several sandboxes' calls in parallel; a
/// busy sandbox has a thread to itself, an idle one none. A thread that takes an event when no
/// other is left waiting starts another (up to [`MAX_WORKERS`]), so a call
/// that takes long (the creation guard on a slow file system) holds up only
/// its own sandbox; threads beyond the first end after [`KEEP_ALIVE`]
/// without an event. Every thread is prepared for the creation guard once
/// when it starts ([`crate::supervise::guard::prepare_thread`]: its own fs struct,
/// umask 0, no effective capabilities); a thread that cannot be prepared
/// ends before it takes any event.
struct Pool {
    epoll: Epoll,
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
    next_key: AtomicU64,
    /// Threads that are running, prepared or about to be.
    workers: AtomicUsize,
    /// Threads in `epoll_wait` right now.
    waiting: AtomicUsize,
}

/// The pool's threads at most: beyond, calls of different sandboxes wait
/// for each other.
const MAX_WORKERS: usize = 64;
/// How long a pool thread stays with a listener after answering a call, for
/// the next call (a server's start-up or a burst of file accesses: as fast
/// as a thread of its own) before it takes events of any listener again.
const LINGER: Duration = Duration::from_millis(100);
/// How long a pool thread beyond the first waits for an event before it ends.
const KEEP_ALIVE: u16 = 10_000;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pool {
    /// The daemon's pool, made on first use.
    fn get() -> std::io::Result<&'static Pool> {
        static POOL: OnceLock<Result<Pool, Errno>> = OnceLock::new();
        POOL.get_or_init(|| {
            Ok(Pool {
                epoll: Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?,
                slots: Mutex::new(HashMap::new()),
                next_key: AtomicU64::new(0),
                workers: AtomicUsize::new(0),
                waiting: AtomicUsize::new(0),
            })
        })
        .as_ref()
        .map_err(|e| std::io::Error::from(*e))
    }

    /// Registers a listener; starts the first thread if there is none yet
    /// (and fails if it cannot be started or prepared).
    fn add(&'static self, served: Served) -> std::io::Result<Arc<Slot>> {
        if self.workers.load(Ordering::SeqCst) == 0 {
            self.first_worker()?;
        }
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let event = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLONESHOT, key);
        let slot = Arc::new(Slot {
            key,
            stop: AtomicBool::new(false),
            served: Mutex::new(Some(served)),
        });
        // In the map before its first event can come; `served` held so that
        // an event taken meanwhile waits for the registration.
        lock(&self.slots).insert(key, slot.clone());
        let added = {
            let served = lock(&slot.served);
            match served.as_ref() {
                Some(s) => self.epoll.add(&s.listener, event),
                None => Err(Errno::EBADF),
            }
        };
        if let Err(e) = added {
            self.remove(&slot, true);
            return Err(e.into());
        }
        Ok(slot)
    }

    /// Takes a sandbox out: at once when no thread is answering one of its
    /// calls (or, with `wait`, after that call), else by that thread after
    /// the call.
    fn remove(&self, slot: &Slot, wait: bool) {
        slot.stop.store(true, Ordering::SeqCst);
        let mut served = if wait {
            lock(&slot.served)
        } else {
            match slot.served.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                // The thread answering checks `stop` after it lets go.
                Err(std::sync::TryLockError::WouldBlock) => return,
            }
        };
        self.close(slot, &mut served);
    }

    /// Closes a sandbox's entry whose `served` the caller holds.
    fn close(&self, slot: &Slot, served: &mut Option<Served>) {
        if let Some(s) = served.take() {
            let _ = self.epoll.delete(&s.listener);
            s.finish();
        }
        lock(&self.slots).remove(&slot.key);
    }

    /// Starts the first thread and waits until it is prepared.
    fn first_worker(&'static self) -> std::io::Result<()> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if self
            .workers
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Ok(()); // another start made it
        }
        self.spawn(Some(tx))?;
        match rx.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(std::io::Error::other(format!(
                "cannot prepare the seccomp notifier thread: {e}"
            ))),
            Err(_) => Err(std::io::Error::other("the seccomp notifier thread died")),
        }
    }

    /// One more thread, unless there are [`MAX_WORKERS`] already.
    fn grow(&'static self) {
        let mut n = self.workers.load(Ordering::SeqCst);
        loop {
            if n >= MAX_WORKERS {
                return;
            }
            match self
                .workers
                .compare_exchange(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(now) => n = now,
            }
        }
        // Without it the threads there are go on answering.
        let _ = self.spawn(None);
    }

    /// Starts a thread counted in `workers` already (uncounted again if it
    /// cannot start).
    fn spawn(
        &'static self,
        ready: Option<std::sync::mpsc::SyncSender<Result<(), Errno>>>,
    ) -> std::io::Result<()> {
        let r = std::thread::Builder::new()
            .name("warden-seccomp-notify".into())
            .stack_size(NOTIFIER_STACK)
            .spawn(move || {
                let prepared = crate::supervise::guard::prepare_thread();
                if let Some(tx) = ready {
                    let _ = tx.send(prepared);
                }
                if prepared.is_err() {
                    self.workers.fetch_sub(1, Ordering::SeqCst);
                    return;
                }
                self.work();
            });
        match r {
            Ok(_) => Ok(()),
            Err(e) => {
                self.workers.fetch_sub(1, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    /// Ends this thread if it is not the last: true when it should return.
    fn retire(&self) -> bool {
        let mut n = self.workers.load(Ordering::SeqCst);
        while n > 1 {
            match self
                .workers
                .compare_exchange(n, n - 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(now) => n = now,
            }
        }
        false
    }

    /// A pool thread's loop.
    fn work(&'static self) {
        let mut events = [EpollEvent::empty()];
        loop {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let r = self.epoll.wait(&mut events, KEEP_ALIVE);
            let others = self.waiting.fetch_sub(1, Ordering::SeqCst) - 1;
            match r {
                Ok(0) => {
                    if self.retire() {
                        return;
                    }
                    continue;
                }
                Ok(_) => {}
                // EINTR; nothing else can fail with a valid epoll fd and buffer.
                Err(_) => continue,
            }
            if others == 0 {
                self.grow();
            }
            self.handle(events[0]);
        }
    }

    /// Answers one event of one sandbox's listener.
    fn handle(&self, event: EpollEvent) {
        let key = event.data();
        let Some(slot) = lock(&self.slots).get(&key).cloned() else {
            return;
        };
        {
            let mut served = lock(&slot.served);
            let Some(s) = served.as_mut() else {
                return;
            };
            // A call pending: answer it, and the calls that follow within
            // LINGER on this same listener (polled directly: the kernel then
            // wakes this thread on the caller's CPU, SYNC_WAKE_UP, which an
            // epoll set in between would not). Without one, POLLHUP (no task
            // uses the filter any more) or POLLERR: done with this listener.
            let mut open = event.events().contains(EpollFlags::EPOLLIN);
            while open {
                s.answer_one();
                if slot.stop.load(Ordering::SeqCst) {
                    open = false;
                    break;
                }
                match wait_pending(&s.listener, LINGER) {
                    Pending::Call => {}
                    Pending::Quiet => break,
                    Pending::Closed => open = false,
                }
            }
            let mut rearm = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLONESHOT, key);
            if !open
                || slot.stop.load(Ordering::SeqCst)
                || self.epoll.modify(&s.listener, &mut rearm).is_err()
            {
                self.close(&slot, &mut served);
                return;
            }
        }
        // A handle let go while this thread answered (and so could not
        // close it): close it now, unless someone else already does.
        if slot.stop.load(Ordering::SeqCst) {
            if let Ok(mut served) = slot.served.try_lock() {
                self.close(&slot, &mut served);
            }
        }
    }
}

/// What a listener has after a poll.
enum Pending {
    /// A call to answer.
    Call,
    /// Nothing within the time.
    Quiet,
    /// No task uses the filter any more (`POLLHUP`), or it is unusable.
    Closed,
}

/// Polls one listener for up to `timeout`.
fn wait_pending(listener: &OwnedFd, timeout: Duration) -> Pending {
    let ms = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    loop {
        let mut pfd = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut pfd, ms) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(_) => return Pending::Closed,
        }
        return match pfd[0].revents() {
            Some(r) if r.contains(PollFlags::POLLIN) => Pending::Call,
            Some(r) if r.is_empty() => Pending::Quiet,
            _ => Pending::Closed,
        };
    }
}

/// `SECCOMP_IOCTL_NOTIF_SEND`: the call fails with `errno` (refused calls). `ENOENT` (the
/// caller died, or a signal interrupted the call) needs nothing more.
pub(crate) fn respond(fd: BorrowedFd<'_>, id: u64, errno: i32) {
    let resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: -errno,
        // Never SECCOMP_USER_NOTIF_FLAG_CONTINUE: the call is refused.
        flags: 0,
    };
    sys::seccomp::send(fd, &resp);
}

/// `SECCOMP_IOCTL_NOTIF_SEND`: the call returns `val` (a call the creation
/// guard performed).
pub(crate) fn respond_value(fd: BorrowedFd<'_>, id: u64, val: i64) {
    let resp = libc::seccomp_notif_resp {
        id,
        val,
        error: 0,
        flags: 0,
    };
    sys::seccomp::send(fd, &resp);
}

/// `SECCOMP_IOCTL_NOTIF_SEND` with `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the
/// kernel runs the call as if the filter had allowed it. `ENOENT` (the
/// caller died or was interrupted; a restarted call notifies again) needs
/// nothing more.
pub(crate) fn respond_continue(fd: BorrowedFd<'_>, id: u64) {
    let resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: 0,
        flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    };
    sys::seccomp::send(fd, &resp);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notif(nr: libc::c_long, args: [u64; 6]) -> libc::seccomp_notif {
        let mut n = sys::seccomp::blank_notif();
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
