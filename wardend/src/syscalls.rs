//! Refused system calls → `policy.syscall` audit records (DESIGN.md §7,
//! `docs/audit-format.md`).
//!
//! The sandbox answers its seccomp listener itself and queues every refused
//! escape or kernel-attack call ([`RefusedCalls`]); this module turns them
//! into records (`crate::recorder` drains the queue). Writing never
//! delays the refused call (it was answered before it was queued for us).
//!
//! A server looping on a refused call must not flood the store: at most
//! [`PER_SECOND`] records per second per rule per session; the calls beyond
//! that are counted and written as one summary record (`details.suppressed`)
//! when the second is over (or the session ends).

use std::time::Instant;

use warden_audit::event::{self, errno_name};
use warden_audit::Record;
use warden_sandbox::RefusedCall;

/// Records per second per rule (syscall and reason) per session.
pub const PER_SECOND: u32 = 10;

/// A rule: the syscall name and the rule's reason (one syscall may have several
/// rules, e.g. `ioctl` for TIOCSTI and TIOCLINUX).
type Key = (&'static str, &'static str);

/// Calls of one rule left out of the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppressed {
    pub syscall: &'static str,
    pub reason: &'static str,
    pub nr: i64,
    pub errno: i32,
    pub count: u64,
}

/// [`PER_SECOND`] per rule over one-second windows.
#[derive(Debug)]
pub struct RateLimit(crate::ratelimit::Limiter<Key, (), Suppressed>);

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit(crate::ratelimit::Limiter::new(
            PER_SECOND,
            u32::MAX,
            Instant::now(),
        ))
    }
}

impl RateLimit {
    /// Whether `call` gets its own record; otherwise it is counted.
    pub fn admit(&mut self, call: &RefusedCall, now: Instant) -> bool {
        self.0.admit(
            (call.syscall, call.reason),
            (),
            now,
            |_| Suppressed {
                syscall: call.syscall,
                reason: call.reason,
                nr: call.nr,
                errno: call.errno,
                count: 0,
            },
            |s| s.count += 1,
        )
    }

    /// The counts of windows that are over (all of them with `all`), in a
    /// stable order; each is reported once.
    pub fn take_summaries(&mut self, now: Instant, all: bool) -> Vec<Suppressed> {
        let mut out = self.0.take_summaries(now, all);
        out.sort_by_key(|s| (s.syscall, s.reason));
        out
    }

    /// No window open: nothing to summarise later.
    pub fn is_idle(&self) -> bool {
        self.0.is_idle()
    }
}

/// The record of one refused call.
pub fn call_record(session: &str, c: &RefusedCall) -> Record {
    event::SyscallRefused {
        session: session.to_owned(),
        syscall: c.syscall.to_owned(),
        reason: c.reason.to_owned(),
        pid: c.pid,
        nr: c.nr,
        args: c.args,
        checked_arg: c
            .checked_arg
            .map(|(index, value)| event::CheckedArg { index, value }),
        errno: c.errno,
        error: errno_name(c.errno),
    }
    .into()
}

/// The summary of calls left out by the rate limit.
pub fn summary_record(session: &str, s: &Suppressed) -> Record {
    event::SyscallSummary {
        session: session.to_owned(),
        syscall: s.syscall.to_owned(),
        reason: s.reason.to_owned(),
        suppressed: s.count,
        nr: s.nr,
        errno: s.errno,
        error: errno_name(s.errno),
        rate_limit: format!("{PER_SECOND} records per second per rule"),
    }
    .into()
}

/// The record of refused calls the full queue kept from the store.
pub fn lost_record(session: &str, lost: u64) -> Record {
    event::SyscallsLost {
        session: session.to_owned(),
        lost,
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ratelimit::WINDOW;
    use serde_json::json;

    fn call(syscall: &'static str, reason: &'static str) -> RefusedCall {
        RefusedCall {
            pid: 77,
            nr: 272,
            syscall,
            args: [0x1000_0000, 0, 0, 0, 0, 0],
            checked_arg: Some((0, 0x1000_0000)),
            errno: libc::EPERM,
            reason,
            at: std::time::Instant::now(),
        }
    }

    #[test]
    fn at_most_per_second_records_per_rule_then_one_summary() {
        let mut l = RateLimit::default();
        let t0 = Instant::now();
        let c = call("unshare", "new namespaces");
        let admitted = (0..1000).filter(|_| l.admit(&c, t0)).count();
        assert_eq!(admitted, PER_SECOND as usize);
        // Another rule has its own budget.
        assert!(l.admit(&call("ptrace", "other processes"), t0));
        assert_eq!(l.take_summaries(t0, false), vec![]);
        let later = t0 + WINDOW;
        let want = Suppressed {
            syscall: "unshare",
            reason: "new namespaces",
            nr: 272,
            errno: libc::EPERM,
            count: 1000 - u64::from(PER_SECOND),
        };
        assert_eq!(l.take_summaries(later, false), vec![want]);
        // Reported once; a new window records again.
        assert_eq!(l.take_summaries(later, true), vec![]);
        assert!(l.admit(&c, later));
    }

    #[test]
    fn the_end_flushes_windows_still_open() {
        let mut l = RateLimit::default();
        let t0 = Instant::now();
        let c = call("bpf", "eBPF");
        for _ in 0..(PER_SECOND + 3) {
            l.admit(&c, t0);
        }
        let s = l.take_summaries(t0, true);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].count, 3);
    }

    #[test]
    fn records_name_the_call_and_the_rule() {
        let r = call_record("0123456789ab", &call("unshare", "new namespaces"));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["type"], "policy");
        assert_eq!(v["action"], "syscall");
        assert_eq!(v["resource"], "unshare");
        assert_eq!(v["decision"], "deny");
        assert_eq!(v["reason"], "new namespaces");
        assert_eq!(v["session"], "0123456789ab");
        assert_eq!(
            v["details"],
            json!({
                "pid": 77, "nr": 272, "args": [0x1000_0000u64, 0, 0, 0, 0, 0],
                "checked_arg": {"index": 0, "value": 0x1000_0000u64},
                "errno": 1, "error": "EPERM",
            })
        );
        let s = Suppressed {
            syscall: "unshare",
            reason: "new namespaces",
            nr: 272,
            errno: 1,
            count: 5,
        };
        let v = serde_json::to_value(summary_record("0123456789ab", &s)).unwrap();
        assert_eq!(v["resource"], "unshare");
        assert_eq!(v["details"]["suppressed"], 5);
    }
}
