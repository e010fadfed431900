//! File-system lookups of the daemon's notifier and recorder threads, shared
//! by the file-access capture and classification ([`crate::supervise`]) and
//! the creation guard ([`crate::supervise::guard`]): one component at a
//! time without following it, whole paths inside the sandbox's root,
//! `readlinkat` and `statx`. Paths are raw bytes (what the server named);
//! one with a NUL byte is `EINVAL`.

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

/// Longest path read from a caller's memory (`PATH_MAX`, NUL included).
pub(crate) const PATH_MAX: usize = 4096;

/// How often [`open_in_root`] retries an `EAGAIN`.
const OPENAT2_RETRIES: u32 = 64;

pub(crate) fn cstring(b: &[u8]) -> Result<CString, Errno> {
    CString::new(b).map_err(|_| Errno::EINVAL)
}

/// `readlinkat(dir, name)`; `name` empty reads the link `dir` itself is
/// (an `O_PATH|O_NOFOLLOW` fd of a symlink). Raw rather than `nix`'s, which
/// asks `fstatat` for the link's size first: one call more on the notifier's
/// path for every relative name, and `/proc` links report no size anyway.
pub(crate) fn readlinkat(dir: BorrowedFd<'_>, name: &[u8]) -> Result<Vec<u8>, Errno> {
    let c = cstring(name)?;
    let mut buf = vec![0u8; PATH_MAX];
    loop {
        // SAFETY: `c` is NUL-terminated, `buf` is ours for its whole length.
        let r = unsafe {
            libc::readlinkat(
                dir.as_raw_fd(),
                c.as_ptr(),
                buf.as_mut_ptr() as *mut libc::c_char,
                buf.len(),
            )
        };
        if r < 0 {
            return Err(Errno::last());
        }
        let n = r as usize;
        if n < buf.len() {
            buf.truncate(n);
            return Ok(buf);
        }
        // Truncated: /proc links and symlinks are at most PATH_MAX; grow once more.
        if buf.len() >= 4 * PATH_MAX {
            buf.truncate(n);
            return Ok(buf);
        }
        buf.resize(buf.len() * 2, 0);
    }
}

/// `openat(dir, name, O_PATH|O_NOFOLLOW|O_CLOEXEC)`: one component, never
/// followed.
pub(crate) fn open_component(dir: BorrowedFd<'_>, name: &[u8]) -> Result<OwnedFd, Errno> {
    nix::fcntl::openat(
        dir,
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// `path` (absolute, the sandbox's view) opened `O_PATH` in `root` as the
/// server's own lookup would go (`openat2` with `RESOLVE_IN_ROOT`): symlinks
/// followed inside the root, never out of it, no magic links; the last
/// component followed only with `follow_last`.
pub(crate) fn open_in_root(
    root: BorrowedFd<'_>,
    path: &[u8],
    follow_last: bool,
) -> Result<OwnedFd, Errno> {
    let mut flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
    if !follow_last {
        flags |= OFlag::O_NOFOLLOW;
    }
    let how = OpenHow::new()
        .flags(flags)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    // A `..` resolved while any rename or mount happened anywhere on the
    // system makes RESOLVE_IN_ROOT answer EAGAIN ("could not make sure `..`
    // stayed inside"): retry, a bounded number of times.
    let mut tries = 0;
    loop {
        match nix::fcntl::openat2(root, path, how) {
            Ok(fd) => return Ok(fd),
            Err(e) => {
                tries += 1;
                if e != Errno::EAGAIN || tries >= OPENAT2_RETRIES {
                    return Err(e);
                }
            }
        }
    }
}

/// File type bits and mount id of what `fd` refers to (`statx`, which `nix`
/// does not wrap; the mount id is `0` when the kernel does not say).
pub(crate) fn stat_fd(fd: BorrowedFd<'_>) -> Result<(u32, u64), Errno> {
    // SAFETY: statx is plain integers, valid zeroed.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx fills the struct we own; an empty path with AT_EMPTY_PATH
    // refers to `fd` itself.
    let r = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_TYPE | libc::STATX_MNT_ID,
            &mut st,
        )
    };
    if r < 0 {
        return Err(Errno::last());
    }
    let mnt = if st.stx_mask & libc::STATX_MNT_ID != 0 {
        st.stx_mnt_id
    } else {
        0
    };
    Ok((u32::from(st.stx_mode) & libc::S_IFMT, mnt))
}

/// The mount id of what `fd` is (`None`: unknown).
pub(crate) fn mount_id_of(fd: BorrowedFd<'_>) -> Option<u64> {
    stat_fd(fd).ok().map(|(_, m)| m).filter(|&m| m != 0)
}

/// The file type (`S_IFMT` bits) of what `fd` is, not followed.
pub(crate) fn kind_of(fd: BorrowedFd<'_>) -> Option<u32> {
    stat_fd(fd).ok().map(|(k, _)| k)
}

/// Whether `path` (the daemon's view) names something: `statx` with
/// `AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT` and no fields asked for, so the
/// last component is not followed and no automount is triggered.
pub(crate) fn exists_no_automount(path: &[u8]) -> bool {
    let Ok(c) = cstring(path) else { return false };
    // SAFETY: statx is plain integers, valid zeroed.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx into a struct we own, NUL-terminated path.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT,
            0,
            &mut st,
        )
    };
    r == 0
}
