//! The sandbox's root filesystem, built by PID 1 inside its fresh mount namespace:
//! a tmpfs root holding read-only binds of the runtime, a minimal synthetic `/etc`,
//! a minimal `/dev`, a fresh `/proc`, private `/tmp` and `$HOME`, and the policy's
//! grants. Then `pivot_root` and the old root is detached.
//!
//! Every bind source is opened as an `O_PATH` fd with `RESOLVE_NO_SYMLINKS` *before*
//! anything is mounted, and bound from that fd with the new mount API, so a path is
//! resolved exactly once and a symlink in a grant is refused, never followed.
//!
//! Inside each write grant, the names the host runs or trusts (`.git`, shell
//! start-up files, `.vscode`, `.mcp.json`...: the table and its reasons are in
//! [`crate::protected`]) are then bound read-only over themselves, found from the
//! sandbox's own root with `RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS`: the same fd is
//! the bind's source and its mount point, so what is protected is exactly what
//! the server will see there ([`protect`]).

mod protect;

use crate::control::Failure;
use crate::protected;
use crate::spec::SandboxSpec;
use crate::sys::{
    self,
    mount::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY},
};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// Runtime directories bound read-only (or recreated as symlinks on merged-/usr hosts).
const RUNTIME: &[&str] = &[
    "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin",
];
/// Host `/etc` entries the dynamic loader, libc and TLS stacks need. No resolv.conf:
/// there is no resolver inside, so DNS fails at once.
const ETC: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "host.conf",
    "localtime",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
];
/// Device nodes bound from the host's /dev. No tty, no ptmx.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];
/// Where the new root is assembled (shadowing /tmp of this private mount namespace
/// is harmless: every source is already an open fd).
const NEWROOT: &str = "/tmp";

pub(super) const RO: u64 = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
pub(super) const RW: u64 = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

/// A host path opened for binding, or a host symlink to recreate verbatim.
enum Source {
    Bind { fd: OwnedFd, is_dir: bool },
    Symlink(PathBuf),
}

/// One grant (policy path or program) ready to bind.
struct Grant {
    path: PathBuf,
    fd: OwnedFd,
    is_dir: bool,
    attrs: u64,
}

/// Things mounted after the fixed skeleton, applied in order of path depth so that
/// a grant under /tmp or $HOME lands on top of the private tmpfs, a protected
/// path on top of its write grant, and a grant nested in a protected directory
/// on top of that.
enum Late {
    Tmp,
    Home,
    Grant(Grant),
    /// A protected path of a write grant ([`protected::Plan::protect`]), and
    /// whether it is left alone when it is a directory
    /// ([`protected::Plan::unless_dir`]).
    Protect(PathBuf, bool),
    /// A directory between a write grant and a protected path ([`protected::Plan::pin`]).
    Pin(PathBuf),
    /// A directory covered by an empty read-only tmpfs ([`SandboxSpec::hide`]).
    Hide(PathBuf),
}

/// Entries of the sandbox's /proc made read-only: host-wide kernel settings
/// and triggers guarded only by uid checks (see the comment in `build_root`).
const PROC_READ_ONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];

/// The inode budget of a writable tmpfs of `mb` MiB: one inode per 4 KiB of
/// it (at least 1024). An empty file costs about 1 KiB of unreclaimable kernel
/// memory (inode and dentry), so a tmpfs full of empty files holds at most a
/// quarter of its size again.
pub(crate) fn tmpfs_inodes(mb: u64) -> u64 {
    mb.max(1).saturating_mul(256).max(1024)
}

fn depth(p: &Path) -> usize {
    p.components().count()
}

fn check_abs(what: &str, p: &Path) -> Result<(), Failure> {
    if !p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(Failure::msg(
            format!("{what} {}", p.display()),
            "path must be absolute and normalised",
        ));
    }
    Ok(())
}

