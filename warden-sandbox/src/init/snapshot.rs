//! The snapshot role: a listing of one host directory, for an approved
//! `list` (docs/approvals.md "Directories").
//!
//! Handing the server an fd of the host directory itself would give it more
//! than a listing: lookups below it (`O_PATH` and `stat` are not mediated by
//! Landlock), Unix sockets in it by path, and `..` out of the sandbox's root
//! (a directory fd from outside the root is a way out of it). So the answer
//! is a copy of the listing instead: a fresh tmpfs, in a user and mount
//! namespace of this short-lived process, that holds one entry per entry of
//! the directory with its name, type, mode, size (files are sparse: no data)
//! and times, mounted read-only, `nosuid,nodev,noexec`, and never attached to
//! any mount tree. Its root directory's fd is what the server gets:
//!
//! - `getdents` on it lists the names with their types; `fstatat` on them
//!   gives the directory's metadata, which is what `ls -l` shows;
//! - no file in it has content, nothing in it is a host object (a socket is a
//!   socket inode nobody listens on; devices are left out), it cannot be
//!   written, and `..` from its root stays at its root (a detached mount has
//!   no parent);
//! - opening an entry through it is denied by Landlock (no rule covers a
//!   detached tree); the server reaches a file's content only by asking for
//!   the file's own path, which is a file approval of its own.
//!
//! Symlinks are copied as symlinks with their targets (what `ls -l` shows);
//! followed, a target resolves in the sandbox's own view.

use super::exec::InitRole;
use crate::control::{self, Failure, FromInit};
use crate::sys;
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, AT_FDCWD};
use nix::sched::CloneFlags;
use nix::sys::stat::{FileStat, Mode, SFlag, UtimensatFlags};
use nix::sys::time::TimeSpec;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Most entries copied; a larger directory's snapshot says it is truncated.
pub(crate) const MAX_ENTRIES: u32 = 100_000;

fn os(stage: &str) -> impl Fn(Errno) -> Failure + '_ {
    move |e| Failure::os(stage, e)
}

fn write_proc(path: &str, content: &str) -> Result<(), Failure> {
    std::fs::write(path, content).map_err(|e| {
        Failure::os(
            format!("write {path}"),
            Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        )
    })
}

/// Builds the snapshot of `dir` and sends its root's fd; returns the exit code.
pub(super) fn snapshot(_role: &InitRole, sock: BorrowedFd<'_>, dir: &Path) -> Result<i32, Failure> {
    // The host directory, named without a symlink anywhere (the path the
    // person was shown is the one listed).
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let host = nix::fcntl::openat2(AT_FDCWD, dir, how).map_err(os("open the directory"))?;
    let top = nix::sys::stat::fstat(&host).map_err(os("stat the directory"))?;

    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
        .map_err(|e| Failure::UserNamespace { errno: e as i32 })?;
    write_proc("/proc/self/setgroups", "deny")?;
    write_proc("/proc/self/uid_map", &format!("{uid} {uid} 1\n"))?;
    write_proc("/proc/self/gid_map", &format!("{gid} {gid} 1\n"))?;
    // Modes are set exactly below.
    nix::sys::stat::umask(Mode::empty());

    let inodes = (MAX_ENTRIES + 16).to_string();
    let mnt = sys::mount::new_fs(
        c"tmpfs",
        &[("mode", "0700"), ("size", "8m"), ("nr_inodes", &inodes)],
        sys::mount::MOUNT_ATTR_NOSUID
            | sys::mount::MOUNT_ATTR_NODEV
            | sys::mount::MOUNT_ATTR_NOEXEC,
    )
    .map_err(os("make the snapshot filesystem"))?;

    let mut entries = 0u32;
    let mut skipped = 0u32;
    let mut truncated = false;
    let listing =
        nix::dir::Dir::from_fd(nix::unistd::dup(&host).map_err(os("read the directory"))?)
            .map_err(os("read the directory"))?;
    for entry in listing {
        let entry = entry.map_err(os("read the directory"))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if entries >= MAX_ENTRIES {
            truncated = true;
            break;
        }
        match copy_entry(host.as_fd(), mnt.as_fd(), OsStr::from_bytes(name)) {
            Ok(true) => entries += 1,
            Ok(false) => skipped += 1,
            // Gone since it was listed, or unreadable: left out.
            Err(_) => skipped += 1,
        }
    }
    let root = nix::fcntl::openat(
        &mnt,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(os("open the snapshot"))?;
    nix::sys::stat::fchmod(&root, mode_of(&top)).map_err(os("set the snapshot's mode"))?;
    nix::sys::stat::futimens(&root, &atime_of(&top), &mtime_of(&top))
        .map_err(os("set the snapshot's times"))?;
    sys::mount::set_mount_attr(mnt.as_fd(), sys::mount::MOUNT_ATTR_RDONLY, false)
        .map_err(os("make the snapshot read-only"))?;
    control::send(
        sock,
        &FromInit::Snapshot {
            entries,
            skipped,
            truncated,
        },
        Some(root.as_fd()),
    )
    .map_err(os("send the snapshot"))?;
    Ok(0)
}

fn mode_of(st: &FileStat) -> Mode {
    // No set-id bits (the mount is nosuid anyway); the sticky bit stays.
    Mode::from_bits_truncate(st.st_mode & 0o1777)
}

fn atime_of(st: &FileStat) -> TimeSpec {
    TimeSpec::new(st.st_atime, st.st_atime_nsec)
}

fn mtime_of(st: &FileStat) -> TimeSpec {
    TimeSpec::new(st.st_mtime, st.st_mtime_nsec)
}

/// Copies entry `name` of `host` into `snap`: Ok(false) for a kind that is
/// left out (devices).
fn copy_entry(host: BorrowedFd<'_>, snap: BorrowedFd<'_>, name: &OsStr) -> Result<bool, Errno> {
    let st = nix::sys::stat::fstatat(host, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)?;
    let mode = mode_of(&st);
    match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFDIR => nix::sys::stat::mkdirat(snap, name, mode)?,
        SFlag::S_IFREG => {
            let f = nix::fcntl::openat(
                snap,
                name,
                OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
                mode,
            )?;
            // Sparse: the size without the data.
            nix::unistd::ftruncate(&f, st.st_size)?;
        }
        SFlag::S_IFLNK => {
            let target = sys::fs::readlinkat(host, name.as_bytes())?;
            nix::unistd::symlinkat(OsStr::from_bytes(&target), snap, name)?;
        }
        k @ (SFlag::S_IFIFO | SFlag::S_IFSOCK) => nix::sys::stat::mknodat(snap, name, k, mode, 0)?,
        _ => return Ok(false),
    }
    nix::sys::stat::utimensat(
        snap,
        name,
        &atime_of(&st),
        &mtime_of(&st),
        UtimensatFlags::NoFollowSymlink,
    )?;
    Ok(true)
}
