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

pub fn probe() -> Vec<KernelFeature> {
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
    out.push(cgroup());
    out
}

/// Whether this process sits in a cgroup v2 subtree it may manage (systemd
/// `Delegate=yes`), and which controllers it would have there.
fn cgroup() -> KernelFeature {
    let own = read("/proc/self/cgroup").and_then(|c| {
        c.lines()
            .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
    });
    let mount = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .find(|m| fs::metadata(format!("{m}/cgroup.controllers")).is_ok());
    let (Some(own), Some(mount)) = (own, mount) else {
        return feature(
            "cgroup_v2_delegation",
            false,
            "no cgroup v2 hierarchy".into(),
        );
    };
    let dir = format!("{mount}{own}");
    let controllers = read(&format!("{dir}/cgroup.controllers")).unwrap_or_default();
    let uid = warden_core::paths::current_uid();
    let delegated = {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(format!("{dir}/cgroup.procs")).is_ok_and(|m| m.uid() == uid)
    };
    feature(
        "cgroup_v2_delegation",
        delegated,
        format!(
            "{dir}: {}; controllers [{controllers}]; limits use {}",
            if delegated { "delegated to this user" } else { "not delegated" },
            "RSS sampling (memory), RLIMIT_NPROC (pids), tmpfs size (tmp_mb); cpu needs best_effort"
        ),
    )
}
