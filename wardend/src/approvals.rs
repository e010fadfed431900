//! Approvals (docs/approvals.md, DESIGN.md §8): what a session's policy
//! denies is held, and a person is asked.
//!
//! # Flow
//!
//! A holder (the egress proxy for a connection, the file notifier for a file
//! access) calls [`Broker::ask`] with the session, the kind, the resource and
//! the operation. The broker answers at once from what the session already
//! remembers (granted or denied for the session), refuses when the session
//! already waits on [`MAX_PENDING`] approvals, joins a pending approval for
//! the same (session, kind, resource, operation), or raises a new one: an
//! `approval.request` record, an event for every watcher (`wardenctl approve
//! --watch`, the shim's terminal prompt, the desktop notification) and a
//! deadline. The first [`Broker::answer`] wins; the deadline, the session's
//! end and the daemon's stop resolve it as denied.
//!
//! # Invariants
//!
//! - Nothing is granted that a person did not answer: every path that is not
//!   an answer (timeout, session end, shutdown, an id that cannot be made, a
//!   failed policy edit) is a denial.
//! - An `--always` answer grants only once its policy edit is on disk; a
//!   failed edit leaves the approval pending, to be answered otherwise.
//! - Nothing survives the daemon: grants live in memory with their session,
//!   and a restarted daemon knows none of them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch};
use warden_audit::event::{
    ApprovalAnswer, ApprovalExpire, ApprovalPolicyEdit, ApprovalRefuse, ApprovalRequest,
};
use warden_audit::AuditStore;

/// Most approvals one session may wait on at once; further asks are denied
/// without asking (`approval.refuse`, `too-many-pending`).
pub const MAX_PENDING: usize = 4;
/// How long an access is held when the shim names no `--approve-timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest `--approve-timeout` (a held call holds a server's thread).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Answered and expired ids remembered, so a late answer is told which.
const FINISHED_KEPT: usize = 1024;

/// What is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Network,
    File,
    /// A tool `mcp.pin: enforce` withholds (its definition is new or
    /// changed since it was pinned); `operation` is `added` or `changed`.
    Tool,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Network => "network",
            Kind::File => "file",
            Kind::Tool => "tool",
        }
    }
}

/// How far an answer reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The held access (and the accesses that joined it while it was held).
    Once,
    /// This resource and operation until the session ends.
    Session,
    /// As `Session`, and added to the policy file.
    Always,
    /// Refused, and refused without asking for the rest of the session.
    Deny,
}

impl Scope {
    pub fn parse(s: &str) -> Option<Scope> {
        Some(match s {
            "once" => Scope::Once,
            "session" => Scope::Session,
            "always" => Scope::Always,
            "deny" => Scope::Deny,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Session => "session",
            Scope::Always => "always",
            Scope::Deny => "deny",
        }
    }
}

/// Where an answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// `wardenctl approve`.
    Cli,
    /// The prompt on the shim's controlling terminal.
    Terminal,
    /// A desktop notification's action.
    Desktop,
}

impl Channel {
    pub fn parse(s: &str) -> Option<Channel> {
        Some(match s {
            "" | "cli" => Channel::Cli,
            "terminal" => Channel::Terminal,
            "desktop" => Channel::Desktop,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Cli => "cli",
            Channel::Terminal => "terminal",
            Channel::Desktop => "desktop",
        }
    }
}

/// The question: may `session` do `operation` on `resource`?
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Request {
    pub kind: Kind,
    /// `host:port` (normal form), or an absolute path.
    pub resource: String,
    /// `connect`; `read`, `write`, `create`, `list`.
    pub operation: String,
}

/// What a holder gets back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed by approval `id` with this scope.
    Allowed {
        id: String,
        scope: Scope,
    },
    Denied,
}

/// What `--always` writes, for the session's policy file.
#[derive(Debug, Clone)]
pub struct PolicyFile {
    pub path: PathBuf,
    /// The text the session was started with (what the file held then).
    pub text_at_start: Vec<u8>,
}

