//! The egress bridge of the Docker backend: how a session's egress proxy,
//! served by the daemon on the host, is reachable inside a `--network none`
//! container as `127.0.0.1:3128`.
//!
//! The container's entrypoint is `warden-bridge` ([`BRIDGE`]; its source
//! is `warden-sandbox/bridge/main.rs`), a static program [`install`]ed in
//! the daemon's directory and bind-mounted read-only at `/.warden/bridge`,
//! run as `/.warden/bridge SOCKET PORT -- PROGRAM [ARGS...]`. In the
//! container's network namespace it listens on 127.0.0.1:PORT, connects
//! to SOCKET (the daemon's Unix socket, [`listen`], bind-mounted too),
//! sends the listener with SCM_RIGHTS and the byte `L`, and waits. The
//! daemon checks the listener ([`receive`]), answers `K` (or `N`: the
//! bridge exits 125 and the server never runs), and from then on accepts
//! on it as on the native sandbox's listener. The bridge closes the Unix
//! socket and its copy of the listener and execs the server.
//!
//! Why this way:
//! - No helper process stays in the container: the bridge *becomes* the
//!   server, so nothing of Warden's runs where the server could attack it,
//!   and there is no relay to keep alive or to crash.
//! - The listener is made before any untrusted code runs, by our own
//!   program, so the server cannot choose what the daemon receives; the
//!   daemon still checks what it got (a listening IPv4 TCP socket bound to
//!   127.0.0.1, on the port asked for) and refuses anything else.
//! - The Unix socket is closed once used, before the exec: the server holds
//!   no channel to the daemon and cannot send it anything (its path is in a
//!   read-only bind mount, and the daemon accepts one connection per
//!   session).

use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{getsockname, getsockopt, sockopt, AddressFamily, SockType, SockaddrLike};
use sha2::{Digest, Sha256};

/// The static `warden-bridge` executable (empty off Linux).
pub const BRIDGE: &[u8] = warden_sandbox::bridge::BRIDGE;

/// The file name [`install`] gives [`BRIDGE`]: its content's hash, so
/// daemons of different builds sharing a directory never overwrite each
/// other's bridge under a running container.
pub fn file_name() -> String {
    let hash = hex::encode(Sha256::digest(BRIDGE));
    format!("warden-bridge-{}", &hash[..16])
}

/// Writes [`BRIDGE`] to `dir/warden-bridge-<16 hex of its sha256>`, mode
/// 0555, through a temporary file and a rename, and returns its path. An
/// identical file already there (same bytes, mode 0555) is reused. `dir`
/// is created 0700 if missing.
pub fn install(dir: &Path) -> io::Result<PathBuf> {
    install_file(dir, &file_name(), BRIDGE, 0o555)
}

/// Writes `bytes` to `dir/name` with `mode`, as [`install`] does (`name`
/// should name the content, e.g. by its hash: an identical file there is
/// reused, a different one replaced by a rename).
pub fn install_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> io::Result<PathBuf> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let path = dir.join(name);
    if is_installed(&path, bytes, mode) {
        return Ok(path);
    }
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(io::Error::other)?;
    let tmp = dir.join(format!(".{name}.{}", hex::encode(nonce)));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| path)
}

/// Whether `path` is a regular file (not a link) of `mode` holding `bytes`.
fn is_installed(path: &Path, bytes: &[u8], mode: u32) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o7777 == mode => {
            m.len() == bytes.len() as u64 && std::fs::read(path).is_ok_and(|b| b == bytes)
        }
        _ => false,
    }
}

/// Binds the Unix socket the bridge connects to at `path` (a stale file
/// there is removed first), mode 0666: its directory is the daemon's own
/// (0700), and the container's user may be remapped to any uid.
pub fn listen(path: &Path) -> io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(listener)
}

