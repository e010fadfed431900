//! `limits.memory_mb` (DESIGN.md §5 "Limits"): without a delegated cgroup the
//! daemon samples the resident memory of the whole sandbox every 25 ms; a
//! breach ends the tree (SIGTERM, SIGKILL after 750 ms), is audited as
//! `limit.breach`, and the shim exits 137.

use std::time::Duration;

use serde_json::json;
use warden_e2e::*;

fn memory_policy(env: &TestEnv, mb: u32) -> std::path::PathBuf {
    env.policy(
        &format!("mem{mb}.yaml"),
        &format!("version: 1\nname: e2e-mem\nlimits:\n  memory_mb: {mb}\n  timeout_s: 60\n"),
    )
}

#[test]
fn a_memory_bomb_is_stopped_and_recorded() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let marker = unique_marker("membomb");
    let policy = memory_policy(&env, 64);
    let mut c = env.fixture_session(&policy, &[], &["--ignore-sigterm", "--marker", &marker]);
    c.initialize();
    c.tool_json("spawn_child", json!({"ignore_term": true, "setsid": true}));
    // 2 GiB in 16 MiB steps: far more than the limit, slowly enough to be sampled.
    c.send(&json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                   "params": {"name": "alloc", "arguments": {"mb": 2048, "step_mb": 16, "pause_ms": 5}}}));
    let code = c.wait_code(Duration::from_secs(30));
    let stderr = c.stderr();
    assert_eq!(code, EXIT_KILLED, "stderr:\n{stderr}");
    assert!(stderr.contains("limits.memory_mb exceeded"), "{stderr}");
    let left = wait_no_marker(&marker, Duration::from_secs(5));
    assert!(left.is_empty(), "left running: {left:?}");
    let records = audit_records(&env);
    let breach = records
        .iter()
        .find(|r| r["type"] == "limit" && r["action"] == "breach")
        .unwrap_or_else(|| panic!("no limit.breach in {records:?}"));
    assert_eq!(breach["decision"], "deny");
    assert_eq!(breach["resource"], "memory_mb");
    assert!(breach["details"]["rss_bytes"].as_u64().unwrap() > 64 << 20);
    let exit = records
        .iter()
        .find(|r| r["type"] == "session" && r["action"] == "exit")
        .unwrap();
    assert_eq!(exit["reason"], "limits.memory_mb exceeded");
}

/// Control: the same allocation under a limit that fits succeeds, so it is the
/// limit (not the sandbox or the fixture) that stops the bomb above.
#[test]
fn an_allocation_within_the_limit_succeeds() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let policy = memory_policy(&env, 1024);
    let mut c = env.fixture_session(&policy, &[], &[]);
    c.initialize();
    let text = c.tool_text("alloc", json!({"mb": 128, "step_mb": 16, "pause_ms": 5}));
    assert_eq!(text, "allocated 128 MiB");
    let ps = env.sessions();
    assert_eq!(ps.len(), 1, "{ps:?}");
    let limits = ps[0]["limits"].to_string();
    assert!(
        limits.contains("memory_mb=1024 (RSS of the whole sandbox sampled every 25 ms)"),
        "{limits}"
    );
    c.close_stdin();
    assert_eq!(c.wait_code(Duration::from_secs(10)), 0, "{}", c.stderr());
}
