//! Landlock: a second, independent layer under the mount namespace.
//!
//! The mount layer decides what *exists* inside the sandbox; Landlock decides what
//! the server may *do* with what exists, enforced by a different kernel subsystem
//! (an LSM checked on every open, create, rename, connect...). If one layer is ever
//! bypassed (a mount-API bug, a missed flag, a writable path the mount layer did not
//! mean to expose), the other still holds.
//!
//! The rules are data: [`rules`] turns a [`SandboxSpec`] into a table of
//! (path, access) mirroring what `mounts.rs` put in the sandbox root; [`ruleset`]
//! masks the table with what the running kernel's ABI can handle and builds a
//! ruleset fd from it with raw syscalls. [`Confinement::apply`] then calls
//! `landlock_restrict_self` in the server child, after `no_new_privs`.
//!
//! Landlock rules only ever *add* access along a path: a read-only grant nested in a
//! write grant (or in `/tmp`) inherits the write rights of its parent here. That case
//! stays read-only thanks to the mount layer (the grant is a read-only bind).
//! For the same reason the names a write grant keeps read-only because the host
//! trusts them ([`crate::protect`]: `.git`, `.bashrc`...) have no rule here: a
//! read-only rule beneath the grant's read-write one would remove nothing.
//!
//! [`Confinement::apply`]: crate::confine::Confinement::apply

use crate::proto::Failure;
use crate::spec::SandboxSpec;
use crate::sys;
use nix::errno::Errno;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

