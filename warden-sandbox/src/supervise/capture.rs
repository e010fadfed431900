//! Capturing an observed call on the notifier's thread, while the caller
//! waits: what it names (its path arguments read from its memory,
//! [`super::memory`]; for a relative one, the directory it is relative to,
//! from `/proc/<pid>`), and on the first call the sandbox's root and mount
//! table ([`SandboxRoot`]). Kept only if `SECCOMP_IOCTL_NOTIF_ID_VALID` says
//! the call is still pending; then queued for the consumer, never waited on
//! ([`super::classify::FileAccesses`]).

use super::memory::{read_cstring, read_memory};
use super::queue::QueueTx;
use super::resolve::SandboxRoot;
use crate::confine::seccomp::{self, Flags, Watched};
use crate::sys::{self, fs::readlinkat, fs::PATH_MAX};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::TrySendError;
use std::sync::Arc;

/// `/proc/<pid>` fds kept open by the notifier.
const PROC_CACHE: usize = 64;

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
    /// The creation guard refused it ([`super::guard`]): the errno and the
    /// protected name's reason.
    pub guard: Option<(i32, &'static str)>,
    /// When the notifier took the call (what a record made later is
    /// attributed by: the tool call in flight then).
    pub at: std::time::Instant,
}

/// The notifier's state for observed calls.
/// How far a sandbox's observed accesses are queued: each capture is
/// counted once when its call is answered and once when it is queued (or
/// lost to a full queue). The notifier answers an observed call before it
/// queues it (the call's latency is the server's), so a consumer that must
/// know every access the server could have seen the result of by some time
/// (`mcp.explain_denials`) reads [`Queued::answered`] then and waits until
/// [`Queued::queued`] reaches it: two atomic additions per access.
#[derive(Debug, Default)]
pub struct Queued {
    answered: AtomicU64,
    queued: AtomicU64,
}

impl Queued {
    /// Captures whose calls were answered so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::SeqCst)
    }

    /// Captures queued (or lost) so far.
    pub fn queued(&self) -> u64 {
        self.queued.load(Ordering::SeqCst)
    }
}

pub(crate) struct Capturer {
    tx: QueueTx<Captured>,
    lost: Arc<AtomicU64>,
    pub(crate) progress: Arc<Queued>,
    /// `/proc/<pid>` fds by pid. A cached fd of a process that has died
    /// fails every lookup (it never turns into another process's), and is
    /// then replaced.
    procs: HashMap<u32, OwnedFd>,
    root: Option<Arc<SandboxRoot>>,
    /// `/proc/<pid>` of the first observed call's caller when that call was
    /// the server's `execve` (always the first): its root and mount table
    /// are read only after the call was answered
    /// ([`Capturer::after_answer`]), off the `execve`'s way.
    pending_root: Option<OwnedFd>,
    /// Set once the sandbox was handed a listing snapshot (approvals,
    /// [`super::hold`]): from then on a relative name's base is checked to
    /// be in the sandbox's mount tree, since `/proc` reports a snapshot's
    /// root as `/`.
    pub(crate) snapshots: Option<Arc<std::sync::atomic::AtomicBool>>,
}

fn open_proc_pid(pid: u32) -> Result<OwnedFd, Errno> {
    nix::fcntl::open(
        format!("/proc/{pid}").as_str(),
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

impl Capturer {
    pub(crate) fn new(tx: QueueTx<Captured>, lost: Arc<AtomicU64>) -> Capturer {
        Capturer {
            tx,
            lost,
            progress: Arc::default(),
            procs: HashMap::new(),
            root: None,
            pending_root: None,
            snapshots: None,
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
            let dir = self.procs[&pid].as_fd();
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
            let link = self.link(n.pid, &which).unwrap_or_default();
            // Not a path of the sandbox's tree (a snapshot): no base, so the
            // name is not resolved as if it were relative to `/`.
            Some(if self.outside_the_tree(n.pid, &which) {
                Vec::new()
            } else {
                link
            })
        };
        Ok(Named { name, base })
    }

    /// Whether `/proc/<pid>/<which>` (a dirfd or the cwd) is on a mount the
    /// sandbox's mount table lacks. Checked only once a snapshot was handed
    /// out (otherwise every fd of the sandbox is in its tree).
    fn outside_the_tree(&mut self, pid: u32, which: &[u8]) -> bool {
        if !self
            .snapshots
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Acquire))
        {
            return false;
        }
        let (Some(root), Some(dir)) = (self.root.as_ref(), self.procs.get(&pid)) else {
            return false;
        };
        let Ok(which) = std::str::from_utf8(which) else {
            return true;
        };
        // Follows the magic link to what the fd is.
        match nix::fcntl::openat(dir, which, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()) {
            Ok(fd) => sys::fs::mount_id_of(fd.as_fd()).is_none_or(|id| root.mount(id).is_none()),
            Err(_) => true,
        }
    }

    /// Reads what `n` (a call of `w`) names; returns `None` if the call is no
    /// longer pending (do not use anything read then). Runs while the caller
    /// waits: only reads, never blocks on anything but the caller's memory.
    pub(crate) fn capture(
        &mut self,
        listener: BorrowedFd<'_>,
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
        // namespaces are refused). For an `execve`, which needs neither to
        // be answered, only the caller's `/proc/<pid>` now (it names this
        // process for good: taken while the call is pending, checked below),
        // the rest read from it once the call is answered.
        let (fresh, pending) = match (&self.root, open_proc_pid(n.pid)) {
            (Some(_), _) | (None, Err(_)) => (None, None),
            (None, Ok(dir)) if w.op == seccomp::FileOp::Exec => (None, Some(dir)),
            (None, Ok(dir)) => (SandboxRoot::open(dir.as_fd()).ok().map(Arc::new), None),
        };
        // Everything read above came from the caller only if it is still
        // waiting in this call now (the root too: kept only then).
        if !sys::seccomp::id_valid(listener, n.id) {
            return None;
        }
        if fresh.is_some() {
            self.root = fresh;
        }
        if pending.is_some() {
            self.pending_root = pending;
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
            at: std::time::Instant::now(),
        })
    }

    /// After `c`'s call was answered: the sandbox's root and mount table,
    /// when its reading was left for now ([`Capturer::pending_root`]), for
    /// `c` and every capture after it. A caller gone meanwhile leaves them
    /// to the next call.
    pub(crate) fn after_answer(&mut self, c: &mut Captured) {
        if let Some(dir) = self.pending_root.take() {
            if let Ok(root) = SandboxRoot::open(dir.as_fd()) {
                let root = Arc::new(root);
                self.root = Some(root.clone());
                c.root = Some(root);
            }
        }
    }

    /// A capture's call is about to be answered ([`Queued`]).
    pub(crate) fn answering(&self) {
        self.progress.answered.fetch_add(1, Ordering::SeqCst);
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
        self.progress.queued.fetch_add(1, Ordering::SeqCst);
    }
}

fn slot_is_second(w: &Watched, arg: seccomp::PathArg) -> bool {
    w.paths[1] == Some(arg)
}
