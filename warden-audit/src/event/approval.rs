//! `approval.*`: approvals (docs/approvals.md). A held access raises one
//! request; it ends with exactly one answer or expiry. `--always` answers
//! also write a policy edit. Accesses refused without asking are `refuse`.
//! `resource` is `host:port` (network) or the absolute path (file).

use serde::{Deserialize, Serialize};

use super::{expect, expect_kind, parse, record, Event, EventError};
use crate::{Decision, Record, RecordType};

/// The MCP tool call in flight when an approval was raised (issue 17):
/// `call` and `tool` when there was exactly one, `calls` (each "TOOL (id
/// ID)") when there were several; all absent when none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<String>,
}

impl CallRef {
    /// From the calls in flight, (id, tool) each.
    pub fn of(calls: &[(String, String)]) -> CallRef {
        match calls {
            [] => CallRef::default(),
            [(id, tool)] => CallRef {
                call: Some(id.clone()),
                tool: Some(tool.clone()),
                calls: vec![],
            },
            many => CallRef {
                call: None,
                tool: None,
                calls: many
                    .iter()
                    .map(|(id, tool)| format!("{tool} (id {id})"))
                    .collect(),
            },
        }
    }

    /// As shown to a person: "tool `fetch`", "tools fetch (id 3), ...", or
    /// None.
    pub fn shown(&self) -> Option<String> {
        match (&self.tool, self.calls.is_empty()) {
            (Some(t), _) => Some(format!("tool `{t}`")),
            (None, false) => Some(format!("tools {}", self.calls.join(", "))),
            (None, true) => None,
        }
    }
}

/// `approval.request` (info): an access was held and a person asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub resource: String,
    /// The approval's id (`wardenctl approve ID`).
    pub id: String,
    /// `network` or `file`.
    pub kind: String,
    /// `connect`; for files `read`, `write`, `create`, `list`.
    pub operation: String,
    /// The session's name, if it has one.
    pub server: Option<String>,
    /// How long the access is held before it is denied.
    pub timeout_ms: u64,
    /// Where the question was put besides `wardenctl approve` (`terminal`,
    /// `desktop`).
    pub channels: Vec<String>,
    /// The tool call it was raised during.
    #[serde(flatten)]
    pub via: CallRef,
}

impl Event for ApprovalRequest {
    fn into_record(self) -> Record {
        let reason = format!(
            "{} {} {}: held until a person answers (approval {})",
            self.kind, self.operation, self.resource, self.id
        );
        let details = super::details(&self);
        record(
            RecordType::Approval,
            "request",
            Some(&self.session),
            self.resource,
            Decision::Info,
            reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Approval, "request", Decision::Info)?;
        Ok(ApprovalRequest {
            session: r.session.clone().unwrap_or_default(),
            resource: r.resource.clone(),
            ..parse(r)?
        })
    }
}

/// `approval.answer` (allow or deny): a person answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalAnswer {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub resource: String,
    pub id: String,
    pub kind: String,
    pub operation: String,
    /// `once`, `session`, `always` or `deny`.
    pub scope: String,
    /// `cli` (`wardenctl approve`), `terminal` (the shim's terminal) or
    /// `desktop` (a notification).
    pub channel: String,
    /// Who answered: `uid 1000 pid 4242 (wardenctl)`, or the desktop.
    pub by: String,
    /// How long the access was held.
    pub waited_ms: u64,
    /// The tool call it was raised during.
    #[serde(flatten)]
    pub via: CallRef,
}

impl Event for ApprovalAnswer {
    fn into_record(self) -> Record {
        let allowed = self.scope != "deny";
        let reason = if allowed {
            format!(
                "{} {} approved ({}) through {} by {}",
                self.operation, self.resource, self.scope, self.channel, self.by
            )
        } else {
            format!(
                "{} {} denied through {} by {}; not asked again this session",
                self.operation, self.resource, self.channel, self.by
            )
        };
        let details = super::details(&self);
        record(
            RecordType::Approval,
            "answer",
            Some(&self.session),
            self.resource,
            if allowed {
                Decision::Allow
            } else {
                Decision::Deny
            },
            reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect_kind(r, RecordType::Approval, Some("answer"))?;
        let a: ApprovalAnswer = ApprovalAnswer {
            session: r.session.clone().unwrap_or_default(),
            resource: r.resource.clone(),
            ..parse(r)?
        };
        let want = if a.scope == "deny" {
            Decision::Deny
        } else {
            Decision::Allow
        };
        super::expect_decision(r, want)?;
        Ok(a)
    }
}

/// `approval.expire` (deny): nobody answered in time, or the session or the
/// daemon ended first: the access is denied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalExpire {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub resource: String,
    pub id: String,
    pub kind: String,
    pub operation: String,
    /// `timeout`, `session-ended` or `daemon-stopped`.
    pub cause: String,
    pub waited_ms: u64,
    /// The tool call it was raised during.
    #[serde(flatten)]
    pub via: CallRef,
}

