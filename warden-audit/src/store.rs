//! The audit store on disk (`<state-dir>/audit/`), as the daemon writes it and
//! readers see it:
//!
//! - `audit.jsonl`: the live file, appended to by the daemon;
//! - `audit.<first-seq>.jsonl`: rotated files, named by the `seq` of their
//!   first record (12 digits, zero-padded, so name order is chain order);
//! - `audit.head`: `{"seq":N,"hash":"…"}`, the last record known to be on
//!   disk (rewritten after each fsync), so a store cut short at a line
//!   boundary is detected;
//! - `audit.<seq>.<unix-ms>.torn`: the incomplete last line a crash left,
//!   moved aside when the daemon next opened the store.
//!
//! Readers take a [`Snapshot`]: every file opened at one instant, so a
//! rotation or a retention deletion while reading neither hides nor repeats
//! records.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The live file.
pub const LIVE: &str = "audit.jsonl";
/// The head file.
pub const HEAD: &str = "audit.head";

/// `audit.<first-seq>.jsonl`.
pub fn rotated_name(first_seq: u64) -> String {
    format!("audit.{first_seq:012}.jsonl")
}

/// The first seq named by a rotated file name.
pub fn parse_rotated(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("audit.")?.strip_suffix(".jsonl")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `audit.<seq>.<unix-ms>.torn`: `seq` is the one the torn record would have had.
pub fn torn_name(seq: u64, unix_ms: i64) -> String {
    format!("audit.{seq:012}.{unix_ms}.torn")
}

/// `audit.head`: the last record the daemon knows to be on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub seq: u64,
    /// `line_hash` of that record's line.
    pub hash: String,
}

