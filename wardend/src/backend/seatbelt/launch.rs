//! The Seatbelt launcher (macOS): `sandbox-exec -p PROFILE -- PROGRAM
//! ARGS...` in a process group of its own.
//!
//! - The egress proxy: the daemon binds `127.0.0.1:0` on the host's
//!   loopback and serves the session's proxy there; its port is the only
//!   one the profile lets the server connect to, and the one the proxy
//!   variables name.
//! - The process: `sandbox-exec` applies the profile and execs the program
//!   (same pid), the leader of a new process group. The daemon reaps it
//!   itself: it waits for the exit with kqueue (`EVFILT_PROC`,
//!   `NOTE_EXIT`), which does not reap, kills what is left of the group
//!   while the zombie still holds the group's id (so the id cannot have been
//!   reused), and only then collects the status with `waitpid`.
//! - Ending it: SIGTERM, then SIGKILL, to the group and to every descendant
//!   `ps` finds (one that left the group with `setsid` too).
//! - Exit codes as the native sandbox's: the server's code, 128+N for
//!   signal N (the shim), 124 and 137 from the session's causes.
//!
//! Written against macOS's documented calls; never run here (the project's
//! machines are Linux): see docs/backends.md.

use std::future::Future;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::sys::event::{EvFlags, EventFilter, FilterFlag, KEvent, Kqueue};
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use warden_core::policy::CompiledPolicy;
use warden_sandbox::spec::SandboxSpec;

use super::fit::{self, Fitted, SANDBOX_EXEC};
use crate::backend::{ExitOutcome, Launched, Process};
use crate::error::DaemonError;
use crate::stdio::{pipe, Relay};

/// Whether Seatbelt can run a session here: `sandbox-exec` is present.
pub fn available() -> Result<(), String> {
    if Path::new(SANDBOX_EXEC).is_file() {
        Ok(())
    } else {
        Err(format!("{SANDBOX_EXEC} is missing"))
    }
}

/// The session's scratch directory, removed with it.
struct Scratch(PathBuf);

impl Scratch {
    fn create(state_dir: &Path, id: &str) -> std::io::Result<Scratch> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = fit::scratch_dir(state_dir, id);
        for d in [dir.join("tmp"), dir.join("home")] {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(&d)?;
        }
        // Canonical: the profile names real paths (/var is /private/var).
        Ok(Scratch(std::fs::canonicalize(&dir)?))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The first bytes of the program, for its `#!` line.
fn head(program: &Path) -> Vec<u8> {
    use std::io::Read;
    let mut buf = vec![0u8; 256];
    let n = std::fs::File::open(program)
        .and_then(|mut f| f.read(&mut buf))
        .unwrap_or(0);
    buf.truncate(n);
    buf
}

/// Starts session `id` under Seatbelt.
pub async fn spawn(
    state_dir: &Path,
    id: &str,
    spec: &SandboxSpec,
    policy: &CompiledPolicy,
    _fitted: &Fitted,
    stdio: [OwnedFd; 3],
    watch: crate::stdio::Watch,
) -> Result<Launched, DaemonError> {
    let err = |what: &str, e: &dyn std::fmt::Display| DaemonError::Seatbelt(format!("{what}: {e}"));
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| err("cannot listen on 127.0.0.1 for the egress proxy", &e))?;
    let port = listener
        .local_addr()
        .map_err(|e| err("the egress listener", &e))?
        .port();
    let scratch = Scratch::create(state_dir, id)
        .map_err(|e| err("cannot create the session's scratch directory", &e))?;
    let path_env = spec
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == b"PATH")
        .map(|(_, v)| v.as_slice());
    let runtime = fit::runtime(&spec.program, &head(&spec.program), path_env, |p| {
        std::fs::canonicalize(p).ok().filter(|c| c.is_file())
    });
    let ctx = fit::context(spec, port, &scratch.0, runtime);
    let profile = super::profile(policy, &ctx).map_err(|e| err("the profile", &e))?;
    let (in_r, in_w) = pipe().map_err(DaemonError::StdioPipes)?;
    let (out_r, out_w) = pipe().map_err(DaemonError::StdioPipes)?;
    let (err_r, err_w) = pipe().map_err(DaemonError::StdioPipes)?;
    let mut cmd = std::process::Command::new(SANDBOX_EXEC);
    {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::process::CommandExt;
        cmd.args(fit::args(&profile, spec))
            .env_clear()
            .envs(fit::env(spec, port, &scratch.0).iter().map(|(k, v)| {
                (
                    std::ffi::OsStr::from_bytes(k),
                    std::ffi::OsStr::from_bytes(v),
                )
            }))
            .current_dir(&spec.cwd)
            .stdin(Stdio::from(in_r))
            .stdout(Stdio::from(out_w))
            .stderr(Stdio::from(err_w))
            .process_group(0);
    }
    let child = cmd
        .spawn()
        .map_err(|e| err(&format!("cannot run {SANDBOX_EXEC}"), &e))?;
    let pid = child.id();
    // std never waits for it: the group reaps it (`Group::wait`).
    drop(child);
    drop(cmd);
    let group = Arc::new(Group {
        pid,
        reaped: Mutex::new(false),
        scratch: Mutex::new(Some(scratch)),
    });
    let relay = match Relay::start_watched(stdio, [in_w, out_r, err_r], watch) {
        Ok(r) => r,
        Err(e) => {
            let _ = group.kill_tree();
            let _ = group.clone().wait().await;
            return Err(DaemonError::StdioPipes(e));
        }
    };
    Ok(Launched {
        process: group,
        relay,
        egress: Some(OwnedFd::from(listener)),
    })
}

