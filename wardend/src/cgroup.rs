//! Limits through a delegated cgroup v2 subtree (DESIGN.md §5 "Limits"), when the
//! daemon runs in one it may manage (systemd `Delegate=yes`: the cgroup
//! directory and its files owned by the daemon's user).
//!
//! At start the daemon moves itself into a leaf `<own>/wardend` (a cgroup with
//! processes cannot hand controllers to children) and enables the `memory`,
//! `pids` and `cpu` controllers its parent granted in `<own>/cgroup.subtree_control`.
//! Each session then gets `<own>/session-<id>` with `memory.max`,
//! `memory.swap.max = 0` and `memory.oom.group = 1` (an OOM kill takes the whole
//! sandbox), `pids.max` and `cpu.max`; the sandbox's launcher joins it before it
//! creates any namespace (`SandboxSpec::cgroup`), so every process of the
//! sandbox is inside. The directory is removed when the session has ended.
//!
//! Without delegation, or without a controller, the limit falls back to what
//! works without it (memory: RSS sampling; pids: RLIMIT_NPROC; cpu: refused
//! unless `limits.best_effort`). Memory sampling runs in both cases, as a second
//! line behind the cgroup.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The controllers Warden uses.
const WANTED: [&str; 3] = ["memory", "pids", "cpu"];

/// A cgroup v2 subtree the daemon manages.
#[derive(Debug, Clone)]
pub struct Delegation {
    /// The daemon's own cgroup directory (the delegated one).
    pub root: PathBuf,
    /// Controllers enabled for session cgroups.
    pub controllers: Vec<String>,
}

impl Delegation {
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }
}

/// The unified (v2) cgroup path of a process, from `/proc/<pid>/cgroup` text.
pub fn own_path(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_end().to_owned())
}

/// The mount point of the cgroup v2 hierarchy, from `/proc/self/mountinfo` text.
pub fn v2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        // Fields: id parent major:minor root mountpoint options [optional...] - fstype ...
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2")
            .then(|| pre.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })
}

/// The daemon's own cgroup directory and whether it is delegated to `uid`, or
/// why not.
pub fn locate(uid: u32) -> Result<PathBuf, String> {
    let cg =
        fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let own = own_path(&cg).ok_or("the process is in no cgroup v2 hierarchy")?;
    let mi = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let mount = v2_mount(&mi).ok_or("no cgroup v2 hierarchy is mounted")?;
    if own == "/" {
        return Err(format!(
            "{}: the hierarchy's root cgroup is never taken over",
            mount.display()
        ));
    }
    let dir = mount.join(own.trim_start_matches('/'));
    let meta =
        fs::metadata(dir.join("cgroup.procs")).map_err(|e| format!("{}: {e}", dir.display()))?;
    if meta.uid() != uid {
        return Err(format!(
            "{}: not delegated to this user (cgroup.procs is owned by uid {})",
            dir.display(),
            meta.uid()
        ));
    }
    let writable =
        |f: &str| nix::unistd::access(&dir.join(f), nix::unistd::AccessFlags::W_OK).is_ok();
    if !writable("cgroup.procs") || !writable("cgroup.subtree_control") {
        return Err(format!("{}: not writable by this user", dir.display()));
    }
    // Ours alone (a unit of its own, as systemd's Delegate=yes gives): a cgroup
    // shared with other processes (a terminal's scope when the shim started the
    // daemon) is not the daemon's to rearrange.
    let me = std::process::id().to_string();
    let procs = fs::read_to_string(dir.join("cgroup.procs"))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    if let Some(other) = procs.split_whitespace().find(|p| *p != me) {
        return Err(format!(
            "{}: shared with other processes (pid {other}); only a cgroup of wardend's own is used",
            dir.display()
        ));
    }
    Ok(dir)
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Takes over the delegated subtree: moves this process into `<root>/wardend`
/// and enables the wanted controllers the parent granted.
pub fn take_over(root: &Path) -> io::Result<Delegation> {
    let leaf = root.join("wardend");
    match fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", leaf.display()))),
    }
    write(&leaf.join("cgroup.procs"), "0")?;
    let available = fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    let mut controllers = Vec::new();
    for c in WANTED {
        if available.split_whitespace().any(|a| a == c)
            && write(&root.join("cgroup.subtree_control"), &format!("+{c}")).is_ok()
        {
            controllers.push(c.to_string());
        }
    }
    Ok(Delegation {
        root: root.to_path_buf(),
        controllers,
    })
}

/// Limits for one session's cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SessionLimits {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    /// Cores, e.g. 0.5.
    pub cpu: Option<f64>,
}

