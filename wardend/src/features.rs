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
    let seccomp = read("/proc/sys/kernel/seccomp/actions_avail");
    out.push(feature(
        "seccomp",
        seccomp.is_some(),
        match seccomp {
            Some(a) => format!("actions: {a}; filter not installed by this version"),
            None => "not available".into(),
        },
    ));
    let cgroup2 = [
        "/sys/fs/cgroup/cgroup.controllers",
        "/sys/fs/cgroup/unified/cgroup.controllers",
    ]
    .iter()
    .find_map(|p| read(p).map(|c| (p.to_string(), c)));
    out.push(feature(
        "cgroup_v2",
        cgroup2.is_some(),
        match cgroup2 {
            Some((p, c)) => format!("{p}: controllers [{c}]; not used by this version"),
            None => "not mounted".into(),
        },
    ));
    out
}
