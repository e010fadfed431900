//! Held file opens (approvals, docs/approvals.md): an `open` the sandbox
//! would deny is kept waiting in the kernel while a person is asked, and, if
//! they allow it, completed by the daemon.
//!
//! # Mechanism
//!
//! On the notifier thread, with a [`FileHolder`] set for the sandbox, an
//! observed `open`/`openat`/`openat2`/`creat` is judged at once by the
//! sandbox's layout (the same judgement the file audit makes afterwards).
//! When it would be denied because the path is outside the sandbox's view
//! (`ENOENT`: hidden host path) or on a read-only mount that is not the
//! runtime (`EROFS`: a read grant, the sandbox's skeleton), the call is not
//! answered: it becomes a [`HeldOpen`] handed to the holder, and the thread
//! goes on with the next call (the listener is not blocked). The holder asks;
//! then either
//!
//! - [`HeldOpen::allow`]: the daemon opens **the host path the call named**
//!   itself, with the call's flags (and the caller's umask for a new file),
//!   refusing symlinks anywhere on the way (`RESOLVE_NO_SYMLINKS`), and hands
//!   the open file to the caller as the call's result
//!   (`SECCOMP_IOCTL_NOTIF_ADDFD` with `SECCOMP_ADDFD_FLAG_SEND`); or
//! - [`HeldOpen::refuse`] (also what dropping it does): the call continues
//!   and the kernel denies it exactly as it would have without approvals.
//!
//! A directory opened for reading (a listing) is held the same way; allowed,
//! the caller gets not the host directory but a *snapshot* of its listing
//! ([`crate::launch::snapshot_dir`]): a detached read-only tmpfs with the
//! directory's entries, their types, modes, sizes and times, and no content.
//! A host directory's fd would give more than a listing (lookups below it,
//! sockets in it, `..` out of the sandbox's root).
//!
//! # Invariants
//!
//! - Only regular files and directory listings: `O_PATH`, `O_TMPFILE`,
//!   directories opened for writing and anything but files and directories
//!   are never held, nor anything under `/proc`, the runtime, the program,
//!   devices or a protected path.
//! - What is opened is the path the person was shown, read before asking; a
//!   server that rewrites its argument meanwhile changes nothing.
//! - Landlock stays on: the handed-over file was opened by the daemon, so
//!   the server can use that one file and nothing else outside its grants.

use super::capture::{Captured, Named};
use super::classify::absolute;
use super::layout::{decide, AccessVerdict, Area, Facts, Layout};

#[cfg(test)]
mod tests {
    #[test]
    fn what_is_worth_asking() {
        use super::worth_asking as w;
        assert!(w(b"/home/ana/notes/todo.txt"));
        assert!(w(b"/srv/data/report.csv"));
        assert!(w(b"/tmp/work/secret.txt"));
        assert!(w(b"/etcetera/x"));
        assert!(!w(b"/etc/locale.alias"));
        assert!(!w(b"/usr/share/zoneinfo/UTC"));
        assert!(!w(b"/home/ana/.npmrc"));
        assert!(!w(b"/home/ana/.config/git/config"));
        assert!(!w(b"/home/ana/src/p/.git/HEAD"));
    }
}
use super::resolve::{normalize, resolve};
use crate::confine::seccomp::FileOp;
use crate::sys;
use nix::errno::Errno;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a held open does to its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldOp {
    Read,
    /// Opens an existing file for writing (or truncation).
    Write,
    /// Creates a file the host does not have.
    Create,
    /// Lists a directory (opens it for reading).
    List,
}

impl HeldOp {
    pub fn as_str(self) -> &'static str {
        match self {
            HeldOp::Read => "read",
            HeldOp::Write => "write",
            HeldOp::Create => "create",
            HeldOp::List => "list",
        }
    }
}

/// Who decides about held opens; called on the notifier thread, so it must
/// not block: take the call and answer it later (from any thread).
pub trait FileHolder: Send + Sync {
    fn hold(&self, call: HeldOpen);
}

/// The holder of a sandbox's notifier, with the init role's binary (what
/// makes listing snapshots).
pub(crate) struct Holder {
    pub(crate) holder: Arc<dyn FileHolder>,
    pub(crate) exe: Arc<Path>,
    /// Set when the first snapshot is handed over (see `capture`).
    pub(crate) snapshots: Arc<std::sync::atomic::AtomicBool>,
}

/// One open waiting in the kernel for an answer.
pub struct HeldOpen {
    listener: Arc<OwnedFd>,
    id: u64,
    /// The caller, as a pid of the daemon's pid namespace.
    pub pid: u32,
    /// The host path the call names: absolute, normalised.
    pub path: PathBuf,
    pub op: HeldOp,
    flags: i32,
    mode: u32,
    exe: Arc<Path>,
    snapshots: Arc<std::sync::atomic::AtomicBool>,
    answered: bool,
}

