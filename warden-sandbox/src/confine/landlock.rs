//! Landlock: a second, independent layer under the mount namespace.
//!
//! The mount layer decides what *exists* inside the sandbox; Landlock decides what
//! the server may *do* with what exists, enforced by a different kernel subsystem
//! (an LSM checked on every open, create, rename, connect...). If one layer is ever
//! bypassed (a mount-API bug, a missed flag, a writable path the mount layer did not
//! mean to expose), the other still holds.
//!
//! The rules are data: [`rules`] turns a [`SandboxSpec`] into a table of
//! (path, access) mirroring what `rootfs` put in the sandbox root; [`ruleset`]
//! masks the table with what the running kernel's ABI can handle and builds the
//! ruleset with the `landlock` crate. [`Confinement::apply`] then calls the
//! crate's `restrict_self` in the server child, after `no_new_privs`.
//!
//! Which ABI is applied is decided here, explicitly: the kernel's, capped at
//! [`KNOWN_ABI`], or a refusal when the policy's `sandbox.landlock_min_abi` is
//! more. Everything of that ABI is then asked of the crate as a
//! [`CompatLevel::HardRequirement`]: the crate never drops a right, a rule or a
//! scope on its own, so the ruleset the kernel enforces is exactly the one this
//! module describes, or the session does not start.
//!
//! Landlock rules only ever *add* access along a path: a read-only grant nested in a
//! write grant (or in `/tmp`) inherits the write rights of its parent here. That case
//! stays read-only thanks to the mount layer (the grant is a read-only bind).
//! For the same reason the names a write grant keeps read-only because the host
//! trusts them ([`crate::protected`]: `.git`, `.bashrc`...) have no rule here: a
//! read-only rule beneath the grant's read-write one would remove nothing.
//!
//! [`Confinement::apply`]: crate::confine::Confinement::apply

use crate::control::Failure;
use crate::spec::SandboxSpec;
use crate::sys;
use landlock::{
    make_bitflags, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort,
    PathBeneath, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetError, Scope,
    ABI,
};
use nix::errno::Errno;
use std::path::PathBuf;

/// Filesystem access rights (`LANDLOCK_ACCESS_FS_*`).
pub(crate) type Fs = BitFlags<AccessFs>;
/// Network access rights (`LANDLOCK_ACCESS_NET_*`), ABI 4.
pub(crate) type Net = BitFlags<AccessNet>;
/// IPC scopes (`LANDLOCK_SCOPE_*`), ABI 6.
pub(crate) type Scopes = BitFlags<Scope>;

/// The newest ABI whose rights this module asks for. ABI 7 adds only audit-log
/// flags for `landlock_restrict_self`, no access right. The crate knows newer
/// ABIs; what they add (all-threads enforcement, rights on pathname UNIX
/// sockets and UDP) is not asked for until this table says so.
pub(crate) const KNOWN_ABI: u32 = 7;

/// Each ABI this module applies, in order, with what it adds (for messages
/// naming a missing feature). Index = ABI number.
const ABIS: [(ABI, &str); KNOWN_ABI as usize + 1] = [
    (ABI::Unsupported, ""),
    (ABI::V1, "filesystem access control"),
    (ABI::V2, "linking and renaming across directories (refer)"),
    (ABI::V3, "truncation control"),
    (ABI::V4, "TCP bind and connect control"),
    (ABI::V5, "device ioctl control"),
    (ABI::V6, "abstract unix socket and signal scoping"),
    (ABI::V7, "audit logging control"),
];

/// The crate's name for ABI `n` (at most [`KNOWN_ABI`]).
fn abi_of(n: u32) -> ABI {
    ABIS[n.min(KNOWN_ABI) as usize].0
}

// --- The rights the sandbox grants (all masked by the ABI later). ---

/// `a` without the rights in `b`, usable in constants.
const fn without(a: Fs, b: Fs) -> Fs {
    a.intersection_c(b.not_c(Fs::CONST_TOKEN))
}

/// Rights that make sense on a non-directory (the kernel refuses the others with
/// EINVAL on a file rule).
const FILE_RIGHTS: Fs =
    make_bitflags!(AccessFs::{Execute | WriteFile | ReadFile | Truncate | IoctlDev});
