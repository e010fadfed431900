use std::os::unix::fs::symlink;

use super::*;

const NOTE: &str = "approved 2026-12-02 by wardenctl approve (ap-7q2)";

const POLICY: &str = "\
# The notes server.
command: [server]   # argv

network:
  allow:
    - api.example.com   # the API
";

/// [`POLICY`] with the grant: one line more, at the end.
const ADDED: &str =
    "    - cdn.example.com:443  # approved 2026-12-02 by wardenctl approve (ap-7q2)\n";

fn edited() -> String {
    format!("{POLICY}{ADDED}")
}

fn grant() -> Grant {
    Grant::Network("cdn.example.com:443".into())
}

/// A directory holding `policy.yaml` with `text`, mode `mode`.
fn setup(text: &str, mode: u32) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    (dir, path)
}

/// The names in `dir`, sorted: a temporary file left behind shows here.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The file still holds `text`, and nothing was left beside it.
fn left_alone(dir: &Path, path: &Path, text: &str) {
    assert_eq!(fs::read_to_string(path).unwrap(), text);
    assert_eq!(names(dir), ["policy.yaml"]);
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Whether file permissions do not hold for this process, so the test of
/// `what` is skipped (saying so): root (or a process with CAP_DAC_OVERRIDE)
/// writes into a read-only directory anyway. The suite runs again as an
/// unprivileged user, where it is tested.
fn skip_unless_permissions_hold(dir: &Path, what: &str) -> bool {
    let probe = dir.join("probe");
    fs::create_dir(&probe).unwrap();
    fs::set_permissions(&probe, fs::Permissions::from_mode(0o555)).unwrap();
    let bypassed = File::create(probe.join("x")).is_ok();
    fs::set_permissions(&probe, fs::Permissions::from_mode(0o755)).unwrap();
    fs::remove_dir_all(&probe).unwrap();
    if bypassed {
        eprintln!("skipping: this process bypasses file permissions (it runs as root), so {what} cannot be tested here; the suite tests it as an unprivileged user");
    }
    bypassed
}

#[test]
fn an_unchanged_file_is_replaced_atomically_with_its_mode() {
    let (dir, path) = setup(POLICY, 0o640);
    let ino = fs::metadata(&path).unwrap().ino();
    let edit = add_grant_to_file(&path, POLICY.as_bytes(), &grant(), NOTE).unwrap();
    assert_eq!(
        edit,
        FileEdit {
            text: edited(),
            already_present: false,
            merged: false,
        }
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), edited());
    assert_eq!(mode(&path), 0o640);
    // A new file renamed over the old one, and nothing else left.
    assert_ne!(fs::metadata(&path).unwrap().ino(), ino);
    assert_eq!(names(dir.path()), ["policy.yaml"]);
}

#[test]
fn a_file_the_user_changed_is_merged_when_it_still_parses() {
    let theirs = POLICY.replace(
        "command: [server]",
        "command: [server, --verbose]  # louder",
    );
    let (dir, path) = setup(&theirs, 0o600);
    let edit = add_grant_to_file(&path, POLICY.as_bytes(), &grant(), NOTE).unwrap();
    let want = edited().replace(
        "command: [server]",
        "command: [server, --verbose]  # louder",
    );
    assert!(edit.merged && !edit.already_present);
    assert_eq!(edit.text, want);
    assert_eq!(fs::read_to_string(&path).unwrap(), want);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(names(dir.path()), ["policy.yaml"]);
}

#[test]
fn a_file_that_changed_and_no_longer_parses_is_left_alone() {
    let broken = format!("{POLICY}limits:\n  memry_mb: 5\n");
    let (dir, path) = setup(&broken, 0o644);
    let err = add_grant_to_file(&path, POLICY.as_bytes(), &grant(), NOTE).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{p} changed since the session started and is now invalid, so it was left as it is: {p}:8:3: limits.memry_mb: unknown key `memry_mb`, did you mean `memory_mb`?",
            p = path.display()
        )
    );
    left_alone(dir.path(), &path, &broken);
}

#[test]
fn an_unchanged_file_that_is_invalid_is_not_edited() {
    let broken = "network:\n  allow: cdn.example.com\n";
    let (_dir, path) = setup(broken, 0o644);
    let err = add_grant_to_file(&path, broken.as_bytes(), &grant(), NOTE).unwrap_err();
    assert!(matches!(err, EditError::Invalid(_)), "{err}");
    assert!(
        err.to_string().contains(&format!(
            "{}:2:10: network.allow: expected a list",
            path.display()
        )),
        "{err}"
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), broken);
}

#[test]
fn an_entry_already_there_writes_nothing() {
    let (_dir, path) = setup(&edited(), 0o644);
    let before = fs::metadata(&path).unwrap();
    let edit = add_grant_to_file(&path, POLICY.as_bytes(), &grant(), NOTE).unwrap();
    assert_eq!(
        edit,
        FileEdit {
            text: edited(),
            already_present: true,
            merged: true,
        }
    );
    let after = fs::metadata(&path).unwrap();
    assert_eq!(
        (before.ino(), before.mtime(), before.mtime_nsec()),
        (after.ino(), after.mtime(), after.mtime_nsec())
    );
}

