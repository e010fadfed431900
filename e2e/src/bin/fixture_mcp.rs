//! `warden-fixture-mcp`: a small MCP server over stdio for Warden's end-to-end tests.
//!
//! Transport: newline-delimited JSON-RPC 2.0 on stdin/stdout (the MCP stdio transport).
//! Stdout carries only JSON-RPC lines, each written with one write and a flush; anything
//! else goes to stderr. EOF on stdin ends the process with code 0.
//!
//! Flags:
//! - `--ignore-sigterm`: SIGTERM is ignored entirely. Without it, a SIGTERM handler
//!   writes `warden-fixture: received SIGTERM` to stderr and exits with code 42, so a
//!   test can tell that SIGTERM arrived as SIGTERM (and not as a kill).
//! - `--marker VALUE`: ignored; lets a test find this process (and children it spawns,
//!   which carry its argv) on the host by scanning `/proc/*/cmdline`.
//!
//! Tools: `echo`, `big`, `read_file`, `write_file`, `list_dir`, `getenv`, `stderr`,
//! `exit`, `kill_self`, `spawn_child`, `sleep`, `whoami`, `tcp_exchange`, `progress`,
//! `unshare_user` (see [`tools`]).
//!
//! A batch (a JSON array of messages on one line) is answered as JSON-RPC 2.0 says:
//! one array of the answers to its requests, in order, or nothing when it held only
//! notifications.
//!
//! No `unsafe`, so no `fork` and no hand-written signal handler:
//! - Without `--ignore-sigterm`, SIGTERM is caught by `signal-hook` (its handler only
//!   wakes a thread of ours), and that thread writes the line and `_exit`s 42,
//!   whatever the main thread is doing. A caught signal is reset to its default by
//!   `execve`, so the programs the fixture runs get SIGTERM's default action, as
//!   before.
//! - With `--ignore-sigterm`, SIGTERM is blocked (before any thread exists, so in
//!   every thread): never delivered, it interrupts no call, and like an ignored
//!   signal it stays so in the programs the fixture runs (the signal mask survives
//!   `fork` and `execve`).
//! - `spawn_child` runs this binary again (`/proc/self/exe`) with the hidden first
//!   argument [`SLEEPER`] and the rest of our argv (see [`sleeper`]).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fixture: a failed step is a panic

use std::ffi::OsString;
use std::io::{BufRead, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::{kill, SigSet, Signal};
use serde_json::{json, Value};

const PROTOCOL_VERSION: &str = "2025-06-18";
const SIGTERM_MESSAGE: &[u8] = b"warden-fixture: received SIGTERM\n";
/// The hidden first argument of the children `spawn_child` starts.
const SLEEPER: &str = "__warden-fixture-sleeper";

/// True when our SIGTERM thread ends the process on SIGTERM (no `--ignore-sigterm`).
static SIGTERM_HANDLED: AtomicBool = AtomicBool::new(false);

fn sigterm_set() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set
}

/// Blocks SIGTERM in this thread and so in every thread started after it.
fn block_sigterm() {
    if let Err(e) = sigterm_set().thread_block() {
        eprintln!("warden-fixture: cannot block SIGTERM: {e}");
        std::process::exit(1);
    }
}

/// Catches SIGTERM and takes it on a thread of its own: the line on stderr, then
/// `_exit(42)`.
fn handle_sigterm() {
    let mut signals = match signal_hook::iterator::Signals::new([libc::SIGTERM]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("warden-fixture: cannot catch SIGTERM: {e}");
            std::process::exit(1);
        }
    };
    let spawned = std::thread::Builder::new()
        .name("sigterm".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            if signals.forever().next().is_some() {
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(SIGTERM_MESSAGE).and_then(|()| err.flush());
            }
            signal_hook::low_level::exit(42);
        });
    if let Err(e) = spawned {
        eprintln!("warden-fixture: cannot start the SIGTERM thread: {e}");
        std::process::exit(1);
    }
    SIGTERM_HANDLED.store(true, Ordering::SeqCst);
}