/// Approvals of one session, set when it starts with `approve`.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub session: String,
    pub server: Option<String>,
    pub timeout: Duration,
    pub policy: Option<PolicyFile>,
    /// The shim prompts on its terminal.
    pub terminal: bool,
    /// The session's MCP tool calls, so an approval names the one it was
    /// raised during.
    pub calls: Option<crate::mcp::InFlight>,
}

/// A pending approval as shown to people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub id: String,
    pub session: String,
    pub server: Option<String>,
    pub request: Request,
    /// `http`, `connect`, `socks5` for network approvals.
    pub protocol: Option<String>,
    pub age: Duration,
    pub remaining: Duration,
    pub policy_path: Option<PathBuf>,
    /// The tool call(s) in flight when it was raised.
    pub via: warden_audit::event::CallRef,
}

/// What watchers see.
#[derive(Debug, Clone)]
pub enum Event {
    Raised(View),
    /// `outcome` is a scope's name or `expired`; `channel` who resolved it.
    Resolved {
        id: String,
        session: String,
        outcome: String,
        channel: String,
    },
}

/// Why an answer was not applied.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("no approval {0} (see `wardenctl approve` for the pending ones)")]
    Unknown(String),
    #[error("approval {id} expired {ago} ago: {why}")]
    Expired {
        id: String,
        ago: String,
        why: String,
    },
    #[error("approval {id} was already answered ({how})")]
    Answered { id: String, how: String },
    #[error("approval {0} is being answered elsewhere right now")]
    Busy(String),
    #[error("the session of approval {0} was started without a policy file (flags only), so there is no file to add the grant to; answer --session to allow it until the session ends")]
    NoPolicyFile(String),
    #[error("approval {0} is a directory listing, which can be allowed --once or --session only: a policy has no list-only grant, and filesystem.read of the directory would also expose every file below it (add that to the policy yourself if it is what you want); nothing was granted, the approval is still pending")]
    ListAlways(String),
    #[error("cannot add the grant of approval {id} to {path}: {why}; nothing was granted, the approval is still pending")]
    PolicyEdit {
        id: String,
        path: String,
        why: String,
    },
}

/// What an applied answer did, in one line for the person.
#[derive(Debug, Clone)]
pub struct Answered {
    pub id: String,
    pub scope: Scope,
    pub message: String,
}

/// Writes a grant into a policy file (the `--always` edit). A function so
/// that the broker does not know the file format.
pub type PolicyEditor =
    Arc<dyn Fn(&PolicyFile, &Request, &str) -> Result<EditDone, String> + Send + Sync>;

/// A policy edit that was made.
#[derive(Debug, Clone)]
pub struct EditDone {
    /// `network.allow`, `filesystem.read`...
    pub key: String,
    pub entry: String,
    pub merged: bool,
    pub already_present: bool,
}

struct Pending {
    view: View,
    started: Instant,
    deadline: Instant,
    /// Set by the answer; every joined holder waits on it.
    tx: watch::Sender<Option<Outcome>>,
    /// An `--always` answer is writing the policy file.
    answering: bool,
}

struct SessionState {
    cfg: SessionConfig,
    granted: HashMap<Request, (String, Scope)>,
    denied: HashSet<Request>,
    /// Refusals already recorded (`approval.refuse` once per request and cause).
    refused: HashSet<(Request, &'static str)>,
}

/// Resolved ids: when and how.
struct Finished {
    at: Instant,
    how: String,
    expired: bool,
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, SessionState>,
    pending: HashMap<String, Pending>,
    /// (session, request) → pending id.
    by_request: HashMap<(String, Request), String>,
    finished: HashMap<String, Finished>,
    finished_order: VecDeque<String>,
}

/// The daemon's approvals.
pub struct Broker {
    audit: Arc<AuditStore>,
    state: Mutex<State>,
    events: broadcast::Sender<Event>,
    editor: PolicyEditor,
    /// The desktop notifier is connected to a notification server
    /// ([`Broker::set_desktop`]).
    desktop: AtomicBool,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").finish_non_exhaustive()
    }
}

