//! `warden-bench`: measures Warden side by side with a direct baseline in one
//! run, on the project's own MCP fixture server.
//!
//! Run: `cargo build --release --workspace && target/release/warden-bench`
//! (`warden-bench egress`: the egress proxy against a direct connection, see
//! `egress.rs`; `warden-bench audit`: audit store appends, group commit against
//! an fsync per record, see `audit.rs`; `warden-bench files`: what file-access
//! auditing costs, see `files.rs`; `warden-bench create` and `write`: what the
//! creation guard adds to creating files and to opening files for writing;
//! `warden-bench sessions`: many concurrent idle sessions, see `sessions.rs`;
//! `warden-bench launch-true`: spawn to exit of `/bin/true` directly, in
//! bwrap, through the shim and in the sandbox alone, see `launch.rs`)
//! (options: `--launches N` (default 100), `--requests N` (default 1000)).
//!
//! - launch: time from spawning the process to the first byte of the reply to
//!   `initialize`, for the fixture run directly and through `warden-shim`
//!   (daemon already running);
//! - round trip: 1000 sequential JSON-RPC `tools/call echo` requests on one
//!   session, direct and through the shim: median and p99.
#![forbid(unsafe_code)]
// A benchmark: a failed set-up step ends the run with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod audit;
mod egress;
mod files;
mod launch;
mod sessions;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WARDEN_BIN_DIR") {
        return PathBuf::from(d);
    }
    std::env::current_exe()
        .expect("current_exe")
        .parent()
        .expect("exe dir")
        .to_path_buf()
}

fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.is_file(),
        "{} not found: build first with cargo build --release --workspace",
        p.display()
    );
    p
}

struct Daemon {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start() -> Daemon {
        Daemon::start_with(&[])
    }

    /// With these extra `wardend` arguments.
    fn start_with(extra: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let socket = run.join("wardend.sock");
        let child = Command::new(bin("wardend"))
            .arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(extra)
            .env("WARDEN_LOG", "warn")
            // Measured as root too (this VM): a root daemon runs servers only
            // when told to (see docs/security-model.md; `wardend::ROOT_SERVERS_ENV`,
            // spelled out: the benchmarks drive the daemon's binary, not its crate).
            .env(
                "WARDEN_DANGEROUSLY_RUN_SERVERS_AS_ROOT",
                if warden_core::paths::current_uid() == 0 {
                    "1"
                } else {
                    "0"
                },
            )
            .stdin(Stdio::null())
            .spawn()
            .expect("start wardend");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "wardend did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        Daemon {
            child,
            socket,
            _dir: dir,
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Direct,
    Shim,
}

fn command(mode: Mode, socket: &Path) -> Command {
    command_with(mode, socket, None)
}

/// [`command`], the shim with `--policy` when one is given.
fn command_with(mode: Mode, socket: &Path, policy: Option<&Path>) -> Command {
    let fixture = bin("warden-fixture-mcp");
    let mut c = match mode {
        Mode::Direct => Command::new(&fixture),
        Mode::Shim => {
            let mut c = Command::new(bin("warden-shim"));
            c.arg("--socket").arg(socket).arg("--no-autostart");
            if let Some(p) = policy {
                c.arg("--policy").arg(p);
            }
            c.arg("--").arg(&fixture);
            c
        }
    };
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    c
}

pub(crate) const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"warden-bench","version":"1"}}}"#;

fn launch_once(mode: Mode, socket: &Path) -> Duration {
    first_byte(command(mode, socket))
}

fn round_trips(mode: Mode, socket: &Path, n: usize) -> Vec<Duration> {
    round_trips_with(mode, socket, n, None)
}

fn round_trips_with(mode: Mode, socket: &Path, n: usize, policy: Option<&Path>) -> Vec<Duration> {
    let mut s = Session::open(mode, socket, policy);
    let out = (1..=n).map(|i| s.round_trip(i)).collect();
    s.close();
    out
}

/// Creates N files (`writeFileSync`: open O_CREAT, write, close), N
/// directories and N renames in the directory `process.argv[1]`, timing its
/// own work.
const CREATE_JS: &str = "const fs=require('fs'),p=require('path');const d=process.argv[1],n=+process.argv[2];const t=process.hrtime.bigint();for(let i=0;i<n;i++){fs.writeFileSync(p.join(d,'f'+i),'x');fs.mkdirSync(p.join(d,'d'+i));fs.renameSync(p.join(d,'f'+i),p.join(d,'d'+i,'g'))}console.log(Number(process.hrtime.bigint()-t)/1e6)";

