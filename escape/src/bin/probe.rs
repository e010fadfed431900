//! `warden-escape-probe ATTACK [ARGS...]`: performs ONE sandbox-escape attack and
//! prints one JSON line on stdout, then exits 0 whatever happened:
//!
//! ```json
//! {"attack": "userns", "outcome": "blocked", "errno": 1, "errno_name": "EPERM", "detail": "..."}
//! ```
//!
//! `outcome` is `escaped` when the attack got what it was after: the call ran (or,
//! for the try-syscall probes, reached the kernel's own argument checks past every
//! permission gate), the file was read or written, the socket connected. Otherwise
//! it is `blocked`, with the errno of the step that failed. Attacks that cannot
//! fail by returning an errno say so in `detail`; `i386` is killed by the seccomp
//! filter before it can print anything, so its caller treats death by SIGSYS as
//! blocked.
//!
//! The tests in `escape/tests/escape.rs` run it inside a sandbox through the real
//! shim and daemon, and on the host as the same user as a control (see there).
//! `warden-escape-probe --list` prints the attacks.
//!
//! # Why this crate uses `unsafe`
//!
//! Everywhere else in Warden `unsafe` lives only in `warden-sandbox` (docs/dev.md).
//! This crate is the exception because its whole point is to make the raw kernel
//! calls a hostile server would make: `unshare`, `clone` with namespace flags,
//! `int 0x80`, `io_uring_setup`, `TIOCSTI` with high bits set... none of which a
//! safe wrapper exposes the way an attacker would call them. It is test-only
//! (`publish = false`, never shipped or linked into Warden), each block has a
//! `// SAFETY:` line, and the calls only touch memory this process owns.

use std::ffi::CString;
use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Every attack: name, arguments, what it does.
const ATTACKS: &[(&str, &str, &str)] = &[
    (
        "caps",
        "",
        "capability sets and NoNewPrivs from /proc/self/status",
    ),
    ("setuid-root", "", "setuid(0), then checks for capabilities"),
    ("userns", "", "unshare(CLONE_NEWUSER)"),
    ("userns-clone", "", "raw clone(CLONE_NEWUSER|SIGCHLD)"),
    (
        "mountns",
        "",
        "unshare(CLONE_NEWNS), then unshare(CLONE_NEWUSER|CLONE_NEWNS)",
    ),
    (
        "mount-tmpfs",
        "[TARGET]",
        "mount(\"none\", TARGET (/tmp), \"tmpfs\")",
    ),
    (
        "umount-ro-bind",
        "PATH",
        "umount2(PATH, MNT_DETACH), then create a file in PATH",
    ),
    (
        "remount-rw",
        "PATH",
        "mount(NULL, PATH, NULL, MS_REMOUNT|MS_BIND), then create a file in PATH",
    ),
    (
        "pivot-root",
        "[NEW [OLD]]",
        "pivot_root(NEW (/tmp), OLD (= NEW))",
    ),
    ("new-mount-api", "", "fsopen(\"tmpfs\")"),
    (
        "open-tree",
        "",
        "open_tree(AT_FDCWD, \"/\", OPEN_TREE_CLONE|AT_RECURSIVE)",
    ),
    ("chroot", "[DIR]", "chroot(DIR (/tmp))"),
    (
        "tiocsti",
        "",
        "ioctl(0, TIOCSTI) and ioctl(0, TIOCSTI | 1 << 32)",
    ),
    (
        "io-uring",
        "[ENTRIES]",
        "io_uring_setup(ENTRIES (1)); 0 is the try-syscall variant (EINVAL)",
    ),
    (
        "x32",
        "",
        "getpid through the x32 ABI (number | 0x40000000)",
    ),
    (
        "i386",
        "",
        "getpid through int 0x80 (the i386 ABI): must be killed",
    ),
    ("ptrace-pid1", "[PID]", "ptrace(PTRACE_ATTACH, PID (1))"),
    (
        "proc-pid1-mem",
        "[PID]",
        "open(/proc/PID/mem, O_RDWR) (PID 1)",
    ),
    (
        "proc-pid1-exe-write",
        "[PID]",
        "open(/proc/PID/exe, O_WRONLY) (PID 1; CVE-2019-5736)",
    ),
    (
        "bpf",
        "",
        "bpf(0xffff, attr, 64): try-syscall (the kernel says EINVAL)",
    ),
    (
        "perf",
        "",
        "perf_event_open(NULL, ...): try-syscall (the kernel says EFAULT)",
    ),
    (
        "userfaultfd",
        "",
        "userfaultfd(O_CLOEXEC | UFFD_USER_MODE_ONLY)",
    ),
    (
        "keyctl",
        "",
        "keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING)",
    ),
    (
        "open-by-handle",
        "",
        "open_by_handle_at(\"/\", bogus handle): try-syscall",
    ),
    (
        "kmod",
        "",
        "finit_module(-1, \"\", 0): try-syscall (the kernel says EBADF)",
    ),
    (
        "reboot",
        "",
        "reboot(LINUX_REBOOT_MAGIC1, 0, CAD_OFF): try-syscall (bad magic: EINVAL)",
    ),
    ("personality", "", "personality(PER_LINUX32)"),
    (
        "socket",
        "FAMILY",
        "socket(FAMILY, ...): netlink, packet, vsock, bluetooth, alg, key, xdp, can",
    ),
    ("read", "PATH", "open and read PATH"),
    ("write", "PATH", "create or append to PATH"),
    (
        "sysctl-rewrite",
        "PATH",
        "reads a /proc/sys value and writes it back unchanged (a real write that changes nothing)",
    ),
    (
        "open-write",
        "PATH",
        "open(PATH, O_WRONLY) without writing (/proc/sysrq-trigger, /proc/sys/...)",
    ),
    (
        "symlink-escape",
        "DIR TARGET",
        "symlink DIR/warden-escape-link -> TARGET, read through it",
    ),
    (
        "hardlink-escape",
        "DIR TARGET",
        "link(TARGET, DIR/warden-escape-hardlink), read it",
    ),
    (
        "ls",
        "PATH [NEEDLE]",
        "list PATH; escaped if listable (and NEEDLE is among the names)",
    ),
    (
        "proc-leak",
        "NEEDLE...",
        "searches /proc/1/environ, /proc/1/cmdline, /proc/mounts, /proc/self/mountinfo for NEEDLEs",
    ),
    ("unix-connect", "PATH", "connect to a Unix socket by path"),
    (
        "unix-abstract",
        "NAME",
        "connect to an abstract Unix socket",
    ),
    ("sysv-ipc", "KEY", "shmget/shmat, msgget, semget of KEY"),
    ("kill", "PID", "kill(PID, 0)"),
    ("tcp-connect", "HOST PORT", "TCP connect"),
    (
        "udp-dns",
        "IP PORT NAME",
        "DNS query for NAME over UDP to IP:PORT (connected socket); escaped on any reply",
    ),
    (
        "icmp-ping",
        "IPV4",
        "ICMP echo through a ping socket (SOCK_DGRAM, IPPROTO_ICMP); escaped on a reply",
    ),
    (
        "icmp-raw",
        "IPV4",
        "ICMP echo through a raw socket (SOCK_RAW, IPPROTO_ICMP); escaped on a reply",
    ),
    (
        "proxy-get",
        "PROXY URL",
        "GET URL (absolute-form) through the HTTP proxy at PROXY (IP:PORT); escaped on 200",
    ),
    ("dns", "NAME", "getaddrinfo(NAME)"),
    ("env", "NAME", "getenv(NAME)"),
    (
        "fork-bomb",
        "MAX",
        "fork until it fails or MAX children (each sleeps 60 s)",
    ),
    (
        "mem-bomb",
        "MB",
        "allocate and touch MB MiB in 16 MiB steps; prints only if it finishes",
    ),
];

