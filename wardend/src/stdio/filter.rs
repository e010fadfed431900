//! [`Filter`]: the relay hop that passes the MCP stream through a
//! [`Gate`] when the policy restricts tools (`mcp.tools`).
//!
//! It stands between the session's relay and the server, on four fds that
//! are all the daemon's own (so all non-blocking): the relay writes what the
//! client sent into one pipe, the filter reads it, line by line, and writes
//! what the gate lets through to the server's stdin; the server's stdout is
//! read the same way and written into a second pipe that the relay moves to
//! the client. The relay (and its taps, so the MCP records) therefore sees
//! exactly what the client sends and receives, Warden's refusals included.
//!
//! Whole lines only: a message is passed on once its `\n` has come (what an
//! MCP peer waits for anyway). A line from the client longer than
//! [`MAX_LINE`] is not passed on (it cannot be checked); a line that long
//! from the server passes unfiltered. Backpressure as in the relay: while
//! one destination is full (more than [`HIGH`] waiting) its source is not
//! read, so memory stays bounded by one line and [`HIGH`] per direction.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::{read, write};

use super::{fired, set_nonblocking, Worker, CHUNK};
use crate::gate::{Gate, GateEvent};
use crate::mcp::MAX_LINE;

/// Bytes waiting for a destination before its source is no longer read.
pub const HIGH: usize = 1 << 20;

/// Where the gate's decisions go (the session writes them as records).
pub type Report = Box<dyn FnMut(GateEvent) + Send>;

/// A gate and where its decisions are reported.
pub struct GateRun {
    pub gate: Gate,
    pub report: Report,
}

/// The running filter thread.
pub struct Filter {
    worker: Worker,
    out_done: Arc<AtomicBool>,
}

impl Filter {
    /// `from_client` → `to_server` and `from_server` → `to_client`, through
    /// `run`'s gate. Every fd must be the daemon's own (each is made
    /// non-blocking).
    pub fn start(
        from_client: OwnedFd,
        to_server: OwnedFd,
        from_server: OwnedFd,
        to_client: OwnedFd,
        run: GateRun,
    ) -> io::Result<Filter> {
        let mut f = FilterLoop::new(from_client, to_server, from_server, to_client, run)?;
        let out_done = f.out_done();
        let worker = Worker::spawn("mcp-gate".into(), move |cancel, stop| {
            let r = serve(&mut f, cancel, stop);
            f.end();
            r
        })?;
        Ok(Filter { worker, out_done })
    }

