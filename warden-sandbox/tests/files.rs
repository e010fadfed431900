//! File-access auditing through the library API (`Spawned::files`),
//! with the `warden-sandbox-run` binary as the sandbox init: what the notifier
//! observes in a real sandbox and how it is judged. The records, policy levels
//! and rate limits are tested end to end in `e2e/tests/file_audit.rs`.
//!
//! Run as root and as an unprivileged user (`scripts/test`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;
use warden_sandbox::spec::Layers;
use warden_sandbox::spec::{FileWatch, SandboxSpec};
use warden_sandbox::supervise::{AccessVerdict, Action, FileAccess};
use warden_sandbox::ExitOutcome;

mod common;
use common::{kernel, runner, spawn, userns_available};

fn ready() -> bool {
    if !userns_available() {
        return false;
    }
    let ok = kernel().user_notif;
    if !ok {
        eprintln!("skipping: this kernel lacks seccomp user notification");
    }
    ok
}

/// A host "home" with a canary key, a read grant, a write grant and a host
/// directory outside every grant.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("warden-files-")
            .tempdir()
            .unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["home/.ssh", "ro", "rw", "hidden"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("home/.ssh/id_rsa"), "secret").unwrap();
        std::fs::write(root.join("ro/data.txt"), "data").unwrap();
        std::fs::write(root.join("hidden/secret.txt"), "host secret").unwrap();
        std::fs::copy("/bin/true", root.join("hidden/tool")).unwrap();
        Fixture { _dir: dir, root }
    }

    fn p(&self, rel: &str) -> String {
        self.root.join(rel).display().to_string()
    }

    fn spec(&self, program: &str, argv: &[&[u8]], level: FileWatch) -> SandboxSpec {
        let home = self.root.join("home");
        serde_json::from_value(serde_json::json!({
            "session_id": "f1le5a0d17",
            "program": program,
            "argv": argv,
            "env": [[b"PATH", b"/usr/bin:/bin"], [b"HOME", home.as_os_str().as_encoded_bytes()]],
            "cwd": self.root.join("rw"),
            "read": [self.root.join("ro")],
            "write": [self.root.join("rw")],
            "home": home,
            "uid": nix::unistd::geteuid().as_raw(),
            "gid": nix::unistd::getegid().as_raw(),
            "user": "tester",
            "tmp_size_mb": 16,
            "audit_files": level,
            // Decided when spawned.
            "layers": Layers::NONE,
        }))
        .unwrap()
    }

    fn sh(&self, script: &str, level: FileWatch) -> SandboxSpec {
        self.spec("/bin/sh", &[b"sh", b"-c", script.as_bytes()], level)
    }
}

fn null() -> OwnedFd {
    std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap()
        .into()
}

/// Runs `spec`; returns its exit, its stdout and every access reported until
/// the sandbox was gone (`None` when none are observed), none lost.
fn run(spec: &SandboxSpec) -> (ExitOutcome, String, Option<Vec<FileAccess>>) {
    let (exit, out, got, lost) = run_lossy(spec);
    assert_eq!(lost, 0, "the queue overflowed");
    (exit, out, got)
}

/// [`run`], also returning how many accesses the full queue dropped.
fn run_lossy(spec: &SandboxSpec) -> (ExitOutcome, String, Option<Vec<FileAccess>>, u64) {
    let (r, w) = nix::unistd::pipe().unwrap();
    let s = spawn(&runner(), spec, [null(), w, null()]).unwrap();
    let (sb, files) = (s.sandbox, s.files);
    let observed = files.is_some();
    let collector = std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut lost = 0;
        if let Some(files) = files {
            while let Ok(a) = files.next_classified(Duration::from_secs(120)) {
                out.push(a);
            }
            lost = files.lost();
        }
        (out, lost)
    });
    let stdout = std::thread::spawn(move || std::io::read_to_string(std::fs::File::from(r)));
    let exit = sb.wait().unwrap();
    let (accesses, lost) = collector.join().unwrap();
    let out = stdout.join().unwrap().unwrap();
    (exit, out, observed.then_some(accesses), lost)
}

