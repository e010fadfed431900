//! The audit store: JSON Lines under `<state-dir>/audit/`, owned by the
//! daemon, append-only, hash-chained, rotated by size (DESIGN.md §7,
//! `docs/audit-format.md`; the file layout is [`crate::store`]).
//!
//! - **One write per record.** Every record is one `write(2)` of a whole
//!   line on an `O_APPEND` fd, under one lock, so lines never interleave. A
//!   short or failed write is cut off again (`ftruncate` to the old size); if
//!   even that fails the store refuses further records (fail closed).
//! - **Chain.** Each record's `prev` is the hash of the line before it
//!   ([`crate::line_hash`]), across rotation and restarts.
//! - **Durability.** `durable` appends (`session.start`, `session.exit`...)
//!   are fsynced before `append` returns: a server never runs before its
//!   start record is on disk. Other records are group-committed: a background
//!   committer fsyncs within [`Options::commit_delay`] of the first unsynced
//!   record (plus the fsync itself). Concurrent durable appends share fsyncs.
//!   The committer then rewrites the head file (`audit.head`, off the
//!   durable path) to name the last record on disk, so a store cut short at
//!   a line boundary is detected; [`AuditStore::sync`] updates it at once.
//! - **Crashes.** `kill -9` or a power loss in the middle of a write leaves
//!   an incomplete last line. [`AuditStore::open`] moves it aside into
//!   `audit.<seq>.<unix-ms>.torn` (nothing is silently dropped), cuts it off,
//!   writes a `daemon.torn` record and continues `seq` and the chain from the
//!   last complete record.
//! - **Rotation.** When the live file would exceed [`Options::max_bytes`], it
//!   is fsynced and renamed `audit.<first-seq>.jsonl`; the new live file
//!   starts with a `daemon.rotate` record, and rotated files beyond
//!   [`Options::keep`] are deleted (oldest first) once that record is on disk.
//! - **Followers.** Every record is also published, in `seq` order, to
//!   [`AuditStore::subscribe`]rs (`wardenctl logs -f`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::event::{DaemonDamaged, DaemonRetention, DaemonRotate, DaemonTorn, Damage, Event};
use crate::store::{self, Head, HEAD, LIVE};
use crate::{line_hash, timestamp, to_line, Record, RecordType, GENESIS, SCHEMA_VERSION};

/// Default size at which the live file is rotated.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Default number of rotated files kept.
pub const DEFAULT_KEEP: usize = 8;
/// Longest a non-durable record waits before the committer fsyncs it.
pub const COMMIT_DELAY: Duration = Duration::from_millis(50);
/// Records buffered per follower before it lags (and re-reads the files).
const FOLLOW_BUFFER: usize = 4096;

/// Rotation, retention and group commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Rotate the live file before it would exceed this many bytes.
    pub max_bytes: u64,
    /// Rotated files kept; older ones are deleted.
    pub keep: usize,
    /// How long the committer lets non-durable records gather before an fsync.
    pub commit_delay: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_bytes: DEFAULT_MAX_BYTES,
            keep: DEFAULT_KEEP,
            commit_delay: COMMIT_DELAY,
        }
    }
}

/// A record as published to followers: its stored line (no newline) and the
/// record itself (for filtering without parsing the line again).
#[derive(Debug)]
pub struct Live {
    pub seq: u64,
    pub line: String,
    pub record: Record,
}

pub struct AuditStore {
    shared: Arc<Shared>,
    committer: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    dir: PathBuf,
    live_path: PathBuf,
    opts: Options,
    inner: Mutex<Inner>,
    sync: Mutex<SyncState>,
    /// Signalled when an fsync completes.
    synced_cv: Condvar,
    /// Wakes the committer: new unsynced records, an fsync done, shutdown.
    work_cv: Condvar,
    live_tx: broadcast::Sender<Arc<Live>>,
    /// Held while the head file is rewritten: the committer and
    /// [`AuditStore::sync`] share one temporary file name.
    head_lock: Mutex<()>,
}

struct Inner {
    file: Arc<File>,
    dirfd: File,
    /// Last seq written (0: none yet).
    seq: u64,
    /// `line_hash` of the last line written ([`GENESIS`] before the first).
    last_hash: String,
    /// Bytes in the live file.
    size: u64,
    /// Seq of the live file's first record.
    live_first_seq: Option<u64>,
    /// A failed write could not be undone: refuse further records.
    poisoned: bool,
    /// The `session.start` seq of every session without a `session.exit`
    /// yet: retention never deletes a file holding one (review F5).
    live_starts: std::collections::HashMap<String, u64>,
    /// After a failed rotation, when to try again.
    rotate_retry_at: Option<Instant>,
}

