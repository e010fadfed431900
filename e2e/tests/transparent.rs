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
        let policy = self.env.policy(
            &format!("transparent-{mode}.yaml"),
            &format!(
                "version: 1\nname: transparent-{mode}\nnetwork:\n  mode: {mode}\n  allow: [\"allowed.test:{} private\"]\n",
                self.up.http.port()
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
