//! The one place where daemon errors become gRPC statuses.
//!
//! Every status the daemon answers with is built here, from a variant that
//! keeps what went wrong: the policy's diagnostics, the sandbox's error (its
//! stage and errno), the I/O error or the task's failure. The mapping looks at
//! the variant, so a client sees the same code and message as when these were
//! strings, while the daemon can still tell one cause from another.

use tonic::{Code, Status};
use warden_audit::store::SnapshotError;
use warden_core::policy::PolicyError;
#[cfg(target_os = "linux")]
use warden_sandbox::launch::SandboxError;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("permission denied: peer uid {peer} is not the daemon's uid {daemon}")]
    PeerUid { peer: u32, daemon: u32 },
    #[error("permission denied: {0}: a sandboxed server cannot use wardend (if a grant exposes the control socket, remove it)")]
    PeerSandboxed(String),
    /// The policy text the client sent does not compile (every diagnostic).
    #[error(transparent)]
    PolicyInvalid(#[from] PolicyError),
    /// The policy compiled but asks for what this daemon cannot give here
    /// (`session/plan.rs`: a limit or a protection the host lacks).
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
    Audit(#[source] std::io::Error),
    /// The sandbox could not be started, or not signalled.
    #[cfg(target_os = "linux")]
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The daemon's side of a sandbox: the session's cgroup.
    #[cfg(target_os = "linux")]
    #[error("cannot create the session's cgroup: {0}")]
    Cgroup(#[source] std::io::Error),
    /// The daemon's side of a sandbox: serving the egress proxy on its listener.
    #[error("cannot serve the egress proxy: {0}")]
    Proxy(#[source] std::io::Error),
    #[error("the sandbox did not hand over the egress proxy listener")]
    NoProxyListener,
    /// No backend can run the session (`backend/`): the one asked for is
    /// unavailable, or with `auto` none is.
    #[error("{0}")]
    Backend(String),
    /// The Docker backend could not start or control a container (the
    /// docker command's own error, or the egress hand-over).
    #[error("docker: {0}")]
    Docker(String),
    /// The Seatbelt backend could not start or control its process (the
    /// profile, `sandbox-exec`, the process group).
    #[error("seatbelt: {0}")]
    Seatbelt(String),
    #[error("wardend is shutting down")]
    ShuttingDown,
    #[error("too many sessions: {0}")]
    TooManySessions(String),
    #[error("wardend runs as root, so the server would run as the host's root user (without capabilities, but owning every root-owned file it can see); run wardend as an unprivileged user (the one the MCP client runs as), or start it with --dangerously-run-servers-as-root")]
    RootDaemon,
    /// A request on a connection `conn.rs` did not attach credentials to.
    #[error("internal error: connection without credentials")]
    NoCredentials,
    /// The server's stdio pipes, or the relay between them and the client's.
    #[error("internal error: stdio pipes: {0}")]
    StdioPipes(#[source] std::io::Error),
    /// The blocking task that starts a sandbox panicked or was cancelled.
    #[error("internal error: {0}")]
    LaunchTask(#[source] tokio::task::JoinError),
    /// A blocking task of a request (listing sessions, replaying the audit
    /// files for `logs`) panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// The audit store could not be opened for a `logs` stream.
    #[error(transparent)]
    AuditSnapshot(#[from] SnapshotError),
    /// A stored audit file could not be read for a `logs` stream.
    #[error(transparent)]
    AuditRead(std::io::Error),
    #[error(transparent)]
    Approval(#[from] crate::approvals::AnswerError),
}

impl DaemonError {
    /// The gRPC status code clients see for this error.
    pub fn code(&self) -> Code {
        match self {
            DaemonError::PeerUid { .. } | DaemonError::PeerSandboxed(_) => Code::PermissionDenied,
            DaemonError::PolicyInvalid(_)
            | DaemonError::Policy(_)
            | DaemonError::BadRequest(_)
            | DaemonError::NoStdio
            | DaemonError::AmbiguousSession(_) => Code::InvalidArgument,
            DaemonError::NoSuchSession(_) => Code::NotFound,
            #[cfg(target_os = "linux")]
            DaemonError::Sandbox(e) => sandbox_code(e),
            #[cfg(target_os = "linux")]
            DaemonError::Cgroup(_) => Code::FailedPrecondition,
            DaemonError::Proxy(_) | DaemonError::NoProxyListener => Code::FailedPrecondition,
            DaemonError::ShuttingDown => Code::Unavailable,
            DaemonError::TooManySessions(_) => Code::ResourceExhausted,
            DaemonError::RootDaemon
            | DaemonError::Backend(_)
            | DaemonError::Docker(_)
            | DaemonError::Seatbelt(_) => Code::FailedPrecondition,
            DaemonError::Audit(_)
            | DaemonError::NoCredentials
            | DaemonError::StdioPipes(_)
            | DaemonError::LaunchTask(_)
            | DaemonError::Task(_)
            | DaemonError::AuditSnapshot(_)
            | DaemonError::AuditRead(_) => Code::Internal,
            DaemonError::Approval(a) => {
                use crate::approvals::AnswerError as A;
                match a {
                    A::Unknown(_) => Code::NotFound,
                    A::Expired { .. }
                    | A::Answered { .. }
                    | A::Busy(_)
                    | A::NoPolicyFile(_)
                    | A::ListAlways(_) => Code::FailedPrecondition,
                    A::PolicyEdit { .. } => Code::Aborted,
                }
            }
        }
    }
}

/// Every way a sandbox fails to start is a precondition of the host or of the
/// request that does not hold (no user namespaces, a stage the kernel refused,
/// a program that cannot be executed, an init that died); named one by one so
/// that a new kind of failure is placed here on purpose.
#[cfg(target_os = "linux")]
fn sandbox_code(e: &SandboxError) -> Code {
    match e {
        SandboxError::Start { .. }
        | SandboxError::UserNamespaceUnavailable { .. }
        | SandboxError::Setup { .. }
        | SandboxError::Exec { .. }
        | SandboxError::InitDied { .. }
        | SandboxError::Control(_)
        | SandboxError::Protocol(_) => Code::FailedPrecondition,
        // The daemon's own record could not be made durable: as for
        // `DaemonError::Audit`.
        SandboxError::Release(_) => Code::Internal,
    }
}

impl From<DaemonError> for Status {
    fn from(e: DaemonError) -> Status {
        Status::new(e.code(), e.to_string())
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests {
    use super::*;

    /// Codes and messages as clients saw them when these variants were strings.
    #[test]
    fn statuses_keep_their_codes_and_messages() {
        let io = || std::io::Error::from_raw_os_error(libc::ENOENT);
        let cases: Vec<(DaemonError, Code, String)> =
            vec![
            (
                DaemonError::Sandbox(SandboxError::UserNamespaceUnavailable {
                    errno: libc::EPERM,
                    message: "Operation not permitted".into(),
                }),
                Code::FailedPrecondition,
                "unprivileged user namespaces are not available: Operation not permitted; check \
                 kernel.unprivileged_userns_clone / apparmor_restrict_unprivileged_userns"
                    .into(),
            ),
            (
                DaemonError::Sandbox(SandboxError::Exec {
                    program: "/bin/nope".into(),
                    errno: libc::ENOENT,
                    message: "No such file or directory".into(),
                }),
                Code::FailedPrecondition,
                "cannot execute /bin/nope: No such file or directory".into(),
            ),
            (
                DaemonError::Cgroup(io()),
                Code::FailedPrecondition,
                format!("cannot create the session's cgroup: {}", io()),
            ),
            (
                DaemonError::NoProxyListener,
                Code::FailedPrecondition,
                "the sandbox did not hand over the egress proxy listener".into(),
            ),
            (
                DaemonError::StdioPipes(io()),
                Code::Internal,
                format!("internal error: stdio pipes: {}", io()),
            ),
            (
                DaemonError::NoCredentials,
                Code::Internal,
                "internal error: connection without credentials".into(),
            ),
            (DaemonError::AuditRead(io()), Code::Internal, io().to_string()),
            (
                DaemonError::ShuttingDown,
                Code::Unavailable,
                "wardend is shutting down".into(),
            ),
        ];
        for (e, code, message) in cases {
            let s = Status::from(e);
            assert_eq!((s.code(), s.message()), (code, message.as_str()));
        }
    }

    #[test]
    fn a_policy_that_does_not_compile_is_invalid_with_every_diagnostic() {
        let input = warden_core::policy::PolicyInput {
            path: None,
            text: "version: 1\nnetwork:\n  alow: []\n",
        };
        let ctx = warden_core::policy::CompileContext {
            home: "/home/u".into(),
            cwd: "/tmp".into(),
            path_env: None,
            reserved: Vec::new(),
        };
        let e = warden_core::policy::compile(&input, &Default::default(), &ctx)
            .expect_err("an unknown key");
        let text = e.to_string();
        let s = Status::from(DaemonError::from(e));
        assert_eq!(
            (s.code(), s.message()),
            (Code::InvalidArgument, text.as_str())
        );
    }
}
