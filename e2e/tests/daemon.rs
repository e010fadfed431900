//! The daemon's own contracts (DESIGN.md §3): single instance, socket and
//! directory checks, the peer-uid check, sd_notify, SIGTERM shutdown, refused
//! spawns on record (the service units and socket activation: `service.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use warden_e2e::*;

/// Every record reads back as one of the documented record types
/// (`warden_audit::event`, a typed oracle of docs/audit-format.md).
fn assert_typed(records: &[serde_json::Value]) {
    for r in records {
        let rec: warden_audit::Record =
            serde_json::from_value(r.clone()).unwrap_or_else(|e| panic!("{e}: {r}"));
        if let Err(e) = warden_audit::event::AnyEvent::parse(&rec) {
            panic!("{e}: {r}");
        }
    }
}

#[test]
fn a_second_daemon_on_the_same_socket_is_refused() {
    let env = TestEnv::new();
    let _first = env.start_daemon();
    let mut cmd = Command::new(bin("wardend"));
    cmd.arg("--socket")
        .arg(&env.socket)
        .arg("--state-dir")
        .arg(&env.state)
        .envs(env.env_vars());
    let out = run(&mut cmd, Duration::from_secs(10));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("another wardend is already running for socket"),
        "{stderr}"
    );
    // The first one still answers.
    let status = env.ctl_json(&["status"]);
    assert!(status["pid"].as_u64().is_some(), "{status}");
}

#[test]
fn sd_notify_ready_then_stopping() {
    let env = TestEnv::new();
    let notify_path = env.root.join("notify.sock");
    let sock = UnixDatagram::bind(&notify_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut daemon = env.start_daemon_with_env(&[("NOTIFY_SOCKET", notify_path.to_str().unwrap())]);
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("READY=1 within 10 s");
    assert_eq!(String::from_utf8_lossy(&buf[..n]).trim(), "READY=1");
    // It was ready: the socket answers.
    assert!(std::os::unix::net::UnixStream::connect(&env.socket).is_ok());
    let status = daemon.stop(Duration::from_secs(10)).expect("daemon exits");
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    let n = sock.recv(&mut buf).expect("STOPPING=1");
    assert_eq!(String::from_utf8_lossy(&buf[..n]).trim(), "STOPPING=1");
}

#[test]
fn sigterm_ends_sessions_records_them_and_removes_the_socket() {
    let env = TestEnv::new();
    let mut daemon = env.start_daemon();
    let policy = env.minimal_policy();
    let marker = unique_marker("shutdown");
    let mut client = env.mcp([
        "--policy".into(),
        policy.into_os_string(),
        "--".into(),
        fixture().into_os_string(),
        "--ignore-sigterm".into(),
        "--marker".into(),
        marker.clone().into(),
    ]);
    client.initialize();
    assert!(!pids_with_marker(&marker).is_empty());
    let t0 = Instant::now();
    let status = daemon.stop(Duration::from_secs(15)).expect("daemon exits");
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(!env.socket.exists(), "socket left behind");
    let left = wait_no_marker(&marker, Duration::from_secs(5));
    assert!(left.is_empty(), "left running: {left:?}");
    let shim = client.wait_exit(Duration::from_secs(10));
    let code = exit_code(shim);
    assert!(code == 137 || code == 143, "shim exit {code}");
    let stderr = client.stderr();
    assert!(
        stderr.contains("warden: ") && stderr.contains("wardend is shutting down"),
        "{stderr}"
    );
    let records = audit_records(&env);
    let exit = records
        .iter()
        .find(|r| r["type"] == "session" && r["action"] == "exit")
        .unwrap_or_else(|| panic!("no session.exit in {records:?}"));
    assert_eq!(exit["reason"], "wardend is shutting down");
    assert!(records
        .iter()
        .any(|r| r["type"] == "daemon" && r["action"] == "stop"));
}

#[test]
fn a_socket_with_loose_permissions_is_refused_by_clients() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    std::fs::set_permissions(&env.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let policy = env.minimal_policy();
    let mut shim = env.shim([
        "--policy".into(),
        policy.into_os_string(),
        "--".into(),
        fixture().into_os_string(),
    ]);
    let out = run(&mut shim, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(exit_code(out.status), EXIT_WARDEN_ERROR, "{stderr}");
    assert!(out.stdout.is_empty());
    let lines = warden_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("loose permissions 0666"), "{stderr}");
    let out = run(&mut env.ctl(["ps"]), Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loose permissions"));
}

#[test]
fn a_runtime_dir_with_loose_permissions_is_refused() {
    let env = TestEnv::new();
    let dir = env.runtime.join("warden");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy = env.minimal_policy();
    let mut shim = env.shim_default_socket([
        "--policy".into(),
        policy.into_os_string(),
        "--".into(),
        fixture().into_os_string(),
    ]);
    let out = run(&mut shim, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(exit_code(out.status), EXIT_WARDEN_ERROR, "{stderr}");
    assert!(
        stderr.contains(&format!("{} has loose permissions 0755", dir.display())),
        "{stderr}"
    );
    // And the daemon refuses it too.
    let mut cmd = Command::new(bin("wardend"));
    cmd.envs(env.env_vars()).arg("--state-dir").arg(&env.state);
    let out = run(&mut cmd, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loose permissions"));
}

/// Runs `f` with a raw gRPC client on `socket` that skips the client-side checks
/// (as a hostile peer would).
fn raw_client<T>(
    socket: &std::path::Path,
    f: impl AsyncFnOnce(warden_client::pb::warden_client::WardenClient<warden_client::Channel>) -> T,
) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let stream = std::os::unix::net::UnixStream::connect(socket).expect("connect");
        let client = warden_client::client_over(stream).await.expect("channel");
        f(client).await
    })
}

#[test]
fn a_spawn_refused_by_the_daemon_is_on_record() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let policy_path = env.root.join("bad.yaml");
    let status = raw_client(&env.socket, async |mut c| {
        c.spawn(warden_client::pb::SpawnRequest {
            policy_path: policy_path.display().to_string(),
            policy_text: "version: 1\nfilesytem: {}\n".into(),
            command: vec![fixture().display().to_string()],
            cwd: env.root.display().to_string(),
            ..Default::default()
        })
        .await
        .map(|_| ())
        .unwrap_err()
    });
    // No stdio preamble: refused before the policy is even looked at.
    assert_eq!(status.code(), warden_client::Code::InvalidArgument);
    assert!(
        status.message().contains("stdin, stdout and stderr"),
        "{status:?}"
    );
    let records = audit_records(&env);
    let refused: Vec<_> = records
        .iter()
        .filter(|r| r["type"] == "session" && r["action"] == "refused")
        .collect();
    assert_eq!(refused.len(), 1, "{records:?}");
    assert_eq!(refused[0]["decision"], "deny");
    assert!(refused[0]["reason"].as_str().unwrap().contains("stdio"));
    assert_typed(&records);
}

