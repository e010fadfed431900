//! Name resolution and upstream connections, as traits so that the daemon (and
//! tests) choose how.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;

use tokio::net::TcpStream;

/// A boxed, `Send` future (what the traits below return).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Resolves a normalised host name (never an IP literal) to addresses. The proxy
/// calls it at most once per decision and connects only to addresses it returned
/// and the policy vetted.
pub trait Resolver: Send + Sync {
    fn resolve<'a>(&'a self, name: &'a str, port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>>;
}

/// The host's resolver (`getaddrinfo` through `tokio::net::lookup_host`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a str, port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let mut out: Vec<IpAddr> = Vec::new();
            for addr in tokio::net::lookup_host((name, port)).await? {
                if !out.contains(&addr.ip()) {
                    out.push(addr.ip());
                }
            }
            Ok(out)
        })
    }
}

/// Opens the upstream TCP connection to a vetted address.
pub trait Connector: Send + Sync {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>>;
}

/// `TcpStream::connect` to exactly the given address.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpConnector;

impl Connector for TcpConnector {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<TcpStream>> {
        Box::pin(TcpStream::connect(addr))
    }
}

/// Answers of a [`Resolver`] remembered for a short time, for [`Cached`]:
/// transparent egress looks a name up on the host when the sandbox's own
/// resolver answers it (`crate::synthetic`), so the `connect` that follows
/// finds the answer ready instead of waiting for it. Every use still vets the
/// addresses, so a remembered answer is never trusted more than a fresh one.
#[derive(Debug)]
pub struct LookupCache {
    fresh: std::time::Duration,
    answers: std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, Vec<IpAddr>)>>,
}

/// Names remembered at most (the whole cache is dropped beyond it).
const CACHED_NAMES: usize = 1024;

impl LookupCache {
    /// Remembers answers for `fresh`.
    pub fn new(fresh: std::time::Duration) -> Self {
        LookupCache {
            fresh,
            answers: Default::default(),
        }
    }

    fn get(&self, name: &str) -> Option<Vec<IpAddr>> {
        let answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        answers
            .get(name)
            .filter(|(at, _)| at.elapsed() < self.fresh)
            .map(|(_, a)| a.clone())
    }

    fn put(&self, name: &str, addrs: &[IpAddr]) {
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if answers.len() >= CACHED_NAMES {
            answers.clear();
        }
        answers.insert(name.to_owned(), (std::time::Instant::now(), addrs.to_vec()));
    }
}

/// `inner` with its answers remembered in `cache` (failures are not).
#[derive(Clone)]
pub struct Cached {
    pub cache: std::sync::Arc<LookupCache>,
    pub inner: std::sync::Arc<dyn Resolver>,
}

impl Resolver for Cached {
    fn resolve<'a>(&'a self, name: &'a str, port: u16) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            if let Some(a) = self.cache.get(name) {
                return Ok(a);
            }
            let a = self.inner.resolve(name, port).await?;
            if !a.is_empty() {
                self.cache.put(name, &a);
            }
            Ok(a)
        })
    }
}
