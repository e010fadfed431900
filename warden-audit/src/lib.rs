//! Warden's audit trail in one place (DESIGN.md §7, `docs/audit-format.md`):
//! the record schema, one typed event per record the daemon writes, the
//! store's writer, and its reader, verifier and filter. `wardend` writes the
//! store; `wardenctl logs` reads and verifies it without the daemon;
//! `warden-bench audit` times the writer without linking the daemon.
//!
//! One JSON object per line, pure ASCII (see [`to_line`]). Values of
//! environment variables never appear in a record, only their names.
//!
//! - [`Record`] and its [`RecordType`] and [`Decision`]: the schema every
//!   record shares, and the stored form of a line ([`to_line`]).
//! - [`event`]: one type per documented record (`session.start`,
//!   `file.*`, `daemon.rotate`...), each building its [`Record`] (type,
//!   action, decision, resource, reason and the exact `details`) and reading
//!   it back: the daemon builds records only through them.
//! - [`writer`]: the daemon's [`AuditStore`]: one `write(2)` per line, the
//!   hash chain, group commit, rotation, retention, crash recovery.
//! - [`store`]: file names, rotation layout, the head file, and a consistent
//!   snapshot of the store files for readers.
//! - [`verify`]: the hash chain and `seq` check across every file.
//! - [`filter`]: the record filter of `wardenctl logs` (also applied by the
//!   daemon's `Logs` stream).
//!
//! **The chain.** Every record of schema v2 carries `prev`: the lowercase hex
//! SHA-256 of the previous record's line exactly as stored, without its
//! terminating `\n` ([`line_hash`]). The first record of a fresh store has
//! `prev` = [`GENESIS`] (64 zeros). The chain runs across rotated files.
#![forbid(unsafe_code)]

pub mod event;
pub mod filter;
pub mod store;
pub mod verify;
pub mod writer;

pub use writer::{AuditStore, Options};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Version of the record schema, written as `v` in every record.
///
/// - 1: the original schema.
/// - 2: adds `prev` (the hash chain); lines are pure ASCII.
pub const SCHEMA_VERSION: u32 = 2;

/// `prev` of the first record of a fresh store.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

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
    Mcp,
}

impl RecordType {
    pub const ALL: [RecordType; 9] = [
        RecordType::Session,
        RecordType::File,
        RecordType::Network,
        RecordType::Env,
        RecordType::Limit,
        RecordType::Approval,
        RecordType::Policy,
        RecordType::Daemon,
        RecordType::Mcp,
    ];

    /// The spelling used in records (`session`, `file`...).
    pub fn as_str(self) -> &'static str {
        match self {
            RecordType::Session => "session",
            RecordType::File => "file",
            RecordType::Network => "network",
            RecordType::Env => "env",
            RecordType::Limit => "limit",
            RecordType::Approval => "approval",
            RecordType::Policy => "policy",
            RecordType::Daemon => "daemon",
            RecordType::Mcp => "mcp",
        }
    }

    pub fn parse(s: &str) -> Option<RecordType> {
        RecordType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
    Info,
}

impl Decision {
    pub const ALL: [Decision; 3] = [Decision::Allow, Decision::Deny, Decision::Info];

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::Info => "info",
        }
    }

    pub fn parse(s: &str) -> Option<Decision> {
        Decision::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

/// One audit record. `ts`, `seq` and `prev` are filled in by the store when
/// appended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub v: u32,
    /// RFC 3339, UTC, millisecond precision.
    pub ts: String,
    /// Strictly increasing by one within one store, across rotation and restarts.
    pub seq: u64,
    /// [`line_hash`] of the previous stored line ([`GENESIS`] for the first);
    /// absent in schema v1 records.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prev: String,
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
    /// A record not yet stamped with `ts`, `seq` and `prev`.
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
            prev: String::new(),
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

/// The stored form of a record: compact JSON, pure ASCII, without the
/// trailing newline. Every character outside printable ASCII (controls, DEL,
/// and all non-ASCII, including C1 controls, bidi overrides and U+2028) is a
/// `\uXXXX` escape, so a stored line can neither break a line-oriented reader
/// nor drive a terminal it is printed on.
pub fn to_line(rec: &Record) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, AsciiFormatter);
    // Into memory, of a `Record` whose details are a JSON value already:
    // nothing can fail (no I/O, no non-string keys).
    let _ = rec.serialize(&mut ser);
    out
}

/// A compact JSON formatter that escapes everything but printable ASCII.
struct AsciiFormatter;

