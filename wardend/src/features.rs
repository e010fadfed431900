//! What the kernel offers, for `wardenctl status` (DESIGN.md §5 "Fail closed"):
//! the daemon's one probe ([`Kernel`], taken at start and kept in
//! [`crate::Daemon::kernel`]) rendered, and what it means for write grants
//! ([`WriteProtection`]).

use warden_proto::v1::KernelFeature;
use warden_sandbox::Kernel;

fn feature(name: &str, available: bool, detail: String) -> KernelFeature {
    KernelFeature {
        name: name.to_string(),
        available,
        detail,
    }
}

/// The `features` of `wardenctl status`.
pub fn report(
    kernel: &Kernel,
    cgroup_state: &Result<crate::cgroup::Delegation, String>,
    writes: &WriteProtection,
) -> Vec<KernelFeature> {
    let mut out = Vec::new();
    out.push(feature(
        "user_namespaces",
        kernel.user_namespaces(),
        format!(
            "{}; required: sessions are refused without them",
            kernel.userns_settings()
        ),
    ));
    let abi = kernel.landlock_abi();
    out.push(feature(
        "landlock",
        abi.is_some(),
        match abi {
            Some(v) => format!(
                "ABI {v}: filesystem rules mirror the grants{}{}",
                if v >= 4 {
                    "; TCP: connect only to the egress proxy port, no bind"
                } else {
                    ""
                },
                if v >= 6 {
                    "; abstract unix sockets and signals scoped"
                } else {
                    ""
                }
            ),
            None => "not available: the mount namespace is the only filesystem layer".into(),
        },
    ));
    let seccomp = &kernel.seccomp_actions;
    let user_notif = kernel.user_notif;
    out.push(feature(
        "seccomp",
        seccomp.is_some(),
        match seccomp {
            Some(a) => format!("actions: {a}"),
            None => "not available".into(),
        },
    ));
    out.push(feature(
        "seccomp_user_notif",
        user_notif,
        if user_notif {
            "refused escape and kernel-attack calls are recorded (policy.syscall)".into()
        } else {
            "not available: refused calls are still refused, but not recorded".into()
        },
    ));
    out.push(feature(
        "file_audit",
        user_notif,
        if user_notif {
            "file accesses observed by seccomp user notification: audit.files \
             denied (default) | all | off"
                .into()
        } else {
            "not available: sessions run without file-access records \
             (session.start says file_audit: unavailable)"
                .into()
        },
    ));
    let guard = kernel.guard_available();
    out.push(feature(
        "create_guard",
        guard,
        if guard {
            "protected names (.git, .bashrc, .mcp.json...) missing from a write grant \
             cannot be created: the daemon performs every creation after checking the name"
                .into()
        } else {
            "not available (needs seccomp user notification, Landlock and \
             SECCOMP_ADDFD_FLAG_SEND, Linux 5.14): protected names missing from a write \
             grant can be created"
                .into()
        },
    ));
    out.push(writes.feature());
    out.push(cgroup(cgroup_state));
    out
}

/// Whether the daemon manages a delegated cgroup v2 subtree (systemd
/// `Delegate=yes`), with which controllers, and what each limit therefore uses.
fn cgroup(d: &Result<crate::cgroup::Delegation, String>) -> KernelFeature {
    let via = |c: &str, with: &str, without: &str| -> String {
        match d {
            Ok(d) if d.has(c) => format!("{c}: {with}"),
            _ => format!("{c}: {without}"),
        }
    };
    let uses = [
        via(
            "memory",
            "cgroup memory.max, swap 0 (and RSS sampling)",
            "RSS sampling",
        ),
        via(
            "pids",
            "cgroup pids.max",
            "RLIMIT_NPROC (not for a root daemon)",
        ),
        via(
            "cpu",
            "cgroup cpu.max",
            "not enforceable (needs best_effort)",
        ),
    ]
    .join("; ");
    match d {
        Ok(d) => feature(
            "cgroup_v2_delegation",
            true,
            format!(
                "{}: delegated; controllers [{}]; limits use {uses}",
                d.root.display(),
                d.controllers.join(" ")
            ),
        ),
        Err(why) => feature(
            "cgroup_v2_delegation",
            false,
            format!("{why}; limits use {uses}"),
        ),
    }
}

