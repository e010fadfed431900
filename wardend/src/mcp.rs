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
//! object) is reported once per direction; such lines are skipped and the
//! messages around them still followed. The bytes always pass untouched.
//!
//! [`watch`] runs an observer on a session's taps (`stdio.rs`, [`Tap`]:
//! `tee(2)` of the pipes, `MSG_PEEK` of sockets, never waited for) and
//! turns what it sees into `mcp.request`, `mcp.end` and `mcp.stream`
//! records, rate-limited per session.
//!
//! [`Tap`]: crate::stdio::Tap

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use warden_audit::event;

use crate::stdio::{Mark, TapReader};
use crate::Daemon;

/// The longest line followed; a longer one is skipped (reported once as
/// malformed: a single message this size is not a stream Warden can follow).
pub const MAX_LINE: usize = 64 << 20;
/// Requests followed at once per direction; beyond, new ones are counted
/// but not followed (a peer that never answers must not grow the daemon).
pub const MAX_IN_FLIGHT: usize = 4096;
/// Answers kept per direction while their request may still be coming.
pub const MAX_EARLY: usize = 64;

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
    /// A result with `resultType: "input_required"` (2026-07-28): the
    /// server needs the client's input first; the client asks again with a
    /// new request carrying it.
    InputRequired,
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
        /// A `tools/call`'s arguments, redacted, with `audit.mcp_arguments`.
        arguments: Option<Value>,
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
    /// A `tools/list` answer from the server: each tool's name and the
    /// fingerprint of its definition (name, description, schemas...).
    Tools { tools: Vec<(String, String)> },
}

struct Pending {
    method: String,
    tool: Option<String>,
    started: Instant,
    bytes: usize,
    progress: u64,
    token: Option<String>,
}

/// An answer read before its request: id, message, size, when it was copied.
type Early = (String, serde_json::Map<String, Value>, usize, Instant);

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
    /// Answers read before their request (by the direction the request
    /// goes), oldest first, at most [`MAX_EARLY`].
    early: [std::collections::VecDeque<Early>; 2],
    /// Progress read before its request (by the direction the request
    /// goes): token, count; oldest first, at most [`MAX_EARLY`]. The two
    /// directions are read apart, so a server's first progress can be read
    /// before the request that asked for it.
    early_progress: [std::collections::VecDeque<(String, u64)>; 2],
    era: Option<Era>,
    /// Requests not followed because [`MAX_IN_FLIGHT`] were.
    pub dropped: u64,
    /// Gaps in each direction's copy (bytes that went by unobserved).
    pub lost: [u64; 2],
    /// `audit.mcp_arguments`: the `tools/call` arguments go into their
    /// `mcp.request`, with these secrets taken out.
    arguments: Option<Redact>,
}

/// The secret values a recorded argument must not hold: the values of the
/// variables the session passes through from the client (`env.allow`), each
/// replaced by `[redacted: NAME]`.
#[derive(Debug, Clone, Default)]
pub struct Redact {
    /// (name, value), longest value first (a value inside another is
    /// replaced after it).
    secrets: Vec<(String, String)>,
}

/// The most of a call's arguments recorded, as JSON text; beyond, only their
/// size.
pub const MAX_ARGUMENTS: usize = 16 << 10;

impl Redact {
    /// Values shorter than 4 bytes are left alone: they would be found in
    /// every argument and say nothing.
    pub fn new(vars: impl IntoIterator<Item = (String, String)>) -> Redact {
        let mut secrets: Vec<(String, String)> =
            vars.into_iter().filter(|(_, v)| v.len() >= 4).collect();
        secrets.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
        Redact { secrets }
    }

    fn text(&self, s: &str) -> String {
        let mut out = s.to_owned();
        for (name, value) in &self.secrets {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), &format!("[redacted: {name}]"));
            }
        }
        out
    }

    /// `v` with every secret taken out of its strings and keys.
    pub fn value(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.text(s)),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.value(x)).collect()),
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| (self.text(k), self.value(x)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// What `mcp.request` records of `arguments`: the redacted value, or,
    /// beyond [`MAX_ARGUMENTS`], a note of its size.
    pub fn record(&self, arguments: &Value) -> Value {
        let v = self.value(arguments);
        let len = serde_json::to_vec(&v).map(|b| b.len()).unwrap_or(0);
        if len > MAX_ARGUMENTS {
            serde_json::json!({"truncated": true, "bytes": len})
        } else {
            v
        }
    }
}

impl Observer {
    pub fn new() -> Observer {
        Observer::default()
    }

