//! What the running kernel offers, probed once, and the layers a sandbox gets
//! from it.
//!
//! The daemon calls [`Kernel::probe`] once at start and keeps the result:
//! `wardenctl status` shows it, and every session's spec carries the
//! [`Layers`] decided from it ([`Kernel::layers`]), which `session.start`
//! records and the sandbox applies as given (PID 1, the server child and the
//! daemon's notifier read [`SandboxSpec::layers`], never the kernel). Should the
//! kernel not have a layer after all, applying it fails and the session does
//! not start.
//!
//! Where the kernel can be asked by a trial call, it is asked, never told by
//! its release number (distribution kernels backport features, and a release
//! string says nothing about them): Landlock by its version call, the
//! listener's flags (`SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`,
//! `SECCOMP_ADDFD_FLAG_SEND`, `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`) on a
//! throw-away listener of a short-lived thread's own allow-all filter.

use crate::spec::{Layers, SandboxSpec};
use nix::errno::Errno;
use std::os::fd::{AsFd, AsRawFd};

/// What this kernel offers the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// `uname -r`, for messages.
    pub release: String,
    /// `/proc/sys/user/max_user_namespaces`, when readable.
    pub max_user_namespaces: Option<u64>,
    /// `/proc/sys/kernel/unprivileged_userns_clone` (Debian's knob), when
    /// the kernel has it.
    pub unprivileged_userns_clone: Option<String>,
    /// The kernel's own Landlock ABI (`landlock_create_ruleset(NULL, 0,
    /// LANDLOCK_CREATE_RULESET_VERSION)`), or why there is none (`ENOSYS`:
    /// not built in; `EOPNOTSUPP`: not enabled at boot).
    pub landlock: Result<u32, Errno>,
    /// `/proc/sys/kernel/seccomp/actions_avail`, when readable.
    pub seccomp_actions: Option<String>,
    /// `SECCOMP_RET_USER_NOTIF` is among the actions (Linux 5.0+).
    pub user_notif: bool,
    /// A filter can be installed with `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV`
    /// (Linux 5.19+).
    pub wait_killable_recv: bool,
    /// `SECCOMP_IOCTL_NOTIF_ADDFD` takes `SECCOMP_ADDFD_FLAG_SEND` (Linux 5.14+).
    pub addfd_send: bool,
    /// A listener takes `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6+).
    pub sync_wake_up: bool,
}

/// What the trial listener accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct ListenerFlags {
    wait_killable_recv: bool,
    addfd_send: bool,
    sync_wake_up: bool,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

impl Kernel {
    /// Asks the kernel. Cheap (a few `/proc` reads, a version call, and a
    /// thread that installs an allow-all filter on itself and exits), but
    /// meant to run once, when the daemon starts.
    pub fn probe() -> Kernel {
        let seccomp_actions = read("/proc/sys/kernel/seccomp/actions_avail");
        let user_notif = seccomp_actions
            .as_deref()
            .is_some_and(|a| a.split_whitespace().any(|x| x == "user_notif"));
        let flags = if user_notif {
            listener_trial()
        } else {
            ListenerFlags::default()
        };
        Kernel {
            release: nix::sys::utsname::uname()
                .map(|u| u.release().to_string_lossy().into_owned())
                .unwrap_or_default(),
            max_user_namespaces: read("/proc/sys/user/max_user_namespaces")
                .and_then(|s| s.parse().ok()),
            unprivileged_userns_clone: read("/proc/sys/kernel/unprivileged_userns_clone"),
            landlock: crate::confine::landlock::probe(),
            seccomp_actions,
            user_notif,
            wait_killable_recv: flags.wait_killable_recv,
            addfd_send: flags.addfd_send,
            sync_wake_up: flags.sync_wake_up,
        }
    }

    /// Unprivileged user namespaces are allowed (by the sysctls; the
    /// sandbox's start says for certain).
    pub fn user_namespaces(&self) -> bool {
        self.max_user_namespaces.unwrap_or(0) > 0
            && self.unprivileged_userns_clone.as_deref() != Some("0")
    }

