//! What runs on the daemon's threads to watch a running sandbox: the seccomp
//! listener's notifier pool, the file-access audit, and the creation guard.
//! Nothing here runs inside the sandbox (compare [`crate::init`]).
//!
//! | module | runs on | what |
//! | --- | --- | --- |
//! | [`notify`] | the notifier pool (`warden-seccomp-notify` threads) | answers every sandbox's listener: refused calls, captures, the guard |
//! | `capture` | the notifier pool, while the caller waits | reads what an observed call names |
//! | `memory` | the notifier pool | `process_vm_readv` of the caller's path arguments |
//! | `guard` | the notifier pool | performs or refuses the calls that create in write grants |
//! | [`hold`] | the notifier pool, then whoever answers | held opens: a denied open kept waiting for a person's answer (approvals), completed by the daemon |
//! | [`classify`] | the consumer (the daemon's recorder, on tokio's blocking pool) | judges each captured access |
//! | `resolve` | the consumer and the guard | paths in the sandbox's own view |
//! | `layout` | the consumer and the guard | what the sandbox's layout says about an access |
//! | [`mountinfo`] | the notifier (once per sandbox) and the daemon | mount tables |
//! | `queue` | both ends | the bounded queues between notifier and consumer |
//!
//! # Mechanism
//!
//! File-access auditing (`audit.files`: which paths the server opens,
//! creates, removes, renames, links or executes, and which of those the
//! sandbox denies; docs/architecture.md has the measurements behind the
//! choice): the path-taking calls of `confine::seccomp::WATCHED`
//! return `SECCOMP_RET_USER_NOTIF`, so each one waits in the kernel while the
//! notifier pool ([`notify`]) runs the capture:
//!
//! 1. read the path arguments from the caller's memory (`process_vm_readv`),
//!    and for a relative path the directory it is relative to
//!    (`/proc/<pid>/cwd` or `/proc/<pid>/fd/<dirfd>`, from a cached
//!    `/proc/<pid>` fd);
//! 2. check with `SECCOMP_IOCTL_NOTIF_ID_VALID` that the call is still
//!    waiting: only then is it certain that the pid still named the caller
//!    while its memory was read (a recycled pid could otherwise have fed us
//!    another process's memory), else the capture is dropped;
//! 3. answer `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the kernel runs the call as
//!    if nothing had stopped it, with every check (mount namespace, read-only
//!    binds, Landlock) still its own.
//!
//! Classification happens afterwards, off the server's path, on the
//! consumer's thread ([`FileAccesses::next_classified`]): the path is
//! resolved in the sandbox's own view (its root, opened once through
//! `/proc/<pid>/root`, walked without ever following a symlink out of it),
//! placed on one of the sandbox's mounts (its mount table, read once from
//! `/proc/<pid>/mountinfo`, matched by mount id), and judged by the layout: a
//! path that exists on the host but not in the sandbox's view (outside every
//! grant) is a denial (`ENOENT`), as is a write, create, removal or rename on
//! a read-only mount (`EROFS`: read grants, protected paths, the runtime, the
//! sandbox's skeleton), an exec on a no-exec mount (`EACCES`), and listing a
//! directory of the sandbox's skeleton (`/`, `/home`...: the host's entries
//! are hidden). Everything else is allowed (including what fails for its own
//! reasons, e.g. a file missing from a grant, or missing on the host too).
//!
//! # Invariants
//!
//! - Observing never decides anything: the answer to an observed call is
//!   always "continue", the same for every call whatever the capture found,
//!   and is sent even when the capture failed. Only the creation guard
//!   answers otherwise, for the calls that create (`guard`).
//! - Nothing here waits for the consumer: the queues are bounded, a full
//!   one counts the event as lost.
//! - A server that rewrites the path between our read and the kernel's
//!   (another thread racing the call) can make a record wrong, never an
//!   access wider: the kernel reads the path again and checks what it reads.
//!
//! # Known differences
//!
//! The outcome is a prediction from the sandbox's layout: the kernel's own
//! result is not visible to a seccomp supervisor.

pub(crate) mod capture;
pub mod classify;
pub mod connect;
pub(crate) mod guard;
pub mod hold;
pub(crate) mod layout;
pub(crate) mod memory;
pub mod mountinfo;
pub mod notify;
pub(crate) mod queue;
pub(crate) mod resolve;

pub use capture::Queued;
pub use classify::{Action, FileAccess, FileAccesses, BATCH_INTERVAL};
pub use connect::{Connector, HeldConnect, Unreachable, COPIED_OPTIONS};
pub use hold::{FileHolder, HeldOp, HeldOpen};
pub use layout::AccessVerdict;
pub use notify::{RefusedCall, RefusedCalls, Wake, WakeWaiter};
