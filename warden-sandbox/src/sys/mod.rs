//! Thin wrappers over the kernel calls the sandbox needs and that `nix`/`libc` do not
//! wrap (new mount API, openat2, pidfd, capabilities, close_range). Every wrapper
//! returns `Errno` so callers can attach the stage they were in.

pub mod fdpass;
pub(crate) mod readiness;

use nix::errno::Errno;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

// <linux/mount.h>: not (all) in libc 0.2.
pub const OPEN_TREE_CLONE: u32 = 1;
pub const OPEN_TREE_CLOEXEC: u32 = libc::O_CLOEXEC as u32;
pub const AT_RECURSIVE: u32 = 0x8000;
pub const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x04;
pub const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
pub const MOUNT_ATTR_RDONLY: u64 = 0x01;
pub const MOUNT_ATTR_NOSUID: u64 = 0x02;
pub const MOUNT_ATTR_NODEV: u64 = 0x04;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x08;
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

fn cstr(path: &Path) -> Result<CString, Errno> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)
}

/// Converts a syscall return value holding a new fd.
fn fd_result(ret: libc::c_long) -> Result<OwnedFd, Errno> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        // SAFETY: the kernel just returned this fd to us; nobody else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
    }
}

fn unit_result(ret: libc::c_long) -> Result<(), Errno> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// Opens `path` as an `O_PATH` fd relative to `dirfd` (or the cwd) with
/// `openat2(RESOLVE_NO_SYMLINKS)`: the open fails with `ELOOP` if the path is, or
/// passes through, a symlink. Binding from the fd afterwards means the path is
/// resolved exactly once (no TOCTOU between check and mount).
pub fn open_path_nofollow(dirfd: Option<BorrowedFd<'_>>, path: &Path) -> Result<OwnedFd, Errno> {
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
pub fn open_beneath_nofollow(dir: BorrowedFd<'_>, path: &Path) -> Result<OwnedFd, Errno> {
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
pub fn open_in_root(root: BorrowedFd<'_>, path: &Path) -> Result<OwnedFd, Errno> {
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
    let c = cstr(path)?;
    // SAFETY: open_how is plain integers; all-zero is its "no options" value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64 | extra;
    how.resolve = resolve;
    let dfd = dirfd.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `c` is a valid NUL-terminated string and `how` a valid open_how of the
    // size we pass; the returned fd is owned by us.
    fd_result(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dfd,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    })
}

/// `open_tree(OPEN_TREE_CLONE|AT_RECURSIVE)`: a detached recursive copy of the
/// mount tree at `fd` (a bind mount not yet attached anywhere).
pub fn clone_tree(fd: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
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
pub fn set_mount_attr(fd: BorrowedFd<'_>, attr_set: u64, recursive: bool) -> Result<(), Errno> {
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
pub fn move_mount(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<(), Errno> {
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
pub fn new_fs(fstype: &CStr, options: &[(&str, &str)], attrs: u64) -> Result<OwnedFd, Errno> {
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
pub fn pivot_root(new: &CStr, old: &CStr) -> Result<(), Errno> {
    // SAFETY: valid C strings.
    unit_result(unsafe { libc::syscall(libc::SYS_pivot_root, new.as_ptr(), old.as_ptr()) })
}

/// `pidfd_open(pid, 0)`.
pub fn pidfd_open(pid: libc::pid_t) -> Result<OwnedFd, Errno> {
    // SAFETY: plain integers; the fd returned is ours.
    fd_result(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })
}

/// `pidfd_send_signal(pidfd, sig, NULL, 0)`: signals exactly the process the pidfd
/// was opened for, never a process that later reused its pid.
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: i32) -> Result<(), Errno> {
    // SAFETY: a NULL siginfo is allowed (the kernel fills in a SI_USER one).
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })
}

/// Marks every fd >= `first` close-on-exec (`CLOSE_RANGE_CLOEXEC`) or closes them.
pub fn close_range_from(first: u32, cloexec_only: bool) -> Result<(), Errno> {
    let flags = if cloexec_only {
        libc::CLOSE_RANGE_CLOEXEC
    } else {
        0
    };
    // SAFETY: closes/marks fds the caller declared it no longer needs.
    unit_result(unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, flags) })
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `capset` with empty effective, permitted and inheritable sets.
pub fn capset_empty() -> Result<(), Errno> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: header and two data structs as required by version 3.
    unit_result(unsafe {
        libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr())
    })
}

/// Clears the calling thread's effective capability set (permitted and
/// inheritable kept): only this thread, as capabilities are per thread.
pub fn drop_effective_caps() -> Result<(), Errno> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and two data structs as required by version 3.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut hdr as *mut CapHeader,
            data.as_mut_ptr(),
        )
    })?;
    for d in &mut data {
        d.effective = 0;
    }
    // SAFETY: as above; the new effective set is a subset of the permitted one.
    unit_result(unsafe {
        libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr())
    })
}

/// `prctl` with integer arguments.
pub fn prctl(option: libc::c_int, a2: libc::c_ulong, a3: libc::c_ulong) -> Result<(), Errno> {
    // SAFETY: only integer-argument prctl options are passed through here.
    let r = unsafe { libc::prctl(option, a2, a3, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// The human text of an errno, without the "(os error N)" suffix.
pub fn errno_text(e: Errno) -> String {
    e.desc().to_string()
}

/// Replaces fds 0, 1 and 2 with `fd` (e.g. /dev/null), dropping whatever they were.
pub fn dup_over_stdio(fd: BorrowedFd<'_>) {
    for target in 0..3 {
        // SAFETY: dup2 onto the stdio numbers, which this process deliberately gives up.
        unsafe { libc::dup2(fd.as_raw_fd(), target) };
    }
}
