//! `warden-bench egress`: the egress proxy against a direct connection, side by
//! side in one run, to the same upstream on the host's loopback.
//!
//! - throughput: `curl` downloads N MiB (default 1024) from the upstream, on the
//!   host directly, on the host through a plain relay (the floor of any proxy:
//!   a second loopback hop and nothing else), and inside the sandbox through the
//!   proxy (HTTP forward proxy);
//! - throughput behind a link (root only): the same download from an upstream
//!   in a network namespace behind a veth pair shaped to `--link-gbit` (default
//!   1) Gbit/s, direct and through the proxy;
//! - latency: a Python client makes R (default 1000) sequential small requests,
//!   each on a new connection, on the host directly and inside the sandbox through
//!   the proxy (which resolves `localhost` and vets it per request); median, p90;
//! - transparent egress (`network.mode: transparent`, the client told of no
//!   proxy): the same download with `curl --noproxy '*'` to a name the
//!   bench's own DNS server answers with the upstream's loopback address,
//!   relayed (the default hand-over) and `direct`; and what `connect()`
//!   costs: R blocking connects from Python to the name's synthetic address
//!   inside, each timed alone, against R connects to the upstream on the host.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::{arg, bin, median, Daemon};

fn nix_is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// A minimal HTTP/1.1 upstream: `GET /bytes/N` streams N bytes, anything else
/// answers `ok`; one request per connection.
fn upstream() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            std::thread::spawn(move || serve(conn));
        }
    });
    port
}

fn serve(conn: TcpStream) {
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    loop {
        let mut h = String::new();
        match r.read_line(&mut h) {
            Ok(0) | Err(_) => return,
            Ok(_) if h == "\r\n" || h == "\n" => break,
            Ok(_) => {}
        }
    }
    let mut w = r.into_inner();
    let n: u64 = path
        .strip_prefix("/bytes/")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if n == 0 {
        let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        return;
    }
    let _ = write!(
        w,
        "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n"
    );
    let chunk = vec![b'x'; 256 * 1024];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len() as u64) as usize;
        if w.write_all(&chunk[..k]).is_err() {
            return;
        }
        left -= k as u64;
    }
}

/// The floor of any proxy on this machine: a plain relay (no parsing, no
/// policy, no sandbox) from a local port to the upstream, one thread per
/// direction copying with a 1 MiB buffer. The direct download through it
/// shows what a second loopback hop costs by itself.
fn plain_relay(upstream: u16) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind relay");
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in l.incoming().flatten() {
            let Ok(up) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let pairs = [
                (client.try_clone().unwrap(), up.try_clone().unwrap()),
                (up, client),
            ];
            for (mut from, mut to) in pairs {
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 20];
                    loop {
                        match std::io::Read::read(&mut from, &mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if to.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
    port
}

/// An upstream behind a real link: a network namespace joined to the host by a
/// veth pair whose upstream end is shaped to `gbit` Gbit/s (tbf), serving one
/// `GET` of `bytes` per connection from a Python server inside. Root only
/// (`ip netns`, `tc`); removed on drop.
struct Link {
    ns: String,
    host_if: String,
    server: std::process::Child,
    addr: String,
}

const LINK_SERVER: &str = r#"
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 8080)); s.listen(8)
def serve(c):
    c.recv(65536)
    n = int(sys.argv[2])
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % n)
    buf = b"x" * (1 << 20)
    while n > 0:
        k = min(n, len(buf)); c.sendall(buf[:k]); n -= k
    c.close()
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,)).start()
"#;

impl Link {
    fn start(gbit: usize, bytes: u64) -> Option<Link> {
        let sh = |cmd: &str| {
            Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let id = std::process::id() % 100_000;
        let (ns, host_if, up_if) = (
            format!("wbench{id}"),
            format!("wbh{id}"),
            format!("wbu{id}"),
        );
        let setup = format!(
            "ip netns add {ns} && ip link add {host_if} type veth peer name {up_if} && \
             ip link set {up_if} netns {ns} && ip addr add 10.203.0.1/24 dev {host_if} && \
             ip link set {host_if} up && ip netns exec {ns} ip addr add 10.203.0.2/24 dev {up_if} && \
             ip netns exec {ns} ip link set {up_if} up && ip netns exec {ns} ip link set lo up && \
             ip netns exec {ns} tc qdisc add dev {up_if} root tbf rate {gbit}gbit burst 256kb latency 50ms"
        );
        if !sh(&setup) {
            sh(&format!("ip netns del {ns}; ip link del {host_if}"));
            return None;
        }
        let server = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "/usr/bin/python3",
                "-c",
                LINK_SERVER,
                "10.203.0.2",
            ])
            .arg(bytes.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let link = Link {
            ns,
            host_if,
            server,
            addr: "10.203.0.2:8080".into(),
        };
        for _ in 0..100 {
            if TcpStream::connect(&link.addr).is_ok() {
                return Some(link);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ip netns del {}; ip link del {} 2>/dev/null",
                self.ns, self.host_if
            ))
            .status();
    }
}

