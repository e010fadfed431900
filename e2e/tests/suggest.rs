//! `wardenctl suggest SESSION [--apply]` (docs/init.md, tracker issue 12),
//! end to end: a real session is denied two files and a host; the suggested
//! diff, applied, lets a new session through and grants nothing else.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use warden_e2e::net::*;
use warden_e2e::*;

/// The shared setup ([`NetWorld`]) and this file's steps.
struct World(NetWorld);

impl std::ops::Deref for World {
    type Target = NetWorld;
    fn deref(&self) -> &NetWorld {
        &self.0
    }
}

impl World {
    fn new() -> Option<World> {
        NetWorld::new().map(World)
    }

    /// Runs `script` with /bin/sh in a session of `policy`; returns its output.
    fn session(&self, policy: &Path, script: &str) -> Output {
        let mut cmd = self.env.shim([
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            script,
        ]);
        run(&mut cmd, Duration::from_secs(90))
    }

    /// The id of the last session started.
    fn last_session(&self) -> String {
        audit_records(&self.env)
            .into_iter()
            .rev()
            .find(|r| r["type"] == "session" && r["action"] == "start")
            .and_then(|r| r["session"].as_str().map(str::to_owned))
            .expect("a session.start record")
    }

    fn ctl(&self, args: &[&str]) -> Output {
        run(&mut self.env.ctl(args), Duration::from_secs(30))
    }

    fn curl(&self, url: &str) -> String {
        format!(
            "{} -s -o /dev/null -w '%{{http_code}}\\n' --max-time 30 {url}",
            self.clients.curl.display()
        )
    }
}

const POLICY: &str = "\
# A hand-written policy: every comment and blank line here must survive.
version: 1
name: suggest-test
command: [\"/bin/true\"]

filesystem:
  # what the server may read
  read:
    - \"GRANTED\" # its own data
network:
  allow: [\"allowed.test:PORT private\"]  # the one API it needs
";

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn the_suggested_diff_applied_lets_a_new_session_through_and_grants_nothing_else() {
    let Some(w) = World::new() else { return };
    let granted = w.env.mkdir("data/granted");
    std::fs::write(granted.join("own.txt"), "own\n").unwrap();
    let hidden = w.env.mkdir("data/elsewhere");
    for n in ["a.txt", "b.txt", "c.txt"] {
        std::fs::write(hidden.join(n), format!("{n}\n")).unwrap();
    }
    let port = w.up.http.port();
    let policy: PathBuf = w.env.policy(
        "suggest.yaml",
        &POLICY
            .replace("GRANTED", granted.to_str().unwrap())
            .replace("PORT", &port.to_string()),
    );
    let before = std::fs::read_to_string(&policy).unwrap();
    let target = format!("127.0.0.2:{port}");
    let (a, b, c) = (
        hidden.join("a.txt"),
        hidden.join("b.txt"),
        hidden.join("c.txt"),
    );
    let script = format!(
        "cat {} {}; {}; cat {}",
        a.display(),
        b.display(),
        w.curl(&format!("http://{target}/hello")),
        granted.join("own.txt").display()
    );
    let out = w.session(&policy, &script);
    let (stdout, _) = text(&out);
    assert_eq!(stdout, "403\nown\n", "denied first: {out:?}");
    let id = w.last_session();

    // The diff: exactly the two files and the host, each commented.
    let out = w.ctl(&["suggest", &id]);
    let (diff, err) = text(&out);
    assert!(out.status.success(), "{diff}\n{err}");
    let added: Vec<&str> = diff
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .collect();
    assert!(
        added.iter().any(|l| l.contains(a.to_str().unwrap())),
        "{diff}"
    );
    assert!(
        added.iter().any(|l| l.contains(b.to_str().unwrap())),
        "{diff}"
    );
    assert!(added.iter().any(|l| l.contains(&target)), "{diff}");
    assert!(
        !diff.contains("c.txt"),
        "never denied, never suggested: {diff}"
    );
    // Only additions, but for the flow list `[...]`, which gets its item
    // inside the brackets: that line keeps its items and its comment.
    let removed: Vec<&str> = diff
        .lines()
        .filter(|l| l.starts_with('-') && !l.starts_with("---"))
        .collect();
    assert_eq!(removed.len(), 1, "{diff}");
    let flow = added
        .iter()
        .find(|l| l.contains("allow: ["))
        .unwrap_or_else(|| panic!("{diff}"));
    assert!(
        flow.contains(&format!("\"allowed.test:{port} private\""))
            && flow.ends_with("# the one API it needs"),
        "{flow}"
    );
    assert!(
        !diff.contains("/etc/"),
        "system probes are notes, not grants: {diff}"
    );
    assert!(
        diff.contains("wardenctl suggest"),
        "each grant says why: {diff}"
    );
    assert!(
        err.contains(&format!("wardenctl suggest {id} --apply")),
        "{err}"
    );
    // Nothing written yet.
    assert_eq!(std::fs::read_to_string(&policy).unwrap(), before);
    // --json says the same.
    let v: Value = w.env.ctl_json(&["suggest", &id]);
    let entries: Vec<&str> = v["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["entry"].as_str().unwrap())
        .collect();
    assert_eq!(entries.len(), 3, "{v}");

    // --apply: the file keeps every line it had, in order, plus the grants.
    let out = w.ctl(&["suggest", &id, "--apply"]);
    let (_, err) = text(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("added 3 grants"), "{err}");
    let after = std::fs::read_to_string(&policy).unwrap();
    // Every line of the user's is still there, in order (the flow list's
    // line with its item added).
    let mut old = before.lines().peekable();
    for line in after.lines() {
        let same = old.peek().is_some_and(|o| {
            *o == line || (o.contains("allow: [") && line.starts_with(o.split(']').next().unwrap()))
        });
        if same {
            old.next();
        }
    }
    assert!(
        old.peek().is_none(),
        "a line of the user's was lost:\n{after}"
    );
    let compiled = w
        .env
        .ctl_json(&["policy", "check", policy.to_str().unwrap()]);
    assert!(compiled["read"].to_string().contains("a.txt"), "{compiled}");
    // Applying again changes nothing.
    let out = w.ctl(&["suggest", &id, "--apply"]);
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&policy).unwrap(), after);

    // A new session: what was denied goes through; nothing else was granted.
    let script = format!(
        "cat {} {}; {}; cat {}; {}",
        a.display(),
        b.display(),
        w.curl(&format!("http://{target}/hello")),
        c.display(),
        w.curl(&format!("http://other.test:{port}/x"))
    );
    let out = w.session(&policy, &script);
    let (stdout, stderr) = text(&out);
    assert_eq!(stdout, "a.txt\nb.txt\n200\n403\n", "{stderr}");
    assert!(stderr.contains("c.txt: No such file"), "{stderr}");
    let id2 = w.last_session();
    // And that session's denials suggest only what it was denied.
    let v: Value = w.env.ctl_json(&["suggest", &id2]);
    let entries: Vec<String> = v["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["entry"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        entries,
        vec![c.display().to_string(), format!("other.test:{port}")],
        "{v}"
    );
}

#[test]
fn secrets_come_with_a_warning_and_bad_sessions_are_clear_errors() {
    let Some(w) = World::new() else { return };
    let ssh = w.env.home.join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    let key = ssh.join("id_ed25519");
    std::fs::write(&key, "PRIVATE KEY\n").unwrap();
    let policy = w.env.policy(
        "secret.yaml",
        "version: 1\nname: suggest-secret\nfilesystem:\n  read: []\n",
    );
    let out = w.session(&policy, &format!("cat {}; true", key.display()));
    assert!(out.status.success(), "{out:?}");
    let id = w.last_session();
    let out = w.ctl(&["suggest", &id]);
    let (diff, err) = text(&out);
    assert!(out.status.success(), "{err}");
    let line = diff
        .lines()
        .find(|l| l.starts_with('+') && l.contains("id_ed25519"))
        .unwrap_or_else(|| panic!("{diff}"));
    assert!(
        line.contains("WARNING") && line.contains("SSH keys"),
        "{line}"
    );
    assert!(err.contains("review it before you grant it"), "{err}");

    // Unknown and empty prefixes: one clear line, non-zero.
    let out = w.ctl(&["suggest", "ffffffffffff"]);
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("no session ffffffffffff in the audit store"),
        "{err}"
    );
    // A session started with flags only: a list, and --apply refused.
    let out = {
        let mut cmd = w.env.shim([
            "--",
            "/bin/sh",
            "-c",
            &format!("cat {}; true", key.display()),
        ]);
        run(&mut cmd, Duration::from_secs(60))
    };
    assert!(out.status.success(), "{out:?}");
    let id = w.last_session();
    let out = w.ctl(&["suggest", &id]);
    let (list, _) = text(&out);
    assert!(list.contains("without a policy file"), "{list}");
    let out = w.ctl(&["suggest", &id, "--apply"]);
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(err.contains("no file to edit"), "{err}");
}

