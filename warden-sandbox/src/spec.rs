//! The sandbox description the daemon compiles from a policy and hands to the
//! sandbox init over its control socket. Plain data: everything here is already
//! validated by `warden-core`'s policy compiler.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One sandboxed server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// Session id, used for the hostname and in error messages.
    pub session_id: String,
    /// Absolute, symlink-free host path of the program to execute. Bound
    /// read-only at the same path unless a runtime bind or grant already covers it.
    pub program: PathBuf,
    /// argv, including argv\[0\] as the user wrote it. Raw bytes.
    pub argv: Vec<Vec<u8>>,
    /// The final environment of the server (already filtered by the daemon).
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    /// Working directory inside the sandbox; must exist there.
    pub cwd: PathBuf,
    /// Host paths bound read-only at the same absolute path. Absolute,
    /// normalised, symlink-free when compiled; opened again without following
    /// symlinks when bound.
    pub read: Vec<PathBuf>,
    /// Host paths bound read-write at the same absolute path.
    pub write: Vec<PathBuf>,
    /// The server's `$HOME`: a private tmpfs at this path, unless a grant
    /// covers it.
    pub home: PathBuf,
    /// The caller's uid and gid (mapped to themselves inside the user namespace).
    pub uid: u32,
    pub gid: u32,
    /// User name for the synthetic /etc/passwd.
    pub user: String,
    /// Size of the private /tmp tmpfs in MiB.
    pub tmp_size_mb: u64,
    /// Most tasks (processes and threads) the server's tree may hold, enforced
    /// with RLIMIT_NPROC, which counts per user namespace: only this
    /// sandbox's tasks count. None = no limit.
    #[serde(default)]
    pub pids_max: Option<u64>,
    /// The lowest Landlock ABI the policy accepts (0: none). Below it, or without
    /// Landlock at all when it is set, the sandbox refuses to start.
    #[serde(default)]
    pub landlock_min_abi: u32,
    /// The egress proxy's port: PID 1 listens on `127.0.0.1:<port>` inside the
    /// sandbox's network namespace and hands the listener to the daemon
    /// ([`crate::launch::Spawned::proxy_listener`]); with Landlock ABI 4+ it is the
    /// only TCP port the server may connect to. None: no listener, no TCP at all.
    #[serde(default)]
    pub proxy_port: Option<u16>,
    /// The sandbox's own resolver (transparent egress, DESIGN.md §6): PID 1
    /// binds a UDP socket on `127.0.0.53:53` inside the sandbox's network
    /// namespace and hands it to the daemon
    /// ([`crate::launch::Spawned::resolver`]), and `/etc/resolv.conf` names
    /// it. False: no resolver, no `resolv.conf` (names fail at once).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resolver: bool,
    /// A cgroup v2 directory (the session's, in the daemon's delegated subtree)
    /// the launcher joins before it creates any namespace, so every process of
    /// the sandbox is inside and its limits apply. Joining is required: failure
    /// fails the start. None: no cgroup.
    #[serde(default)]
    pub cgroup: Option<PathBuf>,
    /// Which of the server's file accesses the daemon is told about
    /// ([`crate::supervise`]; the daemon converts the policy's `audit.files`,
    /// whose own default is `denied`). Needs seccomp user notification
    /// ([`Layers::watch_files`] says whether it is applied); without it
    /// nothing is observed. A spec without the field watches nothing
    /// ([`FileWatch::Off`]): the default is the policy's business, not the
    /// sandbox's.
    #[serde(default = "FileWatch::off", skip_serializing_if = "FileWatch::is_off")]
    pub audit_files: FileWatch,
    /// Approvals: the opens the sandbox would deny are held for a person
    /// ([`crate::supervise::hold`]); the file accesses are then watched
    /// whatever `audit_files` says (which still decides what is recorded).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold_files: bool,
    /// Warden's own files and directories (the daemon's policy and state
    /// directories, the policy file, the installed binaries): protected like
    /// `protected::PROTECTED` names wherever a write grant covers them.
    /// Absolute, normalised.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warden_paths: Vec<PathBuf>,
    /// Directories covered by an empty read-only tmpfs, after the grants
    /// (`wardenctl trace` hides Warden's own directories inside the host
    /// directories it shows). Absolute, normalised; missing ones are skipped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hide: Vec<PathBuf>,
    /// The policy's `filesystem.allow_git_init`: the server may create new git
    /// repositories in its write grants (`.git`, `HEAD`, `commondir` and
    /// `gitdir` names outside existing git dirs, which the creation guard
    /// otherwise refuses). Their config and hooks are then the server's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_git_init: bool,
    /// For measuring what Landlock and seccomp cost (`warden-bench` through the
    /// `warden-sandbox-run` debug driver) and nothing else: skips both layers.
    /// The daemon never sets it; no policy key reaches it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dangerously_skip_confinement: bool,
    /// The optional layers this sandbox applies, decided once by whoever
    /// builds the spec from what the kernel offers
    /// ([`crate::kernel::Kernel::layers`]; the daemon records them in
    /// `session.start`). The sandbox applies exactly these and never decides
    /// again; one the kernel turns out not to have fails the start.
    pub layers: Layers,
}

