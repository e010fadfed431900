//! Socket activation (`sd_listen_fds(3)`): a service manager (systemd's
//! `wardend.socket`, `systemd-socket-activate`, see `docs/install.md`) binds
//! the control socket, passes it as fd 3 and starts `wardend` on the first
//! connection.
//!
//! The contract, in `main`'s order:
//! - `LISTEN_PID` must be this process and `LISTEN_FDS` at least 1, else the
//!   variables are not for us (a parent's, leaked): `wardend` binds its own
//!   socket as usual. `LISTEN_FDS` of 2 or more is an error (one socket).
//! - fd 3 must be an `AF_UNIX` stream socket that listens, bound to a path
//!   (`SO_TYPE`, `SO_ACCEPTCONN`, `getsockname`: safe `nix`; taking the fd
//!   is `warden_sandbox::activation`'s).
//! - The variables are removed before any thread exists (`main`), so no child
//!   inherits them (the sandbox's are started with an empty environment too).
//! - `--socket`/`$WARDEN_SOCKET` given as well: the activated socket wins when
//!   its path is the same, else [`ActivationError::Mismatch`] ([`reconcile`]).
//! - The daemon then checks the socket as it checks its own (`main.rs`): the
//!   directory private to this user, the socket owned by them with mode 0600;
//!   takes the single-instance lock next to it; serves with the same peer
//!   checks; and at shutdown leaves the socket to the service manager that
//!   made it (never unlinks it).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use nix::sys::socket::{getsockname, getsockopt, sockopt, AddressFamily, SockType, SockaddrLike};

/// The variables of the protocol (removed by `main` once read).
pub const LISTEN_PID: &str = "LISTEN_PID";
pub const LISTEN_FDS: &str = "LISTEN_FDS";
pub const LISTEN_FDNAMES: &str = "LISTEN_FDNAMES";
pub const VARS: [&str; 3] = [LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES];

#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    #[error("socket activation: {LISTEN_FDS}={value:?} is not a number")]
    BadCount { value: String },
    #[error("socket activation: {LISTEN_PID}={value:?} is not a process id")]
    BadPid { value: String },
    #[error(
        "socket activation: the service manager passed {count} descriptors ({LISTEN_FDS}={count}); \
         wardend takes exactly one listening socket (one ListenStream= in wardend.socket)"
    )]
    TooMany { count: u32 },
    #[error("socket activation: cannot take the passed descriptor: {0}")]
    Inherit(#[from] warden_sandbox::activation::InheritError),
    #[error("socket activation: cannot inspect fd 3: {0}")]
    Inspect(nix::errno::Errno),
    #[error(
        "socket activation: fd 3 is not a Unix socket (family {family}); wardend.socket needs \
         ListenStream=PATH"
    )]
    NotUnix { family: String },
    #[error(
        "socket activation: fd 3 is a {kind} socket, not a stream socket; wardend.socket needs \
         ListenStream=PATH"
    )]
    NotStream { kind: String },
    #[error("socket activation: fd 3 is a stream socket that does not listen (Accept=no needed)")]
    NotListening,
    #[error(
        "socket activation: fd 3 is not bound to a path ({what}); wardend needs a socket file \
         whose owner and mode clients can check"
    )]
    NoPath { what: &'static str },
    #[error(
        "socket activation: the service manager passed {activated} but {given} names {explicit}; \
         drop {given} or make both name the same socket"
    )]
    Mismatch {
        activated: PathBuf,
        explicit: PathBuf,
        given: &'static str,
    },
}

/// What `LISTEN_PID` and `LISTEN_FDS` ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// No socket activation (no `LISTEN_FDS`, or 0).
    None,
    /// The variables name another process (or no `LISTEN_PID`): not ours.
    NotOurs { listen_pid: Option<String> },
    /// Take this many descriptors from fd 3.
    Fds(u32),
}

