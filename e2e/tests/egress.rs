//! Egress through the daemon's proxy (DESIGN.md §6, tracker issue 4), end to end: the
//! real daemon (`wardend --dns` pointed at a recording DNS server), the real shim, the
//! real sandbox, and real clients inside it (curl, Python's urllib and requests,
//! Node 24's built-in fetch, mcp-server-fetch, raw sockets from a Python driver and
//! the fixture's `tcp_exchange` tool) reaching upstream servers on the host's
//! loopback (`warden_e2e::net`).
//!
//! Names come from [`DnsServer::standard`]: `allowed.test` → 127.0.0.1,
//! `api.github.test` → 127.0.0.2, and every name no policy here allows → 127.0.0.3,
//! where the upstreams also listen: a connection there is a denial that failed.
//! Denials before DNS are asserted by the DNS server's record of queries.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_e2e::net::*;
use warden_e2e::*;

const RUN: Duration = Duration::from_secs(120);
/// Env names the policies pass through so clients trust the test CA.
const CA_VARS: [&str; 3] = ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"];

/// A daemon using the recording DNS server, the upstreams, and the clients.
/// The shared setup ([`NetWorld`]) and this file's steps.
struct World(NetWorld);

impl std::ops::Deref for World {
    type Target = NetWorld;
    fn deref(&self) -> &NetWorld {
        &self.0
    }
}

impl World {
    fn new() -> Option<World> {
        NetWorld::new().map(World)
    }

    fn http(&self) -> u16 {
        self.up.http.port()
    }

    fn https(&self) -> u16 {
        self.up.https.port()
    }

    fn ca(&self) -> &str {
        self.up.pki.ca_pem.to_str().expect("utf-8 path")
    }

    /// A policy allowing `allow`, reading the deps and the CA, passing [`CA_VARS`].
    fn policy(&self, name: &str, allow: &[String], allow_private: bool) -> PathBuf {
        let list: Vec<String> = allow.iter().map(|a| format!("{a:?}")).collect();
        let pki_dir = self.up.pki.ca_pem.parent().expect("pki dir");
        self.env.policy(
            &format!("{name}.yaml"),
            &format!(
                "version: 1\nname: egress-{name}\nfilesystem:\n  read: [{:?}, {:?}]\n\
                 network:\n  allow: [{}]\n  allow_private: {allow_private}\n\
                 env:\n  allow: {CA_VARS:?}\nlimits:\n  timeout_s: 110\n",
                self.clients.deps.display().to_string(),
                pki_dir.display().to_string(),
                list.join(", "),
            ),
        )
    }

    /// The usual policy: `allowed.test` and `*.github.test` on both upstream ports,
    /// `rebind-private.test` on the HTTP port, each with the `private` option
    /// (they are all loopback here, which `allow_private` does not open).
    fn standard_policy(&self) -> PathBuf {
        let (h, s) = (self.http(), self.https());
        self.policy(
            "standard",
            &[
                format!("allowed.test:{h} private"),
                format!("allowed.test:{s} private"),
                format!("*.github.test:{h} private"),
                format!("*.github.test:{s} private"),
                format!("rebind-private.test:{h} private"),
            ],
            false,
        )
    }

    /// Runs `argv` in the sandbox under `policy` (to completion), with the CA
    /// variables set in the shim's environment.
    fn inside(&self, policy: &Path, argv: &[&str]) -> Output {
        let mut args: Vec<OsString> = vec!["--policy".into(), policy.into(), "--".into()];
        args.extend(argv.iter().map(OsString::from));
        let mut cmd = self.env.shim(args);
        for var in CA_VARS {
            cmd.env(var, self.ca());
        }
        let out = run(&mut cmd, RUN);
        // Scripts and case lists are long: show the start of each argument.
        let shown: Vec<String> = argv
            .iter()
            .map(|a| match a.char_indices().nth(120) {
                Some((i, _)) => format!("{}...", &a[..i]),
                None => a.to_string(),
            })
            .collect();
        eprintln!(
            "inside {shown:?}: exit {}\n--- stdout\n{}\n--- stderr\n{}",
            exit_code(out.status),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn curl(&self, policy: &Path, args: &[&str]) -> Curl {
        let curl = self.clients.curl.to_str().expect("utf-8 path");
        let mut argv = vec![curl, "-sS", "-i", "--max-time", "60"];
        argv.extend(args);
        Curl(self.inside(policy, &argv))
    }

    /// Runs the raw-socket driver inside; one result per case.
    fn drive(&self, policy: &Path, cases: &[Value]) -> Vec<Value> {
        let cases = Value::Array(cases.to_vec()).to_string();
        let out = self.inside(policy, &["/usr/bin/python3", "-c", DRIVER, &cases, PROXY]);
        parse_driver(&out, cases.len())
    }

    fn decisions(&self, host: &str) -> Vec<Value> {
        decisions_for(&self.env, host)
    }

    /// Waits (audit records are group-committed) until `pred` holds for some network
    /// record; returns all network records either way.
    fn wait_network(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let records = network_records(&self.env);
            if records.iter().any(&pred) {
                return records;
            }
            if Instant::now() >= deadline {
                panic!(
                    "no network audit record {what} within 15 s; network records:\n{}\ndaemon log:\n{}",
                    records
                        .iter()
                        .map(Value::to_string)
                        .collect::<Vec<_>>()
                        .join("\n"),
                    self.daemon.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asserts the DNS server was asked about nothing but `names`.
    #[track_caller]
    fn assert_only_looked_up(&self, names: &[&str]) {
        let keys: Vec<String> = names.iter().map(|n| dns_key(n)).collect();
        let stray: Vec<Query> = self
            .up
            .dns
            .queries()
            .into_iter()
            .filter(|q| !keys.contains(&dns_key(&q.name)))
            .collect();
        assert!(
            stray.is_empty(),
            "the daemon looked up names it should have refused before DNS: {stray:?}"
        );
    }

    #[track_caller]
    fn assert_forbidden_untouched(&self) {
        assert!(
            !self.up.reached(IP_FORBIDDEN),
            "a connection reached {IP_FORBIDDEN}, where only refused names point:\n{}",
            self.up.describe()
        );
    }
}

impl Drop for World {
    /// On failure, shows what the proxy decided and what the upstreams saw.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- network audit records");
            for r in network_records(&self.env) {
                eprintln!("{r}");
            }
            eprintln!("--- upstreams\n{}", self.up.describe());
            eprintln!("--- daemon log\n{}", self.daemon.log());
        }
    }
}

/// curl's output: exit code, and the responses `-i` printed.
struct Curl(Output);

impl Curl {
    fn code(&self) -> i32 {
        exit_code(self.0.status)
    }
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }
    #[track_caller]
    fn assert_ok(&self) -> String {
        assert_eq!(
            self.code(),
            0,
            "curl failed; stdout:\n{}\nstderr:\n{}",
            self.stdout(),
            self.stderr()
        );
        self.stdout()
    }
    /// The value of `X-Warden-Denied` in any response curl printed (a CONNECT
    /// response's headers included).
    fn denied_code(&self) -> Option<String> {
        self.stdout().lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("x-warden-denied")
                .then(|| v.trim().to_string())
        })
    }
}

// ---------------------------------------------------------------------------------
// The raw-socket driver (Python, stdlib only; run by /usr/bin/python3 inside)

/// `python3 -c DRIVER CASES_JSON HOST:PORT`: each case is `{"name", "steps"}`; each
/// step one of `["send", latin-1 text]`, `["send_hex", hex]`, `["http"]` (read one
/// response), `["recv", n]`, `["socks_reply"]`, `["all"]` (read to EOF), `["tls",
/// server_name, cafile]`, `["tls_nosni", cafile]` (a ClientHello without SNI). Prints one JSON array: per case `{"name", "results",
/// "error", "closed"}`, with one result per reading step. A case stops at its first
/// error (a TLS failure, a refused connection, EOF before a response...).
const DRIVER: &str = r#"
import json, socket, ssl, sys

