//! The systemd user units: `wardend.socket` (systemd listens on the control
//! socket and starts the service on the first connection) and
//! `wardend.service` (`Type=notify`, `Delegate=yes`, hardening that leaves
//! the sandbox working). `packaging/systemd/` holds their output for
//! [`ServiceValues::packaged`].

use std::path::Path;

use super::{ServiceValues, ValueError, MARKER};

/// The unit files' names.
pub const SERVICE: &str = "wardend.service";
pub const SOCKET: &str = "wardend.socket";

/// The socket unit's `ListenStream=` without an explicit socket: the default
/// socket (`$XDG_RUNTIME_DIR/warden/wardend.sock`) as the user manager names
/// `$XDG_RUNTIME_DIR`.
pub const DEFAULT_LISTEN: &str = "%t/warden/wardend.sock";

/// A path as one systemd unit-file word: specifiers' `%` doubled, quoted
/// (C-style escapes) when it holds whitespace, a quote or a backslash.
fn word(path: &Path) -> Result<String, ValueError> {
    let s = super::text(path)?;
    let s = s.replace('%', "%%");
    if s.chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\'' || c == '\\')
    {
        Ok(format!(
            "\"{}\"",
            s.replace('\\', "\\\\").replace('"', "\\\"")
        ))
    } else {
        Ok(s)
    }
}

/// `wardend.service`.
pub fn service(v: &ServiceValues) -> Result<String, ValueError> {
    let mut exec = word(&v.wardend)?;
    if let Some(socket) = &v.socket {
        // Only a check with socket activation (wardend refuses a --socket
        // other than the socket it was passed), but it keeps a start without
        // the socket unit on the same path.
        exec.push_str(&format!(" --socket {}", word(socket)?));
    }
    Ok(format!(
        "# {MARKER} (docs/install.md).
# wardend as a systemd user service, started by wardend.socket on the first
# connection (socket activation).
[Unit]
Description=Warden: sandbox daemon for MCP servers
Requires=wardend.socket
After=wardend.socket

[Service]
# READY=1 once it serves the socket, STOPPING=1 on shutdown; logs go to
# journald (JOURNAL_STREAM).
Type=notify
NotifyAccess=main
ExecStart={exec}
Restart=on-failure
RestartSec=1s
# wardend ends its sessions itself on SIGTERM (TERM, then KILL after a
# grace) and writes their exit records: give it the time.
KillMode=mixed
TimeoutStopSec=10s
# A delegated cgroup subtree: a cgroup per session with memory.max (swap 0),
# pids.max and cpu.max.
Delegate=yes
# Hardening that leaves the sandbox working. It is inherited by every
# sandboxed server, and wardend itself creates user namespaces, mounts in
# them, uses seccomp user notification, pidfd_getfd and Landlock. So nothing
# here forbids namespaces or mounts (RestrictNamespaces=, SystemCallFilter=),
# and nothing makes the user manager put wardend in a user or mount namespace
# of its own (PrivateUsers=, PrivateTmp=, ProtectSystem=, ProtectHome=,
# ProtectKernel*=, PrivateDevices=...: a peer outside it would look
# sandboxed and be refused); MemoryDenyWriteExecute= would break JITs (Node).
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes

[Install]
Also=wardend.socket
"
    ))
}

/// `wardend.socket`.
pub fn socket(v: &ServiceValues) -> Result<String, ValueError> {
    let listen = match &v.socket {
        Some(p) => word(p)?,
        None => DEFAULT_LISTEN.to_owned(),
    };
    Ok(format!(
        "# {MARKER} (docs/install.md).
# The control socket of wardend: systemd listens on it and starts
# wardend.service on the first connection; warden-shim and wardenctl find it
# where they look by default.
[Unit]
Description=Warden: control socket of wardend

[Socket]
ListenStream={listen}
SocketMode=0600
DirectoryMode=0700
RemoveOnStop=yes

[Install]
WantedBy=sockets.target
"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn paths_become_one_unit_file_word() {
        assert_eq!(
            word(Path::new("/usr/bin/wardend")).unwrap(),
            "/usr/bin/wardend"
        );
        assert_eq!(
            word(Path::new("/opt/my tools/100%/wardend")).unwrap(),
            "\"/opt/my tools/100%%/wardend\""
        );
        assert_eq!(word(Path::new("/a\"b\\c")).unwrap(), "\"/a\\\"b\\\\c\"");
    }

    #[test]
    fn an_explicit_socket_is_listened_on_and_passed() {
        let v = ServiceValues {
            socket: Some(PathBuf::from("/run/w/s.sock")),
            ..ServiceValues::packaged()
        };
        assert!(socket(&v)
            .unwrap()
            .contains("\nListenStream=/run/w/s.sock\n"));
        assert!(service(&v)
            .unwrap()
            .contains("\nExecStart=/usr/local/bin/wardend --socket /run/w/s.sock\n"));
    }
}
