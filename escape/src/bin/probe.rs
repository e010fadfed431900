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
//! `warden-escape-probe A ARGS :: B ARGS ...` runs several attacks in one process
//! (so in one sandbox, where a later step depends on an earlier one: `cd DIR ::
//! plant open .bashrc`, `plant mkdir W/.config :: plant mkdir W/.config/fish`),
//! in order, one line each.
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
    (
        "numa",
        "CALL",
        "mbind|set-mempolicy|get-mempolicy|move-pages|migrate-pages: the no-op form the kernel \
         accepts (MPOL_DEFAULT, zero lengths)",
    ),
    (
        "setid",
        "CALL PATH MODE",
        "set-id bits in a mode (octal): chmod|fchmod|fchmodat2 on PATH, or create PATH with \
         open|openat2|mknod|tmpfile (O_TMPFILE in its directory, then linked); escaped if PATH \
         ends up with S_ISUID or S_ISGID",
    ),
    (
        "shm-fill",
        "MB [DIR]",
        "write MB MiB into DIR (/dev/shm)/warden-fill in 1 MiB steps; blocked with the errno \
         of the write that failed",
    ),
    (
        "memfd-fill",
        "MB",
        "memfd_create, then write MB MiB into it in 16 MiB steps, never mapped; prints only \
         if it finishes",
    ),
    (
        "plant",
        "CALL ARGS...",
        "create one name with one raw syscall; escaped if it was created. CALL ARGS: \
         open|creat|mkdir|mknod PATH (mknod: a FIFO), openat|openat2|mkdirat|mknodat DIR NAME, \
         symlink TARGET PATH, symlinkat TARGET DIR NAME, link|linkat|rename|renameat OLD NEW, \
         renameat2 OLD NEW [noreplace|exchange|none]",
    ),
    ("cd", "DIR", "chdir(DIR), for the steps after it (see `::`)"),
    (
        "race",
        "CALL SAFE TARGET [ITERS [SECS]]",
        "CALL (open|mkdir) on a buffer another thread flips between SAFE and TARGET (same \
         length); ITERS (200000) calls or SECS (5) s; escaped if TARGET appears",
    ),
    (
        "race-swap",
        "CALL PATH TARGET A B [ITERS [SECS]]",
        "CALL (open|mkdir) on PATH while another thread swaps A and B \
         (renameat2 RENAME_EXCHANGE); escaped if TARGET appears",
    ),
    (
        "ordinary",
        "DIR",
        "the control: every ordinary way to create in DIR (made if missing); escaped (= it \
         all worked) unless a step failed; `steps` has each step's result",
    ),
];

/// The result of one attack.
struct Report {
    outcome: &'static str,
    errno: Option<i32>,
    detail: String,
    /// More fields of the JSON line.
    extra: Vec<(&'static str, Value)>,
}

fn escaped(detail: impl Into<String>) -> Report {
    Report {
        outcome: "escaped",
        errno: None,
        detail: detail.into(),
        extra: Vec::new(),
    }
}

fn blocked(errno: Option<i32>, detail: impl Into<String>) -> Report {
    Report {
        outcome: "blocked",
        errno,
        detail: detail.into(),
        extra: Vec::new(),
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
        libc::EISDIR => "EISDIR",
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
        // IP sockets by protocol.
        "tcp" => (
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK,
            libc::IPPROTO_TCP,
        ),
        "udp" => (libc::AF_INET, libc::SOCK_DGRAM, 0),
        "tcp6" => (libc::AF_INET6, libc::SOCK_STREAM, 0),
        "udp6" => (libc::AF_INET6, libc::SOCK_DGRAM, libc::IPPROTO_UDP),
        "unix-seqpacket" => (libc::AF_UNIX, libc::SOCK_SEQPACKET, 0),
        "sctp" => (libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP),
        "sctp6-seqpacket" => (libc::AF_INET6, libc::SOCK_SEQPACKET, libc::IPPROTO_SCTP),
        "mptcp" => (libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP),
        "mptcp6" => (libc::AF_INET6, libc::SOCK_STREAM, libc::IPPROTO_MPTCP),
        "udplite" => (libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_UDPLITE),
        "smc" => (libc::AF_INET, libc::SOCK_STREAM, 256), // IPPROTO_SMC
        "dccp" => (libc::AF_INET, 6, libc::IPPROTO_DCCP), // SOCK_DCCP
        "raw" => (libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP),
        "raw6" => (libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_ICMPV6),
        "ping" => (libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_ICMP),
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
    rep.extra.push(("entries", json!(names)));
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
    rep.extra.push(("forked", json!(n)));
    rep
}

fn numa(args: &[String]) -> Report {
    let call = arg(args, 0, "CALL");
    let (nr, a): (libc::c_long, [libc::c_long; 6]) = match call {
        "mbind" => (libc::SYS_mbind, [0; 6]),
        "set-mempolicy" => (libc::SYS_set_mempolicy, [0; 6]),
        "get-mempolicy" => (libc::SYS_get_mempolicy, [0; 6]),
        "move-pages" => (libc::SYS_move_pages, [0; 6]),
        "migrate-pages" => (libc::SYS_migrate_pages, [0; 6]),
        other => {
            eprintln!("warden-escape-probe: unknown NUMA call {other}");
            std::process::exit(2)
        }
    };
    // SAFETY: every pointer argument is NULL with a zero count or length.
    let r = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
    let e = if r < 0 { errno() } else { 0 };
    gated(&format!("{call}(0, ...)"), r, e, &[libc::ENOSYS])
}

/// The mode bits of `path` (not followed), if it exists.
fn set_mode_of(path: &str) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o7777)
}

fn setid(args: &[String]) -> Report {
    let call = arg(args, 0, "CALL");
    let path = arg(args, 1, "PATH");
    let mode = u32::from_str_radix(arg(args, 2, "MODE"), 8).unwrap_or_else(|_| {
        eprintln!("warden-escape-probe: MODE is octal");
        std::process::exit(2)
    });
    let p = cstr(path);
    let m = mode as libc::c_long;
    let creat = (libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC) as libc::c_long;
    let (r, e) = match call {
        "chmod" => sys(libc::SYS_fchmodat, [AT_FDCWD, ptr(&p), m, 0, 0]),
        "fchmodat2" => sys(libc::SYS_fchmodat2, [AT_FDCWD, ptr(&p), m, 0, 0]),
        "fchmod" => {
            let (fd, e) = sys(
                libc::SYS_openat,
                [AT_FDCWD, ptr(&p), libc::O_RDONLY as _, 0, 0],
            );
            if fd < 0 {
                (fd, e)
            } else {
                let r = sys(libc::SYS_fchmod, [fd, m, 0, 0, 0]);
                // SAFETY: our fd.
                unsafe { libc::close(fd as i32) };
                r
            }
        }
        "open" => {
            let r = sys(libc::SYS_openat, [AT_FDCWD, ptr(&p), creat, m, 0]);
            if r.0 >= 0 {
                // SAFETY: our fd.
                unsafe { libc::close(r.0 as i32) };
            }
            r
        }
        "openat2" => {
            let how: [u64; 3] = [creat as u64, u64::from(mode), 0];
            let r = sys(
                libc::SYS_openat2,
                [AT_FDCWD, ptr(&p), how.as_ptr() as libc::c_long, 24, 0],
            );
            if r.0 >= 0 {
                // SAFETY: our fd.
                unsafe { libc::close(r.0 as i32) };
            }
            r
        }
        "mknod" => sys(
            libc::SYS_mknodat,
            [
                AT_FDCWD,
                ptr(&p),
                (libc::S_IFREG | mode) as libc::c_long,
                0,
                0,
            ],
        ),
        "tmpfile" => {
            let dir = std::path::Path::new(path)
                .parent()
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_else(|| ".".into());
            let d = cstr(&dir);
            let flags = (libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC) as libc::c_long;
            let (fd, e) = sys(libc::SYS_openat, [AT_FDCWD, ptr(&d), flags, m, 0]);
            if fd < 0 {
                (fd, e)
            } else {
                let link = cstr(&format!("/proc/self/fd/{fd}"));
                let follow = libc::AT_SYMLINK_FOLLOW as libc::c_long;
                let r = sys(
                    libc::SYS_linkat,
                    [AT_FDCWD, ptr(&link), AT_FDCWD, ptr(&p), follow],
                );
                // SAFETY: our fd.
                unsafe { libc::close(fd as i32) };
                r
            }
        }
        other => {
            eprintln!("warden-escape-probe: unknown setid call {other}");
            std::process::exit(2)
        }
    };
    let got = set_mode_of(path);
    let shown = got.map_or("absent".to_string(), |m| format!("{m:04o}"));
    let mut rep = match got {
        Some(m) if m & (libc::S_ISUID | libc::S_ISGID) != 0 => {
            escaped(format!("{call} {path} {mode:o}: now mode {shown}"))
        }
        _ if r < 0 => blocked(
            Some(e),
            format!("{call} {path} {mode:o}: {}; mode {shown}", describe(e)),
        ),
        _ => blocked(
            None,
            format!("{call} {path} {mode:o} succeeded without set-id bits: mode {shown}"),
        ),
    };
    rep.extra.push(("mode", json!(shown)));
    rep
}