// --- Kernel ABI (include/uapi/linux/landlock.h). Not in the libc crate. ---

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)` returns the ABI.
const CREATE_RULESET_VERSION: u32 = 1 << 0;
/// `landlock_add_rule` rule types.
const RULE_PATH_BENEATH: u32 = 1;
const RULE_NET_PORT: u32 = 2;

// Filesystem access rights (LANDLOCK_ACCESS_FS_*).
pub(crate) const FS_EXECUTE: u64 = 1 << 0;
pub(crate) const FS_WRITE_FILE: u64 = 1 << 1;
pub(crate) const FS_READ_FILE: u64 = 1 << 2;
pub(crate) const FS_READ_DIR: u64 = 1 << 3;
pub(crate) const FS_REMOVE_DIR: u64 = 1 << 4;
pub(crate) const FS_REMOVE_FILE: u64 = 1 << 5;
pub(crate) const FS_MAKE_CHAR: u64 = 1 << 6;
pub(crate) const FS_MAKE_DIR: u64 = 1 << 7;
pub(crate) const FS_MAKE_REG: u64 = 1 << 8;
pub(crate) const FS_MAKE_SOCK: u64 = 1 << 9;
pub(crate) const FS_MAKE_FIFO: u64 = 1 << 10;
pub(crate) const FS_MAKE_BLOCK: u64 = 1 << 11;
pub(crate) const FS_MAKE_SYM: u64 = 1 << 12;
/// ABI 2: link or rename a file into another directory.
pub(crate) const FS_REFER: u64 = 1 << 13;
/// ABI 3: truncate(2), ftruncate(2), open(O_TRUNC).
pub(crate) const FS_TRUNCATE: u64 = 1 << 14;
/// ABI 5: ioctl(2) on character and block devices.
pub(crate) const FS_IOCTL_DEV: u64 = 1 << 15;

// Network access rights (LANDLOCK_ACCESS_NET_*), ABI 4.
pub(crate) const NET_BIND_TCP: u64 = 1 << 0;
pub(crate) const NET_CONNECT_TCP: u64 = 1 << 1;

// IPC scoping (LANDLOCK_SCOPE_*), ABI 6.
pub(crate) const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
pub(crate) const SCOPE_SIGNAL: u64 = 1 << 1;

/// `struct landlock_ruleset_attr`. Passed whole: the kernel accepts a larger struct
/// than it knows as long as the unknown tail is zero, and [`attr`] zeroes every
/// field the ABI does not have.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the uapi header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `struct landlock_net_port_attr`.
#[repr(C)]
struct NetPortAttr {
    allowed_access: u64,
    port: u64,
}

/// The newest ABI whose rights this module knows. ABI 7 adds only audit-log flags
/// for `landlock_restrict_self`, no access right.
pub(crate) const KNOWN_ABI: u32 = 7;

/// What each ABI adds, for messages naming a missing feature.
const FEATURES: [&str; 8] = [
    "",
    "filesystem access control",
    "linking and renaming across directories (refer)",
    "truncation control",
    "TCP bind and connect control",
    "device ioctl control",
    "abstract unix socket and signal scoping",
    "audit logging control",
];

// --- The rights the sandbox grants (all masked by the ABI later). ---

/// Rights that make sense on a non-directory (the kernel refuses the others with
/// EINVAL on a file rule).
const FILE_RIGHTS: u64 = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV;
/// Runtime, `/etc`, the program and `read` grants.
pub(crate) const READ_EXEC: u64 = FS_READ_FILE | FS_READ_DIR | FS_EXECUTE;
/// `write` grants, `/tmp` and a private `$HOME`: everything but device nodes and
/// device ioctls (every writable mount is `nodev`, so there is nothing to mirror).
pub(crate) const READ_WRITE: u64 = READ_EXEC
    | FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_MAKE_SYM
    | FS_REFER
    | FS_TRUNCATE;
/// What the creation guard ([`crate::guard`]) takes away from every rule: with
/// the guard on, the daemon makes new files, directories, symlinks and FIFOs
/// on the server's behalf after checking their names, so a call that reaches
/// the kernel itself (one that raced its own path buffer past the check)
/// cannot make any. Sockets stay: a socket cannot be read as a start-up file.
pub(crate) const GUARDED_MAKE: u64 = FS_MAKE_REG | FS_MAKE_DIR | FS_MAKE_SYM | FS_MAKE_FIFO;

/// What the guard also takes away from the rules of write grants and of
/// whatever lies above one (the private `/tmp` or `$HOME` a grant is mounted
/// in): opening an existing file for writing. The daemon performs those opens
/// on the name it checked ([`crate::guard`]), so a file git runs deep in a
/// granted tree cannot be written, whatever the caller's path says when the
/// kernel reads it again. Writes through fds already open are not opens.
pub(crate) const GUARDED_WRITE: u64 = FS_WRITE_FILE;
/// `/dev/shm` is mounted `noexec`.
pub(crate) const SHM: u64 = READ_WRITE & !FS_EXECUTE;
/// `/proc`: servers read it and occasionally write `/proc/self/...`; `noexec`.
pub(crate) const PROC: u64 = FS_READ_FILE | FS_READ_DIR | FS_WRITE_FILE;
/// `/dev/null`, `/dev/zero`, `/dev/full`.
pub(crate) const DEV_RW: u64 = FS_READ_FILE | FS_WRITE_FILE;
/// `/dev/random`, `/dev/urandom`.
pub(crate) const DEV_RO: u64 = FS_READ_FILE;

/// Runtime directories: a rule only for those that exist inside as directories
/// (on merged-/usr hosts `/bin` & co. are symlinks into `/usr`, already covered).
const RUNTIME: &[&str] = &[
    "/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin",
];

/// Every filesystem right the given ABI can handle.
pub(crate) fn fs_rights(abi: u32) -> u64 {
    let mut r = 0;
    if abi >= 1 {
        r |= FS_EXECUTE
            | FS_WRITE_FILE
            | FS_READ_FILE
            | FS_READ_DIR
            | FS_REMOVE_DIR
            | FS_REMOVE_FILE
            | FS_MAKE_CHAR
            | FS_MAKE_DIR
            | FS_MAKE_REG
            | FS_MAKE_SOCK
            | FS_MAKE_FIFO
            | FS_MAKE_BLOCK
            | FS_MAKE_SYM;
    }
    if abi >= 2 {
        r |= FS_REFER;
    }
    if abi >= 3 {
        r |= FS_TRUNCATE;
    }
    if abi >= 5 {
        r |= FS_IOCTL_DEV;
    }
    r
}

/// Every network right the given ABI can handle.
pub(crate) fn net_rights(abi: u32) -> u64 {
    if abi >= 4 {
        NET_BIND_TCP | NET_CONNECT_TCP
    } else {
        0
    }
}

/// Every scope the given ABI can restrict.
pub(crate) fn scopes(abi: u32) -> u64 {
    if abi >= 6 {
        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    } else {
        0
    }
}

/// The ruleset attribute for `abi`: handle (deny unless granted) everything it knows.
fn attr(abi: u32) -> RulesetAttr {
    RulesetAttr {
        handled_access_fs: fs_rights(abi),
        handled_access_net: net_rights(abi),
        scoped: scopes(abi),
    }
}

/// How a rule's path is opened inside the sandbox (always `O_PATH|O_CLOEXEC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Open {
    /// Never through a symlink; missing fails closed.
    Required,
    /// Never through a symlink; skipped when missing or a symlink (runtime dirs:
    /// on merged-/usr hosts `/bin` & co. are symlinks into the covered `/usr`).
    Optional,
    /// Resolved like `execve` resolves it (the program may be `/bin/sh` under a
    /// symlinked runtime dir). Safe: every link inside resolves within the
    /// sandbox root, and the server has not run yet. Missing: no rule (granting
    /// less), and execve reports it as the usual "cannot execute" error.
    Follow,
}

/// One filesystem rule: `access` on everything beneath `path` (or on the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    pub path: PathBuf,
    pub access: u64,
    pub open: Open,
}

fn rule(path: impl Into<PathBuf>, access: u64) -> Rule {
    Rule {
        path: path.into(),
        access,
        open: Open::Required,
    }
}