T = 20.0
host, port = sys.argv[2].rsplit(":", 1)

class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
    def fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise EOFError("closed by the peer")
        self.buf += d
    def until(self, sep):
        while sep not in self.buf:
            self.fill()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out
    def n(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out
    def rest(self):
        try:
            while True:
                self.fill()
        except (EOFError, OSError):
            pass
        out, self.buf = self.buf, b""
        return out

def read_http(c):
    head = c.until(b"\r\n\r\n").decode("latin-1")
    lines = head.split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if status in (101, 204, 304) or (200 <= status < 300 and c.connect):
        body = b""
    elif "content-length" in headers:
        body = c.n(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int(c.until(b"\r\n").split(b";")[0].strip(), 16)
            if size == 0:
                c.until(b"\r\n")
                break
            body += c.n(size)
            c.n(2)
    else:
        body = c.rest()
    return {"status": status, "headers": headers, "body": body.decode("latin-1")}

def run(case):
    out = {"name": case["name"], "results": [], "error": None, "closed": False}
    try:
        sock = socket.create_connection((host, int(port)), timeout=T)
    except OSError as e:
        out["error"] = "connect: %r" % e
        return out
    c = Conn(sock)
    c.connect = False
    try:
        for step in case["steps"]:
            op = step[0]
            if op == "send":
                c.connect = step[1].startswith("CONNECT ")
                c.sock.sendall(step[1].encode("latin-1"))
            elif op == "send_hex":
                c.sock.sendall(bytes.fromhex(step[1]))
            elif op == "http":
                out["results"].append(read_http(c))
            elif op == "recv":
                out["results"].append(c.n(step[1]).hex())
            elif op == "socks_reply":
                head = c.n(4)
                atyp = head[3]
                rest = {1: 4, 4: 16}.get(atyp)
                if rest is None and atyp == 3:
                    rest = c.n(1)[0]
                if rest is not None:
                    c.n(rest + 2)
                out["results"].append({"rep": head[1]})
            elif op == "all":
                out["results"].append(c.rest().decode("latin-1"))
            elif op == "tls":
                ctx = ssl.create_default_context(cafile=step[2])
                c.sock = ctx.wrap_socket(c.sock, server_hostname=step[1])
                c.connect = False
                out["results"].append({"tls": c.sock.version()})
            elif op == "tls_nosni":
                ctx = ssl.create_default_context(cafile=step[1])
                ctx.check_hostname = False
                c.sock = ctx.wrap_socket(c.sock, server_hostname=None)
                c.connect = False
                out["results"].append({"tls": c.sock.version()})
            else:
                raise ValueError("unknown step %r" % op)
    except EOFError as e:
        out["closed"] = True
        out["error"] = str(e)
    except Exception as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    try:
        c.sock.close()
    except OSError:
        pass
    return out

print(json.dumps([run(case) for case in json.loads(sys.argv[1])]))
"#;

fn parse_driver(out: &Output, _len: usize) -> Vec<Value> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('['))
        .unwrap_or_else(|| {
            panic!(
                "the driver printed no result (exit {}); stdout:\n{stdout}\nstderr:\n{}",
                exit_code(out.status),
                String::from_utf8_lossy(&out.stderr)
            )
        });
    serde_json::from_str::<Vec<Value>>(line).expect("driver JSON")
}

fn case(name: &str, steps: Value) -> Value {
    json!({"name": name, "steps": steps})
}

/// A plain-HTTP proxy request (absolute-form target and a Host header).
fn get(target: &str, host: &str) -> String {
    format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
}

/// SOCKS5: greeting (no auth), then CONNECT to a domain name.
fn socks_domain(name: &str, port: u16) -> Value {
    let mut req = vec![5u8, 1, 0, 3, name.len() as u8];
    req.extend_from_slice(name.as_bytes());
    req.extend_from_slice(&port.to_be_bytes());
    json!([
        ["send_hex", "050100"],
        ["recv", 2],
        ["send_hex", hex(&req)],
        ["socks_reply"]
    ])
}

/// SOCKS5: greeting, then CONNECT to an IP literal.
fn socks_ip(ip: IpAddr, port: u16) -> Value {
    let mut req = vec![5u8, 1, 0];
    match ip {
        IpAddr::V4(a) => {
            req.push(1);
            req.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            req.push(4);
            req.extend_from_slice(&a.octets());
        }
    }
    req.extend_from_slice(&port.to_be_bytes());
    json!([
        ["send_hex", "050100"],
        ["recv", 2],
        ["send_hex", hex(&req)],
        ["socks_reply"]
    ])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn result<'a>(results: &'a [Value], name: &str) -> &'a Value {
    results
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no result for case {name}"))
}

/// The case ended in a Warden denial: an HTTP 4xx with `X-Warden-Denied` (returned
/// as its code), a SOCKS5 reply 0x02 ("socks"), or the proxy closing the connection
/// without a response ("closed").
fn denial(case: &Value) -> Option<String> {
    let results = case["results"].as_array().cloned().unwrap_or_default();
    for r in &results {
        if let Some(status) = r["status"].as_u64() {
            if (400..500).contains(&status) {
                if let Some(code) = r["headers"]["x-warden-denied"].as_str() {
                    return Some(code.to_string());
                }
            }
            if status < 300 || status == 101 {
                continue;
            }
            return None;
        }
        match r["rep"].as_u64() {
            Some(2) => return Some("socks".into()),
            Some(0) | None => {}
            Some(n) => return Some(format!("socks-{n}")),
        }
    }
    if case["closed"] == true && !results.iter().any(|r| r["status"].as_u64() == Some(101)) {
        return Some("closed".into());
    }
    None
}

#[track_caller]
fn assert_denied(results: &[Value], name: &str, code: Option<&str>) {
    let case = result(results, name);
    let got = denial(case);
    assert!(got.is_some(), "case {name} was not denied: {case}");
    if let Some(code) = code {
        assert_eq!(got.as_deref(), Some(code), "case {name}: {case}");
    }
}

#[track_caller]
fn first_response(results: &[Value], name: &str) -> Value {
    let case = result(results, name);
    case["results"]
        .as_array()
        .and_then(|r| r.iter().find(|x| x["status"].is_u64()))
        .cloned()
        .unwrap_or_else(|| panic!("case {name} got no HTTP response: {case}"))
}

/// The driver itself, on the host against an upstream (no sandbox, no proxy): HTTP,
/// keep-alive, upgrade-then-echo, and a refused connection are all parsed.
#[test]
fn driver_self_test() {
    let server = HttpServer::start("t");
    let addr = server.addr().to_string();
    let cases = Value::Array(vec![
        case(
            "two",
            json!([
                ["send", "GET /hello/1 HTTP/1.1\r\nHost: a\r\n\r\n"], ["http"],
                ["send", "GET /hello/2 HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n"], ["http"],
            ]),
        ),
        case(
            "upgrade",
            json!([
                ["send", "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"],
                ["http"], ["send", "ping"], ["recv", 4],
            ]),
        ),
    ])
    .to_string();
    let python = Path::new("/usr/bin/python3");
    if !python.is_file() {
        println!("skipping: /usr/bin/python3 missing");
        return;
    }
    let out = run(
        Command::new(python).args(["-c", DRIVER, &cases, &addr]),
        RUN,
    );
    let results = parse_driver(&out, 2);
    let two = result(&results, "two");
    assert_eq!(two["error"], Value::Null, "{two}");
    assert_eq!(two["results"][0]["status"], 200);
    assert!(two["results"][1]["body"]
        .as_str()
        .unwrap()
        .contains("host: b"));
    let up = result(&results, "upgrade");
    assert_eq!(up["results"][0]["status"], 101, "{up}");
    assert_eq!(up["results"][1], hex(b"ping"));
    assert_eq!(denial(two), None);
    // Nothing listens on the server's port at 127.0.0.3 (it was bound on .1 only).
    let out = run(
        Command::new(python).args([
            "-c",
            DRIVER,
            &Value::Array(vec![case("refused", json!([["http"]]))]).to_string(),
            &format!("127.0.0.3:{}", server.port()),
        ]),
        RUN,
    );
    let refused = parse_driver(&out, 1);
    assert!(
        refused[0]["error"]
            .as_str()
            .unwrap()
            .starts_with("connect:"),
        "{refused:?}"
    );
}