#[derive(Default)]
struct SyncState {
    written: u64,
    synced: u64,
    /// `line_hash` of record `synced`.
    synced_hash: String,
    /// What `audit.head` names.
    head_seq: u64,
    syncing: bool,
    /// When the oldest record not yet fsynced was written.
    dirty_since: Option<Instant>,
    shutdown: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AuditStore {
    /// Opens (creating 0700/0600) `<state_dir>/audit/` with default options.
    pub fn open(state_dir: &Path) -> io::Result<AuditStore> {
        Self::open_with(state_dir, Options::default())
    }

    /// Opens the store: moves a torn last line aside, continues `seq` and the
    /// chain from the last complete record, applies retention, and starts the
    /// committer.
    pub fn open_with(state_dir: &Path, opts: Options) -> io::Result<AuditStore> {
        let dir = state_dir.join("audit");
        warden_core::paths::ensure_private_dir(&dir).map_err(io::Error::other)?;
        let dirfd = File::open(&dir)?;
        let live_path = dir.join(LIVE);
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        finish_interrupted_rotation(&dir)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .mode(0o600)
            .open(&live_path)?;
        let len = file.metadata()?.len();
        let complete_end = match last_newline(&file, len)? {
            Some(p) => p + 1,
            None => 0,
        };
        // Where the chain continues from: the live file's last complete line,
        // else (just rotated) the newest rotated file's.
        let (seq, last_hash) = match last_record(&file, complete_end)? {
            Some(found) => found,
            None => match store::rotated_files(&dir)?.last() {
                Some((_, path)) => {
                    let f = File::open(path)?;
                    let end = f.metadata()?.len();
                    let end = last_newline(&f, end)?.map_or(0, |p| p + 1);
                    last_record(&f, end)?.unwrap_or((0, GENESIS.to_string()))
                }
                None => (0, GENESIS.to_string()),
            },
        };
        let torn = if complete_end < len {
            Some(move_torn_aside(
                &dir,
                &dirfd,
                &file,
                complete_end,
                len,
                seq,
            )?)
        } else {
            None
        };
        let live_first_seq = first_seq(&file, complete_end)?;
        // What a killed daemon wrote may still be only in the page cache:
        // on disk before anything (the head) says it is.
        file.sync_all()?;
        // The head names a record that was on disk: if the store now ends
        // before it, or that record changed, it was damaged while no daemon
        // ran. Say so, and keep the missing seqs missing (--verify keeps
        // failing there) rather than reuse them.
        let head = store::read_head(&dir);
        let mut seq = seq;
        let damaged = |what, h: &Head| DaemonDamaged {
            dir: dir.display().to_string(),
            what,
            head_seq: h.seq,
            head_hash: h.hash.clone(),
            found_seq: seq,
            found_hash: last_hash.clone(),
        };
        let damage = match &head {
            Some(h) if h.seq > seq => {
                let d = damaged(Damage::Truncated, h);
                seq = h.seq;
                Some(d)
            }
            Some(h) if h.seq == seq && h.hash != last_hash => Some(damaged(Damage::Edited, h)),
            _ => None,
        };
        let (last_hash_for_head, head_seq) =
            (last_hash.clone(), head.map_or(0, |h| h.seq.min(seq)));
        let (live_tx, _) = broadcast::channel(FOLLOW_BUFFER);
        let shared = Arc::new(Shared {
            dir,
            live_path,
            opts,
            inner: Mutex::new(Inner {
                file: Arc::new(file),
                dirfd,
                seq,
                last_hash,
                size: complete_end,
                live_first_seq,
                poisoned: false,
                live_starts: std::collections::HashMap::new(),
                rotate_retry_at: None,
            }),
            sync: Mutex::new(SyncState {
                written: seq,
                synced: seq,
                synced_hash: last_hash_for_head,
                head_seq,
                ..SyncState::default()
            }),
            synced_cv: Condvar::new(),
            work_cv: Condvar::new(),
            live_tx,
            head_lock: Mutex::new(()),
        });
        let s2 = shared.clone();
        let committer = std::thread::Builder::new()
            .name("audit-commit".into())
            .spawn(move || s2.committer())?;
        let store = AuditStore {
            shared,
            committer: Mutex::new(Some(committer)),
        };
        if let Some(t) = torn {
            tracing::warn!(moved_to = %t.moved_to, bytes = t.bytes, "audit store: torn last line moved aside");
            store.append(t, true)?;
        }
        if let Some(d) = damage {
            let rec = d.into_record();
            tracing::error!(reason = %rec.reason, "audit store damaged");
            store.append(rec, true)?;
        }
        store.shared.retention_at_open()?;
        Ok(store)
    }

    /// The live file.
    pub fn path(&self) -> &Path {
        &self.shared.live_path
    }

    /// The store directory (`<state-dir>/audit`).
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    pub fn options(&self) -> &Options {
        &self.shared.opts
    }

    /// Stamps `ts`, `seq` and `prev`, appends the record (an
    /// [`crate::event`], or a [`Record`]) as one line, and with `durable`
    /// returns only once it is fsynced. Returns the stamped record.
    pub fn append(&self, rec: impl Into<Record>, durable: bool) -> io::Result<Record> {
        let rec = self.shared.write(rec.into())?;
        if durable {
            self.shared.sync_through(rec.seq)?;
        }
        Ok(rec)
    }

    /// Returns once every record up to `seq` (from [`AuditStore::append`]
    /// without `durable`) is on disk: the second half of a durable append,
    /// for a caller with other work to do while the fsync is due (a
    /// `session.start` whose sandbox is built meanwhile, its server released
    /// only after this returns).
    pub fn sync_through(&self, seq: u64) -> io::Result<()> {
        self.shared.sync_through(seq)
    }

    /// Appends and logs (rather than returns) a failure: for records whose
    /// loss must not stop the daemon.
    pub fn record(&self, rec: impl Into<Record>) {
        if let Err(e) = self.append(rec, false) {
            tracing::error!(error = %e, path = %self.shared.live_path.display(), "cannot write audit record");
        }
    }

    /// Fsyncs everything written so far and updates the head.
    pub fn sync(&self) -> io::Result<()> {
        let target = lock(&self.shared.sync).written;
        self.shared.sync_through(target)?;
        self.shared.update_head();
        Ok(())
    }

    /// Records appended from now on, in `seq` order. Subscribe *before*
    /// reading the files for a gapless replay (dedupe by `seq`).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Live>> {
        self.shared.live_tx.subscribe()
    }

