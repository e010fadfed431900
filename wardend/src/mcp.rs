//! Following the MCP (JSON-RPC) stream of a session, for issue 17's `mcp`
//! records: which requests are in flight, which tool each `tools/call`
//! names, how each ends (result, error code, cancelled), sizes, progress.
//!
//! An [`Observer`] is fed copies of the bytes the relay moves, per
//! direction, in whatever chunks they came; it never sees, changes or holds
//! back the bytes the other side gets. MCP's stdio transport frames one
//! JSON-RPC message (or batch) per line. Both protocol eras are the same
//! JSON-RPC underneath: the 2025 handshake (`initialize`) and the 2026-07
//! stateless revision (`server/discover`, metadata on each request); the
//! era is what the first request says. A stream that is not JSON-RPC
//! (a line that does not parse, or a message that is not a JSON-RPC
//! object) is reported once per direction, then ignored: the bytes still
//! pass untouched, this only stops being able to say anything about them.
//!
//! Not wired into the relay yet (the tee of the session's pipes comes with
//! the records); pure and tested on its own.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The longest line followed; a longer one is skipped (reported once as
/// malformed: a single message this size is not a stream Warden can follow).
pub const MAX_LINE: usize = 64 << 20;
/// Requests followed at once per direction; beyond, new ones are counted
/// but not followed (a peer that never answers must not grow the daemon).
pub const MAX_IN_FLIGHT: usize = 4096;

/// Which way a message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Client to server (the server's stdin).
    ToServer,
    /// Server to client (its stdout).
    ToClient,
}

impl Dir {
    fn index(self) -> usize {
        match self {
            Dir::ToServer => 0,
            Dir::ToClient => 1,
        }
    }

    fn other(self) -> Dir {
        match self {
            Dir::ToServer => Dir::ToClient,
            Dir::ToClient => Dir::ToServer,
        }
    }
}

/// Which revision of the protocol the session speaks, by its first request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `initialize` first: the 2025 handshake.
    Handshake2025,
    /// `server/discover` first: the 2026-07 stateless revision.
    Stateless2026,
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Result {
        /// A `tools/call` result with `isError: true`.
        tool_error: bool,
    },
    Error {
        code: i64,
        message: String,
    },
    /// `notifications/cancelled` for it, from the side that asked.
    Cancelled {
        reason: Option<String>,
    },
    /// The session ended with it still in flight.
    Unanswered,
}

/// What the stream showed.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A request began (`dir`: where it went).
    Request {
        dir: Dir,
        id: String,
        method: String,
        tool: Option<String>,
        bytes: usize,
    },
    /// A request ended.
    End {
        dir: Dir,
        id: String,
        method: String,
        tool: Option<String>,
        outcome: Outcome,
        duration: Duration,
        request_bytes: usize,
        response_bytes: usize,
        progress: u64,
    },
    /// A notification other than progress and cancellation.
    Notification {
        dir: Dir,
        method: String,
        bytes: usize,
    },
    /// A response to no request in flight (or to one not followed).
    Unmatched { dir: Dir, id: String, bytes: usize },
    /// This direction stopped being followable (once per direction).
    Malformed { dir: Dir, reason: String },
}

struct Pending {
    method: String,
    tool: Option<String>,
    started: Instant,
    bytes: usize,
    progress: u64,
    token: Option<String>,
}

/// One session's stream, both directions.
#[derive(Default)]
pub struct Observer {
    partial: [Vec<u8>; 2],
    skipping: [bool; 2],
    malformed: [bool; 2],
    /// Requests in flight, by the direction they went and their id.
    pending: [HashMap<String, Pending>; 2],
    /// Progress tokens to the request they belong to.
    tokens: [HashMap<String, String>; 2],
    era: Option<Era>,
    /// Requests not followed because [`MAX_IN_FLIGHT`] were.
    pub dropped: u64,
}

impl Observer {
    pub fn new() -> Observer {
        Observer::default()
    }

    pub fn era(&self) -> Option<Era> {
        self.era
    }

    /// The `tools/call` requests to the server in flight: (id, tool).
    pub fn tool_calls(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self.pending[Dir::ToServer.index()]
            .iter()
            .filter_map(|(id, p)| p.tool.clone().map(|t| (id.clone(), t)))
            .collect();
        v.sort();
        v
    }

