//! `network.*`: the egress proxy's decisions, its accept failures, finished
//! upstream connections, and their rate-limit summaries.

use serde::{Deserialize, Serialize};

use super::{expect, expect_kind, parse, record, Event, EventError};
use crate::{Decision, Record, RecordType};

/// `network.connect` (allow or deny): one decision of the session's proxy.
/// `resource` is `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkConnect {
    #[serde(skip)]
    pub session: String,
    /// `allow` or `deny`.
    #[serde(skip)]
    pub allowed: bool,
    #[serde(skip)]
    pub reason: String,
    /// `http`, `connect` or `socks5`.
    pub protocol: String,
    /// As normalised (lower case, punycode, IPv6 in brackets).
    pub host: String,
    /// 0 if the client named none.
    pub port: u16,
    /// The vetted `ip:port` connected to; `null` when denied before any connection.
    pub address: Option<String>,
    /// The `network.allow` entry that matched, as written.
    pub rule: Option<String>,
    /// `allowed`, `not-allowed`, `private-address`...
    pub code: String,
    /// The approval that allowed a host `network.allow` does not list
    /// (`approve`), and its scope: `ap-…` and `once` or `session`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approved>,
}

/// An approval that let one connection through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approved {
    pub id: String,
    /// `once`, `session` or `always`.
    pub scope: String,
}

impl Event for NetworkConnect {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Network,
            "connect",
            Some(&self.session),
            format!("{}:{}", self.host, self.port),
            if self.allowed {
                Decision::Allow
            } else {
                Decision::Deny
            },
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect_kind(r, RecordType::Network, Some("connect"))?;
        if r.decision == Decision::Info {
            return Err(EventError::Decision {
                what: super::name(r),
                expected: "allow` or `deny",
                found: r.decision.as_str(),
            });
        }
        Ok(NetworkConnect {
            session: r.session.clone().unwrap_or_default(),
            allowed: r.decision == Decision::Allow,
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// `network.accept` (deny): the proxy could not accept connections (at most
/// one record per second per session). `resource` is the proxy's address
/// inside the sandbox; `details.code` is `accept-failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkAccept {
    #[serde(skip)]
    pub session: String,
    /// The proxy's address inside the sandbox (`127.0.0.1:3128`).
    #[serde(skip)]
    pub listener: String,
    /// The last error.
    pub error: String,
    pub errno: Option<i32>,
    /// Failed accepts since the previous record.
    pub failures: u64,
    /// Clients answered 503 and closed since the previous record.
    pub shed: u64,
}

impl Event for NetworkAccept {
    fn into_record(self) -> Record {
        let reason = format!(
            "the egress proxy cannot accept connections: {} ({} failed, {} answered 503 and closed)",
            self.error, self.failures, self.shed
        );
        let details = super::details_with(&self, &[("code", "accept-failed")]);
        record(
            RecordType::Network,
            "accept",
            Some(&self.session),
            self.listener,
            Decision::Deny,
            reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Network, "accept", Decision::Deny)?;
        Ok(NetworkAccept {
            session: r.session.clone().unwrap_or_default(),
            listener: r.resource.clone(),
            ..parse(r)?
        })
    }
}

/// `network.close` (info): an upstream connection the proxy opened ended.
/// `resource` is `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkClose {
    #[serde(skip)]
    pub session: String,
    pub protocol: String,
    pub host: String,
    pub port: u16,
    /// The `ip:port` connected to.
    pub address: String,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}

impl Event for NetworkClose {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Network,
            "close",
            Some(&self.session),
            format!("{}:{}", self.host, self.port),
            Decision::Info,
            "",
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect(r, RecordType::Network, "close", Decision::Info)?;
        Ok(NetworkClose {
            session: r.session.clone().unwrap_or_default(),
            ..parse(r)?
        })
    }
}

/// `network.connect` or `network.close` records the rate limit left out:
/// per target (`resource` the target), or once the session's budget is
/// spent (`resource` `*`). Same `action`, `decision` and `reason` as theirs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkSummary {
    #[serde(skip)]
    pub session: String,
    /// `connect` or `close`.
    #[serde(skip)]
    pub action: String,
    #[serde(skip, default = "deny")]
    pub decision: Decision,
    /// The target, `None` for the session-wide summary.
    #[serde(skip)]
    pub target: Option<String>,
    #[serde(skip)]
    pub reason: String,
    /// How many records were left out.
    pub suppressed: u64,
    /// Their bytes, summed.
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// The limit, in words.
    pub rate_limit: String,
}

fn deny() -> Decision {
    Decision::Deny
}

impl Event for NetworkSummary {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Network,
            &self.action,
            Some(&self.session),
            self.target.unwrap_or_else(|| "*".into()),
            self.decision,
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect_kind(r, RecordType::Network, None)?;
        Ok(NetworkSummary {
            session: r.session.clone().unwrap_or_default(),
            action: r.action.clone(),
            decision: r.decision,
            target: (r.resource != "*").then(|| r.resource.clone()),
            reason: r.reason.clone(),
            ..parse(r)?
        })
    }
}

/// `network.resolve` (allow or deny): a query to the sandbox's own resolver
/// (transparent egress): an allowlisted name and the synthetic address it
/// got, or a name the allowlist does not name (`NXDOMAIN`, nothing asked
/// upstream). `resource` is the name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkResolve {
    #[serde(skip)]
    pub session: String,
    #[serde(skip)]
    pub allowed: bool,
    #[serde(skip)]
    pub reason: String,
    #[serde(skip)]
    pub name: String,
    /// The synthetic address given; `null` when refused.
    pub address: Option<String>,
    /// `synthetic`, `nxdomain`.
    pub code: String,
}

impl Event for NetworkResolve {
    fn into_record(self) -> Record {
        let details = super::details(&self);
        record(
            RecordType::Network,
            "resolve",
            Some(&self.session),
            self.name,
            if self.allowed {
                Decision::Allow
            } else {
                Decision::Deny
            },
            self.reason,
            Some(details),
        )
    }

    fn from_record(r: &Record) -> Result<Self, EventError> {
        expect_kind(r, RecordType::Network, Some("resolve"))?;
        Ok(NetworkResolve {
            session: r.session.clone().unwrap_or_default(),
            allowed: r.decision == Decision::Allow,
            reason: r.reason.clone(),
            name: r.resource.clone(),
            ..parse(r)?
        })
    }
}
