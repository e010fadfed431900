//! Paths no grant may expose unless the policy names them one by one
//! (`filesystem.dangerously_expose`).
//!
//! A grant holding a Unix socket hands the server that service, read-only or
//! not: `connect(2)` works on a read-only bind, and Landlock (up to ABI 7) has
//! no right for pathname sockets. Warden's own control socket is one (the
//! daemon refuses sandboxed peers anyway), and so are the session bus, the
//! ssh and gpg agents, Docker, Wayland and X11. Warden's state (the audit
//! store) and config (the profiles the shim loads) directories are refused for
//! another reason: a server that can read them learns other sessions and
//! policies, and one that can write them changes what Warden does next.
//!
//! A grant *equal to* a reserved path, or lying *inside* a reserved directory,
//! is waived by listing the grant itself in `filesystem.dangerously_expose`; a
//! grant *containing* a reserved path is waived by listing that reserved path.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One path Warden refuses to grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    pub path: PathBuf,
    /// What it is, for the error ("Warden's control socket directory").
    pub what: String,
    /// A directory whose whole subtree is refused (a grant inside it too).
    /// False for a single socket and for the shared `/tmp`: only a grant of
    /// it, or of a directory holding it, is refused.
    pub subtree: bool,
}

impl Reserved {
    pub fn dir(path: impl Into<PathBuf>, what: impl Into<String>) -> Reserved {
        Reserved {
            path: path.into(),
            what: what.into(),
            subtree: true,
        }
    }

    pub fn socket(path: impl Into<PathBuf>, what: impl Into<String>) -> Reserved {
        Reserved {
            path: path.into(),
            what: what.into(),
            subtree: false,
        }
    }
}

/// How a grant relates to a reserved path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relation {
    /// The grant is the reserved path.
    Is,
    /// The grant lies inside a reserved directory.
    Inside,
    /// The grant holds the reserved path.
    Contains,
}

/// The reserved paths of every host, whoever runs Warden.
pub fn system() -> Vec<Reserved> {
    vec![
        Reserved::dir(
            "/run",
            "the system's runtime directory, full of service sockets (D-Bus, systemd, Docker, the user's session)",
        ),
        Reserved::dir(
            "/var/run",
            "the system's runtime directory (/run), full of service sockets",
        ),
        Reserved::dir(
            "/proc",
            "the host's /proc (the sandbox has its own): other processes, their environment and fds",
        ),
        Reserved::dir("/sys", "the host's kernel and device interface"),
        Reserved::dir("/tmp/.X11-unix", "the X11 display sockets"),
        Reserved::socket(
            "/tmp",
            "the shared temp directory, which holds other programs' sockets (X11, ssh-agent, Warden's fallback socket directory); the sandbox has a private /tmp",
        ),
    ]
}

/// Warden's own directories: the control socket's, the state directory (the
/// audit store) and the config directory (the profiles).
pub fn warden(
    socket: Option<&Path>,
    state_dir: Option<&Path>,
    config_dir: Option<&Path>,
) -> Vec<Reserved> {
    let mut out = Vec::new();
    // The socket's directory, unless it is a shared one (an explicit socket
    // in /tmp): then only the socket itself is Warden's.
    let shared = |d: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o002 != 0)
    };
    if let Some(socket) = socket {
        match socket
            .parent()
            .filter(|p| p.parent().is_some() && !shared(p))
        {
            Some(dir) => out.push(Reserved::dir(dir, "Warden's control socket directory")),
            None => out.push(Reserved::socket(socket, "Warden's control socket")),
        }
    }
    if let Some(d) = state_dir {
        out.push(Reserved::dir(
            d,
            "Warden's state directory (the audit store)",
        ));
    }
    if let Some(d) = config_dir {
        out.push(Reserved::dir(
            d,
            "Warden's config directory (the profiles warden-shim --profile loads)",
        ));
    }
    out
}

/// The user's runtime directory and agent and bus sockets, as an environment
/// names them: `XDG_RUNTIME_DIR`, `/run/user/UID`, `SSH_AUTH_SOCK`,
/// `DBUS_SESSION_BUS_ADDRESS` (`unix:path=`), `DOCKER_HOST` (`unix://`).
pub fn user(get: impl Fn(&str) -> Option<OsString>, uid: u32) -> Vec<Reserved> {
    let absolute = |v: OsString| {
        let p = PathBuf::from(v);
        p.is_absolute().then_some(p)
    };
    let mut out = Vec::new();
    if let Some(rt) = get("XDG_RUNTIME_DIR").and_then(absolute) {
        out.push(Reserved::dir(
            rt,
            "the user's runtime directory ($XDG_RUNTIME_DIR), which holds the session's sockets (D-Bus, Wayland, PulseAudio, gpg-agent, Warden)",
        ));
    }
    out.push(Reserved::dir(
        format!("/run/user/{uid}"),
        "the user's runtime directory, which holds the session's sockets (D-Bus, Wayland, PulseAudio, gpg-agent, Warden)",
    ));
    if let Some(s) = get("SSH_AUTH_SOCK").and_then(absolute) {
        out.push(Reserved::socket(s, "the ssh-agent socket ($SSH_AUTH_SOCK)"));
    }
    if let Some(addr) = get("DBUS_SESSION_BUS_ADDRESS").and_then(|v| v.into_string().ok()) {
        for part in addr.split(';') {
            let path = part.strip_prefix("unix:").and_then(|kv| {
                kv.split(',')
                    .find_map(|kv| kv.strip_prefix("path="))
                    .map(str::to_owned)
            });
            if let Some(p) = path.filter(|p| p.starts_with('/')) {
                out.push(Reserved::socket(
                    p,
                    "the D-Bus session bus socket ($DBUS_SESSION_BUS_ADDRESS)",
                ));
            }
        }
    }
    if let Some(h) = get("DOCKER_HOST").and_then(|v| v.into_string().ok()) {
        if let Some(p) = h.strip_prefix("unix://").filter(|p| p.starts_with('/')) {
            out.push(Reserved::socket(p, "the Docker socket ($DOCKER_HOST)"));
        }
    }
    out
}

