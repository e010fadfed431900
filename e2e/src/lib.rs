//! Warden's end-to-end test harness.
//!
//! The tests in `e2e/tests/` drive the real, built binaries (`wardend`, `warden-shim`,
//! `wardenctl`) with real MCP servers: the fixture server in `src/bin/fixture_mcp.rs`
//! and third-party servers installed by `scripts/test` into `$WARDEN_TEST_DEPS`.
//!
//! - [`bin`] finds a built binary (`$WARDEN_BIN_DIR`, else next to the test executable).
//! - [`TestEnv`] is a private home, runtime dir, state dir and socket in a tempdir;
//!   it starts a [`Daemon`] and builds shim and `wardenctl` commands that use them.
//! - [`McpClient`] speaks newline-delimited JSON-RPC to a spawned shim, with timeouts.
//! - [`audit_records`], [`pids_with_marker`], [`send_signal`], [`is_root`] and
//!   [`require_test_deps`] are the checks and preconditions tests share (no
//!   `unsafe`: `nix` for the system calls).
//! - [`pyclient`]: running real MCP client programs, and one reusable Python SDK
//!   client that runs a list of steps through the shim ([`python_sdk_client`]).
//! - [`net`]: upstream HTTP(S) servers, a CA and a recording DNS server for the egress
//!   tests, and `wardend --dns`.
//!
//! Tests must not read the source tree at run time: `scripts/test` also runs the test
//! executables as an unprivileged user from a copy, with only `WARDEN_BIN_DIR`,
//! `WARDEN_TEST_DEPS`, `WARDEN_REQUIRE_DEPS` and `WARDEN_UNPRIVILEGED_RUN` set.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test harness: a failed step is a panic

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

pub mod approvals;
pub mod net;
pub mod pyclient;

pub use pyclient::{
    client_shim_args, python_sdk_client, python_sdk_client_in, run_client, run_python_sdk_client,
    sdk_python, sdk_server, ClientRun, Era, PyRun, SdkServer,
};

/// The MCP protocol version the tests speak.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// Exit code for Warden's own errors (DESIGN.md §4).
pub const EXIT_WARDEN_ERROR: i32 = 125;
/// Exit code when Warden ended a session on `limits.timeout_s`.
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code on a memory breach, and of a SIGKILLed server.
pub const EXIT_KILLED: i32 = 137;

/// The deterministic text the fixture's `big` tool returns: exactly `bytes` ASCII bytes,
/// position-dependent (not periodic), so a dropped, duplicated or reordered chunk shows.
pub fn big_pattern(bytes: usize) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = Vec::with_capacity(bytes);
    for i in 0..bytes as u64 {
        // splitmix64 finaliser: cheap, deterministic, no period worth mentioning.
        let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        out.push(ALPHABET[(z & 63) as usize]);
    }
    String::from_utf8(out).expect("ascii")
}

/// Path of a built binary: `$WARDEN_BIN_DIR/name` when set, else the cargo target
/// directory the test executable lives in (`target/debug/deps/x` → `target/debug`).
pub fn bin(name: &str) -> PathBuf {
    let dir = bin_dir();
    let path = dir.join(name);
    if !path.is_file() {
        panic!(
            "{} not found in {}: build the workspace first: cargo build --workspace \
             (or set WARDEN_BIN_DIR)",
            name,
            dir.display()
        );
    }
    path
}

fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WARDEN_BIN_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("executable has a parent").to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    dir
}

/// The fixture MCP server binary.
pub fn fixture() -> PathBuf {
    bin("warden-fixture-mcp")
}

/// True when `scripts/test` runs this as the unprivileged `warden-ci` user.
pub fn unprivileged_run() -> bool {
    std::env::var_os("WARDEN_UNPRIVILEGED_RUN").is_some_and(|v| v == "1")
}

