//! MCP through the shim: the client must not be able to tell the server is sandboxed.
//! Byte-exact stdio both ways, progress as it is sent, stderr passed through, EOF and
//! exit codes, signals (DESIGN.md §4).
//!
//! Every check runs twice (issue 17: "the acceptance-style checks still hold with MCP
//! awareness on"): `records`, the default, where the daemon follows the stream for
//! its `mcp` records (a copy of each chunk the relay moves), and `gated`, under a
//! policy with `mcp.tools.deny`, which puts the gate on the path of every message
//! (the daemon reads each one whole before passing it on). Each session shows that
//! its stream was followed: the records say so, and the gate refuses a call in it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use warden_e2e::*;

const EXIT_WAIT: Duration = Duration::from_secs(15);

/// How the daemon stands in the session's stream.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stream {
    /// Followed for the `mcp` records (on by default).
    Records,
    /// Through the gate as well: `mcp.tools.deny: [exec]`.
    Gated,
}

impl Stream {
    /// A policy for the fixture with `yaml` (more keys) and this stream's `mcp:`.
    fn policy(self, env: &TestEnv, yaml: &str) -> PathBuf {
        let mcp = match self {
            Stream::Records => "",
            Stream::Gated => "mcp:\n  tools:\n    deny: [exec]\n",
        };
        env.policy(
            &format!("{self:?}.yaml"),
            &format!("version: 1\nname: e2e-fixture\n{yaml}{mcp}"),
        )
    }

    /// A shim running the fixture under `policy` (from [`Stream::policy`]). Gated,
    /// the gate's answer to a call of the refused tool comes first: the stream goes
    /// through it (one more line on stdout, see [`Stream::probe_lines`]).
    fn session(self, env: &TestEnv, policy: &Path, fixture_args: &[&str]) -> McpClient {
        let mut c = env.fixture_session(policy, &[], fixture_args);
        if self == Stream::Gated {
            let r = c.request(
                "tools/call",
                json!({"name": "exec", "arguments": {"path": "/bin/true"}}),
            );
            assert_eq!(r["error"]["data"]["refusedBy"], "warden", "{r}");
        }
        c
    }

    /// The lines [`Stream::session`] adds to the client's stdout.
    fn probe_lines(self) -> usize {
        match self {
            Stream::Records => 0,
            Stream::Gated => 1,
        }
    }

    /// The daemon followed the session's stream: its `mcp.request` records are
    /// there (waiting for the group commit), and gated, the refusal.
    fn assert_followed(self, env: &TestEnv) {
        let want = match self {
            Stream::Records => "request",
            Stream::Gated => "refuse",
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let recs = audit_records(env);
            if recs
                .iter()
                .any(|r| r["type"] == "mcp" && r["action"] == want)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no mcp.{want} record: {:?}",
                audit_summary(env)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Each check as two tests, `NAME::records` and `NAME::gated`.
macro_rules! records_and_gated {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn records() {
                super::$name(super::Stream::Records)
            }
            #[test]
            fn gated() {
                super::$name(super::Stream::Gated)
            }
        }
    )*};
}

records_and_gated!(
    initialize_list_echo_and_eof,
    one_mebibyte_both_ways_is_byte_exact,
    progress_reaches_the_client_while_the_call_runs,
    server_stderr_reaches_shim_stderr_and_not_stdout,
    server_exit_code_is_the_shim_exit_code,
    server_killed_by_sigkill_is_137,
    server_sigterm_goes_to_its_handler,
    sigterm_to_the_shim_reaches_the_server_as_sigterm,
    sigint_and_sighup_to_the_shim_are_forwarded,
    a_session_writes_audit_records,
);

