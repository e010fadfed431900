//! `warden-bench launch-true [--runs N]` (issue 16): what one sandbox per
//! tool call costs, spawn to exit of `/bin/true`, seven ways in one run,
//! interleaved so that machine noise hits each alike:
//!
//! - **direct**: `/bin/true` itself;
//! - **bwrap**: Debian's bubblewrap with a comparable sandbox ([`BWRAP_ARGS`]:
//!   every namespace, `/usr` read-only, the merged-`/usr` symlinks, a fresh
//!   `/proc`, a minimal `/dev`, a tmpfs `/tmp`);
//! - **warden-shim**: `warden-shim --policy P -- /bin/true` against a running
//!   daemon (P: a name and nothing else, as an exec-server call's ceiling
//!   without grants), which is what an exec-server call pays for its sandbox:
//!   connecting, passing stdio, compiling the policy (shim and daemon), the
//!   fsynced `session.start`, the sandbox, the exit and its record;
//! - **warden-shim, `audit.files: off`**: the same with the policy's
//!   `audit: {files: off}`: no file access is observed, so the loader's
//!   path-taking calls in the sandbox never leave the kernel (the default,
//!   `denied`, sends each to the daemon's seccomp notifier and back);
//! - **client in process**: what `wardenctl exec-server` does for each
//!   call, here with `/dev/null` as the server's stdio: a connection to the
//!   daemon, the stdio preamble, `Spawn` with the policy text, and the
//!   events until `Exited`, from this process (no process started for
//!   it): the launch itself, without the MCP framing around a tool call;
//! - **exec-server call**: a `tools/call` of `run_sandboxed` with `argv:
//!   ["/bin/true"]` to a running `wardenctl exec-server --policy P` (the
//!   same ceiling), timed from writing the request to reading its answer:
//!   what an agent's tool call pays, without a shim process per call (the
//!   exec-server speaks to the daemon itself);
//! - **sandbox alone**: `warden-sandbox-run SPEC` (the debug driver:
//!   `Sandbox::spawn` of a spec as the daemon builds one for that policy,
//!   `audit_files: denied` as the policy's default), no daemon, no gRPC, no
//!   audit record: the difference to the shim is the daemon's share.
//!
//! Each is timed from `spawn()` to `wait()` returning, stdio `/dev/null`.
//! Reported: median and p90 of each, and the time each adds over direct.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{arg, bin, ms, stats, which, Daemon};

/// bubblewrap's arguments before the program: a sandbox comparable to
/// Warden's (new user, mount, pid, net, ipc, uts and cgroup namespaces; the
/// runtime read-only; a private `/proc`, `/dev` and `/tmp`; killed with its
/// parent).
pub const BWRAP_ARGS: &[&str] = &[
    "--unshare-all",
    "--die-with-parent",
    "--new-session",
    "--ro-bind",
    "/usr",
    "/usr",
    "--symlink",
    "usr/bin",
    "/bin",
    "--symlink",
    "usr/sbin",
    "/sbin",
    "--symlink",
    "usr/lib",
    "/lib",
    "--symlink",
    "usr/lib64",
    "/lib64",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--tmpfs",
    "/tmp",
    "--chdir",
    "/",
];

const TRUE: &str = "/bin/true";

#[derive(Clone, Copy)]
enum Way {
    Direct,
    Bwrap,
    Shim,
    ShimFilesOff,
    Client,
    ExecServer,
    SandboxAlone,
}

const WAYS: [Way; 7] = [
    Way::Direct,
    Way::Bwrap,
    Way::Shim,
    Way::ShimFilesOff,
    Way::Client,
    Way::ExecServer,
    Way::SandboxAlone,
];

impl Way {
    fn label(self) -> &'static str {
        match self {
            Way::Direct => "direct `/bin/true`",
            Way::Bwrap => "bwrap (flags below)",
            Way::Shim => "warden-shim → wardend (native sandbox)",
            Way::ShimFilesOff => "warden-shim → wardend, `audit.files: off`",
            Way::Client => "gRPC client in process → wardend (exec-server's launch)",
            Way::ExecServer => "exec-server `run_sandboxed` call → wardend",
            Way::SandboxAlone => "sandbox alone (warden-sandbox-run, no daemon)",
        }
    }
}