/// The directory holding `node_modules/@modelcontextprotocol/server-filesystem` (and
/// `server-everything`), from `$WARDEN_TEST_DEPS`. When it is unset or incomplete this
/// panics if `WARDEN_REQUIRE_DEPS=1`, and otherwise prints a `skipping:` line and
/// returns `None` (the caller returns early).
pub fn require_test_deps() -> Option<PathBuf> {
    let required = std::env::var_os("WARDEN_REQUIRE_DEPS").is_some_and(|v| v == "1");
    let problem = match std::env::var_os("WARDEN_TEST_DEPS").filter(|d| !d.is_empty()) {
        None => "WARDEN_TEST_DEPS is not set".to_string(),
        Some(dir) => {
            let dir = PathBuf::from(dir);
            let probe =
                dir.join("node_modules/@modelcontextprotocol/server-filesystem/package.json");
            if probe.is_file() {
                return Some(dir);
            }
            format!("{} does not exist", probe.display())
        }
    };
    if required {
        panic!("test dependencies missing ({problem}); WARDEN_REQUIRE_DEPS=1 (run ./scripts/test)");
    }
    println!("skipping: test dependencies missing ({problem}); run ./scripts/test to install them");
    None
}

/// `node` on PATH, for tests that run Node-based servers.
pub fn node() -> Option<PathBuf> {
    find_on_path("node")
}