/// The result of one attack.
struct Report {
    outcome: &'static str,
    errno: Option<i32>,
    detail: String,
    extra: Option<(&'static str, Value)>,
}

fn escaped(detail: impl Into<String>) -> Report {
    Report {
        outcome: "escaped",
        errno: None,
        detail: detail.into(),
        extra: None,
    }
}

fn blocked(errno: Option<i32>, detail: impl Into<String>) -> Report {
    Report {
        outcome: "blocked",
        errno,
        detail: detail.into(),
        extra: None,
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EINVAL => "EINVAL",
        libc::ENOTTY => "ENOTTY",
        libc::ETXTBSY => "ETXTBSY",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENOSYS => "ENOSYS",
        libc::ENOKEY => "ENOKEY",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::ESOCKTNOSUPPORT => "ESOCKTNOSUPPORT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ESTALE => "ESTALE",
        libc::ELOOP => "ELOOP",
        _ => "?",
    }
}

fn describe(e: i32) -> String {
    format!(
        "{} ({})",
        errno_name(e),
        std::io::Error::from_raw_os_error(e)
    )
}

/// A syscall that either works (escaped) or fails at a permission gate (blocked):
/// `gates` are the errnos a refusal returns (the filter's, and the kernel's own
/// permission checks); any other errno means the call reached the kernel's
/// argument checks, past every gate: escaped, as the try-syscall technique reads it.
fn gated(what: &str, ret: libc::c_long, err: i32, gates: &[i32]) -> Report {
    if ret >= 0 {
        escaped(format!("{what} succeeded (returned {ret})"))
    } else if gates.contains(&err) {
        blocked(Some(err), format!("{what}: {}", describe(err)))
    } else {
        Report {
            errno: Some(err),
            ..escaped(format!(
                "{what} reached the kernel's own checks: {} (a refusal would be {})",
                describe(err),
                gates
                    .iter()
                    .map(|&g| errno_name(g))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ))
        }
    }
}

const PERMISSION: &[i32] = &[libc::EPERM, libc::EACCES];

fn cstr(s: &str) -> CString {
    CString::new(s).expect("argument without NUL bytes")
}

/// `syscall(nr, args...)` with errno captured.
fn sys(nr: libc::c_long, a: [libc::c_long; 5]) -> (libc::c_long, i32) {
    // SAFETY: a raw syscall; every pointer argument the callers pass points to
    // memory owned by the caller and alive for the call (or is NULL/invalid on
    // purpose, which the kernel checks and answers with EFAULT).
    let r = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4]) };
    (r, if r < 0 { errno() } else { 0 })
}

fn arg<'a>(args: &'a [String], i: usize, what: &str) -> &'a str {
    args.get(i).map(String::as_str).unwrap_or_else(|| {
        eprintln!("warden-escape-probe: missing argument {what}");
        std::process::exit(2)
    })
}

fn status_field(status: &str, name: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

fn caps() -> Report {
    let status = match std::fs::read_to_string("/proc/self/status") {
        Ok(s) => s,
        Err(e) => return blocked(e.raw_os_error(), format!("/proc/self/status: {e}")),
    };
    let mut held = Vec::new();
    let mut fields = Vec::new();
    for name in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let v = status_field(&status, name).unwrap_or_default();
        let bits = u64::from_str_radix(&v, 16).unwrap_or(u64::MAX);
        if bits != 0 {
            held.push(name);
        }
        fields.push(format!("{name}={v}"));
    }
    let nnp = status_field(&status, "NoNewPrivs").unwrap_or_default();
    fields.push(format!("NoNewPrivs={nnp}"));
    let detail = fields.join(" ");
    if held.is_empty() && nnp == "1" {
        blocked(None, detail)
    } else {
        escaped(detail)
    }
}

fn cap_eff() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| status_field(&s, "CapEff"))
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
        .unwrap_or(0)
}

fn setuid_root() -> Report {
    // SAFETY: setuid has no memory-safety preconditions.
    let r = unsafe { libc::setuid(0) };
    if r != 0 {
        let e = errno();
        return blocked(Some(e), format!("setuid(0): {}", describe(e)));
    }
    // SAFETY: getuid/geteuid cannot fail.
    let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
    let eff = cap_eff();
    let detail = format!("setuid(0) succeeded: uid={uid} euid={euid} CapEff={eff:016x}");
    if eff != 0 {
        escaped(detail)
    } else {
        blocked(None, format!("{detail}: uid 0 without any capability"))
    }
}

