//! The delegated cgroup v2 subtree (DESIGN.md §5 "Limits"): a daemon started
//! inside a cgroup it owns takes it over (moves itself into `<own>/wardend`),
//! puts every session's sandbox into `<own>/session-<id>` before any namespace
//! exists, and removes that cgroup when the session ends.
//!
//! What can be shown here: the subtree handling, with a cgroup this test makes
//! in the machine's cgroup v2 hierarchy (root only). The controllers
//! (memory.max, pids.max, cpu.max) cannot be: this machine's v2 hierarchy
//! offers none, so their enforcement is only unit-tested (the files written).
//! The daemon is started through `sh`, which joins the test cgroup and then
//! execs `wardend`, so the daemon is born alone in it (a cgroup shared with
//! other processes is never taken over).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use warden_e2e::*;

fn v2_mount() -> Option<PathBuf> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mi.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2")
            .then(|| pre.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })
}

fn own_cgroup(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
        .unwrap_or_default()
}

/// `wardend` for `env`, born in the cgroup `dir`; returns once it serves.
fn daemon_in(env: &TestEnv, dir: &Path) -> std::process::Child {
    let socket = env.socket.clone();
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    std::fs::set_permissions(
        socket.parent().unwrap(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let log = std::fs::File::create(env.root.join("wardend-cg.log")).unwrap();
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"echo 0 > "$1/cgroup.procs" && exec "$2" --socket "$3" --state-dir "$4" --dangerously-run-servers-as-root"#)
        .arg("sh")
        .arg(dir)
        .arg(bin("wardend"))
        .arg(&socket)
        .arg(&env.state)
        .envs(env.env_vars())
        .env_remove("WARDEN_SOCKET")
        .env_remove("NOTIFY_SOCKET")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("starting wardend");
    // Ready when it answers `status`: the socket is bound (and connectable)
    // before the daemon has set up its cgroup; requests are served after.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !run(&mut env.ctl(["status"]), Duration::from_secs(5))
        .status
        .success()
    {
        if let Some(st) = child.try_wait().unwrap() {
            panic!(
                "wardend exited with {st}: {}",
                std::fs::read_to_string(env.root.join("wardend-cg.log")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "wardend did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn sessions_run_in_their_own_cgroup_of_the_delegated_subtree() {
    let Some(mount) = v2_mount() else {
        eprintln!("skipping: no cgroup v2 hierarchy mounted");
        return;
    };
    let before = own_cgroup(std::process::id() as i32);
    let name = unique_marker("warden-cg");
    let test_cg = mount.join(&name);
    if let Err(e) = std::fs::create_dir(&test_cg) {
        // Unprivileged here: the hierarchy is root's and nothing is delegated.
        eprintln!(
            "skipping: cannot create a cgroup under {} ({e}); needs root or a delegated subtree",
            mount.display()
        );
        return;
    }
    let _ = before;
    let result = std::panic::catch_unwind(|| {
        let env = TestEnv::new();
        let mut daemon = daemon_in(&env, &test_cg);
        assert_eq!(
            own_cgroup(daemon.id() as i32),
            format!("/{name}/wardend"),
            "the daemon moved itself into a leaf"
        );
        let status = env.ctl_json(&["status"]);
        let feature = status["features"]
            .as_array()
            .and_then(|f| f.iter().find(|x| x["name"] == "cgroup_v2_delegation"))
            .cloned()
            .unwrap_or_else(|| panic!("no cgroup feature: {status}"));
        assert_eq!(feature["available"], json!(true), "{feature}");
        assert!(
            feature["detail"]
                .as_str()
                .unwrap_or("")
                .contains("delegated"),
            "{feature}"
        );

        let marker = unique_marker("cg-server");
        let policy = env.minimal_policy();
        let mut c = env.fixture_session(&policy, &["--name", "e2e-cg"], &["--marker", &marker]);
        c.initialize();
        let id = env
            .sessions()
            .into_iter()
            .find(|s| s["name"] == "e2e-cg")
            .and_then(|s| s["id"].as_str().map(str::to_owned))
            .expect("session listed");
        let session_cg = format!("/{name}/session-{id}");
        // The shim's own command line carries the marker too: only the server.
        let pids: Vec<i32> = pids_with_marker(&marker)
            .into_iter()
            .filter(|p| !cmdline_of(*p).contains("warden-shim"))
            .collect();
        assert!(!pids.is_empty(), "server not found");
        for pid in &pids {
            assert_eq!(own_cgroup(*pid), session_cg, "pid {pid}");
        }
        assert!(test_cg.join(format!("session-{id}")).is_dir());
        assert_eq!(
            c.tool_text("echo", json!({"text": "in a cgroup"})),
            "in a cgroup"
        );
        c.close_stdin();
        assert_eq!(c.wait_code(Duration::from_secs(30)), 0, "{}", c.stderr());
        // The session's cgroup goes once its processes are gone.
        let deadline = Instant::now() + Duration::from_secs(10);
        while test_cg.join(format!("session-{id}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !test_cg.join(format!("session-{id}")).exists(),
            "session cgroup left behind"
        );
        let _ = send_signal(daemon.id() as i32, 15);
        let _ = daemon.wait();

        // Control: the same, but the cgroup also holds another process (as a
        // terminal's scope would): the daemon leaves it alone.
        let shared = test_cg.join("shared");
        std::fs::create_dir(&shared).unwrap();
        let mut other = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"echo 0 > "$1/cgroup.procs" && exec sleep 60"#)
            .arg("sh")
            .arg(&shared)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while own_cgroup(other.id() as i32) != format!("/{name}/shared") {
            assert!(Instant::now() < deadline, "sleeper did not join");
            std::thread::sleep(Duration::from_millis(10));
        }
        let env2 = TestEnv::new();
        let mut daemon2 = daemon_in(&env2, &shared);
        assert_eq!(own_cgroup(daemon2.id() as i32), format!("/{name}/shared"));
        let status = env2.ctl_json(&["status"]);
        let feature = status["features"]
            .as_array()
            .and_then(|f| f.iter().find(|x| x["name"] == "cgroup_v2_delegation"))
            .cloned()
            .unwrap();
        assert_eq!(feature["available"], json!(false), "{feature}");
        assert!(
            feature["detail"]
                .as_str()
                .unwrap_or("")
                .contains("shared with other processes"),
            "{feature}"
        );
        assert!(!shared.join("wardend").exists());
        let _ = send_signal(daemon2.id() as i32, 15);
        let _ = daemon2.wait();
        let _ = other.kill();
        let _ = other.wait();
    });
    // Remove what is left (the daemon's leaf, then the test cgroup) once empty.
    let deadline = Instant::now() + Duration::from_secs(10);
    for dir in [
        test_cg.join("wardend"),
        test_cg.join("shared"),
        test_cg.clone(),
    ] {
        while dir.exists() && std::fs::remove_dir(&dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}
