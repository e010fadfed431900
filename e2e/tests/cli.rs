//! `wardenctl`, daemon autostart and Warden's own errors (exit 125 with one `warden:`
//! line on stderr, DESIGN.md §4; policy errors name file:line:col, §10).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use warden_e2e::*;

const EXIT_WAIT: Duration = Duration::from_secs(15);

fn finish(mut c: McpClient) {
    c.close_stdin();
    assert_eq!(c.wait_code(EXIT_WAIT), 0, "stderr:\n{}", c.stderr());
}

fn session_named<'a>(sessions: &'a [Value], name: &str) -> Option<&'a Value> {
    sessions.iter().find(|s| s["name"] == name)
}

fn session_id(session: &Value) -> String {
    session["id"]
        .as_str()
        .or_else(|| session["session_id"].as_str())
        .unwrap_or_else(|| panic!("session without an id: {session}"))
        .to_string()
}

#[test]
fn ps_lists_two_concurrent_sessions() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let policy = env.minimal_policy();
    let mut a = env.fixture_session(&policy, &["--name", "e2e-first"], &[]);
    let mut b = env.fixture_session(&policy, &["--name", "e2e-second"], &[]);
    a.initialize();
    b.initialize();
    let sessions = env.sessions();
    let first = session_named(&sessions, "e2e-first")
        .unwrap_or_else(|| panic!("e2e-first missing: {sessions:?}"));
    let second = session_named(&sessions, "e2e-second")
        .unwrap_or_else(|| panic!("e2e-second missing: {sessions:?}"));
    assert_ne!(session_id(first), session_id(second));
    // Both still work after being listed.
    assert_eq!(a.tool_text("echo", json!({"text": "a"})), "a");
    assert_eq!(b.tool_text("echo", json!({"text": "b"})), "b");
    finish(a);
    finish(b);
}

#[test]
fn kill_ends_a_session() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let marker = unique_marker("ctl-kill");
    let mut c = env.fixture_session(
        &env.minimal_policy(),
        &["--name", "e2e-victim"],
        &["--ignore-sigterm", "--marker", &marker],
    );
    c.initialize();
    let sessions = env.sessions();
    let id = session_id(
        session_named(&sessions, "e2e-victim")
            .unwrap_or_else(|| panic!("not listed: {sessions:?}")),
    );
    let out = run(&mut env.ctl(["kill", id.as_str()]), Duration::from_secs(30));
    assert!(
        out.status.success(),
        "wardenctl kill failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let code = c.wait_code(EXIT_WAIT);
    assert!(
        code == 128 + 15 || code == EXIT_KILLED,
        "shim exited {code}; stderr:\n{}",
        c.stderr()
    );
    assert!(wait_no_marker(&marker, Duration::from_secs(3)).is_empty());
    let sessions = env.sessions();
    assert!(
        session_named(&sessions, "e2e-victim").is_none(),
        "still listed: {sessions:?}"
    );
}

