//! At its session limit the daemon refuses a new session with one clear line
//! naming the limit (`warden: too many sessions: ...`, exit 125), writes a
//! `session.refused` record, and starts nothing; the sessions already running
//! are untouched, and once one ends a new one starts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::time::{Duration, Instant};

use warden_e2e::*;

#[test]
fn beyond_max_sessions_a_new_session_is_refused_cleanly() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon_with(&["--max-sessions", "2"], &[]);
    let policy = env.minimal_policy();
    let marker = unique_marker("capacity");
    let sleeper = |secs: &str| {
        let mut c = env.shim([
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            &format!("sleep {secs}; : {marker}"),
        ]);
        c.stdin(std::process::Stdio::null());
        c
    };
    let mut a = sleeper("30").spawn().unwrap();
    let mut b = sleeper("2").spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while env.sessions().len() < 2 {
        assert!(Instant::now() < deadline, "two sessions did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The third: refused, one line, nothing started.
    let out = run(&mut sleeper("30"), Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(exit_code(out.status), 125, "{stderr}");
    let lines = warden_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("warden: too many sessions: 2 are running, the limit is 2"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(env.sessions().len(), 2);
    assert_eq!(
        pids_with_marker(&marker).len(),
        2 * 2,
        "sh and sleep of two sessions"
    );
    let refused: Vec<_> = audit_records(&env)
        .into_iter()
        .filter(|r| r["type"] == "session" && r["action"] == "refused")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("too many sessions:"));
    // Control: once one ends, a new session starts.
    assert_eq!(
        wait_timeout(&mut b, Duration::from_secs(20)).map(|s| s.success()),
        Some(true)
    );
    let out = run(&mut sleeper("0"), Duration::from_secs(30));
    assert_eq!(
        exit_code(out.status),
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    send_signal(a.id() as i32, libc::SIGTERM);
    let _ = wait_timeout(&mut a, Duration::from_secs(20));
}