fn show(v: &[FileAccess]) -> String {
    v.iter()
        .map(|a| {
            format!(
                "{:?} {} {} {} -> {} {:?} {}\n",
                a.verdict,
                a.action.as_str(),
                a.syscall,
                String::from_utf8_lossy(&a.path),
                String::from_utf8_lossy(&a.resolved),
                a.errno,
                a.reason
            )
        })
        .collect()
}

fn find<'a>(v: &'a [FileAccess], action: Action, path: &str) -> &'a FileAccess {
    v.iter()
        .find(|a| a.action == action && a.path == path.as_bytes())
        .unwrap_or_else(|| panic!("no {action:?} {path} in:\n{}", show(v)))
}

/// Each kind of denial, judged as the sandbox answers it, with the errno the
/// shell saw; the allowed controls next to them. Also: the server's own exec
/// (read before the server exists), a relative path, and a symlink in a write
/// grant that leads out of the sandbox's view.
#[test]
fn observed_calls_are_judged_as_the_sandbox_answers_them() {
    if !ready() {
        return;
    }
    let f = Fixture::new();
    let script = format!(
        "cat {key}; echo key=$?; \
         echo x > {ro}/new; echo ro_create=$?; \
         echo x >> {ro}/data.txt; echo ro_append=$?; \
         {tool}; echo tool=$?; \
         cat {ro}/data.txt >/dev/null; echo ro_read=$?; \
         echo y > out.txt; echo rw_create=$?; \
         ln -s {key} link; cat link; echo link=$?; \
         mv out.txt moved.txt; echo rename=$?; \
         mkdir {ro}/d; echo ro_mkdir=$?; \
         rm {ro}/data.txt; echo ro_rm=$?",
        key = f.p("home/.ssh/id_rsa"),
        ro = f.p("ro"),
        tool = f.p("hidden/tool"),
    );
    let (exit, out, got) = run(&f.sh(&script, FileWatch::All));
    assert_eq!(exit, ExitOutcome::Code(0), "{out}");
    let v = got.unwrap();
    // What the shell got: the sandbox refused the first four, allowed the rest.
    for line in [
        "key=1",
        "ro_create=2",
        "ro_append=2",
        "tool=127",
        "ro_read=0",
        "rw_create=0",
        "link=1",
        "rename=0",
        "ro_mkdir=1",
        "ro_rm=1",
    ] {
        assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
    }
    let key = f.p("home/.ssh/id_rsa");
    let a = find(&v, Action::OpenRead, &key);
    assert_eq!(
        (a.verdict, a.errno),
        (AccessVerdict::Deny, Some(libc::ENOENT)),
        "{}",
        show(&v)
    );
    assert_eq!(a.syscall, "openat");
    assert!(a.reason.contains("private $HOME"), "{}", a.reason);
    let a = find(&v, Action::Create, &f.p("ro/new"));
    assert_eq!(
        (a.verdict, a.errno, a.reason.as_str()),
        (AccessVerdict::Deny, Some(libc::EROFS), "read-only grant")
    );
    // `>>` opens with O_CREAT too: a create, on an existing file.
    let a = find(&v, Action::Create, &f.p("ro/data.txt"));
    assert_eq!(
        (a.verdict, a.errno),
        (AccessVerdict::Deny, Some(libc::EROFS))
    );
    let a = find(&v, Action::Exec, &f.p("hidden/tool"));
    assert_eq!(
        (a.verdict, a.errno),
        (AccessVerdict::Deny, Some(libc::ENOENT))
    );
    let a = find(&v, Action::Mkdir, &f.p("ro/d"));
    assert_eq!(
        (a.verdict, a.errno),
        (AccessVerdict::Deny, Some(libc::EROFS))
    );
    let a = find(&v, Action::Unlink, &f.p("ro/data.txt"));
    assert_eq!(
        (a.verdict, a.errno),
        (AccessVerdict::Deny, Some(libc::EROFS))
    );
    // Controls.
    assert_eq!(
        find(&v, Action::OpenRead, &f.p("ro/data.txt")).verdict,
        AccessVerdict::Allow
    );
    let a = find(&v, Action::Create, "out.txt");
    assert_eq!(a.verdict, AccessVerdict::Allow);
    assert_eq!(
        a.resolved,
        f.p("rw/out.txt").as_bytes(),
        "relative to the cwd"
    );
    let a = find(&v, Action::Rename, "out.txt");
    assert_eq!(a.verdict, AccessVerdict::Allow);
    let (to, to_resolved) = a.to.clone().unwrap();
    assert_eq!(
        (to.as_slice(), to_resolved),
        (&b"moved.txt"[..], f.p("rw/moved.txt").into_bytes())
    );
    let a = find(&v, Action::Symlink, "link");
    assert_eq!(
        (a.verdict, a.target.as_deref()),
        (AccessVerdict::Allow, Some(key.as_bytes()))
    );
    // The link in the write grant leads to the hidden key: resolved, denied.
    let a = find(&v, Action::OpenRead, "link");
    assert_eq!(a.resolved, key.as_bytes());
    assert_eq!(
        (a.verdict, a.errno),
        (AccessVerdict::Deny, Some(libc::ENOENT))
    );
    // The server's own exec, read from the child before it was the server.
    let first = &v[0];
    assert_eq!(
        (first.action, first.path.as_slice()),
        (Action::Exec, &b"/bin/sh"[..]),
        "{}",
        show(&v)
    );
    assert_eq!(first.verdict, AccessVerdict::Allow);
}