fn unshare(flags: libc::c_int) -> (libc::c_long, i32) {
    // SAFETY: unshare only changes this (single-threaded) process's namespaces.
    let r = unsafe { libc::unshare(flags) } as libc::c_long;
    (r, if r < 0 { errno() } else { 0 })
}

fn userns() -> Report {
    let (r, e) = unshare(libc::CLONE_NEWUSER);
    gated("unshare(CLONE_NEWUSER)", r, e, PERMISSION)
}

fn userns_clone() -> Report {
    let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_long;
    // Fork-like raw clone: no new stack, the child leaves at once. Not through
    // sys(): the child must not run anything but _exit.
    // SAFETY: without CLONE_VM the child gets a copy of this address space and
    // only calls _exit, which is async-signal-safe.
    let r = unsafe { libc::syscall(libc::SYS_clone, flags, 0, 0, 0, 0) };
    if r == 0 {
        // SAFETY: the child of a fork-like clone leaves without running destructors.
        unsafe { libc::_exit(0) };
    }
    let e = if r < 0 { errno() } else { 0 };
    if r > 0 {
        let mut status = 0;
        // SAFETY: status is a valid out-pointer.
        unsafe { libc::waitpid(r as libc::pid_t, &mut status, libc::__WALL) };
    }
    gated("clone(CLONE_NEWUSER|SIGCHLD)", r, e, PERMISSION)
}

fn mountns() -> Report {
    let (r, e) = unshare(libc::CLONE_NEWNS);
    if r == 0 {
        return escaped("unshare(CLONE_NEWNS) succeeded");
    }
    let (r2, e2) = unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS);
    let mut rep = gated("unshare(CLONE_NEWUSER|CLONE_NEWNS)", r2, e2, PERMISSION);
    rep.detail = format!("unshare(CLONE_NEWNS): {}; {}", describe(e), rep.detail);
    rep
}

fn mount_tmpfs(args: &[String]) -> Report {
    let target = cstr(args.first().map(String::as_str).unwrap_or("/tmp"));
    let (src, fstype) = (cstr("none"), cstr("tmpfs"));
    // SAFETY: NUL-terminated strings alive for the call; data is NULL.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    } as libc::c_long;
    let e = if r < 0 { errno() } else { 0 };
    gated("mount(none, TARGET, tmpfs)", r, e, PERMISSION)
}

/// Creates PATH/warden-escape-canary; Ok(()) when the write landed.
fn write_in(dir: &str) -> Result<(), i32> {
    let path = format!("{dir}/warden-escape-canary");
    std::fs::write(&path, "escaped\n").map_err(|e| e.raw_os_error().unwrap_or(0))?;
    let _ = std::fs::remove_file(&path);
    Ok(())
}

fn umount_ro_bind(args: &[String]) -> Report {
    let path = arg(args, 0, "PATH");
    let c = cstr(path);
    // SAFETY: NUL-terminated path alive for the call.
    let r = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    let e = if r < 0 { errno() } else { 0 };
    let step = if r == 0 {
        "umount2(PATH, MNT_DETACH) succeeded".to_string()
    } else {
        format!("umount2(PATH, MNT_DETACH): {}", describe(e))
    };
    match write_in(path) {
        Ok(()) => escaped(format!("{step}; then wrote into {path}")),
        Err(we) if r == 0 => escaped(format!(
            "{step} (the bind is gone); the write then failed: {}",
            describe(we)
        )),
        Err(we) => Report {
            errno: Some(e),
            ..gated(
                &format!("{step}; write: {}; umount2", describe(we)),
                -1,
                e,
                PERMISSION,
            )
        },
    }
}

fn remount_rw(args: &[String]) -> Report {
    let path = arg(args, 0, "PATH");
    let c = cstr(path);
    // SAFETY: NUL-terminated path alive for the call; other pointers NULL.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            c.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND,
            std::ptr::null(),
        )
    };
    let e = if r < 0 { errno() } else { 0 };
    let step = if r == 0 {
        "mount(MS_REMOUNT|MS_BIND) succeeded".to_string()
    } else {
        format!("mount(MS_REMOUNT|MS_BIND): {}", describe(e))
    };
    match write_in(path) {
        Ok(()) => escaped(format!("{step}; then wrote into {path}")),
        Err(we) if r == 0 => escaped(format!("{step}; the write then failed: {}", describe(we))),
        Err(we) => gated(
            &format!("write: {}; {step}; mount", describe(we)),
            -1,
            e,
            PERMISSION,
        ),
    }
}

fn pivot_root(args: &[String]) -> Report {
    let new = cstr(args.first().map(String::as_str).unwrap_or("/tmp"));
    let old = args.get(1).map(|s| cstr(s)).unwrap_or_else(|| new.clone());
    let (r, e) = sys(
        libc::SYS_pivot_root,
        [new.as_ptr() as _, old.as_ptr() as _, 0, 0, 0],
    );
    gated("pivot_root(NEW, OLD)", r, e, PERMISSION)
}

fn new_mount_api() -> Report {
    let fs = cstr("tmpfs");
    const FSOPEN_CLOEXEC: libc::c_long = 1;
    let (r, e) = sys(
        libc::SYS_fsopen,
        [fs.as_ptr() as _, FSOPEN_CLOEXEC, 0, 0, 0],
    );
    gated("fsopen(\"tmpfs\")", r, e, PERMISSION)
}

fn open_tree() -> Report {
    let root = cstr("/");
    const OPEN_TREE_CLONE: libc::c_long = 1;
    let flags =
        OPEN_TREE_CLONE | libc::AT_RECURSIVE as libc::c_long | libc::O_CLOEXEC as libc::c_long;
    let (r, e) = sys(
        libc::SYS_open_tree,
        [libc::AT_FDCWD as _, root.as_ptr() as _, flags, 0, 0],
    );
    gated(
        "open_tree(AT_FDCWD, \"/\", OPEN_TREE_CLONE)",
        r,
        e,
        PERMISSION,
    )
}

