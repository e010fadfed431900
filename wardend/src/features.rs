//! What the kernel offers, for `wardenctl status` (DESIGN.md §5 "Fail closed").

use std::fs;
use warden_proto::v1::KernelFeature;

fn read(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn feature(name: &str, available: bool, detail: String) -> KernelFeature {
    KernelFeature {
        name: name.to_string(),
        available,
        detail,
    }
}

pub fn probe(cgroup_state: &Result<crate::cgroup::Delegation, String>) -> Vec<KernelFeature> {
    let mut out = Vec::new();
    let max_userns = read("/proc/sys/user/max_user_namespaces").and_then(|s| s.parse::<u64>().ok());
    let clone_knob = read("/proc/sys/kernel/unprivileged_userns_clone");
    let userns = max_userns.unwrap_or(0) > 0 && clone_knob.as_deref() != Some("0");
    out.push(feature(
        "user_namespaces",
        userns,
        format!(
            "max_user_namespaces={}{}; required: sessions are refused without them",
            max_userns
                .map(|n| n.to_string())
                .unwrap_or_else(|| "unknown".into()),
            clone_knob
                .map(|k| format!(", unprivileged_userns_clone={k}"))
                .unwrap_or_default()
        ),
    ));
    let abi = warden_sandbox::landlock_abi();
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
    let seccomp = read("/proc/sys/kernel/seccomp/actions_avail");
    let user_notif = seccomp
        .as_deref()
        .is_some_and(|a| a.split_whitespace().any(|x| x == "user_notif"));
    out.push(feature(
        "seccomp",
        seccomp.is_some(),
        match &seccomp {
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
    let guard = warden_sandbox::guard::available(user_notif);
    out.push(feature(
        "create_guard",
        guard,
        if guard {
            "protected names (.git, .bashrc, .mcp.json...) missing from a write grant              cannot be created: the daemon performs every creation after checking the name"
                .into()
        } else {
            "not available (needs seccomp user notification, Landlock and Linux 5.14):              protected names missing from a write grant can be created"
                .into()
        },
    ));
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
