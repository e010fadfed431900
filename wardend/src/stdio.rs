//! Moving bytes between the client's stdio (fds the shim passed to the daemon)
//! and the sandboxed server's pipes.
//!
//! [`Relay`] picks the mechanism: for pipes and sockets (what MCP clients
//! pass) one [`Duplex`] thread serves stdin and stdout with non-blocking
//! `splice(2)`; otherwise one [`Pump`] thread per direction moves data with
//! `splice(2)` (zero-copy; one side is always a pipe) and falls back to
//! read/write when the other side
//! cannot splice (a tty, an `O_APPEND` file). Reads wait in `poll(2)` together
//! with a cancel eventfd, so a pump can be stopped while its source is idle.
//! Writes block when the reader is slow: that is the backpressure that keeps a
//! flooding server from growing the daemon's memory (at most one pipe buffer
//! is in flight per direction).
//!
//! The fds received from the shim share their open file description with the
//! shim (and maybe with a terminal the user's shell also uses), so their flags
//! (`O_NONBLOCK`) are never changed here.
//!
//! It runs on daemon threads, outside any sandbox, and needs no `unsafe`:
//! every call is a safe `nix` wrapper (`splice`, `poll`, `pipe2`, `eventfd`),
//! as in the egress proxy's `engine/splice.rs`.
//!
//! Off Linux there is no `splice` or `tee` ([`sys`]): every stream is a
//! [`Pump`] that reads into a buffer and writes it on, and the MCP taps get
//! a copy of each buffer the pumps read ([`Pump::start_tapped`]), before it
//! moves on. A filter ([`Filter`]) then runs on its own thread.

use std::io;
use std::os::fd::AsRawFd;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recv, MsgFlags};
use nix::sys::stat::{fstat, SFlag};
use nix::unistd::{read, write};

use crate::wake::Wake;

mod filter;
pub mod sys;

use filter::FilterLoop;
pub use filter::{Filter, GateRun, Report};

const CHUNK: usize = 1 << 16;

/// How long the duplex relay polls without sleeping after it moved data.
pub(crate) const SPIN_WINDOW: Duration = Duration::from_micros(150);
/// Stack of a relay thread: poll, splice and a heap buffer, no recursion;
/// far below the 2 MiB default.
const RELAY_STACK: usize = 128 << 10;

/// A thread with a cancel eventfd: what [`Pump`] and [`Duplex`] run on.
struct Worker {
    thread: Option<JoinHandle<io::Result<()>>>,
    cancel: Arc<Wake>,
    stop: Arc<AtomicBool>,
}

