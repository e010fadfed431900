//! Approvals (docs/approvals.md, tracker issue 11), end to end: the real daemon,
//! the real shim with `--approve`, curl inside the sandbox going through the
//! session's proxy to upstreams on the host's loopback, and `wardenctl approve`
//! answering.
//!
//! The held target is the IP literal `127.0.0.2` (an upstream listens there):
//! an approval stands for the exact entry `127.0.0.2:PORT`, which reaches a
//! loopback address as a listed exact address does. A *name* that resolves to
//! loopback stays refused after approval (address classes apply to approved
//! hosts as to listed ones), which one test shows.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

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

impl std::ops::DerefMut for World {
    fn deref_mut(&mut self) -> &mut NetWorld {
        &mut self.0
    }
}

impl World {
    fn new() -> Option<World> {
        NetWorld::new().map(World)
    }

    fn http(&self) -> u16 {
        self.up.http.port()
    }

    /// A policy allowing `allowed.test` only (as `private`: it is loopback here).
    fn policy(&self, name: &str) -> PathBuf {
        self.env.policy(
            &format!("{name}.yaml"),
            &format!(
                "# approvals test policy\nversion: 1\nname: approvals-{name}\n\
                 network:\n  allow: [\"allowed.test:{} private\"]\nlimits:\n  timeout_s: 110\n",
                self.http()
            ),
        )
    }

    /// `curl` of each URL in turn inside the sandbox, printing one HTTP status
    /// per line (`000` for a refused tunnel or SOCKS connection).
    fn curls(&self, policy: &Path, urls: &[String], shim: &[&str]) -> Child {
        let curl = self.clients.curl.display().to_string();
        let mut script = String::new();
        for u in urls {
            script.push_str(&format!(
                "{curl} -s -o /dev/null -w '%{{http_code}}\\n' --max-time 100 {u}\n"
            ));
        }
        self.spawn(policy, &["/bin/sh", "-c", &script], shim)
    }

    fn spawn(&self, policy: &Path, argv: &[&str], shim: &[&str]) -> Child {
        let mut args: Vec<OsString> = shim.iter().map(OsString::from).collect();
        args.extend(["--policy".into(), policy.into(), "--".into()]);
        args.extend(argv.iter().map(OsString::from));
        let mut cmd = self.env.shim(args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().expect("spawn the shim")
    }

    fn ctl(&self, args: &[&str]) -> Output {
        approvals::ctl(&self.env, args)
    }

    fn pending(&self) -> Vec<Value> {
        approvals::pending(&self.env)
    }

    /// Waits for a pending approval of `resource` not among `seen`.
    fn wait_pending(&self, resource: &str, seen: &[String]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(p) = self.pending().into_iter().find(|p| {
                p["resource"] == resource
                    && !seen.iter().any(|s| p["id"].as_str() == Some(s.as_str()))
            }) {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "no pending approval for {resource}; daemon log:\n{}",
                self.daemon.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn answer(&self, id: &str, scope: &str) -> Output {
        approvals::answer(&self.env, id, scope)
    }

    #[track_caller]
    fn answer_ok(&self, id: &str, scope: &str) -> String {
        approvals::answer_ok(&self.env, id, scope)
    }

    fn approval_records(&self, action: &str, n: usize) -> Vec<Value> {
        approvals::approval_records(&self.env, action, n)
    }
}

fn finish(child: Child) -> (i32, String, String) {
    let out = wait_output(child, Duration::from_secs(110));
    (
        exit_code(out.status),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn wait_output(mut child: Child, timeout: Duration) -> Output {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "the shim did not finish; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn once_then_held_again_then_session_lets_the_rest_through() {
    let Some(w) = World::new() else { return };
    let policy = w.policy("once");
    let target = format!("127.0.0.2:{}", w.http());
    let url = |p: &str| format!("http://{target}/{p}");
    let child = w.curls(
        &policy,
        &[url("hello"), url("hello"), url("hello"), url("hello")],
        &["--approve", "--approve-timeout", "90s"],
    );

    // The first connection is held: nothing reached the upstream yet.
    let first = w.wait_pending(&target, &[]);
    assert_eq!(first["kind"], "network", "{first}");
    assert_eq!(first["operation"], "connect", "{first}");
    assert_eq!(first["server"], "approvals-once", "{first}");
    assert_eq!(first["protocol"], "http", "{first}");
    assert!(first["age_ms"].as_u64().is_some(), "{first}");
    let id1 = first["id"].as_str().unwrap().to_string();
    assert!(id1.starts_with("ap-") && id1.len() == 35, "{id1}");
    assert!(w.up.http.requests_to(IP_SECOND).is_empty());
    // `wardenctl ps` shows the session waiting.
    let ps = w.ctl_ps();
    assert_eq!(ps[0]["approve"], true, "{ps:?}");
    assert_eq!(ps[0]["approvals_pending"], 1, "{ps:?}");
    let table = String::from_utf8_lossy(&w.ctl(&["ps"]).stdout).into_owned();
    assert!(
        table.contains("1 waiting for `wardenctl approve`"),
        "{table}"
    );
    let msg = w.answer_ok(&id1, "once");
    assert!(msg.contains("once"), "{msg}");

    // --once was this connection: the next one is held again.
    let second = w.wait_pending(&target, std::slice::from_ref(&id1));
    let id2 = second["id"].as_str().unwrap().to_string();
    assert_ne!(id1, id2);
    assert_eq!(w.up.http.requests_to(IP_SECOND).len(), 1);
    w.answer_ok(&id2, "session");

    // --session: the rest go through without asking.
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "200\n200\n200\n200\n", "{stderr}");
    assert_eq!(w.up.http.requests_to(IP_SECOND).len(), 4);

    let requests = w.approval_records("request", 2);
    assert_eq!(requests.len(), 2, "{requests:?}");
    let answers = w.approval_records("answer", 2);
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0]["details"]["scope"], "once");
    assert_eq!(answers[0]["details"]["channel"], "cli");
    assert_eq!(answers[0]["decision"], "allow");
    assert!(
        answers[0]["details"]["by"]
            .as_str()
            .is_some_and(|b| b.contains("wardenctl")),
        "{}",
        answers[0]
    );
    assert_eq!(answers[1]["details"]["scope"], "session");
    let allowed: Vec<Value> = decisions_for(&w.env, "127.0.0.2")
        .into_iter()
        .filter(|r| r["decision"] == "allow")
        .collect();
    assert_eq!(allowed.len(), 4, "{allowed:?}");
    assert_eq!(allowed[0]["details"]["approval"]["id"], id1.as_str());
    assert_eq!(allowed[0]["details"]["approval"]["scope"], "once");
    assert_eq!(allowed[0]["details"]["rule"], target.as_str());
    assert_eq!(allowed[3]["details"]["approval"]["scope"], "session");
    // `wardenctl logs --type approval` shows them.
    let out = w.ctl(&["logs", "--type", "approval"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&id1) && text.contains(&id2), "{text}");
}

#[test]
fn deny_and_timeout_give_the_normal_refusal() {
    let Some(w) = World::new() else { return };
    let policy = w.policy("deny");
    let target = format!("127.0.0.2:{}", w.http());
    let url = format!("http://{target}/x");

    // --deny: this one refused (403, the proxy's normal refusal), the next
    // refused at once without asking.
    let child = w.curls(&policy, &[url.clone(), url.clone()], &["--approve"]);
    let p = w.wait_pending(&target, &[]);
    w.answer_ok(p["id"].as_str().unwrap(), "deny");
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "403\n403\n", "{stderr}");
    let refused = w.approval_records("refuse", 1);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["details"]["cause"], "denied-for-session");
    assert_eq!(w.approval_records("request", 1).len(), 1);
    let answers = w.approval_records("answer", 1);
    assert_eq!(answers[0]["decision"], "deny");

