//! Draining a sandbox's queues (refused calls, observed file accesses) into
//! the audit store, without a thread per session.
//!
//! The sandbox's notifier answers every call itself and only then queues it
//! ([`warden_sandbox::supervise::notify`]); the queues are bounded and never waited on
//! by the notifier. One tokio task per session drains both:
//!
//! - while events keep coming ([`FileAccesses::busy`], or a refused call
//!   within [`BUSY`]) it drains every [`BATCH_INTERVAL`] on its own
//!   schedule, so queueing costs the notifier no system call; the queues
//!   closing (the sandbox gone) rings the [`Wake`] even unarmed and ends
//!   that wait at once, so a short command's exit is not held back by up to
//!   an interval;
//! - when a drain finds nothing, it arms the sandbox's [`Wake`] *before* the
//!   last look at the queues and waits on its eventfd ([`WakeWaiter`]): the next
//!   event, or the queues closing, rings it. An idle session costs no thread
//!   and no timer (a timer only while a rate-limit window is open, to write
//!   its summary);
//! - each drain (classification reads the file system, writing takes the
//!   store's lock) runs on tokio's blocking pool, for as long as it takes.
//!
//! The task ends once both queues are closed (the sandbox is gone) and
//! everything queued is written, with the summaries still open and the
//! counts of events a full queue lost: `session.exit` waits for it, so these
//! records come first.

use std::sync::mpsc::TryRecvError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use warden_sandbox::supervise::BATCH_INTERVAL;
use warden_sandbox::{FileAccesses, RefusedCalls, Sandbox, Wake, WakeWaiter};

use crate::{files, syscalls, Daemon};

/// How long after the last refused call the queues count as busy (the file
/// accesses keep their own clock, the same length).
const BUSY: Duration = Duration::from_millis(200);
/// At most this many events per drain: a flooding server cannot keep one
/// blocking thread forever; the next drain follows at once.
const BATCH: usize = 4096;

/// One session's queues and rate limits.
struct Queues {
    daemon: Arc<Daemon>,
    session: String,
    calls: Option<RefusedCalls>,
    calls_done: bool,
    last_call: Option<Instant>,
    call_limit: syscalls::RateLimit,
    files: Option<FileAccesses>,
    /// Counts the denied accesses (`wardenctl ps`).
    files_denied: Arc<std::sync::atomic::AtomicU64>,
    files_done: bool,
    file_limit: files::RateLimit,
    /// `mcp.explain_denials`: the session's denials, for the gate.
    denials: Option<Arc<crate::explain::Denials>>,
}

/// What one drain found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drained {
    Nothing,
    Some,
    /// A whole [`BATCH`]: more is probably waiting.
    Full,
}

impl Queues {
    fn finished(&self) -> bool {
        (self.calls.is_none() || self.calls_done) && (self.files.is_none() || self.files_done)
    }

    fn busy(&self) -> bool {
        self.last_call.is_some_and(|t| t.elapsed() < BUSY)
            || self.files.as_ref().is_some_and(|f| f.busy())
    }

    /// No rate-limit window open.
    fn idle(&self) -> bool {
        self.call_limit.is_idle() && self.file_limit.is_idle()
    }