/// Writes N files that exist: creates them first (untimed), then opens each
/// for reading and writing (`openSync(f, 'r+')`: O_RDWR, no O_CREAT) and
/// rewrites it (`writeFileSync`: O_WRONLY|O_CREAT|O_TRUNC on an existing
/// file), timing only those 2N opens, writes and closes.
const WRITE_JS: &str = "const fs=require('fs'),p=require('path');const d=process.argv[1],n=+process.argv[2];for(let i=0;i<n;i++)fs.writeFileSync(p.join(d,'f'+i),'x');const t=process.hrtime.bigint();for(let i=0;i<n;i++){const f=p.join(d,'f'+i);const fd=fs.openSync(f,'r+');fs.writeSync(fd,'y');fs.closeSync(fd);fs.writeFileSync(f,'z')}fs.mkdirSync(p.join(d,'d'+(n-1)));fs.writeFileSync(p.join(d,'d'+(n-1),'g'),'');console.log(Number(process.hrtime.bigint()-t)/1e6)";

/// `warden-bench create [--files N] [--runs R] [--in DIR]`: the creation
/// guard's cost.
/// The same node script creates N files, N directories and moves each file
/// into its directory, in a fresh directory each run: directly, and through
/// the shim with that directory as a write grant (the guard performs every
/// creation and rename), interleaved.
/// `warden-bench write [--files N] [--runs R] [--in DIR]`: the same for
/// opening files that exist for writing ([`WRITE_JS`]), which the guard
/// performs too.
fn guard_rounds(write: bool) {
    let files = arg("--files", 2000);
    let runs = arg("--runs", 10);
    let daemon = Daemon::start();
    let s = daemon.socket.clone();
    let node = which("node").expect("node on PATH");
    let script = if write { WRITE_JS } else { CREATE_JS };
    // `--in DIR`: where the write grant lives (default: the temp dir; a
    // tmpfs such as /dev/shm takes the disk out of the figure).
    let parent = std::env::args()
        .skip_while(|a| a != "--in")
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let base = tempfile::tempdir_in(&parent).unwrap();
    let once = |mode: Mode, i: usize| -> f64 {
        let dir = base.path().join(format!("{i}-{mode:?}"));
        std::fs::create_dir(&dir).unwrap();
        let mut c = match mode {
            Mode::Direct => Command::new(&node),
            Mode::Shim => {
                let mut c = Command::new(bin("warden-shim"));
                c.arg("--socket")
                    .arg(&s)
                    .arg("--no-autostart")
                    .arg("--write")
                    .arg(&dir)
                    .arg("--")
                    .arg(&node);
                c
            }
        };
        let out = c
            .arg("-e")
            .arg(script)
            .arg(&dir)
            .arg(files.to_string())
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run node");
        assert!(out.status.success(), "{:?}", out.status);
        assert!(dir.join(format!("d{}/g", files - 1)).is_file());
        std::fs::remove_dir_all(&dir).unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("node printed a duration")
    };
    once(Mode::Direct, 0);
    once(Mode::Shim, 0);
    let (mut d, mut w) = (Vec::new(), Vec::new());
    for i in 1..=runs {
        d.push(once(Mode::Direct, i));
        w.push(once(Mode::Shim, i));
    }
    let (dm, wm) = (median(d), median(w));
    let (ops, what) = if write {
        ((2 * files) as f64, "open for writing")
    } else {
        ((3 * files) as f64, "creating call")
    };
    if write {
        println!("## writing files that exist in a write grant ({files} files, two opens each; {runs} runs each)\n");
    } else {
        println!(
            "## creating files in a write grant ({files} files, dirs and renames; {runs} runs each)\n"
        );
    }
    println!("| path | median | per call |");
    println!("| --- | --- | --- |");
    println!("| direct | {dm:.1} ms | {:.1} µs |", dm * 1e3 / ops);
    println!(
        "| in the sandbox (creation guard) | {wm:.1} ms | {:.1} µs |",
        wm * 1e3 / ops
    );
    println!(
        "\nratio: {:.2}; added per {what}: {:.1} µs",
        wm / dm,
        (wm - dm) * 1e3 / ops
    );
}

