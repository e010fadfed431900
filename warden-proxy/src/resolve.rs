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