    /// Blocking: writes what is queued now (up to [`BATCH`] events) and the
    /// summaries of windows that are over.
    fn drain(&mut self) -> Drained {
        let audit = &self.daemon.audit;
        let session = self.session.as_str();
        let now = Instant::now();
        // What was queued before this is taken by the end, unless a batch
        // fills first.
        let began = now;
        for s in self.call_limit.take_summaries(now, false) {
            audit.record(syscalls::summary_record(session, &s));
        }
        for s in self.file_limit.take_summaries(now, false) {
            audit.record(files::summary_record(session, &s));
        }
        let mut n = 0;
        if let Some(calls) = self.calls.as_ref().filter(|_| !self.calls_done) {
            while n < BATCH {
                match calls.try_recv() {
                    Ok(call) => {
                        n += 1;
                        let now = Instant::now();
                        self.last_call = Some(now);
                        if let Some(d) = &self.denials {
                            d.push(
                                call.at,
                                format!("the system call `{}` ({})", call.syscall, call.reason),
                                false,
                            );
                        }
                        if self.call_limit.admit(&call, now) {
                            audit.record(self.daemon.during_call_at(
                                session,
                                syscalls::call_record(session, &call),
                                call.at,
                            ));
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        self.calls_done = true;
                        break;
                    }
                }
            }
        }
        if let Some(accesses) = self.files.as_ref().filter(|_| !self.files_done) {
            while n < BATCH {
                match accesses.try_next_classified() {
                    Ok(a) => {
                        n += 1;
                        if a.verdict == warden_sandbox::supervise::AccessVerdict::Deny {
                            self.files_denied
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if let Some(d) = &self.denials {
                                d.push(a.at, files::denial_text(&a), true);
                            }
                        }
                        if self.file_limit.admit(&a, Instant::now()) {
                            audit.record(self.daemon.during_call_at(
                                session,
                                files::access_record(session, &a),
                                a.at,
                            ));
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        self.files_done = true;
                        break;
                    }
                }
            }
        }
        if n < BATCH {
            if let Some(d) = &self.denials {
                d.judged(began);
            }
        }
        match n {
            0 => Drained::Nothing,
            BATCH => Drained::Full,
            _ => Drained::Some,
        }
    }

    /// Blocking, once both queues are closed: the summaries still open and
    /// what the full queues lost.
    fn finish(mut self) {
        let audit = &self.daemon.audit;
        let session = self.session.as_str();
        let now = Instant::now();
        for s in self.call_limit.take_summaries(now, true) {
            audit.record(syscalls::summary_record(session, &s));
        }
        for s in self.file_limit.take_summaries(now, true) {
            audit.record(files::summary_record(session, &s));
        }
        if let Some(lost) = self.calls.as_ref().map(|c| c.lost()).filter(|&l| l > 0) {
            audit.record(syscalls::lost_record(session, lost));
        }
        if let Some(lost) = self.files.as_ref().map(|f| f.lost()).filter(|&l| l > 0) {
            audit.record(files::lost_record(session, lost));
        }
        if let Some(d) = &self.denials {
            d.recorder_done();
        }
    }
}

impl crate::explain::Progress for warden_sandbox::supervise::Queued {
    fn answered(&self) -> u64 {
        warden_sandbox::supervise::Queued::answered(self)
    }
    fn queued(&self) -> u64 {
        warden_sandbox::supervise::Queued::queued(self)
    }
}

impl crate::explain::Ring for Wake {
    fn ring(&self) {
        Wake::ring(self)
    }
}

/// Starts recording a new sandbox's refused calls and observed file
/// accesses (the channels [`Sandbox::spawn`] returned with it) until the
/// sandbox is gone; the handle ends when every record is written. `None`
/// when the sandbox reports neither (no user notification).
pub fn start(
    daemon: &Arc<Daemon>,
    session: &str,
    sandbox: &Sandbox,
    calls: Option<RefusedCalls>,
    files: Option<FileAccesses>,
    files_denied: Arc<std::sync::atomic::AtomicU64>,
    denials: Option<Arc<crate::explain::Denials>>,
) -> Option<tokio::task::JoinHandle<()>> {
    if calls.is_none() && files.is_none() {
        return None;
    }
    if let Some(d) = &denials {
        d.recorder(
            files
                .as_ref()
                .map(|f| f.progress() as Arc<dyn crate::explain::Progress>),
            sandbox
                .recorder_wake()
                .map(|w| w as Arc<dyn crate::explain::Ring>),
        );
    }
    let now = Instant::now();
    let q = Queues {
        daemon: daemon.clone(),
        session: session.to_owned(),
        calls,
        calls_done: false,
        last_call: None,
        call_limit: syscalls::RateLimit::default(),
        files,
        files_done: false,
        file_limit: files::RateLimit::new(now),
        files_denied,
        denials,
    };
    Some(tokio::spawn(run(q, sandbox.recorder_wake())))
}

async fn run(mut q: Queues, wake: Option<Arc<Wake>>) {
    let waiter = wake.as_ref().and_then(|w| w.waiter().ok());
    loop {
        // Idle so far: ask to be rung by whatever comes after this drain.
        let armed = match (&wake, q.busy()) {
            (Some(w), false) => {
                w.arm();
                true
            }
            _ => false,
        };
        let (back, got) = match tokio::task::spawn_blocking(move || {
            let got = q.drain();
            (q, got)
        })
        .await
        {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "the audit recorder of a session failed");
                return;
            }
        };
        q = back;
        if q.finished() {
            break;
        }
        if got != Drained::Nothing || q.busy() {
            if let (true, Some(w)) = (armed, &wake) {
                w.disarm();
            }
            if got != Drained::Full {
                match &waiter {
                    // The queues closing rings even unarmed: a sandbox that
                    // ends during the interval is finished at once, not an
                    // interval later (`session.exit`, and the client's exit
                    // status, wait for this task). A stale ring only brings
                    // one drain forward.
                    Some(w) => {
                        let _ = tokio::time::timeout(BATCH_INTERVAL, ring(w)).await;
                    }
                    None => tokio::time::sleep(BATCH_INTERVAL).await,
                }
            }
            continue;
        }
        // Armed, and the queues were empty after arming: wait for a ring,
        // or for the open rate-limit windows to end (their summaries).
        let window = crate::ratelimit::WINDOW;
        match &waiter {
            Some(w) if q.idle() => ring(w).await,
            Some(w) => {
                let _ = tokio::time::timeout(window, ring(w)).await;
            }
            // The eventfd cannot be polled (cannot happen on Linux): look
            // once a window.
            None => tokio::time::sleep(window).await,
        }
    }
    let _ = tokio::task::spawn_blocking(move || q.finish()).await;
}

/// Waits until the wake-up was rung (or, should the eventfd not be
/// pollable after all, for one window).
async fn ring(w: &WakeWaiter) {
    if w.rung().await.is_err() {
        tokio::time::sleep(crate::ratelimit::WINDOW).await;
    }
}