/// `wardenctl ps` points at `suggest` for a live session with denials.
#[test]
fn ps_shows_the_hint_for_a_session_with_denials() {
    let Some(w) = World::new() else { return };
    let hidden = w.env.mkdir("data/hidden");
    std::fs::write(hidden.join("x.txt"), "x").unwrap();
    let policy = w.env.policy(
        "ps.yaml",
        "version: 1\nname: suggest-ps\nfilesystem:\n  read: []\n",
    );
    let mut cmd = w.env.shim([
        "--policy",
        policy.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        &format!(
            "cat {} 2>/dev/null; exec sleep 60",
            hidden.join("x.txt").display()
        ),
    ]);
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let row = loop {
        let ps = w.env.ctl_json(&["ps"]);
        if let Some(r) = ps
            .as_array()
            .and_then(|a| a.iter().find(|r| r["files_denied"].as_u64() >= Some(1)))
        {
            break r.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no denial counted: {ps}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let id = row["id"].as_str().unwrap().to_string();
    let table = String::from_utf8_lossy(&w.ctl(&["ps"]).stdout).into_owned();
    assert!(
        // The server's denial, and the runtime's own probes (/etc/locale.alias).
        table.contains(&format!("denied (`wardenctl suggest {id}`)")),
        "{table}"
    );
    // A live session's suggestion already has the file.
    let v: Value = w.env.ctl_json(&["suggest", &id]);
    assert_eq!(
        v["grants"][0]["entry"],
        hidden.join("x.txt").display().to_string(),
        "{v}"
    );
    assert!(w.ctl(&["kill", &id]).status.success());
    let _ = child.wait();
}
