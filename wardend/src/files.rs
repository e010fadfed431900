//! Observed file accesses → `file` audit records (`audit.files`, DESIGN.md §7,
//! `docs/audit-format.md`).
//!
//! The sandbox lets every observed call through before it is queued for us
//! ([`warden_sandbox::supervise`]); `crate::recorder` drains one session's
//! queue (classification happens there, on a blocking thread, inside
//! `FileAccesses::try_next_classified`) and this module makes the records. Nothing here can
//! delay or change a call.
//!
//! A server looping on a missing file, or walking a tree with `audit.files:
//! all`, must not flood the store: at most [`PER_PATH`] records per second for
//! one (action, decision, path), and at most [`PER_SECOND`] file records per
//! second for the whole session; what is left out is counted and written as
//! summary records (`details.suppressed`) once its second is over (or the
//! session ends).

use std::time::Instant;

use warden_audit::event::{self, path_text};
use warden_audit::{Decision, Record};
use warden_sandbox::spec::{FileWatch, SandboxSpec};
use warden_sandbox::supervise::{AccessVerdict, Action, FileAccess};

/// Records per second for one (action, decision, path) per session.
pub const PER_PATH: u32 = 10;
/// File records per second per session, summaries excluded.
pub const PER_SECOND: u32 = 1000;

/// One path's budget: (action, decision, path as named).
type Key = (Action, AccessVerdict, Vec<u8>);

/// Accesses left out of the records: per path, or (resource `*`) per action
/// and decision once the session's budget for the second is spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppressed {
    pub action: Action,
    pub decision: Decision,
    /// The path, or `None` for the session-wide summary.
    pub path: Option<Vec<u8>>,
    pub reason: String,
    pub count: u64,
}

/// [`PER_PATH`] and [`PER_SECOND`] over one-second windows.
#[derive(Debug)]
pub struct RateLimit(crate::ratelimit::Limiter<Key, (Action, AccessVerdict), Suppressed>);

impl RateLimit {
    pub fn new(now: Instant) -> RateLimit {
        RateLimit(crate::ratelimit::Limiter::new(PER_PATH, PER_SECOND, now))
    }

    /// Whether `a` gets its own record; otherwise it is counted.
    pub fn admit(&mut self, a: &FileAccess, now: Instant) -> bool {
        let decision = decision(a.verdict);
        let key = (a.action, a.verdict, a.path.clone());
        self.0.admit(
            key,
            (a.action, a.verdict),
            now,
            |session_wide| Suppressed {
                action: a.action,
                decision,
                path: (!session_wide).then(|| a.path.clone()),
                reason: if session_wide {
                    "more file records than the session's budget per second".into()
                } else {
                    a.reason.clone()
                },
                count: 0,
            },
            |s| s.count += 1,
        )
    }

    /// The counts of windows that are over (all of them with `all`), in a
    /// stable order; each is reported once.
    pub fn take_summaries(&mut self, now: Instant, all: bool) -> Vec<Suppressed> {
        let mut out = self.0.take_summaries(now, all);
        out.sort_by(|a, b| {
            (a.path.is_none(), a.action.as_str(), &a.path).cmp(&(
                b.path.is_none(),
                b.action.as_str(),
                &b.path,
            ))
        });
        out
    }

    /// No window open: nothing to summarise later.
    pub fn is_idle(&self) -> bool {
        self.0.is_idle()
    }
}

fn decision(d: AccessVerdict) -> Decision {
    match d {
        AccessVerdict::Allow => Decision::Allow,
        AccessVerdict::Deny => Decision::Deny,
        AccessVerdict::Unknown => Decision::Info,
    }
}

/// The record of one access.
/// A denied access as an explanation names it (`mcp.explain_denials`):
/// "`open-read` of /home/u/.ssh/id_rsa (outside the sandbox's grants)".
pub fn denial_text(a: &FileAccess) -> String {
    let (path, _) = path_text(if a.resolved.is_empty() {
        &a.path
    } else {
        &a.resolved
    });
    format!("`{}` of {path} ({})", a.action.as_str(), a.reason)
}

