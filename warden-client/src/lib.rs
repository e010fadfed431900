//! Connecting to `wardend` over its Unix socket, shared by `warden-shim` and
//! `wardenctl`.
//!
//! Before talking to a socket the client checks that it belongs to the current
//! user with mode 0600 (an impostor daemon must not receive the client's stdio
//! or environment). A shim connection first sends its stdin, stdout and
//! stderr (the stdio preamble), then speaks gRPC on the same connection.
#![forbid(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tonic::transport::Endpoint;
use warden_proto::v1::warden_client::WardenClient;
use warden_proto::STDIO_PREAMBLE;

pub use tonic::transport::Channel;
pub use tonic::Code;
pub use warden_proto::v1 as pb;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no daemon is listening on {socket}: {source}")]
    NotRunning { socket: PathBuf, source: io::Error },
    #[error("unsafe socket: {0}")]
    Unsafe(#[from] warden_core::paths::PathError),
    #[error("cannot connect to {socket}: {source}")]
    Connect { socket: PathBuf, source: io::Error },
    #[error("cannot pass stdio to the daemon: {0}")]
    Preamble(io::Error),
    #[error("gRPC channel: {0}")]
    Channel(#[from] tonic::transport::Error),
    #[error("cannot start wardend: {0}")]
    Autostart(#[from] AutostartError),
}

/// Why [`autostart`] could not start a daemon that answers.
#[derive(Debug, thiserror::Error)]
pub enum AutostartError {
    #[error("wardend not found next to this program or on PATH")]
    NotFound,
    /// The state directory, where the daemon's log goes.
    #[error(transparent)]
    StateDir(#[from] warden_core::paths::PathError),
    #[error("{}: {source}", path.display())]
    Log { path: PathBuf, source: io::Error },
    #[error("{}: {source}", daemon.display())]
    Spawn { daemon: PathBuf, source: io::Error },
    /// It exited; `last` is the last line of its log.
    #[error("{} exited with {status}: {last}", daemon.display())]
    Exited {
        daemon: PathBuf,
        status: std::process::ExitStatus,
        last: String,
    },
    #[error("{} did not answer on {} within {timeout:?} (log: {})", daemon.display(), socket.display(), log.display())]
    NoAnswer {
        daemon: PathBuf,
        socket: PathBuf,
        timeout: Duration,
        log: PathBuf,
    },
}

/// Connects a blocking Unix stream after checking the socket's owner and mode.
pub fn connect_raw(socket: &Path) -> Result<StdUnixStream, ClientError> {
    match std::fs::symlink_metadata(socket) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ClientError::NotRunning {
                socket: socket.to_path_buf(),
                source: e,
            })
        }
        _ => {}
    }
    warden_core::paths::verify_socket(socket)?;
    StdUnixStream::connect(socket).map_err(|e| match e.kind() {
        io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound => ClientError::NotRunning {
            socket: socket.to_path_buf(),
            source: e,
        },
        _ => ClientError::Connect {
            socket: socket.to_path_buf(),
            source: e,
        },
    })
}

/// Sends the stdio preamble: these three fds become the session's stdio.
pub fn send_stdio(
    stream: &StdUnixStream,
    stdio: [BorrowedFd<'_>; warden_proto::STDIO_FDS],
) -> Result<(), ClientError> {
    send_with_fds(stream.as_fd(), STDIO_PREAMBLE, &stdio).map_err(ClientError::Preamble)
}

/// Sends `data` with `fds` attached as SCM_RIGHTS (to its first byte, so
/// they arrive with the first `recvmsg` however the rest is split).
fn send_with_fds(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    use nix::sys::socket::{send, sendmsg, ControlMessage, MsgFlags};
    use std::os::fd::AsRawFd;
    let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    // MSG_NOSIGNAL: a closed peer is EPIPE, not a SIGPIPE. Elsewhere (macOS
    // has no such flag) Rust's runtime ignores SIGPIPE in every binary, so
    // the same EPIPE comes back.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let no_signal = MsgFlags::MSG_NOSIGNAL;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let no_signal = MsgFlags::empty();
    let sent = loop {
        match sendmsg::<()>(
            sock.as_raw_fd(),
            &[io::IoSlice::new(data)],
            &cmsg,
            no_signal,
            None,
        ) {
            Ok(n) => break n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let mut rest = &data[sent..];
    while !rest.is_empty() {
        match send(sock.as_raw_fd(), rest, no_signal) {
            Ok(n) => rest = &rest[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Wraps an already connected stream in a gRPC client. The channel never
/// reconnects: a lost daemon is an error, not a silent new connection.
pub async fn client_over(stream: StdUnixStream) -> Result<WardenClient<Channel>, ClientError> {
    stream
        .set_nonblocking(true)
        .map_err(ClientError::Preamble)?;
    let slot = Arc::new(Mutex::new(Some(stream)));
    let channel = Endpoint::from_static("http://wardend.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let slot = slot.clone();
            async move {
                let s = slot
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::NotConnected,
                            "connection to wardend was lost",
                        )
                    })?;
                let s = tokio::net::UnixStream::from_std(s)?;
                Ok::<_, io::Error>(TokioIo::new(s))
            }
        }))
        .await?;
    Ok(WardenClient::new(channel).max_decoding_message_size(64 << 20))
}

/// Connects for control calls (no stdio).
pub async fn connect(socket: &Path) -> Result<WardenClient<Channel>, ClientError> {
    let s = connect_raw(socket)?;
    client_over(s).await
}

/// Finds `wardend`: next to the running executable, else on PATH.
pub fn find_daemon() -> Option<PathBuf> {
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            let p = dir.join("wardend");
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("wardend"))
        .find(|p| p.is_file())
}

/// Environment variables an autostarted daemon keeps; everything else (the
/// first client's secrets among it) is left behind.
const DAEMON_ENV: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "PATH",
    "LANG",
    "XDG_RUNTIME_DIR",
    "XDG_STATE_HOME",
    "XDG_CONFIG_HOME",
    // The session bus, for the desktop notifications of approvals.
    "DBUS_SESSION_BUS_ADDRESS",
    "WARDEN_LOG",
    "WARDEN_DANGEROUSLY_RUN_SERVERS_AS_ROOT",
];