/// The first executable named `name` on `$PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A string unique to this process and call: pass it as an argument (fixture
/// `--marker`) or in a file name, then find processes with [`pids_with_marker`].
pub fn unique_marker(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "warden-e2e-{tag}-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Host pids of every process (other than this one) with an argv element containing
/// `marker`. Reads `/proc/*/cmdline`, which the host can read even for processes in a
/// sandbox's pid and user namespaces.
pub fn pids_with_marker(marker: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let hit = cmdline
            .split(|&b| b == 0)
            .any(|arg| String::from_utf8_lossy(arg).contains(marker));
        if hit && !is_zombie(pid) {
            pids.push(pid);
        }
    }
    pids
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Polls until no live process carries `marker`, or `timeout` passes; returns the
/// survivors (empty on success).
pub fn wait_no_marker(marker: &str, timeout: Duration) -> Vec<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        let pids = pids_with_marker(marker);
        if pids.is_empty() || Instant::now() >= deadline {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The command line of a host pid, for failure messages.
pub fn cmdline_of(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

/// Sends `signal` to `pid` (0: only checks that it exists); false if it failed
/// (e.g. no such process, or a signal number nix does not name).
pub fn send_signal(pid: i32, signal: i32) -> bool {
    let signal = match signal {
        0 => None,
        n => match Signal::try_from(n) {
            Ok(s) => Some(s),
            Err(_) => return false,
        },
    };
    kill(Pid::from_raw(pid), signal).is_ok()
}

/// True when the tests run as root (effective uid 0).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The exit code a shell would report: the code, or 128+N for death by signal N.
pub fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// `git -C repo ARGS` on the host, with no system or global config and a
/// fixed identity; panics with git's stderr when it fails. Its stdout.
pub fn host_git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "-c",
            "user.name=host",
            "-c",
            "user.email=host@example.invalid",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("running git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The lines of `stderr` that start with `warden:`.
pub fn warden_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("warden:"))
        .collect()
}

/// A private world for one test: a tempdir with `home/`, `runtime/`, `state/` and
/// `config/` (all 0700) and a socket path (`runtime/warden/` is left to the daemon), plus scratch space. Dropping it stops any daemon that
/// was autostarted for it.
pub struct TestEnv {
    dir: tempfile::TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
    pub runtime: PathBuf,
    pub state: PathBuf,
    pub config: PathBuf,
    /// `runtime/warden/wardend.sock`: where a daemon started from these XDG
    /// variables listens by default; tests also pass it explicitly with `--socket`.
    pub socket: PathBuf,
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv {
    pub fn new() -> TestEnv {
        let dir = tempfile::Builder::new()
            .prefix("warden-e2e.")
            .tempdir()
            .expect("creating a tempdir");
        // Canonical, so paths match what the daemon and sandbox resolve.
        let root = dir.path().canonicalize().expect("canonicalize tempdir");
        let sub = |name: &str| {
            let p = root.join(name);
            std::fs::create_dir_all(&p).expect("creating a test dir");
            p
        };
        let private = |name: &str| {
            let p = sub(name);
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700))
                .expect("chmod 0700");
            p
        };
        // Private like the real ones: the daemon refuses loose runtime and state dirs.
        let home = private("home");
        let runtime = private("runtime");
        let state = private("state");
        let config = private("config");
        let socket = runtime.join("warden").join("wardend.sock");
        TestEnv {
            dir,
            root,
            home,
            runtime,
            state,
            config,
            socket,
        }
    }

    /// HOME, XDG_RUNTIME_DIR, XDG_STATE_HOME and XDG_CONFIG_HOME for this env.
    pub fn env_vars(&self) -> Vec<(String, PathBuf)> {
        vec![
            ("HOME".into(), self.home.clone()),
            ("XDG_RUNTIME_DIR".into(), self.runtime.clone()),
            ("XDG_STATE_HOME".into(), self.state.clone()),
            ("XDG_CONFIG_HOME".into(), self.config.clone()),
        ]
    }

    pub fn apply_env(&self, cmd: &mut Command) {
        // A root daemon refuses sessions unless told to run servers as root
        // (review F8): the root phase of the suite runs them so, and
        // `e2e/tests/daemon.rs` tests the refusal.
        if is_root() {
            cmd.env("WARDEN_DANGEROUSLY_RUN_SERVERS_AS_ROOT", "1");
        }
        cmd.env_remove("WARDEN_SOCKET");
        cmd.env_remove("NOTIFY_SOCKET");
        cmd.env_remove("JOURNAL_STREAM");
        // A daemon shows approvals on the desktop only when a test gives it a
        // bus of its own (e2e/tests/approvals_desktop.rs), never the
        // developer's.
        cmd.env_remove("DBUS_SESSION_BUS_ADDRESS");
        cmd.envs(self.env_vars());
        cmd.current_dir(&self.root);
    }

    /// Creates `root/rel` (and parents) as a directory and returns it.
    pub fn mkdir(&self, rel: &str) -> PathBuf {
        let p = self.root.join(rel);
        std::fs::create_dir_all(&p).expect("mkdir");
        p
    }

    /// Writes `root/rel` (creating parents) and returns its path.
    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let p = self.root.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir parent");
        }
        std::fs::write(&p, content).expect("write test file");
        p
    }

    /// Writes a policy file `root/policies/<name>` and returns its path.
    pub fn policy(&self, name: &str, yaml: &str) -> PathBuf {
        self.write(&format!("policies/{name}"), yaml)
    }

    /// A minimal policy (no grants, no command): enough for the fixture, whose path is
    /// given after `--`.
    pub fn minimal_policy(&self) -> PathBuf {
        self.policy("minimal.yaml", "version: 1\nname: e2e-fixture\n")
    }

    /// Runs `wardend --socket S --state-dir state/` and waits (up to 10 s) until the
    /// socket accepts connections. Panics with the daemon's stderr if it exits first.
    pub fn start_daemon(&self) -> Daemon {
        self.start_daemon_with_env(&[])
    }

    /// Like [`TestEnv::start_daemon`], with extra environment variables for the daemon
    /// (e.g. to prove the daemon's own environment never reaches a server).
    pub fn start_daemon_with_env(&self, extra: &[(&str, &str)]) -> Daemon {
        self.start_daemon_with(&[], extra)
    }

    /// Like [`TestEnv::start_daemon`], with extra daemon arguments (e.g. `--dns
    /// ADDR:PORT`, see [`net::start_daemon_with_dns`]) and environment variables.
    pub fn start_daemon_with(&self, args: &[&str], extra: &[(&str, &str)]) -> Daemon {
        let log_path = self.root.join(format!(
            "wardend.{}.log",
            DAEMON_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let log = std::fs::File::create(&log_path).expect("creating daemon log");
        // An explicit --socket names a path in an existing directory; the default one
        // (runtime/warden/) is the daemon's to create, see TestEnv::shim_default_socket.
        let socket_dir = self.socket.parent().expect("socket has a parent");
        std::fs::create_dir_all(socket_dir).expect("creating the socket dir");
        std::fs::set_permissions(socket_dir, std::fs::Permissions::from_mode(0o700))
            .expect("chmod socket dir");
        let mut cmd = Command::new(bin("wardend"));
        cmd.arg("--socket")
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state)
            .args(args);
        self.apply_env(&mut cmd);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log);
        let child = cmd.spawn().expect("spawning wardend");
        let mut daemon = Daemon {
            child: Some(child),
            log_path,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = daemon
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "wardend exited early with {status}; its log:\n{}",
                    daemon.log()
                );
            }
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return daemon;
            }
            if Instant::now() >= deadline {
                panic!(
                    "wardend did not accept connections on {} within 10 s; its log:\n{}",
                    self.socket.display(),
                    daemon.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `warden-shim --socket S ARGS...` with this env's variables.
    pub fn shim<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let mut cmd = Command::new(bin("warden-shim"));
        cmd.arg("--socket").arg(&self.socket);
        cmd.args(args.into_iter().map(Into::into));
        self.apply_env(&mut cmd);
        cmd
    }

    /// `warden-shim ARGS...` without `--socket`: the shim finds (or autostarts) the
    /// daemon at the default `$XDG_RUNTIME_DIR/warden/wardend.sock`, i.e. [`TestEnv::socket`].
    pub fn shim_default_socket<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let mut cmd = Command::new(bin("warden-shim"));
        cmd.args(args.into_iter().map(Into::into));
        self.apply_env(&mut cmd);
        cmd
    }

    /// `wardenctl --socket S ARGS...` with this env's variables.
    pub fn ctl<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let mut cmd = Command::new(bin("wardenctl"));
        cmd.arg("--socket").arg(&self.socket);
        cmd.args(args.into_iter().map(Into::into));
        self.apply_env(&mut cmd);
        cmd
    }

    /// Runs `wardenctl ARGS... --json`, asserts success and parses stdout as JSON.
    pub fn ctl_json(&self, args: &[&str]) -> Value {
        let mut cmd = self.ctl(args.iter().copied().chain(["--json"]));
        let out = run(&mut cmd, Duration::from_secs(30));
        assert!(
            out.status.success(),
            "wardenctl {args:?} --json failed with {}; stderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "wardenctl {args:?} --json printed invalid JSON ({e}):\n{}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// Sessions from `wardenctl ps --json` (a top-level array, or `{"sessions": [...]}`).
    pub fn sessions(&self) -> Vec<Value> {
        match self.ctl_json(&["ps"]) {
            Value::Array(a) => a,
            Value::Object(mut o) => match o.remove("sessions") {
                Some(Value::Array(a)) => a,
                Some(Value::Null) | None => Vec::new(),
                Some(other) => panic!("wardenctl ps --json: sessions is not an array: {other}"),
            },
            other => panic!("wardenctl ps --json: unexpected shape: {other}"),
        }
    }

    /// Spawns a shim with `args` as an [`McpClient`].
    pub fn mcp<I, S>(&self, args: I) -> McpClient
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        McpClient::spawn(self.shim(args))
    }

    /// Spawns a shim running the fixture under `policy`, with extra shim flags and
    /// fixture arguments: `warden-shim --policy P SHIM_FLAGS... -- fixture FIXTURE_ARGS...`.
    pub fn fixture_session(
        &self,
        policy: &Path,
        shim_flags: &[&str],
        fixture_args: &[&str],
    ) -> McpClient {
        let mut args: Vec<OsString> = vec!["--policy".into(), policy.into()];
        args.extend(shim_flags.iter().map(OsString::from));
        args.push("--".into());
        args.push(fixture().into());
        args.extend(fixture_args.iter().map(OsString::from));
        self.mcp(args)
    }

    /// A shim running the fixture under `policy` with `vars` added to the
    /// client's environment (what `env.allow` may pass on), initialized.
    pub fn fixture_with_env(&self, policy: &Path, vars: &[(&str, &str)]) -> McpClient {
        let mut cmd = self.shim([
            OsString::from("--policy"),
            policy.into(),
            "--".into(),
            fixture().into(),
        ]);
        cmd.envs(vars.iter().copied());
        let mut c = McpClient::spawn(cmd);
        c.initialize();
        c
    }

    /// The tempdir as created (before canonicalisation).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Stops daemons started for this env that are not [`Daemon`] children (an
    /// autostarted one): any `wardend` whose command line or environment mentions this
    /// env's directory.
    pub fn stop_stray_daemons(&self) {
        let root = self.root.to_string_lossy().into_owned();
        let mut pids = Vec::new();
        for pid in all_pids() {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
            if !Path::new(&*String::from_utf8_lossy(argv0)).ends_with("wardend") {
                continue;
            }
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&root)
                || String::from_utf8_lossy(&environ).contains(&root)
            {
                pids.push(pid);
            }
        }
        for &pid in &pids {
            send_signal(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while pids
            .iter()
            .any(|&p| Path::new(&format!("/proc/{p}")).exists() && !is_zombie(p))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        for &pid in &pids {
            send_signal(pid, libc::SIGKILL);
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.stop_stray_daemons();
    }
}

static DAEMON_COUNTER: AtomicU64 = AtomicU64::new(0);

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// A `wardend` started by [`TestEnv::start_daemon`]. Dropping it sends SIGTERM, waits
/// up to 5 s, then SIGKILLs.
pub struct Daemon {
    child: Option<Child>,
    log_path: PathBuf,
}

impl Daemon {
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(-1)
    }

    /// Everything the daemon wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// SIGTERM, then waits up to `timeout` for it to exit (SIGKILL after that).
    pub fn stop(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        send_signal(child.id() as i32, libc::SIGTERM);
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// Runs a command to completion with a timeout (killing it after), capturing output.
pub fn run(cmd: &mut Command, timeout: Duration) -> Output {
    run_with_stdin(cmd, None, timeout)
}

/// [`run`] with `input` written to the command's stdin (a pipe, closed after
/// it), or stdin `/dev/null` without.
pub fn run_with_stdin(cmd: &mut Command, input: Option<Vec<u8>>, timeout: Duration) -> Output {
    let mut child = cmd
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let stdout = drain(child.stdout.take().expect("piped"));
    let stderr = drain(child.stderr.take().expect("piped"));
    let status = wait_timeout(&mut child, timeout).unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "{cmd:?} did not finish within {timeout:?}; stderr so far:\n{}",
            String::from_utf8_lossy(&stderr.lock().unwrap())
        );
    });
    // The pipes close when the child and everything it spawned have exited; a daemon
    // it autostarted may hold them, so give the readers only a short while.
    let settle = Instant::now() + Duration::from_millis(500);
    while Instant::now() < settle && Arc::strong_count(&stdout) + Arc::strong_count(&stderr) > 2 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let stdout = stdout.lock().unwrap().clone();
    let stderr = stderr.lock().unwrap().clone();
    Output {
        status,
        stdout,
        stderr,
    }
}

