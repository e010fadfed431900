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
/// to `StdioServerParameters`), `era` (optional) and `steps` (on argv: under
/// 128 KiB in all, the kernel's limit for one argument). It spawns the
/// server with the SDK's `stdio_client` (the server's stderr into a file),
/// opens the session in the protocol era asked for (`"2025"`, the default:
/// the `initialize` handshake; `"2026"`: the 2026-07-28 stateless revision,
/// `server/discover`, after which every request carries its `_meta`), runs
/// the steps in order and prints one JSON line:
/// `{"server": NAME, "protocol_version": V, "steps": [RESULT...],
/// "stream_errors": [...], "returncode": N, "server_stderr": TEXT}`.
///
/// Steps and their results:
/// - `{"op": "list_tools"}`: `{"tools": [NAME...], "definitions": [TOOL...]}`
///   (each definition as the server sent it, camelCase keys).
/// - `{"op": "call_tool", "name": N, "arguments": {...}, "progress": true}`
///   (`arguments` and `progress` optional): `{"isError": B, "text": [..],
///   "structuredContent": V, "progress": COUNT}`, COUNT the progress
///   notifications the SDK's `progress_callback` got (0 unless `progress`);
///   or `{"error": {"code": C, "message": M}}` when the SDK raised its
///   `McpError` (`MCPError` from 2.0) for a JSON-RPC error answer. With
///   `"go_ahead": DIR`, each progress notification N is answered by creating
///   `DIR/go-N` (what [`PY_SDK_SERVER`]'s `paced` waits for); with
///   `"cancel_after_progress": K`, the call is abandoned once K came (the
///   SDK then sends `notifications/cancelled`): `{"cancelled": true,
///   "progress": COUNT}`. With `"input": CONTENT`, what the server asks of
///   the client during the call is accepted with CONTENT: in the 2025 era an
///   `elicitation/create` request from the server (the SDK's
///   `elicitation_callback`), in the 2026 era an `input_required` result,
///   after which the call is made again with the responses and the
///   request's state; the result has `"rounds"`, the requests made.
/// - `{"op": "sleep", "s": SECONDS}`: `{}`.
/// - `{"op": "parallel", "steps": [STEP...]}`: the steps at once (a task
///   each); a list of their results, in order.
///
/// `stream_errors` are the lines the SDK could not read as JSON-RPC (it hands
/// them to the session's `message_handler`); `returncode` is the server's exit
/// status as the SDK saw it when it stopped it (observed by wrapping
/// `mcp.client.stdio._stop_server_process`; null if the SDK has none).
pub const PY_SDK_CLIENT: &str = r#"
import json, os, sys, tempfile

import anyio
import mcp.client.stdio as sdk_stdio
import mcp.types as mtypes
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
try:
    from mcp import MCPError as SdkError  # 2.0 and later
except ImportError:
    from mcp.shared.exceptions import McpError as SdkError

cfg = json.loads(sys.argv[1])
obs = {"returncode": None}
# What the step under way answers the server's questions with.
answer = {"content": None}