    // No answer in time: the normal refusal, and an expiry record.
    let child = w.curls(
        &policy,
        std::slice::from_ref(&url),
        &["--approve", "--approve-timeout", "2s"],
    );
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "403\n", "{stderr}");
    let expired = w.approval_records("expire", 1);
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert_eq!(expired[0]["details"]["cause"], "timeout");
    assert_eq!(expired[0]["decision"], "deny");
    assert!(w.up.http.requests_to(IP_SECOND).is_empty());

    // Without --approve nothing is ever held.
    let child = w.curls(&policy, &[url], &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let ps = loop {
        let ps = w.ctl_ps();
        if !ps.is_empty() || Instant::now() >= deadline {
            break ps;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if let Some(s) = ps.first() {
        assert_eq!(s["approve"], false, "{ps:?}");
        assert_eq!(s["approvals_pending"], 0, "{ps:?}");
    }
    let (_, stdout, _) = finish(child);
    assert_eq!(stdout, "403\n");
    assert_eq!(w.approval_records("request", 3).len(), 2);
}

#[test]
fn concurrent_connections_coalesce_and_pending_is_bounded() {
    let Some(w) = World::new() else { return };
    let policy = w.policy("coalesce");
    let curl = w.clients.curl.display().to_string();
    let h = w.http();
    let target = format!("127.0.0.2:{h}");
    // Two connections to the same host:port at once: one approval.
    let script = format!(
        "{curl} -s -o /dev/null -w 'a%{{http_code}}\\n' --max-time 100 http://{target}/hello &\n\
         {curl} -s -o /dev/null -w 'b%{{http_code}}\\n' --max-time 100 http://{target}/hello &\n\
         wait\n"
    );
    let child = w.spawn(&policy, &["/bin/sh", "-c", &script], &["--approve"]);
    let p = w.wait_pending(&target, &[]);
    // Both are held (the upstream sees nothing), on one approval.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(w.pending().len(), 1, "{:?}", w.pending());
    assert!(w.up.http.requests_to(IP_SECOND).is_empty());
    w.answer_ok(p["id"].as_str().unwrap(), "once");
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}");
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, ["a200", "b200"], "{stderr}");
    assert_eq!(w.approval_records("request", 1).len(), 1);

    // Six different ports at once: at most four pending, the rest refused
    // without asking.
    let mut script = String::new();
    for i in 1..=6u16 {
        script.push_str(&format!(
            "{curl} -s -o /dev/null -w '%{{http_code}}\\n' --max-time 100 http://127.0.0.2:{}/ &\n",
            40000 + i
        ));
    }
    script.push_str("wait\n");
    let child = w.spawn(&policy, &["/bin/sh", "-c", &script], &["--approve"]);
    let refused = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = w.approval_records("refuse", 2);
            if r.len() >= 2 || Instant::now() >= deadline {
                break r;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused
        .iter()
        .all(|r| r["details"]["cause"] == "too-many-pending"));
    let pending = w.pending();
    assert_eq!(pending.len(), 4, "{pending:?}");
    for p in pending {
        w.answer_ok(p["id"].as_str().unwrap(), "deny");
    }
    let (_, stdout, _) = finish(child);
    assert_eq!(
        stdout.lines().filter(|l| *l == "403").count(),
        6,
        "{stdout}"
    );
}

#[test]
fn an_approved_name_still_gets_the_address_checks() {
    let Some(w) = World::new() else { return };
    let policy = w.policy("classes");
    // notlisted.test resolves to 127.0.0.3: loopback, which a name reaches
    // only through an entry with the `private` option. Approval adds the
    // plain entry, so the proxy still refuses it, as `private-address`.
    let target = format!("notlisted.test:{}", w.http());
    let child = w.curls(&policy, &[format!("http://{target}/")], &["--approve"]);
    let p = w.wait_pending(&target, &[]);
    w.answer_ok(p["id"].as_str().unwrap(), "once");
    let (_, stdout, _) = finish(child);
    assert_eq!(stdout, "403\n");
    let d = decisions_for(&w.env, "notlisted.test");
    assert_eq!(
        d.last().unwrap()["details"]["code"],
        "private-address",
        "{d:?}"
    );
    assert!(!w.up.reached(IP_FORBIDDEN));
}

