//! The audit store and `wardenctl logs` (issue 5, DESIGN.md §7,
//! docs/audit-format.md): the hash chain and `--verify`, crashes (`kill -9`
//! during heavy traffic, torn lines), `logs -f` without gaps or duplicates,
//! rotation and retention, and hostile text in records.
//!
//! Traffic comes from what the daemon really audits: sessions (start and
//! exit, fsynced) and refused escape calls (`policy.syscall`, group-committed)
//! made by a python3 ctypes loop inside the sandbox.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use warden_e2e::*;

const MINUTE: Duration = Duration::from_secs(60);

// ---- helpers ------------------------------------------------------------------

/// Every record reads back as one of the documented record types
/// (`warden_audit::event`, a typed oracle of docs/audit-format.md).
fn assert_typed(records: &[Value]) {
    for r in records {
        let rec: warden_audit::Record =
            serde_json::from_value(r.clone()).unwrap_or_else(|e| panic!("{e}: {r}"));
        if let Err(e) = warden_audit::event::AnyEvent::parse(&rec) {
            panic!("{e}: {r}");
        }
    }
}

/// The store directory of a daemon started with `--state-dir env.state`.
fn audit_dir(state: &Path) -> PathBuf {
    state.join("audit")
}

/// Store files in chain order: rotated files by name, then the live file.
fn store_files(state: &Path) -> Vec<PathBuf> {
    let dir = audit_dir(state);
    let mut rotated: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("audit.") && n.ends_with(".jsonl") && n != "audit.jsonl"
        })
        .collect();
    rotated.sort();
    let live = dir.join("audit.jsonl");
    if live.exists() {
        rotated.push(live);
    }
    rotated
}

/// Every stored line (without its newline), in chain order. Panics on a line
/// that is not one complete JSON object, except an incomplete last line of
/// the live file when `allow_torn` (returned separately).
fn stored_lines(state: &Path, allow_torn: bool) -> (Vec<Vec<u8>>, Option<Vec<u8>>) {
    let files = store_files(state);
    let mut lines = Vec::new();
    let mut torn = None;
    for (i, f) in files.iter().enumerate() {
        let bytes = std::fs::read(f).unwrap();
        let mut parts: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
        let tail = parts.pop().unwrap_or_default();
        if !tail.is_empty() {
            let last_file = i + 1 == files.len();
            assert!(
                allow_torn && last_file,
                "{}: ends in an incomplete line: {:?}",
                f.display(),
                String::from_utf8_lossy(tail)
            );
            torn = Some(tail.to_vec());
        }
        for (n, l) in parts.iter().enumerate() {
            let v: Value = serde_json::from_slice(l).unwrap_or_else(|e| {
                panic!(
                    "{}:{}: not one JSON record ({e}): {:?}",
                    f.display(),
                    n + 1,
                    String::from_utf8_lossy(l)
                )
            });
            assert!(
                v["seq"].as_u64().is_some(),
                "{}:{}: {v}",
                f.display(),
                n + 1
            );
            lines.push(l.to_vec());
        }
    }
    (lines, torn)
}

fn seq_of(line: &[u8]) -> u64 {
    serde_json::from_slice::<Value>(line).unwrap()["seq"]
        .as_u64()
        .unwrap()
}

