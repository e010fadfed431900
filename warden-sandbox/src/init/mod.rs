//! The sandbox side: a fresh, single-threaded re-exec of the daemon binary
//! (argv\[1\] = [`INIT_ARG`], dispatched by [`entry_if_requested`]) with the
//! control socket at fd 3. Nothing here runs in the daemon.
//!
//! Process tree:
//! - **launcher** (`launcher`, host pid namespace): reads the spec, enters a
//!   new user namespace (only the caller's own uid/gid mapped) and a new pid
//!   namespace, forks PID 1, passes the daemon a pidfd of it, and waits for it.
//! - **PID 1** (`pid1`, non-dumpable): enters new mount/net/ipc/uts/cgroup
//!   namespaces, builds the root filesystem (`rootfs`), forks the
//!   server, then forwards signals, reaps children and reports the server's
//!   exit. When it exits the kernel kills everything left in the pid namespace.
//! - **server** (`exec`): drops every privilege, applies Landlock and the
//!   seccomp filter (`confine`) and execs the program.
//!
//! Failures travel to the daemon as `control::Failure` values over the control
//! socket, naming the stage.
//!
//! # Invariants
//!
//! The role runs before any thread or runtime exists and never starts one:
//! every process of it is single-threaded (see `exec`, which holds its
//! `unsafe`).

// The raw process steps and the server child between fork and execve.
#[allow(unsafe_code)]
mod exec;
mod forkserver;
mod launcher;
mod pid1;
mod snapshot;

pub(crate) use exec::{Stage, CONTROL_FD};
pub(crate) use forkserver::LAUNCH;

/// argv\[1\] that selects the sandbox init role.
pub const INIT_ARG: &str = "__warden-sandbox-init";

/// argv\[1\] that selects the init role's fork server
/// ([`crate::launch::ForkServer`]).
pub const FORKSERVER_ARG: &str = "__warden-sandbox-forkserver";

/// Call first thing in `main()` of any binary used as `exe` for
/// [`crate::Sandbox::spawn`] (before any thread or async runtime exists). If
/// argv\[1\] is [`INIT_ARG`] or [`FORKSERVER_ARG`], runs the sandbox init
/// role (or its fork server) and never returns; otherwise returns at once.
pub fn entry_if_requested() {
    match std::env::args_os().nth(1) {
        Some(a) if a == INIT_ARG => run(false),
        Some(a) if a == FORKSERVER_ARG => run(true),
        _ => {}
    }
}

/// Entry point of the init role and of its fork server. Never returns.
fn run(fork_server: bool) -> ! {
    use std::os::fd::AsFd;
    // Started by hand, without the control socket: say so instead of guessing.
    let Some((role, sock)) = exec::enter() else {
        eprintln!("warden sandbox init: no control socket on fd 3; this role is started by the daemon only");
        std::process::exit(125);
    };
    let code = match fork_server {
        true => forkserver::serve(&role, sock),
        false => run_launcher(&role, sock.as_fd()),
    };
    std::process::exit(code)
}

/// The launcher on control socket `sock`: its exit code, a failure reported
/// on the socket first.
fn run_launcher(role: &exec::InitRole, sock: std::os::fd::BorrowedFd<'_>) -> i32 {
    use crate::control::{self, FromInit};
    match launcher::launcher(role, sock) {
        Ok(code) => code,
        Err(f) => {
            let _ = control::send(sock, &FromInit::Failed(f), None);
            125
        }
    }
}
