//! The server's seccomp-BPF filter: default allow, with a deny list of the
//! kernel-attack and escape surface (DESIGN.md §5 "Hardening").
//!
//! The rules are data: [`RULES`] is a table of (syscall, action, optional argument
//! condition, reason), and [`program`] compiles it to classic BPF. Nothing here
//! runs in the server child; `Confinement::prepare` builds the program in PID 1 and
//! the child only hands it to `seccomp(2)`.
//!
//! Shape of the program:
//! 1. the audit arch must be the native one (x86_64 or aarch64): a syscall from a
//!    foreign ABI (i386 `int 0x80` on x86_64, AArch32 on aarch64) has other
//!    numbers and would bypass every rule below, so it kills the process;
//! 2. on x86_64, a syscall number with the x32 bit set is refused with `ENOSYS`
//!    (x32 numbers differ and would bypass the table too; the kernel reports them
//!    under `AUDIT_ARCH_X86_64`);
//! 3. one block per syscall in the table; the first rule whose condition holds
//!    decides; otherwise (and for every syscall not in the table) ALLOW.
//!
//! Refused calls return an errno, never kill (except the foreign ABI), so a server
//! fails loudly with "Operation not permitted" instead of dying mysteriously.
//!
//! Refusals that matter (escape and kernel-attack attempts) are
//! [`Action::Notify`]: compiled to `SECCOMP_RET_USER_NOTIF`, so the call stops
//! in the kernel until the sandbox's notifier ([`crate::supervise::notify`]) has queued an
//! audit event and answered with the rule's errno. The server sees the same
//! errno as with `SECCOMP_RET_ERRNO`; only the refused call pays the round
//! trip, allowed calls never reach the notifier. Without a listener (a kernel
//! without user notification), [`program`] compiles them to plain errno
//! returns. The rest stay plain errno returns: refusals that ordinary runtimes
//! hit on their own (`clone3` is probed by glibc on every thread creation,
//! socket families by interface enumeration) and calls that reach nothing
//! worth an audit line.
//!
//! Argument conditions compare only the low 32 bits of an argument. Every argument
//! inspected here is truncated to 32 bits by the kernel (`ioctl` cmd, `socket`
//! domain, type and protocol, `personality` are `int`/`unsigned int`; `clone`
//! takes `lower_32_bits(flags)`; the open flags are an `int`, and every mode
//! (`chmod`, `open`, `mknod`) is a `umode_t`) or makes the call fail with
//! `EINVAL` when high bits are set (`unshare`), so the filter sees exactly what
//! the kernel acts on: setting high bits cannot slip past a rule (the
//! CVE-2017-5226-style `TIOCSTI | 1 << 32` bypass of 64-bit comparisons).
//!
//! A syscall may be both refused on some arguments and watched ([`WATCHED`]:
//! `chmod` with a set-id bit is refused, every other `chmod` observed): its
//! block then falls through to the watched calls instead of allowing, and the
//! notifier looks for a refusing rule ([`rule_for`], on the same argument
//! snapshot the filter saw) before it treats a notification as observed.

use crate::control::Failure;

/// What a matching rule returns to the caller instead of running the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// `SECCOMP_RET_ERRNO`: the call fails with this errno.
    Errno(i32),
    /// `SECCOMP_RET_USER_NOTIF`: the notifier records the call, then makes it
    /// fail with this errno (plain `Errno` when there is no listener).
    Notify(i32),
}

