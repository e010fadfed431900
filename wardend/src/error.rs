//! The one place where daemon errors become gRPC statuses.

use tonic::{Code, Status};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("permission denied: peer uid {peer} is not the daemon's uid {daemon}")]
    PeerUid { peer: u32, daemon: u32 },
    #[error("permission denied: {0}: a sandboxed server cannot use wardend (if a grant exposes the control socket, remove it)")]
    PeerSandboxed(String),
    #[error("{0}")]
    Policy(String),
    #[error("spawn needs the client's stdin, stdout and stderr: connect with the stdio preamble (use warden-shim)")]
    NoStdio,
    #[error("invalid request: {0}")]
    BadRequest(String),
    #[error("no session matches `{0}`")]
    NoSuchSession(String),
    #[error("`{0}` matches more than one session; give more of the id")]
    AmbiguousSession(String),
    #[error("cannot write the audit record, so the server was not started: {0}")]
    Audit(std::io::Error),
    #[error("{0}")]
    Sandbox(String),
    #[error("wardend is shutting down")]
    ShuttingDown,
    #[error("too many sessions: {0}")]
    TooManySessions(String),
    #[error("wardend runs as root, so the server would run as the host's root user (without capabilities, but owning every root-owned file it can see); run wardend as an unprivileged user (the one the MCP client runs as), or start it with --dangerously-run-servers-as-root")]
    RootDaemon,
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Approval(#[from] crate::approvals::AnswerError),
}

impl From<DaemonError> for Status {
    fn from(e: DaemonError) -> Status {
        let code = match &e {
            DaemonError::PeerUid { .. } | DaemonError::PeerSandboxed(_) => Code::PermissionDenied,
            DaemonError::Policy(_) | DaemonError::BadRequest(_) | DaemonError::NoStdio => {
                Code::InvalidArgument
            }
            DaemonError::NoSuchSession(_) => Code::NotFound,
            DaemonError::AmbiguousSession(_) => Code::InvalidArgument,
            DaemonError::Sandbox(_) => Code::FailedPrecondition,
            DaemonError::ShuttingDown => Code::Unavailable,
            DaemonError::TooManySessions(_) => Code::ResourceExhausted,
            DaemonError::RootDaemon => Code::FailedPrecondition,
            DaemonError::Audit(_) | DaemonError::Internal(_) => Code::Internal,
            DaemonError::Approval(a) => {
                use crate::approvals::AnswerError as A;
                match a {
                    A::Unknown(_) => Code::NotFound,
                    A::Expired { .. } | A::Answered { .. } | A::Busy(_) => Code::FailedPrecondition,
                    A::NoPolicyFile(_) => Code::FailedPrecondition,
                    A::PolicyEdit { .. } => Code::Aborted,
                }
            }
        };
        Status::new(code, e.to_string())
    }
}
