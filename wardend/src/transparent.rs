//! Transparent egress of one session (`network.mode: transparent | both`,
//! docs/policy.md "Transparent egress"): the sandbox's own resolver
//! (`warden_proxy::synthetic`, on the socket PID 1 made, looking allowed
//! names up on the host) and the connections to the addresses it gave out
//! or the allowlist names, decided by the proxy's decision path
//! (`warden_proxy::open_transparent`) and handed over to the sandbox
//! (`warden_sandbox::supervise::connect`): relayed by the daemon with the
//! proxy's checks of the bytes, or, for entries with `direct`, the upstream
//! socket itself. The relays are this session's tasks, ended with it.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use warden_audit::event;
use warden_core::policy::net::NetworkPolicy;
use warden_proxy::resolve::{BoxFuture, Resolver};
use warden_proxy::synthetic::{AddressBook, Outcome};
use warden_proxy::ProxyConfig;
use warden_sandbox::supervise::{Connector, HeldConnect, Unreachable};

use crate::Daemon;

/// `network.resolve` and refused-address `network.connect` records written
/// per session at most.
const MAX_RECORDS: u64 = 200;

/// One session's transparent egress.
pub struct Transparent {
    daemon: Arc<Daemon>,
    session: String,
    /// The addresses the sandbox's resolver gave out.
    pub names: Arc<Mutex<AddressBook>>,
    /// The session's network policy (its IP entries are reached directly).
    policy: NetworkPolicy,
    /// The proxy's configuration, once the proxy runs (it is made after the
    /// sandbox, which may connect at once: those calls wait for it).
    cfg: tokio::sync::watch::Receiver<Option<Arc<ProxyConfig>>>,
    runtime: tokio::runtime::Handle,
    counters: Arc<crate::egress::NetCounters>,
    /// `mcp.explain_denials`: the session's denials, for the gate.
    denials: Option<Arc<crate::explain::Denials>>,
    records: AtomicU64,
    /// The relayed connections, ended with the session.
    /// None once stopped: a relay made later is dropped (its connection ends).
    relays: Arc<Mutex<Option<tokio::task::JoinSet<()>>>>,
    /// Relayed connections at once (the proxy's `max_connections`: each
    /// holds daemon descriptors); further connects wait for a slot.
    slots: Arc<tokio::sync::Semaphore>,
    /// The host's answers for the names the sandbox's resolver gave out,
    /// looked up as it answers them (the `connect` follows).
    lookups: Arc<warden_proxy::LookupCache>,
}

/// How long a host lookup made for a transparent connection is reused.
const LOOKUP_FRESH: std::time::Duration = std::time::Duration::from_secs(10);

impl Transparent {
    /// With the sender that hands it the proxy's configuration.
    pub fn new(
        daemon: Arc<Daemon>,
        session: &str,
        counters: Arc<crate::egress::NetCounters>,
        policy: &NetworkPolicy,
        denials: Option<Arc<crate::explain::Denials>>,
    ) -> (
        Arc<Transparent>,
        tokio::sync::watch::Sender<Option<Arc<ProxyConfig>>>,
    ) {
        let (tx, rx) = tokio::sync::watch::channel(None);
        (
            Arc::new(Transparent {
                daemon,
                session: session.to_owned(),
                names: Arc::default(),
                policy: policy.clone(),
                cfg: rx,
                runtime: tokio::runtime::Handle::current(),
                counters,
                denials,
                records: AtomicU64::new(0),
                relays: Arc::new(Mutex::new(Some(tokio::task::JoinSet::new()))),
                slots: Arc::new(tokio::sync::Semaphore::new(
                    warden_proxy::DEFAULT_MAX_CONNECTIONS,
                )),
                lookups: Arc::new(warden_proxy::LookupCache::new(LOOKUP_FRESH)),
            }),
            tx,
        )
    }

