//! Where Warden keeps its socket, state and profiles for one user
//! (DESIGN.md §3, §7), and the ownership checks made before trusting them.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("cannot determine the home directory: HOME is not set")]
    NoHome,
    #[error("cannot create {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("cannot inspect {path}: {source}")]
    Inspect { path: PathBuf, source: io::Error },
    #[error("{path} belongs to uid {owner}, not to you (uid {uid}); refusing to use it")]
    WrongOwner { path: PathBuf, owner: u32, uid: u32 },
    #[error("{path} has loose permissions {mode:04o} (group or others have access); expected {expected:04o}")]
    LoosePermissions {
        path: PathBuf,
        mode: u32,
        expected: u32,
    },
    #[error("{path} is not a {expected}")]
    WrongKind {
        path: PathBuf,
        expected: &'static str,
    },
}

/// The real uid of this process, read without `unsafe` from `/proc/self`.
pub fn current_uid() -> u32 {
    fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}

/// The real gid of this process.
pub fn current_gid() -> u32 {
    fs::metadata("/proc/self")
        .map(|m| m.gid())
        .unwrap_or(u32::MAX)
}

fn non_empty(var: &str) -> Option<OsString> {
    env::var_os(var).filter(|v| !v.is_empty())
}

/// `$HOME`.
pub fn home_dir() -> Result<PathBuf, PathError> {
    non_empty("HOME")
        .map(PathBuf::from)
        .ok_or(PathError::NoHome)
}

/// Where the login manager keeps runtime directories (`XDG_RUNTIME_DIR` is
/// `/run/user/<uid>` under systemd-logind and elogind).
const LOGIN_RUNTIME_BASE: &str = "/run/user";

/// The default socket: `$WARDEN_SOCKET`, else `$XDG_RUNTIME_DIR/warden/wardend.sock`;
/// without `XDG_RUNTIME_DIR`, `/run/user/<uid>/warden/wardend.sock` when the
/// login manager made `/run/user/<uid>` for this user (owned by them, mode
/// 0700), else `<tmp>/warden-<uid>/wardend.sock`. The directory is created
/// 0700 when missing and its owner and mode are verified.
///
/// The `/run/user` step matters because MCP clients start servers (here: the
/// shim) with a few variables only: the official SDKs pass HOME, LOGNAME,
/// PATH, SHELL, TERM and USER, never `XDG_RUNTIME_DIR`. Without it, a shim
/// started by a client would miss the daemon the user's service manager runs
/// on `$XDG_RUNTIME_DIR` and start a second one that `wardenctl` in the user's
/// shell never sees.
pub fn default_socket() -> Result<PathBuf, PathError> {
    if let Some(s) = non_empty("WARDEN_SOCKET") {
        return Ok(PathBuf::from(s));
    }
    let socket = default_socket_location();
    if let Some(dir) = socket.parent() {
        ensure_private_dir(dir)?;
    }
    Ok(socket)
}

/// Where [`default_socket`] puts the socket without `$WARDEN_SOCKET`,
/// computed only: nothing is created or checked (for tools that describe
/// what they would do, such as `wardenctl install --dry-run`).
pub fn default_socket_location() -> PathBuf {
    let uid = current_uid();
    let dir = match non_empty("XDG_RUNTIME_DIR") {
        Some(rt) => PathBuf::from(rt).join("warden"),
        None => match login_runtime_dir(Path::new(LOGIN_RUNTIME_BASE), uid) {
            Some(rt) => rt.join("warden"),
            None => env::temp_dir().join(format!("warden-{uid}")),
        },
    };
    dir.join("wardend.sock")
}

/// `<base>/<uid>` if it is a directory owned by `uid` that grants nothing to
/// group or others (what a login manager creates), else `None`.
fn login_runtime_dir(base: &Path, uid: u32) -> Option<PathBuf> {
    let dir = base.join(uid.to_string());
    let md = fs::symlink_metadata(&dir).ok()?;
    (md.is_dir() && md.uid() == uid && md.permissions().mode() & 0o077 == 0).then_some(dir)
}

/// `--socket` if given, else [`default_socket`].
pub fn socket_path(explicit: Option<&Path>) -> Result<PathBuf, PathError> {
    match explicit {
        Some(p) => Ok(p.to_path_buf()),
        None => default_socket(),
    }
}

/// `$XDG_STATE_HOME/warden`, default `~/.local/state/warden`.
pub fn default_state_dir() -> Result<PathBuf, PathError> {
    match non_empty("XDG_STATE_HOME") {
        Some(s) => Ok(PathBuf::from(s).join("warden")),
        None => Ok(home_dir()?.join(".local/state/warden")),
    }
}