pub fn access_record(session: &str, a: &FileAccess) -> Record {
    let (path, path_bytes_hex) = path_text(&a.path);
    let (resolved, resolved_bytes_hex) = path_text(&a.resolved);
    // An optional path: (text, hex) or neither.
    let split = |p: Option<&[u8]>| match p.map(path_text) {
        Some((text, hex)) => (Some(text), hex),
        None => (None, None),
    };
    let (to, to_bytes_hex) = split(a.to.as_ref().map(|(to, _)| to.as_slice()));
    let (to_resolved, to_resolved_bytes_hex) = split(a.to.as_ref().map(|(_, r)| r.as_slice()));
    let (target, target_bytes_hex) = split(a.target.as_deref());
    event::FileAccess {
        session: session.to_owned(),
        action: a.action.as_str().to_owned(),
        decision: decision(a.verdict),
        reason: a.reason.clone(),
        path,
        path_bytes_hex,
        syscall: a.syscall.to_owned(),
        resolved,
        resolved_bytes_hex,
        to,
        to_bytes_hex,
        to_resolved,
        to_resolved_bytes_hex,
        target,
        target_bytes_hex,
        errno: a.errno,
        error: a.errno.map(event::errno_name),
        flags: a.flags,
        pid: a.pid,
    }
    .into()
}

/// The summary of accesses left out by the rate limit.
pub fn summary_record(session: &str, s: &Suppressed) -> Record {
    let (path, path_bytes_hex) = s.path.as_deref().map(path_text).unzip();
    event::FileSummary {
        session: session.to_owned(),
        action: s.action.as_str().to_owned(),
        decision: s.decision,
        reason: s.reason.clone(),
        path,
        path_bytes_hex: path_bytes_hex.flatten(),
        suppressed: s.count,
        rate_limit: format!("{PER_PATH} records per second per path, {PER_SECOND} per session"),
    }
    .into()
}

/// The record of accesses the full queue kept from the store.
pub fn lost_record(session: &str, lost: u64) -> Record {
    event::FilesLost {
        session: session.to_owned(),
        lost,
    }
    .into()
}

/// Why a session must not start for its `audit.files`, if it must not: a level
/// the policy asked for explicitly (other than `off`) needs seccomp user
/// notification; the default level runs without it and says `unavailable`.
pub fn refusal(level: FileWatch, explicit: bool, notify_available: bool) -> Option<String> {
    (explicit && !level.is_off() && !notify_available).then(|| {
        format!(
            "audit.files: {} needs seccomp user notification, which this kernel does not \
             offer; set audit.files: off, or remove the key to run without file records",
            level.as_str()
        )
    })
}