    /// The sysctls that decide [`Kernel::user_namespaces`], as
    /// `max_user_namespaces=N[, unprivileged_userns_clone=K]`.
    pub fn userns_settings(&self) -> String {
        format!(
            "max_user_namespaces={}{}",
            self.max_user_namespaces
                .map(|n| n.to_string())
                .unwrap_or_else(|| "unknown".into()),
            self.unprivileged_userns_clone
                .as_ref()
                .map(|k| format!(", unprivileged_userns_clone={k}"))
                .unwrap_or_default()
        )
    }

    /// The Landlock ABI a sandbox applies here: the kernel's, capped at the
    /// newest this build knows; `None` without Landlock.
    pub fn landlock_abi(&self) -> Option<u32> {
        self.landlock
            .ok()
            .map(|abi| abi.min(crate::confine::landlock::KNOWN_ABI))
    }

    /// The creation guard can run here: it needs user notification,
    /// Landlock and `SECCOMP_ADDFD_FLAG_SEND`.
    pub fn guard_available(&self) -> bool {
        self.user_notif && self.landlock_abi().is_some() && self.addfd_send
    }

    /// The layers `spec` gets on this kernel (its own `layers` are ignored):
    /// the best Landlock ABI; user notification whenever the kernel has it;
    /// file watching at the spec's `audit_files` level; the creation guard
    /// with write grants; `WAIT_KILLABLE_RECV` with the guard and
    /// `SYNC_WAKE_UP` with watched or guarded calls, where the kernel takes
    /// them. Nothing for a spec that skips confinement.
    pub fn layers(&self, spec: &SandboxSpec) -> Layers {
        if spec.dangerously_skip_confinement {
            return Layers::NONE;
        }
        let notify = self.user_notif;
        let watch_files = notify && (!spec.audit_files.is_off() || spec.hold_files);
        let guard = !spec.write.is_empty() && self.guard_available();
        Layers {
            landlock_abi: self.landlock_abi(),
            notify,
            watch_files,
            guard,
            wait_killable: guard && self.wait_killable_recv,
            sync_wake_up: (watch_files || guard) && self.sync_wake_up,
        }
    }
}

/// Where the kernel says whether AppArmor restricts unprivileged user
/// namespaces (Ubuntu 23.10 and later set it to 1).
pub const APPARMOR_USERNS_SYSCTL: &str = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns";

/// `kernel.apparmor_restrict_unprivileged_userns`: `Some(true)` when it is
/// 1 (an unprivileged program gets a user namespace without capabilities in
/// it unless an AppArmor profile of its own allows `userns`), `Some(false)`
/// when 0, `None` when the kernel has no such setting.
pub fn apparmor_restricts_userns() -> Option<bool> {
    read(APPARMOR_USERNS_SYSCTL).map(|v| v != "0")
}

/// Tries what every sandbox's first steps need from an unprivileged user
/// namespace, in a short-lived re-exec of `exe` (the init role's binary,
/// whose path is what an AppArmor profile attaches to): entering a user and
/// a mount namespace, mapping the caller's own ids and mounting a tmpfs
/// there (the snapshot role, on `/`; see `init/snapshot.rs`).
///
/// [`Kernel::user_namespaces`] reads sysctls only. Under AppArmor's
/// restriction `unshare(CLONE_NEWUSER)` still succeeds and the mount is
/// what fails, which only a trial shows.
pub fn userns_trial(exe: &std::path::Path) -> Result<(), crate::SandboxError> {
    crate::launch::snapshot_dir(exe, std::path::Path::new("/")).map(drop)
}

/// Installs an allow-all filter with a listener on a thread of its own and
/// asks that listener which flags it takes. The filter (and `no_new_privs`,
/// which an unprivileged caller needs for it) belong to that thread only,
/// and go with it.
fn listener_trial() -> ListenerFlags {
    std::thread::Builder::new()
        .name("warden-probe".into())
        .spawn(trial_on_this_thread)
        .ok()
        .and_then(|t| t.join().ok())
        .unwrap_or_default()
}