/// `$XDG_CONFIG_HOME/warden/policies`, default `~/.config/warden/policies`.
pub fn profiles_dir() -> Result<PathBuf, PathError> {
    Ok(config_dir()?.join("policies"))
}

/// `$XDG_CONFIG_HOME/warden`, default `~/.config/warden`.
pub fn config_dir() -> Result<PathBuf, PathError> {
    config_dir_from(|k| env::var_os(k))
}

/// [`config_dir`] for another process's environment (the daemon computes the
/// client's from the environment the shim sent).
pub fn config_dir_from(get: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, PathError> {
    let get = |k: &str| get(k).filter(|v| !v.is_empty());
    match get("XDG_CONFIG_HOME") {
        Some(s) => Ok(PathBuf::from(s).join("warden")),
        None => Ok(PathBuf::from(get("HOME").ok_or(PathError::NoHome)?).join(".config/warden")),
    }
}

/// The paths a client (the shim, `wardenctl policy check`) refuses to grant
/// when it compiles a policy: Warden's socket (`socket`), the state and
/// config directories this environment implies, and the user's runtime
/// directory and agent sockets ([`crate::policy::reserved`]). The daemon
/// builds its own list from its real paths.
pub fn client_reserved(socket: Option<&Path>) -> Vec<crate::policy::Reserved> {
    use crate::policy::reserved;
    let mut out = reserved::warden(
        socket,
        default_state_dir().ok().as_deref(),
        config_dir().ok().as_deref(),
    );
    out.extend(reserved::user(|k| env::var_os(k), current_uid()));
    out
}

/// Creates `dir` (and parents) with mode 0700 when missing, then verifies it is
/// a directory owned by the current user with no group/other access.
pub fn ensure_private_dir(dir: &Path) -> Result<(), PathError> {
    if let Err(e) = fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        return Err(PathError::Create {
            path: dir.to_path_buf(),
            source: e,
        });
    }
    verify_private(dir, 0o700, true)
}

/// Verifies that `path` (not followed if a symlink) is owned by the current
/// user and grants nothing to group or others.
pub fn verify_private(path: &Path, expected: u32, dir: bool) -> Result<(), PathError> {
    let md = fs::symlink_metadata(path).map_err(|e| PathError::Inspect {
        path: path.to_path_buf(),
        source: e,
    })?;
    if dir && !md.is_dir() {
        return Err(PathError::WrongKind {
            path: path.to_path_buf(),
            expected: "directory",
        });
    }
    let uid = current_uid();
    if md.uid() != uid {
        return Err(PathError::WrongOwner {
            path: path.to_path_buf(),
            owner: md.uid(),
            uid,
        });
    }
    let mode = md.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(PathError::LoosePermissions {
            path: path.to_path_buf(),
            mode,
            expected,
        });
    }
    Ok(())
}

/// Checks an existing socket before a client talks to it: it must be a socket
/// owned by the current user with mode 0600 or stricter, or an impostor could
/// be listening.
pub fn verify_socket(path: &Path) -> Result<(), PathError> {
    use std::os::unix::fs::FileTypeExt;
    let md = fs::symlink_metadata(path).map_err(|e| PathError::Inspect {
        path: path.to_path_buf(),
        source: e,
    })?;
    if !md.file_type().is_socket() {
        return Err(PathError::WrongKind {
            path: path.to_path_buf(),
            expected: "socket",
        });
    }
    verify_private(path, 0o600, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_dir_is_created_0700() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b");
        ensure_private_dir(&d).unwrap();
        let mode = fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn loose_dir_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("loose");
        fs::create_dir(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        let err = ensure_private_dir(&d).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{} has loose permissions 0755 (group or others have access); expected 0700",
                d.display()
            )
        );
    }

    #[test]
    fn login_runtime_dir_only_when_private_and_ours() {
        let t = tempfile::tempdir().unwrap();
        let uid = current_uid();
        assert_eq!(login_runtime_dir(t.path(), uid), None, "missing");
        let d = t.path().join(uid.to_string());
        fs::create_dir(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(login_runtime_dir(t.path(), uid), None, "loose");
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(login_runtime_dir(t.path(), uid), Some(d.clone()));
        // A symlink is not followed.
        let t2 = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(&d, t2.path().join(uid.to_string())).unwrap();
        assert_eq!(login_runtime_dir(t2.path(), uid), None, "symlink");
    }

    #[test]
    fn non_socket_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        fs::write(&f, "x").unwrap();
        let err = verify_socket(&f).unwrap_err();
        assert_eq!(err.to_string(), format!("{} is not a socket", f.display()));
    }
}