impl Worker {
    /// Runs `body(cancel_fd, stop_flag)` on a new thread named `name`.
    fn spawn(
        name: String,
        body: impl FnOnce(&Wake, &AtomicBool) -> io::Result<()> + Send + 'static,
    ) -> io::Result<Worker> {
        let cancel = Arc::new(Wake::new()?);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (cancel, stop) = (cancel.clone(), stop.clone());
            std::thread::Builder::new()
                .name(name)
                .stack_size(RELAY_STACK)
                .spawn(move || body(&cancel, &stop))?
        };
        Ok(Worker {
            thread: Some(thread),
            cancel,
            stop,
        })
    }

    /// Asks the thread to stop at its next wait.
    fn cancel(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.cancel.ring();
    }

    fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Waits up to `timeout` for the thread to end by itself.
    fn wait_for(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while let Some(t) = &self.thread {
            if t.is_finished() {
                let _ = self.thread.take().map(|t| t.join());
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Cancels and waits up to `grace`; a thread still blocked in a write to
    /// a reader that never reads is left to finish when that reader goes away
    /// (it holds no lock and owns its fds).
    fn stop(mut self, grace: Duration) {
        self.cancel();
        if !self.wait_for(grace) {
            self.thread.take();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.cancel();
        }
    }
}

/// A running copy from `src` to `dst`.
pub struct Pump {
    name: &'static str,
    worker: Worker,
    bytes: Arc<AtomicU64>,
}

impl Pump {
    /// Starts copying until EOF on `src`, an error, or [`Pump::cancel`].
    /// Both fds are closed when the pump ends, which is how EOF travels on.
    pub fn start(name: &'static str, src: OwnedFd, dst: OwnedFd) -> io::Result<Pump> {
        Pump::start_tapped(name, src, dst, None)
    }

    /// [`Pump::start`], and with `tap` a copy of every buffer read for the
    /// MCP observer, made before the buffer is written on (a tapped pump
    /// always copies through its buffer). How the stream is tapped where
    /// there is no `tee(2)`.
    pub fn start_tapped(
        name: &'static str,
        src: OwnedFd,
        dst: OwnedFd,
        tap: Option<Tap>,
    ) -> io::Result<Pump> {
        let bytes = Arc::new(AtomicU64::new(0));
        let counter = bytes.clone();
        let worker = Worker::spawn(format!("pump-{name}"), move |cancel, stop| {
            copy(src, dst, cancel, stop, &counter, tap)
        })?;
        Ok(Pump {
            name,
            worker,
            bytes,
        })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Bytes moved so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn bytes_counter(&self) -> Arc<AtomicU64> {
        self.bytes.clone()
    }

    /// Asks the pump to stop at its next wait.
    pub fn cancel(&self) {
        self.worker.cancel();
    }

    /// Waits up to `timeout` for the pump to finish by itself (EOF on its
    /// source). Returns false if it is still running.
    pub fn wait_for(&mut self, timeout: Duration) -> bool {
        self.worker.wait_for(timeout)
    }

    /// Cancels the pump and waits for it (see [`Worker::stop`]).
    pub fn stop(self, grace: Duration) {
        self.worker.stop(grace);
    }
}

enum Wait {
    Ready,
    Cancelled,
}

/// Whether `poll(2)` reported anything for `p` (events bits nix does not
/// name count too).
fn fired(p: &PollFd<'_>) -> bool {
    p.any().unwrap_or(true)
}

fn wait_fd(
    fd: BorrowedFd<'_>,
    events: PollFlags,
    cancel: &Wake,
    stop: &AtomicBool,
) -> io::Result<Wait> {
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(Wait::Cancelled);
        }
        let mut fds = [
            PollFd::new(fd, events),
            PollFd::new(cancel.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if fired(&fds[1]) {
            return Ok(Wait::Cancelled);
        }
        if fired(&fds[0]) {
            return Ok(Wait::Ready);
        }
    }
}

fn copy(
    src: OwnedFd,
    dst: OwnedFd,
    cancel: &Wake,
    stop: &AtomicBool,
    bytes: &AtomicU64,
    mut tap: Option<Tap>,
) -> io::Result<()> {
    // A tapped pump copies what it read into the tap: through a buffer.
    let mut use_splice = tap.is_none();
    let mut buf: Vec<u8> = if use_splice {
        Vec::new()
    } else {
        vec![0u8; CHUNK]
    };
    loop {
        // About to wait: the observer is rung for what moved.
        if let Some(t) = tap.as_mut() {
            t.ring_due(true, Instant::now());
        }
        match wait_fd(src.as_fd(), PollFlags::POLLIN, cancel, stop)? {
            Wait::Cancelled => return Ok(()),
            Wait::Ready => {}
        }
        if use_splice {
            // No offsets: both fds at their current file positions.
            match sys::splice_some(&src, &dst, CHUNK, false) {
                Ok(0) => return Ok(()), // EOF
                Ok(n) => {
                    bytes.fetch_add(n as u64, Ordering::Relaxed);
                    continue;
                }
                Err(Errno::EINTR | Errno::EAGAIN) => continue,
                // Not spliceable on one side: copy through a buffer instead.
                Err(Errno::EINVAL | Errno::ENOSYS | Errno::EBADF) => {
                    use_splice = false;
                    buf = vec![0u8; CHUNK];
                }
                Err(Errno::EPIPE) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        let n = match read(&src, &mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(Errno::EINTR | Errno::EAGAIN) => continue,
            Err(e) => return Err(e.into()),
        };
        if let Some(t) = tap.as_mut() {
            t.copy_bytes(&buf[..n]);
        }
        let mut off = 0usize;
        while off < n {
            match write(&dst, &buf[off..n]) {
                Ok(w) => {
                    off += w;
                    bytes.fetch_add(w as u64, Ordering::Relaxed);
                }
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => {
                    let waited = wait_fd(dst.as_fd(), PollFlags::POLLOUT, cancel, stop)?;
                    if let Wait::Cancelled = waited {
                        return Ok(());
                    }
                }
                Err(Errno::EPIPE) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(t) = tap.as_mut() {
            t.moved(n);
        }
    }
}

/// What a session's relay does besides moving bytes: copies for the MCP
/// observer, and the per-tool policy's gate.
#[derive(Default)]
pub struct Watch {
    pub taps: Option<[Tap; 2]>,
    pub gate: Option<GateRun>,
}

/// The relay of one session: a [`Duplex`] for stdin/stdout plus a [`Pump`]
/// for stderr when the client's fds are pipes or sockets (MCP clients pass
/// those), else one [`Pump`] per stream (ttys, files).
pub enum Relay {
    /// stderr on its own pump (`Some`) unless it is a pipe, which the
    /// duplex thread serves too.
    Duplex {
        io: Duplex,
        err: Option<Pump>,
    },
    Threads([Pump; 3]),
    /// A tty or file client whose stream is tapped: pumps between the
    /// client and two daemon pipes (`outer`), and a tapped duplex between
    /// those and the server (`inner`), one hop more.
    Tapped {
        outer: Box<Relay>,
        inner: Duplex,
    },
    /// Through a [`Filter`]: `inner` relays between the client and the
    /// filter's pipes, the filter between them and the server.
    Gated {
        inner: Box<Relay>,
        filter: Filter,
    },
}

impl Relay {
    /// `client` = the client's stdin, stdout, stderr; `server` = the daemon's
    /// ends of the server's pipes: stdin write end, stdout and stderr read ends.
    pub fn start(client: [OwnedFd; 3], server: [OwnedFd; 3]) -> io::Result<Relay> {
        Relay::start_tapped(client, server, None)
    }

    /// [`Relay::start_tapped`] with `stream.taps`, and with `stream.gate`
    /// the stream between the relay and the server through a [`Filter`]
    /// (the taps see what the client sends and gets).
    pub fn start_watched(
        client: [OwnedFd; 3],
        server: [OwnedFd; 3],
        stream: Watch,
    ) -> io::Result<Relay> {
        let Watch { taps, gate } = stream;
        let Some(gate) = gate else {
            return Relay::start_tapped(client, server, taps);
        };
        let [in_w, out_r, err_r] = server;
        let (q_r, q_w) = pipe()?;
        let (p_r, p_w) = pipe()?;
        if duplex_capable(&client[0]) && duplex_capable(&client[1]) {
            // The filter on the relay's own thread, between its polls.
            let f = FilterLoop::new(q_r, in_w, out_r, p_w, gate)?;
            return Relay::start_duplex(client, [q_w, p_r, err_r], taps, Some(f));
        }
        let filter = Filter::start(q_r, in_w, out_r, p_w, gate)?;
        let inner = Relay::start_tapped(client, [q_w, p_r, err_r], taps)?;
        Ok(Relay::Gated {
            inner: Box::new(inner),
            filter,
        })
    }

    /// [`Relay::start`] with `taps` (stdin, stdout) copying both directions
    /// of the MCP stream for an observer. Only the duplex relay taps (what
    /// MCP clients use: pipes and sockets); with ttys or files the pumps
    /// relay between the client and two daemon pipes, and a tapped duplex
    /// between those and the server ([`Relay::Tapped`]).
    pub fn start_tapped(
        client: [OwnedFd; 3],
        server: [OwnedFd; 3],
        taps: Option<[Tap; 2]>,
    ) -> io::Result<Relay> {
        if duplex_capable(&client[0]) && duplex_capable(&client[1]) {
            return Relay::start_duplex(client, server, taps, None);
        }
        let [c_in, c_out, c_err] = client;
        let [in_w, out_r, err_r] = server;
        if let Some(taps) = taps {
            // No tee here: the pumps copy what they read into the taps.
            if !sys::SPLICE {
                let [tap_in, tap_out] = taps;
                return Ok(Relay::Threads([
                    Pump::start_tapped("stdin", c_in, in_w, Some(tap_in))?,
                    Pump::start_tapped("stdout", out_r, c_out, Some(tap_out))?,
                    Pump::start("stderr", err_r, c_err)?,
                ]));
            }
            let (q_r, q_w) = pipe()?;
            let (p_r, p_w) = pipe()?;
            let inner = Duplex::start_with_stderr(q_r, in_w, out_r, p_w, None, Some(taps), None)?;
            let outer = Relay::start_tapped([c_in, c_out, c_err], [q_w, p_r, err_r], None)?;
            Ok(Relay::Tapped {
                outer: Box::new(outer),
                inner,
            })
        } else {
            Ok(Relay::Threads([
                Pump::start("stdin", c_in, in_w)?,
                Pump::start("stdout", out_r, c_out)?,
                Pump::start("stderr", err_r, c_err)?,
            ]))
        }
    }

    /// The duplex relay for a client whose stdin and stdout are pipes or
    /// sockets, with `filter` on its thread.
    fn start_duplex(
        client: [OwnedFd; 3],
        server: [OwnedFd; 3],
        taps: Option<[Tap; 2]>,
        filter: Option<FilterLoop>,
    ) -> io::Result<Relay> {
        let [c_in, c_out, c_err] = client;
        let [in_w, out_r, err_r] = server;
        // A pipe never blocks a SPLICE_F_NONBLOCK splice (a full one says
        // EAGAIN); a socket can (the flag does not reach its send), and a
        // client that never reads its stderr must not stall its stdout.
        if is_fifo(&c_err) {
            Ok(Relay::Duplex {
                io: Duplex::start_with_stderr(
                    c_in,
                    in_w,
                    out_r,
                    c_out,
                    Some((err_r, c_err)),
                    taps,
                    filter,
                )?,
                err: None,
            })
        } else {
            Ok(Relay::Duplex {
                io: Duplex::start_with_stderr(c_in, in_w, out_r, c_out, None, taps, filter)?,
                err: Some(Pump::start("stderr", err_r, c_err)?),
            })
        }
    }

    /// Live byte counters: stdin (client → server), stdout and stderr (server →
    /// client).
    pub fn counters(&self) -> [Arc<AtomicU64>; 3] {
        match self {
            Relay::Duplex { io, err } => {
                let (i, o) = io.counters();
                let e = match err {
                    Some(p) => p.bytes_counter(),
                    None => io.bytes_err.clone(),
                };
                [i, o, e]
            }
            Relay::Threads([i, o, e]) => [i.bytes_counter(), o.bytes_counter(), e.bytes_counter()],
            Relay::Gated { inner, .. } => inner.counters(),
            Relay::Tapped { outer, .. } => outer.counters(),
        }
    }

    /// Blocking, once the server has exited: lets its last stdout bytes
    /// reach the client (up to `drain`), then stops everything and closes
    /// every fd, so the client sees EOF.
    pub fn finish(self, drain: Duration) {
        match self {
            Relay::Duplex { io, err } => {
                io.wait_outbound(drain);
                match err {
                    Some(mut err) => {
                        err.wait_for(Duration::from_millis(200));
                        io.stop(Duration::from_millis(100));
                        err.stop(Duration::from_millis(10));
                    }
                    None => {
                        io.wait_stderr(Duration::from_millis(200));
                        io.stop(Duration::from_millis(100));
                    }
                }
            }
            Relay::Threads([stdin, mut stdout, mut stderr]) => {
                stdin.cancel();
                stdout.wait_for(drain);
                stderr.wait_for(Duration::from_millis(200));
                stdin.stop(Duration::from_millis(100));
                stdout.stop(Duration::from_millis(10));
                stderr.stop(Duration::from_millis(10));
            }
            Relay::Gated { inner, filter } => {
                let t0 = Instant::now();
                filter.wait_outbound(drain);
                inner.finish(drain.saturating_sub(t0.elapsed()));
                filter.stop(Duration::from_millis(10));
            }
            Relay::Tapped { outer, inner } => {
                // The server's last bytes into the daemon pipe, then its
                // close lets the pumps finish writing them to the client.
                let t0 = Instant::now();
                inner.wait_outbound(drain);
                inner.stop(Duration::from_millis(100));
                outer.finish(drain.saturating_sub(t0.elapsed()));
            }
        }
    }
}

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    sys::pipe(false)
}

/// Both directions of a session's stdin/stdout on one thread.
///
/// Used when the client's fds are pipes or sockets (what MCP clients pass),
/// so every move is a non-blocking `splice(2)` and one thread can wait on
/// both directions at once. After it moves data in either direction it
/// polls (yielding the CPU) for up to [`SPIN_WINDOW`] before sleeping: the
/// reply to a request, or the next request after a reply, usually comes within
/// microseconds, and on virtual machines waking a sleeping thread on another
/// CPU costs tens of them. One polling thread per session instead of two also
/// leaves the CPUs to the client and the server.
///
/// Backpressure: while the server's stdin pipe is full the thread waits for it
/// to drain before reading more from the client; while the client does not
/// read its stdout, the server's writes block on its full pipe. Nothing is
/// buffered in the daemon.
pub struct Duplex {
    worker: Worker,
    out_done: Arc<AtomicBool>,
    err_done: Arc<AtomicBool>,
    bytes_in: Arc<AtomicU64>,
    bytes_out: Arc<AtomicU64>,
    bytes_err: Arc<AtomicU64>,
}

/// The file type bits of `fd`'s mode; None when `fstat` fails.
fn file_type(fd: &OwnedFd) -> Option<SFlag> {
    let st = fstat(fd).ok()?;
    Some(SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT)
}

/// True for fds `Duplex` can serve: pipes and sockets, where there is
/// `splice(2)` (never elsewhere: pumps serve every stream there).
pub fn duplex_capable(fd: &OwnedFd) -> bool {
    sys::SPLICE && matches!(file_type(fd), Some(SFlag::S_IFIFO | SFlag::S_IFSOCK))
}

/// True for a pipe (FIFO).
fn is_fifo(fd: &OwnedFd) -> bool {
    file_type(fd) == Some(SFlag::S_IFIFO)
}

/// Only ever on the daemon's own pipe ends.
fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let fl = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK))?;
    Ok(())
}

fn poll_now(fd: BorrowedFd<'_>, events: PollFlags) -> bool {
    let mut p = [PollFd::new(fd, events)];
    matches!(poll(&mut p, PollTimeout::ZERO), Ok(n) if n > 0)
}

/// What the observer needs to know beside a tap's bytes, in the order of
/// the copy: when each copy was made, and where bytes went by uncopied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// The copy up to this offset (in bytes of the copy) was made at `at`,
    /// just before the same bytes moved on.
    Copied { end: u64, at: Instant },
    /// Bytes went by uncopied after this offset.
    Gap { at_offset: u64 },
}

/// What a tap tells its observer beside the bytes, shared with it.
pub type Marks = Arc<Mutex<MarkLog>>;

/// A tap's marks, oldest first (at most [`MAX_MARKS`]: beyond, the oldest
/// timing marks are dropped, only their precision is lost), the copy under
/// way, and how far the observer has followed.
///
/// A copy is announced before it is made (`copying`) and marked once made,
/// under one lock with the announcement's end: whatever the observer reads
/// from the tap is covered by a mark or by the copy under way, so its time
/// is always known (a relay thread preempted between its copy and its mark
/// cannot make a request look later than it was), and a record made at a
/// time a copy had begun waits for the observer to follow it.
#[derive(Debug, Default)]
pub struct MarkLog {
    marks: std::collections::VecDeque<Mark>,
    /// A copy begun at this time and not yet marked.
    copying: Option<Instant>,
    /// Bytes of the copy the observer has followed.
    followed: u64,
}

impl MarkLog {
    /// When the oldest copy the observer has not followed yet was made.
    pub fn front_at(&self) -> Option<Instant> {
        self.marks
            .iter()
            .find_map(|mk| match mk {
                Mark::Copied { at, .. } => Some(*at),
                Mark::Gap { .. } => None,
            })
            .or(self.copying)
    }

    /// How far (an offset of the tap's bytes) the copies already marked and
    /// made before `before` reach: what the observer may read from this tap
    /// before it must follow the other one, whose oldest unread copy was
    /// made at `before` (`None`: nothing unread there). Only marked copies:
    /// bytes beyond them belong to a copy under way or announced after this
    /// look, whose time is not known here, and wait for the next look.
    pub fn readable_before(&self, before: Option<Instant>) -> u64 {
        let mut limit = self.followed;
        for mk in &self.marks {
            match *mk {
                Mark::Copied { end, at } => {
                    if before.is_some_and(|t| at >= t) {
                        break;
                    }
                    limit = limit.max(end);
                }
                Mark::Gap { .. } => {}
            }
        }
        limit
    }

    /// The marks up to offset `end` (what the observer read), and the time
    /// of the copy the bytes beyond the last of them belong to (the next
    /// mark's, or the copy under way's).
    pub fn due(&self, end: u64) -> (Vec<Mark>, Option<Instant>) {
        let mut due = Vec::new();
        for &mk in &self.marks {
            let off = match mk {
                Mark::Copied { end, .. } => end,
                Mark::Gap { at_offset } => at_offset,
            };
            if off > end {
                return match mk {
                    Mark::Copied { at, .. } => (due, Some(at)),
                    Mark::Gap { .. } => (due, self.copying),
                };
            }
            due.push(mk);
        }
        (due, self.copying)
    }

    /// The observer followed the first `n` marks, and the copy up to
    /// `offset`.
    pub fn take(&mut self, n: usize, offset: u64) {
        let n = n.min(self.marks.len());
        self.marks.drain(..n);
        self.followed = self.followed.max(offset);
        while matches!(self.marks.front(), Some(Mark::Copied { end, .. }) if *end <= self.followed)
        {
            self.marks.pop_front();
        }
    }

    /// Whether bytes went by uncopied at some offset still marked.
    pub fn has_gap(&self) -> bool {
        self.marks.iter().any(|m| matches!(m, Mark::Gap { .. }))
    }

    pub(crate) fn push(&mut self, mark: Mark) {
        if self.marks.len() >= MAX_MARKS {
            // A timing mark goes first; a gap is never forgotten.
            if let Some(i) = self
                .marks
                .iter()
                .position(|x| matches!(x, Mark::Copied { .. }))
            {
                self.marks.remove(i);
            }
        }
        self.marks.push_back(mark);
    }
}

/// The most marks a tap holds for its observer.
pub const MAX_MARKS: usize = 4096;

/// A copy of one direction of a [`Duplex`] for an observer (the MCP
/// stream's, `mcp.rs`): before moving bytes the relay duplicates them into
/// the tap's pipe, with `tee(2)` from a pipe or a `MSG_PEEK` read of a
/// socket, and then moves exactly what it copied. It never waits for the
/// observer and never changes what moves or when: when the tap's pipe is
/// full the bytes go by uncopied and the offset is noted in [`Gaps`]; when
/// the observer is gone the tap stops.
pub struct Tap {
    /// The pipe's write end. Declared before `_end`: fields drop in order,
    /// so the pipe is closed before the observer is rung for its end.
    w: OwnedFd,
    /// The source is a socket: peeked, not teed.
    peek: bool,
    buf: Vec<u8>,
    /// Bytes copied but not moved yet (move those before copying more).
    ahead: usize,
    written: u64,
    marks: Marks,
    broken: bool,
    wake: Arc<TapWake>,
    /// Copies moved since the observer was last rung for (the relay rings
    /// once it is idle, see [`Tap::ring_due`]), their bytes, and when the
    /// first of them was made.
    unrung: u32,
    unrung_bytes: usize,
    unrung_since: Option<Instant>,
    _end: RingAtEnd,
}

/// Rings a tap's observer when the tap is dropped, *after* its pipe was
/// closed (the field after `Tap::w`): an observer woken before the close
/// would find the pipe empty but open, wait again, and see the end only at
/// its next look ([`crate::mcp`]'s 200 ms), holding up the session's end
/// (and with it the client's exit status) that long.
struct RingAtEnd(Arc<TapWake>);

impl Drop for RingAtEnd {
    fn drop(&mut self) {
        // An observer waiting on the wake-up must look (and find EOF).
        self.0.ring();
    }
}

/// A tap rings its observer for moved copies at once, without waiting for
/// the relay to be idle, past this many copies...
const RING_COPIES: u32 = 32;
/// ...or this many bytes (a tap's pipe holds 1 MiB, in at most 256
/// buffers)...
const RING_BYTES: usize = 128 << 10;
/// ...or once the first of them is this old (a relay kept busy by another
/// lane).
const RING_LATEST: Duration = Duration::from_millis(5);

/// The observer's end of a [`Tap`]: the pipe (non-blocking, for plain
/// reads: never registered with an event loop), and the wake-up it waits on
/// when it found the pipe empty.
pub struct TapReader {
    pub fd: OwnedFd,
    pub marks: Marks,
    pub wake: Arc<TapWake>,
}

/// How a tap wakes its observer: a [`tokio::sync::Notify`] the relay rings
/// only when the observer asked for it ([`TapWake::arm`]) and copies were
/// moved on since, once the relay is idle (its spin window over: the round
/// trip is done) or a backlog built up ([`RING_COPIES`], [`RING_BYTES`],
/// [`RING_LATEST`]); once when the tap is dropped; and by a record that
/// waits for the observer ([`TapWake::ring`]). A pipe registered with the
/// event loop would wake a worker thread for every message, at the moment
/// the relay copies it: on a virtual machine, waking an idle CPU costs the
/// waker tens of µs, which would land on every round trip. An observer that
/// drains on its own schedule while messages keep coming costs the relay a
/// counter per move.
#[derive(Debug)]
pub struct TapWake {
    notify: tokio::sync::Notify,
    armed: AtomicBool,
}

impl TapWake {
    /// Asks to be woken by the next move. Arm *before* the last look at the
    /// pipe: a copy made after that look then rings.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Resolves once rung (at once if it was rung since the last time).
    pub async fn rung(&self) {
        self.notify.notified().await
    }

    fn notify(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.armed.swap(false, Ordering::SeqCst) {
            self.ring();
        }
    }

    /// Wakes the observer whether or not it asked (a record waiting for it
    /// to follow the stream).
    pub fn ring(&self) {
        // Kept as a permit when the observer is not waiting yet.
        self.notify.notify_one();
    }
}

/// The capacity asked for a tap's pipe (the unprivileged maximum,
/// `/proc/sys/fs/pipe-max-size`, by default).
const TAP_PIPE: i32 = 1 << 20;

/// A tap and its reader. The tap learns its source at [`Duplex`] start.
pub fn tap() -> io::Result<(Tap, TapReader)> {
    let (r, w) = sys::pipe(true)?;
    // Best effort: a smaller pipe only means gaps sooner.
    sys::set_pipe_size(&w, TAP_PIPE);
    let marks: Marks = Arc::default();
    let wake = Arc::new(TapWake {
        notify: tokio::sync::Notify::new(),
        armed: AtomicBool::new(false),
    });
    Ok((
        Tap {
            w,
            peek: false,
            buf: Vec::new(),
            ahead: 0,
            written: 0,
            marks: marks.clone(),
            broken: false,
            wake: wake.clone(),
            unrung: 0,
            unrung_bytes: 0,
            unrung_since: None,
            _end: RingAtEnd(wake.clone()),
        },
        TapReader { fd: r, marks, wake },
    ))
}

impl Tap {
    /// Makes the tap fit `src`: a pipe is teed, a socket peeked; anything
    /// else is not tapped (the duplex serves only those two).
    fn attach(&mut self, src: &OwnedFd) {
        match file_type(src) {
            Some(SFlag::S_IFIFO) => self.peek = false,
            Some(SFlag::S_IFSOCK) => {
                self.peek = true;
                self.buf = vec![0u8; CHUNK];
            }
            _ => self.broken = true,
        }
    }

    /// Copies what `src` holds into the tap, unless copied bytes are still
    /// to move. Afterwards, `ahead` is what the move may take (0: anything,
    /// when the tap is off or full). [`Copy::Empty`]: nothing was there to
    /// copy, so nothing may move now either (bytes arriving after the copy
    /// looked would go by uncopied): the lane waits for more.
    fn copy(&mut self, src: &OwnedFd) -> Copy {
        if self.ahead > 0 || self.broken {
            return Copy::Move;
        }
        let at = Instant::now();
        self.log().copying = Some(at);
        if self.unrung == 0 {
            self.unrung_since = Some(at);
        }
        let (copy, n) = self.copy_now(src);
        // The mark and the end of the announcement, under one lock.
        let mut log = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        log.copying = None;
        if n > 0 {
            self.ahead = n;
            self.written += n as u64;
            // Bytes the observer followed already (at the announcement's
            // time) need no mark.
            if self.written > log.followed {
                log.push(Mark::Copied {
                    end: self.written,
                    at,
                });
            }
        }
        copy
    }

    /// A pump's copy: `bytes` (just read, about to be written on) into the
    /// tap, announced and marked as [`Tap::copy`] does; what does not fit
    /// in the tap's pipe goes by uncopied (a gap). Then [`Tap::moved`].
    fn copy_bytes(&mut self, bytes: &[u8]) {
        if self.broken || bytes.is_empty() {
            return;
        }
        let at = Instant::now();
        self.log().copying = Some(at);
        if self.unrung == 0 {
            self.unrung_since = Some(at);
        }
        let n = loop {
            match write(&self.w, bytes) {
                Ok(m) => break m,
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => break 0,
                // The observer is gone.
                Err(_) => {
                    self.broken = true;
                    break 0;
                }
            }
        };
        {
            // The mark and the end of the announcement, under one lock.
            let mut log = self.marks.lock().unwrap_or_else(|p| p.into_inner());
            log.copying = None;
            if n > 0 {
                self.written += n as u64;
                if self.written > log.followed {
                    log.push(Mark::Copied {
                        end: self.written,
                        at,
                    });
                }
            }
        }
        if n < bytes.len() && !self.broken {
            self.lose();
        }
    }

    fn log(&self) -> std::sync::MutexGuard<'_, MarkLog> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The copy itself: what the lane may do, and how many bytes were
    /// copied.
    fn copy_now(&mut self, src: &OwnedFd) -> (Copy, usize) {
        if self.peek {
            let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
            match recv(src.as_raw_fd(), &mut self.buf, flags) {
                Ok(0) => (Copy::Move, 0), // EOF: the move says so
                Ok(n) => match write(&self.w, &self.buf[..n]) {
                    Ok(m) => (Copy::Move, m),
                    Err(Errno::EAGAIN) => {
                        self.lose();
                        (Copy::Move, 0)
                    }
                    Err(Errno::EINTR) => (Copy::Empty, 0),
                    Err(_) => {
                        self.broken = true;
                        (Copy::Move, 0)
                    }
                },
                Err(Errno::EAGAIN | Errno::EINTR) => (Copy::Empty, 0),
                // Not readable as a socket after all: the move decides.
                Err(_) => {
                    self.broken = true;
                    (Copy::Move, 0)
                }
            }
        } else {
            match sys::tee_some(src, &self.w, CHUNK) {
                Ok(n) => (Copy::Move, n),
                // The source is empty, or the tap is full.
                Err(Errno::EAGAIN) => {
                    if poll_now(src.as_fd(), PollFlags::POLLIN)
                        && !poll_now(self.w.as_fd(), PollFlags::POLLOUT)
                    {
                        self.lose();
                        (Copy::Move, 0)
                    } else {
                        (Copy::Empty, 0)
                    }
                }
                Err(Errno::EINTR) => (Copy::Empty, 0),
                // The observer is gone (EPIPE), or the source cannot be teed.
                Err(_) => {
                    self.broken = true;
                    (Copy::Move, 0)
                }
            }
        }
    }

    /// What moves next goes by uncopied.
    fn lose(&mut self) {
        let gap = Mark::Gap {
            at_offset: self.written,
        };
        let mut log = self.log();
        if log.marks.back() != Some(&gap) {
            log.push(gap);
        }
    }

    /// `n` bytes moved. The observer is not rung for them yet (waking it
    /// costs the relay a futex wake and, on a virtual machine, an idle
    /// CPU's wake-up, on the way of the answer the relay moves next): the
    /// relay rings when it goes idle, or at once when a backlog builds.
    fn moved(&mut self, n: usize) {
        self.ahead = self.ahead.saturating_sub(n);
        if n > 0 && !self.broken {
            self.unrung += 1;
            self.unrung_bytes += n;
            if self.unrung >= RING_COPIES || self.unrung_bytes >= RING_BYTES {
                self.ring_now();
            }
        }
    }

    /// Rings the observer (if it asked) for the copies moved since the
    /// last ring.
    fn ring_now(&mut self) {
        if self.unrung > 0 {
            self.unrung = 0;
            self.unrung_bytes = 0;
            self.unrung_since = None;
            self.wake.notify();
        }
    }

    /// The relay's look before it polls: rings for what moved when it is
    /// about to sleep (`idle`), or when the oldest copy not rung for is
    /// older than [`RING_LATEST`].
    fn ring_due(&mut self, idle: bool, now: Instant) {
        if self.unrung > 0
            && (idle
                || self
                    .unrung_since
                    .is_none_or(|t| now.saturating_duration_since(t) >= RING_LATEST))
        {
            self.ring_now();
        }
    }
}

/// What a tap's copy allows the lane.
enum Copy {
    /// Move (up to `ahead` when the tap copied).
    Move,
    /// Nothing to copy, so nothing to move: wait for the source.
    Empty,
}

/// One direction of a [`Duplex`].
struct Lane {
    src: OwnedFd,
    dst: OwnedFd,
    /// Waiting for `dst` to drain rather than for `src` to have data.
    want_write: bool,
    bytes: Arc<AtomicU64>,
    /// A copy for the MCP observer.
    tap: Option<Tap>,
}

enum Step {
    Moved,
    Idle,
    Closed,
}

impl Lane {
    fn pollfd(&self) -> PollFd<'_> {
        if self.want_write {
            PollFd::new(self.dst.as_fd(), PollFlags::POLLOUT)
        } else {
            PollFd::new(self.src.as_fd(), PollFlags::POLLIN)
        }
    }

    fn step(&mut self) -> io::Result<Step> {
        // With a tap, what moves is exactly what was copied.
        let mut len = CHUNK;
        if let Some(t) = self.tap.as_mut() {
            if let Copy::Empty = t.copy(&self.src) {
                self.want_write = false;
                return Ok(Step::Idle);
            }
            if t.ahead > 0 {
                len = t.ahead;
            }
        }
        // No offsets: both fds at their current positions.
        match sys::splice_some(&self.src, &self.dst, len, true) {
            Ok(0) => Ok(Step::Closed),
            Ok(n) => {
                if let Some(t) = self.tap.as_mut() {
                    t.moved(n);
                }
                self.want_write = false;
                self.bytes.fetch_add(n as u64, Ordering::Relaxed);
                Ok(Step::Moved)
            }
            Err(Errno::EINTR) => Ok(Step::Idle),
            // Either side may be the one that is not ready: ask the destination.
            Err(Errno::EAGAIN) => {
                // What was copied waits for the destination: the observer
                // may take it meanwhile.
                if let Some(t) = self.tap.as_ref().filter(|t| t.ahead > 0) {
                    t.wake.notify();
                }
                self.want_write = !poll_now(self.dst.as_fd(), PollFlags::POLLOUT);
                Ok(Step::Idle)
            }
            Err(Errno::EPIPE | Errno::ECONNRESET) => Ok(Step::Closed),
            Err(e) => Err(e.into()),
        }
    }
}

impl Duplex {
    /// `c_in` → `in_w` (client to server) and `out_r` → `c_out` (server to
    /// client). `in_w` and `out_r` must be the daemon's own pipe ends (they
    /// are made non-blocking); the client's fds are never changed.
    pub fn start(
        c_in: OwnedFd,
        in_w: OwnedFd,
        out_r: OwnedFd,
        c_out: OwnedFd,
    ) -> io::Result<Duplex> {
        Duplex::start_with_stderr(c_in, in_w, out_r, c_out, None, None, None)
    }

    /// [`Duplex::start`], and with `err` = (`err_r`, `c_err`) the server's
    /// stderr to the client's too, on the same thread. `c_err` must be a
    /// pipe (a splice into a full socket blocks whatever its flags say, and
    /// would stall the other directions); `err_r` is made non-blocking.
    /// With `filter`, `in_w` and `out_r` are the filter's pipes and the
    /// thread serves the filter too.
    fn start_with_stderr(
        c_in: OwnedFd,
        in_w: OwnedFd,
        out_r: OwnedFd,
        c_out: OwnedFd,
        err: Option<(OwnedFd, OwnedFd)>,
        taps: Option<[Tap; 2]>,
        filter: Option<FilterLoop>,
    ) -> io::Result<Duplex> {
        set_nonblocking(&in_w)?;
        set_nonblocking(&out_r)?;
        if let Some((err_r, _)) = &err {
            set_nonblocking(err_r)?;
        }
        let out_done = Arc::new(AtomicBool::new(false));
        let err_done = Arc::new(AtomicBool::new(err.is_none()));
        let bytes_in = Arc::new(AtomicU64::new(0));
        let bytes_out = Arc::new(AtomicU64::new(0));
        let bytes_err = Arc::new(AtomicU64::new(0));
        let (tap_in, tap_out) = match taps {
            Some([mut i, mut o]) => {
                i.attach(&c_in);
                o.attach(&out_r);
                (Some(i), Some(o))
            }
            None => (None, None),
        };
        let inbound = Lane {
            src: c_in,
            dst: in_w,
            want_write: false,
            bytes: bytes_in.clone(),
            tap: tap_in,
        };
        let outbound = Lane {
            src: out_r,
            dst: c_out,
            want_write: false,
            bytes: bytes_out.clone(),
            tap: tap_out,
        };
        let errors = err.map(|(src, dst)| Lane {
            src,
            dst,
            want_write: false,
            bytes: bytes_err.clone(),
            tap: None,
        });
        let done = [out_done.clone(), err_done.clone()];
        let worker = Worker::spawn("pump-stdio".into(), move |cancel, stop| {
            duplex(
                [Some(inbound), Some(outbound), errors],
                filter,
                cancel,
                stop,
                &done,
            )
        })?;
        Ok(Duplex {
            worker,
            out_done,
            err_done,
            bytes_in,
            bytes_out,
            bytes_err,
        })
    }

    /// The live counters behind [`Duplex::bytes`]: (client → server, server → client).
    pub fn counters(&self) -> (Arc<AtomicU64>, Arc<AtomicU64>) {
        (self.bytes_in.clone(), self.bytes_out.clone())
    }

    /// Bytes moved client → server and server → client.
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.bytes_in.load(Ordering::Relaxed),
            self.bytes_out.load(Ordering::Relaxed),
        )
    }

    /// Waits up to `timeout` for the server's stdout to reach EOF and be
    /// fully delivered. Returns false on timeout.
    pub fn wait_outbound(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.out_done.load(Ordering::SeqCst) || self.worker.is_finished() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits up to `timeout` for the server's stderr to reach EOF and be
    /// delivered, when this thread serves it (else at once). Returns false
    /// on timeout.
    pub fn wait_stderr(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.err_done.load(Ordering::SeqCst) || self.worker.is_finished() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Bytes moved server → client on stderr (when this thread serves it).
    pub fn bytes_err(&self) -> u64 {
        self.bytes_err.load(Ordering::Relaxed)
    }

    /// Stops the thread (it closes every fd it holds) and waits up to `grace`.
    pub fn stop(self, grace: Duration) {
        self.worker.stop(grace);
    }
}

/// Serves `lanes` (client → server stdin, server stdout → client, and
/// optionally server stderr → client), and `filter` between the first two
/// and the server, until all are closed or cancelled; `done[0]`/`done[1]`
/// are set when the stdout/stderr lane has closed.
fn duplex(
    lanes: [Option<Lane>; 3],
    mut filter: Option<FilterLoop>,
    cancel: &Wake,
    stop: &AtomicBool,
    done: &[Arc<AtomicBool>; 2],
) -> io::Result<()> {
    let mut lanes = lanes;
    let mut last_move: Option<Instant> = None;
    let result = loop {
        let filter_done = filter.as_mut().is_none_or(FilterLoop::settle);
        if stop.load(Ordering::SeqCst) || (lanes.iter().all(Option::is_none) && filter_done) {
            break Ok(());
        }
        let now = Instant::now();
        let spinning = last_move.is_some_and(|t| now.saturating_duration_since(t) < SPIN_WINDOW);
        // The observer is rung for what moved once the relay is idle (the
        // round trip is over by then), or when that has waited too long.
        for lane in lanes.iter_mut().flatten() {
            if let Some(t) = lane.tap.as_mut() {
                t.ring_due(!spinning, now);
            }
        }
        // The poll set borrows the lanes; what fired is copied out before
        // the lanes move data.
        let mut ready = [false; 3];
        let mut filter_ready = None;
        let polled = {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(10);
            let mut which: Vec<usize> = Vec::with_capacity(3);
            for (i, lane) in lanes.iter().enumerate() {
                if let Some(l) = lane {
                    fds.push(l.pollfd());
                    which.push(i);
                }
            }
            let slots = filter
                .as_ref()
                .filter(|_| !filter_done)
                .map(|f| f.poll_set(&mut fds));
            fds.push(PollFd::new(cancel.as_fd(), PollFlags::POLLIN));
            let timeout = if spinning {
                PollTimeout::ZERO
            } else {
                PollTimeout::NONE
            };
            poll(&mut fds, timeout).map(|n| {
                for (k, &i) in which.iter().enumerate() {
                    ready[i] = fired(&fds[k]);
                }
                filter_ready = slots.map(|s| s.ready(&fds));
                (n, fds.last().is_some_and(fired))
            })
        };
        let cancelled = match polled {
            Ok((0, _)) => {
                // Nothing yet within the window: let the client or the server
                // run (sched_yield).
                std::thread::yield_now();
                continue;
            }
            Ok((_, cancelled)) => cancelled,
            Err(Errno::EINTR) => continue,
            Err(e) => break Err(e.into()),
        };
        if cancelled {
            break Ok(());
        }
        let mut failed = None;
        let mut moved = [false; 3];
        for (i, slot) in lanes.iter_mut().enumerate() {
            if !ready[i] {
                continue;
            }
            match step_lane(slot, i, done) {
                Ok(m) => moved[i] = m,
                Err(e) => failed = Some(e),
            }
        }
        // The filter, at once: what the client's lane just moved into it
        // is read now, and what it passes to the client is moved on now,
        // without another poll.
        if let Some(f) = filter.as_mut() {
            let mut r = filter_ready.take().unwrap_or_default();
            if moved[0] {
                r.client_sent();
            }
            match f.serve(r) {
                Ok(true) => {
                    if let Err(e) = step_lane(&mut lanes[1], 1, done) {
                        failed = Some(e);
                    }
                    moved[1] = true;
                }
                Ok(false) => {}
                Err(e) => failed = Some(e),
            }
        }
        if moved.iter().any(|m| *m) {
            last_move = Some(Instant::now());
        }
        if let Some(e) = failed {
            break Err(e);
        }
    };
    for d in done {
        d.store(true, Ordering::SeqCst);
    }
    if let Some(f) = filter.as_mut() {
        f.end();
    }
    result
}

/// One step of lane `i` (if still open): whether it moved bytes. A lane
/// that closed is dropped (closing both its fds: EOF travels on).
fn step_lane(slot: &mut Option<Lane>, i: usize, done: &[Arc<AtomicBool>; 2]) -> io::Result<bool> {
    let Some(lane) = slot.as_mut() else {
        return Ok(false);
    };
    match lane.step()? {
        Step::Moved => Ok(true),
        Step::Idle => Ok(false),
        Step::Closed => {
            *slot = None;
            if i >= 1 {
                done[i - 1].store(true, Ordering::SeqCst);
            }
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A dropped tap rings its observer only once its pipe is closed: an
    /// observer woken by that ring finds the end (EOF), never an empty open
    /// pipe after which it would wait again until its next look (200 ms
    /// later, holding up the session's end: one short session in eight
    /// before the fix). A thread spins on the wake-up and reads the moment
    /// it is rung, against a drop on this thread, many times over.
    #[test]
    fn a_dropped_tap_rings_after_its_pipe_is_closed() {
        use futures::FutureExt;
        for _ in 0..300 {
            let (tap, reader) = tap().unwrap();
            let watcher = std::thread::spawn(move || loop {
                if reader.wake.rung().now_or_never().is_some() {
                    let mut b = [0u8; 8];
                    return nix::unistd::read(&reader.fd, &mut b);
                }
                std::hint::spin_loop();
            });
            // Let the watcher start spinning.
            std::thread::yield_now();
            drop(tap);
            assert_eq!(
                watcher.join().unwrap(),
                Ok(0),
                "rung before the end was readable"
            );
        }
    }

    /// What the observer may read from a tap before following the other
    /// one: the marked copies made before the other's oldest unread copy,
    /// never a copy not marked yet.
    #[test]
    fn a_tap_is_read_only_up_to_the_other_taps_oldest_copy() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(1);
        let t2 = t0 + Duration::from_millis(2);
        let mut log = MarkLog::default();
        log.push(Mark::Copied { end: 10, at: t0 });
        log.push(Mark::Gap { at_offset: 10 });
        log.push(Mark::Copied { end: 25, at: t2 });
        log.copying = Some(t2);
        // Nothing older waits in the other tap: every marked copy.
        assert_eq!(log.readable_before(None), 25);
        // A copy made at t1 waits there (a progress notification): only
        // the request copied at t0, not the cancellation copied at t2.
        assert_eq!(log.readable_before(Some(t1)), 10);
        assert_eq!(log.readable_before(Some(t0)), 0);
        // Followed bytes are not given again.
        log.take(1, 10);
        assert_eq!(log.readable_before(Some(t1)), 10);
    }

    #[test]
    fn a_copy_has_its_time_before_its_mark_and_a_followed_one_needs_none() {
        // A tap on a pipe whose observer reads between the copy and its mark
        // (what a relay thread preempted there looks like).
        let (src_r, src_w) = pipe().unwrap();
        let (mut tap, reader) = tap().unwrap();
        tap.attach(&src_r);
        nix::unistd::write(&src_w, b"{\"id\":1}\n").unwrap();
        let t0 = Instant::now();
        assert!(reader.marks.lock().unwrap().front_at().is_none());
        // The announcement, as `copy` makes it before the tee.
        reader.marks.lock().unwrap().copying = Some(t0);
        let (c, n) = tap.copy_now(&src_r);
        assert!(matches!(c, Copy::Move));
        assert_eq!(n, 9);
        {
            let log = reader.marks.lock().unwrap();
            // A record made after t0 waits for the observer...
            assert_eq!(log.front_at(), Some(t0));
            // ...and the observer, reading the bytes now, knows their time.
            let (due, next) = log.due(9);
            assert!(due.is_empty());
            assert_eq!(next, Some(t0));
        }
        // The observer follows them before the relay marks them.
        reader.marks.lock().unwrap().take(0, 9);
        // The relay ends the copy: no mark for bytes already followed.
        {
            let mut log = reader.marks.lock().unwrap();
            log.copying = None;
            tap.written += n as u64;
            if tap.written > log.followed {
                log.push(Mark::Copied {
                    end: tap.written,
                    at: t0,
                });
            }
            assert!(log.front_at().is_none(), "{log:?}");
        }
        // The lane moves what was copied.
        nix::unistd::read(&src_r, &mut [0u8; 9]).unwrap();
        // The whole path through `copy`: one mark, no announcement left.
        nix::unistd::write(&src_w, b"{\"id\":2}\n").unwrap();
        let before = Instant::now();
        assert!(matches!(tap.copy(&src_r), Copy::Move));
        let log = reader.marks.lock().unwrap();
        assert!(log.copying.is_none());
        match log.due(18).0[..] {
            [Mark::Copied { end: 18, at }] => assert!(at >= before),
            ref other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_observer_is_rung_once_the_relay_is_idle_or_a_backlog_builds() {
        let (src_r, src_w) = pipe().unwrap();
        let (mut tap, reader) = tap().unwrap();
        tap.attach(&src_r);
        let armed = || reader.wake.armed.load(Ordering::SeqCst);
        let one = |tap: &mut Tap| {
            nix::unistd::write(&src_w, b"{}\n").unwrap();
            assert!(matches!(tap.copy(&src_r), Copy::Move));
            nix::unistd::read(&src_r, &mut [0u8; 3]).unwrap();
            tap.moved(3);
        };
        // A copy moved while the relay still spins: not rung yet.
        reader.wake.arm();
        one(&mut tap);
        let now = Instant::now();
        tap.ring_due(false, now);
        assert!(armed());
        // Idle: rung.
        tap.ring_due(true, now);
        assert!(!armed());
        // Nothing moved since: an idle relay does not ring again.
        reader.wake.arm();
        tap.ring_due(true, Instant::now());
        assert!(armed());
        // Busy with another lane: rung once the copy is RING_LATEST old.
        one(&mut tap);
        tap.ring_due(false, Instant::now() + RING_LATEST);
        assert!(!armed());
        // A backlog rings as it moves, without the relay's look.
        reader.wake.arm();
        for _ in 1..RING_COPIES {
            one(&mut tap);
        }
        assert!(armed());
        one(&mut tap);
        assert!(!armed());
    }

    #[test]
    fn a_gated_relay_filters_on_its_own_thread_and_ends_with_the_server() {
        use warden_core::policy::McpPolicy;
        let (c_in_r, c_in_w) = pipe().unwrap();
        let (s_in_r, s_in_w) = pipe().unwrap();
        let (s_out_r, s_out_w) = pipe().unwrap();
        let (c_out_r, c_out_w) = pipe().unwrap();
        let (s_err_r, s_err_w) = pipe().unwrap();
        let (c_err_r, c_err_w) = pipe().unwrap();
        let events = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = events.clone();
        let gate = GateRun {
            gate: crate::gate::Gate::new(McpPolicy {
                deny: vec!["rm".into()],
                ..McpPolicy::default()
            }),
            report: Box::new(move |e| seen.lock().unwrap().push(e)),
        };
        let relay = Relay::start_watched(
            [c_in_r, c_out_w, c_err_w],
            [s_in_w, s_out_r, s_err_r],
            Watch {
                taps: None,
                gate: Some(gate),
            },
        )
        .unwrap();
        // One thread: no filter thread beside the duplex.
        assert!(matches!(relay, Relay::Duplex { err: None, .. }));
        let mut c_in = std::fs::File::from(c_in_w);
        c_in.write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"rm\"}}\n\
              {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"ls\"}}\n",
        )
        .unwrap();
        drop(c_in);
        let mut to_server = String::new();
        std::fs::File::from(s_in_r)
            .read_to_string(&mut to_server)
            .unwrap();
        assert_eq!(
            to_server,
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"ls\"}}\n"
        );
        let mut s_out = std::fs::File::from(s_out_w);
        s_out
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n")
            .unwrap();
        drop(s_out);
        drop(s_err_w);
        relay.finish(Duration::from_secs(5));
        let mut to_client = String::new();
        std::fs::File::from(c_out_r)
            .read_to_string(&mut to_client)
            .unwrap();
        let lines: Vec<serde_json::Value> = to_client
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{to_client}");
        assert_eq!(lines[0]["id"], 1);
        assert_eq!(lines[0]["error"]["code"], -32602);
        assert_eq!(lines[1]["id"], 2);
        assert!(lines[1].get("result").is_some());
        drop(c_err_r);
        // The refusal reported, the gate's end too.
        assert!(!events.lock().unwrap().is_empty());
    }

    #[test]
    fn copies_byte_exact_and_forwards_eof() {
        let (src_r, src_w) = pipe().unwrap();
        let (dst_r, dst_w) = pipe().unwrap();
        let mut pump = Pump::start("t", src_r, dst_w).unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let writer = {
            let data = data.clone();
            std::thread::spawn(move || {
                let mut f = std::fs::File::from(src_w);
                f.write_all(&data).unwrap();
            })
        };
        let mut out = Vec::new();
        std::fs::File::from(dst_r).read_to_end(&mut out).unwrap();
        writer.join().unwrap();
        assert!(pump.wait_for(Duration::from_secs(5)));
        assert_eq!(out.len(), data.len());
        assert!(out == data);
        assert_eq!(pump.bytes(), data.len() as u64);
    }

    /// How every stream is tapped where there is no `tee` (off Linux): a
    /// pump copies each buffer it read into its tap before writing it on.
    /// Runs here too.
    #[test]
    fn a_tapped_pump_copies_what_it_moves_into_the_tap_byte_exact() {
        let (src_r, src_w) = pipe().unwrap();
        let (dst_r, dst_w) = pipe().unwrap();
        let (t, reader) = tap().unwrap();
        let mut pump = Pump::start_tapped("t", src_r, dst_w, Some(t)).unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 251) as u8).collect();
        let writer = {
            let data = data.clone();
            std::thread::spawn(move || {
                let mut f = std::fs::File::from(src_w);
                for chunk in data.chunks(7_000) {
                    f.write_all(chunk).unwrap();
                }
            })
        };
        // The observer reads the tap as the bytes go by (it never blocks
        // the pump: a full tap would be a gap, not a wait).
        let observer = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match nix::unistd::read(&reader.fd, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(Errno::EAGAIN) => std::thread::sleep(Duration::from_millis(1)),
                    Err(e) => panic!("{e}"),
                }
            }
            let log = reader.marks.lock().unwrap();
            assert!(!log.has_gap(), "the tap kept up: no gap");
            got
        });
        let mut out = Vec::new();
        std::fs::File::from(dst_r).read_to_end(&mut out).unwrap();
        writer.join().unwrap();
        assert!(pump.wait_for(Duration::from_secs(5)));
        assert!(out == data);
        assert_eq!(pump.bytes(), data.len() as u64);
        // The pump ended and dropped its tap: the observer sees EOF.
        let copied = observer.join().unwrap();
        assert!(copied == data);
    }

    #[test]
    fn cancel_stops_an_idle_pump() {
        let (src_r, _src_w) = pipe().unwrap();
        let (_dst_r, dst_w) = pipe().unwrap();
        let mut pump = Pump::start("idle", src_r, dst_w).unwrap();
        pump.cancel();
        assert!(pump.wait_for(Duration::from_secs(5)));
    }

    #[test]
    fn falls_back_when_splice_is_refused() {
        // A regular file opened O_APPEND refuses splice (EINVAL).
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("out");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let (src_r, src_w) = pipe().unwrap();
        let mut pump = Pump::start("append", src_r, OwnedFd::from(f)).unwrap();
        std::fs::File::from(src_w).write_all(b"abc\n").unwrap();
        assert!(pump.wait_for(Duration::from_secs(5)));
        assert_eq!(std::fs::read(&path).unwrap(), b"abc\n");
    }

    #[test]
    fn pumps_relay_a_tty_both_ways_byte_exact() {
        // A terminal client: the server's stdout into the tty, the tty's
        // input into the server's stdin.
        let pty = raw_pty();
        let slave_in = pty.slave.try_clone().unwrap();
        let (out_r, out_w) = pipe().unwrap();
        let (in_r, in_w) = pipe().unwrap();
        let mut stdout = Pump::start("tty-out", out_r, pty.slave).unwrap();
        let stdin = Pump::start("tty-in", slave_in, in_w).unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let master = std::fs::File::from(pty.master);
        let typist = {
            let (data, mut m) = (data.clone(), master.try_clone().unwrap());
            std::thread::spawn(move || m.write_all(&data).unwrap())
        };
        let server = {
            let data = data.clone();
            std::thread::spawn(move || {
                let mut got = vec![0u8; data.len()];
                std::fs::File::from(in_r).read_exact(&mut got).unwrap();
                std::fs::File::from(out_w).write_all(&data).unwrap();
                got
            })
        };
        let mut shown = vec![0u8; data.len()];
        (&master).read_exact(&mut shown).unwrap();
        typist.join().unwrap();
        assert!(server.join().unwrap() == data, "tty → server differs");
        assert!(shown == data, "server → tty differs");
        // The server's stdout ended: the pump ends and closes its tty fd.
        assert!(stdout.wait_for(Duration::from_secs(5)));
        assert_eq!(stdout.bytes(), data.len() as u64);
        // The stdin pump counts a chunk after its write returned, which the
        // server may read first: wait for the count to catch up.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while stdin.bytes() < data.len() as u64 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(stdin.bytes(), data.len() as u64);
        stdin.stop(Duration::from_secs(1));
    }

    /// A pty in raw mode (no echo, no line editing).
    fn raw_pty() -> nix::pty::OpenptyResult {
        use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
        let pty = nix::pty::openpty(None, None).unwrap();
        let mut raw = tcgetattr(&pty.slave).unwrap();
        cfmakeraw(&mut raw);
        tcsetattr(&pty.slave, SetArg::TCSANOW, &raw).unwrap();
        pty
    }

    #[test]
    fn a_tty_clients_stream_is_tapped_too() {
        let pty = raw_pty();
        let slave_in = pty.slave.try_clone().unwrap();
        let slave_err = pty.slave.try_clone().unwrap();
        let (in_r, in_w) = pipe().unwrap();
        let (out_r, out_w) = pipe().unwrap();
        let (err_r, err_w) = pipe().unwrap();
        let (ti, ri) = tap().unwrap();
        let (to, ro) = tap().unwrap();
        let relay = Relay::start_tapped(
            [slave_in, pty.slave, slave_err],
            [in_w, out_r, err_r],
            Some([ti, to]),
        )
        .unwrap();
        assert!(matches!(relay, Relay::Tapped { .. }));
        let master = std::fs::File::from(pty.master);
        let ask = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
        let answer = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n";
        (&master).write_all(ask).unwrap();
        let mut got = vec![0u8; ask.len()];
        std::fs::File::from(in_r).read_exact(&mut got).unwrap();
        assert_eq!(got, ask);
        std::fs::File::from(out_w).write_all(answer).unwrap();
        drop(err_w);
        let mut shown = vec![0u8; answer.len()];
        (&master).read_exact(&mut shown).unwrap();
        assert_eq!(shown, answer);
        // The observer's copies: what the client sent and what it got.
        let mut copy = vec![0u8; ask.len()];
        std::fs::File::from(ri.fd).read_exact(&mut copy).unwrap();
        assert_eq!(copy, ask);
        let mut copy = vec![0u8; answer.len()];
        std::fs::File::from(ro.fd).read_exact(&mut copy).unwrap();
        assert_eq!(copy, answer);
        relay.finish(Duration::from_secs(1));
    }

    #[test]
    fn duplex_moves_both_ways_byte_exact_and_forwards_eof() {
        let (c_in_r, c_in_w) = pipe().unwrap();
        let (s_in_r, s_in_w) = pipe().unwrap();
        let (s_out_r, s_out_w) = pipe().unwrap();
        let (c_out_r, c_out_w) = pipe().unwrap();
        let d = Duplex::start(c_in_r, s_in_w, s_out_r, c_out_w).unwrap();
        // The "server": echoes stdin to stdout until EOF, then exits.
        let server = std::thread::spawn(move || {
            let mut r = std::fs::File::from(s_in_r);
            let mut w = std::fs::File::from(s_out_w);
            std::io::copy(&mut r, &mut w).unwrap();
        });
        let data: Vec<u8> = (0..2_500_000u32).map(|i| (i * 13 % 251) as u8).collect();
        let writer = {
            let data = data.clone();
            std::thread::spawn(move || {
                std::fs::File::from(c_in_w).write_all(&data).unwrap();
            })
        };
        let mut out = Vec::new();
        std::fs::File::from(c_out_r).read_to_end(&mut out).unwrap();
        writer.join().unwrap();
        server.join().unwrap();
        assert!(d.wait_outbound(Duration::from_secs(5)));
        assert_eq!(out.len(), data.len());
        assert!(out == data);
        assert_eq!(d.bytes(), (data.len() as u64, data.len() as u64));
        d.stop(Duration::from_secs(1));
    }

    #[test]
    fn duplex_does_not_deadlock_when_the_server_floods_stdout_without_reading() {
        let (c_in_r, c_in_w) = pipe().unwrap();
        let (s_in_r, s_in_w) = pipe().unwrap();
        let (s_out_r, s_out_w) = pipe().unwrap();
        let (c_out_r, c_out_w) = pipe().unwrap();
        let d = Duplex::start(c_in_r, s_in_w, s_out_r, c_out_w).unwrap();
        // The client writes far more than the pipes hold while the server
        // writes 4 MiB and never reads: the client's stdout must still flow.
        let client_w = std::thread::spawn(move || {
            let mut w = std::fs::File::from(c_in_w);
            let chunk = vec![b'x'; 1 << 16];
            for _ in 0..8 {
                if w.write_all(&chunk).is_err() {
                    return;
                }
            }
        });
        let server = std::thread::spawn(move || {
            let mut w = std::fs::File::from(s_out_w);
            w.write_all(&vec![b'y'; 4 << 20]).unwrap();
            drop(s_in_r);
        });
        let mut out = Vec::new();
        std::fs::File::from(c_out_r).read_to_end(&mut out).unwrap();
        server.join().unwrap();
        client_w.join().unwrap();
        assert_eq!(out.len(), 4 << 20);
        d.stop(Duration::from_secs(1));
    }

    #[test]
    fn duplex_carries_a_piped_stderr_byte_exact_beside_stdout() {
        let (c_in_r, c_in_w) = pipe().unwrap();
        let (s_in_r, s_in_w) = pipe().unwrap();
        let (s_out_r, s_out_w) = pipe().unwrap();
        let (c_out_r, c_out_w) = pipe().unwrap();
        let (s_err_r, s_err_w) = pipe().unwrap();
        let (c_err_r, c_err_w) = pipe().unwrap();
        let d = Duplex::start_with_stderr(
            c_in_r,
            s_in_w,
            s_out_r,
            c_out_w,
            Some((s_err_r, c_err_w)),
            None,
            None,
        )
        .unwrap();
        let out: Vec<u8> = (0..1_500_000u32).map(|i| (i * 13 % 251) as u8).collect();
        let err: Vec<u8> = (0..700_000u32).map(|i| (i * 7 % 249) as u8).collect();
        // The "server" writes both streams and reads stdin to EOF.
        let server = {
            let (out, err) = (out.clone(), err.clone());
            std::thread::spawn(move || {
                let e = std::thread::spawn(move || {
                    std::fs::File::from(s_err_w).write_all(&err).unwrap();
                });
                std::fs::File::from(s_out_w).write_all(&out).unwrap();
                e.join().unwrap();
                let mut sink = Vec::new();
                std::fs::File::from(s_in_r).read_to_end(&mut sink).unwrap();
                sink
            })
        };
        drop(c_in_w); // the client's stdin ends at once
        let err_reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            std::fs::File::from(c_err_r).read_to_end(&mut got).unwrap();
            got
        });
        let mut got_out = Vec::new();
        std::fs::File::from(c_out_r)
            .read_to_end(&mut got_out)
            .unwrap();
        let got_err = err_reader.join().unwrap();
        assert!(server.join().unwrap().is_empty());
        assert!(got_out == out, "stdout differs");
        assert!(got_err == err, "stderr differs");
        assert!(d.wait_outbound(Duration::from_secs(5)));
        assert!(d.wait_stderr(Duration::from_secs(5)));
        assert_eq!(d.bytes_err(), err.len() as u64);
        d.stop(Duration::from_secs(1));
    }

    #[test]
    fn a_piped_stderr_joins_the_duplex_thread_a_socket_keeps_its_own() {
        let fds = |err_socket: bool| {
            let (c_in, _a) = pipe().unwrap();
            let (_b, c_out) = pipe().unwrap();
            let c_err = if err_socket {
                let (x, y) = std::os::unix::net::UnixStream::pair().unwrap();
                std::mem::forget(y);
                OwnedFd::from(x)
            } else {
                let (_r, w) = pipe().unwrap();
                std::mem::forget(_r);
                w
            };
            let (_sr, in_w) = pipe().unwrap();
            let (out_r, _sw) = pipe().unwrap();
            let (err_r, _ew) = pipe().unwrap();
            let relay = Relay::start([c_in, c_out, c_err], [in_w, out_r, err_r]).unwrap();
            let own_pump = matches!(&relay, Relay::Duplex { err: Some(_), .. });
            relay.finish(Duration::from_millis(10));
            own_pump
        };
        assert!(!fds(false));
        assert!(fds(true));
    }

    #[test]
    fn duplex_serves_pipes_and_sockets_only() {
        let (r, _w) = pipe().unwrap();
        assert!(duplex_capable(&r));
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(duplex_capable(&OwnedFd::from(a)));
        let t = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(t.path().join("f")).unwrap();
        assert!(!duplex_capable(&OwnedFd::from(f)));
    }
}