fn main() {
    let argv: Vec<OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == SLEEPER) {
        sleeper(&argv);
    }
    let mut ignore_sigterm = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--ignore-sigterm" => ignore_sigterm = true,
            "--marker" => {
                args.next();
            }
            "--help" | "-h" => {
                eprintln!("usage: warden-fixture-mcp [--ignore-sigterm] [--marker VALUE]");
                return;
            }
            // Anything else is ignored so tests can tag the process freely.
            _ => {}
        }
    }
    if ignore_sigterm {
        block_sigterm();
    } else {
        handle_sigterm();
    }

    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) => std::process::exit(0),
            Ok(_) => {}
            Err(e) => {
                eprintln!("warden-fixture: reading stdin: {e}");
                std::process::exit(1);
            }
        }
        let text = trim_line(&line);
        if text.is_empty() {
            continue;
        }
        if let Some(reply) = handle_line(text) {
            send(&reply);
        }
    }
}

fn trim_line(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    &line[..end]
}

/// Writes one JSON-RPC message as one line, in a single write, then flushes.
fn send(message: &Value) {
    let mut buf = serde_json::to_vec(message).expect("serialising a json value");
    buf.push(b'\n');
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // Stdout is line-buffered: a buffer ending in a newline goes straight to the fd.
    if out.write_all(&buf).and_then(|()| out.flush()).is_err() {
        // The reader is gone; nothing more to say to anybody.
        std::process::exit(0);
    }
}

fn error_reply(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn handle_line(text: &[u8]) -> Option<Value> {
    let message: Value = match serde_json::from_slice(text) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("warden-fixture: parse error: {e}");
            return Some(error_reply(
                Value::Null,
                -32700,
                &format!("parse error: {e}"),
            ));
        }
    };
    match message {
        Value::Array(batch) if !batch.is_empty() => {
            let replies: Vec<Value> = batch.into_iter().filter_map(handle_message).collect();
            (!replies.is_empty()).then_some(Value::Array(replies))
        }
        Value::Array(_) => Some(error_reply(
            Value::Null,
            -32600,
            "invalid request: empty batch",
        )),
        message => handle_message(message),
    }
}

fn handle_message(message: Value) -> Option<Value> {
    let Some(object) = message.as_object() else {
        return Some(error_reply(Value::Null, -32600, "invalid request"));
    };
    let id = object.get("id").cloned();
    let Some(method) = object.get("method").and_then(Value::as_str) else {
        // A response from the client, or garbage; responses need no answer.
        return id.map(|id| error_reply(id, -32600, "invalid request: no method"));
    };
    let params = object.get("params").cloned().unwrap_or(Value::Null);
    let Some(id) = id else {
        // A notification (notifications/initialized, notifications/cancelled, ...).
        return None;
    };
    let result = match method {
        "initialize" => Ok(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "warden-fixture", "version": env!("CARGO_PKG_VERSION")},
        })),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": tools()})),
        "tools/call" => call_tool(&params),
        _ => Err((-32601, format!("method not found: {method}"))),
    };
    Some(match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => error_reply(id, code, &message),
    })
}

fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties, "required": required},
    })
}