async def on_elicit(context, params):
    if answer["content"] is None:
        return mtypes.ErrorData(code=mtypes.INVALID_REQUEST, message="no input expected")
    return mtypes.ElicitResult(action="accept", content=answer["content"])

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
        scope = anyio.CancelScope()
        async def on_progress(value, total, message):
            progress.append(value)
            if step.get("go_ahead"):
                open(os.path.join(step["go_ahead"], "go-%d" % int(value)), "w").close()
            if len(progress) == step.get("cancel_after_progress"):
                scope.cancel()
        callback = on_progress if step.get("progress") else None
        r = None
        rounds = 1
        answer["content"] = step.get("input")
        try:
            with scope:
                if "input" in step:
                    extra = {"allow_input_required": True}
                    r = await session.call_tool(step["name"], step.get("arguments", {}), progress_callback=callback, **extra)
                    while getattr(r, "result_type", None) == "input_required":
                        responses = {
                            k: mtypes.ElicitResult(action="accept", content=step["input"])
                            for k in (r.input_requests or {})
                        }
                        rounds += 1
                        r = await session.call_tool(step["name"], step.get("arguments", {}), progress_callback=callback,
                                                    input_responses=responses, request_state=r.request_state, **extra)
                else:
                    r = await session.call_tool(step["name"], step.get("arguments", {}), progress_callback=callback)
        except SdkError as e:
            return {"error": {"code": e.error.code, "message": e.error.message}, "progress": len(progress)}
        finally:
            answer["content"] = None
        if r is None:
            return {"cancelled": True, "progress": len(progress)}
        return {
            "isError": bool(field(r, "is_error", "isError")),
            "text": [c.text for c in r.content if c.type == "text"],
            "structuredContent": field(r, "structured_content", "structuredContent"),
            "progress": len(progress),
            "rounds": rounds,
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
                async with ClientSession(read, write, message_handler=on_message, elicitation_callback=on_elicit) as session:
                    if cfg.get("era", "2025") == "2026":
                        await session.discover()
                        out["server"] = session.server_info.name
                    else:
                        init = await session.initialize()
                        out["server"] = field(init, "server_info", "serverInfo").name
                    out["protocol_version"] = getattr(session, "protocol_version", None)
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
    /// The server's name from its `initialize` (or `server/discover`) result.
    pub server: String,
    /// The protocol version the session speaks, as the SDK negotiated it.
    pub protocol_version: Value,
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

/// The MCP protocol era a client opens its session in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// The `initialize` handshake (2025 revisions).
    Handshake2025,
    /// The 2026-07-28 stateless revision: `server/discover`, and every
    /// request carries its protocol version and client capabilities in
    /// `_meta`.
    Stateless2026,
}

impl Era {
    fn config(self) -> &'static str {
        match self {
            Era::Handshake2025 => "2025",
            Era::Stateless2026 => "2026",
        }
    }
}

/// Runs [`PY_SDK_CLIENT`] against `warden-shim SHIM_ARGS...` (see
/// [`client_shim_args`]) with `steps`, in the 2025 era; `None` (after
/// `skipping:`) when the venv is missing, a panic instead under
/// `WARDEN_REQUIRE_DEPS=1`.
pub fn python_sdk_client(env: &TestEnv, shim_args: &[String], steps: &Value) -> Option<PyRun> {
    python_sdk_client_in(env, Era::Handshake2025, shim_args, steps)
}

/// [`python_sdk_client`] in the protocol era `era`.
pub fn python_sdk_client_in(
    env: &TestEnv,
    era: Era,
    shim_args: &[String],
    steps: &Value,
) -> Option<PyRun> {
    let python = sdk_python()?;
    Some(run_python_sdk_client(
        env,
        &python,
        &bin("warden-shim"),
        shim_args,
        era,
        steps,
    ))
}

/// Runs [`PY_SDK_CLIENT`] with `python` against `command ARGS...` and `steps`,
/// in `era`. The client runs as [`run_client`] runs it; the server gets the
/// env's HOME and XDG directories and PATH (`StdioServerParameters.env`, over
/// the SDK's default environment).
pub fn run_python_sdk_client(
    env: &TestEnv,
    python: &Path,
    command: &Path,
    args: &[String],
    era: Era,
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
        "era": era.config(),
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
        protocol_version: out["protocol_version"].clone(),
        steps: list("steps"),
        stream_errors: list("stream_errors"),
        returncode: out["returncode"].clone(),
        server_stderr: out["server_stderr"].as_str().unwrap_or_default().to_owned(),
        stderr: run.stderr,
    }
}

