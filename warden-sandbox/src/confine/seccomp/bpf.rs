//! The compiler from the tables to a classic BPF program ([`program`]), and
//! the architecture checks at its head.

use super::table::{ArgCond, Rule, When, ENOSYS, RULES};
use super::watched::{creates, watched, FileOp, Flags, GUARDED_OPEN_FLAGS, WATCHED};
use crate::control::Failure;

// <linux/audit.h>: not in libc.
pub(super) const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
pub(super) const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;
/// `__X32_SYSCALL_BIT`.
pub(super) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

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
pub(super) const OFF_NR: u32 = 0;
pub(super) const OFF_ARCH: u32 = 4;
pub(super) const OFF_ARGS: u32 = 16;

/// Offset of the low 32 bits of argument `arg`.
pub(super) const fn arg_low(arg: u8) -> u32 {
    OFF_ARGS + 8 * arg as u32 + if cfg!(target_endian = "big") { 4 } else { 0 }
}

/// Offset of the high 32 bits of argument `arg`.
pub(super) const fn arg_high(arg: u8) -> u32 {
    OFF_ARGS + 8 * arg as u32 + if cfg!(target_endian = "big") { 0 } else { 4 }
}

pub(super) const LD_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
pub(super) const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
pub(super) const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
pub(super) const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
pub(super) const ALU_AND: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;

pub(crate) const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;

/// The `sendmsg` flags the server child passes the seccomp listener with
/// (`init::exec`), the one `sendmsg` the transparent-egress filter does not
/// notify: nobody could answer it before the listener arrives. A server may
/// use the same flags; its datagram is then not looked at, only refused by
/// the kernel (no route out), without a record.
pub(crate) const LISTENER_SEND_FLAGS: libc::c_int = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
pub(crate) const RET_KILL_PROCESS: u32 = libc::SECCOMP_RET_KILL_PROCESS;

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
/// and someone answers the listener; otherwise [`Action::Notify`](super::table::Action::Notify) rules return
/// their errno directly. `watch_files` (only with `notify`): the [`WATCHED`]
/// calls notify too; otherwise they are allowed without a round trip.
/// `guard` (only with `notify`): the calls that can create a name notify
/// ([`creates`]; `open`/`openat` only with `O_CREAT`), for the creation guard.
/// `writes`: the sandbox has write grants, so the [`When::Unguarded`] rules
/// apply when the guard does not run.
#[cfg(test)]
pub(crate) fn program(
    notify: bool,
    watch_files: bool,
    guard: bool,
    writes: bool,
) -> Result<Vec<libc::sock_filter>, Failure> {
    program_with(notify, watch_files, guard, writes, false)
}

/// [`program`], and with `connect` (only with `notify`) every `connect(2)`
/// notifies, for transparent egress (`supervise::connect`), as do
/// `sendmsg`, `sendmmsg` and `sendto` with a destination address.
pub(crate) fn program_with(
    notify: bool,
    watch_files: bool,
    guard: bool,
    writes: bool,
    connect: bool,
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
    // has returned; no rule names connect).
    if notify && connect {
        let number = |nr: libc::c_long| {
            u32::try_from(nr).map_err(|_| Failure::msg("seccomp", format!("bad number {nr}")))
        };
        // connect, and the datagram sends that name their own destination
        // (so a UDP datagram to an outside address is refused with a record,
        // not by the kernel's missing route alone): sendmmsg and sendmsg
        // (their addresses are in memory; sendmsg not with exactly
        // LISTENER_SEND_FLAGS, how the server child passes this filter's
        // listener out after installing it: notified, it would wait for a
        // listener nobody holds yet), sendto with a destination pointer
        // (argument 4 not NULL: either half; with NULL it is a plain send).
        for nr in [libc::SYS_connect, libc::SYS_sendmmsg] {
            prog.push(jump(JEQ, number(nr)?, 0, 1)?);
            prog.push(stmt(RET, libc::SECCOMP_RET_USER_NOTIF));
        }
        prog.push(jump(JEQ, number(libc::SYS_sendmsg)?, 0, 4)?);
        prog.push(stmt(LD_ABS, arg_low(2)));
        prog.push(jump(JEQ, LISTENER_SEND_FLAGS as u32, 0, 1)?);
        prog.push(stmt(RET, RET_ALLOW));
        prog.push(stmt(RET, libc::SECCOMP_RET_USER_NOTIF));
        prog.push(jump(JEQ, number(libc::SYS_sendto)?, 0, 6)?);
        prog.push(stmt(LD_ABS, arg_low(4)));
        prog.push(jump(JEQ, 0, 0, 3)?);
        prog.push(stmt(LD_ABS, arg_high(4)));
        prog.push(jump(JEQ, 0, 0, 1)?);
        prog.push(stmt(RET, RET_ALLOW));
        prog.push(stmt(RET, libc::SECCOMP_RET_USER_NOTIF));
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
