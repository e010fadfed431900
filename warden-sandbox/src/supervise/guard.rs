//! The creation guard: protected names a write grant must not gain during a
//! session, the daemon's half of the protected names ([`crate::protected`]
//! has the table).
//!
//! PID 1 binds the host's trusted names (`.git`, `.bashrc`, `.vscode`,
//! `.mcp.json`...) read-only inside every write grant (`rootfs::protect`),
//! but only those that exist: a mount needs something to mount on. A name
//! that does not exist yet could be created by the server (a new `.git` with
//! `core.fsmonitor`, a `.bashrc` in a granted home, a FIFO named `.bashrc`
//! that feeds the user's next shell). Landlock cannot refuse one name in a
//! directory where it allows creating files, and the seccomp filter cannot
//! read a path.
//!
//! # Mechanism
//!
//! When the guard is on (the spec's
//! [`Layers::guard`](crate::spec::Layers::guard): write grants, and a kernel
//! with seccomp user notification, Landlock and `SECCOMP_ADDFD_FLAG_SEND`, as
//! [`crate::kernel::Kernel::layers`] decides):
//!
//! 1. Landlock takes the rights to create regular files, directories,
//!    symlinks and FIFOs away from every rule
//!    ([`crate::confine::landlock::GUARDED_MAKE`]): nothing the server runs
//!    can create one of those by itself, anywhere.
//! 2. The calls that create ([`crate::confine::seccomp::creates`]: the opens
//!    with `O_CREAT`, `mkdir`, `mknod`, `symlink`, `link`, `rename`) notify
//!    the sandbox's listener, and a daemon notifier thread performs them on
//!    the server's behalf ([`Guard::handle`]): it reads the path once,
//!    resolves the parent directory in the sandbox's own view (its root,
//!    `RESOLVE_IN_ROOT`), looks the (directory, name) pair up in the registry
//!    of protected names that were missing at the start, refuses those
//!    (`EROFS`, audited as a `file` denial), and otherwise makes the name
//!    itself with the `*at` call on the parent's fd and that one component.
//!    An opened file reaches the caller with `SECCOMP_IOCTL_NOTIF_ADDFD`
//!    (`SECCOMP_ADDFD_FLAG_SEND`: the fd becomes the call's return value).
//!
//! Nested names: for `.config/fish` in a grant without `.config`, the pair
//! (grant, `.config`) is an *intermediate* entry. Making the directory is
//! allowed and registers (new directory, `fish`); a symlink by that name, or
//! renaming a directory or symlink onto it (which could bring a ready-made
//! `fish` along), is refused (`EROFS` for the symlink, `EXDEV` for the rename,
//! so `mv` falls back to copying name by name).
//!
//! # Invariants
//!
//! - A server that rewrites its path buffer after the daemon read it gains
//!   nothing: the daemon acts on its own copy, and a call let through to the
//!   kernel (`CONTINUE`: anything the guard does not perform itself, e.g. an
//!   open of a file that exists) cannot create under step 1's rules.
//! - The daemon only creates where the sandbox's layout lets the server
//!   write (a read-write mount of a write grant, a directory pinned in one,
//!   or a private tmpfs: `/tmp`, `$HOME`, `/dev/shm`), through the sandbox's
//!   mounts, so a read-only grant still answers `EROFS`; everything else is
//!   continued and refused by the kernel as before.
//! - Each notifier thread creates with its own fs struct, umask 0 and no
//!   effective capabilities ([`prepare_thread`]), applying the caller's
//!   umask itself.
//!
//! # Known differences
//!
//! From the kernel's own behaviour with the guard on: an `O_CREAT` open
//! through a dangling symlink in a writable area fails with `EACCES` (the
//! guard continues opens through symlinks; the kernel then may not create
//! the target); a hard link of a file another thread has just replaced may
//! link the replacement; `renameat2(RENAME_WHITEOUT)` and device nodes are
//! continued (and refused, as before).

use super::capture::{Captured, Named};
use super::classify::absolute;
use super::layout::{bytes, Area, Layout};
use super::memory::read_memory;
use super::resolve::SandboxRoot;
use crate::confine::seccomp::{self, FileOp};
use crate::spec::SandboxSpec;
use crate::sys::fs::{cstring, kind_of, mount_id_of, open_component, open_in_root, readlinkat};
use crate::sys::{self, seccomp::id_valid};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, FcntlArg, OFlag, RenameFlags, AT_FDCWD};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

/// How the notifier answers a call the guard looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Let the kernel run it (it cannot create what the guard refuses).
    Continue,
    /// Performed: the call returns this value.
    Value(i64),
    /// Performed (or refused for its own reasons): the call fails with this errno.
    Error(i32),
    /// A protected name: the call fails with `errno`; audited.
    Refused { errno: i32, why: &'static str },
    /// Already answered (`ADDFD` with `SEND`), or the caller is gone.
    Answered,
}

/// A name the registry watches in one directory.
#[derive(Debug, Clone)]
struct Entry {
    name: Vec<u8>,
    /// Empty: the protected name itself. Otherwise the components still
    /// missing below it (`.config` → `["fish"]`).
    rest: Vec<Vec<u8>>,
    why: &'static str,
}

/// (st_dev, st_ino) of a directory.
type Key = (u64, u64);

/// The notifier's guard state for one sandbox.
pub(crate) struct Guard {
    layout: Layout,
    /// Protected paths of the plan with their write grant and reason.
    plan: Vec<(Vec<u8>, Vec<u8>, &'static str)>,
    registry: Option<HashMap<Key, Vec<Entry>>>,
    /// Directories the guard made in write grants this session: every name of
    /// the table is protected in them, as at a grant's top (they were empty,
    /// so nothing of it existed).
    fresh: HashSet<Key>,
    /// `filesystem.allow_git_init`: git's names may be created.
    allow_git_init: bool,
    /// What the walks up to a git dir already found.
    git: GitCache,
}

impl Guard {
    pub(crate) fn new(spec: &SandboxSpec) -> Guard {
        let layout = Layout::new(spec);
        let grants: Vec<(&Path, bool)> = spec
            .write
            .iter()
            .map(|p| (p.as_path(), true))
            .chain(spec.read.iter().map(|p| (p.as_path(), false)))
            .collect();
        let mut plan = Vec::new();
        for (p, why) in layout.protected() {
            let path = Path::new(std::ffi::OsStr::from_bytes(p));
            // The write grant it lies in (the deepest grant containing it).
            let owner = grants
                .iter()
                .filter(|(g, _)| path.starts_with(g) && path != *g)
                .max_by_key(|(g, w)| (g.components().count(), *w));
            if let Some((g, true)) = owner {
                plan.push((p.to_vec(), bytes(g), why));
            }
        }
        Guard {
            layout,
            plan,
            registry: None,
            fresh: HashSet::new(),
            allow_git_init: spec.allow_git_init,
            git: GitCache::default(),
        }
    }

