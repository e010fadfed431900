//! One type per record the daemon writes (`docs/audit-format.md`, "Records
//! written today"): the daemon builds every record through these, and tests
//! read records back into them.
//!
//! Each type holds what varies from one record of its kind to the next; its
//! [`Event::into_record`] fixes `type`, `action`, `decision` where the kind
//! does, and builds `resource`, `reason` and `details` from it. Fields of the
//! envelope (`session`, `resource`, `reason`, a variable `decision`) are
//! marked `#[serde(skip)]`; every other field is a key of `details`, spelled
//! as in the document. `details` is built as a [`serde_json::Value`], so its
//! keys are in alphabetical order at every level, as they always were: a
//! record's line is the same whether it was written before or after these
//! types existed (the chain and stored logs are unaffected).
//!
//! [`Event::from_record`] is the reverse, for tests and tools (a typed
//! oracle over `wardenctl logs --json`): it checks `type`, `action` and a
//! fixed `decision`, and reads `details` (unknown keys are ignored, as the
//! versioning rule asks of readers). [`AnyEvent::parse`] finds the type of
//! any record.

mod approval;
mod daemon;
mod file;
mod limit;
mod mcp;
mod network;
mod session;
mod syscall;
#[cfg(test)]
mod tests;

pub use approval::{
    ApprovalAnswer, ApprovalExpire, ApprovalPolicyEdit, ApprovalRefuse, ApprovalRequest, CallRef,
};
pub use daemon::{
    DaemonDamaged, DaemonPeer, DaemonPeerSummary, DaemonRetention, DaemonRotate, DaemonStart,
    DaemonStop, DaemonTorn, Damage, PeerNamespaces,
};
pub use file::{path_text, FileAccess, FileSummary, FilesLost};
pub use limit::{Breach, LimitBreach};
pub use mcp::{McpEnd, McpExplain, McpHide, McpPin, McpRefuse, McpRequest, McpStream};
pub use network::{
    Approved, NetworkAccept, NetworkClose, NetworkConnect, NetworkResolve, NetworkSummary,
};
pub use session::{
    Client, DockerFacts, Peak, SandboxFacts, SessionExit, SessionKill, SessionRefused,
    SessionStart, SkippedBackend, WriteProtection,
};
pub use syscall::{CheckedArg, SyscallRefused, SyscallSummary, SyscallsLost};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::{Decision, Record, RecordType};

/// A record type of `docs/audit-format.md`.
pub trait Event: Sized {
    /// The record, not yet stamped (the store fills in `ts`, `seq`, `prev`).
    fn into_record(self) -> Record;

    /// The event `r` holds, if it is one of this type: its `type`, `action`
    /// (and a fixed `decision`) match and its `details` have this type's
    /// fields.
    fn from_record(r: &Record) -> Result<Self, EventError>;
}

/// Why a record is not the event asked for.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("a {found} record is not a {expected} record")]
    Kind { expected: String, found: String },
    #[error("a {what} record has decision `{found}`, not `{expected}`")]
    Decision {
        what: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("the details of a {what} record: {source}")]
    Details {
        what: String,
        source: serde_json::Error,
    },
    #[error("no documented record type is {0}")]
    Unknown(String),
}

/// `type.action` of a record, for messages.
fn name(r: &Record) -> String {
    format!("{}.{}", r.kind.as_str(), r.action)
}

/// The details of an event as JSON. Every event's details are a map of
/// plain data; serialising one can fail only for a path that is not UTF-8,
/// which the policy compiler never lets through.
fn details(event: &impl Serialize) -> Value {
    // Never a panic in the daemon for a record: should it ever fail, the
    // record still goes out, saying so.
    serde_json::to_value(event).unwrap_or_else(|e| {
        let mut m = serde_json::Map::new();
        m.insert(
            "details_error".into(),
            Value::String(format!("details not serialisable: {e}")),
        );
        Value::Object(m)
    })
}

/// `details` with `extra` (constant keys of the record type) added.
fn details_with(event: &impl Serialize, extra: &[(&str, &str)]) -> Value {
    let mut d = details(event);
    if let Value::Object(m) = &mut d {
        for (k, v) in extra {
            m.insert((*k).to_owned(), Value::from(*v));
        }
    }
    d
}

