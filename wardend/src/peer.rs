//! Is the other end of a control connection inside a sandbox?
//!
//! The socket is 0600 and every call checks the peer's uid, but a sandboxed
//! server runs with the user's uid too: if a grant ever exposes the socket
//! (a read-only bind is enough, `connect` works on it), the uid check alone
//! would let the server start a second session with a policy it wrote. Every
//! sandbox lives in a user and a pid namespace of its own, so the daemon
//! refuses a peer whose user or pid namespace is not the daemon's own. A peer
//! whose namespaces cannot be read is refused too (fail closed).
//!
//! Which process is "the peer": the one that connected. With `SO_PEERPIDFD`
//! (Linux 6.5+) the daemon holds a pidfd of it, reads its pid from the
//! pidfd's fdinfo, reads the namespaces from `/proc/<pid>/ns`, and reads the
//! fdinfo again: a pid that is still the pidfd's afterwards was that process
//! all along (a live process's pid cannot be reused), and an exited peer
//! shows `Pid: -1` and is refused. On older kernels the `SO_PEERCRED` pid is
//! used as is, which a peer that exits right after connecting could race with
//! pid reuse (documented in `docs/security-model.md`).
//!
//! Off Linux there are no namespaces to compare, and no sandbox of Warden's
//! can reach the socket: Seatbelt's profile allows no Unix socket and no
//! file access to it (no grant may hold it, `policy::reserved`), and a
//! container never has it. There the uid check is the check ([`check`]
//! refuses no peer of the daemon's uid).

use std::fmt;
use std::io;
use std::os::fd::AsFd;
#[cfg(target_os = "linux")]
use std::{
    fs,
    os::fd::{AsRawFd, OwnedFd},
    os::unix::fs::MetadataExt,
};

#[cfg(target_os = "linux")]
use nix::sys::socket::{getsockopt, sockopt};
use warden_audit::event::PeerNamespaces;

/// A namespace, as the kernel names it: the nsfs inode (device and inode
/// number) `/proc/<pid>/ns/<kind>` points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NsId {
    pub dev: u64,
    pub ino: u64,
}

impl fmt::Display for NsId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // What `readlink /proc/PID/ns/user` shows: `user:[4026531837]`.
        write!(f, "[{}]", self.ino)
    }
}

/// The user and pid namespaces of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Namespaces {
    pub user: NsId,
    pub pid: NsId,
}

#[cfg(target_os = "linux")]
fn ns_of(pid: &str, kind: &str) -> io::Result<NsId> {
    let md = fs::metadata(format!("/proc/{pid}/ns/{kind}"))?;
    Ok(NsId {
        dev: md.dev(),
        ino: md.ino(),
    })
}

#[cfg(target_os = "linux")]
fn namespaces_of(pid: &str) -> io::Result<Namespaces> {
    Ok(Namespaces {
        user: ns_of(pid, "user")?,
        pid: ns_of(pid, "pid")?,
    })
}

/// What every peer of the daemon's uid must share with it: its user and
/// pid namespaces.
#[cfg(target_os = "linux")]
pub type Own = Namespaces;

/// Off Linux: nothing beyond the uid (see the module's docs).
#[cfg(not(target_os = "linux"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Own;

/// The daemon's own namespaces.
#[cfg(target_os = "linux")]
pub fn own() -> io::Result<Own> {
    namespaces_of("self")
}

/// Off Linux: nothing to read.
#[cfg(not(target_os = "linux"))]
pub fn own() -> io::Result<Own> {
    Ok(Own)
}

/// The peer at the other end of `sock` (`cred_pid`: its `SO_PEERCRED`
/// pid), of the daemon's uid: its pid as far as known, and why it is
/// refused, if it is ([`inspect`], [`judge`]).
#[cfg(target_os = "linux")]
pub fn check(own: &Own, sock: &impl AsFd, cred_pid: Option<i32>) -> (Option<i32>, Option<Refusal>) {
    let peer = inspect(sock, cred_pid);
    let refusal = judge(own, &peer);
    (peer.pid.or(cred_pid), refusal)
}