    /// The last seq written.
    pub fn last_seq(&self) -> u64 {
        lock(&self.shared.inner).seq
    }
}

impl Drop for AuditStore {
    fn drop(&mut self) {
        lock(&self.shared.sync).shutdown = true;
        self.shared.work_cv.notify_all();
        if let Some(h) = lock(&self.committer).take() {
            let _ = h.join();
        }
    }
}

impl Shared {
    /// `seq`, `ts`, `prev`, and the stored line (no newline).
    fn stamp(inner: &Inner, rec: &mut Record) -> Vec<u8> {
        rec.v = SCHEMA_VERSION;
        rec.seq = inner.seq + 1;
        rec.ts = timestamp(time::OffsetDateTime::now_utc());
        rec.prev = inner.last_hash.clone();
        to_line(rec)
    }

    fn write(&self, mut rec: Record) -> io::Result<Record> {
        let mut inner = lock(&self.inner);
        if inner.poisoned {
            return Err(io::Error::other(
                "the audit store is unusable: a failed write could not be undone",
            ));
        }
        let mut line = Self::stamp(&inner, &mut rec);
        let retry_ok = inner.rotate_retry_at.is_none_or(|t| Instant::now() >= t);
        if inner.size > 0 && inner.size + line.len() as u64 + 1 > self.opts.max_bytes && retry_ok {
            match self.rotate(&mut inner) {
                Ok(()) => inner.rotate_retry_at = None,
                Err(e) => {
                    tracing::error!(error = %e, dir = %self.dir.display(), "cannot rotate the audit store; retrying in a minute");
                    inner.rotate_retry_at = Some(Instant::now() + Duration::from_secs(60));
                }
            }
            line = Self::stamp(&inner, &mut rec);
        }
        self.write_line(&mut inner, rec, line)
    }