/// `wardenctl logs --verify --json --state-dir S`: (exit code, report).
fn verify(env: &TestEnv, state: &Path) -> (i32, Value) {
    let out = run(
        &mut env.ctl([
            OsString::from("logs"),
            "--verify".into(),
            "--json".into(),
            "--state-dir".into(),
            state.into(),
        ]),
        MINUTE,
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "--verify --json printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (exit_code(out.status), report)
}

fn assert_verifies(env: &TestEnv, state: &Path) -> Value {
    let (code, report) = verify(env, state);
    assert_eq!(code, 0, "verify failed: {report:#}");
    assert_eq!(report["ok"], true, "{report:#}");
    report
}

/// Runs `wardenctl ARGS` and returns (exit code, stdout, stderr).
fn ctl_out(env: &TestEnv, args: &[OsString]) -> (i32, Vec<u8>, String) {
    let out = run(&mut env.ctl(args.iter().cloned()), MINUTE);
    (
        exit_code(out.status),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// One short fixture session (start + exit records): the fixture reads EOF
/// on stdin and exits.
fn short_session(env: &TestEnv, policy: &Path) -> i32 {
    let mut cmd = env.shim([
        OsString::from("--policy"),
        policy.into(),
        "--no-autostart".into(),
        "--".into(),
        fixture().into(),
    ]);
    exit_code(run(&mut cmd, MINUTE).status)
}

fn python() -> Option<PathBuf> {
    let p = PathBuf::from("/usr/bin/python3");
    p.exists().then_some(p)
}

fn user_notif() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
        .is_ok_and(|a| a.split_whitespace().any(|x| x == "user_notif"))
}

/// A python3 loop inside the sandbox making refused escape calls of many
/// rules for `secs` seconds: about 10 `policy.syscall` records per second per
/// rule (the rate limit) plus the summaries.
const FLOOD: &str = r#"
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = [[int(x) for x in a.split(",")] for a in sys.argv[2:]]
end = time.time() + float(sys.argv[1])
n = 0
while time.time() < end:
    for c in calls:
        libc.syscall(*[ctypes.c_long(x) for x in c])
        n += 1
print(n)
"#;

fn flood_calls() -> Vec<String> {
    let calls: &[(i64, &[i64])] = &[
        (libc::SYS_unshare, &[0x1000_0000]),
        (libc::SYS_ptrace, &[2, 1, 0, 0]),
        (libc::SYS_io_uring_setup, &[1, 0]),
        (libc::SYS_bpf, &[0, 0, 0]),
        (libc::SYS_perf_event_open, &[0, 0, -1, -1, 0]),
        (libc::SYS_userfaultfd, &[0]),
        (libc::SYS_keyctl, &[0, 0, 0, 0, 0]),
        (libc::SYS_add_key, &[0, 0, 0, 0, 0]),
        (libc::SYS_request_key, &[0, 0, 0, 0]),
        (libc::SYS_setns, &[-1, 0]),
        (libc::SYS_pivot_root, &[0, 0]),
        (libc::SYS_open_by_handle_at, &[-1, 0, 0]),
        (libc::SYS_init_module, &[0, 0, 0]),
        (libc::SYS_delete_module, &[0, 0]),
        (libc::SYS_process_vm_readv, &[1, 0, 0, 0, 0, 0]),
    ];
    calls
        .iter()
        .map(|(nr, args)| {
            std::iter::once(*nr)
                .chain(args.iter().copied())
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect()
}

/// A session running [`FLOOD`] for `secs` seconds (spawned, not waited for).
fn flood_session(env: &TestEnv, policy: &Path, python: &Path, secs: f64) -> Child {
    let mut args: Vec<OsString> = vec![
        "--policy".into(),
        policy.into(),
        "--no-autostart".into(),
        "--".into(),
        python.into(),
        "-c".into(),
        FLOOD.into(),
        secs.to_string().into(),
    ];
    args.extend(flood_calls().into_iter().map(OsString::from));
    env.shim(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning a flood session")
}

/// Traffic until `stop`: short sessions in a loop, and (with python3 and
/// seccomp user notification) flood sessions.
fn traffic(
    env: &Arc<TestEnv>,
    policy: &Path,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    for _ in 0..2 {
        let (env, policy, stop) = (env.clone(), policy.to_path_buf(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                short_session(&env, &policy);
            }
        }));
    }
    if let (Some(py), true) = (python(), user_notif()) {
        for _ in 0..2 {
            let (env, policy, stop, py) =
                (env.clone(), policy.to_path_buf(), stop.clone(), py.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let mut child = flood_session(&env, &policy, &py, 1.0);
                    if wait_timeout(&mut child, MINUTE).is_none() {
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                }
            }));
        }
    } else {
        println!("note: no python3 or no seccomp user notification: traffic is sessions only");
    }
    threads
}

/// `wardenctl logs -f ARGS` with its stdout collected line by line.
struct Follower {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Follower {
    fn start(env: &TestEnv, args: &[&str]) -> Follower {
        let mut child = env
            .ctl(["logs", "-f"].iter().chain(args.iter()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning wardenctl logs -f");
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l2 = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => l2.lock().unwrap().push(l),
                    Err(_) => break,
                }
            }
        });
        Follower { child, lines }
    }

    fn seqs(&self) -> Vec<u64> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .map(|l| seq_of(l.as_bytes()))
            .collect()
    }

    /// Waits (generously) until a record with seq >= `seq` was printed.
    fn wait_for(&mut self, seq: u64) {
        let deadline = Instant::now() + MINUTE;
        while !self.seqs().iter().any(|&s| s >= seq) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "logs -f exited early with {status}: {:?}",
                    self.lines.lock().unwrap()
                );
            }
            assert!(
                Instant::now() < deadline,
                "logs -f did not print seq {seq} within a minute; got {:?}",
                self.seqs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the printed lines stop changing for a moment.
    fn settle(&self) {
        let mut n = usize::MAX;
        while n != self.lines.lock().unwrap().len() {
            n = self.lines.lock().unwrap().len();
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn stop(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(50));
        let lines = self.lines.lock().unwrap().clone();
        lines
    }
}

fn last_seq(state: &Path) -> u64 {
    let (lines, _) = stored_lines(state, false);
    lines.last().map(|l| seq_of(l)).unwrap_or(0)
}

/// Copies the store to a fresh state dir (for tampering).
fn copy_store(env: &TestEnv, name: &str) -> PathBuf {
    let state = env.mkdir(name);
    let dir = audit_dir(&state);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(audit_dir(&env.state)).unwrap().flatten() {
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    state
}

fn policy(env: &TestEnv) -> PathBuf {
    env.policy(
        "logs.yaml",
        "version: 1\nname: e2e-logs\nlimits:\n  timeout_s: 120\n",
    )
}

// ---- verification -----------------------------------------------------------------

#[test]
fn verify_passes_untouched_and_names_the_edited_deleted_and_truncated_record() {
    let env = TestEnv::new();
    let policy = policy(&env);
    let mut daemon = env.start_daemon();
    for _ in 0..4 {
        assert_eq!(short_session(&env, &policy), 0);
    }
    daemon.stop(MINUTE);
    let report = assert_verifies(&env, &env.state);
    let (lines, _) = stored_lines(&env.state, false);
    let n = lines.len() as u64;
    assert!(n >= 10, "{n} records");
    assert_eq!(report["records"], n);
    assert_eq!(
        (report["first_seq"].as_u64(), report["last_seq"].as_u64()),
        (Some(1), Some(n))
    );
    // The human form says OK and exits 0.
    let (code, out, _) = ctl_out(
        &env,
        &[
            OsString::from("logs"),
            "--verify".into(),
            "--state-dir".into(),
            env.state.clone().into(),
        ],
    );
    assert_eq!(code, 0);
    assert!(
        String::from_utf8_lossy(&out).starts_with("OK: "),
        "{}",
        String::from_utf8_lossy(&out)
    );
    // Each record chains onto the one before it (sha256 of the stored line).
    for w in lines.windows(2) {
        let prev = serde_json::from_slice::<Value>(&w[1]).unwrap()["prev"].clone();
        assert_eq!(prev.as_str().unwrap().len(), 64);
    }

    let live = |state: &Path| audit_dir(state).join("audit.jsonl");
    let rewrite = |state: &Path, lines: &[Vec<u8>]| {
        let mut text = Vec::new();
        for l in lines {
            text.extend_from_slice(l);
            text.push(b'\n');
        }
        std::fs::write(live(state), text).unwrap();
    };
    let expect = |state: &Path, kind: &str, line: u64, seq: u64| {
        let (code, report) = verify(&env, state);
        assert_eq!(code, 1, "{report:#}");
        let p = &report["problem"];
        assert_eq!(
            (
                p["kind"].as_str(),
                p["file"].as_str(),
                p["line"].as_u64(),
                p["seq"].as_u64()
            ),
            (Some(kind), Some("audit.jsonl"), Some(line), Some(seq)),
            "{report:#}"
        );
        // The human form names file, line, seq and kind, and exits 1.
        let (code, out, _) = ctl_out(
            &env,
            &[
                OsString::from("logs"),
                "--verify".into(),
                "--state-dir".into(),
                state.into(),
            ],
        );
        let out = String::from_utf8_lossy(&out).into_owned();
        assert_eq!(code, 1, "{out}");
        assert!(
            out.starts_with(&format!("FAILED: audit.jsonl:{line}: seq {seq}: {kind}: ")),
            "{out}"
        );
    };

    // One byte of record 5 changed (still valid JSON): record 5 is named.
    let state = copy_store(&env, "edited");
    let mut edited = lines.clone();
    let text = String::from_utf8(edited[4].clone()).unwrap();
    let pos = text.find("\"ts\":\"").unwrap() + 6 + 3; // a digit of the year
    edited[4][pos] = if edited[4][pos] == b'7' { b'8' } else { b'7' };
    rewrite(&state, &edited);
    expect(&state, "edited", 5, 5);

    // Line 4 deleted: record 4 is missing, where line 4 now is.
    let state = copy_store(&env, "deleted");
    let mut deleted = lines.clone();
    deleted.remove(3);
    rewrite(&state, &deleted);
    expect(&state, "missing", 4, 4);

    // Cut in the middle of the last line: the head says it was on disk.
    let state = copy_store(&env, "truncated");
    let len = std::fs::metadata(live(&state)).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(live(&state))
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    expect(&state, "truncated", n, n);

    // Cut at a line boundary (the last two records gone): the head tells.
    let state = copy_store(&env, "cut");
    rewrite(&state, &lines[..lines.len() - 2]);
    expect(&state, "truncated", n - 1, n - 1);
}

// ---- crashes ------------------------------------------------------------------------

#[test]
fn kill_9_during_heavy_traffic_never_leaves_a_torn_or_interleaved_line() {
    let env = Arc::new(TestEnv::new());
    let policy = policy(&env);
    let mut torn_seen = 0;
    let mut last = 0;
    for round in 0..5u64 {
        let daemon = env.start_daemon();
        let stop = Arc::new(AtomicBool::new(false));
        let threads = traffic(&env, &policy, &stop);
        // Let traffic build up, a little longer each round.
        let deadline = Instant::now() + Duration::from_millis(1200 + 350 * round);
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(send_signal(daemon.pid(), libc::SIGKILL));
        drop(daemon);
        stop.store(true, Ordering::SeqCst);
        for t in threads {
            t.join().unwrap();
        }
        // Right after the crash: whole lines only, except perhaps the very
        // last one of the live file (a write the kill cut short).
        let (lines, torn) = stored_lines(&env.state, true);
        if torn.is_some() {
            torn_seen += 1;
        }
        let now = lines.last().map(|l| seq_of(l)).unwrap_or(0);
        assert!(
            now > last,
            "round {round}: no traffic recorded ({now} <= {last})"
        );
        last = now;
    }
    // A restart moves any torn line aside and the whole chain verifies.
    let mut daemon = env.start_daemon();
    let report = assert_verifies(&env, &env.state);
    daemon.stop(MINUTE);
    let report_after = assert_verifies(&env, &env.state);
    let (lines, _) = stored_lines(&env.state, false);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(seq_of(l), i as u64 + 1, "seq continuity");
    }
    let torn_records = lines
        .iter()
        .filter(|l| String::from_utf8_lossy(l).contains("\"action\":\"torn\""))
        .count();
    println!(
        "{} records over 5 crashes; torn tails after a kill: {torn_seen}; daemon.torn records: {torn_records}; {}",
        lines.len(),
        report["notes"]
    );
    assert!(torn_records <= 5);
    assert_eq!(report_after["records"], lines.len());
}

#[test]
fn a_torn_last_line_is_moved_aside_and_the_chain_and_seq_continue() {
    let env = TestEnv::new();
    let policy = policy(&env);
    let daemon = env.start_daemon();
    assert_eq!(short_session(&env, &policy), 0);
    assert!(send_signal(daemon.pid(), libc::SIGKILL));
    drop(daemon);
    let before = last_seq(&env.state);
    // What a write cut short by kill -9 or a power loss leaves.
    let fragment = format!(
        "{{\"v\":2,\"ts\":\"2026-01-01T00:00:00.000Z\",\"seq\":{},\"prev\":\"00",
        before + 1
    );
    let live = audit_dir(&env.state).join("audit.jsonl");
    let mut bytes = std::fs::read(&live).unwrap();
    bytes.extend_from_slice(fragment.as_bytes());
    std::fs::write(&live, &bytes).unwrap();
    let (code, report) = verify(&env, &env.state);
    assert_eq!(code, 1);
    assert_eq!(report["problem"]["kind"], "torn", "{report:#}");
    assert_eq!(report["problem"]["seq"], before + 1, "{report:#}");

    let mut daemon = env.start_daemon();
    assert_eq!(short_session(&env, &policy), 0);
    daemon.stop(MINUTE);
    let report = assert_verifies(&env, &env.state);
    assert!(
        report["notes"].to_string().contains(".torn"),
        "the torn file is reported: {report:#}"
    );
    let (lines, _) = stored_lines(&env.state, false);
    let torn: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_slice::<Value>(l).unwrap())
        .filter(|r| r["type"] == "daemon" && r["action"] == "torn")
        .collect();
    assert_eq!(torn.len(), 1, "{torn:?}");
    let t = &torn[0];
    // The torn record's seq is reused: nothing is skipped.
    assert_eq!(t["seq"], before + 1, "{t}");
    assert_eq!(t["details"]["bytes"], fragment.len(), "{t}");
    assert_eq!(t["details"]["after_seq"], before, "{t}");
    let moved = audit_dir(&env.state).join(t["resource"].as_str().unwrap());
    assert_eq!(std::fs::read(&moved).unwrap(), fragment.as_bytes());
    // `logs` shows it like any record.
    let (code, out, _) = ctl_out(
        &env,
        &[
            OsString::from("logs"),
            "--type".into(),
            "daemon.torn".into(),
            "--state-dir".into(),
            env.state.clone().into(),
        ],
    );
    assert_eq!(code, 0);
    let out = String::from_utf8_lossy(&out).into_owned();
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("daemon.torn"), "{out}");
}