impl Event for ApprovalExpire {
    fn into_record(self) -> Record {
        let why = match self.cause.as_str() {
            "timeout" => "no answer in time".to_string(),
            "session-ended" => "the session ended first".to_string(),
            "daemon-stopped" => "the daemon stopped first".to_string(),
            other => other.to_string(),
        };
        let reason = format!(
            "{} {} denied: {why} (approval {})",
            self.operation, self.resource, self.id
        );
        let details = super::details(&self);
        record(
            RecordType::Approval,
            "expire",
            Some(&self.session),
            self.resource,
            Decision::Deny,
            reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Approval, "expire", Decision::Deny)?;
        Ok(ApprovalExpire {
            session: r.session.clone().unwrap_or_default(),
            resource: r.resource.clone(),
            ..parse(r)?
        })
    }
}

/// `approval.refuse` (deny): an access that approvals would have held was
/// denied without asking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRefuse {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub resource: String,
    pub kind: String,
    pub operation: String,
    /// `denied-for-session` (answered `--deny` before), `too-many-pending`
    /// (the session already waits on the most approvals it may), or
    /// `protected` (a name that can never be approved).
    pub cause: String,
}

impl Event for ApprovalRefuse {
    fn into_record(self) -> Record {
        let why = match self.cause.as_str() {
            "denied-for-session" => "denied earlier in this session".to_string(),
            "too-many-pending" => {
                "the session already waits on the most approvals it may".to_string()
            }
            "protected" => "a protected name, which can never be approved".to_string(),
            other => other.to_string(),
        };
        let reason = format!(
            "{} {} denied without asking: {why}",
            self.operation, self.resource
        );
        let details = super::details(&self);
        record(
            RecordType::Approval,
            "refuse",
            Some(&self.session),
            self.resource,
            Decision::Deny,
            reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Approval, "refuse", Decision::Deny)?;
        Ok(ApprovalRefuse {
            session: r.session.clone().unwrap_or_default(),
            resource: r.resource.clone(),
            ..parse(r)?
        })
    }
}

/// `approval.policy-edit` (allow or deny): an `--always` answer added its
/// grant to the policy file (allow), or could not (deny: nothing granted).
/// `resource` is the policy file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalPolicyEdit {
    #[serde(skip)]
    pub session: String,
    /// The policy file.
    #[serde(skip)]
    pub path: String,
    /// Why the edit was not made (then nothing was granted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub id: String,
    /// `network.allow`, `filesystem.read` or `filesystem.write`.
    pub key: String,
    /// The added entry.
    pub entry: String,
    /// The file had changed since the session started; the grant was added
    /// to the file as it is now.
    pub merged: bool,
    /// The entry was in the file already; nothing was written.
    pub already_present: bool,
}

impl Event for ApprovalPolicyEdit {
    fn into_record(self) -> Record {
        let (decision, reason) = match &self.error {
            None if self.already_present => (
                Decision::Allow,
                format!("{} already lists {}", self.key, self.entry),
            ),
            None => (
                Decision::Allow,
                format!(
                    "added {} to {}{}",
                    self.entry,
                    self.key,
                    if self.merged {
                        " (the file had changed since the session started; merged)"
                    } else {
                        ""
                    }
                ),
            ),
            Some(e) => (
                Decision::Deny,
                format!("cannot add {} to {}: {e}", self.entry, self.key),
            ),
        };
        let details = super::details(&self);
        record(
            RecordType::Approval,
            "policy-edit",
            Some(&self.session),
            self.path,
            decision,
            reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect_kind(r, RecordType::Approval, Some("policy-edit"))?;
        let e: ApprovalPolicyEdit = ApprovalPolicyEdit {
            session: r.session.clone().unwrap_or_default(),
            path: r.resource.clone(),
            ..parse(r)?
        };
        let want = if e.error.is_some() {
            Decision::Deny
        } else {
            Decision::Allow
        };
        super::expect_decision(r, want)?;
        Ok(e)
    }
}
