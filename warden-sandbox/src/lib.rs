//! Everything Linux-specific and `unsafe` in Warden.
//!
//! - [`spec`]: the compiled sandbox description the daemon hands to the sandbox
//!   init, with the [`spec::Layers`] it applies.
//! - [`kernel`]: what the kernel offers, probed once ([`kernel::Kernel::probe`],
//!   by the daemon at start), and the layers a spec gets from it.
//! - [`launch`]: the daemon side: start the sandbox init, wait for it, signal it.
//! - [`init`]: the sandbox side: a single-threaded re-exec of the daemon binary that
//!   builds namespaces and the root filesystem, then runs the server as its child.
//! - [`fdpass`]: receiving SCM_RIGHTS fds (the control socket; the daemon's side
//!   of the shim's stdio preamble, whose sender is safe `nix` in `warden-client`).
//! - [`notify`]: the seccomp user-notification listener that answers (and
//!   reports) the refusals worth an audit record, and lets the observed
//!   file-access calls through.
//! - [`files`]: file-access auditing: reading what an observed call names
//!   and judging it against the sandbox's layout.
//! - [`protect`]: the names inside a write grant the host runs or trusts (`.git`,
//!   shell start-up files, `.vscode`...), kept read-only by `mounts`.
//!
//! Private helpers: `proto` (the typed daemon ↔ init control protocol), `mounts`
//! (the sandbox root filesystem), `landlock` (the Landlock ruleset mirroring the
//! grants), `confine` (Landlock and seccomp as the layers say), `seccomp` (the
//! syscall filter, a table compiled to BPF), `queue` (the bounded queues of refused calls and file accesses,
//! allocated as they fill), `readiness` (waiting for a
//! sandbox's fds on a tokio event loop) and `sys` (raw kernel calls not
//! wrapped by nix).
#![deny(unsafe_code)]

mod confine;
mod control;
pub mod init;
pub mod kernel;
pub mod launch;
pub mod protected;
mod rootfs;
pub mod spec;
pub mod supervise;
// The kernel boundary: with `init::exec`, the only module that may hold
// `unsafe` (see its docs).
#[allow(unsafe_code)]
mod sys;

pub use sys::fdpass;

pub use init::{entry_if_requested as init_entry_if_requested, INIT_ARG};
pub use kernel::Kernel;
pub use launch::{ExitOutcome, Sandbox, SandboxError, Spawned};
pub use supervise::{FileAccess, FileAccesses, RefusedCall, RefusedCalls, Wake, WakeWaiter};