fn chroot(args: &[String]) -> Report {
    let dir = cstr(args.first().map(String::as_str).unwrap_or("/tmp"));
    // SAFETY: NUL-terminated path alive for the call.
    let r = unsafe { libc::chroot(dir.as_ptr()) } as libc::c_long;
    let e = if r < 0 { errno() } else { 0 };
    gated("chroot(DIR)", r, e, PERMISSION)
}

fn tiocsti() -> Report {
    let c: u8 = b'x';
    let cmd = libc::TIOCSTI as libc::c_long;
    // Plain, then with bit 32 set: the kernel truncates cmd to 32 bits, so a filter
    // comparing all 64 bits would let the second through (CVE-2017-5226 class).
    let (r1, e1) = sys(libc::SYS_ioctl, [0, cmd, &c as *const u8 as _, 0, 0]);
    let (r2, e2) = sys(
        libc::SYS_ioctl,
        [0, cmd | (1 << 32), &c as *const u8 as _, 0, 0],
    );
    let a = gated("ioctl(0, TIOCSTI)", r1, e1, PERMISSION);
    let b = gated("ioctl(0, TIOCSTI | 1 << 32)", r2, e2, PERMISSION);
    let detail = format!("{}; {}", a.detail, b.detail);
    if a.outcome == "escaped" || b.outcome == "escaped" {
        Report {
            errno: if r1 < 0 { Some(e1) } else { None },
            ..escaped(detail)
        }
    } else if e1 != e2 {
        escaped(format!("the two variants differ: {detail}"))
    } else {
        blocked(Some(e1), detail)
    }
}

fn io_uring(args: &[String]) -> Report {
    let entries: libc::c_long = args.first().and_then(|s| s.parse().ok()).unwrap_or(1);
    // struct io_uring_params is 120 bytes; zeroed means no flags.
    let mut params = [0u8; 120];
    let (r, e) = sys(
        libc::SYS_io_uring_setup,
        [entries, params.as_mut_ptr() as _, 0, 0, 0],
    );
    if r >= 0 {
        // SAFETY: r is an fd this process owns.
        unsafe { libc::close(r as libc::c_int) };
    }
    gated(&format!("io_uring_setup({entries})"), r, e, PERMISSION)
}

fn x32() -> Report {
    #[cfg(target_arch = "x86_64")]
    {
        const X32_BIT: libc::c_long = 0x4000_0000;
        let (r, e) = sys(libc::SYS_getpid | X32_BIT, [0; 5]);
        gated("getpid via the x32 ABI", r, e, &[libc::ENOSYS])
    }
    #[cfg(not(target_arch = "x86_64"))]
    blocked(None, "unsupported: x32 exists only on x86_64")
}

