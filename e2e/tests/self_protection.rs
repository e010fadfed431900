//! What a policy may not grant, checked by the real daemon with its real
//! paths (F2, F3), and the refusal of write grants when a protection they
//! rely on is missing (F7). Every refusal is paired with a control that
//! shows the legitimate case works.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use warden_e2e::*;

fn records_of<'a>(records: &'a [Value], ty: &str, action: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| r["type"] == ty && r["action"] == action)
        .collect()
}

/// `warden-shim --policy P [flags] -- fixture`, run to completion with stdin closed.
fn shim_run(env: &TestEnv, policy: &Path, flags: &[&str]) -> (i32, String) {
    let mut args: Vec<OsString> = vec!["--policy".into(), policy.into()];
    args.extend(flags.iter().map(OsString::from));
    args.push("--".into());
    args.push(fixture().into());
    let out = run(&mut env.shim(args), Duration::from_secs(60));
    (
        exit_code(out.status),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The shim compiles with the state directory its environment implies
/// (`$XDG_STATE_HOME/warden`); the daemon runs with `--state-dir state/`, so
/// only the daemon knows `state/audit` is its audit store. It must refuse the
/// grant with its own paths.
#[test]
fn the_daemon_refuses_grants_of_its_real_state_dir() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let audit_dir = env.state.join("audit");
    // The daemon answers on its socket a moment before its store exists.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !audit_dir.is_dir() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(audit_dir.is_dir(), "the daemon made its store");
    let (code, stderr) = shim_run(
        &env,
        &env.minimal_policy(),
        &["--read", audit_dir.to_str().unwrap()],
    );
    assert_eq!(code, EXIT_WARDEN_ERROR, "{stderr}");
    let lines = warden_lines(&stderr);
    assert_eq!(
        lines,
        vec![format!(
            "warden: --read: {} lies inside {} (Warden's state directory (the audit store)); granting it, even read-only, hands the server what it holds (a Unix socket in a grant hands over its service: connect works on a read-only mount); grant a narrower path, or list `{}` in filesystem.dangerously_expose to grant it anyway",
            audit_dir.display(),
            env.state.display(),
            audit_dir.display()
        )],
        "{stderr}"
    );
    let records = audit_records(&env);
    let refused = records_of(&records, "session", "refused");
    assert_eq!(refused.len(), 1, "{records:#?}");
    assert!(
        refused[0]["reason"]
            .as_str()
            .unwrap()
            .contains("Warden's state directory"),
        "{}",
        refused[0]
    );
    assert!(records_of(&records, "session", "start").is_empty());

    // Control: a directory next to it is granted.
    let data = env.mkdir("data");
    let (code, stderr) = shim_run(
        &env,
        &env.minimal_policy(),
        &["--read", data.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        records_of(&audit_records(&env), "session", "start").len(),
        1
    );
}

/// The daemon's socket directory and the runtime directory around it.
#[test]
fn grants_of_the_socket_dir_and_runtime_dir_are_refused() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let socket_dir = env.socket.parent().unwrap();
    for grant in [socket_dir, env.runtime.as_path()] {
        let (code, stderr) = shim_run(
            &env,
            &env.minimal_policy(),
            &["--read", grant.to_str().unwrap()],
        );
        assert_eq!(code, EXIT_WARDEN_ERROR, "{stderr}");
        let lines = warden_lines(&stderr);
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(
            lines[0].starts_with(&format!("warden: --read: {} is ", grant.display())),
            "{stderr}"
        );
        assert!(
            lines[0].contains(&format!("`{}`", socket_dir.display())),
            "names the socket dir to list: {stderr}"
        );
    }
}

#[test]
fn a_home_write_grant_needs_the_opt_in_and_warns() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let (code, stderr) = shim_run(
        &env,
        &env.minimal_policy(),
        &["--write", env.home.to_str().unwrap()],
    );
    assert_eq!(code, EXIT_WARDEN_ERROR, "{stderr}");
    assert_eq!(
        warden_lines(&stderr),
        vec![format!("warden: --write: {} is your home directory: a server that can write there can change what your shell, git, editors and Warden itself run next; grant only the directories the server needs, or set filesystem.allow_home_write: true", env.home.display())],
        "{stderr}"
    );

    // With the opt-in: it runs, and the warning is on the shim's stderr, in
    // `policy check` and in session.start.
    let policy = env.policy(
        "home.yaml",
        &format!(
            "version: 1\nfilesystem:\n  write: [\"~\"]\n  allow_home_write: true\ncommand: [{:?}]\n",
            fixture()
        ),
    );
    let warning = format!(
        "{}:3:11: filesystem.write[0]: write grant {} is your home directory: the server can change what your shell, git, editors and Warden itself run next (filesystem.allow_home_write: true)",
        policy.display(),
        env.home.display()
    );
    let (code, stderr) = shim_run(&env, &policy, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        warden_lines(&stderr),
        vec![format!("warden: warning: {warning}")],
        "{stderr}"
    );
    let records = audit_records(&env);
    let start = records_of(&records, "session", "start");
    assert_eq!(start.len(), 1, "{records:#?}");
    assert_eq!(start[0]["details"]["warnings"], json!([warning]));

    let mut cmd = env.ctl(["policy", "check", policy.to_str().unwrap()]);
    let out = run(&mut cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("warning: {warning}\n")
    );
}

