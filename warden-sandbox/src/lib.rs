//! Warden's Linux sandbox: what runs inside it (the sandbox init and the
//! server's last steps before exec), what the daemon's threads run to watch
//! it, and the kernel boundary both use. All the `unsafe` of Warden's
//! shipped crates is here, in two modules.
//!
//! # Layout
//!
//! Shared by both sides:
//! - [`spec`]: the compiled sandbox description the daemon hands to the
//!   sandbox init, with the [`spec::Layers`] it applies.
//! - [`kernel`]: what the kernel offers, probed once ([`Kernel::probe`], by
//!   the daemon at start), and the layers a spec gets from it.
//! - [`protected`]: the names inside a write grant the host runs or trusts
//!   (`.git`, shell start-up files, `.vscode`...): the table and the plan
//!   of both halves (bound read-only in `rootfs`, guarded in [`supervise`]).
//! - `control`: the typed daemon ↔ init control protocol.
//!
//! In the sandbox's processes (the single-threaded re-exec of the daemon's
//! binary, never the daemon):
//! - [`init`]: the launcher, PID 1 and the server child ([`init_entry_if_requested`]
//!   dispatches to it).
//! - `rootfs`: PID 1 builds the root filesystem (and binds the protected names).
//! - `confine`: Landlock and the seccomp filter (its tables and BPF compiler),
//!   prepared in PID 1 and applied by the server child.
//!
//! In the daemon:
//! - [`launch`]: start the sandbox init ([`Sandbox::spawn`]), wait for it,
//!   signal it.
//! - [`supervise`]: what runs on the daemon's threads: the seccomp listener's
//!   notifier pool, file-access capture and classification, the creation
//!   guard, and their queues.
//!
//! The kernel boundary:
//! - `sys`: the raw calls `nix` does not wrap safely (new mount API, openat2,
//!   statx, pidfd, capabilities, seccomp and its listener's ioctls, the
//!   Landlock version call, receiving `SCM_RIGHTS`, registering fds with
//!   tokio), as safe functions; [`fdpass`] is its public part (the daemon's
//!   side of the shim's stdio preamble, whose sender is safe `nix` in
//!   `warden-client`); [`activation`] takes the listening socket a service
//!   manager passes (socket activation, for `wardend`'s `main`).
//!
//! A program of its own: [`bridge`] embeds `bridge/main.rs` (built by
//! `build.rs`, statically linked), the Docker backend's container
//! entrypoint, which hands the egress listener it makes inside the
//! container to the daemon (SCM_RIGHTS) and execs the server.
//!
//! # Invariants
//!
//! `unsafe_code` is denied for the crate and allowed in `sys` and
//! `init::exec` (the init role's fork and the server child between fork and
//! execve) only, besides two test modules that fork or map memory; every
//! block carries its `// SAFETY:` line (`clippy::undocumented_unsafe_blocks`).
//! `bridge/main.rs`, not part of this crate's build, holds the bridge's
//! `sendmsg` and `listen` calls under the same rule.
#![deny(unsafe_code)]

pub mod bridge;
mod confine;
#[cfg(target_os = "linux")]
mod control;
#[cfg(target_os = "linux")]
pub mod init;
#[cfg(target_os = "linux")]
pub mod kernel;
#[cfg(target_os = "linux")]
pub mod launch;
pub mod protected;
#[cfg(target_os = "linux")]
mod rootfs;
pub mod spec;
#[cfg(target_os = "linux")]
pub mod supervise;
// The kernel boundary: with `init::exec`, the only module that may hold
// `unsafe` (see its docs).
#[allow(unsafe_code)]
mod sys;

pub use sys::{activation, fdpass};

/// The seccomp deny list as a Docker profile (the Docker backend's).
pub use confine::seccomp::docker as docker_seccomp;
#[cfg(target_os = "linux")]
pub use init::{entry_if_requested as init_entry_if_requested, INIT_ARG};
#[cfg(target_os = "linux")]
pub use kernel::Kernel;
#[cfg(target_os = "linux")]
pub use launch::{
    snapshot_dir, ExitOutcome, ForkServer, Hooks, Sandbox, SandboxError, Snapshot, Spawned,
};
#[cfg(target_os = "linux")]
pub use supervise::{FileAccess, FileAccesses, RefusedCall, RefusedCalls, Wake, WakeWaiter};
