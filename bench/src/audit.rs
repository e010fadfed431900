//! `warden-bench audit [--records N] [--rounds R] [--dir DIR]`: append
//! throughput of wardend's audit store (`warden_audit::AuditStore`), group
//! commit against an fsync per record, in one run on the same disk.
//!
//! - every record fsynced: `append(rec, durable = true)`, what
//!   `session.start`/`session.exit` get;
//! - group commit: `append(rec, durable = false)`, fsynced by the background
//!   committer within 50 ms; the final `sync()` is included in the time;
//! - each with 1 and with 4 writer threads (concurrent durable appends share
//!   fsyncs);
//! - baseline: the same lines written by one `write(2)` + `fdatasync` each,
//!   without the store (what the schema-v1 store did for a durable record).
//!
//! The record is a typical `policy.syscall` deny (about 420 bytes stored).
//! Rounds interleave the modes so machine noise hits all alike; the median
//! round is reported. The store lives in a fresh directory under `--dir`
//! (default: the temp dir), which must be on a real disk for the comparison
//! to mean anything (tmpfs makes fsync free).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use warden_audit::event::{CheckedArg, SyscallRefused};
use warden_audit::{AuditStore, Options, Record};

use crate::{arg, median};

fn record(n: usize) -> Record {
    SyscallRefused {
        session: "3fa1c09b22de".into(),
        syscall: "unshare".into(),
        reason: "new namespaces (userns unlocks CVE-2022-0185, CVE-2023-32233, CVE-2022-0492); \
                 CLONE_FILES/FS pass"
            .into(),
        pid: 81234 + n as u32,
        nr: 272,
        args: [268435456, 0, 0, 0, 0, 0],
        checked_arg: Some(CheckedArg {
            index: 0,
            value: 268435456,
        }),
        errno: 1,
        error: "EPERM".into(),
    }
    .into()
}

/// The baseline: `write(2)` + `fdatasync` per line on an `O_APPEND` file.
fn raw(dir: &Path, records: usize) -> f64 {
    use std::io::Write;
    let state = tempfile::tempdir_in(dir).expect("tempdir");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state.path().join("raw.jsonl"))
        .expect("open");
    let start = Instant::now();
    for i in 0..records {
        let mut r = record(i);
        r.seq = i as u64 + 1;
        r.ts = "2026-11-29T14:47:32.123Z".into();
        let mut line = warden_audit::to_line(&r);
        line.push(b'\n');
        f.write_all(&line).expect("write");
        f.sync_data().expect("fdatasync");
    }
    records as f64 / start.elapsed().as_secs_f64()
}

/// Appends `records` records from `threads` threads; records per second.
fn run(dir: &Path, records: usize, threads: usize, durable: bool) -> f64 {
    let state = tempfile::tempdir_in(dir).expect("tempdir");
    let opts = Options {
        // No rotation inside a run: the append path alone.
        max_bytes: u64::MAX,
        ..Options::default()
    };
    let store = Arc::new(AuditStore::open_with(state.path(), opts).expect("open store"));
    let per = records / threads;
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let s = store.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    s.append(record(t * per + i), durable).expect("append");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    store.sync().expect("sync");
    (per * threads) as f64 / start.elapsed().as_secs_f64()
}

pub fn main() {
    let records = arg("--records", 20_000);
    let rounds = arg("--rounds", 3).max(1);
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let modes: [(&str, usize, bool); 4] = [
        ("every record fsynced (durable), 1 writer", 1, true),
        ("group commit, 1 writer", 1, false),
        ("every record fsynced (durable), 4 writers", 4, true),
        ("group commit, 4 writers", 4, false),
    ];
    // Durable appends are slow: fewer of them, same measure (records/s).
    let count = |durable: bool| {
        if durable {
            (records / 10).max(100)
        } else {
            records
        }
    };
    run(&dir, 200, 1, true); // warm-up
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut baseline = Vec::new();
    for _ in 0..rounds {
        baseline.push(raw(&dir, count(true)));
        for (i, (_, threads, durable)) in modes.iter().enumerate() {
            results[i].push(run(&dir, count(*durable), *threads, *durable));
        }
    }
    println!(
        "## audit append throughput ({rounds} rounds, median; store in {})\n",
        dir.display()
    );
    println!("| mode | records per run | records/s |");
    println!("| --- | --- | --- |");
    println!(
        "| baseline: write(2) + fdatasync per line, no store | {} | {:.0} |",
        count(true),
        median(baseline)
    );
    let mut medians = Vec::new();
    for (i, (name, _, durable)) in modes.iter().enumerate() {
        let m = median(results[i].clone());
        medians.push(m);
        println!("| {name} | {} | {m:.0} |", count(*durable));
    }
    println!(
        "\ngroup commit / fsync per record: {:.0}x (1 writer), {:.0}x (4 writers)",
        medians[1] / medians[0],
        medians[3] / medians[2]
    );
}