/// A new unguessable approval id (`ap-` and 128 random bits), or None when
/// the system has no randomness to give (then nothing is asked: denied).
fn new_id() -> Option<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).ok()?;
    Some(format!("ap-{}", hex::encode(b)))
}

fn ago(d: Duration) -> String {
    let s = d.as_secs();
    if s < 120 {
        format!("{s}s")
    } else {
        format!("{}m", s / 60)
    }
}

impl Broker {
    pub fn new(audit: Arc<AuditStore>, editor: PolicyEditor) -> Broker {
        let (events, _) = broadcast::channel(256);
        Broker {
            audit,
            state: Mutex::new(State::default()),
            events,
            editor,
            desktop: AtomicBool::new(false),
        }
    }

    /// Whether new approvals are also shown as desktop notifications (set by
    /// `desktop.rs` while it is connected to a notification server): the
    /// `desktop` entry of their `approval.request` records.
    pub fn set_desktop(&self, offered: bool) {
        self.desktop.store(offered, Ordering::SeqCst);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every change to pending approvals, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Approvals are on for `cfg.session` from now on.
    pub fn open_session(&self, cfg: SessionConfig) {
        self.lock().sessions.insert(
            cfg.session.clone(),
            SessionState {
                cfg,
                granted: HashMap::new(),
                denied: HashSet::new(),
                refused: HashSet::new(),
            },
        );
    }

    /// Whether `session` has approvals on.
    pub fn enabled(&self, session: &str) -> bool {
        self.lock().sessions.contains_key(session)
    }

    /// The session ended: its pending approvals are denied (`session-ended`),
    /// its grants forgotten.
    pub fn close_session(&self, session: &str, cause: &str) {
        let ids: Vec<String> = {
            let mut st = self.lock();
            st.sessions.remove(session);
            st.pending
                .values()
                .filter(|p| p.view.session == session)
                .map(|p| p.view.id.clone())
                .collect()
        };
        for id in ids {
            self.expire(&id, cause);
        }
    }

    /// The daemon stops: every pending approval is denied (`daemon-stopped`).
    pub fn close_all(&self) {
        let ids: Vec<String> = {
            let mut st = self.lock();
            st.sessions.clear();
            st.pending.keys().cloned().collect()
        };
        for id in ids {
            self.expire(&id, "daemon-stopped");
        }
    }

    /// Every pending approval, oldest first (of `session` only, if given).
    pub fn list(&self, session: Option<&str>) -> Vec<View> {
        let st = self.lock();
        let now = Instant::now();
        let mut v: Vec<(Instant, View)> = st
            .pending
            .values()
            .filter(|p| session.is_none_or(|s| p.view.session == s))
            .map(|p| {
                let mut view = p.view.clone();
                view.age = now.saturating_duration_since(p.started);
                view.remaining = p.deadline.saturating_duration_since(now);
                (p.started, view)
            })
            .collect();
        v.sort_by_key(|(t, _)| *t);
        v.into_iter().map(|(_, view)| view).collect()
    }

    /// Asks about `req` for `session` (see the module doc), and waits for the
    /// outcome. `protocol` is shown to people.
    pub async fn ask(
        self: &Arc<Self>,
        session: &str,
        req: Request,
        protocol: Option<&str>,
    ) -> Outcome {
        // The tool call the access was made during (the observer may be a
        // moment behind the access it caused).
        let at = Instant::now();
        let calls = self
            .lock()
            .sessions
            .get(session)
            .and_then(|s| s.cfg.calls.clone());
        let via = match calls {
            Some(log) => {
                warden_audit::event::CallRef::of(&crate::mcp::calls_at_caught_up(&log, at).await)
            }
            None => Default::default(),
        };
        let mut rx = match self.raise(session, req, protocol, via) {
            Ok(rx) => rx,
            Err(outcome) => return outcome,
        };
        loop {
            if let Some(o) = rx.borrow_and_update().clone() {
                return o;
            }
            if rx.changed().await.is_err() {
                // The pending approval is gone without an outcome: deny.
                return rx.borrow().clone().unwrap_or(Outcome::Denied);
            }
        }
    }

    /// Records that `req` was denied without asking (`approval.refuse`, once
    /// per request and cause in a session).
    pub fn refuse(&self, session: &str, req: &Request, cause: &'static str) {
        let first = {
            let mut st = self.lock();
            st.sessions
                .get_mut(session)
                .is_some_and(|s| s.refused.insert((req.clone(), cause)))
        };
        if first {
            self.audit.record(refusal(session, req, cause));
        }
    }

    /// The receiver of the outcome of `req`, or the outcome at once.
    fn raise(
        self: &Arc<Self>,
        session: &str,
        req: Request,
        protocol: Option<&str>,
        via: warden_audit::event::CallRef,
    ) -> Result<watch::Receiver<Option<Outcome>>, Outcome> {
        let audit = &self.audit;
        let mut st = self.lock();
        let State {
            sessions,
            pending,
            by_request,
            ..
        } = &mut *st;
        let Some(sess) = sessions.get_mut(session) else {
            return Err(Outcome::Denied);
        };
        if let Some((id, scope)) = sess.granted.get(&req) {
            return Err(Outcome::Allowed {
                id: id.clone(),
                scope: *scope,
            });
        }
        let refuse = |sess: &mut SessionState, cause: &'static str| {
            // Once per request and cause in a session, as `refuse` does.
            if sess.refused.insert((req.clone(), cause)) {
                audit.record(refusal(session, &req, cause));
            }
            Err(Outcome::Denied)
        };
        if sess.denied.contains(&req) {
            return refuse(sess, "denied-for-session");
        }
        let key = (session.to_owned(), req.clone());
        if let Some(p) = by_request.get(&key).and_then(|id| pending.get(id)) {
            return Ok(p.tx.subscribe());
        }
        let waiting = pending
            .values()
            .filter(|p| p.view.session == session)
            .count();
        if waiting >= MAX_PENDING {
            return refuse(sess, "too-many-pending");
        }
        let Some(id) = new_id() else {
            tracing::warn!(session, "no randomness for an approval id: denied");
            return Err(Outcome::Denied);
        };
        let now = Instant::now();
        let timeout = sess.cfg.timeout;
        let view = View {
            id: id.clone(),
            session: session.to_owned(),
            server: sess.cfg.server.clone(),
            request: req.clone(),
            protocol: protocol.map(str::to_owned),
            age: Duration::ZERO,
            remaining: timeout,
            policy_path: sess.cfg.policy.as_ref().map(|p| p.path.clone()),
            via,
        };
        // Where the question is put besides `wardenctl approve` (always there).
        let mut channels = Vec::new();
        if sess.cfg.terminal {
            channels.push("terminal".to_owned());
        }
        if self.desktop.load(Ordering::SeqCst) {
            channels.push("desktop".to_owned());
        }
        let (tx, rx) = watch::channel(None);
        pending.insert(
            id.clone(),
            Pending {
                view: view.clone(),
                started: now,
                deadline: now + timeout,
                tx,
                answering: false,
            },
        );
        by_request.insert(key, id.clone());
        drop(st);
        audit.record(ApprovalRequest {
            session: session.to_owned(),
            resource: req.resource.clone(),
            id: id.clone(),
            kind: req.kind.as_str().to_owned(),
            operation: req.operation.clone(),
            server: view.server.clone(),
            timeout_ms: timeout.as_millis() as u64,
            channels,
            via: view.via.clone(),
        });
        let _ = self.events.send(Event::Raised(view));
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            me.expire_if_due(&id);
        });
        Ok(rx)
    }

    /// The deadline of `id` passed: denied unless an answer is being applied
    /// (that answer then expires it if it fails).
    fn expire_if_due(&self, id: &str) {
        let busy = self.lock().pending.get(id).map(|p| p.answering);
        if busy == Some(false) {
            self.expire(id, "timeout");
        }
    }

    /// Resolves `id` as denied without an answer.
    fn expire(&self, id: &str, cause: &str) {
        let Some(p) = self.finish(id, "expired", true) else {
            return;
        };
        let _ = p.tx.send(Some(Outcome::Denied));
        self.audit.record(ApprovalExpire {
            session: p.view.session.clone(),
            resource: p.view.request.resource.clone(),
            id: id.to_owned(),
            kind: p.view.request.kind.as_str().to_owned(),
            operation: p.view.request.operation.clone(),
            cause: cause.to_owned(),
            waited_ms: p.started.elapsed().as_millis() as u64,
            via: p.view.via.clone(),
        });
        let _ = self.events.send(Event::Resolved {
            id: id.to_owned(),
            session: p.view.session.clone(),
            outcome: "expired".into(),
            channel: cause.to_owned(),
        });
    }

    /// Removes pending `id` and remembers how it ended.
    fn finish(&self, id: &str, how: &str, expired: bool) -> Option<Pending> {
        let mut st = self.lock();
        let p = st.pending.remove(id)?;
        st.by_request
            .remove(&(p.view.session.clone(), p.view.request.clone()));
        st.finished.insert(
            id.to_owned(),
            Finished {
                at: Instant::now(),
                how: how.to_owned(),
                expired,
            },
        );
        st.finished_order.push_back(id.to_owned());
        while st.finished_order.len() > FINISHED_KEPT {
            if let Some(old) = st.finished_order.pop_front() {
                st.finished.remove(&old);
            }
        }
        Some(p)
    }

    /// Why `id` cannot be answered (it is not pending).
    fn not_pending(st: &State, id: &str) -> AnswerError {
        match st.finished.get(id) {
            Some(f) if f.expired => AnswerError::Expired {
                id: id.to_owned(),
                ago: ago(f.at.elapsed()),
                why: "it was denied without an answer".into(),
            },
            Some(f) => AnswerError::Answered {
                id: id.to_owned(),
                how: f.how.clone(),
            },
            None => AnswerError::Unknown(id.to_owned()),
        }
    }

    /// Applies a person's answer to `id`. `by` says who (for the record).
    /// The first answer wins; an `--always` answer is applied only once its
    /// policy edit is written.
    pub async fn answer(
        self: &Arc<Self>,
        id: &str,
        scope: Scope,
        channel: Channel,
        by: &str,
    ) -> Result<Answered, AnswerError> {
        let audit = &self.audit;
        let (session, request, policy) = {
            let mut st = self.lock();
            let Some(p) = st.pending.get(id) else {
                return Err(Self::not_pending(&st, id));
            };
            if p.answering {
                return Err(AnswerError::Busy(id.to_owned()));
            }
            let session = p.view.session.clone();
            let request = p.view.request.clone();
            let policy = st.sessions.get(&session).and_then(|s| s.cfg.policy.clone());
            // A tool's `--always` pins its definition (the session's gate
            // does, once it has the answer): no policy file is edited.
            if scope == Scope::Always && request.kind != Kind::Tool {
                if request.kind == Kind::File && request.operation == "list" {
                    return Err(AnswerError::ListAlways(id.to_owned()));
                }
                if policy.is_none() {
                    return Err(AnswerError::NoPolicyFile(id.to_owned()));
                }
                if let Some(p) = st.pending.get_mut(id) {
                    p.answering = true;
                }
            }
            (session, request, policy)
        };
        let mut edit_note = String::new();
        if let (Scope::Always, Some(file), false) = (scope, policy, request.kind == Kind::Tool) {
            let editor = self.editor.clone();
            let (f2, r2, id2) = (file.clone(), request.clone(), id.to_owned());
            let done = tokio::task::spawn_blocking(move || editor(&f2, &r2, &id2))
                .await
                .unwrap_or_else(|e| Err(format!("the edit failed: {e}")));
            let path = file.path.display().to_string();
            match done {
                Ok(d) => {
                    audit.record(ApprovalPolicyEdit {
                        session: session.clone(),
                        path: path.clone(),
                        error: None,
                        id: id.to_owned(),
                        key: d.key.clone(),
                        entry: d.entry.clone(),
                        merged: d.merged,
                        already_present: d.already_present,
                    });
                    edit_note = if d.already_present {
                        format!("; {path} already lists it in {}", d.key)
                    } else {
                        format!(
                            "; added `{}` to {} in {path}{}",
                            d.entry,
                            d.key,
                            if d.merged {
                                " (the file had changed since the session started: merged)"
                            } else {
                                ""
                            }
                        )
                    };
                }
                Err(why) => {
                    audit.record(ApprovalPolicyEdit {
                        session: session.clone(),
                        path: path.clone(),
                        error: Some(why.clone()),
                        id: id.to_owned(),
                        key: key_of(&request).to_owned(),
                        entry: request.resource.clone(),
                        merged: false,
                        already_present: false,
                    });
                    let due = {
                        let mut st = self.lock();
                        match st.pending.get_mut(id) {
                            Some(p) => {
                                p.answering = false;
                                Instant::now() >= p.deadline
                            }
                            None => false,
                        }
                    };
                    if due {
                        self.expire(id, "timeout");
                    }
                    return Err(AnswerError::PolicyEdit {
                        id: id.to_owned(),
                        path,
                        why,
                    });
                }
            }
        }
        let Some(p) = self.finish(
            id,
            &format!("{} through {}", scope.as_str(), channel.as_str()),
            false,
        ) else {
            let st = self.lock();
            return Err(Self::not_pending(&st, id));
        };
        {
            let mut st = self.lock();
            if let Some(s) = st.sessions.get_mut(&session) {
                match scope {
                    Scope::Once => {}
                    Scope::Session | Scope::Always => {
                        s.granted.insert(request.clone(), (id.to_owned(), scope));
                    }
                    Scope::Deny => {
                        s.denied.insert(request.clone());
                    }
                }
            }
        }
        let outcome = match scope {
            Scope::Deny => Outcome::Denied,
            s => Outcome::Allowed {
                id: id.to_owned(),
                scope: s,
            },
        };
        let _ = p.tx.send(Some(outcome));
        audit.record(ApprovalAnswer {
            session: session.clone(),
            resource: request.resource.clone(),
            id: id.to_owned(),
            kind: request.kind.as_str().to_owned(),
            operation: request.operation.clone(),
            scope: scope.as_str().to_owned(),
            channel: channel.as_str().to_owned(),
            by: by.to_owned(),
            waited_ms: p.started.elapsed().as_millis() as u64,
            via: p.view.via.clone(),
        });
        let _ = self.events.send(Event::Resolved {
            id: id.to_owned(),
            session: session.clone(),
            outcome: scope.as_str().to_owned(),
            channel: channel.as_str().to_owned(),
        });
        let what = match request.kind {
            Kind::Tool => format!("the {} tool `{}`", request.operation, request.resource),
            _ => format!("{} {}", request.operation, request.resource),
        };
        let message = match (scope, request.kind) {
            (Scope::Always, Kind::Tool) => {
                format!("allowed {what}; its definition is pinned for the server")
            }
            (scope, _) => {
                match scope {
                    Scope::Once => format!("allowed {what} once"),
                    Scope::Session => format!("allowed {what} until session {session} ends"),
                    Scope::Always => format!("allowed {what}{edit_note}"),
                    Scope::Deny => {
                        format!("denied {what}; it is refused without asking until session {session} ends")
                    }
                }
            }
        };
        Ok(Answered {
            id: id.to_owned(),
            scope,
            message,
        })
    }
}