fn i386() -> Report {
    #[cfg(target_arch = "x86_64")]
    {
        let mut rax: u64 = 20; // __NR_getpid in the i386 table
                               // SAFETY: a syscall through the 32-bit entry; getpid takes no arguments and
                               // touches no memory. r8-r11 are declared clobbered (older kernels zero them
                               // on int 0x80).
        unsafe {
            std::arch::asm!(
                "int 0x80",
                inout("rax") rax,
                out("r8") _, out("r9") _, out("r10") _, out("r11") _,
                options(nostack)
            );
        }
        let r = rax as i64;
        if r >= 0 {
            escaped(format!("int 0x80 getpid returned {r}"))
        } else {
            let e = (-r) as i32;
            gated("int 0x80 getpid", -1, e, &[libc::ENOSYS])
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    blocked(None, "unsupported: the i386 ABI exists only on x86_64")
}

fn pid_arg(args: &[String], default: libc::pid_t) -> libc::pid_t {
    args.first().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn ptrace_attach(args: &[String]) -> Report {
    let pid = pid_arg(args, 1);
    let (r, e) = sys(
        libc::SYS_ptrace,
        [libc::PTRACE_ATTACH as _, pid as _, 0, 0, 0],
    );
    if r == 0 {
        // Let it go again at once (it was sent SIGSTOP; the caller cleans up).
        sys(
            libc::SYS_ptrace,
            [libc::PTRACE_DETACH as _, pid as _, 0, 0, 0],
        );
    }
    gated(&format!("ptrace(PTRACE_ATTACH, {pid})"), r, e, PERMISSION)
}

fn open_path(path: &str, flags: libc::c_int) -> (libc::c_long, i32) {
    let c = cstr(path);
    // SAFETY: NUL-terminated path alive for the call.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    let e = if fd < 0 { errno() } else { 0 };
    if fd >= 0 {
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
    }
    (fd as libc::c_long, e)
}

fn proc_mem(args: &[String]) -> Report {
    let path = format!("/proc/{}/mem", pid_arg(args, 1));
    let (r, e) = open_path(&path, libc::O_RDWR);
    if r >= 0 {
        escaped(format!(
            "open({path}, O_RDWR) succeeded: its memory is writable"
        ))
    } else {
        blocked(Some(e), format!("open({path}, O_RDWR): {}", describe(e)))
    }
}

fn proc_exe_write(args: &[String]) -> Report {
    let path = format!("/proc/{}/exe", pid_arg(args, 1));
    let (r, e) = open_path(&path, libc::O_WRONLY);
    if r >= 0 {
        escaped(format!(
            "open({path}, O_WRONLY) succeeded: the binary is writable"
        ))
    } else {
        blocked(Some(e), format!("open({path}, O_WRONLY): {}", describe(e)))
    }
}

fn bpf() -> Report {
    let mut attr = [0u8; 64];
    let (r, e) = sys(libc::SYS_bpf, [0xffff, attr.as_mut_ptr() as _, 64, 0, 0]);
    gated("bpf(0xffff, attr, 64)", r, e, PERMISSION)
}

fn perf() -> Report {
    let (r, e) = sys(libc::SYS_perf_event_open, [0, 0, -1, -1, 0]);
    gated("perf_event_open(NULL, 0, -1, -1, 0)", r, e, PERMISSION)
}

fn userfaultfd() -> Report {
    const UFFD_USER_MODE_ONLY: libc::c_long = 1;
    let (r, e) = sys(
        libc::SYS_userfaultfd,
        [
            libc::O_CLOEXEC as libc::c_long | UFFD_USER_MODE_ONLY,
            0,
            0,
            0,
            0,
        ],
    );
    if r >= 0 {
        // SAFETY: r is an fd this process owns.
        unsafe { libc::close(r as libc::c_int) };
    }
    gated(
        "userfaultfd(O_CLOEXEC|UFFD_USER_MODE_ONLY)",
        r,
        e,
        PERMISSION,
    )
}

fn keyctl() -> Report {
    const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
    const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;
    let (r, e) = sys(
        libc::SYS_keyctl,
        [KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0, 0, 0],
    );
    gated("keyctl(KEYCTL_GET_KEYRING_ID, session)", r, e, PERMISSION)
}

fn open_by_handle() -> Report {
    let (root, _) = {
        let c = cstr("/");
        // SAFETY: NUL-terminated path alive for the call.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        (fd, ())
    };
    // struct file_handle { u32 handle_bytes; int handle_type; u8 f_handle[8]; }
    // with a bogus FILEID_INO32_GEN handle: the kernel answers ESTALE or EINVAL.
    let mut handle = [0u8; 16];
    handle[0..4].copy_from_slice(&8u32.to_ne_bytes());
    handle[4..8].copy_from_slice(&1i32.to_ne_bytes());
    handle[8..12].copy_from_slice(&0x7fff_fff0u32.to_ne_bytes());
    let (r, e) = sys(
        libc::SYS_open_by_handle_at,
        [
            root as _,
            handle.as_mut_ptr() as _,
            libc::O_RDONLY as _,
            0,
            0,
        ],
    );
    if root >= 0 {
        // SAFETY: root is ours.
        unsafe { libc::close(root) };
    }
    if r >= 0 {
        // SAFETY: r is an fd this process owns.
        unsafe { libc::close(r as libc::c_int) };
    }
    gated("open_by_handle_at(\"/\", bogus handle)", r, e, PERMISSION)
}

fn kmod() -> Report {
    let empty = cstr("");
    let (r, e) = sys(libc::SYS_finit_module, [-1, empty.as_ptr() as _, 0, 0, 0]);
    gated("finit_module(-1, \"\", 0)", r, e, PERMISSION)
}

fn reboot() -> Report {
    // The first magic right, the second wrong: EINVAL once past the capability
    // check, so even a host run as root does nothing.
    const MAGIC1: libc::c_long = 0xfee1_dead;
    const CAD_OFF: libc::c_long = 0;
    let (r, e) = sys(libc::SYS_reboot, [MAGIC1, 0, CAD_OFF, 0, 0]);
    gated("reboot(MAGIC1, 0 (bad magic2), CAD_OFF)", r, e, PERMISSION)
}

fn personality() -> Report {
    const PER_LINUX32: libc::c_ulong = 0x0008;
    // SAFETY: personality only changes this process's execution domain.
    let r = unsafe { libc::personality(PER_LINUX32) } as libc::c_long;
    let e = if r < 0 { errno() } else { 0 };
    if r >= 0 {
        // SAFETY: as above; back to PER_LINUX.
        unsafe { libc::personality(0) };
    }
    gated("personality(PER_LINUX32)", r, e, PERMISSION)
}

fn socket(args: &[String]) -> Report {
    let name = arg(args, 0, "FAMILY");
    let (family, kind, proto) = match name {
        "netlink" => (libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE),
        "packet" => (libc::AF_PACKET, libc::SOCK_RAW, 0),
        "vsock" => (libc::AF_VSOCK, libc::SOCK_STREAM, 0),
        "bluetooth" => (libc::AF_BLUETOOTH, libc::SOCK_RAW, 1), // BTPROTO_HCI
        "alg" => (libc::AF_ALG, libc::SOCK_SEQPACKET, 0),
        "key" => (libc::AF_KEY, libc::SOCK_RAW, 2), // PF_KEY_V2
        "xdp" => (libc::AF_XDP, libc::SOCK_RAW, 0),
        "can" => (libc::AF_CAN, libc::SOCK_RAW, 1), // CAN_RAW
        "tipc" => (libc::AF_TIPC, libc::SOCK_RDM, 0),
        "rds" => (libc::AF_RDS, libc::SOCK_SEQPACKET, 0),
        other => match other.parse::<libc::c_int>() {
            Ok(n) => (n, libc::SOCK_RAW, 0),
            Err(_) => {
                eprintln!("warden-escape-probe: unknown socket family {other}");
                std::process::exit(2)
            }
        },
    };
    // SAFETY: socket has no memory-safety preconditions.
    let fd = unsafe { libc::socket(family, kind | libc::SOCK_CLOEXEC, proto) };
    if fd >= 0 {
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        escaped(format!("socket(AF {family} ({name})) succeeded"))
    } else {
        let e = errno();
        blocked(
            Some(e),
            format!("socket(AF {family} ({name})): {}", describe(e)),
        )
    }
}

fn read_file(args: &[String]) -> Report {
    let path = arg(args, 0, "PATH");
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return blocked(e.raw_os_error(), format!("open {path}: {e}")),
    };
    let mut buf = Vec::new();
    match file.by_ref().take(256).read_to_end(&mut buf) {
        Ok(n) => escaped(format!(
            "read {n} bytes of {path}: {:?}",
            String::from_utf8_lossy(&buf[..n.min(64)])
        )),
        Err(e) => blocked(e.raw_os_error(), format!("read {path}: {e}")),
    }
}

fn write_file(args: &[String]) -> Report {
    use std::io::Write;
    let path = arg(args, 0, "PATH");
    let res = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(b"warden-escape-probe was here\n"));
    match res {
        Ok(()) => escaped(format!("appended to {path}")),
        Err(e) => blocked(e.raw_os_error(), format!("write {path}: {e}")),
    }
}

fn open_write(args: &[String]) -> Report {
    let path = arg(args, 0, "PATH");
    let (r, e) = open_path(path, libc::O_WRONLY);
    if r >= 0 {
        escaped(format!(
            "open({path}, O_WRONLY) succeeded (nothing written)"
        ))
    } else {
        blocked(Some(e), format!("open({path}, O_WRONLY): {}", describe(e)))
    }
}

fn sysctl_rewrite(args: &[String]) -> Report {
    use std::io::Write;
    let path = arg(args, 0, "PATH");
    let value = match std::fs::read(path) {
        Ok(v) => v,
        Err(e) => return blocked(e.raw_os_error(), format!("read {path}: {e}")),
    };
    // O_WRONLY without O_TRUNC or O_CREAT: exactly what a sysctl write needs.
    let res = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(&value));
    match res {
        Ok(()) => escaped(format!(
            "wrote {path} (its own value {:?} back)",
            String::from_utf8_lossy(&value).trim_end()
        )),
        Err(e) => blocked(e.raw_os_error(), format!("write {path}: {e}")),
    }
}

