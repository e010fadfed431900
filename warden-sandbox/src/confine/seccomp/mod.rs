//! The server's seccomp-BPF filter: default allow, with a deny list of the
//! kernel-attack and escape surface (DESIGN.md §5 "Hardening").
//!
//! The rules are data: [`RULES`](table::RULES) is a table of (syscall, action, optional argument
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
//! [`Action::Notify`](table::Action::Notify): compiled to `SECCOMP_RET_USER_NOTIF`, so the call stops
//! in the kernel until the sandbox's notifier ([`crate::supervise::notify`]) has queued an
//! audit event and answered with the rule's errno. The server sees the same
//! errno as with `SECCOMP_RET_ERRNO`; only the refused call pays the round
//! trip, allowed calls never reach the notifier. Without a listener (a kernel
//! without user notification), [`program_with`] compiles them to plain errno
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
//! A syscall may be both refused on some arguments and watched ([`WATCHED`](watched::WATCHED):
//! `chmod` with a set-id bit is refused, every other `chmod` observed): its
//! block then falls through to the watched calls instead of allowing, and the
//! notifier looks for a refusing rule ([`rule_for`], on the same argument
//! snapshot the filter saw) before it treats a notification as observed.

mod abi;
#[cfg(target_os = "linux")]
mod bpf;
pub mod docker;
mod table;
#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests;
#[cfg(target_os = "linux")]
mod watched;

#[cfg(target_os = "linux")]
pub(crate) use bpf::{program_with, LISTENER_SEND_FLAGS};
#[cfg(target_os = "linux")]
pub(crate) use table::{rule_for, SET_ID};
#[cfg(test)]
#[cfg(target_os = "linux")]
pub(crate) use watched::WATCHED;
#[cfg(target_os = "linux")]
pub(crate) use watched::{creates, watched, FileOp, Flags, PathArg, Watched};
