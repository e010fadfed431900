//! `mcp.explain_denials`: the denials of a session, kept a while so that the
//! gate can tell the client, in the error answer of a tool call, what Warden
//! denied during it and what would grant it (issue 17).
//!
//! Denials come from three places, each before the server can see its
//! outcome or, for file accesses, with a way to know when all are in:
//!
//! - the egress proxy's refusals (the decision is reported before the
//!   refusal is written to the server) and transparent egress's (before the
//!   `connect` is answered);
//! - refused system calls, queued by the notifier before it answers;
//! - file accesses, which the notifier answers first and queues after (the
//!   call's latency is the server's), and which the recorder judges in
//!   batches. For those the gate waits, bounded, until the notifier has
//!   queued every access it answered by the time the error came
//!   ([`Progress`]: the native sandbox's `supervise::Queued`) and a drain of
//!   the recorder that began after that found its queues empty
//!   ([`Denials::judged`]).
//!
//! Only what is recorded as denied counts: an access the kernel refused
//! without a notification (a Landlock-only layer) is not seen here either.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How far the notifier has queued the file accesses it answered (the
/// native sandbox's `warden_sandbox::supervise::Queued`, `recorder.rs`).
pub trait Progress: Send + Sync {
    /// Accesses answered so far.
    fn answered(&self) -> u64;
    /// Accesses queued so far (or lost).
    fn queued(&self) -> u64;
}

/// Rings the session's recorder for a drain now (the native sandbox's
/// `warden_sandbox::Wake`, `recorder.rs`).
pub trait Ring: Send + Sync {
    fn ring(&self);
}

/// Denials kept at once (the oldest go first).
const KEEP: usize = 256;

/// How long an error answer waits at most for the file accesses before it
/// to be judged.
pub const SETTLE: Duration = Duration::from_millis(250);

/// One denial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub at: Instant,
    /// What was denied, as the line shows it ("read of /home/u/.ssh/id_rsa
    /// (outside the sandbox's grants)").
    pub what: String,
    /// Whether a policy grant would allow it (`wardenctl suggest`): false
    /// for refused system calls, protected names and the like.
    pub grantable: bool,
}

/// A session's recent denials.
#[derive(Default)]
pub struct Denials {
    state: Mutex<State>,
    judged_cv: Condvar,
}

#[derive(Default)]
struct State {
    list: VecDeque<Denial>,
    recorder: Option<Recorder>,
}

/// The session's recorder, as far as the gate waits for it.
struct Recorder {
    /// How far the notifier has queued the file accesses it answered.
    progress: Option<Arc<dyn Progress>>,
    /// Rings the recorder for a drain now.
    wake: Option<Arc<dyn Ring>>,
    /// The start of the last drain that found every queue empty.
    judged: Option<Instant>,
    /// The queues are closed and drained: nothing more will come.
    done: bool,
}

