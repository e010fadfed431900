//! `file.*`: observed file accesses, their rate-limit summaries, and the
//! accesses a full queue lost.

use serde::{Deserialize, Serialize};

use super::{expect, expect_kind, parse, record, Event, EventError};
use crate::{Decision, Record, RecordType};

/// A path for a record: its text (with U+FFFD for bytes that are not UTF-8)
/// and, only when it is not UTF-8, its bytes in lowercase hex (the
/// `*_bytes_hex` keys).
pub fn path_text(p: &[u8]) -> (String, Option<String>) {
    match std::str::from_utf8(p) {
        Ok(s) => (s.to_owned(), None),
        Err(_) => (
            String::from_utf8_lossy(p).into_owned(),
            Some(hex::encode(p)),
        ),
    }
}

/// One access (`file.<operation>`): `deny` when the sandbox refuses (or
/// hides) what the path names, `allow` otherwise, `info` when the path
/// could not be read or placed. `resource` is the path as the server named
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileAccess {
    #[serde(skip)]
    pub session: String,
    /// The operation (`open-read`, `create`, `rename`...).
    #[serde(skip)]
    pub action: String,
    #[serde(skip, default = "info")]
    pub decision: Decision,
    #[serde(skip)]
    pub reason: String,
    /// The path as named ([`path_text`]).
    #[serde(skip)]
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes_hex: Option<String>,
    /// The call (`openat`, `execve`).
    pub syscall: String,
    /// The absolute path in the sandbox's view.
    pub resolved: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_bytes_hex: Option<String>,
    /// `rename`, `link`: the new name, as named and resolved (both or neither).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_bytes_hex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_resolved: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_resolved_bytes_hex: Option<String>,
    /// `symlink`: the link's content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_bytes_hex: Option<String>,
    /// The errno the sandbox answers with; `null` when allowed.
    pub errno: Option<i32>,
    /// Its name.
    pub error: Option<String>,
    /// The call's flags.
    pub flags: u64,
    /// The calling process, as a host pid.
    pub pid: u32,
}

fn info() -> Decision {
    Decision::Info
}

impl Event for FileAccess {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::File,
            &self.action,
            Some(&self.session),
            self.path,
            self.decision,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect_kind(r, RecordType::File, None)?;
        Ok(FileAccess {
            session: r.session.clone().unwrap_or_default(),
            action: r.action.clone(),
            decision: r.decision,
            reason: r.reason.clone(),
            path: r.resource.clone(),
            ..parse(r)?
        })
    }
}

/// Accesses the rate limit left out: per path (`resource` the path), or
/// once the session's budget is spent (`resource` `*`). Same `type`,
/// `action` and `decision` as their records, the `reason` of the first
/// one left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSummary {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub action: String,
    #[serde(skip, default = "info")]
    pub decision: Decision,
    #[serde(skip)]
    pub reason: String,
    /// The path ([`path_text`]), `None` for the session-wide summary.
    #[serde(skip)]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes_hex: Option<String>,
    /// How many accesses were left out.
    pub suppressed: u64,
    /// The limit, in words.
    pub rate_limit: String,
}

impl Event for FileSummary {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::File,
            &self.action,
            Some(&self.session),
            self.path.unwrap_or_else(|| "*".into()),
            self.decision,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect_kind(r, RecordType::File, None)?;
        Ok(FileSummary {
            session: r.session.clone().unwrap_or_default(),
            action: r.action.clone(),
            decision: r.decision,
            reason: r.reason.clone(),
            path: (r.resource != "*").then(|| r.resource.clone()),
            ..parse(r)?
        })
    }
}

/// Accesses that did not fit the queue to the store (`file.*`, info,
/// `resource` `*`); the calls themselves went through unobserved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesLost {
    #[serde(skip)]
    pub session: String,
    pub lost: u64,
}

impl FilesLost {
    pub const REASON: &'static str =
        "file accesses not observed: the queue to the audit store was full";
}

impl Event for FilesLost {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::File,
            "*",
            Some(&self.session),
            "*",
            Decision::Info,
            Self::REASON,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::File, "*", Decision::Info)?;
        Ok(FilesLost {
            session: r.session.clone().unwrap_or_default(),
            ..parse(r)?
        })
    }
}