#[test]
fn a_peer_with_another_uid_is_denied_and_audited() {
    if !is_root() {
        eprintln!("skipping: needs root to run the daemon as a second uid (65534)");
        return;
    }
    let env = TestEnv::new();
    // A world-traversable directory owned by the other user holds its socket and state.
    let other = 65534u32;
    let base = env.root.join("other");
    std::fs::create_dir(&base).unwrap();
    std::fs::set_permissions(&env.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&base, Some(other), Some(other)).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
    let socket = base.join("wardend.sock");
    let state = base.join("state");
    let mut daemon = Command::new(bin("wardend"));
    std::os::unix::process::CommandExt::uid(&mut daemon, other);
    std::os::unix::process::CommandExt::gid(&mut daemon, other);
    daemon
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(&state)
        .env("HOME", &base)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = daemon.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "daemon as uid {other} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    // Root can connect to the 0600 socket, but is not the daemon's uid.
    let status = raw_client(&socket, async |mut c| {
        c.status(warden_client::pb::StatusRequest {})
            .await
            .unwrap_err()
    });
    assert_eq!(
        status.code(),
        warden_client::Code::PermissionDenied,
        "{status:?}"
    );
    assert!(
        status
            .message()
            .contains("peer uid 0 is not the daemon's uid 65534"),
        "{status:?}"
    );
    // The client side refuses a socket it does not own before sending anything.
    let out = run(
        Command::new(bin("wardenctl"))
            .arg("--socket")
            .arg(&socket)
            .arg("ps"),
        Duration::from_secs(10),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("belongs to uid 65534"));
    send_signal(child.id() as i32, libc::SIGTERM);
    let _ = child.wait();
    let audit = std::fs::read_to_string(state.join("audit/audit.jsonl")).unwrap();
    let denied: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "daemon" && r["action"] == "peer")
        .collect();
    assert_eq!(denied.len(), 1, "{audit}");
    assert_eq!(denied[0]["decision"], "deny");
    assert_eq!(denied[0]["details"]["peer_uid"], json!(0));
    assert_typed(&denied);
}

