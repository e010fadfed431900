//! MCP through the shim: the client must not be able to tell the server is sandboxed.
//! Byte-exact stdio both ways, stderr passed through, EOF and exit codes (DESIGN.md §4).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::time::{Duration, Instant};

use serde_json::json;
use warden_e2e::*;

const EXIT_WAIT: Duration = Duration::from_secs(15);

#[test]
fn initialize_list_echo_and_eof() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(&env.minimal_policy(), &[], &[]);
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

    // Nothing but the server's own four responses reached stdout.
    c.assert_stdout_only_jsonrpc();
    let stdout = c.raw_stdout_bytes();
    let lines = stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(lines, 4, "stdout:\n{}", String::from_utf8_lossy(&stdout));
}

#[test]
fn one_mebibyte_both_ways_is_byte_exact() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(&env.minimal_policy(), &[], &[]);
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
}

#[test]
fn server_stderr_reaches_shim_stderr_and_not_stdout() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(&env.minimal_policy(), &[], &[]);
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
}

#[test]
fn server_exit_code_is_the_shim_exit_code() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    for code in [3, 0, 1, 77] {
        let mut c = env.fixture_session(&env.minimal_policy(), &[], &[]);
        c.initialize();
        c.call_tool_no_wait("exit", json!({"code": code}));
        assert_eq!(c.wait_code(EXIT_WAIT), code, "stderr:\n{}", c.stderr());
        c.assert_stdout_only_jsonrpc();
    }
}

#[test]
fn server_killed_by_sigkill_is_137() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(&env.minimal_policy(), &[], &[]);
    c.initialize();
    c.call_tool_no_wait("kill_self", json!({"signal": 9}));
    assert_eq!(c.wait_code(EXIT_WAIT), 137, "stderr:\n{}", c.stderr());
}

#[test]
fn server_sigterm_goes_to_its_handler() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(&env.minimal_policy(), &[], &[]);
    c.initialize();
    c.call_tool_no_wait("kill_self", json!({"signal": 15}));
    assert_eq!(c.wait_code(EXIT_WAIT), 42, "stderr:\n{}", c.stderr());
    assert!(
        c.stderr().contains("warden-fixture: received SIGTERM"),
        "stderr:\n{}",
        c.stderr()
    );
}

#[test]
fn sigterm_to_the_shim_reaches_the_server_as_sigterm() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(&env.minimal_policy(), &[], &[]);
    c.initialize();
    assert!(c.signal(libc::SIGTERM));
    // 42 comes only from the fixture's SIGTERM handler: a kill would be 137 or 143.
    assert_eq!(c.wait_code(EXIT_WAIT), 42, "stderr:\n{}", c.stderr());
    assert!(
        c.stderr().contains("warden-fixture: received SIGTERM"),
        "stderr:\n{}",
        c.stderr()
    );
}

#[test]
fn sigint_and_sighup_to_the_shim_are_forwarded() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    for signal in [libc::SIGINT, libc::SIGHUP] {
        let mut c = env.fixture_session(&env.minimal_policy(), &[], &["--ignore-sigterm"]);
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
}

#[test]
fn a_session_writes_audit_records() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let mut c = env.fixture_session(&env.minimal_policy(), &[], &[]);
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
}
