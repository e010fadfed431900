//! `wardenctl exec-server` (tracker issue 16, docs/exec-server.md) end to end: a
//! real MCP client (the official Python SDK, `mcp` in `$WARDEN_TEST_DEPS/venv`)
//! launches `wardenctl exec-server --policy P` the way an MCP client config
//! does, and calls `run_sandboxed` against the real daemon and the real
//! sandbox. Each call is a session of its own: its policy is the ceiling
//! narrowed, its `session.start` is in the audit store.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use warden_e2e::net::HttpServer;
use warden_e2e::*;

/// What one client run saw: the tools listed, and one result per step (a
/// list of results for a parallel step).
struct Run {
    tools: Vec<Value>,
    results: Vec<Value>,
}

/// Runs the Python SDK client against `wardenctl --socket S exec-server
/// --policy P`, with the env's HOME and XDG directories, and `steps`.
fn exec_server(env: &TestEnv, python: &Path, policy: &Path, steps: Value) -> Run {
    exec_server_with(env, python, policy, &[], steps)
}

/// [`exec_server`] with more `exec-server` arguments (`--backend docker`).
/// `steps`: each the arguments of one `run_sandboxed` call, or `{"parallel":
/// [...]}` for calls made at once; the client lists the tools first.
fn exec_server_with(
    env: &TestEnv,
    python: &Path,
    policy: &Path,
    extra: &[&str],
    steps: Value,
) -> Run {
    let call =
        |args: &Value| json!({"op": "call_tool", "name": "run_sandboxed", "arguments": args});
    let mut sdk_steps = vec![json!({"op": "list_tools"})];
    sdk_steps.extend(steps.as_array().expect("a list of steps").iter().map(|step| {
        match step.get("parallel") {
            Some(calls) => json!({
                "op": "parallel",
                "steps": calls.as_array().expect("a list of calls").iter().map(call).collect::<Vec<_>>(),
            }),
            None => call(step),
        }
    }));
    let mut args = vec![
        "--socket".to_string(),
        env.socket.display().to_string(),
        "exec-server".into(),
        "--policy".into(),
        policy.display().to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let mut run = run_python_sdk_client(
        env,
        python,
        &bin("wardenctl"),
        &args,
        Era::Handshake2025,
        &json!(sdk_steps),
    );
    let listed = run.steps.remove(0);
    Run {
        tools: listed["definitions"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
        results: run.steps,
    }
}

/// A result's structured content, asserting the call ran (no tool error)
/// and the text content says the same.
fn ran(result: &Value) -> &Value {
    assert_eq!(result["isError"], json!(false), "{result}");
    let s = &result["structuredContent"];
    assert!(s.is_object(), "no structured content: {result}");
    let text: Value = serde_json::from_str(result["text"][0].as_str().unwrap()).unwrap();
    assert_eq!(&text, s, "the text content renders the structured result");
    s
}

fn stdout(result: &Value) -> &str {
    ran(result)["stdout"].as_str().unwrap()
}

fn code(result: &Value) -> i64 {
    ran(result)["exit_code"].as_i64().unwrap()
}

/// A tool error's text.
fn refused(result: &Value) -> String {
    assert_eq!(result["isError"], json!(true), "{result}");
    result["text"][0].as_str().unwrap().to_owned()
}

#[test]
fn lists_the_tool_and_runs_echo_in_an_audited_session() {
    let Some(py) = sdk_python() else { return };
    let env = TestEnv::new();
    let _d = env.start_daemon();
    let policy = env.policy("exec.yaml", "name: e2e-exec\nlimits:\n  timeout_s: 60\n");
    let run = exec_server(
        &env,
        &py,
        &policy,
        json!([
            {"command": "echo hi"},
            {"argv": ["/bin/sh", "-c", "cat; echo \"$0\"", "argv0"], "stdin": "from stdin\n"},
            {"command": "exit 3"},
        ]),
    );
    assert_eq!(run.tools.len(), 1, "{:?}", run.tools);
    let tool = &run.tools[0];
    assert_eq!(tool["name"], "run_sandboxed");
    assert_eq!(tool["annotations"]["readOnlyHint"], json!(false));
    assert_eq!(
        tool["annotations"]["openWorldHint"],
        json!(false),
        "no host allowed"
    );
    for key in [
        "command",
        "argv",
        "stdin",
        "timeout_s",
        "network",
        "files",
        "workdir",
    ] {
        assert!(
            tool["inputSchema"]["properties"][key].is_object(),
            "{key}: {tool}"
        );
    }
    assert!(
        tool["outputSchema"]["properties"]["exit_code"].is_object(),
        "{tool}"
    );

    let echo = ran(&run.results[0]);
    assert_eq!(echo["stdout"], "hi\n");
    assert_eq!(echo["exit_code"], 0);
    assert_eq!(echo["signal"], Value::Null);
    assert_eq!(echo["truncated"], false);
    assert_eq!(stdout(&run.results[1]), "from stdin\nargv0\n");
    assert_eq!(code(&run.results[2]), 3);

    // Audit before execute: each call is a session whose session.start
    // carries the command and the digest of the call's policy.
    let session = echo["session"].as_str().unwrap();
    let records = session_records(&env, session);
    let start = records
        .iter()
        .find(|r| r["type"] == "session" && r["action"] == "start")
        .unwrap_or_else(|| panic!("no session.start for {session}: {records:?}"));
    let details = &start["details"];
    assert_eq!(
        details["argv"],
        json!(["/bin/sh", "-c", "echo hi"]),
        "{start}"
    );
    assert!(
        details["policy_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{start}"
    );
    assert!(
        records
            .iter()
            .any(|r| r["type"] == "session" && r["action"] == "exit"),
        "{records:?}"
    );
    let sessions: Vec<&str> = run
        .results
        .iter()
        .map(|r| ran(r)["session"].as_str().unwrap())
        .collect();
    assert_eq!(
        sessions
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        3,
        "a fresh session per call: {sessions:?}"
    );
}

#[test]
fn the_host_is_out_of_reach_and_nothing_persists_between_calls() {
    let Some(py) = sdk_python() else { return };
    let env = TestEnv::new();
    let _d = env.start_daemon();
    let key = env.home.join(".ssh/id_rsa");
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    std::fs::write(&key, "-----BEGIN PLANTED KEY-----\n").unwrap();
    let policy = env.policy("exec.yaml", "name: e2e-exec\n");
    let run = exec_server(
        &env,
        &py,
        &policy,
        json!([
            // Control: the scratch directory is writable, and it is the cwd.
            {"command": "echo data > note.txt && cat note.txt && pwd"},
            {"command": "echo x > /planted"},
            {"command": "cat ~/.ssh/id_rsa"},
            {"command": format!("cat {}", key.display())},
            {"command": "cat note.txt"},
            {"command": "cat in/a.txt", "files": {"in/a.txt": "given\n"}},
            {"command": "cat in/a.txt"},
            {"command": "true", "files": {"../escape": "x"}},
        ]),
    );
    let first = stdout(&run.results[0]);
    assert!(first.starts_with("data\n"), "{first}");
    let scratch = PathBuf::from(first.lines().nth(1).unwrap());
    assert!(
        !scratch.exists(),
        "the scratch directory {} is removed after the call",
        scratch.display()
    );
    assert_ne!(code(&run.results[1]), 0, "writing to / fails");
    assert!(!Path::new("/planted").exists());
    // Control: the key is there on the host.
    assert!(std::fs::read_to_string(&key).unwrap().contains("PLANTED"));
    for r in &run.results[2..4] {
        assert_ne!(code(r), 0, "{r}");
        assert!(!stdout(r).contains("PLANTED"), "{r}");
    }
    assert_ne!(code(&run.results[4]), 0, "the last call's file is gone");
    assert_eq!(stdout(&run.results[5]), "given\n");
    assert_ne!(code(&run.results[6]), 0, "the last call's files are gone");
    let msg = refused(&run.results[7]);
    assert!(msg.contains("`..` is not allowed"), "{msg}");
}

#[test]
fn the_timeout_ends_a_call_and_output_is_capped() {
    let Some(py) = sdk_python() else { return };
    let env = TestEnv::new();
    let _d = env.start_daemon();
    let policy = env.policy("exec.yaml", "name: e2e-exec\nlimits:\n  timeout_s: 120\n");
    let small = env.policy(
        "small.yaml",
        "name: e2e-exec-small\nlimits:\n  output_kb: 4\n",
    );
    let run = exec_server(
        &env,
        &py,
        &policy,
        json!([
            {"command": "sleep 1000", "timeout_s": 2},
            {"command": "head -c 10485760 /dev/zero | tr '\\0' a; echo done >&2"},
            {"command": "true", "timeout_s": 121},
        ]),
    );
    let t = ran(&run.results[0]);
    assert_eq!(t["exit_code"], 124, "{t}");
    assert!(
        t["reason"].as_str().unwrap_or("").contains("timeout"),
        "{t}"
    );
    let big = ran(&run.results[1]);
    assert_eq!(
        big["exit_code"], 0,
        "the overflow is drained, not blocking: {big}"
    );
    assert_eq!(big["truncated"], true);
    let out = big["stdout"].as_str().unwrap();
    assert_eq!(out.len(), 1 << 20, "1 MiB kept of 10 MiB");
    assert!(out.bytes().all(|b| b == b'a'));
    assert_eq!(big["stderr"], "done\n");
    let msg = refused(&run.results[2]);
    assert!(
        msg.contains("above the policy's limits.timeout_s (120)"),
        "{msg}"
    );

    // limits.output_kb sets the cap.
    let run = exec_server(
        &env,
        &py,
        &small,
        json!([{"command": "head -c 100000 /dev/zero | tr '\\0' b"}]),
    );
    let r = ran(&run.results[0]);
    assert_eq!(r["stdout"].as_str().unwrap().len(), 4096);
    assert_eq!(r["truncated"], true);
}

#[test]
fn a_fork_bomb_ends_at_the_pids_limit_and_the_server_keeps_answering() {
    let Some(py) = sdk_python() else { return };
    let env = TestEnv::new();
    let _d = env.start_daemon();
    let policy = env.policy(
        "exec.yaml",
        "name: e2e-exec-bomb\nlimits:\n  pids: 32\n  timeout_s: 60\n",
    );
    let bomb = "bomb() { bomb | bomb & }; bomb; sleep 3; echo survived";
    let run = exec_server(
        &env,
        &py,
        &policy,
        json!([
            {"command": bomb, "timeout_s": 8},
            {"command": "echo alive"},
        ]),
    );
    if is_root() {
        // A root daemon cannot cap processes without a cgroup (the kernel
        // exempts uid 0 from RLIMIT_NPROC): the call is refused, not run.
        let msg = refused(&run.results[0]);
        assert!(
            msg.contains("limits.pids cannot be enforced when wardend runs as root"),
            "{msg}"
        );
        // Every call under this ceiling is refused alike; the server answers.
        assert_eq!(refused(&run.results[1]), msg);
        println!("skipping: the fork bomb itself as root (no process cap): {msg}");
        return;
    } else {
        let r = ran(&run.results[0]);
        let stderr = r["stderr"].as_str().unwrap();
        assert!(
            stderr.to_ascii_lowercase().contains("fork"),
            "fork fails at the limit: {r}"
        );
    }
    assert_eq!(stdout(&run.results[1]), "alive\n");
}

#[test]
fn concurrent_calls_run_in_parallel() {
    let Some(py) = sdk_python() else { return };
    let env = TestEnv::new();
    let _d = env.start_daemon();
    let shared = env.mkdir("shared");
    let policy = env.policy(
        "exec.yaml",
        &format!(
            "name: e2e-exec-par\nfilesystem:\n  write: [{:?}]\n",
            shared.display().to_string()
        ),
    );
    // Each waits for the file the other creates: run one after the other,
    // the first would time out.
    let waits = |mine: &str, theirs: &str| {
        json!({
            "command": format!(
                "touch {s}/{mine}; while [ ! -e {s}/{theirs} ]; do sleep 0.05; done; echo {mine} saw {theirs}",
                s = shared.display()
            ),
            "timeout_s": 60,
        })
    };
    let run = exec_server(
        &env,
        &py,
        &policy,
        json!([{"parallel": [waits("a", "b"), waits("b", "a")]}]),
    );
    let both = run.results[0].as_array().unwrap();
    assert_eq!(stdout(&both[0]), "a saw b\n");
    assert_eq!(stdout(&both[1]), "b saw a\n");
    // The write grant persists, as the policy says.
    assert!(shared.join("a").exists() && shared.join("b").exists());
}

#[test]
fn network_is_only_what_the_call_asks_for_within_the_policy() {
    let Some(py) = sdk_python() else { return };
    let Some(curl) = find_on_path("curl") else {
        if std::env::var_os("WARDEN_REQUIRE_DEPS").is_some_and(|v| v == "1") {
            panic!("curl missing; WARDEN_REQUIRE_DEPS=1");
        }
        println!("skipping: curl is not installed");
        return;
    };
    let env = TestEnv::new();
    let _d = env.start_daemon();
    let up = HttpServer::start("exec");
    let allowed = format!("127.0.0.1:{}", up.port());
    let policy = env.policy(
        "exec.yaml",
        &format!("name: e2e-exec-net\nnetwork:\n  allow: [\"{allowed}\"]\n"),
    );
    let get = |target: &str| {
        format!(
            "{} -sSf --max-time 30 http://{target}/hello",
            curl.display()
        )
    };
    let other = format!("127.0.0.2:{}", up.port());
    let run = exec_server(
        &env,
        &py,
        &policy,
        json!([
            {"command": get(&allowed)},
            {"command": get(&other), "network": [allowed]},
            {"command": get(&allowed), "network": [allowed]},
            {"command": "true", "network": [other]},
        ]),
    );
    assert_eq!(run.tools[0]["annotations"]["openWorldHint"], json!(true));
    assert_ne!(code(&run.results[0]), 0, "no network unless the call asks");
    assert_ne!(code(&run.results[1]), 0, "a host the policy does not list");
    assert!(
        up.connections().len() == 1,
        "only the allowed call reached the server: {:?}",
        up.connections().len()
    );
    assert!(
        stdout(&run.results[2]).contains("hello from warden-e2e"),
        "{}",
        run.results[2]
    );
    let msg = refused(&run.results[3]);
    assert!(
        msg.contains("is not in the policy's network.allow"),
        "{msg}"
    );
}

/// Audit before execute: a call's `session.start`, with its command, is on
/// disk while the command runs, so a daemon killed mid-call (SIGKILL: no
/// chance to write anything more) leaves it behind; the call comes back as
/// a tool error, not a hang.
#[test]
fn a_calls_session_start_is_on_disk_before_its_command_runs() {
    let Some(py) = sdk_python() else { return };
    let env = TestEnv::new();
    let daemon = env.start_daemon();
    let shared = env.mkdir("shared");
    let policy = env.policy(
        "exec.yaml",
        &format!(
            "name: e2e-exec-audit\nfilesystem:\n  write: [{:?}]\n",
            shared.display().to_string()
        ),
    );
    let marker = unique_marker("exec-audit");
    let command = format!(
        "touch {}/running; exec sh -c 'sleep 1000' {marker}",
        shared.display()
    );
    let run = std::thread::scope(|s| {
        let client = s.spawn(|| {
            exec_server(
                &env,
                &py,
                &policy,
                json!([{"command": command, "timeout_s": 120}]),
            )
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !shared.join("running").exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the command never ran; daemon log:\n{}",
                daemon.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(send_signal(daemon.pid(), 9), "SIGKILL to wardend");
        client.join().unwrap()
    });
    let msg = refused(&run.results[0]);
    assert!(msg.starts_with("warden: "), "{msg}");
    let starts: Vec<Value> = audit_records(&env)
        .into_iter()
        .filter(|r| r["type"] == "session" && r["action"] == "start")
        .filter(|r| r["details"]["argv"] == json!(["/bin/sh", "-c", command]))
        .collect();
    assert_eq!(starts.len(), 1, "{:?}", audit_summary(&env));
    // What a killed daemon leaves running goes now (not this test's claim).
    let left = wait_no_marker(&marker, std::time::Duration::from_secs(5));
    println!("left running after the daemon's SIGKILL: {left:?}");
    for pid in left {
        send_signal(pid, 9);
    }
}

/// Polls `wardenctl ps --json` until it lists exactly one session (a call
/// running); returns its row. A wait, not a timed assertion.
fn wait_one_session(env: &TestEnv, daemon: &Daemon) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let ps = env.sessions();
        if ps.len() == 1 {
            return ps[0].clone();
        }
        assert!(
            ps.is_empty() && std::time::Instant::now() < deadline,
            "expected one running call: {ps:?}\ndaemon log:\n{}",
            daemon.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `wardenctl ps` shows a running call as a session, `wardenctl kill ID`
/// ends it, the call returns with the daemon's exit status and reason (not a
/// tool error, not a hang), and the server answers the next call;
/// `wardenctl policy show` is the allowlist view of the ceiling.
#[test]
fn wardenctl_ps_and_kill_see_and_end_a_running_call() {
    let Some(py) = sdk_python() else { return };
    let env = TestEnv::new();
    let daemon = env.start_daemon();
    // The ceiling as a profile, so `wardenctl policy show NAME` names it.
    let profiles = env.config.join("warden/policies");
    std::fs::create_dir_all(&profiles).unwrap();
    let policy = profiles.join("exec-kill.yaml");
    std::fs::write(
        &policy,
        "version: 1\nname: e2e-exec-kill\nnetwork:\n  allow: [\"api.example.com:443\"]\nlimits:\n  timeout_s: 300\n",
    )
    .unwrap();
    let show = run(
        &mut env.ctl(["policy", "show", "exec-kill"]),
        std::time::Duration::from_secs(30),
    );
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.status.success(),
        "wardenctl policy show: {}",
        String::from_utf8_lossy(&show.stderr)
    );
    assert!(shown.contains("api.example.com:443"), "{shown}");
    assert!(shown.contains(&policy.display().to_string()), "{shown}");

    let (run, row) = std::thread::scope(|s| {
        let client = s.spawn(|| {
            exec_server(
                &env,
                &py,
                &policy,
                json!([
                    {"command": "exec sleep 1000", "timeout_s": 300},
                    {"command": "echo after"},
                ]),
            )
        });
        let row = wait_one_session(&env, &daemon);
        let id = row["id"].as_str().unwrap().to_owned();
        let out = run(
            &mut env.ctl(["kill", id.as_str()]),
            std::time::Duration::from_secs(30),
        );
        assert!(
            out.status.success(),
            "wardenctl kill {id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (client.join().unwrap(), row)
    });
    assert_eq!(row["name"], "e2e-exec-kill", "{row}");
    assert!(row["command"].to_string().contains("sleep 1000"), "{row}");
    let killed = ran(&run.results[0]);
    assert_eq!(killed["session"], row["id"], "ps showed the call's session");
    let code = killed["exit_code"].as_i64().unwrap();
    assert!(code == 128 + 15 || code == 128 + 9, "{killed}");
    assert!(
        killed["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "the result says why: {killed}"
    );
    assert_eq!(stdout(&run.results[1]), "after\n", "the server answers");
    let id = row["id"].as_str().unwrap();
    assert!(
        session_records(&env, id)
            .iter()
            .any(|r| r["type"] == "session" && r["action"] == "kill"),
        "no session.kill for {id}"
    );
    assert!(env.sessions().is_empty(), "nothing left running");
}

// ---- The same with `--backend docker` (the Docker backend, docs/backends.md).

/// Names of the containers (running or not) labelled with session `id`.
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
        std::time::Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "docker ps: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Polls until session `id` has no container (or 15 s pass); what is left.
fn wait_no_containers(id: &str) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let left = containers(id);
        if left.is_empty() || std::time::Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A ceiling for the Docker backend: the test image, and
/// `sandbox.best_effort_write_protection` (the call's scratch directory is a
/// write grant, which the Docker backend runs only with it), then `body`.
fn docker_ceiling(env: &TestEnv, image: &str, name: &str, body: &str) -> PathBuf {
    env.policy(
        &format!("{name}.yaml"),
        &format!(
            "version: 1\nname: {name}\ndocker:\n  image: {image:?}\nsandbox:\n  \
             best_effort_write_protection: true\n{body}"
        ),
    )
}

const DOCKER: &[&str] = &["--backend", "docker"];

#[test]
fn docker_the_host_is_out_of_reach_and_nothing_persists_between_calls() {
    let Some(py) = sdk_python() else { return };
    let Some(image) = docker_test_image() else {
        return;
    };
    let env = TestEnv::new();
    let _d = env.start_daemon();
    let key = env.home.join(".ssh/id_rsa");
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    std::fs::write(&key, "-----BEGIN PLANTED KEY-----\n").unwrap();
    let policy = docker_ceiling(&env, &image, "e2e-exec-docker", "");
    // Without best_effort_write_protection the scratch directory (a write
    // grant) is refused by the Docker backend, naming the key.
    let strict = env.policy(
        "strict.yaml",
        &format!("version: 1\nname: e2e-exec-strict\ndocker:\n  image: {image:?}\n"),
    );
    let run = exec_server_with(&env, &py, &strict, DOCKER, json!([{"command": "echo hi"}]));
    let msg = refused(&run.results[0]);
    assert!(msg.contains("best_effort_write_protection"), "{msg}");

    let run = exec_server_with(
        &env,
        &py,
        &policy,
        DOCKER,
        json!([
            {"command": "echo hi"},
            {"command": "echo data > note.txt && cat note.txt && pwd"},
            {"command": "echo x > /planted"},
            {"command": "cat ~/.ssh/id_rsa"},
            {"command": format!("cat {}", key.display())},
            {"command": "cat note.txt"},
            {"command": "cat in/a.txt", "files": {"in/a.txt": "given\n"}},
            {"command": "cat in/a.txt"},
            {"command": "head -c 10485760 /dev/zero | tr '\\0' a; echo done >&2"},
        ]),
    );
    let echo = ran(&run.results[0]);
    assert_eq!(echo["stdout"], "hi\n", "{echo}");
    assert_eq!(echo["exit_code"], 0);
    // The call ran in a container: its session.start says so, with the
    // command, before it ran.
    let session = echo["session"].as_str().unwrap();
    let records = session_records(&env, session);
    let start = records
        .iter()
        .find(|r| r["type"] == "session" && r["action"] == "start")
        .unwrap_or_else(|| panic!("no session.start for {session}: {records:?}"));
    assert_eq!(start["details"]["sandbox"]["backend"], "docker", "{start}");
    assert_eq!(
        start["details"]["argv"],
        json!(["/bin/sh", "-c", "echo hi"]),
        "{start}"
    );
    assert!(wait_no_containers(session).is_empty());

    let first = stdout(&run.results[1]);
    assert!(
        first.starts_with("data\n"),
        "the scratch dir is writable: {first}"
    );
    let scratch = PathBuf::from(first.lines().nth(1).unwrap());
    assert!(scratch.starts_with(std::env::temp_dir()), "{first}");
    assert!(
        !scratch.exists(),
        "{} removed after the call",
        scratch.display()
    );
    assert_ne!(code(&run.results[2]), 0, "writing to / fails");
    assert!(!Path::new("/planted").exists());
    assert!(std::fs::read_to_string(&key).unwrap().contains("PLANTED"));
    for r in &run.results[3..5] {
        assert_ne!(code(r), 0, "{r}");
        assert!(!stdout(r).contains("PLANTED"), "{r}");
    }
    assert_ne!(code(&run.results[5]), 0, "the last call's file is gone");
    assert_eq!(stdout(&run.results[6]), "given\n");
    assert_ne!(code(&run.results[7]), 0, "the last call's files are gone");
    let big = ran(&run.results[8]);
    assert_eq!(big["exit_code"], 0, "{big}");
    assert_eq!(big["truncated"], true);
    let out = big["stdout"].as_str().unwrap();
    assert_eq!(out.len(), 1 << 20, "1 MiB kept of 10 MiB");
    assert!(out.bytes().all(|b| b == b'a'));
    assert_eq!(big["stderr"], "done\n");
}

#[test]
fn docker_the_timeout_ends_a_call_and_its_container() {
    let Some(py) = sdk_python() else { return };
    let Some(image) = docker_test_image() else {
        return;
    };
    let env = TestEnv::new();
    let daemon = env.start_daemon();
    let policy = docker_ceiling(
        &env,
        &image,
        "e2e-exec-docker-timeout",
        "limits:\n  timeout_s: 120\n",
    );
    let (run, row, while_running) = std::thread::scope(|s| {
        let client = s.spawn(|| {
            exec_server_with(
                &env,
                &py,
                &policy,
                DOCKER,
                json!([
                    {"command": "sleep 1000", "timeout_s": 5},
                    {"command": "echo alive"},
                ]),
            )
        });
        let row = wait_one_session(&env, &daemon);
        // Control: the call's container exists while it runs.
        let id = row["id"].as_str().unwrap().to_owned();
        let mut seen = containers(&id);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while seen.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
            seen = containers(&id);
        }
        (client.join().unwrap(), row, seen)
    });
    assert_eq!(row["backend"], "docker", "{row}");
    let id = row["id"].as_str().unwrap();
    assert_eq!(while_running, [format!("warden-{id}")]);
    let t = ran(&run.results[0]);
    assert_eq!(t["session"], row["id"]);
    assert_eq!(t["exit_code"], 124, "{t}");
    assert!(
        t["reason"].as_str().unwrap_or("").contains("timeout"),
        "{t}"
    );
    let left = wait_no_containers(id);
    assert!(left.is_empty(), "left behind: {left:?}");
    assert_eq!(stdout(&run.results[1]), "alive\n");
}

#[test]
fn docker_a_fork_bomb_ends_at_the_pids_limit_and_the_server_keeps_answering() {
    let Some(py) = sdk_python() else { return };
    let Some(image) = docker_test_image() else {
        return;
    };
    let env = TestEnv::new();
    let _d = env.start_daemon();
    let policy = docker_ceiling(
        &env,
        &image,
        "e2e-exec-docker-bomb",
        "limits:\n  pids: 32\n  timeout_s: 60\n",
    );
    let bomb = "bomb() { bomb | bomb & }; bomb; sleep 3; echo survived";
    let run = exec_server_with(
        &env,
        &py,
        &policy,
        DOCKER,
        json!([
            {"command": bomb, "timeout_s": 20},
            {"command": "echo alive"},
        ]),
    );
    // Docker's --pids-limit is a cgroup limit: it holds for root too.
    let r = ran(&run.results[0]);
    let stderr = r["stderr"].as_str().unwrap();
    assert!(
        stderr.to_ascii_lowercase().contains("fork"),
        "fork fails at the limit: {r}"
    );
    let session = r["session"].as_str().unwrap();
    let start = session_records(&env, session)
        .into_iter()
        .find(|r| r["type"] == "session" && r["action"] == "start")
        .unwrap();
    assert_eq!(start["details"]["sandbox"]["backend"], "docker", "{start}");
    assert!(wait_no_containers(session).is_empty());
    assert_eq!(stdout(&run.results[1]), "alive\n");
}