/// `warden-bench rtt [--rounds R] [--requests N]`: only the round trip, R
/// rounds of N requests each way (direct, then through the shim), one line per
/// round and the median of the rounds' overheads: shows how much the figure
/// moves from one minute to the next on a shared machine.
fn rtt_rounds() {
    let rounds = arg("--rounds", 5);
    let requests = arg("--requests", 1000);
    let daemon = Daemon::start();
    let s = daemon.socket.clone();
    round_trips(Mode::Shim, &s, 100); // warm-up
    println!("## JSON-RPC round trip, {rounds} rounds of {requests} sequential requests\n");
    println!("| round | direct (median / p99) | through warden-shim (median / p99) | overhead (median) |");
    println!("| --- | --- | --- | --- |");
    let mut overheads = Vec::new();
    for r in 1..=rounds {
        let (dm, _, d99) = stats(round_trips(Mode::Direct, &s, requests));
        let (wm, _, w99) = stats(round_trips(Mode::Shim, &s, requests));
        let o = wm.saturating_sub(dm);
        overheads.push(o.as_secs_f64());
        println!(
            "| {r} | {} / {} | {} / {} | {} |",
            us(dm),
            us(d99),
            us(wm),
            us(w99),
            us(o)
        );
    }
    println!(
        "\nmedian of the rounds' overheads: {}",
        us(Duration::from_secs_f64(median(overheads)))
    );
}

/// The two policies of the MCP benchmarks, in `dir`: the same but for the
/// `mcp` key, which puts the gate in the stream (`mcp.tools.deny` of a tool
/// the fixture does not have).
fn mcp_policies(dir: &Path) -> (PathBuf, PathBuf) {
    let base = dir.join("base.yaml");
    let gated = dir.join("gated.yaml");
    std::fs::write(&base, "version: 1\nname: bench\n").unwrap();
    std::fs::write(
        &gated,
        "version: 1\nname: bench\nmcp:\n  tools:\n    deny: [\"never_*\"]\n",
    )
    .unwrap();
    (base, gated)
}

/// `warden-bench mcp [--rounds R] [--requests N]`: what following the MCP
/// stream costs (issue 17): R rounds of N sequential round trips through the
/// shim against a daemon started with `--no-mcp-records`, one that follows
/// the stream (`mcp` records, the default), and the same daemon with a
/// policy that puts the gate in the stream (`mcp.tools.deny` of a tool the
/// fixture does not have: every message is read whole and passed on by the
/// gate's relay hop), interleaved, with direct exec as the baseline. Every
/// shim session runs under the same policy but for its `mcp` key.
fn mcp_rounds() {
    let rounds = arg("--rounds", 5);
    let requests = arg("--requests", 1000);
    let on = Daemon::start();
    let off = Daemon::start_with(&["--no-mcp-records"]);
    let dir = tempfile::tempdir().unwrap();
    let (base, gated) = mcp_policies(dir.path());
    let (base, gated) = (Some(base.as_path()), Some(gated.as_path()));
    // Warm-up.
    round_trips_with(Mode::Shim, &on.socket, 100, base);
    round_trips_with(Mode::Shim, &off.socket, 100, base);
    round_trips_with(Mode::Shim, &on.socket, 100, gated);
    println!("## MCP records and the gate, {rounds} rounds of {requests} sequential requests\n");
    println!("| round | direct (median) | shim, records off (median / p99) | shim, records on (median / p99) | shim, records on + gate (median / p99) | added by records (median) | added by the gate (median) |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let (mut added, mut gate) = (Vec::new(), Vec::new());
    for r in 1..=rounds {
        let (dm, _, _) = stats(round_trips(Mode::Direct, &off.socket, requests));
        let (fm, _, f99) = stats(round_trips_with(Mode::Shim, &off.socket, requests, base));
        let (nm, _, n99) = stats(round_trips_with(Mode::Shim, &on.socket, requests, base));
        let (gm, _, g99) = stats(round_trips_with(Mode::Shim, &on.socket, requests, gated));
        let rec = nm.as_secs_f64() - fm.as_secs_f64();
        let g = gm.as_secs_f64() - nm.as_secs_f64();
        added.push(rec);
        gate.push(g);
        println!(
            "| {r} | {} | {} / {} | {} / {} | {} / {} | {:+.1} µs | {:+.1} µs |",
            us(dm),
            us(fm),
            us(f99),
            us(nm),
            us(n99),
            us(gm),
            us(g99),
            rec * 1e6,
            g * 1e6
        );
    }
    println!(
        "\nmedian of the rounds' differences: records {:+.1} µs, gate {:+.1} µs",
        median(added) * 1e6,
        median(gate) * 1e6
    );
}

/// One initialized session of the fixture (direct or through the shim),
/// answering one round trip at a time.
struct Session {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    line: String,
}

impl Session {
    fn open(mode: Mode, socket: &Path, policy: Option<&Path>) -> Session {
        let mut child = command_with(mode, socket, policy).spawn().expect("spawn");
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        writeln!(stdin, "{INIT}").unwrap();
        stdout.read_line(&mut line).unwrap();
        Session {
            child,
            stdin,
            stdout,
            line,
        }
    }

    fn round_trip(&mut self, i: usize) -> Duration {
        let req = format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"ping {i}"}}}}}}"#
        );
        self.line.clear();
        let t0 = Instant::now();
        self.stdin.write_all(req.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdout.read_line(&mut self.line).unwrap();
        let dt = t0.elapsed();
        assert!(
            self.line.contains(&format!("\"id\":{i}")),
            "unexpected reply {}",
            self.line
        );
        dt
    }

    fn close(self) {
        drop(self.stdin);
        let mut child = self.child;
        child.wait().unwrap();
    }
}