fn initialize_list_echo_and_eof(stream: Stream) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = stream.session(&env, &stream.policy(&env, ""), &[]);
    let init = c.initialize();
    assert_eq!(init["protocolVersion"], PROTOCOL_VERSION);
    assert_eq!(init["serverInfo"]["name"], "warden-fixture");
    let tools = c.call("tools/list", json!({}));
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"echo"), "{names:?}");
    // Gated, the refused tool is not offered.
    assert_eq!(
        names.contains(&"exec"),
        stream == Stream::Records,
        "{names:?}"
    );
    assert_eq!(
        c.tool_text("echo", json!({"text": "hello through warden"})),
        "hello through warden"
    );
    let unknown = c.request("no/such/method", json!({}));
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");

    // Stdin EOF reaches the server, which exits 0; the shim follows promptly.
    let closed = Instant::now();
    c.close_stdin();
    let code = c.wait_code(EXIT_WAIT);
    let took = closed.elapsed();
    assert_eq!(code, 0, "stderr:\n{}", c.stderr());
    assert!(
        took < Duration::from_secs(5),
        "shim took {took:?} to exit after stdin EOF"
    );

    // Nothing but the four responses (and the gate's) reached stdout.
    c.assert_stdout_only_jsonrpc();
    let stdout = c.raw_stdout_bytes();
    let lines = stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(
        lines,
        4 + stream.probe_lines(),
        "stdout:\n{}",
        String::from_utf8_lossy(&stdout)
    );
    stream.assert_followed(&env);
}

fn one_mebibyte_both_ways_is_byte_exact(stream: Stream) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = stream.session(&env, &stream.policy(&env, ""), &[]);
    c.initialize();
    let expected = big_pattern(1048576);

    let big = c.tool_text("big", json!({"bytes": 1048576}));
    assert_eq!(big.len(), 1048576);
    assert!(big == expected, "server → client: 1 MiB result differs");

    let echoed = c.tool_text("echo", json!({"text": expected}));
    assert_eq!(echoed.len(), 1048576);
    assert!(
        echoed == expected,
        "client → server → client: 1 MiB echo differs"
    );

    // Several in flight at once, answered in order, nothing interleaved.
    for n in [1usize, 65535, 65536, 65537, 300_000] {
        let text = c.tool_text("big", json!({"bytes": n}));
        assert!(text == big_pattern(n), "big {n} differs");
    }
    c.close_stdin();
    assert_eq!(c.wait_code(EXIT_WAIT), 0, "stderr:\n{}", c.stderr());
    c.assert_stdout_only_jsonrpc();
    stream.assert_followed(&env);
}

/// Progress notifications reach the client while the call still runs, not with
/// its answer: the fixture's `progress` tool sends one, then waits for the
/// client's go-ahead (a file the test writes once the notification is here)
/// before the next, so a relay that held notifications back would hold the
/// call up and the wait here would end in a panic (no timing is measured).
fn progress_reaches_the_client_while_the_call_runs(stream: Stream) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let go = env.mkdir("go");
    let policy = stream.policy(
        &env,
        &format!("filesystem:\n  read: [\"{}\"]\n", go.display()),
    );
    let mut c = stream.session(&env, &policy, &[]);
    c.initialize();
    let id = c.send_request(
        "tools/call",
        json!({"name": "progress", "arguments": {"steps": 3, "dir": go},
               "_meta": {"progressToken": "tok-1"}}),
    );
    for n in 1..=3 {
        let p = c.wait_message(&format!("progress notification {n}"), |m| {
            m["method"] == "notifications/progress"
        });
        assert_eq!(p["params"]["progressToken"], "tok-1", "{p}");
        assert_eq!(p["params"]["progress"], n, "{p}");
        assert!(
            !c.other_messages.iter().any(|m| m.get("id") == Some(&id)),
            "the answer came before progress {n}: {:?}",
            c.other_messages
        );
        std::fs::write(go.join(format!("go-{n}")), "").unwrap();
    }
    let r = c.wait_response(&id);
    assert_eq!(tool_result_text(&r["result"]), "done after 3 steps", "{r}");
    c.close_stdin();
    assert_eq!(c.wait_code(EXIT_WAIT), 0, "stderr:\n{}", c.stderr());
    c.assert_stdout_only_jsonrpc();
    stream.assert_followed(&env);
    // The call's record counts them.
    let deadline = Instant::now() + Duration::from_secs(30);
    let end = loop {
        let end = audit_records(&env).into_iter().find(|r| {
            r["type"] == "mcp" && r["action"] == "end" && r["details"]["tool"] == "progress"
        });
        if let Some(end) = end {
            break end;
        }
        assert!(Instant::now() < deadline, "{:?}", audit_summary(&env));
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(end["details"]["progress"], 3, "{end}");
}