#[test]
fn a_symlink_is_refused_and_its_target_kept() {
    let (dir, target) = setup(POLICY, 0o644);
    let link = dir.path().join("link.yaml");
    symlink(&target, &link).unwrap();
    let err = add_grant_to_file(&link, POLICY.as_bytes(), &grant(), NOTE).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{} is a symbolic link: the policy file is only edited where it lies; edit the file it points to by hand",
            link.display()
        )
    );
    assert_eq!(fs::read_to_string(&target).unwrap(), POLICY);
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(names(dir.path()), ["link.yaml", "policy.yaml"]);
}

#[test]
fn what_is_not_a_regular_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("policy.yaml");
    fs::create_dir(&sub).unwrap();
    let err = add_grant_to_file(&sub, b"", &grant(), NOTE).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{} is not a regular file, so it is not edited",
            sub.display()
        )
    );
    let missing = dir.path().join("missing.yaml");
    let err = add_grant_to_file(&missing, b"", &grant(), NOTE).unwrap_err();
    assert!(matches!(err, EditError::Read { .. }), "{err}");
    assert!(
        err.to_string().starts_with(&format!(
            "cannot read the policy file {}: No such file or directory (os error 2)",
            missing.display()
        )),
        "{err}"
    );
    assert_eq!(names(dir.path()), ["policy.yaml"]);
}

#[test]
fn a_file_that_is_not_utf8_or_too_large_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    fs::write(&path, b"name: \xff\n").unwrap();
    let err = add_grant_to_file(&path, b"", &grant(), NOTE).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{} is not valid UTF-8, so it is not edited", path.display())
    );
    let big = format!("# {}\n", "x".repeat(MAX_POLICY_BYTES as usize));
    fs::write(&path, &big).unwrap();
    let err = add_grant_to_file(&path, big.as_bytes(), &grant(), NOTE).unwrap_err();
    assert!(matches!(err, EditError::TooLarge { .. }), "{err}");
    assert_eq!(names(dir.path()), ["policy.yaml"]);
}

#[test]
fn a_change_while_the_edit_is_written_is_kept_and_reported() {
    let (dir, path) = setup(POLICY, 0o644);
    let theirs = format!("{POLICY}name: mine\n");
    let mut change = || fs::write(&path, &theirs).unwrap();
    let err = edit_file(
        &path,
        POLICY.as_bytes(),
        &[(grant(), NOTE.to_owned())],
        &mut change,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{} changed while the grant was being added, so it was left as it is; answer again to add it to the new text",
            path.display()
        )
    );
    left_alone(dir.path(), &path, &theirs);
    // Swapped for a symlink meanwhile: refused too, the temporary file gone.
    let (dir, path) = setup(POLICY, 0o644);
    let other = dir.path().join("other.yaml");
    fs::write(&other, POLICY).unwrap();
    let mut swap = || {
        fs::remove_file(&path).unwrap();
        symlink(&other, &path).unwrap();
    };
    let err = edit_file(
        &path,
        POLICY.as_bytes(),
        &[(grant(), NOTE.to_owned())],
        &mut swap,
    )
    .unwrap_err();
    assert!(matches!(err, EditError::Symlink { .. }), "{err}");
    assert_eq!(fs::read_to_string(&other).unwrap(), POLICY);
    assert_eq!(names(dir.path()), ["other.yaml", "policy.yaml"]);
}

#[test]
fn a_read_only_directory_is_refused_and_nothing_is_left_behind() {
    let (dir, path) = setup(POLICY, 0o644);
    if skip_unless_permissions_hold(dir.path(), "a read-only directory") {
        return;
    }
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o555)).unwrap();
    let result = add_grant_to_file(&path, POLICY.as_bytes(), &grant(), NOTE);
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let err = result.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot write the policy file {}: cannot create a file in {}: Permission denied (os error 13)",
            path.display(),
            dir.path().display()
        )
    );
    left_alone(dir.path(), &path, POLICY);
}

#[test]
fn a_read_only_file_is_not_replaced() {
    let (dir, path) = setup(POLICY, 0o444);
    if skip_unless_permissions_hold(dir.path(), "a read-only file") {
        return;
    }
    let err = add_grant_to_file(&path, POLICY.as_bytes(), &grant(), NOTE).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot write the policy file {}: the file is not writable: Permission denied (os error 13)",
            path.display()
        )
    );
    left_alone(dir.path(), &path, POLICY);
    assert_eq!(mode(&path), 0o444);
}

#[test]
fn a_crlf_file_without_a_final_line_break_keeps_both() {
    let text = "# c\r\nnetwork:\r\n  allow: [a.example]";
    let (_dir, path) = setup(text, 0o644);
    let edit = add_grant_to_file(&path, text.as_bytes(), &grant(), NOTE).unwrap();
    let want = "# c\r\nnetwork:\r\n  # cdn.example.com:443: approved 2026-12-02 by wardenctl approve (ap-7q2)\r\n  allow: [a.example, \"cdn.example.com:443\"]";
    assert_eq!(edit.text, want);
    assert_eq!(fs::read_to_string(&path).unwrap(), want);
}
