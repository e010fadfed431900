//! `wardenctl wrap claude-code --config .mcp.json` on a config with a real
//! server (`mcp-server-git` from `$WARDEN_TEST_DEPS/venv`), then the official
//! Python MCP client SDK reads the wrapped entry (command, args, env) and runs
//! it as a client would: through `warden-shim --profile`, against a real
//! daemon, under the policy the user wrote before wrapping (which wrap must
//! keep). The audit store has the session; `doctor --json` shows the config
//! wrapped, then drifted once the client rewrites the entry; wrap re-wraps
//! it and unwrap restores the file byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use warden_e2e::*;

/// Reads `mcpServers.<name>` from the config file, runs it with the SDK's
/// `stdio_client` (the entry's env over this process's), lists the tools
/// and calls `git_status`; prints one JSON line.
const PY_CLIENT: &str = r#"
import json, os, sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

config, name, repo = sys.argv[1], sys.argv[2], sys.argv[3]
entry = json.load(open(config))["mcpServers"][name]

async def main():
    params = StdioServerParameters(
        command=entry["command"],
        args=entry.get("args", []),
        env={**os.environ, **entry.get("env", {})},
    )
    out = {"command": entry["command"], "args": entry.get("args", [])}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            r = await session.call_tool("git_status", {"repo_path": repo})
            out["is_error"] = bool(r.is_error)
            out["text"] = "\n".join(c.text for c in r.content if c.type == "text")
    print(json.dumps(out))

anyio.run(main)
"#;

fn doctor_client(env: &TestEnv) -> Value {
    let out = run(
        &mut env.ctl(["--json", "doctor", "--no-verify"]),
        Duration::from_secs(60),
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "client.claude-code.project")
        .cloned()
        .unwrap_or_else(|| panic!("no client.claude-code.project check: {r}"))
}

#[test]
fn a_wrapped_claude_code_server_runs_through_warden() {
    let Some(deps) = require_test_deps() else {
        return;
    };
    let python = deps.join("venv/bin/python3");
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let repo = env.mkdir("work/repo");
    host_git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "hello\n").unwrap();
    host_git(&repo, &["add", "README.md"]);
    host_git(&repo, &["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("new.txt"), "untracked\n").unwrap();
    let repo_s = repo.to_str().unwrap();
    let py = python.to_str().unwrap();

    // The project's config (the default `.mcp.json` of the current
    // directory: the tests' commands run in env.root), with a comment-free
    // layout Claude Code writes, an env variable and a remote server.
    let original = format!(
        "{{\n  \"mcpServers\": {{\n    \"git\": {{\n      \"type\": \"stdio\",\n      \"command\": {},\n      \"args\": [\"-m\", \"mcp_server_git\", \"--repository\", {}],\n      \"env\": {{\n        \"E2E_WRAP_MARK\": \"from-the-config\"\n      }}\n    }},\n    \"docs\": {{\n      \"type\": \"http\",\n      \"url\": \"https://docs.example.com/mcp\"\n    }}\n  }}\n}}\n",
        json!(py),
        json!(repo_s)
    );
    let config = env.write(".mcp.json", &original);
    // The user's policy for the profile wrap will pick: kept, not replaced.
    let policy_text = format!(
        "version: 1\nname: claude-code-git\ncommand: [{}, \"-m\", \"mcp_server_git\", \"--repository\", {}]\nfilesystem:\n  read: [{}]\n  write: [{}]\nenv:\n  allow: [\"E2E_WRAP_MARK\"]\n",
        json!(py),
        json!(repo_s),
        json!(deps.to_str().unwrap()),
        json!(repo_s)
    );
    let policy = env.config.join("warden/policies/claude-code-git.yaml");
    std::fs::create_dir_all(policy.parent().unwrap()).unwrap();
    std::fs::write(&policy, &policy_text).unwrap();

    let check = doctor_client(&env);
    assert_eq!(check["status"], "warn", "{check}");
    assert!(
        check["summary"]
            .as_str()
            .unwrap()
            .contains("git not wrapped"),
        "{check}"
    );

    let out = run(
        &mut env.ctl(["wrap", "claude-code", "--config", config.to_str().unwrap()]),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("git: wrapped (profile claude-code-git)"),
        "{stdout}"
    );
    assert!(stdout.contains("existing policy"), "{stdout}");
    assert!(stdout.contains("docs: left alone: remote"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(&policy).unwrap(),
        policy_text,
        "policy kept"
    );
    let wrapped = std::fs::read_to_string(&config).unwrap();

    let script = env.write("clients/wrap_client.py", PY_CLIENT);
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .arg(&config)
        .arg("git")
        .arg(repo_s)
        .env_clear()
        .envs(env.env_vars())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir(&env.root);
    if is_root() {
        cmd.env("WARDEN_DANGEROUSLY_RUN_SERVERS_AS_ROOT", "1");
    }
    let output = run(&mut cmd, Duration::from_secs(120));
    let so = String::from_utf8_lossy(&output.stdout);
    let se = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "client failed\n{so}\n{se}");
    let r: Value = serde_json::from_str(so.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("no JSON ({e}):\n{so}\n{se}"));
    assert_eq!(r["command"], bin("warden-shim").to_str().unwrap(), "{r}");
    assert_eq!(r["args"], json!(["--profile", "claude-code-git"]), "{r}");
    assert!(
        r["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "git_status"),
        "{r}"
    );
    assert_eq!(r["is_error"], false, "{r}\n{se}");
    assert!(r["text"].as_str().unwrap().contains("new.txt"), "{r}");

    // The session is in the audit store, run under the profile's policy.
    let starts: Vec<Value> = audit_records(&env)
        .into_iter()
        .filter(|r| r["type"] == "session" && r["action"] == "start")
        .collect();
    assert!(
        starts
            .iter()
            .any(|s| s.to_string().contains("claude-code-git.yaml")),
        "no session.start under the profile: {starts:?}"
    );

    let check = doctor_client(&env);
    assert_eq!(check["status"], "ok", "{check}");
    assert!(
        check["summary"]
            .as_str()
            .unwrap()
            .contains("1 of 2 servers wrapped"),
        "{check}"
    );

    // The client rewrites its config as it was: drift, reported and re-wrapped.
    std::fs::write(&config, &original).unwrap();
    let check = doctor_client(&env);
    assert_eq!(check["status"], "warn", "{check}");
    assert!(
        check["summary"].as_str().unwrap().contains("git drifted"),
        "{check}"
    );
    assert!(
        check["fix"]
            .as_str()
            .unwrap()
            .contains("wardenctl wrap claude-code"),
        "{check}"
    );
    let out = run(
        &mut env.ctl(["wrap", "claude-code", "--config", config.to_str().unwrap()]),
        Duration::from_secs(60),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("drift re-wrapped"));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), wrapped);

    let out = run(
        &mut env.ctl([
            "unwrap",
            "claude-code",
            "--config",
            config.to_str().unwrap(),
        ]),
        Duration::from_secs(60),
    );
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&config).unwrap(), original);
    assert!(policy.exists(), "unwrap keeps the policy");
}

