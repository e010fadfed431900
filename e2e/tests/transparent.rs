//! Transparent egress (`network.mode`, docs/policy.md "Transparent egress",
//! tracker issue 13), end to end: the real daemon and shim, curl and Python
//! inside ignoring every proxy variable, upstreams and a recording DNS server
//! on the host's loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::time::Duration;

use serde_json::Value;
use warden_e2e::net::*;
use warden_e2e::*;

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

    fn run(&self, mode: &str, script: &str) -> (String, String) {
        let entry = format!("allowed.test:{} private", self.up.http.port());
        self.run_with(mode, &[entry], "", script)
    }

    /// `script` under a policy with these `network.allow` entries and
    /// `extra` YAML (top-level keys).
    fn run_with(
        &self,
        mode: &str,
        entries: &[String],
        extra: &str,
        script: &str,
    ) -> (String, String) {
        let allow: Vec<String> = entries.iter().map(|e| format!("{e:?}")).collect();
        let policy = self.env.policy(
            &format!("transparent-{mode}.yaml"),
            &format!(
                "version: 1\nname: transparent-{mode}\n{extra}network:\n  mode: {mode}\n  allow: [{}]\n",
                allow.join(", ")
            ),
        );
        let mut cmd = self.env.shim([
            "--policy",
            policy.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            script,
        ]);
        let out = run(&mut cmd, Duration::from_secs(90));
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

#[test]
fn allowlisted_names_are_reached_without_proxy_variables_and_nothing_else() {
    let Some(w) = World::new() else { return };
    let port = w.up.http.port();
    let curl = w.clients.curl.display().to_string();
    // Every proxy variable ignored (--noproxy '*'), as software that does
    // not know them.
    let get = |url: &str| {
        format!("{curl} --noproxy '*' -s -o /dev/null -w '%{{http_code}}\\n' --max-time 20 {url}; echo rc=$?")
    };
    let script = [
        get(&format!("http://allowed.test:{port}/hello")),
        get(&format!("http://other.test:{port}/hello")),
        get(&format!("http://93.184.215.14:{port}/hello")),
        get(&format!(
            "http://allowed.test:{}/hello",
            port.wrapping_add(1).max(1)
        )),
        "env | grep -ci _proxy; true".to_string(),
    ]
    .join("; ");
    let (stdout, stderr) = w.run("transparent", &script);
    let lines: Vec<&str> = stdout.lines().collect();
    // The allowlisted name: through the sandbox's resolver and the hand-over.
    assert_eq!(lines[0..2], ["200", "rc=0"], "{stdout}\n{stderr}");
    // Another name: NXDOMAIN (curl: could not resolve, 6), and the host's
    // DNS server was never asked for it.
    assert_eq!(lines[2..4], ["000", "rc=6"], "{stdout}");
    assert!(w.up.dns.queries_for("other.test").is_empty());
    // An address: refused at once (could not connect, 7).
    assert_eq!(lines[4..6], ["000", "rc=7"], "{stdout}");
    // The allowed name on a port its entry does not list: refused.
    assert_eq!(lines[6..8], ["000", "rc=7"], "{stdout}");
    // `transparent`: no proxy variables inside.
    assert_eq!(lines[8], "0", "{stdout}");
    let recs = audit_records(&w.env);
    let of = |action: &str, resource: &str| -> Vec<Value> {
        recs.iter()
            .filter(|r| {
                r["type"] == "network" && r["action"] == action && r["resource"] == resource
            })
            .cloned()
            .collect()
    };
    let resolved = of("resolve", "allowed.test");
    assert_eq!(resolved[0]["decision"], "allow", "{resolved:?}");
    assert!(resolved[0]["details"]["address"]
        .as_str()
        .unwrap()
        .starts_with("198.18."));
    assert_eq!(of("resolve", "other.test")[0]["decision"], "deny");
    let conn = of("connect", &format!("allowed.test:{port}"));
    assert_eq!(conn[0]["decision"], "allow", "{conn:?}");
    assert_eq!(conn[0]["details"]["protocol"], "transparent");
    let refused = of("connect", &format!("93.184.215.14:{port}"));
    assert_eq!(refused[0]["decision"], "deny", "{recs:?}");
    let wrong_port = of(
        "connect",
        &format!("allowed.test:{}", port.wrapping_add(1).max(1)),
    );
    assert_eq!(
        wrong_port[0]["details"]["code"], "not-allowed",
        "{wrong_port:?}"
    );
}

#[test]
fn both_keeps_the_proxy_variables_and_proxy_keeps_the_old_behaviour() {
    let Some(w) = World::new() else { return };
    let port = w.up.http.port();
    let curl = w.clients.curl.display().to_string();
    let script = format!(
        "{curl} -s -o /dev/null -w '%{{http_code}}\\n' --max-time 20 http://allowed.test:{port}/hello; \
         {curl} --noproxy '*' -s -o /dev/null -w '%{{http_code}}\\n' --max-time 20 http://allowed.test:{port}/hello; \
         test -e /etc/resolv.conf && echo resolver || echo none"
    );
    let (stdout, stderr) = w.run("both", &script);
    assert_eq!(stdout, "200\n200\nresolver\n", "{stderr}");
    // proxy: the same script, the transparent request fails at once.
    let (stdout, _) = w.run("proxy", &script);
    assert_eq!(stdout, "200\n000\nnone\n");
}

/// Python's socket API with a raw protocol, and Node's `http.get`, neither
/// told of any proxy: both reach the allowlisted name.
#[test]
fn raw_sockets_and_node_http_reach_an_allowlisted_name() {
    let Some(w) = World::new() else { return };
    let port = w.up.http.port();
    let node = find_on_path("node").expect("node on PATH");
    let script = format!(
        "/usr/bin/python3 -c '
import socket
s = socket.create_connection((\"allowed.test\", {port}), timeout=20)
s.sendall(b\"GET /hello HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n\")
print(s.recv(12).decode())
'; {node} -e 'require(\"http\").get(\"http://allowed.test:{port}/hello\", r => console.log(r.statusCode)).on(\"error\", e => console.log(e.code))'",
        node = node.display()
    );
    let (stdout, stderr) = w.run("transparent", &script);
    assert_eq!(stdout, "HTTP/1.1 200\n200\n", "{stderr}");
}

/// mcp-server-fetch with no proxy variables at all: its fetch tool reaches
/// the allowlisted host through the sandbox's resolver and the hand-over,
/// and a name the policy does not list fails as a tool error. The server
/// refuses non-public addresses on its own (an SSRF guard), and the
/// synthetic range is not public: it runs with `--allow-private-ips`, as
/// docs/policy.md says such clients need.
#[test]
fn mcp_server_fetch_works_with_the_proxy_variables_unset() {
    let Some(w) = World::new() else { return };
    let port = w.up.http.port();
    let policy = w.env.policy(
        "fetch-transparent.yaml",
        &format!(
            "version: 1\nname: fetch-transparent\nfilesystem:\n  read: [\"{}\"]\nnetwork:\n  mode: transparent\n  allow: [\"allowed.test:{port} private\"]\n",
            w.clients.deps.display()
        ),
    );
    let cmd = w.env.shim([
        std::ffi::OsString::from("--policy"),
        policy.into_os_string(),
        "--".into(),
        w.clients.python.clone().into_os_string(),
        "-m".into(),
        "mcp_server_fetch".into(),
        "--allow-private-ips".into(),
    ]);
    let mut c = McpClient::spawn(cmd);
    c.set_timeout(Duration::from_secs(90));
    c.initialize();
    let text = c.tool_text(
        "fetch",
        serde_json::json!({"url": format!("http://allowed.test:{port}/html"), "raw": true}),
    );
    assert!(text.contains("Hello from warden-e2e"), "{text}");
    let r = c.call_tool(
        "fetch",
        serde_json::json!({"url": format!("http://notlisted.test:{port}/html")}),
    );
    assert!(is_tool_error(&r), "{r}");
    c.close_stdin();
    c.wait_exit(Duration::from_secs(30));
    assert!(w.up.dns.queries_for("notlisted.test").is_empty());
}

/// The relay's checks of the bytes (the default hand-over): a TLS
/// ClientHello to an allowlisted name must name it, or the connection is
/// reset before any byte reaches the upstream (`sni-mismatch`); the control,
/// the same client naming the host, completes its request. UDP to a
/// synthetic address is refused at once (the resolver is the sandbox's one
/// UDP service), with a record; so are a raw (ICMP) and a ping socket.
#[test]
fn tls_must_name_the_host_and_udp_is_refused() {
    let Some(w) = World::new() else { return };
    let port = w.up.https.port();
    let ca = w.up.pki.ca_pem.display().to_string();
    let pki_dir = w.up.pki.ca_pem.parent().unwrap().display().to_string();
    let script = format!(
        "/usr/bin/python3 -c '
import errno, socket, ssl
def get(sni, verify):
    ctx = ssl.create_default_context(cafile=\"{ca}\")
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        s = socket.create_connection((\"allowed.test\", {port}), timeout=20)
        t = ctx.wrap_socket(s, server_hostname=sni)
        t.sendall(b\"GET /hello HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n\")
        print(sni, t.recv(12).decode())
    except OSError as e:
        print(sni, \"refused\")
get(\"allowed.test\", True)
get(\"evil.test\", False)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.connect((\"allowed.test\", 53))
    print(\"udp connected\")
except OSError as e:
    print(\"udp\", errno.errorcode[e.errno])
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    print(\"raw created\")
except OSError as e:
    print(\"raw\", errno.errorcode[e.errno])
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    print(\"ping created\")
except OSError as e:
    print(\"ping\", errno.errorcode[e.errno])
'"
    );
    let (stdout, stderr) = w.run_with(
        "transparent",
        &[format!("allowed.test:{port} private")],
        &format!("filesystem:\n  read: [\"{pki_dir}\"]\n"),
        &script,
    );
    assert_eq!(
        stdout,
        "allowed.test HTTP/1.1 200\nevil.test refused\nudp ENETUNREACH\nraw EPERM\nping EPROTONOSUPPORT\n",
        "{stderr}"
    );
    // The refused ClientHello never reached the upstream.
    let snis: Vec<Option<String>> =
        w.up.https
            .connections()
            .into_iter()
            .map(|c| c.sni)
            .collect();
    assert!(snis.contains(&Some("allowed.test".into())), "{snis:?}");
    assert!(!snis.contains(&Some("evil.test".into())), "{snis:?}");
    let recs = audit_records(&w.env);
    let net: Vec<&Value> = recs
        .iter()
        .filter(|r| r["type"] == "network" && r["action"] == "connect")
        .collect();
    assert!(
        net.iter()
            .any(|r| r["resource"] == format!("allowed.test:{port}")
                && r["decision"] == "deny"
                && r["details"]["code"] == "sni-mismatch"),
        "{net:?}"
    );
    assert!(
        net.iter()
            .any(|r| r["details"]["protocol"] == "udp" && r["decision"] == "deny"),
        "{net:?}"
    );
    // The raw and the ping socket: refused by the seccomp filter, recorded.
    let sockets = recs
        .iter()
        .filter(|r| {
            r["type"] == "policy"
                && r["action"] == "syscall"
                && r["resource"] == "socket"
                && r["decision"] == "deny"
        })
        .count();
    assert_eq!(sockets, 2, "{recs:?}");
}

/// A real `git daemon` on the host, its port allowlisted for a name.
struct GitDaemon {
    child: std::process::Child,
    port: u16,
}

impl GitDaemon {
    /// Serves `base` (every repository in it).
    fn start(base: &std::path::Path) -> GitDaemon {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--listen=127.0.0.1",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.display()))
            .arg(base)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("git daemon");
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return GitDaemon { child, port };
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        panic!("git daemon did not listen on {port}");
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Clients with their own resolver and connect, none told of a proxy:
/// Node 20's `fetch` (undici) and `git clone git://` from a real `git
/// daemon` on an allowed `host:port` both reach the allowlisted name.
#[test]
fn node_fetch_and_git_reach_an_allowlisted_name() {
    let Some(w) = World::new() else { return };
    let http = w.up.http.port();
    let node = find_on_path("node").expect("node on PATH");
    let base = w.env.root.join("git-served");
    std::fs::create_dir_all(&base).unwrap();
    let git = |args: &[&str], dir: &std::path::Path| {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    let work = w.env.root.join("git-work");
    std::fs::create_dir_all(&work).unwrap();
    git(&["init", "-q"], &work);
    std::fs::write(work.join("README"), "hello\n").unwrap();
    git(&["add", "README"], &work);
    git(&["commit", "-qm", "served over git://"], &work);
    git(
        &[
            "clone",
            "-q",
            "--bare",
            work.to_str().unwrap(),
            base.join("repo.git").to_str().unwrap(),
        ],
        &base,
    );
    let daemon = GitDaemon::start(&base);
    let script = format!(
        "{node} -e 'fetch(\"http://allowed.test:{http}/hello\").then(r => console.log(\"fetch\", r.status), e => console.log(\"fetch\", e.cause && e.cause.code))'; \
         git clone -q git://allowed.test:{git}/repo.git /tmp/clone && git -C /tmp/clone log -1 --format=%s",
        node = node.display(),
        git = daemon.port,
    );
    let (stdout, stderr) = w.run_with(
        "transparent",
        &[
            format!("allowed.test:{http} private"),
            format!("allowed.test:{} private", daemon.port),
        ],
        "",
        &script,
    );
    assert_eq!(stdout, "fetch 200\nserved over git://\n", "{stderr}");
    let recs = audit_records(&w.env);
    assert!(recs.iter().any(|r| r["type"] == "network"
        && r["action"] == "connect"
        && r["resource"] == format!("allowed.test:{}", daemon.port)
        && r["decision"] == "allow"
        && r["details"]["protocol"] == "transparent"));
}

/// The `direct` option: the upstream's own socket is handed over (the
/// sandbox's peer is the upstream's address, no `network.close` with byte
/// counts: no byte passed through the daemon), while the default relayed
/// connection's peer is a loopback address of the daemon's and its bytes
/// are counted.
#[test]
fn direct_hands_over_the_upstream_socket_itself() {
    let Some(w) = World::new() else { return };
    let port = w.up.http.port();
    let script = format!(
        "/usr/bin/python3 -c '
import socket
s = socket.create_connection((\"allowed.test\", {port}), timeout=20)
peer = s.getpeername()
s.sendall(b\"GET /hello HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n\")
print(s.recv(12).decode(), peer[1] == {port})
'"
    );
    let (direct, stderr) = w.run_with(
        "transparent",
        &[format!("allowed.test:{port} private direct")],
        "",
        &script,
    );
    assert_eq!(direct, "HTTP/1.1 200 True\n", "{stderr}");
    let closes = |recs: &[Value]| {
        recs.iter()
            .filter(|r| {
                r["type"] == "network"
                    && r["action"] == "close"
                    && r["resource"] == format!("allowed.test:{port}")
            })
            .count()
    };
    assert_eq!(closes(&audit_records(&w.env)), 0);
    let (relayed, stderr) = w.run("transparent", &script);
    assert_eq!(relayed, "HTTP/1.1 200 False\n", "{stderr}");
    assert_eq!(closes(&audit_records(&w.env)), 1);
}

/// The default mode (`both`, no `network.mode` in the policy): the proxy
/// variables are set, and a client that ignores them reaches the same
/// names. A public name is answered with its public address as the host
/// resolved it (so a client's own address check sees what it would see
/// unsandboxed), a loopback one with a synthetic address; a `connect` to
/// the public address is decided for its name (allowed on the listed port,
/// refused on another, each recorded under the name). An address an IP
/// entry lists is reached as itself; UDP datagrams to outside addresses
/// (`sendto`, `sendmsg`) are refused at once and recorded, while the
/// sandbox's resolver still answers over UDP.
#[test]
fn the_default_answers_public_names_with_their_addresses() {
    let Some(w) = World::new() else { return };
    let port = w.up.http.port();
    // An upstream on a non-loopback address of this host, for the IP entry.
    let host_ip = {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        s.connect("192.0.2.1:9")
            .ok()
            .and_then(|()| s.local_addr().ok())
            .map(|a| a.ip())
            .filter(|ip| !ip.is_loopback() && ip.is_ipv4())
    };
    let upstream = host_ip.map(|ip| {
        let l = std::net::TcpListener::bind((ip, 0)).unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            use std::io::Write;
            if let Ok((mut c, _)) = l.accept() {
                let _ = c.write_all(b"ip entry ok\n");
            }
        });
        addr
    });
    let mut allow = vec![
        "public.test:443".to_string(),
        format!("allowed.test:{port} private"),
    ];
    if let Some(a) = upstream {
        allow.push(a.to_string());
    }
    let allow: Vec<String> = allow.iter().map(|e| format!("{e:?}")).collect();
    let policy = w.env.policy(
        "default-mode.yaml",
        &format!(
            "version: 1\nname: default-mode\nnetwork:\n  allow: [{}]\n",
            allow.join(", ")
        ),
    );
    let ip_entry = upstream.map(|a| a.to_string()).unwrap_or_default();
    let script = format!(
        "/usr/bin/python3 -c '
import errno, os, socket
print(\"proxy\", \"HTTP_PROXY\" in os.environ)
print(\"public\", socket.gethostbyname(\"public.test\"))
print(\"loopback\", socket.gethostbyname(\"allowed.test\").startswith(\"198.18.\"))
# Blocking: answered once the daemon has dialled (or failed to: nothing
# may answer there from this machine), so the record is written by then.
try:
    socket.create_connection((\"{REBIND_FIRST}\", 443))
except OSError as e:
    pass
print(443, \"decided\")
try:
    socket.create_connection((\"{REBIND_FIRST}\", 80))
    print(80, \"handed over\")
except OSError as e:
    print(80, errno.errorcode[e.errno])
if \"{ip_entry}\":
    h, p = \"{ip_entry}\".rsplit(\":\", 1)
    print(socket.create_connection((h, int(p))).recv(100).decode().strip())
else:
    print(\"ip entry ok\")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for how in (\"sendto\", \"sendmsg\"):
    try:
        if how == \"sendto\":
            u.sendto(b\"q\", (\"8.8.8.8\", 53))
        else:
            u.sendmsg([b\"q\"], [], 0, (\"9.9.9.9\", 53))
        print(how, \"sent\")
    except OSError as e:
        print(how, errno.errorcode[e.errno])
'"
    );
    let mut cmd = w.env.shim([
        "--policy",
        policy.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        &script,
    ]);
    let out = run(&mut cmd, Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout,
        format!(
            "proxy True\npublic {REBIND_FIRST}\nloopback True\n443 decided\n80 ECONNREFUSED\n\
             ip entry ok\nsendto ENETUNREACH\nsendmsg ENETUNREACH\n"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs = audit_records(&w.env);
    let of = |action: &str, resource: &str| -> Vec<Value> {
        recs.iter()
            .filter(|r| {
                r["type"] == "network" && r["action"] == action && r["resource"] == resource
            })
            .cloned()
            .collect()
    };
    let resolved = of("resolve", "public.test");
    assert_eq!(resolved[0]["details"]["code"], "resolved", "{resolved:?}");
    assert_eq!(resolved[0]["details"]["address"], REBIND_FIRST.to_string());
    let synthetic = of("resolve", "allowed.test");
    assert_eq!(
        synthetic[0]["details"]["code"], "synthetic",
        "{synthetic:?}"
    );
    // The public address maps back to its name: the listed port is decided
    // (and dialled: nothing answers there, so it ends connect-failed), the
    // other refused before any hand-over.
    let listed = of("connect", "public.test:443");
    assert!(!listed.is_empty(), "{recs:?}");
    assert!(
        listed
            .iter()
            .all(|r| r["details"]["protocol"] == "transparent"),
        "{listed:?}"
    );
    let other = of("connect", "public.test:80");
    assert_eq!(other[0]["details"]["code"], "not-allowed", "{other:?}");
    if let Some(a) = upstream {
        let ip = of("connect", &a.to_string());
        assert_eq!(ip[0]["decision"], "allow", "{recs:?}");
    }
    for to in ["8.8.8.8:53", "9.9.9.9:53"] {
        let udp = of("connect", to);
        assert_eq!(udp[0]["details"]["protocol"], "udp", "{to}: {recs:?}");
        assert_eq!(udp[0]["decision"], "deny");
    }
}
