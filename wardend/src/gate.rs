//! The per-tool policy on the MCP stream (`mcp.tools.allow` / `deny`): what
//! the daemon does when it must stand between client and server instead of
//! only watching (issue 17).
//!
//! A [`Gate`] is given each whole line (one JSON-RPC message or batch, as
//! MCP's stdio transport frames them) in each direction and says what goes
//! on. From the client: a `tools/call` of a tool the policy refuses never
//! reaches the server; the client gets the JSON-RPC error both protocol
//! eras prescribe for a tool the server does not offer (`-32602`, invalid
//! params), whose message says that Warden's policy refused it and which
//! rule. A line the gate cannot read (not JSON, a duplicated `method` or
//! `name`, a `tools/call` whose tool is not a string) is not passed on
//! either: the server might read it differently than the gate did, so it
//! fails closed (`-32700` / `-32602` back, as a server would answer). A
//! batch holding anything refused is refused whole, one error per request
//! in it. From the server: the answers to the client's `tools/list`
//! requests lose the tools the policy refuses (cut out of the line, every
//! other byte as the server sent it), so the model is not offered what it
//! cannot call. Every other message passes byte for byte.
//!
//! The relay thread that drives a gate is `stdio::Filter`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use warden_core::policy::McpPolicy;

use crate::mcp::{fingerprint, id_key, show_id, Pins};

/// `tools/list` requests remembered at once (answers to others pass
/// unfiltered: a client this far ahead of its server is not a real one, and
/// the calls themselves are still refused).
pub const MAX_LISTS: usize = 1024;

/// What the gate did, for the audit trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateEvent {
    /// A request (or a line) from the client that the server never saw.
    Refused {
        /// The request id as shown (`7`, `"abc"`), None for a notification
        /// or a line with no readable id.
        id: Option<String>,
        method: Option<String>,
        tool: Option<String>,
        /// Why, naming the rule (`mcp.tools.deny: "write_*"`).
        rule: String,
    },
    /// Tools cut from a `tools/list` answer.
    Hidden { id: String, tools: Vec<String> },
    /// What the server's definitions are against the pin (`mcp.pin:
    /// enforce`, where the gate keeps the pin).
    Pin(warden_audit::event::McpPin),
    /// A line added to a tool call's error answer (`mcp.explain_denials`).
    Explained {
        id: String,
        tool: String,
        line: String,
        denials: usize,
    },
}

/// `mcp.pin: enforce`: the profile's pin and what this session withholds,
/// shared between the gate (the relay's thread) and the approvals that can
/// release a tool (tasks of the daemon).
pub struct Enforce {
    state: Mutex<PinGate>,
    /// Rung when a tool was accepted: the gate then tells the client the
    /// list changed.
    wake: crate::wake::Wake,
}

struct PinGate {
    pins: Pins,
    /// Accepted in this session: name → the definition accepted.
    accepted: HashMap<String, String>,
    /// Withheld now: name → its definition.
    withheld: BTreeMap<String, String>,
    /// Asked about and not yet answered: name → the definition asked about.
    asked: HashMap<String, String>,
    list_changed: bool,
}

/// A tool withheld by the pin, for a person to accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolAsk {
    pub tool: String,
    pub digest: String,
    /// `added` (new since the pin) or `changed`.
    pub what: &'static str,
}

impl Enforce {
    pub(crate) fn new(pins: Pins) -> std::io::Result<Arc<Enforce>> {
        Ok(Arc::new(Enforce {
            state: Mutex::new(PinGate {
                pins,
                accepted: HashMap::new(),
                withheld: BTreeMap::new(),
                asked: HashMap::new(),
                list_changed: false,
            }),
            wake: crate::wake::Wake::new()?,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PinGate> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A person accepted `ask`: the tool is offered again in this session
    /// (the client is told the list changed), and with `pin` its definition
    /// joins the profile's pin. Returns the `mcp.pin` record of a new pin.
    pub fn accept(
        &self,
        session: &str,
        ask: &ToolAsk,
        pin: bool,
    ) -> Option<warden_audit::event::McpPin> {
        let mut st = self.lock();
        st.asked.remove(&ask.tool);
        st.accepted.insert(ask.tool.clone(), ask.digest.clone());
        if st.withheld.get(&ask.tool) == Some(&ask.digest) {
            st.withheld.remove(&ask.tool);
        }
        st.list_changed = true;
        let record = pin.then(|| {
            st.pins.accept(&ask.tool, &ask.digest);
            let (added, changed) = match ask.what {
                "added" => (vec![ask.tool.clone()], vec![]),
                _ => (vec![], vec![ask.tool.clone()]),
            };
            warden_audit::event::McpPin {
                session: session.to_owned(),
                profile: st.pins.profile_label().to_owned(),
                reason: format!(
                    "the {} definition of `{}` was accepted and pinned",
                    if ask.what == "added" {
                        "new"
                    } else {
                        "changed"
                    },
                    ask.tool
                ),
                state: "accepted".into(),
                added,
                changed,
                removed: vec![],
            }
        });
        drop(st);
        self.wake.ring();
        record
    }

    /// The approval about `ask` ended without acceptance: the tool stays
    /// withheld, and the next `tools/list` may ask again.
    pub fn declined(&self, ask: &ToolAsk) {
        let mut st = self.lock();
        if st.asked.get(&ask.tool) == Some(&ask.digest) {
            st.asked.remove(&ask.tool);
        }
    }

    /// The tools withheld now.
    pub fn withheld(&self) -> Vec<String> {
        self.lock().withheld.keys().cloned().collect()
    }
}

/// Raises the approval of a withheld tool (the session's, on the daemon).
pub type Ask = Box<dyn FnMut(ToolAsk) + Send>;

impl GateEvent {
    /// The event as the audit record of `session` (`mcp.refuse`, `mcp.hide`).
    pub fn record(self, session: &str) -> warden_audit::Record {
        use warden_audit::event::{Event, McpHide, McpRefuse};
        match self {
            GateEvent::Refused {
                id,
                method,
                tool,
                rule,
            } => McpRefuse {
                session: session.to_owned(),
                resource: tool
                    .clone()
                    .or_else(|| method.clone())
                    .unwrap_or_else(|| "-".into()),
                reason: rule,
                id,
                method,
                tool,
            }
            .into_record(),
            GateEvent::Hidden { id, tools } => McpHide {
                session: session.to_owned(),
                reason: "tools the policy refuses (mcp.tools) were cut from the server's answer"
                    .into(),
                id,
                tools,
            }
            .into_record(),
            GateEvent::Pin(mut p) => {
                p.session = session.to_owned();
                warden_audit::event::Event::into_record(p)
            }
            GateEvent::Explained {
                id,
                tool,
                line,
                denials,
            } => warden_audit::event::McpExplain {
                session: session.to_owned(),
                tool,
                reason: line,
                id,
                denials,
            }
            .into_record(),
        }
    }
}

/// What to do with a line from the client.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Pass the line on to the server, as it came.
    pub forward: bool,
    /// A line to send the client instead (JSON-RPC errors), with its `\n`.
    pub reply: Option<Vec<u8>>,
}

/// The top-level members the gate reads. A derived struct refuses a member
/// given twice ("duplicate field"), which is what the gate wants: JSON
/// readers disagree on which of two `method`s counts.
#[derive(Deserialize)]
struct Msg<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    method: Option<String>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

/// A JSON-RPC error object, as far as an explanation edits it.
#[derive(Deserialize)]
struct ErrorObj<'a> {
    #[serde(borrow)]
    message: Option<&'a RawValue>,
}

/// A `tools/call` result, as far as an explanation edits it.
#[derive(Deserialize)]
struct CallResult<'a> {
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(rename = "isError")]
    is_error: Option<Value>,
}