/// Off Linux: the peer is of the daemon's uid, which is the whole check.
#[cfg(not(target_os = "linux"))]
pub fn check(
    _own: &Own,
    _sock: &impl AsFd,
    cred_pid: Option<i32>,
) -> (Option<i32>, Option<Refusal>) {
    (cred_pid, None)
}

/// How the peer process was identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `SO_PEERPIDFD`: no pid-reuse race.
    Pidfd,
    /// The `SO_PEERCRED` pid (kernels before 6.5).
    PeerCred,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Pidfd => "SO_PEERPIDFD",
            Via::PeerCred => "SO_PEERCRED",
        }
    }
}

/// What the daemon found out about a peer's namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerNs {
    pub via: Via,
    /// The peer's pid in the daemon's pid namespace, if known.
    pub pid: Option<i32>,
    /// The peer's namespaces, or why they could not be read.
    pub ns: Result<Namespaces, String>,
}

/// Why a peer is refused, for the error and the audit record
/// (`daemon.peer`, with the peer's and the daemon's uid added).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// One line: "peer is inside a sandbox: ..." or "cannot tell whether ...".
    pub reason: String,
    /// The peer's pid, if known.
    pub peer_pid: Option<i32>,
    pub namespaces: PeerNamespaces,
}

/// The pid a pidfd refers to, from `/proc/self/fdinfo`: `None` if the
/// process has exited or is not visible in the daemon's pid namespace.
#[cfg(target_os = "linux")]
fn pidfd_pid(fd: &OwnedFd) -> io::Result<Option<i32>> {
    let info = fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))?;
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Pid: line in fdinfo"))?;
    Ok((pid > 0).then_some(pid))
}

/// Looks at the process at the other end of `sock`. `cred_pid` is the
/// `SO_PEERCRED` pid, used when the kernel has no `SO_PEERPIDFD`.
#[cfg(target_os = "linux")]
pub fn inspect(sock: &impl AsFd, cred_pid: Option<i32>) -> PeerNs {
    match getsockopt(sock, sockopt::PeerPidfd) {
        Ok(pidfd) => {
            let before = match pidfd_pid(&pidfd) {
                Ok(Some(p)) => p,
                Ok(None) => {
                    return PeerNs {
                        via: Via::Pidfd,
                        pid: None,
                        ns: Err("the peer process has exited or is not visible in the \
                                 daemon's pid namespace"
                            .into()),
                    }
                }
                Err(e) => {
                    return PeerNs {
                        via: Via::Pidfd,
                        pid: None,
                        ns: Err(format!("cannot read the peer's pidfd: {e}")),
                    }
                }
            };
            let ns = namespaces_of(&before.to_string())
                .map_err(|e| format!("cannot read /proc/{before}/ns: {e}"));
            // Still the same live process after the reads: the pid was not reused.
            let ns = match pidfd_pid(&pidfd) {
                Ok(Some(after)) if after == before => ns,
                _ => Err("the peer process exited while it was inspected".into()),
            };
            PeerNs {
                via: Via::Pidfd,
                pid: Some(before),
                ns,
            }
        }
        Err(_) => {
            // ENOPROTOOPT before Linux 6.5.
            let ns = match cred_pid.filter(|&p| p > 0) {
                Some(p) => namespaces_of(&p.to_string())
                    .map_err(|e| format!("cannot read /proc/{p}/ns: {e}")),
                None => Err("the peer's pid is not visible in the daemon's pid namespace".into()),
            };
            PeerNs {
                via: Via::PeerCred,
                pid: cred_pid,
                ns,
            }
        }
    }
}

