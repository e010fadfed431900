//! The native Linux backend: the sandbox of `warden-sandbox` (namespaces,
//! seccomp, Landlock), its init forked by the daemon's fork server
//! (`warden_sandbox::ForkServer`, a long-lived copy of the init role
//! started from the daemon's own binary); and what the daemon knows of the
//! host for it ([`Host`]: the kernel probe, the delegated cgroup, the
//! write-grant protections, the user namespace trial). Built on Linux only.

use std::future::Future;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use warden_core::policy::Backend;
use warden_sandbox::launch::{Sandbox, Spawned};
use warden_sandbox::spec::SandboxSpec;
use warden_sandbox::{FileAccesses, Kernel, RefusedCalls};

use super::{not_in_this_build, ExitOutcome, Launched, Os, Process};
use crate::cgroup::Delegation;
use crate::error::DaemonError;
use crate::features::{WriteProtection, PRETEND_MISSING_VAR};
use crate::stdio::{pipe, Relay};

/// What the daemon knows of this host for the native sandbox, learnt once
/// at start (the trial is repeated while it fails).
pub struct Host {
    /// The delegated cgroup v2 subtree the daemon manages, or why there is none.
    pub cgroup: Result<Delegation, String>,
    /// What the kernel offers, probed once at start: every session's
    /// sandbox layers are decided from it (`session::plan`), `wardenctl
    /// status` shows it.
    pub kernel: Kernel,
    /// What protects write grants on this kernel (judged once at start from
    /// [`Host::kernel`] and the test setting [`PRETEND_MISSING_VAR`]).
    pub write_protection: WriteProtection,
    /// Whether the native Linux sandbox can start here, tried at start
    /// (a real user namespace, [`native_trial`]); tried again while it
    /// fails, so a fix (an AppArmor profile loaded) needs no restart.
    pub trial: Mutex<Result<(), String>>,
    /// Forks each sandbox's init from one long-lived copy of it instead of
    /// executing `config.sandbox_exe` for every launch.
    pub forks: warden_sandbox::ForkServer,
}

impl Host {
    /// Takes over the delegated cgroup (when there is one), probes the
    /// kernel, judges the write protections and tries a user namespace.
    pub fn probe(uid: u32, config: &crate::Config) -> Host {
        let cgroup = crate::cgroup::locate(uid)
            .and_then(|dir| crate::cgroup::take_over(&dir).map_err(|e| e.to_string()));
        match &cgroup {
            Ok(d) => tracing::info!(
                cgroup = %d.root.display(),
                controllers = ?d.controllers,
                "using the delegated cgroup subtree"
            ),
            Err(why) => tracing::info!(%why, "no delegated cgroup: limits use the fallbacks"),
        }
        let kernel = Kernel::probe();
        tracing::info!(
            release = %kernel.release,
            landlock_abi = ?kernel.landlock_abi(),
            user_notif = kernel.user_notif,
            addfd_send = kernel.addfd_send,
            wait_killable_recv = kernel.wait_killable_recv,
            sync_wake_up = kernel.sync_wake_up,
            "probed the kernel"
        );
        let pretend = std::env::var(PRETEND_MISSING_VAR).ok();
        let write_protection = WriteProtection::judge(&kernel, pretend.as_deref());
        if write_protection.pretended {
            tracing::warn!(
                var = PRETEND_MISSING_VAR,
                missing = ?write_protection.missing(),
                "treating protections as unavailable (a test setting)"
            );
        }
        let trial = native_trial(&kernel, &config.sandbox_exe);
        if let Err(why) = &trial {
            tracing::warn!(%why, "the native sandbox is unavailable: sessions need another backend");
        }
        Host {
            cgroup,
            kernel,
            write_protection,
            trial: Mutex::new(trial),
            forks: warden_sandbox::ForkServer::new(&config.sandbox_exe),
        }
    }

    /// Whether the last user namespace trial succeeded.
    pub fn trial_ok(&self) -> bool {
        self.trial.lock().unwrap_or_else(|p| p.into_inner()).is_ok()
    }

    /// Whether the native sandbox can run a session now (tried again while
    /// it fails).
    pub fn available(&self, exe: &Path) -> Result<(), String> {
        let mut trial = self.trial.lock().unwrap_or_else(|p| p.into_inner());
        if trial.is_err() {
            *trial = native_trial(&self.kernel, exe);
        }
        trial.clone()
    }

    /// `wardenctl status`'s kernel features.
    pub fn features(&self) -> Vec<warden_proto::v1::KernelFeature> {
        crate::features::report(&self.kernel, &self.cgroup, &self.write_protection)
    }

    /// What `session::plan` is given of this host.
    pub fn plan(&self, uid: u32, gid: u32) -> crate::session::plan::Host<'_> {
        crate::session::plan::Host {
            uid,
            gid,
            cgroup: &self.cgroup,
            write_protection: &self.write_protection,
            kernel: &self.kernel,
        }
    }
}

