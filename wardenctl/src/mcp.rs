//! The MCP client `wardenctl trace --mcp` drives a server with, over its
//! stdio (newline-delimited JSON-RPC 2.0): enough of the protocol to make a
//! server start up and list what it offers, so a trace sees what those need.
//!
//! Both eras: first the 2025 handshake (`initialize`, then
//! `notifications/initialized`); a server that refuses `initialize` (an error
//! answer) is asked `server/discover`, the 2026-07 stateless revision's
//! discovery, after which requests need no handshake. Then `tools/list`,
//! `resources/list`, `prompts/list` (each followed through its `nextCursor`
//! pages, a method the server lacks is fine) and each `--call` as
//! `tools/call`. Requests the server makes of us are answered (`ping` with
//! an empty result, anything else "method not found"); notifications are
//! read and dropped.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};

/// The protocol revision asked for in `initialize`.
pub const PROTOCOL: &str = "2025-06-18";
/// Pages of one listing followed at most.
const MAX_PAGES: usize = 20;

struct Conn {
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    next_id: u64,
    timeout: Duration,
}

/// What a JSON-RPC request came back with.
enum Reply {
    Result(Value),
    Error { code: i64, message: String },
}

impl Conn {
    fn send(&mut self, v: &Value) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(v)?;
        line.push(b'\n');
        self.stdin
            .write_all(&line)
            .and_then(|()| self.stdin.flush())
            .context("the server's stdin closed")
    }

    fn request(&mut self, method: &str, params: Value) -> anyhow::Result<Reply> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        loop {
            let line = self.lines.recv_timeout(self.timeout).map_err(|e| match e {
                mpsc::RecvTimeoutError::Timeout => {
                    anyhow!("no answer to {method} within {:?}", self.timeout)
                }
                mpsc::RecvTimeoutError::Disconnected => {
                    anyhow!("the server closed its stdout before answering {method}")
                }
            })?;
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                // Not JSON (a server logging on stdout): skipped.
                continue;
            };
            // A request of the server's own.
            if let (Some(m), Some(rid)) = (msg.get("method").and_then(Value::as_str), msg.get("id"))
            {
                let answer = if m == "ping" {
                    json!({"jsonrpc": "2.0", "id": rid, "result": {}})
                } else {
                    json!({"jsonrpc": "2.0", "id": rid,
                           "error": {"code": -32601, "message": "method not found"}})
                };
                self.send(&answer)?;
                continue;
            }
            if msg.get("id").and_then(Value::as_u64) != Some(id) {
                continue; // a notification, or an answer to something else
            }
            if let Some(e) = msg.get("error") {
                return Ok(Reply::Error {
                    code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: e
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                });
            }
            return Ok(Reply::Result(
                msg.get("result").cloned().unwrap_or(Value::Null),
            ));
        }
    }

    /// Every page of a listing; `None` when the server has no such method.
    fn list(&mut self, method: &str, key: &str) -> anyhow::Result<Option<usize>> {
        let mut n = 0;
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            match self.request(method, params)? {
                Reply::Error { .. } if n == 0 && cursor.is_none() => return Ok(None),
                Reply::Error { code, message } => bail!("{method}: error {code}: {message}"),
                Reply::Result(r) => {
                    n += r.get(key).and_then(Value::as_array).map_or(0, Vec::len);
                    cursor = r
                        .get("nextCursor")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    if cursor.is_none() {
                        break;
                    }
                }
            }
        }
        Ok(Some(n))
    }
}

