//! `warden-bench sessions [--n N] [--hold S] [--stdio pipes|null]`: many
//! concurrent idle sessions.
//!
//! Starts N shims at once, each running `/bin/sleep` for S seconds (default
//! 30; long enough that the last one starts, and the footprint is read, before
//! the first ends: the daemon starts about 40 sandboxes a second on 2 cores)
//! under an empty policy, against one fresh daemon, and measures, side by
//! side with N `/bin/sleep` processes started directly: how long until all of
//! them run (for the shims: until the daemon has N sandbox launchers), how
//! many failed and with what, and the daemon's resident memory, threads and
//! open fds before and with all N running (per session: the difference over
//! the live sessions, N when all are up).
//!
//! The shims' stdin, stdout and stderr are pipes the bench holds open, as an
//! MCP client's are (`--stdio null`: stdin and stdout `/dev/null`, which the
//! daemon relays with one thread per stream instead of one for all).

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{arg, bin, Daemon};

/// (resident KiB, threads, fds) of a process.
fn footprint(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    (field("VmRSS:"), field("Threads:"), fds)
}

/// Live sandboxes: the daemon's child processes (one launcher per session
/// from its start to its end). Not `wardenctl ps`, which samples every
/// session's process tree through all of `/proc` and takes seconds with
/// hundreds of sessions.
fn live_sessions(pid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // Fields after the command name: state, then ppid.
            stat.rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok())
                == Some(pid)
        })
        .count()
}

fn wait_all(children: Vec<Child>) -> BTreeMap<String, usize> {
    let mut outcomes = BTreeMap::new();
    for c in children {
        let out = c.wait_with_output().expect("wait");
        let key = if out.status.success() {
            "exit 0".to_string()
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            let line = err.lines().find(|l| l.starts_with("warden:")).unwrap_or("");
            format!("exit {:?}: {line}", out.status.code())
        };
        *outcomes.entry(key).or_default() += 1;
    }
    outcomes
}

pub fn run() {
    let n = arg("--n", 100);
    let hold = arg("--hold", 30);
    let pipes = match crate::arg_str("--stdio", "pipes").as_str() {
        "pipes" => true,
        "null" => false,
        other => {
            eprintln!("warden-bench sessions: --stdio must be pipes or null, not {other}");
            std::process::exit(2);
        }
    };
    let sleep = "/bin/sleep";
    // Three pipes per shim held here.
    raise_nofile();

    // Baseline: N sleeps started directly.
    let t0 = Instant::now();
    let direct: Vec<Child> = (0..n)
        .map(|_| {
            Command::new(sleep)
                .arg("2")
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn sleep")
        })
        .collect();
    let direct_start = t0.elapsed();
    let direct_out = wait_all(direct);

    let daemon = Daemon::start();
    let pid = daemon.child.id();
    let policy = tempfile::NamedTempFile::new().expect("policy file");
    std::fs::write(policy.path(), "version: 1\nname: bench-sessions\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let before = footprint(pid);
    let t0 = Instant::now();
    let shims: Vec<Child> = (0..n)
        .map(|_| {
            Command::new(bin("warden-shim"))
                .arg("--socket")
                .arg(&daemon.socket)
                .arg("--no-autostart")
                .arg("--policy")
                .arg(policy.path())
                .arg("--")
                .arg(sleep)
                .arg(hold.to_string())
                .stdin(if pipes { Stdio::piped() } else { Stdio::null() })
                .stdout(if pipes { Stdio::piped() } else { Stdio::null() })
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn warden-shim")
        })
        .collect();
    let spawned = t0.elapsed();
    // Until every session runs (or the shims that failed have exited).
    let deadline = Instant::now() + Duration::from_secs(hold.saturating_sub(5).max(5) as u64);
    let mut all_up = None;
    let mut peak = before;
    while Instant::now() < deadline {
        let live = live_sessions(pid);
        let f = footprint(pid);
        peak = (peak.0.max(f.0), peak.1.max(f.1), peak.2.max(f.2));
        if live >= n {
            all_up = Some(t0.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The idle footprint: after the start-up's extra threads have gone
    // (wardend lets blocking-pool threads go 2 s after their last job, and
    // seccomp notifier threads beyond the first after 10 s).
    std::thread::sleep(Duration::from_millis(12_000));
    let with = footprint(pid);
    let live = live_sessions(pid).max(1);
    let outcomes = wait_all(shims);

    // Per live session (all N unless some failed or were not up yet).
    let per = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / live as f64;
    println!("## {n} concurrent idle sessions (`sleep {hold}`), one daemon\n");
    println!("| | direct `sleep` | through warden-shim |");
    println!("| --- | --- | --- |");
    println!(
        "| spawn all | {:.1} ms | {:.1} ms |",
        direct_start.as_secs_f64() * 1e3,
        spawned.as_secs_f64() * 1e3
    );
    println!(
        "| all running | (at once) | {} |",
        all_up.map_or(format!("not reached: {live} of {n} live"), |d| format!(
            "{:.2} s",
            d.as_secs_f64()
        ))
    );
    println!(
        "| outcomes | {} | {} |",
        fmt_outcomes(&direct_out),
        fmt_outcomes(&outcomes)
    );
    println!(
        "\ndaemon before: {} KiB resident, {} threads, {} fds; with {live} sessions: {} KiB, {} threads, {} fds (peak {} KiB, {} threads, {} fds)",
        before.0, before.1, before.2, with.0, with.1, with.2, peak.0, peak.1, peak.2
    );
    println!(
        "per live session ({live}): {:.1} KiB resident, {:.2} threads, {:.2} fds",
        per(before.0, with.0),
        per(before.1, with.1),
        per(before.2, with.2)
    );
}

/// The soft `RLIMIT_NOFILE` up to the hard one.
fn raise_nofile() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

fn fmt_outcomes(o: &BTreeMap<String, usize>) -> String {
    o.iter()
        .map(|(k, v)| format!("{v}× {k}"))
        .collect::<Vec<_>>()
        .join("; ")
}