#[test]
fn a_policy_inside_its_own_write_grant_is_refused() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let proj = env.mkdir("proj");
    let policy = env.write("proj/policy.yaml", "filesystem:\n  write: [\".\"]\n");
    let (code, stderr) = shim_run(&env, &policy, &[]);
    assert_eq!(code, EXIT_WARDEN_ERROR, "{stderr}");
    assert_eq!(
        warden_lines(&stderr),
        vec![format!("warden: {}:2:11: filesystem.write[0]: the policy file {} lies inside this write grant ({}): the server could rewrite its own policy for its next session; keep the policy outside the directories it grants for writing", policy.display(), policy.display(), proj.display())],
    );
    // Control: the same grant from a policy kept elsewhere.
    let outside = env.policy("outside.yaml", "version: 1\n");
    let (code, stderr) = shim_run(&env, &outside, &["--write", proj.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn loader_variables_cannot_be_passed_through() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let (code, stderr) = shim_run(&env, &env.minimal_policy(), &["--allow-env", "LD_PRELOAD"]);
    assert_eq!(code, EXIT_WARDEN_ERROR, "{stderr}");
    assert_eq!(
        warden_lines(&stderr),
        vec!["warden: --allow-env: `LD_PRELOAD` cannot be passed through: LD_* variables steer the dynamic loader (which libraries every program in the sandbox loads, and from where)"],
    );
    // Control: an ordinary name passes.
    let (code, stderr) = shim_run(&env, &env.minimal_policy(), &["--allow-env", "LANGUAGE"]);
    assert_eq!(code, 0, "{stderr}");
}

/// F7: with the creation guard treated as missing, write grants are refused
/// (naming what is missing and why) unless the policy opts into the weaker
/// mode; a policy without write grants is unaffected; and a daemon on the
/// real kernel runs the same policy with full protection.
#[test]
fn write_grants_are_refused_when_the_creation_guard_is_missing() {
    let env = TestEnv::new();
    let out = env.mkdir("out");
    let out_s = out.to_str().unwrap();
    let mut daemon = env.start_daemon_with_env(&[("WARDEN_TEST_PRETEND_MISSING", "create_guard")]);
    let (code, stderr) = shim_run(&env, &env.minimal_policy(), &["--write", out_s]);
    assert_eq!(code, EXIT_WARDEN_ERROR, "{stderr}");
    let lines = warden_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert_eq!(
        lines[0],
        "warden: this policy has write grants, but protections they rely on are missing on this kernel: the creation guard (which keeps protected names such as .git, .bashrc and .mcp.json from being created in a write grant): treated as unavailable (WARDEN_TEST_PRETEND_MISSING); without them a server can create the names the host runs or trusts (.git, .bashrc, .mcp.json...) where they are missing; set sandbox.best_effort_write_protection: true to run anyway with weaker protection (recorded in session.start), or use a kernel that has them"
    );
    let records = audit_records(&env);
    assert_eq!(records_of(&records, "session", "refused").len(), 1);
    assert!(records_of(&records, "session", "start").is_empty());

    // `wardenctl status` says so.
    let status = env.ctl_json(&["status"]);
    let feature = status["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "write_protection")
        .cloned()
        .unwrap_or_else(|| panic!("no write_protection in {status}"));
    assert_eq!(feature["available"], false, "{feature}");

    // Control 1: no write grant, no refusal.
    let (code, stderr) = shim_run(&env, &env.minimal_policy(), &[]);
    assert_eq!(code, 0, "{stderr}");

    // Control 2: the opt-in by name runs, and the record says it is best effort.
    let policy = env.policy(
        "best-effort.yaml",
        "version: 1\nsandbox:\n  best_effort_write_protection: true\n",
    );
    let mut c = env.fixture_session(&policy, &["--write", out_s], &[]);
    c.initialize();
    c.tool_text(
        "write_file",
        json!({"path": out.join("x.txt"), "content": "x"}),
    );
    c.close_stdin();
    assert_eq!(c.wait_code(Duration::from_secs(15)), 0, "{}", c.stderr());
    assert_eq!(std::fs::read_to_string(out.join("x.txt")).unwrap(), "x");
    let records = audit_records(&env);
    let starts = records_of(&records, "session", "start");
    let wp = &starts.last().unwrap()["details"]["sandbox"]["write_protection"];
    assert_eq!(wp["mode"], "best effort", "{wp}");
    assert_eq!(wp["missing"].as_array().unwrap().len(), 1, "{wp}");
    assert_eq!(
        starts.last().unwrap()["details"]["sandbox"]["best_effort_write_protection"],
        true
    );
    // The setting only refuses more: the sandbox still gets the guard the
    // kernel has, and the record says what it got.
    let guard = status["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "create_guard")
        .map(|f| f["available"].clone())
        .unwrap();
    assert_eq!(
        starts.last().unwrap()["details"]["sandbox"]["create_guard"],
        guard
    );
    daemon.stop(Duration::from_secs(10));

    // Control 3: the real kernel has the guard: the same write grant runs
    // without the opt-in, with full protection on record.
    let _daemon = env.start_daemon();
    let (code, stderr) = shim_run(&env, &env.minimal_policy(), &["--write", out_s]);
    assert_eq!(code, 0, "{stderr}");
    let records = audit_records(&env);
    let starts = records_of(&records, "session", "start");
    let wp = &starts.last().unwrap()["details"]["sandbox"]["write_protection"];
    assert_eq!(wp["mode"], "full", "{wp}");
    assert_eq!(wp["missing"], json!([]), "{wp}");
    let status = env.ctl_json(&["status"]);
    assert!(
        status["features"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"] == "write_protection" && f["available"] == true),
        "{status}"
    );
}