fn is_dir_fd(fd: &OwnedFd) -> Result<bool, Errno> {
    nix::sys::stat::fstat(fd).map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// The file type bits of what `fd` refers to (`O_PATH|O_NOFOLLOW`: a symlink is
/// `S_IFLNK`).
pub(super) fn kind(fd: &OwnedFd) -> Result<libc::mode_t, Errno> {
    nix::sys::stat::fstat(fd).map(|st| st.st_mode & libc::S_IFMT)
}

/// `/a/b` → `a/b`: a path inside the new root, relative to its fd.
pub(super) fn inside(p: &Path) -> &Path {
    p.strip_prefix("/").unwrap_or(p)
}

fn dev_of(fd: &OwnedFd, what: &str) -> Result<libc::dev_t, Failure> {
    nix::sys::stat::fstat(fd)
        .map(|st| st.st_dev)
        .map_err(|e| Failure::os(format!("stat {what}"), e))
}

/// st_dev of what is at `p` in the new root (each tmpfs and proc mount is its
/// own superblock, so this names the file system).
fn dev_at(root: BorrowedFd<'_>, p: &str) -> Result<libc::dev_t, Failure> {
    sys::mount::open_path_nofollow(Some(root), Path::new(p))
        .and_then(|fd| nix::sys::stat::fstat(&fd))
        .map(|st| st.st_dev)
        .map_err(|e| Failure::os(format!("stat {p}"), e))
}

/// Opens a system path: absent → None; a symlink → recreated; else an O_PATH fd.
fn open_system(path: &Path) -> Result<Option<Source>, Failure> {
    let stage = || format!("open {}", path.display());
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Failure::os(
                stage(),
                Errno::from_raw(e.raw_os_error().unwrap_or(0)),
            ))
        }
        Ok(m) if m.file_type().is_symlink() => {
            let target = std::fs::read_link(path).map_err(|e| {
                Failure::os(stage(), Errno::from_raw(e.raw_os_error().unwrap_or(0)))
            })?;
            return Ok(Some(Source::Symlink(target)));
        }
        Ok(_) => {}
    }
    let fd = sys::mount::open_path_nofollow(None, path).map_err(|e| Failure::os(stage(), e))?;
    let is_dir = is_dir_fd(&fd).map_err(|e| Failure::os(stage(), e))?;
    Ok(Some(Source::Bind { fd, is_dir }))
}

/// Opens a grant without following any symlink on the way.
fn open_grant(path: &Path, attrs: u64) -> Result<Grant, Failure> {
    check_abs("grant", path)?;
    let stage = format!("open grant {}", path.display());
    let fd = sys::mount::open_path_nofollow(None, path).map_err(|e| match e {
        Errno::ELOOP => Failure::Setup {
            stage: stage.clone(),
            errno: Some(e as i32),
            message: "the path is a symlink or passes through one; grants are never \
                      followed through symlinks"
                .into(),
        },
        e => Failure::os(stage.clone(), e),
    })?;
    let is_dir = is_dir_fd(&fd).map_err(|e| Failure::os(stage, e))?;
    Ok(Grant {
        path: path.to_path_buf(),
        fd,
        is_dir,
        attrs,
    })
}

fn mkdirat(dir: BorrowedFd<'_>, name: &Path, mode: u32) -> Result<(), Errno> {
    nix::sys::stat::mkdirat(dir, name, Mode::from_bits_retain(mode))
}

fn symlinkat(target: &Path, dir: BorrowedFd<'_>, name: &Path) -> Result<(), Errno> {
    nix::unistd::symlinkat(target, dir, name)
}

/// Creates a file `name` in `dir` with `content` (never following a symlink).
fn write_file(dir: BorrowedFd<'_>, name: &str, content: &str) -> Result<(), Errno> {
    // O_EXCL|O_NOFOLLOW so we only ever create a new file.
    let fd = nix::fcntl::openat(
        dir,
        name,
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_retain(0o644),
    )?;
    let mut f = std::fs::File::from(fd);
    std::io::Write::write_all(&mut f, content.as_bytes())
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
}