/// A stdio MCP server on the official Python SDK (`mcp`'s `MCPServer`, in
/// `$WARDEN_TEST_DEPS/venv`), which speaks both protocol eras (the SDK's
/// dual-era loop: the client's first request decides). Tools:
/// - `echo(text)`: the text;
/// - `paced(steps, dir)`: for N in 1..=steps a progress notification N (to
///   the request's progress token), then a wait until `dir/go-N` exists (the
///   client's go-ahead, see [`PY_SDK_CLIENT`]'s `go_ahead`; a tool error
///   after 120 s); then `done after STEPS steps`. Abandoned by the client,
///   the SDK cancels it;
/// - `confirm(text)`: asks the client first (a form with a boolean `ok`):
///   in the 2025 era by an `elicitation/create` request to the client during
///   the call, in the 2026 era by answering `input_required` (the client
///   asks again with its response); then `confirmed TEXT`;
/// - `read_file(path)`, `write_file(path, content)`: as their names say
///   (an error is a tool error, `isError`).
///
/// The description of `echo` is `$SDK_ECHO_DESCRIPTION` when set (for the
/// pinning tests).
pub const PY_SDK_SERVER: &str = r#"
import os

import anyio
import mcp_types
from pydantic import BaseModel
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("warden-sdk-server")

class Confirmation(BaseModel):
    ok: bool

@app.tool(description=os.environ.get("SDK_ECHO_DESCRIPTION", "Returns text unchanged"))
def echo(text: str) -> str:
    return text

@app.tool(description="Progress notifications, each waiting for dir/go-N")
async def paced(steps: int, dir: str, ctx: Context) -> str:
    for n in range(1, steps + 1):
        await ctx.report_progress(n, steps)
        go = os.path.join(dir, "go-%d" % n)
        with anyio.move_on_after(120):
            while not os.path.exists(go):
                await anyio.sleep(0.005)
        if not os.path.exists(go):
            raise ToolError("no %s within 120 s" % go)
    return "done after %d steps" % steps

@app.tool(description="Asks the client to confirm first")
async def confirm(text: str, ctx: Context):
    question = "Really %s?" % text
    if (ctx.protocol_version or "").startswith("2026"):
        if ctx.input_responses is None:
            form = mcp_types.ElicitRequestFormParams(
                message=question, requested_schema=Confirmation.model_json_schema())
            return mcp_types.InputRequiredResult(
                input_requests={"ok": mcp_types.ElicitRequest(params=form)}, request_state="asked")
    else:
        r = await ctx.elicit(question, Confirmation)
        if r.action != "accept":
            raise ToolError("not confirmed")
    return "confirmed %s" % text

@app.tool(description="Reads a file as text")
def read_file(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise ToolError(str(e))

@app.tool(description="Writes content to a file")
def write_file(path: str, content: str) -> str:
    try:
        with open(path, "w") as f:
            f.write(content)
    except OSError as e:
        raise ToolError(str(e))
    return "wrote %d bytes" % len(content)

app.run("stdio")
"#;

/// [`PY_SDK_SERVER`] for a session: the command after the shim's `--`, and
/// the paths its policy must grant read (the venv's, the script's
/// directory).
pub struct SdkServer {
    pub argv: Vec<String>,
    pub read: Vec<PathBuf>,
}

impl SdkServer {
    /// `filesystem.read` for the server, as a YAML flow list's items.
    pub fn read_yaml(&self) -> String {
        self.read
            .iter()
            .map(|p| format!("{:?}", p.display().to_string()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Writes [`PY_SDK_SERVER`] into the env (`servers/sdk_server.py`); `None`
/// (after `skipping:`) without the venv, as [`sdk_python`].
pub fn sdk_server(env: &TestEnv) -> Option<SdkServer> {
    let python = sdk_python()?;
    let deps = require_test_deps()?;
    let script = env.write("servers/sdk_server.py", PY_SDK_SERVER);
    let dir = script.parent().map(Path::to_path_buf).unwrap_or_default();
    Some(SdkServer {
        argv: vec![
            python.display().to_string(),
            "-u".into(),
            script.display().to_string(),
        ],
        read: vec![deps, dir],
    })
}
