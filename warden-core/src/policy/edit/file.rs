//! [`super::add_grant`] applied to the policy file on disk, atomically and
//! without clobbering what the user changed meanwhile.
//!
//! The file is read again when the grant is added. If it is still the text the
//! session started with, the grant is added to it; if the user changed it and
//! it still parses, the grant is added to the user's new text (`merged`); if
//! it no longer parses, it is left alone and the error says why. The new text
//! goes to a temporary file beside it (created exclusively, with the
//! original's mode), is synced, and replaces the file by `rename(2)` after one
//! last check that the file is still what was read; then the directory is
//! synced. A symlink, or anything but a regular file, is refused: the policy
//! is edited only where it lies. Whatever fails, the temporary file is
//! removed.
//!
//! What `rename(2)` cannot keep: hard links to the old file, its owner when
//! another user edits it, and extended attributes. A change made between the
//! last check and the rename itself (a window of one system call) is lost.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{add_grant_in, EditError, Grant};
use crate::policy::MAX_POLICY_BYTES;

/// What [`add_grant_to_file`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEdit {
    /// The file's text now: as written, or as found when the grant was
    /// already there.
    pub text: String,
    /// The list already held the entry: the file was not written.
    pub already_present: bool,
    /// The file had changed since the session started (and still parsed):
    /// the grant was added to its new text, the user's changes kept.
    pub merged: bool,
}

/// Adds `grant` to the policy file at `path`, which held `seen_at_start` when
/// the session started; see the module's documentation.
pub fn add_grant_to_file(
    path: &Path,
    seen_at_start: &[u8],
    grant: &Grant,
    note: &str,
) -> Result<FileEdit, EditError> {
    edit_file(
        path,
        seen_at_start,
        &[(grant.clone(), note.to_owned())],
        &mut || {},
    )
}

/// [`add_grant_to_file`] for several grants, each with its note, written in
/// one replacement of the file (all of them or none). `seen` is the text the
/// grants were chosen from (what a diff was shown of).
pub fn add_grants_to_file(
    path: &Path,
    seen: &[u8],
    grants: &[(Grant, String)],
) -> Result<FileEdit, EditError> {
    edit_file(path, seen, grants, &mut || {})
}

/// [`add_grant_to_file`], calling `meanwhile` after the temporary file is
/// written and before the last check (the tests change the file there).
fn edit_file(
    path: &Path,
    seen_at_start: &[u8],
    grants: &[(Grant, String)],
    meanwhile: &mut dyn FnMut(),
) -> Result<FileEdit, EditError> {
    let found = read_regular(path)?;
    let text = std::str::from_utf8(&found.bytes).map_err(|_| EditError::NotUtf8 {
        path: path.to_path_buf(),
    })?;
    let merged = found.bytes != seen_at_start;
    if merged {
        if let Err(problem) = crate::policy::parse(text, Some(path)) {
            return Err(EditError::ChangedInvalid {
                path: path.to_path_buf(),
                problem,
            });
        }
    }
    let mut now = text.to_owned();
    let mut all_present = true;
    for (grant, note) in grants {
        let edited = add_grant_in(&now, Some(path), grant, note)?;
        all_present &= edited.already_present;
        now = edited.text;
    }
    if !all_present {
        replace(path, &found, now.as_bytes(), meanwhile)?;
    }
    Ok(FileEdit {
        text: now,
        already_present: all_present,
        merged,
    })
}

/// A regular file as read, and what it was when read.
struct Found {
    bytes: Vec<u8>,
    meta: fs::Metadata,
}

impl Found {
    /// The same file, unchanged since: same inode, size and modification time.
    fn same(&self, other: &Found) -> bool {
        let id = |m: &fs::Metadata| (m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec());
        id(&self.meta) == id(&other.meta) && self.bytes == other.bytes
    }
}

/// Reads `path`, which must be a regular file and not a symlink.
fn read_regular(path: &Path) -> Result<Found, EditError> {
    let read_err = |source| EditError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = fs::symlink_metadata(path).map_err(read_err)?;
    if meta.file_type().is_symlink() {
        return Err(EditError::Symlink {
            path: path.to_path_buf(),
        });
    }
    if !meta.is_file() {
        return Err(EditError::NotRegular {
            path: path.to_path_buf(),
        });
    }
    let file = File::open(path).map_err(read_err)?;
    let opened = file.metadata().map_err(read_err)?;
    // Replaced (by a symlink, say) between the look and the open.
    if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
        return Err(EditError::ChangedMeanwhile {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_POLICY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_POLICY_BYTES {
        return Err(EditError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(Found {
        bytes,
        meta: opened,
    })
}

/// Removes the temporary file unless it was renamed into place.
struct Temp {
    path: PathBuf,
    armed: bool,
}

impl Drop for Temp {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Tells the temporary files of concurrent edits in one process apart.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new file beside `path`, created exclusively, readable only by its owner
/// until its mode is set.
fn create_temp(dir: &Path, path: &Path) -> Result<(Temp, File), EditError> {
    let name = path
        .file_name()
        .map_or_else(|| "policy".into(), |n| n.to_string_lossy().into_owned());
    let mut last = None;
    for _ in 0..16 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tmp = dir.join(format!(".{name}.{}-{n}-{nanos}.tmp", std::process::id()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
        {
            Ok(file) => {
                let temp = Temp {
                    path: tmp,
                    armed: true,
                };
                return Ok((temp, file));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(source) => {
                return Err(write_err(
                    path,
                    format!("cannot create a file in {}", dir.display()),
                    source,
                ))
            }
        }
    }
    let source = last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists));
    Err(write_err(
        path,
        format!("cannot create a file in {}", dir.display()),
        source,
    ))
}

fn write_err(path: &Path, what: String, source: io::Error) -> EditError {
    EditError::Write {
        path: path.to_path_buf(),
        what,
        source,
    }
}

/// Replaces the file `found` was read from with `new`, atomically.
fn replace(
    path: &Path,
    found: &Found,
    new: &[u8],
    meanwhile: &mut dyn FnMut(),
) -> Result<(), EditError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // A file its owner made read-only is not replaced behind their back
    // (rename(2) needs only the directory to be writable).
    OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| write_err(path, "the file is not writable".into(), e))?;
    let (temp, mut file) = create_temp(dir, path)?;
    let step = |what: &str| {
        let what = format!("{what} {}", temp.path.display());
        move |e| write_err(path, what, e)
    };
    let mode = found.meta.permissions().mode() & 0o7777;
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(step("cannot set the mode of"))?;
    file.write_all(new).map_err(step("cannot write"))?;
    file.sync_all().map_err(step("cannot sync"))?;
    drop(file);
    meanwhile();
    let now = read_regular(path)?;
    if !found.same(&now) {
        return Err(EditError::ChangedMeanwhile {
            path: path.to_path_buf(),
        });
    }
    fs::rename(&temp.path, path).map_err(|e| {
        let what = format!("cannot rename {} over it", temp.path.display());
        write_err(path, what, e)
    })?;
    let mut temp = temp;
    temp.armed = false;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| EditError::SyncDir {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests;