/// What `session.start` says about file auditing: the level, or
/// `unavailable` when the policy asks for it but the sandbox's layers do not
/// watch file accesses (the kernel lacks seccomp user notification; like
/// `syscall_audit`, an audit that cannot be had is said, not refused: it
/// protects nothing).
pub fn level_in_use(spec: &SandboxSpec) -> &'static str {
    if !spec.audit_files.is_off() && !spec.layers.watch_files {
        "unavailable"
    } else {
        spec.audit_files.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ratelimit::WINDOW;
    use serde_json::json;

    #[test]
    fn an_explicit_level_without_user_notification_is_refused() {
        assert!(
            refusal(FileWatch::All, true, false).is_some_and(|m| m.contains("audit.files: all"))
        );
        assert!(refusal(FileWatch::Denied, true, false).is_some());
        // The default level runs (recorded as unavailable); off never needs it;
        // with user notification nothing is refused.
        assert_eq!(refusal(FileWatch::Denied, false, false), None);
        assert_eq!(refusal(FileWatch::Off, true, false), None);
        assert_eq!(refusal(FileWatch::All, true, true), None);
    }

    fn access(action: Action, path: &[u8], verdict: AccessVerdict) -> FileAccess {
        FileAccess {
            pid: 77,
            syscall: "openat",
            action,
            path: path.to_vec(),
            resolved: path.to_vec(),
            to: None,
            target: None,
            flags: 0,
            verdict,
            errno: (verdict == AccessVerdict::Deny).then_some(libc::ENOENT),
            reason: "outside the sandbox's grants".into(),
            at: std::time::Instant::now(),
        }
    }

    #[test]
    fn at_most_per_path_records_per_second_then_one_summary() {
        let t0 = Instant::now();
        let mut l = RateLimit::new(t0);
        let a = access(
            Action::OpenRead,
            b"/home/u/.ssh/id_rsa",
            AccessVerdict::Deny,
        );
        let admitted = (0..1000).filter(|_| l.admit(&a, t0)).count();
        assert_eq!(admitted, PER_PATH as usize);
        // Another path, or the same path with another action, has its own budget.
        assert!(l.admit(
            &access(Action::OpenRead, b"/etc/shadow", AccessVerdict::Deny),
            t0
        ));
        assert!(l.admit(
            &access(Action::Exec, b"/home/u/.ssh/id_rsa", AccessVerdict::Deny),
            t0
        ));
        assert_eq!(l.take_summaries(t0, false), vec![]);
        let later = t0 + WINDOW;
        let s = l.take_summaries(later, false);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].count, 1000 - u64::from(PER_PATH));
        assert_eq!(s[0].path.as_deref(), Some(&b"/home/u/.ssh/id_rsa"[..]));
        assert_eq!(s[0].decision, Decision::Deny);
        // Reported once, and the table was emptied.
        assert_eq!(l.take_summaries(later, true), vec![]);
        assert_eq!(l.0.keys(), 0);
        assert!(l.admit(&a, later));
    }

    #[test]
    fn the_session_budget_caps_many_distinct_paths() {
        let t0 = Instant::now();
        let mut l = RateLimit::new(t0);
        let n = PER_SECOND as usize + 500;
        let admitted = (0..n)
            .filter(|i| {
                let p = format!("/data/f{i}");
                l.admit(
                    &access(Action::OpenRead, p.as_bytes(), AccessVerdict::Allow),
                    t0,
                )
            })
            .count();
        assert_eq!(admitted, PER_SECOND as usize);
        // Paths beyond the budget are not remembered one by one.
        assert_eq!(l.0.keys(), PER_SECOND as usize);
        let s = l.take_summaries(t0, true);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!((s[0].path.clone(), s[0].count), (None, 500));
        assert_eq!(s[0].action, Action::OpenRead);
    }

    #[test]
    fn records_carry_the_path_as_named_and_the_details() {
        let mut a = access(Action::OpenRead, b"../x/id_rsa", AccessVerdict::Deny);
        a.resolved = b"/home/u/x/id_rsa".to_vec();
        let v = serde_json::to_value(access_record("0123456789ab", &a)).unwrap();
        assert_eq!(v["type"], "file");
        assert_eq!(v["action"], "open-read");
        assert_eq!(v["resource"], "../x/id_rsa");
        assert_eq!(v["decision"], "deny");
        assert_eq!(v["reason"], "outside the sandbox's grants");
        assert_eq!(v["session"], "0123456789ab");
        assert_eq!(
            v["details"],
            json!({
                "syscall": "openat", "resolved": "/home/u/x/id_rsa",
                "errno": libc::ENOENT, "error": "ENOENT", "flags": 0, "pid": 77,
            })
        );
        let allowed = access(Action::OpenRead, b"/usr/lib/x", AccessVerdict::Allow);
        let v = serde_json::to_value(access_record("s", &allowed)).unwrap();
        assert_eq!(v["decision"], "allow");
        assert!(v["details"]["errno"].is_null());
    }

    #[test]
    fn paths_that_are_not_utf8_keep_their_bytes() {
        let mut a = access(Action::Create, b"/tmp/\xff\xfeok", AccessVerdict::Allow);
        a.to = Some((b"new\x80".to_vec(), b"/tmp/new\x80".to_vec()));
        let v = serde_json::to_value(access_record("s", &a)).unwrap();
        assert_eq!(v["resource"], "/tmp/\u{fffd}\u{fffd}ok");
        let d = &v["details"];
        assert_eq!(d["path_bytes_hex"], "2f746d702ffffe6f6b");
        assert_eq!(d["resolved_bytes_hex"], "2f746d702ffffe6f6b");
        assert_eq!(d["to_bytes_hex"], "6e657780");
        assert_eq!(d["to_resolved_bytes_hex"], "2f746d702f6e657780");
        // UTF-8 paths carry no hex.
        let v = serde_json::to_value(access_record(
            "s",
            &access(Action::OpenRead, "/tmp/é".as_bytes(), AccessVerdict::Allow),
        ))
        .unwrap();
        assert_eq!(v["resource"], "/tmp/é");
        assert!(v["details"].get("path_bytes_hex").is_none());
    }

    #[test]
    fn summaries_name_the_path_or_the_session() {
        let s = Suppressed {
            action: Action::OpenRead,
            decision: Decision::Deny,
            path: Some(b"/x".to_vec()),
            reason: "outside the sandbox's grants".into(),
            count: 5,
        };
        let v = serde_json::to_value(summary_record("s", &s)).unwrap();
        assert_eq!(
            (v["type"].as_str(), v["resource"].as_str()),
            (Some("file"), Some("/x"))
        );
        assert_eq!(v["details"]["suppressed"], 5);
        let all = Suppressed { path: None, ..s };
        let v = serde_json::to_value(summary_record("s", &all)).unwrap();
        assert_eq!(v["resource"], "*");
    }
}
