//! The filter run through an interpreter of classic BPF, against the tables.

use super::bpf::*;
use super::table::*;
use super::watched::*;
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
    // Raw (and other non-stream, non-datagram) IP socket types only.
    "socket",
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
            ArgCond::Eq { arg: a, value } if a == arg => out.extend([value, value.wrapping_add(1)]),
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
        assert_eq!(r.len(), if name == "socket" { 5 } else { 1 });
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
            // Recorded: the notifier answers EPERM.
            assert_eq!(
                native(libc::SYS_socket, sock(d, t, 0)),
                libc::SECCOMP_RET_USER_NOTIF,
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
        // ICMP ping sockets: recorded, the notifier answers EPROTONOSUPPORT.
        for p in [libc::IPPROTO_ICMP, libc::IPPROTO_ICMPV6] {
            for t in [stream, dgram, dgram | flags] {
                assert_eq!(
                    native(libc::SYS_socket, sock(d, t, p)),
                    libc::SECCOMP_RET_USER_NOTIF,
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
        assert_eq!(native(libc::SYS_socket, hi), libc::SECCOMP_RET_USER_NOTIF);
        let mut lo = sock(d, stream, 0);
        lo[2] = 1 << 32 | libc::IPPROTO_TCP as u64;
        assert_eq!(native(libc::SYS_socket, lo), RET_ALLOW);
    }
    for t in [stream, dgram, libc::SOCK_SEQPACKET, stream | flags] {
        let unix = sock(libc::AF_UNIX, t, 0);
        assert_eq!(native(libc::SYS_socket, unix), RET_ALLOW, "unix {t}");
        assert_eq!(native(libc::SYS_socketpair, unix), RET_ALLOW, "unix {t}");
    }
    // Of the socket rules only the types (raw sockets) and ICMP ping
    // sockets are recorded: never the families or other protocols, which
    // libraries probe on their own (Go and MPTCP).
    let recorded: Vec<&str> = RULES
        .iter()
        .filter(|r| r.nr == libc::SYS_socket && matches!(r.action, Action::Notify(_)))
        .map(|r| r.why)
        .collect();
    assert_eq!(recorded.len(), 3, "{recorded:?}");
    assert!(recorded[0].starts_with("IP socket types"), "{recorded:?}");
    assert!(
        recorded[1..].iter().all(|w| w.contains("ping")),
        "{recorded:?}"
    );
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
    for name in ["clone3", "socketpair", "name_to_handle_at", "syslog"] {
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
            let eproto = libc::SECCOMP_RET_ERRNO | libc::EPROTONOSUPPORT as u32;
            assert!(b.k == EPERM_RET || b.k == eproto, "{:#x}", b.k);
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

#[test]
fn connect_notifies_only_for_transparent_egress() {
    let arch = native_arch().unwrap();
    let nr = libc::SYS_connect as u32;
    let plain = program(true, true, true, true).unwrap();
    assert_eq!(run(&plain, arch, nr, [3, 0, 16, 0, 0, 0]), RET_ALLOW);
    for (watch, guard) in [(false, false), (true, false), (false, true)] {
        let with = program_with(true, watch, guard, true, true).unwrap();
        assert_eq!(
            run(&with, arch, nr, [3, 0, 16, 0, 0, 0]),
            libc::SECCOMP_RET_USER_NOTIF,
            "watch {watch} guard {guard}"
        );
        // Nothing else changes: a plain read is still allowed, a refused
        // call still refused.
        assert_eq!(run(&with, arch, libc::SYS_read as u32, [0; 6]), RET_ALLOW);
        assert_eq!(
            run(&with, arch, libc::SYS_ptrace as u32, [0; 6]),
            run(
                &program(true, watch, guard, true).unwrap(),
                arch,
                libc::SYS_ptrace as u32,
                [0; 6]
            )
        );
    }
    // Without a listener there is nobody to hand connections to.
    let no_notify = program_with(false, false, false, true, true).unwrap();
    assert_eq!(run(&no_notify, arch, nr, [3, 0, 16, 0, 0, 0]), RET_ALLOW);
}

#[test]
fn datagram_sends_with_a_destination_notify_only_for_transparent_egress() {
    let arch = native_arch().unwrap();
    let (sendto, sendmsg, sendmmsg) = (
        libc::SYS_sendto as u32,
        libc::SYS_sendmsg as u32,
        libc::SYS_sendmmsg as u32,
    );
    let notif = libc::SECCOMP_RET_USER_NOTIF;
    for (watch, guard) in [(false, false), (true, false), (false, true)] {
        let with = program_with(true, watch, guard, true, true).unwrap();
        // sendto(fd, buf, len, flags, dest, addrlen): a plain send (NULL
        // destination) is allowed; any non-NULL pointer notifies, whichever
        // half of it is set.
        assert_eq!(run(&with, arch, sendto, [3, 0x1000, 5, 0, 0, 0]), RET_ALLOW);
        for dest in [0x7ffd_1234_5678u64, 0x1_0000_0000, 0x10] {
            assert_eq!(
                run(&with, arch, sendto, [3, 0x1000, 5, 0, dest, 16]),
                notif,
                "{dest:#x}"
            );
        }
        assert_eq!(run(&with, arch, sendmsg, [3, 0x1000, 0, 0, 0, 0]), notif);
        assert_eq!(
            run(
                &with,
                arch,
                sendmsg,
                [3, 0x1000, libc::MSG_DONTWAIT as u64, 0, 0, 0]
            ),
            notif
        );
        // The server child's pass of the listener: not notified.
        let pass = super::bpf::LISTENER_SEND_FLAGS as u64;
        assert_eq!(
            run(&with, arch, sendmsg, [3, 0x1000, pass, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(run(&with, arch, sendmmsg, [3, 0x1000, 2, 0, 0, 0]), notif);
        // The rest of the filter as without: reads, writes and recvs allowed.
        for nr in [libc::SYS_write, libc::SYS_recvfrom, libc::SYS_recvmsg] {
            assert_eq!(
                run(&with, arch, nr as u32, [3, 0, 0, 0, 0x1000, 0]),
                RET_ALLOW
            );
        }
    }
    let plain = program(true, true, true, true).unwrap();
    for nr in [sendto, sendmsg, sendmmsg] {
        assert_eq!(
            run(&plain, arch, nr, [3, 0x1000, 5, 0, 0x7ffd_0000, 16]),
            RET_ALLOW
        );
    }
}
