//! The seccomp filter seen from inside real sandboxes, through `warden-sandbox-run`.
//!
//! Probes are python3 (ctypes) calls of raw syscalls, with the numbers taken from
//! libc for this architecture. Every refused call has a paired control: the same
//! probe run on the host as the same user, plainly and inside
//! `unshare --user --map-root-user --mount --pid --fork` (so namespace-capability
//! checks pass and the kernel reaches argument validation). The arguments are ones
//! the kernel rejects with a *different* errno (EFAULT, EINVAL, EBADF, ENOTTY...)
//! or accepts, so an EPERM inside can only come from the filter.
//!
//! Run as root and as an unprivileged user (see run-unprivileged.sh).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::process::Command;

mod common;
use common::{runner, userns_available};

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn have(tool: &str) -> bool {
    let ok = std::path::Path::new(tool).exists();
    if !ok {
        eprintln!("skipping: {tool} is not installed");
    }
    ok
}

/// Runs `sh -c script` in a sandbox; returns (exit code, stdout, stderr).
fn sandboxed(script: &str) -> (i32, String, String) {
    let dir = tempfile::Builder::new()
        .prefix("warden-seccomp-")
        .tempdir()
        .unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    // JSON rather than the struct, so fields added later with defaults do not
    // break this file.
    let spec = serde_json::json!({
        "session_id": "s3cc0mp1234abc",
        "program": "/bin/sh",
        "argv": [b"sh".to_vec(), b"-c".to_vec(), script.as_bytes().to_vec()],
        "env": [[b"PATH".to_vec(), b"/usr/bin:/bin".to_vec()],
                [b"HOME".to_vec(), home.as_os_str().as_encoded_bytes().to_vec()]],
        "cwd": "/",
        "read": [],
        "write": [],
        "home": home,
        "uid": nix::unistd::geteuid().as_raw(),
        "gid": nix::unistd::getegid().as_raw(),
        "user": "tester",
        "tmp_size_mb": 16,
    });
    let file = dir.path().join("spec.json");
    std::fs::write(&file, serde_json::to_vec(&spec).unwrap()).unwrap();
    let out = Command::new(runner()).arg(&file).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `python3 -c code` on the host, optionally under `unshare -Urmpf`.
fn host(code: &str, in_userns: bool) -> String {
    let mut cmd = if in_userns {
        let mut c = Command::new("unshare");
        c.args(["--user", "--map-root-user", "--mount", "--pid", "--fork"]);
        c.arg("python3");
        c
    } else {
        Command::new("python3")
    };
    let out = cmd.arg("-c").arg(code).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `name=RESULT` lines into pairs.
fn results(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

const PRELUDE: &str = r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *a):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(x & 0xffffffffffffffff) for x in a])
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
def clone_raw(nr, flags):
    # fork-like raw clone (no new stack): the child leaves at once.
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(x) for x in (flags, 0, 0, 0, 0)])
    if r == 0:
        os._exit(0)
    if r < 0:
        return errno.errorcode[ctypes.get_errno()]
    os.waitpid(r, 0)
    return "ok"
# Not a tty and not a device (Landlock may restrict ioctls on devices).
fd, _w = os.pipe()
_buf = ctypes.create_string_buffer(64)  # zeroes, kept alive
buf = ctypes.addressof(_buf)
_zero = ctypes.c_uint32(0)  # never written
zero = ctypes.addressof(_zero)
def p(name, result):
    print(name + "=" + result, flush=True)
"#;

/// One probe: a python expression (using `sc`, `clone_raw`, `fd`, `buf`, `zero`) and
/// its result inside the sandbox.
struct Probe {
    name: &'static str,
    expr: String,
    inside: &'static str,
}

fn probe(name: &'static str, nr: libc::c_long, args: &str, inside: &'static str) -> Probe {
    let sep = if args.is_empty() { "" } else { ", " };
    Probe {
        name,
        expr: format!("sc({nr}{sep}{args})"),
        inside,
    }
}