/// Walks `target` (absolute, inside the new root) from `root` one component at a
/// time, never following symlinks, creating missing directories (0755) and, for a
/// file mount point, an empty file. Returns an O_PATH fd of the mount point.
fn mountpoint(root: BorrowedFd<'_>, target: &Path, is_dir: bool) -> Result<OwnedFd, Errno> {
    let comps: Vec<&std::ffi::OsStr> = target
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(Ok(s)),
            Component::RootDir | Component::CurDir => None,
            _ => Some(Err(Errno::EINVAL)),
        })
        .collect::<Result<_, _>>()?;
    let mut cur: Option<OwnedFd> = None;
    for (i, name) in comps.iter().enumerate() {
        let last = i + 1 == comps.len();
        let dir = cur.as_ref().map_or(root, |f| f.as_fd());
        let name = Path::new(name);
        let next = match sys::mount::open_path_nofollow(Some(dir), name) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => {
                if !last || is_dir {
                    match mkdirat(dir, name, 0o755) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(e),
                    }
                } else {
                    write_file(dir, &name.to_string_lossy(), "")?;
                }
                sys::mount::open_path_nofollow(Some(dir), name)?
            }
            Err(e) => return Err(e),
        };
        cur = Some(next);
    }
    // An empty target means the root itself.
    match cur {
        Some(fd) => Ok(fd),
        None => sys::mount::open_path_nofollow(Some(root), Path::new(".")),
    }
}

/// Binds the tree at `src` onto `target` inside the new root with `attrs`.
fn bind(
    root: BorrowedFd<'_>,
    target: &Path,
    src: BorrowedFd<'_>,
    is_dir: bool,
    attrs: u64,
) -> Result<(), Failure> {
    let stage = || format!("bind-mount {}", target.display());
    // OPEN_TREE_CLONE|AT_RECURSIVE: a detached copy including submounts (a
    // non-recursive clone of a tree with locked submounts would be refused).
    let tree = sys::mount::clone_tree(src).map_err(|e| Failure::os(stage(), e))?;
    // Set the flags on the detached copy before it becomes visible anywhere.
    sys::mount::set_mount_attr(tree.as_fd(), attrs, true).map_err(|e| Failure::os(stage(), e))?;
    let mp = mountpoint(root, target, is_dir).map_err(|e| Failure::os(stage(), e))?;
    sys::mount::move_mount(tree.as_fd(), mp.as_fd()).map_err(|e| Failure::os(stage(), e))
}

/// Mounts a new tmpfs (or other fs) at `target` inside the new root and returns its
/// mount fd (usable as a directory fd, and for making it read-only later).
fn fresh(
    root: BorrowedFd<'_>,
    target: &Path,
    fstype: &std::ffi::CStr,
    opts: &[(&str, &str)],
    attrs: u64,
) -> Result<OwnedFd, Failure> {
    let stage = || format!("mount {} {}", fstype.to_string_lossy(), target.display());
    let mnt = sys::mount::new_fs(fstype, opts, attrs).map_err(|e| Failure::os(stage(), e))?;
    let mp = mountpoint(root, target, true).map_err(|e| Failure::os(stage(), e))?;
    sys::mount::move_mount(mnt.as_fd(), mp.as_fd()).map_err(|e| Failure::os(stage(), e))?;
    Ok(mnt)
}

fn place(root: BorrowedFd<'_>, target: &Path, src: &Source, attrs: u64) -> Result<(), Failure> {
    match src {
        Source::Bind { fd, is_dir } => bind(root, target, fd.as_fd(), *is_dir, attrs),
        Source::Symlink(to) => {
            let stage = || format!("symlink {}", target.display());
            let parent = target.parent().unwrap_or(Path::new("/"));
            let dir = mountpoint(root, parent, true).map_err(|e| Failure::os(stage(), e))?;
            let name = target
                .file_name()
                .ok_or_else(|| Failure::msg(stage(), "no file name"))?;
            symlinkat(to, dir.as_fd(), Path::new(name)).map_err(|e| Failure::os(stage(), e))
        }
    }
}

