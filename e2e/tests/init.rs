//! `wardenctl init` (docs/init.md, tracker issue 12), end to end: a starter
//! policy from tracing a real server with `--mcp`, under which the same
//! server then serves a real MCP client (the Python SDK) — and which grants
//! neither the home directory, nor another project, nor a canary file the
//! traced run never touched.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use warden_e2e::net::*;
use warden_e2e::*;

struct World {
    env: TestEnv,
    clients: Clients,
    _daemon: Daemon,
}

impl World {
    fn new() -> Option<World> {
        let clients = require_clients()?;
        let env = TestEnv::new();
        let daemon = env.start_daemon();
        Some(World {
            env,
            clients,
            _daemon: daemon,
        })
    }

    fn ctl(&self, args: &[&str]) -> Output {
        self.ctl_env(args, &[])
    }

    fn ctl_env(&self, args: &[&str], vars: &[(&str, &Path)]) -> Output {
        let mut cmd = self.env.ctl(args);
        cmd.current_dir(&self.env.root);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        run(&mut cmd, Duration::from_secs(180))
    }

    /// `wardenctl init -o FILE -- CMD...`: the policy's text.
    fn init(&self, name: &str, command: &[&str]) -> (PathBuf, String) {
        let out = self.env.root.join(format!("{name}.yaml"));
        let mut args = vec!["init", "-o", out.to_str().unwrap(), "--"];
        args.extend(command);
        let o = self.ctl(&args);
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{stdout}\n{stderr}");
        assert!(stderr.contains("init: wrote"), "{stderr}");
        let policy = std::fs::read_to_string(&out).unwrap();
        (out, policy)
    }

    /// A Python SDK session with the shim under `policy`: initialize, list
    /// the tools, call each `(tool, args)`; the client's JSON summary.
    fn session(&self, policy: &Path, calls: Value) -> Value {
        self.session_env(policy, calls, Value::Null)
    }

    fn session_env(&self, policy: &Path, calls: Value, env: Value) -> Value {
        let script = self.env.write("clients/init_client.py", PY_CLIENT);
        let mut cmd = std::process::Command::new(&self.clients.python);
        cmd.arg(&script)
            .arg(
                serde_json::json!({
                    "command": warden_e2e::bin("warden-shim"),
                    "args": ["--socket", self.env.socket.display().to_string(),
                             "--policy", policy.display().to_string()],
                    "calls": calls,
                    "env": env,
                })
                .to_string(),
            )
            .stdin(Stdio::null());
        self.env.apply_env(&mut cmd);
        let o = run(&mut cmd, Duration::from_secs(120));
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{stdout}\n{stderr}");
        serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap()
    }
}

const PY_CLIENT: &str = r#"
import json, sys
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

cfg = json.loads(sys.argv[1])

async def main():
    out = {"calls": []}
    params = StdioServerParameters(command=cfg["command"], args=cfg["args"], env=cfg.get("env"))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = init.server_info.name
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            for tool, args in cfg["calls"]:
                r = await session.call_tool(tool, args)
                texts = [c.text for c in r.content if c.type == "text"]
                out["calls"].append({"tool": tool, "is_error": bool(r.is_error), "text": texts})
    print(json.dumps(out), flush=True)