impl serde_json::ser::Formatter for AsciiFormatter {
    fn write_string_fragment<W>(&mut self, writer: &mut W, fragment: &str) -> std::io::Result<()>
    where
        W: ?Sized + std::io::Write,
    {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if (' '..='~').contains(&c) {
                continue;
            }
            writer.write_all(&fragment.as_bytes()[start..i])?;
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                write!(writer, "\\u{u:04x}")?;
            }
            start = i + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

/// The chain hash of a stored line: lowercase hex SHA-256 of its bytes,
/// without the terminating `\n`.
pub fn line_hash(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    hex::encode(Sha256::digest(line))
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

/// Unix time in milliseconds of a record's `ts` (the [`timestamp`] format:
/// `YYYY-MM-DDTHH:MM:SS.mmmZ`); `None` for anything else.
pub fn parse_timestamp_ms(ts: &str) -> Option<i64> {
    let b = ts.as_bytes();
    if b.len() != 24
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[23] != b'Z'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let s = ts.get(r)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let month = time::Month::try_from(u8::try_from(num(5..7)?).ok()?).ok()?;
    let date = time::Date::from_calendar_date(num(0..4)? as i32, month, num(8..10)? as u8).ok()?;
    let t = time::Time::from_hms_milli(
        num(11..13)? as u8,
        num(14..16)? as u8,
        num(17..19)? as u8,
        num(20..23)? as u16,
    )
    .ok()?;
    let dt = time::PrimitiveDateTime::new(date, t).assume_utc();
    Some((dt.unix_timestamp_nanos() / 1_000_000) as i64)
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
        r.prev = GENESIS.into();
        let s = String::from_utf8(to_line(&r)).unwrap();
        assert_eq!(
            s,
            format!(
                r#"{{"v":2,"ts":"2026-01-01T00:00:00.000Z","seq":7,"prev":"{GENESIS}","session":"abc","type":"session","action":"start","resource":"/usr/bin/node","decision":"allow","reason":"policy p.yaml"}}"#
            )
        );
        let back: Record = serde_json::from_str(&s).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn v1_records_still_parse() {
        let line = r#"{"v":1,"ts":"2026-01-01T00:00:00.000Z","seq":7,"session":"abc","type":"session","action":"start","resource":"/usr/bin/node","decision":"allow","reason":""}"#;
        let r: Record = serde_json::from_str(line).unwrap();
        assert_eq!((r.v, r.seq, r.prev.as_str()), (1, 7, ""));
    }

    #[test]
    fn stored_lines_are_printable_ascii_and_round_trip() {
        let hostile = "a\nb\r\"q\"\\ \u{1b}[31mred\u{7f}\u{9b}2J\u{202e}evil\u{2028}x\u{fffd}é😀\0";
        let mut r = Record::new(
            RecordType::File,
            "read",
            None,
            hostile,
            Decision::Deny,
            hostile,
        );
        r.details = serde_json::json!({ hostile: [hostile] });
        let line = to_line(&r);
        assert!(
            line.iter().all(|b| (b' '..=b'~').contains(b)),
            "{}",
            String::from_utf8_lossy(&line)
        );
        let back: Record = serde_json::from_slice(&line).unwrap();
        assert_eq!(back, r);
        // Escapes are exactly what serde_json would parse back, incl. surrogates.
        let s = String::from_utf8(line).unwrap();
        assert!(
            s.contains(r"\u001b[31m") && s.contains(r"\ud83d\ude00"),
            "{s}"
        );
    }

    #[test]
    fn line_hash_ignores_the_newline_only() {
        assert_eq!(line_hash(b"abc\n"), line_hash(b"abc"));
        assert_eq!(
            line_hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_ne!(line_hash(b"abc "), line_hash(b"abc"));
    }

    #[test]
    fn timestamp_format_and_parse() {
        let t = time::macros::datetime!(2026-11-29 14:47:32.123 UTC);
        assert_eq!(timestamp(t), "2026-11-29T14:47:32.123Z");
        assert_eq!(
            parse_timestamp_ms("2026-11-29T14:47:32.123Z"),
            Some((t.unix_timestamp_nanos() / 1_000_000) as i64)
        );
        for bad in [
            "",
            "2026-11-29T14:47:32Z",
            "2026-13-29T14:47:32.123Z",
            "2026-11-29 14:47:32.123Z",
            "2026-11-29T14:47:32.12xZ",
        ] {
            assert_eq!(parse_timestamp_ms(bad), None, "{bad}");
        }
    }
}