/// The `approval.refuse` record of `req` denied without asking.
fn refusal(session: &str, req: &Request, cause: &str) -> ApprovalRefuse {
    ApprovalRefuse {
        session: session.to_owned(),
        resource: req.resource.clone(),
        kind: req.kind.as_str().to_owned(),
        operation: req.operation.clone(),
        cause: cause.to_owned(),
    }
}

/// The policy key a request's grant goes to.
pub fn key_of(req: &Request) -> &'static str {
    match (req.kind, req.operation.as_str()) {
        (Kind::Network, _) => "network.allow",
        (Kind::File, "read" | "list") => "filesystem.read",
        (Kind::File, _) => "filesystem.write",
        // Pinned, not written to the policy.
        (Kind::Tool, _) => "mcp.pin",
    }
}

/// The `--always` edit of the daemon: the grant added to the policy file
/// (format kept, the file's changes since the session started merged, or
/// the edit refused; `warden_core::policy::edit`), with a comment naming the
/// date and the approval.
pub fn policy_editor() -> PolicyEditor {
    use warden_core::policy::edit::{file::add_grant_to_file, Grant};
    Arc::new(|file: &PolicyFile, req: &Request, id: &str| {
        let grant = match (req.kind, key_of(req)) {
            (Kind::Network, _) => Grant::Network(req.resource.clone()),
            (Kind::File, "filesystem.read") => Grant::Read(req.resource.clone()),
            (Kind::File, _) => Grant::Write(req.resource.clone()),
            (Kind::Tool, _) => {
                return Err("a tool's definition is pinned, not written to the policy".into())
            }
        };
        let today = time::OffsetDateTime::now_utc().date();
        let note = format!("approved {today} by wardenctl approve ({id})");
        let done = add_grant_to_file(&file.path, &file.text_at_start, &grant, &note)
            .map_err(|e| e.to_string())?;
        Ok(EditDone {
            key: grant.key().to_owned(),
            entry: grant.value().to_owned(),
            merged: done.merged,
            already_present: done.already_present,
        })
    })
}