#[derive(Deserialize)]
struct CallParams {
    name: Option<Value>,
}

#[derive(Deserialize)]
struct ListResult<'a> {
    #[serde(borrow)]
    tools: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ToolDef {
    name: Option<Value>,
}

/// What the gate reads of a request's or notification's params for the
/// 2026-07-28 revision: its `_meta` (the protocol version every request
/// carries; the subscription a notification belongs to), a
/// `subscriptions/listen`'s or an acknowledgement's `notifications`, a
/// cancellation's `requestId`.
#[derive(Deserialize, Default)]
struct Params2026 {
    #[serde(rename = "_meta")]
    meta: Option<Meta2026>,
    notifications: Option<Filter2026>,
    #[serde(rename = "requestId")]
    request_id: Option<Value>,
}

#[derive(Deserialize)]
struct Meta2026 {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
    version: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/subscriptionId")]
    subscription: Option<Value>,
}

#[derive(Deserialize)]
struct Filter2026 {
    #[serde(rename = "toolsListChanged")]
    tools: Option<bool>,
}

fn params_2026(m: &Msg) -> Params2026 {
    m.params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default()
}

/// A client's `subscriptions/listen` stream that asked for
/// `notifications/tools/list_changed` (2026-07-28): where the gate may tell
/// the client a withheld tool is offered again, once the server has
/// acknowledged it.
struct Subscription {
    key: String,
    id: Value,
    acknowledged: bool,
}

/// One session's gate.
pub struct Gate {
    policy: McpPolicy,
    /// Ids (as [`id_key`]s) of the client's `tools/list` requests not yet
    /// answered, oldest first.
    lists: VecDeque<String>,
    listed: HashSet<String>,
    events: Vec<GateEvent>,
    /// `mcp.pin: enforce`, and how to ask about a withheld tool.
    enforce: Option<(Arc<Enforce>, Ask)>,
    /// `mcp.explain_denials`.
    explain: Option<Explain>,
    /// The client speaks the 2026-07-28 revision (its first request was
    /// `server/discover`, or a request carried its protocol version in
    /// `_meta`): a list change is told only on its subscriptions.
    stateless: bool,
    /// Its `subscriptions/listen` streams for tool list changes (with
    /// `mcp.pin: enforce`), at most [`MAX_LISTS`].
    subscriptions: Vec<Subscription>,
}

/// What explaining denials needs: the session's denials, and the tool calls
/// the gate passed on that are not answered yet.
struct Explain {
    session: String,
    denials: Arc<crate::explain::Denials>,
    /// By [`id_key`]: (tool, when the gate passed the request on).
    calls: HashMap<String, (String, std::time::Instant)>,
    order: VecDeque<String>,
    /// Calls of the line being checked, followed once it is passed on.
    pending: Vec<(String, String)>,
}

impl Explain {
    fn follow(&mut self, key: String, tool: String) {
        if self.calls.contains_key(&key) {
            return;
        }
        if self.order.len() >= MAX_LISTS {
            if let Some(old) = self.order.pop_front() {
                self.calls.remove(&old);
            }
        }
        self.order.push_back(key.clone());
        self.calls.insert(key, (tool, std::time::Instant::now()));
    }

    fn take(&mut self, key: &str) -> Option<(String, std::time::Instant)> {
        let c = self.calls.remove(key)?;
        self.order.retain(|k| k != key);
        Some(c)
    }
}

/// How a client message fared.
enum Check {
    Pass,
    /// Refused: the error to answer with (None for a notification).
    Refuse {
        id: Option<Value>,
        code: i64,
        message: String,
    },
}

impl Gate {
    pub fn new(policy: McpPolicy) -> Gate {
        Gate {
            policy,
            lists: VecDeque::new(),
            listed: HashSet::new(),
            events: Vec::new(),
            enforce: None,
            explain: None,
            stateless: false,
            subscriptions: Vec::new(),
        }
    }