/// The [`report`] of this machine now, without a daemon (`wardend
/// --features`, read by `wardenctl doctor` when no daemon answers): the
/// kernel probed, the cgroup subtree located and its controllers read, but
/// not taken over.
pub fn report_now() -> Vec<KernelFeature> {
    let uid = warden_core::paths::current_uid();
    let cgroup = crate::cgroup::locate(uid).map(|root| {
        let controllers = std::fs::read_to_string(root.join("cgroup.controllers"))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        crate::cgroup::Delegation { root, controllers }
    });
    let kernel = Kernel::probe();
    let pretend = std::env::var(PRETEND_MISSING_VAR).ok();
    report(
        &kernel,
        &cgroup,
        &WriteProtection::judge(&kernel, pretend.as_deref()),
    )
}

/// The daemon environment variable that makes it treat protections as
/// missing (a comma-separated list of `landlock`, `create_guard`). For tests
/// only: it can only make the daemon refuse more (a session that opts into
/// best-effort write protection still gets the real protections), so the
/// refusal and the opt-in can be exercised on a kernel that has everything.
pub const PRETEND_MISSING_VAR: &str = "WARDEN_TEST_PRETEND_MISSING";

/// What protects write grants on this kernel (DESIGN.md §5 "Fail closed";
/// `docs/security-model.md`): the creation guard and Landlock. The mount
/// layer (existing protected names bound read-only) needs nothing the kernel
/// could lack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteProtection {
    /// The Landlock ABI, or why there is none.
    pub landlock: Result<u32, String>,
    /// Why the creation guard cannot run, if it cannot.
    pub create_guard: Result<(), String>,
    /// Set when [`PRETEND_MISSING_VAR`] made a protection look missing.
    pub pretended: bool,
}

impl WriteProtection {
    /// The decision, from the daemon's probe of the kernel and `pretend` (the
    /// value of [`PRETEND_MISSING_VAR`], if set).
    pub fn judge(kernel: &Kernel, pretend: Option<&str>) -> WriteProtection {
        let pretend: Vec<&str> = pretend
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let pretended_landlock = pretend.contains(&"landlock");
        let pretended_guard = pretend.contains(&"create_guard");
        let landlock = match kernel.landlock_abi() {
            _ if pretended_landlock => Err(format!(
                "Landlock is treated as unavailable ({PRETEND_MISSING_VAR})"
            )),
            Some(abi) => Ok(abi),
            None => Err(
                "Landlock is not available: the kernel was built without it, or it \
                         is not in the `lsm=` boot list (see /sys/kernel/security/lsm)"
                    .into(),
            ),
        };
        // What the guard needs, as `Kernel::guard_available` says, each
        // missing piece named.
        let mut why = Vec::new();
        if pretended_guard {
            why.push(format!("treated as unavailable ({PRETEND_MISSING_VAR})"));
        }
        if !kernel.user_notif {
            why.push(
                "seccomp user notification is not available (/proc/sys/kernel/seccomp/\
                 actions_avail has no user_notif; Linux 5.0+)"
                    .to_string(),
            );
        }
        if landlock.is_err() {
            why.push("it needs Landlock".into());
        }
        if kernel.user_notif && !kernel.addfd_send {
            why.push(format!(
                "Linux {} does not take SECCOMP_ADDFD_FLAG_SEND (5.14+)",
                kernel.release
            ));
        }
        WriteProtection {
            landlock,
            create_guard: if why.is_empty() {
                Ok(())
            } else {
                Err(why.join("; "))
            },
            pretended: pretended_landlock || pretended_guard,
        }
    }

    /// The protections write grants rely on that are missing, one line each.
    pub fn missing(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Err(why) = &self.create_guard {
            out.push(format!(
                "the creation guard (which keeps protected names such as .git, .bashrc and \
                 .mcp.json from being created in a write grant): {why}"
            ));
        }
        if let Err(why) = &self.landlock {
            out.push(format!("Landlock (the second filesystem layer): {why}"));
        }
        out
    }