fn passwd(spec: &SandboxSpec) -> Result<(String, String), Failure> {
    let home = spec.home.to_string_lossy();
    for (what, v) in [("user", spec.user.as_str()), ("home", home.as_ref())] {
        if v.is_empty() || v.contains([':', '\n', '\0']) {
            return Err(Failure::msg(
                "write /etc/passwd",
                format!("invalid {what} {v:?}"),
            ));
        }
    }
    let (uid, gid, user) = (spec.uid, spec.gid, &spec.user);
    let mut passwd = String::new();
    let mut group = String::new();
    if uid == 0 {
        passwd.push_str(&format!("root:x:0:{gid}:root:{home}:/bin/sh\n"));
    } else {
        passwd.push_str("root:x:0:0:root:/root:/bin/sh\n");
        passwd.push_str(&format!("{user}:x:{uid}:{gid}:{user}:{home}:/bin/sh\n"));
    }
    group.push_str("root:x:0:\n");
    if gid != 0 {
        group.push_str(&format!("{user}:x:{gid}:\n"));
    }
    Ok((passwd, group))
}

/// Builds the root filesystem and pivots into it. Called by PID 1, in its own mount
/// namespace, before anything of the server runs.
pub(crate) fn build_root(spec: &SandboxSpec, hostname: &str) -> Result<(), Failure> {
    // 1. Nothing we do may propagate back to the host's mounts (and pivot_root
    //    refuses shared mounts anyway).
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| Failure::os("make / private", e))?;

    // 2. Open every source first (after unshare(CLONE_NEWNS), so the fds refer to
    //    mounts of *this* namespace, which open_tree(OPEN_TREE_CLONE) requires).
    check_abs("program", &spec.program)?;
    check_abs("home", &spec.home)?;
    check_abs("cwd", &spec.cwd)?;
    let mut runtime = Vec::new();
    for p in RUNTIME {
        if let Some(s) = open_system(Path::new(p))? {
            runtime.push((PathBuf::from(p), s));
        }
    }
    let mut etc = Vec::new();
    for name in ETC {
        let p = Path::new("/etc").join(name);
        if let Some(s) = open_system(&p)? {
            etc.push((p, s));
        }
    }
    let mut devs = Vec::new();
    for name in DEVICES {
        let p = Path::new("/dev").join(name);
        let fd = sys::mount::open_path_nofollow(None, &p)
            .map_err(|e| Failure::os(format!("open {}", p.display()), e))?;
        devs.push((p, fd));
    }
    let mut late = vec![Late::Tmp];
    let mut grants: Vec<&Path> = Vec::new();
    for p in &spec.write {
        late.push(Late::Grant(open_grant(p, RW)?));
        grants.push(p);
    }
    for p in &spec.read {
        // A path in both lists is write.
        if !spec.write.contains(p) {
            late.push(Late::Grant(open_grant(p, RO)?));
            grants.push(p);
        }
    }
    if !grants.iter().any(|g| spec.home.starts_with(g)) {
        late.push(Late::Home);
    }
    // The write grants named by the policy stay writable even when a protected
    // symlink points at one.
    let mut granted = Vec::new();
    for l in &late {
        if let Late::Grant(g) = l {
            if g.attrs == RW {
                let st = nix::sys::stat::fstat(&g.fd)
                    .map_err(|e| Failure::os(format!("stat {}", g.path.display()), e))?;
                granted.push((st.st_dev, st.st_ino));
            }
        }
    }
    let plan = protected::plan(spec);
    late.extend(plan.pin.into_iter().map(Late::Pin));
    for p in &spec.hide {
        check_abs("hidden directory", p)?;
        // Only what a grant shows and what is a directory there now.
        let shown = grants.iter().any(|g| p.starts_with(g));
        if shown && std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
            late.push(Late::Hide(p.clone()));
        }
    }
    late.extend(plan.protect.into_iter().map(|p| {
        let unless_dir = plan.unless_dir.contains(&p);
        Late::Protect(p, unless_dir)
    }));
    let program_covered = runtime.iter().any(|(p, _)| spec.program.starts_with(p))
        || grants.iter().any(|g| spec.program.starts_with(g));
    let program = if program_covered {
        None
    } else {
        Some(open_grant(&spec.program, RO).map_err(|f| match f {
            Failure::Setup { errno, message, .. } => Failure::Setup {
                stage: format!("open program {}", spec.program.display()),
                errno,
                message,
            },
            f => f,
        })?)
    };
    let target_of = |l: &Late| -> PathBuf {
        match l {
            Late::Tmp => PathBuf::from("/tmp"),
            Late::Home => spec.home.clone(),
            Late::Grant(g) => g.path.clone(),
            Late::Protect(p, _) | Late::Pin(p) | Late::Hide(p) => p.clone(),
        }
    };
    // Stable sort: parents before children; /tmp and $HOME before grants inside
    // them; a write grant, then the pins and protected paths inside it, then the
    // grants nested in those.
    late.sort_by_key(|l| depth(&target_of(l)));

    // 3. The new root: a small tmpfs, made read-only once populated.
    let newroot = sys::mount::open_path_nofollow(None, Path::new(NEWROOT))
        .map_err(|e| Failure::os(format!("open {NEWROOT}"), e))?;
    let root = sys::mount::new_fs(
        c"tmpfs",
        &[("mode", "0755"), ("size", "1m")],
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
    )
    .map_err(|e| Failure::os("mount root tmpfs", e))?;
    sys::mount::move_mount(root.as_fd(), newroot.as_fd())
        .map_err(|e| Failure::os("mount root tmpfs", e))?;
    drop(newroot);
    let r = root.as_fd();

    // 4. Read-only runtime, symlinks recreated to match the host.
    for (p, s) in &runtime {
        place(r, p, s, RO)?;
    }

    // 5. Minimal /etc: synthetic passwd/group/hosts plus the loader/TLS files.
    let etc_mnt = fresh(
        r,
        Path::new("/etc"),
        c"tmpfs",
        &[("mode", "0755"), ("size", "1m")],
        RW | MOUNT_ATTR_NOEXEC,
    )?;
    let (pw, gr) = passwd(spec)?;
    let hosts = format!("127.0.0.1\tlocalhost {hostname}\n::1\tlocalhost {hostname}\n");
    let resolv = "# The sandbox's own resolver (served by wardend): allowlisted names only.\nnameserver 127.0.0.53\n";
    for (name, content) in [
        ("passwd", pw.as_str()),
        ("group", gr.as_str()),
        ("hosts", hosts.as_str()),
    ]
    .into_iter()
    .chain(spec.resolver.then_some(("resolv.conf", resolv)))
    {
        write_file(etc_mnt.as_fd(), name, content)
            .map_err(|e| Failure::os(format!("write /etc/{name}"), e))?;
    }
    for (p, s) in &etc {
        place(r, p, s, RO)?;
    }

    // 6. Minimal /dev: device binds keep the host devtmpfs (a tmpfs mounted in a
    //    user namespace is always nodev), symlinks into /proc/self/fd, private shm.
    let dev_mnt = fresh(
        r,
        Path::new("/dev"),
        c"tmpfs",
        &[("mode", "0755"), ("size", "64k")],
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
    )?;
    for (p, fd) in &devs {
        bind(
            r,
            p,
            fd.as_fd(),
            false,
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
        )?;
    }
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        symlinkat(Path::new(to), dev_mnt.as_fd(), Path::new(name))
            .map_err(|e| Failure::os(format!("symlink /dev/{name}"), e))?;
    }
    // Every writable tmpfs of the sandbox (/dev/shm, /tmp, $HOME) is memory
    // the host cannot reclaim: each gets `tmp_mb` of pages and an inode budget
    // (empty files cost kernel memory too), and the daemon's memory sampler
    // adds what they hold to the session's total.
    let size = format!("{}m", spec.tmp_size_mb.max(1));
    let inodes = tmpfs_inodes(spec.tmp_size_mb).to_string();
    fresh(
        r,
        Path::new("/dev/shm"),
        c"tmpfs",
        &[("mode", "1777"), ("size", &size), ("nr_inodes", &inodes)],
        RW | MOUNT_ATTR_NOEXEC,
    )?;

    // Fresh /proc for the new pid namespace. Must happen here, by PID 1 of that
    // namespace and while the host's full /proc is still visible: the kernel refuses
    // a new proc mount in a user namespace unless a fully visible one exists
    // (mount_too_revealing), which stops being true once the old root is detached.
    let proc = fresh(
        r,
        Path::new("/proc"),
        c"proc",
        &[],
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
    )?;
    // The host-global kernel knobs under /proc check only the uid, not a
    // capability: for a root caller (uid 0 mapped to the host's root) a
    // writable /proc/sys would let the server set kernel.core_pattern and so
    // run a program as host root (found by the escape suite). Read-only over
    // themselves, like Docker and bubblewrap do.
    for name in PROC_READ_ONLY {
        match sys::mount::open_path_nofollow(Some(proc.as_fd()), Path::new(name)) {
            Ok(src) => {
                let is_dir = nix::sys::stat::fstat(&src)
                    .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
                    .unwrap_or(false);
                bind(
                    r,
                    &Path::new("/proc").join(name),
                    src.as_fd(),
                    is_dir,
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                )?;
            }
            Err(nix::errno::Errno::ENOENT) => {}
            Err(e) => return Err(Failure::os(format!("open /proc/{name}"), e)),
        }
    }

    // Private /tmp, private $HOME, then the grants, parents first.
    let (uid, gid) = (spec.uid.to_string(), spec.gid.to_string());
    // The file systems private to the sandbox: nothing on them is the host's.
    let mut private = Vec::new();
    for p in [".", "etc", "dev", "dev/shm", "proc"] {
        private.push(dev_at(r, p)?);
    }
    let mut follow = Vec::new();
    for l in &late {
        match l {
            Late::Tmp => {
                let tmp = fresh(
                    r,
                    Path::new("/tmp"),
                    c"tmpfs",
                    &[("mode", "1777"), ("size", &size), ("nr_inodes", &inodes)],
                    RW,
                )?;
                private.push(dev_of(&tmp, "/tmp")?);
            }
            Late::Home => {
                let home = fresh(
                    r,
                    &spec.home,
                    c"tmpfs",
                    &[
                        ("mode", "0700"),
                        ("size", &size),
                        ("nr_inodes", &inodes),
                        ("uid", &uid),
                        ("gid", &gid),
                    ],
                    RW,
                )?;
                private.push(dev_of(&home, "$HOME")?);
            }
            Late::Grant(g) => bind(r, &g.path, g.fd.as_fd(), g.is_dir, g.attrs)?,
            Late::Protect(p, unless_dir) => protect::protect_path(r, p, *unless_dir, &mut follow)?,
            Late::Pin(p) => protect::pin(r, p)?,
            Late::Hide(p) => {
                let cover = fresh(
                    r,
                    p,
                    c"tmpfs",
                    &[("mode", "0700"), ("size", "4k"), ("nr_inodes", "4")],
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                )?;
                private.push(dev_of(&cover, "a hidden directory")?);
            }
        }
    }
    if let Some(g) = &program {
        bind(r, &g.path, g.fd.as_fd(), g.is_dir, g.attrs)?;
    }
    // Last, with every grant in place: the targets of protected symlinks.
    protect::protect_targets(r, &follow, &private, &granted)?;

    // 7. Seal the skeleton: the server cannot create files in /, /etc or /dev.
    // Non-recursive: binds below keep their own flags (/tmp, /dev/shm, grants).
    for (what, fd) in [("/etc", &etc_mnt), ("/dev", &dev_mnt), ("/", &root)] {
        sys::mount::set_mount_attr(fd.as_fd(), MOUNT_ATTR_RDONLY, false)
            .map_err(|e| Failure::os(format!("make {what} read-only"), e))?;
    }

    // pivot_root(".", "."): the old root ends up stacked on top of the new one at
    // "/", and is then lazily detached, so no host path stays reachable.
    nix::unistd::fchdir(&root).map_err(|e| Failure::os("chdir new root", e))?;
    sys::mount::pivot_root(c".", c".").map_err(|e| Failure::os("pivot_root", e))?;
    nix::mount::umount2(".", nix::mount::MntFlags::MNT_DETACH)
        .map_err(|e| Failure::os("detach old root", e))?;
    nix::unistd::chdir("/").map_err(|e| Failure::os("chdir /", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(uid: u32, gid: u32, user: &str, home: &str) -> SandboxSpec {
        SandboxSpec {
            session_id: "s".into(),
            program: "/bin/sh".into(),
            argv: vec![b"sh".to_vec()],
            env: vec![],
            cwd: "/".into(),
            read: vec![],
            write: vec![],
            home: home.into(),
            uid,
            gid,
            user: user.into(),
            tmp_size_mb: 1,
            pids_max: None,
            landlock_min_abi: 0,
            proxy_port: None,
            resolver: false,
            cgroup: None,
            audit_files: crate::spec::FileWatch::Off,
            hold_files: false,
            warden_paths: vec![],
            hide: vec![],
            allow_git_init: false,
            dangerously_skip_confinement: false,
            layers: crate::spec::Layers::NONE,
        }
    }

    #[test]
    fn passwd_and_group_for_a_user() {
        let (pw, gr) = passwd(&spec(1000, 1000, "ana", "/home/ana")).unwrap();
        assert_eq!(
            pw,
            "root:x:0:0:root:/root:/bin/sh\nana:x:1000:1000:ana:/home/ana:/bin/sh\n"
        );
        assert_eq!(gr, "root:x:0:\nana:x:1000:\n");
    }

    #[test]
    fn passwd_and_group_for_root() {
        let (pw, gr) = passwd(&spec(0, 0, "root", "/root")).unwrap();
        assert_eq!(pw, "root:x:0:0:root:/root:/bin/sh\n");
        assert_eq!(gr, "root:x:0:\n");
    }

    #[test]
    fn passwd_refuses_injection() {
        assert!(passwd(&spec(1000, 1000, "a:x:0:0", "/home/a")).is_err());
        assert!(passwd(&spec(1000, 1000, "a", "/home/a\nroot::0:0::/:/bin/sh")).is_err());
    }

    #[test]
    fn relative_or_dotdot_paths_are_refused() {
        assert!(check_abs("grant", Path::new("rel/x")).is_err());
        assert!(check_abs("grant", Path::new("/a/../etc")).is_err());
        assert!(check_abs("grant", Path::new("/a/b")).is_ok());
    }

    #[test]
    fn tmpfs_inode_budget_scales_with_its_size() {
        assert_eq!(tmpfs_inodes(256), 65536);
        assert_eq!(tmpfs_inodes(1), 1024);
        assert_eq!(tmpfs_inodes(0), 1024);
        assert!(tmpfs_inodes(u64::MAX) > 0);
    }

    #[test]
    fn runtime_tables_have_no_resolver_and_no_tty() {
        assert!(!ETC.contains(&"resolv.conf"));
        assert!(!ETC
            .iter()
            .any(|e| e.contains("shadow") || e.contains("passwd")));
        assert!(!DEVICES.iter().any(|d| d.contains("tty") || *d == "ptmx"));
    }
}
