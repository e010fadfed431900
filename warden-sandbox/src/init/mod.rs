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
mod launcher;
mod pid1;
mod snapshot;

pub(crate) use exec::{Stage, CONTROL_FD};

/// argv\[1\] that selects the sandbox init role.
pub const INIT_ARG: &str = "__warden-sandbox-init";

/// Call first thing in `main()` of any binary used as `exe` for
/// [`crate::Sandbox::spawn`] (before any thread or async runtime exists). If
/// argv\[1\] is [`INIT_ARG`], runs the sandbox init role and never returns;
/// otherwise returns at once.
pub fn entry_if_requested() {
    if std::env::args_os().nth(1).is_some_and(|a| a == INIT_ARG) {
        run();
    }
}

/// Entry point of the init role. Never returns.
fn run() -> ! {
    use crate::control::{self, FromInit};
    use std::os::fd::AsFd;
    // Started by hand, without the control socket: say so instead of guessing.
    let Some((role, sock)) = exec::enter() else {
        eprintln!("warden sandbox init: no control socket on fd 3; this role is started by the daemon only");
        std::process::exit(125);
    };
    let code = match launcher::launcher(&role, sock.as_fd()) {
        Ok(code) => code,
        Err(f) => {
            let _ = control::send(sock.as_fd(), &FromInit::Failed(f), None);
            125
        }
    };
    std::process::exit(code)
}
