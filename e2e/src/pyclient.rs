//! Real MCP clients for the tests: how a client program is run (a user-like
//! environment, one JSON result line), and one reusable Python SDK client
//! (the official `mcp` package in `$WARDEN_TEST_DEPS/venv`) that runs a list
//! of steps against a stdio server, usually the real shim.
//!
//! - [`sdk_python`]: the venv's python, or `skipping:` / a panic under
//!   `WARDEN_REQUIRE_DEPS=1`.
//! - [`client_shim_args`]: the shim's arguments as an MCP client's
//!   configuration has them.
//! - [`run_client`]: runs a client script with a JSON config, returns what it
//!   printed ([`ClientRun`]).
//! - [`python_sdk_client`] / [`run_python_sdk_client`]: the step runner
//!   ([`PY_SDK_CLIENT`]), returning a [`PyRun`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{bin, require_test_deps, run, TestEnv};

/// Bound on one run of [`PY_SDK_CLIENT`] (catches hangs).
pub const PY_SDK_CLIENT_TIMEOUT: Duration = Duration::from_secs(180);

/// The step runner. Argument: a JSON config: `command`, `args`, `env` (given
/// to `StdioServerParameters`) and `steps` (on argv: under 128 KiB in all,
/// the kernel's limit for one argument). It spawns the server with the
/// SDK's `stdio_client` (the server's stderr into a file), initializes, runs
/// the steps in order and prints one JSON line:
/// `{"server": NAME, "steps": [RESULT...], "stream_errors": [...],
/// "returncode": N, "server_stderr": TEXT}`.
///
/// Steps and their results:
/// - `{"op": "list_tools"}`: `{"tools": [NAME...], "definitions": [TOOL...]}`
///   (each definition as the server sent it, camelCase keys).
/// - `{"op": "call_tool", "name": N, "arguments": {...}, "progress": true}`
///   (`arguments` and `progress` optional): `{"isError": B, "text": [..],
///   "structuredContent": V, "progress": COUNT}`, COUNT the progress
///   notifications the SDK's `progress_callback` got (0 unless `progress`);
///   or `{"error": {"code": C, "message": M}}` when the SDK raised its
///   `McpError` (`MCPError` from 2.0) for a JSON-RPC error answer.
/// - `{"op": "sleep", "s": SECONDS}`: `{}`.
/// - `{"op": "parallel", "steps": [STEP...]}`: the steps at once (a task
///   each); a list of their results, in order.
///
/// `stream_errors` are the lines the SDK could not read as JSON-RPC (it hands
/// them to the session's `message_handler`); `returncode` is the server's exit
/// status as the SDK saw it when it stopped it (observed by wrapping
/// `mcp.client.stdio._stop_server_process`; null if the SDK has none).
pub const PY_SDK_CLIENT: &str = r#"
import json, sys, tempfile

import anyio
import mcp.client.stdio as sdk_stdio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
try:
    from mcp import MCPError as SdkError  # 2.0 and later
except ImportError:
    from mcp.shared.exceptions import McpError as SdkError

cfg = json.loads(sys.argv[1])
obs = {"returncode": None}

real_stop = getattr(sdk_stdio, "_stop_server_process", None)
if real_stop is not None:
    async def stop(process):
        await real_stop(process)
        obs["returncode"] = process.returncode
    sdk_stdio._stop_server_process = stop

def field(obj, snake, camel):
    # The SDK's models are snake_case from 2.0, camelCase before.
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)

async def run_step(session, step):
    op = step["op"]
    if op == "list_tools":
        tools = (await session.list_tools()).tools
        return {
            "tools": [t.name for t in tools],
            "definitions": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools],
        }
    if op == "call_tool":
        progress = []
        async def on_progress(value, total, message):
            progress.append(value)
        callback = on_progress if step.get("progress") else None
        try:
            r = await session.call_tool(step["name"], step.get("arguments", {}), progress_callback=callback)
        except SdkError as e:
            return {"error": {"code": e.error.code, "message": e.error.message}, "progress": len(progress)}
        return {
            "isError": bool(field(r, "is_error", "isError")),
            "text": [c.text for c in r.content if c.type == "text"],
            "structuredContent": field(r, "structured_content", "structuredContent"),
            "progress": len(progress),
        }
    if op == "sleep":
        await anyio.sleep(step["s"])
        return {}
    if op == "parallel":
        results = [None] * len(step["steps"])
        async def one(i, s):
            results[i] = await run_step(session, s)
        async with anyio.create_task_group() as tg:
            for i, s in enumerate(step["steps"]):
                tg.start_soon(one, i, s)
        return results
    raise SystemExit("unknown step " + json.dumps(step))

async def main():
    out = {"steps": [], "stream_errors": []}
    async def on_message(message):
        if isinstance(message, Exception):
            out["stream_errors"].append(repr(message))
    params = StdioServerParameters(command=cfg["command"], args=cfg["args"], env=cfg["env"])
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as errlog:
        try:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write, message_handler=on_message) as session:
                    init = await session.initialize()
                    out["server"] = field(init, "server_info", "serverInfo").name
                    for step in cfg["steps"]:
                        out["steps"].append(await run_step(session, step))
        except BaseException:
            # For the failure message: what the server said, and how far it got.
            errlog.seek(0)
            sys.stderr.write("server stderr:\n" + errlog.read() + "\nsteps so far: " + json.dumps(out) + "\n")
            raise
        errlog.seek(0)
        out["server_stderr"] = errlog.read()
    out.update(obs)
    print(json.dumps(out), flush=True)

anyio.run(main)
"#;