/// `denied` reports only denials; `off` observes nothing at all; and the
/// server gets the same answers at every level.
#[test]
fn levels_report_denials_everything_or_nothing_and_change_no_outcome() {
    if !ready() {
        return;
    }
    let f = Fixture::new();
    let script = format!(
        "cat {key} 2>&1; cat {ro}/data.txt; echo x > {ro}/new 2>&1; echo y > out.txt; \
         {tool} 2>&1; cat {hidden} 2>&1; echo end",
        key = f.p("home/.ssh/id_rsa"),
        ro = f.p("ro"),
        tool = f.p("hidden/tool"),
        hidden = f.p("hidden/secret.txt"),
    );
    let (e_off, out_off, off) = run(&f.sh(&script, FileWatch::Off));
    let (e_den, out_den, denied) = run(&f.sh(&script, FileWatch::Denied));
    let (e_all, out_all, all) = run(&f.sh(&script, FileWatch::All));
    // With a write grant the creation guard listens even at `off`, but
    // reports only its own refusals (none here).
    assert!(
        off.as_ref().is_none_or(Vec::is_empty),
        "nothing reported with off: {}",
        off.as_deref().map(show).unwrap_or_default()
    );
    assert_eq!((e_off, &out_off), (e_den, &out_den));
    assert_eq!((e_off, &out_off), (e_all, &out_all));
    assert!(
        out_off.ends_with("end\n") && out_off.contains("data"),
        "{out_off}"
    );
    let (denied, all) = (denied.unwrap(), all.unwrap());
    assert!(
        denied.iter().all(|a| a.verdict == AccessVerdict::Deny),
        "{}",
        show(&denied)
    );
    let key = |v: &[FileAccess]| -> Vec<(Action, Vec<u8>)> {
        v.iter()
            .filter(|a| a.verdict == AccessVerdict::Deny)
            .map(|a| (a.action, a.path.clone()))
            .collect()
    };
    assert_eq!(key(&denied), key(&all));
    assert_eq!(denied.len(), 4, "{}", show(&denied));
    assert!(all.len() > denied.len() + 4, "{}", show(&all));
}