    /// Serves the sandbox's resolver socket until the task is aborted.
    pub fn serve_resolver(
        self: &Arc<Self>,
        fd: OwnedFd,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let sock = std::net::UdpSocket::from(fd);
        sock.set_nonblocking(true)?;
        let sock = tokio::net::UdpSocket::from_std(sock)?;
        let policy = self.policy.clone();
        let me = self.clone();
        let on = Arc::new(move |_: SocketAddr, o: &Outcome| me.record_resolve(o));
        let names = self.names.clone();
        let host = Arc::new(HostLookup {
            cfg: self.cfg.clone(),
            lookups: self.lookups.clone(),
        });
        Ok(tokio::spawn(async move {
            let allowed: warden_proxy::synthetic::Names = Arc::new(move |n| policy.names(n));
            if let Err(e) = warden_proxy::synthetic::serve(sock, allowed, names, host, on).await {
                tracing::warn!(error = %e, "the sandbox's resolver stopped");
            }
        }))
    }

    /// Ends every relayed connection (their `close` records are made).
    pub async fn stop(&self) {
        self.slots.close();
        let set = self.relays.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut set) = set {
            set.shutdown().await;
        }
    }

    fn record_resolve(&self, o: &Outcome) {
        let (name, allowed, address, code, reason) = match o {
            Outcome::Synthetic { name, addr } => (
                name.clone(),
                true,
                Some(addr.to_string()),
                "synthetic",
                "synthetic address for an allowlisted name (the host's answer is not public IPv4, or another name has it)".to_owned(),
            ),
            Outcome::Resolved { name, addrs } => (
                name.clone(),
                true,
                Some(addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",")),
                "resolved",
                "the host's public addresses for an allowlisted name".to_owned(),
            ),
            Outcome::NxDomain { name } => (
                name.clone(),
                false,
                None,
                "nxdomain",
                format!("{name} is not in network.allow: NXDOMAIN, nothing asked upstream"),
            ),
            _ => return,
        };
        if self.records.fetch_add(1, Ordering::Relaxed) >= MAX_RECORDS {
            return;
        }
        self.daemon.audit.record(event::NetworkResolve {
            session: self.session.clone(),
            allowed,
            reason,
            name,
            address,
            code: code.to_owned(),
        });
    }
}

/// The host's lookups for the sandbox's resolver: through the proxy's
/// resolver once it runs (a query before waits for it), remembered for the
/// `connect` that follows.
struct HostLookup {
    cfg: tokio::sync::watch::Receiver<Option<Arc<ProxyConfig>>>,
    lookups: Arc<warden_proxy::LookupCache>,
}

impl Resolver for HostLookup {
    fn resolve<'a>(
        &'a self,
        name: &'a str,
        port: u16,
    ) -> BoxFuture<'a, std::io::Result<Vec<std::net::IpAddr>>> {
        Box::pin(async move {
            let cfg = self
                .cfg
                .clone()
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|c| c.clone());
            let Some(cfg) = cfg else {
                return Err(std::io::Error::other("the session's proxy is gone"));
            };
            let cached = warden_proxy::Cached {
                cache: self.lookups.clone(),
                inner: cfg.resolver.clone(),
            };
            cached.resolve(name, port).await
        })
    }
}

impl Connector for Transparent {
    fn reaches(&self, addr: std::net::Ipv4Addr) -> bool {
        self.names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .name_of(addr)
            .is_some()
            || self.policy.names_address(addr.into())
    }

