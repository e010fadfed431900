//! Refused calls that matter are recorded (issue 3): the seccomp filter sends
//! escape and kernel-attack calls to a user-notification listener that the
//! daemon answers with the rule's errno and records as `policy.syscall` deny
//! records, rate-limited per rule (docs/audit-format.md).
//!
//! Probes are python3 (ctypes) raw syscalls run through the real shim and
//! daemon, with the syscall numbers of this architecture passed in argv.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use warden_e2e::*;

/// Must match `wardend::syscalls::PER_SECOND`.
const PER_SECOND: u64 = 10;

const PRELUDE: &str = r#"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *a):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(x & 0xffffffffffffffff) for x in a])
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
NR = dict(a.split("=") for a in sys.argv[1:])
NR = {k: int(v) for k, v in NR.items()}
"#;

/// Three recorded refusals, then controls: allowed calls and refusals that are
/// not recorded (clone3, a netlink socket).
const PROBE: &str = r#"
CLONE_NEWUSER = 0x10000000
CLONE_FILES = 0x400
print("unshare=" + sc(NR["unshare"], CLONE_NEWUSER))
# PTRACE_PEEKDATA on pid 1: ESRCH without the filter (we do not trace it).
print("ptrace=" + sc(NR["ptrace"], 2, 1, 0, 0))
# A NULL params pointer: EFAULT without the filter.
print("io_uring_setup=" + sc(NR["io_uring_setup"], 1, 0))
print("getpid=" + sc(NR["getpid"]))
print("unshare_files=" + sc(NR["unshare"], CLONE_FILES))
print("clone3=" + sc(NR["clone3"], 0, 0))
print("netlink=" + sc(NR["socket"], 16, 2, 0))
sys.stdout.flush()
"#;

const LOOP: &str = r#"
n = 0
for _ in range(10000):
    if sc(NR["unshare"], 0x10000000) == "EPERM":
        n += 1
print("refused=%d" % n)
"#;

fn numbers() -> Vec<String> {
    [
        ("unshare", libc::SYS_unshare),
        ("ptrace", libc::SYS_ptrace),
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("getpid", libc::SYS_getpid),
        ("clone3", libc::SYS_clone3),
        ("socket", libc::SYS_socket),
    ]
    .iter()
    .map(|(n, nr)| format!("{n}={nr}"))
    .collect()
}

/// True when the kernel offers seccomp user notification; otherwise says why
/// the test skips.
fn user_notif() -> bool {
    let ok = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
        .is_ok_and(|a| a.split_whitespace().any(|x| x == "user_notif"));
    if !ok {
        eprintln!("skipping: this kernel lacks seccomp user notification");
    }
    ok
}

fn python() -> Option<&'static Path> {
    let p = Path::new("/usr/bin/python3");
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipping: /usr/bin/python3 is not installed");
        None
    }
}