/// Runs `argv` directly (`policy` None) or through the shim with `policy`;
/// returns stdout.
fn run(argv: &[&str], socket: &Path, policy: Option<&Path>) -> String {
    let mut c = match policy {
        None => {
            let mut c = Command::new(argv[0]);
            c.args(&argv[1..]);
            for v in [
                "HTTP_PROXY",
                "HTTPS_PROXY",
                "ALL_PROXY",
                "http_proxy",
                "https_proxy",
                "all_proxy",
            ] {
                c.env_remove(v);
            }
            c
        }
        Some(p) => {
            let mut c = Command::new(bin("warden-shim"));
            c.arg("--socket")
                .arg(socket)
                .arg("--no-autostart")
                .arg("--policy")
                .arg(p);
            c
        }
    };
    let out = c
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run client");
    assert!(out.status.success(), "{argv:?}: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A policy running `argv` that allows `localhost:PORT`, in `network.mode`
/// `mode` (None: the default, `both`).
fn policy(
    dir: &Path,
    name: &str,
    argv: &[&str],
    port: u16,
    mode: Option<&str>,
) -> std::path::PathBuf {
    let cmd: Vec<String> = argv
        .iter()
        .map(|a| serde_json::to_string(a).unwrap())
        .collect();
    let mode = mode.map(|m| format!("  mode: {m}\n")).unwrap_or_default();
    let text = format!(
        "command: [{}]\nnetwork:\n{mode}  allow: [\"localhost:{port}\"]\n  allow_private: true\n",
        cmd.join(", ")
    );
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Sequential small requests, one connection each; prints each duration in µs.
const LATENCY_PY: &str = r#"
import sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
for _ in range(5):
    urllib.request.urlopen(url).read()
out = []
for _ in range(n):
    t = time.perf_counter_ns()
    urllib.request.urlopen(url).read()
    out.append((time.perf_counter_ns() - t) // 1000)
print(" ".join(map(str, out)))
"#;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// The bench's DNS server on the host's loopback: every A question is
/// answered with 127.0.0.1, everything else gets an empty answer. Returns
/// its address, for `wardend --dns`.
fn dns_server() -> String {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind dns");
    let addr = sock.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            if n < 12 {
                continue;
            }
            // The question: labels, then type and class.
            let mut i = 12;
            while i < n && buf[i] != 0 {
                i += 1 + buf[i] as usize;
            }
            if i + 5 > n {
                continue;
            }
            let qtype = u16::from_be_bytes([buf[i + 1], buf[i + 2]]);
            let end = i + 5;
            let mut r = buf[..end].to_vec();
            r[2] = 0x81; // a response, recursion desired
            r[3] = 0x80; // recursion available, no error
            r[6..12].copy_from_slice(&[0, u8::from(qtype == 1), 0, 0, 0, 0]);
            if qtype == 1 {
                r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
            }
            let _ = sock.send_to(&r, from);
        }
    });
    addr
}

/// Blocking connects, each timed alone (µs), to `host` `port` resolved once.
const CONNECT_PY: &str = r#"
import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
addr = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
out = []
for i in range(n + 5):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t = time.perf_counter_ns()
    s.connect(addr)
    d = (time.perf_counter_ns() - t) // 1000
    s.close()
    if i >= 5:
        out.append(d)
print(" ".join(map(str, out)))
"#;

fn transparent_policy(dir: &Path, name: &str, argv: &[&str], entry: &str) -> std::path::PathBuf {
    let cmd: Vec<String> = argv
        .iter()
        .map(|a| serde_json::to_string(a).unwrap())
        .collect();
    let text = format!(
        "command: [{}]\nnetwork:\n  mode: transparent\n  allow: [\"{entry}\"]\n",
        cmd.join(", ")
    );
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

pub fn main() {
    let mib = arg("--mib", 1024);
    let requests = arg("--requests", 1000);
    let runs = arg("--runs", 3);
    let dns = dns_server();
    let daemon = Daemon::start_with(&["--dns", &dns]);
    let s = daemon.socket.clone();
    let port = upstream();
    let dir = tempfile::tempdir().unwrap();

    let url = format!("http://localhost:{port}/bytes/{}", mib << 20);
    let curl = [
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{speed_download}",
        url.as_str(),
    ];
    let curl_policy = policy(dir.path(), "curl.yaml", &curl, port, None);
    let relay = plain_relay(port);
    let relayed_url = format!("http://localhost:{relay}/bytes/{}", mib << 20);
    let curl_relayed = [
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{speed_download}",
        relayed_url.as_str(),
    ];
    let named_url = format!("http://bench.test:{port}/bytes/{}", mib << 20);
    let curl_named = [
        "curl",
        "-sS",
        "--noproxy",
        "*",
        "-o",
        "/dev/null",
        "-w",
        "%{speed_download}",
        named_url.as_str(),
    ];
    let entry = format!("bench.test:{port} private");
    let t_relayed = transparent_policy(dir.path(), "t-relayed.yaml", &curl_named, &entry);
    let t_direct = transparent_policy(
        dir.path(),
        "t-direct.yaml",
        &curl_named,
        &format!("{entry} direct"),
    );
    let (mut direct, mut proxied, mut relayed) = (Vec::new(), Vec::new(), Vec::new());
    let (mut tr, mut td) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let speed = |out: String| out.trim().parse::<f64>().expect("curl speed") / (1 << 20) as f64;
        direct.push(speed(run(&curl, &s, None)));
        relayed.push(speed(run(&curl_relayed, &s, None)));
        proxied.push(speed(run(&curl, &s, Some(&curl_policy))));
        tr.push(speed(run(&curl_named, &s, Some(&t_relayed))));
        td.push(speed(run(&curl_named, &s, Some(&t_direct))));
    }
    let (d, p, r) = (median(direct), median(proxied), median(relayed));
    let (tr, td) = (median(tr), median(td));
    println!("## egress throughput: {mib} MiB download with curl ({runs} runs each, median)\n");
    println!("| path | MiB/s |");
    println!("| --- | --- |");
    println!("| host, direct to the upstream | {d:.0} |");
    println!("| host, through a plain relay (no parsing, no policy) | {r:.0} |");
    println!("| sandbox, through the proxy (HTTP forward) | {p:.0} |");
    println!("| sandbox, transparent, relayed (`curl --noproxy`) | {tr:.0} |");
    println!("| sandbox, transparent, `direct` hand-over (`curl --noproxy`) | {td:.0} |");
    println!(
        "\nthroughput through the proxy: {:.0}% of direct, {:.0}% of the plain relay",
        100.0 * p / d,
        100.0 * p / r
    );
    println!(
        "transparent relayed: {:.0}% of the plain relay ({:.0}% of direct); direct hand-over: {:.0}% of direct\n",
        100.0 * tr / r,
        100.0 * tr / d,
        100.0 * td / d
    );

    // The same download from an upstream behind a 1 Gbit/s link (what a real
    // upstream looks like: the network, not this machine's CPU, sets the pace).
    let gbit = arg("--link-gbit", 1);
    match (nix_is_root(), Link::start(gbit, (mib as u64) << 20)) {
        (true, Some(link)) => {
            let url = format!("http://{}/x", link.addr);
            let curl = [
                "curl",
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{speed_download}",
                url.as_str(),
            ];
            let text = format!(
                "command: [{}]\nnetwork:\n  allow: [\"{}\"]\n",
                curl.iter()
                    .map(|a| serde_json::to_string(a).unwrap())
                    .collect::<Vec<_>>()
                    .join(", "),
                link.addr
            );
            let p = dir.path().join("link.yaml");
            std::fs::write(&p, text).unwrap();
            let (mut direct, mut proxied) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                let speed =
                    |out: String| out.trim().parse::<f64>().expect("curl speed") / (1 << 20) as f64;
                direct.push(speed(run(&curl, &s, None)));
                proxied.push(speed(run(&curl, &s, Some(&p))));
            }
            let (d, p) = (median(direct), median(proxied));
            println!("## egress throughput behind a {gbit} Gbit/s link: {mib} MiB with curl ({runs} runs each, median)\n");
            println!("| path | MiB/s |");
            println!("| --- | --- |");
            println!("| host, direct to the upstream | {d:.0} |");
            println!(
                "| sandbox, through the proxy (HTTP forward; the upstream's IP listed) | {p:.0} |"
            );
            println!(
                "\nthroughput through the proxy: {:.0}% of direct\n",
                100.0 * p / d
            );
        }
        _ => println!("(the {gbit} Gbit/s link scenario needs root, ip and tc: skipped)\n"),
    }

    let small = format!("http://localhost:{port}/small");
    let n = requests.to_string();
    let py = [
        "/usr/bin/python3",
        "-c",
        LATENCY_PY,
        small.as_str(),
        n.as_str(),
    ];
    let py_policy = policy(dir.path(), "py.yaml", &py, port, None);
    // The same without transparent egress: no `connect` is intercepted, so
    // the difference is what intercepting the client's connects to the
    // proxy costs under the default `both`.
    let py_proxy_only = policy(dir.path(), "py-proxy.yaml", &py, port, Some("proxy"));
    let parse = |out: String| -> Vec<f64> {
        out.split_whitespace()
            .map(|v| v.parse::<f64>().expect("µs"))
            .collect()
    };
    let mut d = parse(run(&py, &s, None));
    let mut p = parse(run(&py, &s, Some(&py_policy)));
    let mut po = parse(run(&py, &s, Some(&py_proxy_only)));
    let (dm, d90) = (pct(&mut d, 0.5), pct(&mut d, 0.9));
    let (pm, p90) = (pct(&mut p, 0.5), pct(&mut p, 0.9));
    let (pom, po90) = (pct(&mut po, 0.5), pct(&mut po, 0.9));
    println!("## egress latency: {requests} sequential small requests, a new connection each (Python urllib)\n");
    println!("| path | median | p90 |");
    println!("| --- | --- | --- |");
    println!("| host, direct to the upstream | {dm:.0} µs | {d90:.0} µs |");
    println!("| sandbox, through the proxy (`network.mode: both`, the default) | {pm:.0} µs | {p90:.0} µs |");
    println!("| sandbox, through the proxy (`network.mode: proxy`) | {pom:.0} µs | {po90:.0} µs |");
    println!(
        "\nadded latency per connection (median): {:.0} µs (`proxy` mode: {:.0} µs)\n",
        pm - dm,
        pom - dm
    );

    // connect() alone: the host's connect to the upstream against the
    // sandbox's to the name's synthetic address (held, decided, dialled by
    // the daemon, handed over), relayed and direct.
    let cpy = |host: &str| -> Vec<String> {
        [
            "/usr/bin/python3",
            "-c",
            CONNECT_PY,
            host,
            &port.to_string(),
            &n,
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let host_argv = cpy("127.0.0.1");
    let named_argv = cpy("bench.test");
    let host_argv: Vec<&str> = host_argv.iter().map(String::as_str).collect();
    let named_argv: Vec<&str> = named_argv.iter().map(String::as_str).collect();
    let c_relayed = transparent_policy(dir.path(), "c-relayed.yaml", &named_argv, &entry);
    let c_direct = transparent_policy(
        dir.path(),
        "c-direct.yaml",
        &named_argv,
        &format!("{entry} direct"),
    );
    let mut h = parse(run(&host_argv, &s, None));
    let mut cr = parse(run(&named_argv, &s, Some(&c_relayed)));
    let mut cd = parse(run(&named_argv, &s, Some(&c_direct)));
    let (hm, h90) = (pct(&mut h, 0.5), pct(&mut h, 0.9));
    let (rm, r90) = (pct(&mut cr, 0.5), pct(&mut cr, 0.9));
    let (dm2, d90) = (pct(&mut cd, 0.5), pct(&mut cd, 0.9));
    println!(
        "## transparent egress: {requests} blocking connect() calls, each timed alone (Python)\n"
    );
    println!("| path | median | p90 |");
    println!("| --- | --- | --- |");
    println!("| host, to the upstream | {hm:.0} µs | {h90:.0} µs |");
    println!("| sandbox, to the synthetic address, relayed | {rm:.0} µs | {r90:.0} µs |");
    println!("| sandbox, to the synthetic address, direct | {dm2:.0} µs | {d90:.0} µs |");
    println!(
        "\nadded by connect() (median): relayed {:.0} µs, direct {:.0} µs",
        rm - hm,
        dm2 - hm
    );
}