/// Without a policy for the profile, wrap traces the server (`wardenctl
/// init` through the running daemon) and writes the starter policy it
/// makes; the wrapped entry then runs under it. The server starts only
/// with the variable its config entry sets (the trace gets the entry's
/// values; the policy passes the name through). `--no-trace` writes the
/// deny-everything policy instead, and says how to trace it.
#[test]
fn wrap_traces_a_server_that_has_no_policy_yet() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let fixture = fixture();
    // The fixture is an argument of its own ($0 of the script): a trace
    // shows the host's /tmp entries named on the command line (the
    // unprivileged run's binaries are in /tmp).
    let script = "test \"$E2E_WRAP_KEY\" = from-the-config && exec \"$0\" --marker wrap-trace";
    let original = format!(
        "{{\n  \"mcpServers\": {{\n    \"fixture\": {{\n      \"command\": \"/bin/sh\",\n      \"args\": [\"-c\", {}, {}],\n      \"env\": {{ \"E2E_WRAP_KEY\": \"from-the-config\" }}\n    }}\n  }}\n}}\n",
        json!(script),
        json!(fixture.to_str().unwrap())
    );
    let config = env.write("traced/.mcp.json", &original);
    let out = run(
        &mut env.ctl(["wrap", "claude-code", "--config", config.to_str().unwrap()]),
        Duration::from_secs(180),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("a starter policy from tracing it"),
        "{stdout}{stderr}"
    );
    let policy = env.config.join("warden/policies/claude-code-fixture.yaml");
    let text = std::fs::read_to_string(&policy).unwrap();
    assert!(
        text.starts_with("# Starter policy written by `wardenctl init`"),
        "{text}"
    );
    assert!(text.contains("wrap-trace"), "the traced command: {text}");
    assert!(
        text.contains("E2E_WRAP_KEY"),
        "the entry's variable: {text}"
    );
    // The trace's session is on record, then the wrapped entry runs under
    // the policy it made: initialize and tools/list through the shim.
    let wrapped: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let entry = &wrapped["mcpServers"]["fixture"];
    assert!(entry["command"].as_str().unwrap().ends_with("/warden-shim"));
    let mut cmd = Command::new(entry["command"].as_str().unwrap());
    cmd.arg("--socket").arg(&env.socket);
    for a in entry["args"].as_array().unwrap() {
        cmd.arg(a.as_str().unwrap());
    }
    env.apply_env(&mut cmd);
    cmd.env(
        "E2E_WRAP_KEY",
        entry["env"]["E2E_WRAP_KEY"].as_str().unwrap(),
    );
    let mut client = McpClient::spawn(cmd);
    client.initialize();
    let tools = client.call("tools/list", json!({}));
    assert!(
        tools["tools"].as_array().is_some_and(|t| !t.is_empty()),
        "{tools}"
    );
    client.close_stdin();
    client.wait_exit(Duration::from_secs(30));

    // --no-trace: the deny-everything policy, and the command that traces it.
    let other = env.write(
        "untraced/.mcp.json",
        original.replace("\"fixture\"", "\"plain\""),
    );
    let out = run(
        &mut env.ctl([
            "wrap",
            "claude-code",
            "--no-trace",
            "--config",
            other.to_str().unwrap(),
        ]),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("grants nothing beyond the command"),
        "{stdout}"
    );
    assert!(
        stdout.contains("wardenctl init --name claude-code-plain"),
        "{stdout}"
    );
    let text =
        std::fs::read_to_string(env.config.join("warden/policies/claude-code-plain.yaml")).unwrap();
    assert!(
        text.starts_with("# Written by `wardenctl wrap claude-code`"),
        "{text}"
    );
}