/// The fixture's `tcp_exchange` tool, directly on the host against an upstream.
#[test]
fn fixture_tcp_exchange_tool() {
    let server = HttpServer::start("t");
    let mut c = McpClient::spawn(Command::new(fixture()));
    c.initialize();
    let r = c.tool_json(
        "tcp_exchange",
        json!({"addr": server.addr().to_string(), "data": get("/hello", "x.test")}),
    );
    assert_eq!(r["connected"], true, "{r}");
    assert!(r["reply"].as_str().unwrap().contains("host: x.test"), "{r}");
    let r = c.tool_json(
        "tcp_exchange",
        json!({"addr": server.addr().to_string(), "data": hex(b"GET /hello HTTP/1.0\r\n\r\n"), "hex": true}),
    );
    assert!(
        r["reply"].as_str().unwrap().starts_with("HTTP/1.1 200"),
        "{r}"
    );
    let r = c.tool_json(
        "tcp_exchange",
        json!({"addr": format!("127.0.0.3:{}", server.port()), "data": "x"}),
    );
    assert_eq!(r["connected"], false, "{r}");
    c.close_stdin();
    assert_eq!(c.wait_code(Duration::from_secs(10)), 0);
}

// ---------------------------------------------------------------------------------
// The environment inside

#[test]
fn proxy_environment_inside() {
    let Some(w) = World::new() else { return };
    let out = w.inside(&w.standard_policy(), &["/usr/bin/env"]);
    assert_eq!(exit_code(out.status), 0);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let vars: Vec<(&str, &str)> = stdout.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    for (name, want) in [
        ("HTTP_PROXY", PROXY_URL),
        ("http_proxy", PROXY_URL),
        ("HTTPS_PROXY", PROXY_URL),
        ("https_proxy", PROXY_URL),
        ("ALL_PROXY", "socks5h://127.0.0.1:3128"),
        ("all_proxy", "socks5h://127.0.0.1:3128"),
        ("NO_PROXY", ""),
        ("no_proxy", ""),
        ("NODE_USE_ENV_PROXY", "1"),
    ] {
        assert_eq!(get(name), Some(want), "{name} inside; env:\n{stdout}");
    }
    // The CA variables came through env.allow (the client's values).
    assert_eq!(get("SSL_CERT_FILE"), Some(w.ca()));
}

// ---------------------------------------------------------------------------------
// Clients reaching an allowed host