    /// One `write(2)` of the whole line; undone if it was short.
    fn write_line(&self, inner: &mut Inner, rec: Record, mut line: Vec<u8>) -> io::Result<Record> {
        line.push(b'\n');
        let result = match (&*inner.file).write(&line) {
            Ok(n) if n == line.len() => Ok(()),
            Ok(n) => Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "short write to the audit store ({n} of {} bytes)",
                    line.len()
                ),
            )),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            if let Err(undo) = inner.file.set_len(inner.size) {
                tracing::error!(error = %undo, "cannot cut a partial audit line off; refusing further records");
                inner.poisoned = true;
            }
            return Err(e);
        }
        line.pop();
        if rec.kind == RecordType::Session {
            if let Some(id) = &rec.session {
                match rec.action.as_str() {
                    "start" => {
                        inner.live_starts.insert(id.clone(), rec.seq);
                    }
                    "exit" => {
                        inner.live_starts.remove(id);
                    }
                    _ => {}
                }
            }
        }
        inner.seq = rec.seq;
        inner.last_hash = line_hash(&line);
        inner.size += line.len() as u64 + 1;
        inner.live_first_seq.get_or_insert(rec.seq);
        {
            let mut st = lock(&self.sync);
            st.written = rec.seq;
            if st.dirty_since.is_none() {
                st.dirty_since = Some(Instant::now());
                self.work_cv.notify_one();
            }
        }
        if self.live_tx.receiver_count() > 0 {
            // Stored lines are ASCII (`to_line`): nothing to replace.
            let line = String::from_utf8_lossy(&line).into_owned();
            let _ = self.live_tx.send(Arc::new(Live {
                seq: rec.seq,
                line,
                record: rec.clone(),
            }));
        }
        Ok(rec)
    }

    fn mark_synced(&self, seq: u64, hash: &str) {
        let mut st = lock(&self.sync);
        if seq > st.synced {
            st.synced = seq;
            st.synced_hash = hash.to_string();
        }
        if st.written <= st.synced {
            st.dirty_since = None;
        }
        self.synced_cv.notify_all();
    }

    /// Renames the live file to `audit.<first-seq>.jsonl`, starts a new one
    /// with a `daemon.rotate` record and applies retention.
    fn rotate(&self, inner: &mut Inner) -> io::Result<()> {
        inner.file.sync_data()?;
        self.mark_synced(inner.seq, &inner.last_hash);
        let first = inner.live_first_seq.unwrap_or(inner.seq);
        let name = store::rotated_name(first);
        rename_noreplace(&inner.dirfd, LIVE, name.as_str())
            .map_err(|e| io::Error::other(format!("renaming {LIVE} to {name}: {e}")))?;
        let new = OpenOptions::new()
            .create_new(true)
            .append(true)
            .read(true)
            .mode(0o600)
            .open(&self.live_path);
        let new = match new {
            Ok(f) => f,
            Err(e) => {
                // Keep writing to the renamed file rather than lose records.
                return Err(io::Error::other(format!(
                    "creating a new {LIVE} after rotating to {name}: {e}"
                )));
            }
        };
        let last = inner.seq;
        inner.file = Arc::new(new);
        inner.size = 0;
        inner.live_first_seq = None;
        if let Err(e) = inner.dirfd.sync_all() {
            tracing::warn!(error = %e, "cannot fsync the audit directory after rotating");
        }
        let pinned = inner.live_starts.values().min().copied();
        let (doomed, oldest_seq, held) = self.plan_retention(inner.seq + 1, pinned)?;
        let mut rec = DaemonRotate {
            file: name,
            first_seq: first,
            last_seq: last,
            max_bytes: self.opts.max_bytes,
            keep: self.opts.keep,
            deleted: names(&doomed),
            oldest_seq,
            kept_for_live_sessions: held,
        }
        .into_record();
        let line = Self::stamp(inner, &mut rec);
        self.write_line(inner, rec, line)?;
        inner.file.sync_data()?;
        self.mark_synced(inner.seq, &inner.last_hash);
        self.delete(&inner.dirfd, &doomed);
        Ok(())
    }

    /// Rotated files beyond `keep` (oldest first), the first seq that
    /// remains (`next` when no rotated file remains), and how many files
    /// beyond `keep` are held back because they hold the `session.start` of a
    /// live session (seq `pinned` and later are never deleted).
    fn plan_retention(
        &self,
        next: u64,
        pinned: Option<u64>,
    ) -> io::Result<(Vec<PathBuf>, u64, usize)> {
        let rotated = store::rotated_files(&self.dir)?;
        let over = rotated.len().saturating_sub(self.opts.keep);
        // File i holds seqs up to the next file's first seq (or `next`).
        let deletable = |i: usize| {
            let end = rotated.get(i + 1).map_or(next, |(s, _)| *s);
            pinned.is_none_or(|p| end <= p)
        };
        let cut = (0..over).take_while(|&i| deletable(i)).count();
        let oldest = rotated.get(cut).map_or(next, |(s, _)| *s);
        Ok((
            rotated.into_iter().take(cut).map(|(_, p)| p).collect(),
            oldest,
            over - cut,
        ))
    }

    fn delete(&self, dirfd: &File, doomed: &[PathBuf]) {
        for p in doomed {
            if let Err(e) = fs::remove_file(p) {
                tracing::error!(error = %e, path = %p.display(), "cannot delete an old audit file");
            }
        }
        if !doomed.is_empty() {
            let _ = dirfd.sync_all();
        }
    }

    /// More rotated files than `keep` at start-up (`--audit-keep` lowered):
    /// a `daemon.retention` record, then the deletion.
    fn retention_at_open(&self) -> io::Result<()> {
        // Planned, stamped and written under one lock, without the rotation
        // check of `write`: a rotation in between would apply retention
        // itself and leave this record's `oldest_seq` stale (the live file
        // may exceed its limit by this one record, as documented).
        let mut inner = lock(&self.inner);
        let (doomed, oldest_seq, _) = self.plan_retention(inner.seq + 1, None)?;
        if doomed.is_empty() {
            return Ok(());
        }
        let mut rec = DaemonRetention {
            dir: self.dir.display().to_string(),
            keep: self.opts.keep,
            deleted: names(&doomed),
            oldest_seq,
        }
        .into_record();
        let line = Self::stamp(&inner, &mut rec);
        let rec = self.write_line(&mut inner, rec, line)?;
        drop(inner);
        self.sync_through(rec.seq)?;
        let inner = lock(&self.inner);
        self.delete(&inner.dirfd, &doomed);
        Ok(())
    }

    /// Returns once every record up to `target` is fsynced, sharing an fsync
    /// with concurrent callers.
    fn sync_through(&self, target: u64) -> io::Result<()> {
        let mut st = lock(&self.sync);
        loop {
            if st.synced >= target {
                return Ok(());
            }
            if st.syncing {
                st = self.synced_cv.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            st.syncing = true;
            let started = Instant::now();
            drop(st);
            let result = self.fsync_now();
            st = lock(&self.sync);
            st.syncing = false;
            if let Ok((seq, hash)) = &result {
                if *seq > st.synced {
                    st.synced = *seq;
                    st.synced_hash = hash.clone();
                }
            }
            st.dirty_since = (st.written > st.synced).then_some(started);
            self.synced_cv.notify_all();
            self.work_cv.notify_one();
            result?;
        }
    }

    /// Rewrites `audit.head` if it lags behind what is on disk.
    fn update_head(&self) {
        let _one_writer = lock(&self.head_lock);
        let head = {
            let st = lock(&self.sync);
            if st.head_seq >= st.synced || st.synced == 0 {
                return;
            }
            Head {
                seq: st.synced,
                hash: st.synced_hash.clone(),
            }
        };
        match self.write_head(&head) {
            Ok(()) => {
                let mut st = lock(&self.sync);
                st.head_seq = st.head_seq.max(head.seq);
            }
            Err(e) => tracing::warn!(error = %e, "cannot update {HEAD}"),
        }
    }

    /// Fsyncs the live file; returns the last record now on disk (seq and
    /// hash). Earlier files were fsynced when rotated.
    fn fsync_now(&self) -> io::Result<(u64, String)> {
        let (file, seq, hash) = {
            let inner = lock(&self.inner);
            (inner.file.clone(), inner.seq, inner.last_hash.clone())
        };
        file.sync_data()?;
        Ok((seq, hash))
    }

    /// `audit.head`, replaced atomically (a crash leaves the old or the new).
    fn write_head(&self, head: &Head) -> io::Result<()> {
        let tmp = self.dir.join(format!("{HEAD}.tmp"));
        let mut f = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&serde_json::to_vec(head).map_err(io::Error::other)?)?;
        drop(f);
        fs::rename(&tmp, self.dir.join(HEAD))
    }

    /// The group committer: fsyncs within `commit_delay` of the first
    /// unsynced record; a final fsync at shutdown.
    fn committer(&self) {
        enum Job {
            Sync(u64),
            Head,
            Stop,
        }
        loop {
            let job = {
                let mut st = lock(&self.sync);
                loop {
                    if st.shutdown {
                        break Job::Stop;
                    }
                    if st.written > st.synced && !st.syncing {
                        let since = *st.dirty_since.get_or_insert_with(Instant::now);
                        let due = since + self.opts.commit_delay;
                        let now = Instant::now();
                        if now >= due {
                            break Job::Sync(st.written);
                        }
                        st = self
                            .work_cv
                            .wait_timeout(st, due - now)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                        continue;
                    }
                    if st.head_seq < st.synced && !st.syncing {
                        break Job::Head;
                    }
                    st = self.work_cv.wait(st).unwrap_or_else(|p| p.into_inner());
                }
            };
            match job {
                Job::Stop => {
                    let target = lock(&self.sync).written;
                    if let Err(e) = self.sync_through(target) {
                        tracing::error!(error = %e, "audit store: final fsync failed");
                    }
                    self.update_head();
                    return;
                }
                Job::Sync(target) => {
                    if let Err(e) = self.sync_through(target) {
                        tracing::error!(error = %e, "audit store: fsync failed");
                        std::thread::sleep(self.opts.commit_delay);
                    }
                }
                Job::Head => self.update_head(),
            }
        }
    }
}