fn symlink_escape(args: &[String]) -> Report {
    let dir = arg(args, 0, "DIR");
    let target = arg(args, 1, "TARGET");
    let link = format!("{dir}/warden-escape-link");
    let _ = std::fs::remove_file(&link);
    if let Err(e) = std::os::unix::fs::symlink(target, &link) {
        return blocked(e.raw_os_error(), format!("symlink {link} -> {target}: {e}"));
    }
    let res = std::fs::read(&link);
    let _ = std::fs::remove_file(&link);
    match res {
        Ok(b) => escaped(format!(
            "read {} bytes of {target} through {link}: {:?}",
            b.len(),
            String::from_utf8_lossy(&b[..b.len().min(64)])
        )),
        Err(e) => blocked(
            e.raw_os_error(),
            format!("created {link} -> {target}; reading through it: {e}"),
        ),
    }
}

fn hardlink_escape(args: &[String]) -> Report {
    let dir = arg(args, 0, "DIR");
    let target = arg(args, 1, "TARGET");
    let link = format!("{dir}/warden-escape-hardlink");
    let _ = std::fs::remove_file(&link);
    if let Err(e) = std::fs::hard_link(target, &link) {
        return blocked(e.raw_os_error(), format!("link({target}, {link}): {e}"));
    }
    let res = std::fs::read(&link);
    let _ = std::fs::remove_file(&link);
    match res {
        Ok(b) => escaped(format!(
            "linked {target} as {link} and read {} bytes: {:?}",
            b.len(),
            String::from_utf8_lossy(&b[..b.len().min(64)])
        )),
        Err(e) => escaped(format!("linked {target} as {link} (reading it: {e})")),
    }
}

fn ls(args: &[String]) -> Report {
    let path = arg(args, 0, "PATH");
    let needle = args.get(1);
    let entries = match std::fs::read_dir(path) {
        Ok(d) => d,
        Err(e) => return blocked(e.raw_os_error(), format!("opendir {path}: {e}")),
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let shown = names.iter().take(40).cloned().collect::<Vec<_>>().join(" ");
    let mut rep = match needle {
        Some(n) if names.contains(n) => escaped(format!("{path} lists {n}: {shown}")),
        Some(n) => blocked(None, format!("{path} is listable but has no {n}: {shown}")),
        None if names.is_empty() => blocked(None, format!("{path} is empty")),
        None => escaped(format!("{path} lists: {shown}")),
    };
    rep.extra = Some(("entries", json!(names)));
    rep
}

fn proc_leak(args: &[String]) -> Report {
    let files = [
        "/proc/1/environ",
        "/proc/1/cmdline",
        "/proc/mounts",
        "/proc/self/mountinfo",
    ];
    let mut hits = Vec::new();
    let mut notes = Vec::new();
    for f in files {
        match std::fs::read(f) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes).replace('\0', " ");
                for n in args.iter().filter(|n| !n.is_empty()) {
                    if let Some(line) = text.lines().find(|l| l.contains(n.as_str())) {
                        hits.push(format!("{f} shows {n}: {line:?}"));
                    }
                }
                notes.push(format!("{f}: {} bytes", bytes.len()));
            }
            Err(e) => notes.push(format!("{f}: {e}")),
        }
    }
    if hits.is_empty() {
        blocked(None, format!("no needle found; {}", notes.join("; ")))
    } else {
        escaped(hits.join("; "))
    }
}

fn io_err(what: &str, e: std::io::Error) -> Report {
    blocked(e.raw_os_error(), format!("{what}: {e}"))
}

fn unix_connect(args: &[String]) -> Report {
    let path = arg(args, 0, "PATH");
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => escaped(format!("connected to {path}")),
        Err(e) => io_err(&format!("connect {path}"), e),
    }
}

fn unix_abstract(args: &[String]) -> Report {
    use std::os::linux::net::SocketAddrExt;
    let name = arg(args, 0, "NAME");
    let addr = match std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()) {
        Ok(a) => a,
        Err(e) => return io_err("abstract address", e),
    };
    match std::os::unix::net::UnixStream::connect_addr(&addr) {
        Ok(_) => escaped(format!("connected to @{name}")),
        Err(e) => io_err(&format!("connect @{name}"), e),
    }
}

fn sysv_ipc(args: &[String]) -> Report {
    let key: libc::key_t = arg(args, 0, "KEY").parse().unwrap_or_else(|_| {
        eprintln!("warden-escape-probe: KEY must be an integer");
        std::process::exit(2)
    });
    // SAFETY: shmget/msgget/semget take no pointers.
    let (shm, msg, sem) = unsafe {
        (
            libc::shmget(key, 0, 0),
            libc::msgget(key, 0),
            libc::semget(key, 0, 0),
        )
    };
    let shm_err = if shm < 0 { errno() } else { 0 };
    let mut found = Vec::new();
    if shm >= 0 {
        // SAFETY: attaching read-only at an address the kernel picks; the segment
        // is at least 16 bytes (created so by the caller), read then detached.
        let text = unsafe {
            let p = libc::shmat(shm, std::ptr::null(), libc::SHM_RDONLY);
            if p as isize == -1 {
                format!("shmat: {}", describe(errno()))
            } else {
                let bytes = std::slice::from_raw_parts(p as *const u8, 16).to_vec();
                libc::shmdt(p);
                format!(
                    "{:?}",
                    String::from_utf8_lossy(&bytes).trim_end_matches('\0')
                )
            }
        };
        found.push(format!("shm id {shm}: {text}"));
    }
    if msg >= 0 {
        found.push(format!("msg queue id {msg}"));
    }
    if sem >= 0 {
        found.push(format!("semaphore id {sem}"));
    }
    if found.is_empty() {
        blocked(
            Some(shm_err),
            format!("shmget/msgget/semget({key}): {}", describe(shm_err)),
        )
    } else {
        escaped(found.join("; "))
    }
}

