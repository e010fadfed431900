//! The sandbox as a server sees it: files, environment and limits (DESIGN.md §5).
//! Each refusal is paired with a control showing the same access works without Warden
//! (the fixture run directly), so a refusal is not just a broken fixture.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use warden_e2e::*;

const EXIT_WAIT: Duration = Duration::from_secs(15);

fn direct_fixture(env: &TestEnv) -> McpClient {
    let mut cmd = Command::new(fixture());
    cmd.envs(env.env_vars());
    let mut c = McpClient::spawn(cmd);
    c.initialize();
    c
}

fn finish(mut c: McpClient) {
    c.close_stdin();
    assert_eq!(c.wait_code(EXIT_WAIT), 0, "stderr:\n{}", c.stderr());
}

#[test]
fn ssh_key_in_home_is_not_visible() {
    let env = TestEnv::new();
    let key = env.write("home/.ssh/id_rsa", "-----BEGIN CANARY PRIVATE KEY-----\n");
    // Control: without Warden the fixture reads it.
    let mut control = direct_fixture(&env);
    assert!(control
        .tool_text("read_file", json!({"path": key}))
        .contains("CANARY"));
    finish(control);

    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(&env.minimal_policy(), &[], &[]);
    c.initialize();
    let r = c.call_tool("read_file", json!({"path": key}));
    assert!(is_tool_error(&r), "the canary key was readable inside: {r}");
    assert!(!tool_result_text(&r).contains("CANARY"));
    let home = c.call_tool("list_dir", json!({"path": env.home}));
    if !is_tool_error(&home) {
        assert!(
            !tool_result_text(&home).contains(".ssh"),
            "host home visible inside: {home}"
        );
    }
    finish(c);
}

#[test]
fn etc_shadow_is_not_readable() {
    let env = TestEnv::new();
    if !unprivileged_run() && is_root() {
        // Control: as root, /etc/shadow is readable without Warden.
        let mut control = direct_fixture(&env);
        let r = control.call_tool("read_file", json!({"path": "/etc/shadow"}));
        assert!(
            !is_tool_error(&r),
            "control read of /etc/shadow failed: {r}"
        );
        finish(control);
    }
    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(&env.minimal_policy(), &[], &[]);
    c.initialize();
    let r = c.call_tool("read_file", json!({"path": "/etc/shadow"}));
    assert!(is_tool_error(&r), "/etc/shadow readable inside: {r}");
    finish(c);
}

#[test]
fn ungranted_files_next_to_grants_do_not_exist() {
    let env = TestEnv::new();
    let secret = env.write("secret.txt", "top secret");
    let data = env.mkdir("data");
    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(
        &env.minimal_policy(),
        &["--read", data.to_str().unwrap()],
        &[],
    );
    c.initialize();
    let r = c.call_tool("read_file", json!({"path": secret}));
    assert!(is_tool_error(&r), "an ungranted file was readable: {r}");
    let r = c.call_tool("read_file", json!({"path": "/root/.bashrc"}));
    assert!(is_tool_error(&r), "/root visible: {r}");
    finish(c);
}

