//! The path-taking calls the file audit observes and the creation guard
//! performs ([`WATCHED`]), with where each keeps its paths and flags.

use super::table::nr;

/// What a watched call does to the paths it names: the operation the file
/// audit records (refined by the call's flags, see [`crate::supervise::classify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileOp {
    /// open/openat/openat2/creat: read, write, create or `O_PATH`, by its flags.
    Open,
    Exec,
    /// unlink, or rmdir for `unlinkat(AT_REMOVEDIR)`.
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

/// Where a call's flags are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flags {
    None,
    /// In this argument.
    Arg(u8),
    /// Implied by the call (`creat`: `O_CREAT|O_WRONLY|O_TRUNC`; `lchown`:
    /// `AT_SYMLINK_NOFOLLOW`).
    Fixed(u64),
    /// The first member of the `struct open_how` this argument points to
    /// (`openat2`).
    OpenHow(u8),
}

/// A path argument: the pointer's index and, for the `*at` calls, the index
/// of the directory fd it is relative to (otherwise the cwd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PathArg {
    pub dirfd: Option<u8>,
    pub path: u8,
}

/// A path-taking call the file audit observes (`audit.files`): compiled to
/// `SECCOMP_RET_USER_NOTIF` and always answered with
/// `SECCOMP_USER_NOTIF_FLAG_CONTINUE` (the kernel then runs it exactly as it
/// would have: observing never decides anything).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watched {
    /// `SYS_<name>`, as spelled in libc.
    pub name: &'static str,
    pub nr: libc::c_long,
    pub op: FileOp,
    /// The path it acts on, and the second one of rename and link (the new
    /// name).
    pub paths: [Option<PathArg>; 2],
    pub flags: Flags,
    /// `symlink`'s target: a string stored in the link, not a path accessed.
    pub text: Option<u8>,
}

const fn at(dirfd: u8, path: u8) -> Option<PathArg> {
    Some(PathArg {
        dirfd: Some(dirfd),
        path,
    })
}

const fn cwd(path: u8) -> Option<PathArg> {
    Some(PathArg { dirfd: None, path })
}

macro_rules! watch {
    ($sys:ident, $op:ident, [$p0:expr, $p1:expr], $flags:expr) => {
        watch!($sys, $op, [$p0, $p1], $flags, None)
    };
    ($sys:ident, $op:ident, [$p0:expr, $p1:expr], $flags:expr, $text:expr) => {
        Watched {
            name: stringify!($sys),
            nr: nr::$sys,
            op: FileOp::$op,
            paths: [$p0, $p1],
            flags: $flags,
            text: $text,
        }
    };
}

/// The calls that open, create, remove, rename, link or execute a path, or
/// change its mode, owner or size: what `audit.files` records. Not here (see
/// docs/security-model.md): calls that only look (`stat`, `access`,
/// `readlink`, `getxattr`, `chdir`, `inotify_add_watch`), `bind`/`connect`
/// to a Unix socket path, and calls on fds already open.
pub(crate) static WATCHED: &[Watched] = &[
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_open, Open, [cwd(0), None], Flags::Arg(1)),
    watch!(SYS_openat, Open, [at(0, 1), None], Flags::Arg(2)),
    watch!(SYS_openat2, Open, [at(0, 1), None], Flags::OpenHow(2)),
    #[cfg(target_arch = "x86_64")]
    watch!(
        SYS_creat,
        Open,
        [cwd(0), None],
        Flags::Fixed((libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64)
    ),
    watch!(SYS_execve, Exec, [cwd(0), None], Flags::None),
    watch!(SYS_execveat, Exec, [at(0, 1), None], Flags::Arg(4)),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_unlink, Unlink, [cwd(0), None], Flags::None),
    watch!(SYS_unlinkat, Unlink, [at(0, 1), None], Flags::Arg(2)),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_rmdir, Rmdir, [cwd(0), None], Flags::None),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_mkdir, Mkdir, [cwd(0), None], Flags::None),
    watch!(SYS_mkdirat, Mkdir, [at(0, 1), None], Flags::None),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_mknod, Mknod, [cwd(0), None], Flags::None),
    watch!(SYS_mknodat, Mknod, [at(0, 1), None], Flags::None),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_rename, Rename, [cwd(0), cwd(1)], Flags::None),
    watch!(SYS_renameat, Rename, [at(0, 1), at(2, 3)], Flags::None),
    watch!(SYS_renameat2, Rename, [at(0, 1), at(2, 3)], Flags::Arg(4)),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_link, Link, [cwd(0), cwd(1)], Flags::None),
    watch!(SYS_linkat, Link, [at(0, 1), at(2, 3)], Flags::Arg(4)),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_symlink, Symlink, [cwd(1), None], Flags::None, Some(0)),
    watch!(
        SYS_symlinkat,
        Symlink,
        [at(1, 2), None],
        Flags::None,
        Some(0)
    ),
    watch!(SYS_truncate, Truncate, [cwd(0), None], Flags::None),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_chmod, Chmod, [cwd(0), None], Flags::None),
    watch!(SYS_fchmodat, Chmod, [at(0, 1), None], Flags::None),
    watch!(SYS_fchmodat2, Chmod, [at(0, 1), None], Flags::Arg(3)),
    #[cfg(target_arch = "x86_64")]
    watch!(SYS_chown, Chown, [cwd(0), None], Flags::None),
    #[cfg(target_arch = "x86_64")]
    watch!(
        SYS_lchown,
        Chown,
        [cwd(0), None],
        Flags::Fixed(libc::AT_SYMLINK_NOFOLLOW as u64)
    ),
    watch!(SYS_fchownat, Chown, [at(0, 1), None], Flags::Arg(4)),
];

/// The open flags that make an open the creation guard's: it creates
/// (`O_CREAT`), or opens for writing (`O_WRONLY`, `O_RDWR`, `O_TRUNC`), which
/// the guard performs itself in write grants ([`crate::supervise::guard`]).
pub(crate) const GUARDED_OPEN_FLAGS: u32 =
    (libc::O_CREAT | libc::O_WRONLY | libc::O_RDWR | libc::O_TRUNC) as u32;

/// Whether `w` can make a new name (the calls the creation guard,
/// [`crate::supervise::guard`], performs itself): the opens (with `O_CREAT`, checked by
/// the filter where the flags are an argument), `mkdir`, `mknod`, `symlink`,
/// `link` and `rename`.
pub(crate) fn creates(w: &Watched) -> bool {
    matches!(
        w.op,
        FileOp::Open
            | FileOp::Mkdir
            | FileOp::Mknod
            | FileOp::Rename
            | FileOp::Link
            | FileOp::Symlink
    )
}

/// The watched call `nr`, if it is one.
pub(crate) fn watched(nr: libc::c_long) -> Option<&'static Watched> {
    WATCHED.iter().find(|w| w.nr == nr)
}
