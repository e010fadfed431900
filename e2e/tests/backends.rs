//! Sandbox backends (`backend:`, `warden-shim --backend`, docs/backends.md):
//! the one that runs a session is recorded in `session.start` and shown by
//! `wardenctl ps` and `status`; a backend this machine does not have is
//! refused with one `warden:` line (exit 125) and a `session.refused`
//! record; `auto` refuses, naming every backend and why, when none is
//! available: never a plain process.
//!
//! "Native unavailable" is made real, without root and without touching the
//! machine: the daemon (and its clients, which must share its namespaces)
//! runs in a user namespace whose parent allows no further one
//! (`user.max_user_namespaces` of that namespace is 1, used by the
//! daemon's own), so the kernel refuses the sandbox's user namespace with
//! ENOSPC exactly as on a host that turned them off.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use warden_e2e::*;

/// `warden-shim ARGS` against `env`'s daemon: exit code, stdout, stderr.
fn shim(env: &TestEnv, args: &[&str]) -> (i32, String, String) {
    let out = run(&mut env.shim(args), Duration::from_secs(60));
    (
        exit_code(out.status),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn of_type<'a>(recs: &'a [Value], kind: &str, action: &str) -> Vec<&'a Value> {
    recs.iter()
        .filter(|r| r["type"] == kind && r["action"] == action)
        .collect()
}

/// A refusal: exit 125, nothing on stdout, exactly one `warden:` line
/// holding every `needle`, and its `session.refused` record.
fn assert_refused(env: &TestEnv, (code, stdout, stderr): (i32, String, String), needles: &[&str]) {
    assert_eq!(code, 125, "{stderr}");
    assert!(
        stdout.is_empty(),
        "stdout must carry only the server's bytes: {stdout:?}"
    );
    let lines = warden_lines(&stderr);
    assert_eq!(lines.len(), 1, "one warden: line: {stderr}");
    for n in needles {
        assert!(lines[0].contains(n), "`{n}` not in {:?}", lines[0]);
    }
    let recs = audit_records(env);
    let refused = of_type(&recs, "session", "refused");
    assert!(
        refused.iter().any(|r| {
            let reason = r["reason"].as_str().unwrap_or_default();
            needles.iter().all(|n| reason.contains(n))
        }),
        "no session.refused naming {needles:?}: {refused:?}"
    );
}

#[test]
fn the_native_backend_runs_sessions_and_says_so() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let minimal = env.minimal_policy();
    let named = env.policy("linux.yaml", "version: 1\nname: on-linux\nbackend: linux\n");
    for (policy, flag, requested) in [
        (&minimal, None, "auto"),
        (&named, None, "linux"),
        (&minimal, Some("linux"), "linux"),
        (&named, Some("auto"), "auto"),
    ] {
        let mut args = vec!["--policy", policy.to_str().unwrap()];
        if let Some(b) = flag {
            args.extend(["--backend", b]);
        }
        args.extend(["--", "/bin/sh", "-c", "exit 3"]);
        let (code, _, stderr) = shim(&env, &args);
        assert_eq!(code, 3, "{args:?}: {stderr}");
        let recs = audit_records(&env);
        let start = of_type(&recs, "session", "start")
            .last()
            .cloned()
            .unwrap()
            .clone();
        let sandbox = &start["details"]["sandbox"];
        assert_eq!(sandbox["backend"], "linux", "{args:?}: {sandbox}");
        assert_eq!(
            sandbox["backend_requested"], requested,
            "{args:?}: {sandbox}"
        );
        assert_eq!(
            sandbox["backend_skipped"],
            serde_json::json!([]),
            "{sandbox}"
        );
    }

    // status: each backend and whether it can run sessions here.
    let status = env.ctl_json(&["status"]);
    let backends = status["backends"].as_array().unwrap();
    let names: Vec<&str> = backends
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["linux", "docker", "macos"], "{status}");
    assert_eq!(backends[0]["available"], true, "{status}");
    // Docker is available exactly when an engine answers this user.
    let engine = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert_eq!(backends[1]["available"], engine, "{status}");
    if engine {
        assert!(
            backends[1]["detail"]
                .as_str()
                .unwrap()
                .starts_with("Docker engine "),
            "{status}"
        );
    }
    assert!(backends[2]["detail"]
        .as_str()
        .unwrap()
        .contains("only on macOS"));

    // ps: the backend of a live session.
    let mut client = env.fixture_session(&minimal, &[], &[]);
    client.initialize();
    let ps = env.sessions();
    assert_eq!(ps.len(), 1, "{ps:?}");
    assert_eq!(ps[0]["backend"], "linux", "{ps:?}");
    assert_eq!(ps[0]["backend_skipped"], serde_json::json!([]), "{ps:?}");
    let out = run(&mut env.ctl(["ps"]), Duration::from_secs(30));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().next().unwrap().contains("BACKEND"), "{text}");
    assert!(text.lines().nth(1).unwrap().contains(" linux "), "{text}");
    client.close_stdin();
    client.wait_exit(Duration::from_secs(30));
}

