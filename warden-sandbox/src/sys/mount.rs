//! The new mount API and the `openat2` lookups PID 1 builds the sandbox's
//! root with ([`crate::rootfs`]): `open_tree`, `mount_setattr`,
//! `move_mount`, `fsopen`/`fsconfig`/`fsmount` and `pivot_root`, which
//! neither `nix` nor `libc` wrap.

use super::{fd_result, unit_result};
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, AT_FDCWD};
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

// <linux/mount.h>: not (all) in libc 0.2.
pub(crate) const OPEN_TREE_CLONE: u32 = 1;
pub(crate) const OPEN_TREE_CLOEXEC: u32 = libc::O_CLOEXEC as u32;
pub(crate) const AT_RECURSIVE: u32 = 0x8000;
pub(crate) const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x04;
pub(crate) const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x01;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x02;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x04;
pub(crate) const MOUNT_ATTR_NOEXEC: u64 = 0x08;
const FSOPEN_CLOEXEC: u32 = 0x01;
const FSMOUNT_CLOEXEC: u32 = 0x01;
const FSCONFIG_SET_STRING: u32 = 1;
const FSCONFIG_CMD_CREATE: u32 = 6;

/// `struct mount_attr` (MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
#[derive(Default)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Opens `path` as an `O_PATH` fd relative to `dirfd` (or the cwd) with
/// `openat2(RESOLVE_NO_SYMLINKS)`: the open fails with `ELOOP` if the path is, or
/// passes through, a symlink. Binding from the fd afterwards means the path is
/// resolved exactly once (no TOCTOU between check and mount).
pub(crate) fn open_path_nofollow(
    dirfd: Option<BorrowedFd<'_>>,
    path: &Path,
) -> Result<OwnedFd, Errno> {
    openat2_path(
        dirfd,
        path,
        0,
        libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    )
}

/// Opens `path` (relative) beneath `dir` as an `O_PATH` fd without following any
/// symlink, not even the last component: if that one is a symlink, the fd refers
/// to the link itself (`O_PATH|O_NOFOLLOW`), so it can be bound over. A symlink
/// on the way fails with `ELOOP`, `..` out of `dir` with `EXDEV`.
pub(crate) fn open_beneath_nofollow(dir: BorrowedFd<'_>, path: &Path) -> Result<OwnedFd, Errno> {
    openat2_path(
        Some(dir),
        path,
        libc::O_NOFOLLOW as u64,
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    )
}

/// Opens `path` as an `O_PATH` fd resolved the way a process whose root is `root`
/// would resolve it (`RESOLVE_IN_ROOT`: absolute symlinks and `..` stay inside
/// `root`), following symlinks but never magic links.
pub(crate) fn open_in_root(root: BorrowedFd<'_>, path: &Path) -> Result<OwnedFd, Errno> {
    openat2_path(
        Some(root),
        path,
        0,
        libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    )
}

/// `openat2(dirfd, path, O_PATH|O_CLOEXEC|extra, resolve)`.
fn openat2_path(
    dirfd: Option<BorrowedFd<'_>>,
    path: &Path,
    extra: u64,
    resolve: u64,
) -> Result<OwnedFd, Errno> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::from_bits_retain(extra as i32))
        .resolve(ResolveFlag::from_bits_retain(resolve));
    nix::fcntl::openat2(dirfd.unwrap_or(AT_FDCWD), path, how)
}

/// `open_tree(OPEN_TREE_CLONE|AT_RECURSIVE)`: a detached recursive copy of the
/// mount tree at `fd` (a bind mount not yet attached anywhere).
pub(crate) fn clone_tree(fd: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    // SAFETY: empty path with AT_EMPTY_PATH refers to `fd` itself; plain integers otherwise.
    fd_result(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd.as_raw_fd(),
            c"".as_ptr(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | libc::AT_EMPTY_PATH as u32,
        )
    })
}

/// `mount_setattr` on the mount `fd` refers to, optionally on all its submounts.
/// Flags are only ever added, which the kernel allows even for mounts whose flags
/// were locked when the user namespace was created.
pub(crate) fn set_mount_attr(
    fd: BorrowedFd<'_>,
    attr_set: u64,
    recursive: bool,
) -> Result<(), Errno> {
    let attr = MountAttr {
        attr_set,
        ..MountAttr::default()
    };
    let flags = libc::AT_EMPTY_PATH as u32 | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: `attr` is a valid mount_attr (VER0 size) that outlives the call.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
}

/// `move_mount` of the detached tree `from` onto the (O_PATH) mount point `to`.
pub(crate) fn move_mount(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<(), Errno> {
    // SAFETY: both paths are empty strings resolved against the fds (the *_EMPTY_PATH flags).
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            c"".as_ptr(),
            to.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    })
}

/// Creates a new, detached filesystem instance (`fsopen`/`fsconfig`/`fsmount`) of
/// type `fstype` with string options, mounted with `attrs`. Returns the mount fd.
pub(crate) fn new_fs(
    fstype: &CStr,
    options: &[(&str, &str)],
    attrs: u64,
) -> Result<OwnedFd, Errno> {
    // SAFETY: valid C string; the fd returned is ours.
    let fsfd =
        fd_result(unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) })?;
    for (k, v) in options {
        let k = CString::new(*k).map_err(|_| Errno::EINVAL)?;
        let v = CString::new(*v).map_err(|_| Errno::EINVAL)?;
        // SAFETY: fsfd is a live fs context; key and value are valid C strings.
        unit_result(unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fsfd.as_raw_fd(),
                FSCONFIG_SET_STRING,
                k.as_ptr(),
                v.as_ptr(),
                0,
            )
        })?;
    }
    // SAFETY: CMD_CREATE takes no key/value.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fsfd.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    })?;
    // SAFETY: fsfd holds a created superblock; fsmount returns a new detached mount fd.
    fd_result(unsafe { libc::syscall(libc::SYS_fsmount, fsfd.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) })
}

/// `pivot_root(new, old)`.
pub(crate) fn pivot_root(new: &CStr, old: &CStr) -> Result<(), Errno> {
    // SAFETY: valid C strings.
    unit_result(unsafe { libc::syscall(libc::SYS_pivot_root, new.as_ptr(), old.as_ptr()) })
}
