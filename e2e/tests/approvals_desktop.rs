//! The desktop channel of approvals (docs/approvals.md, "Desktop
//! notifications"; tracker issue 11), end to end: a private `dbus-daemon`, a
//! notification server on it (`warden-fake-notifications`, which records
//! every call and clicks what the test says), the real daemon pointed at the
//! bus with `DBUS_SESSION_BUS_ADDRESS`, and curl in the sandbox held on a
//! connection to `127.0.0.2:PORT` (as in `approvals.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use warden_e2e::net::*;
use warden_e2e::*;

const DBUS_DAEMON: &str = "/usr/bin/dbus-daemon";
/// What the daemon logs once it can show approvals on the desktop.
const DESKTOP_ON: &str = "desktop notifications: on";

/// A private session bus: `dbus-daemon` with a configuration of its own (a
/// socket in the test's directory, and no service directories, so that
/// nothing installed on the machine is started on it).
struct Bus {
    child: Child,
    address: String,
}

impl Bus {
    fn start(env: &TestEnv, name: &str) -> Option<Bus> {
        if !Path::new(DBUS_DAEMON).is_file() {
            if std::env::var_os("WARDEN_REQUIRE_DEPS").is_some_and(|v| v == "1") {
                panic!("{DBUS_DAEMON} missing (install dbus-daemon); WARDEN_REQUIRE_DEPS=1");
            }
            println!("skipping: {DBUS_DAEMON} missing (install dbus-daemon)");
            return None;
        }
        let socket = env.root.join(format!("{name}.sock"));
        let config = env.write(
            &format!("{name}.conf"),
            format!(
                "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n \
                 \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n\
                 <busconfig>\n  <type>session</type>\n  <listen>unix:path={}</listen>\n  \
                 <auth>EXTERNAL</auth>\n  <policy context=\"default\">\n    \
                 <allow send_destination=\"*\" eavesdrop=\"true\"/>\n    \
                 <allow eavesdrop=\"true\"/>\n    <allow own=\"*\"/>\n  </policy>\n</busconfig>\n",
                socket.display()
            ),
        );
        let log = std::fs::File::create(env.root.join(format!("{name}.log"))).unwrap();
        let mut child = Command::new(DBUS_DAEMON)
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn dbus-daemon");
        // It prints its address once it listens.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let address = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("dbus-daemon printed no address")
            .trim()
            .to_string();
        assert!(address.starts_with("unix:path="), "{address}");
        Some(Bus { child, address })
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `warden-fake-notifications serve` on a bus.
struct Notifications {
    child: Child,
    dir: PathBuf,
}

impl Notifications {
    fn start(env: &TestEnv, bus: &Bus) -> Notifications {
        let dir = env.mkdir("notifications");
        let child = Command::new(bin("warden-fake-notifications"))
            .arg("serve")
            .arg(&bus.address)
            .arg(&dir)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn the notification server");
        let n = Notifications { child, dir };
        n.wait_for("owning the name", || {
            n.dir.join("ready").exists().then_some(())
        });
        n
    }

    /// Every call so far.
    fn calls(&self) -> Vec<Value> {
        std::fs::read(self.dir.join("calls.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Vec<Value>>(&b).ok())
            .unwrap_or_default()
    }

    fn calls_of(&self, call: &str) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|c| c["call"] == call)
            .collect()
    }

    #[track_caller]
    fn wait_for<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(t) = f() {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "the notification server saw no {what}; its calls: {:?}",
                self.calls()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The `n`th `Notify` call (from 1).
    fn wait_notify(&self, n: usize) -> Value {
        self.wait_for(&format!("Notify #{n}"), || {
            self.calls_of("Notify").into_iter().nth(n - 1)
        })
    }

    fn wait_close(&self, id: u64) -> Value {
        self.wait_for(&format!("CloseNotification({id})"), || {
            self.calls_of("CloseNotification")
                .into_iter()
                .find(|c| c["id"] == id)
        })
    }

    fn command(&self, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("control"))
            .unwrap();
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
        let command = line.to_string();
        self.wait_for(&format!("command {line:?} done"), || {
            self.calls_of("(control)")
                .into_iter()
                .find(|c| c["command"] == command.as_str())
        });
    }

    /// A person clicks the action `key` of notification `id`.
    fn click(&self, id: u64, key: &str) {
        self.command(&format!("click {id} {key}"));
    }
}

impl Drop for Notifications {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Fields drop in order: the daemon first, the test's directory last.
struct World {
    daemon: Daemon,
    notes: Option<Notifications>,
    bus: Option<Bus>,
    up: Upstreams,
    clients: Clients,
    env: TestEnv,
}

impl World {
    /// A bus with the notification server on it, and a daemon told of the bus.
    fn new() -> Option<World> {
        let clients = require_clients()?;
        let env = TestEnv::new();
        let bus = Bus::start(&env, "bus")?;
        let notes = Notifications::start(&env, &bus);
        let up = Upstreams::start(&env.root.join("pki"));
        let daemon = start_daemon(&env, &up, &bus.address);
        let w = World {
            daemon,
            notes: Some(notes),
            bus: Some(bus),
            up,
            clients,
            env,
        };
        w.wait_log(DESKTOP_ON);
        Some(w)
    }

    fn notes(&self) -> &Notifications {
        self.notes.as_ref().unwrap()
    }

    fn target(&self) -> String {
        format!("127.0.0.2:{}", self.up.http.port())
    }

    fn policy(&self, name: &str) -> PathBuf {
        self.env.policy(
            &format!("{name}.yaml"),
            &format!(
                "version: 1\nname: desk-{name}\nnetwork:\n  allow: [\"allowed.test:{} private\"]\n\
                 limits:\n  timeout_s: 110\n",
                self.up.http.port()
            ),
        )
    }

    /// `curl` of `http://TARGET/hello` `n` times in a row inside the sandbox
    /// (one HTTP status a line), with `--approve` and `shim` flags.
    fn curls(&self, policy: &Path, n: usize, shim: &[&str]) -> Child {
        let curl = self.clients.curl.display().to_string();
        let line = format!(
            "{curl} -s -o /dev/null -w '%{{http_code}}\\n' --max-time 100 http://{}/hello\n",
            self.target()
        );
        let mut args: Vec<OsString> = vec!["--approve".into()];
        args.extend(shim.iter().map(OsString::from));
        args.extend(["--policy".into(), policy.into(), "--".into()]);
        args.extend(["/bin/sh".into(), "-c".into(), line.repeat(n).into()]);
        let mut cmd = self.env.shim(args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().expect("spawn the shim")
    }

    fn pending(&self) -> Vec<Value> {
        approvals::pending(&self.env)
    }

    /// The one pending approval, once there is one.
    fn wait_pending(&self) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(p) = self.pending().into_iter().next() {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "nothing pending; daemon log:\n{}",
                self.daemon.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    #[track_caller]
    fn answer_ok(&self, id: &str, scope: &str) {
        approvals::answer_ok(&self.env, id, scope);
    }

    #[track_caller]
    fn wait_log(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.daemon.log().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "the daemon never logged {needle:?}; its log:\n{}",
                self.daemon.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn approval_records(&self, action: &str, n: usize) -> Vec<Value> {
        approvals::approval_records(&self.env, action, n)
    }
}

fn start_daemon(env: &TestEnv, up: &Upstreams, bus_address: &str) -> Daemon {
    let dns = up.dns.addr().to_string();
    env.start_daemon_with(
        &["--dns", &dns],
        &[("DBUS_SESSION_BUS_ADDRESS", bus_address)],
    )
}

/// The shim's output once it is done.
fn wait_done(mut child: Child) -> Output {
    if wait_timeout(&mut child, Duration::from_secs(110)).is_none() {
        let _ = child.kill();
    }
    child.wait_with_output().unwrap()
}

/// The shim's stdout; it must have exited 0.
#[track_caller]
fn finish(child: Child) -> String {
    let out = wait_done(child);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(exit_code(out.status), 0, "{stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn allow_once_on_the_desktop_lets_the_held_connection_through() {
    let Some(w) = World::new() else { return };
    let child = w.curls(&w.policy("once"), 1, &["--approve-timeout", "90s"]);
    let p = w.wait_pending();
    let id = p["id"].as_str().unwrap();
    let session = p["session"].as_str().unwrap();

    // What the desktop shows.
    let n = w.notes().wait_notify(1);
    assert_eq!(n["app_name"], "Warden", "{n}");
    assert_eq!(
        n["summary"],
        format!("desk-once wants {}", w.target()),
        "{n}"
    );
    let body = n["body"].as_str().unwrap();
    assert!(body.contains(id) && body.contains(session), "{body}");
    assert_eq!(
        n["actions"],
        serde_json::json!([
            "once",
            "Allow once",
            "session",
            "Allow for session",
            "deny",
            "Deny"
        ]),
        "no `always` on the desktop: {n}"
    );
    assert_eq!(n["urgency"], 2, "critical: {n}");
    let expire = n["expire_timeout"].as_i64().unwrap();
    assert!(expire > 0 && expire <= 90_000, "{n}");
    assert!(w.up.http.requests_to(IP_SECOND).is_empty());

    // A click on "Allow once": the held connection goes through.
    w.notes().click(n["id"].as_u64().unwrap(), "once");
    let stdout = finish(child);
    assert_eq!(stdout, "200\n");
    assert_eq!(w.up.http.requests_to(IP_SECOND).len(), 1);

    let requests = w.approval_records("request", 1);
    assert_eq!(
        requests[0]["details"]["channels"],
        serde_json::json!(["desktop"])
    );
    let answers = w.approval_records("answer", 1);
    assert_eq!(answers.len(), 1, "{answers:?}");
    let a = &answers[0]["details"];
    assert_eq!(a["id"], id);
    assert_eq!(a["channel"], "desktop", "{a}");
    assert_eq!(a["scope"], "once", "{a}");
    assert_eq!(a["by"], "desktop notification", "{a}");
    assert!(w.pending().is_empty());
}

#[test]
fn deny_on_the_desktop_gives_the_normal_refusal() {
    let Some(w) = World::new() else { return };
    // Two connections: the first is denied on the desktop, the second then
    // refused without asking (denied for the session).
    let child = w.curls(&w.policy("deny"), 2, &[]);
    let n = w.notes().wait_notify(1);
    w.notes().click(n["id"].as_u64().unwrap(), "deny");
    let stdout = finish(child);
    assert_eq!(stdout, "403\n403\n");
    assert!(w.up.http.requests_to(IP_SECOND).is_empty());
    let answers = w.approval_records("answer", 1);
    assert_eq!(answers[0]["decision"], "deny");
    assert_eq!(answers[0]["details"]["channel"], "desktop");
    assert_eq!(answers[0]["details"]["scope"], "deny");
    assert_eq!(w.approval_records("refuse", 1).len(), 1);
    assert_eq!(w.notes().calls_of("Notify").len(), 1);
}

#[test]
fn answered_elsewhere_the_notification_is_withdrawn() {
    let Some(mut w) = World::new() else { return };
    let policy = w.policy("elsewhere");
    let child = w.curls(&policy, 1, &[]);
    let p = w.wait_pending();
    let n = w.notes().wait_notify(1);
    let nid = n["id"].as_u64().unwrap();
    w.answer_ok(p["id"].as_str().unwrap(), "once");
    let stdout = finish(child);
    assert_eq!(stdout, "200\n");
    // Withdrawn, by the daemon's own connection (the one that showed it).
    let close = w.notes().wait_close(nid);
    assert_eq!(close["was_open"], true, "{close}");
    assert_eq!(close["sender"], n["sender"], "{close}");
    let answers = w.approval_records("answer", 1);
    assert_eq!(answers[0]["details"]["channel"], "cli");

    // A daemon that stops denies what is pending and withdraws it too.
    let child = w.curls(&policy, 1, &[]);
    let n = w.notes().wait_notify(2);
    w.daemon.stop(Duration::from_secs(15));
    wait_done(child);
    w.notes().wait_close(n["id"].as_u64().unwrap());
    let expired = w.approval_records("expire", 1);
    assert_eq!(expired[0]["details"]["cause"], "daemon-stopped");
}

#[test]
fn a_forged_click_from_another_bus_client_answers_nothing() {
    let Some(w) = World::new() else { return };
    let child = w.curls(&w.policy("forged"), 1, &[]);
    let p = w.wait_pending();
    let id = p["id"].as_str().unwrap();
    let n = w.notes().wait_notify(1);
    let nid = n["id"].as_u64().unwrap();

    // Another client of the same bus emits the very signal a click makes.
    let bus = &w.bus.as_ref().unwrap().address;
    let out = run(
        Command::new(bin("warden-fake-notifications")).args([
            "forge",
            bus,
            &nid.to_string(),
            "once",
        ]),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let forger = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(forger.starts_with(':') && n["sender"] != forger.as_str());
    // The daemon has read it once it says it ignored it (or, without the
    // check, once it answered).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !w.daemon.log().contains("not the notification server")
        && audit_records(&w.env)
            .iter()
            .all(|r| r["action"] != "answer")
    {
        assert!(Instant::now() < deadline, "daemon log:\n{}", w.daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }

    // Nothing was answered: still pending, the upstream saw nothing.
    let pending = w.pending();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["id"], id);
    assert!(w.up.http.requests_to(IP_SECOND).is_empty());
    assert!(w.approval_records("answer", 0).is_empty());

    w.answer_ok(id, "deny");
    let stdout = finish(child);
    assert_eq!(stdout, "403\n");
    let answers = w.approval_records("answer", 1);
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["details"]["channel"], "cli");
}

#[test]
fn a_dismissed_notification_is_no_answer() {
    let Some(w) = World::new() else { return };
    let child = w.curls(&w.policy("dismissed"), 1, &["--approve-timeout", "20s"]);
    let p = w.wait_pending();
    let n = w.notes().wait_notify(1);
    w.notes().command(&format!("dismiss {}", n["id"]));
    w.wait_log("closed without an answer");
    assert_eq!(w.pending()[0]["id"], p["id"]);
    // Nobody answers: the timeout denies.
    let stdout = finish(child);
    assert_eq!(stdout, "403\n");
    let expired = w.approval_records("expire", 1);
    assert_eq!(expired[0]["details"]["cause"], "timeout");
    assert!(w.approval_records("answer", 0).is_empty());
}

#[test]
fn without_a_bus_or_a_server_approvals_still_work_and_a_later_server_is_used() {
    let Some(clients) = require_clients() else {
        return;
    };
    let env = TestEnv::new();
    let up = Upstreams::start(&env.root.join("pki"));
    // No bus at all: the variable names a socket that does not exist.
    let missing = format!("unix:path={}", env.root.join("no-such-bus").display());
    let daemon = start_daemon(&env, &up, &missing);
    let mut w = World {
        daemon,
        notes: None,
        bus: None,
        up,
        clients,
        env,
    };
    w.wait_log("no desktop notifications: cannot connect to the session bus");
    let policy = w.policy("nobus");
    let child = w.curls(&policy, 1, &[]);
    let p = w.wait_pending();
    w.answer_ok(p["id"].as_str().unwrap(), "once");
    let stdout = finish(child);
    assert_eq!(stdout, "200\n");
    let requests = w.approval_records("request", 1);
    assert_eq!(requests[0]["details"]["channels"], serde_json::json!([]));

    // A bus without a notification server: connected, but nothing offered.
    w.daemon.stop(Duration::from_secs(15));
    let Some(bus) = Bus::start(&w.env, "quiet") else {
        return;
    };
    w.daemon = start_daemon(&w.env, &w.up, &bus.address);
    w.bus = Some(bus);
    w.wait_log("desktop notifications: off");
    let child = w.curls(&policy, 1, &[]);
    let p = w.wait_pending();
    let requests = w.approval_records("request", 2);
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(requests[1]["details"]["channels"], serde_json::json!([]));

    // A notification server that comes later is used: the approval still
    // pending is shown there and answered with a click.
    let notes = Notifications::start(&w.env, w.bus.as_ref().unwrap());
    let n = notes.wait_notify(1);
    assert!(
        n["body"]
            .as_str()
            .unwrap()
            .contains(p["id"].as_str().unwrap()),
        "{n}"
    );
    notes.click(n["id"].as_u64().unwrap(), "deny");
    w.notes = Some(notes);
    let stdout = finish(child);
    assert_eq!(stdout, "403\n");
    let answers = w.approval_records("answer", 2);
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[1]["details"]["channel"], "desktop");
}