/// A Docker endpoint where no engine listens.
fn no_engine(env: &TestEnv) -> String {
    format!(
        "unix://{}",
        env.root.join("no-docker-engine.sock").display()
    )
}

/// Why Docker is unavailable, as the daemon words it without an engine:
/// no CLI at all, or a CLI that reaches nothing.
const NO_DOCKER: [&str; 2] = [
    "no Docker engine answers",
    "the docker command is not installed",
];

#[test]
fn a_backend_this_machine_lacks_is_refused_naming_it() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon_with_env(&[("DOCKER_HOST", &no_engine(&env))]);
    let fixture = fixture().display().to_string();
    let minimal = env.minimal_policy().display().to_string();
    let call = |b: &str| {
        shim(
            &env,
            &[
                "--policy",
                &minimal,
                "--backend",
                b,
                "--",
                &fixture,
                "exit",
                "0",
            ],
        )
    };
    // Seatbelt is macOS's: never tried here, never replaced by another.
    assert_refused(
        &env,
        call("macos"),
        &["backend `macos` is not available here", "only on macOS"],
    );
    // Docker with no engine to reach: refused naming why, never the native
    // sandbox in its place.
    let docker = call("docker");
    let why = NO_DOCKER
        .into_iter()
        .find(|n| docker.2.contains(n))
        .unwrap_or(NO_DOCKER[0]);
    assert_refused(
        &env,
        docker,
        &["backend `docker` is not available here", why],
    );
    // A name the shim does not know: its own one-line error, before any daemon.
    let (code, stdout, stderr) = call("chroot");
    assert_eq!(code, 125, "{stderr}");
    assert!(stdout.is_empty());
    assert_eq!(warden_lines(&stderr).len(), 1, "{stderr}");
    assert!(stderr.contains("unknown backend `chroot`"), "{stderr}");
    // The policy key is checked like every other: line, column, the values.
    let bad = env.policy("bad.yaml", "version: 1\nbackend: vm\n");
    let (code, _, stderr) = shim(
        &env,
        &[
            "--policy",
            bad.to_str().unwrap(),
            "--",
            &fixture,
            "exit",
            "0",
        ],
    );
    assert_eq!(code, 125, "{stderr}");
    assert!(
        stderr.contains("2:10: backend: unknown backend `vm`"),
        "{stderr}"
    );
    // Nothing ran: no session.start at all.
    assert!(of_type(&audit_records(&env), "session", "start").is_empty());
}