/// Writes `mb` MiB of non-zero bytes to `fd` in `step` MiB writes; the MiB
/// written, or the errno of the write that failed and the MiB before it.
fn fill(fd: i32, mb: usize, step: usize) -> Result<usize, (i32, usize)> {
    let chunk = vec![0x5au8; step << 20];
    let mut done = 0;
    while done < mb {
        let mut off = 0;
        while off < chunk.len() {
            // SAFETY: a buffer we own, its length.
            let n = unsafe { libc::write(fd, chunk[off..].as_ptr().cast(), chunk.len() - off) };
            if n < 0 {
                return Err((errno(), done));
            }
            off += n as usize;
        }
        done += step;
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(done)
}

fn shm_fill(args: &[String]) -> Report {
    let mb: usize = arg(args, 0, "MB").parse().unwrap_or(64);
    let dir = args.get(1).map(String::as_str).unwrap_or("/dev/shm");
    let path = format!("{dir}/warden-fill");
    let file = match std::fs::File::create(&path) {
        Ok(f) => f,
        Err(e) => return io_err(&format!("create {path}"), e),
    };
    use std::os::fd::AsRawFd;
    let r = fill(file.as_raw_fd(), mb, 1);
    drop(file);
    let _ = std::fs::remove_file(&path);
    let mut rep = match r {
        Ok(n) => escaped(format!("wrote {n} MiB into {path}")),
        Err((e, n)) => blocked(
            Some(e),
            format!("write {path} after {n} MiB: {}", describe(e)),
        ),
    };
    rep.extra
        .push(("written_mb", json!(r.unwrap_or_else(|(_, n)| n))));
    rep
}

fn memfd_fill(args: &[String]) -> Report {
    let mb: usize = arg(args, 0, "MB").parse().unwrap_or(1024);
    // SAFETY: a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"warden-fill".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        let e = errno();
        return blocked(Some(e), format!("memfd_create: {}", describe(e)));
    }
    let r = fill(fd, mb, 16);
    // SAFETY: our fd.
    unsafe { libc::close(fd) };
    match r {
        Ok(n) => escaped(format!("wrote {n} MiB into a memfd")),
        Err((e, n)) => blocked(
            Some(e),
            format!("memfd write after {n} MiB: {}", describe(e)),
        ),
    }
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

// ---------------------------------------------------------------------------
// Names created in a write grant (docs/security-model.md, "Write grants and files
// the host trusts"): `plant` makes one name with one raw syscall, as a hostile
// server would; `race` and `race-swap` race whoever checks the name against the
// kernel that resolves it; `ordinary` is the control, every ordinary way a server
// creates files, which must keep working.

/// What `plant` writes into a file it created.
const PAYLOAD: &[u8] = b"echo warden-escape-probe was here\n";

const CREATE_FLAGS: libc::c_int = libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC;

/// Whether `path` exists, not following a final symlink.
fn exists(path: &str) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

fn ptr(c: &CString) -> libc::c_long {
    c.as_ptr() as libc::c_long
}

const AT_FDCWD: libc::c_long = libc::AT_FDCWD as libc::c_long;

/// The number of the old path-only call (`open`, `mkdir`...) where it exists
/// (x86_64). aarch64 and newer ports only have the `*at` calls; callers then make
/// the `*at` call with `AT_FDCWD`, which is what libc does there too.
#[cfg(target_arch = "x86_64")]
fn legacy_nr(call: &str) -> Option<libc::c_long> {
    Some(match call {
        "open" => libc::SYS_open,
        "creat" => libc::SYS_creat,
        "mkdir" => libc::SYS_mkdir,
        "mknod" => libc::SYS_mknod,
        "symlink" => libc::SYS_symlink,
        "link" => libc::SYS_link,
        "rename" => libc::SYS_rename,
        _ => return None,
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn legacy_nr(_call: &str) -> Option<libc::c_long> {
    None
}

/// `struct open_how` of openat2(2).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn sys_openat2(
    dirfd: libc::c_long,
    path: &CString,
    flags: libc::c_int,
    resolve: u64,
) -> (libc::c_long, i32) {
    let how = OpenHow {
        flags: flags as u64,
        mode: 0o644,
        resolve,
    };
    sys(
        libc::SYS_openat2,
        [
            dirfd,
            ptr(path),
            &how as *const OpenHow as libc::c_long,
            std::mem::size_of::<OpenHow>() as libc::c_long,
            0,
        ],
    )
}

/// `open(path)` through the old `open` call (or `openat(AT_FDCWD)`).
fn sys_open(path: &CString, flags: libc::c_int, mode: libc::mode_t) -> (libc::c_long, i32) {
    let (flags, mode) = (flags as libc::c_long, mode as libc::c_long);
    match legacy_nr("open") {
        Some(nr) => sys(nr, [ptr(path), flags, mode, 0, 0]),
        None => sys(libc::SYS_openat, [AT_FDCWD, ptr(path), flags, mode, 0]),
    }
}

/// `mkdir(path)` through the old `mkdir` call (or `mkdirat(AT_FDCWD)`).
fn sys_mkdir(path: &CString, mode: libc::mode_t) -> (libc::c_long, i32) {
    let mode = mode as libc::c_long;
    match legacy_nr("mkdir") {
        Some(nr) => sys(nr, [ptr(path), mode, 0, 0, 0]),
        None => sys(libc::SYS_mkdirat, [AT_FDCWD, ptr(path), mode, 0, 0]),
    }
}

/// Writes `data` to a raw fd this process owns, then closes it.
fn write_and_close(fd: libc::c_long, data: &[u8]) -> Result<(), i32> {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    // SAFETY: fd was just returned by the kernel to this thread and is owned by
    // nothing else; the File closes it.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd as libc::c_int) };
    file.write_all(data)
        .map_err(|e| e.raw_os_error().unwrap_or(0))
}

fn close_fd(fd: libc::c_long) {
    // SAFETY: an fd this process owns and no longer uses.
    unsafe { libc::close(fd as libc::c_int) };
}

/// A directory fd for the `*at` calls (closed by the caller).
fn dir_fd(dir: &str) -> Result<libc::c_long, Report> {
    let (fd, e) = sys_open(
        &cstr(dir),
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    );
    if fd < 0 {
        Err(blocked(
            Some(e),
            format!("open({dir}, O_DIRECTORY): {}", describe(e)),
        ))
    } else {
        Ok(fd)
    }
}

fn renameat2_flags(name: &str) -> libc::c_long {
    match name {
        "noreplace" => libc::RENAME_NOREPLACE as libc::c_long,
        "exchange" => libc::RENAME_EXCHANGE as libc::c_long,
        "none" | "0" => 0,
        other => {
            eprintln!("warden-escape-probe: renameat2 flag must be noreplace, exchange or none, not {other:?}");
            std::process::exit(2)
        }
    }
}

/// `plant CALL ARGS...`: one creating syscall, raw, with nothing done before it.
/// Escaped when the call succeeded or the name it creates appeared; `created`
/// says whether that name exists afterwards (and did not before).
fn plant(args: &[String]) -> Report {
    let call = arg(args, 0, "CALL");
    let a = |i: usize, what: &str| arg(args, i + 1, what).to_string();
    let c = |s: &str| cstr(s);
    let mode_file: libc::c_long = 0o644;
    let mode_dir: libc::c_long = 0o755;
    let fifo: libc::c_long = (libc::S_IFIFO as libc::c_long) | 0o644;
    // (what the call creates, a description, (ret, errno), whether ret is an fd).
    let (creates, what, (r, e), fd): (String, String, (libc::c_long, i32), bool);
    let mut dirfd = None;
    let mut at = |dir: &str| -> Result<libc::c_long, Report> {
        let fd = dir_fd(dir)?;
        dirfd = Some(fd);
        Ok(fd)
    };
    // The old one-path calls fall back to their `*at` twin with AT_FDCWD
    // first where they do not exist (see legacy_nr).
    let legacy = |name: &str, args4: [libc::c_long; 4], at_nr: libc::c_long| match legacy_nr(name) {
        Some(nr) => sys(nr, [args4[0], args4[1], args4[2], args4[3], 0]),
        None => sys(at_nr, [AT_FDCWD, args4[0], args4[1], args4[2], args4[3]]),
    };
    let existed;
    match call {
        "open" | "creat" | "mkdir" | "mknod" => {
            let path = a(0, "PATH");
            existed = exists(&path);
            let cp = c(&path);
            (what, (r, e), fd) = match call {
                "open" => (
                    format!("open({path}, O_CREAT|O_WRONLY, 0644)"),
                    legacy(
                        "open",
                        [ptr(&cp), CREATE_FLAGS as _, mode_file, 0],
                        libc::SYS_openat,
                    ),
                    true,
                ),
                "creat" => (
                    format!("creat({path}, 0644)"),
                    match legacy_nr("creat") {
                        Some(nr) => sys(nr, [ptr(&cp), mode_file, 0, 0, 0]),
                        None => sys(
                            libc::SYS_openat,
                            [
                                AT_FDCWD,
                                ptr(&cp),
                                (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as _,
                                mode_file,
                                0,
                            ],
                        ),
                    },
                    true,
                ),
                "mkdir" => (
                    format!("mkdir({path}, 0755)"),
                    legacy("mkdir", [ptr(&cp), mode_dir, 0, 0], libc::SYS_mkdirat),
                    false,
                ),
                _ => (
                    format!("mknod({path}, S_IFIFO|0644)"),
                    legacy("mknod", [ptr(&cp), fifo, 0, 0], libc::SYS_mknodat),
                    false,
                ),
            };
            creates = path;
        }
        "openat" | "openat2" | "mkdirat" | "mknodat" => {
            let (dir, name) = (a(0, "DIR"), a(1, "NAME"));
            creates = format!("{dir}/{name}");
            existed = exists(&creates);
            let d = match at(&dir) {
                Ok(d) => d,
                Err(rep) => return rep,
            };
            let cn = c(&name);
            (what, (r, e), fd) = match call {
                "openat" => (
                    format!("openat(fd of {dir}, {name}, O_CREAT|O_WRONLY, 0644)"),
                    sys(
                        libc::SYS_openat,
                        [d, ptr(&cn), CREATE_FLAGS as _, mode_file, 0],
                    ),
                    true,
                ),
                "openat2" => (
                    format!("openat2(fd of {dir}, {name}, {{O_CREAT|O_WRONLY, 0644}})"),
                    sys_openat2(d, &cn, CREATE_FLAGS, 0),
                    true,
                ),
                "mkdirat" => (
                    format!("mkdirat(fd of {dir}, {name}, 0755)"),
                    sys(libc::SYS_mkdirat, [d, ptr(&cn), mode_dir, 0, 0]),
                    false,
                ),
                _ => (
                    format!("mknodat(fd of {dir}, {name}, S_IFIFO|0644)"),
                    sys(libc::SYS_mknodat, [d, ptr(&cn), fifo, 0, 0]),
                    false,
                ),
            };
        }
        "symlink" => {
            let (target, path) = (a(0, "TARGET"), a(1, "PATH"));
            existed = exists(&path);
            let (ct, cp) = (c(&target), c(&path));
            what = format!("symlink({target}, {path})");
            (r, e) = match legacy_nr("symlink") {
                Some(nr) => sys(nr, [ptr(&ct), ptr(&cp), 0, 0, 0]),
                None => sys(libc::SYS_symlinkat, [ptr(&ct), AT_FDCWD, ptr(&cp), 0, 0]),
            };
            fd = false;
            creates = path;
        }
        "symlinkat" => {
            let (target, dir, name) = (a(0, "TARGET"), a(1, "DIR"), a(2, "NAME"));
            creates = format!("{dir}/{name}");
            existed = exists(&creates);
            let d = match at(&dir) {
                Ok(d) => d,
                Err(rep) => return rep,
            };
            let (ct, cn) = (c(&target), c(&name));
            what = format!("symlinkat({target}, fd of {dir}, {name})");
            (r, e) = sys(libc::SYS_symlinkat, [ptr(&ct), d, ptr(&cn), 0, 0]);
            fd = false;
        }
        "link" | "linkat" | "rename" | "renameat" | "renameat2" => {
            let (old, new) = (a(0, "OLD"), a(1, "NEW"));
            existed = exists(&new);
            let (co, cn) = (c(&old), c(&new));
            (what, (r, e)) = match call {
                "link" => (
                    format!("link({old}, {new})"),
                    match legacy_nr("link") {
                        Some(nr) => sys(nr, [ptr(&co), ptr(&cn), 0, 0, 0]),
                        None => sys(
                            libc::SYS_linkat,
                            [AT_FDCWD, ptr(&co), AT_FDCWD, ptr(&cn), 0],
                        ),
                    },
                ),
                "linkat" => (
                    format!("linkat(AT_FDCWD, {old}, AT_FDCWD, {new}, 0)"),
                    sys(
                        libc::SYS_linkat,
                        [AT_FDCWD, ptr(&co), AT_FDCWD, ptr(&cn), 0],
                    ),
                ),
                "rename" => (
                    format!("rename({old}, {new})"),
                    match legacy_nr("rename") {
                        Some(nr) => sys(nr, [ptr(&co), ptr(&cn), 0, 0, 0]),
                        None => sys(
                            libc::SYS_renameat2,
                            [AT_FDCWD, ptr(&co), AT_FDCWD, ptr(&cn), 0],
                        ),
                    },
                ),
                "renameat" => (
                    format!("renameat(AT_FDCWD, {old}, AT_FDCWD, {new})"),
                    renameat(&co, &cn),
                ),
                _ => {
                    let flag = args.get(3).map(String::as_str).unwrap_or("noreplace");
                    (
                        format!("renameat2({old}, {new}, {flag})"),
                        sys(
                            libc::SYS_renameat2,
                            [
                                AT_FDCWD,
                                ptr(&co),
                                AT_FDCWD,
                                ptr(&cn),
                                renameat2_flags(flag),
                            ],
                        ),
                    )
                }
            };
            fd = false;
            creates = new;
        }
        other => {
            eprintln!("warden-escape-probe: plant: unknown call {other:?} (--list shows them)");
            std::process::exit(2)
        }
    }
    let mut wrote = String::new();
    if r >= 0 && fd {
        wrote = match write_and_close(r, PAYLOAD) {
            Ok(()) => format!(", wrote {} bytes", PAYLOAD.len()),
            Err(we) => format!(", the write failed: {}", describe(we)),
        };
    }
    if let Some(d) = dirfd {
        close_fd(d);
    }
    let created = !existed && exists(&creates);
    let mut rep = if r >= 0 {
        escaped(format!(
            "{what} succeeded{wrote}; {creates} exists: {created}"
        ))
    } else if created {
        Report {
            errno: Some(e),
            ..escaped(format!("{what}: {}, yet {creates} appeared", describe(e)))
        }
    } else {
        blocked(Some(e), format!("{what}: {}", describe(e)))
    };
    rep.extra.push(("created", json!(created)));
    rep
}

/// renameat(AT_FDCWD, old, AT_FDCWD, new), where the call exists (not on newer
/// ports, which only have renameat2: then that, without flags).
fn renameat(old: &CString, new: &CString) -> (libc::c_long, i32) {
    #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
    let nr = libc::SYS_renameat;
    #[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
    let nr = libc::SYS_renameat2;
    sys(nr, [AT_FDCWD, ptr(old), AT_FDCWD, ptr(new), 0])
}

fn cd(args: &[String]) -> Report {
    let dir = arg(args, 0, "DIR");
    match std::env::set_current_dir(dir) {
        Ok(()) => escaped(format!("chdir({dir})")),
        Err(e) => io_err(&format!("chdir({dir})"), e),
    }
}

/// The creating call of the races, on a NUL-terminated path at `p`; the fd, if
/// any, is closed. (ret, errno).
fn race_call(call: &str, p: *const libc::c_char) -> (libc::c_long, i32) {
    let p = p as libc::c_long;
    let (r, e) = match (call, legacy_nr(call)) {
        ("open", Some(nr)) => sys(nr, [p, CREATE_FLAGS as _, 0o644, 0, 0]),
        ("open", None) => sys(libc::SYS_openat, [AT_FDCWD, p, CREATE_FLAGS as _, 0o644, 0]),
        (_, Some(nr)) => sys(nr, [p, 0o755, 0, 0, 0]),
        (_, None) => sys(libc::SYS_mkdirat, [AT_FDCWD, p, 0o755, 0, 0]),
    };
    if r >= 0 && call == "open" {
        close_fd(r);
    }
    (r, e)
}

fn race_args(args: &[String], from: usize) -> (u64, Duration) {
    let iters = args
        .get(from)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let secs = args.get(from + 1).and_then(|s| s.parse().ok()).unwrap_or(5);
    (iters, Duration::from_secs(secs))
}

fn race_check_call(call: &str) {
    if call != "open" && call != "mkdir" {
        eprintln!("warden-escape-probe: the races take open or mkdir, not {call:?}");
        std::process::exit(2)
    }
}

/// Removes what a race created under a harmless name, so the next call creates
/// again.
fn race_cleanup(call: &str, path: &str) {
    let _ = if call == "open" {
        std::fs::remove_file(path)
    } else {
        std::fs::remove_dir(path)
    };
}

/// What one racing loop saw.
#[derive(Default)]
struct RaceTally {
    calls: u64,
    succeeded: u64,
    errors: std::collections::BTreeMap<&'static str, u64>,
    won: bool,
}

impl RaceTally {
    fn report(self, what: String, target: &str, other: (&'static str, u64)) -> Report {
        let won = self.won || exists(target);
        let counts = format!(
            "{} calls, {} succeeded, errors {:?}, {} {}",
            self.calls, self.succeeded, self.errors, other.1, other.0
        );
        let mut rep = if won {
            escaped(format!("{what}: {target} was created ({counts})"))
        } else {
            let common = self.errors.iter().max_by_key(|(_, n)| **n).map(|(e, _)| *e);
            let errno = common.and_then(|name| {
                [
                    libc::EROFS,
                    libc::EACCES,
                    libc::EPERM,
                    libc::EXDEV,
                    libc::EEXIST,
                    libc::ENOENT,
                ]
                .into_iter()
                .find(|&e| errno_name(e) == name)
            });
            blocked(errno, format!("{what}: {target} never appeared ({counts})"))
        };
        rep.extra.push(("calls", json!(self.calls)));
        rep.extra.push(("succeeded", json!(self.succeeded)));
        rep.extra.push(("errors", json!(self.errors)));
        rep.extra.push((other.0, json!(other.1)));
        rep
    }
}

/// `race CALL SAFE TARGET`: the classic TOCTOU of a seccomp supervisor. One
/// thread flips the bytes where SAFE and TARGET differ in a shared buffer (one
/// byte for names like `xbashrc`/`.bashrc`: every read sees one or the other);
/// this one makes CALL on that buffer until TARGET exists, ITERS calls or SECS
/// seconds. A supervisor that reads SAFE and lets the kernel read the buffer
/// again loses.
fn race(args: &[String]) -> Report {
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
    use std::sync::Arc;
    let call = arg(args, 0, "CALL");
    race_check_call(call);
    let safe = arg(args, 1, "SAFE").as_bytes().to_vec();
    let target = arg(args, 2, "TARGET");
    let (iters, limit) = race_args(args, 3);
    if safe.len() != target.len() || safe.len() >= 4095 {
        eprintln!("warden-escape-probe: SAFE and TARGET must have the same length (< 4095)");
        std::process::exit(2)
    }
    let diffs: Vec<(usize, u8, u8)> = safe
        .iter()
        .zip(target.as_bytes())
        .enumerate()
        .filter(|(_, (s, t))| s != t)
        .map(|(i, (&s, &t))| (i, s, t))
        .collect();
    // Zero-filled: the path is NUL-terminated whichever name it holds.
    let buf: Arc<Vec<AtomicU8>> = Arc::new((0..4096).map(|_| AtomicU8::new(0)).collect());
    for (i, &b) in safe.iter().enumerate() {
        buf[i].store(b, Ordering::Relaxed);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(AtomicU64::new(0));
    let flipper = {
        let (buf, stop, flips) = (Arc::clone(&buf), Arc::clone(&stop), Arc::clone(&flips));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for &(i, _, t) in &diffs {
                    buf[i].store(t, Ordering::Relaxed);
                }
                std::hint::spin_loop();
                for &(i, s, _) in &diffs {
                    buf[i].store(s, Ordering::Relaxed);
                }
                flips.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let safe = String::from_utf8_lossy(&safe).into_owned();
    // AtomicU8 has the layout of u8: the kernel reads the bytes as they are.
    let p = buf.as_ptr() as *const libc::c_char;
    let mut tally = RaceTally::default();
    let start = Instant::now();
    while tally.calls < iters && start.elapsed() < limit {
        tally.calls += 1;
        let (r, e) = race_call(call, p);
        if r >= 0 {
            tally.succeeded += 1;
            if exists(target) {
                tally.won = true;
                break;
            }
            race_cleanup(call, &safe);
        } else {
            *tally.errors.entry(errno_name(e)).or_default() += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = flipper.join();
    race_cleanup(call, &safe);
    let what = format!("{call} on a buffer flipping between {safe} and {target}");
    tally.report(what, target, ("flips", flips.load(Ordering::Relaxed)))
}

/// `race-swap CALL PATH TARGET A B`: the same race on the file system instead of
/// the buffer: one thread swaps A and B (a directory and a symlink to `.`) with
/// renameat2(RENAME_EXCHANGE), this one makes CALL on PATH (`A/.bashrc`), which
/// is TARGET whenever A is the symlink. A supervisor that resolves PATH, checks,
/// then lets the kernel (or itself) resolve it again loses.
fn race_swap(args: &[String]) -> Report {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let call = arg(args, 0, "CALL");
    race_check_call(call);
    let path = arg(args, 1, "PATH");
    let target = arg(args, 2, "TARGET");
    let (a, b) = (cstr(arg(args, 3, "A")), cstr(arg(args, 4, "B")));
    let (iters, limit) = race_args(args, 5);
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps) = (Arc::clone(&stop), Arc::clone(&swaps));
        std::thread::spawn(move || {
            let flags = libc::RENAME_EXCHANGE as libc::c_long;
            while !stop.load(Ordering::Relaxed) {
                let (r, _) = sys(
                    libc::SYS_renameat2,
                    [AT_FDCWD, ptr(&a), AT_FDCWD, ptr(&b), flags],
                );
                if r == 0 {
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let cp = cstr(path);
    let mut tally = RaceTally::default();
    let start = Instant::now();
    while tally.calls < iters && start.elapsed() < limit {
        tally.calls += 1;
        let (r, e) = race_call(call, cp.as_ptr());
        if r >= 0 {
            tally.succeeded += 1;
            if exists(target) {
                tally.won = true;
                break;
            }
            race_cleanup(call, path);
        } else {
            *tally.errors.entry(errno_name(e)).or_default() += 1;
            // A directory made through A while it was the directory, and not
            // removed because A had been swapped by then: remove it now, so
            // the next calls create again instead of failing with EEXIST.
            if e == libc::EEXIST && !exists(target) {
                race_cleanup(call, path);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = swapper.join();
    let what = format!("{call}({path}) while swapping A and B");
    tally.report(what, target, ("swaps", swaps.load(Ordering::Relaxed)))
}

/// One step of `ordinary`: Ok(note) or Err(what went wrong).
type Step = Result<String, String>;

/// A step of `ordinary`, given the directory.
type StepFn = fn(&str) -> Step;

fn fail(what: &str, e: i32) -> String {
    format!("{what}: {}", describe(e))
}

fn io_fail(what: &str, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

/// open(2) through libc (openat), as a program would: an owned fd.
fn open_owned(
    path: &str,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> Result<std::os::fd::OwnedFd, i32> {
    use std::os::fd::FromRawFd;
    let c = cstr(path);
    // SAFETY: NUL-terminated path alive for the call.
    let fd = unsafe { libc::open(c.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a new fd, owned by nothing else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Creates `path` with `flags | O_CREAT` and writes `data` through the fd.
fn create_with(path: &str, flags: libc::c_int, data: &str) -> Result<std::fs::File, String> {
    use std::io::Write;
    let fd = open_owned(path, flags | libc::O_CREAT, 0o644)
        .map_err(|e| fail(&format!("open({path}, O_CREAT)"), e))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(data.as_bytes())
        .map_err(|e| io_fail(&format!("write {path}"), e))?;
    Ok(file)
}

fn content_is(path: &str, want: &str) -> Result<(), String> {
    match std::fs::read_to_string(path) {
        Ok(s) if s == want => Ok(()),
        Ok(s) => Err(format!("{path} holds {s:?}, not {want:?}")),
        Err(e) => Err(io_fail(&format!("read {path}"), e)),
    }
}

/// The call must fail with `want`.
fn fails_with(what: &str, (r, e): (libc::c_long, i32), want: i32) -> Result<(), String> {
    if r >= 0 {
        Err(format!("{what} succeeded, expected {}", errno_name(want)))
    } else if e != want {
        Err(format!(
            "{what}: {}, expected {}",
            describe(e),
            errno_name(want)
        ))
    } else {
        Ok(())
    }
}

fn ok_call(what: &str, (r, e): (libc::c_long, i32)) -> Result<libc::c_long, String> {
    if r < 0 {
        Err(fail(what, e))
    } else {
        Ok(r)
    }
}

fn mode_of(path: &str) -> Result<u32, String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .map_err(|e| io_fail(&format!("lstat {path}"), e))
}

fn expect_mode(path: &str, want: u32) -> Result<(), String> {
    match mode_of(path)? {
        m if m == want => Ok(()),
        m => Err(format!("{path} has mode {m:o}, not {want:o}")),
    }
}

fn fd_flags(fd: &std::os::fd::OwnedFd, cmd: libc::c_int) -> libc::c_int {
    use std::os::fd::AsRawFd;
    // SAFETY: F_GETFD/F_GETFL on an fd this process owns.
    unsafe { libc::fcntl(fd.as_raw_fd(), cmd) }
}

fn step_excl(d: &str) -> Step {
    let p = format!("{d}/excl.txt");
    create_with(
        &p,
        libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
        "excl\n",
    )?;
    content_is(&p, "excl\n")?;
    fails_with(
        "O_CREAT|O_EXCL again",
        sys_open(
            &cstr(&p),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o644,
        ),
        libc::EEXIST,
    )?;
    Ok("created once, EEXIST the second time".into())
}

fn step_trunc(d: &str) -> Step {
    let p = format!("{d}/trunc.txt");
    create_with(&p, libc::O_TRUNC | libc::O_WRONLY, "first version\n")?;
    create_with(&p, libc::O_TRUNC | libc::O_WRONLY, "second\n")?;
    content_is(&p, "second\n")?;
    Ok("created, then truncated and rewritten".into())
}

fn step_creat(d: &str) -> Step {
    let p = format!("{d}/creat.txt");
    let c = cstr(&p);
    let (r, e) = match legacy_nr("creat") {
        Some(nr) => sys(nr, [ptr(&c), 0o644, 0, 0, 0]),
        None => sys(
            libc::SYS_openat,
            [
                AT_FDCWD,
                ptr(&c),
                (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as _,
                0o644,
                0,
            ],
        ),
    };
    let fd = ok_call(&format!("creat({p})"), (r, e))?;
    write_and_close(fd, b"creat\n").map_err(|e| fail("write", e))?;
    content_is(&p, "creat\n")?;
    Ok("the old creat call".into())
}

/// O_CREAT on an existing file opens it: no truncation, the fd reads it.
fn step_keep(d: &str) -> Step {
    use std::io::Read;
    let p = format!("{d}/keep.txt");
    create_with(&p, libc::O_WRONLY, "kept\n")?;
    let fd = open_owned(&p, libc::O_CREAT | libc::O_RDWR | libc::O_CLOEXEC, 0o600)
        .map_err(|e| fail("open(existing, O_CREAT|O_RDWR)", e))?;
    let mut s = String::new();
    std::fs::File::from(fd)
        .read_to_string(&mut s)
        .map_err(|e| io_fail("read through the fd", e))?;
    if s != "kept\n" {
        return Err(format!("read {s:?} through the fd"));
    }
    expect_mode(&p, 0o644)?;
    Ok("existing file opened as it was (content and mode)".into())
}

fn step_append(d: &str) -> Step {
    let p = format!("{d}/append.txt");
    let file = create_with(&p, libc::O_WRONLY | libc::O_APPEND, "a")?;
    let fl = fd_flags(&file.into(), libc::F_GETFL);
    if fl & libc::O_APPEND == 0 || fl & libc::O_ACCMODE != libc::O_WRONLY {
        return Err(format!("F_GETFL is {fl:#o}: not O_WRONLY|O_APPEND"));
    }
    create_with(&p, libc::O_WRONLY | libc::O_APPEND, "b")?;
    content_is(&p, "ab")?;
    Ok("O_APPEND kept on the fd".into())
}

/// The fd returned is the file created: same inode, readable back through it.
fn step_fd_is_the_file(d: &str) -> Step {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let p = format!("{d}/rdwr.txt");
    let file = create_with(&p, libc::O_RDWR | libc::O_CLOEXEC, "rdwr\n")?;
    let mut back = [0u8; 5];
    file.read_exact_at(&mut back, 0)
        .map_err(|e| io_fail("pread", e))?;
    let (a, b) = (
        file.metadata().map_err(|e| io_fail("fstat", e))?,
        std::fs::metadata(&p).map_err(|e| io_fail("stat", e))?,
    );
    if &back != b"rdwr\n" || (a.dev(), a.ino()) != (b.dev(), b.ino()) {
        return Err(format!(
            "the fd is another file ({back:?}, ino {} vs {})",
            a.ino(),
            b.ino()
        ));
    }
    Ok("O_RDWR fd is the new file".into())
}

fn step_mkstemp(d: &str) -> Step {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    let mut template = format!("{d}/tmp.XXXXXX\0").into_bytes();
    // SAFETY: a NUL-terminated, writable template that mkstemp fills in.
    let fd = unsafe { libc::mkstemp(template.as_mut_ptr().cast()) };
    if fd < 0 {
        return Err(fail("mkstemp", errno()));
    }
    // SAFETY: a new fd, owned by nothing else.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(b"mkstemp\n")
        .map_err(|e| io_fail("write", e))?;
    template.pop();
    let name = String::from_utf8_lossy(&template).into_owned();
    content_is(&name, "mkstemp\n")?;
    expect_mode(&name, 0o600)?;
    Ok(name)
}

fn step_mkdir_p(d: &str) -> Step {
    let deep = format!("{d}/a/b/c");
    std::fs::create_dir_all(&deep).map_err(|e| io_fail(&format!("mkdir -p {deep}"), e))?;
    create_with(&format!("{deep}/deep.txt"), libc::O_WRONLY, "deep\n")?;
    Ok("a/b/c/deep.txt".into())
}

fn step_symlink(d: &str) -> Step {
    let link = format!("{d}/link");
    std::os::unix::fs::symlink("excl.txt", &link)
        .map_err(|e| io_fail(&format!("symlink excl.txt {link}"), e))?;
    let (ct, cl) = (cstr("trunc.txt"), cstr(&format!("{d}/link2")));
    match legacy_nr("symlink") {
        Some(nr) => ok_call("symlink (old call)", sys(nr, [ptr(&ct), ptr(&cl), 0, 0, 0]))?,
        None => 0,
    };
    match std::fs::read_link(&link) {
        Ok(t) if t == std::path::Path::new("excl.txt") => {}
        other => return Err(format!("readlink {link}: {other:?}")),
    }
    content_is(&link, "excl\n")?;
    Ok("link -> excl.txt".into())
}

fn step_fifo(d: &str) -> Step {
    use std::os::unix::fs::FileTypeExt;
    let p = format!("{d}/fifo");
    let c = cstr(&p);
    // SAFETY: NUL-terminated path alive for the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o644) } != 0 {
        return Err(fail("mkfifo", errno()));
    }
    let p2 = format!("{d}/fifo2");
    let c2 = cstr(&p2);
    let fifo = (libc::S_IFIFO | 0o644) as libc::c_long;
    match legacy_nr("mknod") {
        Some(nr) => ok_call("mknod (old call)", sys(nr, [ptr(&c2), fifo, 0, 0, 0]))?,
        None => ok_call(
            "mknodat",
            sys(libc::SYS_mknodat, [AT_FDCWD, ptr(&c2), fifo, 0, 0]),
        )?,
    };
    for p in [&p, &p2] {
        let ft = std::fs::symlink_metadata(p)
            .map_err(|e| io_fail(p, e))?
            .file_type();
        if !ft.is_fifo() {
            return Err(format!("{p} is not a FIFO: {ft:?}"));
        }
    }
    Ok("fifo, fifo2".into())
}

fn step_hardlink(d: &str) -> Step {
    use std::os::unix::fs::MetadataExt;
    let src = format!("{d}/excl.txt");
    std::fs::hard_link(&src, format!("{d}/hard.txt")).map_err(|e| io_fail("link", e))?;
    let (co, cn) = (cstr(&src), cstr(&format!("{d}/hard2.txt")));
    match legacy_nr("link") {
        Some(nr) => ok_call("link (old call)", sys(nr, [ptr(&co), ptr(&cn), 0, 0, 0]))?,
        None => ok_call(
            "linkat",
            sys(
                libc::SYS_linkat,
                [AT_FDCWD, ptr(&co), AT_FDCWD, ptr(&cn), 0],
            ),
        )?,
    };
    let n = std::fs::metadata(&src)
        .map_err(|e| io_fail("stat", e))?
        .nlink();
    if n != 3 {
        return Err(format!("{src} has {n} links, not 3"));
    }
    content_is(&format!("{d}/hard2.txt"), "excl\n")?;
    Ok("hard.txt, hard2.txt".into())
}

fn rename_ok(from: &str, to: &str) -> Result<(), String> {
    std::fs::rename(from, to).map_err(|e| io_fail(&format!("rename {from} {to}"), e))
}

fn step_rename_file(d: &str) -> Step {
    let (a, b) = (format!("{d}/r1.txt"), format!("{d}/r2.txt"));
    create_with(&a, libc::O_WRONLY, "renamed\n")?;
    rename_ok(&a, &b)?;
    if exists(&a) {
        return Err(format!("{a} is still there"));
    }
    content_is(&b, "renamed\n")?;
    // And through renameat.
    let c = format!("{d}/r3.txt");
    ok_call("renameat", renameat(&cstr(&b), &cstr(&c)))?;
    content_is(&c, "renamed\n")?;
    Ok("r1.txt -> r2.txt -> r3.txt".into())
}

fn step_rename_dir(d: &str) -> Step {
    let (a, b) = (format!("{d}/rd1"), format!("{d}/rd2"));
    std::fs::create_dir(&a).map_err(|e| io_fail("mkdir", e))?;
    create_with(&format!("{a}/f.txt"), libc::O_WRONLY, "in a dir\n")?;
    rename_ok(&a, &b)?;
    content_is(&format!("{b}/f.txt"), "in a dir\n")?;
    Ok("rd1 -> rd2".into())
}

fn step_rename_across(d: &str) -> Step {
    let (x1, x2) = (format!("{d}/x1"), format!("{d}/x2"));
    std::fs::create_dir_all(format!("{x1}/sub")).map_err(|e| io_fail("mkdir", e))?;
    std::fs::create_dir(&x2).map_err(|e| io_fail("mkdir", e))?;
    create_with(&format!("{x1}/f.txt"), libc::O_WRONLY, "moved\n")?;
    create_with(&format!("{x1}/sub/g.txt"), libc::O_WRONLY, "moved too\n")?;
    rename_ok(&format!("{x1}/f.txt"), &format!("{x2}/f.txt"))?;
    rename_ok(&format!("{x1}/sub"), &format!("{x2}/sub"))?;
    content_is(&format!("{x2}/f.txt"), "moved\n")?;
    content_is(&format!("{x2}/sub/g.txt"), "moved too\n")?;
    Ok("x1/f.txt -> x2/f.txt, x1/sub -> x2/sub".into())
}

/// An editor's save: write a temporary file, rename it over the old one.
fn step_atomic_save(d: &str) -> Step {
    let (doc, tmp) = (format!("{d}/doc.txt"), format!("{d}/doc.txt.tmp"));
    create_with(&doc, libc::O_WRONLY | libc::O_TRUNC, "v1\n")?;
    create_with(&tmp, libc::O_WRONLY | libc::O_TRUNC, "v2\n")?;
    rename_ok(&tmp, &doc)?;
    content_is(&doc, "v2\n")?;
    if exists(&tmp) {
        return Err(format!("{tmp} is still there"));
    }
    Ok("doc.txt.tmp renamed over doc.txt".into())
}

fn step_renameat2(d: &str) -> Step {
    let (n1, n2, n3) = (format!("{d}/n1"), format!("{d}/n2"), format!("{d}/n3"));
    create_with(&n1, libc::O_WRONLY, "one\n")?;
    create_with(&n3, libc::O_WRONLY, "three\n")?;
    let r2 = |a: &str, b: &str, f: libc::c_uint| {
        sys(
            libc::SYS_renameat2,
            [
                AT_FDCWD,
                ptr(&cstr(a)),
                AT_FDCWD,
                ptr(&cstr(b)),
                f as libc::c_long,
            ],
        )
    };
    ok_call(
        "renameat2(n1, n2, NOREPLACE)",
        r2(&n1, &n2, libc::RENAME_NOREPLACE),
    )?;
    fails_with(
        "renameat2(n2, n3, NOREPLACE)",
        r2(&n2, &n3, libc::RENAME_NOREPLACE),
        libc::EEXIST,
    )?;
    ok_call(
        "renameat2(n2, n3, EXCHANGE)",
        r2(&n2, &n3, libc::RENAME_EXCHANGE),
    )?;
    content_is(&n2, "three\n")?;
    content_is(&n3, "one\n")?;
    Ok("NOREPLACE, EEXIST, EXCHANGE".into())
}

/// An unnamed file (O_TMPFILE), written, then given a name through
/// /proc/self/fd: how careful programs publish a complete file.
fn step_tmpfile_linkat(d: &str) -> Step {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let fd = match open_owned(d, libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC, 0o644) {
        Ok(fd) => fd,
        Err(e) if e == libc::EOPNOTSUPP || e == libc::EISDIR => {
            return Ok(format!(
                "skipped: no O_TMPFILE on this file system ({})",
                errno_name(e)
            ))
        }
        Err(e) => return Err(fail("open(O_TMPFILE)", e)),
    };
    let proc_path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let mut file = std::fs::File::from(fd);
    file.write_all(b"tmpfile\n")
        .map_err(|e| io_fail("write", e))?;
    let name = format!("{d}/tmpfile.txt");
    ok_call(
        "linkat(/proc/self/fd/N, AT_SYMLINK_FOLLOW)",
        sys(
            libc::SYS_linkat,
            [
                AT_FDCWD,
                ptr(&cstr(&proc_path)),
                AT_FDCWD,
                ptr(&cstr(&name)),
                libc::AT_SYMLINK_FOLLOW as libc::c_long,
            ],
        ),
    )?;
    content_is(&name, "tmpfile\n")?;
    Ok("tmpfile.txt".into())
}

fn step_unix_bind(d: &str) -> Step {
    use std::io::{Read, Write};
    let p = format!("{d}/sock");
    if p.len() >= 108 {
        return Ok(format!("skipped: {p} is too long for sun_path"));
    }
    let listener =
        std::os::unix::net::UnixListener::bind(&p).map_err(|e| io_fail(&format!("bind {p}"), e))?;
    let mut client =
        std::os::unix::net::UnixStream::connect(&p).map_err(|e| io_fail("connect", e))?;
    let (mut server, _) = listener.accept().map_err(|e| io_fail("accept", e))?;
    client.write_all(b"hi").map_err(|e| io_fail("send", e))?;
    let mut got = [0u8; 2];
    server
        .read_exact(&mut got)
        .map_err(|e| io_fail("recv", e))?;
    Ok("bound, connected, exchanged".into())
}

fn step_relative(d: &str) -> Step {
    let before = std::env::current_dir().map_err(|e| io_fail("getcwd", e))?;
    std::env::set_current_dir(d).map_err(|e| io_fail("chdir", e))?;
    let res = (|| {
        create_with("rel.txt", libc::O_WRONLY, "relative\n")?;
        ok_call("mkdir(reldir)", sys_mkdir(&cstr("reldir"), 0o755))?;
        create_with("reldir/../reldir/inner.txt", libc::O_WRONLY, "inner\n")?;
        std::os::unix::fs::symlink("rel.txt", "rellink").map_err(|e| io_fail("symlink", e))?;
        rename_ok("rellink", "reldir/rellink")?;
        Ok::<(), String>(())
    })();
    std::env::set_current_dir(before).map_err(|e| io_fail("chdir back", e))?;
    res?;
    content_is(&format!("{d}/reldir/inner.txt"), "inner\n")?;
    Ok("rel.txt, reldir/, reldir/inner.txt, reldir/rellink".into())
}

fn step_at_calls(d: &str) -> Step {
    let dirfd = match dir_fd(d) {
        Ok(fd) => fd,
        Err(rep) => return Err(rep.detail),
    };
    let res = (|| {
        let n = |s: &str| cstr(s);
        let fd = ok_call(
            "openat(at.txt)",
            sys(
                libc::SYS_openat,
                [dirfd, ptr(&n("at.txt")), CREATE_FLAGS as _, 0o644, 0],
            ),
        )?;
        write_and_close(fd, b"at\n").map_err(|e| fail("write", e))?;
        let fd = ok_call(
            "openat2(at2.txt)",
            sys_openat2(dirfd, &n("at2.txt"), CREATE_FLAGS, 0),
        )?;
        write_and_close(fd, b"at2\n").map_err(|e| fail("write", e))?;
        ok_call(
            "mkdirat(atdir)",
            sys(libc::SYS_mkdirat, [dirfd, ptr(&n("atdir")), 0o755, 0, 0]),
        )?;
        ok_call(
            "mknodat(atfifo)",
            sys(
                libc::SYS_mknodat,
                [dirfd, ptr(&n("atfifo")), (libc::S_IFIFO | 0o644) as _, 0, 0],
            ),
        )?;
        ok_call(
            "symlinkat(at.txt, atlink)",
            sys(
                libc::SYS_symlinkat,
                [ptr(&n("at.txt")), dirfd, ptr(&n("atlink")), 0, 0],
            ),
        )?;
        ok_call(
            "linkat(at.txt, athard)",
            sys(
                libc::SYS_linkat,
                [dirfd, ptr(&n("at.txt")), dirfd, ptr(&n("athard")), 0],
            ),
        )?;
        ok_call(
            "renameat2(athard, athard2)",
            sys(
                libc::SYS_renameat2,
                [dirfd, ptr(&n("athard")), dirfd, ptr(&n("athard2")), 0],
            ),
        )?;
        Ok::<(), String>(())
    })();
    close_fd(dirfd);
    res?;
    content_is(&format!("{d}/atlink"), "at\n")?;
    content_is(&format!("{d}/athard2"), "at\n")?;
    content_is(&format!("{d}/at2.txt"), "at2\n")?;
    Ok("openat, openat2, mkdirat, mknodat, symlinkat, linkat, renameat2 on a dirfd".into())
}

/// openat2 with resolve flags, as sandbox-aware programs use it to stay
/// beneath a directory.
fn step_openat2_resolve(d: &str) -> Step {
    let dirfd = match dir_fd(d) {
        Ok(fd) => fd,
        Err(rep) => return Err(rep.detail),
    };
    let res = ok_call(
        "openat2(beneath.txt, RESOLVE_BENEATH)",
        sys_openat2(
            dirfd,
            &cstr("beneath.txt"),
            CREATE_FLAGS,
            libc::RESOLVE_BENEATH,
        ),
    )
    .and_then(|fd| write_and_close(fd, b"beneath\n").map_err(|e| fail("write", e)));
    close_fd(dirfd);
    res?;
    content_is(&format!("{d}/beneath.txt"), "beneath\n")?;
    Ok("beneath.txt".into())
}

fn set_umask(mask: libc::mode_t) -> libc::mode_t {
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(mask) }
}

/// The caller's umask shapes the mode, whoever creates the file.
fn step_umask(d: &str) -> Step {
    let old = set_umask(0o022);
    let res = (|| {
        let open = |p: &str, mode: libc::mode_t| {
            open_owned(p, libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, mode)
                .map(drop)
                .map_err(|e| fail(&format!("open({p})"), e))
        };
        let mkdir = |p: &str| ok_call(&format!("mkdir({p})"), sys_mkdir(&cstr(p), 0o777));
        open(&format!("{d}/mode644"), 0o666)?;
        mkdir(&format!("{d}/mode755"))?;
        open(&format!("{d}/mode400"), 0o400)?;
        set_umask(0o077);
        open(&format!("{d}/mode600"), 0o666)?;
        mkdir(&format!("{d}/mode700"))?;
        let fifo = cstr(&format!("{d}/fifo600"));
        // SAFETY: NUL-terminated path alive for the call.
        if unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) } != 0 {
            return Err(fail("mkfifo(fifo600)", errno()));
        }
        for (name, want) in [
            ("mode644", 0o644),
            ("mode755", 0o755),
            ("mode400", 0o400),
            ("mode600", 0o600),
            ("mode700", 0o700),
            ("fifo600", 0o600),
        ] {
            expect_mode(&format!("{d}/{name}"), want)?;
        }
        Ok(())
    })();
    set_umask(old);
    res?;
    Ok("umask 022: 0644 and 0755; umask 077: 0600 and 0700".into())
}

fn step_cloexec(d: &str) -> Step {
    let with = open_owned(
        &format!("{d}/cx1"),
        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
        0o644,
    )
    .map_err(|e| fail("open(cx1, O_CLOEXEC)", e))?;
    let without = open_owned(&format!("{d}/cx2"), libc::O_CREAT | libc::O_WRONLY, 0o644)
        .map_err(|e| fail("open(cx2)", e))?;
    let (a, b) = (
        fd_flags(&with, libc::F_GETFD),
        fd_flags(&without, libc::F_GETFD),
    );
    if a & libc::FD_CLOEXEC == 0 || b & libc::FD_CLOEXEC != 0 {
        return Err(format!("F_GETFD: {a:#x} with O_CLOEXEC, {b:#x} without"));
    }
    Ok("FD_CLOEXEC exactly when asked".into())
}

/// New files belong to the caller (as the sandbox maps it).
fn step_owner(d: &str) -> Step {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    for name in ["excl.txt", "a", "fifo", "link", "mode600"] {
        let p = format!("{d}/{name}");
        let m = std::fs::symlink_metadata(&p).map_err(|e| io_fail(&p, e))?;
        if (m.uid(), m.gid()) != (uid, gid) {
            return Err(format!(
                "{p} belongs to {}:{}, not {uid}:{gid}",
                m.uid(),
                m.gid()
            ));
        }
    }
    Ok(format!("{uid}:{gid}"))
}

/// The errors a program relies on are the kernel's as before.
fn step_errors(d: &str) -> Step {
    let c = |s: String| cstr(&s);
    fails_with(
        "open(missing/x, O_CREAT)",
        sys_open(
            &c(format!("{d}/missing/x")),
            libc::O_CREAT | libc::O_WRONLY,
            0o644,
        ),
        libc::ENOENT,
    )?;
    fails_with(
        "open(excl.txt/x, O_CREAT)",
        sys_open(
            &c(format!("{d}/excl.txt/x")),
            libc::O_CREAT | libc::O_WRONLY,
            0o644,
        ),
        libc::ENOTDIR,
    )?;
    fails_with(
        "mkdir(a)",
        sys_mkdir(&c(format!("{d}/a")), 0o755),
        libc::EEXIST,
    )?;
    fails_with(
        "mkdir(excl.txt)",
        sys_mkdir(&c(format!("{d}/excl.txt")), 0o755),
        libc::EEXIST,
    )?;
    fails_with(
        "symlinkat(x, excl.txt)",
        sys(
            libc::SYS_symlinkat,
            [
                ptr(&cstr("x")),
                AT_FDCWD,
                ptr(&c(format!("{d}/excl.txt"))),
                0,
                0,
            ],
        ),
        libc::EEXIST,
    )?;
    fails_with(
        "linkat(excl.txt, trunc.txt)",
        sys(
            libc::SYS_linkat,
            [
                AT_FDCWD,
                ptr(&c(format!("{d}/excl.txt"))),
                AT_FDCWD,
                ptr(&c(format!("{d}/trunc.txt"))),
                0,
            ],
        ),
        libc::EEXIST,
    )?;
    fails_with(
        "renameat(nothing, zz)",
        renameat(&c(format!("{d}/nothing")), &c(format!("{d}/zz"))),
        libc::ENOENT,
    )?;
    // A trailing slash: never a file of that name.
    let slash = format!("{d}/slash");
    let r = fails_with(
        "open(slash/, O_CREAT)",
        sys_open(
            &c(format!("{slash}/")),
            libc::O_CREAT | libc::O_WRONLY,
            0o644,
        ),
        libc::EISDIR,
    );
    if let Ok(m) = std::fs::symlink_metadata(&slash) {
        return Err(format!(
            "open(slash/, O_CREAT) made {slash} ({:?}); {r:?}",
            m.file_type()
        ));
    }
    r?;
    Ok("ENOENT, ENOTDIR, EEXIST, EISDIR as the kernel says".into())
}

/// Names close to the protected ones, which are not in the table: the match is
/// by exact name.
fn step_neighbours(d: &str) -> Step {
    create_with(&format!("{d}/.gitignore"), libc::O_WRONLY, "target/\n")?;
    std::fs::create_dir_all(format!("{d}/.github/workflows"))
        .map_err(|e| io_fail("mkdir -p .github/workflows", e))?;
    create_with(
        &format!("{d}/.github/workflows/ci.yml"),
        libc::O_WRONLY,
        "on: push\n",
    )?;
    create_with(&format!("{d}/.bashrc.orig"), libc::O_WRONLY, "# a backup\n")?;
    create_with(&format!("{d}/git"), libc::O_WRONLY, "not .git\n")?;
    ok_call(
        "mkdir(.gitx)",
        sys_mkdir(&cstr(&format!("{d}/.gitx")), 0o755),
    )?;
    Ok(".gitignore, .github/workflows/ci.yml, .bashrc.orig, git, .gitx/".into())
}

/// `ordinary DIR`: the control of the `plant` attacks. Every ordinary way a
/// server creates files, in DIR (made if missing); each step checks the result
/// from inside. Escaped (it all worked) unless a step failed; `steps` has every
/// step's note or error. Names are fixed, so the test checks them on the host.
fn ordinary(args: &[String]) -> Report {
    let d = arg(args, 0, "DIR");
    if let Err(e) = std::fs::create_dir_all(d) {
        return io_err(&format!("mkdir -p {d}"), e);
    }
    let steps: &[(&str, StepFn)] = &[
        ("excl", step_excl),
        ("trunc", step_trunc),
        ("creat", step_creat),
        ("keep", step_keep),
        ("append", step_append),
        ("fd-is-the-file", step_fd_is_the_file),
        ("mkstemp", step_mkstemp),
        ("mkdir-p", step_mkdir_p),
        ("symlink", step_symlink),
        ("fifo", step_fifo),
        ("hardlink", step_hardlink),
        ("rename-file", step_rename_file),
        ("rename-dir", step_rename_dir),
        ("rename-across", step_rename_across),
        ("atomic-save", step_atomic_save),
        ("renameat2", step_renameat2),
        ("tmpfile-linkat", step_tmpfile_linkat),
        ("unix-bind", step_unix_bind),
        ("relative", step_relative),
        ("at-calls", step_at_calls),
        ("openat2-resolve", step_openat2_resolve),
        ("umask", step_umask),
        ("cloexec", step_cloexec),
        ("owner", step_owner),
        ("errors", step_errors),
        ("neighbours", step_neighbours),
    ];
    let mut results = serde_json::Map::new();
    let mut failed = Vec::new();
    for (name, step) in steps {
        let r = step(d);
        let text = match &r {
            Ok(note) => format!("ok: {note}"),
            Err(e) => {
                failed.push(format!("{name}: {e}"));
                format!("FAILED: {e}")
            }
        };
        results.insert((*name).to_string(), json!(text));
    }
    let mut rep = if failed.is_empty() {
        escaped(format!("all {} steps worked in {d}", steps.len()))
    } else {
        blocked(None, format!("in {d}: {}", failed.join("; ")))
    };
    rep.extra.push(("steps", Value::Object(results)));
    rep
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() || argv[0] == "--list" || argv[0] == "--help" {
        for (name, args, what) in ATTACKS {
            println!("{name:22} {args:14} {what}");
        }
        return;
    }
    // `A ARGS :: B ARGS`: several steps in one process (one sandbox), in order,
    // one line each.
    for step in argv.split(|a| a == "::") {
        run(step);
    }
}

/// Runs one attack and prints its line.
fn run(step: &[String]) {
    let Some((attack, args)) = step.split_first() else {
        eprintln!("warden-escape-probe: an empty step (`::` twice?)");
        std::process::exit(2)
    };
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
        "numa" => numa(args),
        "setid" => setid(args),
        "shm-fill" => shm_fill(args),
        "memfd-fill" => memfd_fill(args),
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
        "plant" => plant(args),
        "cd" => cd(args),
        "race" => race(args),
        "race-swap" => race_swap(args),
        "ordinary" => ordinary(args),
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
    for (key, value) in rep.extra {
        line[key] = value;
    }
    println!("{line}");
}