/// Checks `type` and `action` (`None`: any action).
fn expect_kind(r: &Record, kind: RecordType, action: Option<&str>) -> Result<(), EventError> {
    if r.kind != kind || action.is_some_and(|a| a != r.action) {
        return Err(EventError::Kind {
            expected: format!("{}.{}", kind.as_str(), action.unwrap_or("*")),
            found: name(r),
        });
    }
    Ok(())
}

/// Checks `type`, `action` and `decision`.
fn expect(
    r: &Record,
    kind: RecordType,
    action: &str,
    decision: Decision,
) -> Result<(), EventError> {
    expect_kind(r, kind, Some(action))?;
    expect_decision(r, decision)
}

fn expect_decision(r: &Record, decision: Decision) -> Result<(), EventError> {
    if r.decision != decision {
        return Err(EventError::Decision {
            what: name(r),
            expected: decision.as_str(),
            found: r.decision.as_str(),
        });
    }
    Ok(())
}

/// `details` read as `T`.
fn parse<T: DeserializeOwned>(r: &Record) -> Result<T, EventError> {
    T::deserialize(&r.details).map_err(|source| EventError::Details {
        what: name(r),
        source,
    })
}

/// A record with the given envelope and details.
fn record(
    kind: RecordType,
    action: &str,
    session: Option<&str>,
    resource: impl Into<String>,
    decision: Decision,
    reason: impl Into<String>,
    details: Option<Value>,
) -> Record {
    let r = Record::new(kind, action, session, resource, decision, reason);
    match details {
        Some(d) => r.with_details(d),
        None => r,
    }
}

/// The name of an errno as records spell it (`EPERM`, `ENOENT`).
pub fn errno_name(errno: i32) -> String {
    format!("{:?}", nix::errno::Errno::from_raw(errno))
}

/// `From<E> for Record` for every event, so the store takes events directly.
macro_rules! into_record {
    ($($t:ident),* $(,)?) => {
        $(impl From<$t> for Record {
            fn from(e: $t) -> Record {
                e.into_record()
            }
        })*

        /// Any documented record, typed. (Unboxed: an oracle for tests and
        /// tools, read one record at a time, not a type kept in bulk.)
        #[derive(Debug, Clone, PartialEq)]
        #[allow(clippy::large_enum_variant)]
        pub enum AnyEvent {
            $($t($t),)*
        }

        impl AnyEvent {
            /// Every variant's name, as [`AnyEvent::name`] gives it.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($t),)*];

            /// The variant's name (`SessionStart`).
            pub fn name(&self) -> &'static str {
                match self {
                    $(AnyEvent::$t(_) => stringify!($t),)*
                }
            }

            pub fn into_record(self) -> Record {
                match self {
                    $(AnyEvent::$t(e) => e.into_record(),)*
                }
            }
        }

        impl From<AnyEvent> for Record {
            fn from(e: AnyEvent) -> Record {
                e.into_record()
            }
        }
    };
}

into_record!(
    SessionStart,
    SessionExit,
    SessionRefused,
    SessionKill,
    LimitBreach,
    SyscallRefused,
    SyscallSummary,
    SyscallsLost,
    FileAccess,
    FileSummary,
    FilesLost,
    NetworkConnect,
    NetworkAccept,
    NetworkClose,
    NetworkResolve,
    NetworkSummary,
    DaemonStart,
    DaemonStop,
    DaemonPeer,
    DaemonPeerSummary,
    DaemonRotate,
    DaemonRetention,
    DaemonDamaged,
    DaemonTorn,
    ApprovalRequest,
    ApprovalAnswer,
    ApprovalExpire,
    ApprovalRefuse,
    ApprovalPolicyEdit,
    McpRequest,
    McpEnd,
    McpStream,
    McpPin,
    McpRefuse,
    McpHide,
    McpExplain,
);

