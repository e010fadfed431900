//! The native Linux backend: the sandbox of `warden-sandbox` (namespaces,
//! seccomp, Landlock), its init forked by the daemon's fork server
//! (`warden_sandbox::ForkServer`, a long-lived copy of the init role
//! started from the daemon's own binary).

use std::future::Future;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;

use warden_sandbox::launch::{ExitOutcome, Sandbox, Spawned};
use warden_sandbox::spec::SandboxSpec;
use warden_sandbox::{FileAccesses, RefusedCalls};

use super::{Launched, Process};
use crate::error::DaemonError;
use crate::stdio::{pipe, Relay};

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
        Sandbox::spawn_forked(&d.forks, &spec2, [in_r, out_w, err_w], hooks, release)
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
        egress,
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

    /// Waits for the sandbox's end on the event loop (its exit fd, a
    /// pidfd), then collects the outcome on a blocking thread, which then
    /// takes moments: an idle session holds no thread for its exit.
    fn wait(self: Arc<Self>) -> Pin<Box<dyn Future<Output = Result<ExitOutcome, String>> + Send>> {
        Box::pin(async move {
            let sb = self.0.clone();
            // If the pidfd cannot be polled, the blocking wait below does it all.
            let _ = sb.exited().await;
            match tokio::task::spawn_blocking(move || sb.wait()).await {
                Ok(Ok(o)) => Ok(o),
                Ok(Err(e)) => Err(e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        })
    }
}