    /// The registry, built on first use from the sandbox's view: for every
    /// protected path that does not exist, the deepest directory of it that
    /// does, and the next name.
    fn registry(&mut self, root: &SandboxRoot) -> &mut HashMap<Key, Vec<Entry>> {
        if self.registry.is_none() {
            let mut reg: HashMap<Key, Vec<Entry>> = HashMap::new();
            for (path, owner, why) in &self.plan {
                let rel = &path[owner.len()..];
                let comps: Vec<Vec<u8>> = rel
                    .split(|&b| b == b'/')
                    .filter(|c| !c.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect();
                let Ok(mut dir) = open_in_root(root.root_fd(), owner, true) else {
                    continue;
                };
                let mut prefix = owner.clone();
                for (k, c) in comps.iter().enumerate() {
                    prefix.push(b'/');
                    prefix.extend_from_slice(c);
                    match lstat_at(dir.as_fd(), c) {
                        Err(Errno::ENOENT) if self.allow_git_init && git_name(c) => break,
                        Err(Errno::ENOENT) => {
                            if let Ok(key) = key_of(dir.as_fd()) {
                                reg.entry(key).or_default().push(Entry {
                                    name: c.clone(),
                                    rest: comps[k + 1..].to_vec(),
                                    why,
                                });
                            }
                            break;
                        }
                        Err(_) => break,
                        Ok(_) if k + 1 == comps.len() => break, // exists: bound read-only
                        Ok(_) => match open_in_root(root.root_fd(), &prefix, true) {
                            Ok(d) if is_dir(d.as_fd()) => dir = d,
                            _ => break,
                        },
                    }
                }
            }
            self.registry = Some(reg);
        }
        self.registry.get_or_insert_with(HashMap::new)
    }

    /// Decides (and performs) a watched call `c` of notification `n`. Only
    /// calls that create are the guard's; everything else continues.
    pub(crate) fn handle(
        &mut self,
        listener: BorrowedFd<'_>,
        n: &libc::seccomp_notif,
        c: &Captured,
    ) -> Answer {
        let w = c.watched;
        if !seccomp::creates(w) || c.unreadable.is_some() {
            return Answer::Continue;
        }
        if w.op == FileOp::Open {
            // Not a creation, or one the guard leaves to the kernel: an
            // unnamed O_TMPFILE (only a later link names it, and that is
            // guarded), an openat2 with its own RESOLVE_* constraints (not
            // reproduced here: refused by Landlock where creating needs the
            // guard).
            let tmpfile = (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64;
            if c.flags & libc::O_PATH as u64 != 0 {
                return Answer::Continue; // no access, whatever else it says
            }
            if c.flags & tmpfile != 0 {
                return self.tmpfile(listener, n, c);
            }
            if c.flags & libc::O_CREAT as u64 == 0 && !opens_for_writing(c.flags) {
                return Answer::Continue;
            }
            // openat2's RESOLVE_* constraints hold trivially for a single
            // component under its dirfd (the guard opens that one name with
            // O_NOFOLLOW on the same directory); for anything longer they
            // are not reproduced here.
            if w.name == "SYS_openat2"
                && openat2_resolve(n, c) != Some(0)
                && c.paths[0]
                    .as_ref()
                    .is_none_or(|p| p.base.is_none() || p.name.contains(&b'/'))
            {
                return Answer::Continue;
            }
            // `open("dir/", O_CREAT)`: EISDIR, whether or not it exists.
            if c.flags & libc::O_CREAT as u64 != 0
                && c.paths[0].as_ref().is_some_and(|p| p.name.ends_with(b"/"))
            {
                return Answer::Error(libc::EISDIR);
            }
        }
        let Some(root) = c.root.clone() else {
            return Answer::Continue;
        };
        let target = match w.op {
            FileOp::Link | FileOp::Rename => c.paths[1].as_ref(),
            _ => c.paths[0].as_ref(),
        };
        let Some(new) = target.and_then(|t| Place::open(&root, &self.layout, t)) else {
            return Answer::Continue;
        };
        if !new.writable {
            return Answer::Continue;
        }
        // Every registered path through this name (`.config` leads to `fish`,
        // `git`, `systemd`...); one that ends here makes it protected itself.
        // Names compare without ASCII case: a case-insensitive directory
        // (casefold ext4, vfat, SMB) finds `.GIT` when git asks for `.git`.
        let mut entries: Vec<Entry> = self
            .registry(&root)
            .get(&new.key)
            .map(|v| {
                v.iter()
                    .filter(|e| e.name.eq_ignore_ascii_case(&new.name))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if self.fresh.contains(&new.key) {
            entries.extend(fresh_entries(&new.name, self.allow_git_init));
        }
        if let Some(e) = entries.iter().find(|e| e.rest.is_empty()) {
            return Answer::Refused {
                errno: libc::EROFS,
                why: e.why,
            };
        }
        if new.in_grant
            && !self.allow_git_init
            && git_name(&new.name)
            && !inside_git_dir(&mut self.git, new.dir.as_fd())
        {
            return Answer::Refused {
                errno: libc::EROFS,
                why: GIT_NAME_WHY,
            };
        }
        if let Some(why) = self.git_guarded(&root, new.dir.as_fd(), &new.name) {
            return Answer::Refused {
                errno: libc::EROFS,
                why,
            };
        }
        let entry = entries.first().cloned();
        if makes_git_dir(&new.name) {
            self.git.forget();
        }
        match w.op {
            FileOp::Open => self.open(listener, n, c, &root, new),
            FileOp::Mkdir => {
                let Some(mode) = mode_of(n, c) else {
                    return Answer::Continue;
                };
                let Some(umask) = umask_of(c.pid) else {
                    return Answer::Continue;
                };
                if !id_valid(listener, n.id) {
                    return Answer::Answered;
                }
                let name = match cstring(&new.name) {
                    Ok(s) => s,
                    Err(e) => return Answer::Error(e as i32),
                };
                let perm = (mode & 0o7777) & !umask;
                // A single component under a directory fd we own.
                if let Err(e) =
                    nix::sys::stat::mkdirat(&new.dir, name.as_c_str(), Mode::from_bits_retain(perm))
                {
                    return Answer::Error(e as i32);
                }
                if new.in_grant {
                    if let Ok(key) =
                        open_child_dir(new.dir.as_fd(), &new.name).and_then(|d| key_of(d.as_fd()))
                    {
                        self.fresh.insert(key);
                    }
                }
                if !entries.is_empty() {
                    // A directory on the way to protected names: watch it for
                    // the next name of each.
                    if let Ok(d) = open_child_dir(new.dir.as_fd(), &new.name) {
                        if let Ok(key) = key_of(d.as_fd()) {
                            let reg = self.registry(&root).entry(key).or_default();
                            for e in entries {
                                reg.push(Entry {
                                    name: e.rest[0].clone(),
                                    rest: e.rest[1..].to_vec(),
                                    why: e.why,
                                });
                            }
                        }
                    }
                }
                Answer::Value(0)
            }
            FileOp::Mknod => {
                let (Some(mode), Some(umask)) = (mode_of(n, c), umask_of(c.pid)) else {
                    return Answer::Continue;
                };
                let kind = mode & libc::S_IFMT;
                if !matches!(kind, 0 | libc::S_IFREG | libc::S_IFIFO | libc::S_IFSOCK) {
                    return Answer::Continue; // device nodes: refused as before
                }
                if !id_valid(listener, n.id) {
                    return Answer::Answered;
                }
                let name = match cstring(&new.name) {
                    Ok(s) => s,
                    Err(e) => return Answer::Error(e as i32),
                };
                let dev = match w.name {
                    "SYS_mknod" => n.data.args[2],
                    _ => n.data.args[3],
                };
                let perm = (mode & 0o7777 & !seccomp::SET_ID) & !umask;
                match nix::sys::stat::mknodat(
                    &new.dir,
                    name.as_c_str(),
                    SFlag::from_bits_retain(kind),
                    Mode::from_bits_retain(perm),
                    dev as libc::dev_t,
                ) {
                    Err(e) => Answer::Error(e as i32),
                    Ok(()) => Answer::Value(0),
                }
            }
            FileOp::Symlink => {
                if let Some(e) = entry {
                    return Answer::Refused {
                        errno: libc::EROFS,
                        why: e.why,
                    };
                }
                let Some(text) = &c.text else {
                    return Answer::Continue;
                };
                let (Ok(text), Ok(name)) = (cstring(text), cstring(&new.name)) else {
                    return Answer::Error(libc::EINVAL);
                };
                if !id_valid(listener, n.id) {
                    return Answer::Answered;
                }
                match nix::unistd::symlinkat(text.as_c_str(), &new.dir, name.as_c_str()) {
                    Err(e) => Answer::Error(e as i32),
                    Ok(()) => Answer::Value(0),
                }
            }
            FileOp::Link => self.link(listener, n, c, &root, &new, entry.as_ref()),
            FileOp::Rename => self.rename(listener, n, c, &root, &new, entry.as_ref()),
            _ => Answer::Continue,
        }
    }

    /// Why `name` under `dir` is a file git runs or follows in a git dir of
    /// a write grant ([`git_protected`]), unless the policy allows new
    /// repositories or granted that path for writing by name: a grant of the
    /// path itself (its own mount), or of a directory inside the git dir (the
    /// git dir lies beyond the grant's mount).
    fn git_guarded(
        &mut self,
        root: &SandboxRoot,
        dir: BorrowedFd<'_>,
        name: &[u8],
    ) -> Option<&'static str> {
        if self.allow_git_init {
            return None;
        }
        let (mnt, area, _, in_grant) = mount_area(root, &self.layout, dir)?;
        if !in_grant {
            return None;
        }
        if let Ok(child) = open_component(dir, name) {
            let cm = mount_id_of(child.as_fd());
            if cm.is_some_and(|cm| cm != mnt)
                && cm
                    .and_then(|cm| root.mount(cm))
                    .is_some_and(|m| self.layout.area(m) == Area::WriteGrant)
            {
                return None;
            }
        }
        let within = (area == Area::WriteGrant).then_some(mnt);
        git_protected(&mut self.git, dir, name, within)
    }

    fn open(
        &mut self,
        listener: BorrowedFd<'_>,
        n: &libc::seccomp_notif,
        c: &Captured,
        root: &SandboxRoot,
        new: Place,
    ) -> Answer {
        // Something by that name already: nothing is created (a symlink is
        // followed by the kernel, which cannot create its target); an open
        // for writing is performed here (see `open_existing`).
        match lstat_at(new.dir.as_fd(), &new.name) {
            Err(Errno::ENOENT) if c.flags & libc::O_CREAT as u64 != 0 => {}
            Err(e) => return Answer::Error(e as i32),
            Ok(_)
                if c.flags & (libc::O_CREAT | libc::O_EXCL) as u64
                    == (libc::O_CREAT | libc::O_EXCL) as u64 =>
            {
                return Answer::Error(libc::EEXIST)
            }
            Ok(_) if opens_for_writing(c.flags) => {
                return self.open_existing(listener, n, c, root, new)
            }
            Ok(_) => return Answer::Continue,
        }
        let (Some(mode), Some(umask)) = (mode_of(n, c), umask_of(c.pid)) else {
            return Answer::Continue;
        };
        if !id_valid(listener, n.id) {
            return Answer::Answered;
        }
        let name = match cstring(&new.name) {
            Ok(s) => s,
            Err(e) => return Answer::Error(e as i32),
        };
        let flags = c.flags as libc::c_int;
        let ours = (flags | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC) & !libc::O_NOCTTY;
        // Never a setuid/setgid file (the filter refuses such modes where it
        // can read them; openat2's is read here).
        let perm = (mode & 0o7777 & !seccomp::SET_ID) & !umask;
        // A single component under a directory fd we own; O_NOFOLLOW: never
        // through a symlink that appeared meanwhile.
        let fd = match nix::fcntl::openat(
            &new.dir,
            name.as_c_str(),
            OFlag::from_bits_retain(ours),
            Mode::from_bits_retain(perm),
        ) {
            Ok(fd) => fd,
            // It appeared meanwhile and the caller did not ask for O_EXCL:
            // an open of an existing file, the kernel's.
            Err(Errno::EEXIST) if flags & libc::O_EXCL == 0 => return Answer::Continue,
            Err(e) => return Answer::Error(e as i32),
        };
        match send_fd(listener, n.id, &fd, flags) {
            Ok(()) => Answer::Answered,
            Err(e) => {
                // The caller did not get it: take the new file back (a
                // restarted call must find nothing, as if this one had not run).
                let _ =
                    nix::unistd::unlinkat(&new.dir, name.as_c_str(), UnlinkatFlags::NoRemoveDir);
                if e == Errno::ENOENT {
                    Answer::Answered
                } else {
                    Answer::Error(e as i32)
                }
            }
        }
    }

    /// An open for writing of something that exists. With the guard on,
    /// Landlock lets nothing in a write grant (nor in a private tmpfs above
    /// one) be opened for writing ([`crate::confine::landlock::GUARDED_WRITE`]), so
    /// what the guard continues cannot write there; what it performs, it
    /// performs on the name it checked. A final symlink is followed here,
    /// one link at a time, as the kernel would. Refused: the files git runs
    /// or follows in a git dir anywhere in a write grant ([`git_protected`]).
    fn open_existing(
        &mut self,
        listener: BorrowedFd<'_>,
        n: &libc::seccomp_notif,
        c: &Captured,
        root: &SandboxRoot,
        new: Place,
    ) -> Answer {
        let nofollow = c.flags & libc::O_NOFOLLOW as u64 != 0;
        let place = match self.follow(root, new, nofollow) {
            Ok(p) => p,
            Err(a) => return a,
        };
        if !place.writable {
            return Answer::Continue; // the kernel's: read-only, or not ours
        }
        if place.in_grant && !self.allow_git_init {
            let why = if git_name(&place.name) && !inside_git_dir(&mut self.git, place.dir.as_fd())
            {
                Some(GIT_NAME_WHY)
            } else {
                self.git_guarded(root, place.dir.as_fd(), &place.name)
            };
            if let Some(why) = why {
                return Answer::Refused {
                    errno: libc::EROFS,
                    why,
                };
            }
        }
        let kind = match lstat_at(place.dir.as_fd(), &place.name) {
            Ok(k) => k,
            Err(e) => return Answer::Error(e as i32),
        };
        let name = match cstring(&place.name) {
            Ok(s) => s,
            Err(e) => return Answer::Error(e as i32),
        };
        let flags = c.flags as libc::c_int;
        let mut ours = (flags | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY);
        match kind {
            libc::S_IFREG => {}
            libc::S_IFDIR => return Answer::Error(libc::EISDIR),
            libc::S_IFLNK => return Answer::Error(libc::ELOOP),
            libc::S_IFSOCK => return Answer::Error(libc::ENXIO),
            // A FIFO opened for writing waits for a reader: the notifier
            // cannot wait. Without a reader yet, O_RDWR (which never waits)
            // stands in for O_WRONLY; the writer then also holds a read end.
            libc::S_IFIFO => ours |= libc::O_NONBLOCK,
            _ => return Answer::Continue, // devices: the kernel's (NODEV)
        }
        if !id_valid(listener, n.id) {
            return Answer::Answered;
        }
        // A single component under a directory fd we own, never through a
        // symlink.
        let open = |f: libc::c_int| {
            nix::fcntl::openat(
                &place.dir,
                name.as_c_str(),
                OFlag::from_bits_retain(f),
                Mode::empty(),
            )
        };
        let mut opened = open(ours);
        if kind == libc::S_IFIFO && matches!(opened, Err(Errno::ENXIO)) {
            if flags & libc::O_NONBLOCK != 0 {
                return Answer::Error(libc::ENXIO);
            }
            opened = open((ours & !libc::O_ACCMODE) | libc::O_RDWR);
        }
        let fd = match opened {
            Ok(fd) => fd,
            Err(e) => return Answer::Error(e as i32),
        };
        if kind == libc::S_IFIFO && flags & libc::O_NONBLOCK == 0 {
            // The caller asked to block.
            let _ = nix::fcntl::fcntl(
                &fd,
                FcntlArg::F_SETFL(OFlag::from_bits_retain(flags & !libc::O_NONBLOCK)),
            );
        }
        match send_fd(listener, n.id, &fd, flags) {
            Ok(()) | Err(Errno::ENOENT) => Answer::Answered,
            Err(e) => Answer::Error(e as i32),
        }
    }

    /// `open(dir, O_TMPFILE|O_WRONLY)`: an unnamed file in `dir` (only a
    /// later `linkat` names it, and that is guarded). Performed here where
    /// Landlock would refuse the write access ([`Guard::open_existing`]).
    fn tmpfile(
        &mut self,
        listener: BorrowedFd<'_>,
        n: &libc::seccomp_notif,
        c: &Captured,
    ) -> Answer {
        let (Some(root), Some(p)) = (c.root.clone(), c.paths[0].as_ref()) else {
            return Answer::Continue;
        };
        let Some(abs) = absolute(p) else {
            return Answer::Continue;
        };
        let Ok(dir) = open_in_root(root.root_fd(), &abs, true) else {
            return Answer::Continue;
        };
        if !place_writable(&root, &self.layout, dir.as_fd()).0 {
            return Answer::Continue;
        }
        let (Some(mode), Some(umask)) = (mode_of(n, c), umask_of(c.pid)) else {
            return Answer::Continue;
        };
        if !id_valid(listener, n.id) {
            return Answer::Answered;
        }
        let flags = c.flags as libc::c_int | libc::O_CLOEXEC;
        // "." under a directory fd we own (O_PATH fds are valid dirfds).
        let fd = match nix::fcntl::openat(
            &dir,
            c".",
            OFlag::from_bits_retain(flags),
            Mode::from_bits_retain((mode & 0o7777 & !seccomp::SET_ID) & !umask),
        ) {
            Ok(fd) => fd,
            Err(e) => return Answer::Error(e as i32),
        };
        match send_fd(listener, n.id, &fd, c.flags as libc::c_int) {
            Ok(()) | Err(Errno::ENOENT) => Answer::Answered,
            Err(e) => Answer::Error(e as i32),
        }
    }

    /// Follows a final symlink at `place` the way the kernel would, one link
    /// at a time (at most 40), to the place of what it names. `Err`: the
    /// answer (a dangling link or a loop: the kernel's errors; somewhere the
    /// guard cannot see, e.g. through `/proc`: continued, and refused by
    /// Landlock if it is a write grant's).
    fn follow(
        &self,
        root: &SandboxRoot,
        mut place: Place,
        nofollow: bool,
    ) -> Result<Place, Answer> {
        for _ in 0..40 {
            match lstat_at(place.dir.as_fd(), &place.name) {
                Ok(libc::S_IFLNK) if nofollow => return Err(Answer::Error(libc::ELOOP)),
                Ok(libc::S_IFLNK) => {}
                Ok(_) => return Ok(place),
                Err(e) => return Err(Answer::Error(e as i32)),
            }
            let Ok(text) = readlinkat(place.dir.as_fd(), &place.name) else {
                return Err(Answer::Continue);
            };
            let abs = if text.first() == Some(&b'/') {
                text
            } else {
                let mut a = place.abs_dir.clone();
                if a != b"/" {
                    a.push(b'/');
                }
                a.extend_from_slice(&text);
                a
            };
            let named = Named {
                name: abs,
                base: None,
            };
            place = Place::open(root, &self.layout, &named).ok_or(Answer::Continue)?;
        }
        Err(Answer::Error(libc::ELOOP))
    }

    fn link(
        &mut self,
        listener: BorrowedFd<'_>,
        n: &libc::seccomp_notif,
        c: &Captured,
        root: &Arc<SandboxRoot>,
        new: &Place,
        entry: Option<&Entry>,
    ) -> Answer {
        let Some(old) = c.paths[0].as_ref() else {
            return Answer::Continue;
        };
        let follow = c.flags & libc::AT_SYMLINK_FOLLOW as u64 != 0;
        let empty = c.flags & libc::AT_EMPTY_PATH as u64 != 0 && old.name.is_empty();
        let name = match cstring(&new.name) {
            Ok(s) => s,
            Err(e) => return Answer::Error(e as i32),
        };
        // The source, as an fd to link from through /proc/self/fd (which
        // links what the fd is, as AT_SYMLINK_FOLLOW), or (dir, name).
        let src: Result<OwnedFd, (OwnedFd, Vec<u8>)>;
        if empty {
            let dirfd = n.data.args[0] as i32;
            let p = format!("/proc/{}/fd/{dirfd}", c.pid);
            match open_path(&p) {
                Ok(fd) => src = Ok(fd),
                Err(_) => return Answer::Continue,
            }
        } else {
            let Some(abs) = absolute(old) else {
                return Answer::Continue;
            };
            if let Some(fdnum) = own_fd_link(&abs) {
                // `/proc/self/fd/N` (the O_TMPFILE idiom): the caller's fd N.
                if !follow {
                    return Answer::Continue;
                }
                match open_path(&format!("/proc/{}/fd/{fdnum}", c.pid)) {
                    Ok(fd) => src = Ok(fd),
                    Err(_) => return Answer::Continue,
                }
            } else if follow {
                // Linked is what the final symlink names: follow it here, so
                // the name checked below is the file's own.
                let named = Named {
                    name: abs.clone(),
                    base: None,
                };
                let Some(at) = Place::open(root, &self.layout, &named) else {
                    return Answer::Continue;
                };
                match self.follow(root, at, false) {
                    Ok(p) => src = Err((p.dir, p.name)),
                    Err(a) => return a,
                }
            } else {
                let Some((dir, last)) = split(&abs) else {
                    return Answer::Continue;
                };
                match open_in_root(root.root_fd(), dir, true) {
                    Ok(d) => src = Err((d, last.to_vec())),
                    Err(_) => return Answer::Continue,
                }
            }
        }
        match &src {
            // A named file linked through an fd the caller holds (otherwise a
            // CAP_DAC_READ_SEARCH privilege): its names are unknown here, it
            // could be one git runs. Unnamed (O_TMPFILE) files are fine, but
            // not setuid/setgid ones: an O_TMPFILE made with those bits by
            // openat2 (whose mode the filter cannot read) stays unnamed.
            Ok(fd) => {
                if fstat(fd.as_fd()).is_ok_and(|st| {
                    st.st_mode & libc::S_IFMT != libc::S_IFDIR && st.st_mode & seccomp::SET_ID != 0
                }) {
                    return Answer::Refused {
                        errno: libc::EPERM,
                        why: "a setuid/setgid file gets no name in a write grant",
                    };
                }
                if fstat(fd.as_fd()).is_ok_and(|st| st.st_nlink > 0) {
                    return Answer::Error(libc::ENOENT);
                }
            }
            // A second name for a file git runs would let it be written there.
            Err((d, last)) => {
                if let Some(why) = self.git_guarded(root, d.as_fd(), last) {
                    return Answer::Refused {
                        errno: libc::EROFS,
                        why,
                    };
                }
            }
        }
        if let Some(e) = entry {
            let kind = match &src {
                Ok(fd) => kind_of(fd.as_fd()),
                Err((d, last)) => lstat_at(d.as_fd(), last).ok(),
            };
            if kind == Some(libc::S_IFLNK) || kind == Some(libc::S_IFDIR) {
                return Answer::Refused {
                    errno: libc::EROFS,
                    why: e.why,
                };
            }
        }
        if !id_valid(listener, n.id) {
            return Answer::Answered;
        }
        let r = match &src {
            Ok(fd) => {
                let Ok(p) = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())) else {
                    return Answer::Error(libc::EINVAL);
                };
                nix::unistd::linkat(
                    AT_FDCWD,
                    p.as_c_str(),
                    &new.dir,
                    name.as_c_str(),
                    AtFlags::AT_SYMLINK_FOLLOW,
                )
            }
            Err((d, last)) => {
                let Ok(l) = cstring(last) else {
                    return Answer::Error(libc::EINVAL);
                };
                nix::unistd::linkat(d, l.as_c_str(), &new.dir, name.as_c_str(), AtFlags::empty())
            }
        };
        match r {
            Err(e) => Answer::Error(e as i32),
            Ok(()) => Answer::Value(0),
        }
    }

    fn rename(
        &mut self,
        listener: BorrowedFd<'_>,
        n: &libc::seccomp_notif,
        c: &Captured,
        root: &Arc<SandboxRoot>,
        new: &Place,
        entry: Option<&Entry>,
    ) -> Answer {
        let flags = c.flags as libc::c_uint;
        if flags & libc::RENAME_WHITEOUT != 0 {
            return Answer::Continue;
        }
        let Some(old) = c.paths[0].as_ref() else {
            return Answer::Continue;
        };
        let Some(abs) = absolute(old) else {
            return Answer::Continue;
        };
        let Some((dir, last)) = split(&abs) else {
            return Answer::Continue;
        };
        let Ok(odir) = open_in_root(root.root_fd(), dir, true) else {
            return Answer::Continue;
        };
        let kind = lstat_at(odir.as_fd(), last).ok();
        // What git runs cannot be moved away (and replaced) either, nor can a
        // `.git` be moved out from under its work tree.
        if !self.allow_git_init && place_writable(root, &self.layout, odir.as_fd()).1 {
            let why = if last.eq_ignore_ascii_case(b".git")
                && !inside_git_dir(&mut self.git, odir.as_fd())
            {
                Some(GIT_NAME_WHY)
            } else {
                self.git_guarded(root, odir.as_fd(), last)
            };
            if let Some(why) = why {
                return Answer::Refused {
                    errno: libc::EROFS,
                    why,
                };
            }
        }
        if let Some(e) = entry {
            if kind == Some(libc::S_IFDIR) || kind == Some(libc::S_IFLNK) {
                // Could bring the rest of the protected path along: copy instead.
                let _ = e;
                return Answer::Error(libc::EXDEV);
            }
        }
        if flags & libc::RENAME_EXCHANGE != 0 {
            // The old name receives what the new one is: it is created too.
            let back = key_of(odir.as_fd()).ok().and_then(|k| {
                self.registry(root)
                    .get(&k)
                    .and_then(|v| v.iter().find(|e| e.name.eq_ignore_ascii_case(last)))
                    .cloned()
            });
            if let Some(e) = back {
                return Answer::Refused {
                    errno: libc::EROFS,
                    why: e.why,
                };
            }
            if !self.allow_git_init
                && git_name(last)
                && !inside_git_dir(&mut self.git, odir.as_fd())
            {
                return Answer::Refused {
                    errno: libc::EROFS,
                    why: GIT_NAME_WHY,
                };
            }
        }
        // A directory made inside a git dir (where `HEAD` may be created) must
        // not leave it as a ready-made repository: moving one out is a copy
        // (EXDEV), and copying recreates its names one by one, past the guard.
        if !self.allow_git_init {
            let exchange = flags & libc::RENAME_EXCHANGE != 0;
            let new_kind = if exchange {
                lstat_at(new.dir.as_fd(), &new.name).ok()
            } else {
                None
            };
            let git = &mut self.git;
            let mut out_of = |from: BorrowedFd<'_>, to: BorrowedFd<'_>| {
                inside_git_dir(git, from) && !inside_git_dir(git, to)
            };
            if (kind == Some(libc::S_IFDIR) && out_of(odir.as_fd(), new.dir.as_fd()))
                || (exchange
                    && new_kind == Some(libc::S_IFDIR)
                    && out_of(new.dir.as_fd(), odir.as_fd()))
            {
                return Answer::Error(libc::EXDEV);
            }
        }
        // The kernel refuses to rename a mount point, or over one, with
        // EBUSY, but only for mounts of the caller's own mount namespace:
        // the daemon's rename would move the host's file from under the
        // sandbox's read-only bind (a protected `.bashrc`, a pinned
        // directory, a grant's root). Ask the sandbox's mount tree instead:
        // a name is a mount point there when looking it up from its parent
        // lands on another mount. (Mounts inside the sandbox never change.)
        if is_mount_point(odir.as_fd(), last) || is_mount_point(new.dir.as_fd(), &new.name) {
            return Answer::Error(libc::EBUSY);
        }
        let (Ok(o), Ok(nn)) = (cstring(last), cstring(&new.name)) else {
            return Answer::Error(libc::EINVAL);
        };
        // Moving a directory or symlink can put a git dir above others.
        if flags & libc::RENAME_EXCHANGE != 0
            || matches!(kind, Some(libc::S_IFDIR | libc::S_IFLNK))
            || makes_git_dir(last)
        {
            self.git.forget();
        }
        if !id_valid(listener, n.id) {
            return Answer::Answered;
        }
        // Single components under directory fds we own.
        match nix::fcntl::renameat2(
            &odir,
            o.as_c_str(),
            &new.dir,
            nn.as_c_str(),
            RenameFlags::from_bits_retain(flags),
        ) {
            Err(e) => Answer::Error(e as i32),
            Ok(()) => Answer::Value(0),
        }
    }
}

/// Where a new name would go: its parent directory (an `O_PATH` fd in the
/// sandbox's view), the name, and whether the layout lets the server write
/// there.
struct Place {
    dir: OwnedFd,
    /// The directory's path in the sandbox's view, as the caller spelled it
    /// (for a relative symlink's target).
    abs_dir: Vec<u8>,
    key: Key,
    name: Vec<u8>,
    writable: bool,
    /// In a write grant (not a private tmpfs, which ends with the session).
    in_grant: bool,
}

impl Place {
    fn open(root: &SandboxRoot, layout: &Layout, n: &Named) -> Option<Place> {
        let abs = absolute(n)?;
        let (dir, last) = split(&abs)?;
        let fd = open_in_root(root.root_fd(), dir, true).ok()?;
        if !is_dir(fd.as_fd()) {
            return None;
        }
        let (writable, in_grant) = place_writable(root, layout, fd.as_fd());
        Some(Place {
            key: key_of(fd.as_fd()).ok()?,
            abs_dir: dir.to_vec(),
            dir: fd,
            name: last.to_vec(),
            writable,
            in_grant,
        })
    }
}

/// Whether the layout lets the server write in the directory `dir` (a
/// read-write mount of a write grant, a directory pinned in one, or a private
/// tmpfs), and whether that is a write grant's (not a private tmpfs, which
/// ends with the session).
fn place_writable(root: &SandboxRoot, layout: &Layout, dir: BorrowedFd<'_>) -> (bool, bool) {
    mount_area(root, layout, dir).map_or((false, false), |(_, _, w, g)| (w, g))
}

/// The mount `dir` is on, its area, and whether the server may write there
/// and whether that is a write grant's (see [`place_writable`]).
fn mount_area(
    root: &SandboxRoot,
    layout: &Layout,
    dir: BorrowedFd<'_>,
) -> Option<(u64, Area, bool, bool)> {
    let mnt = mount_id_of(dir)?;
    let m = root.mount(mnt)?;
    let area = layout.area(m);
    let (w, g) = if m.read_only {
        (false, false)
    } else {
        match area {
            Area::WriteGrant => (true, true),
            Area::Private(_) => (true, false),
            // A directory pinned inside a write grant.
            Area::Other if layout.in_write_grant(&m.point) => (true, true),
            _ => (false, false),
        }
    };
    Some((mnt, area, w, g))
}

/// The open flags ask for write access or truncation.
pub(crate) fn opens_for_writing(flags: u64) -> bool {
    flags & (libc::O_ACCMODE | libc::O_TRUNC) as u64 != 0
}

/// Hands `fd` to the caller as the result of its call (`ADDFD` with `SEND`),
/// close-on-exec if its `flags` asked for it.
pub(crate) fn send_fd(
    listener: BorrowedFd<'_>,
    id: u64,
    fd: &OwnedFd,
    flags: libc::c_int,
) -> Result<(), Errno> {
    let addfd = libc::seccomp_notif_addfd {
        id,
        flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
        srcfd: fd.as_raw_fd() as u32,
        newfd: 0,
        newfd_flags: if flags & libc::O_CLOEXEC != 0 {
            libc::O_CLOEXEC as u32
        } else {
            0
        },
    };
    // With SEND it also answers the notification with the new fd's number.
    sys::seccomp::add_fd(listener, &addfd).map(drop)
}

/// Why git's own names are refused outside git dirs.
const GIT_NAME_WHY: &str = "a .git, HEAD, commondir or gitdir entry makes a directory a git \
     repository whose config and hooks git runs on the host (filesystem.allow_git_init \
     permits new repositories)";

/// Names that make a directory something git opens as a repository
/// (`setup.c`: a `.git` directory or file; a git dir is recognised by its
/// `HEAD`, next to `objects/` and `refs/` or a `commondir` file; linked
/// worktrees' `gitdir` files), compared without ASCII case.
fn git_name(name: &[u8]) -> bool {
    [&b".git"[..], b"HEAD", b"commondir", b"gitdir"]
        .iter()
        .any(|g| name.eq_ignore_ascii_case(g))
}

/// What git's `is_git_directory` accepts: `HEAD`, and `objects/` with
/// `refs/` or a `commondir` file.
fn is_git_dir(dir: BorrowedFd<'_>) -> bool {
    // HEAD may be a symlink (git accepts one into refs/); objects/, refs/ and
    // commondir are followed, as git's access() and read do.
    lstat_at(dir, b"HEAD").is_ok()
        && ((stat_kind(dir, b"objects") == Some(libc::S_IFDIR)
            && stat_kind(dir, b"refs") == Some(libc::S_IFDIR))
            || stat_kind(dir, b"commondir") == Some(libc::S_IFREG))
}

/// The file type of what `name` under `dir` names, a final symlink followed.
fn stat_kind(dir: BorrowedFd<'_>, name: &[u8]) -> Option<u32> {
    let c = cstring(name).ok()?;
    let st = nix::sys::stat::fstatat(dir, c.as_c_str(), AtFlags::empty()).ok()?;
    Some(st.st_mode & libc::S_IFMT)
}

/// Directories known to have no git dir at or above them (per search bound):
/// the walks of [`git_ancestor`] stop at the first known one. Only what the
/// guard itself does can make a git dir appear above a directory (creating
/// `HEAD`, `objects`, `refs` or `commondir`, or renaming a directory or
/// symlink), so it forgets everything then ([`GitCache::forget`]); removals
/// only make the entries truer.
#[derive(Debug, Default)]
pub(crate) struct GitCache {
    none_above: HashSet<(Key, Option<u64>)>,
}

impl GitCache {
    fn forget(&mut self) {
        self.none_above.clear();
    }
}

/// A name whose creation can make its directory a git dir.
fn makes_git_dir(name: &[u8]) -> bool {
    [&b"HEAD"[..], b"objects", b"refs", b"commondir"]
        .iter()
        .any(|g| name.eq_ignore_ascii_case(g))
}

/// The git dir `dir` is or lies in, and the entry of it on the way down to
/// `dir` (None: `dir` is the git dir): walks up by `..` (the real parents,
/// whatever the path said) to the sandbox's root, or only within the mount
/// `within`. A directory can only look
/// like a git dir if its `HEAD` existed at the start or was made inside
/// another git dir, where git keeps `HEAD` files of its own (`logs/HEAD`,
/// `refs/remotes/origin/HEAD`).
fn git_ancestor(
    cache: &mut GitCache,
    dir: BorrowedFd<'_>,
    within: Option<u64>,
) -> Option<(OwnedFd, Option<Key>)> {
    const MAX_DEPTH: usize = 64;
    let start = key_of(dir).ok()?;
    if cache.none_above.contains(&(start, within)) {
        return None;
    }
    if is_git_dir(dir) {
        return Some((open_component(dir, b".").ok()?, None));
    }
    let mut seen = vec![start];
    let mut child = start;
    let mut cur = open_component(dir, b"..").ok()?;
    let found = 'walk: {
        for _ in 0..MAX_DEPTH {
            let Ok(k) = key_of(cur.as_fd()) else {
                return None;
            };
            if k == child || cache.none_above.contains(&(k, within)) {
                break 'walk None; // the root (its `..` is itself), or known
            }
            if within.is_some_and(|m| mount_id_of(cur.as_fd()) != Some(m)) {
                break 'walk None; // beyond the mount the search is bound to
            }
            if is_git_dir(cur.as_fd()) {
                break 'walk Some((cur, Some(child)));
            }
            seen.push(k);
            child = k;
            match open_component(cur.as_fd(), b"..") {
                Ok(up) => cur = up,
                Err(_) => return None,
            }
        }
        return None; // too deep to say: not remembered
    };
    if found.is_none() {
        cache
            .none_above
            .extend(seen.into_iter().map(|k| (k, within)));
    }
    found
}

/// Whether `dir` is a git dir or lies inside one.
fn inside_git_dir(cache: &mut GitCache, dir: BorrowedFd<'_>) -> bool {
    git_ancestor(cache, dir, None).is_some()
}

/// Why `name` under `dir` is one of the files git runs or follows, wherever
/// the git dir is in a write grant (the protection plan binds those of the
/// grants' own repositories read-only; this finds the deeper ones): a `.git`
/// file or `.gitmodules` anywhere; in a git dir its `config`,
/// `config.worktree`, `commondir`, `hooks/`, `modules/`, `worktrees/` and
/// `info/attributes`, compared without ASCII case.
fn git_protected(
    cache: &mut GitCache,
    dir: BorrowedFd<'_>,
    name: &[u8],
    within: Option<u64>,
) -> Option<&'static str> {
    let is = |a: &[u8], b: &str| a.eq_ignore_ascii_case(b.as_bytes());
    if is(name, ".gitmodules") {
        return Some("submodule URLs and paths that git submodule clones and checks out");
    }
    let (git, via) = git_ancestor(cache, dir, within)?;
    let why = |row: &str| {
        crate::protected::PROTECTED
            .iter()
            .find(|r| r.name == row)
            .map_or(GIT_NAME_WHY, |r| r.why)
    };
    let Some(via) = via else {
        // Directly in the git dir.
        for row in [
            "config",
            "config.worktree",
            "commondir",
            "hooks",
            "modules",
            "worktrees",
        ] {
            if is(name, row) {
                return Some(why(&format!(".git/{row}")));
            }
        }
        return None;
    };
    // Below one of its entries: which one (by identity, not by spelling).
    let entry_is = |e: &[u8]| {
        open_component(git.as_fd(), e)
            .ok()
            .and_then(|fd| key_of(fd.as_fd()).ok())
            == Some(via)
    };
    for row in ["hooks", "modules", "worktrees"] {
        if entry_is(row.as_bytes()) {
            return Some(why(&format!(".git/{row}")));
        }
    }
    if is(name, "attributes") && entry_is(b"info") && key_of(dir).ok() == Some(via) {
        return Some(why(".git/info/attributes"));
    }
    None
}