fn kill(args: &[String]) -> Report {
    let pid: libc::pid_t = arg(args, 0, "PID").parse().unwrap_or(0);
    if pid <= 0 {
        eprintln!("warden-escape-probe: PID must be positive");
        std::process::exit(2)
    }
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    if r == 0 {
        escaped(format!(
            "kill({pid}, 0) succeeded: the process is reachable"
        ))
    } else {
        let e = errno();
        blocked(Some(e), format!("kill({pid}, 0): {}", describe(e)))
    }
}

fn tcp_connect(args: &[String]) -> Report {
    use std::net::ToSocketAddrs;
    let host = arg(args, 0, "HOST");
    let port: u16 = arg(args, 1, "PORT").parse().unwrap_or(0);
    let addr = match (host, port).to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(a)) => a,
        Ok(None) => return blocked(None, format!("{host}: no address")),
        Err(e) => return io_err(&format!("resolve {host}"), e),
    };
    match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
        Ok(_) => escaped(format!("connected to {addr}")),
        Err(e) => io_err(&format!("connect {addr}"), e),
    }
}

fn ip_arg(args: &[String], i: usize, what: &str) -> std::net::IpAddr {
    let s = arg(args, i, what);
    s.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .unwrap_or_else(|_| {
            eprintln!("warden-escape-probe: {what} must be an IP address, not {s:?}");
            std::process::exit(2)
        })
}

/// A DNS query (A, recursion desired) for `name`.
fn dns_query(name: &str) -> Vec<u8> {
    let mut q = vec![0x57, 0x45, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

fn udp_dns(args: &[String]) -> Report {
    use std::net::{SocketAddr, UdpSocket};
    let ip = ip_arg(args, 0, "IP");
    let port: u16 = arg(args, 1, "PORT").parse().unwrap_or(53);
    let name = arg(args, 2, "NAME");
    let to = SocketAddr::new(ip, port);
    let bind = if ip.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let sock = match UdpSocket::bind(bind) {
        Ok(s) => s,
        Err(e) => return io_err("bind a UDP socket", e),
    };
    // Connected, so an ICMP error (port unreachable) comes back as ECONNREFUSED and a
    // missing route fails at once, instead of a silent timeout.
    if let Err(e) = sock.connect(to) {
        return io_err(&format!("connect UDP {to}"), e);
    }
    let _ = sock.set_read_timeout(Some(Duration::from_secs(3)));
    if let Err(e) = sock.send(&dns_query(name)) {
        return io_err(&format!("send to {to}"), e);
    }
    let mut buf = [0u8; 1500];
    match sock.recv(&mut buf) {
        Ok(n) => {
            let rcode = if n > 3 { buf[3] & 0x0f } else { 0xff };
            escaped(format!(
                "{to} answered the query for {name}: {n} bytes, rcode {rcode}"
            ))
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            blocked(None, format!("no reply from {to} within 3 s"))
        }
        Err(e) => io_err(&format!("recv from {to}"), e),
    }
}

/// The internet checksum of `data`.
fn inet_checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for chunk in data.chunks(2) {
        let word = u16::from_be_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn icmp(args: &[String], raw: bool) -> Report {
    let ip = match ip_arg(args, 0, "IPV4") {
        std::net::IpAddr::V4(a) => a,
        std::net::IpAddr::V6(_) => {
            eprintln!("warden-escape-probe: icmp needs an IPv4 address");
            std::process::exit(2)
        }
    };
    let kind = if raw { "raw" } else { "ping" };
    let ty = if raw {
        libc::SOCK_RAW
    } else {
        libc::SOCK_DGRAM
    };
    // SAFETY: socket(2) has no memory-safety preconditions.
    let fd = unsafe { libc::socket(libc::AF_INET, ty | libc::SOCK_CLOEXEC, libc::IPPROTO_ICMP) };
    if fd < 0 {
        let e = errno();
        return blocked(Some(e), format!("{kind} socket: {}", describe(e)));
    }
    let id: u16 = 0x5745;
    let mut packet = vec![8u8, 0, 0, 0];
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&1u16.to_be_bytes());
    packet.extend_from_slice(b"warden-escape-probe");
    let sum = inet_checksum(&packet);
    packet[2..4].copy_from_slice(&sum.to_be_bytes());
    let to = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip.octets()),
        },
        sin_zero: [0; 8],
    };
    let timeout = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    // SAFETY: the buffers and the address outlive the calls, with their true sizes.
    let sent = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&timeout as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
        libc::sendto(
            fd,
            packet.as_ptr().cast(),
            packet.len(),
            0,
            (&to as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        let e = errno();
        // SAFETY: closing the socket this function opened.
        unsafe { libc::close(fd) };
        return blocked(Some(e), format!("{kind} sendto {ip}: {}", describe(e)));
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut buf = [0u8; 1500];
    let mut result = blocked(None, format!("{kind}: no echo reply from {ip} within 3 s"));
    while Instant::now() < deadline {
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            continue;
        }
        let n = n as usize;
        // A raw socket gets the IP header too; a ping socket only the ICMP message.
        let start = if raw {
            usize::from(buf[0] & 0x0f) * 4
        } else {
            0
        };
        if n > start && buf[start] == 0 {
            result = escaped(format!(
                "{kind}: echo reply from {ip} ({} bytes)",
                n - start
            ));
            break;
        }
    }
    // SAFETY: closing the socket this function opened.
    unsafe { libc::close(fd) };
    result
}

