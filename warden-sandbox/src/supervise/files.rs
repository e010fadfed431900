//! File-access auditing (`audit.files`): which paths the server opens,
//! creates, removes, renames, links or executes, and which of those the
//! sandbox denies.
//!
//! Mechanism (see docs/architecture.md for the measurements behind it): the
//! path-taking calls of [`crate::confine::seccomp::WATCHED`] return
//! `SECCOMP_RET_USER_NOTIF`, so each one waits in the kernel while the
//! daemon's notifier pool ([`crate::supervise::notify`]) runs [`Capturer::capture`]:
//!
//! 1. read the path arguments from the caller's memory (`process_vm_readv`,
//!    [`read_cstring`]), and for a relative path the directory it is relative
//!    to (`/proc/<pid>/cwd` or `/proc/<pid>/fd/<dirfd>`, from a cached
//!    `/proc/<pid>` fd);
//! 2. check with `SECCOMP_IOCTL_NOTIF_ID_VALID` that the call is still
//!    waiting: only then is it certain that the pid still named the caller
//!    while its memory was read (a recycled pid could otherwise have fed us
//!    another process's memory), else the capture is dropped;
//! 3. answer `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the kernel runs the call as
//!    if nothing had stopped it, with every check (mount namespace, read-only
//!    binds, Landlock) still its own.
//!
//! Observing never decides anything: the answer is always "continue", the
//! same for every call whatever the capture found, and is sent even when the
//! capture failed. A server that rewrites the path between our read and the
//! kernel's (another thread racing the call) can make a record wrong, never an
//! access wider: the kernel reads the path again and checks what it reads.
//!
//! Classification happens afterwards, off the server's path, on the
//! consumer's thread ([`FileAccesses::recv_timeout`]): the path is resolved
//! in the sandbox's own view (its root, opened once through
//! `/proc/<pid>/root`, walked one component at a time without ever following
//! a symlink out of it, [`resolve`]), placed on one of the sandbox's mounts
//! (its mount table, read once from `/proc/<pid>/mountinfo`, matched by mount
//! id), and judged by [`decide`]: a path that exists on the host but not in the
//! sandbox's view (outside every grant) is a denial (`ENOENT`), as is a write,
//! create, removal or rename on a read-only mount (`EROFS`: read grants,
//! protected paths, the runtime, the sandbox's skeleton), an exec on a
//! no-exec mount (`EACCES`), and listing a directory of the sandbox's
//! skeleton (`/`, `/home`...: the host's entries are hidden). Everything else
//! is allowed (including what fails for its own reasons, e.g. a file missing
//! from a grant, or missing on the host too). The outcome is a prediction from
//! the sandbox's layout: the kernel's own result is not visible to a seccomp
//! supervisor.

use crate::confine::seccomp::{self, FileOp, Flags, Watched};
use crate::protected;
use crate::spec::{FileAudit, SandboxSpec};
use crate::supervise::queue::{QueueRx, QueueTx};
use nix::errno::Errno;
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest path read from a caller's memory (`PATH_MAX`, NUL included).
pub const PATH_MAX: usize = 4096;
/// Symlinks followed while resolving one path (the kernel's limit).
const MAX_LINKS: u32 = 40;
/// `/proc/<pid>` fds kept open by the notifier.
const PROC_CACHE: usize = 64;

// ---------------------------------------------------------------------------
// Reading the caller's memory.

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Reads up to `buf.len()` bytes at `addr` in `pid`'s memory; returns how
/// many were read (fewer when an unmapped page follows).
pub fn read_memory(pid: u32, addr: u64, buf: &mut [u8]) -> Result<usize, Errno> {
    if buf.is_empty() {
        return Ok(0);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one local iovec over `buf`, which we own mutably for the call;
    // the remote address is only interpreted by the kernel in the other
    // process (a bad one is EFAULT, never a fault here).
    let r = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r as usize)
    }
}