anyio.run(main)
"#;

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The grants of a written policy, as compiled.
fn grants(w: &World, policy: &Path) -> Vec<String> {
    let v = w
        .env
        .ctl_json(&["policy", "check", policy.to_str().unwrap()]);
    ["read", "write"]
        .iter()
        .flat_map(|k| v[k].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect()
}

/// Neither the home directory, nor the other project, nor the canary.
fn assert_least(w: &World, policy: &Path, other: &Path, canary: &Path) {
    for g in grants(w, policy) {
        let g = Path::new(&g);
        assert_ne!(g, w.env.home, "the home directory is granted");
        assert!(
            !w.env.home.starts_with(g),
            "{} holds the home directory",
            g.display()
        );
        assert!(
            !other.starts_with(g),
            "{} holds the other project",
            g.display()
        );
        assert!(!canary.starts_with(g), "{} holds the canary", g.display());
    }
}

#[test]
fn init_on_server_filesystem_gives_a_policy_it_then_runs_under() {
    let Some(w) = World::new() else { return };
    let node = find_on_path("node").expect("node on PATH");
    let project = w.env.mkdir("home/src/notes");
    std::fs::write(project.join("todo.md"), "- write the policy\n").unwrap();
    let other = w.env.mkdir("home/src/other");
    std::fs::write(other.join("secret.md"), "other project").unwrap();
    let canary = w.env.write("home/canary.txt", "never read");
    let server = w
        .clients
        .deps
        .join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    let (path, text) = w.init(
        "filesystem",
        &[
            node.to_str().unwrap(),
            server.to_str().unwrap(),
            project.to_str().unwrap(),
        ],
    );
    // Commented grants, the command, no runtime, no home.
    assert!(text.contains("command: ["), "{text}");
    assert!(text.contains("# named on the command line"), "{text}");
    // Limits a little above the traced peak (and the server runs under them).
    assert!(
        text.contains("  memory_mb: ") && text.contains("  # pids: "),
        "{text}"
    );
    assert!(
        !grants(&w, &path)
            .iter()
            .any(|g| g.starts_with("/usr") || g.starts_with("/lib")),
        "the runtime is provided: {text}"
    );
    assert_least(&w, &path, &other, &canary);

    // The same server under it, driven by the Python SDK.
    let v = w.session(
        &path,
        serde_json::json!([
            ["list_directory", {"path": project}],
            ["read_text_file", {"path": project.join("todo.md")}],
            ["read_text_file", {"path": other.join("secret.md")}],
        ]),
    );
    assert_eq!(v["server"], "secure-filesystem-server", "{v}");
    assert!(v["tools"].as_array().unwrap().len() > 5, "{v}");
    assert_eq!(v["calls"][0]["is_error"], false, "{v}");
    assert!(
        v["calls"][0]["text"][0]
            .as_str()
            .unwrap()
            .contains("todo.md"),
        "{v}"
    );
    assert_eq!(v["calls"][1]["text"][0], "- write the policy\n", "{v}");
    // Outside what the server was given: refused by the server and the sandbox.
    assert_eq!(v["calls"][2]["is_error"], true, "{v}");
}

#[test]
fn init_on_mcp_server_git_gives_a_policy_it_then_runs_under() {
    let Some(w) = World::new() else { return };
    let repo = w.env.mkdir("home/src/repo");
    let git = |args: &[&str]| {
        let o = std::process::Command::new("git")
            .args(args)
            .current_dir(&repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {o:?}");
    };
    git(&["init", "-q"]);
    std::fs::write(repo.join("README.md"), "# repo\n").unwrap();
    git(&["add", "README.md"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        "commit",
        "-q",
        "-m",
        "first",
    ]);
    let other = w.env.mkdir("home/src/other");
    let canary = w.env.write("home/canary.txt", "never read");
    let python = w.clients.python.display().to_string();
    let (path, text) = w.init(
        "git",
        &[
            &python,
            "-m",
            "mcp_server_git",
            "--repository",
            repo.to_str().unwrap(),
        ],
    );
    assert!(text.contains("name: \"mcp-server-git\""), "{text}");
    assert_least(&w, &path, &other, &canary);
    let v = w.session(
        &path,
        serde_json::json!([["git_status", {"repo_path": repo}], ["git_log", {"repo_path": repo}]]),
    );
    assert!(
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "git_status"),
        "{v}"
    );
    assert_eq!(v["calls"][0]["is_error"], false, "{v}");
    assert!(
        v["calls"][1]["text"][0].as_str().unwrap().contains("first"),
        "{v}"
    );
}

#[test]
fn a_secret_read_on_purpose_is_in_the_trace_and_granted_only_with_a_warning() {
    let Some(w) = World::new() else { return };
    let ssh = w.env.home.join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    let key = ssh.join("id_ed25519");
    std::fs::write(&key, "PRIVATE KEY\n").unwrap();
    let trace = w.env.root.join("secret.jsonl");
    let o = w.ctl(&[
        "trace",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        &format!("cat {} > /dev/null", key.display()),
    ]);
    assert!(o.status.success(), "{o:?}");
    let recs: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        recs.iter()
            .any(|r| r["type"] == "file" && r["resource"] == key.display().to_string()),
        "the trace shows the read"
    );
    let policy = w.env.root.join("secret.yaml");
    let o = w.ctl(&[
        "init",
        "--log",
        trace.to_str().unwrap(),
        "-o",
        policy.to_str().unwrap(),
    ]);
    let (_, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let text = std::fs::read_to_string(&policy).unwrap();
    let at = text
        .lines()
        .position(|l| l.contains(&format!("\"{}\"", key.display())))
        .unwrap_or_else(|| panic!("{text}"));
    let warning = text.lines().nth(at - 1).unwrap();
    assert!(
        warning.contains("WARNING") && warning.contains("SSH keys"),
        "{text}"
    );
    assert!(stderr.contains("init: warning:"), "{stderr}");
}

#[test]
fn init_refuses_an_existing_output_and_a_command_that_cannot_start() {
    let Some(w) = World::new() else { return };
    let existing = w.env.write("exists.yaml", "# mine\n");
    let o = w.ctl(&["init", "-o", existing.to_str().unwrap(), "--", "/bin/true"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("exists") && err.contains("never written over"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "# mine\n");

    let out = w.env.root.join("none.yaml");
    let o = w.ctl(&[
        "init",
        "-o",
        out.to_str().unwrap(),
        "--",
        "/nonexistent/server",
    ]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("no trace written"), "{err}");
    assert!(!out.exists(), "no policy written");

    // Neither a trace nor a command: one clear line.
    let o = w.ctl(&["init", "-o", out.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("--log FILE") && err.contains("-- CMD"),
        "{err}"
    );
}

/// server-memory keeps its graph in a file (MEMORY_FILE_PATH): traced with
/// `--allow-writes` and a `create_entities` call, the policy has a write
/// grant of the data directory and the variable; under it a new session sees
/// the entity the traced run made and can add more.
#[test]
fn init_on_server_memory_grants_its_data_file_and_its_variable() {
    let Some(w) = World::new() else { return };
    let node = find_on_path("node").expect("node on PATH");
    let data = w.env.mkdir("home/.local/share/memory-data");
    let file = data.join("memory.jsonl");
    let other = w.env.mkdir("home/src/other");
    let canary = w.env.write("home/canary.txt", "never read");
    let server = w
        .clients
        .deps
        .join("node_modules/@modelcontextprotocol/server-memory/dist/index.js");
    let out = w.env.root.join("memory.yaml");
    let entity = r#"{"entities": [{"name": "warden", "entityType": "project", "observations": ["traced"]}]}"#;
    let o = w.ctl_env(
        &[
            "init",
            "--allow-writes",
            "-o",
            out.to_str().unwrap(),
            "--call",
            "create_entities",
            entity,
            "--",
            node.to_str().unwrap(),
            server.to_str().unwrap(),
        ],
        &[("MEMORY_FILE_PATH", &file)],
    );
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("\"MEMORY_FILE_PATH\""), "{text}");
    let compiled = w.env.ctl_json(&["policy", "check", out.to_str().unwrap()]);
    let writes: Vec<&str> = compiled["write"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(writes, vec![data.to_str().unwrap()], "{text}");
    assert_least(&w, &out, &other, &canary);
    let v = w.session_env(
        &out,
        serde_json::json!([
            ["read_graph", {}],
            ["create_entities", {"entities": [{"name": "second", "entityType": "t", "observations": []}]}],
        ]),
        serde_json::json!({"MEMORY_FILE_PATH": file}),
    );
    assert_eq!(v["calls"][0]["is_error"], false, "{v}");
    assert!(
        v["calls"][0]["text"][0]
            .as_str()
            .unwrap()
            .contains("warden"),
        "{v}"
    );
    assert_eq!(v["calls"][1]["is_error"], false, "{v}");
    assert!(std::fs::read_to_string(&file).unwrap().contains("second"));
}