/// Judges the variables' values (pure).
pub fn parse(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    own_pid: u32,
) -> Result<Request, ActivationError> {
    let Some(fds) = listen_fds else {
        return Ok(Request::None);
    };
    let count: u32 = fds.trim().parse().map_err(|_| ActivationError::BadCount {
        value: fds.to_owned(),
    })?;
    if count == 0 {
        return Ok(Request::None);
    }
    let pid = match listen_pid {
        None => return Ok(Request::NotOurs { listen_pid: None }),
        Some(p) => p
            .trim()
            .parse::<u32>()
            .map_err(|_| ActivationError::BadPid {
                value: p.to_owned(),
            })?,
    };
    if pid != own_pid {
        return Ok(Request::NotOurs {
            listen_pid: listen_pid.map(str::to_owned),
        });
    }
    if count > 1 {
        return Err(ActivationError::TooMany { count });
    }
    Ok(Request::Fds(count))
}

/// The listening socket a service manager passed, and its path.
#[derive(Debug)]
pub struct Activated {
    pub listener: UnixListener,
    pub path: PathBuf,
}

/// What `main` found: an activated socket, or why there is none.
#[derive(Debug)]
pub enum Found {
    Activated(Activated),
    None,
    NotOurs { listen_pid: Option<String> },
}

/// Reads the variables (through `get`) and takes and checks fd 3 when they
/// are ours. Call first thing in `main`, before any thread or descriptor
/// exists (the descriptor is taken by number).
pub fn take(get: impl Fn(&str) -> Option<String>) -> Result<Found, ActivationError> {
    let pid = get(LISTEN_PID);
    let fds = get(LISTEN_FDS);
    match parse(pid.as_deref(), fds.as_deref(), std::process::id())? {
        Request::None => Ok(Found::None),
        Request::NotOurs { listen_pid } => Ok(Found::NotOurs { listen_pid }),
        Request::Fds(n) => {
            let mut fds = warden_sandbox::activation::take_listen_fds(n)?;
            match fds.pop() {
                Some(fd) => check(fd).map(Found::Activated),
                None => Ok(Found::None),
            }
        }
    }
}

/// The checks of fd 3: a listening `AF_UNIX` stream socket bound to a path.
pub fn check(fd: OwnedFd) -> Result<Activated, ActivationError> {
    let addr = getsockname::<nix::sys::socket::SockaddrStorage>(fd.as_raw_fd())
        .map_err(ActivationError::Inspect)?;
    match addr.family() {
        Some(AddressFamily::Unix) => {}
        other => {
            return Err(ActivationError::NotUnix {
                family: other.map_or_else(|| "unknown".into(), |f| format!("{f:?}")),
            })
        }
    }
    let kind = getsockopt(&fd, sockopt::SockType).map_err(ActivationError::Inspect)?;
    if kind != SockType::Stream {
        return Err(ActivationError::NotStream {
            kind: format!("{kind:?}").to_lowercase(),
        });
    }
    if !getsockopt(&fd, sockopt::AcceptConn).map_err(ActivationError::Inspect)? {
        return Err(ActivationError::NotListening);
    }
    let unix = addr
        .as_unix_addr()
        .ok_or(ActivationError::NoPath { what: "no address" })?;
    let path = match unix.path() {
        Some(p) => p.to_path_buf(),
        #[cfg(any(target_os = "linux", target_os = "android"))]
        None if unix.as_abstract().is_some() => {
            return Err(ActivationError::NoPath {
                what: "an abstract socket",
            })
        }
        None => return Err(ActivationError::NoPath { what: "unnamed" }),
    };
    Ok(Activated {
        listener: UnixListener::from(fd),
        path,
    })
}