/// The decision: `None` lets the peer through (same user and pid namespace
/// as the daemon), `Some` refuses it.
pub fn judge(own: &Namespaces, peer: &PeerNs) -> Option<Refusal> {
    let mut namespaces = PeerNamespaces {
        via: peer.via.as_str().to_owned(),
        daemon_userns: own.user.to_string(),
        daemon_pidns: own.pid.to_string(),
        peer_userns: None,
        peer_pidns: None,
        error: None,
    };
    let ns = match &peer.ns {
        Ok(ns) => ns,
        Err(why) => {
            namespaces.error = Some(why.clone());
            return Some(Refusal {
                reason: format!(
                    "cannot tell whether the peer is inside a sandbox ({why}); refused"
                ),
                peer_pid: peer.pid,
                namespaces,
            });
        }
    };
    namespaces.peer_userns = Some(ns.user.to_string());
    namespaces.peer_pidns = Some(ns.pid.to_string());
    let what = match (ns.user != own.user, ns.pid != own.pid) {
        (false, false) => return None,
        (true, true) => "user and pid namespaces are",
        (true, false) => "user namespace is",
        (false, true) => "pid namespace is",
    };
    Some(Refusal {
        reason: format!("peer is inside a sandbox: its {what} not the daemon's"),
        peer_pid: peer.pid,
        namespaces,
    })
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests {
    use super::*;

    /// The reason and what the refusal adds to `details` (all but the uids).
    fn shown(r: Option<Refusal>) -> Option<(String, serde_json::Value)> {
        r.map(|r| {
            let mut details = serde_json::to_value(&r.namespaces).unwrap();
            details["peer_pid"] = r.peer_pid.into();
            (r.reason, details)
        })
    }

    fn ns(user: u64, pid: u64) -> Namespaces {
        Namespaces {
            user: NsId { dev: 4, ino: user },
            pid: NsId { dev: 4, ino: pid },
        }
    }

    #[test]
    fn same_namespaces_pass() {
        let peer = PeerNs {
            via: Via::Pidfd,
            pid: Some(42),
            ns: Ok(ns(1, 2)),
        };
        assert_eq!(judge(&ns(1, 2), &peer), None);
    }

    #[test]
    fn another_user_namespace_is_refused() {
        let peer = PeerNs {
            via: Via::Pidfd,
            pid: Some(42),
            ns: Ok(ns(7, 2)),
        };
        assert_eq!(
            shown(judge(&ns(1, 2), &peer)),
            Some((
                "peer is inside a sandbox: its user namespace is not the daemon's".into(),
                serde_json::json!({
                    "peer_pid": 42, "via": "SO_PEERPIDFD",
                    "daemon_userns": "[1]", "daemon_pidns": "[2]",
                    "peer_userns": "[7]", "peer_pidns": "[2]",
                }),
            ))
        );
    }

    #[test]
    fn another_pid_namespace_alone_is_refused() {
        let peer = PeerNs {
            via: Via::PeerCred,
            pid: Some(42),
            ns: Ok(ns(1, 9)),
        };
        let r = judge(&ns(1, 2), &peer).expect("refused");
        assert_eq!(
            r.reason,
            "peer is inside a sandbox: its pid namespace is not the daemon's"
        );
        let both = PeerNs {
            ns: Ok(ns(3, 9)),
            ..peer
        };
        assert_eq!(
            judge(&ns(1, 2), &both).expect("refused").reason,
            "peer is inside a sandbox: its user and pid namespaces are not the daemon's"
        );
    }

    #[test]
    fn a_device_mismatch_is_another_namespace() {
        let mut other = ns(1, 2);
        other.user.dev = 5;
        let peer = PeerNs {
            via: Via::Pidfd,
            pid: Some(42),
            ns: Ok(other),
        };
        assert!(judge(&ns(1, 2), &peer).is_some());
    }

    #[test]
    fn unknown_namespaces_are_refused() {
        let peer = PeerNs {
            via: Via::Pidfd,
            pid: None,
            ns: Err("the peer process has exited".into()),
        };
        assert_eq!(
            shown(judge(&ns(1, 2), &peer)),
            Some((
                "cannot tell whether the peer is inside a sandbox (the peer process \
                 has exited); refused"
                    .into(),
                serde_json::json!({
                    "peer_pid": null, "via": "SO_PEERPIDFD",
                    "daemon_userns": "[1]", "daemon_pidns": "[2]",
                    "error": "the peer process has exited",
                }),
            ))
        );
    }

    #[test]
    fn a_process_on_the_host_is_in_the_daemons_namespaces() {
        // Both ends of a socketpair are this process.
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let peer = inspect(&a, Some(std::process::id() as i32));
        assert_eq!(peer.pid, Some(std::process::id() as i32));
        assert_eq!(peer.ns, Ok(own().unwrap()));
        assert_eq!(judge(&own().unwrap(), &peer), None);
    }
}