fn tools() -> Vec<Value> {
    let s = json!({"type": "string"});
    let i = json!({"type": "integer"});
    let b = json!({"type": "boolean"});
    vec![
        tool(
            "echo",
            // A changed definition, for the tool-pinning tests.
            &std::env::var("FIXTURE_ECHO_DESCRIPTION")
                .unwrap_or_else(|_| "Returns text unchanged".into()),
            json!({"text": s}),
            &["text"],
        ),
        tool(
            "big",
            "Returns a text of exactly `bytes` bytes (warden_e2e::big_pattern)",
            json!({"bytes": i}),
            &["bytes"],
        ),
        tool(
            "read_file",
            "Reads a file as text",
            json!({"path": s}),
            &["path"],
        ),
        tool(
            "write_file",
            "Writes content to a file (create or truncate)",
            json!({"path": s, "content": s}),
            &["path", "content"],
        ),
        tool(
            "list_dir",
            "Lists a directory's entry names, sorted",
            json!({"path": s}),
            &["path"],
        ),
        tool(
            "getenv",
            "Returns an environment variable's value, or null",
            json!({"name": s}),
            &["name"],
        ),
        tool(
            "stderr",
            "Writes text and a newline to stderr",
            json!({"text": s}),
            &["text"],
        ),
        tool(
            "exit",
            "Exits at once with this code, without replying",
            json!({"code": i}),
            &["code"],
        ),
        tool(
            "kill_self",
            "Sends itself a signal",
            json!({"signal": i}),
            &["signal"],
        ),
        tool(
            "spawn_child",
            "Forks a child that sleeps forever; returns its pid",
            json!({"ignore_term": b, "setsid": b}),
            &[],
        ),
        tool("sleep", "Sleeps, then replies", json!({"ms": i}), &["ms"]),
        tool(
            "exec",
            "Runs a program (execve of `path` with `args`, no shell) and waits; returns {spawned, code, error}",
            json!({"path": s, "args": {"type": "array", "items": s}}),
            &["path"],
        ),
        tool(
            "alloc",
            "Allocates and touches `mb` MiB, `step_mb` at a time with `pause_ms` between, and keeps it",
            json!({"mb": i, "step_mb": i, "pause_ms": i}),
            &["mb"],
        ),
        tool(
            "whoami",
            "uid, gid, pid, ppid, hostname, cwd, home",
            json!({}),
            &[],
        ),
        tool(
            "unshare_user",
            "Calls unshare(CLONE_NEWUSER) (a call the sandbox refuses and records); returns `ok` or the errno's name",
            json!({}),
            &[],
        ),
        tool(
            "progress",
            "Sends `steps` progress notifications (to the request's progressToken), each \
             followed by a wait until the file `dir`/go-N exists (at most 120 s: a tool \
             error then), then replies",
            json!({"steps": i, "dir": s}),
            &["steps", "dir"],
        ),
        tool(
            "tcp_exchange",
            "Connects to addr (IP:PORT), sends data (text, or hex when hex is true), then reads until the peer closes or timeout_ms (5000) passes without data; returns {connected, error, reply, reply_hex}, or with fail_as_error a tool error when the connect fails",
            json!({"addr": s, "data": s, "hex": b, "timeout_ms": i, "fail_as_error": b}),
            &["addr", "data"],
        ),
    ]
}

/// A successful tool result with a text block.
fn text(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false})
}

/// A successful tool result whose text is `value` as JSON, plus structured content.
fn structured(value: Value) -> Value {
    let mut result = text(value.to_string());
    result["structuredContent"] = if value.is_object() {
        value
    } else {
        json!({ "value": value })
    };
    result
}

/// A tool execution error (reported in the result, as MCP specifies).
fn tool_error(message: String) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": true})
}

type CallResult = Result<Value, (i64, String)>;

fn arg_str<'a>(args: &'a Value, name: &str) -> Result<&'a str, (i64, String)> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| (-32602, format!("argument {name:?} must be a string")))
}

fn arg_i64(args: &Value, name: &str) -> Result<i64, (i64, String)> {
    args.get(name)
        .and_then(Value::as_i64)
        .ok_or_else(|| (-32602, format!("argument {name:?} must be an integer")))
}

