//! A server cannot flood the audit store to push evidence out of retention
//! (review F5): its network records are rate-limited per target and per
//! session, with what is left out counted in summary records, and (tested in
//! `wardend`'s audit unit tests) retention never deletes a live session's
//! `session.start`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::time::Duration;

use serde_json::Value;
use warden_e2e::*;

/// Connects to the egress proxy `n` times, sends a malformed request each
/// time and reads the answer: one denied `network.connect` per connection.
const FLOOD: &str = r#"
import socket, sys
n = int(sys.argv[1])
for i in range(n):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"x\r\n\r\n")
    try:
        s.recv(4096)
    except OSError:
        pass
    s.close()
print("done", n)
"#;

/// Runs the flood of `n` connections in a session of its own.
fn flood(env: &TestEnv, n: u64) -> std::process::Output {
    let mut cmd = env.shim([
        "--policy",
        env.minimal_policy().to_str().unwrap(),
        "--",
        "/usr/bin/python3",
        "-c",
        FLOOD,
        &n.to_string(),
    ]);
    run(&mut cmd, Duration::from_secs(120))
}

#[test]
fn a_flood_of_denied_connections_is_summarised_not_recorded_one_by_one() {
    let n: u64 = 3000;
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let out = flood(&env, n);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        exit_code(out.status),
        0,
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("done {n}")), "{stdout}");
    // Records are group-committed; the session's own are all in once it ended.
    let records = audit_records(&env);
    let start = records
        .iter()
        .find(|r| r["type"] == "session" && r["action"] == "start")
        .expect("session.start");
    let session = start["session"].as_str().unwrap().to_string();
    let net: Vec<&Value> = records
        .iter()
        .filter(|r| r["type"] == "network" && r["session"] == session.as_str())
        .collect();
    let (single, summaries): (Vec<&Value>, Vec<&Value>) = net
        .iter()
        .partition(|r| r["details"]["suppressed"].is_null());
    let suppressed: u64 = summaries
        .iter()
        .map(|r| r["details"]["suppressed"].as_u64().unwrap())
        .sum();
    let connects = single.iter().filter(|r| r["action"] == "connect").count() as u64;
    eprintln!(
        "{} single records ({connects} connect), {} summaries of {suppressed}",
        single.len(),
        summaries.len()
    );
    // Nothing is lost: every denial is a record or counted in a summary.
    let counted: u64 = connects
        + summaries
            .iter()
            .filter(|r| r["action"] == "connect")
            .map(|r| r["details"]["suppressed"].as_u64().unwrap())
            .sum::<u64>();
    assert_eq!(counted, n);
    // And most of them are only counted: 10 per second per target.
    assert!(connects < n / 2, "{connects} of {n} recorded one by one");
    assert!(summaries
        .iter()
        .all(|r| r["decision"] == "deny" && r["details"]["rate_limit"].is_string()));
    // Control: a handful of connections are each recorded.
    assert_eq!(exit_code(flood(&env, 5).status), 0);
    let records = audit_records(&env);
    let second = records
        .iter()
        .filter(|r| r["type"] == "session" && r["action"] == "start")
        .nth(1)
        .expect("second session.start")["session"]
        .clone();
    let connects = records
        .iter()
        .filter(|r| r["type"] == "network" && r["session"] == second && r["action"] == "connect")
        .filter(|r| r["details"]["suppressed"].is_null())
        .count();
    assert_eq!(connects, 5);
}