/// A NUL-terminated string at `addr` in `pid`'s memory, read one page at a
/// time (a string ending just before an unmapped page reads fine). At most
/// `max` bytes; `Ok((bytes, true))` when no NUL came within them (the kernel
/// would refuse such a path with `ENAMETOOLONG`).
pub fn read_cstring(pid: u32, addr: u64, max: usize) -> Result<(Vec<u8>, bool), Errno> {
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let page = page_size();
    let mut out = Vec::new();
    let mut at = addr;
    let mut buf = vec![0u8; page];
    while out.len() < max {
        let to_page_end = page - (at as usize % page);
        let want = to_page_end.min(max - out.len());
        let n = match read_memory(pid, at, &mut buf[..want]) {
            Ok(0) => return Err(Errno::EFAULT),
            Ok(n) => n,
            // A string running into an unmapped page: the kernel would fail
            // the call with EFAULT too.
            Err(e) => return Err(e),
        };
        if let Some(end) = buf[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Ok((out, false));
        }
        out.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    Ok((out, true))
}

// ---------------------------------------------------------------------------
// Small kernel helpers (O_PATH walking, readlink, statx).

pub(crate) fn cstring(b: &[u8]) -> Result<CString, Errno> {
    CString::new(b).map_err(|_| Errno::EINVAL)
}

/// `readlinkat(dir, name)`; `name` empty reads the link `dir` itself is
/// (an `O_PATH|O_NOFOLLOW` fd of a symlink).
fn readlinkat(dir: RawFd, name: &[u8]) -> Result<Vec<u8>, Errno> {
    let c = cstring(name)?;
    let mut buf = vec![0u8; PATH_MAX];
    loop {
        // SAFETY: `c` is NUL-terminated, `buf` is ours for its whole length.
        let r = unsafe {
            libc::readlinkat(
                dir,
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

/// `openat(dir, name, O_PATH|O_NOFOLLOW|O_CLOEXEC [|O_DIRECTORY])`: one
/// component, never followed.
pub(crate) fn open_component(dir: RawFd, name: &[u8]) -> Result<OwnedFd, Errno> {
    let c = cstring(name)?;
    // SAFETY: NUL-terminated name; the fd returned is ours.
    let fd = unsafe {
        libc::openat(
            dir,
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        Err(Errno::last())
    } else {
        // SAFETY: just returned to us by the kernel.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// File type bits and mount id of what `fd` refers to.
fn stat_fd(fd: BorrowedFd<'_>) -> Result<(u32, u64), Errno> {
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

/// File systems a lookup of a name the server chose must not reach: an
/// autofs map (`/net`, `-hosts`, LDAP `/home`) turns the name into a DNS
/// lookup and a mount attempt, a channel past the egress proxy (review F14);
/// network and FUSE file systems send the name to their server.
const REMOTE_FSTYPES: &[&str] = &[
    "autofs", "nfs", "nfs4", "cifs", "smb3", "fuse", "9p", "ceph",
];

/// The host's mount points of [`REMOTE_FSTYPES`] (and `fuse.*`), read from
/// the daemon's mount table at most once a second.
fn remote_mount_points() -> Vec<Vec<u8>> {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    static CACHE: Mutex<Option<(Instant, Vec<Vec<u8>>)>> = Mutex::new(None);
    let mut c = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((at, points)) = c.as_ref() {
        if at.elapsed() < Duration::from_secs(1) {
            return points.clone();
        }
    }
    let points: Vec<Vec<u8>> = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
        .into_iter()
        .filter(|m| REMOTE_FSTYPES.contains(&m.fstype.as_str()) || m.fstype.starts_with("fuse."))
        .map(|m| m.point)
        .collect();
    *c = Some((Instant::now(), points.clone()));
    points
}

/// Whether `path` lies at or below one of `points` (component-wise).
fn below_any(path: &[u8], points: &[Vec<u8>]) -> bool {
    points.iter().any(|p| under(path, p))
}

/// Whether `path` names something on the host (as the daemon sees it): the
/// last component not followed, no automount triggered, and never looked up
/// at all on an automount, network or FUSE file system (`false`: unknown).
pub fn host_has(path: &[u8]) -> bool {
    if below_any(path, &remote_mount_points()) {
        return false;
    }
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

// ---------------------------------------------------------------------------
// The sandbox's mount table.

/// One line of `/proc/<pid>/mountinfo`, as seen from inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub id: u64,
    /// The file system's device number, `major:minor`.
    pub dev: String,
    /// Where it is mounted, in the sandbox's view.
    pub point: Vec<u8>,
    /// Per-mount `ro`.
    pub read_only: bool,
    pub noexec: bool,
    pub fstype: String,
}

/// `\040`-style escapes of mountinfo fields.
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = oct.iter().fold(0u32, |a, c| a * 8 + u32::from(c - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Parses mountinfo; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < 6 || sep < 6 || sep + 1 >= fields.len() {
            continue;
        }
        let Ok(id) = fields[0].parse() else { continue };
        let opts: Vec<&str> = fields[5].split(',').collect();
        out.push(Mount {
            id,
            dev: fields[2].to_string(),
            point: unescape(fields[4]),
            read_only: opts.contains(&"ro"),
            noexec: opts.contains(&"noexec"),
            fstype: fields[sep + 1].to_string(),
        });
    }
    out
}

// ---------------------------------------------------------------------------
// Resolving a path in the sandbox's view.

/// The sandbox's root and mount table, opened once from the first caller.
#[derive(Debug)]
pub struct SandboxRoot {
    root: OwnedFd,
    /// What `/proc/self/fd` calls `root` from here: `/` for a sandbox's root
    /// (not reachable from the daemon's, so names are relative to it), the
    /// host path for a plain directory (tests).
    root_name: Vec<u8>,
    /// The sandbox's mount namespace: held so that its mounts stay attached
    /// under `root` until the last capture is classified, even after every
    /// process of the sandbox is gone (a namespace's mounts are detached when
    /// its last reference goes).
    _mnt_ns: Option<OwnedFd>,
    mounts: Vec<Mount>,
}

impl SandboxRoot {
    /// For tests and tools: a root directory and the mount table to use.
    pub fn new(root: OwnedFd, mounts: Vec<Mount>) -> SandboxRoot {
        SandboxRoot {
            root_name: fd_name(root.as_fd()).unwrap_or_default(),
            root,
            _mnt_ns: None,
            mounts,
        }
    }

    fn open(proc_pid: BorrowedFd<'_>) -> Result<SandboxRoot, Errno> {
        // `root` is a magic link to the caller's root directory; opening it
        // (O_PATH) needs the same ptrace access as reading its memory.
        let c = c"root";
        // SAFETY: NUL-terminated name; the fd returned is ours.
        let fd = unsafe {
            libc::openat(
                proc_pid.as_raw_fd(),
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(Errno::last());
        }
        // SAFETY: just returned to us.
        let root = unsafe { OwnedFd::from_raw_fd(fd) };
        let c = c"mountinfo";
        // SAFETY: as above.
        let fd = unsafe {
            libc::openat(
                proc_pid.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(Errno::last());
        }
        // SAFETY: just returned to us.
        let file = unsafe { std::fs::File::from_raw_fd(fd) };
        let text = std::io::read_to_string(file)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let c = c"ns/mnt";
        // SAFETY: as above; an nsfs fd, only held.
        let ns = unsafe {
            libc::openat(
                proc_pid.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if ns < 0 {
            return Err(Errno::last());
        }
        Ok(SandboxRoot {
            root_name: fd_name(root.as_fd()).unwrap_or_default(),
            root,
            // SAFETY: just returned to us.
            _mnt_ns: Some(unsafe { OwnedFd::from_raw_fd(ns) }),
            mounts: parse_mountinfo(&text),
        })
    }

    /// The sandbox's root directory (`O_PATH`).
    pub(crate) fn root_fd(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// The sandbox's mount with this id.
    pub(crate) fn mount_by_id(&self, id: u64) -> Option<&Mount> {
        self.mount(id)
    }

    fn mount(&self, id: u64) -> Option<&Mount> {
        self.mounts.iter().find(|m| m.id == id)
    }

    /// The mount whose point is the longest prefix of `path` (for paths that
    /// could not be placed by mount id).
    fn mount_of_path(&self, path: &[u8]) -> Option<&Mount> {
        self.mounts
            .iter()
            .filter(|m| under(path, &m.point))
            .max_by_key(|m| m.point.len())
    }
}

/// What `/proc/self/fd/<fd>` says `fd` is.
fn fd_name(fd: BorrowedFd<'_>) -> Result<Vec<u8>, Errno> {
    readlinkat(
        libc::AT_FDCWD,
        format!("/proc/self/fd/{}", fd.as_raw_fd()).as_bytes(),
    )
}

/// `path` is `dir` or inside it (component-wise).
fn under(path: &[u8], dir: &[u8]) -> bool {
    if dir == b"/" {
        return path.first() == Some(&b'/');
    }
    path.starts_with(dir) && (path.len() == dir.len() || path[dir.len()] == b'/')
}

fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
}

fn join(parts: &[Vec<u8>]) -> Vec<u8> {
    if parts.is_empty() {
        return b"/".to_vec();
    }
    let mut out = Vec::new();
    for p in parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    out
}

/// Lexical `..` removal (for what lies past the first missing component and
/// for `/proc`, where nothing is resolved).
fn normalize(path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    for c in components(path) {
        if c == b".." {
            parts.pop();
        } else {
            parts.push(c.to_vec());
        }
    }
    join(&parts)
}

/// Where a path leads in the sandbox's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// Absolute, symlinks resolved as far as the path exists; past the first
    /// missing component, the rest as written.
    pub path: Vec<u8>,
    /// The whole path exists.
    pub exists: bool,
    /// It does not, but its parent directory does.
    pub parent_exists: bool,
    pub is_dir: bool,
    /// The mount of what exists (or of the deepest existing directory on the
    /// way), by mount id.
    pub mount_id: Option<u64>,
    /// Under the sandbox's `/proc`: not resolved (its links point into the
    /// caller's own process), judged as the sandbox's own.
    pub proc: bool,
    /// More than [`MAX_LINKS`] symlinks.
    pub looped: bool,
}

/// Resolves `path` (absolute, in the sandbox's view) from `root` the way the
/// kernel would for a process whose root it is: nothing outside the sandbox's
/// root is ever looked at (`..` never climbs above it, an absolute symlink
/// restarts at it). `follow_last`: the
/// last component is followed if it is a symlink (not for `O_NOFOLLOW`,
/// unlink, rename, `lchown`...).
pub fn resolve(root: &SandboxRoot, path: &[u8], follow_last: bool) -> Resolution {
    resolve_at_once(root, path, follow_last)
        .unwrap_or_else(|| resolve_by_hand(root.root.as_fd(), path, follow_last))
}

/// The common case in four calls instead of three per component: the
/// kernel resolves the whole path in the root (`openat2` with
/// `RESOLVE_IN_ROOT`, no magic links), and `/proc/self/fd` names what it
/// found (as a path of the sandbox's view: its mounts are not reachable from
/// the daemon's root, so the name is relative to the sandbox's). `None` when
/// the path does not exist or leads into `/proc`: [`resolve_by_hand`] says
/// how far it gets.
fn resolve_at_once(root: &SandboxRoot, path: &[u8], follow_last: bool) -> Option<Resolution> {
    let fd = open_in_root(root.root.as_fd(), path, follow_last).ok()?;
    let (kind, mnt) = stat_fd(fd.as_fd()).ok()?;
    let name = fd_name(fd.as_fd()).ok()?;
    let name = match root.root_name.as_slice() {
        b"/" => name,
        r if under(&name, r) => {
            let rest = &name[r.len()..];
            if rest.is_empty() {
                b"/".to_vec()
            } else {
                rest.to_vec()
            }
        }
        _ => return None,
    };
    if name.first() != Some(&b'/') || under(&name, b"/proc") || name.ends_with(b" (deleted)") {
        return None;
    }
    Some(Resolution {
        path: name,
        exists: true,
        parent_exists: true,
        is_dir: kind == libc::S_IFDIR,
        mount_id: Some(mnt),
        proc: false,
        looped: false,
    })
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
    let c = cstring(path)?;
    // SAFETY: open_how is plain integers; all-zero is its "no options" value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    if !follow_last {
        how.flags |= libc::O_NOFOLLOW as u64;
    }
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // A `..` resolved while any rename or mount happened anywhere on the
    // system makes RESOLVE_IN_ROOT answer EAGAIN ("could not make sure `..`
    // stayed inside"): retry, a bounded number of times.
    let mut tries = 0;
    loop {
        // SAFETY: `c` is NUL-terminated and `how` a valid open_how of the
        // size passed; the fd returned is ours.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: just returned to us.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let e = Errno::last();
        tries += 1;
        if e != Errno::EAGAIN || tries >= OPENAT2_RETRIES {
            return Err(e);
        }
    }
}

/// How often [`open_in_root`] retries an `EAGAIN`.
const OPENAT2_RETRIES: u32 = 64;

/// One component at a time, each opened with `O_PATH|O_NOFOLLOW`: a
/// symlink's target is spliced in by hand.
fn resolve_by_hand(root: BorrowedFd<'_>, path: &[u8], follow_last: bool) -> Resolution {
    let mut todo: Vec<Vec<u8>> = components(path).rev().map(<[u8]>::to_vec).collect();
    // Resolved directories below the root: (name, fd).
    let mut stack: Vec<(Vec<u8>, OwnedFd)> = Vec::new();
    let mut links = 0;
    let names = |stack: &[(Vec<u8>, OwnedFd)]| -> Vec<Vec<u8>> {
        stack.iter().map(|(n, _)| n.clone()).collect()
    };
    let mount_of = |stack: &[(Vec<u8>, OwnedFd)]| {
        let fd = stack.last().map_or(root, |(_, f)| f.as_fd());
        stat_fd(fd).ok().map(|(_, m)| m)
    };
    while let Some(c) = todo.pop() {
        if c == b".." {
            stack.pop();
            continue;
        }
        // `/proc/...`: the sandbox's own proc file system. Its
        // `self`/`<pid>`/`fd` links only make sense for the caller; only
        // `/proc/<pid>/root/...` (the sandbox's root again) is followed.
        if stack.len() == 1 && stack[0].0 == b"proc" {
            let mut rest: Vec<Vec<u8>> = vec![c.clone()];
            rest.extend(todo.iter().rev().cloned());
            if rest.len() >= 2 && rest[1] == b"root" {
                let again: Vec<u8> = join(&rest[2..]);
                return resolve_by_hand(root, &again, follow_last);
            }
            let mut all = names(&stack);
            all.extend(rest);
            return Resolution {
                path: normalize(&join(&all)),
                exists: false,
                parent_exists: false,
                is_dir: false,
                mount_id: mount_of(&stack),
                proc: true,
                looped: false,
            };
        }
        let dir = stack.last().map_or(root, |(_, f)| f.as_fd());
        let last = todo.is_empty();
        match open_component(dir.as_raw_fd(), &c) {
            Ok(fd) => {
                let (kind, mnt) = stat_fd(fd.as_fd()).unwrap_or((0, 0));
                if kind == libc::S_IFLNK && (!last || follow_last) {
                    links += 1;
                    let target = readlinkat(fd.as_raw_fd(), b"").unwrap_or_default();
                    if links > MAX_LINKS || target.is_empty() {
                        let mut all = names(&stack);
                        all.push(c);
                        all.extend(todo.into_iter().rev());
                        return Resolution {
                            path: join(&all),
                            exists: false,
                            parent_exists: false,
                            is_dir: false,
                            mount_id: mount_of(&stack),
                            proc: false,
                            looped: links > MAX_LINKS,
                        };
                    }
                    if target.first() == Some(&b'/') {
                        stack.clear();
                    }
                    todo.extend(components(&target).rev().map(<[u8]>::to_vec));
                    continue;
                }
                if last {
                    let mut all = names(&stack);
                    all.push(c);
                    return Resolution {
                        path: join(&all),
                        exists: true,
                        parent_exists: true,
                        is_dir: kind == libc::S_IFDIR,
                        mount_id: Some(mnt),
                        proc: false,
                        looped: false,
                    };
                }
                if kind != libc::S_IFDIR {
                    // ENOTDIR: the path stops here.
                    let mut all = names(&stack);
                    all.push(c);
                    all.extend(todo.into_iter().rev());
                    return Resolution {
                        path: join(&all),
                        exists: false,
                        parent_exists: false,
                        is_dir: false,
                        mount_id: Some(mnt),
                        proc: false,
                        looped: false,
                    };
                }
                stack.push((c, fd));
            }
            Err(_) => {
                // ENOENT, or EACCES on a directory we may not search: the
                // path stops at its deepest existing directory.
                let parent_exists = last;
                let mount_id = mount_of(&stack);
                let mut all = names(&stack);
                all.push(c);
                all.extend(todo.into_iter().rev());
                return Resolution {
                    path: join(&all),
                    exists: false,
                    parent_exists,
                    is_dir: false,
                    mount_id,
                    proc: false,
                    looped: false,
                };
            }
        }
    }
    // The root itself (or a path of only `..` and `.`).
    Resolution {
        path: join(&names(&stack)),
        exists: true,
        parent_exists: true,
        is_dir: true,
        mount_id: mount_of(&stack),
        proc: false,
        looped: false,
    }
}

// ---------------------------------------------------------------------------
// What the sandbox's layout says about an access.

/// The operation, as recorded (`action` of the audit record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    OpenRead,
    OpenWrite,
    /// `O_PATH`: no access to the content, a lookup.
    OpenPath,
    /// An open with `O_CREAT` (or `O_TMPFILE`, `creat`): creates the file if
    /// it is missing.
    Create,
    Exec,
    Unlink,
    Rmdir,
    Mkdir,
    Mknod,
    Rename,
    Link,
    Symlink,
    Truncate,
    Chmod,
    Chown,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::OpenRead => "open-read",
            Action::OpenWrite => "open-write",
            Action::OpenPath => "open-path",
            Action::Create => "create",
            Action::Exec => "exec",
            Action::Unlink => "unlink",
            Action::Rmdir => "rmdir",
            Action::Mkdir => "mkdir",
            Action::Mknod => "mknod",
            Action::Rename => "rename",
            Action::Link => "link",
            Action::Symlink => "symlink",
            Action::Truncate => "truncate",
            Action::Chmod => "chmod",
            Action::Chown => "chown",
        }
    }
}

/// What an access does to one of its paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Looks at or reads it (open for reading, `O_PATH`, a link's source).
    Read,
    /// Runs it.
    Exec,
    /// Changes what exists (open for writing, truncate, chmod, chown).
    Modify,
    /// Removes a name (unlink, rmdir, a rename's source).
    Remove,
    /// Makes a new name in its parent (create, mkdir, mknod, symlink, a
    /// link's or rename's new name).
    Create,
}

/// The part of the sandbox a path lands on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Area {
    /// The sandbox's own root file system: only mount points and symlinks.
    Skeleton,
    /// The synthetic `/etc` (passwd, group, hosts) and the minimal `/dev`.
    SyntheticDir,
    /// A private tmpfs: `/tmp`, `$HOME`, `/dev/shm`.
    Private(&'static str),
    /// The sandbox's own `/proc`.
    Proc,
    /// The runtime and system files bound from the host (`/usr`, `/lib*`,
    /// `/etc/ld.so.cache`...), read-only.
    Runtime,
    /// A device node bound from the host (`/dev/null`, `/dev/urandom`...).
    Device,
    ReadGrant,
    WriteGrant,
    /// The program, bound read-only.
    Program,
    /// A path of a write grant kept read-only (`protect.rs`), with its reason.
    Protected(&'static str),
    /// Anything else (a pinned directory, the target of a protected link).
    Other,
}

impl Area {
    /// The sandbox's own file systems: a host path there is hidden.
    fn hides_host(&self) -> bool {
        matches!(self, Area::Skeleton | Area::SyntheticDir | Area::Private(_))
    }

    fn describe(&self) -> String {
        match self {
            Area::Skeleton => "the sandbox's root (only its mount points)".into(),
            Area::SyntheticDir => "the sandbox's minimal /etc or /dev".into(),
            Area::Private(what) => format!("the sandbox's private {what}"),
            Area::Proc => "the sandbox's /proc".into(),
            Area::Runtime => "the runtime (read-only)".into(),
            Area::Device => "a device of the sandbox's /dev".into(),
            Area::ReadGrant => "a read grant".into(),
            Area::WriteGrant => "a write grant".into(),
            Area::Program => "the program (read-only)".into(),
            Area::Protected(_) => "a protected path (read-only)".into(),
            Area::Other => "a read-only bind".into(),
        }
    }

    /// Why a write here is refused.
    fn read_only_reason(&self) -> String {
        match self {
            Area::Skeleton | Area::SyntheticDir => {
                "outside the sandbox's grants (the sandbox's root is read-only)".into()
            }
            Area::Runtime => "read-only runtime".into(),
            Area::ReadGrant => "read-only grant".into(),
            Area::Program => "read-only: the program".into(),
            Area::Protected(why) => format!("protected in a write grant: {why}"),
            Area::Proc => "read-only: host kernel settings".into(),
            Area::Private(_) | Area::WriteGrant | Area::Device | Area::Other => {
                "read-only mount".into()
            }
        }
    }

    /// Why a host path that is absent here is denied.
    fn hidden_reason(&self) -> String {
        match self {
            Area::Private(what) => format!(
                "outside the sandbox's grants (the sandbox has a private {what}; the host's is hidden)"
            ),
            _ => "outside the sandbox's grants".into(),
        }
    }
}

/// The policy's side of the layout: which mount points are which grant.
#[derive(Debug, Clone)]
pub struct Layout {
    read: Vec<Vec<u8>>,
    write: Vec<Vec<u8>>,
    home: Vec<u8>,
    program: Vec<u8>,
    /// (path, why, protected only when not a directory).
    protected: Vec<(Vec<u8>, &'static str, bool)>,
}

pub(crate) fn bytes(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

impl Layout {
    pub fn new(spec: &SandboxSpec) -> Layout {
        let plan = protected::plan(spec);
        let protected = plan
            .protect
            .iter()
            .map(|p| {
                let why = plan.why.get(p).copied().unwrap_or(protected::WARDEN_WHY);
                (bytes(p), why, plan.unless_dir.contains(p))
            })
            .collect();
        Layout {
            read: spec.read.iter().map(|p| bytes(p)).collect(),
            write: spec.write.iter().map(|p| bytes(p)).collect(),
            home: bytes(&spec.home),
            program: bytes(&spec.program),
            protected,
        }
    }

    /// The protected paths (host paths, inside write grants) and why.
    pub(crate) fn protected(&self) -> impl Iterator<Item = (&[u8], &'static str)> {
        self.protected.iter().map(|(p, w, _)| (p.as_slice(), *w))
    }

    /// Whether `point` is a write grant or lies in one.
    pub(crate) fn in_write_grant(&self, point: &[u8]) -> bool {
        self.write.iter().any(|w| under(point, w))
    }

    /// The area a mount is.
    pub fn area(&self, m: &Mount) -> Area {
        let p = m.point.as_slice();
        if m.fstype == "proc" {
            return Area::Proc;
        }
        if p == b"/" {
            return Area::Skeleton;
        }
        if m.fstype == "tmpfs" {
            match p {
                b"/etc" | b"/dev" => return Area::SyntheticDir,
                b"/tmp" => return Area::Private("/tmp"),
                b"/dev/shm" => return Area::Private("/dev/shm"),
                _ if p == self.home.as_slice() => return Area::Private("$HOME"),
                _ => {}
            }
        }
        if self.write.iter().any(|w| w.as_slice() == p) {
            return Area::WriteGrant;
        }
        if self.read.iter().any(|r| r.as_slice() == p) {
            return Area::ReadGrant;
        }
        // A `.git` directory is pinned read-write, not protected (only a
        // `.git` file is bound read-only).
        if let Some((_, why, _)) = self
            .protected
            .iter()
            .find(|(q, _, unless_dir)| q.as_slice() == p && (m.read_only || !unless_dir))
        {
            return Area::Protected(why);
        }
        if p == self.program.as_slice() {
            return Area::Program;
        }
        if under(p, b"/dev") {
            return Area::Device;
        }
        const SYSTEM: &[&[u8]] = &[
            b"/usr", b"/lib", b"/lib32", b"/lib64", b"/libx32", b"/bin", b"/sbin", b"/etc",
        ];
        if SYSTEM.iter().any(|s| under(p, s)) {
            return Area::Runtime;
        }
        Area::Other
    }
}

/// Allowed or denied, by the sandbox's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    Allow,
    Deny,
    /// The path could not be read or placed: nothing can be said.
    Unknown,
}

/// The judgement on one path of an access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub decision: Decision,
    /// The errno the caller gets from the sandbox (denials only).
    pub errno: Option<i32>,
    pub reason: String,
}

fn allow(reason: impl Into<String>) -> Verdict {
    Verdict {
        decision: Decision::Allow,
        errno: None,
        reason: reason.into(),
    }
}

fn deny(errno: Option<i32>, reason: impl Into<String>) -> Verdict {
    Verdict {
        decision: Decision::Deny,
        errno,
        reason: reason.into(),
    }
}

/// What is known about one path of an access, for [`decide`].
#[derive(Debug, Clone)]
pub struct Facts<'a> {
    pub access: Access,
    pub res: &'a Resolution,
    /// The area and flags of the mount the path (or its deepest existing
    /// directory) is on; `None` when it could not be placed.
    pub area: Option<Area>,
    pub read_only: bool,
    pub noexec: bool,
    /// The object is itself a mount point (grant roots, protected paths).
    pub mount_point: bool,
}

/// Judges one path of an access by the sandbox's layout. `host_has` is asked
/// (only for paths missing here, on the sandbox's own file systems) whether
/// the host has that path: then the sandbox hid it.
pub fn decide(f: &Facts<'_>, host_has: &mut dyn FnMut(&[u8]) -> bool) -> Verdict {
    let res = f.res;
    if res.proc {
        let sys = [
            b"/proc/sys".as_slice(),
            b"/proc/sysrq-trigger",
            b"/proc/irq",
            b"/proc/bus",
            b"/proc/fs",
        ];
        if matches!(f.access, Access::Modify | Access::Remove | Access::Create)
            && sys.iter().any(|s| under(&res.path, s))
        {
            return deny(Some(libc::EROFS), Area::Proc.read_only_reason());
        }
        return allow(Area::Proc.describe());
    }
    let Some(area) = &f.area else {
        return Verdict {
            decision: Decision::Unknown,
            errno: None,
            reason: "the path could not be placed in the sandbox's view".into(),
        };
    };
    if res.looped {
        return allow("too many levels of symbolic links");
    }
    if res.exists {
        if f.mount_point && f.access == Access::Remove {
            // unlink, rmdir or rename of a grant root or protected path.
            return deny(
                Some(libc::EBUSY),
                format!("a mount point of the sandbox ({})", area.describe()),
            );
        }
        return match f.access {
            Access::Modify | Access::Remove | Access::Create if f.read_only => {
                deny(Some(libc::EROFS), area.read_only_reason())
            }
            Access::Exec if f.noexec => deny(
                Some(libc::EACCES),
                format!("no-exec mount: {}", area.describe()),
            ),
            Access::Read if res.is_dir && matches!(area, Area::Skeleton | Area::SyntheticDir) => {
                deny(
                    None,
                    "outside the sandbox's grants: the host's directory is hidden, \
                     only the sandbox's own entries show",
                )
            }
            _ => allow(area.describe()),
        };
    }
    // Missing here. On a host bind (grant, runtime) it is missing on the host
    // too; on the sandbox's own file systems the host may have it.
    match f.access {
        Access::Create if res.parent_exists => {
            if f.read_only {
                deny(Some(libc::EROFS), area.read_only_reason())
            } else {
                allow(area.describe())
            }
        }
        Access::Create => {
            let parent = parent_of(&res.path);
            if area.hides_host() && host_has(&parent) {
                deny(Some(libc::ENOENT), area.hidden_reason())
            } else {
                allow("no such directory (on the host either)")
            }
        }
        _ => {
            if area.hides_host() && host_has(&res.path) {
                deny(Some(libc::ENOENT), area.hidden_reason())
            } else {
                allow("no such file (on the host either)")
            }
        }
    }
}

fn parent_of(path: &[u8]) -> Vec<u8> {
    match path.iter().rposition(|&b| b == b'/') {
        Some(0) | None => b"/".to_vec(),
        Some(i) => path[..i].to_vec(),
    }
}

// ---------------------------------------------------------------------------
// Capturing a call (the notifier's side, before it answers).

/// A path as the caller named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    pub name: Vec<u8>,
    /// What a relative name is relative to (the cwd's or the dirfd's path in
    /// the sandbox's view, as `/proc` reports it); `None` for absolute names.
    pub base: Option<Vec<u8>>,
}

/// One observed call, as read before it was let through.
#[derive(Debug)]
pub(crate) struct Captured {
    pub pid: u32,
    pub watched: &'static Watched,
    pub flags: u64,
    pub paths: [Option<Named>; 2],
    pub text: Option<Vec<u8>>,
    /// A path argument could not be read (the call then fails in the kernel
    /// too, with EFAULT or ENAMETOOLONG).
    pub unreadable: Option<Errno>,
    pub root: Option<Arc<SandboxRoot>>,
    /// The creation guard refused it ([`crate::supervise::guard`]): the errno and the
    /// protected name's reason.
    pub guard: Option<(i32, &'static str)>,
}

/// The notifier's state for observed calls.
pub(crate) struct Capturer {
    tx: QueueTx<Captured>,
    lost: Arc<AtomicU64>,
    /// `/proc/<pid>` fds by pid. A cached fd of a process that has died
    /// fails every lookup (it never turns into another process's), and is
    /// then replaced.
    procs: HashMap<u32, OwnedFd>,
    root: Option<Arc<SandboxRoot>>,
}

fn open_proc_pid(pid: u32) -> Result<OwnedFd, Errno> {
    let c = cstring(format!("/proc/{pid}").as_bytes())?;
    // SAFETY: NUL-terminated path; the fd is ours.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        Err(Errno::last())
    } else {
        // SAFETY: just returned to us.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// Whether notification `id` is still pending (its caller still waits in
/// the call, so its pid still names it).
pub(crate) fn id_valid(listener: RawFd, id: u64) -> bool {
    // SAFETY: ID_VALID reads the u64 we pass.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0 }
}

impl Capturer {
    pub(crate) fn new(tx: QueueTx<Captured>, lost: Arc<AtomicU64>) -> Capturer {
        Capturer {
            tx,
            lost,
            procs: HashMap::new(),
            root: None,
        }
    }

    /// `/proc/<pid>/<name>`'s link target, through the cached `/proc/<pid>`.
    fn link(&mut self, pid: u32, name: &[u8]) -> Result<Vec<u8>, Errno> {
        for attempt in 0..2 {
            if attempt == 1 || !self.procs.contains_key(&pid) {
                if self.procs.len() >= PROC_CACHE {
                    self.procs.clear();
                }
                self.procs.insert(pid, open_proc_pid(pid)?);
            }
            let dir = self.procs[&pid].as_raw_fd();
            match readlinkat(dir, name) {
                Ok(l) => return Ok(l),
                // A stale fd (an earlier process with this pid): reopen once.
                Err(Errno::ESRCH | Errno::ENOENT) if attempt == 0 => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Errno::ESRCH)
    }

    fn named(
        &mut self,
        n: &libc::seccomp_notif,
        arg: seccomp::PathArg,
        flags: u64,
    ) -> Result<Named, Errno> {
        let (name, too_long) = read_cstring(n.pid, n.data.args[usize::from(arg.path)], PATH_MAX)?;
        if too_long {
            return Err(Errno::ENAMETOOLONG);
        }
        let empty_ok = flags & libc::AT_EMPTY_PATH as u64 != 0;
        let base = if name.first() == Some(&b'/') {
            None
        } else if name.is_empty() && !empty_ok {
            // ENOENT in the kernel: nothing is looked up.
            None
        } else {
            let dirfd = arg
                .dirfd
                .map_or(libc::AT_FDCWD, |i| n.data.args[usize::from(i)] as i32);
            let which = if dirfd == libc::AT_FDCWD {
                b"cwd".to_vec()
            } else {
                format!("fd/{dirfd}").into_bytes()
            };
            Some(self.link(n.pid, &which).unwrap_or_default())
        };
        Ok(Named { name, base })
    }

    /// Reads what `n` (a call of `w`) names; returns `None` if the call is no
    /// longer pending (do not use anything read then). Runs while the caller
    /// waits: only reads, never blocks on anything but the caller's memory.
    pub(crate) fn capture(
        &mut self,
        listener: RawFd,
        n: &libc::seccomp_notif,
        w: &'static Watched,
    ) -> Option<Captured> {
        let mut unreadable = None;
        let flags = match w.flags {
            Flags::None => 0,
            Flags::Arg(i) => n.data.args[usize::from(i)],
            Flags::Fixed(v) => v,
            Flags::OpenHow(i) => {
                let mut b = [0u8; 8];
                match read_memory(n.pid, n.data.args[usize::from(i)], &mut b) {
                    Ok(8) => u64::from_ne_bytes(b),
                    Ok(_) => {
                        unreadable = Some(Errno::EFAULT);
                        0
                    }
                    Err(e) => {
                        unreadable = Some(e);
                        0
                    }
                }
            }
        };
        let mut paths = [None, None];
        for (slot, arg) in paths.iter_mut().zip(w.paths) {
            let Some(arg) = arg else { continue };
            // For linkat, AT_EMPTY_PATH applies to the old path only.
            let f = if slot_is_second(w, arg) { 0 } else { flags };
            match self.named(n, arg, f) {
                Ok(p) => *slot = Some(p),
                Err(e) => {
                    unreadable.get_or_insert(e);
                }
            }
        }
        let text = w.text.and_then(|i| {
            read_cstring(n.pid, n.data.args[usize::from(i)], PATH_MAX)
                .ok()
                .map(|(t, _)| t)
        });
        // The first observed call: the sandbox's root and mount table, the
        // same for every process inside (chroot, pivot_root and new mount
        // namespaces are refused).
        let fresh = match self.root {
            Some(_) => None,
            None => open_proc_pid(n.pid)
                .and_then(|dir| SandboxRoot::open(dir.as_fd()))
                .ok()
                .map(Arc::new),
        };
        // Everything read above came from the caller only if it is still
        // waiting in this call now (the root too: kept only then).
        if !id_valid(listener, n.id) {
            return None;
        }
        if fresh.is_some() {
            self.root = fresh;
        }
        Some(Captured {
            pid: n.pid,
            watched: w,
            flags,
            paths,
            text,
            unreadable,
            root: self.root.clone(),
            guard: None,
        })
    }

    /// Queues a capture for the consumer; never waits (a full queue counts it
    /// as lost).
    pub(crate) fn queue(&self, c: Captured) {
        match self.tx.try_send(c) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

fn slot_is_second(w: &Watched, arg: seccomp::PathArg) -> bool {
    w.paths[1] == Some(arg)
}

// ---------------------------------------------------------------------------
// Classifying (the consumer's side).

/// One observed file access, judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileAccess {
    /// The caller, as a pid of the daemon's pid namespace.
    pub pid: u32,
    /// `openat`, `execve`...
    pub syscall: &'static str,
    pub action: Action,
    /// The path exactly as the server named it (relative paths stay relative).
    pub path: Vec<u8>,
    /// Absolute, in the sandbox's view (which mirrors host paths), symlinks
    /// resolved as far as the path exists.
    pub resolved: Vec<u8>,
    /// rename, link: the new name, as named and resolved.
    pub to: Option<(Vec<u8>, Vec<u8>)>,
    /// symlink: the link's content.
    pub target: Option<Vec<u8>>,
    /// The call's flags (open flags, `AT_*`, `RENAME_*`).
    pub flags: u64,
    pub decision: Decision,
    pub errno: Option<i32>,
    pub reason: String,
}

/// The action and what it does to each path, from the call and its flags.
fn action_of(op: FileOp, flags: u64, exists: bool) -> (Action, Access, Option<Access>) {
    match op {
        FileOp::Open => {
            let f = flags as i32;
            if f & libc::O_PATH != 0 {
                return (Action::OpenPath, Access::Read, None);
            }
            if f & libc::O_TMPFILE == libc::O_TMPFILE {
                // An unnamed file in the directory: a write to it.
                return (Action::Create, Access::Modify, None);
            }
            let acc = f & libc::O_ACCMODE;
            let writes = acc == libc::O_WRONLY || acc == libc::O_RDWR || f & libc::O_TRUNC != 0;
            // The action follows the flags alone (the call has already run
            // when it is classified: a file it created exists by then); what
            // it does to the path depends on whether the path exists.
            let access = match (exists, writes) {
                (false, _) if f & libc::O_CREAT != 0 => Access::Create,
                (_, true) => Access::Modify,
                (_, false) => Access::Read,
            };
            let action = match (f & libc::O_CREAT != 0, writes) {
                (true, _) => Action::Create,
                (false, true) => Action::OpenWrite,
                (false, false) => Action::OpenRead,
            };
            (action, access, None)
        }
        FileOp::Exec => (Action::Exec, Access::Exec, None),
        FileOp::Unlink if flags & libc::AT_REMOVEDIR as u64 != 0 => {
            (Action::Rmdir, Access::Remove, None)
        }
        FileOp::Unlink => (Action::Unlink, Access::Remove, None),
        FileOp::Rmdir => (Action::Rmdir, Access::Remove, None),
        FileOp::Mkdir => (Action::Mkdir, Access::Create, None),
        FileOp::Mknod => (Action::Mknod, Access::Create, None),
        FileOp::Rename => (Action::Rename, Access::Remove, Some(Access::Create)),
        FileOp::Link => (Action::Link, Access::Read, Some(Access::Create)),
        FileOp::Symlink => (Action::Symlink, Access::Create, None),
        FileOp::Truncate => (Action::Truncate, Access::Modify, None),
        FileOp::Chmod => (Action::Chmod, Access::Modify, None),
        FileOp::Chown => (Action::Chown, Access::Modify, None),
    }
}

/// Whether the last component of the first path is followed.
fn follows_last(op: FileOp, flags: u64) -> bool {
    let nofollow = flags & libc::AT_SYMLINK_NOFOLLOW as u64 != 0;
    match op {
        FileOp::Open => (flags as i32) & libc::O_NOFOLLOW == 0,
        FileOp::Exec => !nofollow,
        FileOp::Truncate => true,
        FileOp::Chmod | FileOp::Chown => !nofollow,
        // linkat follows the old path only with AT_SYMLINK_FOLLOW.
        FileOp::Link => flags & libc::AT_SYMLINK_FOLLOW as u64 != 0,
        FileOp::Unlink
        | FileOp::Rmdir
        | FileOp::Mkdir
        | FileOp::Mknod
        | FileOp::Rename
        | FileOp::Symlink => false,
    }
}

/// The absolute path a named path starts from, in the sandbox's view; `None`
/// when its base is not a directory path (`pipe:[..]`, `anon_inode:..`,
/// a deleted directory).
/// [`absolute`], for the creation guard.
pub(crate) fn absolute_of(n: &Named) -> Option<Vec<u8>> {
    absolute(n)
}

/// The mount id of what `fd` is.
pub(crate) fn mount_id_of(fd: BorrowedFd<'_>) -> Option<u64> {
    stat_fd(fd).ok().map(|(_, m)| m).filter(|&m| m != 0)
}

/// The file type (`S_IFMT` bits) of what `fd` is, not followed.
pub(crate) fn kind_of(fd: BorrowedFd<'_>) -> Option<u32> {
    stat_fd(fd).ok().map(|(k, _)| k)
}

fn absolute(n: &Named) -> Option<Vec<u8>> {
    let Some(base) = &n.base else {
        return Some(n.name.clone());
    };
    if base.first() != Some(&b'/') || base.ends_with(b" (deleted)") {
        return None;
    }
    let mut p = base.clone();
    if !n.name.is_empty() {
        p.push(b'/');
        p.extend_from_slice(&n.name);
    }
    Some(p)
}

/// Judges one path; returns its resolution (or the path as far as it can be
/// said) and the verdict.
fn judge(
    root: Option<&SandboxRoot>,
    layout: &Layout,
    n: &Named,
    access: Access,
    follow_last: bool,
    host_has: &mut dyn FnMut(&[u8]) -> bool,
) -> (Vec<u8>, Verdict, bool) {
    if n.name.is_empty() && n.base.is_none() {
        return (Vec::new(), allow("empty path"), false);
    }
    let Some(abs) = absolute(n) else {
        let base = n.base.clone().unwrap_or_default();
        return (
            base,
            allow("relative to something that is not a directory"),
            false,
        );
    };
    let Some(root) = root else {
        return (
            normalize(&abs),
            Verdict {
                decision: Decision::Unknown,
                errno: None,
                reason: "the sandbox's root could not be opened".into(),
            },
            false,
        );
    };
    let res = resolve(root, &abs, follow_last);
    let mount = res
        .mount_id
        .and_then(|id| root.mount(id))
        .or_else(|| root.mount_of_path(&res.path));
    let facts = Facts {
        access,
        res: &res,
        area: mount.map(|m| layout.area(m)),
        read_only: mount.is_some_and(|m| m.read_only),
        noexec: mount.is_some_and(|m| m.noexec),
        mount_point: res.exists && root.mounts.iter().any(|m| m.point == res.path),
    };
    let v = decide(&facts, host_has);
    (res.path.clone(), v, res.exists)
}

/// Classifies a capture.
pub(crate) fn classify(
    c: &Captured,
    layout: &Layout,
    host_has: &mut dyn FnMut(&[u8]) -> bool,
) -> FileAccess {
    let w = c.watched;
    let syscall = w.name.strip_prefix("SYS_").unwrap_or(w.name);
    let root = c.root.as_deref();
    let first = c.paths[0].as_ref();
    // Whether the first path exists decides between create and open for
    // O_CREAT: resolve once to know.
    let follow = follows_last(w.op, c.flags);
    let exists = match (first, root) {
        (Some(n), Some(r)) if w.op == FileOp::Open => {
            absolute(n).is_some_and(|abs| resolve(r, &abs, follow).exists)
        }
        _ => false,
    };
    let (action, access, second) = action_of(w.op, c.flags, exists);
    let mut out = FileAccess {
        pid: c.pid,
        syscall,
        action,
        path: first.map(|n| n.name.clone()).unwrap_or_default(),
        resolved: Vec::new(),
        to: None,
        target: c.text.clone(),
        flags: c.flags,
        decision: Decision::Unknown,
        errno: None,
        reason: String::new(),
    };
    if let Some(e) = c.unreadable {
        out.reason = format!("a path argument could not be read ({})", e.desc());
        if let Some(n) = first {
            out.resolved = absolute(n).map(|p| normalize(&p)).unwrap_or_default();
        }
        return out;
    }
    let Some(n) = first else {
        out.reason = "no path".into();
        return out;
    };
    let (resolved, v1, _) = judge(root, layout, n, access, follow, host_has);
    out.resolved = resolved;
    let mut verdict = v1;
    if let (Some(acc2), Some(n2)) = (second, c.paths[1].as_ref()) {
        let (resolved2, v2, _) = judge(root, layout, n2, acc2, false, host_has);
        out.to = Some((n2.name.clone(), resolved2));
        if verdict.decision != Decision::Deny && v2.decision != Decision::Allow {
            verdict = Verdict {
                reason: format!("new name: {}", v2.reason),
                ..v2
            };
        }
    }
    out.decision = verdict.decision;
    out.errno = verdict.errno;
    out.reason = verdict.reason;
    if let Some((errno, why)) = c.guard {
        out.decision = Decision::Deny;
        out.errno = Some(errno);
        out.reason = format!("protected in a write grant: {why} (refused by the creation guard)");
    }
    out
}

/// The notifier's configuration for observed calls.
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    pub level: FileAudit,
    pub layout: Layout,
}

impl Watch {
    /// `None` when the spec's layers neither watch file accesses nor guard
    /// creations; with the guard alone (level `off`), only its refusals are
    /// reported.
    pub(crate) fn from_spec(spec: &SandboxSpec) -> Option<Watch> {
        let l = spec.layers;
        (l.watch_files || l.guard).then(|| Watch {
            level: if l.watch_files {
                spec.audit_files
            } else {
                FileAudit::Off
            },
            layout: Layout::new(spec),
        })
    }
}

/// The consumer's end of a sandbox's observed file accesses.
pub struct FileAccesses {
    rx: QueueRx<Captured>,
    lost: Arc<AtomicU64>,
    level: FileAudit,
    layout: Layout,
    /// When the last access was taken (for [`FileAccesses::recv_timeout`]).
    last: std::cell::Cell<Option<Instant>>,
    sync_wake_up: bool,
}

/// How often a busy queue is drained.
pub const BATCH_INTERVAL: Duration = Duration::from_millis(5);
/// How long after the last access the queue counts as busy.
const BUSY: Duration = Duration::from_millis(200);

impl std::fmt::Debug for FileAccesses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileAccesses")
            .field("level", &self.level)
            .field("lost", &self.lost())
            .finish_non_exhaustive()
    }
}

impl FileAccesses {
    pub(crate) fn new(
        rx: QueueRx<Captured>,
        lost: Arc<AtomicU64>,
        w: Watch,
        sync_wake_up: bool,
    ) -> FileAccesses {
        FileAccesses {
            rx,
            lost,
            level: w.level,
            layout: w.layout,
            last: std::cell::Cell::new(None),
            sync_wake_up,
        }
    }

    /// Whether the kernel hands the CPU straight between the caller and the
    /// notifier (`SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`, Linux 6.6+), which
    /// keeps an observed call's round trip on one CPU.
    pub fn sync_wake_up(&self) -> bool {
        self.sync_wake_up
    }

    /// The level asked for.
    pub fn level(&self) -> FileAudit {
        self.level
    }

    /// The next access to report at this level (`denied`: denials and
    /// accesses that could not be judged; `all`: every one), classified on
    /// the calling thread. `Disconnected` once the sandbox is gone and
    /// everything queued has been taken.
    ///
    /// While accesses keep coming, the queue is drained every
    /// [`BATCH_INTERVAL`] instead of being waited on: a waiting receiver
    /// costs the notifier a wake-up (a futex call and a context switch on the
    /// server's path) for every access; a sleeping one costs nothing.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<FileAccess, RecvTimeoutError> {
        let deadline = Instant::now() + timeout;
        loop {
            let c = match self.rx.try_recv() {
                Ok(c) => c,
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {
                    let now = Instant::now();
                    let left = deadline.saturating_duration_since(now);
                    if left.is_zero() {
                        return Err(RecvTimeoutError::Timeout);
                    }
                    let busy = self.last.get().is_some_and(|t| now - t < BUSY);
                    if busy {
                        std::thread::sleep(BATCH_INTERVAL.min(left));
                        continue;
                    }
                    self.rx.recv_timeout(left)?
                }
            };
            self.last.set(Some(Instant::now()));
            if self.level == FileAudit::Off && c.guard.is_none() {
                continue;
            }
            let a = classify(&c, &self.layout, &mut |p| host_has(p));
            if self.level == FileAudit::All || a.decision != Decision::Allow {
                return Ok(a);
            }
        }
    }

    /// The next access to report at this level if one is queued now
    /// (classified on the calling thread, which may take file system calls:
    /// not on an event loop's thread); never waits for one. `Empty` when
    /// nothing reportable is queued, `Disconnected` once the sandbox is gone
    /// and everything queued has been taken.
    pub fn try_recv(&self) -> Result<FileAccess, TryRecvError> {
        loop {
            let c = self.rx.try_recv()?;
            self.last.set(Some(Instant::now()));
            if self.level == FileAudit::Off && c.guard.is_none() {
                continue;
            }
            let a = classify(&c, &self.layout, &mut |p| host_has(p));
            if self.level == FileAudit::All || a.decision != Decision::Allow {
                return Ok(a);
            }
        }
    }

    /// Whether accesses came within the last [`BUSY`] period: a consumer
    /// then drains every [`BATCH_INTERVAL`] rather than waiting for a
    /// wake-up (which would cost the notifier a system call per access).
    pub fn busy(&self) -> bool {
        self.last.get().is_some_and(|t| t.elapsed() < BUSY)
    }

    /// Accesses not reported because the queue was full (the calls themselves
    /// went through, unobserved).
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn me() -> u32 {
        std::process::id()
    }

    #[test]
    fn reads_a_string_from_a_process() {
        let s = b"/home/ana/.ssh/id_rsa\0trailing".to_vec();
        let (got, long) = read_cstring(me(), s.as_ptr() as u64, PATH_MAX).unwrap();
        assert_eq!(
            (got.as_slice(), long),
            (&b"/home/ana/.ssh/id_rsa"[..], false)
        );
        // Empty string, NULL.
        let e = b"\0".to_vec();
        assert_eq!(
            read_cstring(me(), e.as_ptr() as u64, PATH_MAX).unwrap().0,
            b""
        );
        assert_eq!(read_cstring(me(), 0, PATH_MAX), Err(Errno::EFAULT));
    }

    /// Two pages, the second unmapped after filling the first: a string that
    /// ends right before the hole reads fine, one that runs into it is EFAULT
    /// (as the kernel's own copy would be), and one across two mapped pages
    /// is read whole.
    #[test]
    fn reads_page_by_page_and_stops_at_a_hole() {
        let page = page_size();
        // SAFETY: an anonymous private mapping of two pages, unmapped below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        // SAFETY: the mapping is ours and 2 pages long.
        let mem = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, 2 * page) };
        mem.fill(b'a');
        // Across the page boundary: starts 10 bytes before it.
        let start = page - 10;
        mem[page + 5] = 0;
        let (got, long) = read_cstring(me(), (base as u64) + start as u64, PATH_MAX).unwrap();
        assert_eq!((got.len(), long), (15, false));
        // No NUL within the limit: truncated, flagged.
        mem[page + 5] = b'a';
        let (got, long) = read_cstring(me(), base as u64, 100).unwrap();
        assert_eq!((got.len(), long), (100, true));
        assert_eq!(
            // SAFETY: unmapping the second page of our own mapping.
            unsafe { libc::munmap((base as usize + page) as *mut _, page) },
            0
        );
        mem[page - 1] = 0;
        let (got, _) = read_cstring(me(), (base as u64) + start as u64, PATH_MAX).unwrap();
        assert_eq!(got.len(), 9);
        mem[page - 1] = b'a';
        assert_eq!(
            read_cstring(me(), (base as u64) + start as u64, PATH_MAX),
            Err(Errno::EFAULT)
        );
        // SAFETY: the first page is still ours.
        unsafe { libc::munmap(base, page) };
    }

    /// Another process's memory: a forked child changes its copy of a buffer;
    /// reading the child's pid gives the child's bytes, not ours.
    #[test]
    fn reads_another_processs_memory() {
        let mut buf = *b"/parent/path\0\0\0\0";
        let (r, w) = nix::unistd::pipe().unwrap();
        let (r2, w2) = nix::unistd::pipe().unwrap();
        // SAFETY: the child only writes to its own buffer and pipes, then _exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                buf[..12].copy_from_slice(b"/child/path\0");
                let _ = nix::unistd::write(&w, b"x");
                let mut b = [0u8; 1];
                let _ = nix::unistd::read(&r2, &mut b);
                // SAFETY: leaving the forked child without running destructors.
                unsafe { libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                let mut b = [0u8; 1];
                nix::unistd::read(&r, &mut b).unwrap();
                let got = read_cstring(child.as_raw() as u32, buf.as_ptr() as u64, PATH_MAX);
                let _ = nix::unistd::write(&w2, b"x");
                nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(got.unwrap().0, b"/child/path");
                assert_eq!(&buf[..12], b"/parent/path");
            }
        }
    }

    /// Review F14: a path below an automount (or network, FUSE) mount point
    /// is never looked up on the host; elsewhere it is.
    #[test]
    fn host_paths_below_automounts_are_not_looked_up() {
        let points = vec![b"/net".to_vec(), b"/home/ldap".to_vec()];
        assert!(below_any(b"/net/secret.attacker.example/x", &points));
        assert!(below_any(b"/net", &points));
        assert!(below_any(b"/home/ldap/u", &points));
        assert!(!below_any(b"/network/x", &points));
        assert!(!below_any(b"/home/u", &points));
        // On this machine: a real path is found, a missing one is not.
        assert!(host_has(b"/usr/bin"));
        assert!(!host_has(b"/no/such/path/here"));
    }

    #[test]
    fn mountinfo_lines_are_parsed_with_their_escapes() {
        let text = "120 44 0:56 / / ro,nosuid,nodev,relatime - tmpfs none rw,size=1024k\n\
            121 120 254:0 /usr /usr ro,nosuid,nodev,relatime - ext4 /dev/vda rw\n\
            138 132 0:59 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs none rw\n\
            146 120 254:0 /a\\040b /home/u/a\\040b rw,relatime shared:1 master:2 - ext4 /dev/vda rw\n\
            garbage\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 4);
        assert_eq!(
            m[0],
            Mount {
                id: 120,
                dev: "0:56".into(),
                point: b"/".to_vec(),
                read_only: true,
                noexec: false,
                fstype: "tmpfs".into()
            }
        );
        assert!(m[2].noexec && !m[2].read_only);
        assert_eq!(m[3].point, b"/home/u/a b");
        assert_eq!(m[3].fstype, "ext4");
    }

    /// A scratch "sandbox root" (a tempdir) and what resolves in it.
    fn root_dir() -> (tempfile::TempDir, SandboxRoot) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        for dir in ["usr/lib", "etc", "data/sub", "proc"] {
            std::fs::create_dir_all(p.join(dir)).unwrap();
        }
        std::fs::write(p.join("usr/lib/libc.so.6"), "").unwrap();
        std::fs::write(p.join("data/file"), "").unwrap();
        symlink("usr/lib", p.join("lib")).unwrap();
        symlink("/etc/passwd", p.join("data/abs")).unwrap();
        symlink("../../usr/lib/libc.so.6", p.join("data/sub/rel")).unwrap();
        symlink("loop2", p.join("data/loop1")).unwrap();
        symlink("loop1", p.join("data/loop2")).unwrap();
        symlink("/proc/self/fd/0", p.join("data/stdin")).unwrap();
        let fd: OwnedFd = std::fs::File::open(p).unwrap().into();
        let root = SandboxRoot::new(
            fd,
            vec![Mount {
                id: 0,
                dev: "0:1".into(),
                point: b"/".to_vec(),
                read_only: true,
                noexec: false,
                fstype: "ext4".into(),
            }],
        );
        (d, root)
    }

    /// Both ways of resolving agree wherever the fast one answers.
    fn res(root: &SandboxRoot, path: &str, follow: bool) -> Resolution {
        let r = resolve(root, path.as_bytes(), follow);
        let by_hand = resolve_by_hand(root.root.as_fd(), path.as_bytes(), follow);
        assert_eq!(r, by_hand, "{path}");
        r
    }

    #[test]
    fn resolution_stays_inside_the_root_and_follows_links_by_hand() {
        let (_d, root) = root_dir();
        let r = res(&root, "/lib/libc.so.6", true);
        assert_eq!(r.path, b"/usr/lib/libc.so.6");
        assert!(r.exists && !r.is_dir && r.mount_id.is_some());
        // An absolute link restarts at *this* root, never the host's.
        let r = res(&root, "/data/abs", true);
        assert_eq!(r.path, b"/etc/passwd");
        assert!(!r.exists && r.parent_exists);
        // Not followed when the last component must not be.
        let r = res(&root, "/data/abs", false);
        assert_eq!(r.path, b"/data/abs");
        assert!(r.exists);
        let r = res(&root, "/data/sub/rel", true);
        assert_eq!(r.path, b"/usr/lib/libc.so.6");
        // `..` cannot climb above the root.
        let r = res(&root, "/../../../data/./file", true);
        assert_eq!(r.path, b"/data/file");
        assert!(r.exists);
        // Missing: the rest as written, and whether the parent exists.
        let r = res(&root, "/data/nope/x", true);
        assert_eq!(r.path, b"/data/nope/x");
        assert!(!r.exists && !r.parent_exists);
        let r = res(&root, "/data/new", true);
        assert!(!r.exists && r.parent_exists);
        // A file used as a directory.
        let r = res(&root, "/data/file/x", true);
        assert!(!r.exists && !r.parent_exists);
        // Loops end.
        let r = res(&root, "/data/loop1", true);
        assert!(r.looped && !r.exists);
        // The root itself.
        let r = res(&root, "/", true);
        assert_eq!(
            (r.path.as_slice(), r.exists, r.is_dir),
            (&b"/"[..], true, true)
        );
    }

    #[test]
    fn proc_is_not_resolved_but_its_root_link_is() {
        let (_d, root) = root_dir();
        let r = res(&root, "/data/stdin", true);
        assert!(r.proc, "{r:?}");
        assert_eq!(r.path, b"/proc/self/fd/0");
        let r = res(&root, "/proc/self/fd/../cwd", true);
        assert!(r.proc);
        assert_eq!(r.path, b"/proc/self/cwd");
        let r = res(&root, "/proc/1/root/lib/libc.so.6", true);
        assert!(!r.proc && r.exists);
        assert_eq!(r.path, b"/usr/lib/libc.so.6");
    }

    fn resolution(exists: bool, parent_exists: bool, is_dir: bool, path: &str) -> Resolution {
        Resolution {
            path: path.as_bytes().to_vec(),
            exists,
            parent_exists,
            is_dir,
            mount_id: Some(1),
            proc: false,
            looped: false,
        }
    }

    fn judge_with(
        access: Access,
        r: &Resolution,
        area: Area,
        read_only: bool,
        host: bool,
    ) -> Verdict {
        let noexec = matches!(area, Area::SyntheticDir);
        let f = Facts {
            access,
            res: r,
            area: Some(area),
            read_only,
            noexec,
            mount_point: false,
        };
        decide(&f, &mut |_| host)
    }

    #[test]
    fn hidden_host_paths_are_denied_only_if_the_host_has_them() {
        let r = resolution(false, false, false, "/home/ana/.ssh/id_rsa");
        for area in [
            Area::Private("$HOME"),
            Area::Skeleton,
            Area::Private("/tmp"),
        ] {
            let v = judge_with(Access::Read, &r, area.clone(), false, true);
            assert_eq!(
                (v.decision, v.errno),
                (Decision::Deny, Some(libc::ENOENT)),
                "{area:?}"
            );
            assert!(
                v.reason.starts_with("outside the sandbox's grants"),
                "{}",
                v.reason
            );
            // Control: absent on the host too, nothing was hidden.
            let v = judge_with(Access::Read, &r, area, false, false);
            assert_eq!(v.decision, Decision::Allow);
        }
        let v = judge_with(Access::Read, &r, Area::Private("$HOME"), false, true);
        assert!(v.reason.contains("private $HOME"), "{}", v.reason);
        // On a host bind (grant, runtime) a missing file is missing on the
        // host too: never asked.
        let f = Facts {
            access: Access::Exec,
            res: &r,
            area: Some(Area::ReadGrant),
            read_only: true,
            noexec: false,
            mount_point: false,
        };
        let v = decide(&f, &mut |_| panic!("the host is not asked for a grant"));
        assert_eq!(v.decision, Decision::Allow);
    }

    #[test]
    fn writes_to_read_only_mounts_are_denied_with_the_mounts_reason() {
        let exists = resolution(true, true, false, "/r/data.txt");
        let new = resolution(false, true, false, "/r/new");
        for (access, r) in [
            (Access::Modify, &exists),
            (Access::Remove, &exists),
            (Access::Create, &new),
        ] {
            let v = judge_with(access, r, Area::ReadGrant, true, false);
            assert_eq!(
                (v.decision, v.errno, v.reason.as_str()),
                (Decision::Deny, Some(libc::EROFS), "read-only grant"),
                "{access:?}"
            );
            // Control: the same on a write grant is allowed.
            let v = judge_with(access, r, Area::WriteGrant, false, false);
            assert_eq!(v.decision, Decision::Allow, "{access:?}");
        }
        let v = judge_with(
            Access::Modify,
            &exists,
            Area::Protected("git runs hooks"),
            true,
            false,
        );
        assert_eq!(v.reason, "protected in a write grant: git runs hooks");
        let v = judge_with(Access::Create, &new, Area::Runtime, true, false);
        assert_eq!(v.reason, "read-only runtime");
        // Reading a read grant is fine.
        let v = judge_with(Access::Read, &exists, Area::ReadGrant, true, false);
        assert_eq!(
            (v.decision, v.reason.as_str()),
            (Decision::Allow, "a read grant")
        );
        // Creating where the parent is missing: hidden if the host has the parent.
        let deep = resolution(false, false, false, "/opt/tool/new");
        let v = judge_with(Access::Create, &deep, Area::Skeleton, true, true);
        assert_eq!((v.decision, v.errno), (Decision::Deny, Some(libc::ENOENT)));
        let v = judge_with(Access::Create, &deep, Area::Skeleton, true, false);
        assert_eq!(v.decision, Decision::Allow);
        // Creating directly in the read-only skeleton.
        let top = resolution(false, true, false, "/newdir");
        let v = judge_with(Access::Create, &top, Area::Skeleton, true, false);
        assert_eq!((v.decision, v.errno), (Decision::Deny, Some(libc::EROFS)));
    }

    #[test]
    fn listing_the_skeleton_exec_on_noexec_and_mount_points() {
        let dir = resolution(true, true, true, "/home");
        let v = judge_with(Access::Read, &dir, Area::Skeleton, true, true);
        assert_eq!((v.decision, v.errno), (Decision::Deny, None));
        // Control: a directory of a grant or of the private home lists fine.
        for area in [Area::ReadGrant, Area::Private("$HOME"), Area::Runtime] {
            assert_eq!(
                judge_with(Access::Read, &dir, area, true, true).decision,
                Decision::Allow
            );
        }
        let file = resolution(true, true, false, "/dev/shm/x");
        let v = judge_with(Access::Exec, &file, Area::SyntheticDir, false, false);
        assert_eq!((v.decision, v.errno), (Decision::Deny, Some(libc::EACCES)));
        let v = judge_with(Access::Exec, &file, Area::WriteGrant, false, false);
        assert_eq!(v.decision, Decision::Allow);
        let grant_root = resolution(true, true, true, "/p/out");
        let f = Facts {
            access: Access::Remove,
            res: &grant_root,
            area: Some(Area::WriteGrant),
            read_only: false,
            noexec: false,
            mount_point: true,
        };
        let v = decide(&f, &mut |_| false);
        assert_eq!((v.decision, v.errno), (Decision::Deny, Some(libc::EBUSY)));
        // Writing into a mount point (a device node, a grant root) is no removal.
        let f = Facts {
            access: Access::Modify,
            ..f
        };
        assert_eq!(decide(&f, &mut |_| false).decision, Decision::Allow);
    }

    #[test]
    fn proc_is_the_sandboxs_own_but_host_settings_stay_read_only() {
        let mut r = resolution(false, false, false, "/proc/sys/kernel/core_pattern");
        r.proc = true;
        let v = judge_with(Access::Modify, &r, Area::Proc, false, true);
        assert_eq!((v.decision, v.errno), (Decision::Deny, Some(libc::EROFS)));
        let v = judge_with(Access::Read, &r, Area::Proc, false, true);
        assert_eq!(v.decision, Decision::Allow);
        r.path = b"/proc/self/fd/1".to_vec();
        let v = judge_with(Access::Modify, &r, Area::Proc, false, true);
        assert_eq!(v.decision, Decision::Allow);
    }

    fn spec() -> SandboxSpec {
        serde_json::from_value(serde_json::json!({
            "session_id": "s",
            "program": "/opt/srv/bin/server",
            "argv": [b"server"],
            "env": [],
            "cwd": "/",
            "read": ["/data/ro"],
            "write": ["/p"],
            "home": "/home/ana",
            "uid": 1000,
            "gid": 1000,
            "user": "ana",
            "tmp_size_mb": 1,
            "audit_files": "denied",
            "layers": crate::spec::Layers::NONE,
        }))
        .unwrap()
    }

    fn mount(point: &str, fstype: &str, ro: bool) -> Mount {
        Mount {
            id: 1,
            dev: "0:1".into(),
            point: point.as_bytes().to_vec(),
            read_only: ro,
            noexec: false,
            fstype: fstype.into(),
        }
    }

    #[test]
    fn mounts_are_named_after_the_spec() {
        let l = Layout::new(&spec());
        let area = |p: &str, fs: &str, ro: bool| l.area(&mount(p, fs, ro));
        assert_eq!(area("/", "tmpfs", true), Area::Skeleton);
        assert_eq!(area("/etc", "tmpfs", true), Area::SyntheticDir);
        assert_eq!(area("/dev", "tmpfs", true), Area::SyntheticDir);
        assert_eq!(area("/tmp", "tmpfs", false), Area::Private("/tmp"));
        assert_eq!(area("/home/ana", "tmpfs", false), Area::Private("$HOME"));
        assert_eq!(area("/dev/shm", "tmpfs", false), Area::Private("/dev/shm"));
        assert_eq!(area("/proc", "proc", false), Area::Proc);
        assert_eq!(area("/proc/sys", "proc", true), Area::Proc);
        assert_eq!(area("/data/ro", "ext4", true), Area::ReadGrant);
        assert_eq!(area("/p", "ext4", false), Area::WriteGrant);
        assert_eq!(area("/opt/srv/bin/server", "ext4", true), Area::Program);
        assert_eq!(area("/usr", "ext4", true), Area::Runtime);
        assert_eq!(area("/etc/ssl", "ext4", true), Area::Runtime);
        assert_eq!(area("/dev/null", "devtmpfs", false), Area::Device);
        assert!(
            matches!(area("/p/.git", "ext4", true), Area::Protected(why) if why.contains("hooks"))
        );
        assert_eq!(area("/elsewhere", "ext4", true), Area::Other);
    }

    #[test]
    fn flags_decide_the_action() {
        let o = |f: i32, exists| action_of(FileOp::Open, f as u64, exists).0;
        assert_eq!(o(libc::O_RDONLY, true), Action::OpenRead);
        assert_eq!(
            o(libc::O_RDONLY | libc::O_DIRECTORY, true),
            Action::OpenRead
        );
        assert_eq!(o(libc::O_WRONLY, true), Action::OpenWrite);
        assert_eq!(o(libc::O_RDWR, true), Action::OpenWrite);
        assert_eq!(o(libc::O_RDONLY | libc::O_TRUNC, true), Action::OpenWrite);
        assert_eq!(o(libc::O_WRONLY | libc::O_CREAT, false), Action::Create);
        assert_eq!(o(libc::O_WRONLY | libc::O_CREAT, true), Action::Create);
        let acc = |f: i32, exists| action_of(FileOp::Open, f as u64, exists).1;
        assert_eq!(acc(libc::O_WRONLY | libc::O_CREAT, false), Access::Create);
        assert_eq!(acc(libc::O_WRONLY | libc::O_CREAT, true), Access::Modify);
        assert_eq!(acc(libc::O_RDONLY | libc::O_CREAT, true), Access::Read);
        assert_eq!(acc(libc::O_RDONLY | libc::O_CREAT, false), Access::Create);
        assert_eq!(o(libc::O_PATH, true), Action::OpenPath);
        assert_eq!(o(libc::O_TMPFILE | libc::O_RDWR, true), Action::Create);
        let u = |f: i32| action_of(FileOp::Unlink, f as u64, true).0;
        assert_eq!(u(0), Action::Unlink);
        assert_eq!(u(libc::AT_REMOVEDIR), Action::Rmdir);
        let (a, first, second) = action_of(FileOp::Rename, 0, true);
        assert_eq!(
            (a, first, second),
            (Action::Rename, Access::Remove, Some(Access::Create))
        );
        let (a, first, second) = action_of(FileOp::Link, 0, true);
        assert_eq!(
            (a, first, second),
            (Action::Link, Access::Read, Some(Access::Create))
        );
        assert!(follows_last(FileOp::Open, 0));
        assert!(!follows_last(FileOp::Open, libc::O_NOFOLLOW as u64));
        assert!(!follows_last(FileOp::Unlink, 0));
        assert!(!follows_last(
            FileOp::Chown,
            libc::AT_SYMLINK_NOFOLLOW as u64
        ));
        assert!(follows_last(FileOp::Link, libc::AT_SYMLINK_FOLLOW as u64));
        assert!(!follows_last(FileOp::Link, 0));
    }

    /// A capture judged end to end against a scratch root and a made-up mount
    /// table (one read-only mount for the whole root).
    #[test]
    fn captures_are_classified_against_the_root() {
        let (d, root) = root_dir();
        let root = Arc::new(root);
        let layout = Layout::new(&spec());
        let w = |name: &str| seccomp::WATCHED.iter().find(|w| w.name == name).unwrap();
        let capture = |w: &'static Watched, flags: u64, p: &str, base: Option<&str>| Captured {
            pid: 1,
            watched: w,
            flags,
            paths: [
                Some(Named {
                    name: p.as_bytes().to_vec(),
                    base: base.map(|b| b.as_bytes().to_vec()),
                }),
                None,
            ],
            text: None,
            unreadable: None,
            root: Some(root.clone()),
            guard: None,
        };
        let mut host = |_: &[u8]| true;
        let a = classify(
            &capture(w("SYS_openat"), 0, "sub/rel", Some("/data")),
            &layout,
            &mut host,
        );
        assert_eq!(a.path, b"sub/rel");
        assert_eq!(a.resolved, b"/usr/lib/libc.so.6");
        assert_eq!(
            (a.action, a.decision, a.syscall),
            (Action::OpenRead, Decision::Allow, "openat")
        );
        let creat = (libc::O_CREAT | libc::O_WRONLY) as u64;
        let a = classify(
            &capture(w("SYS_openat"), creat, "/data/new", None),
            &layout,
            &mut host,
        );
        assert_eq!(
            (a.action, a.decision, a.errno),
            (Action::Create, Decision::Deny, Some(libc::EROFS))
        );
        let a = classify(
            &capture(w("SYS_openat"), 0, "x", Some("pipe:[77]")),
            &layout,
            &mut host,
        );
        assert_eq!(a.decision, Decision::Allow);
        // A path that could not be read: nothing can be said.
        let mut c = capture(w("SYS_execve"), 0, "", None);
        c.paths[0] = None;
        c.unreadable = Some(Errno::EFAULT);
        let a = classify(&c, &layout, &mut host);
        assert_eq!((a.action, a.decision), (Action::Exec, Decision::Unknown));
        // rename: the new name decides when the old one is fine.
        let mut c = capture(w("SYS_renameat2"), 0, "/data/file", None);
        c.paths[1] = Some(Named {
            name: b"/data/moved".to_vec(),
            base: None,
        });
        let a = classify(&c, &layout, &mut host);
        assert_eq!(
            a.to,
            Some((b"/data/moved".to_vec(), b"/data/moved".to_vec()))
        );
        assert_eq!(a.decision, Decision::Deny);
        drop(d);
    }
}