const HI: u64 = 1 << 32;

/// Refused calls, each with arguments the kernel itself answers differently.
/// State-changing probes (a new user namespace, a personality) come last.
fn refused() -> Vec<Probe> {
    use libc::*;
    let ns_user = CLONE_NEWUSER as u64;
    let mut v = vec![
        probe("clone3", SYS_clone3, "0, 0", "ENOSYS"),
        probe("setns", SYS_setns, "-1, 0", "EPERM"),
        probe("mount", SYS_mount, "0, 1, 0, 0, 0", "EPERM"),
        probe("umount2", SYS_umount2, "1, 0x80000000", "EPERM"),
        probe("pivot_root", SYS_pivot_root, "1, 1", "EPERM"),
        probe("chroot", SYS_chroot, "1", "EPERM"),
        probe("open_tree", SYS_open_tree, "-1, 1, 0xffffffff", "EPERM"),
        probe("open_tree_attr", 467, "-1, 1, 0xffffffff, 0, 0", "EPERM"),
        probe(
            "move_mount",
            SYS_move_mount,
            "-1, 1, -1, 1, 0xffffffff",
            "EPERM",
        ),
        probe("fsopen", SYS_fsopen, "1, 0xffffffff", "EPERM"),
        probe("fsconfig", SYS_fsconfig, "-1, 0xff, 0, 0, 0", "EPERM"),
        probe("fsmount", SYS_fsmount, "-1, 0xffffffff, 0", "EPERM"),
        probe("fspick", SYS_fspick, "-1, 1, 0xffffffff", "EPERM"),
        probe(
            "mount_setattr",
            SYS_mount_setattr,
            "-1, 1, 0xffffffff, 0, 0",
            "EPERM",
        ),
        // PTRACE_ATTACH to pid 0: ESRCH.
        probe("ptrace", SYS_ptrace, "16, 0, 0, 0", "EPERM"),
        probe(
            "process_vm_readv",
            SYS_process_vm_readv,
            "0, 0, 0, 0, 0, 1",
            "EPERM",
        ),
        probe(
            "process_vm_writev",
            SYS_process_vm_writev,
            "0, 0, 0, 0, 0, 1",
            "EPERM",
        ),
        probe("pidfd_getfd", SYS_pidfd_getfd, "-1, 0, 1", "EPERM"),
        probe("keyctl", SYS_keyctl, "0xffff, 0, 0, 0, 0", "EPERM"),
        probe("add_key", SYS_add_key, "1, 1, 0, 0, 0", "EPERM"),
        probe("request_key", SYS_request_key, "1, 1, 0, 0", "EPERM"),
        probe("bpf", SYS_bpf, "0xffff, 1, 8", "EPERM"),
        probe(
            "perf_event_open",
            SYS_perf_event_open,
            "0, 0, -1, -1, 0xffffffff",
            "EPERM",
        ),
        // UFFD_USER_MODE_ONLY plus an unknown bit: EINVAL even unprivileged.
        probe("userfaultfd", SYS_userfaultfd, "0x101", "EPERM"),
        probe("io_uring_setup", SYS_io_uring_setup, "0, 0", "EPERM"),
        probe(
            "io_uring_enter",
            SYS_io_uring_enter,
            "-1, 0, 0, 0, 0, 0",
            "EPERM",
        ),
        probe(
            "io_uring_register",
            SYS_io_uring_register,
            "-1, 0, 0, 0",
            "EPERM",
        ),
        probe(
            "open_by_handle_at",
            SYS_open_by_handle_at,
            "-1, 0, 0",
            "EPERM",
        ),
        probe(
            "name_to_handle_at",
            SYS_name_to_handle_at,
            "-1, 1, 1, 1, 0xffffffff",
            "EPERM",
        ),
        probe(
            "fanotify_init",
            SYS_fanotify_init,
            "0x200, 0xffffffff",
            "EPERM",
        ),
        probe("init_module", SYS_init_module, "0, 0, 0", "EPERM"),
        probe(
            "finit_module",
            SYS_finit_module,
            "-1, 0, 0xffffffff",
            "EPERM",
        ),
        probe("delete_module", SYS_delete_module, "1, 0", "EPERM"),
        probe("kexec_load", SYS_kexec_load, "0, 0, 0, 0xffffffff", "EPERM"),
        probe(
            "kexec_file_load",
            SYS_kexec_file_load,
            "-1, -1, 0, 0, 0xffffffff",
            "EPERM",
        ),
        // Bad magic: EINVAL once CAP_SYS_BOOT (in the pid ns's owner) is there.
        probe("reboot", SYS_reboot, "0, 0, 0, 0", "EPERM"),
        probe("swapon", SYS_swapon, "1, 0xffffffff", "EPERM"),
        probe("swapoff", SYS_swapoff, "1", "EPERM"),
        probe("acct", SYS_acct, "1", "EPERM"),
        probe("quotactl", SYS_quotactl, "0xffffff, 1, 0, 0", "EPERM"),
        probe("quotactl_fd", SYS_quotactl_fd, "-1, 0, 0, 0", "EPERM"),
        probe("lookup_dcookie", SYS_lookup_dcookie, "0, 0, 0", "EPERM"),
        probe("syslog", SYS_syslog, "9999, 0, 0", "EPERM"),
        probe("nfsservctl", SYS_nfsservctl, "0, 0, 0", "EPERM"),
        probe("settimeofday", SYS_settimeofday, "1, 1", "EPERM"),
        probe("clock_settime", SYS_clock_settime, "0x7fff, 1", "EPERM"),
        probe("clock_adjtime", SYS_clock_adjtime, "0x7fff, 1", "EPERM"),
        probe("adjtimex", SYS_adjtimex, "1", "EPERM"),
        // ioctl on a pipe: ENOTTY unless the filter answers first, also with
        // high bits set in the (32-bit) command.
        probe(
            "tiocsti",
            SYS_ioctl,
            &format!("fd, {TIOCSTI}, buf"),
            "EPERM",
        ),
        probe(
            "tiocsti_hi",
            SYS_ioctl,
            &format!("fd, {}, buf", TIOCSTI | HI),
            "EPERM",
        ),
        probe(
            "tioclinux",
            SYS_ioctl,
            &format!("fd, {TIOCLINUX}, buf"),
            "EPERM",
        ),
        probe(
            "tiocsetd",
            SYS_ioctl,
            &format!("fd, {TIOCSETD}, buf"),
            "EPERM",
        ),
        probe(
            "socket_netlink",
            SYS_socket,
            &format!("{AF_NETLINK}, {SOCK_RAW}, 0"),
            "EAFNOSUPPORT",
        ),
        probe(
            "socket_netlink_hi",
            SYS_socket,
            &format!("{}, {SOCK_RAW}, 0", AF_NETLINK as u64 | HI),
            "EAFNOSUPPORT",
        ),
        probe(
            "socket_packet",
            SYS_socket,
            &format!("{AF_PACKET}, {SOCK_RAW}, 0"),
            "EAFNOSUPPORT",
        ),
        probe(
            "socket_vsock",
            SYS_socket,
            &format!("{AF_VSOCK}, {SOCK_STREAM}, 0"),
            "EAFNOSUPPORT",
        ),
        probe(
            "socketpair_packet",
            SYS_socketpair,
            &format!("{AF_PACKET}, {SOCK_RAW}, 0, 0"),
            "EAFNOSUPPORT",
        ),
    ];
    // NUMA memory policy (the host accepts these no-op forms: MPOL_DEFAULT,
    // zero lengths and counts), and process_madvise on a bad pidfd (EBADF).
    v.extend([
        probe("mbind", SYS_mbind, "0, 0, 0, 0, 0, 0", "ENOSYS"),
        probe("set_mempolicy", SYS_set_mempolicy, "0, 0, 0", "ENOSYS"),
        probe(
            "get_mempolicy",
            SYS_get_mempolicy,
            "0, 0, 0, 0, 0",
            "ENOSYS",
        ),
        probe("move_pages", SYS_move_pages, "0, 0, 0, 0, 0, 0", "ENOSYS"),
        probe("migrate_pages", SYS_migrate_pages, "0, 0, 0, 0", "ENOSYS"),
        probe(
            "set_mempolicy_home_node",
            SYS_set_mempolicy_home_node,
            "0, 0, 0, 0",
            "ENOSYS",
        ),
        probe(
            "process_madvise",
            SYS_process_madvise,
            "-1, 0, 0, 0, 0",
            "EPERM",
        ),
        // Set-id bits on a pipe (the host changes the pipe inode's mode).
        probe("fchmod_setuid", SYS_fchmod, "fd, 0o4755", "EPERM"),
        probe("fchmod_setgid", SYS_fchmod, "fd, 0o2755", "EPERM"),
        probe(
            "fchmod_setuid_high",
            SYS_fchmod,
            &format!("fd, {}", HI | 0o4755),
            "EPERM",
        ),
    ]);
    #[cfg(target_arch = "x86_64")]
    v.extend([
        probe("iopl", SYS_iopl, "99", "EPERM"),
        probe("ioperm", SYS_ioperm, "0, 0, 0", "EPERM"),
        probe("uselib", SYS_uselib, "1", "EPERM"),
        probe("modify_ldt", SYS_modify_ldt, "99, 0, 0", "EPERM"),
    ]);
    v.extend([
        Probe {
            name: "clone_newuser",
            expr: format!("clone_raw({SYS_clone}, {})", ns_user | SIGCHLD as u64),
            inside: "EPERM",
        },
        probe(
            "unshare_newuser",
            SYS_unshare,
            &ns_user.to_string(),
            "EPERM",
        ),
        probe(
            "personality_linux32",
            SYS_personality,
            "8", // PER_LINUX32
            "EPERM",
        ),
    ]);
    v
}