/// The venv's python (it has the `mcp` package), from `$WARDEN_TEST_DEPS`;
/// like [`require_test_deps`], panics when it is missing under
/// `WARDEN_REQUIRE_DEPS=1`, else prints `skipping:` and returns `None`.
pub fn sdk_python() -> Option<PathBuf> {
    let deps = require_test_deps()?;
    let python = deps.join("venv/bin/python3");
    if !python.is_file() {
        if std::env::var_os("WARDEN_REQUIRE_DEPS").is_some_and(|v| v == "1") {
            panic!("{} missing; WARDEN_REQUIRE_DEPS=1", python.display());
        }
        println!("skipping: {} missing; run ./scripts/test", python.display());
        return None;
    }
    Some(python)
}

/// The shim's arguments as an MCP client's configuration has them:
/// `--socket S --policy P -- SERVER...`.
pub fn client_shim_args(env: &TestEnv, policy: &Path, server: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--socket".to_string(),
        env.socket.display().to_string(),
        "--policy".to_string(),
        policy.display().to_string(),
        "--".to_string(),
    ];
    args.extend(server.iter().map(|s| s.to_string()));
    args
}

/// What a client printed (its last line, as JSON), and its stderr.
pub struct ClientRun {
    pub out: Value,
    pub stderr: String,
}

/// Runs a client program with `script` (name and text, written into the env's
/// `clients/`) and `config` as its argument, in a user-like environment: the
/// env's HOME and XDG directories, PATH, and each host variable of `pass_on`
/// that is set. Panics (with its output) unless it exits 0 within `timeout`
/// and its last line is JSON.
pub fn run_client(
    env: &TestEnv,
    program: &Path,
    script: (&str, &str),
    config: &Value,
    pass_on: &[&str],
    timeout: Duration,
) -> ClientRun {
    let script_path = env.write(&format!("clients/{}", script.0), script.1);
    let mut cmd = Command::new(program);
    cmd.arg(&script_path)
        .arg(config.to_string())
        .env_clear()
        .envs(env.env_vars())
        .env("PATH", host_path())
        .current_dir(&env.root);
    for name in pass_on {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    let t0 = Instant::now();
    let output = run(&mut cmd, timeout);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{} {} failed with {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        program.display(),
        script.0,
        output.status
    );
    let line = stdout.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    let out: Value = serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "{} printed no JSON result ({e})\nstdout:\n{stdout}\nstderr:\n{stderr}",
            script.0
        )
    });
    let shown = out.to_string();
    let cut = shown
        .char_indices()
        .nth(4000)
        .map_or(shown.len(), |(i, _)| i);
    println!("{} ({:?}): {}", script.0, t0.elapsed(), &shown[..cut]);
    ClientRun { out, stderr }
}

/// This process's PATH (a default when unset), for client programs.
fn host_path() -> std::ffi::OsString {
    std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into())
}

/// What one run of [`PY_SDK_CLIENT`] saw.
#[derive(Debug)]
pub struct PyRun {
    /// The server's name from its `initialize` result.
    pub server: String,
    /// One result per step, in order (see [`PY_SDK_CLIENT`]).
    pub steps: Vec<Value>,
    /// Lines from the server the SDK could not read as JSON-RPC.
    pub stream_errors: Vec<Value>,
    /// The server's exit status as the SDK saw it (`Null` if not observed).
    pub returncode: Value,
    /// What the server (for the shim: the shim and its server) wrote to stderr.
    pub server_stderr: String,
    /// The client's own stderr (the SDK's log lines).
    pub stderr: String,
}

/// Runs [`PY_SDK_CLIENT`] against `warden-shim SHIM_ARGS...` (see
/// [`client_shim_args`]) with `steps`; `None` (after `skipping:`) when the
/// venv is missing, a panic instead under `WARDEN_REQUIRE_DEPS=1`.
pub fn python_sdk_client(env: &TestEnv, shim_args: &[String], steps: &Value) -> Option<PyRun> {
    let python = sdk_python()?;
    Some(run_python_sdk_client(
        env,
        &python,
        &bin("warden-shim"),
        shim_args,
        steps,
    ))
}

/// Runs [`PY_SDK_CLIENT`] with `python` against `command ARGS...` and `steps`.
/// The client runs as [`run_client`] runs it; the server gets the env's HOME
/// and XDG directories and PATH (`StdioServerParameters.env`, over the SDK's
/// default environment).
pub fn run_python_sdk_client(
    env: &TestEnv,
    python: &Path,
    command: &Path,
    args: &[String],
    steps: &Value,
) -> PyRun {
    let mut server_env: serde_json::Map<String, Value> = env
        .env_vars()
        .into_iter()
        .map(|(k, v)| (k, json!(v.display().to_string())))
        .collect();
    server_env.insert("PATH".into(), json!(host_path().to_string_lossy()));
    let config = json!({
        "command": command.display().to_string(),
        "args": args,
        "env": server_env,
        "steps": steps,
    });
    let run = run_client(
        env,
        python,
        ("sdk_client.py", PY_SDK_CLIENT),
        &config,
        &[],
        PY_SDK_CLIENT_TIMEOUT,
    );
    let out = run.out;
    let list = |key: &str| out[key].as_array().cloned().unwrap_or_default();
    PyRun {
        server: out["server"].as_str().unwrap_or_default().to_owned(),
        steps: list("steps"),
        stream_errors: list("stream_errors"),
        returncode: out["returncode"].clone(),
        server_stderr: out["server_stderr"].as_str().unwrap_or_default().to_owned(),
        stderr: run.stderr,
    }
}