    /// An observer that also records `tools/call` arguments (redacted).
    pub fn with_arguments(redact: Redact) -> Observer {
        Observer {
            arguments: Some(redact),
            ..Observer::default()
        }
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

    /// Bytes went by `dir` uncopied: the line in progress is lost, and so
    /// is the rest of the line the copy resumes in.
    pub fn gap(&mut self, dir: Dir) {
        let d = dir.index();
        self.partial[d].clear();
        self.skipping[d] = true;
        self.lost[d] += 1;
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
                let arguments = match (&self.arguments, &tool) {
                    (Some(r), Some(_)) => {
                        params.and_then(|p| p.get("arguments")).map(|a| r.record(a))
                    }
                    _ => None,
                };
                out.push(Event::Request {
                    dir,
                    id: id.clone(),
                    method: method.to_owned(),
                    tool: tool.clone(),
                    bytes,
                    arguments,
                });
                let pending = &mut self.pending[dir.index()];
                if pending.len() >= MAX_IN_FLIGHT && !pending.contains_key(&id) {
                    self.dropped += 1;
                    return;
                }
                let mut progress = 0;
                if let Some(t) = &token {
                    self.tokens[dir.index()].insert(t.clone(), id.clone());
                    // Its progress came first: counted now.
                    let early = &mut self.early_progress[dir.index()];
                    if let Some(k) = early.iter().position(|(e, _)| e == t) {
                        progress = early.remove(k).map_or(0, |(_, n)| n);
                    }
                }
                pending.insert(
                    id.clone(),
                    Pending {
                        method: method.to_owned(),
                        tool,
                        started: now,
                        bytes,
                        progress,
                        token,
                    },
                );
                // Its answer came first: take it now.
                let early = &mut self.early[dir.index()];
                if let Some(k) = early.iter().position(|(i, ..)| *i == id) {
                    if let Some((_, answer, b, at)) = early.remove(k) {
                        // At the time it was copied, not now: it ended then.
                        self.message(dir.other(), Value::Object(answer), b, at.max(now), out);
                    }
                }
            }
            (Some(method), None) => {
                self.notification(dir, method, o.get("params"), bytes, now, out)
            }
            (None, Some(id)) => {
                // A response goes the other way from its request.
                let req_dir = dir.other();
                let Some(p) = self.pending[req_dir.index()].remove(&id) else {
                    // Its request may still be on its way to the observer
                    // (the two directions are read apart): kept a moment.
                    let early = &mut self.early[req_dir.index()];
                    if early.len() >= MAX_EARLY {
                        if let Some((old, _, b, _)) = early.pop_front() {
                            out.push(Event::Unmatched {
                                dir,
                                id: old,
                                bytes: b,
                            });
                        }
                    }
                    early.push_back((id, o, bytes, now));
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
                    (Some(r), None)
                        if r.get("resultType").and_then(Value::as_str)
                            == Some("input_required") =>
                    {
                        Outcome::InputRequired
                    }
                    (Some(r), None) => Outcome::Result {
                        tool_error: r.get("isError").and_then(Value::as_bool) == Some(true),
                    },
                    (None, None) => {
                        self.malformed(dir, "a response with neither result nor error".into(), out);
                        return;
                    }
                };
                if p.method == "tools/list" && req_dir == Dir::ToServer {
                    if let Some(tools) = o
                        .get("result")
                        .and_then(|r| r.get("tools"))
                        .and_then(Value::as_array)
                    {
                        out.push(Event::Tools {
                            tools: tools.iter().filter_map(fingerprint).collect(),
                        });
                    }
                }
                out.push(end(req_dir, id, p, outcome, bytes, now));
            }
            // `"id": null`: an error about a request that could not be read
            // (a parse error), valid JSON-RPC, answering nothing followed.
            (None, None) if o.contains_key("id") && o.contains_key("error") => {
                out.push(Event::Unmatched {
                    dir,
                    id: "j:null".into(),
                    bytes,
                });
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
                let Some(token) = params.and_then(|p| p.get("progressToken")).map(id_key) else {
                    return;
                };
                let id = self.tokens[req_dir.index()].get(&token).cloned();
                if let Some(p) = id.and_then(|id| self.pending[req_dir.index()].get_mut(&id)) {
                    p.progress += 1;
                    return;
                }
                // Its request may still be on its way to the observer (read
                // from the other tap): counted a while for it.
                let early = &mut self.early_progress[req_dir.index()];
                match early.iter_mut().find(|(t, _)| *t == token) {
                    Some((_, n)) => *n += 1,
                    None => {
                        if early.len() >= MAX_EARLY {
                            early.pop_front();
                        }
                        early.push_back((token, 1));
                    }
                }
            }
            // Cancellation comes from the side that asked; and on stdio in
            // the 2026-07-28 revision, from the server to end a client's
            // `subscriptions/listen` stream (its only use that way).
            "notifications/cancelled" => {
                let Some(id) = params.and_then(|p| p.get("requestId")).map(id_key) else {
                    return;
                };
                let reason = params
                    .and_then(|p| p.get("reason"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let req_dir = if self.pending[dir.index()].contains_key(&id) {
                    dir
                } else if dir == Dir::ToClient
                    && self.pending[Dir::ToServer.index()]
                        .get(&id)
                        .is_some_and(|p| p.method == "subscriptions/listen")
                {
                    Dir::ToServer
                } else {
                    return;
                };
                if let Some(p) = self.pending[req_dir.index()].remove(&id) {
                    if let Some(t) = &p.token {
                        self.tokens[req_dir.index()].remove(t);
                    }
                    out.push(end(req_dir, id, p, Outcome::Cancelled { reason }, 0, now));
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

/// A tool definition's name and fingerprint: sha256 of its JSON, keys
/// sorted (serde_json's map), so the same definition always hashes alike.
pub(crate) fn fingerprint(tool: &Value) -> Option<(String, String)> {
    use sha2::Digest;
    let name = tool.get("name")?.as_str()?.to_owned();
    let text = serde_json::to_vec(tool).ok()?;
    Some((name, hex::encode(sha2::Sha256::digest(&text))))
}

/// A request id (or progress token) as a key: strings as they are, numbers
/// and anything else as their JSON text, so `1` and `"1"` stay apart.
pub(crate) fn id_key(v: &Value) -> String {
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

impl Daemon {
    /// `rec` with the tool call `session` has in flight, as the observer
    /// follows it: `call` (the request id) and `tool` when there is exactly
    /// one, `calls` (each "TOOL (id ID)") when there are several. Best
    /// effort: the observer runs a moment behind the relay.
    pub fn during_call(
        &self,
        session: &str,
        rec: impl Into<warden_audit::Record>,
    ) -> warden_audit::Record {
        self.during_call_at(session, rec, Instant::now())
    }

    /// [`Daemon::during_call`] for an event that happened at `at` (the
    /// notifier's time of a file access or refused call).
    pub fn during_call_at(
        &self,
        session: &str,
        rec: impl Into<warden_audit::Record>,
        at: Instant,
    ) -> warden_audit::Record {
        let mut rec = rec.into();
        let Some(log) = self.sessions.get(session).map(|s| s.tool_calls.clone()) else {
            return rec;
        };
        // Copies made before `at` that the observer has not taken yet:
        // give it a moment (it runs just behind the relay).
        catch_up(&log, at);
        let calls = calls_at(&log, at);
        if calls.is_empty() {
            return rec;
        }
        if !rec.details.is_object() {
            rec.details = Value::Object(Default::default());
        }
        if let Some(d) = rec.details.as_object_mut() {
            match &calls[..] {
                [(id, tool)] => {
                    d.insert("call".into(), Value::String(id.clone()));
                    d.insert("tool".into(), Value::String(tool.clone()));
                }
                many => {
                    d.insert(
                        "calls".into(),
                        many.iter()
                            .map(|(id, tool)| Value::String(format!("{tool} (id {id})")))
                            .collect(),
                    );
                }
            }
        }
        rec
    }
}

/// Whether the observer has yet to take a copy the relay made by `at`, in
/// either direction: a request copied by then may have begun a call, and an
/// answer copied by then ended one (until the observer has followed it, a
/// call that ended before `at` would look in flight at `at`).
pub fn behind(log: &InFlight, at: Instant) -> bool {
    let l = log.lock().unwrap_or_else(|p| p.into_inner());
    l.taps
        .iter()
        .flatten()
        .filter_map(|(marks, _)| front_at(marks))
        .any(|t| t <= at)
}

/// Wakes the observer at once (a record waits for it): the relay rings it
/// only once idle.
fn hurry(log: &InFlight) {
    let l = log.lock().unwrap_or_else(|p| p.into_inner());
    for (_, wake) in l.taps.iter().flatten() {
        wake.ring();
    }
}

/// Waits (at most [`CATCH_UP`]) until the observer has taken what the relay
/// copied by `at`. On a worker of tokio's multi-threaded runtime the wait
/// hands the worker's other tasks to another thread first.
fn catch_up(log: &InFlight, at: Instant) {
    if !behind(log, at) {
        return;
    }
    hurry(log);
    let wait = || {
        let deadline = Instant::now() + CATCH_UP;
        while behind(log, at) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}

/// The tool calls in flight at `at`: (id as shown, tool) each.
pub fn calls_at(log: &InFlight, at: Instant) -> Vec<(String, String)> {
    log.lock()
        .unwrap_or_else(|p| p.into_inner())
        .at(at)
        .iter()
        .map(|c| (c.id.clone(), c.tool.clone()))
        .collect()
}

/// [`calls_at`] once the observer has caught up with `at` (waiting at
/// most [`CATCH_UP`], without holding a thread).
pub async fn calls_at_caught_up(log: &InFlight, at: Instant) -> Vec<(String, String)> {
    let deadline = Instant::now() + CATCH_UP;
    if behind(log, at) {
        hurry(log);
    }
    while behind(log, at) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    calls_at(log, at)
}

/// Records per second per session before the rest are only counted.
pub const RECORDS_PER_SECOND: u32 = 200;

/// Follows a session's stream on its taps (stdin, stdout) until both end,
/// writing its `mcp` records. The thread ends when the relay has closed
/// the taps.
pub fn watch(
    daemon: Arc<Daemon>,
    session: String,
    readers: [TapReader; 2],
    in_flight: InFlight,
    (profile, pin_note): (Profile, PinNote),
    mcp: warden_core::policy::McpPolicy,
    arguments: Option<Redact>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let [a, b] = readers;
    let fds = [(a.fd, a.marks, a.wake), (b.fd, b.marks, b.wake)];
    // A task, not a thread: an idle session costs no thread for it.
    Ok(tokio::spawn(async move {
        run(
            &daemon,
            &session,
            fds,
            &in_flight,
            (profile, pin_note),
            mcp,
            arguments,
        )
        .await
    }))
}

/// Which server a session runs, for pinning its tool definitions: the
/// policy's name, else its path, else the command; the pin file is named
/// by a hash of the policy path and the command.
#[derive(Debug, Clone)]
pub struct Profile {
    pub label: String,
    pub key: String,
}

impl Profile {
    pub fn of(name: Option<&str>, policy: Option<&std::path::Path>, argv: &[String]) -> Profile {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        if let Some(p) = policy {
            h.update(p.as_os_str().as_encoded_bytes());
        }
        for a in argv {
            h.update([0u8]);
            h.update(a.as_bytes());
        }
        let label = name
            .map(str::to_owned)
            .or_else(|| policy.map(|p| p.display().to_string()))
            .unwrap_or_else(|| argv.join(" "));
        Profile {
            label,
            key: hex::encode(h.finalize())[..16].to_owned(),
        }
    }
}

/// What `wardenctl ps` shows of a session's tool definitions against its
/// profile's pin: those that differ (its `mcp.pin` records with `state:
/// changed`, less those accepted into the pin since) and, with `mcp.pin:
/// enforce`, those withheld now.
#[derive(Default)]
pub struct PinView {
    /// Tool → `added`, `changed` or `removed`.
    differ: std::collections::BTreeMap<String, &'static str>,
    enforce: Option<Arc<crate::gate::Enforce>>,
}

/// A session's [`PinView`], kept by its observer or its gate.
pub type PinNote = Arc<std::sync::Mutex<PinView>>;

impl PinView {
    /// An `mcp.pin` record of the session, as it is written.
    pub fn note(&mut self, rec: &event::McpPin) {
        match rec.state.as_str() {
            "changed" => {
                for (tools, what) in [
                    (&rec.added, "added"),
                    (&rec.changed, "changed"),
                    (&rec.removed, "removed"),
                ] {
                    for t in tools {
                        self.differ.insert(t.clone(), what);
                    }
                }
            }
            "accepted" => {
                for t in rec.added.iter().chain(&rec.changed) {
                    self.differ.remove(t);
                }
            }
            _ => {}
        }
    }

    /// The session's `mcp.pin: enforce` state, whose withheld tools are shown.
    pub(crate) fn enforced_by(&mut self, enforce: Arc<crate::gate::Enforce>) {
        self.enforce = Some(enforce);
    }

    /// The tools that differ from the pin ("TOOL (changed)"...), and those
    /// withheld now.
    pub fn shown(&self) -> (Vec<String>, Vec<String>) {
        (
            self.differ
                .iter()
                .map(|(t, what)| format!("{t} ({what})"))
                .collect(),
            self.enforce
                .as_ref()
                .map(|e| e.withheld())
                .unwrap_or_default(),
        )
    }
}

/// Notes `rec` in `note`, then records it.
pub(crate) fn record_pin(daemon: &Daemon, note: &PinNote, rec: event::McpPin) {
    note.lock().unwrap_or_else(|p| p.into_inner()).note(&rec);
    daemon.audit.record(rec);
}

/// The tool definitions pinned for a profile, and what this session saw.
pub(crate) struct Pins {
    path: std::path::PathBuf,
    profile: Profile,
    /// The session's `mcp:` policy: tools it refuses are not offered, so
    /// neither pinned nor missed.
    mcp: warden_core::policy::McpPolicy,
    /// The pinned definitions (name → fingerprint), or None before the
    /// first `tools/list` of the profile.
    pinned: Option<std::collections::BTreeMap<String, String>>,
    /// What this session's `tools/list` answers showed.
    seen: std::collections::BTreeMap<String, String>,
    first: bool,
    reported: std::collections::BTreeSet<String>,
}

impl Pins {
    pub(crate) fn load(
        state_dir: &std::path::Path,
        profile: Profile,
        mcp: warden_core::policy::McpPolicy,
    ) -> Pins {
        let path = state_dir
            .join("mcp-pins")
            .join(format!("{}.json", profile.key));
        let pinned = Self::read(&path);
        Pins {
            path,
            profile,
            mcp,
            pinned,
            seen: Default::default(),
            first: false,
            reported: Default::default(),
        }
    }

    /// One `tools/list` answer: the first of the profile becomes the pin; a
    /// later one is compared. Returns the record to write, if any.
    pub(crate) fn tools(
        &mut self,
        session: &str,
        tools: Vec<(String, String)>,
    ) -> Option<event::McpPin> {
        let tools: Vec<(String, String)> = tools
            .into_iter()
            .filter(|(name, _)| self.mcp.refuses(name).is_none())
            .collect();
        self.seen.extend(tools.iter().cloned());
        let Some(pinned) = &self.pinned else {
            self.first = true;
            let pinned: std::collections::BTreeMap<String, String> = tools.into_iter().collect();
            self.store(&pinned);
            let names = pinned.keys().cloned().collect();
            self.pinned = Some(pinned);
            return Some(event::McpPin {
                session: session.to_owned(),
                profile: self.profile.label.clone(),
                reason: "the first tool definitions of this profile, pinned".into(),
                state: "pinned".into(),
                added: names,
                changed: vec![],
                removed: vec![],
            });
        };
        if self.first {
            // The pin is this session's own: later pages join it.
            let mut all = pinned.clone();
            all.extend(tools);
            self.store(&all);
            self.pinned = Some(all);
            return None;
        }
        let mut added = Vec::new();
        let mut changed = Vec::new();
        for (name, digest) in &tools {
            if self.reported.contains(name) {
                continue;
            }
            match pinned.get(name) {
                None => added.push(name.clone()),
                Some(d) if d != digest => changed.push(name.clone()),
                Some(_) => continue,
            }
            self.reported.insert(name.clone());
        }
        (!added.is_empty() || !changed.is_empty())
            .then(|| self.changed(session, added, changed, vec![]))
    }

    fn read(path: &std::path::Path) -> Option<std::collections::BTreeMap<String, String>> {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| serde_json::from_value(v.get("tools")?.clone()).ok())
    }

    /// Whether `name` with definition `digest` differs from the pin:
    /// `added` (not pinned), `changed`, or None (as pinned, or no pin yet).
    pub(crate) fn differs(&self, name: &str, digest: &str) -> Option<&'static str> {
        match self.pinned.as_ref()?.get(name) {
            None => Some("added"),
            Some(d) if d != digest => Some("changed"),
            Some(_) => None,
        }
    }

    /// A person accepted `name` as it is now: it joins the pin.
    pub(crate) fn accept(&mut self, name: &str, digest: &str) {
        // What the file holds now (another session may have added to it).
        let mut all = Self::read(&self.path)
            .or_else(|| self.pinned.clone())
            .unwrap_or_default();
        all.insert(name.to_owned(), digest.to_owned());
        self.store(&all);
        self.pinned = Some(all);
    }

    /// The profile as recorded (`resource` of `mcp.pin`).
    pub(crate) fn profile_label(&self) -> &str {
        &self.profile.label
    }

    /// At the session's end: pinned tools its answers never showed.
    pub(crate) fn finish(&mut self, session: &str) -> Option<event::McpPin> {
        let pinned = self.pinned.as_ref()?;
        if self.first || self.seen.is_empty() {
            return None;
        }
        let removed: Vec<String> = pinned
            .keys()
            .filter(|k| !self.seen.contains_key(*k) && self.mcp.refuses(k).is_none())
            .cloned()
            .collect();
        (!removed.is_empty()).then(|| self.changed(session, vec![], vec![], removed))
    }

    fn changed(
        &self,
        session: &str,
        added: Vec<String>,
        changed: Vec<String>,
        removed: Vec<String>,
    ) -> event::McpPin {
        event::McpPin {
            session: session.to_owned(),
            profile: self.profile.label.clone(),
            reason: format!(
                "the server's tool definitions differ from those pinned for this profile \
                 ({}); to take the new ones as the pin, remove {}",
                [
                    ("added", &added),
                    ("changed", &changed),
                    ("removed", &removed)
                ]
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| format!("{k}: {}", v.join(", ")))
                .collect::<Vec<_>>()
                .join("; "),
                self.path.display()
            ),
            state: "changed".into(),
            added,
            changed,
            removed,
        }
    }

    fn store(&self, tools: &std::collections::BTreeMap<String, String>) {
        let body = serde_json::json!({"profile": self.profile.label, "tools": tools});
        let write = || -> std::io::Result<()> {
            use std::os::unix::fs::DirBuilderExt;
            if let Some(dir) = self.path.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)?;
            }
            // A name of its own: two sessions of a profile may store at once.
            let mut r = [0u8; 8];
            let _ = getrandom::fill(&mut r);
            let tmp = self.path.with_extension(format!("{}.tmp", hex::encode(r)));
            std::fs::write(&tmp, serde_json::to_vec_pretty(&body).unwrap_or_default())?;
            std::fs::rename(&tmp, &self.path)
        };
        if let Err(e) = write() {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot store the tool pin");
        }
    }
}

/// A session's tool calls as the observer follows them: those in flight
/// (`wardenctl ps`) and those that ended lately, each with when it began
/// and ended, so that a record made later (the notifier's queues are
/// drained in batches) goes to the call in flight when its event happened.
pub type InFlight = Arc<std::sync::Mutex<CallLog>>;

/// One tool call to the server: id as shown, tool, start, end.
#[derive(Debug, Clone)]
pub struct Call {
    pub id: String,
    pub tool: String,
    pub start: Instant,
    pub end: Option<Instant>,
}

/// How long an ended call is kept for attribution.
const KEEP_ENDED: Duration = Duration::from_secs(10);
/// At most this many ended calls are kept.
const KEEP_ENDED_MAX: usize = 256;

#[derive(Debug, Default)]
pub struct CallLog {
    calls: Vec<Call>,
    /// The taps' marks (client to server, server to client): what the
    /// observer has not taken yet (a record made at a time the observer
    /// has not reached waits a moment for it, and wakes it); and their
    /// wake-ups.
    pub(crate) taps: Option<[(crate::stdio::Marks, Arc<crate::stdio::TapWake>); 2]>,
}

/// How long a record waits at most for the observer to reach its time. It
/// waits only while a copy made before its time is still to be followed
/// (a record that waits at all waits for the observer's lag, which on a
/// loaded machine is tens of ms); the bound is for an observer that stopped.
const CATCH_UP: Duration = Duration::from_millis(250);

impl CallLog {
    fn begin(&mut self, id: String, tool: String, at: Instant) {
        self.calls.push(Call {
            id,
            tool,
            start: at,
            end: None,
        });
    }

    /// The call `id` ended `d` after it began.
    fn end_after(&mut self, id: &str, d: Duration) {
        let start = self
            .calls
            .iter()
            .find(|c| c.id == id && c.end.is_none())
            .map(|c| c.start);
        if let Some(s) = start {
            self.end(id, s + d);
        }
    }

    fn end(&mut self, id: &str, at: Instant) {
        if let Some(c) = self
            .calls
            .iter_mut()
            .find(|c| c.id == id && c.end.is_none())
        {
            c.end = Some(at);
        }
        self.calls.retain(|c| {
            c.end
                .is_none_or(|e| at.saturating_duration_since(e) < KEEP_ENDED)
        });
        let ended = self.calls.iter().filter(|c| c.end.is_some()).count();
        let mut excess = ended.saturating_sub(KEEP_ENDED_MAX);
        self.calls.retain(|c| {
            if excess > 0 && c.end.is_some() {
                excess -= 1;
                false
            } else {
                true
            }
        });
    }

    /// The calls in flight now.
    pub fn in_flight(&self) -> Vec<&Call> {
        self.calls.iter().filter(|c| c.end.is_none()).collect()
    }

    /// The calls that were in flight at `at`.
    pub fn at(&self, at: Instant) -> Vec<&Call> {
        self.calls
            .iter()
            .filter(|c| c.start <= at && c.end.is_none_or(|e| e >= at))
            .collect()
    }
}

/// The tool calls to the server that `events` began or ended, into `log`.
fn log_calls(log: &InFlight, events: &[Event], now: Instant) {
    let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
    for e in events {
        match e {
            Event::Request {
                dir: Dir::ToServer,
                id,
                tool: Some(tool),
                ..
            } => log.begin(show_id(id), tool.clone(), now),
            // An answer read before its request ends at its own time.
            Event::End {
                dir: Dir::ToServer,
                id,
                tool: Some(_),
                duration,
                ..
            } => log.end_after(&show_id(id), *duration),
            _ => {}
        }
    }
}

struct Sink<'a> {
    daemon: &'a Daemon,
    session: &'a str,
    second: Option<Instant>,
    in_second: u32,
    suppressed: u64,
    pins: Option<Pins>,
    pin_note: PinNote,
}

impl Sink<'_> {
    fn write(&mut self, rec: warden_audit::Record) {
        let now = Instant::now();
        if self
            .second
            .is_none_or(|s| now.duration_since(s) >= Duration::from_secs(1))
        {
            self.second = Some(now);
            self.in_second = 0;
        }
        if self.in_second >= RECORDS_PER_SECOND {
            self.suppressed += 1;
            return;
        }
        self.in_second += 1;
        self.daemon.audit.record(rec);
    }

    fn events(&mut self, events: Vec<Event>) {
        for e in events {
            if let Event::Tools { tools } = e {
                // Pin records are never rate-limited away.
                let pins = self.pins.as_mut();
                if let Some(p) = pins.and_then(|p| p.tools(self.session, tools)) {
                    record_pin(self.daemon, &self.pin_note, p);
                }
                continue;
            }
            if let Some(r) = record(self.session, e) {
                self.write(r);
            }
        }
    }
}

fn direction(d: Dir) -> String {
    match d {
        Dir::ToServer => "to-server",
        Dir::ToClient => "to-client",
    }
    .into()
}

/// The record of an event, if it makes one.
fn record(session: &str, e: Event) -> Option<warden_audit::Record> {
    match e {
        Event::Request {
            dir,
            id,
            method,
            tool,
            bytes,
            arguments,
        } => Some(
            event::McpRequest {
                session: session.to_owned(),
                method,
                id: show_id(&id),
                direction: direction(dir),
                tool,
                bytes: bytes as u64,
                arguments,
            }
            .into(),
        ),
        Event::End {
            dir,
            id,
            method,
            tool,
            outcome,
            duration,
            request_bytes,
            response_bytes,
            progress,
        } => {
            let (name, code, reason) = match outcome {
                Outcome::Result { tool_error: false } => ("result", None, String::new()),
                Outcome::Result { tool_error: true } => (
                    "tool-error",
                    None,
                    "the tool reported an error (isError)".into(),
                ),
                Outcome::Error { code, .. } => {
                    ("error", Some(code), format!("JSON-RPC error {code}"))
                }
                Outcome::InputRequired => (
                    "input-required",
                    None,
                    "the server asked for the client's input first (resultType input_required); \
                     the client asks again with a new request"
                        .into(),
                ),
                Outcome::Cancelled { reason } => (
                    "cancelled",
                    None,
                    reason.map_or_else(|| "cancelled".into(), |r| format!("cancelled: {r}")),
                ),
                Outcome::Unanswered => (
                    "unanswered",
                    None,
                    "the session ended before an answer".into(),
                ),
            };
            Some(
                event::McpEnd {
                    session: session.to_owned(),
                    method,
                    reason,
                    id: show_id(&id),
                    direction: direction(dir),
                    tool,
                    outcome: name.into(),
                    error_code: code,
                    duration_ms: duration.as_millis() as u64,
                    request_bytes: request_bytes as u64,
                    response_bytes: response_bytes as u64,
                    progress,
                }
                .into(),
            )
        }
        Event::Malformed { dir, reason } => Some(
            event::McpStream {
                session: session.to_owned(),
                direction: direction(dir),
                reason: format!(
                    "{reason}: such lines are skipped (reported once per direction); the bytes \
                     pass untouched"
                ),
                event: "malformed".into(),
                count: 1,
            }
            .into(),
        ),
        Event::Notification { .. } | Event::Unmatched { .. } | Event::Tools { .. } => None,
    }
}

/// The marks that cover a tap's copy up to `end`, taken off its queue, and
/// the time of the copy that goes on past `end`, if its mark is there.
struct Due {
    due: Vec<Mark>,
    next: Option<Instant>,
}

fn lock_marks(marks: &crate::stdio::Marks) -> std::sync::MutexGuard<'_, crate::stdio::MarkLog> {
    marks.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes `n` marks off the front once what they cover has been followed, up
/// to `offset` (until then a record waiting for the observer sees them
/// pending).
fn take_marks(marks: &crate::stdio::Marks, n: usize, offset: u64) {
    lock_marks(marks).take(n, offset);
}

/// The marks of the bytes the observer read, up to offset `end`. Every byte
/// in the tap is covered by a mark or by the copy under way (announced
/// before it was made), so nothing is waited for.
fn due_marks(marks: &crate::stdio::Marks, end: u64) -> Due {
    let (due, next) = lock_marks(marks).due(end);
    Due { due, next }
}

/// Whether tap `a` holds a copy older than any `b` holds.
fn older(a: &crate::stdio::Marks, b: &crate::stdio::Marks) -> bool {
    match (front_at(a), front_at(b)) {
        (Some(x), Some(y)) => x < y,
        (Some(_), None) => true,
        _ => false,
    }
}

/// When the oldest copy still in a tap was made.
fn front_at(marks: &crate::stdio::Marks) -> Option<Instant> {
    lock_marks(marks).front_at()
}

type TapFd = (
    std::os::fd::OwnedFd,
    crate::stdio::Marks,
    Arc<crate::stdio::TapWake>,
);

/// How long the observer lets bytes gather while messages keep coming (it
/// reads again after this, without being woken).
const GATHER: Duration = Duration::from_millis(1);
/// How often an idle observer looks at its taps without being woken.
const LOOK_ANYWAY: Duration = Duration::from_millis(200);
/// A pass that read this much reads again at once (a flood: the tap's pipe
/// must not fill while the observer waits).
const FLOOD: usize = 256 << 10;

/// Whether a tap's writer is gone (the relay closed it).
fn hung_up(fd: &std::os::fd::OwnedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let mut p = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut p, PollTimeout::ZERO), Ok(n) if n > 0)
        && p[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLHUP))
}