#[test]
fn when_the_shim_dies_the_session_ends() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let marker = unique_marker("shim-death");
    let mut c = env.fixture_session(
        &env.minimal_policy(),
        &[],
        &["--ignore-sigterm", "--marker", &marker],
    );
    c.initialize();
    c.tool_json("spawn_child", json!({"ignore_term": true, "setsid": true}));
    assert!(pids_with_marker(&marker).len() >= 2);
    assert!(c.signal(libc::SIGKILL));
    let left = wait_no_marker(&marker, Duration::from_secs(10));
    assert!(left.is_empty(), "survived the shim: {left:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let records = audit_records(&env);
        if let Some(exit) = records
            .iter()
            .find(|r| r["type"] == "session" && r["action"] == "exit")
        {
            assert_eq!(exit["reason"], "the client (warden-shim) went away");
            break;
        }
        assert!(Instant::now() < deadline, "no session.exit: {records:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(env.sessions().is_empty());
}

/// Stdio that is not a pipe or socket (here: regular files, as with
/// `warden-shim < requests > replies`) goes through the per-stream relay.
#[test]
fn stdio_redirected_to_files_works() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let requests = env.write(
        "requests.jsonl",
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"via files"}}}"#,
            "\n"
        ),
    );
    let replies = env.root.join("replies.jsonl");
    let policy = env.minimal_policy();
    let mut shim = env.shim([
        "--policy".into(),
        policy.into_os_string(),
        "--".into(),
        fixture().into_os_string(),
    ]);
    shim.stdin(std::fs::File::open(&requests).unwrap())
        .stdout(std::fs::File::create(&replies).unwrap())
        .stderr(Stdio::null());
    let mut child = shim.spawn().unwrap();
    let status = wait_timeout(&mut child, Duration::from_secs(20)).expect("shim exits at EOF");
    assert_eq!(status.code(), Some(0));
    let out = std::fs::read_to_string(&replies).unwrap();
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[1]["id"], 2);
    assert!(lines[1].to_string().contains("via files"), "{out}");
}

