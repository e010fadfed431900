//! The decision order shared by all protocols: allowlist, one lookup, address
//! vetting, connect to a vetted address.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::time::timeout;
use warden_core::policy::net::{Denial, Host, NetworkPolicy};

use crate::approve::{Answer, Approval, Ask};
use crate::events::{Protocol, RefusalCode};
use crate::ProxyConfig;

/// How many vetted addresses of one lookup are tried, in order.
const MAX_ATTEMPTS: usize = 3;

/// What allowed a host and port: an entry of the policy, or an approval.
#[derive(Clone)]
pub(crate) struct Grant {
    /// The `network.allow` entry that allowed it (for an approval, the entry
    /// it stands for, `host:port`).
    pub rule: String,
    /// The policy the rest of the decision uses (address classes, what a
    /// tunnel may carry): the session's, or with an approved entry added.
    pub policy: Arc<NetworkPolicy>,
    pub approval: Option<Approval>,
}

impl Grant {
    /// The reason of the allowed decision.
    pub(crate) fn reason(&self) -> String {
        match &self.approval {
            None => super::allowed_reason(&self.rule),
            Some(a) => format!("allowed by approval {} ({})", a.id, a.scope),
        }
    }
}

/// An upstream connection to a vetted address.
pub(crate) struct Opened {
    pub stream: TcpStream,
    pub addr: SocketAddr,
    pub grant: Grant,
}

/// Why no upstream connection was made.
#[derive(Debug)]
pub(crate) struct Refusal {
    /// `not-allowed`, `private-address`, `bad-host`, `dns-failed`, `connect-failed`.
    pub code: RefusalCode,
    /// For the client and the logs (no control characters).
    pub message: String,
    pub rule: Option<String>,
    pub address: Option<SocketAddr>,
}

impl Refusal {
    pub(crate) fn denial(d: &Denial, rule: Option<String>) -> Refusal {
        Refusal {
            code: RefusalCode::from(d),
            message: super::clean_message(&d.to_string()),
            rule,
            address: None,
        }
    }
}

/// The allowlist check alone (no DNS). A host it does not list is held for
/// the session's approver, if it has one, and allowed as if listed when
/// approved.
pub(crate) async fn check(
    cfg: &ProxyConfig,
    host: &Host,
    port: u16,
    protocol: Protocol,
) -> Result<Grant, Refusal> {
    let denial = match cfg.policy.check(host, port) {
        Ok(rule) => {
            return Ok(Grant {
                rule: rule.source.clone(),
                policy: cfg.policy.clone(),
                approval: None,
            })
        }
        Err(d) => d,
    };
    let (Denial::NotAllowed { .. }, Some(approver)) = (&denial, &cfg.approver) else {
        return Err(Refusal::denial(&denial, None));
    };
    let ask = Ask {
        host: host.clone(),
        port,
        protocol,
    };
    match approver.ask(ask).await {
        Answer::Allow(approval) => {
            let policy = cfg
                .policy
                .with_approved(host, port)
                .map_err(|d| Refusal::denial(&d, None))?;
            let rule =
                NetworkPolicy::approved_entry(host, port).map_err(|d| Refusal::denial(&d, None))?;
            Ok(Grant {
                rule,
                policy: Arc::new(policy),
                approval: Some(approval),
            })
        }
        Answer::Deny => Err(Refusal::denial(&denial, None)),
    }
}

/// The whole decision: [`check`], one lookup (names only), vetting of every
/// address, and a connection to the first vetted address that answers.
pub(crate) async fn open(
    cfg: &ProxyConfig,
    host: &Host,
    port: u16,
    protocol: Protocol,
) -> Result<Opened, Refusal> {
    let grant = check(cfg, host, port, protocol).await?;
    let rule = grant.rule.clone();
    let addrs: Vec<IpAddr> = match host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) => {
            let lookup = cfg.resolver.resolve(name, port);
            let failed = |why: String| Refusal {
                code: RefusalCode::DnsFailed,
                message: super::clean_message(&format!("cannot resolve {name}: {why}")),
                rule: Some(rule.clone()),
                address: None,
            };
            match timeout(cfg.limits.resolve_timeout, lookup).await {
                Ok(Ok(a)) if !a.is_empty() => a,
                Ok(Ok(_)) => return Err(failed("no addresses".into())),
                Ok(Err(e)) => return Err(failed(e.to_string())),
                Err(_) => return Err(failed("timed out".into())),
            }
        }
    };
    let mut vetted: Vec<IpAddr> = Vec::new();
    let mut first_denial = None;
    for ip in addrs {
        let ip = warden_core::policy::net::canonical_ip(ip);
        match grant.policy.check_address(host, port, ip) {
            Ok(()) if !vetted.contains(&ip) => vetted.push(ip),
            Ok(()) => {}
            Err(d) => {
                first_denial.get_or_insert(d);
            }
        }
    }
    if vetted.is_empty() {
        let denial = first_denial.unwrap_or_else(|| Denial::NotAllowed {
            host: host.to_string(),
            port,
        });
        let mut refusal = Refusal::denial(&denial, Some(rule));
        if let Denial::PrivateAddress { addr, .. } = denial {
            refusal.address = Some(SocketAddr::new(addr, port));
        }
        return Err(refusal);
    }
    let mut last_error = String::new();
    for ip in vetted.iter().take(MAX_ATTEMPTS) {
        let addr = SocketAddr::new(*ip, port);
        match timeout(cfg.limits.connect_timeout, cfg.connector.connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(Opened {
                    stream,
                    addr,
                    grant,
                });
            }
            Ok(Err(e)) => last_error = format!("{addr}: {e}"),
            Err(_) => last_error = format!("{addr}: timed out"),
        }
    }
    Err(Refusal {
        code: RefusalCode::ConnectFailed,
        message: super::clean_message(&format!("cannot connect to {host}:{port} ({last_error})")),
        rule: Some(rule),
        address: Some(SocketAddr::new(vetted[0], port)),
    })
}
