//! `mcp.*`: the session's MCP (JSON-RPC) requests as the daemon followed
//! them on the stdio relay: each request's start and end, never argument
//! values or result contents.

use serde::{Deserialize, Serialize};

use super::{expect, parse, record, Event, EventError};
use crate::{Decision, Record, RecordType};

/// `mcp.request` (info): a request began. `resource` is its method.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpRequest {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub method: String,
    /// The JSON-RPC id as JSON text (`7`, `"abc"`).
    pub id: String,
    /// `to-server` (the client asked) or `to-client` (the server asked).
    pub direction: String,
    /// The tool a `tools/call` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The request's size in bytes (its share of a batch).
    pub bytes: u64,
    /// A `tools/call`'s arguments, only with `audit.mcp_arguments: true`:
    /// the values of the variables passed from the client replaced by
    /// `[redacted: NAME]`; beyond 16 KiB `{"truncated": true, "bytes": N}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
}

impl Event for McpRequest {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Mcp,
            "request",
            Some(&self.session),
            self.method,
            Decision::Info,
            "",
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Mcp, "request", Decision::Info)?;
        Ok(McpRequest {
            session: r.session.clone().unwrap_or_default(),
            method: r.resource.clone(),
            ..parse(r)?
        })
    }
}

/// `mcp.end` (info): a request ended. `resource` is its method, `reason`
/// the outcome in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpEnd {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub method: String,
    #[serde(skip)]
    pub reason: String,
    pub id: String,
    pub direction: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// `result`, `tool-error` (a result with `isError: true`),
    /// `input-required` (a 2026-07-28 result asking the client for input
    /// first), `error`, `cancelled` or `unanswered` (the session ended
    /// first).
    pub outcome: String,
    /// The JSON-RPC error code, for `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<i64>,
    pub duration_ms: u64,
    pub request_bytes: u64,
    pub response_bytes: u64,
    /// Progress notifications it had.
    pub progress: u64,
}

impl Event for McpEnd {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Mcp,
            "end",
            Some(&self.session),
            self.method,
            Decision::Info,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Mcp, "end", Decision::Info)?;
        Ok(McpEnd {
            session: r.session.clone().unwrap_or_default(),
            method: r.resource.clone(),
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// `mcp.stream` (info): what could not be followed in one direction.
/// `resource` is the direction, `reason` why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpStream {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub direction: String,
    #[serde(skip)]
    pub reason: String,
    /// `malformed` (not JSON-RPC: once per direction, the bytes still
    /// passed untouched), `lost` (bytes the observer could not keep up
    /// with, not followed) or `suppressed` (records left out by the rate
    /// limit).
    pub event: String,
    pub count: u64,
}

impl Event for McpStream {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Mcp,
            "stream",
            Some(&self.session),
            self.direction,
            Decision::Info,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Mcp, "stream", Decision::Info)?;
        Ok(McpStream {
            session: r.session.clone().unwrap_or_default(),
            direction: r.resource.clone(),
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// `mcp.pin` (info, or deny when definitions changed): the server's tool
/// definitions against the ones pinned for its profile. `resource` is the
/// profile (the policy's name, or its path, or the command).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpPin {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub profile: String,
    #[serde(skip)]
    pub reason: String,
    /// `pinned` (first seen: now the reference) or `changed`.
    pub state: String,
    /// Tool names new since the pin, changed, and gone (at the session's end).
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
}

impl Event for McpPin {
    fn into_record(self) -> Record {
        let decision = if self.state == "changed" {
            Decision::Deny
        } else {
            Decision::Info
        };
        let details = super::details(&self);
        record(
            RecordType::Mcp,
            "pin",
            Some(&self.session),
            self.profile,
            decision,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        super::expect_kind(r, RecordType::Mcp, Some("pin"))?;
        Ok(McpPin {
            session: r.session.clone().unwrap_or_default(),
            profile: r.resource.clone(),
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// `mcp.refuse` (deny): a message from the client that Warden's policy
/// kept from the server (`mcp.tools`); the client got a JSON-RPC error in
/// its place. `resource` is the tool (or the method, or `-` for a line
/// that could not be read), `reason` the rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpRefuse {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub resource: String,
    #[serde(skip)]
    pub reason: String,
    /// The request id as JSON text, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

impl Event for McpRefuse {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Mcp,
            "refuse",
            Some(&self.session),
            self.resource,
            Decision::Deny,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Mcp, "refuse", Decision::Deny)?;
        Ok(McpRefuse {
            session: r.session.clone().unwrap_or_default(),
            resource: r.resource.clone(),
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// `mcp.hide` (info): tools Warden's policy cut from a `tools/list`
/// answer before the client saw it. `resource` is `tools/list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpHide {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub reason: String,
    /// The id of the `tools/list` request, as JSON text.
    pub id: String,
    pub tools: Vec<String>,
}

impl Event for McpHide {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Mcp,
            "hide",
            Some(&self.session),
            "tools/list".to_owned(),
            Decision::Info,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Mcp, "hide", Decision::Info)?;
        Ok(McpHide {
            session: r.session.clone().unwrap_or_default(),
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// `mcp.explain` (info): Warden added a line to the error answer of a tool
/// call, naming what it denied during the call (`mcp.explain_denials`).
/// `resource` is the tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpExplain {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub tool: String,
    /// The line the client got.
    #[serde(skip)]
    pub reason: String,
    /// The id of the `tools/call` request, as JSON text.
    pub id: String,
    /// How many denials the line stands for.
    pub denials: usize,
}

impl Event for McpExplain {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Mcp,
            "explain",
            Some(&self.session),
            self.tool,
            Decision::Info,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Mcp, "explain", Decision::Info)?;
        Ok(McpExplain {
            session: r.session.clone().unwrap_or_default(),
            tool: r.resource.clone(),
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}