fn names(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .filter_map(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect()
}

/// Offset of the last `\n` before `end`.
fn last_newline(f: &File, end: u64) -> io::Result<Option<u64>> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pos = end;
    while pos > 0 {
        let start = pos.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(pos - start) as usize];
        f.read_exact_at(chunk, start)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(Some(start + i as u64));
        }
        pos = start;
    }
    Ok(None)
}

/// The line ending at `end` (exclusive of its `\n` at `end - 1`).
fn line_before(f: &File, end: u64) -> io::Result<(u64, Vec<u8>)> {
    let start = last_newline(f, end - 1)?.map_or(0, |p| p + 1);
    let mut line = vec![0u8; (end - 1 - start) as usize];
    f.read_exact_at(&mut line, start)?;
    Ok((start, line))
}

/// (seq, line hash) to continue from, given the complete part `..end` of a
/// file: the hash of the last line, and the seq of the last line that has
/// one (a garbled last line is left for `--verify` to report).
fn last_record(f: &File, end: u64) -> io::Result<Option<(u64, String)>> {
    if end == 0 {
        return Ok(None);
    }
    let (mut start, line) = line_before(f, end)?;
    let hash = line_hash(&line);
    let mut candidate = line;
    for _ in 0..1000 {
        if let Some(seq) = seq_of(&candidate) {
            return Ok(Some((seq, hash)));
        }
        if start == 0 {
            break;
        }
        let (s, l) = line_before(f, start)?;
        start = s;
        candidate = l;
    }
    Err(io::Error::other(
        "the audit store's last records have no readable seq; run `wardenctl logs --verify`",
    ))
}

fn seq_of(line: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: u64,
    }
    serde_json::from_slice::<Seq>(line).ok().map(|s| s.seq)
}

/// The seq of the first line of `..end`.
fn first_seq(f: &File, end: u64) -> io::Result<Option<u64>> {
    if end == 0 {
        return Ok(None);
    }
    let mut buf = vec![0u8; end.min(1 << 20) as usize];
    f.read_exact_at(&mut buf, 0)?;
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    Ok(seq_of(line))
}

/// Copies the incomplete tail `from..len` to a `.torn` file (fsynced), then
/// cuts it off the live file.
fn move_torn_aside(
    dir: &Path,
    dirfd: &File,
    file: &File,
    from: u64,
    len: u64,
    after_seq: u64,
) -> io::Result<DaemonTorn> {
    let mut tail = vec![0u8; (len - from) as usize];
    file.read_exact_at(&mut tail, from)?;
    let ms = (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64;
    let mut n = 0;
    let (name, mut out) = loop {
        let name = match n {
            0 => store::torn_name(after_seq + 1, ms),
            _ => store::torn_name(after_seq + 1, ms + n),
        };
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.join(&name))
        {
            Ok(f) => break (name, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 100 => n += 1,
            Err(e) => return Err(e),
        }
    };
    out.write_all(&tail)?;
    out.sync_all()?;
    file.set_len(from)?;
    file.sync_all()?;
    dirfd.sync_all()?;
    Ok(DaemonTorn {
        moved_to: name,
        bytes: tail.len() as u64,
        after_seq,
    })
}

/// Every record of a store file (tests).
pub fn read_all(path: &Path) -> io::Result<Vec<Record>> {
    let text = fs::read_to_string(path)?;
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).map_err(io::Error::other))
        .collect()
}

/// Renames `from` to `to` in `dir`, failing if `to` exists: one
/// `renameat2(RENAME_NOREPLACE)`.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn rename_noreplace(dir: &File, from: &str, to: &str) -> nix::Result<()> {
    nix::fcntl::renameat2(
        dir,
        from,
        dir,
        to,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    )
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
use link_then_unlink as rename_noreplace;

/// Renames `from` to `to` in `dir`, failing if `to` exists, where there is
/// no `renameat2` (macOS, the BSDs): a hard link (which refuses an existing
/// name), then the old name's removal. A crash between the two leaves both
/// names on one file, which [`finish_interrupted_rotation`] resolves at the
/// next open.
#[cfg(any(test, not(any(target_os = "linux", target_os = "android"))))]
fn link_then_unlink(dir: &File, from: &str, to: &str) -> nix::Result<()> {
    use nix::fcntl::AtFlags;
    use nix::unistd::{linkat, unlinkat, UnlinkatFlags};
    linkat(dir, from, dir, to, AtFlags::empty())?;
    unlinkat(dir, from, UnlinkatFlags::NoRemoveDir)
}

