//! The fixture MCP server on its own, without Warden: it must behave exactly as the
//! other e2e tests assume, and these runs are the unsandboxed controls for them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_e2e::*;

fn direct(args: &[&str]) -> McpClient {
    let mut cmd = Command::new(fixture());
    cmd.args(args);
    McpClient::spawn(cmd)
}

#[test]
fn protocol_basics() {
    let mut c = direct(&[]);
    let init = c.initialize();
    assert_eq!(init["protocolVersion"], PROTOCOL_VERSION);
    assert_eq!(init["serverInfo"]["name"], "warden-fixture");
    assert!(init["capabilities"]["tools"].is_object());
    assert_eq!(c.call("ping", json!(null)), json!({}));
    let tools = c.call("tools/list", json!({}));
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for want in [
        "echo",
        "big",
        "read_file",
        "write_file",
        "list_dir",
        "getenv",
        "stderr",
        "exit",
        "kill_self",
        "spawn_child",
        "sleep",
        "whoami",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert_eq!(
        c.tool_text("echo", json!({"text": "héllo\n\"x\""})),
        "héllo\n\"x\""
    );
    let unknown = c.request("no/such/method", json!({}));
    assert_eq!(unknown["error"]["code"], -32601);
    c.close_stdin();
    assert_eq!(c.wait_code(Duration::from_secs(5)), 0);
    c.assert_stdout_only_jsonrpc();
}

#[test]
fn big_and_files() {
    let env = TestEnv::new();
    let mut c = direct(&[]);
    c.initialize();
    let big = c.tool_text("big", json!({"bytes": 1048576}));
    assert_eq!(big.len(), 1048576);
    assert!(big == big_pattern(1048576));
    let path = env.root.join("f.txt");
    c.tool_text("write_file", json!({"path": path, "content": "abc"}));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "abc");
    assert_eq!(c.tool_text("read_file", json!({"path": path})), "abc");
    let missing = c.call_tool("read_file", json!({"path": env.root.join("nope")}));
    assert!(is_tool_error(&missing));
    assert!(
        tool_result_text(&missing).contains("No such file"),
        "{missing}"
    );
    let listing = c.tool_json("list_dir", json!({"path": env.root}));
    assert!(
        listing.as_array().unwrap().contains(&json!("f.txt")),
        "{listing}"
    );
    let who = c.tool_json("whoami", json!({}));
    assert_eq!(who["pid"], c.pid());
    assert_eq!(
        c.tool_json("getenv", json!({"name": "WARDEN_E2E_SURELY_UNSET"})),
        json!(null)
    );
}

#[test]
fn batches_and_progress() {
    let env = TestEnv::new();
    let mut c = direct(&[]);
    c.initialize();
    // A batch is answered by one batch, in order; its notifications by nothing.
    c.send_raw(
        br#"[{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"echo","arguments":{"text":"one"}}},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":"b","method":"ping"}]
"#,
    );
    let batch = c.wait_message("the batch's answer", Value::is_array);
    let ids: Vec<&Value> = batch.as_array().unwrap().iter().map(|m| &m["id"]).collect();
    assert_eq!(ids, [&json!("a"), &json!("b")], "{batch}");
    assert_eq!(tool_result_text(&batch[0]["result"]), "one");
    c.send_raw(b"[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}]\n");
    assert_eq!(c.call("ping", json!({})), json!({}));
    assert!(
        !c.other_messages.iter().any(Value::is_array),
        "{:?}",
        c.other_messages
    );
    // progress: one notification per step, each waiting for its go-ahead.
    let go = env.mkdir("go");
    let id = c.send_request(
        "tools/call",
        json!({"name": "progress", "arguments": {"steps": 2, "dir": go},
               "_meta": {"progressToken": 9}}),
    );
    for n in 1..=2 {
        let p = c.wait_message("progress", |m| m["method"] == "notifications/progress");
        assert_eq!(
            p["params"],
            json!({"progressToken": 9, "progress": n, "total": 2})
        );
        std::fs::write(go.join(format!("go-{n}")), "").unwrap();
    }
    let r = c.wait_response(&id);
    assert_eq!(tool_result_text(&r["result"]), "done after 2 steps");
    c.close_stdin();
    assert_eq!(c.wait_code(Duration::from_secs(5)), 0);
    c.assert_stdout_only_jsonrpc();
}

#[test]
fn stderr_exit_and_signals() {
    let mut c = direct(&[]);
    c.initialize();
    c.tool_text("stderr", json!({"text": "to-stderr-123"}));
    assert!(c.wait_stderr_contains("to-stderr-123\n", Duration::from_secs(5)));
    c.call_tool_no_wait("exit", json!({"code": 3}));
    assert_eq!(c.wait_code(Duration::from_secs(5)), 3);

    let mut c = direct(&[]);
    c.call_tool_no_wait("kill_self", json!({"signal": 9}));
    assert_eq!(c.wait_code(Duration::from_secs(5)), 137);

    let mut c = direct(&[]);
    c.call_tool_no_wait("kill_self", json!({"signal": 15}));
    assert_eq!(c.wait_code(Duration::from_secs(5)), 42);
    assert!(c.stderr().contains("warden-fixture: received SIGTERM"));

    let mut c = direct(&[]);
    c.initialize();
    assert!(c.signal(libc::SIGTERM));
    assert_eq!(c.wait_code(Duration::from_secs(5)), 42);

    let mut c = direct(&["--ignore-sigterm"]);
    let text = c.tool_text("kill_self", json!({"signal": 15}));
    assert!(text.contains("survived"), "{text}");
    c.close_stdin();
    assert_eq!(c.wait_code(Duration::from_secs(5)), 0);
}

#[test]
fn spawned_children_are_found_by_marker() {
    let marker = unique_marker("fixture-child");
    let mut c = direct(&["--marker", &marker]);
    c.initialize();
    let plain = c.tool_json("spawn_child", json!({"ignore_term": true, "setsid": false}));
    let daemonised = c.tool_json("spawn_child", json!({"ignore_term": true, "setsid": true}));
    let pids = pids_with_marker(&marker);
    for child in [&plain["pid"], &daemonised["pid"]] {
        let pid = child.as_i64().unwrap() as i32;
        assert!(pids.contains(&pid), "{pid} not in {pids:?}");
    }
    assert!(pids.contains(&c.pid()));
    // SIGTERM is ignored by the children; clean up with SIGKILL.
    let started = Instant::now();
    for pid in &pids {
        send_signal(*pid, libc::SIGTERM);
    }
    std::thread::sleep(Duration::from_millis(100));
    let survivors = pids_with_marker(&marker);
    assert!(
        survivors.len() >= 2,
        "TERM-ignoring children must survive TERM: {survivors:?}"
    );
    for pid in survivors {
        send_signal(pid, libc::SIGKILL);
    }
    assert_eq!(
        wait_no_marker(&marker, Duration::from_secs(5)),
        Vec::<i32>::new()
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}
