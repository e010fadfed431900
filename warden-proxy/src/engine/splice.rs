//! Zero-copy relaying of bulk bytes between two TCP sockets: `splice(2)` from the
//! source socket into a pipe and from the pipe into the destination socket, so a
//! download through the proxy is not copied through user space twice. Used where
//! the proxy only counts bytes (response bodies of known length or until close,
//! request bodies of known length, tunnels); heads and chunked bodies, which
//! the proxy parses, go through buffers as before.

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::OwnedFd;
use std::time::Duration;

#[cfg(target_os = "linux")]
use nix::fcntl::{splice, OFlag, SpliceFFlags};
#[cfg(target_os = "linux")]
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bytes asked of one `splice` call (the kernel moves at most what the pipe
/// holds).
#[cfg(target_os = "linux")]
const STEP: usize = 1 << 20;

/// A non-blocking pipe that holds the bytes in flight.
#[cfg(target_os = "linux")]
pub(crate) struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    /// Bytes in the pipe not yet written to the destination.
    held: usize,
}

#[cfg(target_os = "linux")]
impl Pipe {
    pub(crate) fn new() -> io::Result<Pipe> {
        let (r, w) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        // The default size (64 KiB). Larger pipes would mean fewer wake-ups, but
        // pipe pages count against the user's quota (pipe-user-pages-soft),
        // which a session's many tunnels must not eat up for the daemon's
        // other pipes (the stdio relays of every session).
        Ok(Pipe { r, w, held: 0 })
    }
}

#[cfg(target_os = "linux")]
fn flags() -> SpliceFFlags {
    SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK
}

fn idle_error() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "idle timeout")
}

/// Waits for readiness, at most `idle` when given.
async fn bounded(
    idle: Option<Duration>,
    ready: impl std::future::Future<Output = io::Result<()>>,
) -> io::Result<()> {
    match idle {
        Some(d) => tokio::time::timeout(d, ready)
            .await
            .map_err(|_| idle_error())?,
        None => ready.await,
    }
}

/// Moves bytes from `src` to `dst` until `limit` bytes have moved (None: until
/// `src` reaches end of stream). `progress` sees each count written to `dst`.
/// Waiting for either side longer than `idle` (when given) is an error. Returns the bytes
/// moved and whether `src` ended (an end before `limit` is `UnexpectedEof`).
#[cfg(target_os = "linux")]
pub(crate) async fn relay(
    src: &TcpStream,
    dst: &TcpStream,
    pipe: &mut Pipe,
    limit: Option<u64>,
    idle: Option<Duration>,
    mut progress: impl FnMut(usize),
) -> io::Result<u64> {
    let mut moved: u64 = 0;
    loop {
        // Drain the pipe first: the kernel may have taken less than we asked.
        while pipe.held > 0 {
            bounded(idle, dst.writable()).await?;
            match dst.try_io(Interest::WRITABLE, || {
                splice(&pipe.r, None, dst, None, pipe.held, flags()).map_err(io::Error::from)
            }) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => {
                    pipe.held -= n;
                    moved += n as u64;
                    progress(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        let want = match limit {
            Some(l) if moved >= l => return Ok(moved),
            Some(l) => ((l - moved) as usize).min(STEP),
            None => STEP,
        };
        bounded(idle, src.readable()).await?;
        match src.try_io(Interest::READABLE, || {
            splice(src, None, &pipe.w, None, want, flags()).map_err(io::Error::from)
        }) {
            Ok(0) if limit.is_some() => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed",
                ))
            }
            Ok(0) => return Ok(moved),
            Ok(n) => pipe.held += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            // A full pipe (EAGAIN on the pipe side) also surfaces as WouldBlock
            // and is drained above; anything else ends the relay.
            Err(e) => return Err(e),
        }
    }
}

/// Off Linux: the bytes in flight, in a buffer.
#[cfg(not(target_os = "linux"))]
pub(crate) struct Pipe {
    buf: Vec<u8>,
    /// `buf[start..end]` is still to be written.
    start: usize,
    end: usize,
}

#[cfg(not(target_os = "linux"))]
impl Pipe {
    pub(crate) fn new() -> io::Result<Pipe> {
        Ok(Pipe {
            buf: vec![0u8; 64 << 10],
            start: 0,
            end: 0,
        })
    }
}

/// [`relay`] through [`Pipe`]'s buffer (no `splice` here).
#[cfg(not(target_os = "linux"))]
pub(crate) async fn relay(
    src: &TcpStream,
    dst: &TcpStream,
    pipe: &mut Pipe,
    limit: Option<u64>,
    idle: Option<Duration>,
    mut progress: impl FnMut(usize),
) -> io::Result<u64> {
    let mut moved: u64 = 0;
    loop {
        while pipe.start < pipe.end {
            bounded(idle, dst.writable()).await?;
            match dst.try_write(&pipe.buf[pipe.start..pipe.end]) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => {
                    pipe.start += n;
                    moved += n as u64;
                    progress(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        pipe.start = 0;
        pipe.end = 0;
        let want = match limit {
            Some(l) if moved >= l => return Ok(moved),
            Some(l) => ((l - moved) as usize).min(pipe.buf.len()),
            None => pipe.buf.len(),
        };
        bounded(idle, src.readable()).await?;
        match src.try_read(&mut pipe.buf[..want]) {
            Ok(0) if limit.is_some() => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed",
                ))
            }
            Ok(0) => return Ok(moved),
            Ok(n) => pipe.end = n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}
