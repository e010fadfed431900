//! Memory limit by sampling (DESIGN.md §5 "Limits"), used when no delegated
//! cgroup v2 subtree with a memory controller is available: every 25 ms the
//! resident set sizes of every process in the sandbox (the descendants of its
//! PID 1, found through the `ppid` field of `/proc/<pid>/stat`, readable
//! without ptrace rights) are added up and compared with `memory_mb`.

use std::collections::HashMap;
use std::fs;
use std::time::Duration;

pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(25);

fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map(|v| v as u64)
        .unwrap_or(4096)
}

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

/// Total resident memory of `root`'s tree, in bytes.
pub fn tree_rss(root: u32) -> u64 {
    let page = page_size();
    tree(root)
        .into_iter()
        .filter_map(|pid| fs::read_to_string(format!("/proc/{pid}/statm")).ok())
        .filter_map(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|r| r.parse::<u64>().ok())
        })
        .map(|pages| pages * page)
        .sum()
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
