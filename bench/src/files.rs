//! `warden-bench files`: what file-access auditing (`audit.files`) costs.
//!
//! Run: `cargo build --release --workspace && target/release/warden-bench files`
//! (options: `--launches N` (default 40), `--opens N` (default 20000),
//! `--deps DIR` (default `$WARDEN_TEST_DEPS`, else `target/test-deps`, where
//! `scripts/test` installs the npm servers)).
//!
//! - start-up: a real Node MCP server (`@modelcontextprotocol/server-filesystem`)
//!   through `warden-shim`, from spawning the shim to the first byte of the
//!   reply to `initialize`, with `audit.files: off`, `denied` and `all`
//!   interleaved in one run (same daemon, same policy otherwise);
//! - per call: a node script that opens and closes one granted file N times
//!   and times that loop itself, at the three levels;
//! - the records each level wrote for one start-up (from the audit store).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{arg, bin, median, ms, stats, which, Daemon};

const LEVELS: [&str; 3] = ["off", "denied", "all"];

fn deps_dir() -> Option<PathBuf> {
    let args: Vec<String> = std::env::args().collect();
    let from_arg = args
        .iter()
        .position(|a| a == "--deps")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let dir = from_arg
        .or_else(|| std::env::var_os("WARDEN_TEST_DEPS").map(PathBuf::from))
        .unwrap_or_else(|| super::bin_dir().join("../test-deps"));
    let script = server_script(&dir);
    script.is_file().then_some(dir)
}

fn server_script(deps: &Path) -> PathBuf {
    deps.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
}

/// One policy per level: the deps read-only, a work directory read-write.
fn policy(dir: &Path, deps: &Path, work: &Path, level: &str) -> PathBuf {
    let p = dir.join(format!("files-{level}.yaml"));
    std::fs::write(
        &p,
        format!(
            "version: 1\nname: bench-files-{level}\nfilesystem:\n  read: [\"{}\"]\n  write: [\"{}\"]\naudit:\n  files: {level}\n",
            deps.display(),
            work.display()
        ),
    )
    .unwrap();
    p
}

fn shim(socket: &Path, policy: &Path) -> Command {
    let mut c = Command::new(bin("warden-shim"));
    c.arg("--socket")
        .arg(socket)
        .arg("--no-autostart")
        .arg("--policy")
        .arg(policy)
        .arg("--");
    c
}

/// Spawn to the first byte of the reply to `initialize`; then closes stdin
/// and waits for the server to end.
fn launch(socket: &Path, policy: &Path, node: &Path, deps: &Path, work: &Path) -> Duration {
    let mut c = shim(socket, policy);
    c.arg(node)
        .arg(server_script(deps))
        .arg(work)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    super::first_byte(c)
}

/// Opens and closes `file` `n` times inside the sandbox; the loop's own time.
fn opens(socket: &Path, policy: &Path, node: &Path, file: &Path, n: usize) -> f64 {
    let script = format!(
        "const fs=require('fs');const f={:?};const t=process.hrtime.bigint();for(let i=0;i<{n};i++){{fs.closeSync(fs.openSync(f,'r'))}}console.log(Number(process.hrtime.bigint()-t)/1e6)",
        file.display().to_string()
    );
    let out = shim(socket, policy)
        .arg(node)
        .arg("-e")
        .arg(script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run node");
    assert!(out.status.success(), "{:?}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("node printed a duration")
}

/// Counts the `file` records of the store under `state`, by decision.
fn file_records(state: &Path) -> (usize, usize, usize) {
    let mut out = (0, 0, 0);
    let Ok(dir) = std::fs::read_dir(state.join("audit")) else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v["type"] != "file" {
                continue;
            }
            match v["decision"].as_str() {
                Some("allow") => out.0 += 1,
                Some("deny") => out.1 += 1,
                _ => out.2 += 1,
            }
        }
    }
    out
}

pub fn main() {
    let launches = arg("--launches", 40);
    let n_opens = arg("--opens", 20000);
    let Some(deps) = deps_dir() else {
        eprintln!(
            "warden-bench files: @modelcontextprotocol/server-filesystem not found; run \
             ./scripts/test once (it installs it into target/test-deps) or pass --deps DIR"
        );
        std::process::exit(2);
    };
    let node = which("node").expect("node on PATH");
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("file.txt"), "x").unwrap();
    let policies: Vec<PathBuf> = LEVELS
        .iter()
        .map(|l| policy(dir.path(), &deps, &work, l))
        .collect();

    // One daemon per level for the record counts (a store each), then one
    // daemon for all the timings.
    println!("## audit.files: records of one start-up of server-filesystem\n");
    println!("| audit.files | allow | deny | other |");
    println!("| --- | --- | --- | --- |");
    for (level, p) in LEVELS.iter().zip(&policies) {
        let mut d = Daemon::start();
        launch(&d.socket, p, &node, &deps, &work);
        // The daemon's directory outlives it: dropping it stops the daemon
        // (SIGTERM, which flushes the store), then the records are read.
        let kept = std::mem::replace(&mut d._dir, tempfile::tempdir().unwrap());
        drop(d);
        let (a, de, o) = file_records(&kept.path().join("state"));
        println!("| {level} | {a} | {de} | {o} |");
    }

    let daemon = Daemon::start();
    let s = daemon.socket.clone();
    for p in &policies {
        for _ in 0..3 {
            launch(&s, p, &node, &deps, &work);
        }
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); LEVELS.len()];
    for _ in 0..launches {
        for (i, p) in policies.iter().enumerate() {
            times[i].push(launch(&s, p, &node, &deps, &work));
        }
    }
    println!(
        "\n## start-up of server-filesystem (node) through warden-shim, spawn to first reply byte ({launches} launches each, interleaved)\n"
    );
    println!("| audit.files | median | p90 | p99 | median vs off | median of paired ratios |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let base = stats(times[0].clone()).0;
    // Each round launched the three levels back to back: the ratio to the
    // same round's `off` cancels slow drifts of the machine.
    let paired = |t: &[Duration]| {
        median(
            t.iter()
                .zip(&times[0])
                .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
                .collect(),
        )
    };
    for (level, t) in LEVELS.iter().zip(&times) {
        let r = paired(t);
        let (m, p90, p99) = stats(t.clone());
        println!(
            "| {level} | {} | {} | {} | {:+.1} % | {:+.1} % |",
            ms(m),
            ms(p90),
            ms(p99),
            (m.as_secs_f64() / base.as_secs_f64() - 1.0) * 100.0,
            (r - 1.0) * 100.0
        );
    }

    let file = work.join("file.txt");
    let runs = 5;
    let mut loops: Vec<Vec<f64>> = vec![Vec::new(); LEVELS.len()];
    for p in &policies {
        opens(&s, p, &node, &file, n_opens / 10);
    }
    for _ in 0..runs {
        for (i, p) in policies.iter().enumerate() {
            loops[i].push(opens(&s, p, &node, &file, n_opens));
        }
    }
    println!(
        "\n## open+close of one granted file, {n_opens} times in a node loop ({runs} runs each, the loop's own time)\n"
    );
    println!("| audit.files | median | per open | added per open vs off |");
    println!("| --- | --- | --- | --- |");
    let per = |ms: f64| ms * 1e3 / n_opens as f64;
    let base = median(loops[0].clone());
    for (level, l) in LEVELS.iter().zip(loops) {
        let m = median(l);
        println!(
            "| {level} | {m:.1} ms | {:.2} µs | {:+.2} µs |",
            per(m),
            per(m) - per(base)
        );
    }
}