/// A condition on the low 32 bits of one argument (see the module docs for why 32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArgCond {
    /// `(arg & mask) != 0`: any of these flag bits is set.
    AnyBit { arg: u8, mask: u32 },
    /// `arg == value`.
    Eq { arg: u8, value: u32 },
    /// `arg` is none of `values` (an allow list of argument values).
    NotIn { arg: u8, values: &'static [u32] },
    /// `arg & mask` is none of `values` (`socket`'s type without its
    /// `SOCK_NONBLOCK`/`SOCK_CLOEXEC` flags).
    MaskedNotIn {
        arg: u8,
        mask: u32,
        values: &'static [u32],
    },
    /// Every one of these conditions holds (none of them an `All`).
    All(&'static [ArgCond]),
}

/// Which filters a rule is compiled into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum When {
    Always,
    /// Only with write grants and without the creation guard ([`program`]'s
    /// `writes` and not `guard`): a refusal the guard makes unnecessary by
    /// performing the call itself (and that nothing needs without a write
    /// grant: the private tmpfs mounts are gone with the session).
    /// Always a plain errno (never notified), so the notifier never needs it.
    Unguarded,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rule {
    /// `SYS_<name>`, as spelled in libc.
    pub name: &'static str,
    pub nr: libc::c_long,
    pub action: Action,
    /// `None`: every call is refused.
    pub cond: Option<ArgCond>,
    pub when: When,
    /// One line: what the call reaches and why the server does not need it.
    /// Documentation kept as data (checked by the tests; for `wardenctl status`).
    #[allow(dead_code)]
    pub why: &'static str,
}

/// Syscall numbers: libc's, plus the few it does not have yet.
#[allow(non_upper_case_globals)]
mod nr {
    pub use libc::*;
    /// Linux 6.15; numbers from 424 on are the same on every architecture.
    pub const SYS_open_tree_attr: libc::c_long = 467;
}

const EPERM: Action = Action::Errno(libc::EPERM);
const NOTIFY_EPERM: Action = Action::Notify(libc::EPERM);
const ENOSYS: Action = Action::Errno(libc::ENOSYS);
const EAFNOSUPPORT: Action = Action::Errno(libc::EAFNOSUPPORT);
const EPROTONOSUPPORT: Action = Action::Errno(libc::EPROTONOSUPPORT);

/// Namespace flags `clone` accepts. `CLONE_NEWTIME` (0x80) is not among them: in
/// `clone`'s flags those low 8 bits are the exit signal (`CSIGNAL`).
pub(crate) const CLONE_NS_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;
/// Namespace flags `unshare` accepts.
pub(crate) const UNSHARE_NS_FLAGS: u32 = CLONE_NS_FLAGS | libc::CLONE_NEWTIME as u32;

/// Socket families a server may create.
const FAMILIES: &[u32] = &[
    libc::AF_UNIX as u32,
    libc::AF_INET as u32,
    libc::AF_INET6 as u32,
];
/// `personality(PER_LINUX)` (0, the default) and `personality(0xffffffff)` (query).
const PERSONALITIES: &[u32] = &[0, 0xffff_ffff];

/// `S_ISUID | S_ISGID`: the bits no file the server makes or changes may carry.
pub(crate) const SET_ID: u32 = libc::S_ISUID | libc::S_ISGID;
/// The open flags with which the kernel uses the mode argument (`WILL_CREATE`:
/// `O_CREAT`, and `__O_TMPFILE`, the bit of `O_TMPFILE` that is not `O_DIRECTORY`).
const OPEN_CREATES: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;
/// Not `AF_UNIX`: after the family rule, an IP socket.
const IP: ArgCond = ArgCond::NotIn {
    arg: 0,
    values: &[libc::AF_UNIX as u32],
};
/// The IP socket types a server may create (`type & 0xf`, `SOCK_TYPE_MASK`).
const IP_TYPES: &[u32] = &[libc::SOCK_STREAM as u32, libc::SOCK_DGRAM as u32];
/// The IP protocols a server may ask for: the default one of the type, TCP, UDP.
const IP_PROTOCOLS: &[u32] = &[0, libc::IPPROTO_TCP as u32, libc::IPPROTO_UDP as u32];
/// `SOCK_TYPE_MASK`.
const SOCK_TYPE_MASK: u32 = 0xf;

/// `mode & (S_ISUID|S_ISGID)` in argument `arg`.
const fn set_id(arg: u8) -> ArgCond {
    ArgCond::AnyBit { arg, mask: SET_ID }
}

macro_rules! rule {
    ($sys:ident, $action:expr, $why:literal) => {
        rule!($sys, $action, None, $why)
    };
    ($sys:ident, $action:expr, $cond:expr, $why:literal) => {
        rule!($sys, $action, $cond, When::Always, $why)
    };
    ($sys:ident, $action:expr, $cond:expr, $when:expr, $why:literal) => {
        Rule {
            name: stringify!($sys),
            nr: nr::$sys,
            action: $action,
            cond: $cond,
            when: $when,
            why: $why,
        }
    };
}

/// The deny list. Everything not here is allowed: `execve`/`execveat`, `fork`,
/// `vfork`, `clone` without namespace flags (threads), `prctl`, `seccomp` (can only
/// add filters), `landlock_*` (can only restrict further), `kcmp`, `memfd_create`.
pub(crate) static RULES: &[Rule] = &[
    // Namespaces: a nested user namespace hands out a full capability set over
    // fresh namespaces, the door to most kernel LPEs of recent years.
    rule!(SYS_unshare, NOTIFY_EPERM, Some(ArgCond::AnyBit { arg: 0, mask: UNSHARE_NS_FLAGS }),
        "new namespaces (userns unlocks CVE-2022-0185, CVE-2023-32233, CVE-2022-0492); CLONE_FILES/FS pass"),
    rule!(SYS_clone, NOTIFY_EPERM, Some(ArgCond::AnyBit { arg: 0, mask: CLONE_NS_FLAGS }),
        "clone into new namespaces (flags are arg0 on x86_64 and aarch64); threads and fork pass"),
    rule!(SYS_clone3, ENOSYS,
        "flags sit in a struct the filter cannot read; ENOSYS makes glibc fall back to clone"),
    rule!(SYS_setns, NOTIFY_EPERM, "joining another namespace through an fd or pidfd"),
    // The mount API: the server has no capabilities, this is the second lock.
    rule!(SYS_mount, NOTIFY_EPERM, "mount table changes (could reshape or uncover the sandbox root)"),
    rule!(SYS_umount2, NOTIFY_EPERM, "unmounting could uncover what the sandbox root hides"),
    rule!(SYS_pivot_root, NOTIFY_EPERM, "root changes"),
    rule!(SYS_chroot, NOTIFY_EPERM, "root changes (the classic chroot escape with a held directory fd)"),
    rule!(SYS_open_tree, NOTIFY_EPERM, "new mount API: detached copies of mount trees"),
    rule!(SYS_open_tree_attr, NOTIFY_EPERM, "new mount API: open_tree with attribute changes (Linux 6.15)"),
    rule!(SYS_move_mount, NOTIFY_EPERM, "new mount API: attaching mounts"),
    rule!(SYS_fsopen, NOTIFY_EPERM, "new mount API: filesystem contexts (CVE-2022-0185 legacy_parse_param overflow)"),
    rule!(SYS_fsconfig, NOTIFY_EPERM, "new mount API: filesystem parameters (CVE-2022-0185)"),
    rule!(SYS_fsmount, NOTIFY_EPERM, "new mount API: mounts from a filesystem context"),
    rule!(SYS_fspick, NOTIFY_EPERM, "new mount API: reconfiguring existing superblocks"),
    rule!(SYS_mount_setattr, NOTIFY_EPERM, "new mount API: mount flags and idmapped mounts"),
    // Other processes.
    rule!(SYS_ptrace, NOTIFY_EPERM, "memory and registers of other processes (CVE-2019-13272 PTRACE_TRACEME)"),
    rule!(SYS_process_vm_readv, NOTIFY_EPERM, "reading another process's memory without ptrace"),
    rule!(SYS_process_vm_writev, NOTIFY_EPERM, "writing another process's memory without ptrace"),
    rule!(SYS_pidfd_getfd, NOTIFY_EPERM, "stealing file descriptors from another process"),
    // Kernel subsystems that are not namespaced or are large attack surface.
    rule!(SYS_keyctl, NOTIFY_EPERM, "kernel keyrings are not namespaced (CVE-2016-0728)"),
    rule!(SYS_add_key, NOTIFY_EPERM, "kernel keyrings are not namespaced (CVE-2016-0728)"),
    rule!(SYS_request_key, NOTIFY_EPERM, "kernel keyrings are not namespaced; can upcall to host helpers"),
    rule!(SYS_bpf, NOTIFY_EPERM, "eBPF verifier bugs (CVE-2021-3490, CVE-2021-31440, CVE-2023-2163)"),
    rule!(SYS_perf_event_open, NOTIFY_EPERM, "perf bugs and side channels (CVE-2013-2094, CVE-2023-2235)"),
    rule!(SYS_userfaultfd, NOTIFY_EPERM, "stalls kernel page faults to win exploit races (CVE-2021-22555 technique)"),
    rule!(SYS_io_uring_setup, NOTIFY_EPERM, "io_uring: large surface whose ops bypass seccomp (CVE-2022-29582, CVE-2023-2598)"),
    rule!(SYS_io_uring_enter, NOTIFY_EPERM, "io_uring (see io_uring_setup)"),
    rule!(SYS_io_uring_register, NOTIFY_EPERM, "io_uring (see io_uring_setup)"),
    rule!(SYS_open_by_handle_at, NOTIFY_EPERM, "opens inodes by handle past the mount view (the 'shocker' container escape)"),
    rule!(SYS_name_to_handle_at, EPERM, "file handles for open_by_handle_at"),
    rule!(SYS_fanotify_init, EPERM, "filesystem-wide access monitoring"),
    // The machine itself.
    rule!(SYS_init_module, NOTIFY_EPERM, "loading kernel modules"),
    rule!(SYS_finit_module, NOTIFY_EPERM, "loading kernel modules"),
    rule!(SYS_delete_module, NOTIFY_EPERM, "unloading kernel modules"),
    rule!(SYS_kexec_load, NOTIFY_EPERM, "replacing the running kernel"),
    rule!(SYS_kexec_file_load, NOTIFY_EPERM, "replacing the running kernel"),
    rule!(SYS_reboot, NOTIFY_EPERM, "host power state"),
    rule!(SYS_swapon, EPERM, "host swap configuration"),
    rule!(SYS_swapoff, EPERM, "host swap configuration"),
    rule!(SYS_acct, EPERM, "process accounting into an arbitrary file"),
    rule!(SYS_quotactl, EPERM, "filesystem quota control"),
    rule!(SYS_quotactl_fd, EPERM, "filesystem quota control (by fd)"),
    rule!(SYS_lookup_dcookie, EPERM, "kernel profiling cookies (kernel address disclosure)"),
    rule!(SYS_syslog, EPERM, "kernel log ring (kernel addresses; dmesg_restrict bypass)"),
    rule!(SYS_vhangup, EPERM, "hangs up the controlling terminal"),
    rule!(SYS_nfsservctl, EPERM, "removed NFS server interface"),
    rule!(SYS_settimeofday, EPERM, "the host clock is not namespaced"),
    rule!(SYS_clock_settime, EPERM, "the host clock is not namespaced"),
    rule!(SYS_clock_adjtime, EPERM, "the host clock is not namespaced (the read-only use is refused too)"),
    rule!(SYS_adjtimex, EPERM, "the host clock is not namespaced (ntp_gettime reads are refused too)"),
    #[cfg(target_arch = "x86_64")]
    rule!(SYS_iopl, EPERM, "raw I/O port access"),
    #[cfg(target_arch = "x86_64")]
    rule!(SYS_ioperm, EPERM, "raw I/O port access"),
    #[cfg(target_arch = "x86_64")]
    rule!(SYS_uselib, EPERM, "a.out library loader (CVE-2004-1235)"),
    #[cfg(target_arch = "x86_64")]
    rule!(SYS_modify_ldt, EPERM, "LDT bugs (CVE-2015-5157, CVE-2017-17053); only 16-bit code and Wine need it"),
    rule!(SYS_personality, NOTIFY_EPERM, Some(ArgCond::NotIn { arg: 0, values: PERSONALITIES }),
        "execution domains weaken the next exec: MMAP_PAGE_ZERO (CVE-2009-1895), READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE"),
    // Terminals (cmd is an unsigned int: compared on 32 bits).
    rule!(SYS_ioctl, NOTIFY_EPERM, Some(ArgCond::Eq { arg: 1, value: libc::TIOCSTI as u32 }),
        "TIOCSTI pushes input into a terminal (CVE-2017-5226, CVE-2016-7545)"),
    rule!(SYS_ioctl, NOTIFY_EPERM, Some(ArgCond::Eq { arg: 1, value: libc::TIOCLINUX as u32 }),
        "TIOCLINUX pastes the console selection as input, like TIOCSTI (CVE-2023-1076 class)"),
    rule!(SYS_ioctl, NOTIFY_EPERM, Some(ArgCond::Eq { arg: 1, value: libc::TIOCSETD as u32 }),
        "TIOCSETD attaches line disciplines (CVE-2017-2636 n_hdlc, CVE-2023-6546 n_gsm)"),
    // Sockets: Unix and IP only. AF_NETLINK too is refused (nothing needs it here;
    // netfilter/route are large surfaces: CVE-2022-1015, CVE-2023-32233; side
    // effect: getifaddrs and node's os.networkInterfaces() fail), as are AF_PACKET
    // (CVE-2016-8655, CVE-2017-7308), AF_VSOCK (CVE-2021-26708), AF_ALG, AF_KEY...
    rule!(SYS_socket, EAFNOSUPPORT, Some(ArgCond::NotIn { arg: 0, values: FAMILIES }),
        "families other than AF_UNIX/AF_INET/AF_INET6, netlink included (AF_PACKET CVE-2017-7308)"),
    // IP sockets: TCP and UDP only (checked after the family, so "not AF_UNIX"
    // is AF_INET or AF_INET6). Raw sockets (the kernel's own answer without
    // CAP_NET_RAW is EPERM too), SOCK_SEQPACKET (SCTP), SOCK_DCCP, SOCK_PACKET;
    // then protocols: SCTP, DCCP, UDP-Lite, L2TP, MPTCP, IPPROTO_SMC, and ICMP
    // "ping" sockets (the sandbox's network has no route for them anyway). Plain
    // errno, not recorded: Go probes MPTCP on its own and falls back to TCP.
    rule!(SYS_socket, EPERM, Some(ArgCond::All(&[IP, ArgCond::MaskedNotIn { arg: 1, mask: SOCK_TYPE_MASK, values: IP_TYPES }])),
        "IP socket types other than stream and datagram: raw (CVE-2017-17712), SOCK_SEQPACKET (SCTP), SOCK_DCCP (CVE-2017-6074), SOCK_PACKET"),
    rule!(SYS_socket, EPROTONOSUPPORT, Some(ArgCond::All(&[IP, ArgCond::NotIn { arg: 2, values: IP_PROTOCOLS }])),
        "IP protocols other than TCP/UDP: SCTP (CVE-2021-23133), DCCP, UDP-Lite, L2TP (CVE-2016-10200), MPTCP, IPPROTO_SMC, ICMP ping (CVE-2017-2671); each may also autoload a module"),
    rule!(SYS_socketpair, EAFNOSUPPORT, Some(ArgCond::NotIn { arg: 0, values: FAMILIES }),
        "families other than AF_UNIX/AF_INET/AF_INET6"),
    // NUMA memory policy: nothing an MCP server needs (node, python and glibc
    // never call them; checked inside the sandbox), refused in Docker's default
    // profile without CAP_SYS_NICE. ENOSYS, what a kernel without CONFIG_NUMA
    // answers, so libnuma and hwloc report "no NUMA" and carry on.
    rule!(SYS_mbind, ENOSYS, "NUMA policy of a memory range (CVE-2023-4611 use-after-free, CVE-2017-7616 info leak)"),
    rule!(SYS_set_mempolicy, ENOSYS, "NUMA policy of the process (CVE-2017-7616, CVE-2023-4611 class)"),
    rule!(SYS_get_mempolicy, ENOSYS, "NUMA policy query (CVE-2018-10675 use-after-free in do_get_mempolicy)"),
    rule!(SYS_set_mempolicy_home_node, ENOSYS, "NUMA home node of a range (Linux 5.17; the mbind code of CVE-2023-4611)"),
    rule!(SYS_move_pages, ENOSYS, "moves pages of any process between NUMA nodes (CVE-2017-14140: missing permission check)"),
    rule!(SYS_migrate_pages, ENOSYS, "moves all pages of another process between NUMA nodes"),
    rule!(SYS_process_madvise, EPERM, "memory advice on another process's memory through a pidfd"),
    // Set-user-ID and set-group-ID bits: a file in a write grant is a host
    // file, and one marked setuid (owned by the user) or setgid (to any group
    // the user is in: docker, disk, adm...) is a privilege escalation for
    // whoever runs it on the host. No call may set them (directories'
    // S_ISGID included: the filter cannot tell a directory from a file).
    #[cfg(target_arch = "x86_64")]
    rule!(SYS_chmod, NOTIFY_EPERM, Some(set_id(1)), "setuid/setgid bits (planted on host files through a write grant)"),
    rule!(SYS_fchmod, NOTIFY_EPERM, Some(set_id(1)), "setuid/setgid bits (planted on host files through a write grant)"),
    rule!(SYS_fchmodat, NOTIFY_EPERM, Some(set_id(2)), "setuid/setgid bits (planted on host files through a write grant)"),
    rule!(SYS_fchmodat2, NOTIFY_EPERM, Some(set_id(2)), "setuid/setgid bits (planted on host files through a write grant)"),
    // Creating with those bits (the mode counts only with O_CREAT or O_TMPFILE).
    #[cfg(target_arch = "x86_64")]
    rule!(SYS_open, NOTIFY_EPERM, Some(ArgCond::All(&[ArgCond::AnyBit { arg: 1, mask: OPEN_CREATES }, set_id(2)])),
        "creating a setuid/setgid file (O_CREAT or O_TMPFILE with S_ISUID/S_ISGID in the mode)"),
    rule!(SYS_openat, NOTIFY_EPERM, Some(ArgCond::All(&[ArgCond::AnyBit { arg: 2, mask: OPEN_CREATES }, set_id(3)])),
        "creating a setuid/setgid file (O_CREAT or O_TMPFILE with S_ISUID/S_ISGID in the mode)"),
    #[cfg(target_arch = "x86_64")]
    rule!(SYS_creat, NOTIFY_EPERM, Some(set_id(1)), "creating a setuid/setgid file"),
    #[cfg(target_arch = "x86_64")]
    rule!(SYS_mknod, NOTIFY_EPERM, Some(set_id(1)), "creating a setuid/setgid file (mknod S_IFREG)"),
    rule!(SYS_mknodat, NOTIFY_EPERM, Some(set_id(2)), "creating a setuid/setgid file (mknodat S_IFREG)"),
    // openat2's mode is in memory the filter cannot read. With the creation
    // guard, the guard performs its creations and clears those bits; with
    // write grants but without it, openat2 is refused as if the kernel
    // predated it (5.6), and callers fall back to openat, whose mode the rule
    // above reads.
    rule!(SYS_openat2, ENOSYS, None, When::Unguarded,
        "its mode (setuid/setgid bits) is in memory the filter cannot read; only with write grants and no creation guard"),
];

/// What a watched call does to the paths it names: the operation the file
/// audit records (refined by the call's flags, see [`crate::supervise::files`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileOp {
    /// open/openat/openat2/creat: read, write, create or `O_PATH`, by its flags.
    Open,
    Exec,
    /// unlink, or rmdir for `unlinkat(AT_REMOVEDIR)`.
    Unlink,
    Rmdir,
    Mkdir,
    Mknod,
    Rename,
    Link,
    Symlink,
    Truncate,
    Chmod,
    Chown,
}