impl std::fmt::Debug for HeldOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldOpen")
            .field("pid", &self.pid)
            .field("path", &self.path)
            .field("op", &self.op)
            .finish_non_exhaustive()
    }
}

impl HeldOpen {
    /// Opens the host path as the call asked and hands the file over as the
    /// call's result; an open that fails answers the call with its errno.
    /// `Err` only when the caller could not be answered (it is gone).
    pub fn allow(mut self) -> Result<(), Errno> {
        self.answered = true;
        let fd = self.listener.as_fd();
        let opened = if self.op == HeldOp::List {
            // A snapshot of the listing, never the host directory.
            let snap = crate::launch::snapshot_dir(&self.exe, &self.path)
                .map(|s| s.dir)
                .map_err(|e| snapshot_errno(&e));
            if snap.is_ok() {
                // Before the server can use it.
                self.snapshots
                    .store(true, std::sync::atomic::Ordering::Release);
            }
            snap
        } else {
            let umask = umask_of(self.pid).unwrap_or(0o022);
            open_host(&self.path, self.flags, self.mode & !umask)
        };
        // The pid named the caller while it waits: check before answering.
        if !sys::seccomp::id_valid(fd, self.id) {
            return Err(Errno::ESRCH);
        }
        match opened {
            Ok(file) => super::guard::send_fd(fd, self.id, &file, self.flags),
            Err(e) => {
                super::notify::respond(fd, self.id, e as i32);
                Ok(())
            }
        }
    }

    /// Lets the call run: the kernel denies it as without approvals.
    pub fn refuse(mut self) {
        self.answered = true;
        super::notify::respond_continue(self.listener.as_fd(), self.id);
    }
}

impl Drop for HeldOpen {
    fn drop(&mut self) {
        if !self.answered {
            super::notify::respond_continue(self.listener.as_fd(), self.id);
        }
    }
}

/// The errno a failed snapshot answers the call with: the OS error where
/// there is one (`ENOENT`: gone since, `EACCES`...), else `EIO`.
fn snapshot_errno(e: &crate::SandboxError) -> Errno {
    use crate::SandboxError as E;
    match e {
        E::Setup { errno: Some(n), .. } => Errno::from_raw(*n),
        E::UserNamespaceUnavailable { errno, .. } => Errno::from_raw(*errno),
        _ => Errno::EIO,
    }
}

/// `Umask:` of `/proc/<pid>/status`.
fn umask_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(line.trim(), 8).ok()
}

/// The open the daemon makes for an allowed call: the call's access mode,
/// `O_CREAT`/`O_EXCL`/`O_TRUNC`/`O_APPEND`/`O_NONBLOCK`/`O_SYNC`-like flags,
/// never following a symlink, never a directory, never a controlling tty.
fn open_host(path: &std::path::Path, flags: i32, mode: u32) -> Result<OwnedFd, Errno> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let keep = libc::O_ACCMODE
        | libc::O_CREAT
        | libc::O_EXCL
        | libc::O_TRUNC
        | libc::O_APPEND
        | libc::O_NONBLOCK
        | libc::O_DSYNC
        | libc::O_SYNC
        | libc::O_NOATIME
        | libc::O_LARGEFILE;
    let f = OFlag::from_bits_truncate(flags & keep)
        | OFlag::O_CLOEXEC
        | OFlag::O_NOCTTY
        | OFlag::O_NOFOLLOW;
    let how = OpenHow::new()
        .flags(f)
        .mode(nix::sys::stat::Mode::from_bits_truncate(mode & 0o7777))
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(nix::fcntl::AT_FDCWD, path, how)?;
    let st = nix::sys::stat::fstat(&fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(Errno::EACCES);
    }
    Ok(fd)
}

