//! Approvals (docs/approvals.md): a connection to a host `network.allow` does
//! not list is held, and an [`Approver`] asks a person. The proxy itself never
//! answers: it waits for the [`Answer`], and only then replies to the client
//! with the normal success or the normal refusal.

use warden_core::policy::net::Host;

use crate::events::Protocol;
use crate::resolve::BoxFuture;

/// One held connection's question: may the session reach `host` on `port`?
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    /// In normal form (as [`warden_core::policy::net::parse_host`] gives).
    pub host: Host,
    pub port: u16,
    pub protocol: Protocol,
}

/// The approval that let a connection through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// The approval's id (`ap-…`).
    pub id: String,
    /// `once`, `session` or `always`.
    pub scope: String,
}

/// What came of an [`Ask`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Decide the connection as if `network.allow` listed `host:port`.
    Allow(Approval),
    /// Refuse it as not listed (the answer, the timeout, or no way to ask).
    Deny,
}

/// Who is asked about connections `network.allow` does not list. It decides
/// how long to hold (its timeout), how asks for the same host coalesce, and
/// what it remembers; every failure of its own must be [`Answer::Deny`].
pub trait Approver: Send + Sync {
    fn ask(&self, ask: Ask) -> BoxFuture<'static, Answer>;
}