/// Calls that must keep working inside (same result as on the host).
fn allowed() -> Vec<Probe> {
    use libc::*;
    // Shared-state flags without CLONE_VM (real threads: the python and node tests).
    let shared = CLONE_FS | CLONE_FILES | CLONE_SYSVSEM;
    vec![
        probe("fionread", SYS_ioctl, &format!("fd, {FIONREAD}, buf"), "ok"),
        probe(
            "socket_unix",
            SYS_socket,
            &format!("{AF_UNIX}, {SOCK_STREAM}, 0"),
            "ok",
        ),
        probe(
            "socket_inet",
            SYS_socket,
            &format!("{AF_INET}, {SOCK_STREAM}, 0"),
            "ok",
        ),
        probe(
            "socket_inet6",
            SYS_socket,
            &format!("{AF_INET6}, {SOCK_DGRAM}, 0"),
            "ok",
        ),
        probe(
            "socket_tcp_flags",
            SYS_socket,
            &format!(
                "{AF_INET}, {}, {IPPROTO_TCP}",
                SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC
            ),
            "ok",
        ),
        probe(
            "socket_udp6",
            SYS_socket,
            &format!("{AF_INET6}, {SOCK_DGRAM}, {IPPROTO_UDP}"),
            "ok",
        ),
        probe(
            "socket_unix_seqpacket",
            SYS_socket,
            &format!("{AF_UNIX}, {SOCK_SEQPACKET}, 0"),
            "ok",
        ),
        probe("fchmod_plain", SYS_fchmod, "fd, 0o600", "ok"),
        probe(
            "socketpair_unix",
            SYS_socketpair,
            &format!("{AF_UNIX}, {SOCK_STREAM}, 0, buf"),
            "ok",
        ),
        probe("personality_query", SYS_personality, "0xffffffff", "ok"),
        probe("personality_linux", SYS_personality, "0", "ok"),
        probe("landlock_abi", SYS_landlock_create_ruleset, "0, 0, 1", "ok"),
        // SECCOMP_GET_ACTION_AVAIL for action 0 (SECCOMP_RET_KILL_THREAD).
        probe("seccomp", SYS_seccomp, "2, 0, zero", "ok"),
        probe("unshare_files", SYS_unshare, &CLONE_FILES.to_string(), "ok"),
        probe(
            "prctl_get_dumpable",
            SYS_prctl,
            &PR_GET_DUMPABLE.to_string(),
            "ok",
        ),
        Probe {
            name: "clone_fork",
            expr: format!("clone_raw({SYS_clone}, {SIGCHLD})"),
            inside: "ok",
        },
        Probe {
            name: "clone_shared",
            expr: format!("clone_raw({SYS_clone}, {})", shared | SIGCHLD),
            inside: "ok",
        },
    ]
}