    /// With `mcp.explain_denials`: the error answers of tool calls during
    /// which `denials` has something gain a line naming it.
    pub fn with_explain(mut self, session: &str, denials: Arc<crate::explain::Denials>) -> Gate {
        self.explain = Some(Explain {
            session: session.to_owned(),
            denials,
            calls: HashMap::new(),
            order: VecDeque::new(),
            pending: Vec::new(),
        });
        self
    }

    /// With `mcp.pin: enforce`: tools whose definitions differ from the pin
    /// are withheld until `ask` gets them accepted.
    pub fn with_pin(mut self, enforce: Arc<Enforce>, ask: Ask) -> Gate {
        self.enforce = Some((enforce, ask));
        self
    }

    /// What rings when a withheld tool was accepted.
    pub fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        self.enforce.as_ref().map(|(e, _)| e.wake.as_fd())
    }

    /// After [`Gate::wake_fd`] rang: the notification to send the client,
    /// if the list changed. In the 2026-07-28 revision a server tells list
    /// changes only on the client's `subscriptions/listen` streams that
    /// asked for them (each notification naming its stream), after the
    /// acknowledgement: one on each such stream, and none without one (the
    /// client sees the tool when it lists again).
    pub fn woken(&mut self) -> Option<Vec<u8>> {
        let (e, _) = self.enforce.as_ref()?;
        e.wake.clear();
        let mut st = e.lock();
        if !std::mem::take(&mut st.list_changed) {
            return None;
        }
        if !self.stateless {
            return Some(line_of(&serde_json::json!({
                "jsonrpc": "2.0",
                "method": "notifications/tools/list_changed",
            })));
        }
        let lines: Vec<u8> = self
            .subscriptions
            .iter()
            .filter(|s| s.acknowledged)
            .flat_map(|s| {
                line_of(&serde_json::json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/tools/list_changed",
                    "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": s.id}},
                }))
            })
            .collect();
        (!lines.is_empty()).then_some(lines)
    }

    /// A client message, for the 2026-07-28 revision's list changes (with
    /// `mcp.pin: enforce` only): the era, and the client's subscriptions.
    fn follow_client_2026(&mut self, method: &str, m: &Msg) {
        if self.enforce.is_none() {
            return;
        }
        let p = params_2026(m);
        if method == "server/discover" || p.meta.as_ref().is_some_and(|m| m.version.is_some()) {
            self.stateless = true;
        }
        match method {
            "subscriptions/listen" => {
                let id =
                    m.id.and_then(|id| serde_json::from_str::<Value>(id.get()).ok());
                let wants = p.notifications.and_then(|n| n.tools) == Some(true);
                if let (Some(id), true) = (id, wants) {
                    if self.subscriptions.len() >= MAX_LISTS {
                        self.subscriptions.remove(0);
                    }
                    self.subscriptions.push(Subscription {
                        key: id_key(&id),
                        id,
                        acknowledged: false,
                    });
                }
            }
            "notifications/cancelled" => {
                if let Some(id) = p.request_id {
                    let key = id_key(&id);
                    self.subscriptions.retain(|s| s.key != key);
                }
            }
            _ => {}
        }
    }

    /// A server message, for the client's subscriptions: acknowledged (for
    /// tool list changes, else it will carry none), or ended (its
    /// response, or the server's cancellation).
    fn follow_server_2026(&mut self, m: &Msg) {
        let p = params_2026(m);
        let ended = match m.method.as_deref() {
            Some("notifications/subscriptions/acknowledged") => {
                let Some(id) = p.meta.and_then(|m| m.subscription) else {
                    return;
                };
                let key = id_key(&id);
                let tools = p.notifications.and_then(|n| n.tools) == Some(true);
                for s in self.subscriptions.iter_mut().filter(|s| s.key == key) {
                    s.acknowledged = tools;
                }
                if tools {
                    return;
                }
                key
            }
            Some("notifications/cancelled") => match p.request_id {
                Some(id) => id_key(&id),
                None => return,
            },
            Some(_) => return,
            None => match m
                .id
                .and_then(|id| serde_json::from_str::<Value>(id.get()).ok())
            {
                Some(id) => id_key(&id),
                None => return,
            },
        };
        self.subscriptions.retain(|s| s.key != ended);
    }

    /// The stream ended: pinned tools the server's answers never showed.
    pub fn finish(&mut self) {
        if let Some((e, _)) = &self.enforce {
            // The record's session is set when it is written.
            if let Some(p) = e.lock().pins.finish("") {
                self.events.push(GateEvent::Pin(p));
            }
        }
    }

    /// Why the pin withholds `tool` now, if it does.
    fn withholds(&self, tool: &str) -> Option<String> {
        let (e, _) = self.enforce.as_ref()?;
        let st = e.lock();
        st.withheld.contains_key(tool).then(|| {
            let what = st
                .pins
                .differs(tool, &st.withheld[tool])
                .unwrap_or("changed");
            format!(
                "mcp.pin: enforce: {} since the tool definitions were pinned; a person can \
                 accept it with `wardenctl approve`",
                if what == "added" {
                    "it is new"
                } else {
                    "its definition changed"
                }
            )
        })
    }
    /// What happened since the last call.
    pub fn take_events(&mut self) -> Vec<GateEvent> {
        std::mem::take(&mut self.events)
    }

    /// A line from the client (without its `\n`).
    pub fn from_client(&mut self, line: &[u8]) -> Verdict {
        let v = self.client_line(line);
        if let Some(e) = self.explain.as_mut() {
            let pending = std::mem::take(&mut e.pending);
            if v.forward {
                for (key, tool) in pending {
                    e.follow(key, tool);
                }
            }
        }
        v
    }

    fn client_line(&mut self, line: &[u8]) -> Verdict {
        if !self.policy.filters() {
            // Only explaining: everything passes; the calls are followed
            // as far as they can be read.
            if let Ok(text) = std::str::from_utf8(line) {
                let items: Vec<&str> = match serde_json::from_str::<Vec<&RawValue>>(text) {
                    Ok(items) => items.iter().map(|r| r.get()).collect(),
                    Err(_) => vec![text],
                };
                for item in items {
                    if let Ok(m) = serde_json::from_str::<Msg>(item) {
                        self.follow_call(&m);
                    }
                }
            }
            return Verdict {
                forward: true,
                reply: None,
            };
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return Verdict {
                forward: true,
                reply: None,
            };
        }
        let text = match std::str::from_utf8(line) {
            Ok(t) => t,
            Err(_) => return self.unreadable("the line is not UTF-8"),
        };
        if text.trim_start().starts_with('[') {
            return self.batch(text);
        }
        match serde_json::from_str::<Msg>(text) {
            Err(e) => self.unreadable(&format!("not a JSON-RPC message ({e})")),
            Ok(m) => match self.check(&m) {
                Check::Pass => Verdict {
                    forward: true,
                    reply: None,
                },
                Check::Refuse { id, code, message } => Verdict {
                    forward: false,
                    reply: id.map(|id| line_of(&error(id, code, &message))),
                },
            },
        }
    }

    /// A line from the client longer than the gate reads: not passed on.
    pub fn too_long(&mut self) -> Verdict {
        self.unreadable(&format!(
            "a line longer than {} MiB",
            crate::mcp::MAX_LINE >> 20
        ))
    }

    /// A batch: passed whole, or refused whole.
    fn batch(&mut self, text: &str) -> Verdict {
        let items = match serde_json::from_str::<Vec<&RawValue>>(text) {
            Ok(items) => items,
            Err(e) => return self.unreadable(&format!("not a JSON-RPC batch ({e})")),
        };
        let mut msgs = Vec::with_capacity(items.len());
        let mut reason = None;
        for raw in &items {
            match serde_json::from_str::<Msg>(raw.get()) {
                Ok(m) => msgs.push(m),
                Err(e) => {
                    reason
                        .get_or_insert_with(|| format!("an item is not a JSON-RPC message ({e})"));
                }
            }
        }
        // Lists are remembered only once the batch goes on.
        let lists_before = self.lists.len();
        let mut refused = Vec::new();
        for m in &msgs {
            if let Check::Refuse { message, .. } = self.check(m) {
                reason.get_or_insert(message.clone());
                refused.push(message);
            }
        }
        let Some(reason) = reason else {
            return Verdict {
                forward: true,
                reply: None,
            };
        };
        while self.lists.len() > lists_before {
            if let Some(k) = self.lists.pop_back() {
                self.listed.remove(&k);
            }
        }
        let message = format!("Warden refused this whole batch: {reason}");
        let answers: Vec<Value> = msgs
            .iter()
            .filter(|m| m.method.is_some())
            .filter_map(|m| {
                m.id.and_then(|id| serde_json::from_str::<Value>(id.get()).ok())
            })
            .map(|id| error(id, -32602, &message))
            .collect();
        if refused.is_empty() {
            self.events.push(GateEvent::Refused {
                id: None,
                method: None,
                tool: None,
                rule: reason,
            });
        }
        Verdict {
            forward: false,
            reply: (!answers.is_empty()).then(|| line_of(&Value::Array(answers))),
        }
    }

    /// A line that cannot be read: not passed on, answered as a server
    /// would (a parse error, id null).
    fn unreadable(&mut self, why: &str) -> Verdict {
        let rule =
            format!("{why}: with mcp.tools set, what Warden cannot read does not reach the server");
        self.events.push(GateEvent::Refused {
            id: None,
            method: None,
            tool: None,
            rule: rule.clone(),
        });
        Verdict {
            forward: false,
            reply: Some(line_of(&error(
                Value::Null,
                -32700,
                &format!("Warden: {rule}"),
            ))),
        }
    }

    fn check(&mut self, m: &Msg) -> Check {
        let Some(method) = m.method.as_deref() else {
            // A response to the server's own request (sampling...).
            return Check::Pass;
        };
        self.follow_client_2026(method, m);
        let id =
            m.id.and_then(|id| serde_json::from_str::<Value>(id.get()).ok());
        match method {
            "tools/list" => {
                if let Some(id) = &id {
                    self.remember_list(id_key(id));
                }
                Check::Pass
            }
            "tools/call" => {
                let name = m
                    .params
                    .map(|p| serde_json::from_str::<CallParams>(p.get()));
                let refusal = match name {
                    Some(Ok(CallParams {
                        name: Some(Value::String(name)),
                    })) => self
                        .policy
                        .refuses(&name)
                        .or_else(|| self.withholds(&name))
                        .map(|rule| (Some(name), rule)),
                    Some(Err(e)) => Some((None, format!("its params cannot be read ({e})"))),
                    _ => Some((
                        None,
                        "it names no tool (params.name is not a string)".into(),
                    )),
                };
                let Some((tool, rule)) = refusal else {
                    self.follow_call(m);
                    return Check::Pass;
                };
                let message = match &tool {
                    Some(t) if rule.starts_with("mcp.pin") => format!(
                        "Warden withholds the tool `{t}` ({rule}); the server was not called"
                    ),
                    Some(t) => format!(
                        "Warden's policy refuses the tool `{t}` ({rule}); the server was not called"
                    ),
                    None => format!("Warden refused this tools/call: {rule}"),
                };
                self.events.push(GateEvent::Refused {
                    id: id.as_ref().map(|i| show_id(&id_key(i))),
                    method: Some(method.to_owned()),
                    tool,
                    rule,
                });
                Check::Refuse {
                    id,
                    code: -32602,
                    message,
                }
            }
            _ => Check::Pass,
        }
    }

    /// A `tools/call` with an id and a tool name, for explaining its
    /// error answer once the line goes on.
    fn follow_call(&mut self, m: &Msg) {
        let Some(e) = self.explain.as_mut() else {
            return;
        };
        if m.method.as_deref() != Some("tools/call") {
            return;
        }
        let id =
            m.id.and_then(|id| serde_json::from_str::<Value>(id.get()).ok());
        let name = m
            .params
            .and_then(|p| serde_json::from_str::<CallParams>(p.get()).ok())
            .and_then(|p| match p.name {
                Some(Value::String(n)) => Some(n),
                _ => None,
            });
        if let (Some(id), Some(name)) = (id, name) {
            e.pending.push((id_key(&id), name));
        }
    }

    fn remember_list(&mut self, key: String) {
        if self.listed.contains(&key) {
            return;
        }
        if self.lists.len() >= MAX_LISTS {
            if let Some(old) = self.lists.pop_front() {
                self.listed.remove(&old);
            }
        }
        self.listed.insert(key.clone());
        self.lists.push_back(key);
    }

    /// A line from the server (without its `\n`): None to pass it as it
    /// came, else the line to send instead (without `\n`).
    pub fn from_server(&mut self, line: &[u8]) -> Option<Vec<u8>> {
        if self.listed.is_empty()
            && self.explain.as_ref().is_none_or(|e| e.calls.is_empty())
            && self.subscriptions.is_empty()
        {
            return None;
        }
        let text = std::str::from_utf8(line).ok()?;
        if text.trim_start().starts_with('[') {
            let items = serde_json::from_str::<Vec<&RawValue>>(text).ok()?;
            let mut out = text.to_owned();
            // From the last item back, so earlier spans stay where they are.
            let mut changed = false;
            for raw in items.iter().rev() {
                let start = offset_in(text, raw.get());
                if let Some(new) = self.answer(raw.get()) {
                    out.replace_range(start..start + raw.get().len(), &new);
                    changed = true;
                }
            }
            return changed.then(|| out.into_bytes());
        }
        self.answer(text).map(String::into_bytes)
    }

    /// `text`, one message: a filtered copy when it answers a remembered
    /// `tools/list` and loses tools, else None.
    fn answer(&mut self, text: &str) -> Option<String> {
        let m = serde_json::from_str::<Msg>(text).ok()?;
        if !self.subscriptions.is_empty() {
            self.follow_server_2026(&m);
        }
        if m.method.is_some() {
            return None;
        }
        let id = serde_json::from_str::<Value>(m.id?.get()).ok()?;
        let key = id_key(&id);
        if let Some(call) = self.explain.as_mut().and_then(|e| e.take(&key)) {
            return self.explained(text, &m, &key, call);
        }
        if !self.listed.remove(&key) {
            return None;
        }
        self.lists.retain(|k| *k != key);
        let result = serde_json::from_str::<ListResult>(m.result?.get()).ok()?;
        let tools_raw = result.tools?;
        let tools = serde_json::from_str::<Vec<&RawValue>>(tools_raw.get()).ok()?;
        let mut kept = Vec::with_capacity(tools.len());
        let mut hidden = Vec::new();
        let mut offered = Vec::new();
        for t in &tools {
            let name = serde_json::from_str::<ToolDef>(t.get())
                .ok()
                .and_then(|d| match d.name {
                    Some(Value::String(s)) => Some(s),
                    _ => None,
                });
            match name {
                // A definition without a readable name cannot be matched
                // against the policy: it is not offered.
                None => hidden.push("(a tool without a name)".to_owned()),
                Some(n) if self.policy.refuses(&n).is_some() => hidden.push(n),
                Some(n) => {
                    offered.push((n, *t));
                    kept.push(t.get());
                }
            }
        }
        if self.enforce.is_some() {
            let withheld = self.pin_check(&offered);
            if !withheld.is_empty() {
                kept = offered
                    .iter()
                    .filter(|(n, _)| !withheld.contains(n))
                    .map(|(_, t)| t.get())
                    .collect();
                hidden.extend(withheld);
            }
        }
        if hidden.is_empty() {
            return None;
        }
        self.events.push(GateEvent::Hidden {
            id: show_id(&key),
            tools: hidden,
        });
        let start = offset_in(text, tools_raw.get());
        let mut out = String::with_capacity(text.len());
        out.push_str(&text[..start]);
        out.push('[');
        out.push_str(&kept.join(","));
        out.push(']');
        out.push_str(&text[start + tools_raw.get().len()..]);
        Some(out)
    }
}

