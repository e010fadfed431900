//! Running one call through `wardend`, the way `warden-shim` starts a server:
//! a connection of its own, the stdio preamble (three fresh pipes instead of
//! the shim's own fds), a `SpawnRequest` with the call's policy text, and the
//! `Started` / `Exited` events. The call's output is read from the pipes,
//! each stream kept up to the cap and the rest drained and discarded.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rmcp::schemars::JsonSchema;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use warden_client::pb;

/// How long the output may still arrive after the daemon said the call ended
/// (it drained the sandbox's pipes before it did; this only bounds a stuck
/// reader).
const OUTPUT_GRACE: Duration = Duration::from_secs(5);
/// How long past the call's own timeout the daemon has to end it before the
/// call is abandoned (dropping the stream ends the session too).
const EXIT_GRACE: Duration = Duration::from_secs(30);

/// What the tool returns for a call that ran.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
#[schemars(crate = "rmcp::schemars")]
pub struct Outcome {
    /// The exit status as `warden-shim` reports it: the command's exit code,
    /// 128+N if it died by signal N, 124 if the call's timeout ended it, 137
    /// on a memory breach.
    pub exit_code: i32,
    /// The signal that ended the command, if one did.
    pub signal: Option<i32>,
    /// The command's standard output (invalid UTF-8 replaced), at most
    /// `limits.output_kb` KiB (default 1024).
    pub stdout: String,
    /// The command's standard error, capped the same way.
    pub stderr: String,
    /// Whether stdout or stderr was cut at the cap (the rest was discarded).
    pub truncated: bool,
    /// From the start of the sandbox to the command's end, in milliseconds.
    pub duration_ms: u64,
    /// The Warden session the call ran in (`wardenctl logs --session ID`).
    pub session: String,
    /// Why Warden ended the call (a timeout, a memory breach), if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// How to reach the daemon.
#[derive(Debug, Clone)]
pub struct Daemon {
    pub socket: PathBuf,
    pub autostart: bool,
    pub backend: Option<String>,
}

/// One call, ready to go.
pub struct Request<'a> {
    pub policy_path: Option<&'a Path>,
    pub policy_text: String,
    pub cwd: &'a Path,
    pub stdin: Vec<u8>,
    pub timeout_s: u64,
    pub output_cap: usize,
}