fn proxy_get(args: &[String]) -> Report {
    use std::io::Write;
    let proxy = arg(args, 0, "PROXY");
    let url = arg(args, 1, "URL");
    let authority = url
        .split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or_default())
        .unwrap_or_default();
    let addr: std::net::SocketAddr = match proxy.parse() {
        Ok(a) => a,
        Err(_) => {
            eprintln!("warden-escape-probe: PROXY must be IP:PORT, not {proxy:?}");
            std::process::exit(2)
        }
    };
    let mut stream = match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
        Ok(s) => s,
        Err(e) => return io_err(&format!("connect to the proxy {addr}"), e),
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let request = format!("GET {url} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    if let Err(e) = stream.write_all(request.as_bytes()) {
        return io_err("send", e);
    }
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    let status = text.lines().next().unwrap_or("").to_string();
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let body: String = body.chars().take(300).collect();
    let denied = text
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("x-warden-denied:"))
        .unwrap_or("");
    if status.split_whitespace().nth(1) == Some("200") {
        escaped(format!("{status}: {body}"))
    } else {
        blocked(None, format!("{status} {denied}: {body}"))
    }
}

fn dns(args: &[String]) -> Report {
    use std::net::ToSocketAddrs;
    let name = arg(args, 0, "NAME");
    let start = Instant::now();
    let res = (name, 80).to_socket_addrs();
    let ms = start.elapsed().as_millis();
    match res {
        Ok(addrs) => {
            let addrs: Vec<String> = addrs.map(|a| a.ip().to_string()).collect();
            escaped(format!("{name} resolved in {ms} ms: {}", addrs.join(" ")))
        }
        Err(e) => blocked(None, format!("{name} did not resolve ({ms} ms): {e}")),
    }
}

fn env(args: &[String]) -> Report {
    let name = arg(args, 0, "NAME");
    match std::env::var_os(name) {
        Some(v) => escaped(format!("{name}={}", v.to_string_lossy())),
        None => blocked(None, format!("{name} is not set")),
    }
}

fn fork_bomb(args: &[String]) -> Report {
    let max: u32 = arg(args, 0, "MAX").parse().unwrap_or(100);
    // SAFETY: getpid cannot fail.
    let parent = unsafe { libc::getpid() };
    let mut n = 0;
    let mut err = None;
    for _ in 0..max {
        // SAFETY: the child only calls async-signal-safe functions and _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: prctl/getppid/sleep/_exit are async-signal-safe. The child
            // dies with its parent, so a host run leaves nothing behind.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() == parent {
                    libc::sleep(60);
                }
                libc::_exit(0);
            }
        }
        if pid < 0 {
            err = Some(errno());
            break;
        }
        n += 1;
    }
    let mut rep = match err {
        Some(e) => blocked(
            Some(e),
            format!("forked={n}; fork #{} failed: {}", n + 1, describe(e)),
        ),
        None => escaped(format!("forked={n}: all {max} forks succeeded")),
    };
    rep.extra = Some(("forked", json!(n)));
    rep
}

fn mem_bomb(args: &[String]) -> Report {
    let mb: usize = arg(args, 0, "MB").parse().unwrap_or(1024);
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut done = 0;
    while done < mb {
        let step = 16.min(mb - done);
        // Touched (non-zero), so every page is resident.
        chunks.push(vec![0xa5u8; step << 20]);
        done += step;
        std::thread::sleep(Duration::from_millis(5));
    }
    let total: usize = chunks.iter().map(Vec::len).sum();
    escaped(format!("allocated {} MiB", total >> 20))
}

fn main() {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() || argv[0] == "--list" || argv[0] == "--help" {
        for (name, args, what) in ATTACKS {
            println!("{name:22} {args:14} {what}");
        }
        return;
    }
    let attack = argv.remove(0);
    let args = &argv[..];
    let rep = match attack.as_str() {
        "caps" => caps(),
        "setuid-root" => setuid_root(),
        "userns" => userns(),
        "userns-clone" => userns_clone(),
        "mountns" => mountns(),
        "mount-tmpfs" => mount_tmpfs(args),
        "umount-ro-bind" => umount_ro_bind(args),
        "remount-rw" => remount_rw(args),
        "pivot-root" => pivot_root(args),
        "new-mount-api" => new_mount_api(),
        "open-tree" => open_tree(),
        "chroot" => chroot(args),
        "tiocsti" => tiocsti(),
        "io-uring" => io_uring(args),
        "x32" => x32(),
        "i386" => i386(),
        "ptrace-pid1" => ptrace_attach(args),
        "proc-pid1-mem" => proc_mem(args),
        "proc-pid1-exe-write" => proc_exe_write(args),
        "bpf" => bpf(),
        "perf" => perf(),
        "userfaultfd" => userfaultfd(),
        "keyctl" => keyctl(),
        "open-by-handle" => open_by_handle(),
        "kmod" => kmod(),
        "reboot" => reboot(),
        "personality" => personality(),
        "socket" => socket(args),
        "read" => read_file(args),
        "write" => write_file(args),
        "open-write" => open_write(args),
        "sysctl-rewrite" => sysctl_rewrite(args),
        "symlink-escape" => symlink_escape(args),
        "hardlink-escape" => hardlink_escape(args),
        "ls" => ls(args),
        "proc-leak" => proc_leak(args),
        "unix-connect" => unix_connect(args),
        "unix-abstract" => unix_abstract(args),
        "sysv-ipc" => sysv_ipc(args),
        "kill" => kill(args),
        "tcp-connect" => tcp_connect(args),
        "udp-dns" => udp_dns(args),
        "icmp-ping" => icmp(args, false),
        "icmp-raw" => icmp(args, true),
        "proxy-get" => proxy_get(args),
        "dns" => dns(args),
        "env" => env(args),
        "fork-bomb" => fork_bomb(args),
        "mem-bomb" => mem_bomb(args),
        other => {
            eprintln!("warden-escape-probe: unknown attack {other:?} (--list shows them)");
            std::process::exit(2)
        }
    };
    let mut line = json!({
        "attack": attack,
        "outcome": rep.outcome,
        "errno": rep.errno,
        "errno_name": rep.errno.map(errno_name),
        "detail": rep.detail,
    });
    if let Some((key, value)) = rep.extra {
        line[key] = value;
    }
    println!("{line}");
}
