//! What the approval tests (`tests/approvals.rs`, `tests/approvals_desktop.rs`)
//! ask of a daemon: its pending approvals, answers through `wardenctl
//! approve`, and the `approval.*` records.

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{audit_records, run, TestEnv};

/// `wardenctl ARGS` with this env (30 s at most).
pub fn ctl(env: &TestEnv, args: &[&str]) -> Output {
    run(&mut env.ctl(args), Duration::from_secs(30))
}

/// The pending approvals (`wardenctl approve --json`: one object a line).
pub fn pending(env: &TestEnv) -> Vec<Value> {
    let out = ctl(env, &["approve", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// `wardenctl approve ID --SCOPE`.
pub fn answer(env: &TestEnv, id: &str, scope: &str) -> Output {
    ctl(env, &["approve", id, &format!("--{scope}")])
}

/// As [`answer`], which must succeed; its stdout.
#[track_caller]
pub fn answer_ok(env: &TestEnv, id: &str, scope: &str) -> String {
    let out = answer(env, id, scope);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "approve {id} --{scope}: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `approval` records of `action`, once there are `n` (the store commits
/// in groups), or what there is after 15 s.
pub fn approval_records(env: &TestEnv, action: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r: Vec<Value> = audit_records(env)
            .into_iter()
            .filter(|r| r["type"] == "approval" && r["action"] == action)
            .collect();
        if r.len() >= n || Instant::now() >= deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