fn arg_bool(args: &Value, name: &str) -> bool {
    args.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn call_tool(params: &Value) -> CallResult {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| (-32602, "params.name must be a string".to_string()))?;
    let empty = json!({});
    let args = params.get("arguments").unwrap_or(&empty);
    match name {
        "echo" => Ok(text(arg_str(args, "text")?.to_string())),
        "big" => {
            let bytes = usize::try_from(arg_i64(args, "bytes")?)
                .map_err(|_| (-32602, "bytes must not be negative".to_string()))?;
            Ok(text(warden_e2e::big_pattern(bytes)))
        }
        "read_file" => Ok(match std::fs::read(arg_str(args, "path")?) {
            Ok(content) => text(String::from_utf8_lossy(&content).into_owned()),
            Err(e) => tool_error(e.to_string()),
        }),
        "write_file" => {
            let content = arg_str(args, "content")?;
            Ok(match std::fs::write(arg_str(args, "path")?, content) {
                Ok(()) => text(format!("wrote {} bytes", content.len())),
                Err(e) => tool_error(e.to_string()),
            })
        }
        "list_dir" => Ok(match std::fs::read_dir(arg_str(args, "path")?) {
            Ok(entries) => {
                let mut names: Vec<String> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                structured(json!(names))
            }
            Err(e) => tool_error(e.to_string()),
        }),
        "getenv" => {
            let value = std::env::var_os(arg_str(args, "name")?)
                .map(|v| Value::String(v.to_string_lossy().into_owned()));
            Ok(structured(value.unwrap_or(Value::Null)))
        }
        "stderr" => {
            let mut line = arg_str(args, "text")?.as_bytes().to_vec();
            line.push(b'\n');
            let stderr = std::io::stderr();
            let mut err = stderr.lock();
            let _ = err.write_all(&line).and_then(|()| err.flush());
            Ok(text("ok".to_string()))
        }
        "exit" => {
            let code = arg_i64(args, "code")?;
            std::process::exit(code as i32);
        }
        "kill_self" => {
            let signal = arg_i64(args, "signal")? as i32;
            if let Err(e) = kill_self(signal) {
                return Ok(tool_error(std::io::Error::from(e).to_string()));
            }
            if signal == Signal::SIGTERM as i32 && SIGTERM_HANDLED.load(Ordering::SeqCst) {
                // Our SIGTERM thread is writing its line and ending the process: no
                // reply, as when a handler ran before kill(2) returned.
                loop {
                    std::thread::park();
                }
            }
            // Still here: the signal was ignored, handled or is non-fatal.
            Ok(text(format!("survived signal {signal}")))
        }
        "spawn_child" => Ok(
            match spawn_child(arg_bool(args, "ignore_term"), arg_bool(args, "setsid")) {
                Ok(pid) => structured(json!({ "pid": pid })),
                Err(e) => tool_error(e.to_string()),
            },
        ),
        "unshare_user" => Ok(text(
            match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER) {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("{e:?}"),
            },
        )),
        "progress" => {
            let steps = u64::try_from(arg_i64(args, "steps")?)
                .map_err(|_| (-32602, "steps must not be negative".to_string()))?;
            let dir = std::path::Path::new(arg_str(args, "dir")?);
            let token = params.get("_meta").and_then(|m| m.get("progressToken"));
            for n in 1..=steps {
                if let Some(token) = token {
                    send(&json!({
                        "jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": token, "progress": n, "total": steps},
                    }));
                }
                // The client's go-ahead: it comes only once the notification
                // reached it, so a relay that held it back holds the call up.
                let go = dir.join(format!("go-{n}"));
                let deadline = std::time::Instant::now() + Duration::from_secs(120);
                while !go.exists() {
                    if std::time::Instant::now() > deadline {
                        return Ok(tool_error(format!("no {} within 120 s", go.display())));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            Ok(text(format!("done after {steps} steps")))
        }
        "sleep" => {
            let ms = u64::try_from(arg_i64(args, "ms")?)
                .map_err(|_| (-32602, "ms must not be negative".to_string()))?;
            std::thread::sleep(Duration::from_millis(ms));
            Ok(text(format!("slept {ms} ms")))
        }
        "exec" => {
            let argv: Vec<&str> = args
                .get("args")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let status = std::process::Command::new(arg_str(args, "path")?)
                .args(argv)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .status();
            Ok(structured(match status {
                Ok(st) => json!({"spawned": true, "code": st.code(), "error": null}),
                Err(e) => json!({"spawned": false, "code": null, "error": e.to_string()}),
            }))
        }
        "alloc" => {
            let mb = usize::try_from(arg_i64(args, "mb")?)
                .map_err(|_| (-32602, "mb must not be negative".to_string()))?;
            let step = args
                .get("step_mb")
                .and_then(Value::as_u64)
                .unwrap_or(16)
                .max(1) as usize;
            let pause = args.get("pause_ms").and_then(Value::as_u64).unwrap_or(10);
            let mut done = 0;
            while done < mb {
                let n = step.min(mb - done);
                // Touch every page so it is resident, and keep it for the process's life.
                let block = vec![0x5au8; n << 20];
                std::mem::forget(block);
                done += n;
                std::thread::sleep(Duration::from_millis(pause));
            }
            Ok(text(format!("allocated {mb} MiB")))
        }
        "whoami" => Ok(structured(whoami())),
        "tcp_exchange" => {
            let data = arg_str(args, "data")?;
            let bytes = if arg_bool(args, "hex") {
                decode_hex(data).ok_or_else(|| (-32602, "data is not hex".to_string()))?
            } else {
                data.as_bytes().to_vec()
            };
            let timeout = args
                .get("timeout_ms")
                .and_then(Value::as_u64)
                .unwrap_or(5000);
            let out = tcp_exchange(
                arg_str(args, "addr")?,
                &bytes,
                Duration::from_millis(timeout.max(1)),
            );
            if arg_bool(args, "fail_as_error") && out["connected"] == false {
                return Ok(tool_error(
                    out["error"].as_str().unwrap_or_default().to_owned(),
                ));
            }
            Ok(structured(out))
        }
        _ => Err((-32602, format!("unknown tool: {name}"))),
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// One raw exchange: connect, send, read until EOF or `timeout` without data (at
/// most 1 MiB). A connect or I/O error is reported in `error`, not as a tool error.
fn tcp_exchange(addr: &str, bytes: &[u8], timeout: Duration) -> Value {
    use std::io::Read;
    let addr: std::net::SocketAddr = match addr.parse() {
        Ok(a) => a,
        Err(e) => return json!({"connected": false, "error": format!("bad address {addr}: {e}")}),
    };
    let mut stream = match std::net::TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => s,
        Err(e) => return json!({"connected": false, "error": format!("connect {addr}: {e}")}),
    };
    let mut reply = Vec::new();
    let mut error = None;
    if let Err(e) = stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.write_all(bytes))
    {
        error = Some(format!("send: {e}"));
    }
    let mut buf = [0u8; 16 * 1024];
    while error.is_none() && reply.len() < 1 << 20 {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(e) => error = Some(format!("recv: {e}")),
        }
    }
    let hex: String = reply.iter().map(|b| format!("{b:02x}")).collect();
    json!({
        "connected": true,
        "error": error,
        "reply": String::from_utf8_lossy(&reply),
        "reply_hex": hex,
    })
}