/// The table's entries a directory the guard made itself has for `name`: as
/// at a grant's top, every row (but those of the home directory only) through
/// that name.
fn fresh_entries(name: &[u8], allow_git_init: bool) -> Vec<Entry> {
    crate::protected::PROTECTED
        .iter()
        .filter(|row| !row.home_only)
        .filter_map(|row| {
            let mut comps = row.name.split('/').map(|c| c.as_bytes().to_vec());
            let first = comps.next()?;
            if !first.eq_ignore_ascii_case(name) || (allow_git_init && git_name(&first)) {
                return None;
            }
            Some(Entry {
                name: first,
                rest: comps.collect(),
                why: row.why,
            })
        })
        .collect()
}

/// Splits an absolute path into (parent, last component), trailing slashes
/// dropped; `None` for `/`, `.`, `..` and empty last components (the
/// kernel's business).
fn split(abs: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut end = abs.len();
    while end > 1 && abs[end - 1] == b'/' {
        end -= 1;
    }
    let p = &abs[..end];
    let i = p.iter().rposition(|&b| b == b'/')?;
    let last = &p[i + 1..];
    if last.is_empty() || last == b"." || last == b".." {
        return None;
    }
    let dir = if i == 0 { &p[..1] } else { &p[..i] };
    Some((dir, last))
}