    /// The protections write grants get, for `session.start` and `status`.
    pub fn active(&self) -> Vec<String> {
        let mut out = vec!["protected names bound read-only".to_string()];
        if self.create_guard.is_ok() {
            out.push("creation guard".into());
        }
        if let Ok(abi) = &self.landlock {
            out.push(format!("Landlock ABI {abi}"));
        }
        out
    }

    /// Why a policy with write grants is refused here, if it is.
    pub fn refusal(&self, has_writes: bool, best_effort: bool) -> Option<String> {
        let missing = self.missing();
        if !has_writes || best_effort || missing.is_empty() {
            return None;
        }
        Some(format!(
            "this policy has write grants, but protections they rely on are missing on this \
             kernel: {}; without them a server can create the names the host runs or trusts \
             (.git, .bashrc, .mcp.json...) where they are missing; set \
             sandbox.best_effort_write_protection: true to run anyway with weaker protection \
             (recorded in session.start), or use a kernel that has them",
            missing.join("; ")
        ))
    }

    /// `details.sandbox.write_protection` of `session.start`.
    pub fn record(&self, has_writes: bool) -> warden_audit::event::WriteProtection {
        let missing = self.missing();
        let mode = match (has_writes, missing.is_empty()) {
            (false, _) => "no write grants",
            (true, true) => "full",
            (true, false) => "best effort",
        };
        warden_audit::event::WriteProtection {
            mode: mode.to_owned(),
            active: self.active(),
            missing,
        }
    }

    /// The `write_protection` line of `wardenctl status`.
    pub fn feature(&self) -> KernelFeature {
        let missing = self.missing();
        let detail = if missing.is_empty() {
            format!("write grants get: {}", self.active().join(", "))
        } else {
            format!(
                "missing: {}; sessions with write grants are refused unless the policy sets \
                 sandbox.best_effort_write_protection: true",
                missing.join("; ")
            )
        };
        feature("write_protection", missing.is_empty(), detail)
    }
}