/// A rotation cut short between its link and its removal: the live name and
/// the newest rotated name are one file. The rotated name is the one kept.
#[cfg(any(test, not(any(target_os = "linux", target_os = "android"))))]
fn finish_interrupted_rotation(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let live = dir.join(LIVE);
    let Ok(l) = fs::symlink_metadata(&live) else {
        return Ok(());
    };
    if let Some((_, newest)) = store::rotated_files(dir)?.last() {
        let r = fs::symlink_metadata(newest)?;
        if r.ino() == l.ino() && r.dev() == l.dev() {
            fs::remove_file(&live)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_renameat2_a_rotation_links_then_unlinks_and_an_interrupted_one_is_finished() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let dirfd = File::open(dir).unwrap();
        fs::write(dir.join(LIVE), b"live\n").unwrap();
        let rotated = store::rotated_name(1);
        fs::write(dir.join(&rotated), b"old\n").unwrap();
        // An existing name is refused, and nothing moves.
        assert!(link_then_unlink(&dirfd, LIVE, &rotated).is_err());
        assert_eq!(fs::read(dir.join(LIVE)).unwrap(), b"live\n");
        fs::remove_file(dir.join(&rotated)).unwrap();
        link_then_unlink(&dirfd, LIVE, &rotated).unwrap();
        assert!(!dir.join(LIVE).exists());
        assert_eq!(fs::read(dir.join(&rotated)).unwrap(), b"live\n");
        // A crash between the link and the unlink: both names on one file.
        fs::hard_link(dir.join(&rotated), dir.join(LIVE)).unwrap();
        finish_interrupted_rotation(dir).unwrap();
        assert!(!dir.join(LIVE).exists());
        assert_eq!(fs::read(dir.join(&rotated)).unwrap(), b"live\n");
        // A live file of its own is kept.
        fs::write(dir.join(LIVE), b"new\n").unwrap();
        finish_interrupted_rotation(dir).unwrap();
        assert_eq!(fs::read(dir.join(LIVE)).unwrap(), b"new\n");
    }
    use crate::verify::{verify, ProblemKind};
    use crate::Decision;
    use serde_json::json;

    fn rec(n: u64) -> Record {
        Record::new(
            RecordType::Policy,
            "syscall",
            Some("abcdef012345"),
            format!("unshare {n}"),
            Decision::Deny,
            "new namespaces",
        )
        .with_details(json!({ "n": n, "pad": "x".repeat(100) }))
    }

    fn verify_dir(state: &Path) -> crate::verify::Report {
        verify(&store::snapshot(&state.join("audit")).unwrap())
    }

    fn all_records(state: &Path) -> Vec<Record> {
        let snap = store::snapshot(&state.join("audit")).unwrap();
        let mut out = Vec::new();
        for f in &snap.files {
            for l in f.lines().unwrap() {
                let l = l.unwrap();
                assert!(l.complete);
                out.push(serde_json::from_slice(&l.bytes).unwrap());
            }
        }
        out
    }

    #[test]
    fn appends_chain_and_continue_across_restarts() {
        let t = tempfile::tempdir().unwrap();
        let store = AuditStore::open(t.path()).unwrap();
        let first = store.append(rec(1), true).unwrap();
        assert_eq!((first.seq, first.prev.as_str()), (1, GENESIS));
        store.append(rec(2), false).unwrap();
        drop(store);
        let store = AuditStore::open(t.path()).unwrap();
        let third = store.append(rec(3), false).unwrap();
        assert_eq!(third.seq, 3);
        drop(store);
        let all = read_all(&t.path().join("audit").join(LIVE)).unwrap();
        assert_eq!(all.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
        let report = verify_dir(t.path());
        assert!(report.ok, "{report:?}");
        // The head names the last record once it is on disk (drop syncs).
        let head = store::read_head(&t.path().join("audit")).unwrap();
        assert_eq!(head.seq, 3);
    }

    #[test]
    fn non_durable_records_reach_the_disk_without_a_sync_call() {
        let t = tempfile::tempdir().unwrap();
        let store = AuditStore::open(t.path()).unwrap();
        let r = store.append(rec(1), false).unwrap();
        // The committer fsyncs and then updates the head; no timing asserted
        // beyond a generous bound that catches a committer that never runs.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if store::read_head(store.dir()).is_some_and(|h| h.seq == r.seq) {
                break;
            }
            assert!(Instant::now() < deadline, "the committer never fsynced");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(lock(&store.shared.sync).synced >= r.seq);
    }

    #[test]
    fn a_torn_last_line_is_moved_aside_and_the_chain_continues() {
        let t = tempfile::tempdir().unwrap();
        let store = AuditStore::open(t.path()).unwrap();
        for n in 0..3 {
            store.append(rec(n), false).unwrap();
        }
        drop(store);
        let live = t.path().join("audit").join(LIVE);
        let fragment = br#"{"v":2,"ts":"2026-01-01T00:00:00.000Z","seq":4,"prev":"ab"#;
        let mut f = OpenOptions::new().append(true).open(&live).unwrap();
        f.write_all(fragment).unwrap();
        drop(f);
        assert_eq!(
            verify_dir(t.path()).problem.unwrap().kind,
            ProblemKind::Torn
        );
        let store = AuditStore::open(t.path()).unwrap();
        let next = store.append(rec(9), false).unwrap();
        drop(store);
        let all = all_records(t.path());
        assert_eq!(
            all.iter().map(|r| r.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        assert_eq!(
            (all[3].kind, all[3].action.as_str()),
            (RecordType::Daemon, "torn")
        );
        assert_eq!(next.seq, 5);
        let moved = &all[3].resource;
        assert_eq!(
            fs::read(t.path().join("audit").join(moved)).unwrap(),
            fragment
        );
        assert_eq!(all[3].details["bytes"], fragment.len());
        let report = verify_dir(t.path());
        assert!(report.ok, "{report:?}");
        assert_eq!(report.notes.len(), 1, "{report:?}");
    }

    #[test]
    fn a_store_cut_short_while_stopped_stays_evident_after_a_restart() {
        let t = tempfile::tempdir().unwrap();
        let store = AuditStore::open(t.path()).unwrap();
        for n in 0..5 {
            store.append(rec(n), false).unwrap();
        }
        store.sync().unwrap();
        drop(store);
        // Drop the last two lines (at a line boundary) while no daemon runs.
        let live = t.path().join("audit").join(LIVE);
        let text = fs::read(&live).unwrap();
        let cut: Vec<&[u8]> = text.split(|&b| b == b'\n').take(3).collect();
        fs::write(&live, [cut.join(&b'\n'), b"\n".to_vec()].concat()).unwrap();
        let store = AuditStore::open(t.path()).unwrap();
        let next = store.append(rec(9), false).unwrap();
        drop(store);
        // The lost seqs are not reused; a record says what was found.
        assert_eq!(next.seq, 7);
        let all = all_records(t.path());
        let damaged = all.iter().find(|r| r.action == "damaged").unwrap();
        assert_eq!(damaged.seq, 6);
        assert_eq!(damaged.details["what"], "truncated");
        let report = verify_dir(t.path());
        let p = report.problem.unwrap();
        assert_eq!((p.kind, p.seq), (ProblemKind::Missing, Some(4)), "{p:?}");
    }

    #[test]
    fn an_edited_last_record_while_stopped_is_recorded() {
        let t = tempfile::tempdir().unwrap();
        let store = AuditStore::open(t.path()).unwrap();
        for n in 0..3 {
            store.append(rec(n), false).unwrap();
        }
        store.sync().unwrap();
        drop(store);
        let live = t.path().join("audit").join(LIVE);
        let text = fs::read_to_string(&live).unwrap();
        fs::write(&live, text.replace("unshare 2", "unshare 7")).unwrap();
        drop(AuditStore::open(t.path()).unwrap());
        let all = all_records(t.path());
        let damaged = all.iter().find(|r| r.action == "damaged").unwrap();
        assert_eq!(damaged.details["what"], "edited");
        let report = verify_dir(t.path());
        assert!(report.ok, "{report:?}");
        assert!(
            report.notes.iter().any(|n| n.contains("damaged")),
            "{report:?}"
        );
    }

    #[test]
    fn a_torn_first_line_of_a_fresh_live_file_continues_from_the_rotated_file() {
        let t = tempfile::tempdir().unwrap();
        let opts = Options {
            max_bytes: 1000,
            keep: 100,
            ..Options::default()
        };
        let store = AuditStore::open_with(t.path(), opts.clone()).unwrap();
        for n in 0..20 {
            store.append(rec(n), false).unwrap();
        }
        drop(store);
        // Crash right after a rotation: the live file holds only a fragment.
        let dir = t.path().join("audit");
        let rotated = store::rotated_files(&dir).unwrap();
        let last_rotated = rotated.last().unwrap().1.clone();
        fs::remove_file(dir.join(LIVE)).unwrap();
        fs::write(dir.join(LIVE), b"{\"v\":2,\"ts\"").unwrap();
        let recs_before: Vec<Record> = read_all(&last_rotated).unwrap();
        // The head can only name what was on disk: the rotated file's end.
        let text = fs::read(&last_rotated).unwrap();
        let last_line = text[..text.len() - 1]
            .rsplit(|&b| b == b'\n')
            .next()
            .unwrap();
        let head = Head {
            seq: recs_before.last().unwrap().seq,
            hash: line_hash(last_line),
        };
        fs::write(dir.join(HEAD), serde_json::to_vec(&head).unwrap()).unwrap();
        let store = AuditStore::open_with(t.path(), opts).unwrap();
        let r = store.append(rec(99), false).unwrap();
        assert_eq!(r.seq, recs_before.last().unwrap().seq + 2);
        drop(store);
        let report = verify_dir(t.path());
        assert!(report.ok, "{report:?}");
    }

    #[test]
    fn rotation_and_retention_keep_the_chain_verifiable() {
        let t = tempfile::tempdir().unwrap();
        let opts = Options {
            max_bytes: 2000,
            keep: 3,
            ..Options::default()
        };
        let store = AuditStore::open_with(t.path(), opts.clone()).unwrap();
        for n in 0..200 {
            store.append(rec(n), n % 17 == 0).unwrap();
        }
        drop(store);
        let dir = t.path().join("audit");
        let rotated = store::rotated_files(&dir).unwrap();
        assert_eq!(rotated.len(), 3, "{rotated:?}");
        for (_, p) in &rotated {
            assert!(fs::metadata(p).unwrap().len() <= 2000);
        }
        assert!(fs::metadata(dir.join(LIVE)).unwrap().len() <= 2000);
        let all = all_records(t.path());
        // Whole old files went; what is left is contiguous.
        assert!(all[0].seq > 1);
        for w in all.windows(2) {
            assert_eq!(w[1].seq, w[0].seq + 1);
        }
        let rotates: Vec<&Record> = all.iter().filter(|r| r.action == "rotate").collect();
        assert!(!rotates.is_empty());
        let newest = rotates.last().unwrap();
        assert_eq!(newest.details["oldest_seq"], all[0].seq);
        let report = verify_dir(t.path());
        assert!(report.ok, "{report:?}");
        assert!(
            report.notes.iter().any(|n| n.contains("retention")),
            "{report:?}"
        );
        // Deleting the oldest remaining file is not retention.
        fs::remove_file(&rotated[0].1).unwrap();
        let report = verify_dir(t.path());
        assert_eq!(report.problem.unwrap().kind, ProblemKind::Missing);
    }

    /// A flood of records (one session's, or anyone's) cannot push a live
    /// session's `session.start` out of retention; once it has exited, the
    /// files go as usual.
    #[test]
    fn retention_never_deletes_a_live_sessions_start() {
        let t = tempfile::tempdir().unwrap();
        let opts = Options {
            max_bytes: 2000,
            keep: 2,
            ..Options::default()
        };
        let store = AuditStore::open_with(t.path(), opts).unwrap();
        let session = |action: &str| {
            Record::new(
                RecordType::Session,
                action,
                Some("live00000001"),
                "/bin/server",
                Decision::Allow,
                "",
            )
        };
        let start = store.append(session("start"), true).unwrap();
        for n in 0..300 {
            store.append(rec(n), false).unwrap();
        }
        let all = all_records(t.path());
        assert!(
            all.iter().any(|r| r.seq == start.seq),
            "the start record is gone"
        );
        let dir = t.path().join("audit");
        assert!(store::rotated_files(&dir).unwrap().len() > 2);
        let rotates: Vec<&Record> = all.iter().filter(|r| r.action == "rotate").collect();
        assert!(
            rotates.last().unwrap().details["kept_for_live_sessions"]
                .as_u64()
                .unwrap()
                > 0
        );
        // The session ends: the next rotations apply `keep` again.
        store.append(session("exit"), true).unwrap();
        for n in 0..60 {
            store.append(rec(n), false).unwrap();
        }
        drop(store);
        assert_eq!(store::rotated_files(&dir).unwrap().len(), 2);
        let all = all_records(t.path());
        assert!(all.iter().all(|r| r.seq != start.seq));
        assert!(verify_dir(t.path()).ok);
    }

    /// Lowering `keep` when the live file is full: the retention record is
    /// not preceded by a rotation that deletes on its own, so its
    /// `oldest_seq` is where the store starts (a full `--verify` passes).
    #[test]
    fn lowering_keep_with_a_full_live_file_stays_verifiable() {
        let t = tempfile::tempdir().unwrap();
        for fill in 0..12 {
            let t = t.path().join(format!("f{fill}"));
            let mut opts = Options {
                max_bytes: 1500,
                keep: 3,
                ..Options::default()
            };
            let store = AuditStore::open_with(&t, opts.clone()).unwrap();
            // Many files, then the live file filled to various degrees.
            for n in 0..(40 + fill) {
                store.append(rec(n), false).unwrap();
            }
            drop(store);
            opts.keep = 1;
            drop(AuditStore::open_with(&t, opts).unwrap());
            let report = verify_dir(&t);
            assert!(report.ok, "fill {fill}: {report:?}");
        }
    }

    #[test]
    fn lowering_keep_deletes_at_open_with_a_record() {
        let t = tempfile::tempdir().unwrap();
        let mut opts = Options {
            max_bytes: 1500,
            keep: 10,
            ..Options::default()
        };
        let store = AuditStore::open_with(t.path(), opts.clone()).unwrap();
        for n in 0..100 {
            store.append(rec(n), false).unwrap();
        }
        drop(store);
        let dir = t.path().join("audit");
        assert!(store::rotated_files(&dir).unwrap().len() > 2);
        opts.keep = 1;
        drop(AuditStore::open_with(t.path(), opts).unwrap());
        assert_eq!(store::rotated_files(&dir).unwrap().len(), 1);
        let all = all_records(t.path());
        assert_eq!(all.last().unwrap().action, "retention");
        let report = verify_dir(t.path());
        assert!(report.ok, "{report:?}");
    }

    #[test]
    fn concurrent_appends_are_whole_lines_in_seq_order() {
        let t = tempfile::tempdir().unwrap();
        let store = Arc::new(
            AuditStore::open_with(
                t.path(),
                Options {
                    max_bytes: 20_000,
                    keep: 100,
                    ..Options::default()
                },
            )
            .unwrap(),
        );
        let mut follower = store.subscribe();
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let s = store.clone();
                std::thread::spawn(move || {
                    for n in 0..150 {
                        s.append(rec(i * 1000 + n), n % 10 == 0).unwrap();
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let last = store.last_seq();
        drop(store);
        let all = all_records(t.path());
        assert_eq!(all.len() as u64, last);
        let report = verify_dir(t.path());
        assert!(report.ok, "{report:?}");
        // Followers saw every record once, in order, with the stored bytes.
        let mut seen = Vec::new();
        while let Ok(l) = follower.try_recv() {
            assert_eq!(l.seq, l.record.seq);
            assert_eq!(line_hash(l.line.as_bytes()).len(), 64);
            seen.push(l.seq);
        }
        assert_eq!(seen, (1..=last).collect::<Vec<_>>());
    }
}