#[test]
fn a_stopped_daemon_leaves_nothing_granted() {
    let Some(mut w) = World::new() else { return };
    let policy = w.policy("restart");
    let target = format!("127.0.0.2:{}", w.http());
    let url = format!("http://{target}/x");
    let child = w.curls(&policy, std::slice::from_ref(&url), &["--approve"]);
    w.wait_pending(&target, &[]);
    w.daemon.stop(Duration::from_secs(15));
    let (_, _, _) = finish(child);
    let expired = w.approval_records("expire", 1);
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert_eq!(expired[0]["details"]["cause"], "daemon-stopped");
    assert!(w.up.http.requests_to(IP_SECOND).is_empty());

    // A new daemon knows no grant: the same access is held again.
    w.daemon = start_daemon_with_dns(&w.env, &w.up.dns);
    let child = w.curls(&policy, &[url], &["--approve", "--approve-timeout", "30s"]);
    let p = w.wait_pending(&target, &[]);
    w.answer_ok(p["id"].as_str().unwrap(), "deny");
    let (_, stdout, _) = finish(child);
    assert_eq!(stdout, "403\n");
    assert!(w.up.http.requests_to(IP_SECOND).is_empty());
}

#[test]
fn bad_answers_and_bad_timeouts() {
    let Some(w) = World::new() else { return };
    let policy = w.policy("bad");
    let target = format!("127.0.0.2:{}", w.http());

    // Unknown ids.
    for id in ["ap-00000000000000000000000000000000", "nonsense", ""] {
        let out = w.answer(id, "once");
        assert_eq!(exit_code(out.status), 1, "{id}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("wardenctl: "), "{err}");
    }
    // A scope without an id, an id without a scope, two scopes.
    for args in [
        &["approve", "--once"][..],
        &["approve", "ap-1"],
        &["approve", "ap-1", "--once", "--deny"],
    ] {
        let out = w.ctl(args);
        assert_ne!(exit_code(out.status), 0, "{args:?}");
    }

    // Answering twice: the second is refused and says why.
    let child = w.curls(&policy, &[format!("http://{target}/hello")], &["--approve"]);
    let p = w.wait_pending(&target, &[]);
    let id = p["id"].as_str().unwrap().to_string();
    w.answer_ok(&id, "once");
    let out = w.answer(&id, "deny");
    assert_eq!(exit_code(out.status), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already answered"), "{err}");
    let (_, stdout, _) = finish(child);
    assert_eq!(stdout, "200\n");

    // Timeouts of 0, absurd values and non-durations: the shim refuses to start.
    for t in ["0s", "0", "1000h", "soon", "-5s"] {
        let mut cmd = w.env.shim([
            "--approve",
            "--approve-timeout",
            t,
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "/bin/true",
        ]);
        let out = run(&mut cmd, Duration::from_secs(30));
        assert_eq!(exit_code(out.status), 125, "{t}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("warden: "), "{t}: {err}");
        assert!(out.stdout.is_empty());
    }
    // A session started with flags only has no file for --always.
    let curl = w.clients.curl.display().to_string();
    let mut cmd = w.env.shim(["--approve", "--", "/bin/sh", "-c"]);
    cmd.arg(format!(
        "{curl} -s -o /dev/null -w '%{{http_code}}\\n' --max-time 100 http://{target}/"
    ));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let p = w.wait_pending(&target, &[]);
    let id = p["id"].as_str().unwrap().to_string();
    assert_eq!(p["policy"], Value::Null);
    let out = w.answer(&id, "always");
    assert_eq!(exit_code(out.status), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--session"), "{err}");
    // ...and nothing was granted: still pending, answerable otherwise.
    assert_eq!(w.pending().len(), 1);
    w.answer_ok(&id, "deny");
    let (_, stdout, _) = finish(child);
    assert_eq!(stdout, "403\n");
}

impl World {
    fn under_pty(&self, policy: &Path, script: &str, answer: &str, raw: bool) -> (Child, PathBuf) {
        let args: Vec<OsString> = vec![
            "--approve".into(),
            "--approve-timeout".into(),
            "60s".into(),
            "--policy".into(),
            policy.into(),
            "--".into(),
            "/bin/sh".into(),
            "-c".into(),
            script.into(),
        ];
        let (mut cmd, transcript) = approvals::shim_under_pty(&self.env, answer, raw, &args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        (cmd.spawn().expect("python3"), transcript)
    }
}

#[test]
fn the_terminal_prompt_answers_and_never_writes_to_stdout() {
    let Some(w) = World::new() else { return };
    let policy = w.policy("tty");
    let target = format!("127.0.0.2:{}", w.http());
    let curl = w.clients.curl.display().to_string();
    let script = format!(
        "{curl} -s -o /dev/null -w '%{{http_code}}\\n' --max-time 100 http://{target}/hello"
    );
    let (child, transcript) = w.under_pty(&policy, &script, "o", false);
    let (code, stdout, stderr) = finish(child);
    let tty = std::fs::read_to_string(&transcript).unwrap_or_default();
    assert_eq!(code, 0, "{stderr}\ntty:\n{tty}");
    // The MCP channel carries the server's bytes only.
    assert_eq!(stdout, "200\n", "tty:\n{tty}");
    assert!(
        tty.contains(&format!("wants to connect to {target}")),
        "{tty}"
    );
    assert!(tty.contains("[a]lways"), "{tty}");
    assert!(tty.contains("allowed connect"), "{tty}");
    let requests = w.approval_records("request", 1);
    assert_eq!(
        requests[0]["details"]["channels"][0], "terminal",
        "{requests:?}"
    );
    let answers = w.approval_records("answer", 1);
    assert_eq!(answers[0]["details"]["channel"], "terminal", "{answers:?}");
    assert_eq!(answers[0]["details"]["scope"], "once");
}

#[test]
fn a_raw_mode_terminal_is_not_prompted() {
    let Some(w) = World::new() else { return };
    let policy = w.policy("raw");
    let target = format!("127.0.0.2:{}", w.http());
    let curl = w.clients.curl.display().to_string();
    let script = format!(
        "{curl} -s -o /dev/null -w '%{{http_code}}\\n' --max-time 100 http://{target}/hello"
    );
    let (child, transcript) = w.under_pty(&policy, &script, "o", true);
    let p = w.wait_pending(&target, &[]);
    let requests = w.approval_records("request", 1);
    let channels = requests[0]["details"]["channels"].as_array().unwrap();
    assert!(!channels.iter().any(|c| c == "terminal"), "{channels:?}");
    w.answer_ok(p["id"].as_str().unwrap(), "once");
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "200\n");
    let tty = std::fs::read_to_string(&transcript).unwrap_or_default();
    assert!(!tty.contains("warden:"), "{tty}");
}

#[test]
fn always_writes_the_policy_keeping_every_comment_and_a_new_session_has_the_grant() {
    let Some(w) = World::new() else { return };
    let h = w.http();
    let target = format!("127.0.0.2:{h}");
    let original = format!(
        "# My fetch server.\n\
         version: 1   # schema\n\
         name: approvals-always\n\
         \n\
         network:\n\
         \x20 # the one host it needs\n\
         \x20 allow:\n\
         \x20   - \"allowed.test:{h} private\"   # upstream\n\
         limits:\n\
         \x20 timeout_s: 110 # enough\n\
         # trailing comment\n"
    );
    let policy = w.env.policy("always.yaml", &original);
    let url = format!("http://{target}/hello");
    let child = w.curls(&policy, std::slice::from_ref(&url), &["--approve"]);
    let p = w.wait_pending(&target, &[]);
    assert_eq!(p["policy"], policy.display().to_string());
    let id = p["id"].as_str().unwrap().to_string();
    let msg = w.answer_ok(&id, "always");
    assert!(msg.contains("network.allow"), "{msg}");
    let (_, stdout, _) = finish(child);
    assert_eq!(stdout, "200\n");

    // The file: the original bytes, plus exactly the added line(s).
    let edited = std::fs::read_to_string(&policy).unwrap();
    let added: Vec<&str> = edited
        .lines()
        .filter(|l| !original.lines().any(|o| o == *l))
        .collect();
    assert!(!added.is_empty(), "{edited}");
    assert!(added.iter().any(|l| l.contains(&target)), "{edited}");
    assert!(added.iter().any(|l| l.contains(&id)), "{edited}");
    let kept: String = edited
        .lines()
        .filter(|l| !added.contains(l))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(kept, original, "outside the added lines the file changed");
    let edits = w.approval_records("policy-edit", 1);
    assert_eq!(edits[0]["decision"], "allow", "{edits:?}");
    assert_eq!(edits[0]["details"]["key"], "network.allow");
    assert_eq!(edits[0]["details"]["entry"], target.as_str());
    assert_eq!(edits[0]["resource"], policy.display().to_string());

    // A new session, without --approve, has the grant.
    let child = w.curls(&policy, std::slice::from_ref(&url), &[]);
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "200\n");
    assert_eq!(w.approval_records("request", 2).len(), 1);
}

#[test]
fn always_refuses_a_policy_file_that_became_invalid_and_grants_nothing() {
    let Some(w) = World::new() else { return };
    let policy = w.policy("broken");
    let target = format!("127.0.0.2:{}", w.http());
    let child = w.curls(&policy, &[format!("http://{target}/hello")], &["--approve"]);
    let p = w.wait_pending(&target, &[]);
    let id = p["id"].as_str().unwrap().to_string();
    // The user breaks the file while the session runs.
    std::fs::write(&policy, "version: 1\nnetwork: [oops\n").unwrap();
    let out = w.answer(&id, "always");
    assert_eq!(exit_code(out.status), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("nothing was granted"), "{err}");
    assert!(err.contains(&policy.display().to_string()), "{err}");
    assert_eq!(
        std::fs::read_to_string(&policy).unwrap(),
        "version: 1\nnetwork: [oops\n"
    );
    let edits = w.approval_records("policy-edit", 1);
    assert_eq!(edits[0]["decision"], "deny", "{edits:?}");
    // Still pending: answered otherwise, it is refused.
    assert_eq!(w.pending().len(), 1);
    w.answer_ok(&id, "deny");
    let (_, stdout, _) = finish(child);
    assert_eq!(stdout, "403\n");
}

#[test]
fn the_policy_key_turns_approvals_on() {
    let Some(w) = World::new() else { return };
    let h = w.http();
    let policy = w.env.policy(
        "key.yaml",
        &format!(
            "version: 1\nname: approvals-key\napprove: true\n\
             network:\n  allow: [\"allowed.test:{h} private\"]\n"
        ),
    );
    let target = format!("127.0.0.2:{h}");
    let child = w.curls(&policy, &[format!("http://{target}/hello")], &[]);
    let p = w.wait_pending(&target, &[]);
    w.answer_ok(p["id"].as_str().unwrap(), "once");
    let (_, stdout, _) = finish(child);
    assert_eq!(stdout, "200\n");
}

/// The Python MCP SDK's client: initialize, then `read_text_file` of each
/// path in turn (an entry `[TOOL, PATH]` calls TOOL instead; each call may be
/// held for an approval), printing one JSON line: the server's name and each
/// call's error flag and text.
const PY_FILES_CLIENT: &str = r#"
import json, sys
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

cfg = json.loads(sys.argv[1])

async def main():
    out = {"calls": []}
    params = StdioServerParameters(command=cfg["command"], args=cfg["args"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = init.server_info.name
            for call in cfg["paths"]:
                tool, path = call if isinstance(call, list) else ["read_text_file", call]
                r = await session.call_tool(tool, {"path": path})
                texts = [c.text for c in r.content if c.type == "text"]
                out["calls"].append({"path": path, "is_error": bool(r.is_error), "text": texts})
    print(json.dumps(out), flush=True)

anyio.run(main)
"#;

#[test]
fn python_sdk_read_outside_the_grant_succeeds_once_approved_in_the_same_session() {
    let Some(w) = World::new() else { return };
    let deps = w.clients.deps.clone();
    let node = find_on_path("node").expect("node on PATH");
    // The server may serve `work`; the policy grants only `work/public`.
    let work = w.env.mkdir("work");
    let public = w.env.mkdir("work/public");
    std::fs::write(public.join("readme.txt"), "public").unwrap();
    std::fs::write(work.join("secret.txt"), "the secret").unwrap();
    std::fs::write(work.join("other.txt"), "another").unwrap();
    let policy = w.env.policy(
        "fs.yaml",
        &format!(
            "version: 1\nname: approvals-fs\nfilesystem:\n  read: [\"{}\", \"{}\"]\n",
            deps.display(),
            public.display()
        ),
    );
    let server = deps.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    let args: Vec<String> = vec![
        "--socket".into(),
        w.env.socket.display().to_string(),
        "--approve".into(),
        "--policy".into(),
        policy.display().to_string(),
        "--".into(),
        node.display().to_string(),
        server.display().to_string(),
        work.display().to_string(),
    ];
    let secret = work.join("secret.txt").display().to_string();
    let other = work.join("other.txt").display().to_string();
    let script = w.env.write("clients/files.py", PY_FILES_CLIENT);
    let mut cmd = std::process::Command::new(&w.clients.python);
    cmd.arg(&script)
        .arg(
            serde_json::json!({
                "command": warden_e2e::bin("warden-shim"),
                "args": args,
                "paths": [secret, other],
            })
            .to_string(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    w.env.apply_env(&mut cmd);
    let child = cmd.spawn().expect("python client");

    let p = w.wait_pending(&secret, &[]);
    assert_eq!(p["kind"], "file", "{p}");
    assert_eq!(p["operation"], "read", "{p}");
    let sessions = w.ctl_ps();
    w.answer_ok(p["id"].as_str().unwrap(), "once");
    // The file next to it is not granted by that answer: held again, denied.
    let q = w.wait_pending(&other, &[]);
    w.answer_ok(q["id"].as_str().unwrap(), "deny");
    let out = wait_output(child, Duration::from_secs(110));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    assert_eq!(v["calls"][0]["is_error"], false, "{v}");
    assert_eq!(v["calls"][0]["text"][0], "the secret", "{v}");
    assert_eq!(v["calls"][1]["is_error"], true, "{v}");
    // One session, one server, all along.
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let starts: Vec<Value> = audit_records(&w.env)
        .into_iter()
        .filter(|r| r["type"] == "session" && r["action"] == "start")
        .collect();
    assert_eq!(starts.len(), 1, "{starts:?}");
}

impl World {
    fn ctl_ps(&self) -> Vec<Value> {
        let v = self.env.ctl_json(&["ps"]);
        v.as_array().cloned().unwrap_or_default()
    }
}

/// Runs `script` with /bin/sh inside, with approvals and `policy`.
fn sh(w: &World, policy: &Path, script: &str) -> Child {
    w.spawn(
        policy,
        &["/bin/sh", "-c", script],
        &["--approve", "--approve-timeout", "60s"],
    )
}

/// A policy granting `read` read-only.
fn fs_policy(w: &World, name: &str, read: &[&Path]) -> PathBuf {
    let list: Vec<String> = read
        .iter()
        .map(|p| format!("{:?}", p.display().to_string()))
        .collect();
    w.env.policy(
        &format!("{name}.yaml"),
        &format!(
            "version: 1\nname: approvals-{name}\ncommand: [\"/bin/true\"]\nfilesystem:\n  read: [{}]\n",
            list.join(", ")
        ),
    )
}

#[test]
fn file_writes_and_creates_outside_the_grants_are_done_by_the_daemon_once_approved() {
    let Some(w) = World::new() else { return };
    let granted = w.env.mkdir("files/granted");
    let hidden = w.env.mkdir("files/hidden");
    std::fs::write(granted.join("notes.txt"), "old\n").unwrap();
    let policy = fs_policy(&w, "writes", &[&granted]);
    let notes = granted.join("notes.txt");
    let new = hidden.join("new.txt");
    let script = format!(
        "echo changed > {} && echo made > {} && cat {}",
        notes.display(),
        new.display(),
        new.display()
    );
    let child = sh(&w, &policy, &script);
    let notes_s = notes.display().to_string();
    let p = w.wait_pending(&notes_s, &[]);
    assert_eq!(p["operation"], "write", "{p}");
    w.answer_ok(p["id"].as_str().unwrap(), "once");
    let new_s = new.display().to_string();
    let q = w.wait_pending(&new_s, &[]);
    assert_eq!(q["operation"], "create", "{q}");
    w.answer_ok(q["id"].as_str().unwrap(), "session");
    // The cat of the new file is a read: the --session grant was for create.
    let r = w.wait_pending(&new_s, &[q["id"].as_str().unwrap().to_string()]);
    assert_eq!(r["operation"], "read", "{r}");
    w.answer_ok(r["id"].as_str().unwrap(), "once");
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "made\n");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "changed\n");
    assert_eq!(std::fs::read_to_string(&new).unwrap(), "made\n");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&new).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o022, 0, "the caller's umask applies: {mode:o}");
}

#[test]
fn file_session_grants_repeat_without_asking_and_always_writes_a_read_grant() {
    let Some(w) = World::new() else { return };
    let data = w.env.mkdir("files/data");
    std::fs::write(data.join("a.txt"), "alpha\n").unwrap();
    let a = data.join("a.txt");
    let policy = fs_policy(&w, "session", &[]);
    let child = sh(&w, &policy, &format!("cat {0} {0} {0}", a.display()));
    let a_s = a.display().to_string();
    let p = w.wait_pending(&a_s, &[]);
    w.answer_ok(p["id"].as_str().unwrap(), "session");
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "alpha\nalpha\nalpha\n");
    assert_eq!(w.approval_records("request", 1).len(), 1);

    // --always: the exact file (not its directory) goes to filesystem.read.
    let child = sh(&w, &policy, &format!("cat {}", a.display()));
    let p = w.wait_pending(&a_s, &[]);
    w.answer_ok(p["id"].as_str().unwrap(), "always");
    let (_, stdout, _) = finish(child);
    assert_eq!(stdout, "alpha\n");
    let text = std::fs::read_to_string(&policy).unwrap();
    assert!(text.contains(&a_s), "{text}");
    let compiled = w
        .env
        .ctl_json(&["policy", "check", policy.to_str().unwrap()]);
    let read: Vec<String> = compiled["read"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    assert_eq!(read, vec![a_s.clone()], "{compiled}");
    // A new session reads it without asking; its neighbour stays hidden.
    std::fs::write(data.join("b.txt"), "beta\n").unwrap();
    let mut cmd = w.env.shim([
        "--policy",
        policy.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        &format!("cat {}; cat {}", a.display(), data.join("b.txt").display()),
    ]);
    let out = run(&mut cmd, Duration::from_secs(60));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "alpha\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("No such file"));
}

#[test]
fn protected_files_symlinks_and_wardens_own_files_are_never_asked_about() {
    let Some(w) = World::new() else { return };
    let data = w.env.mkdir("files/links");
    std::fs::write(data.join("real.txt"), "real\n").unwrap();
    std::os::unix::fs::symlink(data.join("real.txt"), data.join("link.txt")).unwrap();
    let policy = fs_policy(&w, "never", &[]);
    let before = std::fs::read_to_string(&policy).unwrap();
    // The server tries to rewrite its own policy, to read through a
    // symlink, and to read a hidden dot file: each refused at once.
    std::fs::write(w.env.home.join(".netrc-like"), "x").unwrap();
    let script = format!(
        "echo 'network: {{allow: [\"*\"]}}' >> {}; cat {}; cat {}; echo done",
        policy.display(),
        data.join("link.txt").display(),
        w.env.home.join(".netrc-like").display()
    );
    let child = sh(&w, &policy, &script);
    let (code, stdout, _) = finish(child);
    assert_eq!(code, 0);
    assert_eq!(stdout, "done\n");
    assert_eq!(std::fs::read_to_string(&policy).unwrap(), before);
    assert!(w.approval_records("request", 1).is_empty());
    let refused = w.approval_records("refuse", 1);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["details"]["cause"], "protected");
    assert_eq!(refused[0]["resource"], policy.display().to_string());
}

/// A server cannot answer its own approval: even with the socket directory
/// exposed to it (`dangerously_expose`) and the real id in hand, its
/// `wardenctl approve ID --session` is refused (a peer inside a sandbox),
/// nothing is granted, and the held connection gets the person's answer.
/// Control: the same command on the host answers (every other test here).
#[test]
fn a_server_cannot_answer_its_own_approval() {
    let Some(w) = World::new() else { return };
    let target = format!("127.0.0.2:{}", w.http());
    let ctl = warden_e2e::bin("wardenctl");
    let ctl_dir = ctl.parent().unwrap().to_path_buf();
    let socket_dir = w.env.socket.parent().unwrap().to_path_buf();
    let bx = w.env.mkdir("selfanswer");
    let curl = w.clients.curl.display().to_string();
    let script = format!(
        "{curl} -s -o /dev/null -w '%{{http_code}}\\n' --max-time 100 http://{target}/hello > {b}/curl.out &\n\
         while [ ! -s {b}/id ]; do sleep 0.1; done\n\
         {c} --socket {s} approve \"$(cat {b}/id)\" --session 2> {b}/ctl.err; echo \"ctl $?\" > {b}/ctl.rc\n\
         wait\ncat {b}/curl.out\n",
        b = bx.display(),
        c = ctl.display(),
        s = w.env.socket.display()
    );
    let policy = w.env.policy(
        "self.yaml",
        &format!(
            "version: 1\nname: approvals-self\nfilesystem:\n  read: [{socket_dir:?}, {ctl_dir:?}]\n  \
             write: [{bx:?}]\n  dangerously_expose: [{socket_dir:?}]\n"
        ),
    );
    let child = w.spawn(&policy, &["/bin/sh", "-c", &script], &["--approve"]);
    let p = w.wait_pending(&target, &[]);
    let id = p["id"].as_str().unwrap().to_string();
    std::fs::write(bx.join("id.tmp"), &id).unwrap();
    std::fs::rename(bx.join("id.tmp"), bx.join("id")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !bx.join("ctl.rc").exists() {
        assert!(
            Instant::now() < deadline,
            "the sandboxed wardenctl never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    let rc = std::fs::read_to_string(bx.join("ctl.rc")).unwrap();
    let err = std::fs::read_to_string(bx.join("ctl.err")).unwrap_or_default();
    assert_eq!(rc.trim(), "ctl 1", "{err}");
    assert!(err.contains("inside a sandbox"), "{err}");
    // Nothing was granted: still pending; the person denies it.
    assert!(w.pending().iter().any(|q| q["id"] == id.as_str()));
    assert!(w.approval_records("answer", 1).is_empty());
    w.answer_ok(&id, "deny");
    let (_, stdout, stderr) = finish(child);
    assert_eq!(stdout, "403\n", "{stderr}");
    let answers = w.approval_records("answer", 1);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0]["details"]["scope"], "deny");
    let peers: Vec<Value> = audit_records(&w.env)
        .into_iter()
        .filter(|r| r["type"] == "daemon" && r["action"] == "peer")
        .collect();
    assert!(!peers.is_empty(), "the refused peer is audited");
}

#[test]
fn always_refuses_an_unwritable_policy_and_grants_nothing() {
    if is_root() {
        println!("skipping: root writes through any permission; the unprivileged phase of scripts/test runs this");
        return;
    }
    let Some(w) = World::new() else { return };
    let dir = w.env.mkdir("ro-policy");
    let h = w.http();
    let policy = dir.join("p.yaml");
    std::fs::write(
        &policy,
        format!(
            "version: 1\nname: approvals-ro\nnetwork:\n  allow: [\"allowed.test:{h} private\"]\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let target = format!("127.0.0.2:{h}");
    let child = w.curls(&policy, &[format!("http://{target}/hello")], &["--approve"]);
    let p = w.wait_pending(&target, &[]);
    let id = p["id"].as_str().unwrap().to_string();
    let out = w.answer(&id, "always");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(exit_code(out.status), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("nothing was granted"), "{err}");
    assert!(w.pending().iter().any(|q| q["id"] == id.as_str()));
    w.answer_ok(&id, "deny");
    let (_, stdout, _) = finish(child);
    assert_eq!(stdout, "403\n");
}

/// `wardenctl approve` on a terminal: the numbered picker; `1 o` answers the
/// first, `q` leaves.
const PICKER_DRIVER: &str = r#"
import os, pty, sys, select, time
transcript = sys.argv[1]
argv = sys.argv[2:]
pid, master = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
seen = b""
step = 0
deadline = time.time() + 60
with open(transcript, "wb") as out:
    while time.time() < deadline:
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            out.write(chunk); out.flush()
            seen += chunk
        if step == 0 and b"WANTS" in seen and b"> " in seen:
            os.write(master, b"1 o\n"); step = 1
        elif step == 1 and b"allowed" in seen:
            os.write(master, b"q\n"); step = 2
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"#;

#[test]
fn the_picker_answers_on_a_terminal_and_watch_streams_both_events() {
    let Some(w) = World::new() else { return };
    let policy = w.policy("picker");
    let target = format!("127.0.0.2:{}", w.http());
    // --watch --json, started before anything is pending.
    let mut watch = w.env.ctl(["approve", "--watch", "--json"]);
    watch
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut watch = watch.spawn().unwrap();
    let child = w.curls(&policy, &[format!("http://{target}/hello")], &["--approve"]);
    let p = w.wait_pending(&target, &[]);
    let transcript = w.env.root.join("picker.log");
    let mut cmd = std::process::Command::new("/usr/bin/python3");
    cmd.arg("-c")
        .arg(PICKER_DRIVER)
        .arg(&transcript)
        .arg(warden_e2e::bin("wardenctl"))
        .arg("--socket")
        .arg(&w.env.socket)
        .arg("approve");
    w.env.apply_env(&mut cmd);
    let out = run(&mut cmd, Duration::from_secs(90));
    let tty = std::fs::read_to_string(&transcript).unwrap_or_default();
    assert!(out.status.success(), "{tty}");
    assert!(tty.contains(p["id"].as_str().unwrap()), "{tty}");
    assert!(tty.contains(&format!("connect {target}")), "{tty}");
    let (_, stdout, _) = finish(child);
    assert_eq!(stdout, "200\n", "{tty}");
    // The watcher saw it raised and resolved.
    std::thread::sleep(Duration::from_millis(300));
    let _ = watch.kill();
    let out = watch.wait_with_output().unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["event"], "raised");
    assert_eq!(lines[0]["id"], p["id"]);
    assert_eq!(lines[0]["kind"], "network");
    assert_eq!(lines[1]["event"], "resolved");
    assert_eq!(lines[1]["outcome"], "once");
    assert_eq!(lines[1]["channel"], "cli");
}

/// What a sandboxed Python does with a directory it opens: the names, a
/// size, then the attacks on the fd it got (open an entry through it, `..`
/// out of it, a socket in it), printed as one JSON line.
const PY_LIST_PROBE: &str = r#"
import json, os, socket, sys
d = sys.argv[1]
fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
out = {"names": sorted(os.listdir(fd))}
out["size"] = os.stat("report.txt", dir_fd=fd, follow_symlinks=False).st_size
try:
    f = os.open("report.txt", os.O_RDONLY, dir_fd=fd)
    out["child"] = os.read(f, 100).decode(errors="replace")
except OSError as e:
    out["child"] = e.errno
up = os.stat("..", dir_fd=fd)
me = os.fstat(fd)
out["dotdot_stays"] = (up.st_ino, up.st_dev) == (me.st_ino, me.st_dev)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/proc/self/fd/%d/sock" % fd)
    out["sock"] = "connected"
except OSError as e:
    out["sock"] = e.errno
try:
    os.open("new.txt", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd)
    out["create"] = "created"
except OSError as e:
    out["create"] = e.errno
print(json.dumps(out), flush=True)
"#;

/// A listing approved: the sandboxed process gets the names, types and sizes
/// of the directory it asked for, and nothing more through that fd: no
/// entry's content (Landlock), no way up (`..` stays), no host socket, no
/// writes. The control: the same directory on the host has all of that.
#[test]
fn a_listing_outside_the_grants_is_a_snapshot_once_approved() {
    let Some(w) = World::new() else { return };
    let hidden = w.env.mkdir("files/listed");
    std::fs::write(hidden.join("report.txt"), "the secret report\n").unwrap();
    std::fs::create_dir(hidden.join("sub")).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(hidden.join("sock")).unwrap();
    listener.set_nonblocking(true).unwrap();
    let probe = w.env.write("files/probe.py", PY_LIST_PROBE);
    let policy = fs_policy(&w, "list", &[&probe]);
    let child = w.spawn(
        &policy,
        &[
            "/usr/bin/python3",
            probe.to_str().unwrap(),
            hidden.to_str().unwrap(),
        ],
        &["--approve", "--approve-timeout", "60s"],
    );
    let dir_s = hidden.display().to_string();
    let p = w.wait_pending(&dir_s, &[]);
    assert_eq!(p["kind"], "file", "{p}");
    assert_eq!(p["operation"], "list", "{p}");
    w.answer_ok(p["id"].as_str().unwrap(), "once");
    let (code, stdout, stderr) = finish(child);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        v["names"],
        serde_json::json!(["report.txt", "sock", "sub"]),
        "{v}"
    );
    assert_eq!(v["size"], "the secret report\n".len(), "{v}");
    assert_eq!(
        v["child"],
        libc::EACCES,
        "an entry's content is not listed: {v}"
    );
    assert_eq!(v["dotdot_stays"], true, "{v}");
    assert_eq!(
        v["sock"],
        libc::ECONNREFUSED,
        "the host's socket is not reached: {v}"
    );
    assert_eq!(v["create"], libc::EROFS, "{v}");
    assert!(
        listener.accept().is_err(),
        "nothing reached the host's socket"
    );
    // The control: on the host the fd of the same directory reaches all of it.
    std::os::unix::net::UnixStream::connect(hidden.join("sock")).unwrap();
    assert!(listener.accept().is_ok());
    assert!(!hidden.join("new.txt").exists());
    // The entry's content was not asked about through the fd: only the
    // listing was.
    let requests = w.approval_records("request", 1);
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["details"]["operation"], "list", "{requests:?}");
}

/// `--always` is refused for a listing (no list-only grant exists; a read
/// grant would expose the files too), the approval stays pending, and
/// `--session` then lets later listings through without asking, each one
/// current.
#[test]
fn a_listing_is_allowed_for_the_session_but_never_written_to_the_policy() {
    let Some(w) = World::new() else { return };
    let hidden = w.env.mkdir("files/again");
    std::fs::write(hidden.join("first.txt"), "1").unwrap();
    // The go-ahead is made in a granted directory, so the sandbox sees it.
    let gate = w.env.mkdir("files/gate");
    let marker = gate.join("go");
    let policy = fs_policy(&w, "list-session", &[&gate]);
    let before = std::fs::read_to_string(&policy).unwrap();
    // Python's listdir opens the directory at once (`ls` would stat it
    // first, and a stat is not approvable: docs/approvals.md).
    let ls = "/usr/bin/python3 -c 'import os, sys; print(*sorted(os.listdir(sys.argv[1])), sep=chr(10))'";
    let script = format!(
        "{ls} {d}; while [ ! -e {m} ]; do sleep 0.05; done; {ls} {d}",
        d = hidden.display(),
        m = marker.display()
    );
    let child = sh(&w, &policy, &script);
    let dir_s = hidden.display().to_string();
    let p = w.wait_pending(&dir_s, &[]);
    let id = p["id"].as_str().unwrap().to_string();
    let out = w.answer(&id, "always");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("listing") && err.contains("--session"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&policy).unwrap(), before);
    assert!(
        w.pending().iter().any(|q| q["id"] == id.as_str()),
        "still pending"
    );
    let mut child = child;
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    w.answer_ok(&id, "session");
    // The first listing is made once the answer is applied: wait for it.
    use std::io::{BufRead, Read};
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first, "first.txt\n");
    std::fs::write(hidden.join("second.txt"), "2").unwrap();
    std::fs::write(&marker, "").unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let (code, _, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(rest, "first.txt\nsecond.txt\n");
    assert_eq!(w.approval_records("request", 1).len(), 1);
}

/// The Python SDK and server-filesystem: `list_directory` of a directory
/// the policy hides succeeds in the same MCP session once approved, and
/// reading a file in it is a question of its own.
#[test]
fn python_sdk_list_directory_outside_the_grant_succeeds_once_approved() {
    let Some(w) = World::new() else { return };
    let deps = w.clients.deps.clone();
    let node = find_on_path("node").expect("node on PATH");
    let work = w.env.mkdir("lwork");
    let public = w.env.mkdir("lwork/public");
    let private = w.env.mkdir("lwork/private");
    std::fs::write(private.join("plans.txt"), "the plans").unwrap();
    std::fs::create_dir(private.join("drafts")).unwrap();
    let policy = w.env.policy(
        "lfs.yaml",
        &format!(
            "version: 1\nname: approvals-lfs\nfilesystem:\n  read: [\"{}\", \"{}\"]\n",
            deps.display(),
            public.display()
        ),
    );
    let server = deps.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    let args: Vec<String> = vec![
        "--socket".into(),
        w.env.socket.display().to_string(),
        "--approve".into(),
        "--policy".into(),
        policy.display().to_string(),
        "--".into(),
        node.display().to_string(),
        server.display().to_string(),
        work.display().to_string(),
    ];
    let dir = private.display().to_string();
    let plans = private.join("plans.txt").display().to_string();
    let script = w.env.write("clients/files.py", PY_FILES_CLIENT);
    let mut cmd = std::process::Command::new(&w.clients.python);
    cmd.arg(&script)
        .arg(
            serde_json::json!({
                "command": warden_e2e::bin("warden-shim"),
                "args": args,
                "paths": [["list_directory", dir], plans],
            })
            .to_string(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    w.env.apply_env(&mut cmd);
    let child = cmd.spawn().expect("python client");
    let p = w.wait_pending(&dir, &[]);
    assert_eq!(p["operation"], "list", "{p}");
    w.answer_ok(p["id"].as_str().unwrap(), "once");
    let q = w.wait_pending(&plans, &[]);
    assert_eq!(q["operation"], "read", "{q}");
    w.answer_ok(q["id"].as_str().unwrap(), "deny");
    let out = wait_output(child, Duration::from_secs(110));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    assert_eq!(v["calls"][0]["is_error"], false, "{v}");
    let listing = v["calls"][0]["text"][0].as_str().unwrap_or("");
    assert!(listing.contains("[FILE] plans.txt"), "{v}");
    assert!(listing.contains("[DIR] drafts"), "{v}");
    assert!(!listing.contains("the plans"), "{v}");
    assert_eq!(v["calls"][1]["is_error"], true, "{v}");
    let starts = audit_records(&w.env)
        .into_iter()
        .filter(|r| r["type"] == "session" && r["action"] == "start")
        .count();
    assert_eq!(starts, 1);
}
