//! The deny list: one row per refused call (or call and argument
//! condition), with its action, the filters it is compiled into and its
//! reason; and the lookup the notifier uses to tell which row refused a
//! notified call ([`rule_for`]).

use super::abi;

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
    /// Only with write grants and without the creation guard ([`program`](super::bpf::program)'s
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
    /// The number (the native filter's; Linux only: elsewhere the table is
    /// only the Docker profile's, by name).
    #[cfg(target_os = "linux")]
    pub nr: libc::c_long,
    pub action: Action,
    /// `None`: every call is refused.
    pub cond: Option<ArgCond>,
    /// (Read by the native filter only: the Docker profile has every rule.)
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub when: When,
    /// One line: what the call reaches and why the server does not need it.
    /// Documentation kept as data (checked by the tests; for `wardenctl status`).
    #[allow(dead_code)]
    pub why: &'static str,
}

/// Syscall numbers: libc's, plus the few it does not have yet.
#[cfg(target_os = "linux")]
#[allow(non_upper_case_globals)]
pub(super) mod nr {
    pub use libc::*;
    /// Linux 6.15; numbers from 424 on are the same on every architecture.
    pub const SYS_open_tree_attr: libc::c_long = 467;
}

pub(super) const EPERM: Action = Action::Errno(abi::EPERM);
pub(super) const NOTIFY_EPERM: Action = Action::Notify(abi::EPERM);
pub(super) const ENOSYS: Action = Action::Errno(abi::ENOSYS);
pub(super) const EAFNOSUPPORT: Action = Action::Errno(abi::EAFNOSUPPORT);
pub(super) const EPROTONOSUPPORT: Action = Action::Errno(abi::EPROTONOSUPPORT);
pub(super) const NOTIFY_EPROTONOSUPPORT: Action = Action::Notify(abi::EPROTONOSUPPORT);

/// Namespace flags `clone` accepts. `CLONE_NEWTIME` (0x80) is not among them: in
/// `clone`'s flags those low 8 bits are the exit signal (`CSIGNAL`).
pub(crate) const CLONE_NS_FLAGS: u32 = (abi::CLONE_NEWNS
    | abi::CLONE_NEWCGROUP
    | abi::CLONE_NEWUTS
    | abi::CLONE_NEWIPC
    | abi::CLONE_NEWUSER
    | abi::CLONE_NEWPID
    | abi::CLONE_NEWNET) as u32;
/// Namespace flags `unshare` accepts.
pub(crate) const UNSHARE_NS_FLAGS: u32 = CLONE_NS_FLAGS | abi::CLONE_NEWTIME as u32;

/// Socket families a server may create.
pub(super) const FAMILIES: &[u32] = &[
    abi::AF_UNIX as u32,
    abi::AF_INET as u32,
    abi::AF_INET6 as u32,
];
/// `personality(PER_LINUX)` (0, the default) and `personality(0xffffffff)` (query).
pub(super) const PERSONALITIES: &[u32] = &[0, 0xffff_ffff];

/// `S_ISUID | S_ISGID`: the bits no file the server makes or changes may carry.
pub(crate) const SET_ID: u32 = abi::S_ISUID | abi::S_ISGID;
/// The open flags with which the kernel uses the mode argument (`WILL_CREATE`:
/// `O_CREAT`, and `__O_TMPFILE`, the bit of `O_TMPFILE` that is not `O_DIRECTORY`).
pub(super) const OPEN_CREATES: u32 = (abi::O_CREAT | (abi::O_TMPFILE & !abi::O_DIRECTORY)) as u32;
/// Not `AF_UNIX`: after the family rule, an IP socket.
pub(super) const IP: ArgCond = ArgCond::NotIn {
    arg: 0,
    values: &[abi::AF_UNIX as u32],
};
/// The IP socket types a server may create (`type & 0xf`, `SOCK_TYPE_MASK`).
pub(super) const IP_TYPES: &[u32] = &[abi::SOCK_STREAM as u32, abi::SOCK_DGRAM as u32];
/// The IP protocols a server may ask for: the default one of the type, TCP, UDP.
pub(super) const IP_PROTOCOLS: &[u32] = &[0, abi::IPPROTO_TCP as u32, abi::IPPROTO_UDP as u32];
/// `SOCK_TYPE_MASK`.
pub(super) const SOCK_TYPE_MASK: u32 = 0xf;

/// `mode & (S_ISUID|S_ISGID)` in argument `arg`.
pub(super) const fn set_id(arg: u8) -> ArgCond {
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
            #[cfg(target_os = "linux")]
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
    rule!(SYS_ioctl, NOTIFY_EPERM, Some(ArgCond::Eq { arg: 1, value: abi::TIOCSTI as u32 }),
        "TIOCSTI pushes input into a terminal (CVE-2017-5226, CVE-2016-7545)"),
    rule!(SYS_ioctl, NOTIFY_EPERM, Some(ArgCond::Eq { arg: 1, value: abi::TIOCLINUX as u32 }),
        "TIOCLINUX pastes the console selection as input, like TIOCSTI (CVE-2023-1076 class)"),
    rule!(SYS_ioctl, NOTIFY_EPERM, Some(ArgCond::Eq { arg: 1, value: abi::TIOCSETD as u32 }),
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
    // "ping" sockets (the sandbox's network has no route for them anyway). The
    // types are recorded (raw sockets: nothing a server needs; transparent
    // egress says so in the record), as are ICMP ping sockets; the other
    // protocols are a plain errno, not recorded: Go probes MPTCP on its own
    // and falls back to TCP.
    rule!(SYS_socket, NOTIFY_EPERM, Some(ArgCond::All(&[IP, ArgCond::MaskedNotIn { arg: 1, mask: SOCK_TYPE_MASK, values: IP_TYPES }])),
        "IP socket types other than stream and datagram: raw (CVE-2017-17712), SOCK_SEQPACKET (SCTP), SOCK_DCCP (CVE-2017-6074), SOCK_PACKET"),
    rule!(SYS_socket, NOTIFY_EPROTONOSUPPORT, Some(ArgCond::All(&[IP, ArgCond::Eq { arg: 2, value: abi::IPPROTO_ICMP as u32 }])),
        "ICMP ping sockets (CVE-2017-2671; no route for them): recorded, like raw sockets"),
    rule!(SYS_socket, NOTIFY_EPROTONOSUPPORT, Some(ArgCond::All(&[IP, ArgCond::Eq { arg: 2, value: abi::IPPROTO_ICMPV6 as u32 }])),
        "ICMPv6 ping sockets: recorded, like raw sockets"),
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

#[cfg(target_os = "linux")]
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
}

impl Action {
    /// The errno the caller gets, whether or not the call was recorded.
    pub(crate) fn errno(self) -> i32 {
        match self {
            Action::Errno(e) | Action::Notify(e) => e,
        }
    }
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // the native filter's
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
#[cfg(target_os = "linux")]
pub(crate) fn rule_for(nr: libc::c_long, args: &[u64; 6]) -> Option<&'static Rule> {
    RULES
        .iter()
        .filter(|r| r.nr == nr && r.when == When::Always)
        .find(|r| r.cond.is_none_or(|c| c.holds(args)))
}
