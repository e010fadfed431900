//! `wardenctl doctor [--json]` (docs/doctor.md): the JSON's shape is a
//! contract, checked here against the real binaries: without a daemon (the
//! kernel then probed by `wardend --features`), with one, and with an audit
//! store whose chain no longer verifies (a failure, exit 1, with the fix).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;
use warden_e2e::*;

const STATUSES: [&str; 4] = ["ok", "warn", "fail", "skip"];
const AREAS: [&str; 6] = ["daemon", "kernel", "service", "audit", "host", "client"];

/// `wardenctl doctor --json ARGS`: the exit code and the report, whose
/// shape is checked (schema 1).
fn doctor(env: &TestEnv, args: &[&str]) -> (i32, Value) {
    let mut cmd = env.ctl(["--json", "doctor"].iter().chain(args));
    let out = run(&mut cmd, Duration::from_secs(60));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed invalid JSON ({e}):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let obj = report.as_object().expect("an object");
    let keys: HashSet<&str> = obj.keys().map(String::as_str).collect();
    assert_eq!(keys, HashSet::from(["schema", "ok", "checks"]), "{report}");
    assert_eq!(report["schema"], 1);
    let checks = report["checks"].as_array().expect("checks is an array");
    let mut ids = HashSet::new();
    for c in checks {
        let keys: HashSet<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            HashSet::from(["id", "area", "status", "summary", "fix"]),
            "{c}"
        );
        let id = c["id"].as_str().expect("id is a string");
        assert!(ids.insert(id.to_owned()), "duplicate id {id}");
        assert!(AREAS.contains(&c["area"].as_str().unwrap()), "{c}");
        let status = c["status"].as_str().unwrap();
        assert!(STATUSES.contains(&status), "{c}");
        assert!(!c["summary"].as_str().unwrap().is_empty(), "{c}");
        assert!(c["fix"].is_null() || c["fix"].is_string(), "{c}");
        // A problem always comes with its fix.
        if status == "fail" {
            assert!(c["fix"].is_string(), "a failure without a fix: {c}");
        }
    }
    let failed = checks.iter().any(|c| c["status"] == "fail");
    assert_eq!(report["ok"], !failed, "{report}");
    let code = out.status.code().expect("an exit code");
    assert_eq!(code, if failed { 1 } else { 0 }, "{report}");
    (code, report)
}

fn find<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id}: {report}"))
}

#[test]
fn doctor_reports_the_machine_with_and_without_a_daemon() {
    let env = TestEnv::new();
    // No daemon: a warning (the shim would start one), and the kernel is
    // still probed.
    let (_, r) = doctor(&env, &[]);
    let d = find(&r, "daemon.socket");
    assert_eq!(d["status"], "warn", "{d}");
    assert!(
        d["fix"].as_str().unwrap().contains("wardenctl install"),
        "{d}"
    );
    let userns = find(&r, "kernel.user_namespaces");
    assert_eq!(userns["status"], "ok", "{userns}");
    assert!(find(&r, "kernel.landlock")["summary"]
        .as_str()
        .unwrap()
        .contains("needed for"));
    assert_eq!(find(&r, "audit.store")["status"], "skip");

    // A daemon, and a session's records in its store.
    let _daemon = env.start_daemon();
    let mut cmd = env.shim([
        "--policy",
        env.minimal_policy().to_str().unwrap(),
        "--",
        "/bin/true",
    ]);
    let out = run(&mut cmd, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, r) = doctor(&env, &[]);
    assert_eq!(code, 0, "{r}");
    let d = find(&r, "daemon.socket");
    assert_eq!(d["status"], "ok", "{d}");
    assert!(d["summary"].as_str().unwrap().contains("answers on"), "{d}");
    let a = find(&r, "audit.store");
    assert_eq!(a["status"], "ok", "{a}");
    assert!(
        a["summary"]
            .as_str()
            .unwrap()
            .contains("the hash chain holds"),
        "{a}"
    );
    let (_, r) = doctor(&env, &["--no-verify"]);
    assert_eq!(find(&r, "audit.store")["status"], "skip");

    // The human form: one line per check, the fixes, a last line.
    let out = run(&mut env.ctl(["doctor"]), Duration::from_secs(60));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("ok") && l.contains("daemon.socket")),
        "{text}"
    );
    assert!(
        text.trim_end()
            .lines()
            .last()
            .is_some_and(|l| !l.is_empty()),
        "{text}"
    );
}

#[test]
fn a_broken_audit_chain_fails_with_its_fix() {
    let env = TestEnv::new();
    // The daemon stays up: doctor finds its store through it.
    let _daemon = env.start_daemon();
    let mut cmd = env.shim([
        "--policy",
        env.minimal_policy().to_str().unwrap(),
        "--",
        "/bin/true",
    ]);
    assert!(run(&mut cmd, Duration::from_secs(30)).status.success());
    // Rewrite one record's decision: the chain no longer verifies.
    let audit = env.state.join("audit");
    let live = std::fs::read_dir(&audit)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .expect("an audit file");
    let text = std::fs::read_to_string(&live).unwrap();
    let first = text.lines().next().unwrap();
    let forged = first.replacen("\"decision\":\"", "\"decision\":\"x", 1);
    assert_ne!(first, forged);
    std::fs::write(&live, text.replacen(first, &forged, 1)).unwrap();
    let (code, r) = doctor(&env, &[]);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["ok"], false);
    let a = find(&r, "audit.store");
    assert_eq!(a["status"], "fail", "{a}");
    assert!(
        a["fix"]
            .as_str()
            .unwrap()
            .contains("wardenctl logs --verify"),
        "{a}"
    );
}

#[test]
fn doctor_reports_the_user_service_and_the_apparmor_restriction() {
    let env = TestEnv::new();
    let unit = env.config.join("systemd/user/wardend.socket");
    let (_, r) = doctor(&env, &[]);
    let u = find(&r, "service.unit");
    let summary = u["summary"].as_str().unwrap();
    // Without a user manager (CI): a skip that explains the autostart;
    // with one: a warning whose fix is `wardenctl install`.
    match u["status"].as_str().unwrap() {
        "skip" => {
            assert!(summary.contains("no user service manager"), "{u}");
            assert!(summary.contains("autostart"), "{u}");
            assert!(!summary.contains("is installed"), "{u}");
        }
        "warn" => {
            assert!(summary.contains("not installed"), "{u}");
            assert_eq!(u["fix"], "wardenctl install", "{u}");
        }
        other => panic!("service.unit {other} before install: {u}"),
    }

    // After `wardenctl install` the check names the unit it wrote.
    let out = run(&mut env.ctl(["install"]), Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(unit.is_file(), "install wrote no {}", unit.display());
    let (_, r) = doctor(&env, &[]);
    let u = find(&r, "service.unit");
    assert!(
        u["summary"]
            .as_str()
            .unwrap()
            .contains(&unit.display().to_string()),
        "{u}"
    );
    assert_ne!(u["status"], "fail", "{u}");

    // The user-namespace restriction is tried with the wardend beside
    // wardenctl; where AppArmor blocks it, the fix loads the profile.
    let a = find(&r, "service.apparmor_userns");
    let summary = a["summary"].as_str().unwrap();
    assert!(summary.contains("wardend"), "{a}");
    match a["status"].as_str().unwrap() {
        "ok" => assert!(a["fix"].is_null(), "{a}"),
        "fail" | "warn" if !a["fix"].is_null() => {
            assert!(
                a["fix"].as_str().unwrap().contains("apparmor_parser -r"),
                "{a}"
            )
        }
        _ => assert!(summary.contains("user_namespaces"), "{a}"),
    }
}