    /// Feeds bytes that went `dir`; returns what they completed.
    pub fn feed(&mut self, dir: Dir, mut bytes: &[u8], now: Instant) -> Vec<Event> {
        let mut out = Vec::new();
        let d = dir.index();
        while !bytes.is_empty() {
            let nl = bytes.iter().position(|&b| b == b'\n');
            let (chunk, rest, complete) = match nl {
                Some(i) => (&bytes[..i], &bytes[i + 1..], true),
                None => (bytes, &[][..], false),
            };
            bytes = rest;
            if self.skipping[d] {
                if complete {
                    self.skipping[d] = false;
                }
                continue;
            }
            if self.partial[d].len() + chunk.len() > MAX_LINE {
                self.partial[d].clear();
                self.skipping[d] = !complete;
                self.malformed(
                    dir,
                    format!("a line longer than {} MiB", MAX_LINE >> 20),
                    &mut out,
                );
                continue;
            }
            self.partial[d].extend_from_slice(chunk);
            if complete {
                let line = std::mem::take(&mut self.partial[d]);
                self.line(dir, &line, now, &mut out);
            }
        }
        out
    }

    /// The session ended: what is still in flight ends unanswered.
    pub fn finish(&mut self, now: Instant) -> Vec<Event> {
        let mut out = Vec::new();
        for dir in [Dir::ToServer, Dir::ToClient] {
            let mut left: Vec<(String, Pending)> = self.pending[dir.index()].drain().collect();
            left.sort_by_key(|(_, p)| p.started);
            for (id, p) in left {
                out.push(end(dir, id, p, Outcome::Unanswered, 0, now));
            }
            self.tokens[dir.index()].clear();
        }
        out
    }

    fn malformed(&mut self, dir: Dir, reason: String, out: &mut Vec<Event>) {
        if !self.malformed[dir.index()] {
            self.malformed[dir.index()] = true;
            out.push(Event::Malformed { dir, reason });
        }
    }

