//! A session's processes, their resident memory and CPU time, from `ps`:
//! where there is no procfs (macOS, the BSDs), the daemon samples what the
//! Seatbelt backend's memory limit and `wardenctl ps` need by running
//! `/bin/ps -A -o pid=,ppid=,pgid=,rss=,time=` (the columns BSD and procps
//! `ps` both have). Parsing is pure and tested everywhere; on Linux the
//! daemon reads procfs instead (`limits.rs`), and this module is not used
//! outside its tests.
//!
//! A session's processes are its root's process group and the root's
//! descendants (a process that left the group with `setsid` is still found
//! while its parent chain reaches the root).

use std::io;
use std::process::Command;
use std::time::Duration;

/// How often the Seatbelt backend samples its session's memory: every
/// sample runs `ps`, so far less often than procfs is read on Linux.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(200);

/// The `ps` the daemon runs (never found on `PATH`).
pub const PS: &str = "/bin/ps";

/// One process, as `ps` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub pid: u32,
    pub ppid: u32,
    pub pgid: u32,
    /// Resident set size in bytes (`ps` shows KiB).
    pub rss: u64,
    /// User and system CPU time in milliseconds.
    pub cpu_ms: u64,
}

/// CPU time as `ps`'s `time` column shows it: `[[DD-]HH:]MM:SS[.ss]`
/// (procps: `[DD-]HH:MM:SS`; BSD: `M:SS.ss`, `H:MM:SS`...), in ms.
pub fn parse_time(s: &str) -> Option<u64> {
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, s),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    let (secs, whole) = parts.split_last()?;
    let (sec, frac) = match secs.split_once('.') {
        Some((s, f)) => (s, f),
        None => (*secs, ""),
    };
    let mut ms = sec.parse::<u64>().ok()? * 1000;
    if !frac.is_empty() {
        let digits: String = frac.chars().take(3).collect();
        let scale = 10u64.pow(3 - digits.len() as u32);
        ms += digits.parse::<u64>().ok()? * scale;
    }
    let mut unit = 60_000u64;
    for p in whole.iter().rev() {
        ms += p.parse::<u64>().ok()? * unit;
        unit *= 60;
    }
    Some(ms + days * 86_400_000)
}

/// The rows of `ps -A -o pid=,ppid=,pgid=,rss=,time=`; lines that do not
/// parse are left out.
pub fn parse(text: &str) -> Vec<Row> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [pid, ppid, pgid, rss, time] = f.as_slice() else {
                return None;
            };
            Some(Row {
                pid: pid.parse().ok()?,
                ppid: ppid.parse().ok()?,
                pgid: pgid.parse().ok()?,
                rss: rss.parse::<u64>().ok()? * 1024,
                cpu_ms: parse_time(time)?,
            })
        })
        .collect()
}

/// Every process now.
pub fn snapshot() -> io::Result<Vec<Row>> {
    let out = Command::new(PS)
        .args(["-A", "-o", "pid=,ppid=,pgid=,rss=,time="])
        .env_clear()
        .env("LC_ALL", "C")
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{PS} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(parse(&String::from_utf8_lossy(&out.stdout)))
}

/// The session of `root` in `rows`: its process group and its descendants.
pub fn session(rows: &[Row], root: u32) -> Vec<Row> {
    let mut out: Vec<Row> = rows
        .iter()
        .filter(|r| r.pid == root || r.pgid == root)
        .copied()
        .collect();
    // Descendants by parent, until no more are found.
    loop {
        let more: Vec<Row> = rows
            .iter()
            .filter(|r| !out.iter().any(|o| o.pid == r.pid))
            .filter(|r| out.iter().any(|o| o.pid == r.ppid))
            .copied()
            .collect();
        if more.is_empty() {
            return out;
        }
        out.extend(more);
    }
}

/// The pids of `root`'s session (empty when `ps` fails).
pub fn tree(root: u32) -> Vec<u32> {
    snapshot()
        .map(|rows| session(&rows, root).iter().map(|r| r.pid).collect())
        .unwrap_or_default()
}

/// The resident memory of `root`'s session, in bytes (0 when `ps` fails).
pub fn tree_rss(root: u32) -> u64 {
    snapshot()
        .map(|rows| session(&rows, root).iter().map(|r| r.rss).sum())
        .unwrap_or(0)
}

/// The CPU time of `root`'s session so far, in ms (0 when `ps` fails).
pub fn tree_cpu_ms(root: u32) -> u64 {
    snapshot()
        .map(|rows| session(&rows, root).iter().map(|r| r.cpu_ms).sum())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_of_ps_time_parse() {
        assert_eq!(parse_time("00:00:06"), Some(6_000));
        assert_eq!(parse_time("01:02:03"), Some(3_723_000));
        assert_eq!(parse_time("2-00:00:01"), Some(2 * 86_400_000 + 1_000));
        assert_eq!(parse_time("0:00.03"), Some(30));
        assert_eq!(parse_time("12:34.5"), Some(754_500));
        assert_eq!(parse_time("1:02:03.25"), Some(3_723_250));
        for bad in ["", "x", "1:2:3:4", "1:a"] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_session_is_the_group_and_the_descendants() {
        let rows = parse(
            "    1     0     1  100 0:01.00\n\
             \x20 500     1   500 1000 0:00.50\n\
             \x20 501   500   500 2000 0:00.25\n\
             \x20 502   501   502 4000 0:00.00\n\
             \x20 503   502   503    8 0:00.00\n\
             \x20 504     1   500   16 0:00.00\n\
             \x20 600     1   600 9999 9:00.00\n\
             garbage line\n",
        );
        assert_eq!(rows.len(), 7);
        let s = session(&rows, 500);
        let mut pids: Vec<u32> = s.iter().map(|r| r.pid).collect();
        pids.sort();
        // 502 left the group (setsid) but is 501's child; 504 was
        // reparented but kept the group.
        assert_eq!(pids, [500, 501, 502, 503, 504]);
        assert_eq!(
            s.iter().map(|r| r.rss).sum::<u64>(),
            (1000 + 2000 + 4000 + 8 + 16) * 1024
        );
        assert_eq!(s.iter().map(|r| r.cpu_ms).sum::<u64>(), 750);
    }

    #[test]
    fn this_process_is_found_by_the_real_ps() {
        if !std::path::Path::new(PS).exists() {
            println!("skipping: no {PS}");
            return;
        }
        let me = std::process::id();
        let rows = snapshot().unwrap();
        assert!(rows.iter().any(|r| r.pid == me && r.rss > 0), "{rows:?}");
        assert!(tree_rss(me) > 0);
    }
}