fn drain(mut source: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let sink = Arc::new(Mutex::new(Vec::new()));
    let thread_sink = Arc::clone(&sink);
    std::thread::spawn(move || {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match source.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => thread_sink.lock().unwrap().extend_from_slice(&buf[..n]),
            }
        }
        drop(thread_sink);
    });
    sink
}

/// Polls `child` until it exits or `timeout` passes.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An MCP client talking to a spawned shim (or any stdio MCP server) over piped stdio.
///
/// A reader thread splits stdout into lines and keeps every byte (see
/// [`McpClient::raw_stdout_bytes`]); another collects stderr. Requests wait for their
/// response with a timeout (30 s by default) and panic with the stderr so far.
pub struct McpClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Vec<u8>>,
    raw_stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    next_id: u64,
    timeout: Duration,
    /// Messages received that were not the response being waited for (server
    /// notifications and requests, stray responses).
    pub other_messages: Vec<Value>,
    status: Option<ExitStatus>,
}

impl McpClient {
    /// Spawns `cmd` with piped stdin, stdout and stderr.
    pub fn spawn(mut cmd: Command) -> McpClient {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().expect("piped stdout");
        let mut stderr_pipe = child.stderr.take().expect("piped stderr");
        let raw_stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (tx, lines) = mpsc::channel();

        let raw = Arc::clone(&raw_stdout);
        let out_reader = std::thread::spawn(move || {
            let mut pending = Vec::new();
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                let n = match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                raw.lock().unwrap().extend_from_slice(&buf[..n]);
                pending.extend_from_slice(&buf[..n]);
                let mut start = 0;
                while let Some(pos) = pending[start..].iter().position(|&b| b == b'\n') {
                    let line = pending[start..start + pos].to_vec();
                    start += pos + 1;
                    if tx.send(line).is_err() {
                        return;
                    }
                }
                pending.drain(..start);
            }
            if !pending.is_empty() {
                let _ = tx.send(pending);
            }
        });
        let err = Arc::clone(&stderr);
        let err_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            loop {
                match stderr_pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => err.lock().unwrap().extend_from_slice(&buf[..n]),
                }
            }
        });
        McpClient {
            child,
            stdin,
            lines,
            raw_stdout,
            stderr,
            readers: vec![out_reader, err_reader],
            next_id: 1,
            timeout: Duration::from_secs(30),
            other_messages: Vec::new(),
            status: None,
        }
    }

    /// How long [`McpClient::request`] waits for a response.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Host pid of the spawned process (the shim).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends a signal to the spawned process.
    pub fn signal(&self, signal: i32) -> bool {
        send_signal(self.pid(), signal)
    }

    /// Writes one message as a line.
    pub fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).expect("serialise");
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// Writes raw bytes to the server's stdin.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin already closed");
        if let Err(e) = stdin.write_all(bytes).and_then(|()| stdin.flush()) {
            panic!(
                "writing to the server's stdin: {e}; stderr:\n{}",
                self.stderr()
            );
        }
    }

    /// Sends a notification (no id, no response).
    pub fn notify(&mut self, method: &str, params: Value) {
        let mut message = json!({"jsonrpc": "2.0", "method": method});
        if !params.is_null() {
            message["params"] = params;
        }
        self.send(&message);
    }

    /// Sends a request and returns the whole response message (`result` or `error`).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.wait_response(&id)
    }

    /// Sends a request without waiting for its response; returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id);
        self.next_id += 1;
        let mut message = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if !params.is_null() {
            message["params"] = params;
        }
        self.send(&message);
        id
    }

    /// Waits for the response with this id.
    pub fn wait_response(&mut self, id: &Value) -> Value {
        self.wait_message(&format!("the response to request {id}"), |m| {
            let is_response = m.get("method").is_none()
                && (m.get("result").is_some() || m.get("error").is_some());
            is_response && m.get("id") == Some(id)
        })
    }

    /// Waits for the next message from the server for which `is` holds
    /// (`what` names it in the panic of a timeout); the others read on the
    /// way go to [`McpClient::other_messages`].
    pub fn wait_message(&mut self, what: &str, is: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let message: Value = serde_json::from_slice(&line).unwrap_or_else(|e| {
                        panic!(
                            "non-JSON line on stdout ({e}): {:?}; stderr:\n{}",
                            String::from_utf8_lossy(&line[..line.len().min(500)]),
                            self.stderr()
                        )
                    });
                    if is(&message) {
                        return message;
                    }
                    self.other_messages.push(message);
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "no {what} within {:?}; stderr:\n{}",
                    self.timeout,
                    self.stderr()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.try_status();
                    panic!(
                        "stdout closed before {what} (exit: {status:?}); stderr:\n{}",
                        self.stderr()
                    )
                }
            }
        }
    }

    /// Sends a request and returns its `result`, panicking on a JSON-RPC error.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let response = self.request(method, params);
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("{method} failed: {response}; stderr:\n{}", self.stderr()),
        }
    }

    /// `initialize` then `notifications/initialized`; returns the initialize result.
    pub fn initialize(&mut self) -> Value {
        let result = self.call(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "warden-e2e", "version": env!("CARGO_PKG_VERSION")},
            }),
        );
        self.notify("notifications/initialized", Value::Null);
        result
    }

    /// `tools/call`; returns the result (check `isError` for tool failures).
    pub fn call_tool(&mut self, name: &str, arguments: Value) -> Value {
        self.call("tools/call", json!({"name": name, "arguments": arguments}))
    }

    /// `tools/call` that must succeed; returns the first text block.
    pub fn tool_text(&mut self, name: &str, arguments: Value) -> String {
        let result = self.call_tool(name, arguments.clone());
        if result.get("isError") == Some(&Value::Bool(true)) {
            panic!(
                "tool {name}({arguments}) failed: {result}; stderr:\n{}",
                self.stderr()
            );
        }
        tool_result_text(&result)
    }

    /// `tools/call` that must succeed, on a fixture tool that returns JSON text.
    pub fn tool_json(&mut self, name: &str, arguments: Value) -> Value {
        let text = self.tool_text(name, arguments);
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("tool {name} returned non-JSON text ({e}): {text}"))
    }

    /// Sends a tools/call without waiting for a response (for `exit`, `kill_self`).
    pub fn call_tool_no_wait(&mut self, name: &str, arguments: Value) {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }));
    }

    /// Closes the server's stdin (EOF).
    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits for the process to exit; panics (after killing it) on timeout.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(status) = self.status {
            return status;
        }
        match wait_timeout(&mut self.child, timeout) {
            Some(status) => {
                self.status = Some(status);
                self.join_readers(Duration::from_secs(2));
                status
            }
            None => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "process did not exit within {timeout:?}; stderr:\n{}",
                    self.stderr()
                );
            }
        }
    }

    /// Waits for exit and returns the shell-style exit code (see [`exit_code`]).
    pub fn wait_code(&mut self, timeout: Duration) -> i32 {
        exit_code(self.wait_exit(timeout))
    }

    /// Lets the reader threads finish (the pipes close when every holder is gone).
    fn join_readers(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let done: Vec<_> = self.readers.drain(..).collect();
        for reader in done {
            if reader.is_finished() {
                let _ = reader.join();
            }
        }
    }

    /// Everything received on stderr so far, lossily decoded.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Waits until stderr contains `needle`; false on timeout.
    pub fn wait_stderr_contains(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.stderr().contains(needle) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every byte received on stdout so far.
    pub fn raw_stdout_bytes(&self) -> Vec<u8> {
        self.raw_stdout.lock().unwrap().clone()
    }

    /// Asserts stdout so far is only complete JSON-RPC 2.0 lines.
    pub fn assert_stdout_only_jsonrpc(&self) {
        assert_only_jsonrpc_lines(&self.raw_stdout_bytes());
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        self.stdin.take();
        if self.try_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The first text content block of a tool result.
pub fn tool_result_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .and_then(|blocks| blocks.iter().find(|b| b["type"] == "text"))
        .and_then(|b| b["text"].as_str())
        .unwrap_or_else(|| panic!("tool result without a text block: {result}"))
        .to_string()
}

/// Whether a tool result is a tool error (`isError: true`).
pub fn is_tool_error(result: &Value) -> bool {
    result.get("isError") == Some(&Value::Bool(true))
}

/// Asserts `bytes` is a sequence of complete lines, each one JSON-RPC 2.0 object.
pub fn assert_only_jsonrpc_lines(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    assert_eq!(
        bytes.last(),
        Some(&b'\n'),
        "stdout does not end with a newline: {:?}",
        String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(200)..])
    );
    for (n, line) in bytes[..bytes.len() - 1].split(|&b| b == b'\n').enumerate() {
        let message: Value = serde_json::from_slice(line).unwrap_or_else(|e| {
            panic!(
                "stdout line {} is not JSON ({e}): {:?}",
                n + 1,
                String::from_utf8_lossy(&line[..line.len().min(300)])
            )
        });
        // A batch is a JSON-RPC line too, when every item is one.
        let items = match &message {
            Value::Array(items) if !items.is_empty() => items.iter().collect(),
            m => vec![m],
        };
        for m in items {
            assert_eq!(
                m["jsonrpc"],
                "2.0",
                "stdout line {} is not JSON-RPC 2.0: {message}",
                n + 1
            );
        }
    }
}