/// Whether the native sandbox starts here: the sysctls allow unprivileged
/// user namespaces and a real one is made (`exe` re-executed in the
/// sandbox's snapshot role; AppArmor's restriction or an exhausted
/// `user.max_user_namespaces` show here, not in the sysctls).
pub fn native_trial(kernel: &Kernel, exe: &Path) -> Result<(), String> {
    if let Some(why) = not_in_this_build(Backend::Linux, Os::this()) {
        return Err(why);
    }
    if !kernel.user_namespaces() {
        return Err(format!(
            "unprivileged user namespaces are turned off ({}); `wardenctl doctor` says how \
             to turn them on",
            kernel.userns_settings()
        ));
    }
    warden_sandbox::kernel::userns_trial(exe).map_err(|e| {
        format!("cannot make the sandbox's user namespace ({e}); `wardenctl doctor` says why and what to do")
    })
}

impl From<warden_sandbox::ExitOutcome> for ExitOutcome {
    fn from(o: warden_sandbox::ExitOutcome) -> ExitOutcome {
        match o {
            warden_sandbox::ExitOutcome::Code(c) => ExitOutcome::Code(c),
            warden_sandbox::ExitOutcome::Signal(s) => ExitOutcome::Signal(s),
        }
    }
}

/// What the native sandbox gives a session beyond the common [`Launched`].
pub struct Extras {
    pub sandbox: Arc<Sandbox>,
    pub refused: Option<RefusedCalls>,
    pub files: Option<FileAccesses>,
    /// The transparent resolver's socket, when the spec asked for one.
    pub resolver: Option<OwnedFd>,
}

/// Starts `spec` in a new sandbox with the server's stdio relayed to
/// `stdio` (the client's); its server is started only once `release`
/// returned `Ok` (the daemon's `session.start` on disk), the sandbox built
/// meanwhile.
pub async fn spawn(
    daemon: &Arc<crate::Daemon>,
    spec: &SandboxSpec,
    stdio: [OwnedFd; 3],
    hooks: warden_sandbox::Hooks,
    watch: crate::stdio::Watch,
    release: impl FnOnce() -> std::io::Result<()> + Send + 'static,
) -> Result<Launched, DaemonError> {
    let (in_r, in_w) = pipe().map_err(DaemonError::StdioPipes)?;
    let (out_r, out_w) = pipe().map_err(DaemonError::StdioPipes)?;
    let (err_r, err_w) = pipe().map_err(DaemonError::StdioPipes)?;
    let d = daemon.clone();
    let spec2 = spec.clone();
    let spawned = tokio::task::spawn_blocking(move || {
        Sandbox::spawn_forked(
            &d.native.forks,
            &spec2,
            [in_r, out_w, err_w],
            hooks,
            release,
        )
    })
    .await
    .map_err(DaemonError::LaunchTask)?
    .map_err(|e| match e {
        // The gate's own error: the record could not be made durable.
        warden_sandbox::SandboxError::Release(io) => DaemonError::Audit(io),
        e => e.into(),
    })?;
    let Spawned {
        sandbox,
        refused,
        files,
        proxy_listener,
        resolver,
    } = spawned;
    let sandbox = Arc::new(sandbox);
    let fail = |sandbox: &Arc<Sandbox>, e: DaemonError| {
        let _ = sandbox.kill_tree();
        let _ = sandbox.wait();
        Err(e)
    };
    // The server's ends now live only in the sandbox; ours are closed, so
    // EOF travels both ways.
    let relay = match Relay::start_watched(stdio, [in_w, out_r, err_r], watch) {
        Ok(r) => r,
        Err(e) => return fail(&sandbox, DaemonError::StdioPipes(e)),
    };
    // Without the listener the server would run with no way out but also no
    // record of its attempts: refuse instead.
    let Some(egress) = proxy_listener else {
        let r = fail(&sandbox, DaemonError::NoProxyListener);
        relay.finish(std::time::Duration::ZERO);
        return r;
    };
    Ok(Launched {
        process: Arc::new(Native(sandbox.clone())),
        relay,
        egress: Some(egress),
        native: Some(Extras {
            sandbox,
            refused,
            files,
            resolver,
        }),
    })
}

/// The native sandbox as a [`Process`].
pub struct Native(pub Arc<Sandbox>);

impl Process for Native {
    fn pid(&self) -> u32 {
        self.0.pid()
    }

    fn signal(&self, sig: i32) -> Result<(), DaemonError> {
        Ok(self.0.signal(sig)?)
    }

    fn terminate_tree(&self) -> Result<(), DaemonError> {
        Ok(self.0.terminate_tree()?)
    }

    fn kill_tree(&self) -> Result<(), DaemonError> {
        Ok(self.0.kill_tree()?)
    }

    /// Waits for the sandbox's end on the event loop (PID 1's report on
    /// its control socket), then collects the outcome on a blocking thread,
    /// which then takes moments: an idle session holds no thread for its
    /// exit. The namespaces' teardown that follows (PID 1's and the
    /// launcher's exit) is not waited for: a task reaps the launcher once
    /// its pidfd says it is gone.
    fn wait(self: Arc<Self>) -> Pin<Box<dyn Future<Output = Result<ExitOutcome, String>> + Send>> {
        Box::pin(async move {
            let sb = self.0.clone();
            // If the socket cannot be polled, the blocking wait below does it all.
            let _ = sb.ended().await;
            let waited = sb.clone();
            let outcome = match tokio::task::spawn_blocking(move || waited.wait()).await {
                Ok(Ok(o)) => Ok(o.into()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            tokio::spawn(async move {
                let _ = sb.exited().await;
                let _ = tokio::task::spawn_blocking(move || sb.reap()).await;
            });
            outcome
        })
    }
}