/// Where a call's flags are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flags {
    None,
    /// In this argument.
    Arg(u8),
    /// Implied by the call (`creat`: `O_CREAT|O_WRONLY|O_TRUNC`; `lchown`:
    /// `AT_SYMLINK_NOFOLLOW`).
    Fixed(u64),
    /// The first member of the `struct open_how` this argument points to
    /// (`openat2`).
    OpenHow(u8),
}

/// A path argument: the pointer's index and, for the `*at` calls, the index
/// of the directory fd it is relative to (otherwise the cwd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PathArg {
    pub dirfd: Option<u8>,
    pub path: u8,
}

/// A path-taking call the file audit observes (`audit.files`): compiled to
/// `SECCOMP_RET_USER_NOTIF` and always answered with
/// `SECCOMP_USER_NOTIF_FLAG_CONTINUE` (the kernel then runs it exactly as it
/// would have: observing never decides anything).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watched {
    /// `SYS_<name>`, as spelled in libc.
    pub name: &'static str,
    pub nr: libc::c_long,
    pub op: FileOp,
    /// The path it acts on, and the second one of rename and link (the new
    /// name).
    pub paths: [Option<PathArg>; 2],
    pub flags: Flags,
    /// `symlink`'s target: a string stored in the link, not a path accessed.
    pub text: Option<u8>,
}

const fn at(dirfd: u8, path: u8) -> Option<PathArg> {
    Some(PathArg {
        dirfd: Some(dirfd),
        path,
    })
}

const fn cwd(path: u8) -> Option<PathArg> {
    Some(PathArg { dirfd: None, path })
}

macro_rules! watch {
    ($sys:ident, $op:ident, [$p0:expr, $p1:expr], $flags:expr) => {
        watch!($sys, $op, [$p0, $p1], $flags, None)
    };
    ($sys:ident, $op:ident, [$p0:expr, $p1:expr], $flags:expr, $text:expr) => {
        Watched {
            name: stringify!($sys),
            nr: nr::$sys,
            op: FileOp::$op,
            paths: [$p0, $p1],
            flags: $flags,
            text: $text,
        }
    };
}

/// The calls that open, create, remove, rename, link or execute a path, or
/// change its mode, owner or size: what `audit.files` records. Not here (see
/// docs/security-model.md): calls that only look (`stat`, `access`,
/// `readlink`, `getxattr`, `chdir`, `inotify_add_watch`), `bind`/`connect`
/// to a Unix socket path, and calls on fds already open.
pub(crate) static WATCHED: &[Watched] = &[
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_open, Open, [cwd(0), None], Flags::Arg(1)),
    watch!(SYS_openat, Open, [at(0, 1), None], Flags::Arg(2)),
    watch!(SYS_openat2, Open, [at(0, 1), None], Flags::OpenHow(2)),
    #[cfg(target_arch = "x86_64")]
    watch!(
        SYS_creat,
        Open,
        [cwd(0), None],
        Flags::Fixed((libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64)
    ),
    watch!(SYS_execve, Exec, [cwd(0), None], Flags::None),
    watch!(SYS_execveat, Exec, [at(0, 1), None], Flags::Arg(4)),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_unlink, Unlink, [cwd(0), None], Flags::None),
    watch!(SYS_unlinkat, Unlink, [at(0, 1), None], Flags::Arg(2)),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_rmdir, Rmdir, [cwd(0), None], Flags::None),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_mkdir, Mkdir, [cwd(0), None], Flags::None),
    watch!(SYS_mkdirat, Mkdir, [at(0, 1), None], Flags::None),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_mknod, Mknod, [cwd(0), None], Flags::None),
    watch!(SYS_mknodat, Mknod, [at(0, 1), None], Flags::None),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_rename, Rename, [cwd(0), cwd(1)], Flags::None),
    watch!(SYS_renameat, Rename, [at(0, 1), at(2, 3)], Flags::None),
    watch!(SYS_renameat2, Rename, [at(0, 1), at(2, 3)], Flags::Arg(4)),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_link, Link, [cwd(0), cwd(1)], Flags::None),
    watch!(SYS_linkat, Link, [at(0, 1), at(2, 3)], Flags::Arg(4)),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_symlink, Symlink, [cwd(1), None], Flags::None, Some(0)),
    watch!(
        SYS_symlinkat,
        Symlink,
        [at(1, 2), None],
        Flags::None,
        Some(0)
    ),
    watch!(SYS_truncate, Truncate, [cwd(0), None], Flags::None),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_chmod, Chmod, [cwd(0), None], Flags::None),
    watch!(SYS_fchmodat, Chmod, [at(0, 1), None], Flags::None),
    watch!(SYS_fchmodat2, Chmod, [at(0, 1), None], Flags::Arg(3)),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_chown, Chown, [cwd(0), None], Flags::None),
    #[cfg(target_arch = "x86_64")]
    watch!(
        SYS_lchown,
        Chown,
        [cwd(0), None],
        Flags::Fixed(libc::AT_SYMLINK_NOFOLLOW as u64)
    ),
    watch!(SYS_fchownat, Chown, [at(0, 1), None], Flags::Arg(4)),
];

/// The open flags that make an open the creation guard's: it creates
/// (`O_CREAT`), or opens for writing (`O_WRONLY`, `O_RDWR`, `O_TRUNC`), which
/// the guard performs itself in write grants ([`crate::supervise::guard`]).
pub(crate) const GUARDED_OPEN_FLAGS: u32 =
    (libc::O_CREAT | libc::O_WRONLY | libc::O_RDWR | libc::O_TRUNC) as u32;

/// Whether `w` can make a new name (the calls the creation guard,
/// [`crate::supervise::guard`], performs itself): the opens (with `O_CREAT`, checked by
/// the filter where the flags are an argument), `mkdir`, `mknod`, `symlink`,
/// `link` and `rename`.
pub(crate) fn creates(w: &Watched) -> bool {
    matches!(
        w.op,
        FileOp::Open
            | FileOp::Mkdir
            | FileOp::Mknod
            | FileOp::Rename
            | FileOp::Link
            | FileOp::Symlink
    )
}

/// The watched call `nr`, if it is one.
pub(crate) fn watched(nr: libc::c_long) -> Option<&'static Watched> {
    WATCHED.iter().find(|w| w.nr == nr)
}

// <linux/audit.h>: not in libc.
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;
/// `__X32_SYSCALL_BIT`.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The audit arch this build's syscall numbers belong to.
pub(crate) const fn native_arch() -> Option<u32> {
    if cfg!(target_arch = "x86_64") {
        Some(AUDIT_ARCH_X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(AUDIT_ARCH_AARCH64)
    } else {
        None
    }
}

// `struct seccomp_data` offsets.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARGS: u32 = 16;

/// Offset of the low 32 bits of argument `arg`.
const fn arg_low(arg: u8) -> u32 {
    OFF_ARGS + 8 * arg as u32 + if cfg!(target_endian = "big") { 4 } else { 0 }
}

const LD_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
const ALU_AND: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;

pub(crate) const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
pub(crate) const RET_KILL_PROCESS: u32 = libc::SECCOMP_RET_KILL_PROCESS;

impl Action {
    /// The `SECCOMP_RET_*` value; `notify`: the filter is installed with a
    /// listener (otherwise `Notify` degrades to its errno).
    pub(crate) fn ret(self, notify: bool) -> u32 {
        match self {
            Action::Notify(_) if notify => libc::SECCOMP_RET_USER_NOTIF,
            Action::Errno(e) | Action::Notify(e) => {
                libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
            }
        }
    }

    /// The errno the caller gets, whether or not the call was recorded.
    pub(crate) fn errno(self) -> i32 {
        match self {
            Action::Errno(e) | Action::Notify(e) => e,
        }
    }
}

impl ArgCond {
    /// The argument this condition inspects (for [`ArgCond::All`], the last
    /// one's: the one that decides, such as the mode after the open flags).
    pub(crate) fn arg(self) -> u8 {
        match self {
            ArgCond::AnyBit { arg, .. }
            | ArgCond::Eq { arg, .. }
            | ArgCond::NotIn { arg, .. }
            | ArgCond::MaskedNotIn { arg, .. } => arg,
            ArgCond::All(all) => all.last().map_or(0, |c| c.arg()),
        }
    }

    /// Whether the condition holds for `args`, on the low 32 bits as the
    /// compiled filter compares them.
    pub(crate) fn holds(self, args: &[u64; 6]) -> bool {
        let low = |arg: u8| args.get(usize::from(arg)).map_or(0, |&a| a as u32);
        match self {
            ArgCond::AnyBit { arg, mask } => low(arg) & mask != 0,
            ArgCond::Eq { arg, value } => low(arg) == value,
            ArgCond::NotIn { arg, values } => !values.contains(&low(arg)),
            ArgCond::MaskedNotIn { arg, mask, values } => !values.contains(&(low(arg) & mask)),
            ArgCond::All(all) => all.iter().all(|c| c.holds(args)),
        }
    }
}

/// The rule that refuses syscall `nr` with `args`, the way the compiled filter
/// picks it (first rule of the syscall whose condition holds). Only the rules
/// of every filter ([`When::Always`]): the others are plain errno returns
/// that never reach the notifier, which asks this.
pub(crate) fn rule_for(nr: libc::c_long, args: &[u64; 6]) -> Option<&'static Rule> {
    RULES
        .iter()
        .filter(|r| r.nr == nr && r.when == When::Always)
        .find(|r| r.cond.is_none_or(|c| c.holds(args)))
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: usize, jf: usize) -> Result<libc::sock_filter, Failure> {
    let off = |n: usize| {
        u8::try_from(n).map_err(|_| Failure::msg("seccomp", format!("jump of {n} is too long")))
    };
    Ok(libc::sock_filter {
        code,
        jt: off(jt)?,
        jf: off(jf)?,
        k,
    })
}

