//! The audit record schema (DESIGN.md §7, `docs/audit-format.md`).
//!
//! One JSON object per line. Values of environment variables never appear in a
//! record, only their names.

use serde::{Deserialize, Serialize};

/// Version of the record schema, written as `v` in every record.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordType {
    Session,
    File,
    Network,
    Env,
    Limit,
    Approval,
    Policy,
    Daemon,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
    Info,
}

/// One audit record. `ts` and `seq` are filled in by the store when appended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub v: u32,
    /// RFC 3339, UTC, millisecond precision.
    pub ts: String,
    /// Strictly increasing within one store.
    pub seq: u64,
    /// Session id, absent for daemon-wide records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(rename = "type")]
    pub kind: RecordType,
    pub action: String,
    pub resource: String,
    pub decision: Decision,
    pub reason: String,
    /// Type-specific fields (see docs/audit-format.md).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub details: serde_json::Value,
}

impl Record {
    /// A record not yet stamped with `ts` and `seq`.
    pub fn new(
        kind: RecordType,
        action: &str,
        session: Option<&str>,
        resource: impl Into<String>,
        decision: Decision,
        reason: impl Into<String>,
    ) -> Self {
        Record {
            v: SCHEMA_VERSION,
            ts: String::new(),
            seq: 0,
            session: session.map(str::to_owned),
            kind,
            action: action.to_owned(),
            resource: resource.into(),
            decision,
            reason: reason.into(),
            details: serde_json::Value::Null,
        }
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = details;
        self
    }
}

/// RFC 3339 UTC timestamp with milliseconds, e.g. `2026-11-29T14:47:32.123Z`.
pub fn timestamp(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_serialises_with_type_field_and_no_empty_details() {
        let mut r = Record::new(
            RecordType::Session,
            "start",
            Some("abc"),
            "/usr/bin/node",
            Decision::Allow,
            "policy p.yaml",
        );
        r.ts = "2026-01-01T00:00:00.000Z".into();
        r.seq = 7;
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(
            s,
            r#"{"v":1,"ts":"2026-01-01T00:00:00.000Z","seq":7,"session":"abc","type":"session","action":"start","resource":"/usr/bin/node","decision":"allow","reason":"policy p.yaml"}"#
        );
        let back: Record = serde_json::from_str(&s).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn timestamp_format() {
        let t = time::macros::datetime!(2026-11-29 14:47:32.123 UTC);
        assert_eq!(timestamp(t), "2026-11-29T14:47:32.123Z");
    }
}
