//! Real MCP client libraries launch the shim the way MCP clients (Claude Desktop,
//! Claude Code, Cursor...) launch servers: the official Python SDK (`mcp`, in
//! `$WARDEN_TEST_DEPS/venv`) and the official TypeScript SDK
//! (`@modelcontextprotocol/sdk`, hoisted into `$WARDEN_TEST_DEPS/node_modules`).
//!
//! Each SDK spawns `warden-shim --socket S --policy P -- SERVER...` itself, with
//! its default environment (HOME, LOGNAME, PATH, SHELL, TERM, USER only: no
//! `XDG_*`, hence `--socket`), and shuts it down its own way: close stdin, wait
//! 2 s, then SIGTERM (Python: to the process group it made with
//! `start_new_session`; TypeScript: to the process), then SIGKILL 2 s later.
//! The client scripts observe that sequence (which signals, the exit status)
//! from inside and print one JSON line; the tests check it together with what
//! the host sees afterwards: no process left, no session in `wardenctl ps`, the
//! session's `session.exit` in the audit store.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_e2e::*;

/// Bound on a whole client run (catches hangs; the runs take 1 to 6 s).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound on the daemon's cleanup after a client SIGKILLed the shim.
const CLEANUP_WAIT: Duration = Duration::from_secs(15);

/// The Python client. Argument: a JSON config (`command`, `args`, `scenario`:
/// `echo` or `busy`). It wraps three functions of `mcp.client.stdio` (and
/// `os.killpg`) only to observe the SDK's own spawn and shutdown: the child's
/// pid and environment names, the signals sent (and when, from the start of the
/// shutdown), the exit status. Prints one JSON line on stdout.
const PY_CLIENT: &str = r#"
import json, os, sys, time

import anyio
import mcp.client.stdio as sdk_stdio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

cfg = json.loads(sys.argv[1])
obs = {"pid": None, "child_env": None, "signals": [], "returncode": None, "stop_s": None}
stop_started = [None]

real_create = sdk_stdio._create_platform_compatible_process
async def create(*args, **kwargs):
    process = await real_create(*args, **kwargs)
    obs["pid"] = process.pid
    obs["child_env"] = sorted((kwargs.get("env") or {}).keys())
    return process
sdk_stdio._create_platform_compatible_process = create

real_stop = sdk_stdio._stop_server_process
async def stop(process):
    stop_started[0] = time.monotonic()
    await real_stop(process)
    obs["stop_s"] = round(time.monotonic() - stop_started[0], 3)
    obs["returncode"] = process.returncode
sdk_stdio._stop_server_process = stop

real_killpg = os.killpg
def killpg(pgid, sig):
    if sig != 0:
        obs["signals"].append({
            "signal": int(sig),
            "group_of_child": pgid == obs["pid"],
            "after_s": round(time.monotonic() - (stop_started[0] or time.monotonic()), 3),
        })
    return real_killpg(pgid, sig)
os.killpg = killpg

def texts(result):
    return [c.text for c in result.content if c.type == "text"]