/// Runtime, `/etc`, the program and `read` grants.
pub(crate) const READ_EXEC: Fs = make_bitflags!(AccessFs::{ReadFile | ReadDir | Execute});
/// `write` grants, `/tmp` and a private `$HOME`: everything but device nodes and
/// device ioctls (every writable mount is `nodev`, so there is nothing to mirror).
pub(crate) const READ_WRITE: Fs = READ_EXEC.union_c(make_bitflags!(AccessFs::{
    WriteFile
        | RemoveDir
        | RemoveFile
        | MakeDir
        | MakeReg
        | MakeSock
        | MakeFifo
        | MakeSym
        | Refer
        | Truncate
}));
/// What the creation guard ([`crate::supervise::guard`]) takes away from every rule: with
/// the guard on, the daemon makes new files, directories, symlinks and FIFOs
/// on the server's behalf after checking their names, so a call that reaches
/// the kernel itself (one that raced its own path buffer past the check)
/// cannot make any. Sockets stay: a socket cannot be read as a start-up file.
pub(crate) const GUARDED_MAKE: Fs =
    make_bitflags!(AccessFs::{MakeReg | MakeDir | MakeSym | MakeFifo});

/// What the guard also takes away from the rules of write grants and of
/// whatever lies above one (the private `/tmp` or `$HOME` a grant is mounted
/// in): opening an existing file for writing. The daemon performs those opens
/// on the name it checked ([`crate::supervise::guard`]), so a file git runs deep in a
/// granted tree cannot be written, whatever the caller's path says when the
/// kernel reads it again. Writes through fds already open are not opens.
pub(crate) const GUARDED_WRITE: Fs = make_bitflags!(AccessFs::{WriteFile});
/// `/dev/shm` is mounted `noexec`.
pub(crate) const SHM: Fs = without(READ_WRITE, make_bitflags!(AccessFs::{Execute}));
/// `/proc`: servers read it and occasionally write `/proc/self/...`; `noexec`.
pub(crate) const PROC: Fs = make_bitflags!(AccessFs::{ReadFile | ReadDir | WriteFile});
/// `/dev/null`, `/dev/zero`, `/dev/full`.
pub(crate) const DEV_RW: Fs = make_bitflags!(AccessFs::{ReadFile | WriteFile});
/// `/dev/random`, `/dev/urandom`.
pub(crate) const DEV_RO: Fs = make_bitflags!(AccessFs::{ReadFile});

/// Runtime directories: a rule only for those that exist inside as directories
/// (on merged-/usr hosts `/bin` & co. are symlinks into `/usr`, already covered).
const RUNTIME: &[&str] = &[
    "/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin",
];

/// Every filesystem right the given ABI can handle.
pub(crate) fn fs_rights(abi: u32) -> Fs {
    AccessFs::from_all(abi_of(abi))
}

/// Every network right the given ABI can handle.
pub(crate) fn net_rights(abi: u32) -> Net {
    AccessNet::from_all(abi_of(abi))
}

/// Every scope the given ABI can restrict.
pub(crate) fn scopes(abi: u32) -> Scopes {
    Scope::from_all(abi_of(abi))
}

/// What a ruleset handles (denies unless a rule grants it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Handled {
    fs: Fs,
    net: Net,
    scoped: Scopes,
}