/// Every audit record: each line of each `*.jsonl` file anywhere under `state/`
/// (the daemon's `--state-dir` puts them in `state/audit/`; an autostarted daemon
/// using `$XDG_STATE_HOME` in `state/warden/audit/`). Files in name order.
pub fn audit_records(env: &TestEnv) -> Vec<Value> {
    let mut files = Vec::new();
    collect_jsonl(&env.state, &mut files);
    files.sort();
    let mut records = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let record = serde_json::from_str(line).unwrap_or_else(|e| {
                panic!(
                    "{}:{}: invalid audit line ({e}): {line}",
                    file.display(),
                    n + 1
                )
            });
            records.push(record);
        }
    }
    records
}

fn collect_jsonl(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            collect_jsonl(&path, out);
        } else if path.extension().is_some_and(|e| e == "jsonl") {
            out.push(path);
        }
    }
}

/// Audit records of one session, matching on the `session` field.
pub fn session_records(env: &TestEnv, session: &str) -> Vec<Value> {
    audit_records(env)
        .into_iter()
        .filter(|r| r["session"].as_str() == Some(session))
        .collect()
}

/// Counts how often each `type.action` appears in the audit log (for messages).
pub fn audit_summary(env: &TestEnv) -> HashMap<String, usize> {
    let mut summary = HashMap::new();
    for r in audit_records(env) {
        let key = format!(
            "{}.{}",
            r["type"].as_str().unwrap_or("?"),
            r["action"].as_str().unwrap_or("?")
        );
        *summary.entry(key).or_insert(0) += 1;
    }
    summary
}