#[test]
fn status_reports_the_daemon() {
    let env = TestEnv::new();
    let daemon = env.start_daemon();
    let status = env.ctl_json(&["status"]);
    assert!(status.is_object(), "{status}");
    let text = status.to_string();
    assert!(
        text.contains(&daemon.pid().to_string()),
        "status does not mention the daemon pid: {text}"
    );
    // Every kernel feature Warden relies on is reported, with what it means.
    let names: Vec<&str> = status["features"]
        .as_array()
        .unwrap_or_else(|| panic!("no features: {status}"))
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    for want in [
        "user_namespaces",
        "landlock",
        "seccomp",
        "seccomp_user_notif",
        "file_audit",
        "create_guard",
        "cgroup_v2_delegation",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    // The creation guard is reported available exactly when the kernel has
    // user notification, Landlock (the status's own finding) and 5.14+.
    let feature = |n: &str| {
        status["features"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == n)
            .unwrap()
            .clone()
    };
    // The host's git setting is advised on (with this env's HOME: unset).
    let host = &status["host"];
    assert_eq!(host[0]["name"], "git_safe_bare_repository", "{status}");
    assert_eq!(host[0]["available"], false, "{status}");
    assert!(
        host[0]["detail"]
            .as_str()
            .unwrap()
            .contains("git config --global safe.bareRepository explicit"),
        "{status}"
    );
    std::fs::write(
        env.home.join(".gitconfig"),
        "[safe]\n\tbareRepository = explicit\n",
    )
    .unwrap();
    let status2 = env.ctl_json(&["status"]);
    assert_eq!(status2["host"][0]["available"], true, "{status2}");
    let guard = feature("create_guard");
    let landlock = feature("landlock")["available"].as_bool() == Some(true);
    assert_eq!(
        guard["available"].as_bool(),
        Some(guard_expected(landlock)),
        "{guard}"
    );
}

/// `session.start` records what the daemon's one probe of the kernel (the
/// one `wardenctl status` shows) gives the sandbox: its Landlock ABI, whether
/// refused calls are reported, the file audit level in use, the creation
/// guard, the write protection. Not a second look at the kernel.
#[test]
fn session_start_records_what_the_probe_found() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let status = env.ctl_json(&["status"]);
    let feature = |n: &str| {
        let f = status["features"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == n)
            .unwrap_or_else(|| panic!("no {n} in {status}"))
            .clone();
        (
            f["available"].as_bool().unwrap(),
            f["detail"].as_str().unwrap().to_owned(),
        )
    };
    let (notify, _) = feature("seccomp_user_notif");
    let (files, _) = feature("file_audit");
    let (guard, _) = feature("create_guard");
    let (full, _) = feature("write_protection");
    let abi = match feature("landlock") {
        (true, d) => {
            let n = d.strip_prefix("ABI ").and_then(|r| r.split(':').next());
            json!(n
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{d}")))
        }
        (false, _) => Value::Null,
    };
    let work = env.mkdir("work");
    let policy = env.policy(
        "probed.yaml",
        &format!(
            "version: 1\nname: e2e-probed\nfilesystem:\n  write: [\"{}\"]\n{}{}",
            work.display(),
            if files { "audit:\n  files: all\n" } else { "" },
            if full {
                ""
            } else {
                "sandbox:\n  best_effort_write_protection: true\n"
            },
        ),
    );
    let mut c = env.fixture_session(&policy, &[], &[]);
    c.initialize();
    finish(c);
    let start = audit_records(&env)
        .into_iter()
        .find(|r| r["type"] == "session" && r["action"] == "start")
        .expect("a session.start");
    let sandbox = &start["details"]["sandbox"];
    assert_eq!(sandbox["landlock_abi"], abi, "{sandbox}");
    assert_eq!(
        sandbox["syscall_audit"],
        if notify {
            "seccomp user notification"
        } else {
            "unavailable"
        },
        "{sandbox}"
    );
    assert_eq!(
        sandbox["file_audit"],
        if files { "all" } else { "unavailable" },
        "{sandbox}"
    );
    assert_eq!(sandbox["create_guard"], guard, "{sandbox}");
    assert_eq!(
        sandbox["write_protection"]["mode"],
        if full { "full" } else { "best effort" },
        "{sandbox}"
    );
}

/// What the creation guard needs: user notification and Linux 5.14 read
/// here from `/proc`, Landlock as given.
fn guard_expected(landlock: bool) -> bool {
    let notify = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
        .is_ok_and(|s| s.split_whitespace().any(|a| a == "user_notif"));
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = release.trim().split(|c: char| !c.is_ascii_digit());
    let major: u32 = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let minor: u32 = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    notify && landlock && (major, minor) >= (5, 14)
}

fn autostart_session(env: &TestEnv, cmd: std::process::Command) {
    let mut c = McpClient::spawn(cmd);
    c.initialize();
    assert_eq!(
        c.tool_text("echo", json!({"text": "autostarted"})),
        "autostarted"
    );
    finish(c);
    // The autostarted daemon keeps running for the next session and answers wardenctl.
    let out = run(&mut env.ctl(["status"]), Duration::from_secs(30));
    assert!(
        out.status.success(),
        "wardenctl status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut again = env.fixture_session(&env.minimal_policy(), &[], &[]);
    again.initialize();
    finish(again);
    // TestEnv's Drop stops the autostarted daemon.
}

/// The real-world case: the client config names no socket; the shim starts `wardend`
/// from next to its own executable on the default socket, whose directory
/// (`$XDG_RUNTIME_DIR/warden/`) does not exist yet.
#[test]
fn shim_autostarts_the_daemon_on_the_default_socket() {
    let env = TestEnv::new();
    assert!(!env.socket.exists());
    let policy = env.minimal_policy();
    let mut cmd = env.shim_default_socket(["--policy", policy.to_str().unwrap(), "--"]);
    cmd.arg(fixture());
    autostart_session(&env, cmd);
}

#[test]
fn shim_autostarts_the_daemon_on_an_explicit_socket() {
    let env = TestEnv::new();
    // An explicit socket's directory must be private (F16; the refusal is
    // tested in daemon.rs).
    let dir = env.socket.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let policy = env.minimal_policy();
    let mut cmd = env.shim(["--policy", policy.to_str().unwrap(), "--"]);
    cmd.arg(fixture());
    autostart_session(&env, cmd);
}

#[test]
fn no_autostart_without_daemon_is_125() {
    let env = TestEnv::new();
    let marker = unique_marker("no-autostart");
    let policy = env.minimal_policy();
    let mut cmd = env.shim(["--no-autostart", "--policy", policy.to_str().unwrap(), "--"]);
    cmd.arg(fixture()).args(["--marker", &marker]);
    let out = run(&mut cmd, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        exit_code(out.status),
        EXIT_WARDEN_ERROR,
        "stderr:\n{stderr}"
    );
    assert_eq!(
        warden_lines(&stderr).len(),
        1,
        "want one warden: line, stderr:\n{stderr}"
    );
    assert!(out.stdout.is_empty(), "the shim wrote to stdout");
    assert!(pids_with_marker(&marker).is_empty());
    assert!(
        !env.socket.exists(),
        "a daemon was started despite --no-autostart"
    );
}

/// Runs the shim on a bad policy and checks the Warden-error contract; returns stderr.
fn expect_policy_error(
    env: &TestEnv,
    policy: &Path,
    marker: &str,
    with_command: bool,
    line: Option<u32>,
) -> String {
    let mut cmd = env.shim(["--policy", policy.to_str().unwrap()]);
    if with_command {
        cmd.arg("--").arg(fixture()).args(["--marker", marker]);
    }
    let out = run(&mut cmd, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        exit_code(out.status),
        EXIT_WARDEN_ERROR,
        "{}: stderr:\n{stderr}",
        policy.display()
    );
    let lines = warden_lines(&stderr);
    assert_eq!(lines.len(), 1, "want one warden: line, stderr:\n{stderr}");
    let location = format!("{}:", policy.display());
    let at = lines[0]
        .find(&location)
        .unwrap_or_else(|| panic!("the error does not name {location}: {}", lines[0]));
    let rest = &lines[0][at + location.len()..];
    let mut parts = rest.splitn(3, ':');
    let got_line: u32 = parts
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no line in: {}", lines[0]));
    let col_ok = parts
        .next()
        .is_some_and(|c| !c.is_empty() && c.chars().all(|ch| ch.is_ascii_digit()));
    assert!(col_ok, "no column in: {}", lines[0]);
    if let Some(line) = line {
        assert_eq!(got_line, line, "wrong line in: {}", lines[0]);
    }
    assert!(out.stdout.is_empty(), "the shim wrote to stdout");
    let left = wait_no_marker(marker, Duration::from_secs(2));
    assert!(left.is_empty(), "processes left behind: {left:?}");
    stderr
}

#[test]
fn bad_policies_are_125_with_file_line_col() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let marker = unique_marker("bad-policy");

    let malformed = env.policy(
        &format!("malformed-{marker}.yaml"),
        "version: 1\nname: [unclosed\n",
    );
    expect_policy_error(&env, &malformed, &marker, true, None);

    let unknown = env.policy(
        &format!("unknown-{marker}.yaml"),
        "version: 1\nname: bad\nlimitz:\n  timeout_s: 5\n",
    );
    let stderr = expect_policy_error(&env, &unknown, &marker, true, Some(3));
    assert!(
        stderr.contains("limitz"),
        "the error does not name the key: {stderr}"
    );

    let missing = env.root.join(format!("does-not-exist-{marker}"));
    let grant = env.policy(
        &format!("grant-{marker}.yaml"),
        &format!(
            "version: 1\nfilesystem:\n  read: [\"{}\"]\n",
            missing.display()
        ),
    );
    expect_policy_error(&env, &grant, &marker, true, Some(3));

    let command = env.policy(
        &format!("command-{marker}.yaml"),
        &format!("version: 1\ncommand: [\"warden-e2e-no-such-command-{marker}\"]\n"),
    );
    expect_policy_error(&env, &command, &marker, false, Some(2));
}

#[test]
fn bad_flag_grant_is_125() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let marker = unique_marker("bad-flag");
    let missing = env.root.join(format!("missing-{marker}"));
    let mut cmd = env.shim([
        "--policy",
        env.minimal_policy().to_str().unwrap(),
        "--read",
        missing.to_str().unwrap(),
        "--",
    ]);
    cmd.arg(fixture()).args(["--marker", &marker]);
    let out = run(&mut cmd, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        exit_code(out.status),
        EXIT_WARDEN_ERROR,
        "stderr:\n{stderr}"
    );
    let lines = warden_lines(&stderr);
    assert_eq!(lines.len(), 1, "stderr:\n{stderr}");
    assert!(
        lines[0].contains(&format!("missing-{marker}")),
        "does not name the path: {}",
        lines[0]
    );
    assert!(wait_no_marker(&marker, Duration::from_secs(2)).is_empty());
}