/// Whether an open tap holds bytes to read (or its end).
fn pending(readers: &[TapFd; 2], open: &[bool; 2]) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    readers.iter().zip(open).any(|(r, &o)| {
        let mut p = [PollFd::new(r.0.as_fd(), PollFlags::POLLIN)];
        o && matches!(poll(&mut p, PollTimeout::ZERO), Ok(n) if n > 0)
    })
}

async fn run(
    daemon: &Daemon,
    session: &str,
    readers: [TapFd; 2],
    in_flight: &InFlight,
    (profile, pin_note): (Profile, PinNote),
    mcp: warden_core::policy::McpPolicy,
    arguments: Option<Redact>,
) {
    let mut obs = match arguments {
        Some(r) => Observer::with_arguments(r),
        None => Observer::new(),
    };
    let mut sink = Sink {
        daemon,
        session,
        second: None,
        in_second: 0,
        suppressed: 0,
        // With `mcp.pin: enforce` the gate keeps the pin (it sees the
        // server's answers before they are filtered); `off` keeps none.
        pins: (mcp.pin == warden_core::policy::PinMode::Flag)
            .then(|| Pins::load(&daemon.config.state_dir, profile, mcp)),
        pin_note,
    };
    let dirs = [Dir::ToServer, Dir::ToClient];
    let mut open = [true, true];
    let mut offset = [0u64; 2];
    let mut buf = vec![0u8; 1 << 16];
    // What the last pass read: nothing → wait to be woken; some → let more
    // gather; a flood → read on at once.
    let mut last_pass: Option<usize> = None;
    let mut i = 0;
    while open.iter().any(|o| *o) {
        match last_pass {
            Some(n) if n >= FLOOD => tokio::task::yield_now().await,
            Some(n) if n > 0 => tokio::time::sleep(GATHER).await,
            Some(_) => {
                // Nothing was there: ask to be woken, look once more (a copy
                // moved after the look rings), then wait.
                for r in &readers {
                    r.2.arm();
                }
                if !pending(&readers, &open) {
                    i = tokio::select! {
                        () = readers[0].2.rung(), if open[0] => 0,
                        () = readers[1].2.rung(), if open[1] => 1,
                        // A look now and then, should a ring not come.
                        () = tokio::time::sleep(LOOK_ANYWAY) => i,
                    };
                }
            }
            None => {}
        }
        let mut pass = 0usize;
        // The direction whose unread copy is older is followed first: the
        // question of an answer is in the other tap already (it was copied
        // before the other side could read it), and must be seen first.
        let order = match (front_at(&readers[0].1), front_at(&readers[1].1)) {
            (Some(a), Some(b)) if b < a => [1, 0],
            (Some(_), _) => [0, 1],
            (None, Some(_)) => [1, 0],
            (None, None) => [1 - i, i],
        };
        for j in order {
            // At most a few chunks at a time: a flooding direction must not
            // keep the task from yielding (what is left stays readable).
            for k in 0..16 {
                if !open[j] {
                    break;
                }
                // What came in meanwhile may answer a request copied
                // before it into the other tap: that one first.
                if k > 0 && older(&readers[1 - j].1, &readers[j].1) {
                    break;
                }
                // Only what was copied before the other tap's oldest unread
                // copy: a read takes whatever the pipe holds, and a message
                // copied after one waiting in the other tap (a cancellation
                // after the progress it answers) must not be followed first.
                // This tap's marks first, then the other's front: a copy
                // marked here after one there was announced there first.
                let mine = lock_marks(&readers[j].1).readable_before(None);
                let theirs = front_at(&readers[1 - j].1);
                let limit = match theirs {
                    None => mine,
                    Some(_) => lock_marks(&readers[j].1).readable_before(theirs).min(mine),
                };
                let mut room = usize::try_from(limit.saturating_sub(offset[j]))
                    .unwrap_or(usize::MAX)
                    .min(buf.len());
                if room == 0 {
                    // Nothing marked to read here now. The tap's end (and
                    // whatever it holds without a mark) is read once the
                    // other tap has nothing older.
                    if theirs.is_none() && hung_up(&readers[j].0) {
                        room = buf.len();
                    } else {
                        break;
                    }
                }
                match nix::unistd::read(&readers[j].0, &mut buf[..room]) {
                    Ok(0) => {
                        open[j] = false;
                        break;
                    }
                    Ok(n) => {
                        pass += n;
                        let marks = due_marks(&readers[j].1, offset[j] + n as u64);
                        let taken = marks.due.len();
                        let mut chunk = &buf[..n];
                        let mut last = Instant::now();
                        let mut feed = |obs: &mut Observer, bytes: &[u8], at: Instant| {
                            let events = obs.feed(dirs[j], bytes, at);
                            log_calls(in_flight, &events, at);
                            sink.events(events);
                        };
                        for m in marks.due {
                            let (until, at) = match m {
                                Mark::Copied { end, at } => (end, Some(at)),
                                Mark::Gap { at_offset } => (at_offset, None),
                            };
                            let k = (until.saturating_sub(offset[j]) as usize).min(chunk.len());
                            let t = at.unwrap_or(last);
                            feed(&mut obs, &chunk[..k], t);
                            last = t;
                            chunk = &chunk[k..];
                            offset[j] += k as u64;
                            if at.is_none() {
                                obs.gap(dirs[j]);
                            }
                        }
                        // The rest belongs to a copy whose mark is still ahead.
                        if !chunk.is_empty() {
                            feed(&mut obs, chunk, marks.next.unwrap_or_else(Instant::now));
                            offset[j] += chunk.len() as u64;
                        }
                        take_marks(&readers[j].1, taken, offset[j]);
                    }
                    Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => break,
                    Err(e) => {
                        tracing::warn!(session, error = %e, "mcp observer: cannot read its tap");
                        {
                            open[j] = false;
                            break;
                        };
                    }
                }
            }
        }
        last_pass = Some(pass);
    }
    // Gaps after the last byte copied.
    for i in 0..2 {
        if lock_marks(&readers[i].1).has_gap() {
            obs.gap(dirs[i]);
        }
    }
    tracing::debug!(
        session,
        to_server = offset[0],
        to_client = offset[1],
        "mcp observer: the stream ended"
    );
    let events = obs.finish(Instant::now());
    sink.events(events);
    if let Some(p) = sink.pins.as_mut().and_then(|p| p.finish(session)) {
        record_pin(daemon, &sink.pin_note, p);
    }
    {
        let mut log = in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        // Nothing more will be followed: records no longer wait for it.
        log.taps = None;
        let open: Vec<String> = log.in_flight().iter().map(|c| c.id.clone()).collect();
        for id in open {
            log.end(&id, now);
        }
    }
    for (i, d) in dirs.into_iter().enumerate() {
        if obs.lost[i] > 0 {
            daemon.audit.record(event::McpStream {
                session: session.to_owned(),
                direction: direction(d),
                reason: "bytes went by while the observer was behind; the requests in them \
                         are not recorded (the bytes themselves passed untouched)"
                    .into(),
                event: "lost".into(),
                count: obs.lost[i],
            });
        }
    }
    if sink.suppressed > 0 {
        daemon.audit.record(event::McpStream {
            session: session.to_owned(),
            direction: "both".into(),
            reason: format!("more than {RECORDS_PER_SECOND} mcp records in a second"),
            event: "suppressed".into(),
            count: sink.suppressed,
        });
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
                arguments: None,
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
        // A late answer to the cancelled call matches nothing (it is kept
        // a while in case its request is still coming, and ends no call).
        let ev = o.feed(
            Dir::ToClient,
            &line(json!({"jsonrpc":"2.0","id":1,"result":{}})),
            t,
        );
        assert!(ev.is_empty(), "{ev:?}");
        // What is left at the end ends unanswered.
        let ev = o.finish(t);
        assert_eq!(
            ends(&ev),
            [("tools/list".to_string(), None, Outcome::Unanswered)]
        );
    }

    #[test]
    fn an_answer_read_before_its_request_is_matched_when_the_request_comes() {
        let mut o = Observer::new();
        let t = Instant::now();
        let ev = o.feed(
            Dir::ToClient,
            &line(json!({"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"echo"}]}})),
            t,
        );
        assert!(ev.is_empty(), "{ev:?}");
        let ev = o.feed(
            Dir::ToServer,
            &line(json!({"jsonrpc":"2.0","id":3,"method":"tools/list"})),
            t,
        );
        assert!(matches!(&ev[0], Event::Request { .. }), "{ev:?}");
        assert!(
            matches!(&ev[1], Event::Tools { tools } if tools.len() == 1),
            "{ev:?}"
        );
        assert!(
            matches!(&ev[2], Event::End { outcome: Outcome::Result { .. }, method, .. } if method == "tools/list"),
            "{ev:?}"
        );
        assert!(o.finish(t).is_empty());
    }

    #[test]
    fn progress_read_before_its_request_is_counted_when_the_request_comes() {
        // The observer reads the two taps apart: the server's progress can
        // be read before the request it is for (e2e `mcp`'s
        // progress_reaches_the_client_while_the_call_runs counted 1 or 2 of
        // 3 now and then before this was handled).
        let mut o = Observer::new();
        let t = Instant::now();
        let progress = |n: u32| {
            line(json!({"jsonrpc":"2.0","method":"notifications/progress",
                        "params":{"progressToken":"tok","progress":n}}))
        };
        let ev = o.feed(Dir::ToClient, &[progress(1), progress(2)].concat(), t);
        assert!(ev.is_empty(), "{ev:?}");
        o.feed(
            Dir::ToServer,
            &line(json!({"jsonrpc":"2.0","id":5,"method":"tools/call",
                         "params":{"name":"long","_meta":{"progressToken":"tok"}}})),
            t,
        );
        let ev = o.feed(
            Dir::ToClient,
            &[
                progress(3),
                line(json!({"jsonrpc":"2.0","id":5,"result":{}})),
            ]
            .concat(),
            t,
        );
        match &ev[..] {
            [Event::End { progress, .. }] => assert_eq!(*progress, 3),
            other => panic!("{other:?}"),
        }
        // Progress for a request never seen is kept only so long.
        for i in 0..(MAX_EARLY + 10) {
            let stray = line(json!({"jsonrpc":"2.0","method":"notifications/progress",
                                    "params":{"progressToken":i,"progress":1}}));
            o.feed(Dir::ToClient, &stray, t);
        }
        assert_eq!(o.early_progress[Dir::ToServer.index()].len(), MAX_EARLY);
    }

    #[test]
    fn the_2026_revisions_results_and_cancellations_are_followed() {
        let mut o = Observer::new();
        let t = Instant::now();
        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "io.modelcontextprotocol/clientCapabilities": {}});
        let ev = o.feed(
            Dir::ToServer,
            &[
                line(json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":meta}})),
                line(json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
                            "params":{"name":"deploy","arguments":{},"_meta":meta}})),
                line(json!({"jsonrpc":"2.0","id":3,"method":"subscriptions/listen",
                            "params":{"_meta":meta,"notifications":{"toolsListChanged":true}}})),
            ]
            .concat(),
            t,
        );
        assert_eq!(ev.len(), 3, "{ev:?}");
        assert_eq!(o.era(), Some(Era::Stateless2026));
        // The call needs the client's input: it ends so (the client asks
        // again, with a request of its own).
        let ev = o.feed(
            Dir::ToClient,
            &[
                line(
                    json!({"jsonrpc":"2.0","id":1,"result":{"resultType":"complete",
                            "supportedVersions":["2026-07-28"],"capabilities":{}}}),
                ),
                line(
                    json!({"jsonrpc":"2.0","id":2,"result":{"resultType":"input_required",
                            "inputRequests":{"confirm":{"method":"elicitation/create","params":{}}},
                            "requestState":"opaque"}}),
                ),
                // The server ends the client's subscription stream.
                line(json!({"jsonrpc":"2.0","method":"notifications/cancelled",
                            "params":{"requestId":3,"reason":"shutting down"}})),
            ]
            .concat(),
            t,
        );
        assert_eq!(
            ends(&ev),
            [
                (
                    "server/discover".into(),
                    None,
                    Outcome::Result { tool_error: false }
                ),
                (
                    "tools/call".into(),
                    Some("deploy".into()),
                    Outcome::InputRequired
                ),
                (
                    "subscriptions/listen".into(),
                    None,
                    Outcome::Cancelled {
                        reason: Some("shutting down".into())
                    }
                ),
            ]
        );
        // A server's cancellation of anything else of the client's is not
        // one (only the client cancels its requests).
        o.feed(
            Dir::ToServer,
            &line(json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x"}})),
            t,
        );
        let ev = o.feed(
            Dir::ToClient,
            &line(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}})),
            t,
        );
        assert!(ends(&ev).is_empty(), "{ev:?}");
        assert_eq!(o.tool_calls(), [("j:4".to_string(), "x".to_string())]);
    }

    #[test]
    fn the_pin_covers_each_tools_whole_definition() {
        let state = tempfile::tempdir().unwrap();
        let profile = || Profile::of(Some("p"), None, &["server".to_string()]);
        let load = || Pins::load(state.path(), profile(), Default::default());
        let def = |v: Value| fingerprint(&v).unwrap();
        let echo = json!({"name": "echo", "description": "Echo",
                          "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}});
        let read =
            json!({"name": "read", "description": "Read", "inputSchema": {"type": "object"}});
        let mut first = load();
        let p = first
            .tools("s1", vec![def(echo.clone()), def(read.clone())])
            .unwrap();
        assert_eq!((p.state.as_str(), p.added.len()), ("pinned", 2));
        // The same definitions, their keys in another order: nothing to say.
        let reordered = json!({"inputSchema": {"properties": {"text": {"type": "string"}}, "type": "object"},
                               "description": "Echo", "name": "echo"});
        assert!(load()
            .tools("s2", vec![def(reordered), def(read.clone())])
            .is_none());
        // Only the input schema changed, and a tool came: flagged; at the
        // end, what the session never showed is removed.
        let mut echo2 = echo.clone();
        echo2["inputSchema"]["properties"]["cmd"] = json!({"type": "string"});
        let added = json!({"name": "exec", "inputSchema": {"type": "object"}});
        let mut later = load();
        let p = later.tools("s3", vec![def(echo2), def(added)]).unwrap();
        assert_eq!(p.state, "changed");
        assert_eq!(
            (p.changed, p.added),
            (vec!["echo".to_string()], vec!["exec".to_string()])
        );
        assert_eq!(later.finish("s3").unwrap().removed, ["read"]);
        // Annotations are part of the definition too.
        let mut annotated = read.clone();
        annotated["annotations"] = json!({"destructiveHint": true});
        let p = load().tools("s4", vec![def(echo), def(annotated)]).unwrap();
        assert_eq!(p.changed, ["read"]);
    }

    #[test]
    fn an_answer_read_first_ends_its_call_at_the_answers_time() {
        // The request was copied at t, its answer at t + 5 ms; the observer
        // reads the answer first. The call is in flight from t to t + 5 ms
        // (what a file access made in between is attributed by).
        let mut o = Observer::new();
        let t = Instant::now();
        let ans = t + Duration::from_millis(5);
        let call =
            json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read_file"}});
        let answer = json!({"jsonrpc":"2.0","id":9,"result":{"content":[],"isError":true}});
        assert!(o.feed(Dir::ToClient, &line(answer), ans).is_empty());
        let ev = o.feed(Dir::ToServer, &line(call), t);
        assert!(
            matches!(&ev[1], Event::End { duration, .. } if *duration == Duration::from_millis(5)),
            "{ev:?}"
        );
        let log = InFlight::default();
        log_calls(&log, &ev, t);
        let during = calls_at(&log, t + Duration::from_millis(2));
        assert_eq!(during, vec![("9".to_owned(), "read_file".to_owned())]);
        assert!(calls_at(&log, t + Duration::from_millis(6)).is_empty());
    }

    #[test]
    fn a_record_waits_for_an_answer_copied_before_its_time() {
        // A call begun at t and answered at t + 5 ms, the answer copied but
        // not yet followed: a record of t + 6 ms waits (the call would look
        // in flight), one of t + 4 ms does not.
        let t = Instant::now();
        let (_t0, r0) = crate::stdio::tap().unwrap();
        let (_t1, r1) = crate::stdio::tap().unwrap();
        let taps = [r0.marks.clone(), r1.marks.clone()];
        let log = InFlight::default();
        log.lock().unwrap().taps = Some([(r0.marks, r0.wake), (r1.marks, r1.wake)]);
        let mut o = Observer::new();
        let call =
            json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_file"}});
        log_calls(&log, &o.feed(Dir::ToServer, &line(call), t), t);
        let answer = line(json!({"jsonrpc":"2.0","id":3,"result":{"content":[]}}));
        let ans = t + Duration::from_millis(5);
        taps[1].lock().unwrap().push(crate::stdio::Mark::Copied {
            end: answer.len() as u64,
            at: ans,
        });
        assert!(behind(&log, t + Duration::from_millis(6)));
        assert!(!behind(&log, t + Duration::from_millis(4)));
        log_calls(&log, &o.feed(Dir::ToClient, &answer, ans), ans);
        taps[1].lock().unwrap().take(1, answer.len() as u64);
        assert!(!behind(&log, t + Duration::from_millis(6)));
        assert!(calls_at(&log, t + Duration::from_millis(6)).is_empty());
        assert_eq!(calls_at(&log, t + Duration::from_millis(4)).len(), 1);
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
        // A parse-error answer (`"id": null`) is JSON-RPC, not malformed.
        let ev = o.feed(
            Dir::ToServer,
            &line(
                json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}),
            ),
            t,
        );
        assert!(matches!(&ev[..], [Event::Unmatched { .. }]), "{ev:?}");
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
    fn recorded_arguments_have_the_secrets_taken_out() {
        let r = Redact::new([
            ("GITHUB_TOKEN".to_string(), "ghp_abcdef123".to_string()),
            ("SHORT".to_string(), "ab".to_string()),
            ("INNER".to_string(), "abcdef".to_string()),
        ]);
        let mut o = Observer::with_arguments(r);
        let ev = o.feed(
            Dir::ToServer,
            &line(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch",
                "arguments":{"url":"https://x/?t=ghp_abcdef123","ghp_abcdef123":["ab", "abcdef!"],"n":5}}})),
            Instant::now(),
        );
        let Some(Event::Request { arguments, .. }) = ev.first() else {
            panic!("{ev:?}")
        };
        assert_eq!(
            arguments.as_ref().unwrap(),
            &json!({"url":"https://x/?t=[redacted: GITHUB_TOKEN]",
                "[redacted: GITHUB_TOKEN]":["ab", "[redacted: INNER]!"],"n":5})
        );
        // Other methods, and observers without the option, record none.
        let ev = o.feed(
            Dir::ToServer,
            &line(json!({"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"p","arguments":{"a":"b"}}})),
            Instant::now(),
        );
        assert!(
            matches!(
                &ev[0],
                Event::Request {
                    arguments: None,
                    ..
                }
            ),
            "{ev:?}"
        );
        let big = Redact::default().record(&json!({"a": "x".repeat(MAX_ARGUMENTS)}));
        assert_eq!(big["truncated"], true);
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