impl Gate {
    /// The answer `text` of a tool call the gate passed on: when it is an
    /// error (a JSON-RPC error, or a result with `isError: true`) and Warden
    /// denied something during the call, a copy with one line more (in the
    /// error's message, or as a text item after the result's content), the
    /// other bytes as the server sent them.
    fn explained(
        &mut self,
        text: &str,
        m: &Msg,
        key: &str,
        (tool, start): (String, std::time::Instant),
    ) -> Option<String> {
        enum Edit<'a> {
            Message(&'a RawValue),
            Content(&'a RawValue, bool),
        }
        let edit = match (m.error, m.result) {
            (Some(e), _) => Edit::Message(serde_json::from_str::<ErrorObj>(e.get()).ok()?.message?),
            (None, Some(r)) => {
                let r = serde_json::from_str::<CallResult>(r.get()).ok()?;
                if r.is_error != Some(Value::Bool(true)) {
                    return None;
                }
                let content = r.content?;
                let items = serde_json::from_str::<Vec<&RawValue>>(content.get()).ok()?;
                Edit::Content(content, items.is_empty())
            }
            (None, None) => return None,
        };
        let e = self.explain.as_ref()?;
        let denials = e
            .denials
            .during(start, std::time::Instant::now(), crate::explain::SETTLE);
        if denials.is_empty() {
            return None;
        }
        let shown = show_id(key);
        let line = crate::explain::line(&e.session, &shown, &denials);
        let (span, new) = match edit {
            Edit::Message(raw) => {
                let old = serde_json::from_str::<String>(raw.get()).ok()?;
                let new = serde_json::to_string(&format!("{old}\n{line}")).ok()?;
                (raw.get(), new)
            }
            Edit::Content(raw, empty) => {
                let item = format!(
                    r#"{{"type":"text","text":{}}}"#,
                    serde_json::to_string(&line).ok()?
                );
                let body = &raw.get()[..raw.get().len() - 1];
                let sep = if empty { "" } else { "," };
                (raw.get(), format!("{body}{sep}{item}]"))
            }
        };
        let at = offset_in(text, span);
        let mut out = String::with_capacity(text.len() + new.len());
        out.push_str(&text[..at]);
        out.push_str(&new);
        out.push_str(&text[at + span.len()..]);
        self.events.push(GateEvent::Explained {
            id: shown,
            tool,
            line,
            denials: denials.len(),
        });
        Some(out)
    }

    /// `mcp.pin: enforce` on the tools a `tools/list` answer offers: the
    /// pin is kept (and recorded) as in `flag` mode, and the tools whose
    /// definitions differ from it, unless accepted in this session, are
    /// withheld (returned) and asked about.
    fn pin_check(&mut self, offered: &[(String, &RawValue)]) -> Vec<String> {
        let Some((e, ask)) = self.enforce.as_mut() else {
            return Vec::new();
        };
        let digests: Vec<(String, String)> = offered
            .iter()
            .filter_map(|(_, t)| fingerprint(&serde_json::from_str::<Value>(t.get()).ok()?))
            .collect();
        let mut withheld = Vec::new();
        let mut asks = Vec::new();
        {
            let mut st = e.lock();
            // The record's session is set when it is written.
            if let Some(p) = st.pins.tools("", digests.clone()) {
                self.events.push(GateEvent::Pin(p));
            }
            for (name, digest) in &digests {
                let Some(what) = st.pins.differs(name, digest) else {
                    st.withheld.remove(name);
                    continue;
                };
                if st.accepted.get(name) == Some(digest) {
                    st.withheld.remove(name);
                    continue;
                }
                st.withheld.insert(name.clone(), digest.clone());
                withheld.push(name.clone());
                if st.asked.get(name) != Some(digest) {
                    st.asked.insert(name.clone(), digest.clone());
                    asks.push(ToolAsk {
                        tool: name.clone(),
                        digest: digest.clone(),
                        what,
                    });
                }
            }
        }
        for a in asks {
            ask(a);
        }
        withheld
    }
}

/// Where `part` (a slice of `whole`, as borrowed `RawValue`s are) begins.
fn offset_in(whole: &str, part: &str) -> usize {
    (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize)
}

fn error(id: Value, code: i64, message: &str) -> Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message, "data": {"refusedBy": "warden"}},
    })
}