/// The Docker test image, when this machine can run it: `WARDEN_TEST_DOCKER_IMAGE`
/// is set and the engine (reached by `docker` as this user) has that image.
/// Otherwise one `skipping:` line and `None`, or a panic under
/// `WARDEN_REQUIRE_DOCKER=1`.
pub fn docker_test_image() -> Option<String> {
    let required = std::env::var_os("WARDEN_REQUIRE_DOCKER").is_some_and(|v| v == "1");
    let problem = match std::env::var("WARDEN_TEST_DOCKER_IMAGE") {
        Ok(image) if !image.is_empty() => match find_on_path("docker") {
            None => "no `docker` command on PATH".to_string(),
            Some(docker) => {
                let out = run(
                    Command::new(docker).args(["image", "inspect", "--format", "{{.Id}}", &image]),
                    Duration::from_secs(60),
                );
                if out.status.success() {
                    return Some(image);
                }
                format!(
                    "`docker image inspect {image}` failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            }
        },
        _ => "WARDEN_TEST_DOCKER_IMAGE is not set (scripts/test sets it when a Docker engine \
              runs; by hand: export WARDEN_TEST_DOCKER_IMAGE=$(scripts/docker-test-image))"
            .to_string(),
    };
    assert!(
        !required,
        "the Docker tests cannot run: {problem}; WARDEN_REQUIRE_DOCKER=1"
    );
    eprintln!("skipping: the Docker tests cannot run: {problem}");
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_pattern_is_exact_and_not_periodic() {
        assert_eq!(big_pattern(0), "");
        assert_eq!(big_pattern(1048576).len(), 1048576);
        let p = big_pattern(4096);
        assert!(p.is_ascii());
        assert_eq!(&p[..100], &big_pattern(100));
        for period in [1, 2, 16, 36, 64, 256, 1024] {
            assert_ne!(&p[..1000], &p[period..period + 1000], "period {period}");
        }
    }

    #[test]
    fn jsonrpc_line_check() {
        assert_only_jsonrpc_lines(b"");
        assert_only_jsonrpc_lines(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n");
        let bad = std::panic::catch_unwind(|| assert_only_jsonrpc_lines(b"hello\n"));
        assert!(bad.is_err());
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }

    #[test]
    fn env_layout() {
        let env = TestEnv::new();
        for dir in [&env.home, &env.runtime, &env.state, &env.config] {
            assert!(dir.is_dir());
        }
        let mode = env.runtime.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(
            env.socket.as_os_str().len() < 100,
            "socket path too long for sun_path"
        );
        let names: Vec<_> = env.env_vars().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            names,
            [
                "HOME",
                "XDG_RUNTIME_DIR",
                "XDG_STATE_HOME",
                "XDG_CONFIG_HOME"
            ]
        );
    }
}