/// Accepts one connection on `listener` within `timeout`, takes the
/// listener the bridge sends (the byte `L` and exactly one fd), checks it
/// is a listening IPv4 TCP socket bound to 127.0.0.1 (on `expect_port`
/// when given) and answers `K`. Anything else is answered `N` (best
/// effort) and is an error naming what was wrong; fds beyond the one are
/// closed.
pub fn receive(
    listener: &UnixListener,
    expect_port: Option<u16>,
    timeout: Duration,
) -> Result<OwnedFd, String> {
    let deadline = Instant::now() + timeout;
    let late = || {
        format!(
            "the egress bridge sent no listener within {}",
            shown(timeout)
        )
    };
    let mut stream = accept(listener, deadline).map_err(|e| match e {
        Waited::Late => late(),
        Waited::Failed(e) => format!("cannot accept the egress bridge's connection: {e}"),
    })?;
    let checked = (|| {
        let left = deadline.saturating_duration_since(Instant::now());
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .map_err(|e| format!("cannot read from the egress bridge: {e}"))?;
        let mut buf = [0u8; 16];
        let (n, mut fds) = loop {
            match warden_sandbox::fdpass::recv_with_fds(stream.as_fd(), &mut buf, false) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(late())
                }
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    return Err("the egress bridge sent more than one file descriptor".into())
                }
                Err(e) => return Err(format!("cannot read from the egress bridge: {e}")),
                Ok(got) => break got,
            }
        };
        match &buf[..n] {
            b"L" => {}
            [] => return Err("the egress bridge closed its connection without a listener".into()),
            other => {
                return Err(format!(
                    "the egress bridge sent {:?}, not the one byte `L`",
                    String::from_utf8_lossy(other)
                ))
            }
        }
        let fd = match fds.len() {
            1 => fds.remove(0),
            0 => return Err("the egress bridge sent no file descriptor".into()),
            n => {
                return Err(format!(
                    "the egress bridge sent {n} file descriptors, not one"
                ))
            }
        };
        check(&fd, expect_port)?;
        Ok(fd)
    })();
    match checked {
        Ok(fd) => {
            stream
                .write_all(b"K")
                .map_err(|e| format!("cannot answer the egress bridge: {e}"))?;
            Ok(fd)
        }
        Err(why) => {
            let _ = stream.write_all(b"N");
            Err(why)
        }
    }
}

/// Why [`accept`] returned without a connection.
enum Waited {
    Late,
    Failed(io::Error),
}

/// One connection on `listener` before `deadline` (nonblocking accept and
/// poll; the listener is left blocking again).
fn accept(listener: &UnixListener, deadline: Instant) -> Result<UnixStream, Waited> {
    listener.set_nonblocking(true).map_err(Waited::Failed)?;
    let accepted = (|| loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).map_err(Waited::Failed)?;
                return Ok(stream);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(Waited::Late);
                }
                // Rounded up, so a sub-millisecond rest does not spin.
                let ms = left.as_millis().saturating_add(1);
                let wait = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
                let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
                match poll(&mut fds, wait) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => return Err(Waited::Failed(e.into())),
                }
            }
            Err(e) => return Err(Waited::Failed(e)),
        }
    })();
    let restored = listener.set_nonblocking(false);
    let stream = accepted?;
    restored.map_err(Waited::Failed)?;
    Ok(stream)
}

/// The received fd is a listening IPv4 TCP socket on 127.0.0.1 (`port`).
fn check(fd: &OwnedFd, port: Option<u16>) -> Result<(), String> {
    let what = "the egress bridge sent";
    let addr = match getsockname::<nix::sys::socket::SockaddrStorage>(fd.as_raw_fd()) {
        Err(nix::errno::Errno::ENOTSOCK) => {
            return Err(format!("{what} a file descriptor that is not a socket"))
        }
        Err(e) => return Err(format!("cannot read the address of the socket {what}: {e}")),
        Ok(a) => a,
    };
    let Some(sin) = addr.as_sockaddr_in() else {
        let family = match addr.family() {
            Some(AddressFamily::Unix) => "a Unix".to_owned(),
            Some(AddressFamily::Inet6) => "an IPv6".to_owned(),
            other => format!("a {other:?}"),
        };
        return Err(format!("{what} {family} socket, not an IPv4 (AF_INET) one"));
    };
    let bound = SocketAddrV4::from(*sin);
    match getsockopt(fd, sockopt::SockType) {
        Ok(SockType::Stream) => {}
        Ok(other) => {
            return Err(format!(
                "{what} a socket of type {other:?} bound to {bound}, not a TCP (SOCK_STREAM) one"
            ))
        }
        Err(e) => return Err(format!("cannot read the type of the socket {what}: {e}")),
    }
    match getsockopt(fd, sockopt::AcceptConn) {
        Ok(true) => {}
        Ok(false) => {
            return Err(format!(
                "{what} a socket bound to {bound} that is not listening"
            ))
        }
        Err(e) => {
            return Err(format!(
                "cannot read whether the socket {what} listens: {e}"
            ))
        }
    }
    let want_port = port.unwrap_or(bound.port());
    if *bound.ip() != Ipv4Addr::LOCALHOST || bound.port() != want_port {
        let want = match port {
            Some(p) => SocketAddrV4::new(Ipv4Addr::LOCALHOST, p).to_string(),
            None => Ipv4Addr::LOCALHOST.to_string(),
        };
        return Err(format!("{what} a socket bound to {bound}, not {want}"));
    }
    Ok(())
}

/// `10 s`, `300 ms`.
fn shown(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}