/// A test of [`cond_code`]: a conditional jump whose targets are the next
/// instruction or the rule's "does not apply" exit.
enum Step {
    Op(libc::sock_filter),
    /// `jt`/`jf`: true jumps to the exit (past the rule's return).
    Jump {
        code: u16,
        k: u32,
        jt_exit: bool,
        jf_exit: bool,
    },
}

/// The tests of `cond`: falls through when it holds, jumps to the exit when not.
fn cond_code(cond: ArgCond, out: &mut Vec<Step>) {
    let jump = |code, k, jt_exit, jf_exit| Step::Jump {
        code,
        k,
        jt_exit,
        jf_exit,
    };
    match cond {
        ArgCond::AnyBit { arg, mask } => {
            out.push(Step::Op(stmt(LD_ABS, arg_low(arg))));
            out.push(jump(JSET, mask, false, true));
        }
        ArgCond::Eq { arg, value } => {
            out.push(Step::Op(stmt(LD_ABS, arg_low(arg))));
            out.push(jump(JEQ, value, false, true));
        }
        ArgCond::NotIn { arg, values } => {
            out.push(Step::Op(stmt(LD_ABS, arg_low(arg))));
            // A listed value jumps past the remaining tests and the return.
            out.extend(values.iter().map(|&v| jump(JEQ, v, true, false)));
        }
        ArgCond::MaskedNotIn { arg, mask, values } => {
            out.push(Step::Op(stmt(LD_ABS, arg_low(arg))));
            out.push(Step::Op(stmt(ALU_AND, mask)));
            out.extend(values.iter().map(|&v| jump(JEQ, v, true, false)));
        }
        ArgCond::All(all) => {
            for &c in all {
                cond_code(c, out);
            }
        }
    }
}

/// The instructions for one rule, with the accumulator holding the syscall
/// number on entry (it may be clobbered); falls through when the rule does not
/// apply.
fn rule_body(rule: &Rule, notify: bool) -> Result<Vec<libc::sock_filter>, Failure> {
    let ret = stmt(RET, rule.action.ret(notify));
    let Some(cond) = rule.cond else {
        return Ok(vec![ret]);
    };
    let mut steps = Vec::new();
    cond_code(cond, &mut steps);
    let exit = steps.len() + 1; // past the return
    let mut v = Vec::with_capacity(exit);
    for (i, s) in steps.into_iter().enumerate() {
        v.push(match s {
            Step::Op(op) => op,
            Step::Jump {
                code,
                k,
                jt_exit,
                jf_exit,
            } => {
                let to = |e: bool| if e { exit - i - 1 } else { 0 };
                jump(code, k, to(jt_exit), to(jf_exit))?
            }
        });
    }
    v.push(ret);
    Ok(v)
}