/// With an activated socket at `activated`, an explicit one (`--socket`,
/// else `$WARDEN_SOCKET`: `given` says which) must name the same file;
/// relative paths are taken from `cwd`, and directories compared once
/// resolved.
pub fn reconcile(
    activated: &Path,
    explicit: Option<(&Path, &'static str)>,
    cwd: &Path,
) -> Result<(), ActivationError> {
    let Some((explicit, given)) = explicit else {
        return Ok(());
    };
    let abs = |p: &Path| cwd.join(p);
    let resolved = |p: &Path| -> Option<PathBuf> {
        let p = abs(p);
        let dir = p.parent()?.canonicalize().ok()?;
        Some(dir.join(p.file_name()?))
    };
    let same = abs(explicit) == abs(activated)
        || matches!((resolved(explicit), resolved(activated)), (Some(a), Some(b)) if a == b);
    if same {
        Ok(())
    } else {
        Err(ActivationError::Mismatch {
            activated: activated.to_path_buf(),
            explicit: explicit.to_path_buf(),
            given,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_are_judged_as_sd_listen_fds_does() {
        let me = 4242;
        assert_eq!(parse(None, None, me).unwrap(), Request::None);
        assert_eq!(parse(Some("4242"), Some("0"), me).unwrap(), Request::None);
        assert_eq!(parse(Some("4242"), Some("1"), me).unwrap(), Request::Fds(1));
        assert_eq!(
            parse(Some("1"), Some("1"), me).unwrap(),
            Request::NotOurs {
                listen_pid: Some("1".into())
            }
        );
        assert_eq!(
            parse(None, Some("1"), me).unwrap(),
            Request::NotOurs { listen_pid: None }
        );
        assert_eq!(
            parse(Some("4242"), Some("2"), me).unwrap_err().to_string(),
            "socket activation: the service manager passed 2 descriptors (LISTEN_FDS=2); \
             wardend takes exactly one listening socket (one ListenStream= in wardend.socket)"
        );
        // Another process's two sockets are not an error of ours.
        assert!(matches!(
            parse(Some("1"), Some("2"), me).unwrap(),
            Request::NotOurs { .. }
        ));
        assert!(matches!(
            parse(Some("4242"), Some("x"), me),
            Err(ActivationError::BadCount { .. })
        ));
        assert!(matches!(
            parse(Some("me"), Some("1"), me),
            Err(ActivationError::BadPid { .. })
        ));
    }

    #[test]
    fn an_explicit_socket_must_be_the_activated_one() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().canonicalize().unwrap();
        let sock = dir.join("wardend.sock");
        assert!(reconcile(&sock, None, &dir).is_ok());
        assert!(reconcile(&sock, Some((&sock, "--socket")), Path::new("/")).is_ok());
        assert!(reconcile(&sock, Some((Path::new("wardend.sock"), "--socket")), &dir).is_ok());
        // The same directory through a symlink.
        std::os::unix::fs::symlink(&dir, dir.join("link")).unwrap();
        assert!(reconcile(
            &sock,
            Some((&dir.join("link/wardend.sock"), "$WARDEN_SOCKET")),
            &dir
        )
        .is_ok());
        let other = dir.join("other.sock");
        assert_eq!(
            reconcile(&sock, Some((&other, "--socket")), &dir)
                .unwrap_err()
                .to_string(),
            format!(
                "socket activation: the service manager passed {} but --socket names {}; drop \
                 --socket or make both name the same socket",
                sock.display(),
                other.display()
            )
        );
    }

    fn listener_fd(l: UnixListener) -> OwnedFd {
        OwnedFd::from(l)
    }

    /// What fd 3 may be: the checks take sockets made here, each of a kind a
    /// unit could pass by mistake.
    #[test]
    fn only_a_listening_unix_stream_socket_bound_to_a_path_is_taken() {
        use nix::sys::socket::{bind, listen, socket, Backlog, SockFlag, UnixAddr};
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("s.sock");
        let ok = check(listener_fd(UnixListener::bind(&path).unwrap())).unwrap();
        assert_eq!(ok.path, path);

        let dgram = std::os::unix::net::UnixDatagram::bind(t.path().join("d.sock")).unwrap();
        assert_eq!(
            check(OwnedFd::from(dgram)).unwrap_err().to_string(),
            "socket activation: fd 3 is a datagram socket, not a stream socket; wardend.socket \
             needs ListenStream=PATH"
        );
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(matches!(
            check(OwnedFd::from(tcp)),
            Err(ActivationError::NotUnix { .. })
        ));
        // Bound, not listening.
        let s = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind(
            s.as_raw_fd(),
            &UnixAddr::new(&t.path().join("n.sock")).unwrap(),
        )
        .unwrap();
        assert!(matches!(check(s), Err(ActivationError::NotListening)));
        // Abstract.
        let s = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind(
            s.as_raw_fd(),
            &UnixAddr::new_abstract(b"warden-test-abstract").unwrap(),
        )
        .unwrap();
        listen(&s, Backlog::new(1).unwrap()).unwrap();
        assert_eq!(
            check(s).unwrap_err().to_string(),
            "socket activation: fd 3 is not bound to a path (an abstract socket); wardend needs \
             a socket file whose owner and mode clients can check"
        );
    }
}