fn server_stderr_reaches_shim_stderr_and_not_stdout(stream: Stream) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = stream.session(&env, &stream.policy(&env, ""), &[]);
    c.initialize();
    let marker = unique_marker("stderr-line");
    c.tool_text("stderr", json!({"text": marker}));
    assert!(
        c.wait_stderr_contains(&format!("{marker}\n"), Duration::from_secs(5)),
        "server stderr line missing from the shim's stderr:\n{}",
        c.stderr()
    );
    c.close_stdin();
    assert_eq!(c.wait_code(EXIT_WAIT), 0);
    let stdout = String::from_utf8_lossy(&c.raw_stdout_bytes()).into_owned();
    // The fixture answers the stderr tool with "ok": the text went to stderr only.
    assert!(
        !stdout.contains(&marker),
        "server stderr leaked into stdout:\n{stdout}"
    );
    c.assert_stdout_only_jsonrpc();
    stream.assert_followed(&env);
}

fn server_exit_code_is_the_shim_exit_code(stream: Stream) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let policy = stream.policy(&env, "");
    for code in [3, 0, 1, 77] {
        let mut c = stream.session(&env, &policy, &[]);
        c.initialize();
        c.call_tool_no_wait("exit", json!({"code": code}));
        assert_eq!(c.wait_code(EXIT_WAIT), code, "stderr:\n{}", c.stderr());
        c.assert_stdout_only_jsonrpc();
    }
    stream.assert_followed(&env);
}

fn server_killed_by_sigkill_is_137(stream: Stream) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = stream.session(&env, &stream.policy(&env, ""), &[]);
    c.initialize();
    c.call_tool_no_wait("kill_self", json!({"signal": 9}));
    assert_eq!(c.wait_code(EXIT_WAIT), 137, "stderr:\n{}", c.stderr());
    stream.assert_followed(&env);
}

fn server_sigterm_goes_to_its_handler(stream: Stream) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = stream.session(&env, &stream.policy(&env, ""), &[]);
    c.initialize();
    c.call_tool_no_wait("kill_self", json!({"signal": 15}));
    assert_eq!(c.wait_code(EXIT_WAIT), 42, "stderr:\n{}", c.stderr());
    assert!(
        c.stderr().contains("warden-fixture: received SIGTERM"),
        "stderr:\n{}",
        c.stderr()
    );
    stream.assert_followed(&env);
}

fn sigterm_to_the_shim_reaches_the_server_as_sigterm(stream: Stream) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = stream.session(&env, &stream.policy(&env, ""), &[]);
    c.initialize();
    assert!(c.signal(libc::SIGTERM));
    // 42 comes only from the fixture's SIGTERM handler: a kill would be 137 or 143.
    assert_eq!(c.wait_code(EXIT_WAIT), 42, "stderr:\n{}", c.stderr());
    assert!(
        c.stderr().contains("warden-fixture: received SIGTERM"),
        "stderr:\n{}",
        c.stderr()
    );
    stream.assert_followed(&env);
}

fn sigint_and_sighup_to_the_shim_are_forwarded(stream: Stream) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let policy = stream.policy(&env, "");
    for signal in [libc::SIGINT, libc::SIGHUP] {
        let mut c = stream.session(&env, &policy, &["--ignore-sigterm"]);
        c.initialize();
        assert!(c.signal(signal));
        // The fixture has no handler for these: it dies by the signal itself.
        assert_eq!(
            c.wait_code(EXIT_WAIT),
            128 + signal,
            "signal {signal}; stderr:\n{}",
            c.stderr()
        );
    }
    stream.assert_followed(&env);
}

fn a_session_writes_audit_records(stream: Stream) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = stream.session(&env, &stream.policy(&env, ""), &[]);
    c.initialize();
    c.close_stdin();
    assert_eq!(c.wait_code(EXIT_WAIT), 0);
    // session.start is fsynced before exec; the rest is group-committed: poll a little.
    let deadline = Instant::now() + Duration::from_secs(5);
    let records = loop {
        let records = audit_records(&env);
        let start = records
            .iter()
            .any(|r| r["type"] == "session" && r["action"] == "start");
        if start || Instant::now() >= deadline {
            break records;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        records
            .iter()
            .any(|r| r["type"] == "session" && r["action"] == "start"),
        "no session.start record; summary: {:?}",
        audit_summary(&env)
    );
    for r in &records {
        for field in ["ts", "seq", "type", "action", "decision"] {
            assert!(r.get(field).is_some(), "audit record without {field}: {r}");
        }
    }
    stream.assert_followed(&env);
}