#[test]
fn policy_check_good_and_bad() {
    let env = TestEnv::new();
    let data = env.mkdir("data");
    let good = env.policy(
        "good.yaml",
        &format!(
            "version: 1\nname: checked\ncommand: [\"{}\"]\nfilesystem:\n  read: [\"{}\"]\nlimits:\n  timeout_s: 30\n",
            fixture().display(),
            data.display()
        ),
    );
    let out = run(
        &mut env.ctl(["policy", "check", good.to_str().unwrap()]),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "good policy rejected: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.stdout.is_empty(),
        "policy check prints the compiled policy"
    );
    let compiled = env.ctl_json(&["policy", "check", good.to_str().unwrap()]);
    assert!(compiled.to_string().contains("checked"), "{compiled}");

    let bad = env.policy(
        "bad.yaml",
        "version: 1\nname: bad\nlimitz:\n  timeout_s: 5\n",
    );
    let out = run(
        &mut env.ctl(["policy", "check", bad.to_str().unwrap()]),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "bad policy accepted");
    assert!(
        stderr.contains(&format!("{}:3:", bad.display())),
        "stderr:\n{stderr}"
    );
    assert!(stderr.contains("limitz"), "stderr:\n{stderr}");
}

#[test]
fn ps_shows_live_memory_cpu_and_stdio() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let policy = env.policy(
        "live.yaml",
        &format!(
            "command: [\"{}\"]\nlimits:\n  memory_mb: 512\n",
            warden_e2e::fixture().display()
        ),
    );
    // A hostile argument (newline, ANSI escape) ends up in the COMMAND column.
    let mut c = env.fixture_session(
        &policy,
        &["--name", "e2e-live"],
        &["--marker", "m\n\x1b[31mforged"],
    );
    c.initialize();
    let row = |env: &TestEnv| {
        let sessions = env.sessions();
        sessions
            .into_iter()
            .find(|s| {
                s["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("e2e-live"))
            })
            .unwrap_or_else(|| panic!("session not listed"))
    };
    let before = row(&env);
    assert_eq!(
        before["memory_limit_bytes"],
        json!(512u64 << 20),
        "{before}"
    );
    // 64 MiB allocated and touched by the server shows in its memory; the
    // request and the answer show on stdio.
    c.tool_text("alloc", json!({"mb": 64}));
    let big = "x".repeat(100_000);
    assert_eq!(c.tool_text("echo", json!({"text": big})).len(), 100_000);
    let after = row(&env);
    let mem = after["memory_bytes"].as_u64().unwrap();
    assert!(
        mem >= 64 << 20,
        "memory_bytes {mem} after a 64 MiB allocation: {after}"
    );
    assert!(mem < 512 << 20, "{after}");
    let (stdin, stdout) = (
        after["stdin_bytes"].as_u64().unwrap(),
        after["stdout_bytes"].as_u64().unwrap(),
    );
    assert!(stdin > 100_000 && stdout > 100_000, "{after}");
    assert!(
        stdin > before["stdin_bytes"].as_u64().unwrap()
            && stdout > before["stdout_bytes"].as_u64().unwrap(),
        "{before} -> {after}"
    );
    assert!(after["cpu_ms"].as_u64().is_some(), "{after}");
    assert_eq!(after["network_allowed"], json!(0));
    assert_eq!(after["network_denied"], json!(0));
    assert_eq!(after["last_denial"], Value::Null);
    // The table: live columns, and the hostile argument cannot break a line or
    // reach the terminal as an escape sequence.
    let out = run(&mut env.ctl(["ps"]), Duration::from_secs(10));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let header = text.lines().next().unwrap_or_default();
    for col in ["CPU", "MEM", "STDIO", "NET", "LAST DENIAL"] {
        assert!(header.contains(col), "{text}");
    }
    assert!(!text.contains('\x1b'), "{text:?}");
    assert_eq!(text.lines().count(), 2, "{text:?}");
    assert!(text.contains("/512.0M"), "{text}");
    finish(c);
}