impl AnyEvent {
    /// The typed event of any record the daemon writes: by `type` and
    /// `action`, and for the kinds with summaries, by `details` (a summary
    /// has `suppressed`, a lost-events record `lost`).
    pub fn parse(r: &Record) -> Result<AnyEvent, EventError> {
        let has = |k: &str| r.details.get(k).is_some();
        use RecordType as T;
        Ok(match (r.kind, r.action.as_str()) {
            (T::Session, "start") => AnyEvent::SessionStart(Event::from_record(r)?),
            (T::Session, "exit") => AnyEvent::SessionExit(Event::from_record(r)?),
            (T::Session, "refused") => AnyEvent::SessionRefused(Event::from_record(r)?),
            (T::Session, "kill") => AnyEvent::SessionKill(Event::from_record(r)?),
            (T::Limit, "breach") => AnyEvent::LimitBreach(Event::from_record(r)?),
            (T::Policy, "syscall") if has("suppressed") => {
                AnyEvent::SyscallSummary(Event::from_record(r)?)
            }
            (T::Policy, "syscall") if has("lost") => AnyEvent::SyscallsLost(Event::from_record(r)?),
            (T::Policy, "syscall") => AnyEvent::SyscallRefused(Event::from_record(r)?),
            (T::File, "*") => AnyEvent::FilesLost(Event::from_record(r)?),
            (T::File, _) if has("suppressed") => AnyEvent::FileSummary(Event::from_record(r)?),
            (T::File, _) => AnyEvent::FileAccess(Event::from_record(r)?),
            (T::Network, "accept") => AnyEvent::NetworkAccept(Event::from_record(r)?),
            (T::Network, "connect" | "close") if has("suppressed") => {
                AnyEvent::NetworkSummary(Event::from_record(r)?)
            }
            (T::Network, "connect") => AnyEvent::NetworkConnect(Event::from_record(r)?),
            (T::Network, "close") => AnyEvent::NetworkClose(Event::from_record(r)?),
            (T::Network, "resolve") => AnyEvent::NetworkResolve(Event::from_record(r)?),
            (T::Daemon, "start") => AnyEvent::DaemonStart(Event::from_record(r)?),
            (T::Daemon, "stop") => AnyEvent::DaemonStop(Event::from_record(r)?),
            (T::Daemon, "peer") if has("suppressed") => {
                AnyEvent::DaemonPeerSummary(Event::from_record(r)?)
            }
            (T::Daemon, "peer") => AnyEvent::DaemonPeer(Event::from_record(r)?),
            (T::Daemon, "rotate") => AnyEvent::DaemonRotate(Event::from_record(r)?),
            (T::Daemon, "retention") => AnyEvent::DaemonRetention(Event::from_record(r)?),
            (T::Daemon, "damaged") => AnyEvent::DaemonDamaged(Event::from_record(r)?),
            (T::Daemon, "torn") => AnyEvent::DaemonTorn(Event::from_record(r)?),
            (T::Approval, "request") => AnyEvent::ApprovalRequest(Event::from_record(r)?),
            (T::Approval, "answer") => AnyEvent::ApprovalAnswer(Event::from_record(r)?),
            (T::Approval, "expire") => AnyEvent::ApprovalExpire(Event::from_record(r)?),
            (T::Approval, "refuse") => AnyEvent::ApprovalRefuse(Event::from_record(r)?),
            (T::Approval, "policy-edit") => AnyEvent::ApprovalPolicyEdit(Event::from_record(r)?),
            (T::Mcp, "request") => AnyEvent::McpRequest(Event::from_record(r)?),
            (T::Mcp, "end") => AnyEvent::McpEnd(Event::from_record(r)?),
            (T::Mcp, "stream") => AnyEvent::McpStream(Event::from_record(r)?),
            (T::Mcp, "pin") => AnyEvent::McpPin(Event::from_record(r)?),
            (T::Mcp, "refuse") => AnyEvent::McpRefuse(Event::from_record(r)?),
            (T::Mcp, "hide") => AnyEvent::McpHide(Event::from_record(r)?),
            (T::Mcp, "explain") => AnyEvent::McpExplain(Event::from_record(r)?),
            _ => return Err(EventError::Unknown(name(r))),
        })
    }
}
