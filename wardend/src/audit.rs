//! The audit store: JSON Lines under `<state-dir>/audit/audit.jsonl`, owned by
//! the daemon, append-only (DESIGN.md §7).
//!
//! Every record is written with one `write(2)` on an `O_APPEND` fd, so lines
//! never interleave; `durable` records (`session.start`, `session.exit`) are
//! fsynced before `append` returns: a server never runs before its start
//! record is on disk.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use warden_core::audit::{timestamp, Record};

pub struct AuditStore {
    path: PathBuf,
    inner: Mutex<Inner>,
}

struct Inner {
    file: File,
    seq: u64,
}

impl AuditStore {
    /// Opens (creating 0700/0600) `<state_dir>/audit/audit.jsonl` and continues
    /// the sequence numbers found in it.
    pub fn open(state_dir: &Path) -> io::Result<AuditStore> {
        let dir = state_dir.join("audit");
        warden_core::paths::ensure_private_dir(&dir).map_err(io::Error::other)?;
        let path = dir.join("audit.jsonl");
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .mode(0o600)
            .open(&path)?;
        let seq = last_seq(&mut file)?;
        Ok(AuditStore {
            path,
            inner: Mutex::new(Inner { file, seq }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stamps `ts` and `seq`, appends the record as one line, and with
    /// `durable` fsyncs it. Returns the stamped record.
    pub fn append(&self, mut rec: Record, durable: bool) -> io::Result<Record> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.seq += 1;
        rec.seq = inner.seq;
        rec.ts = timestamp(time::OffsetDateTime::now_utc());
        let mut line = serde_json::to_vec(&rec).map_err(io::Error::other)?;
        line.push(b'\n');
        inner.file.write_all(&line)?;
        if durable {
            inner.file.sync_data()?;
        }
        Ok(rec)
    }

    /// Appends and logs (rather than returns) a failure: for records whose
    /// loss must not stop the daemon.
    pub fn record(&self, rec: Record) {
        if let Err(e) = self.append(rec, false) {
            tracing::error!(error = %e, path = %self.path.display(), "cannot write audit record");
        }
    }

    pub fn sync(&self) -> io::Result<()> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.file.sync_data()
    }
}

/// The `seq` of the last complete line, 0 for an empty store.
fn last_seq(file: &mut File) -> io::Result<u64> {
    let len = file.seek(SeekFrom::End(0))?;
    let start = len.saturating_sub(64 * 1024);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail)?;
    let text = String::from_utf8_lossy(&tail);
    for line in text.lines().rev() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            if let Some(seq) = v.get("seq").and_then(|s| s.as_u64()) {
                return Ok(seq);
            }
        }
    }
    Ok(0)
}

/// Reads every record of a store file (used by tests and, later, `logs`).
pub fn read_all(path: &Path) -> io::Result<Vec<Record>> {
    let text = fs::read_to_string(path)?;
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).map_err(io::Error::other))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_core::audit::{Decision, RecordType};

    #[test]
    fn appends_and_continues_sequence() {
        let t = tempfile::tempdir().unwrap();
        let store = AuditStore::open(t.path()).unwrap();
        let r = Record::new(
            RecordType::Daemon,
            "start",
            None,
            "wardend",
            Decision::Info,
            "",
        );
        store.append(r.clone(), true).unwrap();
        store.append(r.clone(), false).unwrap();
        drop(store);
        let store = AuditStore::open(t.path()).unwrap();
        let third = store.append(r, false).unwrap();
        assert_eq!(third.seq, 3);
        let all = read_all(store.path()).unwrap();
        assert_eq!(all.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    }
}