/// Drives the server on `child`'s stdin/stdout; returns one line saying
/// what it offered.
pub fn drive(
    child: &mut Child,
    calls: &[(String, Value)],
    timeout: Duration,
) -> anyhow::Result<String> {
    let stdin = child.stdin.take().context("no stdin to the server")?;
    let stdout = child.stdout.take().context("no stdout from the server")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut c = Conn {
        stdin,
        lines: rx,
        next_id: 0,
        timeout,
    };
    let client = json!({"name": "wardenctl-trace", "version": env!("CARGO_PKG_VERSION")});
    let init = c.request(
        "initialize",
        json!({"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": client}),
    )?;
    let (era, info) = match init {
        Reply::Result(r) => {
            c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
            ("initialize", r)
        }
        Reply::Error { code, message } => match c.request("server/discover", json!({}))? {
            Reply::Result(r) => ("server/discover", r),
            Reply::Error { .. } => {
                bail!("the server refused initialize (error {code}: {message}) and server/discover")
            }
        },
    };
    let name = info
        .pointer("/serverInfo/name")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_owned();
    let tools = c.list("tools/list", "tools")?;
    let resources = c.list("resources/list", "resources")?;
    let prompts = c.list("prompts/list", "prompts")?;
    let mut called = Vec::new();
    for (tool, args) in calls {
        let r = c.request("tools/call", json!({"name": tool, "arguments": args}))?;
        let ok = match r {
            Reply::Result(v) => !v.get("isError").and_then(Value::as_bool).unwrap_or(false),
            Reply::Error { .. } => false,
        };
        called.push(format!("{tool} {}", if ok { "ok" } else { "failed" }));
    }
    let shown = |n: Option<usize>| n.map_or("none".to_owned(), |n| n.to_string());
    Ok(format!(
        "drove {name} ({era}): {} tools, {} resources, {} prompts{}",
        shown(tools),
        shown(resources),
        shown(prompts),
        if called.is_empty() {
            String::new()
        } else {
            format!("; called {}", called.join(", "))
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::{Command, Stdio};

    /// A server in a few lines of Python: `era` 2025 answers `initialize`;
    /// 2026 refuses it and answers `server/discover`. Both page their tool
    /// list, ping us once, log a non-JSON line on stdout, and record every
    /// method they were asked in the file `log`.
    const SERVER: &str = r#"
import json, sys
era, log = sys.argv[1], open(sys.argv[2], "w")
def send(m): sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
print("not json: a server that logs on stdout", flush=True)
for line in sys.stdin:
    m = json.loads(line)
    log.write(m.get("method", "<answer>") + "\n"); log.flush()
    if "id" not in m or "method" not in m:
        continue
    i, meth = m["id"], m["method"]
    if meth == "initialize":
        if era == "2026":
            send({"jsonrpc": "2.0", "id": i, "error": {"code": -32602, "message": "use server/discover"}})
        else:
            send({"jsonrpc": "2.0", "method": "ping", "id": "srv-1"})
            send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "py-2025"}}})
    elif meth == "server/discover":
        send({"jsonrpc": "2.0", "id": i, "result": {"serverInfo": {"name": "py-2026"}, "capabilities": {"tools": {}}}})
    elif meth == "tools/list":
        page2 = m.get("params", {}).get("cursor") == "p2"
        tools = [{"name": "b"}] if page2 else [{"name": "a"}]
        res = {"tools": tools} if page2 else {"tools": tools, "nextCursor": "p2"}
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}})
        send({"jsonrpc": "2.0", "id": i, "result": res})
    elif meth == "tools/call":
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [], "isError": m["params"]["name"] != "a"}})
    else:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "no"}})
"#;

    fn drive_era(era: &str) -> (anyhow::Result<String>, String) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("methods");
        let mut child = Command::new("/usr/bin/python3")
            .args(["-c", SERVER, era, log.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let calls = vec![
            ("a".to_string(), json!({})),
            ("b".to_string(), json!({"x": 1})),
        ];
        let r = drive(&mut child, &calls, Duration::from_secs(20));
        drop(child.stdin.take());
        child.wait().unwrap();
        (r, std::fs::read_to_string(&log).unwrap())
    }

    #[test]
    fn the_2025_handshake_then_listings_pages_and_calls() {
        if !Path::new("/usr/bin/python3").exists() {
            eprintln!("skipping: no /usr/bin/python3");
            return;
        }
        let (r, methods) = drive_era("2025");
        assert_eq!(
            r.unwrap(),
            "drove py-2025 (initialize): 2 tools, none resources, none prompts; called a ok, b failed"
        );
        let m: Vec<&str> = methods.lines().collect();
        assert_eq!(
            m,
            [
                "initialize",
                "<answer>",
                "notifications/initialized",
                "tools/list",
                "tools/list",
                "resources/list",
                "prompts/list",
                "tools/call",
                "tools/call"
            ]
        );
    }

    #[test]
    fn the_2026_stateless_revision_is_discovered_without_a_handshake() {
        if !Path::new("/usr/bin/python3").exists() {
            eprintln!("skipping: no /usr/bin/python3");
            return;
        }
        let (r, methods) = drive_era("2026");
        assert!(r
            .unwrap()
            .starts_with("drove py-2026 (server/discover): 2 tools"));
        assert!(!methods.contains("notifications/initialized"), "{methods}");
        assert!(
            methods.starts_with("initialize\nserver/discover\ntools/list"),
            "{methods}"
        );
    }
}
