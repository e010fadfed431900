//! Memory limit by sampling (DESIGN.md §5 "Limits"), used when no delegated
//! cgroup v2 subtree with a memory controller is available: every 25 ms the
//! memory the sandbox holds is added up and compared with `memory_mb`. The
//! processes are the descendants of its PID 1, found through the `ppid` field
//! of `/proc/<pid>/stat` (readable without ptrace rights). What counts
//! ([`Memory`]):
//!
//! - the resident set of every process (`VmRSS` of `/proc/<pid>/status`);
//! - the sandbox's own tmpfs mounts (`/tmp`, `$HOME`, `/dev/shm`...), whose
//!   pages belong to no process: their used blocks, by `fstatfs` through the
//!   sandbox's root (`/proc/<pid>/root`, opened with `RESOLVE_IN_ROOT`); a
//!   tmpfs that is also mounted on the host (a grant) is the host's, not
//!   counted;
//! - memfd files held open by a process (`/proc/<pid>/fd`), which are
//!   shared memory too, mapped or not (`memfd_create` plus `write`).
//!
//! Shared memory that is both mapped and in a file would count twice (in
//! `RssShmem` and in its file), so mapped shmem counts once: the larger of
//! the mapped total and the file total. Not seen: a memfd that was mapped,
//! closed and never touched, SysV segments nobody maps, pipe and socket
//! buffers. Only a memory cgroup charges those (docs/policy.md).

use std::collections::HashMap;
use std::fs;
use std::time::Duration;

pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(25);

/// `(pid, ppid)` of every process on the host.
fn process_table() -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name may contain spaces and parentheses: fields start
        // after the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let _state = f.next();
        if let Some(ppid) = f.next().and_then(|p| p.parse::<u32>().ok()) {
            out.push((pid, ppid));
        }
    }
    out
}

/// `root` and all its descendants.
pub fn tree(root: u32) -> Vec<u32> {
    let table = process_table();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, ppid) in table {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        if let Some(c) = children.get(&out[i]) {
            out.extend(c.iter().copied());
        }
        i += 1;
    }
    out
}

/// The memory of a sandbox, in bytes (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    /// `VmRSS` summed over the tree (mapped shared memory included).
    pub resident: u64,
    /// `RssShmem` summed over the tree: the shared-memory part of `resident`.
    pub shmem_mapped: u64,
    /// Used blocks of the sandbox's private tmpfs mounts.
    pub tmpfs: u64,
    /// Allocated blocks of the memfd files the tree holds open.
    pub memfd: u64,
}

impl Memory {
    /// What is compared with `memory_mb`: private resident memory, plus
    /// shared memory counted once (as mapped or as files, whichever is more).
    pub fn total(&self) -> u64 {
        let private = self.resident.saturating_sub(self.shmem_mapped);
        private.saturating_add(self.shmem_mapped.max(self.tmpfs.saturating_add(self.memfd)))
    }
}

/// A `kB` field of `/proc/<pid>/status`, in bytes.
fn status_kb(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// `(device, mount point)` of every tmpfs in a `mountinfo` text.
fn tmpfs_mounts(mountinfo: &str) -> Vec<(String, Vec<u8>)> {
    warden_sandbox::supervise::mountinfo::parse_mountinfo(mountinfo)
        .into_iter()
        .filter(|m| m.fstype == "tmpfs")
        .map(|m| (m.dev, m.point))
        .collect()
}

/// Every device number (`major:minor`) mounted in `mountinfo`.
fn devices(mountinfo: &str) -> std::collections::HashSet<String> {
    warden_sandbox::supervise::mountinfo::parse_mountinfo(mountinfo)
        .into_iter()
        .map(|m| m.dev)
        .collect()
}

/// Used bytes of the private tmpfs mounts of the sandbox `pid` is in (its
/// tmpfs mounts whose device the daemon's own mount table does not have).
/// `None` when `pid`'s root or mount table cannot be read.
fn private_tmpfs_bytes(pid: u32, host: &std::collections::HashSet<String>) -> Option<u64> {
    use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let mountinfo = fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    let root = fs::File::open(format!("/proc/{pid}/root")).ok()?;
    let mut seen = std::collections::HashSet::new();
    let mut used = 0u64;
    for (dev, point) in tmpfs_mounts(&mountinfo) {
        if host.contains(&dev) || !seen.insert(dev.clone()) {
            continue;
        }
        // Resolved inside the sandbox's root, never through a symlink: the
        // server owns what is in it.
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_SYMLINKS);
        let Ok(fd) = openat2(&root, OsStr::from_bytes(&point), how) else {
            continue;
        };
        // A mount over the tmpfs (a grant of `/etc` covers the sandbox's own
        // `/etc`) is what the path reaches: its file system is not this one,
        // and measuring it would count the host's disk as the session's
        // memory. The covered tmpfs is left out (it is a small skeleton).
        if !nix::sys::stat::fstat(&fd).is_ok_and(|st| same_device(&dev, st.st_dev)) {
            continue;
        }
        if let Ok(st) = nix::sys::statfs::fstatfs(&fd) {
            let blocks = st.blocks().saturating_sub(st.blocks_free());
            used = used.saturating_add(blocks.saturating_mul(st.block_size() as u64));
        }
    }
    Some(used)
}

/// Whether `major:minor` (as `mountinfo` writes it) is the device `dev`.
fn same_device(mm: &str, dev: libc::dev_t) -> bool {
    let Some((ma, mi)) = mm.split_once(':') else {
        return false;
    };
    match (ma.parse::<u32>(), mi.parse::<u32>()) {
        (Ok(ma), Ok(mi)) => libc::makedev(ma, mi) == dev,
        _ => false,
    }
}

