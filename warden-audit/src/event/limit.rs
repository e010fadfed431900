//! `limit.breach`: a limit ended the session.

use serde::{Deserialize, Serialize};

use super::{expect, parse, record, Event, EventError};
use crate::{Decision, Record, RecordType};

/// `limit.breach` (deny) of `memory_mb`: found by sampling, or an OOM kill
/// in the session's cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitBreach {
    #[serde(skip)]
    pub session: String,
    #[serde(flatten)]
    pub mechanism: Breach,
}

/// How the breach was found: `details.mechanism` and its fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mechanism")]
pub enum Breach {
    /// The session's cgroup reached `memory.max` and the kernel killed it.
    #[serde(rename = "cgroup")]
    Cgroup { oom_kills: u64 },
    /// The sampled total exceeded the limit. `rss_bytes` is
    /// `resident_bytes - shmem_mapped_bytes + max(shmem_mapped_bytes,
    /// tmpfs_bytes + memfd_bytes)`.
    #[serde(rename = "rss-sampling")]
    RssSampling {
        limit_bytes: u64,
        rss_bytes: u64,
        resident_bytes: u64,
        shmem_mapped_bytes: u64,
        tmpfs_bytes: u64,
        memfd_bytes: u64,
    },
    /// The Docker engine's memory limit (`--memory`, swap equal) killed the
    /// container (`State.OOMKilled`).
    #[serde(rename = "docker")]
    Docker { limit_bytes: u64 },
}

impl Event for LimitBreach {
    fn into_record(self) -> Record {
        let reason = match &self.mechanism {
            Breach::Cgroup { .. } => {
                "the session's cgroup reached memory.max; the kernel killed it".to_string()
            }
            Breach::RssSampling {
                limit_bytes,
                rss_bytes,
                ..
            } => format!(
                "memory {} MiB (resident, tmpfs and memfd) exceeds memory_mb={}",
                rss_bytes >> 20,
                limit_bytes >> 20
            ),
            Breach::Docker { limit_bytes } => format!(
                "the container reached its Docker memory limit of {} MiB; the kernel killed it",
                limit_bytes >> 20
            ),
        };
        let details = super::details(&self);
        record(
            RecordType::Limit,
            "breach",
            Some(&self.session),
            "memory_mb",
            Decision::Deny,
            reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Limit, "breach", Decision::Deny)?;
        Ok(LimitBreach {
            session: r.session.clone().unwrap_or_default(),
            ..parse(r)?
        })
    }
}
