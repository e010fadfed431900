//! Classifying an observed access, on the consumer's thread (the daemon's
//! recorder, off the server's path): the capture's paths resolved in the
//! sandbox's view (`resolve`), placed on its mounts and judged by
//! its layout (`layout::decide`), asking the host (never through
//! an automount, network or FUSE mount) whether a path missing in the
//! sandbox exists outside it. [`FileAccesses`] is the consumer's end of the
//! queue: taking an access classifies it.

use super::capture::{Captured, Named};
use super::layout::{allow, decide, Access, AccessVerdict, Facts, Layout, Outcome};
use super::mountinfo::parse_mountinfo;
use super::queue::QueueRx;
use super::resolve::{normalize, resolve, under, SandboxRoot};
use crate::confine::seccomp::FileOp;
use crate::spec::{FileWatch, SandboxSpec};
use crate::sys;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    pub verdict: AccessVerdict,
    pub errno: Option<i32>,
    pub reason: String,
    /// When the notifier took the call.
    pub at: Instant,
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
/// a deleted directory). For the creation guard too.
pub(crate) fn absolute(n: &Named) -> Option<Vec<u8>> {
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
/// said) and the outcome.
fn judge(
    root: Option<&SandboxRoot>,
    layout: &Layout,
    n: &Named,
    access: Access,
    follow_last: bool,
    host_has: &mut dyn FnMut(&[u8]) -> bool,
) -> (Vec<u8>, Outcome, bool) {
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
            Outcome {
                verdict: AccessVerdict::Unknown,
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
        mount_point: res.exists && root.mounts().iter().any(|m| m.point == res.path),
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
        verdict: AccessVerdict::Unknown,
        errno: None,
        reason: String::new(),
        at: c.at,
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
    let mut outcome = v1;
    if let (Some(acc2), Some(n2)) = (second, c.paths[1].as_ref()) {
        let (resolved2, v2, _) = judge(root, layout, n2, acc2, false, host_has);
        out.to = Some((n2.name.clone(), resolved2));
        if outcome.verdict != AccessVerdict::Deny && v2.verdict != AccessVerdict::Allow {
            outcome = Outcome {
                reason: format!("new name: {}", v2.reason),
                ..v2
            };
        }
    }
    out.verdict = outcome.verdict;
    out.errno = outcome.errno;
    out.reason = outcome.reason;
    if let Some((errno, why)) = c.guard {
        out.verdict = AccessVerdict::Deny;
        out.errno = Some(errno);
        out.reason = format!("protected in a write grant: {why} (refused by the creation guard)");
    }
    out
}

/// The notifier's configuration for observed calls.
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    pub level: FileWatch,
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
                FileWatch::Off
            },
            layout: Layout::new(spec),
        })
    }
}

/// The consumer's end of a sandbox's observed file accesses.
pub struct FileAccesses {
    rx: QueueRx<Captured>,
    lost: Arc<AtomicU64>,
    progress: Arc<super::capture::Queued>,
    level: FileWatch,
    layout: Layout,
    /// When the last access was taken (for [`FileAccesses::busy`]).
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
        progress: Arc<super::capture::Queued>,
        w: Watch,
        sync_wake_up: bool,
    ) -> FileAccesses {
        FileAccesses {
            rx,
            lost,
            progress,
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
    pub fn level(&self) -> FileWatch {
        self.level
    }

    /// The next access to report at this level (`denied`: denials and
    /// accesses that could not be judged; `all`: every one), waiting up to
    /// `timeout`. Classifies on the calling thread (`openat2`, `statx` and
    /// mount lookups for every access taken, reported or not), so not on an
    /// event loop's thread. `Disconnected` once the sandbox is gone and
    /// everything queued has been taken.
    ///
    /// While accesses keep coming, the queue is drained every
    /// [`BATCH_INTERVAL`] instead of being waited on: a waiting receiver
    /// costs the notifier a wake-up (a futex call and a context switch on the
    /// server's path) for every access; a sleeping one costs nothing.
    pub fn next_classified(&self, timeout: Duration) -> Result<FileAccess, RecvTimeoutError> {
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
            if let Some(a) = self.taken(c) {
                return Ok(a);
            }
        }
    }

    /// The next access to report at this level if one is queued now,
    /// classified on the calling thread as [`FileAccesses::next_classified`]
    /// does; never waits for one. `Empty` when
    /// nothing reportable is queued, `Disconnected` once the sandbox is gone
    /// and everything queued has been taken.
    pub fn try_next_classified(&self) -> Result<FileAccess, TryRecvError> {
        loop {
            let c = self.rx.try_recv()?;
            if let Some(a) = self.taken(c) {
                return Ok(a);
            }
        }
    }

    /// One capture taken from the queue: classified, if it is to be reported
    /// at this level (at `off`, only the creation guard's refusals are).
    fn taken(&self, c: Captured) -> Option<FileAccess> {
        self.last.set(Some(Instant::now()));
        if self.level == FileWatch::Off && c.guard.is_none() {
            return None;
        }
        let a = classify(&c, &self.layout, &mut |p| host_has(p));
        (self.level == FileWatch::All || a.verdict != AccessVerdict::Allow).then_some(a)
    }

    /// Whether accesses came within the last `BUSY` period: a consumer
    /// then drains every [`BATCH_INTERVAL`] rather than waiting for a
    /// wake-up (which would cost the notifier a system call per access).
    pub fn busy(&self) -> bool {
        self.last.get().is_some_and(|t| t.elapsed() < BUSY)
    }

    /// How far the notifier has queued what it answered ([`Queued`]).
    pub fn progress(&self) -> Arc<super::capture::Queued> {
        self.progress.clone()
    }

    /// Accesses not reported because the queue was full (the calls themselves
    /// went through, unobserved).
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
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
pub(crate) fn host_has(path: &[u8]) -> bool {
    if below_any(path, &remote_mount_points()) {
        return false;
    }
    sys::fs::exists_no_automount(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confine::seccomp::{self, Watched};
    use crate::supervise::layout::tests::spec;
    use crate::supervise::resolve::tests::root_dir;
    use nix::errno::Errno;

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
            at: Instant::now(),
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
            (a.action, a.verdict, a.syscall),
            (Action::OpenRead, AccessVerdict::Allow, "openat")
        );
        let creat = (libc::O_CREAT | libc::O_WRONLY) as u64;
        let a = classify(
            &capture(w("SYS_openat"), creat, "/data/new", None),
            &layout,
            &mut host,
        );
        assert_eq!(
            (a.action, a.verdict, a.errno),
            (Action::Create, AccessVerdict::Deny, Some(libc::EROFS))
        );
        let a = classify(
            &capture(w("SYS_openat"), 0, "x", Some("pipe:[77]")),
            &layout,
            &mut host,
        );
        assert_eq!(a.verdict, AccessVerdict::Allow);
        // A path that could not be read: nothing can be said.
        let mut c = capture(w("SYS_execve"), 0, "", None);
        c.paths[0] = None;
        c.unreadable = Some(Errno::EFAULT);
        let a = classify(&c, &layout, &mut host);
        assert_eq!(
            (a.action, a.verdict),
            (Action::Exec, AccessVerdict::Unknown)
        );
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
        assert_eq!(a.verdict, AccessVerdict::Deny);
        drop(d);
    }
}