/// `(device, inode, allocated bytes)` of each memfd `pid` holds open.
fn memfds(pid: u32) -> Vec<(u64, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            fs::read_link(e.path())
                .is_ok_and(|t| t.as_os_str().as_encoded_bytes().starts_with(b"/memfd:"))
        })
        .filter_map(|e| fs::metadata(e.path()).ok())
        .map(|m| (m.dev(), m.ino(), m.blocks().saturating_mul(512)))
        .collect()
}

/// The memory of `root`'s tree (see [`Memory`]).
pub fn tree_memory(root: u32) -> Memory {
    let pids = tree(root);
    let mut m = Memory::default();
    let mut files = std::collections::HashSet::new();
    for &pid in &pids {
        if let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) {
            m.resident += status_kb(&status, "VmRSS");
            m.shmem_mapped += status_kb(&status, "RssShmem");
        }
        for (dev, ino, bytes) in memfds(pid) {
            if files.insert((dev, ino)) {
                m.memfd += bytes;
            }
        }
    }
    let host = fs::read_to_string("/proc/self/mountinfo")
        .map(|s| devices(&s))
        .unwrap_or_default();
    // The first process whose root the daemon may open (PID 1 is not
    // dumpable; its children are).
    m.tmpfs = pids
        .iter()
        .find_map(|&pid| private_tmpfs_bytes(pid, &host))
        .unwrap_or(0);
    m
}

/// Total memory of `root`'s tree, in bytes ([`Memory::total`]).
pub fn tree_rss(root: u32) -> u64 {
    tree_memory(root).total()
}

/// CPU time (user + system) used by `root`'s tree so far, in milliseconds: each
/// live process's own time plus what its reaped children used (`cutime`,
/// `cstime`), so processes that already exited still count.
pub fn tree_cpu_ms(root: u32) -> u64 {
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)
        .unwrap_or(100) as u64;
    let ticks: u64 = tree(root)
        .into_iter()
        .filter_map(|pid| fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .map(|stat| {
            // Fields after the command name: state is field 3, utime 14,
            // stime 15, cutime 16, cstime 17.
            stat.rfind(')')
                .map(|i| {
                    stat[i + 1..]
                        .split_whitespace()
                        .skip(11)
                        .take(4)
                        .filter_map(|v| v.parse::<u64>().ok())
                        .sum::<u64>()
                })
                .unwrap_or(0)
        })
        .sum();
    ticks * 1000 / tick
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_counts_once() {
        let m = Memory {
            resident: 100,
            shmem_mapped: 30,
            tmpfs: 50,
            memfd: 10,
        };
        assert_eq!(m.total(), 70 + 60);
        let mapped = Memory {
            tmpfs: 0,
            memfd: 0,
            ..m
        };
        assert_eq!(mapped.total(), 100);
        assert_eq!(Memory::default().total(), 0);
    }

    #[test]
    fn devices_compare_as_mountinfo_writes_them() {
        assert!(same_device("0:50", libc::makedev(0, 50)));
        assert!(same_device("259:3", libc::makedev(259, 3)));
        assert!(!same_device("0:50", libc::makedev(0, 51)));
        assert!(!same_device("junk", 0));
    }

    #[test]
    fn mountinfo_tmpfs_and_status_fields() {
        let mi = "22 1 0:40 / / ro,nosuid - tmpfs none rw,size=1024k\n\
                  30 22 0:41 / /tmp rw,nosuid,nodev - tmpfs none rw,size=262144k\n\
                  31 22 0:42 / /home/a\\040b rw - tmpfs none rw\n\
                  32 22 8:1 /proj /proj rw - ext4 /dev/sda1 rw\n";
        let t = tmpfs_mounts(mi);
        assert_eq!(
            t,
            [
                ("0:40".to_string(), b"/".to_vec()),
                ("0:41".to_string(), b"/tmp".to_vec()),
                ("0:42".to_string(), b"/home/a b".to_vec()),
            ]
        );
        assert!(devices(mi).contains("8:1"));
        let st = "Name:\tnode\nVmRSS:\t  2048 kB\nRssShmem:\t    12 kB\n";
        assert_eq!(status_kb(st, "VmRSS"), 2048 * 1024);
        assert_eq!(status_kb(st, "RssShmem"), 12 * 1024);
        assert_eq!(status_kb(st, "VmSwap"), 0);
    }

    #[test]
    fn a_memfd_written_but_not_mapped_counts() {
        // memfd_create is not in nix's default features here: use a child.
        let py = "import os,time\nfd=os.memfd_create('x')\nos.write(fd,b'a'*(8<<20))\nprint('ready',flush=True)\ntime.sleep(30)";
        let Ok(mut child) = std::process::Command::new("python3")
            .args(["-c", py])
            .stdout(std::process::Stdio::piped())
            .spawn()
        else {
            println!("skipping: no python3");
            return;
        };
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
        let m = tree_memory(child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(m.memfd >= 8 << 20, "{m:?}");
        assert!(
            m.total() >= m.resident + (8 << 20) - m.shmem_mapped,
            "{m:?}"
        );
    }

    #[test]
    fn own_tree_includes_children_and_has_rss() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let t = tree(me);
        assert!(t.contains(&me));
        assert!(t.contains(&child.id()), "{t:?} lacks {}", child.id());
        assert!(tree_rss(me) > 1 << 20);
        assert!(tree_memory(me).resident > 1 << 20);
        child.kill().unwrap();
        child.wait().unwrap();
        // A child that burns CPU and is reaped still counts.
        let before = tree_cpu_ms(me);
        let burn = std::process::Command::new("sh")
            .arg("-c")
            .arg("i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
            .status()
            .unwrap();
        assert!(burn.success());
        assert!(tree_cpu_ms(me) > before, "reaped child's CPU time counted");
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