// ---- following ---------------------------------------------------------------------

#[test]
fn logs_f_started_before_during_and_after_a_session_shows_every_record_once() {
    let env = TestEnv::new();
    let policy = policy(&env);
    let _daemon = env.start_daemon();
    let flood = python().filter(|_| user_notif());
    let mut before = Follower::start(&env, &["--json"]);
    let mut sessions_only = Follower::start(&env, &["--json", "--type", "session"]);
    before.wait_for(1);

    // A session that keeps writing records while followers attach.
    let mut session = env.fixture_session(&policy, &[], &[]);
    session.initialize();
    let mut flood_child = flood
        .as_ref()
        .map(|py| flood_session(&env, &policy, py, 2.0));
    std::thread::sleep(Duration::from_millis(300));
    let mut during = Follower::start(&env, &["--json"]);
    for _ in 0..3 {
        assert_eq!(short_session(&env, &policy), 0);
    }
    session.close_stdin();
    assert_eq!(session.wait_code(MINUTE), 0);
    if let Some(c) = flood_child.as_mut() {
        assert!(wait_timeout(c, MINUTE).is_some_and(|s| s.success()));
    }
    let mut after = Follower::start(&env, &["--json"]);
    assert_eq!(short_session(&env, &policy), 0);
    // Everything is written once the last session.exit is: wait for it.
    let target = {
        let records = audit_records(&env);
        let last_exit = records
            .iter()
            .rev()
            .find(|r| r["type"] == "session" && r["action"] == "exit")
            .unwrap();
        last_exit["seq"].as_u64().unwrap()
    };
    for f in [&mut before, &mut during, &mut after, &mut sessions_only] {
        f.wait_for(target);
    }
    before.settle();
    let stored: BTreeMap<u64, String> = stored_lines(&env.state, false)
        .0
        .into_iter()
        .map(|l| (seq_of(&l), String::from_utf8(l).unwrap()))
        .collect();
    let total = *stored.keys().last().unwrap();
    for (name, f) in [("before", before), ("during", during), ("after", after)] {
        let lines = f.stop();
        let seqs: Vec<u64> = lines.iter().map(|l| seq_of(l.as_bytes())).collect();
        let want: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, want, "{name}: every record once, in order");
        assert!(
            seqs.len() as u64 >= target,
            "{name}: {} < {target}",
            seqs.len()
        );
        for l in &lines {
            assert_eq!(
                Some(l),
                stored.get(&seq_of(l.as_bytes())),
                "{name}: the stored line"
            );
        }
    }
    let session_lines = sessions_only.stop();
    let want: Vec<u64> = stored
        .iter()
        .filter(|(_, l)| l.contains("\"type\":\"session\""))
        .map(|(s, _)| *s)
        .filter(|s| *s <= total)
        .collect();
    let got: Vec<u64> = session_lines.iter().map(|l| seq_of(l.as_bytes())).collect();
    assert_eq!(got, want, "--type session");
    assert!(got.len() >= 10, "{got:?}");
    if flood.is_some() {
        let syscalls = stored
            .values()
            .filter(|l| l.contains("\"action\":\"syscall\""))
            .count();
        assert!(syscalls > 20, "the flood produced {syscalls} records");
    } else {
        println!("note: no python3 or no seccomp user notification: no flood");
    }
}