/// Runs `r` in a new session. `Err`: Warden refused or failed (the message
/// is the daemon's reason); `Ok`: the command ran.
pub async fn run(daemon: &Daemon, r: Request<'_>) -> anyhow::Result<Outcome> {
    let stream = connect(daemon).await?;
    let (stdin_r, stdin_w) = std::io::pipe()?;
    let (stdout_r, stdout_w) = std::io::pipe()?;
    let (stderr_r, stderr_w) = std::io::pipe()?;
    warden_client::send_stdio(
        &stream,
        [stdin_r.as_fd(), stdout_w.as_fd(), stderr_w.as_fd()],
    )?;
    // The daemon holds its own copies now; ours of its ends would keep the
    // pipes open.
    drop((stdin_r, stdout_w, stderr_w));
    let stdin_w = pipe::Sender::from_owned_fd(OwnedFd::from(stdin_w))?;
    let stdout = pipe::Receiver::from_owned_fd(OwnedFd::from(stdout_r))?;
    let stderr = pipe::Receiver::from_owned_fd(OwnedFd::from(stderr_r))?;
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let out_task = tokio::spawn(capped(stdout, r.output_cap, stop.clone()));
    let err_task = tokio::spawn(capped(stderr, r.output_cap, stop));
    let stdin = r.stdin;
    let in_task = tokio::spawn(async move {
        let mut w = stdin_w;
        // A command that exits without reading its input is fine (EPIPE).
        let _ = w.write_all(&stdin).await;
    });

    let mut client = warden_client::client_over(stream).await?;
    let env = std::env::vars_os()
        .map(|(k, v)| pb::EnvVar {
            name: k.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
        })
        .collect();
    let req = pb::SpawnRequest {
        policy_path: r
            .policy_path
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        policy_text: r.policy_text,
        extra: None,
        name: String::new(),
        command: Vec::new(),
        cwd: r.cwd.display().to_string(),
        env,
        client: Some(pb::ClientInfo {
            pid: std::process::id(),
            program: "wardenctl exec-server".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }),
        approve: false,
        approve_timeout_ms: 0,
        approve_terminal: false,
        trace: false,
        trace_allow_writes: false,
        backend: daemon.backend.clone().unwrap_or_default(),
    };
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(r.timeout_s) + EXIT_GRACE;
    let mut events = client
        .spawn(req)
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?
        .into_inner();
    let mut session = String::new();
    let exited = loop {
        let ev = tokio::time::timeout_at(deadline.into(), events.message())
            .await
            .map_err(|_| {
                anyhow::anyhow!("the session {session} did not end in time; it was abandoned")
            })?;
        match ev {
            Ok(Some(pb::SpawnEvent {
                event: Some(pb::spawn_event::Event::Started(s)),
            })) => session = s.session_id,
            Ok(Some(pb::SpawnEvent {
                event: Some(pb::spawn_event::Event::Exited(x)),
            })) => break x,
            Ok(Some(_)) => {}
            Ok(None) => anyhow::bail!("wardend closed the session without an exit status"),
            Err(s) => anyhow::bail!("lost the session: {}", s.message()),
        }
    };
    let duration_ms = exited.duration_ms;
    // The connection (and with it anything of the call's the daemon holds) goes.
    drop(events);
    drop(client);
    in_task.abort();
    // Both readers reach their pipe's end soon (the daemon has let the last
    // output through); a reader still waiting after the grace stops there.
    let grace = tokio::time::sleep(OUTPUT_GRACE);
    tokio::pin!(grace);
    let both = async { (out_task.await, err_task.await) };
    tokio::pin!(both);
    let (out, err) = tokio::select! {
        r = &mut both => r,
        _ = &mut grace => {
            let _ = stop_tx.send(true);
            both.await
        }
    };
    let (stdout, out_cut) = out.unwrap_or_default();
    let (stderr, err_cut) = err.unwrap_or_default();
    use pb::exited::Outcome as X;
    let reason = (!exited.reason.is_empty()).then(|| exited.reason.clone());
    let (exit_code, signal) = match exited.outcome {
        Some(X::Code(c)) => (c, None),
        Some(X::Signal(s)) => (128 + s, Some(s)),
        Some(X::Timeout(_)) => (124, None),
        Some(X::Memory(_)) => (137, None),
        Some(X::Error(e)) => anyhow::bail!("{e}"),
        None => anyhow::bail!("the session ended without an exit status"),
    };
    Ok(Outcome {
        exit_code,
        signal,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        truncated: out_cut || err_cut,
        duration_ms: if duration_ms > 0 {
            duration_ms
        } else {
            t0.elapsed().as_millis() as u64
        },
        session,
        reason,
    })
}

/// A connection to the daemon, started if none answers (and allowed).
async fn connect(daemon: &Daemon) -> anyhow::Result<std::os::unix::net::UnixStream> {
    let socket = daemon.socket.clone();
    let autostart = daemon.autostart;
    // Connecting (and an autostart's wait) blocks: not on the runtime's threads.
    tokio::task::spawn_blocking(move || match warden_client::connect_raw(&socket) {
        Ok(s) => Ok(s),
        Err(warden_client::ClientError::NotRunning { .. }) if autostart => {
            warden_client::autostart(&socket, Duration::from_secs(10))?;
            Ok(warden_client::connect_raw(&socket)?)
        }
        Err(e) => Err(e.into()),
    })
    .await?
}

/// Reads `r` to its end (or until `stop`), keeping the first `cap` bytes;
/// whether more came.
async fn capped(
    mut r: pipe::Receiver,
    cap: usize,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut cut = false;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = tokio::select! {
            n = r.read(&mut buf) => n,
            _ = stop.wait_for(|s| *s) => break,
        };
        match n {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                if n > room {
                    cut = true;
                }
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (kept, cut)
}