fn whoami() -> Value {
    let hostname = match nix::unistd::gethostname() {
        Ok(h) => Value::String(h.to_string_lossy().into_owned()),
        Err(_) => Value::Null,
    };
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let (pid, ppid) = (nix::unistd::getpid(), nix::unistd::getppid());
    json!({
        "uid": uid.as_raw(),
        "gid": gid.as_raw(),
        "pid": pid.as_raw(),
        "ppid": ppid.as_raw(),
        "hostname": hostname,
        "cwd": std::env::current_dir().ok().map(|p| p.to_string_lossy().into_owned()),
        "home": std::env::var("HOME").ok(),
    })
}

/// kill(2) of our own pid with signal number `signal` (0: only the check).
fn kill_self(signal: i32) -> nix::Result<()> {
    let signal = match signal {
        0 => None,
        n => Some(Signal::try_from(n)?),
    };
    kill(nix::unistd::getpid(), signal)
}

/// Starts a child that sleeps forever and returns its pid (as seen by this process).
///
/// With `setsid`, the child starts a new session and starts the sleeper from there,
/// then exits (the classic daemon double fork), so the sleeper is re-parented away
/// from us and outlives us unless the sandbox kills its whole tree. With
/// `ignore_term`, the sleeper ignores SIGTERM, so only SIGKILL ends it. The sleeper's
/// stdin and stdout point at /dev/null (so it never holds the MCP channel), stderr
/// stays. It carries our argv after the hidden argument, so `--marker` finds it.
///
/// The pid comes back on the child's stdout, a pipe: the sleeper writes it once
/// its SIGTERM disposition is in place, then points its stdout at /dev/null.
fn spawn_child(ignore_term: bool, setsid: bool) -> std::io::Result<i32> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let mut child = sleeper_command(
        argv.first(),
        argv.get(1..).unwrap_or_default(),
        ignore_term,
        setsid,
    )
    .stdout(Stdio::piped())
    .spawn()?;
    let mut buf = [0u8; 4];
    let mut got = 0;
    if let Some(mut out) = child.stdout.take() {
        while got < buf.len() {
            match out.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
    if setsid {
        // Reap the intermediate process, which exits right after starting the sleeper.
        let _ = child.wait();
    }
    if got != buf.len() {
        return Err(std::io::Error::other("child did not report its pid"));
    }
    Ok(i32::from_ne_bytes(buf))
}

/// This binary again, as a [`sleeper`] that carries `args` (our argv without
/// `argv[0]`): `ARGV0 SLEEPER IGNORE_TERM SETSID ARGS...` (the flags as `1` or
/// `0`), stdin on /dev/null, stderr ours.
fn sleeper_command(
    argv0: Option<&OsString>,
    args: &[OsString],
    ignore_term: bool,
    setsid: bool,
) -> Command {
    let mut cmd = Command::new("/proc/self/exe");
    if let Some(argv0) = argv0 {
        cmd.arg0(argv0);
    }
    let flag = |b: bool| if b { "1" } else { "0" };
    cmd.arg(SLEEPER)
        .args([flag(ignore_term), flag(setsid)])
        .args(args)
        .stdin(Stdio::null());
    cmd
}

/// A child of `spawn_child` (`argv`: `ARGV0 SLEEPER IGNORE_TERM SETSID ARGS...`).
/// Never returns.
fn sleeper(argv: &[OsString]) -> ! {
    let ignore_term = argv.get(2).is_some_and(|a| a == "1");
    let setsid = argv.get(3).is_some_and(|a| a == "1");
    if setsid {
        // The intermediate: a new session, the sleeper in it (its stdout, the pipe,
        // is inherited), and gone.
        let _ = nix::unistd::setsid();
        let args = argv.get(4..).unwrap_or_default();
        let code = match sleeper_command(argv.first(), args, ignore_term, false).spawn() {
            Ok(_) => 0,
            Err(_) => 1,
        };
        std::process::exit(code);
    }
    // SIGTERM blocked (never delivered), or its default action: execve reset a
    // caught SIGTERM, and a mask inherited from an `--ignore-sigterm` fixture is
    // cleared here.
    let mask = sigterm_set();
    let masked = if ignore_term {
        mask.thread_block()
    } else {
        mask.thread_unblock()
    };
    if masked.is_err() {
        std::process::exit(1);
    }
    let pid = nix::unistd::getpid().as_raw().to_ne_bytes();
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&pid).and_then(|()| out.flush());
    drop(out);
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = nix::unistd::dup2_stdout(&null);
    }
    loop {
        nix::unistd::pause();
    }
}
