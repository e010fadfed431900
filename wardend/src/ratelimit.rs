//! One rate limit for every kind of record a sandboxed server can cause at
//! will (file accesses, refused calls, network decisions): a server looping on
//! a missing file, a refused call or a denied host must not flood the audit
//! store and push other sessions' records out of retention (review F5).
//!
//! Fixed one-second windows at two levels: at most `per_key` records per
//! second for one key (a path, a rule, a target), and at most `per_session`
//! per second for the whole session. What is left out is counted into a
//! summary (per key, or per class once the session's budget is spent), which
//! the caller writes as one record once its window is over.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// The window of both levels.
pub const WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Bucket<S> {
    window_start: Instant,
    recorded: u32,
    suppressed: Option<S>,
}

/// Two-level fixed-window limiter. `K`: the per-key budget's key; `C`: the
/// class the session-wide summaries are kept by; `S`: a summary.
#[derive(Debug)]
pub struct Limiter<K, C, S> {
    per_key: u32,
    per_session: u32,
    keys: HashMap<K, Bucket<S>>,
    window_start: Instant,
    recorded: u32,
    over: HashMap<C, S>,
}

impl<K: Hash + Eq, C: Hash + Eq, S> Limiter<K, C, S> {
    /// `per_session: u32::MAX` for a per-key limit only.
    pub fn new(per_key: u32, per_session: u32, now: Instant) -> Self {
        Limiter {
            per_key,
            per_session,
            keys: HashMap::new(),
            window_start: now,
            recorded: 0,
            over: HashMap::new(),
        }
    }

    /// Whether a record for `key` is written now; otherwise it is counted:
    /// `bump` adds it to the summary, which `summary` makes on first use
    /// (`true`: the session-wide one of `class`, `false`: the key's).
    pub fn admit(
        &mut self,
        key: K,
        class: C,
        now: Instant,
        summary: impl FnOnce(bool) -> S,
        bump: impl FnOnce(&mut S),
    ) -> bool {
        if now.duration_since(self.window_start) >= WINDOW {
            self.window_start = now;
            self.recorded = 0;
        }
        if self.recorded >= self.per_session {
            bump(self.over.entry(class).or_insert_with(|| summary(true)));
            return false;
        }
        let b = self.keys.entry(key).or_insert(Bucket {
            window_start: now,
            recorded: 0,
            suppressed: None,
        });
        if now.duration_since(b.window_start) >= WINDOW {
            b.window_start = now;
            b.recorded = 0;
        }
        if b.recorded < self.per_key {
            b.recorded += 1;
            self.recorded += 1;
            return true;
        }
        bump(b.suppressed.get_or_insert_with(|| summary(false)));
        false
    }

    /// Nothing remembered: no window open, no summary pending.
    pub fn is_idle(&self) -> bool {
        self.keys.is_empty() && self.over.is_empty()
    }

    /// How many keys are remembered (the window's).
    pub fn keys(&self) -> usize {
        self.keys.len()
    }

    /// The summaries of windows that are over (all of them with `all`); each
    /// is reported once. Forgets keys whose window is over, so the table stays
    /// as small as one second's records. Unordered: callers sort.
    pub fn take_summaries(&mut self, now: Instant, all: bool) -> Vec<S> {
        let over = |start: Instant| all || now.duration_since(start) >= WINDOW;
        let mut out = Vec::new();
        self.keys.retain(|_, b| {
            if over(b.window_start) {
                out.extend(b.suppressed.take());
                false
            } else {
                true
            }
        });
        if over(self.window_start) {
            out.extend(self.over.drain().map(|(_, s)| s));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admit(l: &mut Limiter<u32, u8, (bool, u32, u64)>, key: u32, now: Instant) -> bool {
        l.admit(key, 0, now, |wide| (wide, key, 0), |s| s.2 += 1)
    }

    #[test]
    fn per_key_then_per_session_then_summaries_once() {
        let t0 = Instant::now();
        let mut l = Limiter::new(2, 5, t0);
        assert!(admit(&mut l, 1, t0) && admit(&mut l, 1, t0));
        assert!(!admit(&mut l, 1, t0) && !admit(&mut l, 1, t0));
        for k in 2..5 {
            assert!(admit(&mut l, k, t0), "{k}");
        }
        // Five recorded: the session's budget is spent.
        assert!(!admit(&mut l, 9, t0));
        assert!(l.take_summaries(t0, false).is_empty());
        let mut s = l.take_summaries(t0 + WINDOW, false);
        s.sort();
        assert_eq!(s, [(false, 1, 2), (true, 9, 1)]);
        assert!(l.take_summaries(t0 + WINDOW, true).is_empty());
        // A new window: budgets again.
        assert!(admit(&mut l, 1, t0 + WINDOW));
        assert!(admit(&mut l, 9, t0 + WINDOW));
    }
}