/// The filesystem rule table for `spec`, mirroring `mounts::build_root`, before
/// any ABI masking. Paths are the sandbox's own (after pivot_root). `guard`:
/// the creation guard is on, no rule may create ([`GUARDED_MAKE`]).
pub(crate) fn rules(spec: &SandboxSpec, guard: bool) -> Vec<Rule> {
    let mut t: Vec<Rule> = RUNTIME
        .iter()
        .map(|p| Rule {
            open: Open::Optional,
            ..rule(*p, READ_EXEC)
        })
        .collect();
    t.push(rule("/etc", READ_EXEC));
    t.push(Rule {
        open: Open::Follow,
        ..rule(&spec.program, READ_EXEC)
    });
    for p in &spec.read {
        // A path in both lists is write, as in the mount layer.
        if !spec.write.contains(p) {
            t.push(rule(p, READ_EXEC));
        }
    }
    for p in &spec.write {
        t.push(rule(p, READ_WRITE));
    }
    t.push(rule("/tmp", READ_WRITE));
    // The private $HOME tmpfs exists exactly when no grant covers it; a covering
    // write grant already carries the right rights, a covering read grant keeps
    // $HOME read-only.
    let covered = spec
        .read
        .iter()
        .chain(&spec.write)
        .any(|g| spec.home.starts_with(g));
    if !covered {
        t.push(rule(&spec.home, READ_WRITE));
    }
    t.push(rule("/dev", FS_READ_DIR));
    for d in ["/dev/null", "/dev/zero", "/dev/full"] {
        t.push(rule(d, DEV_RW));
    }
    for d in ["/dev/random", "/dev/urandom"] {
        t.push(rule(d, DEV_RO));
    }
    t.push(rule("/dev/shm", SHM));
    t.push(rule("/proc", PROC));
    if guard {
        for r in &mut t {
            r.access &= !GUARDED_MAKE;
            if spec.write.iter().any(|w| w.starts_with(&r.path)) {
                r.access &= !GUARDED_WRITE;
            }
        }
    }
    t
}

/// TCP ports the server may connect to, as (port, access) rules: only the egress
/// proxy's port, for connect; TCP bind is denied outright (the proxy's listener
/// is bound by PID 1 before Landlock applies).
pub(crate) fn net_rules(spec: &SandboxSpec) -> Vec<(u16, u64)> {
    spec.proxy_port
        .map(|port| vec![(port, NET_CONNECT_TCP)])
        .unwrap_or_default()
}

/// The rights of `access` the kernel accepts on a rule: masked by the ABI, and
/// by [`FILE_RIGHTS`] when the path is not a directory.
pub(crate) fn effective(access: u64, abi: u32, is_dir: bool) -> u64 {
    let a = access & fs_rights(abi);
    if is_dir {
        a
    } else {
        a & FILE_RIGHTS
    }
}

/// The raw probe: `Ok(abi)`, or the errno (ENOSYS: not built in; EOPNOTSUPP:
/// built in but not enabled at boot).
fn probe() -> Result<u32, Errno> {
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns an integer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r as u32)
    }
}

/// The Landlock ABI the sandbox applies: the kernel's, capped at the newest this
/// build knows ([`KNOWN_ABI`]); `None` when Landlock is not built in or not
/// enabled. For the audit trail (`session.start`) and `wardenctl status`.
pub fn landlock_abi() -> Option<u32> {
    probe().ok().map(|abi| abi.min(KNOWN_ABI))
}

