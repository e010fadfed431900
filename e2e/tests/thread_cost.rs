//! What an idle session costs the daemon in threads (issue 9: 500 concurrent
//! sessions). With the client's stdio as pipes (what MCP clients pass), a
//! session holds exactly one daemon thread: its stdio relay (stdin, stdout
//! and a piped stderr on one thread). The seccomp listeners are answered by
//! a pool shared by all sessions, whose threads beyond the first end when
//! idle; waiting for the sandbox's exit and recording its refused calls and
//! file accesses take no thread of their own (event loop, blocking pool only
//! while working): a thread per session for any of them would add 20 here.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use warden_e2e::*;

/// Threads of `pid`, by name.
fn threads(pid: i32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect()
}

const SESSIONS: usize = 20;
/// Threads per idle session: the relay.
const PER_SESSION: usize = 1;
/// The notifier pool's threads once idle: the first, and one that has not
/// yet reached its keep-alive.
const POOL_IDLE: usize = 2;
/// The runtime's own threads beyond the idle daemon's that may remain
/// (blocking-pool threads between their last job and their keep-alive).
const SLACK: usize = 8;

#[test]
fn an_idle_session_costs_one_thread() {
    let env = TestEnv::new();
    let daemon = env.start_daemon();
    let pid = daemon.pid();
    let policy = env.minimal_policy();
    // The idle daemon: its runtime, the audit committer.
    let before = threads(pid).len();
    let mut shims: Vec<Child> = (0..SESSIONS)
        .map(|_| {
            env.shim([
                "--policy",
                policy.to_str().unwrap(),
                "--",
                "/bin/sleep",
                "120",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    while env.sessions().len() < SESSIONS {
        assert!(
            Instant::now() < deadline,
            "{SESSIONS} sessions did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The sessions' start-up used blocking-pool threads, which end a few
    // seconds after their last job; wait (generously) for the count to
    // settle at what the sessions hold.
    // The notifier pool's threads that the starts needed end after 10 s
    // without work.
    let bound = before + SESSIONS * PER_SESSION + POOL_IDLE + SLACK;
    let count = |now: &[String], n: &str| now.iter().filter(|t| t.starts_with(n)).count();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut now = threads(pid);
    while (now.len() > bound || count(&now, "warden-seccomp") > POOL_IDLE)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(200));
        now = threads(pid);
    }
    let named = |n: &str| count(&now, n);
    let mut names = now.clone();
    names.sort();
    assert!(
        now.len() <= bound,
        "{} threads with {SESSIONS} idle sessions, {before} without: more than \
         {PER_SESSION} a session: {names:?}",
        now.len()
    );
    let pool = named("warden-seccomp");
    assert!(
        (1..=POOL_IDLE).contains(&pool),
        "{pool} notifier threads for {SESSIONS} idle sessions: {names:?}"
    );
    assert_eq!(named("pump-stdio"), SESSIONS, "{names:?}");
    assert_eq!(
        named("pump-std"),
        SESSIONS,
        "a piped stderr has no pump of its own: {names:?}"
    );
    assert_eq!(named("warden-file-aud"), 0, "{names:?}");
    // Control: the sessions are alive and end cleanly with their client.
    assert_eq!(env.sessions().len(), SESSIONS);
    for s in &mut shims {
        send_signal(s.id() as i32, libc::SIGTERM);
    }
    for s in &mut shims {
        assert!(wait_timeout(s, Duration::from_secs(30)).is_some());
    }
    drop(daemon);
}