struct Setup {
    runtime: tokio::runtime::Runtime,
    policy_text: String,
    exec_server: std::cell::RefCell<ExecServer>,
    bwrap: PathBuf,
    shim: PathBuf,
    runner: PathBuf,
    socket: PathBuf,
    policy: PathBuf,
    policy_files_off: PathBuf,
    spec: PathBuf,
}

fn command(way: Way, s: &Setup) -> Command {
    let mut c = match way {
        Way::Direct => Command::new(TRUE),
        Way::Bwrap => {
            let mut c = Command::new(&s.bwrap);
            c.args(BWRAP_ARGS).arg(TRUE);
            c
        }
        Way::Shim | Way::ShimFilesOff => {
            let mut c = Command::new(&s.shim);
            c.arg("--socket")
                .arg(&s.socket)
                .arg("--no-autostart")
                .arg("--policy")
                .arg(match way {
                    Way::Shim => &s.policy,
                    _ => &s.policy_files_off,
                })
                .arg("--")
                .arg(TRUE);
            c
        }
        Way::SandboxAlone => {
            let mut c = Command::new(&s.runner);
            c.arg(&s.spec);
            c
        }
        Way::ExecServer | Way::Client => unreachable!("measured in process, not a command"),
    };
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// A running `wardenctl exec-server`, initialized, taking one call at a time.
struct ExecServer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl ExecServer {
    fn start(socket: &Path, policy: &Path) -> ExecServer {
        let mut child = Command::new(bin("wardenctl"))
            .arg("--socket")
            .arg(socket)
            .arg("exec-server")
            .arg("--policy")
            .arg(policy)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start wardenctl exec-server");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut s = ExecServer {
            child,
            stdin,
            stdout,
            next_id: 1,
        };
        s.request(crate::INIT);
        writeln!(
            s.stdin,
            r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
        )
        .unwrap();
        s
    }

    /// Sends one request line, returns its answer line.
    fn request(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        answer
    }

    /// One `run_sandboxed` call of `/bin/true`: its round trip.
    fn call_true(&mut self) -> Duration {
        let id = self.next_id;
        self.next_id += 1;
        let req = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"run_sandboxed","arguments":{{"argv":["{TRUE}"]}}}}}}"#
        );
        let t0 = Instant::now();
        let answer = self.request(&req);
        let dt = t0.elapsed();
        assert!(
            answer.contains(&format!("\"id\":{id}")) && answer.contains("\"exit_code\":0"),
            "exec-server call failed: {answer}"
        );
        dt
    }
}

impl Drop for ExecServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One launch of `/bin/true` the way exec-server's `run` makes it: its own
/// connection, the stdio preamble (`/dev/null` three times), `Spawn`, and
/// the events until `Exited`.
async fn client_launch(socket: &Path, policy: &Path, policy_text: &str) -> Duration {
    use std::os::fd::AsFd;
    use warden_client::pb;
    let t0 = Instant::now();
    let stream = warden_client::connect_raw(socket).expect("connect");
    let null = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap();
    warden_client::send_stdio(&stream, [null.as_fd(), null.as_fd(), null.as_fd()]).unwrap();
    drop(null);
    let mut client = warden_client::client_over(stream).await.unwrap();
    let req = pb::SpawnRequest {
        policy_path: policy.display().to_string(),
        policy_text: policy_text.to_owned(),
        command: vec![TRUE.into()],
        cwd: "/".into(),
        client: Some(pb::ClientInfo {
            pid: std::process::id(),
            program: "warden-bench".into(),
            version: "0".into(),
        }),
        ..Default::default()
    };
    let mut events = client.spawn(req).await.expect("spawn").into_inner();
    loop {
        match events.message().await.expect("events") {
            Some(pb::SpawnEvent {
                event: Some(pb::spawn_event::Event::Exited(x)),
            }) => {
                assert!(
                    matches!(x.outcome, Some(pb::exited::Outcome::Code(0))),
                    "in-process launch failed: {x:?}"
                );
                break;
            }
            Some(_) => {}
            None => panic!("the daemon closed the session without an exit"),
        }
    }
    t0.elapsed()
}