/// Runs `python3 -c PRELUDE+code NAME=NR...` in a session; returns the
/// `name=result` lines and the session id.
fn probe(env: &TestEnv, python: &Path, code: &str) -> (HashMap<String, String>, String) {
    let policy = env.policy(
        "probe.yaml",
        "version: 1\nname: e2e-syscalls\nlimits:\n  timeout_s: 60\n",
    );
    let mut args: Vec<std::ffi::OsString> = vec![
        "--policy".into(),
        policy.into_os_string(),
        "--".into(),
        python.into(),
        "-c".into(),
        format!("{PRELUDE}{code}").into(),
    ];
    args.extend(numbers().into_iter().map(Into::into));
    let out = run(&mut env.shim(args), Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        exit_code(out.status),
        0,
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let results = stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let records = audit_records(env);
    let start = records
        .iter()
        .find(|r| r["type"] == "session" && r["action"] == "start")
        .unwrap_or_else(|| panic!("no session.start in {records:?}"));
    assert_eq!(
        start["details"]["sandbox"]["syscall_audit"], "seccomp user notification",
        "{start}"
    );
    (results, start["session"].as_str().unwrap().to_owned())
}

fn syscall_records(env: &TestEnv, session: &str) -> Vec<Value> {
    let records = session_records(env, session);
    let seq = |action: &str| {
        records
            .iter()
            .find(|r| r["type"] == "session" && r["action"] == action)
            .and_then(|r| r["seq"].as_u64())
            .unwrap_or_else(|| panic!("no session.{action} in {records:?}"))
    };
    let (start, exit) = (seq("start"), seq("exit"));
    let calls: Vec<Value> = records
        .iter()
        .filter(|r| r["type"] == "policy" && r["action"] == "syscall")
        .cloned()
        .collect();
    for r in &calls {
        // Written while the session ran: after its start, before its exit.
        let s = r["seq"].as_u64().unwrap();
        assert!(start < s && s < exit, "{r} outside {start}..{exit}");
        assert_eq!(r["decision"], "deny", "{r}");
    }
    calls
}

#[test]
fn refused_escape_calls_are_recorded_once_each_and_allowed_calls_not_at_all() {
    let Some(python) = python() else { return };
    if !user_notif() {
        return;
    }
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let (got, session) = probe(&env, python, PROBE);
    // Refused as before: the notifier answers with the rule's errno.
    for (name, want) in [
        ("unshare", "EPERM"),
        ("ptrace", "EPERM"),
        ("io_uring_setup", "EPERM"),
        ("getpid", "ok"),
        ("unshare_files", "ok"),
        ("clone3", "ENOSYS"),
        ("netlink", "EAFNOSUPPORT"),
    ] {
        assert_eq!(
            got.get(name).map(String::as_str),
            Some(want),
            "{name}: {got:?}"
        );
    }
    let calls = syscall_records(&env, &session);
    let mut names: Vec<&str> = calls
        .iter()
        .map(|r| r["resource"].as_str().unwrap())
        .collect();
    names.sort();
    // Exactly one record per refused call; the allowed calls and the plain
    // errno refusals (clone3, socket families) left none.
    assert_eq!(names, ["io_uring_setup", "ptrace", "unshare"], "{calls:#?}");
    for r in &calls {
        let d = &r["details"];
        assert_eq!(r["session"], session.as_str());
        assert_eq!(
            (d["errno"].as_i64(), d["error"].as_str()),
            (Some(1), Some("EPERM"))
        );
        assert!(d["pid"].as_u64().unwrap() > 1, "{r}");
        assert!(d.get("suppressed").is_none(), "{r}");
        assert!(!r["reason"].as_str().unwrap().is_empty(), "{r}");
        let nr = d["nr"].as_i64().unwrap();
        match r["resource"].as_str().unwrap() {
            "unshare" => {
                assert_eq!(nr, libc::SYS_unshare);
                assert_eq!(d["args"][0], 0x1000_0000u64);
                assert_eq!(d["checked_arg"]["index"], 0);
                assert_eq!(d["checked_arg"]["value"], 0x1000_0000u64);
            }
            "ptrace" => {
                assert_eq!(nr, libc::SYS_ptrace);
                assert_eq!(d["args"][0], 2);
                assert!(d["checked_arg"].is_null());
            }
            "io_uring_setup" => assert_eq!(nr, libc::SYS_io_uring_setup),
            other => panic!("unexpected {other}"),
        }
    }
}

#[test]
fn a_loop_of_refused_calls_is_refused_every_time_and_recorded_boundedly() {
    let Some(python) = python() else { return };
    if !user_notif() {
        return;
    }
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let (got, session) = probe(&env, python, LOOP);
    assert_eq!(
        got.get("refused").map(String::as_str),
        Some("10000"),
        "{got:?}"
    );
    let calls = syscall_records(&env, &session);
    let (one_by_one, summaries): (Vec<&Value>, Vec<&Value>) = calls
        .iter()
        .partition(|r| r["details"].get("suppressed").is_none());
    let suppressed: u64 = summaries
        .iter()
        .map(|r| r["details"]["suppressed"].as_u64().unwrap())
        .sum();
    let lost: u64 = calls
        .iter()
        .filter_map(|r| r["details"]["lost"].as_u64())
        .sum();
    eprintln!(
        "{} records one by one, {} summaries ({suppressed} calls), {lost} lost",
        one_by_one.len(),
        summaries.len()
    );
    // Every call is accounted for, one by one or in a summary...
    assert_eq!(
        one_by_one
            .iter()
            .filter(|r| r["resource"] == "unshare")
            .count() as u64
            + suppressed
            + lost,
        10_000,
        "{calls:#?}"
    );
    // ...and the records stay few: PER_SECOND per second of the loop, plus a
    // summary per second. A minute-long loop would be a hang anyway.
    assert!(!summaries.is_empty(), "{calls:#?}");
    assert!(
        (calls.len() as u64) <= 60 * (PER_SECOND + 1),
        "{} records",
        calls.len()
    );
    let duration_ms = session_records(&env, &session)
        .iter()
        .find(|r| r["action"] == "exit")
        .and_then(|r| r["details"]["duration_ms"].as_u64())
        .unwrap();
    let seconds = duration_ms / 1000 + 2;
    assert!(
        one_by_one.len() as u64 <= PER_SECOND * seconds,
        "{} records in {duration_ms} ms",
        one_by_one.len()
    );
    for r in &summaries {
        assert_eq!(r["resource"], "unshare", "{r}");
        assert_eq!(r["session"], session.as_str());
    }
}

/// Every fd the server's processes hold, and whether PID 1's can be read.
const FDS: &str = r#"
fds = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        for fd in os.listdir("/proc/%s/fd" % pid):
            try:
                fds.append("%s:%s:%s" % (pid, fd, os.readlink("/proc/%s/fd/%s" % (pid, fd))))
            except OSError:
                pass
        if pid == "1":
            print("pid1_listed=1")
    except PermissionError:
        print("denied=" + pid)
    except FileNotFoundError:
        pass
print("self=%d" % os.getpid())
print("fds=" + ",".join(fds))
print("unshare=" + sc(NR["unshare"], 0x10000000))
"#;

/// The listener answers refused calls for the whole sandbox; a process inside
/// holding it could answer its own calls with "success". The server child
/// closes it before exec and PID 1 (non-dumpable: its fds cannot be listed or
/// opened from inside) drops it once passed on, so no process inside has it,
/// and the server holds nothing but its stdio.
#[test]
fn the_listener_is_not_reachable_inside() {
    let Some(python) = python() else { return };
    if !user_notif() {
        return;
    }
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let (got, session) = probe(&env, python, FDS);
    // Control: notification is in use in this very sandbox.
    assert_eq!(got.get("unshare").map(String::as_str), Some("EPERM"));
    let names: Vec<String> = syscall_records(&env, &session)
        .iter()
        .map(|r| r["resource"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["unshare"]);
    let me = &got["self"];
    let fds = &got["fds"];
    assert!(!fds.contains("seccomp"), "{fds}");
    // The server: 0, 1, 2, pipes (the directory fd of the listing is closed
    // by the time its link is read).
    let mine: Vec<&str> = fds
        .split(',')
        .filter(|f| f.starts_with(&format!("{me}:")))
        .collect();
    let want: Vec<String> = (0..3).map(|n| format!("{me}:{n}:pipe:")).collect();
    assert_eq!(mine.len(), 3, "{fds}");
    for (f, w) in mine.iter().zip(&want) {
        assert!(f.starts_with(w.as_str()), "{fds}");
    }
    // PID 1's fds: the directory cannot be listed (an unprivileged caller) or
    // no link can be read (a root caller owns the directory, but reading a
    // link needs ptrace access, which non-dumpable refuses).
    let pid1: Vec<&str> = fds.split(',').filter(|f| f.starts_with("1:")).collect();
    assert!(pid1.is_empty(), "{fds}");
    assert!(
        got.get("denied").map(String::as_str) == Some("1") || got.contains_key("pid1_listed"),
        "{got:?}"
    );
}