async def main():
    out = {}
    params = StdioServerParameters(command=cfg["command"], args=cfg["args"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = init.server_info.name
            out["tools"] = [t.name for t in (await session.list_tools()).tools]
            if cfg["scenario"] == "echo":
                r = await session.call_tool("echo", {"message": cfg["message"]})
                out["echo"] = {"is_error": bool(r.is_error), "text": texts(r)}
            elif cfg["scenario"] == "busy":
                # Give up on a call still running: the server is busy when stdin closes.
                with anyio.move_on_after(cfg["abandon_after_s"]) as scope:
                    await session.call_tool("sleep", {"ms": cfg["sleep_ms"]})
                out["abandoned"] = scope.cancelled_caught
            else:
                raise SystemExit("unknown scenario " + cfg["scenario"])
    out.update(obs)
    print(json.dumps(out), flush=True)

anyio.run(main)
"#;

/// The TypeScript client (ES module). Argument: a JSON config (`sdk`, `command`,
/// `args`, `scenario`: `filesystem` or `busy`). It keeps the transport's child
/// process (a private field, read only to observe) to record the signals the
/// SDK sends, the exit and the `close` event; the server's stderr is piped, as
/// the desktop clients do, and returned. Prints one JSON line on stdout.
const TS_CLIENT: &str = r#"
import { pathToFileURL } from "node:url";

const cfg = JSON.parse(process.argv[2]);
const sdk = (rel) => pathToFileURL(`${cfg.sdk}/dist/esm/${rel}`).href;
const { Client } = await import(sdk("client/index.js"));
const { StdioClientTransport } = await import(sdk("client/stdio.js"));

const transport = new StdioClientTransport({ command: cfg.command, args: cfg.args, stderr: "pipe" });
let stderr = "";
transport.stderr.on("data", (chunk) => { stderr += chunk; });
const client = new Client({ name: "warden-e2e-ts", version: "0.0.0" });
await client.connect(transport);

const child = transport._process;
if (!child) throw new Error("StdioClientTransport._process is missing: the SDK's internals changed");
const out = { pid: transport.pid, server: client.getServerVersion()?.name, signals: [] };
let closing = null;
const since = () => (closing === null ? null : Date.now() - closing);
const exited = new Promise((resolve) =>
  child.once("exit", (code, signal) => resolve({ code, signal, after_ms: since() })));
const closed = new Promise((resolve) => child.once("close", () => resolve(since())));
const realKill = child.kill.bind(child);
child.kill = (signal) => { out.signals.push({ signal, after_ms: since() }); return realKill(signal); };

const texts = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text);
out.tools = (await client.listTools()).tools.map((t) => t.name);
let pending = null;
if (cfg.scenario === "filesystem") {
  const w = await client.callTool({ name: "write_file", arguments: { path: cfg.write_path, content: cfg.content } });
  out.write = { is_error: !!w.isError, text: texts(w) };
  const r = await client.callTool({ name: "read_text_file", arguments: { path: cfg.read_path } });
  out.read = { is_error: !!r.isError, text: texts(r) };
} else if (cfg.scenario === "busy") {
  // A call still running when the client closes: the server is busy when stdin closes.
  pending = client.callTool({ name: "sleep", arguments: { ms: cfg.sleep_ms } })
    .then(() => "answered", (e) => `rejected: ${e.message}`);
  await new Promise((resolve) => setTimeout(resolve, cfg.abandon_after_ms));
} else {
  throw new Error(`unknown scenario ${cfg.scenario}`);
}

closing = Date.now();
await client.close();
out.close_ms = since();
out.exit = await exited;
out.close_event_ms = await closed;
if (pending) out.pending = await pending;
out.stderr = stderr;
console.log(JSON.stringify(out));
"#;

/// What the client tests run: the venv's python with the `mcp` package, the
/// TypeScript SDK, node.
struct Sdks {
    deps: PathBuf,
    python: PathBuf,
    ts_sdk: PathBuf,
    node: PathBuf,
}

/// The SDKs from `$WARDEN_TEST_DEPS`; like [`require_test_deps`], panics when
/// something is missing under `WARDEN_REQUIRE_DEPS=1`, else prints `skipping:`.
fn require_sdks() -> Option<Sdks> {
    let deps = require_test_deps()?;
    let python = deps.join("venv/bin/python3");
    let ts_sdk = deps.join("node_modules/@modelcontextprotocol/sdk");
    let node = node();
    let mut missing: Vec<String> = [
        python.clone(),
        deps.join("venv/lib"),
        ts_sdk.join("dist/esm/client/stdio.js"),
    ]
    .into_iter()
    .filter(|p| !p.exists())
    .map(|p| p.display().to_string())
    .collect();
    if node.is_none() {
        missing.push("node on PATH".into());
    }
    match node {
        Some(node) if missing.is_empty() => Some(Sdks {
            deps,
            python,
            ts_sdk,
            node,
        }),
        _ => {
            let problem = format!("missing {}", missing.join(", "));
            if std::env::var_os("WARDEN_REQUIRE_DEPS").is_some_and(|v| v == "1") {
                panic!("MCP client SDKs missing ({problem}); WARDEN_REQUIRE_DEPS=1 (run ./scripts/test)");
            }
            println!("skipping: MCP client SDKs missing ({problem}); run ./scripts/test");
            None
        }
    }
}

fn server_script(deps: &Path, package: &str) -> PathBuf {
    deps.join("node_modules/@modelcontextprotocol")
        .join(package)
        .join("dist/index.js")
}

/// Runs a client program as [`warden_e2e::run_client`] does, also passing on
/// USER, LOGNAME, SHELL and TERM when set. The SDK passes the shim only its
/// default subset of that environment.
fn run_sdk_client(
    env: &TestEnv,
    program: &Path,
    script: (&str, &str),
    config: &Value,
) -> ClientRun {
    run_client(
        env,
        program,
        script,
        config,
        &["USER", "LOGNAME", "SHELL", "TERM"],
        CLIENT_TIMEOUT,
    )
}

fn tool_names(out: &Value) -> Vec<&str> {
    out["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tool list: {out}"))
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The environment an SDK gave the shim holds its default names only.
fn assert_sdk_default_env(names: &Value) {
    const DEFAULT: [&str; 6] = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];
    let names: Vec<&str> = names
        .as_array()
        .unwrap_or_else(|| panic!("child env names not observed: {names}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        names.contains(&"PATH") && names.contains(&"HOME"),
        "{names:?}"
    );
    assert!(
        names.iter().all(|n| DEFAULT.contains(n)),
        "the SDK passed more than its default environment: {names:?}"
    );
}

/// After a client is done: no process carries `marker` (the shim and the
/// server both do), `wardenctl ps` lists no session, and the session (found by
/// `marker` in its argv) has its `session.exit` record, which is returned.
/// Polls up to [`CLEANUP_WAIT`]: after a SIGKILLed shim the daemon cleans up on
/// its own time.
fn assert_session_over(env: &TestEnv, marker: &str) -> Value {
    let left = wait_no_marker(marker, CLEANUP_WAIT);
    assert!(
        left.is_empty(),
        "left running: {:?}",
        left.iter().map(|&p| cmdline_of(p)).collect::<Vec<_>>()
    );
    let deadline = Instant::now() + CLEANUP_WAIT;
    loop {
        let sessions = env.sessions();
        if sessions.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sessions left in wardenctl ps: {sessions:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let start = audit_records(env)
        .into_iter()
        .find(|r| {
            r["type"] == "session"
                && r["action"] == "start"
                && r["details"]["argv"].as_array().is_some_and(|a| {
                    a.iter()
                        .any(|s| s.as_str().is_some_and(|s| s.contains(marker)))
                })
        })
        .unwrap_or_else(|| panic!("no session.start for {marker}: {:?}", audit_summary(env)));
    let session = start["session"].as_str().expect("session id").to_owned();
    loop {
        if let Some(exit) = session_records(env, &session)
            .into_iter()
            .find(|r| r["type"] == "session" && r["action"] == "exit")
        {
            return exit;
        }
        assert!(
            Instant::now() < deadline,
            "no session.exit for session {session}: {:?}",
            session_records(env, &session)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The session is over (no process, no session, its `session.exit` written),
/// it ended by itself with code 0, and the daemon logged no error.
fn assert_ended_with_code_0(env: &TestEnv, daemon: &Daemon, marker: &str) {
    let exit = assert_session_over(env, marker);
    assert_eq!(exit["reason"], "", "{exit}");
    assert_eq!(exit["details"]["code"], 0, "{exit}");
    let log = daemon.log();
    assert!(!log.contains("ERROR"), "daemon log:\n{log}");
}

#[test]
fn python_sdk_runs_server_everything_through_the_shim() {
    let Some(sdks) = require_sdks() else {
        return;
    };
    let env = TestEnv::new();
    let daemon = env.start_daemon();
    let policy = env.policy(
        "everything.yaml",
        &format!(
            "version: 1\nname: e2e-python-sdk\nfilesystem:\n  read: [\"{}\"]\n",
            sdks.deps.display()
        ),
    );
    // server-everything reads only its first argument: the marker rides along.
    let marker = unique_marker("py-sdk");
    let script = server_script(&sdks.deps, "server-everything");
    let args = client_shim_args(
        &env,
        &policy,
        &["node", script.to_str().unwrap(), "stdio", &marker],
    );
    let message = format!("through warden from the python sdk {marker}");
    let run = run_sdk_client(
        &env,
        &sdks.python,
        ("client.py", PY_CLIENT),
        &json!({
            "scenario": "echo",
            "command": bin("warden-shim"),
            "args": args,
            "message": message,
        }),
    );
    let out = &run.out;
    assert_eq!(out["server"], "mcp-servers/everything", "{out}");
    assert!(tool_names(out).contains(&"echo"), "{out}");
    assert_eq!(out["echo"]["is_error"], false, "{out}");
    let echoed = out["echo"]["text"][0].as_str().unwrap_or_default();
    assert!(echoed.contains(&message), "{out}");
    assert_sdk_default_env(&out["child_env"]);

    // The SDK closed stdin; the server exited by itself and the shim with it,
    // within the SDK's 2 s grace (no SIGTERM), with the server's status.
    assert_eq!(out["returncode"], 0, "{out}\nstderr:\n{}", run.stderr);
    assert_eq!(
        out["signals"],
        json!([]),
        "the SDK had to signal the shim: it did not exit within 2 s of stdin EOF: {out}"
    );
    // The server's stderr reached the client's (the SDK passes its own), and the
    // shim said nothing.
    assert!(
        run.stderr.contains("Starting default (STDIO) server"),
        "{}",
        run.stderr
    );
    assert!(warden_lines(&run.stderr).is_empty(), "{}", run.stderr);

    assert_ended_with_code_0(&env, &daemon, &marker);
}

#[test]
fn typescript_sdk_runs_server_filesystem_through_the_shim() {
    let Some(sdks) = require_sdks() else {
        return;
    };
    let env = TestEnv::new();
    let daemon = env.start_daemon();
    // The work dir's name carries the marker: it is in the shim's and the server's argv.
    let marker = unique_marker("ts-sdk");
    let work = env.mkdir(&format!("work-{marker}"));
    let policy = env.policy(
        "filesystem.yaml",
        &format!(
            "version: 1\nname: e2e-ts-sdk\nfilesystem:\n  read: [\"{}\"]\n  write: [\"{}\"]\n",
            sdks.deps.display(),
            work.display()
        ),
    );
    std::fs::write(work.join("from-host.txt"), "written on the host").unwrap();
    let script = server_script(&sdks.deps, "server-filesystem");
    let args = client_shim_args(
        &env,
        &policy,
        &["node", script.to_str().unwrap(), work.to_str().unwrap()],
    );
    let written = work.join("from-ts-sdk.txt");
    let run = run_sdk_client(
        &env,
        &sdks.node,
        ("client.mjs", TS_CLIENT),
        &json!({
            "scenario": "filesystem",
            "sdk": sdks.ts_sdk,
            "command": bin("warden-shim"),
            "args": args,
            "write_path": written,
            "content": "written by the typescript sdk",
            "read_path": work.join("from-host.txt"),
        }),
    );
    let out = &run.out;
    assert_eq!(out["server"], "secure-filesystem-server", "{out}");
    let tools = tool_names(out);
    assert!(
        tools.contains(&"write_file") && tools.contains(&"read_text_file"),
        "{out}"
    );
    assert_eq!(out["write"]["is_error"], false, "{out}");
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        "written by the typescript sdk"
    );
    assert_eq!(out["read"]["is_error"], false, "{out}");
    assert_eq!(
        out["read"]["text"][0].as_str().map(str::trim_end),
        Some("written on the host"),
        "{out}"
    );

    // close(): stdin ended, the shim exited 0 with the server, before the SDK's
    // 2 s grace (no SIGTERM), and released stdout and stderr (`close` fired).
    assert_eq!(out["exit"]["code"], 0, "{out}");
    assert_eq!(out["exit"]["signal"], Value::Null, "{out}");
    assert_eq!(
        out["signals"],
        json!([]),
        "the SDK had to signal the shim: it did not exit within 2 s of stdin EOF: {out}"
    );
    assert!(out["close_event_ms"].is_u64(), "{out}");
    let server_stderr = out["stderr"].as_str().unwrap_or_default();
    assert!(
        server_stderr.contains("Secure MCP Filesystem Server running on stdio"),
        "{out}"
    );
    assert!(warden_lines(server_stderr).is_empty(), "{out}");
    assert!(warden_lines(&run.stderr).is_empty(), "{}", run.stderr);

    assert_ended_with_code_0(&env, &daemon, &marker);
}

/// The server is busy when the Python SDK closes stdin, so the SDK escalates:
/// SIGTERM to the shim's process group after 2 s. The shim forwards it; the
/// fixture's handler exits 42, and that is the shim's status: no SIGKILL needed.
#[test]
fn python_sdk_sigterm_reaches_a_busy_server_as_sigterm() {
    let Some(sdks) = require_sdks() else {
        return;
    };
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let marker = unique_marker("py-sdk-busy");
    let fixture = fixture();
    let args = client_shim_args(
        &env,
        &env.minimal_policy(),
        &[fixture.to_str().unwrap(), "--marker", &marker],
    );
    let run = run_sdk_client(
        &env,
        &sdks.python,
        ("client.py", PY_CLIENT),
        &json!({
            "scenario": "busy",
            "command": bin("warden-shim"),
            "args": args,
            "abandon_after_s": 0.5,
            "sleep_ms": 60_000,
        }),
    );
    let out = &run.out;
    assert_eq!(out["abandoned"], true, "{out}");
    let signals = out["signals"].as_array().expect("signals");
    assert_eq!(signals.len(), 1, "expected one SIGTERM, no SIGKILL: {out}");
    assert_eq!(signals[0]["signal"], libc::SIGTERM, "{out}");
    assert_eq!(signals[0]["group_of_child"], true, "{out}");
    assert_eq!(out["returncode"], 42, "{out}\nstderr:\n{}", run.stderr);
    assert!(
        run.stderr.contains("warden-fixture: received SIGTERM"),
        "{}",
        run.stderr
    );
    assert!(warden_lines(&run.stderr).is_empty(), "{}", run.stderr);

    let exit = assert_session_over(&env, &marker);
    assert_eq!(exit["reason"], "", "{exit}");
    assert_eq!(exit["details"]["code"], 42, "{exit}");
}

/// The server is busy and ignores SIGTERM: the TypeScript SDK ends stdin, sends
/// SIGTERM after 2 s (forwarded, ignored), then SIGKILLs the shim 2 s later.
/// The daemon sees its client gone and ends the sandbox: nothing outlives the
/// shim.
#[test]
fn typescript_sdk_sigkill_of_the_shim_ends_the_sandbox() {
    let Some(sdks) = require_sdks() else {
        return;
    };
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let marker = unique_marker("ts-sdk-busy");
    let fixture = fixture();
    let args = client_shim_args(
        &env,
        &env.minimal_policy(),
        &[
            fixture.to_str().unwrap(),
            "--ignore-sigterm",
            "--marker",
            &marker,
        ],
    );
    let run = run_sdk_client(
        &env,
        &sdks.node,
        ("client.mjs", TS_CLIENT),
        &json!({
            "scenario": "busy",
            "sdk": sdks.ts_sdk,
            "command": bin("warden-shim"),
            "args": args,
            "abandon_after_ms": 500,
            "sleep_ms": 60_000,
        }),
    );
    let out = &run.out;
    let sent: Vec<&str> = out["signals"]
        .as_array()
        .expect("signals")
        .iter()
        .filter_map(|s| s["signal"].as_str())
        .collect();
    assert_eq!(sent, ["SIGTERM", "SIGKILL"], "{out}");
    assert_eq!(out["exit"]["signal"], "SIGKILL", "{out}");
    assert!(
        out["pending"]
            .as_str()
            .is_some_and(|p| p.starts_with("rejected")),
        "{out}"
    );

    let exit = assert_session_over(&env, &marker);
    assert_eq!(
        exit["reason"], "the client (warden-shim) went away",
        "{exit}"
    );
    assert_eq!(exit["details"]["signal"], libc::SIGKILL, "{exit}");
}
