//! Resolving a path the way the server's own lookup went, in the sandbox's
//! view: its root (opened once through `/proc/<pid>/root`, held with its
//! mount namespace, [`SandboxRoot`]), symlinks followed inside it and never
//! out of it ([`resolve`]), `/proc` left as the caller's own. Runs on the
//! recorder's drain (classification) and the notifier (the creation guard
//! places names with [`SandboxRoot`]).

use super::mountinfo::{parse_mountinfo, Mount};
use crate::sys::fs::{open_component, open_in_root, readlinkat, stat_fd};
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag, AT_FDCWD};
use nix::sys::stat::Mode;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Symlinks followed while resolving one path (the kernel's limit).
const MAX_LINKS: u32 = 40;

/// The sandbox's root and mount table, opened once from the first caller.
#[derive(Debug)]
pub(crate) struct SandboxRoot {
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

/// The first read's buffer for a sandbox's `mountinfo`.
const MOUNTINFO_CAPACITY: usize = 16 << 10;

impl SandboxRoot {
    /// For tests: a root directory and the mount table to use.
    #[cfg(test)]
    pub(crate) fn new(root: OwnedFd, mounts: Vec<Mount>) -> SandboxRoot {
        SandboxRoot {
            root_name: fd_name(root.as_fd()).unwrap_or_default(),
            root,
            _mnt_ns: None,
            mounts,
        }
    }

    /// From the first caller's `/proc/<pid>` (an `O_PATH` directory fd).
    pub(crate) fn open(proc_pid: BorrowedFd<'_>) -> Result<SandboxRoot, Errno> {
        // `root` is a magic link to the caller's root directory; opening it
        // (O_PATH) needs the same ptrace access as reading its memory.
        let root = openat(
            proc_pid,
            c"root",
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let file = std::fs::File::from(openat(
            proc_pid,
            c"mountinfo",
            OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?);
        // A sandbox's table is ~4 KiB (about 40 mounts): a buffer that holds
        // it at once reads it in two calls, where growing from empty made
        // ten, each of which has the kernel walk the mount table again.
        let mut text = String::with_capacity(MOUNTINFO_CAPACITY);
        std::io::Read::read_to_string(&mut &file, &mut text)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        // An nsfs fd, only held.
        let ns = openat(
            proc_pid,
            c"ns/mnt",
            OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(SandboxRoot {
            root_name: fd_name(root.as_fd()).unwrap_or_default(),
            root,
            _mnt_ns: Some(ns),
            mounts: parse_mountinfo(&text),
        })
    }

    /// The sandbox's root directory (`O_PATH`).
    pub(crate) fn root_fd(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// The sandbox's mount with this id.
    pub(crate) fn mount(&self, id: u64) -> Option<&Mount> {
        self.mounts.iter().find(|m| m.id == id)
    }

    /// The sandbox's mount table.
    pub(crate) fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    /// The mount whose point is the longest prefix of `path` (for paths that
    /// could not be placed by mount id).
    pub(crate) fn mount_of_path(&self, path: &[u8]) -> Option<&Mount> {
        self.mounts
            .iter()
            .filter(|m| under(path, &m.point))
            .max_by_key(|m| m.point.len())
    }
}

/// What `/proc/self/fd/<fd>` says `fd` is.
fn fd_name(fd: BorrowedFd<'_>) -> Result<Vec<u8>, Errno> {
    readlinkat(
        AT_FDCWD,
        format!("/proc/self/fd/{}", fd.as_raw_fd()).as_bytes(),
    )
}

/// `path` is `dir` or inside it (component-wise).
pub(crate) fn under(path: &[u8], dir: &[u8]) -> bool {
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
pub(crate) fn normalize(path: &[u8]) -> Vec<u8> {
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
pub(crate) struct Resolution {
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
pub(crate) fn resolve(root: &SandboxRoot, path: &[u8], follow_last: bool) -> Resolution {
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
        match open_component(dir, &c) {
            Ok(fd) => {
                let (kind, mnt) = stat_fd(fd.as_fd()).unwrap_or((0, 0));
                if kind == libc::S_IFLNK && (!last || follow_last) {
                    links += 1;
                    let target = readlinkat(fd.as_fd(), b"").unwrap_or_default();
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A scratch "sandbox root" (a tempdir) and what resolves in it.
    pub(crate) fn root_dir() -> (tempfile::TempDir, SandboxRoot) {
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
}