/// How `grant` relates to `r`, if at all. Both are absolute and normalised.
pub(crate) fn relation(grant: &Path, r: &Reserved) -> Option<Relation> {
    if grant == r.path {
        Some(Relation::Is)
    } else if r.subtree && grant.starts_with(&r.path) {
        Some(Relation::Inside)
    } else if r.path.starts_with(grant) {
        Some(Relation::Contains)
    } else {
        None
    }
}

/// `list` with each path also under its real name (symlinks resolved) when
/// that differs, normalised, deduplicated by path (the first `what` wins).
pub(crate) fn expand(list: &[Reserved]) -> Vec<Reserved> {
    let mut out: Vec<Reserved> = Vec::new();
    for r in list {
        let lexical = super::rules::normalize(&r.path);
        let real = std::fs::canonicalize(&lexical).ok();
        for path in std::iter::once(lexical).chain(real) {
            if !out.iter().any(|o| o.path == path && o.subtree == r.subtree) {
                out.push(Reserved { path, ..r.clone() });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relations() {
        let dir = Reserved::dir("/run/user/1", "d");
        let sock = Reserved::socket("/tmp", "t");
        let p = Path::new;
        assert_eq!(relation(p("/run/user/1"), &dir), Some(Relation::Is));
        assert_eq!(relation(p("/run/user/1/bus"), &dir), Some(Relation::Inside));
        assert_eq!(relation(p("/run/user"), &dir), Some(Relation::Contains));
        assert_eq!(relation(p("/run/user/10"), &dir), None);
        assert_eq!(relation(p("/tmp"), &sock), Some(Relation::Is));
        assert_eq!(relation(p("/tmp/work"), &sock), None, "inside /tmp is fine");
    }

    #[test]
    fn user_sockets_from_the_environment() {
        let env = |k: &str| {
            match k {
                "XDG_RUNTIME_DIR" => Some("/run/user/7"),
                "SSH_AUTH_SOCK" => Some("/tmp/ssh-x/agent.1"),
                "DBUS_SESSION_BUS_ADDRESS" => {
                    Some("unix:path=/run/user/7/bus,guid=1;unix:abstract=/tmp/x")
                }
                "DOCKER_HOST" => Some("unix:///home/u/.docker/run/docker.sock"),
                _ => None,
            }
            .map(OsString::from)
        };
        let got: Vec<(String, bool)> = user(env, 7)
            .into_iter()
            .map(|r| (r.path.display().to_string(), r.subtree))
            .collect();
        assert_eq!(
            got,
            vec![
                ("/run/user/7".to_string(), true),
                ("/run/user/7".to_string(), true),
                ("/tmp/ssh-x/agent.1".to_string(), false),
                ("/run/user/7/bus".to_string(), false),
                ("/home/u/.docker/run/docker.sock".to_string(), false),
            ]
        );
        // Relative or missing values name nothing.
        let rel = |k: &str| (k == "SSH_AUTH_SOCK").then(|| OsString::from("agent"));
        assert_eq!(user(rel, 7).len(), 1);
    }

    #[test]
    fn warden_dirs() {
        let got = warden(
            Some(Path::new("/run/user/7/warden/wardend.sock")),
            Some(Path::new("/h/.local/state/warden")),
            Some(Path::new("/h/.config/warden")),
        );
        assert_eq!(
            got,
            vec![
                Reserved::dir("/run/user/7/warden", "Warden's control socket directory"),
                Reserved::dir(
                    "/h/.local/state/warden",
                    "Warden's state directory (the audit store)"
                ),
                Reserved::dir(
                    "/h/.config/warden",
                    "Warden's config directory (the profiles warden-shim --profile loads)"
                ),
            ]
        );
        // A socket in the root directory or in a shared directory: no
        // directory to reserve, only the socket.
        assert_eq!(warden(Some(Path::new("/w.sock")), None, None).len(), 1);
        assert_eq!(
            warden(Some(Path::new("/tmp/w.sock")), None, None),
            vec![Reserved::socket("/tmp/w.sock", "Warden's control socket")]
        );
    }
}