#[test]
fn logs_f_ends_when_the_daemon_shuts_down_after_the_last_exit_record() {
    let env = TestEnv::new();
    let policy = policy(&env);
    let mut daemon = env.start_daemon();
    let mut session = env.fixture_session(&policy, &[], &[]);
    session.initialize();
    let mut f = Follower::start(&env, &["--json"]);
    let start = audit_records(&env)
        .iter()
        .find(|r| r["action"] == "start" && r["type"] == "session")
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    f.wait_for(start);
    daemon.stop(MINUTE);
    let status = wait_timeout(&mut f.child, MINUTE).expect("logs -f ends with the daemon");
    assert!(status.success(), "{status}");
    let lines = f.stop();
    // The exit record the shutdown wrote was followed before the end.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"action\":\"exit\"") && l.contains("shutting down")),
        "{lines:#?}"
    );
}

// ---- rotation and retention -----------------------------------------------------

#[test]
fn rotation_and_retention_under_a_small_limit_keep_the_chain_verifiable() {
    let env = TestEnv::new();
    let policy = policy(&env);
    let mut daemon =
        env.start_daemon_with(&["--audit-max-bytes", "4096", "--audit-keep", "2"], &[]);
    for _ in 0..12 {
        assert_eq!(short_session(&env, &policy), 0);
    }
    daemon.stop(MINUTE);
    let files = store_files(&env.state);
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        files.len(),
        3,
        "two rotated files and the live one: {names:?}"
    );
    for f in &files {
        let len = std::fs::metadata(f).unwrap().len();
        assert!(len <= 4096, "{}: {len} bytes", f.display());
        let (first, _) = std::fs::read(f)
            .map(|b| (b.split(|&c| c == b'\n').next().map(seq_of).unwrap(), b))
            .unwrap();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if name != "audit.jsonl" {
            assert_eq!(name, format!("audit.{first:012}.jsonl"));
        }
    }
    let (lines, _) = stored_lines(&env.state, false);
    let records: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert!(
        records[0]["seq"].as_u64().unwrap() > 1,
        "old files were deleted"
    );
    let rotates: Vec<&Value> = records.iter().filter(|r| r["action"] == "rotate").collect();
    let last_rotate = rotates.last().expect("a daemon.rotate record");
    assert!(
        !last_rotate["details"]["deleted"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{last_rotate}"
    );
    assert_eq!(last_rotate["details"]["oldest_seq"], records[0]["seq"]);
    let report = assert_verifies(&env, &env.state);
    assert!(
        report["notes"].to_string().contains("retention"),
        "{report:#}"
    );
    // `logs --json` gives every remaining record once, across the files.
    let (code, out, _) = ctl_out(
        &env,
        &[
            OsString::from("logs"),
            "--json".into(),
            "--state-dir".into(),
            env.state.clone().into(),
        ],
    );
    assert_eq!(code, 0);
    let mut expected = Vec::new();
    for l in &lines {
        expected.extend_from_slice(l);
        expected.push(b'\n');
    }
    assert_eq!(out, expected);

    // Deleting the oldest remaining file is not retention.
    let state = copy_store(&env, "oldest-gone");
    std::fs::remove_file(audit_dir(&state).join(files[0].file_name().unwrap())).unwrap();
    let (code, report) = verify(&env, &state);
    assert_eq!(
        (code, report["problem"]["kind"].as_str()),
        (1, Some("missing")),
        "{report:#}"
    );
    // Nor is deleting a middle file.
    let state = copy_store(&env, "middle-gone");
    std::fs::remove_file(audit_dir(&state).join(files[1].file_name().unwrap())).unwrap();
    let (code, report) = verify(&env, &state);
    assert_eq!(
        (code, report["problem"]["kind"].as_str()),
        (1, Some("missing")),
        "{report:#}"
    );
    assert_eq!(report["problem"]["file"], "audit.jsonl", "{report:#}");

    // A restart with fewer files kept deletes the excess, on record.
    let mut daemon =
        env.start_daemon_with(&["--audit-max-bytes", "4096", "--audit-keep", "1"], &[]);
    daemon.stop(MINUTE);
    assert_eq!(store_files(&env.state).len(), 2);
    let records = audit_records(&env);
    assert!(
        records.iter().any(|r| r["action"] == "retention"),
        "{records:#?}"
    );
    assert_typed(&records);
    assert_verifies(&env, &env.state);
}

