//! A daemon running as root (review F8): its servers would be the host's root
//! user, without capabilities but owning every root-owned file they can see.
//! So a root daemon refuses every session with one clear line and a
//! `session.refused` record, unless it was started with
//! `--dangerously-run-servers-as-root` (or the environment variable of the
//! same name), and then says so in `session.start` (`details.sandbox.host_root`).
//! As a normal user nothing changes (every other test runs so in the
//! unprivileged phase). Root only.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::time::Duration;

use warden_e2e::*;

const VAR: &str = "WARDEN_DANGEROUSLY_RUN_SERVERS_AS_ROOT";

fn session_of(env: &TestEnv, policy: &std::path::Path) -> std::process::Output {
    let mut cmd = env.shim(["--policy", policy.to_str().unwrap(), "--", "/bin/true"]);
    cmd.env_remove(VAR);
    run(&mut cmd, Duration::from_secs(30))
}

#[test]
fn a_root_daemon_refuses_sessions_unless_told_to_run_servers_as_root() {
    let env = TestEnv::new();
    if !is_root() {
        // The control: a normal user's daemon runs the same session.
        let _d = env.start_daemon();
        let out = session_of(&env, &env.minimal_policy());
        assert_eq!(exit_code(out.status), 0);
        println!("skipping the refusal: needs root (control as a normal user passed)");
        return;
    }
    let policy = env.minimal_policy();
    {
        // Without the opt-in (the harness sets it for root; take it away).
        let mut d = env.start_daemon_with(&[], &[(VAR, "0")]);
        let out = session_of(&env, &policy);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(exit_code(out.status), 125, "{stderr}");
        let lines = warden_lines(&stderr);
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(
            lines[0].starts_with(
                "warden: wardend runs as root, so the server would run as the host's root user"
            ),
            "{stderr}"
        );
        assert!(
            lines[0].contains("--dangerously-run-servers-as-root"),
            "{stderr}"
        );
        let records = audit_records(&env);
        assert!(records.iter().any(|r| r["type"] == "session"
            && r["action"] == "refused"
            && r["reason"]
                .as_str()
                .unwrap_or("")
                .starts_with("wardend runs as root")));
        assert!(!records
            .iter()
            .any(|r| r["type"] == "session" && r["action"] == "start"));
        d.stop(Duration::from_secs(10));
    }
    // With the flag: the session runs, and its start record says so.
    let _d = env.start_daemon_with(&["--dangerously-run-servers-as-root"], &[(VAR, "0")]);
    let out = session_of(&env, &policy);
    assert_eq!(
        exit_code(out.status),
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let start = audit_records(&env)
        .into_iter()
        .find(|r| r["type"] == "session" && r["action"] == "start")
        .expect("session.start");
    assert_eq!(start["details"]["sandbox"]["host_root"], true, "{start}");
}