/// A kernel with everything Warden uses (for tests), as the test machines
/// have it.
#[cfg(test)]
pub(crate) fn full_kernel() -> Kernel {
    Kernel {
        release: "6.1.0-18-amd64".into(),
        max_user_namespaces: Some(63000),
        unprivileged_userns_clone: Some("1".into()),
        landlock: Ok(7),
        seccomp_actions: Some(
            "kill_process kill_thread trap errno user_notif trace log allow".into(),
        ),
        user_notif: true,
        wait_killable_recv: true,
        addfd_send: true,
        sync_wake_up: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;

    /// A kernel with `landlock` (its ABI), user notification with or
    /// without `SECCOMP_ADDFD_FLAG_SEND`, and this release.
    fn kernel(landlock: Option<u32>, user_notif: bool, addfd_send: bool, release: &str) -> Kernel {
        Kernel {
            release: release.into(),
            landlock: landlock.ok_or(Errno::ENOSYS),
            user_notif,
            addfd_send: user_notif && addfd_send,
            wait_killable_recv: user_notif,
            sync_wake_up: user_notif,
            ..full_kernel()
        }
    }

    #[test]
    fn everything_present() {
        let w = WriteProtection::judge(&full_kernel(), None);
        assert_eq!(
            w,
            WriteProtection {
                landlock: Ok(7),
                create_guard: Ok(()),
                pretended: false
            }
        );
        assert_eq!(w.refusal(true, false), None);
        assert_eq!(
            serde_json::to_value(w.record(true)).unwrap(),
            serde_json::json!({"mode": "full", "active": ["protected names bound read-only", "creation guard", "Landlock ABI 7"], "missing": []})
        );
    }

    #[test]
    fn each_missing_piece_is_named() {
        let w = WriteProtection::judge(&kernel(None, false, false, "4.19.0"), None);
        assert_eq!(
            w.missing(),
            vec![
                "the creation guard (which keeps protected names such as .git, .bashrc and \
                 .mcp.json from being created in a write grant): seccomp user notification is \
                 not available (/proc/sys/kernel/seccomp/actions_avail has no user_notif; \
                 Linux 5.0+); it needs Landlock"
                    .to_string(),
                "Landlock (the second filesystem layer): Landlock is not available: the kernel \
                 was built without it, or it is not in the `lsm=` boot list (see \
                 /sys/kernel/security/lsm)"
                    .to_string(),
            ]
        );
        assert_eq!(
            serde_json::to_value(w.record(true)).unwrap(),
            serde_json::json!({"mode": "best effort", "active": ["protected names bound read-only"], "missing": w.missing()})
        );
        // User notification without SEND (Linux 5.9 to 5.13, as the trial
        // call found it).
        let w = WriteProtection::judge(&kernel(Some(1), true, false, "5.10.0"), None);
        assert_eq!(
            w.create_guard,
            Err("Linux 5.10.0 does not take SECCOMP_ADDFD_FLAG_SEND (5.14+)".into())
        );
    }

    /// Without the test setting, the guard is missing exactly when the
    /// kernel cannot run it (what the sandboxes' layers are decided by).
    #[test]
    fn the_guard_is_judged_as_the_layers_are_decided() {
        for landlock in [None, Some(1), Some(7)] {
            for user_notif in [false, true] {
                for send in [false, true] {
                    let k = kernel(landlock, user_notif, send, "6.1");
                    let w = WriteProtection::judge(&k, None);
                    assert_eq!(w.create_guard.is_ok(), k.guard_available(), "{k:?}");
                    assert_eq!(w.landlock.clone().ok(), k.landlock_abi(), "{k:?}");
                }
            }
        }
    }

    #[test]
    fn refused_only_with_write_grants_and_without_the_opt_in() {
        let w = WriteProtection::judge(&full_kernel(), Some("create_guard"));
        assert!(w.pretended);
        let why = w.refusal(true, false).expect("refused");
        assert_eq!(
            why,
            "this policy has write grants, but protections they rely on are missing on this \
             kernel: the creation guard (which keeps protected names such as .git, .bashrc and \
             .mcp.json from being created in a write grant): treated as unavailable \
             (WARDEN_TEST_PRETEND_MISSING); without them a server can create the names the \
             host runs or trusts (.git, .bashrc, .mcp.json...) where they are missing; set \
             sandbox.best_effort_write_protection: true to run anyway with weaker protection \
             (recorded in session.start), or use a kernel that has them"
        );
        assert_eq!(w.refusal(false, false), None, "no write grant");
        assert_eq!(w.refusal(true, true), None, "opted in");
        assert_eq!(w.record(false).mode, "no write grants");
    }

    #[test]
    fn pretending_landlock_missing_takes_the_guard_too() {
        let w = WriteProtection::judge(&full_kernel(), Some(" landlock ,"));
        assert_eq!(
            w.landlock,
            Err("Landlock is treated as unavailable (WARDEN_TEST_PRETEND_MISSING)".into())
        );
        assert_eq!(w.create_guard, Err("it needs Landlock".into()));
    }

    /// `wardenctl status` renders the probe it was given.
    #[test]
    fn the_report_renders_the_probe() {
        let find = |f: &[KernelFeature], n: &str| {
            let f = f.iter().find(|f| f.name == n).unwrap();
            (f.available, f.detail.clone())
        };
        let cg = Err("not delegated".to_string());
        let k = full_kernel();
        let f = report(&k, &cg, &WriteProtection::judge(&k, None));
        assert_eq!(
            find(&f, "user_namespaces"),
            (
                true,
                "max_user_namespaces=63000, unprivileged_userns_clone=1; required: sessions \
                 are refused without them"
                    .into()
            )
        );
        assert!(find(&f, "landlock").1.starts_with("ABI 7: "));
        assert_eq!(
            find(&f, "seccomp").1,
            "actions: kill_process kill_thread trap errno user_notif trace log allow"
        );
        for n in [
            "seccomp_user_notif",
            "file_audit",
            "create_guard",
            "write_protection",
        ] {
            assert!(find(&f, n).0, "{n}");
        }
        let k = kernel(None, false, false, "4.19.0");
        let f = report(&k, &cg, &WriteProtection::judge(&k, None));
        for n in [
            "landlock",
            "seccomp_user_notif",
            "file_audit",
            "create_guard",
            "write_protection",
        ] {
            assert!(!find(&f, n).0, "{n}");
        }
    }
}