/// A client that keeps its connection open does not keep a stopping daemon
/// alive.
#[test]
fn an_idle_client_connection_does_not_block_shutdown() {
    let env = TestEnv::new();
    let mut daemon = env.start_daemon();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _client = rt.block_on(async {
        let stream = std::os::unix::net::UnixStream::connect(&env.socket).unwrap();
        let mut c = warden_client::client_over(stream).await.unwrap();
        c.status(warden_client::pb::StatusRequest {}).await.unwrap();
        c
    });
    let t0 = Instant::now();
    let status = daemon.stop(Duration::from_secs(20)).expect("daemon exits");
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

/// How many records of `type.action` the store holds.
fn count(records: &[serde_json::Value], ty: &str, action: &str) -> usize {
    records
        .iter()
        .filter(|r| r["type"] == ty && r["action"] == action)
        .collect::<Vec<_>>()
        .len()
}

/// F2: a grant that exposes the daemon's socket directory (read-only is
/// enough: `connect` works on a read-only bind) must not let a sandboxed
/// server start a session of its own. The server here is `/bin/sh` running the
/// real `warden-shim` against the real socket: the daemon refuses it because
/// it lives in another user and pid namespace (the uid is the same), audits
/// it, and the outer session goes on to exit with its own code. Control: the
/// same command on the host starts a session.
#[test]
fn a_sandboxed_server_cannot_use_the_daemon_even_through_an_exposed_socket() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let shim = bin("warden-shim");
    let shim_dir = shim.parent().unwrap();
    let socket_dir = env.socket.parent().unwrap();
    let inner = format!(
        "{} --socket {} --no-autostart -- /bin/true",
        shim.display(),
        env.socket.display()
    );
    let script = format!("{inner}; echo \"inner shim exited $?\" >&2; exit 7");
    let policy = env.policy(
        "expose-socket.yaml",
        &format!(
            "version: 1\nname: inner-shim\ncommand: [\"/bin/sh\", \"-c\", {script:?}]\n\
             filesystem:\n  read: [{socket_dir:?}, {shim_dir:?}]\n  \
             dangerously_expose: [{socket_dir:?}]\nlimits:\n  timeout_s: 60\n"
        ),
    );
    let out = run(
        &mut env.shim([OsStr::new("--policy"), policy.as_os_str()]),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The outer session ran to its own end: the server's exit code.
    assert_eq!(exit_code(out.status), 7, "{stderr}");
    assert!(stderr.contains("inner shim exited 125"), "{stderr}");
    assert!(
        stderr.contains("warden: permission denied: peer is inside a sandbox: its user and pid namespaces are not the daemon's"),
        "{stderr}"
    );
    let records = audit_records(&env);
    let peers: Vec<_> = records
        .iter()
        .filter(|r| r["type"] == "daemon" && r["action"] == "peer")
        .collect();
    assert_eq!(peers.len(), 1, "{records:#?}");
    let p = peers[0];
    assert_eq!(p["decision"], "deny");
    assert_eq!(
        p["reason"],
        "peer is inside a sandbox: its user and pid namespaces are not the daemon's"
    );
    let d = &p["details"];
    assert_ne!(d["peer_userns"], d["daemon_userns"], "{p}");
    assert_ne!(d["peer_pidns"], d["daemon_pidns"], "{p}");
    assert_eq!(d["peer_uid"], d["daemon_uid"], "same uid: {p}");
    assert!(d["peer_pid"].as_i64().is_some_and(|p| p > 0), "{p}");
    // Only the outer session started; it ended by itself with code 7.
    assert_eq!(count(&records, "session", "start"), 1, "{records:#?}");
    let exit = records
        .iter()
        .find(|r| r["type"] == "session" && r["action"] == "exit")
        .expect("session.exit");
    assert_eq!(exit["details"]["code"], 7, "{exit}");
    assert_eq!(exit["reason"], "", "{exit}");

    // Control: the same command outside a sandbox is served.
    let out = run(
        Command::new("/bin/sh")
            .arg("-c")
            .arg(&inner)
            .envs(env.env_vars())
            .env_remove("WARDEN_SOCKET"),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(exit_code(out.status), 0, "{stderr}");
    let records = audit_records(&env);
    assert_eq!(count(&records, "session", "start"), 2, "{records:#?}");
    assert_eq!(count(&records, "daemon", "peer"), 1, "{records:#?}");
    assert_typed(&records);
}

/// `wardend --socket SOCKET --state-dir STATE` with the env's variables, as
/// `sh -c 'PRELUDE; exec wardend ...'`, run to completion or until it listens.
fn wardend_cmd(env: &TestEnv, socket: &std::path::Path, prelude: &str) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(format!("{prelude}\nexec \"$0\" \"$@\""))
        .arg(bin("wardend"))
        .arg("--socket")
        .arg(socket)
        .arg("--state-dir")
        .arg(&env.state)
        .envs(env.env_vars())
        .env_remove("WARDEN_SOCKET")
        .stdin(Stdio::null());
    cmd
}

/// F16: an explicit socket must sit in a private directory (in a shared one
/// another user could squat the name or plant the lock file), and the lock
/// file is never followed through a symlink. Control: a private directory
/// without the symlink works.
#[test]
fn explicit_sockets_need_a_private_dir_and_the_lock_file_is_not_followed() {
    let env = TestEnv::new();
    let shared = env.mkdir("shared");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = run(
        &mut wardend_cmd(&env, &shared.join("wardend.sock"), ":"),
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the socket's directory {} must be private to you (owned by you, mode 0700)",
            shared.display()
        )) && stderr.contains("loose permissions 1777"),
        "{stderr}"
    );
    assert!(!shared.join("wardend.sock").exists());

    let private = env.mkdir("private");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = env.write("victim.txt", "precious");
    let lock = private.join("wardend.sock.lock");
    std::os::unix::fs::symlink(&victim, &lock).unwrap();
    let out = run(
        &mut wardend_cmd(&env, &private.join("wardend.sock"), ":"),
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} is a symlink; refusing to follow it",
            lock.display()
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");

    // Control: without the symlink the same directory serves.
    std::fs::remove_file(&lock).unwrap();
    let socket = private.join("wardend.sock");
    let mut child = wardend_cmd(&env, &socket, ":")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "wardend did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(std::fs::symlink_metadata(&lock).unwrap().is_file());
    send_signal(child.id() as i32, libc::SIGTERM);
    let _ = child.wait();
}

/// F10: the daemon raises its soft RLIMIT_NOFILE to the hard limit, so that
/// a few sessions cannot exhaust its descriptors. Started here with a soft
/// limit of 256 (control: the shell really lowered it).
#[test]
fn the_daemon_raises_its_soft_nofile_limit() {
    let env = TestEnv::new();
    let socket_dir = env.socket.parent().unwrap();
    std::fs::create_dir_all(socket_dir).unwrap();
    std::fs::set_permissions(socket_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = run(
        Command::new("/bin/sh")
            .arg("-c")
            .arg("ulimit -Sn 256; ulimit -Sn"),
        Duration::from_secs(10),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "256");
    let log = env.root.join("nofile.log");
    let mut child = wardend_cmd(&env, &env.socket, "ulimit -Sn 256 || exit 99")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&env.socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "wardend did not listen: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    // "Max open files  SOFT  HARD  files"
    assert_eq!(fields[3], fields[4], "{line}");
    assert_ne!(fields[3], "256", "{line}");
    send_signal(child.id() as i32, libc::SIGTERM);
    let _ = child.wait();
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("raised the soft RLIMIT_NOFILE"), "{log}");
}