/// `cpu.max` for `cores` with a 100 ms period.
pub fn cpu_max(cores: f64) -> String {
    let period: u64 = 100_000;
    let quota = ((cores * period as f64).round() as u64).max(1000);
    format!("{quota} {period}")
}

/// Creates `<root>/session-<id>` with the limits the enabled controllers can
/// enforce; returns its path. A limit that cannot be written is an error (the
/// caller decided to rely on it).
pub fn create_session(d: &Delegation, id: &str, l: &SessionLimits) -> io::Result<PathBuf> {
    let dir = d.root.join(format!("session-{id}"));
    fs::create_dir(&dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    let result = (|| {
        if let (Some(m), true) = (l.memory_bytes, d.has("memory")) {
            write(&dir.join("memory.max"), &m.to_string())?;
            // No swap: a memory limit that spills to swap is not one. Absent
            // without swap accounting, where there is nothing to pin.
            if dir.join("memory.swap.max").exists() {
                write(&dir.join("memory.swap.max"), "0")?;
            }
            write(&dir.join("memory.oom.group"), "1")?;
        }
        if let (Some(p), true) = (l.pids, d.has("pids")) {
            write(&dir.join("pids.max"), &p.to_string())?;
        }
        if let (Some(c), true) = (l.cpu, d.has("cpu")) {
            write(&dir.join("cpu.max"), &cpu_max(c))?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = fs::remove_dir(&dir);
        return Err(e);
    }
    Ok(dir)
}

/// OOM kills in a session's cgroup so far (`memory.events`).
pub fn oom_kills(dir: &Path) -> u64 {
    fs::read_to_string(dir.join("memory.events"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("oom_kill ")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// Removes a session's cgroup once its processes are gone (retrying briefly:
/// the last ones may still be exiting).
pub async fn remove_session(dir: PathBuf) {
    for _ in 0..50 {
        match fs::remove_dir(&dir) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
    tracing::warn!(cgroup = %dir.display(), "session cgroup still busy; left in place");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_unified_path() {
        let text = "12:memory:/x\n0::/user.slice/user-1000.slice/user@1000.service/app.slice/wardend.service\n";
        assert_eq!(
            own_path(text).as_deref(),
            Some("/user.slice/user-1000.slice/user@1000.service/app.slice/wardend.service")
        );
        assert_eq!(own_path("4:memory:/a\n1:cpu:/\n"), None);
    }

    #[test]
    fn finds_the_v2_mount() {
        let mi = "25 30 0:23 / /sys rw,nosuid - sysfs sysfs rw\n\
                  41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                  42 31 0:39 / /sys/fs/cgroup/memory rw shared:5 - cgroup cgroup rw,memory\n";
        assert_eq!(v2_mount(mi), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(v2_mount("25 30 0:23 / /sys rw - sysfs sysfs rw\n"), None);
    }

    #[test]
    fn cpu_max_is_quota_and_period() {
        assert_eq!(cpu_max(0.5), "50000 100000");
        assert_eq!(cpu_max(2.0), "200000 100000");
        assert_eq!(cpu_max(0.001), "1000 100000");
    }

    #[test]
    fn oom_kills_reads_memory_events() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(oom_kills(d.path()), 0);
        fs::write(
            d.path().join("memory.events"),
            "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 1\n",
        )
        .unwrap();
        assert_eq!(oom_kills(d.path()), 1);
    }

    #[test]
    fn session_limits_are_written_for_enabled_controllers_only() {
        // A directory standing in for a delegated cgroup: the files a real one
        // offers are plain files here, so what Warden writes can be read back.
        let root = tempfile::tempdir().unwrap();
        let d = Delegation {
            root: root.path().to_path_buf(),
            controllers: vec!["memory".into(), "pids".into()],
        };
        let l = SessionLimits {
            memory_bytes: Some(64 << 20),
            pids: Some(32),
            cpu: Some(0.5),
        };
        let dir = root.path().join("session-abc");
        let got = create_session(&d, "abc", &l).unwrap();
        assert_eq!(got, dir);
        let read = |f: &str| fs::read_to_string(dir.join(f)).ok();
        assert_eq!(read("memory.max").as_deref(), Some("67108864"));
        assert_eq!(read("memory.oom.group").as_deref(), Some("1"));
        // No swap accounting offered (no memory.swap.max): nothing to pin.
        assert_eq!(read("memory.swap.max"), None);
        assert_eq!(read("pids.max").as_deref(), Some("32"));
        // cpu is not enabled in this delegation: nothing written.
        assert_eq!(read("cpu.max"), None);
    }
}