/// The ruleset attribute for `abi`: handle (deny unless granted) everything it knows.
fn attr(abi: u32) -> Handled {
    Handled {
        fs: fs_rights(abi),
        net: net_rights(abi),
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
    pub access: Fs,
    pub open: Open,
}

fn rule(path: impl Into<PathBuf>, access: Fs) -> Rule {
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
    t.push(rule("/dev", AccessFs::ReadDir.into()));
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
pub(crate) fn net_rules(spec: &SandboxSpec) -> Vec<(u16, Net)> {
    spec.proxy_port
        .map(|port| vec![(port, AccessNet::ConnectTcp.into())])
        .unwrap_or_default()
}

/// The rights of `access` the kernel accepts on a rule: masked by the ABI, and
/// by [`FILE_RIGHTS`] when the path is not a directory. (The crate would refuse
/// a directory-only right on a file as a hard requirement; this is where the
/// table says which rights a file rule keeps.)
pub(crate) fn effective(access: Fs, abi: u32, is_dir: bool) -> Fs {
    let a = access & fs_rights(abi);
    if is_dir {
        a
    } else {
        a & FILE_RIGHTS
    }
}

/// The raw probe: `Ok(abi)`, or the errno (ENOSYS: not built in; EOPNOTSUPP:
/// built in but not enabled at boot). The crate keeps the kernel's ABI number
/// to itself (its `ABI` is deliberately not made from run-time detection), and
/// [`crate::kernel::Kernel`] (the audit trail, `wardenctl status`) and
/// [`planned_abi`] need the number and the errno, so this one call stays.
pub(crate) fn probe() -> Result<u32, Errno> {
    sys::landlock::abi_version()
}

/// The ABI to apply: the one the spec's layers name, once the kernel is seen
/// to offer it and it meets the policy's minimum. Refuses, naming what is
/// missing, when the kernel lacks the policy's minimum (as [`check_min`]
/// says), when the layers apply less than that minimum, or when they name an
/// ABI the kernel (or this build) does not have: the layers were decided
/// elsewhere, from a probe of the kernel, and the sandbox never applies less
/// than they say.
fn planned_abi(
    min: u32,
    planned: Option<u32>,
    kernel: Result<u32, Errno>,
) -> Result<Option<u32>, Failure> {
    check_min(min, kernel)?;
    let planned_too_low = |applied: String| {
        Failure::msg(
            "landlock",
            format!("{}, the sandbox's layers apply {applied}", wanted(min)),
        )
    };
    let Some(abi) = planned else {
        if min > 0 {
            return Err(planned_too_low("no landlock".into()));
        }
        return Ok(None);
    };
    if abi < min.max(1) {
        return Err(if min > 0 {
            planned_too_low(format!("ABI {abi}"))
        } else {
            Failure::msg("landlock", format!("there is no landlock ABI {abi}"))
        });
    }
    let asked = format!("the sandbox's layers ask for landlock ABI {abi}");
    match kernel {
        Ok(k) if k < abi => Err(Failure::msg(
            "landlock",
            format!("{asked}, the kernel offers ABI {k}"),
        )),
        Ok(_) if abi > KNOWN_ABI => Err(Failure::msg(
            "landlock",
            format!("{asked}, this build of warden applies ABI {KNOWN_ABI} at most"),
        )),
        Ok(_) => Ok(Some(abi)),
        Err(e) => Err(Failure::Setup {
            stage: "landlock".into(),
            errno: Some(e as i32),
            message: format!(
                "{asked}, the kernel offers no landlock ({})",
                no_landlock(e)
            ),
        }),
    }
}

/// "landlock ABI `min` is required by the policy (what it adds)".
fn wanted(min: u32) -> String {
    match ABIS.get(min as usize) {
        Some((_, f)) => format!("landlock ABI {min} is required by the policy ({f})"),
        None => format!("landlock ABI {min} is required by the policy"),
    }
}

/// Why the kernel has no Landlock, from the version call's errno.
fn no_landlock(e: Errno) -> String {
    if e == Errno::EOPNOTSUPP {
        "built in but not enabled: add landlock to the lsm= boot parameter".to_string()
    } else {
        sys::errno_text(e)
    }
}

/// Checks the policy's minimum ABI against what the kernel offers, then against
/// what this build can apply.
fn check_min(min: u32, kernel: Result<u32, Errno>) -> Result<(), Failure> {
    if min == 0 {
        return Ok(());
    }
    let wanted = wanted(min);
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
                no_landlock(e)
            ),
        }),
    }
}

/// The errno a crate error carries, if a syscall failed (the crate keeps the
/// `io::Error` as the source); `None` for the crate's own refusals.
fn os_errno(e: &RulesetError) -> Option<Errno> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io.raw_os_error().map(Errno::from_raw);
        }
        cur = err.source();
    }
    None
}

/// A crate error as a setup failure of `stage`: a failed syscall reads as
/// before (stage, errno, errno text), a refusal by the crate (it would have
/// had to apply less than asked) with the crate's message.
fn failure(stage: String, e: RulesetError) -> Failure {
    match os_errno(&e) {
        Some(errno) => Failure::os(stage, errno),
        None => Failure::msg(stage, format!("landlock refused the ruleset: {e}")),
    }
}