/// The trial itself. Only on a thread that exits afterwards: it keeps
/// `no_new_privs` and an allow-all seccomp filter.
fn trial_on_this_thread() -> ListenerFlags {
    use crate::sys::seccomp;
    let mut out = ListenerFlags::default();
    if nix::sys::prctl::set_no_new_privs().is_err() {
        return out;
    }
    let allow = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    }];
    // As the sandbox installs its filter with the guard on; a kernel that
    // does not know the flag answers EINVAL (and installs nothing).
    let mut installed = seccomp::install_filter(
        &allow,
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
    );
    out.wait_killable_recv = installed.is_ok();
    if matches!(installed, Err(Errno::EINVAL)) {
        installed = seccomp::install_filter(&allow, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER);
    }
    let Ok(Some(listener)) = installed else {
        return ListenerFlags::default();
    };
    // Before 6.6 an unknown ioctl: EINVAL. The flags are the argument.
    out.sync_wake_up =
        seccomp::set_flags(listener.as_fd(), seccomp::USER_NOTIF_FD_SYNC_WAKE_UP).is_ok();
    // No notification has this id (the filter never notifies), so a
    // kernel that takes SEND looks for it and answers ENOENT; one that
    // does not rejects the flag first (EINVAL), and one without ADDFD
    // (before 5.9) the ioctl.
    let addfd = libc::seccomp_notif_addfd {
        id: 0,
        flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
        srcfd: listener.as_raw_fd() as u32,
        newfd: 0,
        newfd_flags: 0,
    };
    out.addfd_send = seccomp::add_fd(listener.as_fd(), &addfd) == Err(Errno::ENOENT);
    drop(listener);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::FileWatch;

    /// A kernel with everything.
    pub(crate) fn full() -> Kernel {
        Kernel {
            release: "6.18.0".into(),
            max_user_namespaces: Some(1000),
            unprivileged_userns_clone: None,
            landlock: Ok(7),
            seccomp_actions: Some("kill_process errno user_notif allow".into()),
            user_notif: true,
            wait_killable_recv: true,
            addfd_send: true,
            sync_wake_up: true,
        }
    }

    fn spec(write: bool, audit_files: FileWatch) -> SandboxSpec {
        SandboxSpec {
            session_id: "s".into(),
            program: "/bin/true".into(),
            argv: vec![b"true".to_vec()],
            env: vec![],
            cwd: "/".into(),
            read: vec![],
            write: if write { vec!["/w".into()] } else { vec![] },
            home: "/h".into(),
            uid: 1,
            gid: 1,
            user: "u".into(),
            tmp_size_mb: 1,
            pids_max: None,
            landlock_min_abi: 0,
            proxy_port: None,
            resolver: false,
            cgroup: None,
            audit_files,
            hold_files: false,
            warden_paths: vec![],
            hide: vec![],
            allow_git_init: false,
            dangerously_skip_confinement: false,
            layers: Layers::NONE,
        }
    }

    #[test]
    fn everything_the_kernel_has_and_the_spec_needs() {
        let k = full();
        assert_eq!(
            k.layers(&spec(true, FileWatch::Denied)),
            Layers {
                landlock_abi: Some(7),
                notify: true,
                watch_files: true,
                guard: true,
                wait_killable: true,
                sync_wake_up: true,
            }
        );
        // No write grant: no guard, so no WAIT_KILLABLE_RECV; no file audit:
        // nothing is watched, so no SYNC_WAKE_UP either.
        assert_eq!(
            k.layers(&spec(false, FileWatch::Off)),
            Layers {
                landlock_abi: Some(7),
                notify: true,
                ..Layers::NONE
            }
        );
        let mut skip = spec(true, FileWatch::All);
        skip.dangerously_skip_confinement = true;
        assert_eq!(k.layers(&skip), Layers::NONE);
        // Approvals watch file accesses whatever audit.files says.
        let mut held = spec(false, FileWatch::Off);
        held.hold_files = true;
        let l = k.layers(&held);
        assert!(l.watch_files && l.sync_wake_up && !l.guard, "{l:?}");
    }

    #[test]
    fn what_the_kernel_lacks_is_left_out_consistently() {
        type Change = fn(&mut Kernel);
        let cases: [(&str, Change); 6] = [
            ("no landlock", |k| k.landlock = Err(Errno::ENOSYS)),
            ("newer landlock", |k| k.landlock = Ok(99)),
            ("no user_notif", |k| {
                *k = Kernel {
                    user_notif: false,
                    wait_killable_recv: false,
                    addfd_send: false,
                    sync_wake_up: false,
                    ..k.clone()
                }
            }),
            ("no SEND", |k| k.addfd_send = false),
            ("no WAIT_KILLABLE_RECV", |k| k.wait_killable_recv = false),
            ("no SYNC_WAKE_UP", |k| k.sync_wake_up = false),
        ];
        for (what, change) in cases {
            let mut k = full();
            change(&mut k);
            for write in [false, true] {
                for level in [FileWatch::Off, FileWatch::Denied, FileWatch::All] {
                    let l = k.layers(&spec(write, level));
                    assert_eq!(l.inconsistency(), None, "{what}: {l:?}");
                    assert_eq!(l.landlock_abi, k.landlock_abi(), "{what}");
                    assert_eq!(l.notify, k.user_notif, "{what}");
                    assert_eq!(l.watch_files, k.user_notif && !level.is_off(), "{what}");
                    assert_eq!(l.guard, write && k.guard_available(), "{what}");
                    assert!(!l.wait_killable || k.wait_killable_recv, "{what}");
                    assert!(!l.sync_wake_up || k.sync_wake_up, "{what}");
                }
            }
        }
        let mut k = full();
        k.landlock = Ok(99);
        assert_eq!(k.landlock_abi(), Some(crate::confine::landlock::KNOWN_ABI));
        k.addfd_send = false;
        assert!(!k.guard_available());
    }

    #[test]
    fn user_namespaces_by_the_sysctls() {
        let mut k = full();
        assert!(k.user_namespaces());
        k.unprivileged_userns_clone = Some("0".into());
        assert!(!k.user_namespaces());
        k.unprivileged_userns_clone = Some("1".into());
        k.max_user_namespaces = Some(0);
        assert!(!k.user_namespaces());
    }

    /// The probe agrees with the kernel's own list, and a kernel that lists
    /// user notification accepts a listener on this machine.
    #[test]
    fn the_probe_asks_this_kernel() {
        let seccomp = || {
            std::fs::read_to_string("/proc/thread-self/status")
                .unwrap()
                .lines()
                .find(|l| l.starts_with("Seccomp:"))
                .map(str::to_owned)
        };
        let before = seccomp();
        let k = Kernel::probe();
        // The trial's filter stayed on its own thread.
        assert_eq!(seccomp(), before);
        let listed = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
            .is_ok_and(|s| s.split_whitespace().any(|a| a == "user_notif"));
        assert_eq!(k.user_notif, listed);
        if !listed {
            eprintln!("skipping the listener checks: no seccomp user notification here");
            return;
        }
        // A kernel of 6.6 or later (the test machines run 6.x) takes all
        // three flags.
        let release = k.release.clone();
        let mut it = release.split(|c: char| !c.is_ascii_digit());
        let v: (u32, u32) = (
            it.next().and_then(|s| s.parse().ok()).unwrap_or(0),
            it.next().and_then(|s| s.parse().ok()).unwrap_or(0),
        );
        if v >= (6, 6) {
            assert!(
                k.wait_killable_recv && k.addfd_send && k.sync_wake_up,
                "{k:?}"
            );
        }
    }
}
