//! The Docker backend (`backend: docker`, `warden-shim --backend docker`,
//! docs/backends.md "Docker"), end to end: the real daemon, shim and CLI,
//! the real `docker` command and engine, and containers of the local test
//! image (`scripts/docker-test-image`: busybox applets, glibc, libstdc++;
//! `WARDEN_TEST_DOCKER_IMAGE`), into which a host Node is bind-mounted through
//! a read grant.
//!
//! Each restriction is shown from inside the container with a probe that
//! works when the restriction is absent: the same probe on the host, the same
//! probe against a grant, or the same program under a looser policy.
//!
//! Without `WARDEN_TEST_DOCKER_IMAGE` (or an engine that has it) every test
//! says `skipping:` and passes, unless `WARDEN_REQUIRE_DOCKER=1` (CI), with
//! which it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_e2e::net::HttpServer;
use warden_e2e::*;

/// Bound on one shim run (catches hangs; the runs take a second or two).
const RUN: Duration = Duration::from_secs(120);
/// Bound on the daemon's cleanup of a container after a session ended.
const CLEANUP_WAIT: Duration = Duration::from_secs(15);

/// Names of every container (running or not) labelled with session `id`.
fn containers(id: &str) -> Vec<String> {
    let out = run(
        Command::new("docker").args([
            "ps",
            "-a",
            "--filter",
            &format!("label=warden.session={id}"),
            "--format",
            "{{.Names}}",
        ]),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "docker ps failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// `docker inspect --format FORMAT NAME`, trimmed.
fn inspect(name: &str, format: &str) -> String {
    let out = run(
        Command::new("docker").args(["inspect", "--format", format, name]),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "docker inspect {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Polls until session `id` has no container, or [`CLEANUP_WAIT`] passes;
/// returns what is left (empty on success). A wait, not a timed assertion.
fn wait_no_containers(id: &str) -> Vec<String> {
    let deadline = Instant::now() + CLEANUP_WAIT;
    loop {
        let left = containers(id);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A daemon for the Docker tests, and the image.
struct World {
    // Dropped before the env: the daemon stops while its directories exist.
    daemon: Daemon,
    env: TestEnv,
    image: String,
}

impl World {
    fn new() -> Option<World> {
        Self::with_daemon_env(&[])
    }

    fn with_daemon_env(extra: &[(&str, &str)]) -> Option<World> {
        let image = docker_test_image()?;
        let env = TestEnv::new();
        let daemon = env.start_daemon_with_env(extra);
        Some(World { daemon, env, image })
    }

    /// A policy running on Docker with the test image: `backend: docker`,
    /// `docker.image`, then `body` (top-level YAML keys).
    fn policy(&self, name: &str, body: &str) -> PathBuf {
        self.env.policy(
            &format!("{name}.yaml"),
            &format!(
                "version: 1\nname: e2e-docker-{name}\nbackend: docker\ndocker:\n  image: {:?}\n{body}",
                self.image
            ),
        )
    }

    /// `warden-shim --policy P SHIM_FLAGS... -- ARGV...` as a command.
    fn shim(&self, policy: &Path, shim_flags: &[&str], argv: &[&str]) -> Command {
        let mut args: Vec<OsString> = vec!["--policy".into(), policy.into()];
        args.extend(shim_flags.iter().map(OsString::from));
        args.push("--".into());
        args.extend(argv.iter().map(OsString::from));
        self.env.shim(args)
    }

    /// Runs `sh -c SCRIPT MARKER` (the image's `sh`) in a container to completion.
    fn sh(&self, policy: &Path, script: &str) -> Output {
        let marker = unique_marker("docker-sh");
        let out = run(
            &mut self.shim(policy, &[], &["/bin/sh", "-c", script, &marker]),
            RUN,
        );
        show(&out);
        out
    }

    /// The last `session.start` record (each test's daemon runs its own sessions).
    fn last_start(&self) -> Value {
        audit_records(&self.env)
            .into_iter()
            .rfind(|r| r["type"] == "session" && r["action"] == "start")
            .unwrap_or_else(|| panic!("no session.start: {:?}", audit_summary(&self.env)))
    }

    fn records(&self, kind: &str, action: &str) -> Vec<Value> {
        audit_records(&self.env)
            .into_iter()
            .filter(|r| r["type"] == kind && r["action"] == action)
            .collect()
    }

    /// Polls until session `id` has its `session.exit` record; returns it.
    fn wait_exit_record(&self, id: &str) -> Value {
        let deadline = Instant::now() + CLEANUP_WAIT;
        loop {
            if let Some(r) = session_records(&self.env, id)
                .into_iter()
                .find(|r| r["type"] == "session" && r["action"] == "exit")
            {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "no session.exit for {id}: {:?}\ndaemon log:\n{}",
                session_records(&self.env, id),
                self.daemon.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `wardenctl ps` lists exactly one session; returns it.
    fn wait_one_session(&self, c: &McpClient) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ps = self.env.sessions();
            if ps.len() == 1 {
                return ps[0].clone();
            }
            assert!(
                ps.is_empty() && Instant::now() < deadline,
                "expected one session: {ps:?}; shim stderr:\n{}\ndaemon log:\n{}",
                c.stderr(),
                self.daemon.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `WARDEN_REQUIRE_DEPS=1`: third-party parts must be there (scripts/test).
fn deps_required() -> bool {
    std::env::var_os("WARDEN_REQUIRE_DEPS").is_some_and(|v| v == "1")
}

fn show(out: &Output) {
    eprintln!(
        "exit {}\n--- stdout\n{}\n--- stderr\n{}",
        exit_code(out.status),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The `key=value` lines a probe script printed (`echo "key=$?"`).
fn results(stdout: &str) -> HashMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn result<'a>(r: &'a HashMap<String, String>, key: &str, stdout: &str) -> &'a str {
    r.get(key)
        .unwrap_or_else(|| panic!("the probe printed no {key}=: {stdout}"))
}

fn session_of(record: &Value) -> String {
    record["session"].as_str().expect("session id").to_string()
}

/// The host's `node`, canonical (a read grant shows that path in the container).
fn node_bin() -> Option<PathBuf> {
    match node() {
        Some(n) => Some(n.canonicalize().expect("canonicalize node")),
        None => {
            assert!(
                !deps_required(),
                "node is not on PATH; WARDEN_REQUIRE_DEPS=1"
            );
            eprintln!("skipping: node is not on PATH");
            None
        }
    }
}

// ---------------------------------------------------------------------------------
// Files

#[test]
fn files_outside_grants_are_absent_and_grants_are_what_they_say() {
    let Some(w) = World::new() else { return };
    let env = &w.env;
    let secret = env.write("secret/planted.txt", "CANARY-outside-the-grants\n");
    let secret_dir = secret.parent().unwrap().to_path_buf();
    let ro = env.mkdir("ro");
    let ro_file = env.write("ro/readme.txt", "read-only content\n");
    let rw = env.mkdir("rw");
    env.write("rw/from-host.txt", "written on the host\n");
    let probe_secret = format!(
        "cat '{s}'; echo \"cat-secret=$?\"\n\
         ls '{d}'; echo \"ls-secret-dir=$?\"\n",
        s = secret.display(),
        d = secret_dir.display(),
    );

    // Control: the same probe on the host reads the planted file.
    let out = run(
        Command::new("/bin/sh").args(["-c", &probe_secret]),
        Duration::from_secs(30),
    );
    let stdout = text(&out.stdout);
    let r = results(&stdout);
    assert_eq!(result(&r, "cat-secret", &stdout), "0", "{stdout}");
    assert_eq!(result(&r, "ls-secret-dir", &stdout), "0", "{stdout}");
    assert!(stdout.contains("CANARY"), "{stdout}");

    let policy = w.policy(
        "files",
        &format!(
            "filesystem:\n  read: [{:?}]\n  write: [{:?}]\n\
             sandbox:\n  best_effort_write_protection: true\nlimits:\n  timeout_s: 60\n",
            ro.display().to_string(),
            rw.display().to_string()
        ),
    );
    let script = format!(
        "{probe_secret}\
         for f in '{root}'/*; do echo \"root-entry=$f\"; done\n\
         cat '{ro_file}'; echo \"cat-ro=$?\"\n\
         echo overwritten > '{ro_file}'; echo \"write-ro=$?\"\n\
         echo new > '{ro}/new.txt'; echo \"create-ro=$?\"\n\
         cat '{rw}/from-host.txt'; echo \"cat-rw=$?\"\n\
         echo from-the-container > '{rw}/out.txt'; echo \"write-rw=$?\"\n",
        root = env.root.display(),
        ro_file = ro_file.display(),
        ro = ro.display(),
        rw = rw.display(),
    );
    let out = w.sh(&policy, &script);
    assert_eq!(exit_code(out.status), 0, "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let r = results(&stdout);
    // Outside the grants: absent.
    assert_ne!(result(&r, "cat-secret", &stdout), "0", "{stdout}");
    assert_ne!(result(&r, "ls-secret-dir", &stdout), "0", "{stdout}");
    assert!(!stdout.contains("CANARY"), "{stdout}");
    // The test's directory holds only the grants' paths (and the private
    // home): not the planted dir, not the daemon's state or runtime dirs.
    let entries: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("root-entry="))
        .collect();
    for gone in ["secret", "state", "runtime", "policies"] {
        let p = env.root.join(gone).display().to_string();
        assert!(!entries.contains(&p.as_str()), "{p} visible: {entries:?}");
    }
    let ro_entry = ro.display().to_string();
    assert!(entries.contains(&ro_entry.as_str()), "{entries:?}");
    // The read grant: readable, not writable, the host file unchanged.
    assert_eq!(result(&r, "cat-ro", &stdout), "0", "{stdout}");
    assert!(stdout.contains("read-only content"), "{stdout}");
    assert_ne!(result(&r, "write-ro", &stdout), "0", "{stdout}");
    assert_ne!(result(&r, "create-ro", &stdout), "0", "{stdout}");
    assert_eq!(
        std::fs::read_to_string(&ro_file).unwrap(),
        "read-only content\n"
    );
    assert!(!ro.join("new.txt").exists());
    // The write grant: readable and writable, and the host sees the write
    // (the control for the refused writes above: same shell, same redirect).
    assert_eq!(result(&r, "cat-rw", &stdout), "0", "{stdout}");
    assert!(stdout.contains("written on the host"), "{stdout}");
    assert_eq!(result(&r, "write-rw", &stdout), "0", "{stdout}");
    assert_eq!(
        std::fs::read_to_string(rw.join("out.txt")).unwrap(),
        "from-the-container\n"
    );

    // It ran in a container, and says what it protected less.
    let start = w.last_start();
    let sb = &start["details"]["sandbox"];
    assert_eq!(sb["backend"], "docker", "{sb}");
    assert_eq!(sb["best_effort_write_protection"], true, "{sb}");
    assert_eq!(sb["write_protection"]["mode"], "best effort", "{sb}");
}

#[test]
fn write_grants_need_best_effort_write_protection() {
    let Some(w) = World::new() else { return };
    let rw = w.env.mkdir("rw");
    let policy = w.policy(
        "rw-strict",
        &format!("filesystem:\n  write: [{:?}]\n", rw.display().to_string()),
    );
    let out = w.sh(&policy, &format!("echo ran > '{}/ran.txt'", rw.display()));
    let stderr = text(&out.stderr);
    assert_eq!(exit_code(out.status), EXIT_WARDEN_ERROR, "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let lines = warden_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("sandbox.best_effort_write_protection: true"),
        "{stderr}"
    );
    assert!(!rw.join("ran.txt").exists(), "the server ran");
}

// ---------------------------------------------------------------------------------
// Environment

#[test]
fn the_environment_is_filtered() {
    const SECRET: &str = "s3cret-token-value-e2e-docker";
    const DAEMON_SECRET: &str = "daemon-only-value-e2e-docker";
    let Some(w) = World::with_daemon_env(&[("DAEMON_ONLY", DAEMON_SECRET)]) else {
        return;
    };
    let env_of = |allow: &str| {
        let policy = w.policy(
            &format!("env-{}", allow.len()),
            &format!("env:\n  allow: {allow}\nlimits:\n  timeout_s: 60\n"),
        );
        let mut cmd = w.shim(&policy, &[], &["/bin/sh", "-c", "exec env"]);
        cmd.env("SECRET_TOKEN", SECRET)
            .env("ALLOWED", "visible-value");
        let out = run(&mut cmd, RUN);
        show(&out);
        assert_eq!(exit_code(out.status), 0, "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let stdout = env_of("[ALLOWED]");
    let vars: HashMap<&str, &str> = stdout.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(vars.get("ALLOWED"), Some(&"visible-value"), "{stdout}");
    assert!(!vars.contains_key("SECRET_TOKEN"), "{stdout}");
    assert!(!stdout.contains(SECRET), "{stdout}");
    assert!(!vars.contains_key("DAEMON_ONLY"), "{stdout}");
    assert!(!stdout.contains(DAEMON_SECRET), "{stdout}");
    for (name, want) in [
        ("HTTP_PROXY", "http://127.0.0.1:3128"),
        ("http_proxy", "http://127.0.0.1:3128"),
        ("HTTPS_PROXY", "http://127.0.0.1:3128"),
        ("https_proxy", "http://127.0.0.1:3128"),
    ] {
        assert_eq!(vars.get(name), Some(&want), "{name}: {stdout}");
    }
    let home = w.env.home.display().to_string();
    assert_eq!(vars.get("HOME"), Some(&home.as_str()), "{stdout}");
    let start = w.last_start();
    let names = start["details"]["env_names"].to_string();
    assert!(
        names.contains("ALLOWED") && !names.contains("SECRET_TOKEN"),
        "{start}"
    );

    // Control: allowing the name lets the same client value through.
    let stdout = env_of("[ALLOWED, SECRET_TOKEN]");
    assert!(
        stdout
            .lines()
            .any(|l| l == format!("SECRET_TOKEN={SECRET}")),
        "{stdout}"
    );
    // Values never reach the audit store, only names.
    let store = audit_records(&w.env)
        .iter()
        .map(Value::to_string)
        .collect::<String>();
    assert!(!store.contains(SECRET), "a value in the audit store");
}

// ---------------------------------------------------------------------------------
// Network

#[test]
fn egress_only_through_the_proxy_and_only_to_allowed_hosts() {
    let Some(w) = World::new() else { return };
    let origin = HttpServer::start("origin");
    let other = HttpServer::start("not-allowed");
    let (p, q) = (origin.port(), other.port());
    let policy = w.policy(
        "net",
        &format!("network:\n  allow: [\"127.0.0.1:{p}\"]\nlimits:\n  timeout_s: 90\n"),
    );
    let script = format!(
        "while read l; do echo \"netdev=$l\"; done < /proc/net/dev\n\
         while read l; do echo \"route=$l\"; done < /proc/net/route\n\
         wget -q -Y off -O - http://127.0.0.1:{p}/hello/direct; echo \"direct=$?\"\n\
         wget -q -O - http://127.0.0.1:{p}/hello/proxied; echo \"proxied=$?\"\n\
         wget -O - http://127.0.0.1:{q}/hello/denied; echo \"denied=$?\"\n"
    );
    let out = w.sh(&policy, &script);
    assert_eq!(exit_code(out.status), 0, "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    let r = results(&stdout);
    // --network none: only `lo`, no route anywhere; and the host's loopback
    // is not the container's.
    let interfaces: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("netdev="))
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .collect();
    assert_eq!(interfaces, ["lo"], "{stdout}");
    let routes = stdout.lines().filter(|l| l.starts_with("route=")).count();
    assert!(routes <= 1, "routes (beyond the header): {stdout}");
    assert_ne!(result(&r, "direct", &stdout), "0", "{stdout}");
    // Control: the same server, the same wget, through the proxy.
    assert_eq!(result(&r, "proxied", &stdout), "0", "{stdout}\n{stderr}");
    assert!(stdout.contains("path: /hello/proxied"), "{stdout}");
    // Not on the list: the proxy answers 403 and never connects.
    assert_ne!(result(&r, "denied", &stdout), "0", "{stdout}");
    assert!(stderr.contains("403"), "{stderr}");
    let targets: Vec<String> = origin.requests().iter().map(|r| r.target.clone()).collect();
    assert!(
        targets.len() == 1 && targets[0].ends_with("/hello/proxied"),
        "origin saw {targets:?}"
    );
    assert!(
        other.connections().is_empty(),
        "the denied host was reached: {:?}",
        other.connections()
    );

    let id = session_of(&w.last_start());
    w.wait_exit_record(&id);
    let connects: Vec<Value> = session_records(&w.env, &id)
        .into_iter()
        .filter(|r| r["type"] == "network" && r["action"] == "connect")
        .collect();
    let allowed = format!("127.0.0.1:{p}");
    let denied = format!("127.0.0.1:{q}");
    assert!(
        connects
            .iter()
            .any(|r| r["resource"] == allowed.as_str() && r["decision"] == "allow"),
        "no allowed connect to {allowed}: {connects:?}"
    );
    let deny = connects
        .iter()
        .find(|r| r["resource"] == denied.as_str())
        .unwrap_or_else(|| panic!("no record for {denied}: {connects:?}"));
    assert_eq!(deny["decision"], "deny", "{deny}");
    assert_eq!(deny["details"]["code"], "not-allowed", "{deny}");
}

// ---------------------------------------------------------------------------------
// Limits

#[test]
fn a_memory_hog_is_killed_by_the_containers_limit_and_recorded() {
    let Some(w) = World::new() else { return };
    let Some(node) = node_bin() else { return };
    let node_s = node.display().to_string();
    let policy = |name: &str, mb: u32| {
        w.policy(
            name,
            &format!(
                "filesystem:\n  read: [{node_s:?}]\nlimits:\n  memory_mb: {mb}\n  timeout_s: 90\n"
            ),
        )
    };
    // Control: node runs in the container and allocates 128 MiB under a
    // limit that fits.
    let roomy = policy("mem512", 512);
    let out = run(
        &mut w.shim(
            &roomy,
            &[],
            &[
                &node_s,
                "-e",
                "a=[];for(let i=0;i<128;i++)a.push(Buffer.alloc(1<<20,1));console.log('allocated',a.length)",
            ],
        ),
        RUN,
    );
    show(&out);
    assert_eq!(exit_code(out.status), 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "allocated 128\n");
    assert!(w.records("limit", "breach").is_empty());

    let tight = policy("mem32", 32);
    let out = run(
        &mut w.shim(
            &tight,
            &[],
            &[&node_s, "-e", "a=[];for(;;)a.push(Buffer.alloc(1<<20,1))"],
        ),
        RUN,
    );
    show(&out);
    let stderr = text(&out.stderr);
    assert_eq!(exit_code(out.status), EXIT_KILLED, "{stderr}");
    let id = session_of(&w.last_start());
    let breaches: Vec<Value> = session_records(&w.env, &id)
        .into_iter()
        .filter(|r| r["type"] == "limit" && r["action"] == "breach")
        .collect();
    assert_eq!(breaches.len(), 1, "{:?}", session_records(&w.env, &id));
    let b = &breaches[0];
    assert_eq!(b["decision"], "deny", "{b}");
    assert_eq!(b["resource"], "memory_mb", "{b}");
    assert_eq!(b["details"]["mechanism"], "docker", "{b}");
    assert_eq!(b["details"]["limit_bytes"], 32u64 << 20, "{b}");
    let exit = w.wait_exit_record(&id);
    assert_eq!(exit["reason"], "limits.memory_mb exceeded", "{exit}");
    assert!(wait_no_containers(&id).is_empty(), "container left");
}

/// Starts up to 100 background `sleep`s, printing each; `all-forked` if
/// every fork worked.
const FORKS: &str = "i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); echo \"started=$i\"; done; echo all-forked; exit 0";

#[test]
fn limits_pids_caps_the_containers_tasks() {
    let Some(w) = World::new() else { return };
    let policy = |name: &str, pids: u32| {
        w.policy(name, &format!("limits:\n  pids: {pids}\n  timeout_s: 90\n"))
    };
    let started = |out: &Output| -> u32 {
        text(&out.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("started="))
            .filter_map(|n| n.parse().ok())
            .max()
            .unwrap_or(0)
    };
    let out = w.sh(&policy("pids20", 20), FORKS);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    // The shell could not fork, said so and gave up: the session ended
    // (its exit is the shell's, not 0).
    assert!(stderr.contains("can't fork"), "{stderr}");
    assert!(!stdout.contains("all-forked"), "{stdout}");
    assert_ne!(exit_code(out.status), 0, "{stderr}");
    // At most 20 tasks: the init, the shell and fewer than 19 sleeps.
    let n = started(&out);
    assert!((1..=18).contains(&n), "{n} sleeps started under pids 20");
    let start = w.last_start();
    let limits = start["details"]["limits"].to_string();
    assert!(limits.contains("pids=20 (Docker --pids-limit)"), "{limits}");
    let id = session_of(&start);
    assert!(wait_no_containers(&id).is_empty(), "container left");

    // Control: with room for them, the same script starts all 100.
    let out = w.sh(&policy("pids200", 200), FORKS);
    assert!(
        text(&out.stdout).contains("all-forked"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(started(&out), 100);
    assert_eq!(exit_code(out.status), 0);
}

// ---------------------------------------------------------------------------------
// How sessions end

#[test]
fn a_timeout_ends_the_session_and_removes_the_container() {
    let Some(w) = World::new() else { return };
    let policy = w.policy("timeout", "limits:\n  timeout_s: 1\n");
    let out = w.sh(&policy, "sleep 1000");
    assert_eq!(exit_code(out.status), EXIT_TIMEOUT, "{}", text(&out.stderr));
    let id = session_of(&w.last_start());
    let left = wait_no_containers(&id);
    assert!(left.is_empty(), "left behind: {left:?}");
    let exit = w.wait_exit_record(&id);
    assert!(
        exit["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("timeout"),
        "{exit}"
    );
}

/// A running `sleep 1000` session (stdin kept open), its `wardenctl ps` row
/// and its container's name (listed by label while it runs: the control for
/// the "gone" checks).
fn sleeping(w: &World, name: &str) -> (McpClient, Value, String) {
    let policy = w.policy(name, "limits:\n  timeout_s: 300\n");
    let c = McpClient::spawn(w.shim(&policy, &[], &["/bin/sh", "-c", "exec sleep 1000"]));
    let session = w.wait_one_session(&c);
    let id = session["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id: {session}"))
        .to_string();
    assert_eq!(containers(&id), [format!("warden-{id}")]);
    (c, session, id)
}

#[test]
fn wardenctl_kill_ends_the_container() {
    let Some(w) = World::new() else { return };
    let (mut c, session, id) = sleeping(&w, "kill");
    assert_eq!(session["backend"], "docker", "{session}");
    // The container as the engine has it.
    let name = format!("warden-{id}");
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    for (format, want) in [
        ("{{.HostConfig.NetworkMode}}", "none".to_string()),
        ("{{.HostConfig.ReadonlyRootfs}}", "true".into()),
        ("{{json .HostConfig.CapDrop}}", "[\"ALL\"]".into()),
        ("{{.HostConfig.PidsLimit}}", "4096".into()),
        ("{{.HostConfig.LogConfig.Type}}", "none".into()),
        ("{{.HostConfig.Init}}", "true".into()),
        ("{{.Config.User}}", format!("{uid}:{gid}")),
        ("{{index .Config.Labels \"warden.session\"}}", id.clone()),
    ] {
        assert_eq!(inspect(&name, format), want, "{format}");
    }
    // no-new-privileges, and Warden's seccomp profile (the CLI sent the
    // content of the file the daemon wrote in its state directory).
    let opts: Vec<String> =
        serde_json::from_str(&inspect(&name, "{{json .HostConfig.SecurityOpt}}")).unwrap();
    assert_eq!(opts.len(), 2, "{opts:?}");
    assert_eq!(opts[0], "no-new-privileges");
    let profile: Value = serde_json::from_str(opts[1].strip_prefix("seccomp=").unwrap()).unwrap();
    let written: Vec<PathBuf> = std::fs::read_dir(w.env.state.join("docker"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("seccomp-")
        })
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let file: Value = serde_json::from_slice(&std::fs::read(&written[0]).unwrap()).unwrap();
    assert_eq!(profile, file);
    assert_eq!(profile["defaultAction"], "SCMP_ACT_ALLOW");
    let daemon_label = inspect(&name, "{{index .Config.Labels \"warden.daemon\"}}");
    assert!(
        daemon_label.starts_with(&format!("{uid}-")),
        "{daemon_label}"
    );
    let out = run(
        &mut w.env.ctl(["kill", id.as_str()]),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "wardenctl kill: {}",
        text(&out.stderr)
    );
    let code = c.wait_code(Duration::from_secs(60));
    assert!(
        code == 128 + 15 || code == EXIT_KILLED,
        "shim exited {code}; stderr:\n{}",
        c.stderr()
    );
    let left = wait_no_containers(&id);
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(
        session_records(&w.env, &id)
            .iter()
            .any(|r| r["type"] == "session" && r["action"] == "kill"),
        "no session.kill"
    );
    w.wait_exit_record(&id);
    assert!(w.env.sessions().is_empty());
}

#[test]
fn sigkill_of_the_shim_ends_the_container() {
    let Some(w) = World::new() else { return };
    let (mut c, _, id) = sleeping(&w, "sigkill");
    assert!(c.signal(libc::SIGKILL));
    assert_eq!(c.wait_code(Duration::from_secs(30)), EXIT_KILLED);
    let left = wait_no_containers(&id);
    assert!(
        left.is_empty(),
        "left behind: {left:?}\ndaemon log:\n{}",
        w.daemon.log()
    );
    w.wait_exit_record(&id);
}

#[test]
fn containers_a_dead_daemon_left_are_removed_by_its_next_start() {
    let Some(mut w) = World::new() else { return };
    let (mut c, _, id) = sleeping(&w, "stale");
    assert!(send_signal(w.daemon.pid(), libc::SIGKILL));
    w.daemon.stop(Duration::from_secs(10));
    c.wait_code(Duration::from_secs(30));
    // Nobody removed it: the daemon died first.
    assert_eq!(containers(&id), [format!("warden-{id}")]);
    w.daemon = w.env.start_daemon();
    let left = wait_no_containers(&id);
    assert!(
        left.is_empty(),
        "left behind: {left:?}\ndaemon log:\n{}",
        w.daemon.log()
    );
}

// ---------------------------------------------------------------------------------
// Exit codes and refusals

#[test]
fn exit_codes_come_back() {
    let Some(w) = World::new() else { return };
    let policy = w.policy("codes", "limits:\n  timeout_s: 60\n");
    let out = w.sh(&policy, "exit 7");
    assert_eq!(exit_code(out.status), 7, "{}", text(&out.stderr));
    assert!(warden_lines(&text(&out.stderr)).is_empty());
    let exit = w.wait_exit_record(&session_of(&w.last_start()));
    assert_eq!(exit["details"]["code"], 7, "{exit}");

    // A program the host has but the image does not (no grant shows it):
    // looked up in the container, not found, 127 with a message. By name on
    // the client's PATH, and by an absolute path.
    let fixture = fixture();
    let fixture_dir = fixture.parent().unwrap().display().to_string();
    let mut by_name = w.shim(&policy, &[], &["warden-fixture-mcp"]);
    by_name.env(
        "PATH",
        format!("{fixture_dir}:/usr/local/bin:/usr/bin:/bin"),
    );
    let mut by_path = w.shim(&policy, &[], &[fixture.to_str().unwrap()]);
    for cmd in [&mut by_name, &mut by_path] {
        let out = run(cmd, RUN);
        show(&out);
        let stderr = text(&out.stderr);
        assert_eq!(exit_code(out.status), 127, "{stderr}");
        assert!(stderr.contains("warden-fixture-mcp"), "{stderr}");
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    }
}

#[test]
fn a_missing_image_is_refused_and_never_pulled() {
    let Some(w) = World::new() else { return };
    let image = "warden-e2e-no-such-image:never";
    let policy = w.env.policy(
        "missing-image.yaml",
        &format!(
            "version: 1\nname: e2e-missing-image\nbackend: docker\ndocker:\n  image: {image}\n"
        ),
    );
    let marker = w.env.root.join("ran");
    let out = run(
        &mut w.shim(
            &policy,
            &[],
            &["/bin/sh", "-c", &format!("echo > '{}'", marker.display())],
        ),
        RUN,
    );
    show(&out);
    let stderr = text(&out.stderr);
    assert_eq!(exit_code(out.status), EXIT_WARDEN_ERROR, "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let lines = warden_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains(image), "{stderr}");
    assert!(lines[0].contains("never pulls"), "{stderr}");
    assert!(!marker.exists());
    // Still not there: nothing was pulled.
    let out = run(
        Command::new("docker").args(["image", "inspect", image]),
        Duration::from_secs(30),
    );
    assert!(!out.status.success(), "{image} exists now");

    // The image from the client's WARDEN_DOCKER_IMAGE: the same refusal.
    let policy = w.env.policy(
        "no-image-key.yaml",
        "version: 1\nname: e2e-image-env\nbackend: docker\n",
    );
    let mut cmd = w.shim(&policy, &[], &["/bin/sh", "-c", "exit 0"]);
    cmd.env("WARDEN_DOCKER_IMAGE", image);
    let out = run(&mut cmd, RUN);
    let stderr = text(&out.stderr);
    assert_eq!(exit_code(out.status), EXIT_WARDEN_ERROR, "{stderr}");
    let lines = warden_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains(image), "{stderr}");
    // Control: the client's variable naming the test image runs.
    let mut cmd = w.shim(&policy, &[], &["/bin/sh", "-c", "exit 5"]);
    cmd.env("WARDEN_DOCKER_IMAGE", &w.image);
    let out = run(&mut cmd, RUN);
    assert_eq!(exit_code(out.status), 5, "{}", text(&out.stderr));
}

#[test]
fn what_docker_cannot_enforce_is_refused() {
    let Some(w) = World::new() else { return };
    // approve: true with --backend docker (the policy names no backend).
    let approve = w.env.policy(
        "approve.yaml",
        &format!(
            "version: 1\nname: e2e-docker-approve\napprove: true\ndocker:\n  image: {:?}\n",
            w.image
        ),
    );
    let marker = w.env.root.join("ran");
    let touch = format!("echo > '{}'", marker.display());
    let refused = |policy: &Path, flags: &[&str], needle: &str| {
        let out = run(&mut w.shim(policy, flags, &["/bin/sh", "-c", &touch]), RUN);
        show(&out);
        let stderr = text(&out.stderr);
        assert_eq!(exit_code(out.status), EXIT_WARDEN_ERROR, "{stderr}");
        assert!(out.stdout.is_empty());
        let lines = warden_lines(&stderr);
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(lines[0].contains(needle), "`{needle}` not in {stderr}");
        assert!(lines[0].contains("Docker backend"), "{stderr}");
        assert!(!marker.exists(), "the server ran");
    };
    refused(&approve, &["--backend", "docker"], "approve: true");
    // The client's --approve too (without it held file opens would never be
    // asked about in a container).
    let plain = w.policy("plain-approve", "");
    refused(&plain, &["--approve"], "--approve");
    let transparent = w.policy(
        "transparent",
        "network:\n  mode: transparent\n  allow: [\"example.test:443\"]\n",
    );
    refused(&transparent, &[], "network.mode: transparent");
    let files = w.policy("files-audit", "audit:\n  files: all\n");
    refused(&files, &[], "audit.files");
    // Control: the approve policy runs on the native backend (it is the
    // backend that refuses, not the policy).
    let out = run(
        &mut w.shim(
            &approve,
            &["--backend", "linux"],
            &["/bin/sh", "-c", "exit 3"],
        ),
        RUN,
    );
    assert_eq!(exit_code(out.status), 3, "{}", text(&out.stderr));
}

// ---------------------------------------------------------------------------------
// Stdio and what is recorded

/// The Python SDK client: initialize, list the tools, echo the message read
/// from a file; writes the echoed text to another file and prints one JSON line.
const PY_CLIENT: &str = r#"
import json, sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

cfg = json.loads(sys.argv[1])

async def main():
    out = {}
    message = open(cfg["message_file"], encoding="utf-8").read()
    params = StdioServerParameters(command=cfg["command"], args=cfg["args"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = init.server_info.name
            out["tools"] = [t.name for t in (await session.list_tools()).tools]
            r = await session.call_tool("echo", {"message": message})
            out["is_error"] = bool(r.is_error)
            texts = [c.text for c in r.content if c.type == "text"]
            with open(cfg["echo_file"], "w", encoding="utf-8") as f:
                f.write(texts[0] if texts else "")
    print(json.dumps(out), flush=True)

anyio.run(main)
"#;

fn server_everything(deps: &Path) -> PathBuf {
    deps.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

#[test]
fn server_everything_with_the_python_sdk_byte_exact() {
    let Some(image) = docker_test_image() else {
        return;
    };
    let Some(deps) = require_test_deps() else {
        return;
    };
    let Some(node) = node_bin() else { return };
    let python = deps.join("venv/bin/python3");
    if !python.exists() {
        assert!(
            !deps_required(),
            "{} missing; WARDEN_REQUIRE_DEPS=1",
            python.display()
        );
        eprintln!("skipping: {} missing", python.display());
        return;
    }
    // The image from the daemon's WARDEN_DOCKER_IMAGE; the backend from the flag.
    let env = TestEnv::new();
    let daemon = env.start_daemon_with_env(&[("WARDEN_DOCKER_IMAGE", &image)]);
    let policy = env.policy(
        "everything.yaml",
        &format!(
            "version: 1\nname: e2e-docker-everything\nfilesystem:\n  read: [{:?}, {:?}]\nlimits:\n  timeout_s: 110\n",
            deps.display().to_string(),
            node.display().to_string()
        ),
    );
    let script = server_everything(&deps);
    let marker = unique_marker("docker-py-sdk");
    let message = format!("{marker} {}", big_pattern(1 << 20));
    let message_file = env.write("clients/message.txt", &message);
    let echo_file = env.root.join("clients/echoed.txt");
    let args: Vec<String> = [
        "--socket",
        env.socket.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
        "--backend",
        "docker",
        "--",
        node.to_str().unwrap(),
        script.to_str().unwrap(),
        "stdio",
        &marker,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let client = env.write("clients/client.py", PY_CLIENT);
    let config = json!({
        "command": bin("warden-shim"),
        "args": args,
        "message_file": message_file,
        "echo_file": echo_file,
    });
    let mut cmd = Command::new(&python);
    cmd.arg(&client)
        .arg(config.to_string())
        .env_clear()
        .envs(env.env_vars())
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
        )
        .current_dir(&env.root);
    let out = run(&mut cmd, RUN);
    show(&out);
    assert!(
        out.status.success(),
        "the python client failed; daemon log:\n{}",
        daemon.log()
    );
    let stdout = text(&out.stdout);
    let line = stdout.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    let result: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(result["server"], "mcp-servers/everything", "{result}");
    assert!(
        result["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "echo"),
        "{result}"
    );
    assert_eq!(result["is_error"], false, "{result}");
    let echoed = std::fs::read(&echo_file).unwrap();
    let want = format!("Echo: {message}");
    assert!(
        echoed == want.as_bytes(),
        "the echo differs: {} bytes back for {} sent",
        echoed.len(),
        want.len()
    );
    assert!(
        warden_lines(&text(&out.stderr)).is_empty(),
        "{}",
        text(&out.stderr)
    );
    let start = audit_records(&env)
        .into_iter()
        .find(|r| r["type"] == "session" && r["action"] == "start")
        .unwrap();
    assert_eq!(start["details"]["sandbox"]["backend"], "docker", "{start}");
    assert_eq!(
        start["details"]["sandbox"]["backend_requested"], "docker",
        "{start}"
    );
    assert_eq!(
        start["details"]["sandbox"]["docker"]["image"],
        image.as_str()
    );
}

#[test]
fn server_everything_stdout_is_only_the_servers_bytes() {
    let Some(w) = World::new() else { return };
    let Some(deps) = require_test_deps() else {
        return;
    };
    let Some(node) = node_bin() else { return };
    let policy = w.policy(
        "everything-raw",
        &format!(
            "filesystem:\n  read: [{:?}, {:?}]\nlimits:\n  timeout_s: 110\n",
            deps.display().to_string(),
            node.display().to_string()
        ),
    );
    let script = server_everything(&deps);
    let mut c = McpClient::spawn(w.shim(
        &policy,
        &[],
        &[node.to_str().unwrap(), script.to_str().unwrap(), "stdio"],
    ));
    c.set_timeout(Duration::from_secs(60));
    let init = c.initialize();
    assert_eq!(
        init["serverInfo"]["name"], "mcp-servers/everything",
        "{init}"
    );
    let tools = c.call("tools/list", json!({}));
    assert!(
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "echo"),
        "{tools}"
    );
    let big = big_pattern(1 << 20);
    let echoed = c.tool_text("echo", json!({"message": big}));
    assert!(
        echoed.len() == big.len() + 6 && echoed.starts_with("Echo: ") && echoed[6..] == big,
        "the 1 MiB echo differs ({} bytes back)",
        echoed.len()
    );
    c.close_stdin();
    let code = c.wait_code(Duration::from_secs(60));
    assert_eq!(code, 0, "{}", c.stderr());
    // Every byte on stdout is a JSON-RPC line the server wrote: nothing of
    // Docker's or Warden's.
    c.assert_stdout_only_jsonrpc();
    let raw = c.raw_stdout_bytes();
    assert!(raw.len() > 1 << 20, "{} bytes on stdout", raw.len());
    assert!(warden_lines(&c.stderr()).is_empty(), "{}", c.stderr());
}

#[test]
fn session_start_and_ps_say_docker() {
    let Some(w) = World::new() else { return };
    let policy = w.policy("facts", "limits:\n  timeout_s: 120\n");
    // `cat` runs until its stdin ends: a live session to look at, then a
    // clean end by the client's EOF.
    let mut c = McpClient::spawn(w.shim(&policy, &[], &["/bin/sh", "-c", "exec cat"]));
    let ps = w.wait_one_session(&c);
    let id = ps["id"].as_str().unwrap().to_string();
    assert_eq!(ps["backend"], "docker", "{ps}");
    let out = run(&mut w.env.ctl(["ps"]), Duration::from_secs(30));
    let table = text(&out.stdout);
    assert!(
        table.lines().nth(1).is_some_and(|l| l.contains(" docker ")),
        "{table}"
    );
    // The bytes go through the container and back.
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.raw_stdout_bytes().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        c.raw_stdout_bytes(),
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n"
    );
    c.close_stdin();
    assert_eq!(c.wait_code(Duration::from_secs(60)), 0, "{}", c.stderr());
    assert!(wait_no_containers(&id).is_empty(), "container left");

    let start = w.last_start();
    assert_eq!(session_of(&start), id);
    let sb = &start["details"]["sandbox"];
    assert_eq!(sb["backend"], "docker", "{sb}");
    assert_eq!(sb["backend_requested"], "docker", "{sb}");
    assert_eq!(sb["syscall_audit"], "unavailable", "{sb}");
    let d = &sb["docker"];
    assert_eq!(d["image"], w.image.as_str(), "{d}");
    assert_eq!(d["container"], format!("warden-{id}"), "{d}");
    assert!(d["engine"].as_str().is_some_and(|e| !e.is_empty()), "{d}");
    let options = d["options"].to_string();
    for o in [
        "--network none",
        "--cap-drop ALL",
        "--read-only",
        "--pull never",
    ] {
        assert!(options.contains(o), "`{o}` not in {options}");
    }
    let limits = start["details"]["limits"].to_string();
    assert!(
        limits.contains("pids=4096 (Docker --pids-limit)"),
        "{limits}"
    );
    let exit = w.wait_exit_record(&id);
    assert_eq!(exit["details"]["code"], 0, "{exit}");
}

// ---------------------------------------------------------------------------------
// Seccomp: the native sandbox's deny list

#[test]
fn setuid_and_setgid_bits_are_refused_in_write_grants_and_the_rest_works() {
    use std::os::unix::fs::PermissionsExt;
    let Some(w) = World::new() else { return };
    let Some(node) = node_bin() else { return };
    let node_s = node.display().to_string();
    let rw = w.env.mkdir("rw");
    let target = w.env.write("rw/target", "#!/bin/sh\n");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;

    // Control 1: on the host, outside any sandbox, the same chmod in the
    // same directory sets the bits.
    let control = w.env.write("rw/control", "x\n");
    let out = run(
        Command::new("/bin/sh").args(["-c", &format!("chmod u+s,g+s '{}'", control.display())]),
        Duration::from_secs(30),
    );
    assert_eq!(exit_code(out.status), 0, "{}", text(&out.stderr));
    assert_eq!(mode(&control) & 0o6000, 0o6000);
    std::fs::remove_file(&control).unwrap();
    // Control 2: the image under Docker's default seccomp profile lets the
    // container's user set them (what Warden's profile replaces).
    let uid = nix::unistd::getuid().as_raw();
    let out = run(
        Command::new("docker").args([
            "run",
            "--rm",
            "--pull",
            "never",
            "--network",
            "none",
            "--user",
            &format!("{uid}"),
            &w.image,
            "sh",
            "-c",
            "cd /tmp && touch f && chmod u+s f && ls -l f",
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(exit_code(out.status), 0, "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("-rwS"),
        "{}",
        text(&out.stdout)
    );

    let policy = w.policy(
        "setid",
        &format!(
            "filesystem:\n  read: [{node_s:?}]\n  write: [{:?}]\n\
             sandbox:\n  best_effort_write_protection: true\nlimits:\n  timeout_s: 90\n",
            rw.display().to_string()
        ),
    );
    let node_js = format!(
        "const fs=require('fs');const d={rw:?};\
         try{{fs.openSync(d+'/created','w',0o4755);console.log('open-setuid=0')}}catch(e){{console.log('open-setuid='+e.code)}}\
         fs.writeFileSync(d+'/node.txt','from node');fs.chmodSync(d+'/node.txt',0o700);console.log('node-write=0');\
         try{{fs.chmodSync(d+'/node.txt',0o2755);console.log('node-setgid=0')}}catch(e){{console.log('node-setgid='+e.code)}}",
        rw = rw.display().to_string(),
    );
    let script = format!(
        "cd '{rw}'\n\
         chmod u+s target; echo \"chmod-setuid=$?\"\n\
         chmod g+s target; echo \"chmod-setgid=$?\"\n\
         chmod 6755 target; echo \"chmod-6755=$?\"\n\
         chmod 755 target; echo \"chmod-755=$?\"\n\
         cd /tmp && touch t && chmod u+s t; echo \"chmod-setuid-tmp=$?\"; cd '{rw}'\n\
         unshare -U true; echo \"unshare-user=$?\"\n\
         echo plain > sh.txt; echo \"sh-write=$?\"\n\
         mkdir sub && echo in-sub > sub/f; echo \"mkdir=$?\"\n\
         ls / > /dev/null; echo \"ls=$?\"\n\
         '{node_s}' -e \"$NODE_JS\"; echo \"node=$?\"\n",
        rw = rw.display(),
    );
    let script = format!("NODE_JS='{}'\n{script}", node_js.replace('\'', "'\\''"));
    let out = w.sh(&policy, &script);
    assert_eq!(exit_code(out.status), 0, "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let r = results(&stdout);
    for refused in [
        "chmod-setuid",
        "chmod-setgid",
        "chmod-6755",
        "chmod-setuid-tmp",
        "unshare-user",
    ] {
        assert_ne!(result(&r, refused, &stdout), "0", "{refused}: {stdout}");
    }
    assert_eq!(result(&r, "open-setuid", &stdout), "EPERM", "{stdout}");
    assert_eq!(result(&r, "node-setgid", &stdout), "EPERM", "{stdout}");
    for ok in ["chmod-755", "sh-write", "mkdir", "ls", "node", "node-write"] {
        assert_eq!(result(&r, ok, &stdout), "0", "{ok}: {stdout}");
    }
    // The host's files: modes without the bits, the plain changes made.
    assert_eq!(mode(&target), 0o755);
    assert!(!rw.join("created").exists());
    assert_eq!(mode(&rw.join("node.txt")), 0o700);
    assert_eq!(
        std::fs::read_to_string(rw.join("node.txt")).unwrap(),
        "from node"
    );
    assert_eq!(
        std::fs::read_to_string(rw.join("sh.txt")).unwrap(),
        "plain\n"
    );
    assert_eq!(
        std::fs::read_to_string(rw.join("sub/f")).unwrap(),
        "in-sub\n"
    );
    for f in ["sh.txt", "sub", "sub/f"] {
        assert_eq!(mode(&rw.join(f)) & 0o6000, 0, "{f}");
    }
    let options = w.last_start()["details"]["sandbox"]["docker"]["options"].to_string();
    assert!(options.contains("Warden's seccomp deny list"), "{options}");
}