/// Builds the Landlock ruleset for `spec` with every right of the ABI its
/// layers name ([`crate::spec::Layers::landlock_abi`], the kernel's capped
/// at [`KNOWN_ABI`] when the daemon decided them), with the creation guard's
/// rules when the layers have the guard. `Ok(None)` when the layers apply no
/// Landlock (the mount namespace remains the primary layer). Runs in PID 1
/// after pivot_root; the ruleset's fd is `O_CLOEXEC` and closed by the
/// server's execve.
pub(crate) fn ruleset(spec: &SandboxSpec) -> Result<Option<RulesetCreated>, Failure> {
    let Some(abi) = planned_abi(spec.landlock_min_abi, spec.layers.landlock_abi, probe())? else {
        return Ok(None);
    };
    let guard = spec.layers.guard;
    let handled = attr(abi);
    let create = || format!("landlock: create ruleset (ABI {abi})");
    // Hard requirement: a right, rule or scope the crate finds unsupported is an
    // error, never silently left out. Everything asked for is of `abi`, which
    // the kernel has, so on a working kernel nothing is ever refused.
    let mut r = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(handled.fs)
        .map_err(|e| failure(create(), e))?;
    // An ABI without network rights or scopes: nothing to handle (the crate
    // refuses an empty set).
    if !handled.net.is_empty() {
        r = r
            .handle_access(handled.net)
            .map_err(|e| failure(create(), e))?;
    }
    if !handled.scoped.is_empty() {
        r = r.scope(handled.scoped).map_err(|e| failure(create(), e))?;
    }
    let mut ruleset = r.create().map_err(|e| failure(create(), e))?;

    for r in rules(spec, guard) {
        let stage = || format!("landlock rule {}", r.path.display());
        // O_PATH|O_CLOEXEC: the same object the mount layer put there.
        let opened = match r.open {
            Open::Follow => nix::fcntl::open(
                &r.path,
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            ),
            Open::Required | Open::Optional => sys::mount::open_path_nofollow(None, &r.path),
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
        if access.is_empty() {
            continue;
        }
        ruleset = ruleset
            .add_rule(PathBeneath::new(path_fd, access))
            .map_err(|e| failure(stage(), e))?;
    }
    if !handled.net.is_empty() {
        for (port, access) in net_rules(spec) {
            let access = access & handled.net;
            if access.is_empty() {
                continue;
            }
            ruleset = ruleset
                .add_rule(NetPort::new(port, access))
                .map_err(|e| failure(format!("landlock rule tcp port {port}"), e))?;
        }
    }
    Ok(Some(ruleset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Layers;
    use std::path::Path;

    // The rights by their uapi names (include/uapi/linux/landlock.h);
    // `abi_masks` checks each one's bit against the header.
    const FS_EXECUTE: Fs = make_bitflags!(AccessFs::{Execute});
    const FS_WRITE_FILE: Fs = make_bitflags!(AccessFs::{WriteFile});
    const FS_READ_FILE: Fs = make_bitflags!(AccessFs::{ReadFile});
    const FS_READ_DIR: Fs = make_bitflags!(AccessFs::{ReadDir});
    const FS_REMOVE_DIR: Fs = make_bitflags!(AccessFs::{RemoveDir});
    const FS_REMOVE_FILE: Fs = make_bitflags!(AccessFs::{RemoveFile});
    const FS_MAKE_CHAR: Fs = make_bitflags!(AccessFs::{MakeChar});
    const FS_MAKE_DIR: Fs = make_bitflags!(AccessFs::{MakeDir});
    const FS_MAKE_REG: Fs = make_bitflags!(AccessFs::{MakeReg});
    const FS_MAKE_SOCK: Fs = make_bitflags!(AccessFs::{MakeSock});
    const FS_MAKE_FIFO: Fs = make_bitflags!(AccessFs::{MakeFifo});
    const FS_MAKE_BLOCK: Fs = make_bitflags!(AccessFs::{MakeBlock});
    const FS_MAKE_SYM: Fs = make_bitflags!(AccessFs::{MakeSym});
    const FS_REFER: Fs = make_bitflags!(AccessFs::{Refer});
    const FS_TRUNCATE: Fs = make_bitflags!(AccessFs::{Truncate});
    const FS_IOCTL_DEV: Fs = make_bitflags!(AccessFs::{IoctlDev});
    const NET_BIND_TCP: Net = make_bitflags!(AccessNet::{BindTcp});
    const NET_CONNECT_TCP: Net = make_bitflags!(AccessNet::{ConnectTcp});
    const SCOPE_ABSTRACT_UNIX_SOCKET: Scopes = make_bitflags!(Scope::{AbstractUnixSocket});
    const SCOPE_SIGNAL: Scopes = make_bitflags!(Scope::{Signal});

    /// From JSON, so that fields added later with `#[serde(default)]` need no
    /// change here (the layers have no default: none here).
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
            "layers": Layers::NONE,
        }))
        .unwrap()
    }

    fn access_of(t: &[Rule], p: &str) -> Vec<Fs> {
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
            assert_eq!(a & writes, Fs::EMPTY);
        }
        // Read-only places carry no write right at all.
        let t = rules(&spec(), false);
        for r in &t {
            let ro = RUNTIME.iter().any(|p| r.path == Path::new(p))
                || ["/etc", "/data/ref", "/opt/tool/bin/server", "/dev"]
                    .iter()
                    .any(|p| r.path == Path::new(p));
            if ro {
                assert_eq!(r.access & writes, Fs::EMPTY, "{}", r.path.display());
            }
        }
        // /proc may be written (/proc/self/...) but nothing created, removed or run.
        assert_eq!(PROC & (writes & !FS_WRITE_FILE), Fs::EMPTY);
        assert_eq!(PROC & FS_EXECUTE, Fs::EMPTY);
        // noexec mounts stay non-executable.
        assert_eq!(SHM & FS_EXECUTE, Fs::EMPTY);
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
            assert_eq!(g.access & GUARDED_MAKE, Fs::EMPTY, "{:?}", g.path);
            // Opening for writing goes through the guard where a write grant
            // is (at or below the rule), nowhere else.
            let above_a_grant = s.write.iter().any(|w| w.starts_with(&g.path));
            let taken = GUARDED_MAKE
                | if above_a_grant {
                    GUARDED_WRITE
                } else {
                    Fs::EMPTY
                };
            assert_eq!(g.access, p.access & !taken, "{:?}", g.path);
        }
        assert_ne!(access_of(&guarded, "/work")[0] & FS_MAKE_SOCK, Fs::EMPTY);
        assert_ne!(access_of(&guarded, "/work")[0] & FS_REMOVE_FILE, Fs::EMPTY);
        assert_eq!(access_of(&guarded, "/work")[0] & FS_WRITE_FILE, Fs::EMPTY);
        assert_eq!(access_of(&guarded, "/tmp")[0] & FS_MAKE_REG, Fs::EMPTY);
        assert_ne!(access_of(&guarded, "/tmp")[0] & FS_WRITE_FILE, Fs::EMPTY);
        assert_ne!(
            access_of(&guarded, "/dev/null")[0] & FS_WRITE_FILE,
            Fs::EMPTY
        );
        // A grant under /tmp: /tmp's own rule would let it be written.
        s.write.push("/tmp/w".into());
        let guarded = rules(&s, true);
        assert_eq!(access_of(&guarded, "/tmp")[0] & FS_WRITE_FILE, Fs::EMPTY);
        assert_ne!(access_of(&guarded, "/tmp")[0] & FS_READ_FILE, Fs::EMPTY);
    }

    #[test]
    fn device_nodes_and_device_ioctls_are_never_granted() {
        for r in rules(&spec(), false) {
            assert_eq!(
                r.access & (FS_MAKE_CHAR | FS_MAKE_BLOCK | FS_IOCTL_DEV),
                Fs::EMPTY,
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
        assert_eq!(fs_rights(0), Fs::EMPTY);
        assert_eq!(fs_rights(1).bits(), (1 << 13) - 1);
        assert_eq!(
            fs_rights(1) & (FS_REFER | FS_TRUNCATE | FS_IOCTL_DEV),
            Fs::EMPTY
        );
        assert_eq!(fs_rights(2), fs_rights(1) | FS_REFER);
        assert_eq!(fs_rights(3), fs_rights(2) | FS_TRUNCATE);
        assert_eq!(fs_rights(4), fs_rights(3));
        assert_eq!(fs_rights(5), fs_rights(4) | FS_IOCTL_DEV);
        assert_eq!(fs_rights(7).bits(), (1 << 16) - 1);
        for abi in 0..4 {
            assert_eq!(net_rights(abi), Net::EMPTY);
        }
        assert_eq!(net_rights(4), NET_BIND_TCP | NET_CONNECT_TCP);
        for abi in 0..6 {
            assert_eq!(scopes(abi), Scopes::EMPTY);
        }
        assert_eq!(scopes(6), SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL);
        let bits = |h: Handled| (h.fs.bits(), h.net.bits(), h.scoped.bits());
        assert_eq!(bits(attr(7)), (0xffff, 0b11, 0b11));
        // A kernel older than ABI 4 gets zeroes where it has no fields.
        assert_eq!(bits(attr(3)), ((1 << 15) - 1, 0, 0));
        // The table is indexed by ABI number.
        for (n, (abi, _)) in ABIS.iter().enumerate() {
            let want = if n == 0 {
                "unsupported".to_string()
            } else {
                n.to_string()
            };
            assert_eq!(abi.to_string(), want);
        }
        // Newer kernels are asked for nothing beyond ABI 7.
        assert_eq!(attr(KNOWN_ABI + 3), attr(KNOWN_ABI));
        // The crate's bits are the uapi header's.
        let fs = [
            FS_EXECUTE,
            FS_WRITE_FILE,
            FS_READ_FILE,
            FS_READ_DIR,
            FS_REMOVE_DIR,
            FS_REMOVE_FILE,
            FS_MAKE_CHAR,
            FS_MAKE_DIR,
            FS_MAKE_REG,
            FS_MAKE_SOCK,
            FS_MAKE_FIFO,
            FS_MAKE_BLOCK,
            FS_MAKE_SYM,
            FS_REFER,
            FS_TRUNCATE,
            FS_IOCTL_DEV,
        ];
        for (bit, right) in fs.iter().enumerate() {
            assert_eq!(right.bits(), 1 << bit, "{right:?}");
        }
        assert_eq!((NET_BIND_TCP.bits(), NET_CONNECT_TCP.bits()), (1, 2));
        assert_eq!(
            (SCOPE_ABSTRACT_UNIX_SOCKET.bits(), SCOPE_SIGNAL.bits()),
            (1, 2)
        );
        // What a file rule may carry: the crate's list, at the ABIs we apply.
        for abi in 1..=KNOWN_ABI {
            assert_eq!(
                FILE_RIGHTS & fs_rights(abi),
                AccessFs::from_file(abi_of(abi))
            );
        }
    }

    #[test]
    fn gated_rights_are_masked_for_lower_abis() {
        assert_eq!(
            effective(READ_WRITE, 1, true) & (FS_REFER | FS_TRUNCATE),
            Fs::EMPTY
        );
        assert_eq!(effective(READ_WRITE, 2, true) & FS_TRUNCATE, Fs::EMPTY);
        assert_ne!(effective(READ_WRITE, 2, true) & FS_REFER, Fs::EMPTY);
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
                assert_eq!(effective(r.access, abi, true) & !fs_rights(abi), Fs::EMPTY);
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

    /// PID 1 applies the ABI the layers name, and refuses when the kernel
    /// (or this build, or the policy's minimum) disagrees with them.
    #[test]
    fn the_planned_abi_is_applied_or_refused() {
        let msg = |f: Failure| match f {
            Failure::Setup { stage, message, .. } => {
                assert_eq!(stage, "landlock");
                message
            }
            f => panic!("{f:?}"),
        };
        assert_eq!(planned_abi(0, Some(7), Ok(7)).unwrap(), Some(7));
        assert_eq!(planned_abi(0, Some(3), Ok(7)).unwrap(), Some(3));
        assert_eq!(planned_abi(3, Some(7), Ok(9)).unwrap(), Some(7));
        assert_eq!(planned_abi(0, None, Ok(7)).unwrap(), None);
        assert_eq!(planned_abi(0, None, Err(Errno::ENOSYS)).unwrap(), None);
        // The kernel has less than the layers say.
        assert_eq!(
            msg(planned_abi(0, Some(5), Ok(3)).unwrap_err()),
            "the sandbox's layers ask for landlock ABI 5, the kernel offers ABI 3"
        );
        let m = msg(planned_abi(0, Some(1), Err(Errno::EOPNOTSUPP)).unwrap_err());
        assert_eq!(
            m,
            "the sandbox's layers ask for landlock ABI 1, the kernel offers no landlock \
             (built in but not enabled: add landlock to the lsm= boot parameter)"
        );
        // More than this build knows, or no ABI at all.
        assert_eq!(
            msg(planned_abi(0, Some(8), Ok(9)).unwrap_err()),
            "the sandbox's layers ask for landlock ABI 8, this build of warden applies ABI 7 at most"
        );
        assert_eq!(
            msg(planned_abi(0, Some(0), Ok(7)).unwrap_err()),
            "there is no landlock ABI 0"
        );
        // The policy's minimum is checked first, with its own message, then
        // against the layers.
        assert_eq!(
            msg(planned_abi(4, Some(7), Ok(3)).unwrap_err()),
            "landlock ABI 4 is required by the policy (TCP bind and connect control), the \
             kernel offers ABI 3"
        );
        assert_eq!(
            msg(planned_abi(4, Some(3), Ok(7)).unwrap_err()),
            "landlock ABI 4 is required by the policy (TCP bind and connect control), the \
             sandbox's layers apply ABI 3"
        );
        assert_eq!(
            msg(planned_abi(1, None, Ok(7)).unwrap_err()),
            "landlock ABI 1 is required by the policy (filesystem access control), the \
             sandbox's layers apply no landlock"
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
#[allow(unsafe_code)] // forks, and probes with raw calls in the child
mod host_tests {
    use super::*;
    use crate::confine::Confinement;
    use crate::spec::Layers;
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
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

    /// What the crate does with a request it cannot meet in full: as a hard
    /// requirement, it refuses (a setup failure without an errno) where best
    /// effort would quietly apply less. Here, a directory-only right on a file
    /// rule (best effort drops the right) and a right the ruleset does not
    /// handle. The control: the same rule masked by [`effective`] is added.
    #[test]
    fn the_crate_refuses_rather_than_applies_less() {
        let Some(abi) = crate::kernel::Kernel::probe().landlock_abi() else {
            eprintln!("skipping: this kernel offers no Landlock");
            return;
        };
        let file = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
        let handled = READ_EXEC | (READ_WRITE & fs_rights(abi));
        let hard = || {
            Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(handled)
                .unwrap()
                .create()
                .unwrap()
        };
        let fd = || sys::mount::open_path_nofollow(None, file.path()).unwrap();
        let refused = |e: RulesetError| match failure("landlock rule f".into(), e) {
            Failure::Setup {
                stage,
                errno: None,
                message,
            } => {
                assert_eq!(stage, "landlock rule f");
                assert!(
                    message.starts_with("landlock refused the ruleset: "),
                    "{message}"
                );
            }
            f => panic!("{f:?}"),
        };
        refused(
            hard()
                .add_rule(PathBeneath::new(fd(), handled))
                .unwrap_err(),
        );
        let unhandled = Fs::from(AccessFs::MakeChar);
        refused(
            hard()
                .add_rule(PathBeneath::new(fd(), unhandled))
                .unwrap_err(),
        );
        // Control.
        let masked = effective(handled, abi, false);
        assert!(!masked.is_empty() && masked != handled);
        hard().add_rule(PathBeneath::new(fd(), masked)).unwrap();
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
                "layers": Layers::NONE,
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
        let Some(abi) = crate::kernel::Kernel::probe().landlock_abi() else {
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
        let mut f = Fixture::new();
        f.spec.layers.landlock_abi = Some(abi);
        let confinement = Confinement {
            landlock: ruleset(&f.spec).unwrap(),
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
