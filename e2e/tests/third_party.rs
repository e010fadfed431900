//! Real third-party MCP servers (installed by `scripts/test` into `$WARDEN_TEST_DEPS`)
//! run with `node` through the shim.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use warden_e2e::*;

const EXIT_WAIT: Duration = Duration::from_secs(20);

fn server_script(deps: &Path, package: &str) -> PathBuf {
    deps.join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js")
}

fn node_or_panic() -> PathBuf {
    node().expect("node is not on PATH (scripts/test needs Node 20)")
}

#[test]
fn filesystem_server_round_trip() {
    let Some(deps) = require_test_deps() else {
        return;
    };
    node_or_panic();
    let env = TestEnv::new();
    let work = env.mkdir("work");
    let _daemon = env.start_daemon();
    let policy = env.policy(
        "filesystem.yaml",
        &format!(
            "version: 1\nname: e2e-filesystem\nfilesystem:\n  read: [\"{}\"]\n  write: [\"{}\"]\nlimits:\n  timeout_s: 120\n",
            deps.display(),
            work.display()
        ),
    );
    let mut c = env.mcp([
        "--policy".into(),
        policy.into_os_string(),
        "--".into(),
        "node".into(),
        server_script(&deps, "server-filesystem").into_os_string(),
        work.clone().into_os_string(),
    ]);
    c.set_timeout(Duration::from_secs(60));
    let init = c.initialize();
    assert!(init["serverInfo"]["name"].is_string(), "{init}");
    let tools = c.call("tools/list", json!({}));
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"write_file"), "{names:?}");
    let read_tool = ["read_text_file", "read_file"]
        .into_iter()
        .find(|n| names.contains(n))
        .unwrap_or_else(|| panic!("no read tool in {names:?}"));

    let inside = work.join("from-node.txt");
    c.tool_text(
        "write_file",
        json!({"path": inside, "content": "written by server-filesystem"}),
    );
    assert_eq!(
        std::fs::read_to_string(&inside).unwrap(),
        "written by server-filesystem"
    );

    std::fs::write(work.join("from-host.txt"), "written on the host").unwrap();
    let text = c.tool_text(read_tool, json!({"path": work.join("from-host.txt")}));
    assert_eq!(text, "written on the host");

    // Outside its allowed directory the server refuses by itself; and the sandbox
    // hides the rest anyway.
    let r = c.call_tool(read_tool, json!({"path": env.home.join(".bashrc")}));
    assert!(is_tool_error(&r), "{r}");

    c.close_stdin();
    assert_eq!(c.wait_code(EXIT_WAIT), 0, "stderr:\n{}", c.stderr());
    c.assert_stdout_only_jsonrpc();
}

#[test]
fn everything_server_echo() {
    let Some(deps) = require_test_deps() else {
        return;
    };
    node_or_panic();
    let script = server_script(&deps, "server-everything");
    if !script.is_file() {
        panic!(
            "{} missing: run ./scripts/test to install the test deps",
            script.display()
        );
    }
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let policy = env.policy(
        "everything.yaml",
        &format!(
            "version: 1\nname: e2e-everything\nfilesystem:\n  read: [\"{}\"]\n",
            deps.display()
        ),
    );
    let mut c = env.mcp([
        "--policy".into(),
        policy.into_os_string(),
        "--".into(),
        "node".into(),
        script.into_os_string(),
        "stdio".into(),
    ]);
    c.set_timeout(Duration::from_secs(60));
    c.initialize();
    let tools = c.call("tools/list", json!({}));
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"echo"), "{names:?}");
    let text = c.tool_text("echo", json!({"message": "through warden"}));
    assert!(text.contains("through warden"), "{text}");
    c.close_stdin();
    assert_eq!(c.wait_code(EXIT_WAIT), 0, "stderr:\n{}", c.stderr());
    c.assert_stdout_only_jsonrpc();
}
