//! Listing snapshots (`snapshot_dir`): what an approved `list` hands the
//! server instead of the host directory. Each property is checked against
//! the host directory it copies (the control: the same call on the host
//! directory shows what the snapshot must not give).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

fn listing(fd: &OwnedFd) -> BTreeMap<String, nix::dir::Type> {
    let dir = nix::dir::Dir::from_fd(nix::unistd::dup(fd).unwrap()).unwrap();
    dir.into_iter()
        .map(|e| e.unwrap())
        .filter(|e| !matches!(e.file_name().to_bytes(), b"." | b".."))
        .map(|e| {
            (
                e.file_name().to_str().unwrap().to_owned(),
                e.file_type().unwrap(),
            )
        })
        .collect()
}

fn open_dir(p: &Path) -> OwnedFd {
    nix::fcntl::open(
        p,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// A directory with one of every kind a home directory has.
fn fixture(dir: &Path) -> std::os::unix::net::UnixListener {
    std::fs::write(dir.join("report.txt"), "the secret content\n".repeat(300)).unwrap();
    std::fs::set_permissions(
        dir.join("report.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/deeper.txt"), "below").unwrap();
    symlink("report.txt", dir.join("link")).unwrap();
    nix::unistd::mkfifo(&dir.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
    let when = filetime_of();
    let f = std::fs::File::options()
        .write(true)
        .open(dir.join("report.txt"))
        .unwrap();
    f.set_modified(when).unwrap();
    std::os::unix::net::UnixListener::bind(dir.join("sock")).unwrap()
}

/// 2001-09-11 08:46:00 UTC with a few nanoseconds: a time no test run makes.
fn filetime_of() -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::new(1_000_198_360, 123_456_789)
}

#[test]
fn a_snapshot_lists_the_directory_with_its_metadata_and_nothing_else() {
    if !common::userns_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("papers");
    std::fs::create_dir(&dir).unwrap();
    let listener = fixture(&dir);
    listener.set_nonblocking(true).unwrap();

    let snap = warden_sandbox::snapshot_dir(&common::runner(), &dir).unwrap();
    assert_eq!((snap.entries, snap.skipped, snap.truncated), (5, 0, false));
    let host = open_dir(&dir);

    // The same names with the same types.
    assert_eq!(listing(&snap.dir), listing(&host));
    // The same metadata: mode, size, modification time, owner.
    for name in ["report.txt", "sub", "link", "fifo", "sock"] {
        let s = fstatat(snap.dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW).unwrap();
        let h = fstatat(host.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW).unwrap();
        assert_eq!(s.st_mode, h.st_mode & !0o6000, "{name}");
        assert_eq!(
            (s.st_mtime, s.st_mtime_nsec),
            (h.st_mtime, h.st_mtime_nsec),
            "{name}"
        );
        assert_eq!(s.st_uid, h.st_uid, "{name}");
        if name != "sub" {
            assert_eq!(s.st_size, h.st_size, "{name}");
        }
    }
    assert_eq!(
        std::fs::read_link(format!("/proc/self/fd/{}/link", raw(&snap.dir))).unwrap(),
        Path::new("report.txt")
    );
    let top = fstat(&snap.dir).unwrap();
    let htop = fstat(&host).unwrap();
    assert_eq!(top.st_mode, htop.st_mode);
    assert_eq!(top.st_mtime, htop.st_mtime);

    // No content: the file reads as zeros of the right length (sparse).
    let mut text = String::new();
    std::fs::File::from(
        nix::fcntl::openat(&snap.dir, "report.txt", OFlag::O_RDONLY, Mode::empty()).unwrap(),
    )
    .read_to_string(&mut text)
    .unwrap();
    assert_eq!(text.len(), "the secret content\n".len() * 300);
    assert!(!text.contains("secret"), "the snapshot holds no content");
    // The control: the host file has it.
    assert!(std::fs::read_to_string(dir.join("report.txt"))
        .unwrap()
        .contains("secret"));
    // Nothing below a directory entry.
    let sub = nix::fcntl::openat(
        &snap.dir,
        "sub",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    assert!(listing(&sub).is_empty());

    // Read-only.
    for flags in [OFlag::O_WRONLY, OFlag::O_CREAT | OFlag::O_WRONLY] {
        assert_eq!(
            nix::fcntl::openat(&snap.dir, "new.txt", flags, Mode::from_bits_truncate(0o600)).err(),
            Some(if flags.contains(OFlag::O_CREAT) {
                Errno::EROFS
            } else {
                Errno::ENOENT
            })
        );
    }
    assert_eq!(
        nix::sys::stat::mkdirat(&snap.dir, "d", Mode::from_bits_truncate(0o700)).err(),
        Some(Errno::EROFS)
    );

    // `..` from its root stays at its root (a detached mount has no
    // parent); the host directory's `..` is its parent.
    let up = nix::fcntl::openat(&snap.dir, "..", OFlag::O_RDONLY, Mode::empty()).unwrap();
    let up = fstat(&up).unwrap();
    assert_eq!((up.st_dev, up.st_ino), (top.st_dev, top.st_ino));
    let host_up = fstatat(host.as_fd(), "..", AtFlags::empty()).unwrap();
    assert_ne!((host_up.st_dev, host_up.st_ino), (htop.st_dev, htop.st_ino));

    // The socket is not the host's: nobody listens on it.
    let via_snapshot = format!("/proc/self/fd/{}/sock", raw(&snap.dir));
    let err = std::os::unix::net::UnixStream::connect(&via_snapshot).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ECONNREFUSED), "{err}");
    // The control: through the host directory it reaches the listener.
    std::os::unix::net::UnixStream::connect(dir.join("sock")).unwrap();
    assert!(listener.accept().is_ok());
}

#[test]
fn a_snapshot_refuses_a_symlink_on_the_way_and_what_is_not_a_directory() {
    if !common::userns_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    symlink(&real, tmp.path().join("alias")).unwrap();
    std::fs::create_dir(real.join("inner")).unwrap();
    std::fs::write(tmp.path().join("file"), "x").unwrap();
    // The last component a symlink: O_NOFOLLOW|O_DIRECTORY says ENOTDIR.
    for (p, errnos) in [
        (tmp.path().join("alias"), [libc::ENOTDIR, libc::ELOOP]),
        (tmp.path().join("alias/inner"), [libc::ELOOP, libc::ELOOP]),
        (tmp.path().join("file"), [libc::ENOTDIR, libc::ENOTDIR]),
        (tmp.path().join("missing"), [libc::ENOENT, libc::ENOENT]),
    ] {
        match warden_sandbox::snapshot_dir(&common::runner(), &p) {
            Err(warden_sandbox::SandboxError::Setup { errno: Some(e), .. }) => {
                assert!(errnos.contains(&e), "{}: {e}", p.display())
            }
            other => panic!("{}: {other:?}", p.display()),
        }
    }
}

fn raw(fd: &OwnedFd) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
}

/// `userns_trial` (what `wardenctl status` asks to tell an AppArmor
/// restriction apart): it works where user namespaces do, and names the
/// failure where the binary cannot run the role (control: a program that is
/// not an init role's binary fails the trial).
#[test]
fn the_userns_trial_runs_the_snapshot_role() {
    if !common::userns_available() {
        return;
    }
    warden_sandbox::kernel::userns_trial(&common::runner()).unwrap();
    let err = warden_sandbox::kernel::userns_trial(Path::new("/bin/true")).unwrap_err();
    assert!(err.to_string().contains("without an answer"), "{err}");
}
