//! `policy.syscall`: escape and kernel-attack calls the seccomp filter
//! refused, one by one, summarised by the rate limit, or lost.

use serde::{Deserialize, Serialize};

use super::{expect, parse, record, Event, EventError};
use crate::{Decision, Record, RecordType};

/// One refused call (deny). `resource` is the syscall, `reason` the rule's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallRefused {
    #[serde(skip)]
    pub session: String,
    /// `man 2` spelling (`unshare`, `ioctl`).
    #[serde(skip)]
    pub syscall: String,
    #[serde(skip)]
    pub reason: String,
    /// The calling process, as a host pid.
    pub pid: u32,
    pub nr: i64,
    /// The six raw arguments.
    pub args: [u64; 6],
    /// The argument the rule compared, if it looks at one.
    pub checked_arg: Option<CheckedArg>,
    pub errno: i32,
    /// [`super::errno_name`] of `errno`.
    pub error: String,
}

/// `details.checked_arg`: the low 32 bits a rule compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckedArg {
    pub index: u8,
    pub value: u32,
}

impl Event for SyscallRefused {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Policy,
            "syscall",
            Some(&self.session),
            self.syscall,
            Decision::Deny,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Policy, "syscall", Decision::Deny)?;
        Ok(SyscallRefused {
            session: r.session.clone().unwrap_or_default(),
            syscall: r.resource.clone(),
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// Calls of one rule the rate limit left out (deny): same `resource` and
/// `reason` as their records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallSummary {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub syscall: String,
    #[serde(skip)]
    pub reason: String,
    /// How many calls were not recorded one by one.
    pub suppressed: u64,
    pub nr: i64,
    pub errno: i32,
    pub error: String,
    /// The limit, in words.
    pub rate_limit: String,
}

impl Event for SyscallSummary {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Policy,
            "syscall",
            Some(&self.session),
            self.syscall,
            Decision::Deny,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Policy, "syscall", Decision::Deny)?;
        Ok(SyscallSummary {
            session: r.session.clone().unwrap_or_default(),
            syscall: r.resource.clone(),
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// Refused calls that did not fit the queue to the store (deny, `resource`
/// `*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallsLost {
    #[serde(skip)]
    pub session: String,
    pub lost: u64,
}

impl SyscallsLost {
    pub const REASON: &'static str =
        "refused calls not recorded: the queue to the audit store was full";
}

impl Event for SyscallsLost {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Policy,
            "syscall",
            Some(&self.session),
            "*",
            Decision::Deny,
            Self::REASON,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Policy, "syscall", Decision::Deny)?;
        Ok(SyscallsLost {
            session: r.session.clone().unwrap_or_default(),
            ..parse(r)?
        })
    }
}
