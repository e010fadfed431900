//! What the sandbox's layout says about an access: which part of the
//! sandbox a mount is ([`Area`], from the spec's grants: [`Layout`]), and
//! the prediction for one path of an access ([`decide`]: allowed, or denied
//! with the errno the server gets and why). Pure functions of the layout and
//! of what [`super::resolve`] found; the creation guard asks [`Layout`] too.

use super::mountinfo::Mount;
use super::resolve::{under, Resolution};
use crate::protected;
use crate::spec::SandboxSpec;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What an access does to one of its paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
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
pub(crate) enum Area {
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
    /// A path of a write grant kept read-only ([`crate::protected`]), with its reason.
    Protected(&'static str),
    /// Anything else (a pinned directory, the target of a protected link).
    Other,
}

impl Area {
    /// The sandbox's own file systems: a host path there is hidden.
    fn hides_host(&self) -> bool {
        matches!(self, Area::Skeleton | Area::SyntheticDir | Area::Private(_))
    }

    pub(crate) fn describe(&self) -> String {
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
pub(crate) struct Layout {
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
    pub(crate) fn new(spec: &SandboxSpec) -> Layout {
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
    pub(crate) fn area(&self, m: &Mount) -> Area {
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

/// What the sandbox's layout predicts for an observed access: allowed or
/// denied (the daemon's `file` record says `allow`, `deny` or, for
/// `Unknown`, `info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessVerdict {
    Allow,
    Deny,
    /// The path could not be read or placed: nothing can be said.
    Unknown,
}

/// The prediction for one path of an access: the verdict, and for a denial
/// the errno the server gets; why, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub verdict: AccessVerdict,
    /// The errno the caller gets from the sandbox (denials only).
    pub errno: Option<i32>,
    pub reason: String,
}

pub(crate) fn allow(reason: impl Into<String>) -> Outcome {
    Outcome {
        verdict: AccessVerdict::Allow,
        errno: None,
        reason: reason.into(),
    }
}

fn deny(errno: Option<i32>, reason: impl Into<String>) -> Outcome {
    Outcome {
        verdict: AccessVerdict::Deny,
        errno,
        reason: reason.into(),
    }
}

/// What is known about one path of an access, for [`decide`].
#[derive(Debug, Clone)]
pub(crate) struct Facts<'a> {
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
pub(crate) fn decide(f: &Facts<'_>, host_has: &mut dyn FnMut(&[u8]) -> bool) -> Outcome {
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
        return Outcome {
            verdict: AccessVerdict::Unknown,
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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
    ) -> Outcome {
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
                (v.verdict, v.errno),
                (AccessVerdict::Deny, Some(libc::ENOENT)),
                "{area:?}"
            );
            assert!(
                v.reason.starts_with("outside the sandbox's grants"),
                "{}",
                v.reason
            );
            // Control: absent on the host too, nothing was hidden.
            let v = judge_with(Access::Read, &r, area, false, false);
            assert_eq!(v.verdict, AccessVerdict::Allow);
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
        assert_eq!(v.verdict, AccessVerdict::Allow);
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
                (v.verdict, v.errno, v.reason.as_str()),
                (AccessVerdict::Deny, Some(libc::EROFS), "read-only grant"),
                "{access:?}"
            );
            // Control: the same on a write grant is allowed.
            let v = judge_with(access, r, Area::WriteGrant, false, false);
            assert_eq!(v.verdict, AccessVerdict::Allow, "{access:?}");
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
            (v.verdict, v.reason.as_str()),
            (AccessVerdict::Allow, "a read grant")
        );
        // Creating where the parent is missing: hidden if the host has the parent.
        let deep = resolution(false, false, false, "/opt/tool/new");
        let v = judge_with(Access::Create, &deep, Area::Skeleton, true, true);
        assert_eq!(
            (v.verdict, v.errno),
            (AccessVerdict::Deny, Some(libc::ENOENT))
        );
        let v = judge_with(Access::Create, &deep, Area::Skeleton, true, false);
        assert_eq!(v.verdict, AccessVerdict::Allow);
        // Creating directly in the read-only skeleton.
        let top = resolution(false, true, false, "/newdir");
        let v = judge_with(Access::Create, &top, Area::Skeleton, true, false);
        assert_eq!(
            (v.verdict, v.errno),
            (AccessVerdict::Deny, Some(libc::EROFS))
        );
    }

    #[test]
    fn listing_the_skeleton_exec_on_noexec_and_mount_points() {
        let dir = resolution(true, true, true, "/home");
        let v = judge_with(Access::Read, &dir, Area::Skeleton, true, true);
        assert_eq!((v.verdict, v.errno), (AccessVerdict::Deny, None));
        // Control: a directory of a grant or of the private home lists fine.
        for area in [Area::ReadGrant, Area::Private("$HOME"), Area::Runtime] {
            assert_eq!(
                judge_with(Access::Read, &dir, area, true, true).verdict,
                AccessVerdict::Allow
            );
        }
        let file = resolution(true, true, false, "/dev/shm/x");
        let v = judge_with(Access::Exec, &file, Area::SyntheticDir, false, false);
        assert_eq!(
            (v.verdict, v.errno),
            (AccessVerdict::Deny, Some(libc::EACCES))
        );
        let v = judge_with(Access::Exec, &file, Area::WriteGrant, false, false);
        assert_eq!(v.verdict, AccessVerdict::Allow);
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
        assert_eq!(
            (v.verdict, v.errno),
            (AccessVerdict::Deny, Some(libc::EBUSY))
        );
        // Writing into a mount point (a device node, a grant root) is no removal.
        let f = Facts {
            access: Access::Modify,
            ..f
        };
        assert_eq!(decide(&f, &mut |_| false).verdict, AccessVerdict::Allow);
    }

    #[test]
    fn proc_is_the_sandboxs_own_but_host_settings_stay_read_only() {
        let mut r = resolution(false, false, false, "/proc/sys/kernel/core_pattern");
        r.proc = true;
        let v = judge_with(Access::Modify, &r, Area::Proc, false, true);
        assert_eq!(
            (v.verdict, v.errno),
            (AccessVerdict::Deny, Some(libc::EROFS))
        );
        let v = judge_with(Access::Read, &r, Area::Proc, false, true);
        assert_eq!(v.verdict, AccessVerdict::Allow);
        r.path = b"/proc/self/fd/1".to_vec();
        let v = judge_with(Access::Modify, &r, Area::Proc, false, true);
        assert_eq!(v.verdict, AccessVerdict::Allow);
    }

    pub(crate) fn spec() -> SandboxSpec {
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
}
