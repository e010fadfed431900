//! Accepting connections on the control socket.
//!
//! Each connection is sniffed before gRPC sees it: a shim that wants a session
//! first sends [`STDIO_PREAMBLE`] with its stdin, stdout and stderr attached
//! (SCM_RIGHTS); the fds are kept in the connection's [`ConnInfo`], which tonic
//! puts into every request's extensions, so `Spawn` on that connection can
//! take them. Any other first bytes (HTTP/2's `PRI *`) go straight to gRPC.
//! The peer's credentials (SO_PEERCRED) travel the same way.
//!
//! A peer inside a sandbox (another user or pid namespace, see [`crate::peer`])
//! is judged at accept time, before the preamble is read: its fds are never
//! received (the preamble is read without a control buffer, so the kernel
//! discards them), the refusal is reported once per connection through the
//! `refused` callback (the audit record), and every call on the connection
//! then fails with PermissionDenied (`service::check_peer`).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use warden_proto::STDIO_PREAMBLE;
use warden_sandbox::fdpass::{peek, recv_with_fds};

/// How long a new connection may take to show its first bytes.
const SNIFF_TIMEOUT: Duration = Duration::from_secs(10);

/// What the daemon knows about the other end of a connection.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub uid: u32,
    pub pid: Option<i32>,
    /// Why this peer is refused whatever its uid: it is inside a sandbox, or
    /// its namespaces could not be read.
    pub refused: Option<Arc<crate::peer::Refusal>>,
    stdio: Arc<Mutex<Option<[OwnedFd; 3]>>>,
}

impl ConnInfo {
    /// The client's stdin, stdout and stderr, once: a second Spawn on the same
    /// connection finds none.
    pub fn take_stdio(&self) -> Option<[OwnedFd; 3]> {
        self.stdio.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

pub struct Conn {
    stream: UnixStream,
    info: ConnInfo,
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;
    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Called once for each connection whose peer is refused at accept time.
pub type OnRefused = Arc<dyn Fn(&ConnInfo, &crate::peer::Refusal) + Send + Sync>;

/// Accepts connections forever, sniffing each in its own task, and yields the
/// ready ones. `own` are the daemon's namespaces, which every peer of the
/// daemon's uid (`uid`) must share; a peer of another uid is refused by the
/// uid check on every call instead. Ends when the returned receiver is dropped.
pub fn incoming(
    listener: UnixListener,
    uid: u32,
    own: crate::peer::Own,
    refused: OnRefused,
) -> mpsc::Receiver<io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = tx.closed() => return,
            };
            let tx = tx.clone();
            let refused = refused.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(SNIFF_TIMEOUT, sniff(stream, uid, own, refused)).await {
                    Ok(Ok(Some(conn))) => {
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Ok(Ok(None)) => {}
                    Ok(Err(e)) => tracing::debug!(error = %e, "dropped connection"),
                    Err(_) => tracing::debug!("dropped a connection that sent nothing"),
                }
            });
        }
    });
    rx
}

async fn sniff(
    stream: UnixStream,
    uid: u32,
    own: crate::peer::Own,
    on_refused: OnRefused,
) -> io::Result<Option<Conn>> {
    let cred = stream.peer_cred()?;
    // Another uid cannot even be inspected (its /proc/PID/ns is not ours to
    // read); the uid check refuses it, and audits it, on every call.
    let (pid, refusal) = if cred.uid() == uid {
        let (pid, refusal) = crate::peer::check(&own, &stream, cred.pid());
        (pid, refusal.map(Arc::new))
    } else {
        (cred.pid(), None)
    };
    let mut info = ConnInfo {
        uid: cred.uid(),
        pid,
        refused: refusal.clone(),
        stdio: Arc::new(Mutex::new(None)),
    };
    if let Some(r) = &refusal {
        on_refused(&info, r);
    }
    let mut head = [0u8; STDIO_PREAMBLE.len()];
    loop {
        stream.readable().await?;
        let n = match stream.try_io(Interest::READABLE, || peek(stream.as_fd(), &mut head)) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(None); // closed before saying anything
        }
        if head[..n] != STDIO_PREAMBLE[..n] {
            break; // gRPC
        }
        if n < STDIO_PREAMBLE.len() {
            // A prefix of the preamble: wait for the rest to arrive.
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        }
        let mut buf = [0u8; STDIO_PREAMBLE.len()];
        if info.refused.is_some() {
            // Consume the preamble without a control buffer: the kernel
            // discards the fds it carried, so none ever enters the daemon.
            let mut got = 0;
            while got < buf.len() {
                stream.readable().await?;
                match stream.try_read(&mut buf[got..]) {
                    Ok(0) => return Ok(None),
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            }
            break;
        }
        let (got, fds) = loop {
            stream.readable().await?;
            match stream.try_io(Interest::READABLE, || {
                recv_with_fds(stream.as_fd(), &mut buf, true)
            }) {
                Ok(r) => break r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if got != STDIO_PREAMBLE.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "short stdio preamble",
            ));
        }
        let fds: [OwnedFd; 3] = fds.try_into().map_err(|v: Vec<OwnedFd>| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("stdio preamble carried {} fds, expected 3", v.len()),
            )
        })?;
        info.stdio = Arc::new(Mutex::new(Some(fds)));
        break;
    }
    Ok(Some(Conn { stream, info }))
}
