//! A real git MCP server (`mcp-server-git` from PyPI, in `$WARDEN_TEST_DEPS/venv`)
//! driven by the official Python MCP client SDK through the shim, with a write
//! grant on an existing repository: it stages, commits, branches and switches,
//! and the host's repository has the commits afterwards. Git's config and hooks
//! stay the host's: the server cannot change them (the escape suite's
//! `escape/tests/git.rs` has the attacks); this is the legitimate use next to
//! them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use warden_e2e::*;

const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// Spawns the shim with the SDK's `stdio_client`, calls each tool of
/// `calls` (`[name, arguments]`) in order, prints one JSON line: for each
/// call its text and whether it was an error.
const PY_CLIENT: &str = r#"
import json, sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

cfg = json.loads(sys.argv[1])

async def main():
    out = {"calls": []}
    params = StdioServerParameters(command=cfg["command"], args=cfg["args"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            for name, arguments in cfg["calls"]:
                r = await session.call_tool(name, arguments)
                out["calls"].append({
                    "tool": name,
                    "is_error": bool(r.is_error),
                    "text": "\n".join(c.text for c in r.content if c.type == "text"),
                })
    print(json.dumps(out))

anyio.run(main)
"#;

fn call(out: &Value, i: usize) -> (&str, bool) {
    let c = &out["calls"][i];
    (c["text"].as_str().unwrap_or(""), c["is_error"] == true)
}

#[test]
fn mcp_server_git_stages_commits_and_branches_in_a_granted_repository() {
    let Some(deps) = require_test_deps() else {
        return;
    };
    let python = deps.join("venv/bin/python3");
    if Command::new("git").arg("--version").output().is_err() {
        panic!("git is not installed (scripts/test needs it)");
    }
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let repo = env.mkdir("work/repo");
    host_git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "hello\n").unwrap();
    host_git(&repo, &["add", "README.md"]);
    host_git(&repo, &["commit", "-q", "-m", "first"]);
    let config_before = std::fs::read(repo.join(".git/config")).unwrap();
    std::fs::write(repo.join("notes.txt"), "from the server\n").unwrap();

    let repo_s = repo.to_str().unwrap();
    let policy = env.policy(
        "git.yaml",
        &format!(
            "version: 1\nname: e2e-git\nfilesystem:\n  read: [\"{}\"]\n  write: [\"{repo_s}\"]\n",
            deps.display()
        ),
    );
    let args = vec![
        "--socket".to_string(),
        env.socket.display().to_string(),
        "--policy".to_string(),
        policy.display().to_string(),
        "--".to_string(),
        python.display().to_string(),
        "-m".to_string(),
        "mcp_server_git".to_string(),
        "--repository".to_string(),
        repo_s.to_string(),
    ];
    let calls = json!([
        ["git_status", {"repo_path": repo_s}],
        ["git_add", {"repo_path": repo_s, "files": ["notes.txt"]}],
        ["git_diff_staged", {"repo_path": repo_s}],
        ["git_commit", {"repo_path": repo_s, "message": "notes from the sandbox"}],
        ["git_create_branch", {"repo_path": repo_s, "branch_name": "feature"}],
        ["git_checkout", {"repo_path": repo_s, "branch_name": "feature"}],
        ["git_log", {"repo_path": repo_s, "max_count": 5}],
        ["git_checkout", {"repo_path": repo_s, "branch_name": "main"}],
    ]);
    let script = env.write("clients/git_client.py", PY_CLIENT);
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .arg(json!({"command": bin("warden-shim"), "args": args, "calls": calls}).to_string())
        .env_clear()
        .envs(env.env_vars())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir(&env.root);
    let output = run(&mut cmd, CLIENT_TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "client failed\n{stdout}\n{stderr}");
    let out: Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("no JSON ({e}):\n{stdout}\n{stderr}"));
    println!("{out:#}");
    for (i, c) in out["calls"].as_array().unwrap().iter().enumerate() {
        assert_eq!(
            c["is_error"], false,
            "call {i} failed: {c}\nstderr:\n{stderr}"
        );
    }
    assert!(call(&out, 0).0.contains("notes.txt"), "{out}");
    assert!(call(&out, 2).0.contains("from the server"), "{out}");
    assert!(call(&out, 6).0.contains("notes from the sandbox"), "{out}");

    // The host's repository has it all, and its config is untouched.
    let log = host_git(&repo, &["log", "--oneline", "--all"]);
    assert!(
        log.contains("notes from the sandbox") && log.contains("first"),
        "{log}"
    );
    assert!(host_git(&repo, &["branch", "--list"]).contains("feature"));
    assert_eq!(
        host_git(&repo, &["rev-parse", "--abbrev-ref", "HEAD"]),
        "main\n"
    );
    assert_eq!(host_git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read(repo.join(".git/config")).unwrap(),
        config_before
    );
}
