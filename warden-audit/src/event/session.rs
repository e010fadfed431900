//! `session.*`: a session's start, exit, refusal and kill.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{expect, parse, record, Event, EventError};
use crate::{Decision, Record, RecordType};

/// `session.start` (allow), fsynced before the server is executed.
/// `resource` is the program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStart {
    #[serde(skip)]
    pub session: String,
    pub name: Option<String>,
    pub argv: Vec<String>,
    pub program: PathBuf,
    pub cwd: PathBuf,
    /// `null` for a flags-only policy.
    pub policy_path: Option<PathBuf>,
    /// `sha256:<hex>` of the policy text.
    pub policy_digest: String,
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    /// Paths inside write grants kept read-only (those that exist).
    pub protected: Vec<PathBuf>,
    /// The `filesystem.dangerously_expose` entries.
    pub exposed: Vec<PathBuf>,
    /// The policy's loud warnings, `file:line:col: key: message` each.
    pub warnings: Vec<String>,
    /// The `network.allow` entries as written.
    pub network_allow: Vec<String>,
    /// The allowed environment names that were present (never values).
    pub env_names: Vec<String>,
    /// How each limit is enforced.
    pub limits: Vec<String>,
    pub client: Client,
    pub sandbox: SandboxFacts,
}

/// `details.client` of `session.start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Client {
    pub pid: u32,
    pub program: String,
    pub version: String,
}

/// `details.sandbox` of `session.start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxFacts {
    /// The backend that runs the session: `linux` (the native sandbox),
    /// `docker`, `macos`.
    pub backend: String,
    /// What was asked for (`auto`, the default, or a backend by name).
    pub backend_requested: String,
    /// With `auto`: the backends tried before `backend`, and why each was
    /// unavailable (empty when the first was taken).
    pub backend_skipped: Vec<SkippedBackend>,
    pub namespaces: Vec<String>,
    /// The Landlock ABI the sandbox applies (its spec's layers: the kernel's,
    /// as far as Warden knows it), `null` without Landlock.
    pub landlock_abi: Option<u32>,
    pub landlock_min_abi: u32,
    /// `seccomp user notification` or `unavailable`.
    pub syscall_audit: String,
    /// The level of `audit.files` in use: `denied`, `all`, `off` or `unavailable`.
    pub file_audit: String,
    pub create_guard: bool,
    /// The server runs as the host's root (a root daemon, opted in).
    pub host_root: bool,
    pub write_protection: WriteProtection,
    pub best_effort_write_protection: bool,
    /// The Docker backend's container, when it runs the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerFacts>,
}

/// `details.sandbox.docker` of `session.start`: the container that runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DockerFacts {
    pub image: String,
    pub container: String,
    /// The engine's version, as `docker version` reported it.
    pub engine: Option<String>,
    /// What the container gets (`--network none`, `--cap-drop ALL`...).
    pub options: Vec<String>,
    /// What runs differently from the native sandbox, one sentence each.
    pub notes: Vec<String>,
}

/// One entry of `details.sandbox.backend_skipped`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedBackend {
    pub backend: String,
    pub reason: String,
}

/// `details.sandbox.write_protection` of `session.start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteProtection {
    /// `full`, `best effort` or `no write grants`.
    pub mode: String,
    /// The protections in force.
    pub active: Vec<String>,
    /// What is missing and why, one sentence each.
    pub missing: Vec<String>,
}

impl Event for SessionStart {
    fn into_record(self) -> Record {
        let resource = self.program.display().to_string();
        let details = super::details(&self);
        record(
            RecordType::Session,
            "start",
            Some(&self.session),
            resource,
            Decision::Allow,
            "",
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Session, "start", Decision::Allow)?;
        Ok(SessionStart {
            session: r.session.clone().unwrap_or_default(),
            ..parse(r)?
        })
    }
}

/// `session.exit` (info), fsynced. `reason` is empty when the server ended
/// by itself, otherwise why Warden ended it, or the sandbox error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionExit {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub reason: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub duration_ms: u64,
    /// `wardenctl trace` sessions: the most the sampler saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak: Option<Peak>,
}

/// The largest footprint a traced session's sampler saw (every 100 ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peak {
    /// Resident memory plus the sandbox's own tmpfs and memfd contents, as
    /// `limits.memory_mb` counts it.
    pub memory_bytes: u64,
    /// Processes in the sandbox at once.
    pub processes: u32,
}

impl Event for SessionExit {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Session,
            "exit",
            Some(&self.session),
            "",
            Decision::Info,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Session, "exit", Decision::Info)?;
        Ok(SessionExit {
            session: r.session.clone().unwrap_or_default(),
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// `session.refused` (deny), fsynced: a spawn refused before anything ran.
/// `resource` is the requested command, `reason` the whole error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRefused {
    /// The session id, when one was given out before the refusal.
    #[serde(skip)]
    pub session: Option<String>,
    /// The command, its words joined by spaces.
    #[serde(skip)]
    pub command: String,
    #[serde(skip)]
    pub reason: String,
    /// As the client sent it (empty without a policy file).
    pub policy_path: String,
    pub client_pid: Option<u32>,
}

impl Event for SessionRefused {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Session,
            "refused",
            self.session.as_deref(),
            self.command,
            Decision::Deny,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Session, "refused", Decision::Deny)?;
        Ok(SessionRefused {
            session: r.session.clone(),
            command: r.resource.clone(),
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// `session.kill` (info): `wardenctl kill` asked to end the session.
/// `resource` is the command; no details.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionKill {
    pub session: String,
    /// The command, its words joined by spaces.
    pub command: String,
}

impl SessionKill {
    pub const REASON: &'static str = "requested by wardenctl kill";
}

impl Event for SessionKill {
    fn into_record(self) -> Record {
        record(
            RecordType::Session,
            "kill",
            Some(&self.session),
            self.command,
            Decision::Info,
            Self::REASON,
            None,
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Session, "kill", Decision::Info)?;
        Ok(SessionKill {
            session: r.session.clone().unwrap_or_default(),
            command: r.resource.clone(),
        })
    }
}