impl Denials {
    pub fn new() -> Arc<Denials> {
        Arc::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Something was denied at `at`.
    pub fn push(&self, at: Instant, what: String, grantable: bool) {
        let mut st = self.lock();
        if st.list.len() >= KEEP {
            st.list.pop_front();
        }
        st.list.push_back(Denial {
            at,
            what,
            grantable,
        });
    }

    /// The session's recorder runs: error answers wait for it.
    pub fn recorder(&self, progress: Option<Arc<dyn Progress>>, wake: Option<Arc<dyn Ring>>) {
        self.lock().recorder = Some(Recorder {
            progress,
            wake,
            judged: None,
            done: false,
        });
    }

    /// A drain of the recorder that began at `t` found its queues empty:
    /// every denial queued before `t` has been pushed.
    pub fn judged(&self, t: Instant) {
        if let Some(r) = self.lock().recorder.as_mut() {
            r.judged = Some(r.judged.map_or(t, |j| j.max(t)));
        }
        self.judged_cv.notify_all();
    }

    /// The recorder is done (the sandbox is gone).
    pub fn recorder_done(&self) {
        if let Some(r) = self.lock().recorder.as_mut() {
            r.done = true;
        }
        self.judged_cv.notify_all();
    }

    /// The denials made from `start` to `end` (the end of a tool call, now
    /// or just before), once every one made by `end` is known: waits at most
    /// `bound` for the recorder. Blocking.
    pub fn during(&self, start: Instant, end: Instant, bound: Duration) -> Vec<Denial> {
        let deadline = Instant::now() + bound;
        let (waits, progress, wake) = match &self.lock().recorder {
            Some(r) if !r.done => (true, r.progress.clone(), r.wake.clone()),
            _ => (false, None, None),
        };
        if let Some(p) = &progress {
            // Every access answered by now (≥ `end`) is queued, or lost.
            let answered = p.answered();
            while p.queued() < answered && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        if waits {
            let asked = Instant::now();
            if let Some(w) = &wake {
                w.ring();
            }
            let mut st = self.lock();
            loop {
                let settled = match &st.recorder {
                    None => true,
                    Some(r) => r.done || r.judged.is_some_and(|j| j >= asked),
                };
                let now = Instant::now();
                if settled || now >= deadline {
                    break;
                }
                st = self
                    .judged_cv
                    .wait_timeout(st, deadline - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        self.lock()
            .list
            .iter()
            .filter(|d| d.at >= start && d.at <= end)
            .cloned()
            .collect()
    }
}

/// The line an error answer gains for `denials` (at least one), in the
/// session `session` and the call `call` (its id as shown).
pub fn line(session: &str, call: &str, denials: &[Denial]) -> String {
    let first = &denials[0];
    let more = match denials.len() {
        1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    let grant = if denials.iter().any(|d| d.grantable) {
        format!(
            "A person can allow it with `wardenctl suggest {session} --apply` (it takes \
             effect when the server starts again)"
        )
    } else {
        "No policy grant allows it".into()
    };
    format!(
        "[Warden] During this call the sandbox denied {}{more}. {grant}; details: \
         `wardenctl logs {session} --call {call}`.",
        first.what
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_denials_of_a_call_are_those_between_its_start_and_end() {
        let d = Denials::new();
        let t = Instant::now();
        let ms = Duration::from_millis;
        d.push(t, "read of /a (outside the sandbox's grants)".into(), true);
        d.push(
            t + ms(10),
            "a connection to b:443 (not in network.allow)".into(),
            true,
        );
        d.push(t + ms(20), "the ptrace system call".into(), false);
        // No recorder: nothing is waited for.
        let got = d.during(t + ms(5), t + ms(25), SETTLE);
        assert_eq!(got.len(), 2);
        let l = line("abc123", "7", &got);
        assert_eq!(
            l,
            "[Warden] During this call the sandbox denied a connection to b:443 (not in \
             network.allow) and 1 more. A person can allow it with `wardenctl suggest abc123 \
             --apply` (it takes effect when the server starts again); details: `wardenctl logs \
             abc123 --call 7`."
        );
        let only = d.during(t + ms(15), t + ms(25), SETTLE);
        assert!(line("s", "1", &only).contains("No policy grant allows it"));
        assert!(d.during(t + ms(30), t + ms(40), SETTLE).is_empty());
    }

    #[test]
    fn an_error_waits_for_the_recorder_to_judge_what_came_before_it() {
        let d = Denials::new();
        d.recorder(None, None);
        let t = Instant::now();
        let judge = {
            let d = d.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                // The recorder found the access and judged it.
                d.push(
                    t,
                    "read of /secret (outside the sandbox's grants)".into(),
                    true,
                );
                d.judged(Instant::now());
            })
        };
        let got = d.during(t, t, Duration::from_secs(10));
        assert_eq!(got.len(), 1, "{got:?}");
        judge.join().unwrap();
        // Once the recorder is done, nothing waits.
        d.recorder_done();
        let before = Instant::now();
        assert_eq!(d.during(t, t, Duration::from_secs(60)).len(), 1);
        assert!(before.elapsed() < Duration::from_secs(30));
    }
}
