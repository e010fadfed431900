//! Egress (DESIGN.md §6): every session gets its own proxy. The sandbox's PID 1
//! listens on `127.0.0.1:`[`PROXY_PORT`] inside the session's network namespace
//! and hands the listener over; the daemon serves [`warden_proxy`] on it with the
//! session's `network:` policy. Each decision and each finished connection
//! becomes an audit record, and the session's counters feed `wardenctl ps`.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use warden_audit::event;
use warden_audit::{Decision, Record};
use warden_core::policy::net::NetworkPolicy;

use crate::Daemon;

/// The proxy's port inside every sandbox (each has its own network namespace,
/// so one fixed port serves them all).
pub const PROXY_PORT: u16 = 3128;

/// The proxy variables every server gets (they override `env.allow`: a proxy of
/// the client's is unreachable from the sandbox anyway). `NO_PROXY` is empty so
/// nothing bypasses the proxy, and Node's built-in fetch honours the variables
/// only with `NODE_USE_ENV_PROXY=1`.
pub fn proxy_env() -> Vec<(&'static str, String)> {
    proxy_env_at(PROXY_PORT)
}

/// [`proxy_env`] for a proxy on `127.0.0.1:port` (Seatbelt's, on the
/// host's loopback at a port the daemon was given).
pub fn proxy_env_at(port: u16) -> Vec<(&'static str, String)> {
    let http = format!("http://127.0.0.1:{port}");
    let socks = format!("socks5h://127.0.0.1:{port}");
    vec![
        ("HTTP_PROXY", http.clone()),
        ("HTTPS_PROXY", http.clone()),
        ("ALL_PROXY", socks.clone()),
        ("http_proxy", http.clone()),
        ("https_proxy", http),
        ("all_proxy", socks),
        ("NO_PROXY", String::new()),
        ("no_proxy", String::new()),
        ("NODE_USE_ENV_PROXY", "1".into()),
    ]
}

/// Per-session network counters (for `wardenctl ps`).
#[derive(Debug, Default)]
pub struct NetCounters {
    allowed: AtomicU64,
    denied: AtomicU64,
    last_denial: Mutex<Option<String>>,
}