/// Starts `wardend --socket SOCKET` detached (its own session, stdio on
/// /dev/null, log in the state directory) and waits until it accepts
/// connections. Another client may win the race to start it: that is fine.
pub fn autostart(socket: &Path, timeout: Duration) -> Result<(), ClientError> {
    let daemon = find_daemon().ok_or(AutostartError::NotFound)?;
    let state = warden_core::paths::default_state_dir().map_err(AutostartError::from)?;
    warden_core::paths::ensure_private_dir(&state).map_err(AutostartError::from)?;
    let log_path = state.join("wardend.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|source| AutostartError::Log {
            path: log_path.clone(),
            source,
        })?;
    let mut cmd = Command::new(&daemon);
    cmd.arg("--socket")
        .arg(socket)
        .env_clear()
        .envs(
            DAEMON_ENV
                .iter()
                .filter_map(|k| std::env::var_os(k).map(|v| (k, v))),
        )
        .env("WARDEN_AUTOSTARTED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log));
    let mut child = cmd.spawn().map_err(|source| AutostartError::Spawn {
        daemon: daemon.clone(),
        source,
    })?;
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(s) = connect_raw(socket) {
            drop(s);
            // Reap it later without blocking: the daemon outlives us.
            std::thread::spawn(move || child.wait());
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            // Lost a race with another starter? Then its daemon answers soon.
            if Instant::now() < deadline && connect_raw(socket).is_ok() {
                return Ok(());
            }
            if !status.success() && Instant::now() + Duration::from_millis(500) > deadline {
                let tail = std::fs::read_to_string(&log_path).unwrap_or_default();
                let last = tail.lines().last().unwrap_or("").to_string();
                return Err(AutostartError::Exited {
                    daemon,
                    status,
                    last,
                }
                .into());
            }
        }
        if Instant::now() >= deadline {
            return Err(AutostartError::NoAnswer {
                daemon,
                socket: socket.to_path_buf(),
                timeout,
                log: log_path,
            }
            .into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages are the ones the shim printed when the reason was a string.
    #[test]
    fn autostart_errors_keep_their_messages_and_sources() {
        let e = ClientError::from(AutostartError::NotFound);
        assert_eq!(
            e.to_string(),
            "cannot start wardend: wardend not found next to this program or on PATH"
        );
        let e = ClientError::from(AutostartError::NoAnswer {
            daemon: "/usr/bin/wardend".into(),
            socket: "/run/user/1000/warden/wardend.sock".into(),
            timeout: Duration::from_secs(10),
            log: "/home/u/.local/state/warden/wardend.log".into(),
        });
        assert_eq!(
            e.to_string(),
            "cannot start wardend: /usr/bin/wardend did not answer on \
             /run/user/1000/warden/wardend.sock within 10s (log: \
             /home/u/.local/state/warden/wardend.log)"
        );
        let e = ClientError::from(AutostartError::Spawn {
            daemon: "/usr/bin/wardend".into(),
            source: io::Error::from_raw_os_error(2),
        });
        assert_eq!(
            e.to_string(),
            format!(
                "cannot start wardend: /usr/bin/wardend: {}",
                io::Error::from_raw_os_error(2)
            )
        );
        // The chain: ClientError -> AutostartError -> io::Error.
        let inner = std::error::Error::source(&e).expect("the autostart error");
        assert!(std::error::Error::source(inner).is_some());
    }
}