    fn line(&mut self, dir: Dir, line: &[u8], now: Instant, out: &mut Vec<Event>) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let v: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                self.malformed(dir, format!("not JSON ({e})"), out);
                return;
            }
        };
        match v {
            Value::Array(batch) if !batch.is_empty() => {
                // A batch's size is shared out; each message is one event.
                let each = line.len() / batch.len();
                for m in batch {
                    self.message(dir, m, each, now, out);
                }
            }
            Value::Array(_) => self.malformed(dir, "an empty batch".into(), out),
            m => self.message(dir, m, line.len(), now, out),
        }
    }

    fn message(&mut self, dir: Dir, m: Value, bytes: usize, now: Instant, out: &mut Vec<Event>) {
        let Value::Object(o) = m else {
            self.malformed(dir, "a message that is not a JSON object".into(), out);
            return;
        };
        if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            self.malformed(dir, "a message without \"jsonrpc\": \"2.0\"".into(), out);
            return;
        }
        let id = o.get("id").filter(|i| !i.is_null()).map(id_key);
        match (o.get("method").and_then(Value::as_str), id) {
            (Some(method), Some(id)) => {
                let params = o.get("params");
                let tool = (method == "tools/call")
                    .then(|| params.and_then(|p| p.get("name")).and_then(Value::as_str))
                    .flatten()
                    .map(str::to_owned);
                let token = params
                    .and_then(|p| p.get("_meta"))
                    .and_then(|m| m.get("progressToken"))
                    .map(id_key);
                if self.era.is_none() {
                    self.era = match method {
                        "initialize" => Some(Era::Handshake2025),
                        "server/discover" => Some(Era::Stateless2026),
                        _ => None,
                    };
                }
                out.push(Event::Request {
                    dir,
                    id: id.clone(),
                    method: method.to_owned(),
                    tool: tool.clone(),
                    bytes,
                });
                let pending = &mut self.pending[dir.index()];
                if pending.len() >= MAX_IN_FLIGHT && !pending.contains_key(&id) {
                    self.dropped += 1;
                    return;
                }
                if let Some(t) = &token {
                    self.tokens[dir.index()].insert(t.clone(), id.clone());
                }
                pending.insert(
                    id,
                    Pending {
                        method: method.to_owned(),
                        tool,
                        started: now,
                        bytes,
                        progress: 0,
                        token,
                    },
                );
            }
            (Some(method), None) => {
                self.notification(dir, method, o.get("params"), bytes, now, out)
            }
            (None, Some(id)) => {
                // A response goes the other way from its request.
                let req_dir = dir.other();
                let Some(p) = self.pending[req_dir.index()].remove(&id) else {
                    out.push(Event::Unmatched { dir, id, bytes });
                    return;
                };
                if let Some(t) = &p.token {
                    self.tokens[req_dir.index()].remove(t);
                }
                let outcome = match (o.get("result"), o.get("error")) {
                    (_, Some(e)) => Outcome::Error {
                        code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                        message: e
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                    },
                    (Some(r), None) => Outcome::Result {
                        tool_error: r.get("isError").and_then(Value::as_bool) == Some(true),
                    },
                    (None, None) => {
                        self.malformed(dir, "a response with neither result nor error".into(), out);
                        return;
                    }
                };
                out.push(end(req_dir, id, p, outcome, bytes, now));
            }
            (None, None) => self.malformed(dir, "a message with neither method nor id".into(), out),
        }
    }

    fn notification(
        &mut self,
        dir: Dir,
        method: &str,
        params: Option<&Value>,
        bytes: usize,
        now: Instant,
        out: &mut Vec<Event>,
    ) {
        match method {
            // Progress flows back to whoever asked, naming its token.
            "notifications/progress" => {
                let req_dir = dir.other();
                let token = params.and_then(|p| p.get("progressToken")).map(id_key);
                let id = token.and_then(|t| self.tokens[req_dir.index()].get(&t).cloned());
                if let Some(p) = id.and_then(|id| self.pending[req_dir.index()].get_mut(&id)) {
                    p.progress += 1;
                }
            }
            // Cancellation comes from the side that asked.
            "notifications/cancelled" => {
                let id = params.and_then(|p| p.get("requestId")).map(id_key);
                let reason = params
                    .and_then(|p| p.get("reason"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some((id, p)) =
                    id.and_then(|id| self.pending[dir.index()].remove(&id).map(|p| (id, p)))
                {
                    if let Some(t) = &p.token {
                        self.tokens[dir.index()].remove(t);
                    }
                    out.push(end(dir, id, p, Outcome::Cancelled { reason }, 0, now));
                }
            }
            _ => out.push(Event::Notification {
                dir,
                method: method.to_owned(),
                bytes,
            }),
        }
    }
}

fn end(
    dir: Dir,
    id: String,
    p: Pending,
    outcome: Outcome,
    response_bytes: usize,
    now: Instant,
) -> Event {
    Event::End {
        dir,
        id,
        method: p.method,
        tool: p.tool,
        outcome,
        duration: now.saturating_duration_since(p.started),
        request_bytes: p.bytes,
        response_bytes,
        progress: p.progress,
    }
}

/// A request id (or progress token) as a key: strings as they are, numbers
/// and anything else as their JSON text, so `1` and `"1"` stay apart.
fn id_key(v: &Value) -> String {
    match v {
        Value::String(s) => format!("s:{s}"),
        other => format!("j:{other}"),
    }
}

/// An id key as it is shown (`"abc"` for strings, `7` for numbers).
pub fn show_id(key: &str) -> String {
    match key.split_once(':') {
        Some(("s", s)) => format!("{s:?}"),
        Some((_, j)) => j.to_owned(),
        None => key.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(v: Value) -> Vec<u8> {
        let mut b = serde_json::to_vec(&v).unwrap();
        b.push(b'\n');
        b
    }

    fn ends(ev: &[Event]) -> Vec<(String, Option<String>, Outcome)> {
        ev.iter()
            .filter_map(|e| match e {
                Event::End {
                    method,
                    tool,
                    outcome,
                    ..
                } => Some((method.clone(), tool.clone(), outcome.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_tool_call_is_followed_from_request_to_result_whatever_the_chunks() {
        let mut o = Observer::new();
        let t0 = Instant::now();
        let req = line(
            json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}),
        );
        // One byte at a time: nothing until the newline.
        let mut ev = Vec::new();
        for b in &req {
            ev.extend(o.feed(Dir::ToServer, std::slice::from_ref(b), t0));
        }
        assert_eq!(
            ev,
            [Event::Request {
                dir: Dir::ToServer,
                id: "j:7".into(),
                method: "tools/call".into(),
                tool: Some("echo".into()),
                bytes: req.len() - 1,
            }]
        );
        assert_eq!(o.tool_calls(), [("j:7".to_string(), "echo".to_string())]);
        let resp = line(
            json!({"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}),
        );
        let (a, b) = resp.split_at(10);
        assert!(o.feed(Dir::ToClient, a, t0).is_empty());
        let ev = o.feed(Dir::ToClient, b, t0 + Duration::from_millis(5));
        match &ev[..] {
            [Event::End {
                dir: Dir::ToServer,
                id,
                tool,
                outcome: Outcome::Result { tool_error: false },
                duration,
                request_bytes,
                response_bytes,
                ..
            }] => {
                assert_eq!(id, "j:7");
                assert_eq!(tool.as_deref(), Some("echo"));
                assert_eq!(*duration, Duration::from_millis(5));
                assert_eq!(*request_bytes, req.len() - 1);
                assert_eq!(*response_bytes, resp.len() - 1);
            }
            other => panic!("{other:?}"),
        }
        assert!(o.tool_calls().is_empty());
    }

    #[test]
    fn errors_tool_errors_and_string_ids_are_told_apart() {
        let mut o = Observer::new();
        let t = Instant::now();
        let mut ev = o.feed(
            Dir::ToServer,
            &[
                line(json!({"jsonrpc":"2.0","id":"1","method":"tools/call","params":{"name":"a"}})),
                line(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"b"}})),
            ]
            .concat(),
            t,
        );
        ev.extend(
            o.feed(
                Dir::ToClient,
                &[
                    line(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}})),
                    line(json!({"jsonrpc":"2.0","id":"1","result":{"isError":true,"content":[]}})),
                ]
                .concat(),
                t,
            ),
        );
        assert_eq!(
            ends(&ev),
            [
                (
                    "tools/call".to_string(),
                    Some("b".to_string()),
                    Outcome::Error {
                        code: -32602,
                        message: "bad".into()
                    }
                ),
                (
                    "tools/call".to_string(),
                    Some("a".to_string()),
                    Outcome::Result { tool_error: true }
                ),
            ]
        );
    }

    #[test]
    fn batches_notifications_progress_and_cancellation() {
        let mut o = Observer::new();
        let t = Instant::now();
        let batch = line(json!([
            {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"long","_meta":{"progressToken":"p1"}}},
            {"jsonrpc":"2.0","id":2,"method":"tools/list"},
            {"jsonrpc":"2.0","method":"notifications/initialized"}
        ]));
        let ev = o.feed(Dir::ToServer, &batch, t);
        assert_eq!(ev.len(), 3, "{ev:?}");
        assert!(
            matches!(&ev[2], Event::Notification { method, .. } if method == "notifications/initialized")
        );
        let progress = line(
            json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p1","progress":1}}),
        );
        assert!(o
            .feed(Dir::ToClient, &[progress.clone(), progress].concat(), t)
            .is_empty());
        let ev = o.feed(
            Dir::ToServer,
            &line(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user"}})),
            t,
        );
        match &ev[..] {
            [Event::End {
                outcome: Outcome::Cancelled { reason },
                progress,
                tool,
                ..
            }] => {
                assert_eq!(reason.as_deref(), Some("user"));
                assert_eq!(*progress, 2);
                assert_eq!(tool.as_deref(), Some("long"));
            }
            other => panic!("{other:?}"),
        }
        // A late answer to the cancelled call matches nothing.
        let ev = o.feed(
            Dir::ToClient,
            &line(json!({"jsonrpc":"2.0","id":1,"result":{}})),
            t,
        );
        assert!(matches!(&ev[..], [Event::Unmatched { .. }]), "{ev:?}");
        // What is left at the end ends unanswered.
        let ev = o.finish(t);
        assert_eq!(
            ends(&ev),
            [("tools/list".to_string(), None, Outcome::Unanswered)]
        );
    }

    #[test]
    fn requests_from_the_server_are_answered_by_the_client() {
        let mut o = Observer::new();
        let t = Instant::now();
        o.feed(
            Dir::ToClient,
            &line(json!({"jsonrpc":"2.0","id":0,"method":"sampling/createMessage","params":{}})),
            t,
        );
        assert!(o.tool_calls().is_empty());
        let ev = o.feed(
            Dir::ToServer,
            &line(json!({"jsonrpc":"2.0","id":0,"result":{}})),
            t,
        );
        assert!(
            matches!(&ev[..], [Event::End { dir: Dir::ToClient, method, .. }] if method == "sampling/createMessage"),
            "{ev:?}"
        );
    }

    #[test]
    fn the_era_is_the_first_requests() {
        let t = Instant::now();
        let mut a = Observer::new();
        a.feed(
            Dir::ToServer,
            &line(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}})),
            t,
        );
        assert_eq!(a.era(), Some(Era::Handshake2025));
        let mut b = Observer::new();
        b.feed(
            Dir::ToServer,
            &line(json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{}}})),
            t,
        );
        assert_eq!(b.era(), Some(Era::Stateless2026));
    }

    #[test]
    fn a_stream_that_is_not_json_rpc_is_reported_once_per_direction() {
        let mut o = Observer::new();
        let t = Instant::now();
        let ev = o.feed(
            Dir::ToClient,
            b"hello there\n{\"not\":\"rpc\"}\n\xff\xfe\n",
            t,
        );
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert!(
            matches!(&ev[0], Event::Malformed { dir: Dir::ToClient, reason } if reason.starts_with("not JSON"))
        );
        // The other direction is still followed, and reported on its own.
        let ev = o.feed(
            Dir::ToServer,
            &line(json!({"jsonrpc":"2.0","id":1,"method":"ping"})),
            t,
        );
        assert!(matches!(&ev[..], [Event::Request { .. }]));
        let ev = o.feed(Dir::ToServer, b"[]\n", t);
        assert!(
            matches!(
                &ev[..],
                [Event::Malformed {
                    dir: Dir::ToServer,
                    ..
                }]
            ),
            "{ev:?}"
        );
        // Blank lines and CRLF are fine.
        let mut o = Observer::new();
        let ev = o.feed(
            Dir::ToServer,
            b"\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n",
            t,
        );
        assert!(matches!(&ev[..], [Event::Request { .. }]), "{ev:?}");
    }

    #[test]
    fn an_overlong_line_is_skipped_and_what_follows_is_followed() {
        let mut o = Observer::new();
        let t = Instant::now();
        let big = vec![b'x'; MAX_LINE / 4];
        let mut ev = Vec::new();
        for _ in 0..5 {
            ev.extend(o.feed(Dir::ToServer, &big, t));
        }
        ev.extend(o.feed(Dir::ToServer, b"tail\n", t));
        ev.extend(o.feed(
            Dir::ToServer,
            &line(json!({"jsonrpc":"2.0","id":1,"method":"ping"})),
            t,
        ));
        assert!(
            matches!(&ev[0], Event::Malformed { reason, .. } if reason.contains("longer than")),
            "{ev:?}"
        );
        assert!(matches!(ev.last(), Some(Event::Request { .. })), "{ev:?}");
        assert!(o.partial[0].is_empty());
    }

    #[test]
    fn in_flight_requests_are_bounded() {
        let mut o = Observer::new();
        let t = Instant::now();
        let mut all = Vec::new();
        for i in 0..MAX_IN_FLIGHT + 10 {
            all.extend(line(json!({"jsonrpc":"2.0","id":i,"method":"ping"})));
        }
        o.feed(Dir::ToServer, &all, t);
        assert_eq!(o.pending[0].len(), MAX_IN_FLIGHT);
        assert_eq!(o.dropped, 10);
        assert_eq!(show_id("s:abc"), "\"abc\"");
        assert_eq!(show_id("j:7"), "7");
    }
}