/// Compiles [`RULES`] for the architecture this binary was built for.
/// `notify`: the filter will be installed with `SECCOMP_FILTER_FLAG_NEW_LISTENER`
/// and someone answers the listener; otherwise [`Action::Notify`] rules return
/// their errno directly. `watch_files` (only with `notify`): the [`WATCHED`]
/// calls notify too; otherwise they are allowed without a round trip.
/// `guard` (only with `notify`): the calls that can create a name notify
/// ([`creates`]; `open`/`openat` only with `O_CREAT`), for the creation guard.
/// `writes`: the sandbox has write grants, so the [`When::Unguarded`] rules
/// apply when the guard does not run.
pub(crate) fn program(
    notify: bool,
    watch_files: bool,
    guard: bool,
    writes: bool,
) -> Result<Vec<libc::sock_filter>, Failure> {
    let arch = native_arch().ok_or_else(|| {
        Failure::msg(
            "seccomp",
            format!(
                "no seccomp filter for {} (only x86_64 and aarch64)",
                std::env::consts::ARCH
            ),
        )
    })?;
    // Watching and the guard both need the listener.
    let (watch_files, guard) = (notify && watch_files, notify && guard);
    let mut prog = vec![
        stmt(LD_ABS, OFF_ARCH),
        jump(JEQ, arch, 1, 0)?,
        stmt(RET, RET_KILL_PROCESS),
        stmt(LD_ABS, OFF_NR),
    ];
    if arch == AUDIT_ARCH_X86_64 {
        prog.push(jump(JSET, X32_SYSCALL_BIT, 0, 1)?);
        prog.push(stmt(RET, ENOSYS.ret(notify)));
    }
    // One block per syscall, in table order of first appearance.
    let compiled = |r: &&Rule| r.when == When::Always || (writes && !guard);
    let mut seen: Vec<libc::c_long> = Vec::new();
    for first in RULES.iter().filter(compiled) {
        if seen.contains(&first.nr) {
            continue;
        }
        seen.push(first.nr);
        let group: Vec<&Rule> = RULES
            .iter()
            .filter(compiled)
            .filter(|r| r.nr == first.nr)
            .collect();
        let mut body = Vec::new();
        for rule in &group {
            body.extend(rule_body(rule, notify)?);
        }
        // No condition held: allow, or, for a call the watched or guard
        // blocks below may notify, reload the number and fall through to
        // them (no other block here matches this syscall).
        if group.iter().any(|r| r.cond.is_some()) {
            if notify && (watch_files || guard) && watched(first.nr).is_some() {
                body.push(stmt(LD_ABS, OFF_NR));
            } else {
                body.push(stmt(RET, RET_ALLOW));
            }
        }
        let nr = u32::try_from(first.nr)
            .map_err(|_| Failure::msg("seccomp", format!("bad number for {}", first.name)))?;
        prog.push(jump(JEQ, nr, 0, body.len())?);
        prog.extend(body);
    }
    // The accumulator still holds the number (every block above that matched
    // has returned). Each watched call jumps to the one USER_NOTIF return at
    // the end; anything else falls through to ALLOW.
    if notify && watch_files {
        for (i, w) in WATCHED.iter().enumerate() {
            let nr = u32::try_from(w.nr)
                .map_err(|_| Failure::msg("seccomp", format!("bad number for {}", w.name)))?;
            prog.push(jump(JEQ, nr, WATCHED.len() - i, 0)?);
        }
        prog.push(stmt(RET, RET_ALLOW));
        prog.push(stmt(RET, libc::SECCOMP_RET_USER_NOTIF));
    } else if notify && guard {
        // Only what can create or write. An open whose flags are an argument
        // notifies only with O_CREAT, write access or O_TRUNC (a block: load
        // the flags, test, return); the others (creat, openat2 with its flags
        // in memory, mkdir...) always.
        let mut always = Vec::new();
        for w in WATCHED.iter().filter(|w| creates(w)) {
            let nr = u32::try_from(w.nr)
                .map_err(|_| Failure::msg("seccomp", format!("bad number for {}", w.name)))?;
            match (w.op, w.flags) {
                (FileOp::Open, Flags::Arg(i)) => {
                    prog.push(jump(JEQ, nr, 0, 4)?);
                    prog.push(stmt(LD_ABS, arg_low(i)));
                    prog.push(jump(JSET, GUARDED_OPEN_FLAGS, 0, 1)?);
                    prog.push(stmt(RET, libc::SECCOMP_RET_USER_NOTIF));
                    prog.push(stmt(RET, RET_ALLOW));
                }
                _ => always.push(nr),
            }
        }
        for (i, nr) in always.iter().enumerate() {
            prog.push(jump(JEQ, *nr, always.len() - i, 0)?);
        }
        prog.push(stmt(RET, RET_ALLOW));
        prog.push(stmt(RET, libc::SECCOMP_RET_USER_NOTIF));
    } else {
        prog.push(stmt(RET, RET_ALLOW));
    }
    if prog.len() > libc::BPF_MAXINSNS as usize {
        return Err(Failure::msg(
            "seccomp",
            format!("filter of {} instructions is too long", prog.len()),
        ));
    }
    Ok(prog)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Runs `prog` the way the kernel does on one `struct seccomp_data`.
    fn run(prog: &[libc::sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_ne_bytes());
        data[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            let o = 16 + 8 * i;
            data[o..o + 8].copy_from_slice(&a.to_ne_bytes());
        }
        let mut acc = 0u32;
        let mut pc = 0usize;
        loop {
            let ins = prog[pc];
            pc += 1;
            match ins.code {
                LD_ABS => {
                    let o = ins.k as usize;
                    assert!(o.is_multiple_of(4) && o + 4 <= 64, "bad load at {}", pc - 1);
                    acc = u32::from_ne_bytes(data[o..o + 4].try_into().unwrap());
                }
                ALU_AND => acc &= ins.k,
                JEQ | JSET => {
                    let hit = if ins.code == JEQ {
                        acc == ins.k
                    } else {
                        acc & ins.k != 0
                    };
                    pc += usize::from(if hit { ins.jt } else { ins.jf });
                }
                RET => return ins.k,
                c => panic!("unexpected opcode {c:#x}"),
            }
            assert!(pc < prog.len(), "ran off the end");
        }
    }

    /// The filter as installed with a listener.
    fn native(nr: libc::c_long, args: [u64; 6]) -> u32 {
        run(
            &program(true, false, false, true).unwrap(),
            native_arch().unwrap(),
            nr as u32,
            args,
        )
    }

    /// The filter as installed without one (no user notification).
    fn plain(nr: libc::c_long, args: [u64; 6]) -> u32 {
        run(
            &program(false, false, false, true).unwrap(),
            native_arch().unwrap(),
            nr as u32,
            args,
        )
    }

    fn arg0(a: u64) -> [u64; 6] {
        [a, 0, 0, 0, 0, 0]
    }

    const EPERM_RET: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const NOTIF: u32 = libc::SECCOMP_RET_USER_NOTIF;

    /// The refusals that are recorded: escape and kernel-attack attempts.
    const RECORDED: &[&str] = &[
        "unshare",
        "clone",
        "setns",
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "open_tree",
        "open_tree_attr",
        "move_mount",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "mount_setattr",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "pidfd_getfd",
        "keyctl",
        "add_key",
        "request_key",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "open_by_handle_at",
        "init_module",
        "finit_module",
        "delete_module",
        "kexec_load",
        "kexec_file_load",
        "reboot",
        "personality",
        "ioctl",
        "fchmod",
        "fchmodat",
        "fchmodat2",
        "openat",
        "mknodat",
    ];
    /// The same, for the calls only x86_64 has.
    #[cfg(target_arch = "x86_64")]
    const RECORDED_X86_64: &[&str] = &["chmod", "open", "creat", "mknod"];
    #[cfg(not(target_arch = "x86_64"))]
    const RECORDED_X86_64: &[&str] = &[];

    /// Values worth trying for argument `arg` of `nr`: those the rules of
    /// `nr` name, their neighbours, and a few ordinary ones.
    fn candidates(nr: libc::c_long, arg: u8) -> Vec<u64> {
        fn from(c: ArgCond, arg: u8, out: &mut Vec<u32>) {
            match c {
                ArgCond::AnyBit { arg: a, mask } if a == arg => {
                    out.extend([mask, mask & mask.wrapping_neg(), !mask])
                }
                ArgCond::Eq { arg: a, value } if a == arg => {
                    out.extend([value, value.wrapping_add(1)])
                }
                ArgCond::NotIn { arg: a, values } if a == arg => {
                    out.extend(values);
                    out.extend([17, 0x7fff_fffe]);
                }
                ArgCond::MaskedNotIn {
                    arg: a,
                    mask,
                    values,
                } if a == arg => {
                    out.extend(values.iter().flat_map(|v| [*v, v | 0x80800]));
                    out.extend([3 & mask, 5, 6, 10]);
                }
                ArgCond::All(all) => all.iter().for_each(|c| from(*c, arg, out)),
                _ => {}
            }
        }
        let mut out = vec![0u32, 0o644, 0o755];
        for r in RULES.iter().filter(|r| r.nr == nr) {
            if let Some(c) = r.cond {
                from(c, arg, &mut out);
            }
        }
        out.sort();
        out.dedup();
        out.into_iter().map(u64::from).collect()
    }

    /// The arguments any rule of `nr` inspects.
    fn inspected(nr: libc::c_long) -> Vec<u8> {
        fn args(c: ArgCond, out: &mut Vec<u8>) {
            match c {
                ArgCond::All(all) => all.iter().for_each(|c| args(*c, out)),
                c => out.push(c.arg()),
            }
        }
        let mut out = Vec::new();
        for r in RULES.iter().filter(|r| r.nr == nr) {
            if let Some(c) = r.cond {
                args(c, &mut out);
            }
        }
        if let Some(Watched {
            flags: Flags::Arg(i),
            ..
        }) = watched(nr)
        {
            out.push(*i);
        }
        out.sort();
        out.dedup();
        out
    }

    /// Every combination of [`candidates`] over the [`inspected`] arguments
    /// of `nr` (the others 0), plus all-ones and an arbitrary pattern.
    fn grid(nr: libc::c_long) -> Vec<[u64; 6]> {
        let mut out = vec![[0u64; 6]];
        for arg in inspected(nr) {
            let values = candidates(nr, arg);
            out = out
                .iter()
                .flat_map(|a| {
                    values.iter().map(move |&v| {
                        let mut a = *a;
                        a[usize::from(arg)] = v;
                        a
                    })
                })
                .collect();
        }
        out.push([u64::MAX; 6]);
        out.push([7, 0x41, 2, 3, 4, 5]);
        out
    }

    /// Arguments for which the filter applies `r` (the first of [`grid`]).
    fn example(r: &Rule) -> [u64; 6] {
        if r.cond.is_none() {
            return [7; 6];
        }
        *grid(r.nr)
            .iter()
            .find(|a| rule_for(r.nr, a).is_some_and(|f| std::ptr::eq(f, r)))
            .unwrap_or_else(|| panic!("no example arguments for {}", r.name))
    }

    /// What the filter must answer, from the tables alone: the first rule
    /// of the call that is compiled in and holds; else, with a listener, the
    /// watched calls (all of them with `watch`; the creating ones with
    /// `guard`, opens only with O_CREAT) notify; else allow.
    fn model(
        notify: bool,
        (watch, guard, writes): (bool, bool, bool),
        nr: libc::c_long,
        args: &[u64; 6],
    ) -> u32 {
        let rule = RULES
            .iter()
            .filter(|r| r.nr == nr && (r.when == When::Always || (writes && !guard)))
            .find(|r| r.cond.is_none_or(|c| c.holds(args)));
        if let Some(r) = rule {
            return r.action.ret(notify);
        }
        let Some(w) = watched(nr).filter(|_| notify) else {
            return RET_ALLOW;
        };
        if watch {
            return NOTIF;
        }
        if guard && creates(w) {
            return match (w.op, w.flags) {
                (FileOp::Open, Flags::Arg(i))
                    if args[usize::from(i)] & u64::from(GUARDED_OPEN_FLAGS) == 0 =>
                {
                    RET_ALLOW
                }
                _ => NOTIF,
            };
        }
        RET_ALLOW
    }

    /// Every compiled variant of the filter answers, for every refused or
    /// watched call and a grid of its arguments, what the tables say.
    #[test]
    fn every_program_matches_the_tables() {
        let mut nrs: Vec<libc::c_long> = RULES.iter().map(|r| r.nr).collect();
        nrs.extend(WATCHED.iter().map(|w| w.nr));
        nrs.extend([libc::SYS_getpid, libc::SYS_read, libc::SYS_mmap]);
        nrs.sort();
        nrs.dedup();
        let arch = native_arch().unwrap();
        for notify in [false, true] {
            for watch in [false, true] {
                for (guard, writes) in [(false, false), (false, true), (true, true)] {
                    let prog = program(notify, watch, guard, writes).unwrap();
                    let (watch, guard) = (notify && watch, notify && guard);
                    for &nr in &nrs {
                        for args in grid(nr) {
                            assert_eq!(
                                run(&prog, arch, nr as u32, args),
                                model(notify, (watch, guard, writes), nr, &args),
                                "syscall {nr} {args:x?} notify={notify} watch={watch} guard={guard} writes={writes}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Every call the design refuses, with its action; conditional ones too.
    #[test]
    fn every_listed_call_is_in_the_table_with_its_action() {
        let unconditional_eperm = [
            "setns",
            "mount",
            "umount2",
            "pivot_root",
            "chroot",
            "open_tree",
            "move_mount",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "mount_setattr",
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "keyctl",
            "add_key",
            "request_key",
            "bpf",
            "perf_event_open",
            "userfaultfd",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "open_by_handle_at",
            "name_to_handle_at",
            "init_module",
            "finit_module",
            "delete_module",
            "kexec_load",
            "kexec_file_load",
            "reboot",
            "swapon",
            "swapoff",
            "acct",
            "quotactl",
            "lookup_dcookie",
            "syslog",
            "vhangup",
            "nfsservctl",
            "settimeofday",
            "clock_settime",
            "clock_adjtime",
            "adjtimex",
            "fanotify_init",
            "pidfd_getfd",
        ];
        let find = |name: &str| -> Vec<&Rule> {
            RULES
                .iter()
                .filter(|r| r.name.strip_prefix("SYS_") == Some(name))
                .collect()
        };
        let eperm = |a: Action| a.errno() == libc::EPERM;
        for name in unconditional_eperm {
            let r = find(name);
            assert_eq!(r.len(), 1, "{name}");
            assert!(eperm(r[0].action) && r[0].cond.is_none(), "{name}");
        }
        #[cfg(target_arch = "x86_64")]
        for name in ["iopl", "ioperm", "uselib"] {
            let r = find(name);
            assert_eq!(
                (r.len(), r[0].action, r[0].cond),
                (1, EPERM, None),
                "{name}"
            );
        }
        let clone3 = find("clone3");
        assert_eq!(
            (clone3.len(), clone3[0].action, clone3[0].cond),
            (1, ENOSYS, None)
        );
        let ns = |name: &str, mask: u32| {
            let r = find(name);
            assert_eq!(r.len(), 1, "{name}");
            assert_eq!(r[0].action, NOTIFY_EPERM);
            assert_eq!(r[0].cond, Some(ArgCond::AnyBit { arg: 0, mask }));
        };
        ns("unshare", UNSHARE_NS_FLAGS);
        ns("clone", CLONE_NS_FLAGS);
        for name in ["socket", "socketpair"] {
            let r = find(name);
            assert_eq!(r.len(), if name == "socket" { 3 } else { 1 });
            assert_eq!(r[0].action, EAFNOSUPPORT);
            let Some(ArgCond::NotIn { arg: 0, values }) = r[0].cond else {
                panic!("{name}: {:?}", r[0].cond)
            };
            let mut v = values.to_vec();
            v.sort();
            assert_eq!(v, [1, 2, 10], "AF_UNIX, AF_INET, AF_INET6 only");
            assert!(!values.contains(&(libc::AF_NETLINK as u32)));
        }
        let ioctls: Vec<_> = find("ioctl").iter().map(|r| (r.action, r.cond)).collect();
        for cmd in [0x5412u32, 0x541C] {
            let want = (NOTIFY_EPERM, Some(ArgCond::Eq { arg: 1, value: cmd }));
            assert!(ioctls.contains(&want), "ioctl {cmd:#x}");
        }
        let p = find("personality");
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].action, NOTIFY_EPERM);
        assert_eq!(
            p[0].cond,
            Some(ArgCond::NotIn {
                arg: 0,
                values: &[0, 0xffff_ffff]
            })
        );
    }

    /// No call sets or creates with S_ISUID/S_ISGID: chmod in every spelling
    /// (directories' setgid bit included: cp -a passes S_IFDIR|02755), and
    /// the creating calls, whose mode counts only with O_CREAT or O_TMPFILE.
    /// Everything else stays allowed, watched or guarded as before.
    #[test]
    fn set_id_bits_are_refused_in_every_mode_argument() {
        let watching = program(true, true, false, true).unwrap();
        let guarded = program(true, false, true, true).unwrap();
        let arch = native_arch().unwrap();
        let dir = (libc::S_IFDIR | 0o2755) as u64;
        let mut chmods = vec![(libc::SYS_fchmod, 1), (libc::SYS_fchmodat, 2)];
        chmods.push((libc::SYS_fchmodat2, 2));
        #[cfg(target_arch = "x86_64")]
        chmods.push((libc::SYS_chmod, 1));
        for (nr, i) in chmods {
            for mode in [0o4755, 0o2755, 0o6777, 0o4000, dir, 0o2000 | 1 << 32] {
                let mut a = [3, 0, 0, 0, 0, 0];
                a[i] = mode;
                assert_eq!(native(nr, a), NOTIF, "{nr} {mode:o}");
                assert_eq!(plain(nr, a), EPERM_RET, "{nr} {mode:o}");
                assert_eq!(run(&watching, arch, nr as u32, a), NOTIF);
                assert_eq!(rule_for(nr, &a).map(|r| r.action), Some(NOTIFY_EPERM));
            }
            for mode in [0o755, 0o644, 0o1777, 0o777, libc::S_IFDIR as u64 | 0o755] {
                let mut a = [3, 0, 0, 0, 0, 0];
                a[i] = mode;
                assert_eq!(native(nr, a), RET_ALLOW, "{nr} {mode:o}");
                assert!(rule_for(nr, &a).is_none());
                // Still observed with audit.files (the path-taking ones).
                let observed = if watched(nr).is_some() {
                    NOTIF
                } else {
                    RET_ALLOW
                };
                assert_eq!(run(&watching, arch, nr as u32, a), observed);
            }
        }
        let creat = libc::O_CREAT as u64 | libc::O_WRONLY as u64;
        let tmpfile = libc::O_TMPFILE as u64 | libc::O_RDWR as u64;
        let mut opens = vec![(libc::SYS_openat, 2)];
        #[cfg(target_arch = "x86_64")]
        opens.push((libc::SYS_open, 1));
        for (nr, f) in opens {
            let at = |flags: u64, mode: u64| {
                let mut a = [libc::AT_FDCWD as u64, 0, 0, 0, 0, 0];
                a[f] = flags;
                a[f + 1] = mode;
                a
            };
            for flags in [creat, creat | libc::O_EXCL as u64, tmpfile] {
                for mode in [0o4755, 0o2755, 0o6644] {
                    assert_eq!(
                        native(nr, at(flags, mode)),
                        NOTIF,
                        "{nr} {flags:o} {mode:o}"
                    );
                    assert_eq!(plain(nr, at(flags, mode)), EPERM_RET);
                    assert_eq!(run(&guarded, arch, nr as u32, at(flags, mode)), NOTIF);
                }
                assert_eq!(native(nr, at(flags, 0o755)), RET_ALLOW);
            }
            // Without O_CREAT/O_TMPFILE the mode is ignored by the kernel:
            // whatever a runtime leaves in that register, the open passes
            // (to the guard when it opens for writing).
            for (flags, guard_ret) in [
                (libc::O_RDONLY as u64, RET_ALLOW),
                (libc::O_RDWR as u64 | libc::O_TRUNC as u64, NOTIF),
            ] {
                assert_eq!(native(nr, at(flags, 0o4755)), RET_ALLOW, "{nr} {flags:o}");
                assert_eq!(run(&guarded, arch, nr as u32, at(flags, 0o4755)), guard_ret);
            }
            // An ordinary creation still goes to the guard.
            assert_eq!(run(&guarded, arch, nr as u32, at(creat, 0o644)), NOTIF);
            assert!(rule_for(nr, &at(creat, 0o644)).is_none());
        }
        let reg = libc::S_IFREG as u64;
        assert_eq!(
            native(libc::SYS_mknodat, [3, 0, reg | 0o4755, 0, 0, 0]),
            NOTIF
        );
        assert_eq!(
            native(libc::SYS_mknodat, [3, 0, reg | 0o644, 0, 0, 0]),
            RET_ALLOW
        );
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(native(libc::SYS_creat, [0, 0o2755, 0, 0, 0, 0]), NOTIF);
            assert_eq!(native(libc::SYS_creat, [0, 0o755, 0, 0, 0, 0]), RET_ALLOW);
            assert_eq!(
                native(libc::SYS_mknod, [0, reg | 0o6755, 0, 0, 0, 0]),
                NOTIF
            );
        }
        // mkdir: the kernel itself keeps only 0o1777 of the mode (the setgid
        // bit of a directory comes from its parent), so nothing to refuse.
        assert!(RULES.iter().all(|r| r.nr != libc::SYS_mkdirat));
        // openat2's mode is in memory: refused outright without the guard,
        // left to the guard (which clears the bits) with it.
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        assert_eq!(native(libc::SYS_openat2, [0; 6]), enosys);
        assert_eq!(
            run(&watching, arch, libc::SYS_openat2 as u32, [0; 6]),
            enosys
        );
        assert_eq!(run(&guarded, arch, libc::SYS_openat2 as u32, [0; 6]), NOTIF);
        assert!(rule_for(libc::SYS_openat2, &[0; 6]).is_none());
        // Without a write grant nothing the server makes outlives it: allowed.
        let no_grant = program(true, false, false, false).unwrap();
        assert_eq!(
            run(&no_grant, arch, libc::SYS_openat2 as u32, [0; 6]),
            RET_ALLOW
        );
    }

    /// IP sockets: stream and datagram, TCP or UDP, nothing else; Unix
    /// sockets of every type (socketpair included).
    #[test]
    fn ip_sockets_are_tcp_and_udp_only() {
        let sock = |d: i32, t: i32, p: i32| [d as u64, t as u64, p as u64, 0, 0, 0];
        let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        let eperm = EPERM_RET;
        let eproto = libc::SECCOMP_RET_ERRNO | libc::EPROTONOSUPPORT as u32;
        let (stream, dgram) = (libc::SOCK_STREAM, libc::SOCK_DGRAM);
        for d in [libc::AF_INET, libc::AF_INET6] {
            for (t, p) in [
                (stream, 0),
                (stream, libc::IPPROTO_TCP),
                (dgram, 0),
                (dgram, libc::IPPROTO_UDP),
                (stream | flags, libc::IPPROTO_TCP),
                (dgram | libc::SOCK_CLOEXEC, 0),
            ] {
                assert_eq!(
                    native(libc::SYS_socket, sock(d, t, p)),
                    RET_ALLOW,
                    "{d} {t:#x} {p}"
                );
            }
            for t in [
                libc::SOCK_RAW,
                libc::SOCK_RAW | flags,
                libc::SOCK_SEQPACKET,
                libc::SOCK_RDM,
                6,  // SOCK_DCCP
                10, // SOCK_PACKET
            ] {
                assert_eq!(
                    native(libc::SYS_socket, sock(d, t, 0)),
                    eperm,
                    "{d} type {t:#x}"
                );
            }
            for p in [
                libc::IPPROTO_SCTP,
                libc::IPPROTO_DCCP,
                libc::IPPROTO_UDPLITE,
                libc::IPPROTO_MPTCP,
                256, // IPPROTO_SMC
                115, // IPPROTO_L2TP
                libc::IPPROTO_ICMP,
                libc::IPPROTO_ICMPV6,
                libc::IPPROTO_RAW,
            ] {
                for t in [stream, dgram, stream | flags] {
                    assert_eq!(
                        native(libc::SYS_socket, sock(d, t, p)),
                        eproto,
                        "{d} {t} {p}"
                    );
                }
            }
            // The kernel truncates type and protocol to int: so does the filter.
            let mut hi = sock(d, stream, libc::IPPROTO_SCTP);
            hi[2] |= 1 << 32;
            assert_eq!(native(libc::SYS_socket, hi), eproto);
            let mut hi = sock(d, libc::SOCK_RAW, 0);
            hi[1] |= 0xffff_ffff_0000_0000;
            assert_eq!(native(libc::SYS_socket, hi), eperm);
            let mut lo = sock(d, stream, 0);
            lo[2] = 1 << 32 | libc::IPPROTO_TCP as u64;
            assert_eq!(native(libc::SYS_socket, lo), RET_ALLOW);
        }
        for t in [stream, dgram, libc::SOCK_SEQPACKET, stream | flags] {
            let unix = sock(libc::AF_UNIX, t, 0);
            assert_eq!(native(libc::SYS_socket, unix), RET_ALLOW, "unix {t}");
            assert_eq!(native(libc::SYS_socketpair, unix), RET_ALLOW, "unix {t}");
        }
        // Only the family is notified? No: none of the socket rules is recorded.
        assert!(RULES
            .iter()
            .filter(|r| r.nr == libc::SYS_socket)
            .all(|r| matches!(r.action, Action::Errno(_))));
    }

    /// The NUMA memory-policy family answers ENOSYS (a kernel without NUMA).
    #[test]
    fn numa_memory_policy_is_enosys() {
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        for nr in [
            libc::SYS_mbind,
            libc::SYS_set_mempolicy,
            libc::SYS_get_mempolicy,
            libc::SYS_set_mempolicy_home_node,
            libc::SYS_move_pages,
            libc::SYS_migrate_pages,
        ] {
            assert_eq!(native(nr, [0; 6]), enosys, "{nr}");
            assert_eq!(plain(nr, [u64::MAX; 6]), enosys, "{nr}");
        }
        assert_eq!(native(libc::SYS_process_madvise, [0; 6]), EPERM_RET);
    }

    /// What docs/security-model.md says the filter refuses is in the table:
    /// every call named in backquotes in its seccomp row (`io_uring_*` for
    /// the family) has a rule.
    #[test]
    fn the_table_covers_what_the_security_model_claims() {
        let doc = include_str!("../../../../docs/security-model.md");
        let row = doc
            .lines()
            .find(|l| l.starts_with("| The kernel attack and escape surface"))
            .expect("the seccomp row of docs/security-model.md");
        let claim = row.split(" | ").nth(1).expect("its mechanism column");
        let mut names = Vec::new();
        for (i, part) in claim.split('`').enumerate() {
            let syscall =
                |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '*';
            if i % 2 == 1
                && part.chars().all(syscall)
                && part.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            {
                names.push(part);
            }
        }
        assert!(names.len() > 20, "{names:?}");
        for name in names {
            let prefix = name.strip_suffix('*');
            let found = RULES.iter().any(|r| {
                let n = r.name.strip_prefix("SYS_").unwrap();
                prefix.map_or(n == name, |p| n.starts_with(p))
            });
            assert!(
                found,
                "docs/security-model.md claims `{name}` is refused; RULES has no rule for it"
            );
        }
    }

    #[test]
    fn namespace_masks_are_exactly_the_clone_new_flags() {
        assert_eq!(CLONE_NS_FLAGS, 0x7e02_0000);
        assert_eq!(UNSHARE_NS_FLAGS, 0x7e02_0080);
        // Thread and fork flags are not in the mask.
        let thread = libc::CLONE_VM
            | libc::CLONE_FS
            | libc::CLONE_FILES
            | libc::CLONE_SIGHAND
            | libc::CLONE_THREAD
            | libc::CLONE_SYSVSEM
            | libc::CLONE_SETTLS
            | libc::CLONE_PARENT_SETTID
            | libc::CLONE_CHILD_CLEARTID
            | libc::CLONE_VFORK
            | libc::CLONE_PIDFD
            | 0xff; // CSIGNAL
        assert_eq!(thread as u32 & CLONE_NS_FLAGS, 0);
    }

    #[test]
    fn no_duplicates_and_every_rule_has_a_one_line_reason() {
        let mut seen = HashSet::new();
        for r in RULES {
            assert!(
                seen.insert((r.nr, format!("{:?}", r.cond))),
                "{} twice",
                r.name
            );
            assert!(r.name.starts_with("SYS_"));
            assert!(!r.why.is_empty() && !r.why.contains('\n'), "{}", r.name);
            // An unconditional rule is the only one for its syscall.
            if r.cond.is_none() {
                assert_eq!(
                    RULES.iter().filter(|o| o.nr == r.nr).count(),
                    1,
                    "{}",
                    r.name
                );
            }
            if let Some(ArgCond::AnyBit { arg, .. } | ArgCond::Eq { arg, .. }) = r.cond {
                assert!(arg < 6);
            }
        }
        let numbers: HashSet<_> = RULES.iter().map(|r| r.nr).collect();
        let names: HashSet<_> = RULES.iter().map(|r| r.name).collect();
        assert_eq!(numbers.len(), names.len(), "two names share a number");
    }

    #[test]
    fn what_servers_need_is_not_in_the_table() {
        let mut needed = vec![
            libc::SYS_execve,
            libc::SYS_execveat,
            libc::SYS_prctl,
            libc::SYS_seccomp,
            libc::SYS_landlock_create_ruleset,
            libc::SYS_landlock_add_rule,
            libc::SYS_landlock_restrict_self,
            libc::SYS_kcmp,
            libc::SYS_memfd_create,
            libc::SYS_wait4,
            libc::SYS_futex,
            libc::SYS_mmap,
            libc::SYS_connect,
        ];
        #[cfg(target_arch = "x86_64")]
        needed.extend([libc::SYS_fork, libc::SYS_vfork]);
        for nr in needed {
            assert!(RULES.iter().all(|r| r.nr != nr), "syscall {nr} is refused");
            assert_eq!(native(nr, [0; 6]), RET_ALLOW, "syscall {nr}");
        }
    }

    #[test]
    fn program_refuses_every_rule_and_nothing_else() {
        for r in RULES {
            let nr = r.nr;
            let want = r.action.ret(true);
            match r.cond {
                None => assert_eq!(native(nr, [7; 6]), want, "{}", r.name),
                Some(ArgCond::AnyBit { arg, mask }) => {
                    let mut args = [0; 6];
                    for bit in (0..32).map(|b| 1u32 << b).filter(|b| mask & b != 0) {
                        args[arg as usize] = u64::from(bit);
                        assert_eq!(native(nr, args), want, "{} {bit:#x}", r.name);
                    }
                    args[arg as usize] = u64::from(!mask);
                    assert_eq!(native(nr, args), RET_ALLOW, "{} without", r.name);
                }
                Some(ArgCond::Eq { arg, value }) => {
                    let mut args = [0; 6];
                    args[arg as usize] = u64::from(value);
                    assert_eq!(native(nr, args), want, "{}", r.name);
                }
                Some(ArgCond::NotIn { arg, values }) => {
                    // An allowed value is not refused by this rule (a later
                    // rule of the call may still refuse it: socket types).
                    let mut args = example(r);
                    for &v in values {
                        args[arg as usize] = u64::from(v);
                        let by = rule_for(nr, &args);
                        assert!(by.is_none_or(|b| !std::ptr::eq(b, r)), "{} {v}", r.name);
                        assert_eq!(
                            native(nr, args),
                            by.map_or(RET_ALLOW, |b| b.action.ret(true)),
                            "{} {v}",
                            r.name
                        );
                    }
                    for v in [3u64, 16, 17, 40, 0x7fff_fffe] {
                        args[arg as usize] = v;
                        assert_eq!(native(nr, args), want, "{} {v}", r.name);
                    }
                }
                Some(ArgCond::MaskedNotIn { .. } | ArgCond::All(_)) => {
                    assert_eq!(native(nr, example(r)), want, "{}", r.name);
                }
            }
        }
        // Other ioctls pass.
        assert_eq!(
            native(libc::SYS_ioctl, [0, libc::FIONREAD, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            native(libc::SYS_ioctl, [0, libc::TCGETS, 0, 0, 0, 0]),
            RET_ALLOW
        );
    }

    /// The kernel truncates these arguments to 32 bits: high bits must not turn a
    /// refused value into an allowed one.
    #[test]
    fn conditions_compare_the_low_32_bits() {
        let high = 1u64 << 32;
        for cmd in [libc::TIOCSTI, libc::TIOCLINUX] {
            let args = [0, cmd | high, 0, 0, 0, 0];
            assert_eq!(native(libc::SYS_ioctl, args), NOTIF, "{cmd:#x}");
            assert_eq!(plain(libc::SYS_ioctl, args), EPERM_RET, "{cmd:#x}");
            let args = [0, cmd | 0xffff_ffff_0000_0000, 0, 0, 0, 0];
            assert_eq!(native(libc::SYS_ioctl, args), NOTIF, "{cmd:#x}");
            assert_eq!(
                rule_for(libc::SYS_ioctl, &args).map(|r| r.cond),
                Some(Some(ArgCond::Eq {
                    arg: 1,
                    value: cmd as u32
                }))
            );
        }
        let netlink = libc::AF_NETLINK as u64 | high;
        let eaf = libc::SECCOMP_RET_ERRNO | libc::EAFNOSUPPORT as u32;
        assert_eq!(native(libc::SYS_socket, arg0(netlink)), eaf);
        assert_eq!(native(libc::SYS_personality, arg0(8 | high)), NOTIF);
        assert_eq!(plain(libc::SYS_personality, arg0(8 | high)), EPERM_RET);
        let newuser = libc::CLONE_NEWUSER as u64 | high;
        assert_eq!(native(libc::SYS_clone, arg0(newuser)), NOTIF);
        assert_eq!(plain(libc::SYS_clone, arg0(newuser)), EPERM_RET);
        assert!(rule_for(libc::SYS_clone, &arg0(newuser)).is_some());
        assert!(rule_for(libc::SYS_clone, &arg0(high)).is_none());
        // Every condition loads a low word, never a high one.
        let prog = program(true, false, false, true).unwrap();
        for ins in prog.iter().filter(|i| i.code == LD_ABS && i.k >= OFF_ARGS) {
            assert_eq!((ins.k - OFF_ARGS) % 8, arg_low(0) - OFF_ARGS, "{}", ins.k);
        }
    }

    #[test]
    fn threads_and_fork_pass_namespaces_do_not() {
        let thread = (libc::CLONE_VM
            | libc::CLONE_FS
            | libc::CLONE_FILES
            | libc::CLONE_SIGHAND
            | libc::CLONE_THREAD
            | libc::CLONE_SYSVSEM
            | libc::CLONE_SETTLS
            | libc::CLONE_PARENT_SETTID
            | libc::CLONE_CHILD_CLEARTID) as u64;
        assert_eq!(native(libc::SYS_clone, arg0(thread)), RET_ALLOW);
        let fork = (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD) as u64;
        assert_eq!(native(libc::SYS_clone, arg0(fork)), RET_ALLOW);
        let spawn = (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64;
        assert_eq!(native(libc::SYS_clone, arg0(spawn)), RET_ALLOW);
        let ns = (libc::CLONE_NEWUSER | libc::SIGCHLD) as u64;
        assert_eq!(native(libc::SYS_clone, arg0(ns)), NOTIF);
        assert_eq!(plain(libc::SYS_clone, arg0(ns)), EPERM_RET);
        assert_eq!(
            native(libc::SYS_unshare, arg0(libc::CLONE_FILES as u64)),
            RET_ALLOW
        );
        let time = libc::CLONE_NEWTIME as u64;
        assert_eq!(native(libc::SYS_unshare, arg0(time)), NOTIF);
        assert_eq!(plain(libc::SYS_unshare, arg0(time)), EPERM_RET);
        // clone3 is probed by glibc for every thread: never a notification.
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        assert_eq!(native(libc::SYS_clone3, [0; 6]), enosys);
        assert_eq!(plain(libc::SYS_clone3, [0; 6]), enosys);
    }

    #[test]
    fn foreign_abi_kills_and_x32_is_enosys() {
        let prog = program(true, false, false, true).unwrap();
        // i386, x32-less x86_64 build of another arch, AArch32: killed whatever the call.
        for arch in [0x4000_0003u32, 0x4000_0028, 0xC000_003E, 0xC000_00B7] {
            if Some(arch) == native_arch() {
                continue;
            }
            for nr in [0u32, 20, 39, 172] {
                assert_eq!(run(&prog, arch, nr, [0; 6]), RET_KILL_PROCESS);
            }
        }
        assert_eq!(prog[0].code, LD_ABS);
        assert_eq!(prog[0].k, OFF_ARCH, "the arch check comes first");
        #[cfg(target_arch = "x86_64")]
        {
            let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
            // x32 getpid, x32 unshare (272) and an x32-only number (512 + n).
            for nr in [39u32, 272, 512, 547] {
                let x32 = nr | X32_SYSCALL_BIT;
                assert_eq!(run(&prog, AUDIT_ARCH_X86_64, x32, [0; 6]), enosys);
            }
        }
    }

    /// Exactly the escape and kernel-attack rules are recorded; everything else
    /// (clone3 above all, socket families) stays a plain errno return.
    #[test]
    fn recorded_refusals_are_exactly_the_escape_and_attack_surface() {
        let mut notified: Vec<&str> = RULES
            .iter()
            .filter(|r| matches!(r.action, Action::Notify(_)))
            .map(|r| r.name.strip_prefix("SYS_").unwrap())
            .collect();
        notified.dedup();
        let mut want = RECORDED.to_vec();
        want.extend(RECORDED_X86_64);
        notified.sort();
        notified.dedup();
        want.sort();
        assert_eq!(notified, want);
        for r in RULES {
            let name = r.name.strip_prefix("SYS_").unwrap();
            if !RECORDED.contains(&name) && !RECORDED_X86_64.contains(&name) {
                assert!(matches!(r.action, Action::Errno(_)), "{name}");
            }
        }
        // Every ioctl rule (TIOCSTI, TIOCLINUX, TIOCSETD) is recorded.
        assert!(RULES
            .iter()
            .filter(|r| r.nr == libc::SYS_ioctl)
            .all(|r| r.action == NOTIFY_EPERM));
        for name in [
            "clone3",
            "socket",
            "socketpair",
            "name_to_handle_at",
            "syslog",
        ] {
            assert!(!RECORDED.contains(&name), "{name}");
        }
    }

    /// With a listener, a recorded rule returns USER_NOTIF; without one, the
    /// same errno as before. The two programs differ in nothing else.
    #[test]
    fn without_a_listener_recorded_rules_return_their_errno() {
        let with = program(true, false, false, true).unwrap();
        let without = program(false, false, false, true).unwrap();
        assert_eq!(with.len(), without.len());
        for (a, b) in with.iter().zip(&without) {
            assert_eq!((a.code, a.jt, a.jf), (b.code, b.jt, b.jf));
            if a.k != b.k {
                assert_eq!((a.code, a.k), (RET, NOTIF));
                assert_eq!(b.k, EPERM_RET);
            }
        }
        assert!(without.iter().all(|i| i.code != RET || i.k != NOTIF));
        assert_eq!(plain(libc::SYS_ptrace, [0; 6]), EPERM_RET);
        assert_eq!(native(libc::SYS_ptrace, [0; 6]), NOTIF);
    }

    /// The notifier finds the same rule the filter applied, so the record's
    /// reason and errno are the rule's.
    #[test]
    fn rule_for_finds_the_rule_the_filter_applied() {
        for r in RULES.iter().filter(|r| r.when == When::Always) {
            let args = example(r);
            let found = rule_for(r.nr, &args).unwrap_or_else(|| panic!("{}", r.name));
            assert_eq!((found.name, found.why), (r.name, r.why));
            assert_eq!(native(r.nr, args), r.action.ret(true), "{}", r.name);
        }
        assert!(rule_for(libc::SYS_getpid, &[0; 6]).is_none());
        assert!(rule_for(libc::SYS_ioctl, &[0, libc::FIONREAD, 0, 0, 0, 0]).is_none());
        let unix = arg0(libc::AF_UNIX as u64);
        assert!(rule_for(libc::SYS_socket, &unix).is_none());
    }

    /// The creation guard alone: the calls that can make a name notify (an
    /// open only with O_CREAT, write access or O_TRUNC in its flags), nothing
    /// else does, and the
    /// refusals answer as before.
    #[test]
    fn guard_notifies_exactly_the_creating_calls() {
        let prog = program(true, false, true, true).unwrap();
        let at = |nr: libc::c_long, args| run(&prog, native_arch().unwrap(), nr as u32, args);
        let creat = u64::from(GUARDED_OPEN_FLAGS);
        for w in WATCHED {
            for args in [[0; 6], [u64::MAX; 6], [7, 0x41, 2, 3, 4, 5]] {
                let want = match (creates(w), w.op, w.flags) {
                    // A set-id mode: refused (and recorded) first.
                    _ if rule_for(w.nr, &args).is_some() => NOTIF,
                    (false, ..) => RET_ALLOW,
                    (true, FileOp::Open, Flags::Arg(i)) if args[usize::from(i)] & creat == 0 => {
                        RET_ALLOW
                    }
                    (true, ..) => NOTIF,
                };
                assert_eq!(at(w.nr, args), want, "{} {args:?}", w.name);
            }
        }
        let mut a = [0u64; 6];
        a[2] = (libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC) as u64;
        assert_eq!(at(libc::SYS_openat, a), NOTIF);
        for flags in [
            libc::O_RDWR,
            libc::O_WRONLY,
            libc::O_TRUNC,
            libc::O_RDWR | libc::O_TRUNC,
        ] {
            a[2] = (flags | libc::O_CLOEXEC) as u64;
            assert_eq!(at(libc::SYS_openat, a), NOTIF, "{flags:#o}");
        }
        a[2] = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_DIRECTORY | libc::O_NONBLOCK) as u64;
        assert_eq!(at(libc::SYS_openat, a), RET_ALLOW);
        for nr in [
            libc::SYS_mkdirat,
            libc::SYS_renameat2,
            libc::SYS_symlinkat,
            libc::SYS_linkat,
            libc::SYS_mknodat,
            libc::SYS_openat2,
        ] {
            assert_eq!(at(nr, [0; 6]), NOTIF, "syscall {nr}");
        }
        for nr in [
            libc::SYS_unlinkat,
            libc::SYS_execve,
            libc::SYS_read,
            libc::SYS_fchmodat,
        ] {
            assert_eq!(at(nr, [0; 6]), RET_ALLOW, "syscall {nr}");
        }
        for r in RULES.iter().filter(|r| r.cond.is_none()) {
            let want = match r.when {
                When::Always => r.action.ret(true),
                // Not compiled with the guard: openat2 notifies for it.
                When::Unguarded => NOTIF,
            };
            assert_eq!(at(r.nr, [7; 6]), want, "{}", r.name);
        }
        // Without a listener there is nothing to notify.
        assert_eq!(
            program(false, false, true, true).unwrap().len(),
            program(false, false, false, true).unwrap().len()
        );
    }

    /// With `audit.files`, exactly the watched calls notify (whatever their
    /// arguments); refused calls keep their answers; everything else is
    /// allowed. Without it, or without a listener, watched calls are plain
    /// allowed calls.
    #[test]
    fn watched_calls_notify_only_when_files_are_audited() {
        let watching = program(true, true, false, true).unwrap();
        let at = |prog: &[libc::sock_filter], nr: libc::c_long, args| {
            run(prog, native_arch().unwrap(), nr as u32, args)
        };
        for w in WATCHED {
            for args in [[0; 6], [u64::MAX; 6], [7, 0x41, 2, 3, 4, 5]] {
                // Refused on these arguments: the rule's answer, as without
                // watching. Only openat2 is refused outright (without the guard).
                let refused = RULES
                    .iter()
                    .find(|r| r.nr == w.nr && r.cond.is_none_or(|c| c.holds(&args)));
                let (watched, native_, plain_) = match refused {
                    Some(r) => (r.action.ret(true), r.action.ret(true), r.action.ret(false)),
                    None => (NOTIF, RET_ALLOW, RET_ALLOW),
                };
                assert_eq!(at(&watching, w.nr, args), watched, "{}", w.name);
                assert_eq!(native(w.nr, args), native_, "{}", w.name);
                assert_eq!(plain(w.nr, args), plain_, "{}", w.name);
            }
        }
        assert_eq!(
            program(false, true, false, true).unwrap().len(),
            program(false, false, false, true).unwrap().len()
        );
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_close,
            libc::SYS_getpid,
            libc::SYS_newfstatat,
            libc::SYS_statx,
            libc::SYS_faccessat,
            libc::SYS_readlinkat,
            libc::SYS_getdents64,
        ] {
            assert_eq!(at(&watching, nr, [0; 6]), RET_ALLOW, "syscall {nr}");
        }
        // Every refusal answers as before.
        for r in RULES {
            let args = match r.when {
                When::Always => example(r),
                When::Unguarded => [7; 6],
            };
            assert_eq!(at(&watching, r.nr, args), native(r.nr, args), "{}", r.name);
        }
        assert!(watching.len() < libc::BPF_MAXINSNS as usize);
    }

    /// The table's argument layouts, checked against the calls' signatures.
    #[test]
    fn watched_table_is_consistent() {
        let mut names = HashSet::new();
        for w in WATCHED {
            assert!(names.insert(w.nr), "{} twice", w.name);
            // A watched call the notifier continues: one that is also
            // refused may be so only on some arguments, which the notifier
            // recognises (rule_for, before it continues anything), or, as a
            // whole, only in the filter without the guard and as a plain
            // errno that never reaches the notifier. Otherwise observing it
            // would let it through.
            for r in RULES.iter().filter(|r| r.nr == w.nr) {
                match r.when {
                    When::Always => assert!(
                        r.cond.is_some(),
                        "{} is both watched and refused outright",
                        w.name
                    ),
                    When::Unguarded => {
                        assert!(matches!(r.action, Action::Errno(_)), "{}", w.name)
                    }
                }
            }
            assert!(watched(w.nr).is_some_and(|x| x.name == w.name));
            for p in w.paths.iter().flatten() {
                assert!(p.path < 6 && p.dirfd.is_none_or(|d| d < 6), "{}", w.name);
                assert_ne!(Some(p.path), p.dirfd, "{}", w.name);
            }
            assert!(w.paths[0].is_some(), "{}", w.name);
            let two = matches!(w.op, FileOp::Rename | FileOp::Link);
            assert_eq!(w.paths[1].is_some(), two, "{}", w.name);
            assert_eq!(w.text.is_some(), w.op == FileOp::Symlink, "{}", w.name);
        }
        let get = |n: &str| WATCHED.iter().find(|w| w.name == n).unwrap();
        let openat = get("SYS_openat");
        assert_eq!(
            openat.paths[0],
            Some(PathArg {
                dirfd: Some(0),
                path: 1
            })
        );
        assert_eq!(openat.flags, Flags::Arg(2));
        assert_eq!(get("SYS_openat2").flags, Flags::OpenHow(2));
        assert_eq!(get("SYS_execveat").flags, Flags::Arg(4));
        assert_eq!(
            get("SYS_linkat").paths[1],
            Some(PathArg {
                dirfd: Some(2),
                path: 3
            })
        );
        assert_eq!(
            get("SYS_symlinkat").paths[0],
            Some(PathArg {
                dirfd: Some(1),
                path: 2
            })
        );
        assert_eq!(get("SYS_unlinkat").flags, Flags::Arg(2));
        assert_eq!(get("SYS_fchownat").flags, Flags::Arg(4));
        // At least open, create, unlink, rename and exec, on every architecture.
        for op in [
            FileOp::Open,
            FileOp::Exec,
            FileOp::Unlink,
            FileOp::Rename,
            FileOp::Mkdir,
        ] {
            assert!(WATCHED.iter().any(|w| w.op == op), "{op:?}");
        }
        #[cfg(target_arch = "x86_64")]
        for n in [
            "SYS_open",
            "SYS_creat",
            "SYS_unlink",
            "SYS_rename",
            "SYS_rmdir",
        ] {
            get(n);
        }
    }

    #[test]
    fn program_is_small_and_ends_in_allow() {
        let prog = program(true, false, false, true).unwrap();
        assert!(prog.len() < 512, "{}", prog.len());
        assert_eq!(prog.last().map(|i| (i.code, i.k)), Some((RET, RET_ALLOW)));
        assert_eq!(native(libc::SYS_getpid, [0; 6]), RET_ALLOW);
        assert_eq!(native(100_000, [0; 6]), RET_ALLOW);
    }
}