    fn connect(&self, call: HeldConnect) {
        let ip = *call.to.ip();
        let name = self
            .names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .name_of(ip)
            .map(str::to_owned)
            // An address the allowlist names is decided as that IP host.
            .or_else(|| self.policy.names_address(ip.into()).then(|| ip.to_string()));
        let mut cfg = self.cfg.clone();
        let slots = self.slots.clone();
        let session = self.session.clone();
        // Weak: a relay made after the session ended is not kept.
        let relays = Arc::downgrade(&self.relays);
        let lookups = self.lookups.clone();
        self.runtime.spawn(async move {
            // An address the resolver never gave: nothing to reach.
            let Some(name) = name else {
                call.refuse(libc::ECONNREFUSED);
                return;
            };
            let cfg = match cfg.wait_for(Option::is_some).await {
                Ok(c) => c.clone(),
                Err(_) => None,
            };
            let Some(cfg) = cfg else {
                call.refuse(libc::ECONNREFUSED);
                return;
            };
            let cfg = ProxyConfig {
                resolver: Arc::new(warden_proxy::Cached {
                    cache: lookups,
                    inner: cfg.resolver.clone(),
                }),
                ..(*cfg).clone()
            };
            let slot = tokio::time::timeout(cfg.limits.connect_timeout, slots.acquire_owned());
            let Ok(Ok(slot)) = slot.await else {
                tracing::warn!(session = %session, %name, "transparent: every relay slot is busy; connect refused");
                call.refuse(libc::ECONNREFUSED);
                return;
            };
            let port = call.to.port();
            // A blocking caller waits for the upstream, so a refusal is its
            // connect's error; a non-blocking one never waits for it.
            match warden_proxy::open_transparent(&cfg, &name, port, !call.nonblocking).await {
                Ok(warden_proxy::Handover::Direct(s)) => {
                    drop(slot);
                    hand_over(call, OwnedFd::from(s));
                }
                Ok(warden_proxy::Handover::Relayed(theirs, relay)) => {
                    if hand_over(call, OwnedFd::from(theirs)) {
                        let Some(relays) = relays.upgrade() else { return };
                        let mut set = relays.lock().unwrap_or_else(|e| e.into_inner());
                        let Some(set) = set.as_mut() else { return };
                        while set.try_join_next().is_some() {}
                        set.spawn(async move {
                            let _slot = slot;
                            relay.run(&cfg).await;
                        });
                    }
                }
                // The decision is recorded by the proxy's path.
                Err(_) => call.refuse(libc::ECONNREFUSED),
            }
        });
    }

    fn refusing(&self, to: SocketAddr, why: Unreachable) {
        if let Some(d) = &self.denials {
            d.push(
                std::time::Instant::now(),
                format!("a connection to {to} ({})", unreachable_reason(to, why)),
                why == Unreachable::Address,
            );
        }
    }

    fn refused(&self, _pid: u32, to: SocketAddr, why: Unreachable, at: std::time::Instant) {
        self.counters
            .count_denied(&format!("{to}: not a name of the allowlist"));
        if self.records.fetch_add(1, Ordering::Relaxed) >= MAX_RECORDS {
            return;
        }
        let host = match to.ip() {
            std::net::IpAddr::V6(a) => format!("[{a}]"),
            a => a.to_string(),
        };
        // The tool call in flight when it was refused (not now: the caller
        // had its answer before this runs, and may have ended its call).
        self.daemon.audit.record(self.daemon.during_call_at(
            &self.session,
            event::NetworkConnect {
                session: self.session.clone(),
                allowed: false,
                reason: unreachable_reason(to, why),
                protocol: match why {
                    Unreachable::Datagram => "udp".into(),
                    _ => "transparent".into(),
                },
                host,
                port: to.port(),
                address: None,
                rule: None,
                code: "not-allowed".into(),
                approval: None,
            },
            at,
        ));
    }
}

/// Hands `sock` over (a few non-blocking syscalls: done on the runtime);
/// false when the caller is gone.
fn hand_over(call: HeldConnect, sock: OwnedFd) -> bool {
    match call.hand_over(sock) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(error = %e, "a held connect's caller is gone");
            false
        }
    }
}

/// Why a `connect` was refused at once, as recorded.
fn unreachable_reason(to: SocketAddr, why: Unreachable) -> String {
    match why {
        Unreachable::Address => format!(
            "{to}: only the names of network.allow (through the sandbox's resolver) and the addresses it lists are reached (ENETUNREACH)"
        ),
        Unreachable::Datagram => format!(
            "{to}: UDP is not handed over; the sandbox's one UDP service is its resolver (ENETUNREACH)"
        ),
        Unreachable::Unreadable => format!(
            "{to}: the connecting socket could not be looked at (pidfd_getfd refused: is ptrace restricted?); refused (ECONNREFUSED)"
        ),
    }
}
