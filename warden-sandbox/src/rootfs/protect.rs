//! Protected names, the half that exists: inside each write grant, the
//! names the host runs or trusts ([`crate::protected`]: the table and the
//! plan) are bound read-only over themselves by PID 1 while it builds the
//! root ([`super::build_root`]), the directories between a grant and such a
//! name are pinned, and protected symlinks' targets in the grants bound
//! read-only too. The names that do not exist yet are the other half: the
//! creation guard keeps them from being made, on the daemon's notifier
//! threads ([`crate::supervise::guard`]).

use super::{inside, kind, RO, RW};
use crate::control::Failure;
use crate::sys;
use nix::errno::Errno;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// Binds what `fd` refers to over itself with `attrs` (recursively: a host
/// submount below stays covered). One fd for both ends, so the object bound and
/// the mount point are the same; it is never resolved again by name.
pub(super) fn bind_over(fd: BorrowedFd<'_>, attrs: u64) -> Result<(), Errno> {
    let tree = sys::mount::clone_tree(fd)?;
    sys::mount::set_mount_attr(tree.as_fd(), attrs, true)?;
    sys::mount::move_mount(tree.as_fd(), fd)
}

/// Binds a protected path read-only over itself, if it exists in the new root.
/// The last component is not followed: a symlink is bound as the link itself, so
/// it cannot be removed, renamed over or replaced, and its path goes to `follow`
/// (see [`protect_targets`]), as does a path that passes through a (pinned)
/// symlink.
pub(super) fn protect_path(
    root: BorrowedFd<'_>,
    p: &Path,
    unless_dir: bool,
    follow: &mut Vec<PathBuf>,
) -> Result<(), Failure> {
    let stage = || format!("protect {}", p.display());
    let fd = match sys::mount::open_beneath_nofollow(root, inside(p)) {
        Ok(fd) => fd,
        // Absent (or a file where a directory would be): nothing to bind. A name
        // created later is not covered; see docs/security-model.md.
        Err(Errno::ENOENT | Errno::ENOTDIR) => return Ok(()),
        // A symlink on the way: pinned as a `Late::Pin`; its target is handled
        // with the other links.
        Err(Errno::ELOOP) => {
            follow.push(p.to_path_buf());
            return Ok(());
        }
        Err(e) => return Err(Failure::os(stage(), e)),
    };
    let k = kind(&fd).map_err(|e| Failure::os(stage(), e))?;
    if unless_dir && k == libc::S_IFDIR {
        // A `.git` directory: what inside it runs has rows of its own.
        return Ok(());
    }
    if k == libc::S_IFLNK {
        follow.push(p.to_path_buf());
    }
    bind_over(fd.as_fd(), RO).map_err(|e| Failure::os(stage(), e))
}

/// Pins what lies between a write grant and a protected path by binding it over
/// itself: a mount point cannot be renamed or removed (`EBUSY`), so the protected
/// path cannot be moved away with its parent and recreated. A directory or file
/// keeps the grant's mode; a symlink is pinned as the link.
pub(super) fn pin(root: BorrowedFd<'_>, p: &Path) -> Result<(), Failure> {
    let stage = || format!("pin {}", p.display());
    let fd = match sys::mount::open_beneath_nofollow(root, inside(p)) {
        Ok(fd) => fd,
        // ELOOP: a shallower pin is a symlink, already pinned.
        Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => return Ok(()),
        Err(e) => return Err(Failure::os(stage(), e)),
    };
    let attrs = match kind(&fd).map_err(|e| Failure::os(stage(), e))? {
        libc::S_IFLNK => RO,
        _ => RW,
    };
    bind_over(fd.as_fd(), attrs).map_err(|e| Failure::os(stage(), e))
}

/// Protected names that are, or pass through, symlinks: the links themselves
/// are pinned; here their targets, resolved exactly as the server will resolve
/// them (`RESOLVE_IN_ROOT` from the new root, once every grant is in place), are
/// bound read-only over themselves too when they are host files the server could
/// otherwise write (a dotfiles checkout inside a granted `$HOME`). Following can
/// only add read-only binds of something already visible, never expose anything.
/// Skipped: targets that do not exist inside (a write through the link fails),
/// that are read-only already (runtime, read grants), that live on one of the
/// sandbox's private file systems (`private`: st_dev of /tmp, $HOME...), that are
/// not regular files or directories (`/dev/null`), and write grants named by
/// the policy (`granted`: their (st_dev, st_ino)).
pub(super) fn protect_targets(
    root: BorrowedFd<'_>,
    follow: &[PathBuf],
    private: &[libc::dev_t],
    granted: &[(libc::dev_t, libc::ino_t)],
) -> Result<(), Failure> {
    for p in follow {
        let stage = || format!("protect the target of {}", p.display());
        let fd = match sys::mount::open_in_root(root, inside(p)) {
            Ok(fd) => fd,
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => continue,
            Err(e) => return Err(Failure::os(stage(), e)),
        };
        let st = nix::sys::stat::fstat(&fd).map_err(|e| Failure::os(stage(), e))?;
        let fmt = st.st_mode & libc::S_IFMT;
        if fmt != libc::S_IFREG && fmt != libc::S_IFDIR {
            continue;
        }
        if private.contains(&st.st_dev) || granted.contains(&(st.st_dev, st.st_ino)) {
            continue;
        }
        let vfs = nix::sys::statvfs::fstatvfs(&fd).map_err(|e| Failure::os(stage(), e))?;
        if vfs.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY) {
            continue;
        }
        bind_over(fd.as_fd(), RO).map_err(|e| Failure::os(stage(), e))?;
    }
    Ok(())
}