// ---- hostile text ---------------------------------------------------------------------

/// Looks like a whole log line, colours the terminal, sets its title, and
/// reverses text direction.
const HOSTILE: &str = "evil\n2026-01-01 00:00:00.000  deadbeef  session.start      allow     binsh\r\u{1b}[31m\"q\"\\\u{1b}]0;pwned\u{7}\u{202e}\u{85}\u{9b}2J\u{2028}end";

fn is_row(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 25
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[10] == b' '
        && b[13] == b':'
        && b[19] == b'.'
        && &b[23..25] == b"  "
}

#[test]
fn hostile_resources_and_reasons_cannot_forge_or_break_records() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    // A server binary whose path is hostile, a policy in a directory whose
    // name is not UTF-8, hostile arguments.
    let evil_dir = env.root.join("evil");
    std::fs::create_dir_all(&evil_dir).unwrap();
    let program = evil_dir.join(HOSTILE.replace('/', "_"));
    std::fs::copy(fixture(), &program).unwrap();
    let bad_dir = env
        .root
        .join(std::ffi::OsStr::from_bytes(b"not-utf8-\xff\xfe"));
    std::fs::create_dir_all(&bad_dir).unwrap();
    let policy = bad_dir.join("p.yaml");
    std::fs::write(&policy, "version: 1\nname: e2e-hostile\n").unwrap();
    let mut follower = Follower::start(&env, &[]);
    let mut session = McpClient::spawn(env.shim([
        OsString::from("--policy"),
        policy.clone().into(),
        "--".into(),
        program.clone().into(),
        "--marker".into(),
        HOSTILE.into(),
    ]));
    session.initialize();
    // `wardenctl kill` records the session's argv as the resource.
    let id = env.sessions()[0]["id"].as_str().unwrap().to_string();
    let (code, _, err) = ctl_out(&env, &os(&["kill", &id]));
    assert_eq!(code, 0, "{err}");
    session.wait_exit(MINUTE);
    let exit_seq = {
        let records = audit_records(&env);
        assert_typed(&records);
        records
            .iter()
            .find(|r| r["action"] == "exit")
            .unwrap_or_else(|| panic!("{records:#?}"))["seq"]
            .as_u64()
            .unwrap()
    };

    // The store: one printable-ASCII line per record, the text intact.
    let (lines, _) = stored_lines(&env.state, false);
    for l in &lines {
        assert!(
            l.iter().all(|b| (b' '..=b'~').contains(b)),
            "not printable ASCII: {:?}",
            String::from_utf8_lossy(l)
        );
    }
    let records: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let start = records
        .iter()
        .find(|r| r["action"] == "start" && r["type"] == "session")
        .unwrap();
    assert_eq!(start["resource"].as_str(), program.to_str(), "{start}");
    assert_eq!(start["details"]["argv"][2], HOSTILE, "{start}");
    assert!(
        start["details"]["policy_path"]
            .as_str()
            .unwrap()
            .contains("not-utf8-\u{fffd}\u{fffd}"),
        "invalid UTF-8 replaced: {start}"
    );
    let kill = records.iter().find(|r| r["action"] == "kill").unwrap();
    assert!(
        kill["resource"].as_str().unwrap().contains(HOSTILE),
        "{kill}"
    );
    assert_verifies(&env, &env.state);

    // The table, from the files and followed: one row per record, nothing
    // that drives a terminal.
    let (code, out, err) = ctl_out(
        &env,
        &[
            OsString::from("logs"),
            "--state-dir".into(),
            env.state.clone().into(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    follower.wait_for_text(exit_seq);
    let followed = follower.stop().join("\n");
    let table = String::from_utf8(out).unwrap();
    assert_eq!(table.lines().count(), 1 + records.len(), "{table}");
    for (what, text) in [("logs", table), ("logs -f", followed)] {
        let rows: Vec<&str> = text.lines().collect();
        assert!(rows[0].starts_with("TIME (UTC)"), "{what}: {text}");
        assert!(rows.len() as u64 > exit_seq, "{what}: {text}");
        for row in &rows[1..] {
            assert!(
                is_row(row),
                "{what}: a line that is not a record row: {row:?}"
            );
            assert!(
                !row.starts_with("2026-01-01 00:00:00.000"),
                "{what}: forged: {row:?}"
            );
            assert!(
                !row.chars().any(|c| c.is_control()
                    || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2028}' | '\u{2029}')),
                "{what}: control or bidi character in {row:?}"
            );
        }
        assert!(
            text.contains("\\n2026-01-01 00:00:00.000  deadbeef")
                && text.contains("\\u{1b}]0;pwned"),
            "{what}: the text is shown, escaped: {text}"
        );
    }
    // --json prints the stored lines, as stored.
    let (code, out, _) = ctl_out(
        &env,
        &[
            OsString::from("logs"),
            "--json".into(),
            "--state-dir".into(),
            env.state.clone().into(),
        ],
    );
    assert_eq!(code, 0);
    let mut expected = Vec::new();
    for l in &stored_lines(&env.state, false).0 {
        expected.extend_from_slice(l);
        expected.push(b'\n');
    }
    assert_eq!(out, expected);
}

impl Follower {
    /// For human output: waits until a row of the record with `seq` could
    /// have been printed, i.e. as many rows as records up to it.
    fn wait_for_text(&mut self, seq: u64) {
        let deadline = Instant::now() + MINUTE;
        while (self.lines.lock().unwrap().len() as u64) < seq + 1 {
            assert!(
                Instant::now() < deadline,
                "logs -f printed only {:?}",
                self.lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

// ---- filters -----------------------------------------------------------------------

#[test]
fn filters_select_by_session_type_decision_and_time() {
    let env = TestEnv::new();
    let policy = policy(&env);
    let mut daemon = env.start_daemon();
    assert_eq!(short_session(&env, &policy), 0);
    assert_eq!(short_session(&env, &policy), 0);
    daemon.stop(MINUTE);
    let records = audit_records(&env);
    assert_typed(&records);
    let json = |args: &[&str]| -> Vec<Value> {
        let mut a = os(&["logs", "--json", "--state-dir"]);
        a.push(env.state.clone().into());
        a.extend(os(args));
        let (code, out, err) = ctl_out(&env, &a);
        assert_eq!(code, 0, "{args:?}: {err}");
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let sid = records
        .iter()
        .find_map(|r| r["session"].as_str())
        .unwrap()
        .to_string();
    let mine = json(&["--session", &sid[..6]]);
    assert_eq!(mine.len(), 2, "{mine:#?}");
    assert!(mine.iter().all(|r| r["session"] == sid.as_str()));
    let starts = json(&["--type", "session.start"]);
    assert_eq!(starts.len(), 2);
    let daemon_recs = json(&["--type", "daemon"]);
    assert!(daemon_recs.iter().all(|r| r["type"] == "daemon") && daemon_recs.len() >= 2);
    let info = json(&["--decision", "info"]);
    assert!(info.iter().all(|r| r["decision"] == "info") && !info.is_empty());
    assert_eq!(json(&["--since", "1h"]).len(), records.len());
    assert!(json(&["--until", "2000-01-01T00:00:00Z"]).is_empty());
    assert!(json(&["--since", "2999-01-01T00:00:00Z"]).is_empty());
    // Bad values are errors naming the flag.
    for (args, needle) in [
        (&["--type", "sesion"][..], "unknown record type"),
        (&["--decision", "maybe"][..], "unknown decision"),
        (&["--since", "yesterday"][..], "--since"),
        (&["-f", "--until", "2000-01-01T00:00:00Z"][..], "--until"),
    ] {
        let mut a = os(&["logs"]);
        a.extend(os(args));
        let (code, _, err) = ctl_out(&env, &a);
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// On a terminal the decision column is coloured (deny red, allow green...);
/// `NO_COLOR` turns that off, and so does a pipe (the other tests read
/// through pipes and see no escape at all). The terminal is a real pty from
/// util-linux `script`.
#[test]
fn logs_colour_only_on_a_terminal_and_not_with_no_color() {
    let script = find_on_path("script").or_else(|| {
        let p = PathBuf::from("/usr/bin/script");
        p.is_file().then_some(p)
    });
    let Some(script) = script else {
        eprintln!("skipping: no `script` (util-linux) to give wardenctl a terminal");
        return;
    };
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    assert_eq!(short_session(&env, &policy(&env)), 0);
    let on_tty = |no_color: bool| -> String {
        let cmdline = format!(
            "'{}' --socket '{}' logs",
            bin("wardenctl").display(),
            env.socket.display()
        );
        let mut cmd = std::process::Command::new(&script);
        cmd.args(["-qec", &cmdline, "/dev/null"])
            .envs(env.env_vars())
            .env_remove("NO_COLOR")
            .env("TERM", "xterm");
        if no_color {
            cmd.env("NO_COLOR", "1");
        }
        let out = run(&mut cmd, MINUTE);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let coloured = on_tty(false);
    assert!(coloured.contains("session.start"), "{coloured:?}");
    assert!(
        coloured.contains("\u{1b}["),
        "no colour on a terminal: {coloured:?}"
    );
    let plain = on_tty(true);
    assert!(plain.contains("session.start"), "{plain:?}");
    assert!(
        !plain.contains('\u{1b}'),
        "colour despite NO_COLOR: {plain:?}"
    );
    let (code, piped, _) = ctl_out(&env, &os(&["logs"]));
    assert_eq!(code, 0);
    assert!(!piped.contains(&0x1b), "colour into a pipe");
}
