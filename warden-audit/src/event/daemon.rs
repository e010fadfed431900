//! `daemon.*`: the daemon's start and stop, refused peers, and what the
//! store did to itself (rotation, retention, damage and torn lines found at
//! start-up).

use serde::{Deserialize, Serialize};

use super::{expect, parse, record, Event, EventError};
use crate::store::{HEAD, LIVE};
use crate::{Decision, Record, RecordType};

/// `daemon.start` (info), fsynced. `resource` is the socket path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStart {
    #[serde(skip)]
    pub socket: String,
    pub pid: u32,
    pub version: String,
}

impl Event for DaemonStart {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Daemon,
            "start",
            None,
            self.socket,
            Decision::Info,
            "",
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Daemon, "start", Decision::Info)?;
        Ok(DaemonStart {
            socket: r.resource.clone(),
            ..parse(r)?
        })
    }
}

/// `daemon.stop` (info). `resource` is the socket path; no details.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonStop {
    pub socket: String,
}

impl Event for DaemonStop {
    fn into_record(self) -> Record {
        record(
            RecordType::Daemon,
            "stop",
            None,
            self.socket,
            Decision::Info,
            "",
            None,
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Daemon, "stop", Decision::Info)?;
        Ok(DaemonStop {
            socket: r.resource.clone(),
        })
    }
}

/// `daemon.peer` (deny): a peer the daemon refuses, because its uid is not
/// the daemon's (`resource` `uid N`; no namespaces) or because it is inside
/// a sandbox, or might be (`resource` `pid N`, or `uid N` when the pid is
/// unknown; with [`PeerNamespaces`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonPeer {
    #[serde(skip)]
    pub resource: String,
    #[serde(skip)]
    pub reason: String,
    pub peer_uid: u32,
    /// `null` if unknown.
    pub peer_pid: Option<i32>,
    pub daemon_uid: u32,
    #[serde(flatten)]
    pub namespaces: Option<PeerNamespaces>,
}

/// The namespace part of a `daemon.peer` refusal of a peer inside a sandbox
/// (or whose namespaces could not be read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerNamespaces {
    /// `SO_PEERPIDFD`, or `SO_PEERCRED` on kernels before 6.5.
    pub via: String,
    /// Namespace inodes as `/proc/PID/ns/*` shows them (`[4026531837]`).
    pub daemon_userns: String,
    pub daemon_pidns: String,
    /// Absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_userns: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_pidns: Option<String>,
    /// Why the peer's namespaces are unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Event for DaemonPeer {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Daemon,
            "peer",
            None,
            self.resource,
            Decision::Deny,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Daemon, "peer", Decision::Deny)?;
        Ok(DaemonPeer {
            resource: r.resource.clone(),
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// Refusals of one reason the rate limit left out (`daemon.peer`, deny,
/// `resource` `*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonPeerSummary {
    #[serde(skip)]
    pub reason: String,
    pub suppressed: u64,
    /// The limit, in words.
    pub rate_limit: String,
}

impl Event for DaemonPeerSummary {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Daemon,
            "peer",
            None,
            "*",
            Decision::Deny,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Daemon, "peer", Decision::Deny)?;
        Ok(DaemonPeerSummary {
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// `daemon.rotate` (info): the first record of a new live file. `resource`
/// is the name the previous live file was rotated to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonRotate {
    /// `audit.<first-seq>.jsonl`.
    pub file: String,
    pub first_seq: u64,
    pub last_seq: u64,
    pub max_bytes: u64,
    pub keep: usize,
    /// Rotated files removed by retention, oldest first.
    pub deleted: Vec<String>,
    /// The first seq still in the store after the deletion.
    pub oldest_seq: u64,
    /// Rotated files beyond `keep` held back for live sessions' starts.
    pub kept_for_live_sessions: usize,
}

impl Event for DaemonRotate {
    fn into_record(self) -> Record {
        let reason = format!("the live file reached {} bytes", self.max_bytes);
        let details = super::details(&self);
        record(
            RecordType::Daemon,
            "rotate",
            None,
            self.file,
            Decision::Info,
            reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Daemon, "rotate", Decision::Info)?;
        parse(r)
    }
}

/// `daemon.retention` (info): at start-up, more rotated files than `keep`
/// allows. `resource` is the store directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonRetention {
    #[serde(skip)]
    pub dir: String,
    pub keep: usize,
    pub deleted: Vec<String>,
    pub oldest_seq: u64,
}

impl Event for DaemonRetention {
    fn into_record(self) -> Record {
        let reason = format!("more than {} rotated audit files", self.keep);
        let details = super::details(&self);
        record(
            RecordType::Daemon,
            "retention",
            None,
            self.dir,
            Decision::Info,
            reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Daemon, "retention", Decision::Info)?;
        Ok(DaemonRetention {
            dir: r.resource.clone(),
            ..parse(r)?
        })
    }
}

/// What `daemon.damaged` found: `details.what`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Damage {
    /// The store ends before the record the head names.
    Truncated,
    /// The record the head names no longer hashes to the head's value.
    Edited,
}

/// `daemon.damaged` (info): at start-up the store did not match
/// `audit.head`. `resource` is the store directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonDamaged {
    #[serde(skip)]
    pub dir: String,
    pub what: Damage,
    pub head_seq: u64,
    pub head_hash: String,
    /// The last complete record found, and its hash.
    pub found_seq: u64,
    pub found_hash: String,
}

impl Event for DaemonDamaged {
    fn into_record(self) -> Record {
        let (head, found) = (self.head_seq, self.found_seq);
        let reason = match self.what {
            Damage::Truncated => format!(
                "{HEAD} named seq {head} but the store ends at seq {found}: records {}..{head} are \
                 missing (cut short while wardend was not running); seq continues after them",
                found + 1,
            ),
            Damage::Edited => format!(
                "the last record (seq {found}) does not hash to what {HEAD} recorded: \
                 it was changed while wardend was not running"
            ),
        };
        let details = super::details(&self);
        record(
            RecordType::Daemon,
            "damaged",
            None,
            self.dir,
            Decision::Info,
            reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Daemon, "damaged", Decision::Info)?;
        Ok(DaemonDamaged {
            dir: r.resource.clone(),
            ..parse(r)?
        })
    }
}

/// `daemon.torn` (info): at start-up the live file ended in an incomplete
/// line, which was moved aside. `resource` is the `.torn` file's name;
/// `details.file` is the live file's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonTorn {
    pub moved_to: String,
    /// The fragment's length.
    pub bytes: u64,
    /// The last complete record.
    pub after_seq: u64,
}

impl DaemonTorn {
    pub const REASON: &'static str =
        "the live audit file ended in an incomplete line (a write cut short by a crash); \
         it was moved aside and the chain continues from the last complete record";
}

impl Event for DaemonTorn {
    fn into_record(self) -> Record {
        let details = super::details_with(&self, &[("file", LIVE)]);
        record(
            RecordType::Daemon,
            "torn",
            None,
            self.moved_to,
            Decision::Info,
            Self::REASON,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Daemon, "torn", Decision::Info)?;
        parse(r)
    }
}