/// `warden-bench mcp-paired [--rounds R] [--requests N] [--gap-us G]`: the
/// same comparison as `mcp`, request by request: the four sessions (direct,
/// records off, records on, records on + gate) are open at once and take
/// turns, one round trip each, in an order that rotates, with a pause of G
/// µs (default 500, longer than the relay's spin window) before each so that
/// no session's relay is still polling when another's request goes. Each
/// round trip is then the one after an idle moment (the relay woken from its
/// poll), for every mode alike; the differences are taken per turn, so the
/// machine's slow swings (on this VM the round trip moves between two
/// levels for seconds at a time) fall out.
fn mcp_paired() {
    let rounds = arg("--rounds", 5);
    let requests = arg("--requests", 1000);
    let gap = Duration::from_micros(arg("--gap-us", 500) as u64);
    let on = Daemon::start();
    let off = Daemon::start_with(&["--no-mcp-records"]);
    let dir = tempfile::tempdir().unwrap();
    let (base, gated) = mcp_policies(dir.path());
    println!("## MCP records and the gate, paired per request: {rounds} rounds of {requests} turns, {} µs apart\n", gap.as_micros());
    println!("| round | direct | records off | records on | records on + gate | added by records (median of turns) | added by the gate (median of turns) |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let (mut all_rec, mut all_gate) = (Vec::new(), Vec::new());
    for r in 1..=rounds {
        let mut s = [
            Session::open(Mode::Direct, &off.socket, None),
            Session::open(Mode::Shim, &off.socket, Some(&base)),
            Session::open(Mode::Shim, &on.socket, Some(&base)),
            Session::open(Mode::Shim, &on.socket, Some(&gated)),
        ];
        for (k, x) in s.iter_mut().enumerate() {
            for i in 0..50 {
                x.round_trip(100_000 + k * 100 + i); // warm-up
            }
        }
        let mut t: [Vec<Duration>; 4] = Default::default();
        let (mut rec, mut gate) = (Vec::new(), Vec::new());
        for i in 1..=requests {
            let mut turn = [Duration::ZERO; 4];
            for j in 0..4 {
                let k = (i + j) % 4;
                std::thread::sleep(gap);
                turn[k] = s[k].round_trip(i);
            }
            for k in 0..4 {
                t[k].push(turn[k]);
            }
            rec.push(turn[2].as_secs_f64() - turn[1].as_secs_f64());
            gate.push(turn[3].as_secs_f64() - turn[2].as_secs_f64());
        }
        for x in s {
            x.close();
        }
        let m: Vec<String> = t
            .into_iter()
            .map(|v| {
                let (m, _, p99) = stats(v);
                format!("{} / {}", us(m), us(p99))
            })
            .collect();
        let (mr, mg) = (median(rec.clone()), median(gate.clone()));
        all_rec.extend(rec);
        all_gate.extend(gate);
        println!(
            "| {r} | {} | {} | {} | {} | {:+.1} µs | {:+.1} µs |",
            m[0],
            m[1],
            m[2],
            m[3],
            mr * 1e6,
            mg * 1e6
        );
    }
    println!(
        "\nmedian over every turn: records {:+.1} µs, gate {:+.1} µs (columns: median / p99)",
        median(all_rec) * 1e6,
        median(all_gate) * 1e6
    );
}

/// A `SandboxSpec` (JSON) that runs the fixture, with or without the
/// Landlock and seccomp layers, for `warden-sandbox-run`.
fn spec_json(dir: &Path, confined: bool) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let me = std::fs::metadata("/proc/self").unwrap();
    let fixture = bin("warden-fixture-mcp");
    let bytes = |s: &str| serde_json::Value::from(s.as_bytes().to_vec());
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let spec = serde_json::json!({
        "session_id": "bench0000000",
        "program": fixture,
        "argv": [bytes("warden-fixture-mcp")],
        "env": [[bytes("PATH"), bytes("/usr/bin:/bin")]],
        "cwd": "/tmp",
        "read": [],
        "write": [],
        "home": home,
        "uid": me.uid(),
        "gid": me.gid(),
        "user": "bench",
        "tmp_size_mb": 64,
        "dangerously_skip_confinement": !confined,
    });
    let path = dir.join(if confined { "on.json" } else { "off.json" });
    std::fs::write(&path, serde_json::to_vec(&spec).unwrap()).unwrap();
    path
}

