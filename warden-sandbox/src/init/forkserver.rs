//! The init role's fork server: one long-lived, single-threaded process per
//! daemon (argv\[1\] = [`super::FORKSERVER_ARG`], started like the init,
//! its socket on fd 3) that makes each sandbox's launcher by forking
//! itself instead of the daemon executing its own binary again for every
//! launch. An `execve` of the daemon's binary costs about 1.5 ms before the
//! init reads its spec (the loader, the relocations of a large
//! position-independent binary, its page faults); a fork of this small
//! process, a tenth of that.
//!
//! Per launch the daemon sends one message: [`LAUNCH`] with four fds
//! attached (the server's stdin, stdout and stderr, and the launch's
//! control socket, its spec already queued on it). The fork server forks
//! with `CLONE_PARENT` ([`exec::fork_for_parent`]), so the launcher is the
//! daemon's child, exactly as when the daemon starts the init itself, and
//! answers [`ForkReply`] with its pid. The child puts the fds where a fresh
//! init has them ([`exec::take_launch_fds`]) and runs the launcher.
//!
//! What a launcher inherits from the fork server: its memory, which holds
//! no session's data (specs go from the daemon to each launcher over the
//! launch's own control socket, never through here), its empty environment,
//! its address-space layout (shared by every launcher and PID 1 made from
//! it; the server is a fresh `execve` with a layout of its own), and
//! nothing else: every fd but the launch's is closed in the child. The fork
//! server exits when the daemon closes its end (EOF), and is never a
//! sandbox's parent.

use super::exec::{self, InitRole};
use crate::control::{self, ForkReply};
use crate::sys::fdpass;
use nix::errno::Errno;
use std::os::fd::{AsFd, OwnedFd};

/// The request's payload: fork a launcher for these fds.
pub(crate) const LAUNCH: &[u8] = b"launch";

/// Serves launches until the daemon closes its end; returns the exit code.
pub(super) fn serve(role: &InitRole, sock: OwnedFd) -> i32 {
    loop {
        let mut buf = [0u8; 16];
        let (n, fds) = match fdpass::recv_with_up_to(sock.as_fd(), &mut buf, false, 4) {
            Ok(v) => v,
            // The daemon is gone (or the socket broke): nothing to serve.
            Err(_) => return 0,
        };
        if n == 0 && fds.is_empty() {
            return 0;
        }
        let reply = match <[OwnedFd; 4]>::try_from(fds) {
            Ok([stdin, stdout, stderr, launch]) if &buf[..n] == LAUNCH => {
                match exec::fork_for_parent(role) {
                    Ok(None) => launcher(role, sock, [stdin, stdout, stderr], launch),
                    // Our copies of the launch's fds close here.
                    Ok(Some(pid)) => ForkReply::Launched { pid: pid.as_raw() },
                    Err(e) => ForkReply::Failed { errno: e as i32 },
                }
            }
            _ => ForkReply::Failed {
                errno: Errno::EBADMSG as i32,
            },
        };
        if control::send(sock.as_fd(), &reply, None).is_err() {
            return 0;
        }
    }
}

/// The forked child: becomes a launcher as a freshly started init would.
fn launcher(role: &InitRole, server: OwnedFd, stdio: [OwnedFd; 3], launch: OwnedFd) -> ! {
    let code = match exec::take_launch_fds(server, stdio, launch) {
        Ok(sock) => super::run_launcher(role, sock.as_fd()),
        // No control socket to report on: the daemon sees its end close
        // without a message and reaps this child's exit code.
        Err(_) => 125,
    };
    std::process::exit(code)
}