/// The held open `c` would be, if the sandbox denies it in a way a person
/// may answer (see the module doc): its host path and operation.
pub(crate) fn holdable(c: &Captured, layout: &Layout) -> Option<(PathBuf, HeldOp)> {
    let w = c.watched;
    if w.op != FileOp::Open || c.unreadable.is_some() || c.guard.is_some() {
        return None;
    }
    let f = c.flags as i32;
    if f & libc::O_PATH != 0 || f & libc::O_TMPFILE == libc::O_TMPFILE {
        return None;
    }
    let wants_dir = f & libc::O_DIRECTORY != 0;
    let root = c.root.as_deref()?;
    let n: &Named = c.paths[0].as_ref()?;
    let abs = absolute(n)?;
    if n.name.ends_with(b"/") {
        return None;
    }
    // The cheap test first: most opens (a runtime's libraries, its config
    // probes) are of system paths or hidden names and never held, so they
    // cost no lookup on the notifier thread.
    if !worth_asking(&normalize(&abs)) {
        return None;
    }
    let follow = f & libc::O_NOFOLLOW == 0;
    let res = resolve(root, &abs, follow);
    if res.proc || res.looped || res.is_dir {
        return None;
    }
    let mount = res
        .mount_id
        .and_then(|id| root.mount(id))
        .or_else(|| root.mount_of_path(&res.path))?;
    let area = layout.area(mount);
    let writes = f & (libc::O_ACCMODE | libc::O_TRUNC) != 0;
    let creates = f & libc::O_CREAT != 0;
    let access = match (res.exists, creates, writes) {
        (false, true, _) => super::layout::Access::Create,
        (_, _, true) => super::layout::Access::Modify,
        _ => super::layout::Access::Read,
    };
    let facts = Facts {
        access,
        res: &res,
        area: Some(area.clone()),
        read_only: mount.read_only,
        noexec: mount.noexec,
        mount_point: res.exists && root.mounts().iter().any(|m| m.point == res.path),
    };
    let host_has = |p: &[u8]| super::classify::host_has(p);
    let outcome = decide(&facts, &mut { host_has });
    if outcome.verdict != AccessVerdict::Deny {
        return None;
    }
    let approvable_area = matches!(area, Area::Skeleton | Area::Private(_) | Area::ReadGrant);
    if !approvable_area || !matches!(outcome.errno, Some(libc::ENOENT | libc::EROFS)) {
        return None;
    }
    let normal = normalize(&res.path);
    if !worth_asking(&normal) {
        return None;
    }
    use std::os::unix::ffi::OsStringExt;
    let path = PathBuf::from(std::ffi::OsString::from_vec(normal));
    // What the host has there decides between write and create, and
    // whether a directory is listed; anything else is never held.
    let op = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_dir() => {
            if writes || creates {
                return None;
            }
            HeldOp::List
        }
        Ok(_) if wants_dir => return None,
        Ok(m) if m.file_type().is_file() => {
            if writes {
                HeldOp::Write
            } else {
                HeldOp::Read
            }
        }
        Ok(_) => return None,
        Err(_) if creates => HeldOp::Create,
        Err(_) => return None,
    };
    Some((path, op))
}

/// System directories, whose files a runtime probes on its own.
const SYSTEM: &[&[u8]] = &[
    b"/etc", b"/usr", b"/lib", b"/lib32", b"/lib64", b"/libx32", b"/bin", b"/sbin", b"/var",
    b"/run", b"/sys", b"/proc", b"/dev", b"/boot", b"/snap", b"/nix",
];

/// Whether a denied open of `path` is worth a person's time: not a system
/// file and no hidden name (a dot file or directory) on the way. Runtimes
/// and libraries probe dozens of those at start-up (`/etc/locale.alias`,
/// `~/.npmrc`, `~/.config/...`); holding each for a person would stall every
/// server. They stay denied at once, as without approvals; grant them in
/// the policy.
pub(crate) fn worth_asking(path: &[u8]) -> bool {
    let system = SYSTEM
        .iter()
        .any(|s| path == *s || (path.starts_with(s) && path.get(s.len()) == Some(&b'/')));
    let hidden = path.split(|&b| b == b'/').any(|c| c.first() == Some(&b'.'));
    !system && !hidden
}

/// Makes the held open of notification `n` (whose capture is `c`).
pub(crate) fn held(
    listener: &Arc<OwnedFd>,
    n: &libc::seccomp_notif,
    path: PathBuf,
    op: HeldOp,
    c: &Captured,
    holder: &Holder,
) -> HeldOpen {
    let mode = match c.watched.name {
        // open(path, flags, mode), openat(dirfd, path, flags, mode), creat(path, mode)
        "SYS_open" => n.data.args[2] as u32,
        "SYS_openat" => n.data.args[3] as u32,
        "SYS_creat" => n.data.args[1] as u32,
        // openat2's mode is in its open_how, after the flags.
        _ => super::memory::read_u64(n.pid, n.data.args[2].wrapping_add(8))
            .map_or(0o600, |m| m as u32),
    };
    HeldOpen {
        listener: listener.clone(),
        id: n.id,
        pid: n.pid,
        path,
        op,
        flags: c.flags as i32,
        mode,
        exe: holder.exe.clone(),
        snapshots: holder.snapshots.clone(),
        answered: false,
    }
}