/// Runs `script` (sh) in a user namespace whose parent namespace allows no
/// further one, as the calling uid and gid: the daemon and the clients it
/// starts there cannot make a sandbox's user namespace. `None` when this
/// machine cannot set that up (no `unshare --map-user`: util-linux < 2.38).
fn in_a_namespace_without_user_namespaces(env: &TestEnv, script: &str) -> Option<String> {
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let path = env.write("inner.sh", script);
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--user",
        "--map-root-user",
        "sh",
        "-c",
        &format!(
            "echo 1 > /proc/sys/user/max_user_namespaces && \
             exec unshare --user --map-user={uid} --map-group={gid} sh {}",
            path.display()
        ),
    ]);
    env.apply_env(&mut cmd);
    let out = run(&mut cmd, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("unrecognized option") {
        eprintln!("skipped: unshare has no --map-user (util-linux 2.38+): {stderr}");
        return None;
    }
    assert!(
        out.status.success(),
        "the namespace script failed: {stderr}"
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn auto_refuses_when_no_backend_is_available_and_never_runs_the_server_plainly() {
    let env = TestEnv::new();
    let marker = env.root.join("ran-unsandboxed");
    let socket = env.socket.clone();
    let dir = socket.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let q = |p: &std::path::Path| format!("'{}'", p.display());
    let script = format!(
        "set -u\n\
         DOCKER_HOST={no_engine} {wardend} --socket {socket} --state-dir {state} >{log} 2>&1 &\n\
         d=$!\n\
         i=0; while [ ! -S {socket} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done\n\
         {shim} --socket {socket} --no-autostart --policy {policy} -- /bin/sh -c 'touch {marker}' 2>{root}/auto.err; echo auto=$?\n\
         {shim} --socket {socket} --no-autostart --backend linux --policy {policy} -- /bin/sh -c 'touch {marker}' 2>{root}/linux.err; echo linux=$?\n\
         {ctl} --socket {socket} --json status >{root}/status.json; echo status=$?\n\
         kill $d; wait $d; cat {log} >&2\n",
        wardend = q(&bin("wardend")),
        shim = q(&bin("warden-shim")),
        ctl = q(&bin("wardenctl")),
        socket = q(&socket),
        state = q(&env.state),
        log = q(&env.root.join("ns-wardend.log")),
        policy = q(&env.minimal_policy()),
        marker = marker.display(),
        root = q(&env.root),
        no_engine = q(std::path::Path::new(&no_engine(&env))),
    );
    let Some(stdout) = in_a_namespace_without_user_namespaces(&env, &script) else {
        return;
    };
    let log = std::fs::read_to_string(env.root.join("ns-wardend.log")).unwrap_or_default();
    assert!(stdout.contains("auto=125"), "{stdout}\n{log}");
    assert!(stdout.contains("linux=125"), "{stdout}\n{log}");
    assert!(stdout.contains("status=0"), "{stdout}\n{log}");
    assert!(!marker.exists(), "the server ran without a sandbox");

    let auto = std::fs::read_to_string(env.root.join("auto.err")).unwrap();
    let lines = warden_lines(&auto);
    assert_eq!(lines.len(), 1, "{auto}");
    for n in [
        "no sandbox backend is available on Linux",
        "never runs a server unsandboxed",
        "linux: cannot make the sandbox's user namespace",
        "; docker: ",
    ] {
        assert!(lines[0].contains(n), "`{n}` not in {:?}", lines[0]);
    }
    assert!(
        NO_DOCKER.iter().any(|n| lines[0].contains(n)),
        "{:?}",
        lines[0]
    );
    let linux = std::fs::read_to_string(env.root.join("linux.err")).unwrap();
    let lines = warden_lines(&linux);
    assert_eq!(lines.len(), 1, "{linux}");
    assert!(
        lines[0].contains(
            "backend `linux` is not available here: cannot make the sandbox's user namespace"
        ),
        "{linux}"
    );

    let status: Value =
        serde_json::from_str(&std::fs::read_to_string(env.root.join("status.json")).unwrap())
            .unwrap();
    let linux = &status["backends"][0];
    assert_eq!(linux["name"], "linux", "{status}");
    assert_eq!(linux["available"], false, "{status}");
    assert!(
        linux["detail"]
            .as_str()
            .unwrap()
            .contains("wardenctl doctor"),
        "{status}"
    );

    // Both refusals are on record, and no session started.
    let recs = audit_records(&env);
    let refused = of_type(&recs, "session", "refused");
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(of_type(&recs, "session", "start").is_empty(), "{recs:?}");
}

#[test]
fn auto_falls_back_to_docker_when_the_native_sandbox_is_unavailable() {
    let Some(image) = docker_test_image() else {
        return;
    };
    let env = TestEnv::new();
    let socket = env.socket.clone();
    let dir = socket.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let q = |p: &std::path::Path| format!("'{}'", p.display());
    let script = format!(
        "set -u\n\
         WARDEN_DOCKER_IMAGE={image} {wardend} --socket {socket} --state-dir {state} >{log} 2>&1 &\n\
         d=$!\n\
         i=0; while [ ! -S {socket} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done\n\
         {shim} --socket {socket} --no-autostart --policy {policy} -- /bin/sh -c 'echo in-a-container; cat /proc/1/cgroup >&2; exit 4' 2>{root}/auto.err; echo auto=$?\n\
         {ctl} --socket {socket} --json status >{root}/status.json; echo status=$?\n\
         kill $d; wait $d\n",
        wardend = q(&bin("wardend")),
        shim = q(&bin("warden-shim")),
        ctl = q(&bin("wardenctl")),
        socket = q(&socket),
        state = q(&env.state),
        log = q(&env.root.join("ns-wardend.log")),
        policy = q(&env.minimal_policy()),
        root = q(&env.root),
    );
    let Some(stdout) = in_a_namespace_without_user_namespaces(&env, &script) else {
        return;
    };
    let log = std::fs::read_to_string(env.root.join("ns-wardend.log")).unwrap_or_default();
    let err = std::fs::read_to_string(env.root.join("auto.err")).unwrap_or_default();
    // The server ran, in a container, and its exit code came back.
    assert!(
        stdout.contains("in-a-container\nauto=4"),
        "{stdout}\n{err}\n{log}"
    );
    assert!(err.contains("docker"), "not in a Docker cgroup: {err}");
    assert!(warden_lines(&err).is_empty(), "{err}");

    let recs = audit_records(&env);
    let starts = of_type(&recs, "session", "start");
    assert_eq!(starts.len(), 1, "{recs:?}");
    let sb = &starts[0]["details"]["sandbox"];
    assert_eq!(sb["backend"], "docker", "{sb}");
    assert_eq!(sb["backend_requested"], "auto", "{sb}");
    assert_eq!(sb["backend_skipped"][0]["backend"], "linux", "{sb}");
    assert!(
        sb["backend_skipped"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("cannot make the sandbox's user namespace"),
        "{sb}"
    );
    assert_eq!(sb["docker"]["image"], image.as_str(), "{sb}");
    let id = starts[0]["session"].as_str().unwrap();
    assert_eq!(sb["docker"]["container"], format!("warden-{id}"), "{sb}");
    let exits = of_type(&recs, "session", "exit");
    assert_eq!(exits.len(), 1, "{recs:?}");
    assert_eq!(exits[0]["details"]["code"], 4, "{:?}", exits[0]);

    let status: Value =
        serde_json::from_str(&std::fs::read_to_string(env.root.join("status.json")).unwrap())
            .unwrap();
    let docker = status["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "docker")
        .cloned()
        .unwrap();
    assert_eq!(docker["available"], true, "{status}");

    // The container is gone with the session.
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
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "",
        "left behind"
    );
}