/// A Seatbelt session's process group, as a [`Process`].
pub struct Group {
    /// The leader: `sandbox-exec`, then the server it execs.
    pid: u32,
    /// Set once the leader is reaped: its pid, and so the group's id, may
    /// be another process's from then on, so nothing is signalled.
    reaped: Mutex<bool>,
    scratch: Mutex<Option<Scratch>>,
}

impl Group {
    fn pgid(&self) -> Pid {
        Pid::from_raw(self.pid as i32)
    }

    /// `sig` to the group and to every descendant `ps` finds, unless the
    /// leader was reaped.
    fn signal_all(&self, sig: Signal) -> Result<(), DaemonError> {
        let reaped = self.reaped.lock().unwrap_or_else(|p| p.into_inner());
        if *reaped {
            return Ok(());
        }
        let strays: Vec<u32> = crate::ps::snapshot()
            .map(|rows| {
                crate::ps::session(&rows, self.pid)
                    .iter()
                    .map(|r| r.pid)
                    .collect()
            })
            .unwrap_or_default();
        match killpg(self.pgid(), sig) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => {
                return Err(DaemonError::Seatbelt(format!(
                    "kill the process group: {e}"
                )))
            }
        }
        for p in strays {
            let _ = kill(Pid::from_raw(p as i32), sig);
        }
        Ok(())
    }
}

/// Blocks until `pid` (a child of the daemon) has exited, without reaping
/// it. An error: it cannot be watched (it may be gone already).
fn wait_exit(pid: u32) -> Result<(), Errno> {
    let kq = Kqueue::new()?;
    let add = KEvent::new(
        pid as usize,
        EventFilter::EVFILT_PROC,
        EvFlags::EV_ADD | EvFlags::EV_ONESHOT,
        FilterFlag::NOTE_EXIT,
        0,
        0,
    );
    let mut out = [add];
    loop {
        match kq.kevent(&[add], &mut out, None) {
            Ok(_) if out[0].flags().contains(EvFlags::EV_ERROR) && out[0].data() != 0 => {
                return Err(Errno::from_raw(out[0].data() as i32))
            }
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

impl Process for Group {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn signal(&self, sig: i32) -> Result<(), DaemonError> {
        let reaped = self.reaped.lock().unwrap_or_else(|p| p.into_inner());
        if *reaped {
            return Ok(());
        }
        let sig = Signal::try_from(sig)
            .map_err(|e| DaemonError::Seatbelt(format!("signal {sig}: {e}")))?;
        match kill(self.pgid(), sig) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(e) => Err(DaemonError::Seatbelt(format!("signal the server: {e}"))),
        }
    }

    fn terminate_tree(&self) -> Result<(), DaemonError> {
        self.signal_all(Signal::SIGTERM)
    }

    fn kill_tree(&self) -> Result<(), DaemonError> {
        self.signal_all(Signal::SIGKILL)
    }

    /// The leader's exit (kqueue, on a blocking thread), then what is left
    /// of the group killed, then the leader reaped.
    fn wait(self: Arc<Self>) -> Pin<Box<dyn Future<Output = Result<ExitOutcome, String>> + Send>> {
        Box::pin(async move {
            let g = self.clone();
            let r = tokio::task::spawn_blocking(move || {
                let reap = || loop {
                    match waitpid(Pid::from_raw(g.pid as i32), None) {
                        Err(Errno::EINTR) => continue,
                        other => break other,
                    }
                };
                // ESRCH: our child, which only we reap, is gone from the
                // process table's live part: a zombie already.
                let status = match wait_exit(g.pid) {
                    Ok(()) | Err(Errno::ESRCH) => {
                        // The leader is a zombie: the group's id is still its.
                        let _ = g.signal_all(Signal::SIGKILL);
                        let mut reaped = g.reaped.lock().unwrap_or_else(|p| p.into_inner());
                        let status = reap();
                        *reaped = true;
                        status
                    }
                    Err(e) => {
                        // Cannot watch without reaping: reap (not holding
                        // the lock a kill waits on), and signal nothing after.
                        tracing::warn!(pid = g.pid, error = %e, "kqueue cannot watch the server; what is left of its group is not killed at its exit");
                        let status = reap();
                        *g.reaped.lock().unwrap_or_else(|p| p.into_inner()) = true;
                        status
                    }
                };
                g.scratch.lock().unwrap_or_else(|p| p.into_inner()).take();
                match status {
                    Ok(WaitStatus::Exited(_, code)) => Ok(ExitOutcome::Code(code)),
                    Ok(WaitStatus::Signaled(_, sig, _)) => Ok(ExitOutcome::Signal(sig as i32)),
                    Ok(other) => Err(format!("unexpected wait status {other:?}")),
                    Err(e) => Err(format!("waitpid: {e}")),
                }
            })
            .await;
            match r {
                Ok(r) => r,
                Err(e) => Err(e.to_string()),
            }
        })
    }
}