fn once(way: Way, s: &Setup) -> Duration {
    match way {
        Way::ExecServer => return s.exec_server.borrow_mut().call_true(),
        Way::Client => {
            return s
                .runtime
                .block_on(client_launch(&s.socket, &s.policy, &s.policy_text))
        }
        _ => {}
    }
    let mut c = command(way, s);
    let t0 = Instant::now();
    let status = c.status().expect("spawn");
    let dt = t0.elapsed();
    if !status.success() {
        // Once more with stderr shown, to say why.
        let out = command(way, s).stderr(Stdio::piped()).output().unwrap();
        panic!(
            "{} failed ({status}): {}",
            way.label(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dt
}

/// The `SandboxSpec` (JSON) the daemon builds for `/bin/true` under a policy
/// without grants, for `warden-sandbox-run` (which decides the layers as the
/// daemon does, from what the kernel offers).
fn spec(dir: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let me = std::fs::metadata("/proc/self").unwrap();
    let program = std::fs::canonicalize(TRUE).unwrap();
    let bytes = |s: &str| serde_json::Value::from(s.as_bytes().to_vec());
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let spec = serde_json::json!({
        "session_id": "benchtrue000",
        "program": program,
        "argv": [bytes(TRUE)],
        "env": [[bytes("PATH"), bytes("/usr/bin:/bin")]],
        "cwd": "/tmp",
        "read": [],
        "write": [],
        "home": home,
        "uid": me.uid(),
        "gid": me.gid(),
        "user": "bench",
        "tmp_size_mb": 256,
        "audit_files": "denied",
    });
    let path = dir.join("true.json");
    std::fs::write(&path, serde_json::to_vec(&spec).unwrap()).unwrap();
    path
}

pub fn main() {
    let runs = arg("--runs", 200);
    let Some(bwrap) = which("bwrap") else {
        eprintln!(
            "warden-bench launch-true: `bwrap` is not on PATH; it is the baseline of this \
             benchmark: install bubblewrap (Debian: apt-get install -y bubblewrap)"
        );
        std::process::exit(2);
    };
    let daemon = Daemon::start();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("true.yaml");
    std::fs::write(&policy, "version: 1\nname: bench-true\n").unwrap();
    let policy_files_off = dir.path().join("true-files-off.yaml");
    std::fs::write(
        &policy_files_off,
        "version: 1\nname: bench-true\naudit:\n  files: off\n",
    )
    .unwrap();
    let setup = Setup {
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        policy_text: std::fs::read_to_string(&policy).unwrap(),
        exec_server: std::cell::RefCell::new(ExecServer::start(&daemon.socket, &policy)),
        bwrap,
        shim: bin("warden-shim"),
        runner: bin("warden-sandbox-run"),
        socket: daemon.socket.clone(),
        policy,
        policy_files_off,
        spec: spec(dir.path()),
    };
    // Warm up every path (page cache, daemon threads), and fail early.
    for _ in 0..5 {
        for w in WAYS {
            once(w, &setup);
        }
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); WAYS.len()];
    for _ in 0..runs {
        for (i, w) in WAYS.iter().enumerate() {
            times[i].push(once(*w, &setup));
        }
    }
    let st: Vec<(Duration, Duration, Duration)> = times.into_iter().map(stats).collect();
    let direct_m = st[0].0;
    println!("## spawn to exit of /bin/true ({runs} runs each, interleaved)\n");
    println!("| path | median | p90 | added over direct (median) |");
    println!("| --- | --- | --- | --- |");
    for (i, w) in WAYS.iter().enumerate() {
        let (m, p90, _) = st[i];
        let added = if i == 0 {
            "—".to_string()
        } else {
            ms(m.saturating_sub(direct_m))
        };
        println!("| {} | {} | {} | {added} |", w.label(), ms(m), ms(p90));
    }
    let added = |i: usize| st[i].0.saturating_sub(direct_m).as_secs_f64();
    let (bw, shim, off, client, call, alone) =
        (added(1), added(2), added(3), added(4), added(5), added(6));
    println!(
        "\nwarden-added / bwrap-added (median): {:.2}× the launch from a client in process \
         (exec-server's; target: ≤ 1.5×), {:.2}× a whole exec-server tool call, {:.2}× \
         through the shim, {:.2}× through the shim with audit.files off, {:.2}× the sandbox \
         alone; the daemon's share (shim − sandbox alone): {}; file watching's (default − \
         audit.files off): {}",
        client / bw,
        call / bw,
        shim / bw,
        off / bw,
        alone / bw,
        ms(st[2].0.saturating_sub(st[6].0)),
        ms(st[2].0.saturating_sub(st[3].0))
    );
    println!("\nbwrap {} /bin/true", BWRAP_ARGS.join(" "));
}