/// Checks the policy's minimum ABI against what the kernel offers, then against
/// what this build can apply.
fn check_min(min: u32, kernel: Result<u32, Errno>) -> Result<(), Failure> {
    if min == 0 {
        return Ok(());
    }
    let wanted = match FEATURES.get(min as usize) {
        Some(f) => format!("landlock ABI {min} is required by the policy ({f})"),
        None => format!("landlock ABI {min} is required by the policy"),
    };
    match kernel {
        Ok(abi) if abi < min => Err(Failure::msg(
            "landlock",
            format!("{wanted}, the kernel offers ABI {abi}"),
        )),
        Ok(_) if min > KNOWN_ABI => Err(Failure::msg(
            "landlock",
            format!("{wanted}, this build of warden applies ABI {KNOWN_ABI} at most"),
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(Failure::Setup {
            stage: "landlock".into(),
            errno: Some(e as i32),
            message: format!(
                "{wanted}, the kernel offers no landlock ({})",
                if e == Errno::EOPNOTSUPP {
                    "built in but not enabled: add landlock to the lsm= boot parameter".to_string()
                } else {
                    sys::errno_text(e)
                }
            ),
        }),
    }
}

fn add_rule<T>(ruleset: &OwnedFd, kind: u32, attr: &T) -> Result<(), Errno> {
    // SAFETY: `attr` points to a live struct of the layout `kind` expects; flags 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            kind,
            attr as *const T,
            0u32,
        )
    };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// Builds the Landlock ruleset for `spec` with every right of the best ABI
/// available. `Ok(None)` when the kernel has no Landlock and the policy sets no
/// minimum (the mount namespace remains the primary layer). Runs in PID 1 after
/// pivot_root; the fd is `O_CLOEXEC` and closed by the server's execve.
pub(crate) fn ruleset(spec: &SandboxSpec, guard: bool) -> Result<Option<OwnedFd>, Failure> {
    let kernel = probe();
    check_min(spec.landlock_min_abi, kernel)?;
    let Ok(kernel_abi) = kernel else {
        return Ok(None);
    };
    // A newer kernel is asked only for what this code knows how to grant.
    let abi = kernel_abi.min(KNOWN_ABI);
    let a = attr(abi);
    // SAFETY: `a` is a live RulesetAttr of the size we pass; flags 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &a as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if r < 0 {
        return Err(Failure::os(
            format!("landlock: create ruleset (ABI {abi})"),
            Errno::last(),
        ));
    }
    // SAFETY: the kernel just returned this fd (O_CLOEXEC) to us.
    let fd = unsafe { OwnedFd::from_raw_fd(r as i32) };

    for r in rules(spec, guard) {
        let stage = || format!("landlock rule {}", r.path.display());
        // O_PATH|O_CLOEXEC: the same object the mount layer put there.
        let opened = match r.open {
            Open::Follow => nix::fcntl::open(
                &r.path,
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            ),
            Open::Required | Open::Optional => sys::open_path_nofollow(None, &r.path),
        };
        let path_fd = match opened {
            Ok(f) => f,
            Err(Errno::ENOENT | Errno::ELOOP) if r.open == Open::Optional => continue,
            Err(Errno::ENOENT) if r.open == Open::Follow => continue,
            Err(e) => {
                return Err(Failure::Setup {
                    stage: stage(),
                    errno: Some(e as i32),
                    message: format!(
                        "cannot open {} inside the sandbox: {}",
                        r.path.display(),
                        sys::errno_text(e)
                    ),
                })
            }
        };
        let st = nix::sys::stat::fstat(&path_fd).map_err(|e| Failure::os(stage(), e))?;
        let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        let access = effective(r.access, abi, is_dir);
        if access == 0 {
            continue;
        }
        let pb = PathBeneathAttr {
            allowed_access: access,
            parent_fd: path_fd.as_raw_fd(),
        };
        add_rule(&fd, RULE_PATH_BENEATH, &pb).map_err(|e| Failure::os(stage(), e))?;
    }
    if net_rights(abi) != 0 {
        for (port, access) in net_rules(spec) {
            let np = NetPortAttr {
                allowed_access: access & net_rights(abi),
                port: port.into(),
            };
            add_rule(&fd, RULE_NET_PORT, &np)
                .map_err(|e| Failure::os(format!("landlock rule tcp port {port}"), e))?;
        }
    }
    Ok(Some(fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// From JSON, so that fields added later with `#[serde(default)]` need no
    /// change here.
    fn spec() -> SandboxSpec {
        serde_json::from_value(serde_json::json!({
            "session_id": "s",
            "program": "/opt/tool/bin/server",
            "argv": [b"server"],
            "env": [],
            "cwd": "/",
            "read": ["/data/ref", "/both"],
            "write": ["/work/out", "/both"],
            "home": "/home/ana",
            "uid": 1000,
            "gid": 1000,
            "user": "ana",
            "tmp_size_mb": 1,
        }))
        .unwrap()
    }

    fn access_of(t: &[Rule], p: &str) -> Vec<u64> {
        t.iter()
            .filter(|r| r.path == Path::new(p))
            .map(|r| r.access)
            .collect()
    }

    #[test]
    fn table_mirrors_the_mounts() {
        let t = rules(&spec(), false);
        for p in RUNTIME {
            let r = t.iter().find(|r| r.path == Path::new(p)).unwrap();
            assert_eq!((r.access, r.open), (READ_EXEC, Open::Optional), "{p}");
        }
        assert_eq!(access_of(&t, "/etc"), [READ_EXEC]);
        assert_eq!(access_of(&t, "/opt/tool/bin/server"), [READ_EXEC]);
        assert_eq!(access_of(&t, "/data/ref"), [READ_EXEC]);
        assert_eq!(access_of(&t, "/work/out"), [READ_WRITE]);
        // In both lists: write only, as the mount layer does.
        assert_eq!(access_of(&t, "/both"), [READ_WRITE]);
        assert_eq!(access_of(&t, "/tmp"), [READ_WRITE]);
        assert_eq!(access_of(&t, "/home/ana"), [READ_WRITE]);
        assert_eq!(access_of(&t, "/dev"), [FS_READ_DIR]);
        for d in ["/dev/null", "/dev/zero", "/dev/full"] {
            assert_eq!(access_of(&t, d), [FS_READ_FILE | FS_WRITE_FILE], "{d}");
        }
        for d in ["/dev/random", "/dev/urandom"] {
            assert_eq!(access_of(&t, d), [FS_READ_FILE], "{d}");
        }
        assert_eq!(access_of(&t, "/dev/shm"), [SHM]);
        assert_eq!(
            access_of(&t, "/proc"),
            [FS_READ_FILE | FS_READ_DIR | FS_WRITE_FILE]
        );
        // Nothing else: no rule on "/" itself, none on /sys, /run, /var...
        let others: Vec<&str> = t
            .iter()
            .skip(RUNTIME.len())
            .map(|r| r.path.to_str().unwrap())
            .collect();
        assert_eq!(
            others,
            [
                "/etc",
                "/opt/tool/bin/server",
                "/data/ref",
                "/work/out",
                "/both",
                "/tmp",
                "/home/ana",
                "/dev",
                "/dev/null",
                "/dev/zero",
                "/dev/full",
                "/dev/random",
                "/dev/urandom",
                "/dev/shm",
                "/proc",
            ]
        );
        assert!(t.iter().all(|r| r.path != Path::new("/")));
        // Only the runtime dirs may be missing inside.
        for r in &t {
            let runtime = RUNTIME.iter().any(|p| r.path == Path::new(p));
            let program = r.path == Path::new("/opt/tool/bin/server");
            let want = match (runtime, program) {
                (true, _) => Open::Optional,
                (_, true) => Open::Follow,
                _ => Open::Required,
            };
            assert_eq!(r.open, want, "{}", r.path.display());
        }
    }

    #[test]
    fn write_grants_get_write_rights_and_read_grants_do_not() {
        let writes = FS_WRITE_FILE
            | FS_REMOVE_DIR
            | FS_REMOVE_FILE
            | FS_MAKE_DIR
            | FS_MAKE_REG
            | FS_MAKE_SOCK
            | FS_MAKE_FIFO
            | FS_MAKE_SYM
            | FS_REFER
            | FS_TRUNCATE;
        assert_eq!(READ_WRITE & writes, writes);
        for a in [READ_EXEC, DEV_RO] {
            assert_eq!(a & writes, 0);
        }
        // Read-only places carry no write right at all.
        let t = rules(&spec(), false);
        for r in &t {
            let ro = RUNTIME.iter().any(|p| r.path == Path::new(p))
                || ["/etc", "/data/ref", "/opt/tool/bin/server", "/dev"]
                    .iter()
                    .any(|p| r.path == Path::new(p));
            if ro {
                assert_eq!(r.access & writes, 0, "{}", r.path.display());
            }
        }
        // /proc may be written (/proc/self/...) but nothing created, removed or run.
        assert_eq!(PROC & (writes & !FS_WRITE_FILE), 0);
        assert_eq!(PROC & FS_EXECUTE, 0);
        // noexec mounts stay non-executable.
        assert_eq!(SHM & FS_EXECUTE, 0);
    }

    #[test]
    fn with_the_guard_no_rule_creates_but_sockets() {
        let mut s = spec();
        s.write.push("/work".into());
        let plain = rules(&s, false);
        let guarded = rules(&s, true);
        assert_eq!(plain.len(), guarded.len());
        for (p, g) in plain.iter().zip(&guarded) {
            assert_eq!(p.path, g.path);
            assert_eq!(g.access & GUARDED_MAKE, 0, "{:?}", g.path);
            // Opening for writing goes through the guard where a write grant
            // is (at or below the rule), nowhere else.
            let above_a_grant = s.write.iter().any(|w| w.starts_with(&g.path));
            let taken = GUARDED_MAKE | if above_a_grant { GUARDED_WRITE } else { 0 };
            assert_eq!(g.access, p.access & !taken, "{:?}", g.path);
        }
        assert_ne!(access_of(&guarded, "/work")[0] & FS_MAKE_SOCK, 0);
        assert_ne!(access_of(&guarded, "/work")[0] & FS_REMOVE_FILE, 0);
        assert_eq!(access_of(&guarded, "/work")[0] & FS_WRITE_FILE, 0);
        assert_eq!(access_of(&guarded, "/tmp")[0] & FS_MAKE_REG, 0);
        assert_ne!(access_of(&guarded, "/tmp")[0] & FS_WRITE_FILE, 0);
        assert_ne!(access_of(&guarded, "/dev/null")[0] & FS_WRITE_FILE, 0);
        // A grant under /tmp: /tmp's own rule would let it be written.
        s.write.push("/tmp/w".into());
        let guarded = rules(&s, true);
        assert_eq!(access_of(&guarded, "/tmp")[0] & FS_WRITE_FILE, 0);
        assert_ne!(access_of(&guarded, "/tmp")[0] & FS_READ_FILE, 0);
    }

    #[test]
    fn device_nodes_and_device_ioctls_are_never_granted() {
        for r in rules(&spec(), false) {
            assert_eq!(
                r.access & (FS_MAKE_CHAR | FS_MAKE_BLOCK | FS_IOCTL_DEV),
                0,
                "{}",
                r.path.display()
            );
        }
    }

    #[test]
    fn home_rule_follows_the_private_tmpfs() {
        // Covered by a read grant: no private tmpfs, stays read-only.
        let mut s = spec();
        s.read.push("/home".into());
        let t = rules(&s, false);
        assert!(access_of(&t, "/home/ana").is_empty());
        assert_eq!(access_of(&t, "/home"), [READ_EXEC]);
        // Covered by a write grant: the grant's own rule.
        let mut s = spec();
        s.write.push("/home/ana".into());
        assert_eq!(access_of(&rules(&s, false), "/home/ana"), [READ_WRITE]);
    }

    #[test]
    fn abi_masks() {
        assert_eq!(fs_rights(0), 0);
        assert_eq!(fs_rights(1), (1 << 13) - 1);
        assert_eq!(fs_rights(1) & (FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV), 0);
        assert_eq!(fs_rights(2), fs_rights(1) | FS_REFER);
        assert_eq!(fs_rights(3), fs_rights(2) | FS_TRUNCATE);
        assert_eq!(fs_rights(4), fs_rights(3));
        assert_eq!(fs_rights(5), fs_rights(4) | FS_IOCTL_DEV);
        assert_eq!(fs_rights(7), (1 << 16) - 1);
        for abi in 0..4 {
            assert_eq!(net_rights(abi), 0);
        }
        assert_eq!(net_rights(4), NET_BIND_TCP | NET_CONNECT_TCP);
        for abi in 0..6 {
            assert_eq!(scopes(abi), 0);
        }
        assert_eq!(scopes(6), SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL);
        assert_eq!(
            attr(7),
            RulesetAttr {
                handled_access_fs: 0xffff,
                handled_access_net: 0b11,
                scoped: 0b11,
            }
        );
        // A kernel older than ABI 4 gets zeroes where it has no fields.
        assert_eq!(
            attr(3),
            RulesetAttr {
                handled_access_fs: (1 << 15) - 1,
                handled_access_net: 0,
                scoped: 0,
            }
        );
    }

    #[test]
    fn gated_rights_are_masked_for_lower_abis() {
        assert_eq!(effective(READ_WRITE, 1, true) & (FS_REFER | FS_TRUNCATE), 0);
        assert_eq!(effective(READ_WRITE, 2, true) & FS_TRUNCATE, 0);
        assert_ne!(effective(READ_WRITE, 2, true) & FS_REFER, 0);
        assert_eq!(effective(READ_WRITE, 3, true), READ_WRITE);
        // File rules lose the directory-only rights (the kernel says EINVAL).
        assert_eq!(
            effective(READ_WRITE, 7, false),
            FS_READ_FILE | FS_EXECUTE | FS_WRITE_FILE | FS_TRUNCATE
        );
        assert_eq!(
            effective(READ_WRITE, 2, false),
            READ_EXEC & FILE_RIGHTS | FS_WRITE_FILE
        );
        assert_eq!(effective(READ_EXEC, 7, false), FS_READ_FILE | FS_EXECUTE);
        // Every granted right is one the table's ABI handles.
        for abi in 1..=KNOWN_ABI {
            for r in rules(&spec(), false) {
                assert_eq!(effective(r.access, abi, true) & !fs_rights(abi), 0);
            }
        }
    }

    #[test]
    fn minimum_abi_is_enforced_with_a_message() {
        assert!(check_min(0, Err(Errno::ENOSYS)).is_ok());
        assert!(check_min(0, Ok(1)).is_ok());
        assert!(check_min(3, Ok(3)).is_ok());
        assert!(check_min(3, Ok(7)).is_ok());
        let msg = |f: Failure| match f {
            Failure::Setup { stage, message, .. } => {
                assert_eq!(stage, "landlock");
                message
            }
            f => panic!("{f:?}"),
        };
        assert_eq!(
            msg(check_min(3, Ok(1)).unwrap_err()),
            "landlock ABI 3 is required by the policy (truncation control), the kernel offers ABI 1"
        );
        let m = msg(check_min(1, Err(Errno::EOPNOTSUPP)).unwrap_err());
        assert!(m.contains("ABI 1 is required") && m.contains("lsm="), "{m}");
        let m = msg(check_min(4, Err(Errno::ENOSYS)).unwrap_err());
        assert!(m.contains("offers no landlock"), "{m}");
        assert_eq!(
            msg(check_min(64, Ok(7)).unwrap_err()),
            "landlock ABI 64 is required by the policy, the kernel offers ABI 7"
        );
        // A kernel newer than this build: refused rather than silently weaker.
        assert_eq!(
            msg(check_min(8, Ok(9)).unwrap_err()),
            "landlock ABI 8 is required by the policy, this build of warden applies ABI 7 at most"
        );
    }

    #[test]
    fn net_rules_grant_only_the_proxy_port() {
        assert!(net_rules(&spec()).is_empty());
        let mut with_proxy = spec();
        with_proxy.proxy_port = Some(3128);
        assert_eq!(net_rules(&with_proxy), vec![(3128, NET_CONNECT_TCP)]);
    }
}

/// The layer on its own: the real [`ruleset`] applied with the real
/// [`Confinement::apply`](crate::confine::Confinement::apply) in a forked child on
/// the host, with no namespace and no mount layer at all. Every denial seen here
/// is Landlock's; the control runs the same operations unrestricted.
#[cfg(test)]
mod host_tests {
    use super::*;
    use crate::confine::Confinement;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    /// One operation for the child, prepared (allocated) before the fork.
    enum Op {
        Open(CString, libc::c_int),
        Mkdir(CString),
        Tcp {
            connect: bool,
            addr: libc::sockaddr_in,
        },
        Abstract(libc::sockaddr_un, libc::socklen_t),
        Kill(libc::pid_t),
    }

    fn c(p: &Path) -> CString {
        CString::new(p.as_os_str().as_bytes()).unwrap()
    }

    fn inet(port: u16) -> libc::sockaddr_in {
        libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        }
    }

    /// Runs one op; 0 or the errno. Raw syscalls only (we are a forked child of
    /// a multi-threaded test process).
    unsafe fn run(op: &Op) -> i32 {
        // SAFETY: raw syscalls on data prepared before the fork.
        unsafe {
            let r = match op {
                Op::Open(p, flags) => {
                    let fd = libc::open(p.as_ptr(), *flags | libc::O_CLOEXEC, 0o600);
                    if fd >= 0 {
                        libc::close(fd);
                    }
                    fd
                }
                Op::Mkdir(p) => libc::mkdir(p.as_ptr(), 0o700),
                Op::Tcp { connect, addr } => {
                    let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                    let a = addr as *const libc::sockaddr_in as *const libc::sockaddr;
                    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                    if *connect {
                        libc::connect(s, a, len)
                    } else {
                        libc::bind(s, a, len)
                    }
                }
                Op::Abstract(addr, len) => {
                    let s = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                    let a = addr as *const libc::sockaddr_un as *const libc::sockaddr;
                    libc::connect(s, a, *len)
                }
                Op::Kill(pid) => libc::kill(*pid, 0),
            };
            if r < 0 {
                *libc::__errno_location()
            } else {
                0
            }
        }
    }

    /// Forks; the child applies `confinement` (if any) after no_new_privs, runs
    /// `ops` and reports one errno per op.
    fn in_child(confinement: Option<&Confinement>, ops: &[Op]) -> Vec<i32> {
        let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let mut buf = vec![0u8; 4 * ops.len()];
        // SAFETY: the child makes raw syscalls only, on prepared data, then _exit.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                // SAFETY: as above.
                unsafe {
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
                        libc::_exit(2);
                    }
                    if let Some(c) = confinement {
                        if c.apply().is_err() {
                            libc::_exit(3);
                        }
                    }
                    for (i, op) in ops.iter().enumerate() {
                        buf[4 * i..4 * i + 4].copy_from_slice(&run(op).to_ne_bytes());
                    }
                    libc::write(wr.as_raw_fd(), buf.as_ptr().cast(), buf.len());
                    libc::_exit(0)
                }
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop(wr);
                let st = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(st, nix::sys::wait::WaitStatus::Exited(child, 0));
                let mut f = std::fs::File::from(rd);
                std::io::Read::read_exact(&mut f, &mut buf).unwrap();
                buf.chunks(4)
                    .map(|b| i32::from_ne_bytes(b.try_into().unwrap()))
                    .collect()
            }
        }
    }

    /// `ro/` (read grant) and `rw/` (write grant, also $HOME) side by side with
    /// `out/` (no grant), under /var/tmp: not under /tmp, whose rule would cover it.
    struct Fixture {
        dir: tempfile::TempDir,
        spec: SandboxSpec,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::Builder::new()
                .prefix("warden-landlock-")
                .tempdir_in("/var/tmp")
                .unwrap();
            let root = dir.path().canonicalize().unwrap();
            for d in ["ro", "rw", "out"] {
                std::fs::create_dir(root.join(d)).unwrap();
                std::fs::write(root.join(d).join("f"), "x").unwrap();
            }
            let program = Path::new("/bin/sh").canonicalize().unwrap();
            let spec = serde_json::from_value(serde_json::json!({
                "session_id": "host",
                "program": program,
                "argv": [b"sh"],
                "env": [],
                "cwd": "/",
                "read": [root.join("ro")],
                "write": [root.join("rw")],
                "home": root.join("rw"),
                "uid": nix::unistd::getuid().as_raw(),
                "gid": nix::unistd::getgid().as_raw(),
                "user": "t",
                "tmp_size_mb": 1,
            }))
            .unwrap();
            Fixture { dir, spec }
        }

        fn p(&self, rel: &str) -> PathBuf {
            self.dir.path().canonicalize().unwrap().join(rel)
        }
    }

    #[test]
    fn landlock_alone_enforces_the_grants() {
        let Some(abi) = landlock_abi() else {
            eprintln!("skipping: this kernel offers no Landlock");
            return;
        };
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        let name = format!("warden-landlock-test-{}", std::process::id());
        let unix = {
            use std::os::linux::net::SocketAddrExt;
            let a = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
            std::os::unix::net::UnixListener::bind_addr(&a).unwrap()
        };
        // SAFETY: sockaddr_un is plain integers; all-zero is valid.
        let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (i, b) in name.bytes().enumerate() {
            sun.sun_path[i + 1] = b as libc::c_char;
        }
        let sun_len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as u32;
        let me = std::process::id() as libc::pid_t;

        let (eacces, eperm) = (libc::EACCES, libc::EPERM);
        let gate = |min: u32, e: i32| if abi >= min { e } else { 0 };
        let tmp = Path::new("/tmp").join(&name);
        let cases = |f: &Fixture| -> Vec<(&'static str, Op, i32)> {
            let (rd, wr, new) = (
                libc::O_RDONLY,
                libc::O_WRONLY,
                libc::O_WRONLY | libc::O_CREAT,
            );
            let open = |p: &Path, flags| Op::Open(c(p), flags);
            let (ro, rw, out) = (f.p("ro"), f.p("rw"), f.p("out"));
            let connect = Op::Tcp {
                connect: true,
                addr: inet(port),
            };
            let bind = Op::Tcp {
                connect: false,
                addr: inet(0),
            };
            vec![
                ("read a read grant", open(&ro.join("f"), rd), 0),
                ("write a read grant", open(&ro.join("f"), wr), eacces),
                ("create in a read grant", open(&ro.join("new"), new), eacces),
                ("mkdir in a read grant", Op::Mkdir(c(&ro.join("d"))), eacces),
                ("write a write grant", open(&rw.join("f"), wr), 0),
                ("create in a write grant", open(&rw.join("new"), new), 0),
                ("mkdir in a write grant", Op::Mkdir(c(&rw.join("d"))), 0),
                ("read outside the grants", open(&out.join("f"), rd), eacces),
                ("list the grants' parent", open(f.dir.path(), rd), eacces),
                ("list /", open(Path::new("/"), rd), eacces),
                ("list /usr", open(Path::new("/usr"), rd), 0),
                ("write /dev/null", open(Path::new("/dev/null"), wr), 0),
                ("read /dev/urandom", open(Path::new("/dev/urandom"), rd), 0),
                (
                    "write /dev/urandom",
                    open(Path::new("/dev/urandom"), wr),
                    eacces,
                ),
                ("create in /tmp", open(&tmp, new), 0),
                ("tcp connect", connect, gate(4, eacces)),
                ("tcp bind", bind, gate(4, eacces)),
                (
                    "abstract unix connect out",
                    Op::Abstract(sun, sun_len),
                    gate(6, eperm),
                ),
                ("signal a process outside", Op::Kill(me), gate(6, eperm)),
            ]
        };

        // Control: the same operations, unrestricted, all succeed.
        let f = Fixture::new();
        let cs = cases(&f);
        let (names, ops): (Vec<&str>, Vec<Op>) = cs.into_iter().map(|(n, o, _)| (n, o)).unzip();
        let got = in_child(None, &ops);
        for (n, e) in names.iter().zip(&got) {
            assert_eq!(*e, 0, "control: {n}: {}", Errno::from_raw(*e));
        }

        // Restricted: only what the table grants.
        let f = Fixture::new();
        let confinement = Confinement {
            landlock: ruleset(&f.spec, false).unwrap(),
            seccomp: None,
            notify: false,
            wait_killable: false,
        };
        assert!(confinement.landlock.is_some());
        let cs = cases(&f);
        let want: Vec<i32> = cs.iter().map(|c| c.2).collect();
        let (names, ops): (Vec<&str>, Vec<Op>) = cs.into_iter().map(|(n, o, _)| (n, o)).unzip();
        let got = in_child(Some(&confinement), &ops);
        let _ = std::fs::remove_file(&tmp);
        for ((n, w), g) in names.iter().zip(&want).zip(&got) {
            assert_eq!(Errno::from_raw(*g), Errno::from_raw(*w), "ABI {abi}: {n}");
        }
        drop((tcp, unix));
    }
}