/// A directory `name` directly under `dir`, never through a symlink.
fn open_child_dir(dir: BorrowedFd<'_>, name: &[u8]) -> Result<OwnedFd, Errno> {
    let fd = open_component(dir, name)?;
    if is_dir(fd.as_fd()) {
        Ok(fd)
    } else {
        Err(Errno::ENOTDIR)
    }
}

/// An `O_PATH` fd for a host path (a `/proc/<pid>/fd/<n>` magic link is followed).
fn open_path(p: &str) -> Result<OwnedFd, Errno> {
    let c = cstring(p.as_bytes())?;
    nix::fcntl::open(
        c.as_c_str(),
        OFlag::O_PATH | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Whether `name` under `dir` (both in the sandbox's mount tree) is a mount
/// point of that tree: its lookup crosses into another mount. A missing name
/// is not.
fn is_mount_point(dir: BorrowedFd<'_>, name: &[u8]) -> bool {
    let Ok(fd) = open_component(dir, name) else {
        return false;
    };
    match (mount_id_of(dir), mount_id_of(fd.as_fd())) {
        (Some(a), Some(b)) => a != b,
        // Unknown: refuse rather than move what might be protected.
        _ => true,
    }
}

/// The file type (`S_IFMT` bits) of `name` under `dir`, not followed.
fn lstat_at(dir: BorrowedFd<'_>, name: &[u8]) -> Result<u32, Errno> {
    let c = cstring(name)?;
    let st = nix::sys::stat::fstatat(dir, c.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)?;
    Ok(st.st_mode & libc::S_IFMT)
}

fn fstat(fd: BorrowedFd<'_>) -> Result<FileStat, Errno> {
    nix::sys::stat::fstat(fd)
}

fn key_of(fd: BorrowedFd<'_>) -> Result<Key, Errno> {
    let st = fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

fn is_dir(fd: BorrowedFd<'_>) -> bool {
    fstat(fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// The mode argument of an open, `mkdir` or `mknod` call (for `openat2`, read
/// from the caller's `open_how`).
fn mode_of(n: &libc::seccomp_notif, c: &Captured) -> Option<u32> {
    let a = &n.data.args;
    let v = match c.watched.name {
        "SYS_open" => a[2],
        "SYS_openat" => a[3],
        "SYS_creat" => a[1],
        "SYS_mkdir" => a[1],
        "SYS_mkdirat" => a[2],
        "SYS_mknod" => a[1],
        "SYS_mknodat" => a[2],
        "SYS_openat2" => {
            let mut b = [0u8; 8];
            match read_memory(c.pid, a[2].checked_add(8)?, &mut b) {
                Ok(8) => u64::from_ne_bytes(b),
                _ => return None,
            }
        }
        _ => return None,
    };
    u32::try_from(v & 0xffff_ffff).ok()
}

/// `N` when `path` is `/proc/self/fd/N` or `/proc/thread-self/fd/N`: a
/// magic link to the caller's own fd `N`.
fn own_fd_link(path: &[u8]) -> Option<u32> {
    let rest = path
        .strip_prefix(b"/proc/self/fd/")
        .or_else(|| path.strip_prefix(b"/proc/thread-self/fd/"))?;
    if rest.is_empty() || !rest.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(rest).ok()?.parse().ok()
}

/// `open_how.resolve` of an `openat2` call, read from the caller.
fn openat2_resolve(n: &libc::seccomp_notif, c: &Captured) -> Option<u64> {
    let mut b = [0u8; 8];
    match read_memory(c.pid, n.data.args[2].checked_add(16)?, &mut b) {
        Ok(8) => Some(u64::from_ne_bytes(b)),
        _ => None,
    }
}

/// The caller's umask (`/proc/<pid>/status`).
fn umask_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Umask:"))?;
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
}

/// Prepares a notifier pool thread to create on a server's behalf, once:
///
/// - umask 0 in a fs struct of its own (`unshare(CLONE_FS)`; the rest of the
///   daemon keeps its umask): the guard applies each caller's umask itself;
/// - no effective capabilities (this thread only): a daemon running as root
///   would otherwise create where the server could not (`CAP_DAC_OVERRIDE`
///   in a directory of another user, `CAP_FOWNER`...), and the files it opens
///   carry its credentials. Reading the server's memory and `/proc` needs
///   none: the daemon's uid owns the sandbox's user namespace.
pub(crate) fn prepare_thread() -> Result<(), Errno> {
    // Detaches only this thread's cwd, root and umask.
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS)?;
    nix::sys::stat::umask(Mode::empty());
    sys::process::drop_effective_caps()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_takes_the_last_component() {
        assert_eq!(split(b"/a/b"), Some((&b"/a"[..], &b"b"[..])));
        assert_eq!(split(b"/a/b/"), Some((&b"/a"[..], &b"b"[..])));
        assert_eq!(split(b"/b"), Some((&b"/"[..], &b"b"[..])));
        assert_eq!(split(b"/a/.."), None);
        assert_eq!(split(b"/a/."), None);
        assert_eq!(split(b"/"), None);
        assert_eq!(
            split(b"/x/../.bashrc"),
            Some((&b"/x/.."[..], &b".bashrc"[..]))
        );
    }

    #[test]
    fn own_fd_links() {
        assert_eq!(own_fd_link(b"/proc/self/fd/7"), Some(7));
        assert_eq!(own_fd_link(b"/proc/thread-self/fd/12"), Some(12));
        assert_eq!(own_fd_link(b"/proc/self/fd/"), None);
        assert_eq!(own_fd_link(b"/proc/self/fd/7/x"), None);
        assert_eq!(own_fd_link(b"/proc/1/fd/7"), None);
    }

    #[test]
    fn umask_of_self() {
        let me = std::process::id();
        assert!(umask_of(me).is_some());
    }
}