fn line_of(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).unwrap_or_default();
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::Pins;
    use serde_json::json;

    fn gate(allow: Option<&[&str]>, deny: &[&str]) -> Gate {
        Gate::new(McpPolicy {
            allow: allow.map(|a| a.iter().map(|s| s.to_string()).collect()),
            deny: deny.iter().map(|s| s.to_string()).collect(),
            ..McpPolicy::default()
        })
    }

    fn reply(v: &Verdict) -> Value {
        serde_json::from_slice(v.reply.as_deref().expect("a reply")).unwrap()
    }

    /// A gate with `mcp.pin: enforce` whose pin (in `state`) has `echo`
    /// and `read` as first seen, and the tools it asks about.
    fn enforcing(state: &std::path::Path) -> (Gate, Arc<Enforce>, Arc<Mutex<Vec<ToolAsk>>>) {
        let profile = || crate::mcp::Profile::of(Some("p"), None, &[]);
        let first = |name: &str| fingerprint(&json!({"name": name, "description": "first"}));
        let mut pin = Pins::load(state, profile(), McpPolicy::default());
        pin.tools("s0", vec![first("echo").unwrap(), first("read").unwrap()]);
        let enforce = Enforce::new(Pins::load(state, profile(), McpPolicy::default())).unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let a = asked.clone();
        let policy = McpPolicy {
            pin: warden_core::policy::PinMode::Enforce,
            ..McpPolicy::default()
        };
        let gate = Gate::new(policy).with_pin(
            enforce.clone(),
            Box::new(move |ask| a.lock().unwrap().push(ask)),
        );
        (gate, enforce, asked)
    }

    /// Both tools changed since the pin, in an answer to `tools/list` 2.
    const CHANGED: &[u8] = br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"echo","description":"now"},{"name":"read","description":"now"}]}}"#;

    fn lines(b: &[u8]) -> Vec<Value> {
        b.split(|&c| c == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    #[test]
    fn an_accepted_tool_is_announced_as_the_era_says() {
        // 2025: a list_changed notification, as a server sends it.
        let state = tempfile::tempdir().unwrap();
        let (mut g, enforce, asked) = enforcing(state.path());
        g.from_client(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#);
        g.from_client(br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
        let cut = g.from_server(CHANGED).expect("withheld");
        assert_eq!(lines(&cut)[0]["result"]["tools"], json!([]));
        let ask = asked.lock().unwrap()[0].clone();
        enforce.accept("s", &ask, false);
        assert_eq!(
            lines(&g.woken().unwrap()),
            [json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})]
        );

        // 2026-07-28: only on the client's subscription that asked for it,
        // once the server acknowledged it, naming it.
        let state = tempfile::tempdir().unwrap();
        let (mut g, enforce, asked) = enforcing(state.path());
        let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#;
        for line in [
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{{{meta}}}}}"#),
            format!(
                r#"{{"jsonrpc":"2.0","id":"sub","method":"subscriptions/listen","params":{{{meta},"notifications":{{"toolsListChanged":true}}}}}}"#
            ),
            format!(r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{{meta}}}}}"#),
        ] {
            assert!(g.from_client(line.as_bytes()).forward, "{line}");
        }
        g.from_server(CHANGED).expect("withheld");
        let asks = asked.lock().unwrap().clone();
        assert_eq!(asks.len(), 2);
        // Not acknowledged yet: nothing may be sent on it.
        enforce.accept("s", &asks[0], false);
        assert_eq!(g.woken(), None);
        let ack = br#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"sub"},"notifications":{"toolsListChanged":true}}}"#;
        assert_eq!(g.from_server(ack), None, "passed as it came");
        enforce.accept("s", &asks[1], false);
        assert_eq!(
            lines(&g.woken().unwrap()),
            [
                json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                    "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "sub"}}})
            ]
        );
        // The server ends the stream: nothing more on it.
        g.from_server(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"sub"}}"#,
        );
        enforce.accept("s", &asks[1], false);
        assert_eq!(g.woken(), None);
        assert!(g.subscriptions.is_empty());
    }

    #[test]
    fn a_denied_call_is_answered_by_warden_and_an_allowed_one_passes() {
        let mut g = gate(None, &["get-*"]);
        let ok = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#;
        assert_eq!(
            g.from_client(ok),
            Verdict {
                forward: true,
                reply: None
            }
        );
        let bad = br#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"get-sum","arguments":{"a":1}}}"#;
        let v = g.from_client(bad);
        assert!(!v.forward);
        let r = reply(&v);
        assert_eq!(r["id"], "x");
        assert_eq!(r["error"]["code"], -32602);
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("Warden's policy refuses the tool `get-sum`"),
            "{msg}"
        );
        assert!(msg.contains("mcp.tools.deny: \"get-*\""), "{msg}");
        assert_eq!(
            g.take_events(),
            vec![GateEvent::Refused {
                id: Some("\"x\"".into()),
                method: Some("tools/call".into()),
                tool: Some("get-sum".into()),
                rule: "mcp.tools.deny: \"get-*\"".into(),
            }]
        );
        // Escapes are read as the server reads them.
        let escaped =
            br#"{"jsonrpc":"2.0","id":2,"method":"tools\/call","params":{"name":"get\u002dsum"}}"#;
        assert!(!g.from_client(escaped).forward);
        // A notification-shaped call is dropped without an answer.
        let v = g
            .from_client(br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"get-sum"}}"#);
        assert_eq!(v, Verdict::default());
    }

    #[test]
    fn what_the_gate_cannot_read_does_not_reach_the_server() {
        let mut g = gate(Some(&["echo"]), &[]);
        for line in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"evil"}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"evil"}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["echo"]}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"echo"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            b"not json at all",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"\xff\"}}",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}} trailing"#,
        ] {
            let v = g.from_client(line);
            assert!(!v.forward, "{}", String::from_utf8_lossy(line));
            assert!(v.reply.is_some(), "{}", String::from_utf8_lossy(line));
        }
        assert_eq!(g.take_events().len(), 8);
        // Blank lines and everything else pass.
        assert!(g.from_client(b"  \r").forward);
        assert!(
            g.from_client(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#)
                .forward
        );
        assert!(
            g.from_client(br#"{"jsonrpc":"2.0","id":9,"result":{}}"#)
                .forward
        );
        assert!(g.take_events().is_empty());
    }

    #[test]
    fn a_batch_holding_a_refused_call_is_refused_whole() {
        let mut g = gate(None, &["rm"]);
        let ok = br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ls"}},{"jsonrpc":"2.0","method":"notifications/x"}]"#;
        assert!(g.from_client(ok).forward);
        let bad = br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ls"}},{"jsonrpc":"2.0","id":2,"method":"tools/list"},{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"rm"}},{"jsonrpc":"2.0","method":"notifications/x"}]"#;
        let v = g.from_client(bad);
        assert!(!v.forward);
        let r = reply(&v);
        let ids: Vec<&Value> = r.as_array().unwrap().iter().map(|e| &e["id"]).collect();
        assert_eq!(ids, [&json!(1), &json!(2), &json!(3)]);
        assert!(r[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("refused this whole batch"));
        // The refused batch's tools/list is not remembered.
        assert!(g.listed.is_empty());
    }

    #[test]
    fn list_answers_lose_refused_tools_and_keep_every_other_byte() {
        let mut g = gate(Some(&["echo", "get-*"]), &["get-env"]);
        assert!(
            g.from_client(br#"{"jsonrpc":"2.0","id":"L","method":"tools/list"}"#)
                .forward
        );
        // An answer to something else passes untouched.
        assert_eq!(
            g.from_server(br#"{"jsonrpc":"2.0","id":"M","result":{"tools":[{"name":"rm"}]}}"#),
            None
        );
        let line = br#"{"result":{"tools":[ {"name":"echo","description":"e"} , {"name":"rm","inputSchema":{"type":"object"}},{"name":"get-sum"},{"name":"get-env"},{"description":"nameless"}],"nextCursor":"c2"},"jsonrpc":"2.0","id":"L"}"#;
        let out = g.from_server(line).expect("filtered");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"result":{"tools":[{"name":"echo","description":"e"},{"name":"get-sum"}],"nextCursor":"c2"},"jsonrpc":"2.0","id":"L"}"#
        );
        assert_eq!(
            g.take_events(),
            vec![GateEvent::Hidden {
                id: "\"L\"".into(),
                tools: vec![
                    "rm".into(),
                    "get-env".into(),
                    "(a tool without a name)".into()
                ],
            }]
        );
        // Answered once: a second answer with the same id passes.
        assert_eq!(g.from_server(line), None);
        // Nothing to hide: the answer passes as it came.
        g.from_client(br#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#);
        assert_eq!(
            g.from_server(br#"{"jsonrpc":"2.0","id":5,"result":{"tools":[{"name":"echo"}]}}"#),
            None
        );
    }

    #[test]
    fn list_answers_in_a_batch_are_filtered_in_place() {
        let mut g = gate(None, &["rm"]);
        g.from_client(br#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#);
        let line = br#"[{"jsonrpc":"2.0","id":2,"result":{}}, {"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"rm"},{"name":"ls"}]}}]"#;
        let out = String::from_utf8(g.from_server(line).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"[{"jsonrpc":"2.0","id":2,"result":{}}, {"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"ls"}]}}]"#
        );
    }

    #[test]
    fn remembered_lists_are_bounded() {
        let mut g = gate(None, &["rm"]);
        for i in 0..(MAX_LISTS + 10) {
            g.from_client(
                format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/list"}}"#).as_bytes(),
            );
        }
        assert_eq!(g.lists.len(), MAX_LISTS);
        assert_eq!(g.listed.len(), MAX_LISTS);
    }

    fn explaining() -> (Gate, Arc<crate::explain::Denials>) {
        let d = crate::explain::Denials::new();
        let g = Gate::new(McpPolicy {
            explain_denials: true,
            ..McpPolicy::default()
        })
        .with_explain("s1", d.clone());
        (g, d)
    }

    fn call(id: u32, tool: &str) -> Vec<u8> {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#)
            .into_bytes()
    }

    #[test]
    fn explaining_alone_passes_every_client_line() {
        let (mut g, _) = explaining();
        for line in [
            &b"not json"[..],
            br#"{"method":"tools/call","method":"x"}"#,
            br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}]"#,
            &call(1, "echo"),
        ] {
            assert_eq!(
                g.from_client(line),
                Verdict {
                    forward: true,
                    reply: None
                }
            );
        }
        assert!(g.take_events().is_empty());
    }

    #[test]
    fn an_error_after_a_denial_gains_one_line_and_nothing_else_changes() {
        let (mut g, d) = explaining();
        // A denial before the call is not its.
        d.push(
            std::time::Instant::now(),
            "`open-read` of /old (outside the sandbox's grants)".into(),
            true,
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
        g.from_client(&call(1, "read_file"));
        g.from_client(&call(2, "read_file"));
        g.from_client(&call(3, "fetch"));
        g.from_client(&call(4, "echo"));
        d.push(
            std::time::Instant::now(),
            "`open-read` of /home/u/.ssh/id_rsa (outside the sandbox's grants)".into(),
            true,
        );
        // A JSON-RPC error: its message gains the line.
        let err = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"no such file","data":{"x":1}}}"#;
        let out = String::from_utf8(g.from_server(err).expect("edited")).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        let msg = v["error"]["message"].as_str().unwrap();
        let (first, line) = msg.split_once('\n').unwrap();
        assert_eq!(first, "no such file");
        assert!(
            line.starts_with(
                "[Warden] During this call the sandbox denied `open-read` of /home/u/.ssh/id_rsa"
            ) && line.contains("wardenctl suggest s1 --apply")
                && line.contains("wardenctl logs s1 --call 1")
                && !line.contains("/old"),
            "{line}"
        );
        // Every other byte as the server sent it.
        let msg_json = serde_json::to_string(msg).unwrap();
        assert_eq!(
            out,
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":-32603,"message":{msg_json},"data":{{"x":1}}}}}}"#
            )
        );
        // A tool error: one text item more, after the server's.
        let tool_err = br#"{"jsonrpc":"2.0","id":2,"result":{"content":[ {"type":"text","text":"ENOENT"} ],"isError":true}}"#;
        let out = String::from_utf8(g.from_server(tool_err).expect("edited")).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        let content = v["result"]["content"].as_array().unwrap();
        assert_eq!(content.len(), 2);
        assert_eq!(content[0], json!({"type":"text","text":"ENOENT"}));
        assert!(content[1]["text"].as_str().unwrap().contains("--call 2"));
        assert!(out.starts_with(r#"{"jsonrpc":"2.0","id":2,"result":{"content":[ {"type":"text","text":"ENOENT"} ,{"type":"text","text":"[Warden]"#), "{out}");
        // A success is never edited, denial or not.
        let ok = br#"{"jsonrpc":"2.0","id":3,"result":{"content":[],"isError":false}}"#;
        assert_eq!(g.from_server(ok), None);
        let events = g.take_events();
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(
            matches!(&events[0], GateEvent::Explained { id, tool, denials: 1, .. } if id == "1" && tool == "read_file")
        );
        // An answer to no call it passed on is not touched.
        let stray = br#"{"jsonrpc":"2.0","id":9,"error":{"code":1,"message":"x"}}"#;
        assert_eq!(g.from_server(stray), None);
    }

    #[test]
    fn an_error_with_no_denial_during_its_call_is_not_touched() {
        let (mut g, d) = explaining();
        d.push(
            std::time::Instant::now(),
            "`open-read` of /old (x)".into(),
            true,
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
        g.from_client(&call(5, "read_file"));
        let err = br#"{"jsonrpc":"2.0","id":5,"error":{"code":-32603,"message":"boom"}}"#;
        assert_eq!(g.from_server(err), None);
        // Empty content of a tool error: the line is the only item.
        g.from_client(&call(6, "read_file"));
        d.push(
            std::time::Instant::now(),
            "the system call `ptrace` (x)".into(),
            false,
        );
        let out = g
            .from_server(br#"{"jsonrpc":"2.0","id":6,"result":{"content":[],"isError":true}}"#)
            .expect("edited");
        let v: Value = serde_json::from_slice(&out).unwrap();
        let text = v["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("No policy grant allows it"), "{text}");
    }
}