impl NetCounters {
    /// Counts a refusal made outside the proxy (transparent egress).
    pub fn count_denied(&self, why: &str) {
        self.denied.fetch_add(1, Ordering::Relaxed);
        *self.last_denial.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.to_owned());
    }

    pub fn allowed(&self) -> u64 {
        self.allowed.load(Ordering::Relaxed)
    }

    pub fn denied(&self) -> u64 {
        self.denied.load(Ordering::Relaxed)
    }

    /// "host:port: reason" of the latest denial.
    pub fn last_denial(&self) -> Option<String> {
        self.last_denial
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Network records per second for one (action, decision, target, reason).
pub const PER_TARGET: u32 = 10;
/// Network records per second per session, summaries excluded.
pub const PER_SECOND: u32 = 100;

/// Records left out by the rate limit: per target, or (resource `*`) per
/// action and decision once the session's budget is spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppressed {
    pub action: &'static str,
    pub decision: Decision,
    pub resource: Option<String>,
    pub reason: String,
    pub count: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

type NetKey = (&'static str, u8, String, String);
type NetLimit = crate::ratelimit::Limiter<NetKey, (&'static str, u8), Suppressed>;

fn decision_code(d: Decision) -> u8 {
    match d {
        Decision::Allow => 0,
        Decision::Deny => 1,
        Decision::Info => 2,
    }
}

/// The summary of records left out by the rate limit.
pub fn summary_record(session: &str, s: &Suppressed) -> Record {
    event::NetworkSummary {
        session: session.to_owned(),
        action: s.action.to_owned(),
        decision: s.decision,
        target: s.resource.clone(),
        reason: s.reason.clone(),
        suppressed: s.count,
        bytes_up: s.bytes_up,
        bytes_down: s.bytes_down,
        rate_limit: format!("{PER_TARGET} records per second per target, {PER_SECOND} per session"),
    }
    .into()
}

/// Turns the proxy's events into audit records and counts.
struct Sink {
    daemon: Arc<Daemon>,
    session: String,
    counters: Arc<NetCounters>,
    /// `mcp.explain_denials`: the session's denials, for the gate.
    denials: Option<Arc<crate::explain::Denials>>,
    limit: Mutex<NetLimit>,
}

impl Sink {
    /// Writes `rec` unless the rate limit leaves it out (then it is counted,
    /// with its bytes), after the summaries of windows that are over.
    fn admit_and_record(&self, rec: Record, bytes: (u64, u64)) {
        let now = std::time::Instant::now();
        let (admitted, summaries) = {
            let mut l = self.limit.lock().unwrap_or_else(|p| p.into_inner());
            let summaries = l.take_summaries(now, false);
            let action: &'static str = if rec.action == "close" {
                "close"
            } else {
                "connect"
            };
            let d = decision_code(rec.decision);
            let key = (action, d, rec.resource.clone(), rec.reason.clone());
            let admitted = l.admit(
                key,
                (action, d),
                now,
                |session_wide| Suppressed {
                    action,
                    decision: rec.decision,
                    resource: (!session_wide).then(|| rec.resource.clone()),
                    reason: if session_wide {
                        "more network records than the session's budget per second".into()
                    } else {
                        rec.reason.clone()
                    },
                    count: 0,
                    bytes_up: 0,
                    bytes_down: 0,
                },
                |s| {
                    s.count += 1;
                    s.bytes_up += bytes.0;
                    s.bytes_down += bytes.1;
                },
            );
            (admitted, summaries)
        };
        for s in &summaries {
            self.daemon.audit.record(summary_record(&self.session, s));
        }
        if admitted {
            // A connection belongs to the tool call that made it; its close
            // comes whenever it ends.
            let rec = if rec.action == "connect" {
                self.daemon.during_call(&self.session, rec)
            } else {
                rec
            };
            self.daemon.audit.record(rec);
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let l = self.limit.get_mut().unwrap_or_else(|p| p.into_inner());
        for s in l.take_summaries(std::time::Instant::now(), true) {
            self.daemon.audit.record(summary_record(&self.session, &s));
        }
    }
}

impl warden_proxy::EventSink for Sink {
    fn decision(&self, d: &warden_proxy::ConnDecision) {
        let resource = format!("{}:{}", d.host, d.port);
        if let (Some(denials), Some(code)) = (&self.denials, d.refusal) {
            use warden_proxy::RefusalCode as C;
            // Failures on the way (DNS, the upstream) are not denials.
            if !matches!(code, C::DnsFailed | C::ConnectFailed) {
                denials.push(
                    std::time::Instant::now(),
                    format!("a connection to {resource} ({})", reason_text(d)),
                    matches!(code, C::NotAllowed | C::PrivateAddress),
                );
            }
        }
        if d.allowed {
            self.counters.allowed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.denied.fetch_add(1, Ordering::Relaxed);
            *self
                .counters
                .last_denial
                .lock()
                .unwrap_or_else(|p| p.into_inner()) =
                Some(format!("{resource}: {}", reason_text(d)));
        }
        self.admit_and_record(
            event::NetworkConnect {
                session: self.session.clone(),
                allowed: d.allowed,
                reason: reason_text(d),
                protocol: d.protocol.as_str().to_owned(),
                host: d.host.clone(),
                port: d.port,
                address: d.address.map(|a| a.to_string()),
                rule: d.rule.clone(),
                code: d.code().to_owned(),
                approval: d.approval.as_ref().map(|a| event::Approved {
                    id: a.id.clone(),
                    scope: a.scope.clone(),
                }),
            }
            .into(),
            (0, 0),
        );
    }

    fn accept_failed(&self, f: &warden_proxy::AcceptFailure) {
        self.counters.denied.fetch_add(f.shed, Ordering::Relaxed);
        self.daemon.audit.record(event::NetworkAccept {
            session: self.session.clone(),
            listener: format!("127.0.0.1:{PROXY_PORT}"),
            error: f.error.clone(),
            errno: f.errno,
            failures: f.failures,
            shed: f.shed,
        });
    }

    fn closed(&self, c: &warden_proxy::Closed) {
        self.admit_and_record(
            event::NetworkClose {
                session: self.session.clone(),
                protocol: c.protocol.as_str().to_owned(),
                host: c.host.clone(),
                port: c.port,
                address: c.address.to_string(),
                bytes_up: c.bytes_up,
                bytes_down: c.bytes_down,
                duration_ms: c.duration.as_millis() as u64,
            }
            .into(),
            (c.bytes_up, c.bytes_down),
        );
    }
}

/// The audit reason: the proxy's own words for an allowed decision, a sentence
/// for a denial (the short code stays in `details.code`).
fn reason_text(d: &warden_proxy::ConnDecision) -> String {
    use warden_proxy::RefusalCode as C;
    let Some(code) = d.refusal else {
        return d.reason.clone();
    };
    let what = format!("{}:{}", d.host, d.port);
    match code {
        C::NotAllowed => format!("{what} is not in network.allow"),
        C::PrivateAddress => format!(
            "{what} is, or resolved only to, loopback, private, link-local or metadata \
             addresses that its network.allow entry does not open"
        ),
        C::BadHost => "the host name is not valid".into(),
        C::BadRequest => "malformed or ambiguous request".into(),
        C::HostMismatch => "the Host header does not match the request target".into(),
        C::SniMismatch => "the TLS server name does not match the tunnel's target".into(),
        C::NoSni => format!(
            "the TLS ClientHello through the tunnel to {what} names no server \
             (its network.allow entry has no `insecure-no-sni` option)"
        ),
        C::PlainTunnel => format!(
            "the tunnel to {what} carries no TLS, and no network.allow entry lists port {} \
             for it explicitly (plain HTTP goes through the forward proxy)",
            d.port
        ),
        C::MethodRefused => "TRACE and TRACK are not forwarded".into(),
        C::MethodUnknown => "the request method is not one the proxy forwards".into(),
        C::DnsFailed => format!("cannot resolve {}", d.host),
        C::ConnectFailed => format!("cannot connect to {what}"),
        C::SocksIpNotListed => {
            format!("{what}: SOCKS5 IP addresses must be listed in network.allow")
        }
        C::SocksCommandRefused => "SOCKS5 BIND and UDP ASSOCIATE are not supported".into(),
        C::SocksAuthRefused => "SOCKS5 authentication methods other than none are refused".into(),
    }
}

/// Asks the session's approvals about hosts `network.allow` does not list.
pub struct NetApprover {
    pub broker: Arc<crate::approvals::Broker>,
    pub session: String,
}

impl warden_proxy::Approver for NetApprover {
    fn ask(
        &self,
        ask: warden_proxy::Ask,
    ) -> warden_proxy::BoxFuture<'static, warden_proxy::Answer> {
        use crate::approvals::{Kind, Outcome, Request};
        let broker = self.broker.clone();
        let session = self.session.clone();
        Box::pin(async move {
            let req = Request {
                kind: Kind::Network,
                resource: format!("{}:{}", ask.host, ask.port),
                operation: "connect".into(),
            };
            match broker.ask(&session, req, Some(ask.protocol.as_str())).await {
                Outcome::Allowed { id, scope } => {
                    warden_proxy::Answer::Allow(warden_proxy::Approval {
                        id,
                        scope: scope.as_str().to_owned(),
                    })
                }
                Outcome::Denied => warden_proxy::Answer::Deny,
            }
        })
    }
}

/// A running proxy; dropping it (or [`Proxy::stop`]) ends it and its tunnels.
pub struct Proxy {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// What it decides with (transparent egress decides the same way).
    pub cfg: Arc<warden_proxy::ProxyConfig>,
}

impl Proxy {
    /// Serves the session's listener (the fd from the sandbox init).
    pub fn start(
        listener: OwnedFd,
        policy: NetworkPolicy,
        daemon: Arc<Daemon>,
        session: &str,
        counters: Arc<NetCounters>,
        approver: Option<Arc<dyn warden_proxy::Approver>>,
        denials: Option<Arc<crate::explain::Denials>>,
    ) -> std::io::Result<Proxy> {
        let std_listener = std::net::TcpListener::from(listener);
        std_listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(std_listener)?;
        let resolver: Arc<dyn warden_proxy::Resolver> = match daemon.config.dns {
            Some(server) => Arc::new(warden_proxy::DnsResolver::new(server)),
            None => Arc::new(warden_proxy::SystemResolver),
        };
        let sink = Arc::new(Sink {
            daemon,
            session: session.to_string(),
            counters,
            denials,
            limit: Mutex::new(NetLimit::new(
                PER_TARGET,
                PER_SECOND,
                std::time::Instant::now(),
            )),
        });
        let mut cfg = warden_proxy::ProxyConfig::new(session, Arc::new(policy), sink);
        cfg.resolver = resolver;
        cfg.approver = approver;
        let cfg = Arc::new(cfg);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(warden_proxy::serve(listener, cfg.clone(), async move {
            let _ = stopped.await;
        }));
        Ok(Proxy {
            stop: Some(stop),
            task: Some(task),
            cfg,
        })
    }

    /// Ends the proxy and waits (briefly) for its last records.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), t).await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