fn launch_runner(spec: &Path) -> Duration {
    let mut c = Command::new(bin("warden-sandbox-run"));
    c.arg(spec)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    first_byte(c)
}

fn first_byte(mut c: Command) -> Duration {
    let t0 = Instant::now();
    let mut child = c.spawn().expect("spawn");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    stdin.write_all(INIT.as_bytes()).unwrap();
    stdin.write_all(b"\n").unwrap();
    let mut b = [0u8; 1];
    stdout.read_exact(&mut b).expect("first byte");
    let dt = t0.elapsed();
    drop(stdin);
    let mut rest = Vec::new();
    let _ = stdout.read_to_end(&mut rest);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    dt
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn stats(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    (pct(&v, 0.5), pct(&v, 0.9), pct(&v, 0.99))
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn arg_str(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

/// A node script that times its own work and prints the milliseconds.
const CPU_JS: &str = "const t=process.hrtime.bigint();let x=0;for(let i=0;i<40000000;i++){x=(x+i*7)%1000003}console.log(Number(process.hrtime.bigint()-t)/1e6)";
const WALK_JS: &str = "const fs=require('fs'),p=require('path');const t=process.hrtime.bigint();let n=0;function w(d){let e;try{e=fs.readdirSync(d,{withFileTypes:true})}catch{return}for(const x of e){const f=p.join(d,x.name);try{fs.statSync(f)}catch{}n++;if(x.isDirectory())w(f)}}w('/usr/lib');w('/usr/share');console.log(Number(process.hrtime.bigint()-t)/1e6)";

/// Runs `node -e script` directly or through the shim; returns the work time
/// the script measured itself (so launch costs are excluded).
fn workload(mode: Mode, socket: &Path, script: &str) -> f64 {
    let node = which("node").expect("node on PATH");
    let mut c = match mode {
        Mode::Direct => Command::new(&node),
        Mode::Shim => {
            let mut c = Command::new(bin("warden-shim"));
            c.arg("--socket")
                .arg(socket)
                .arg("--no-autostart")
                .arg("--")
                .arg(&node);
            c
        }
    };
    let out = c
        .arg("-e")
        .arg(script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run node");
    assert!(out.status.success(), "{:?}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("node printed a duration")
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("egress") {
        egress::main();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("audit") {
        audit::main();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("files") {
        files::main();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("create") {
        guard_rounds(false);
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("sessions") {
        sessions::run();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("write") {
        guard_rounds(true);
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("launch-true") {
        launch::main();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("rtt") {
        rtt_rounds();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("mcp") {
        mcp_rounds();
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("mcp-paired") {
        mcp_paired();
        return;
    }
    let launches = arg("--launches", 100);
    let requests = arg("--requests", 1000);
    let daemon = Daemon::start();
    let s = daemon.socket.clone();
    // Warm up both paths (page cache, daemon threads).
    for _ in 0..5 {
        launch_once(Mode::Direct, &s);
        launch_once(Mode::Shim, &s);
    }
    // Interleave so that machine noise hits both alike.
    let (mut d, mut w) = (Vec::new(), Vec::new());
    for _ in 0..launches {
        d.push(launch_once(Mode::Direct, &s));
        w.push(launch_once(Mode::Shim, &s));
    }
    let (dm, d90, d99) = stats(d);
    let (wm, w90, w99) = stats(w);
    println!("## launch to first response byte ({launches} launches each)\n");
    println!("| path | median | p90 | p99 |");
    println!("| --- | --- | --- | --- |");
    println!("| direct exec | {} | {} | {} |", ms(dm), ms(d90), ms(d99));
    println!(
        "| through warden-shim | {} | {} | {} |",
        ms(wm),
        ms(w90),
        ms(w99)
    );
    println!(
        "\nlaunch overhead (median): {}\n",
        ms(wm.saturating_sub(dm))
    );
    let (dm, d90, d99) = stats(round_trips(Mode::Direct, &s, requests));
    let (wm, w90, w99) = stats(round_trips(Mode::Shim, &s, requests));
    println!("## JSON-RPC round trip ({requests} sequential requests, one session)\n");
    println!("| path | median | p90 | p99 |");
    println!("| --- | --- | --- | --- |");
    println!("| direct | {} | {} | {} |", us(dm), us(d90), us(d99));
    println!(
        "| through warden-shim | {} | {} | {} |",
        us(wm),
        us(w90),
        us(w99)
    );
    println!(
        "\nround-trip overhead (median): {}",
        us(wm.saturating_sub(dm))
    );
    // Hardening on vs off: the same sandbox (namespaces, root filesystem)
    // through the debug driver, with and without Landlock + seccomp.
    let dir = tempfile::tempdir().unwrap();
    let (on, off) = (spec_json(dir.path(), true), spec_json(dir.path(), false));
    for _ in 0..5 {
        launch_runner(&on);
        launch_runner(&off);
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..launches {
        a.push(launch_runner(&off));
        b.push(launch_runner(&on));
    }
    let (am, a90, a99) = stats(a);
    let (bm, b90, b99) = stats(b);
    println!(
        "\n## launch with hardening off vs on ({launches} launches each, warden-sandbox-run)\n"
    );
    println!("| sandbox | median | p90 | p99 |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| namespaces + root filesystem only | {} | {} | {} |",
        ms(am),
        ms(a90),
        ms(a99)
    );
    println!(
        "| + Landlock + seccomp (as the daemon runs it) | {} | {} | {} |",
        ms(bm),
        ms(b90),
        ms(b99)
    );
    println!(
        "\nhardening overhead (median): {}",
        ms(bm.saturating_sub(am))
    );

    let runs = arg("--workload-runs", 10);
    if which("node").is_none() {
        println!("\n(no node on PATH: workloads skipped)");
        return;
    }
    println!("\n## workloads inside vs outside ({runs} runs each, time measured by the workload itself)\n");
    println!("| workload | direct (median) | in the sandbox (median) | ratio |");
    println!("| --- | --- | --- | --- |");
    for (name, script) in [
        ("CPU-bound loop (node)", CPU_JS),
        (
            "file walk of /usr/lib and /usr/share, readdir + stat (node)",
            WALK_JS,
        ),
    ] {
        let (mut d, mut w) = (Vec::new(), Vec::new());
        workload(Mode::Direct, &s, script);
        workload(Mode::Shim, &s, script);
        for _ in 0..runs {
            d.push(workload(Mode::Direct, &s, script));
            w.push(workload(Mode::Shim, &s, script));
        }
        let (dm, wm) = (median(d), median(w));
        println!("| {name} | {dm:.1} ms | {wm:.1} ms | {:.3} |", wm / dm);
    }
}