#[test]
fn curl_http_connect_and_socks5() {
    let Some(w) = World::new() else { return };
    let policy = w.standard_policy();
    let (h, s) = (w.http(), w.https());

    // Plain HTTP through http_proxy.
    let out = w
        .curl(&policy, &[&format!("http://allowed.test:{h}/hello")])
        .assert_ok();
    assert!(out.contains("HTTP/1.1 200"), "{out}");
    assert!(out.contains(&format!("host: allowed.test:{h}")), "{out}");
    assert!(out.contains("local: 127.0.0.1:"), "{out}");

    // HTTPS through a CONNECT tunnel (https_proxy), the test CA trusted.
    let out = w
        .curl(
            &policy,
            &[
                "--cacert",
                w.ca(),
                &format!("https://allowed.test:{s}/hello"),
            ],
        )
        .assert_ok();
    assert!(out.contains("tls: true"), "{out}");
    assert!(out.contains(&format!("host: allowed.test:{s}")), "{out}");

    // SOCKS5 with remote resolution ($ALL_PROXY is socks5h://), HTTP and HTTPS.
    let curl = w.clients.curl.to_str().unwrap();
    let script = format!(
        "exec {curl} -sS -i --max-time 60 --proxy \"$ALL_PROXY\" http://api.github.test:{h}/hello"
    );
    let out = w.inside(&policy, &["/bin/sh", "-c", &script]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("HTTP/1.1 200"), "{text}");
    assert!(text.contains("local: 127.0.0.2:"), "{text}");
    let script = format!(
        "exec {curl} -sS -i --max-time 60 --cacert {} --proxy \"$ALL_PROXY\" https://api.github.test:{s}/hello",
        w.ca()
    );
    let out = w.inside(&policy, &["/bin/sh", "-c", &script]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tls: true"), "{text}");
    assert!(text.contains("local: 127.0.0.2:"), "{text}");

    // The upstreams saw what was asked, where it was asked.
    let on_first = w.up.http.requests_to(IP_ALLOWED);
    assert_eq!(on_first.len(), 1, "{on_first:?}");
    assert_eq!(on_first[0].target, "/hello", "origin-form upstream");
    assert_eq!(w.up.https.connections_to(IP_SECOND).len(), 1);
    assert_eq!(
        w.up.https.connections_to(IP_SECOND)[0].sni.as_deref(),
        Some("api.github.test")
    );
    w.assert_forbidden_untouched();
    w.assert_only_looked_up(&["allowed.test", "api.github.test"]);

    // One allow decision per request, with protocol, address and rule; and a close
    // record with the bytes of each.
    let records = w.wait_network("closing the SOCKS5 tunnel", |r| {
        r["action"] == "close" && r["details"]["protocol"] == "socks5"
    });
    let allowed = w.decisions("allowed.test");
    let http = allowed
        .iter()
        .find(|r| r["details"]["protocol"] == "http")
        .unwrap_or_else(|| panic!("no http decision: {allowed:?}"));
    assert_eq!(http["decision"], "allow", "{http}");
    assert_eq!(http["resource"], format!("allowed.test:{h}"), "{http}");
    assert_eq!(http["details"]["port"], h, "{http}");
    assert_eq!(
        http["details"]["address"],
        format!("127.0.0.1:{h}"),
        "{http}"
    );
    assert_eq!(
        http["details"]["rule"],
        format!("allowed.test:{h} private"),
        "{http}"
    );
    let connect = allowed
        .iter()
        .find(|r| r["details"]["protocol"] == "connect")
        .unwrap_or_else(|| panic!("no connect decision: {allowed:?}"));
    assert_eq!(connect["decision"], "allow", "{connect}");
    assert_eq!(connect["resource"], format!("allowed.test:{s}"));
    let socks = w.decisions("api.github.test");
    assert_eq!(socks.len(), 2, "{socks:?}");
    for r in &socks {
        assert_eq!(r["decision"], "allow", "{r}");
        assert_eq!(r["details"]["protocol"], "socks5", "{r}");
        assert_eq!(
            r["details"]["rule"].as_str().unwrap().split(':').next(),
            Some("*.github.test")
        );
        assert!(r["details"]["address"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.2:"));
        assert!(r["session"].is_string(), "{r}");
    }
    let closes: Vec<&Value> = records.iter().filter(|r| r["action"] == "close").collect();
    for protocol in ["http", "connect", "socks5"] {
        let c = closes
            .iter()
            .find(|r| r["details"]["protocol"] == protocol)
            .unwrap_or_else(|| panic!("no close record for {protocol}: {closes:?}"));
        assert!(c["details"]["bytes_down"].as_u64().unwrap() > 0, "{c}");
        assert!(c["details"]["bytes_up"].as_u64().unwrap() > 0, "{c}");
        assert!(c["details"]["duration_ms"].is_u64(), "{c}");
    }
}

#[test]
fn python_urllib_and_requests() {
    let Some(w) = World::new() else { return };
    let (h, s) = (w.http(), w.https());
    let script = r#"
import json, os, sys, urllib.request
import requests
http, https, socks_http, socks_https, denied = sys.argv[1:6]
out = {}
def rec(name, f):
    try:
        out[name] = f()
    except Exception as e:
        out[name] = {"error": "%s: %s" % (type(e).__name__, e)}
def urllib_get(url):
    with urllib.request.urlopen(url, timeout=60) as r:
        return {"status": r.status, "body": r.read().decode()}
def requests_get(url, **kw):
    r = requests.get(url, timeout=60, **kw)
    return {"status": r.status_code, "body": r.text, "denied": r.headers.get("X-Warden-Denied")}
socks = {"http": os.environ["ALL_PROXY"], "https": os.environ["ALL_PROXY"]}
rec("urllib_http", lambda: urllib_get(http))
rec("urllib_https", lambda: urllib_get(https))
rec("requests_http", lambda: requests_get(http))
rec("requests_https", lambda: requests_get(https))
rec("requests_socks_http", lambda: requests_get(socks_http, proxies=socks))
rec("requests_socks_https", lambda: requests_get(socks_https, proxies=socks))
rec("requests_denied", lambda: requests_get(denied))
print(json.dumps(out))
"#;
    let python = w.clients.python.to_str().unwrap();
    let out = w.inside(
        &w.standard_policy(),
        &[
            python,
            "-c",
            script,
            &format!("http://allowed.test:{h}/hello/urllib"),
            &format!("https://allowed.test:{s}/hello/urllib"),
            &format!("http://api.github.test:{h}/hello/socks"),
            &format!("https://api.github.test:{s}/hello/socks"),
            &format!("http://notlisted.test:{h}/hello"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let r: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| {
        panic!(
            "python printed no JSON ({e}); stdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    for (name, want) in [
        ("urllib_http", "tls: false"),
        ("urllib_https", "tls: true"),
        ("requests_http", "tls: false"),
        ("requests_https", "tls: true"),
        ("requests_socks_http", "local: 127.0.0.2"),
        ("requests_socks_https", "tls: true"),
    ] {
        assert_eq!(r[name]["status"], 200, "{name}: {}", r[name]);
        assert!(
            r[name]["body"].as_str().unwrap_or("").contains(want),
            "{name}: {}",
            r[name]
        );
    }
    assert_eq!(
        r["requests_denied"]["status"], 403,
        "{}",
        r["requests_denied"]
    );
    assert_eq!(r["requests_denied"]["denied"], "not-allowed");
    w.assert_forbidden_untouched();
    w.assert_only_looked_up(&["allowed.test", "api.github.test"]);
}

#[test]
fn node24_fetch() {
    let Some(w) = World::new() else { return };
    let (h, s) = (w.http(), w.https());
    // Node's fetch uses the proxy variables because NODE_USE_ENV_PROXY=1 inside.
    let script = r#"
const [http, https, denied] = process.argv.slice(1);
(async () => {
  const out = {};
  for (const [name, url] of [["http", http], ["https", https], ["denied", denied]]) {
    try {
      const r = await fetch(url);
      out[name] = {status: r.status, body: await r.text(), denied: r.headers.get("x-warden-denied")};
    } catch (e) {
      out[name] = {error: String(e), cause: String(e.cause)};
    }
  }
  console.log(JSON.stringify(out));
})();
"#;
    let node = w.clients.node24.to_str().unwrap();
    let out = w.inside(
        &w.standard_policy(),
        &[
            node,
            "-e",
            script,
            &format!("http://allowed.test:{h}/hello/node"),
            &format!("https://api.github.test:{s}/hello/node"),
            &format!("http://notlisted.test:{h}/hello"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let r: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| {
        panic!(
            "node printed no JSON ({e}); stdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(r["http"]["status"], 200, "{}", r["http"]);
    assert!(r["http"]["body"]
        .as_str()
        .unwrap()
        .contains("path: /hello/node"));
    assert_eq!(r["https"]["status"], 200, "{}", r["https"]);
    assert!(r["https"]["body"].as_str().unwrap().contains("tls: true"));
    assert!(r["https"]["body"]
        .as_str()
        .unwrap()
        .contains("local: 127.0.0.2"));
    // Node's proxy agent tunnels even http:// URLs through CONNECT, and reports a
    // refused tunnel as a failed fetch ("Request was cancelled."), without the 403:
    // the audit record says what happened.
    let denied = &r["denied"];
    if denied["status"].is_u64() {
        assert_eq!(denied["status"], 403, "{denied}");
        assert_eq!(denied["denied"], "not-allowed");
    } else {
        assert!(denied["error"].is_string(), "{denied}");
        let records = w.decisions("notlisted.test");
        assert!(
            records
                .iter()
                .any(|r| r["decision"] == "deny" && r["details"]["code"] == "not-allowed"),
            "{records:?}"
        );
    }
    w.assert_forbidden_untouched();
    w.assert_only_looked_up(&["allowed.test", "api.github.test"]);
}

// ---------------------------------------------------------------------------------
// Denials

#[test]
fn denied_name_with_curl_gets_403_and_no_lookup() {
    let Some(w) = World::new() else { return };
    let policy = w.standard_policy();
    let (h, s) = (w.http(), w.https());

    // Plain HTTP: the 403 is the response.
    let c = w.curl(&policy, &[&format!("http://notlisted.test:{h}/hello")]);
    assert_eq!(c.code(), 0, "{}", c.stderr());
    assert!(c.stdout().starts_with("HTTP/1.1 403"), "{}", c.stdout());
    assert_eq!(c.denied_code().as_deref(), Some("not-allowed"));

    // CONNECT: curl fails on the tunnel's 403 (CURLE_RECV_ERROR, 56).
    let c = w.curl(
        &policy,
        &[
            "--cacert",
            w.ca(),
            &format!("https://notlisted.test:{s}/hello"),
        ],
    );
    assert_eq!(c.code(), 56, "{}", c.stderr());
    assert!(c.stderr().contains("403"), "{}", c.stderr());
    assert_eq!(c.denied_code().as_deref(), Some("not-allowed"));

    // SOCKS5: reply 0x02, "connection not allowed by ruleset".
    let curl = w.clients.curl.to_str().unwrap();
    let script = format!(
        "exec {curl} -sS --max-time 60 --proxy \"$ALL_PROXY\" http://notlisted.test:{h}/hello"
    );
    let out = w.inside(&policy, &["/bin/sh", "-c", &script]);
    assert_ne!(exit_code(out.status), 0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("SOCKS5"), "{stderr}");

    // An allowed name on a port the policy does not list.
    let c = w.curl(&policy, &[&format!("http://allowed.test:{}/hello", h ^ 1)]);
    assert_eq!(
        c.denied_code().as_deref(),
        Some("not-allowed"),
        "{}",
        c.stdout()
    );

    w.assert_forbidden_untouched();
    assert!(w.up.dns.queries().is_empty(), "{:?}", w.up.dns.queries());
    w.wait_network("denying notlisted.test over socks5", |r| {
        r["details"]["protocol"] == "socks5" && r["decision"] == "deny"
    });
    let denied = w.decisions("notlisted.test");
    assert_eq!(denied.len(), 3, "{denied:?}");
    for r in &denied {
        assert_eq!(r["decision"], "deny", "{r}");
        assert_eq!(r["details"]["code"], "not-allowed", "{r}");
        assert_eq!(r["details"]["address"], Value::Null, "{r}");
        assert_eq!(r["details"]["rule"], Value::Null, "{r}");
        assert!(r["reason"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
    }
    let protocols: Vec<&str> = denied
        .iter()
        .filter_map(|r| r["details"]["protocol"].as_str())
        .collect();
    for p in ["http", "connect", "socks5"] {
        assert!(protocols.contains(&p), "{protocols:?}");
    }
    assert_eq!(
        denied
            .iter()
            .find(|r| r["details"]["protocol"] == "http")
            .unwrap()["resource"],
        format!("notlisted.test:{h}")
    );
}

/// Every refusal the proxy must make before (or instead of) any DNS lookup, driven
/// with raw sockets from inside the sandbox.
#[test]
fn denials_before_dns() {
    let Some(w) = World::new() else { return };
    let policy = w.standard_policy();
    let (h, s) = (w.http(), w.https());
    let a = |host: &str| format!("http://{host}:{h}/hello");
    let long_label = "a".repeat(64);
    let long_name = format!("{}.test", vec!["b".repeat(60); 5].join("."));
    let mut cases = vec![
        // Controls: the same driver, allowed requests (normalised names too).
        case(
            "control",
            json!([["send", get(&a("allowed.test"), &format!("allowed.test:{h}"))], ["http"]]),
        ),
        case(
            "control-normalised",
            json!([["send", get(&a("ALLOWED.Test."), &format!("ALLOWED.Test.:{h}"))], ["http"]]),
        ),
        case(
            "control-socks",
            {
                let mut steps = socks_domain("api.github.test", h).as_array().unwrap().clone();
                steps.push(json!(["send", format!("GET /hello HTTP/1.1\r\nHost: api.github.test:{h}\r\nConnection: close\r\n\r\n")]));
                steps.push(json!(["http"]));
                Value::Array(steps)
            },
        ),
        // Names the policy does not list, and look-alikes of *.github.test.
        case("notlisted", json!([["send", get(&a("notlisted.test"), &format!("notlisted.test:{h}"))], ["http"]])),
        case("evil-github", json!([["send", get(&a("evil-github.test"), &format!("evil-github.test:{h}"))], ["http"]])),
        case("apex", json!([["send", get(&a("github.test"), &format!("github.test:{h}"))], ["http"]])),
        case("case-variant", json!([["send", get(&a("NotListed.TEST"), &format!("NotListed.TEST:{h}"))], ["http"]])),
        case("trailing-dot", json!([["send", get(&a("notlisted.test."), &format!("notlisted.test.:{h}"))], ["http"]])),
        case("connect-notlisted", json!([["send", format!("CONNECT notlisted.test:{s} HTTP/1.1\r\nHost: notlisted.test:{s}\r\n\r\n")], ["http"]])),
        case("connect-apex", json!([["send", format!("CONNECT github.test:{s} HTTP/1.1\r\nHost: github.test:{s}\r\n\r\n")], ["http"]])),
        case("userinfo", json!([["send", get(&format!("http://allowed.test:{h}@other.test:{h}/hello"), &format!("other.test:{h}"))], ["http"]])),
        // Host header against the absolute-form target.
        case("host-mismatch", json!([["send", get(&a("allowed.test"), &format!("other.test:{h}"))], ["http"]])),
        case("host-mismatch-port", json!([["send", get(&a("allowed.test"), &format!("allowed.test:{}", h ^ 1))], ["http"]])),
        case(
            "keep-alive-second-host",
            json!([
                ["send", format!("GET {} HTTP/1.1\r\nHost: allowed.test:{h}\r\n\r\n", a("allowed.test"))], ["http"],
                ["send", get(&a("other.test"), &format!("other.test:{h}"))], ["http"],
            ]),
        ),
        case(
            "pipelined-second-host",
            json!([
                ["send", format!("GET {} HTTP/1.1\r\nHost: allowed.test:{h}\r\n\r\n{}", a("allowed.test"), get(&a("other.test"), &format!("other.test:{h}")))],
                ["http"], ["http"],
            ]),
        ),
        case(
            "smuggled-second-host",
            json!([
                ["send", format!("POST {} HTTP/1.1\r\nHost: allowed.test:{h}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{}", a("allowed.test"), get(&a("other.test"), &format!("other.test:{h}")))],
                ["all"],
            ]),
        ),
        case(
            "websocket-then-other-host",
            json!([
                ["send", format!("GET {} HTTP/1.1\r\nHost: allowed.test:{h}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", a("allowed.test"))],
                ["http"],
                ["send", get(&a("other.test"), &format!("other.test:{h}"))],
                ["recv", get(&a("other.test"), &format!("other.test:{h}")).len()],
            ]),
        ),
        case(
            "h2c-upgrade-other-host",
            json!([
                ["send", format!("GET {} HTTP/1.1\r\nHost: other.test:{h}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", a("allowed.test"))],
                ["http"],
            ]),
        ),
        case(
            "websocket-other-host",
            json!([
                ["send", format!("GET {} HTTP/1.1\r\nHost: other.test:{h}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", a("other.test"))],
                ["http"],
            ]),
        ),
        // Malformed requests.
        case("garbage", json!([["send", "GARBAGE\r\n\r\n"], ["http"]])),
        case("no-version", json!([["send", format!("GET {}\r\n\r\n", a("other.test"))], ["http"]])),
        case("origin-form", json!([["send", format!("GET /hello HTTP/1.1\r\nHost: other.test:{h}\r\n\r\n")], ["http"]])),
        case("nul-in-host", json!([["send", get(&format!("http://other.test\u{0}.allowed.test:{h}/"), &format!("allowed.test:{h}"))], ["http"]])),
        case("space-in-host", json!([["send", get(&format!("http://other.test .allowed.test:{h}/"), &format!("allowed.test:{h}"))], ["http"]])),
        case("long-label", json!([["send", get(&a(&format!("{long_label}.test")), &format!("{long_label}.test:{h}"))], ["http"]])),
        case("long-name", json!([["send", get(&a(&long_name), &format!("{long_name}:{h}"))], ["http"]])),
        case("connect-long-name", json!([["send", format!("CONNECT {long_name}:{s} HTTP/1.1\r\nHost: {long_name}:{s}\r\n\r\n")], ["http"]])),
        // SOCKS5.
        case("socks-notlisted", socks_domain("notlisted.test", h)),
        case("socks-apex", socks_domain("github.test", h)),
        case("socks-ip", socks_ip(IpAddr::V4(IP_ALLOWED), h)),
        case("socks-ip-forbidden", socks_ip(IpAddr::V4(IP_FORBIDDEN), h)),
        case("socks-ipv6", socks_ip("::1".parse().unwrap(), h)),
        case("socks-long-name", socks_domain(&"c".repeat(255), h)),
    ];
    // IP literals in many spellings: IPs, never names; the policy lists no IP.
    let spellings = [
        "127.0.0.1",
        "2130706433",
        "0x7f.1",
        "0x7f000001",
        "127.1",
        "0177.0.0.1",
        "127.0.1",
        "[::ffff:127.0.0.1]",
        "[::1]",
        "[0:0:0:0:0:ffff:7f00:1]",
    ];
    for (i, ip) in spellings.iter().enumerate() {
        cases.push(case(
            &format!("ip-{i}"),
            json!([["send", get(&a(ip), &format!("{ip}:{h}"))], ["http"]]),
        ));
        cases.push(case(
            &format!("connect-ip-{i}"),
            json!([
                [
                    "send",
                    format!("CONNECT {ip}:{s} HTTP/1.1\r\nHost: {ip}:{s}\r\n\r\n")
                ],
                ["http"]
            ]),
        ));
    }
    let results = w.drive(&policy, &cases);

    // Controls.
    for name in ["control", "control-normalised", "control-socks"] {
        let r = first_response(&results, name);
        assert_eq!(r["status"], 200, "{name}: {r}");
    }
    assert!(first_response(&results, "control-socks")["body"]
        .as_str()
        .unwrap()
        .contains("local: 127.0.0.2"));

    for (name, code) in [
        ("notlisted", Some("not-allowed")),
        ("evil-github", Some("not-allowed")),
        ("apex", Some("not-allowed")),
        ("case-variant", Some("not-allowed")),
        ("trailing-dot", Some("not-allowed")),
        ("connect-notlisted", Some("not-allowed")),
        ("connect-apex", Some("not-allowed")),
        ("userinfo", None),
        ("host-mismatch", Some("host-mismatch")),
        ("host-mismatch-port", Some("host-mismatch")),
        ("h2c-upgrade-other-host", Some("host-mismatch")),
        ("websocket-other-host", Some("not-allowed")),
        ("garbage", None),
        ("no-version", None),
        ("origin-form", None),
        ("nul-in-host", None),
        ("space-in-host", None),
        ("long-label", None),
        ("long-name", None),
        ("connect-long-name", None),
        ("socks-notlisted", Some("socks")),
        ("socks-apex", Some("socks")),
        ("socks-ip", Some("socks")),
        ("socks-ip-forbidden", Some("socks")),
        ("socks-ipv6", Some("socks")),
        ("socks-long-name", None),
    ] {
        assert_denied(&results, name, code);
    }
    for i in 0..spellings.len() {
        assert_denied(&results, &format!("ip-{i}"), Some("not-allowed"));
        assert_denied(&results, &format!("connect-ip-{i}"), Some("not-allowed"));
    }

    // The second request on a kept-alive connection is judged on its own.
    let ka = result(&results, "keep-alive-second-host");
    assert_eq!(ka["results"][0]["status"], 200, "{ka}");
    assert!(denial(ka).is_some(), "second request not refused: {ka}");
    let pl = result(&results, "pipelined-second-host");
    assert_eq!(pl["results"][0]["status"], 200, "{pl}");
    assert!(denial(pl).is_some(), "pipelined request not refused: {pl}");
    // After an upgrade the tunnel stays with the vetted upstream: the bytes come
    // back from the echo at 127.0.0.1, not from other.test.
    let ws = result(&results, "websocket-then-other-host");
    if ws["results"][0]["status"] == 101 {
        assert_eq!(
            ws["results"][1],
            hex(get(&a("other.test"), &format!("other.test:{h}")).as_bytes()),
            "{ws}"
        );
    } else {
        assert!(denial(ws).is_some(), "{ws}");
    }

    // None of it reached a refused host, and only the allowed names were looked up.
    w.assert_forbidden_untouched();
    w.assert_only_looked_up(&["allowed.test", "api.github.test"]);
    // IP literals are IPs, whatever the spelling: the deny records name the address.
    w.wait_network("for the last IP literal", |r| {
        r["decision"] == "deny" && r["details"]["protocol"] == "connect"
    });
    // Nine spellings of 127.0.0.1 (plain and CONNECT), and the SOCKS5 one.
    let ip_denials = w.decisions("127.0.0.1");
    assert!(
        ip_denials.len() >= 19,
        "IP spellings not normalised to 127.0.0.1: {ip_denials:?}\nall: {:?}",
        network_records(&w.env)
    );
    let codes: Vec<String> = network_records(&w.env)
        .iter()
        .filter(|r| r["decision"] == "deny")
        .filter_map(|r| r["details"]["code"].as_str().map(str::to_string))
        .collect();
    for code in ["not-allowed", "host-mismatch"] {
        assert!(
            codes.iter().any(|c| c == code),
            "no {code} record: {codes:?}"
        );
    }
}

#[test]
fn connect_with_another_sni_is_refused() {
    let Some(w) = World::new() else { return };
    let s = w.https();
    let connect = format!("CONNECT allowed.test:{s} HTTP/1.1\r\nHost: allowed.test:{s}\r\n\r\n");
    let cases = [
        case(
            "control",
            json!([
                ["send", connect], ["http"], ["tls", "allowed.test", w.ca()],
                ["send", format!("GET /hello HTTP/1.1\r\nHost: allowed.test:{s}\r\nConnection: close\r\n\r\n")],
                ["http"],
            ]),
        ),
        case(
            "sni-other",
            json!([["send", connect], ["http"], ["tls", "other.test", w.ca()]]),
        ),
        case(
            "sni-github",
            json!([["send", connect], ["http"], ["tls", "api.github.test", w.ca()]]),
        ),
    ];
    let results = w.drive(&w.standard_policy(), &cases);
    let control = result(&results, "control");
    assert_eq!(control["error"], Value::Null, "{control}");
    assert!(control["results"][2]["body"]
        .as_str()
        .unwrap()
        .contains("tls: true"));
    for name in ["sni-other", "sni-github"] {
        let r = result(&results, name);
        assert!(
            r["error"].is_string(),
            "TLS with another SNI went through: {r}"
        );
    }
    // The upstream never saw a handshake naming another host.
    let snis: Vec<Option<String>> =
        w.up.https
            .connections()
            .into_iter()
            .map(|c| c.sni)
            .collect();
    // (The proxy may connect before it reads the ClientHello: a connection without
    // any handshake is fine, one that carried the other name is not.)
    assert!(
        snis.iter()
            .all(|s| s.is_none() || s.as_deref() == Some("allowed.test")),
        "{snis:?}"
    );
    w.assert_forbidden_untouched();
    w.assert_only_looked_up(&["allowed.test"]);
    w.wait_network("sni-mismatch", |r| r["details"]["code"] == "sni-mismatch");
}

/// F4: a tunnel's TLS must name the host. A ClientHello without SNI (a shared
/// front end's default site) is refused through CONNECT and SOCKS5 alike, and
/// audited as `no-sni`; the `insecure-no-sni` option opens it for one entry.
/// Controls: TLS with the name through both, and plain HTTP through a CONNECT
/// tunnel on a port the entry lists explicitly.
#[test]
fn tunnels_need_tls_naming_the_host() {
    let Some(w) = World::new() else { return };
    let (h, s) = (w.http(), w.https());
    let connect = |host: &str, port: u16| {
        format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n")
    };
    let hello = |host: &str, port: u16| {
        format!("GET /hello HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n")
    };
    let socks_then = |host: &str, port: u16, more: Value| {
        let mut steps = socks_domain(host, port).as_array().unwrap().clone();
        steps.extend(more.as_array().unwrap().iter().cloned());
        Value::Array(steps)
    };
    let cases = [
        case(
            "connect-nosni",
            json!([
                ["send", connect("allowed.test", s)],
                ["http"],
                ["tls_nosni", w.ca()]
            ]),
        ),
        case(
            "socks-nosni",
            socks_then("api.github.test", s, json!([["tls_nosni", w.ca()]])),
        ),
        case(
            "connect-sni",
            json!([
                ["send", connect("allowed.test", s)],
                ["http"],
                ["tls", "allowed.test", w.ca()],
                ["send", hello("allowed.test", s)],
                ["http"],
            ]),
        ),
        case(
            "socks-sni",
            socks_then(
                "api.github.test",
                s,
                json!([
                    ["tls", "api.github.test", w.ca()],
                    ["send", hello("api.github.test", s)],
                    ["http"]
                ]),
            ),
        ),
        case(
            "connect-plain-listed-port",
            json!([
                ["send", connect("allowed.test", h)],
                ["http"],
                ["send", hello("allowed.test", h)],
                ["http"]
            ]),
        ),
    ];
    let results = w.drive(&w.standard_policy(), &cases);
    for name in ["connect-nosni", "socks-nosni"] {
        let r = result(&results, name);
        assert!(r["error"].is_string(), "TLS without SNI went through: {r}");
        assert!(
            !r["results"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["tls"].is_string()),
            "{r}"
        );
    }
    for name in ["connect-sni", "socks-sni", "connect-plain-listed-port"] {
        let r = result(&results, name);
        assert_eq!(r["error"], Value::Null, "{r}");
        let last = r["results"].as_array().unwrap().last().unwrap();
        assert_eq!(last["status"], 200, "{r}");
        assert!(
            last["body"]
                .as_str()
                .unwrap()
                .contains("hello from warden-e2e"),
            "{r}"
        );
    }
    let records = w.wait_network("two no-sni denials", |r| {
        r["details"]["code"] == "no-sni" && r["details"]["protocol"] == "socks5"
    });
    let nosni: Vec<&Value> = records
        .iter()
        .filter(|r| r["details"]["code"] == "no-sni")
        .collect();
    assert_eq!(nosni.len(), 2, "{nosni:?}");
    for r in &nosni {
        assert_eq!(r["decision"], "deny", "{r}");
        assert!(
            r["reason"].as_str().unwrap().contains("names no server"),
            "{r}"
        );
    }
    assert_eq!(nosni[0]["details"]["protocol"], "connect");
    assert_eq!(nosni[0]["resource"], format!("allowed.test:{s}"));
    // No request reached the HTTPS upstream but the two controls'.
    assert_eq!(w.up.https.requests().len(), 2, "{}", w.up.describe());
    w.assert_forbidden_untouched();

    // The option, for one entry.
    let legacy = w.policy(
        "legacy",
        &[format!("allowed.test:{s} private insecure-no-sni")],
        false,
    );
    let results = w.drive(
        &legacy,
        &[case(
            "nosni-allowed",
            json!([
                ["send", connect("allowed.test", s)],
                ["http"],
                ["tls_nosni", w.ca()],
                ["send", hello("allowed.test", s)],
                ["http"],
            ]),
        )],
    );
    let r = result(&results, "nosni-allowed");
    assert_eq!(r["error"], Value::Null, "{r}");
    assert_eq!(r["results"][2]["status"], 200, "{r}");
    let https = w.up.https.connections();
    assert!(https.iter().any(|c| c.sni.is_none()), "{https:?}");
}

/// The forward proxy refuses TRACE and TRACK (405) and methods it does not know
/// (501) before any lookup, each an audited denial; GET and POST still work.
#[test]
fn trace_and_unknown_methods_are_refused() {
    let Some(w) = World::new() else { return };
    let h = w.http();
    let target = format!("http://allowed.test:{h}/hello");
    let req = |method: &str, body: &str| {
        format!(
            "{method} {target} HTTP/1.1\r\nHost: allowed.test:{h}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let cases = [
        case("trace", json!([["send", req("TRACE", "")], ["http"]])),
        case("track", json!([["send", req("TRACK", "")], ["http"]])),
        case("unknown", json!([["send", req("BREW", "")], ["http"]])),
        case("get", json!([["send", req("GET", "")], ["http"]])),
        case(
            "post",
            json!([["send", format!(
                "POST http://allowed.test:{h}/echo HTTP/1.1\r\nHost: allowed.test:{h}\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
            )], ["http"]]),
        ),
    ];
    w.up.clear();
    let results = w.drive(&w.standard_policy(), &cases);
    for (name, status, code) in [
        ("trace", 405, "method-refused"),
        ("track", 405, "method-refused"),
        ("unknown", 501, "method-unknown"),
    ] {
        let r = first_response(&results, name);
        assert_eq!(r["status"], status, "{name}: {r}");
        assert_eq!(r["headers"]["x-warden-denied"], code, "{name}: {r}");
    }
    assert_eq!(first_response(&results, "get")["status"], 200);
    let post = first_response(&results, "post");
    assert_eq!(
        (post["status"].clone(), post["body"].clone()),
        (json!(200), json!("hello"))
    );
    let methods: Vec<String> =
        w.up.http
            .requests()
            .iter()
            .map(|r| r.method.clone())
            .collect();
    assert_eq!(methods, ["GET", "POST"], "{}", w.up.describe());
    let records = w.wait_network("method-unknown", |r| {
        r["details"]["code"] == "method-unknown"
    });
    let refused: Vec<&Value> = records
        .iter()
        .filter(|r| {
            r["details"]["code"]
                .as_str()
                .is_some_and(|c| c.starts_with("method-"))
        })
        .collect();
    assert_eq!(refused.len(), 3, "{refused:?}");
    assert!(refused
        .iter()
        .all(|r| r["decision"] == "deny" && r["resource"] == format!("allowed.test:{h}")));
}

/// A listed name that resolves to loopback, link-local (metadata), private or CGNAT
/// addresses is refused after exactly one lookup unless its entry opens it; F11:
/// `allow_private` no longer opens loopback or metadata to every listed name, and
/// the entry's `private` option opens loopback but never metadata.
#[test]
fn private_addresses_need_an_explicit_grant() {
    let Some(w) = World::new() else { return };
    let h = w.http();
    let names = ["loopback.test", "meta.test", "private.test", "cgnat.test"];
    let allow: Vec<String> = names.iter().map(|n| format!("{n}:{h}")).collect();
    let strict = w.policy("strict", &allow, false);
    let cases: Vec<Value> = names
        .iter()
        .map(|n| {
            case(
                n,
                json!([
                    [
                        "send",
                        get(&format!("http://{n}:{h}/hello"), &format!("{n}:{h}"))
                    ],
                    ["http"]
                ]),
            )
        })
        .collect();
    let results = w.drive(&strict, &cases);
    for n in names {
        assert_denied(&results, n, Some("private-address"));
        let a_queries =
            w.up.dns
                .queries_for(n)
                .into_iter()
                .filter(|q| q.qtype == TYPE_A)
                .count();
        assert_eq!(a_queries, 1, "{n}: {:?}", w.up.dns.queries_for(n));
    }
    assert!(
        w.up.http.connections().is_empty(),
        "{:?}",
        w.up.http.connections()
    );
    let records = w.wait_network("private-address", |r| {
        r["details"]["code"] == "private-address" && r["details"]["host"] == "cgnat.test"
    });
    let meta = records
        .iter()
        .find(|r| r["details"]["host"] == "meta.test" && r["action"] == "connect")
        .expect("meta.test decision");
    assert_eq!(meta["decision"], "deny", "{meta}");
    assert_eq!(meta["details"]["code"], "private-address", "{meta}");
    assert_eq!(
        meta["details"]["address"],
        format!("169.254.169.254:{h}"),
        "{meta}"
    );

    // allow_private: loopback and metadata stay refused for names.
    let lax = w.policy("lax", &allow, true);
    let results = w.drive(&lax, &cases[..2]);
    assert_denied(&results, "loopback.test", Some("private-address"));
    assert_denied(&results, "meta.test", Some("private-address"));
    assert!(w.up.http.connections().is_empty());
    let denied = w.wait_network("loopback.test refused with allow_private", |r| {
        r["details"]["host"] == "loopback.test"
            && r["details"]["code"] == "private-address"
            && r["details"]["rule"] == format!("loopback.test:{h}")
            && r["reason"]
                .as_str()
                .is_some_and(|t| t.contains("does not open"))
    });
    assert!(!denied.is_empty());

    // Control: the entry's `private` option opens loopback for that name, and
    // still not metadata.
    let per_entry: Vec<String> = allow.iter().map(|a| format!("{a} private")).collect();
    let open = w.policy("open", &per_entry, false);
    let results = w.drive(&open, &cases[..2]);
    assert_eq!(first_response(&results, "loopback.test")["status"], 200);
    assert_denied(&results, "meta.test", Some("private-address"));
    assert_eq!(w.up.http.connections_to(IP_ALLOWED).len(), 1);
}

/// A name whose answer changes between lookups: the connection goes to the address
/// that was vetted, and the name is looked up once.
#[test]
fn rebinding_connects_to_the_vetted_address() {
    let Some(w) = World::new() else { return };
    let h = w.http();
    // With allow_private: first answer 127.0.0.2, later ones 127.0.0.1.
    let results = w.drive(
        &w.standard_policy(),
        &[case(
            "rebind-private",
            json!([
                [
                    "send",
                    get(
                        &format!("http://rebind-private.test:{h}/hello"),
                        &format!("rebind-private.test:{h}")
                    )
                ],
                ["http"]
            ]),
        )],
    );
    let r = first_response(&results, "rebind-private");
    assert_eq!(r["status"], 200, "{r}");
    assert!(
        r["body"].as_str().unwrap().contains("local: 127.0.0.2"),
        "{r}"
    );
    assert!(w.up.http.connections_to(IP_ALLOWED).is_empty());
    let a = |w: &World, n: &str| {
        w.up.dns
            .queries_for(n)
            .into_iter()
            .filter(|q| q.qtype == TYPE_A)
            .count()
    };
    assert_eq!(a(&w, "rebind-private.test"), 1, "{}", w.up.describe());

    // Without allow_private: first answer global (93.184.216.34), then 127.0.0.1. The
    // proxy connects to the global address (wherever that leads) and never to the
    // loopback one a second lookup would give.
    let policy = w.policy("rebind", &[format!("rebind.test:{h}")], false);
    let c = w.curl(&policy, &[&format!("http://rebind.test:{h}/hello")]);
    assert!(
        !c.stdout().contains("hello from warden-e2e"),
        "reached the loopback upstream: {}",
        c.stdout()
    );
    assert!(
        w.up.http.connections_to(IP_ALLOWED).is_empty(),
        "{}",
        w.up.describe()
    );
    assert_eq!(a(&w, "rebind.test"), 1, "{}", w.up.describe());
    let records = w.wait_network("rebind.test", |r| r["details"]["host"] == "rebind.test");
    let d = records
        .iter()
        .find(|r| r["details"]["host"] == "rebind.test" && r["action"] == "connect")
        .unwrap();
    assert_eq!(
        d["details"]["address"],
        format!("{REBIND_FIRST}:{h}"),
        "{d}"
    );
}

// ---------------------------------------------------------------------------------
// An MCP server inside: fixture counts in ps, mcp-server-fetch

#[test]
fn ps_counts_allowed_and_denied_connections() {
    let Some(w) = World::new() else { return };
    let h = w.http();
    let mut c = w.env.fixture_session(&w.standard_policy(), &[], &[]);
    c.initialize();
    let mut exchange = |target: &str, host: &str| {
        c.tool_json(
            "tcp_exchange",
            json!({"addr": PROXY, "data": get(target, host), "timeout_ms": 20000}),
        )
    };
    for _ in 0..2 {
        let r = exchange(
            &format!("http://allowed.test:{h}/hello"),
            &format!("allowed.test:{h}"),
        );
        assert!(
            r["reply"].as_str().unwrap().starts_with("HTTP/1.1 200"),
            "{r}"
        );
    }
    for name in ["notlisted.test", "github.test", "2130706433"] {
        let r = exchange(&format!("http://{name}:{h}/hello"), &format!("{name}:{h}"));
        assert!(
            r["reply"].as_str().unwrap().starts_with("HTTP/1.1 403"),
            "{r}"
        );
    }
    let sessions = w.env.sessions();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["network_allowed"], 2, "{}", sessions[0]);
    assert_eq!(sessions[0]["network_denied"], 3, "{}", sessions[0]);
    // The last denial names the last refused target (an IP literal: no rule
    // lists 127.0.0.1) and why.
    let last = sessions[0]["last_denial"].as_str().unwrap_or_default();
    assert!(
        last.starts_with(&format!("127.0.0.1:{h}: ")) && last.contains("not in network.allow"),
        "{}",
        sessions[0]
    );
    // Direct connections other than the proxy fail (Landlock and the namespace).
    let r = c.tool_json(
        "tcp_exchange",
        json!({"addr": w.up.http.addr().to_string(), "data": "x", "timeout_ms": 3000}),
    );
    assert_eq!(r["connected"], false, "{r}");
    c.close_stdin();
    assert_eq!(c.wait_code(Duration::from_secs(20)), 0, "{}", c.stderr());
    w.assert_forbidden_untouched();
}

/// mcp-server-fetch honours the proxy variables (httpx) and, before each
/// request, refuses names that resolve to a non-public address (its SSRF
/// guard). The test's names resolve on the host to loopback upstreams, so
/// the sandbox's resolver (network.mode `both`, the default) gives them
/// synthetic addresses, which the guard refuses as it would refuse the
/// loopback ones unsandboxed: the server runs with `--allow-private-ips`,
/// as it would need to without Warden. (A public name gets its public
/// addresses, which the guard accepts: warden-proxy's resolver tests.)
#[test]
fn mcp_server_fetch_through_the_proxy() {
    let Some(w) = World::new() else { return };
    let (h, s) = (w.http(), w.https());
    let python = w.clients.python.clone();
    let mut cmd = w.env.shim([
        "--policy".into(),
        w.standard_policy().into_os_string(),
        "--".into(),
        python.into_os_string(),
        OsString::from("-m"),
        OsString::from("mcp_server_fetch"),
        OsString::from("--allow-private-ips"),
    ]);
    // The CA for httpx (SSL_CERT_FILE) reaches the server through env.allow.
    cmd.env("SSL_CERT_FILE", w.ca());
    let mut c = McpClient::spawn(cmd);
    c.set_timeout(Duration::from_secs(90));
    c.initialize();
    let tools = c.call("tools/list", json!({}));
    assert!(tools.to_string().contains("\"fetch\""), "{tools}");

    let text = c.tool_text(
        "fetch",
        json!({"url": format!("http://allowed.test:{h}/html"), "raw": true}),
    );
    assert!(text.contains("Hello from warden-e2e"), "{text}");
    let text = c.tool_text(
        "fetch",
        json!({"url": format!("https://api.github.test:{s}/html"), "raw": true}),
    );
    assert!(text.contains("host api.github.test"), "{text}");

    // A denied host: a clear tool error naming the 403.
    let r = c.call_tool(
        "fetch",
        json!({"url": format!("http://notlisted.test:{h}/html")}),
    );
    assert!(is_tool_error(&r), "{r}");
    assert!(r.to_string().contains("403"), "{r}");
    // An allowed host redirecting to a denied one.
    let to = percent_encode(&format!("http://other.test:{h}/html"));
    let r = c.call_tool(
        "fetch",
        json!({"url": format!("http://allowed.test:{h}/redirect?to={to}")}),
    );
    assert!(is_tool_error(&r), "{r}");

    c.close_stdin();
    c.wait_exit(Duration::from_secs(30));
    // robots.txt was asked of the allowed hosts, through the proxy.
    assert!(w
        .up
        .http
        .requests_to(IP_ALLOWED)
        .iter()
        .any(|r| r.target == "/robots.txt"));
    w.assert_forbidden_untouched();
    w.assert_only_looked_up(&["allowed.test", "api.github.test"]);
}

#[test]
fn secrets_in_requests_stay_out_of_the_audit_store() {
    // A query string, proxy credentials and a bearer token pass through (or
    // are refused) but never reach a record: network records name host:port.
    let Some(w) = World::new() else { return };
    let h = w.http();
    let mut c = w.env.fixture_session(&w.standard_policy(), &[], &[]);
    c.initialize();
    let secret = "S3CRET-QUERY-VALUE";
    let req = format!(
        "GET http://allowed.test:{h}/hello?token={secret} HTTP/1.1\r\nHost: allowed.test:{h}\r\n\
         Proxy-Authorization: Basic UFJPWFktQ1JFRC1TRUNSRVQ=\r\nAuthorization: Bearer BEARER-SECRET\r\n\
         Connection: close\r\n\r\n"
    );
    let r = c.tool_json(
        "tcp_exchange",
        json!({"addr": PROXY, "data": req, "timeout_ms": 20000}),
    );
    assert!(
        r["reply"].as_str().unwrap().starts_with("HTTP/1.1 200"),
        "{r}"
    );
    let denied = format!(
        "GET http://notlisted.test:{h}/x?token={secret} HTTP/1.1\r\nHost: notlisted.test:{h}\r\nConnection: close\r\n\r\n"
    );
    let r = c.tool_json(
        "tcp_exchange",
        json!({"addr": PROXY, "data": denied, "timeout_ms": 20000}),
    );
    assert!(
        r["reply"].as_str().unwrap().starts_with("HTTP/1.1 403"),
        "{r}"
    );
    c.close_stdin();
    assert_eq!(c.wait_code(Duration::from_secs(20)), 0, "{}", c.stderr());
    let store: String = std::fs::read_dir(w.env.state.join("audit"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(store.contains("\"network\""), "no network records: {store}");
    for s in [secret, "UFJPWFktQ1JFRC1TRUNSRVQ", "BEARER-SECRET", "token="] {
        assert!(!store.contains(s), "{s} in the audit store");
    }
}