/// Reads `audit.head`; `None` when absent or unreadable as a head.
pub fn read_head(dir: &Path) -> Option<Head> {
    let text = fs::read(dir.join(HEAD)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Rotated files in the directory, oldest first: (first seq, path).
pub fn rotated_files(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(seq) = entry.file_name().to_str().and_then(parse_rotated) {
            out.push((seq, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// `*.torn` files in the directory, by name.
pub fn torn_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "torn"))
        .collect();
    out.sort();
    Ok(out)
}

/// One open store file.
#[derive(Debug)]
pub struct StoreFile {
    /// File name (`audit.jsonl`, `audit.000000000042.jsonl`).
    pub name: String,
    /// The first seq its name promises; `None` for the live file.
    pub named_seq: Option<u64>,
    pub file: File,
}

impl StoreFile {
    pub fn is_live(&self) -> bool {
        self.named_seq.is_none()
    }

    /// Its lines in order (see [`Lines`]).
    pub fn lines(&self) -> io::Result<Lines> {
        Lines::new(self.file.try_clone()?, self.is_live())
    }
}

/// Every file of the store, opened at one instant.
#[derive(Debug)]
pub struct Snapshot {
    pub dir: PathBuf,
    /// The head as read *before* the files were opened: every record it
    /// names was on disk then.
    pub head: Option<Head>,
    /// Rotated files oldest first, then the live file (when present).
    pub files: Vec<StoreFile>,
    /// Torn-write files moved aside (names).
    pub torn: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("no audit store at {0}")]
    Missing(PathBuf),
    #[error("cannot read the audit store {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("the audit store {0} kept changing while being opened (rotating very fast?)")]
    Unstable(PathBuf),
}

/// Opens every file of the store in `dir`. A rotation or a retention
/// deletion while files are being opened is detected (the live file's inode
/// changed, a listed file vanished) and the snapshot is retaken.
pub fn snapshot(dir: &Path) -> Result<Snapshot, SnapshotError> {
    let io_err = |source| SnapshotError::Io {
        path: dir.to_path_buf(),
        source,
    };
    if !dir.is_dir() {
        return Err(SnapshotError::Missing(dir.to_path_buf()));
    }
    for _ in 0..20 {
        let head = read_head(dir);
        let live_path = dir.join(LIVE);
        let live = match File::open(&live_path) {
            Ok(f) => Some(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(e)),
        };
        let live_id = match &live {
            Some(f) => Some(file_id(&f.metadata().map_err(io_err)?)),
            None => None,
        };
        let mut files = Vec::new();
        let mut vanished = false;
        for (seq, path) in rotated_files(dir).map_err(io_err)? {
            match File::open(&path) {
                Ok(file) => {
                    let id = file_id(&file.metadata().map_err(io_err)?);
                    if Some(id) == live_id {
                        // Rotated after we opened the live file: it changed.
                        vanished = true;
                        break;
                    }
                    files.push(StoreFile {
                        name: file_name(&path),
                        named_seq: Some(seq),
                        file,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    vanished = true;
                    break;
                }
                Err(e) => return Err(io_err(e)),
            }
        }
        let now_id = match fs::metadata(&live_path) {
            Ok(m) => Some(file_id(&m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(e)),
        };
        if vanished || now_id != live_id {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        if let Some(file) = live {
            files.push(StoreFile {
                name: LIVE.to_string(),
                named_seq: None,
                file,
            });
        }
        let torn = torn_files(dir)
            .map_err(io_err)?
            .iter()
            .map(|p| file_name(p))
            .collect();
        return Ok(Snapshot {
            dir: dir.to_path_buf(),
            head,
            files,
            torn,
        });
    }
    Err(SnapshotError::Unstable(dir.to_path_buf()))
}

fn file_id(m: &fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// One line of a store file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// 1-based.
    pub number: u64,
    /// The bytes, without the terminating `\n`.
    pub bytes: Vec<u8>,
    /// False for a last line without `\n` (a torn or in-progress write).
    pub complete: bool,
}

/// The lines of a store file. At the end of the live file, an incomplete
/// line is given a moment to complete (the daemon may be in the middle of
/// writing it) before it is returned as incomplete.
pub struct Lines {
    reader: BufReader<File>,
    number: u64,
    live: bool,
    done: bool,
}

impl Lines {
    fn new(file: File, live: bool) -> io::Result<Lines> {
        use std::io::Seek;
        let mut file = file;
        file.seek(io::SeekFrom::Start(0))?;
        Ok(Lines {
            reader: BufReader::with_capacity(256 * 1024, file),
            number: 0,
            live,
            done: false,
        })
    }
}

impl Iterator for Lines {
    type Item = io::Result<Line>;

    fn next(&mut self) -> Option<io::Result<Line>> {
        if self.done {
            return None;
        }
        let mut bytes = Vec::new();
        if let Err(e) = self.reader.read_until(b'\n', &mut bytes) {
            self.done = true;
            return Some(Err(e));
        }
        if bytes.is_empty() {
            self.done = true;
            return None;
        }
        let mut retries = if self.live { 5 } else { 0 };
        while bytes.last() != Some(&b'\n') && retries > 0 {
            std::thread::sleep(Duration::from_millis(40));
            retries -= 1;
            if let Err(e) = self.reader.read_until(b'\n', &mut bytes) {
                self.done = true;
                return Some(Err(e));
            }
        }
        self.number += 1;
        let complete = bytes.last() == Some(&b'\n');
        if complete {
            bytes.pop();
        } else {
            self.done = true;
        }
        Some(Ok(Line {
            number: self.number,
            bytes,
            complete,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(rotated_name(42), "audit.000000000042.jsonl");
        assert_eq!(parse_rotated("audit.000000000042.jsonl"), Some(42));
        assert_eq!(
            parse_rotated("audit.1234567890123.jsonl"),
            Some(1234567890123)
        );
        for bad in ["audit.jsonl", "audit..jsonl", "audit.x1.jsonl", "a.1.jsonl"] {
            assert_eq!(parse_rotated(bad), None, "{bad}");
        }
        assert_eq!(
            torn_name(7, 1700000000000),
            "audit.000000000007.1700000000000.torn"
        );
        // Name order is seq order, and rotated files sort before the live one.
        let mut names = vec![LIVE.to_string(), rotated_name(100), rotated_name(9)];
        names.sort();
        assert_eq!(
            names,
            [rotated_name(9), rotated_name(100), LIVE.to_string()]
        );
    }

    #[test]
    fn snapshot_orders_files_and_lines_report_incomplete_tails() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join(rotated_name(3)), "c\nd\n").unwrap();
        fs::write(t.path().join(rotated_name(1)), "a\nb\n").unwrap();
        fs::write(t.path().join(LIVE), "e\nf").unwrap();
        fs::write(t.path().join("audit.000000000007.1.torn"), "x").unwrap();
        fs::write(t.path().join("other.txt"), "x").unwrap();
        let s = snapshot(t.path()).unwrap();
        let names: Vec<_> = s.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, [rotated_name(1), rotated_name(3), LIVE.to_string()]);
        assert_eq!(s.torn, ["audit.000000000007.1.torn"]);
        let lines: Vec<Line> = s.files[2].lines().unwrap().map(Result::unwrap).collect();
        assert_eq!(
            lines,
            [
                Line {
                    number: 1,
                    bytes: b"e".to_vec(),
                    complete: true
                },
                Line {
                    number: 2,
                    bytes: b"f".to_vec(),
                    complete: false
                }
            ]
        );
        assert!(snapshot(&t.path().join("nope")).is_err());
    }
}