#[test]
fn read_grant_is_readable_and_not_writable() {
    let env = TestEnv::new();
    let data = env.mkdir("data");
    let file = env.write("data/hello.txt", "read me");
    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(
        &env.minimal_policy(),
        &["--read", data.to_str().unwrap()],
        &[],
    );
    c.initialize();
    assert_eq!(c.tool_text("read_file", json!({"path": file})), "read me");
    let listing = c.tool_json("list_dir", json!({"path": data}));
    assert_eq!(listing, json!(["hello.txt"]));

    let new = data.join("new.txt");
    let r = c.call_tool("write_file", json!({"path": new, "content": "nope"}));
    assert!(
        is_tool_error(&r),
        "writing into a read grant succeeded: {r}"
    );
    assert!(!new.exists(), "a file appeared in a read-only grant");
    let r = c.call_tool(
        "write_file",
        json!({"path": file, "content": "overwritten"}),
    );
    assert!(
        is_tool_error(&r),
        "overwriting a read-only file succeeded: {r}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "read me");
    finish(c);
}

#[test]
fn write_grant_changes_land_on_the_host() {
    let env = TestEnv::new();
    let out = env.mkdir("out");
    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(
        &env.minimal_policy(),
        &["--write", out.to_str().unwrap()],
        &[],
    );
    c.initialize();
    let new = out.join("made-inside.txt");
    c.tool_text(
        "write_file",
        json!({"path": new, "content": "from the sandbox"}),
    );
    assert_eq!(std::fs::read_to_string(&new).unwrap(), "from the sandbox");
    // The user namespace maps only the caller's own uid: host files are owned by them.
    let me = nix::unistd::geteuid().as_raw();
    assert_eq!(std::fs::metadata(&new).unwrap().uid(), me);
    std::fs::write(out.join("from-host.txt"), "from the host").unwrap();
    assert_eq!(
        c.tool_text("read_file", json!({"path": out.join("from-host.txt")})),
        "from the host"
    );
    finish(c);
}

#[test]
fn environment_is_filtered_by_allow_env() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon_with_env(&[("E2E_DAEMON_ONLY", "daemon-value")]);
    let policy = env.policy("env.yaml", "version: 1\nenv:\n  allow: [E2E_FROM_POLICY]\n");
    let mut cmd = env.shim([
        "--policy",
        policy.to_str().unwrap(),
        "--allow-env",
        "E2E_ALLOWED",
        "--",
    ]);
    cmd.arg(fixture());
    cmd.env("E2E_SECRET", "must-not-leak")
        .env("E2E_ALLOWED", "allowed-value")
        .env("E2E_FROM_POLICY", "policy-value");
    let mut c = McpClient::spawn(cmd);
    c.initialize();
    let get = |c: &mut McpClient, name: &str| c.tool_json("getenv", json!({"name": name}));
    assert_eq!(
        get(&mut c, "E2E_SECRET"),
        json!(null),
        "a variable that is not allowed leaked"
    );
    assert_eq!(
        get(&mut c, "E2E_DAEMON_ONLY"),
        json!(null),
        "the daemon's environment leaked"
    );
    assert_eq!(get(&mut c, "E2E_ALLOWED"), json!("allowed-value"));
    assert_eq!(get(&mut c, "E2E_FROM_POLICY"), json!("policy-value"));
    for name in ["XDG_RUNTIME_DIR", "XDG_STATE_HOME"] {
        assert_eq!(get(&mut c, name), json!(null), "{name} leaked");
    }
    assert!(
        get(&mut c, "PATH").is_string(),
        "PATH should have a default"
    );
    finish(c);
}

#[test]
fn server_runs_in_its_own_pid_namespace_as_the_caller() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(&env.minimal_policy(), &[], &[]);
    c.initialize();
    let who = c.tool_json("whoami", json!({}));
    let pid = who["pid"].as_i64().unwrap();
    assert!(pid < 100, "pid {pid}: not in a fresh pid namespace");
    let me = nix::unistd::getuid().as_raw();
    assert_eq!(who["uid"], me, "only the caller's own uid is mapped");
    assert!(who["home"].is_string(), "HOME should have a default: {who}");
    finish(c);
}

#[test]
fn timeout_kills_the_whole_tree() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let policy = env.policy(
        "timeout.yaml",
        "version: 1\nname: e2e-timeout\nlimits:\n  timeout_s: 2\n",
    );
    let marker = unique_marker("timeout");
    let started = Instant::now();
    let mut c = env.fixture_session(&policy, &[], &["--ignore-sigterm", "--marker", &marker]);
    c.initialize();
    c.tool_json("spawn_child", json!({"ignore_term": true, "setsid": true}));
    c.tool_json("spawn_child", json!({"ignore_term": true, "setsid": false}));
    let before = pids_with_marker(&marker);
    assert!(
        before.len() >= 3,
        "expected the server and two children on the host, found {before:?}"
    );
    let code = c.wait_code(Duration::from_secs(20));
    let took = started.elapsed();
    assert_eq!(code, EXIT_TIMEOUT, "stderr:\n{}", c.stderr());
    assert!(
        took >= Duration::from_millis(1500),
        "timed out early: {took:?}"
    );
    let left = wait_no_marker(&marker, Duration::from_secs(3));
    let described: Vec<String> = left
        .iter()
        .map(|&p| format!("{p}: {}", cmdline_of(p)))
        .collect();
    assert!(
        left.is_empty(),
        "processes survived the timeout: {described:?}"
    );
}

#[test]
fn session_end_leaves_no_process_behind() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let marker = unique_marker("eof-tree");
    let mut c = env.fixture_session(&env.minimal_policy(), &[], &["--marker", &marker]);
    c.initialize();
    c.tool_json("spawn_child", json!({"ignore_term": true, "setsid": true}));
    assert!(pids_with_marker(&marker).len() >= 2);
    c.close_stdin();
    assert_eq!(c.wait_code(EXIT_WAIT), 0, "stderr:\n{}", c.stderr());
    let left = wait_no_marker(&marker, Duration::from_secs(5));
    let described: Vec<String> = left
        .iter()
        .map(|&p| format!("{p}: {}", cmdline_of(p)))
        .collect();
    assert!(
        left.is_empty(),
        "a daemonised child outlived its session: {described:?}"
    );
}