/// The optional layers of one sandbox: what its Landlock ruleset, its seccomp
/// filter and the daemon's notifier do, beyond what every sandbox gets (the
/// namespaces, the root filesystem, a seccomp filter that refuses the
/// kernel-attack surface).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layers {
    /// The Landlock ABI whose rights the ruleset handles; `None`: no Landlock
    /// (the mount namespace is the only filesystem layer).
    pub landlock_abi: Option<u32>,
    /// The filter is installed with a user-notification listener
    /// (`SECCOMP_FILTER_FLAG_NEW_LISTENER`), answered by the daemon: refused
    /// escape and kernel-attack calls are reported. Without it they are
    /// refused in the kernel with the same errno, unreported.
    pub notify: bool,
    /// The path-taking calls notify too and are reported at the level of
    /// [`SandboxSpec::audit_files`] (needs `notify`).
    pub watch_files: bool,
    /// The creation guard (`supervise::guard`): Landlock without the rights to
    /// create, and the daemon performs every creating call (needs `notify`
    /// and Landlock).
    pub guard: bool,
    /// The filter is installed with `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`
    /// (needs `notify`; chosen with the guard).
    pub wait_killable: bool,
    /// The listener is set to `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (needs
    /// `notify`; chosen when calls are watched or guarded).
    pub sync_wake_up: bool,
}

impl Layers {
    /// No optional layer: no Landlock, a filter without a listener.
    pub const NONE: Layers = Layers {
        landlock_abi: None,
        notify: false,
        watch_files: false,
        guard: false,
        wait_killable: false,
        sync_wake_up: false,
    };

    /// Why these layers cannot go together, if they cannot (each of the
    /// others needs the listener; the guard needs Landlock).
    pub fn inconsistency(&self) -> Option<&'static str> {
        if !self.notify {
            if self.watch_files {
                return Some("watching file accesses needs seccomp user notification");
            }
            if self.guard {
                return Some("the creation guard needs seccomp user notification");
            }
            if self.wait_killable {
                return Some(
                    "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV needs seccomp user notification",
                );
            }
            if self.sync_wake_up {
                return Some("SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP needs seccomp user notification");
            }
        }
        if self.guard && self.landlock_abi.is_none() {
            return Some("the creation guard needs Landlock");
        }
        None
    }
}

/// How much of the server's file access the sandbox watches and reports
/// (the spec's side of the policy's `audit.files`, which the daemon converts:
/// deliberately without a `Default`, so no default here can disagree with
/// the policy's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileWatch {
    /// Not observed: the path-taking calls never leave the kernel.
    Off,
    /// Every path-taking call is observed; only the accesses the sandbox
    /// denies (outside the grants, writes to read-only ones) are reported.
    Denied,
    /// Every observed access is reported, allowed ones too.
    All,
}

impl FileWatch {
    /// [`FileWatch::Off`], what a spec without `audit_files` means.
    pub fn off() -> FileWatch {
        FileWatch::Off
    }

    pub fn is_off(&self) -> bool {
        *self == FileWatch::Off
    }

    /// `off`, `denied`, `all`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileWatch::Off => "off",
            FileWatch::Denied => "denied",
            FileWatch::All => "all",
        }
    }
}
