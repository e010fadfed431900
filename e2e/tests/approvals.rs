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

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use warden_e2e::net::*;
use warden_e2e::*;

struct World {
    env: TestEnv,
    up: Upstreams,
    clients: Clients,
    daemon: Daemon,
}

impl World {
    fn new() -> Option<World> {
        let clients = require_clients()?;
        let env = TestEnv::new();
        let up = Upstreams::start(&env.root.join("pki"));
        let daemon = start_daemon_with_dns(&env, &up.dns);
        Some(World {
            env,
            up,
            clients,
            daemon,
        })
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