/// Observing cannot widen anything: a server that races its own memory
/// (one thread opening a buffer, another flipping the buffer between a
/// granted path and a hidden one) never reads the hidden file, and is never
/// hung. Control: on the host, the same race reads it.
#[test]
fn a_path_swapped_after_it_was_read_still_meets_the_kernels_check() {
    if !ready() {
        return;
    }
    let python = PathBuf::from("/usr/bin/python3");
    if !python.exists() {
        eprintln!("skipping: /usr/bin/python3 is not installed");
        return;
    }
    let f = Fixture::new();
    let race = format!(
        r#"
import ctypes, os, threading, time
libc = ctypes.CDLL(None, use_errno=True)
a = {ro:?}.encode() + b"\0"
b = {hidden:?}.encode() + b"\0"
n = max(len(a), len(b))
buf = ctypes.create_string_buffer(n)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, b, len(b))
        ctypes.memmove(buf, a, len(a))
t = threading.Thread(target=flip); t.start()
leaks = opened = 0
out = ctypes.create_string_buffer(64)
end = time.time() + 1
while time.time() < end:
    fd = libc.open(buf, os.O_RDONLY)
    if fd >= 0:
        opened += 1
        k = libc.read(fd, out, 64)
        if out.raw[:k] == b"host secret":
            leaks += 1
        libc.close(fd)
stop = True; t.join()
print("opened=%d leaks=%d" % (opened, leaks))
"#,
        ro = f.p("ro/data.txt"),
        hidden = f.p("hidden/secret.txt"),
    );
    // Control: outside the sandbox the race does reach the secret.
    let host = std::process::Command::new(&python)
        .arg("-c")
        .arg(&race)
        .output()
        .unwrap();
    let host = String::from_utf8_lossy(&host.stdout).into_owned();
    assert!(!host.contains("leaks=0"), "{host}");
    // Thousands of opens a second: more than the queue holds while they are
    // classified, so some are dropped (counted), never waited for.
    let (exit, out, got, _lost) = run_lossy(&f.spec(
        "/usr/bin/python3",
        &[b"python3", b"-c", race.as_bytes()],
        FileWatch::All,
    ));
    assert_eq!(exit, ExitOutcome::Code(0), "{out}");
    assert!(out.contains(" leaks=0"), "{out}");
    assert!(!out.contains("opened=0 "), "{out}");
    assert!(!got.unwrap().is_empty());
}

/// Accesses are classified on the consumer's thread, possibly long after the
/// sandbox is gone: its mounts must still be there to judge against. Taking
/// the accesses only after `wait` returns sees the grants as they were.
#[test]
fn accesses_are_judged_against_the_sandbox_even_after_it_is_gone() {
    if !ready() {
        return;
    }
    let f = Fixture::new();
    let script = format!(
        "cat {ro}/data.txt; cat {key}; true",
        ro = f.p("ro"),
        key = f.p("home/.ssh/id_rsa")
    );
    let spec = f.sh(&script, FileWatch::All);
    let s = spawn(&runner(), &spec, [null(), null(), null()]).unwrap();
    let (sb, files) = (s.sandbox, s.files.unwrap());
    // Linux 6.6+ takes the synchronous wake-up flag.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release.trim().split(['.', '-']);
    let major: u32 = v.next().unwrap().parse().unwrap();
    let minor: u32 = v.next().unwrap().parse().unwrap();
    assert_eq!(
        files.sync_wake_up(),
        (major, minor) >= (6, 6),
        "{release:?}"
    );
    assert_eq!(sb.wait().unwrap(), ExitOutcome::Code(0));
    drop(sb);
    let mut v = Vec::new();
    while let Ok(a) = files.next_classified(Duration::from_secs(60)) {
        v.push(a);
    }
    let a = find(&v, Action::OpenRead, &f.p("ro/data.txt"));
    assert_eq!(
        (a.verdict, a.reason.as_str()),
        (AccessVerdict::Allow, "a read grant"),
        "{}",
        show(&v)
    );
    let a = find(&v, Action::OpenRead, "/etc/ld.so.cache");
    assert_eq!(a.verdict, AccessVerdict::Allow, "{}", show(&v));
    // Control: the hidden key is still judged hidden.
    let a = find(&v, Action::OpenRead, &f.p("home/.ssh/id_rsa"));
    assert_eq!(a.verdict, AccessVerdict::Deny);
}