fn script(probes: &[Probe]) -> String {
    let mut s = PRELUDE.to_owned();
    for p in probes {
        s.push_str(&format!("p({:?}, {})\n", p.name, p.expr));
    }
    s
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs the probes inside a sandbox: name → result.
fn inside(probes: &[Probe]) -> Vec<(String, String)> {
    let (code, out, err) = sandboxed(&format!("python3 -c {}", shell_quote(&script(probes))));
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let r = results(&out);
    assert_eq!(r.len(), probes.len(), "stdout: {out}\nstderr: {err}");
    r
}

/// Refused calls that only a host capability (not a namespaced one) would get
/// past the kernel's own permission check, so an unprivileged control can only
/// see EPERM too. The root run pairs them.
const UNPAIRABLE_UNPRIVILEGED: &[&str] = &["swapoff", "acct", "syslog"];

#[test]
fn refused_calls_fail_with_their_errno_and_the_host_answers_otherwise() {
    if !userns_available() || !have("/usr/bin/python3") {
        return;
    }
    let probes = refused();
    let code = script(&probes);
    let got = inside(&probes);
    let plain = results(&host(&code, false));
    let userns = results(&host(&code, true));
    let mut table = String::new();
    let mut failures = Vec::new();
    for (i, p) in probes.iter().enumerate() {
        let (name, r) = &got[i];
        assert_eq!(name, p.name);
        let (h, n) = (&plain[i].1, &userns[i].1);
        table.push_str(&format!(
            "{name:22} inside={r:13} host={h:13} host-userns={n}\n"
        ));
        if r != p.inside {
            failures.push(format!("{name}: inside {r}, want {}", p.inside));
        }
        let paired = h != r || n != r;
        if !paired && (is_root() || !UNPAIRABLE_UNPRIVILEGED.contains(&p.name)) {
            failures.push(format!("{name}: the host control also gives {r}"));
        }
    }
    eprintln!("{table}");
    assert!(failures.is_empty(), "{failures:#?}\n{table}");
}

#[test]
fn allowed_calls_behave_as_on_the_host() {
    if !userns_available() || !have("/usr/bin/python3") {
        return;
    }
    let probes = allowed();
    let got = inside(&probes);
    let plain = results(&host(&script(&probes), false));
    for (i, p) in probes.iter().enumerate() {
        assert_eq!(got[i], (p.name.to_owned(), p.inside.to_owned()));
        assert_eq!(plain[i].1, p.inside, "host control for {}", p.name);
    }
}

/// An i386 `int 0x80` from a 64-bit process: works on the host (when the kernel
/// has IA32 emulation), kills the process with SIGSYS inside.
#[cfg(target_arch = "x86_64")]
#[test]
fn foreign_abi_syscall_kills_the_process() {
    if !userns_available() || !have("/usr/bin/python3") {
        return;
    }
    let code = r#"
import ctypes, mmap
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(b"\xb8\x14\x00\x00\x00\xcd\x80\xc3")  # mov eax, 20 (i386 getpid); int 0x80; ret
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("i386_getpid=" + str(f()), flush=True)
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(code)
        .output()
        .unwrap();
    let host = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("host: {:?} {host}", out.status);
    let (rc, out, err) = sandboxed(&format!("python3 -c {}; echo status=$?", shell_quote(code)));
    assert_eq!(rc, 0, "{err}");
    // 128 + SIGSYS: killed by the filter before printing anything.
    assert_eq!(out, format!("status={}\n", 128 + libc::SIGSYS), "{err}");
    // The x32 ABI is refused with ENOSYS (the host kernel may lack x32 too).
    let x32 = probe("x32_getpid", 0x4000_0000 | libc::SYS_getpid, "", "ENOSYS");
    assert_eq!(inside(&[x32])[0].1, "ENOSYS");
}

#[test]
fn python_threads_and_subprocesses_work() {
    if !userns_available() || !have("/usr/bin/python3") {
        return;
    }
    let code = r#"
import subprocess, threading, os
out = []
ts = [threading.Thread(target=lambda i=i: out.append(i)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
r = subprocess.run(["sh", "-c", "echo child $$"], capture_output=True, text=True, check=True)
pid = os.fork()
if pid == 0:
    os.execv("/bin/true", ["true"])
_, status = os.waitpid(pid, 0)
print(len(out), r.stdout.split()[0], os.waitstatus_to_exitcode(status))
"#;
    let (rc, out, err) = sandboxed(&format!("python3 -c {}", shell_quote(code)));
    assert_eq!((rc, out.as_str()), (0, "8 child 0\n"), "{err}");
}

#[test]
fn node_workers_and_child_processes_work() {
    if !userns_available() || !have("/usr/bin/node") {
        return;
    }
    let code = r#"
const { Worker } = require('worker_threads');
const { execSync, spawnSync } = require('child_process');
const sh = execSync('echo child').toString().trim();
const t = spawnSync('true').status;
new Worker('require("worker_threads").parentPort.postMessage(6*7)', { eval: true })
  .on('message', (m) => { console.log(sh, t, m); process.exit(0); });
"#;
    let (rc, out, err) = sandboxed(&format!("node -e {}", shell_quote(code)));
    assert_eq!((rc, out.as_str()), (0, "child 0 42\n"), "{err}");
}

/// The set-id rules leave ordinary file tools alone: `mkdir -p`, `install`,
/// `cp -a`, `tar` out and back in, and (where installed) `git init` and a
/// commit, in the private /tmp; only asking for a set-id bit is refused.
#[test]
fn ordinary_file_tools_work_and_only_set_id_bits_are_refused() {
    if !userns_available() {
        return;
    }
    let script = r#"
set -e
export PATH=/usr/local/bin:$PATH
cd /tmp
mkdir -p a/b/c && echo x > a/b/c/f && chmod 0750 a/b && chmod u+x a/b/c/f
install -d -m 0755 inst && install -m 0644 a/b/c/f inst/f
cp -a a copy && test -x copy/b/c/f
tar cf t.tar a && mkdir x && tar xf t.tar -C x && test -f x/a/b/c/f
tar xpf t.tar -C x
if command -v git >/dev/null; then
  git init -q g && cd g && echo hi > r && git add r
  git -c user.email=t@e -c user.name=t commit -qm m && cd ..
  echo "git ok"
fi
if chmod 4755 copy/b/c/f 2>/dev/null; then echo "chmod 4755 passed"; exit 1; fi
if chmod g+s copy/b 2>/dev/null; then echo "chmod g+s passed"; exit 1; fi
echo ok
"#;
    let (rc, out, err) = sandboxed(script);
    assert_eq!((rc, out.lines().last()), (0, Some("ok")), "{out}{err}");
    let git = ["/usr/bin/git", "/usr/local/bin/git"]
        .iter()
        .any(|g| std::path::Path::new(g).exists());
    assert_eq!(out.contains("git ok"), git, "{out}{err}");
}