/// Asks the session's approvals about the opens its sandbox would deny
/// (`warden_sandbox::supervise::hold`). Called on a notifier thread: never
/// blocks there; the question is asked on the daemon's event loop. Linux
/// only: the native sandbox's notifier holds the opens.
#[cfg(target_os = "linux")]
pub struct FileApprover {
    pub broker: Arc<Broker>,
    pub session: String,
    pub runtime: tokio::runtime::Handle,
    /// The user's home and Warden's own paths: what can never be approved.
    pub home: PathBuf,
    pub warden_paths: Vec<PathBuf>,
}

#[cfg(target_os = "linux")]
impl warden_sandbox::supervise::FileHolder for FileApprover {
    fn hold(&self, call: warden_sandbox::supervise::HeldOpen) {
        let req = Request {
            kind: Kind::File,
            resource: call.path.display().to_string(),
            operation: call.op.as_str().to_owned(),
        };
        if warden_sandbox::protected::never_approved(&call.path, &self.home, &self.warden_paths)
            .is_some()
        {
            self.broker.refuse(&self.session, &req, "protected");
            call.refuse();
            return;
        }
        let broker = self.broker.clone();
        let session = self.session.clone();
        self.runtime.spawn(async move {
            match broker.ask(&session, req, None).await {
                Outcome::Allowed { .. } => {
                    // The open and the answer are quick system calls.
                    let _ = tokio::task::spawn_blocking(move || {
                        if let Err(e) = call.allow() {
                            tracing::debug!(error = %e, "a held open's caller is gone");
                        }
                    })
                    .await;
                }
                Outcome::Denied => call.refuse(),
            }
        });
    }
}