    /// Waits up to `timeout` for the server's stdout to have ended and
    /// been passed on whole. Returns false on timeout.
    pub fn wait_outbound(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.out_done.load(Ordering::SeqCst) && !self.worker.is_finished() {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    pub fn stop(self, grace: Duration) {
        self.worker.stop(grace);
    }
}

/// One direction.
struct Side {
    src: Option<OwnedFd>,
    dst: Option<OwnedFd>,
    /// Read, not yet a whole line.
    line: Vec<u8>,
    /// To write, from `sent` on.
    pending: Vec<u8>,
    sent: usize,
    /// Inside a line longer than [`MAX_LINE`]: dropped (from the client) or
    /// passed as it comes (from the server) until its `\n`.
    overlong: bool,
}

impl Side {
    fn new(src: OwnedFd, dst: OwnedFd) -> Side {
        Side {
            src: Some(src),
            dst: Some(dst),
            line: Vec::new(),
            pending: Vec::new(),
            sent: 0,
            overlong: false,
        }
    }

    fn waiting(&self) -> usize {
        self.pending.len() - self.sent
    }

    fn queue(&mut self, bytes: &[u8]) {
        if self.dst.is_some() {
            self.pending.extend_from_slice(bytes);
        }
    }

    /// Writes what it can. False when the destination is gone.
    fn flush(&mut self) -> io::Result<bool> {
        let Some(dst) = &self.dst else {
            return Ok(false);
        };
        while self.sent < self.pending.len() {
            match write(dst, &self.pending[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => break,
                Err(Errno::EPIPE | Errno::ECONNRESET) => {
                    self.dst = None;
                    self.pending.clear();
                    self.sent = 0;
                    return Ok(false);
                }
                Err(e) => return Err(e.into()),
            }
        }
        if self.sent == self.pending.len() {
            self.pending.clear();
            self.sent = 0;
        } else if self.sent > HIGH {
            self.pending.drain(..self.sent);
            self.sent = 0;
        }
        Ok(true)
    }

    /// Done: the source ended (or the destination went away) and nothing
    /// waits; closes the destination so EOF travels on.
    fn finish_if_done(&mut self) -> bool {
        if self.src.is_none() && self.waiting() == 0 {
            self.dst = None;
        }
        self.src.is_none() && self.dst.is_none()
    }
}

const IN: usize = 0;
const OUT: usize = 1;

/// The filter's state, served by its own thread ([`Filter`]) or by a
/// session's duplex relay thread between its own polls ([`Duplex`]'s
/// gated form: no hand-over between two threads on the way of every
/// message, which on a virtual machine costs a sleeping thread's wake-up,
/// tens of µs).
///
/// [`Duplex`]: super::Duplex
pub(crate) struct FilterLoop {
    sides: [Side; 2],
    run: GateRun,
    buf: Vec<u8>,
    /// Refusals for the client, held while the server's side is inside a
    /// line (they go between lines, never into one).
    held: Vec<u8>,
    out_done: Arc<AtomicBool>,
    ended: bool,
}

/// Where a [`FilterLoop`]'s fds sit in a poll set.
#[derive(Default)]
pub(crate) struct Slots {
    /// (side, write?) for each fd from `first` on.
    which: Vec<(usize, bool)>,
    first: usize,
    woke_at: Option<usize>,
}

/// What a poll found for a [`FilterLoop`].
#[derive(Default)]
pub(crate) struct Ready {
    sides: [(bool, bool); 2],
    woken: bool,
}

impl Ready {
    /// The client side's source may hold bytes (the relay just moved some
    /// into it): read it without waiting for a poll to say so.
    pub(crate) fn client_sent(&mut self) {
        self.sides[IN].0 = true;
    }
}

impl Slots {
    pub(crate) fn ready(&self, fds: &[PollFd<'_>]) -> Ready {
        let mut r = Ready::default();
        for (k, &(i, w)) in self.which.iter().enumerate() {
            if fired(&fds[self.first + k]) {
                if w {
                    r.sides[i].1 = true;
                } else {
                    r.sides[i].0 = true;
                }
            }
        }
        r.woken = self.woke_at.is_some_and(|k| fired(&fds[k]));
        r
    }
}

impl FilterLoop {
    /// Every fd must be the daemon's own (each is made non-blocking).
    pub(crate) fn new(
        from_client: OwnedFd,
        to_server: OwnedFd,
        from_server: OwnedFd,
        to_client: OwnedFd,
        run: GateRun,
    ) -> io::Result<FilterLoop> {
        for fd in [&from_client, &to_server, &from_server, &to_client] {
            set_nonblocking(fd)?;
        }
        Ok(FilterLoop {
            sides: [
                Side::new(from_client, to_server),
                Side::new(from_server, to_client),
            ],
            run,
            buf: vec![0u8; CHUNK],
            held: Vec::new(),
            out_done: Arc::new(AtomicBool::new(false)),
            ended: false,
        })
    }

    /// Set once the server's stdout has ended and been passed on whole.
    pub(crate) fn out_done(&self) -> Arc<AtomicBool> {
        self.out_done.clone()
    }

    /// Closes the destinations whose sources ended with nothing left to
    /// write (EOF travels on). True when both directions are done.
    pub(crate) fn settle(&mut self) -> bool {
        let done = [
            self.sides[IN].finish_if_done(),
            self.sides[OUT].finish_if_done(),
        ];
        if done[OUT] {
            self.out_done.store(true, Ordering::SeqCst);
        }
        done[IN] && done[OUT]
    }

    /// Adds the fds to wait on to `fds`.
    pub(crate) fn poll_set<'a>(&'a self, fds: &mut Vec<PollFd<'a>>) -> Slots {
        let mut slots = Slots {
            first: fds.len(),
            ..Slots::default()
        };
        let sides = &self.sides;
        let client_full = sides[OUT].waiting() + self.held.len() > HIGH;
        for (i, s) in sides.iter().enumerate() {
            let read = s.src.is_some() && s.waiting() <= HIGH && !(i == IN && client_full);
            let write = s.dst.is_some() && s.waiting() > 0;
            if let (true, Some(src)) = (read, &s.src) {
                fds.push(PollFd::new(src.as_fd(), PollFlags::POLLIN));
                slots.which.push((i, false));
            }
            if let (true, Some(dst)) = (write, &s.dst) {
                fds.push(PollFd::new(dst.as_fd(), PollFlags::POLLOUT));
                slots.which.push((i, true));
            }
        }
        slots.woke_at = self.run.gate.wake_fd().map(|fd| {
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
            fds.len() - 1
        });
        slots
    }

    /// Serves what the poll found. True when bytes were read.
    pub(crate) fn serve(&mut self, ready: Ready) -> io::Result<bool> {
        let FilterLoop {
            sides,
            run,
            buf,
            held,
            ..
        } = self;
        if ready.woken {
            // A withheld tool was accepted: the client is told to list again.
            let note = run.gate.woken();
            reply(&mut sides[OUT], held, note);
        }
        for i in [IN, OUT] {
            if ready.sides[i].1 && !sides[i].flush()? && i == IN {
                // The server closed its stdin: what the client sends goes
                // nowhere; closing our end tells the relay so.
                sides[IN].src = None;
                sides[IN].line.clear();
            }
        }
        let mut moved = false;
        for i in [IN, OUT] {
            if !ready.sides[i].0 {
                continue;
            }
            let Some(src) = &sides[i].src else { continue };
            let n = match read(src, buf) {
                Ok(n) => n,
                Err(Errno::EINTR | Errno::EAGAIN) => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                sides[i].src = None;
            }
            moved = true;
            if i == IN {
                inbound(sides, held, &buf[..n], n == 0, run);
            } else {
                outbound(&mut sides[OUT], held, &buf[..n], n == 0, run);
            }
            for e in run.gate.take_events() {
                (run.report)(e);
            }
            // Write at once what is ready (the next poll would say so).
            for s in sides.iter_mut() {
                if s.waiting() > 0 {
                    s.flush()?;
                }
            }
        }
        Ok(moved)
    }

    /// The end, however it came: the gate's last events reported.
    pub(crate) fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        self.out_done.store(true, Ordering::SeqCst);
        self.run.gate.finish();
        for e in self.run.gate.take_events() {
            (self.run.report)(e);
        }
    }
}

impl Drop for FilterLoop {
    fn drop(&mut self) {
        self.end();
    }
}

/// The filter on its own thread.
fn serve(f: &mut FilterLoop, cancel: &crate::wake::Wake, stop: &AtomicBool) -> io::Result<()> {
    // As the duplex relay does: after moving data, poll without sleeping
    // for a moment (the answer, or the next request, usually comes within
    // microseconds; waking a sleeping thread costs tens of them).
    let mut last_move: Option<std::time::Instant> = None;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let spinning = last_move.is_some_and(|t| t.elapsed() < super::SPIN_WINDOW);
        if f.settle() {
            return Ok(());
        }
        let (ready, cancelled) = {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(6);
            let slots = f.poll_set(&mut fds);
            fds.push(PollFd::new(cancel.as_fd(), PollFlags::POLLIN));
            let timeout = if spinning {
                PollTimeout::ZERO
            } else {
                PollTimeout::NONE
            };
            match poll(&mut fds, timeout) {
                Ok(0) => {
                    // Nothing yet within the window: let the others run.
                    std::thread::yield_now();
                    continue;
                }
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            (slots.ready(&fds), fds.last().is_some_and(fired))
        };
        if cancelled {
            return Ok(());
        }
        if f.serve(ready)? {
            last_move = Some(std::time::Instant::now());
        }
    }
}

/// What a direction's bytes come to.
enum Piece<'a> {
    /// A whole line with its `\n` (or the last one, without, at EOF).
    Line(Vec<u8>),
    /// The first [`MAX_LINE`] bytes of a line longer than that.
    LongStart(Vec<u8>),
    /// More of that line; `true` when its `\n` is in it.
    LongRest(&'a [u8], bool),
}

/// Cuts `bytes` (what one read gave) into [`Piece`]s for `f`, keeping a
/// line that has not ended in `s.line`.
fn pieces<'a>(s: &mut Side, bytes: &'a [u8], eof: bool, mut f: impl FnMut(&mut Side, Piece<'a>)) {
    for part in bytes.split_inclusive(|b| *b == b'\n') {
        let complete = part.ends_with(b"\n");
        if s.overlong {
            s.overlong = !complete;
            f(s, Piece::LongRest(part, complete));
        } else {
            s.line.extend_from_slice(part);
            if complete {
                let line = std::mem::take(&mut s.line);
                f(s, Piece::Line(line));
            } else if s.line.len() > MAX_LINE {
                s.overlong = true;
                let line = std::mem::take(&mut s.line);
                f(s, Piece::LongStart(line));
            }
        }
    }
    if eof && !s.line.is_empty() {
        let line = std::mem::take(&mut s.line);
        f(s, Piece::Line(line));
    }
}

/// Client bytes: each whole line through the gate; an overlong one is
/// dropped (it cannot be checked) and answered as unreadable.
fn inbound(sides: &mut [Side; 2], held: &mut Vec<u8>, bytes: &[u8], eof: bool, run: &mut GateRun) {
    let [to_server, to_client] = sides;
    pieces(to_server, bytes, eof, |s, p| match p {
        Piece::Line(line) => {
            let body = line.strip_suffix(b"\n").unwrap_or(&line);
            let v = run.gate.from_client(body);
            if v.forward {
                s.queue(&line);
            }
            reply(to_client, held, v.reply);
        }
        Piece::LongStart(_) => reply(to_client, held, run.gate.too_long().reply),
        Piece::LongRest(..) => {}
    });
}

fn reply(out: &mut Side, held: &mut Vec<u8>, reply: Option<Vec<u8>>) {
    if let Some(r) = reply {
        if out.overlong {
            held.extend_from_slice(&r);
        } else {
            out.queue(&r);
        }
    }
}

/// Server bytes: each whole line through the gate; an overlong one passes
/// unfiltered, and the refusals held meanwhile follow it.
fn outbound(s: &mut Side, held: &mut Vec<u8>, bytes: &[u8], eof: bool, run: &mut GateRun) {
    pieces(s, bytes, eof, |s, p| match p {
        Piece::Line(line) => {
            let body = line.strip_suffix(b"\n").unwrap_or(&line);
            match run.gate.from_server(body) {
                None => s.queue(&line),
                Some(mut new) => {
                    if line.ends_with(b"\n") {
                        new.push(b'\n');
                    }
                    s.queue(&new);
                }
            }
        }
        Piece::LongStart(line) => s.queue(&line),
        Piece::LongRest(part, ended) => {
            s.queue(part);
            if ended {
                let h = std::mem::take(held);
                s.queue(&h);
            }
        }
    });
    if eof {
        // The stream ended inside an overlong line: what was held goes last.
        let h = std::mem::take(held);
        s.queue(&h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use warden_core::policy::McpPolicy;

    #[test]
    fn whole_lines_pass_refusals_are_answered_and_the_last_line_ends_at_eof() {
        let (c_r, mut c_w) = pipe_files();
        let (mut s_r, s_w) = pipe_files();
        let (o_r, mut o_w) = pipe_files();
        let (mut p_r, p_w) = pipe_files();
        let gate = Gate::new(McpPolicy {
            deny: vec!["rm".into()],
            ..McpPolicy::default()
        });
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = events.clone();
        let run = GateRun {
            gate,
            report: Box::new(move |e| seen.lock().unwrap().push(e)),
        };
        let f = Filter::start(c_r.into(), s_w.into(), o_r.into(), p_w.into(), run).unwrap();
        // A line cut across two writes, then a refused call, then a last
        // line without its newline.
        c_w.write_all(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","#)
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        c_w.write_all(br#""params":{"name":"ls"}}"#).unwrap();
        c_w.write_all(b"\n").unwrap();
        c_w.write_all(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rm"}}"#)
            .unwrap();
        c_w.write_all(b"\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}")
            .unwrap();
        drop(c_w);
        o_w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n")
            .unwrap();
        drop(o_w);
        let mut to_server = String::new();
        s_r.read_to_string(&mut to_server).unwrap();
        assert_eq!(
            to_server,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"ls\"}}\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}"
        );
        let mut to_client = String::new();
        p_r.read_to_string(&mut to_client).unwrap();
        let lines: Vec<serde_json::Value> = to_client
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{to_client}");
        let refusal = lines.iter().find(|l| l["id"] == 2).unwrap();
        assert_eq!(refusal["error"]["code"], -32602);
        assert!(lines
            .iter()
            .any(|l| l["id"] == 1 && l.get("result").is_some()));
        assert!(f.wait_outbound(Duration::from_secs(5)));
        f.stop(Duration::from_secs(1));
        assert_eq!(events.lock().unwrap().len(), 1);
    }

    fn pipe_files() -> (std::fs::File, std::fs::File) {
        let (r, w) = super::super::pipe().unwrap();
        (r.into(), w.into())
    }
}
