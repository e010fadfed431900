//! `wardenctl policy list | show | edit`, through the real binary with a
//! private `XDG_CONFIG_HOME` (its profiles directory) and scripted editors.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Home {
    _dir: tempfile::TempDir,
    root: PathBuf,
    profiles: PathBuf,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let profiles = root.join("config/warden/policies");
        std::fs::create_dir_all(&profiles).unwrap();
        std::fs::create_dir_all(root.join("home")).unwrap();
        Home {
            _dir: dir,
            root,
            profiles,
        }
    }

    fn profile(&self, name: &str, text: &str) -> PathBuf {
        let p = self.profiles.join(format!("{name}.yaml"));
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        p
    }

    /// `wardenctl ARGS` with `editor` as $EDITOR (and no $VISUAL), stdin
    /// not a terminal.
    fn run(&self, args: &[&str], editor: Option<&str>) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_wardenctl"));
        cmd.args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.root.join("home"))
            .env("XDG_CONFIG_HOME", self.root.join("config"))
            .env("XDG_RUNTIME_DIR", self.root.join("run"))
            .stdin(std::process::Stdio::null());
        if let Some(e) = editor {
            cmd.env("EDITOR", e);
        }
        cmd.output().unwrap()
    }

    /// The names in the profiles directory (hidden ones too).
    fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.profiles)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const GOOD: &str =
    "version: 1\nname: notes\ncommand: [\"/bin/true\"]\nnetwork:\n  allow: [\"api.example.com\"]\n";

#[test]
fn list_shows_each_profile_compiled_and_skips_edit_copies() {
    let h = Home::new();
    h.profile("notes", GOOD);
    h.profile(
        "broken",
        "version: 1\ncommand: [\"/bin/true\"]\nnetwork:\n  alow: []\n",
    );
    std::fs::write(h.profiles.join(".notes.edit.yaml"), GOOD).unwrap();
    std::fs::write(h.profiles.join("README.txt"), "not a profile").unwrap();
    let out = h.run(&["policy", "list"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].starts_with("PROFILE"), "{stdout}");
    assert!(
        lines[1].starts_with("broken") && lines[1].contains("invalid"),
        "{stdout}"
    );
    assert!(
        lines[1].contains("alow"),
        "the error names the key: {stdout}"
    );
    assert!(
        lines[2].starts_with("notes") && lines[2].contains("ok") && lines[2].contains("/bin/true"),
        "{stdout}"
    );

    let out = h.run(&["--json", "policy", "list"], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v[1]["profile"], "notes");
    assert_eq!(v[1]["name"], "notes");
    assert_eq!(v[1]["valid"], true);
    assert_eq!(v[1]["command"][0], "/bin/true");
    assert_eq!(v[0]["valid"], false);

    // No profiles directory at all: a hint, not an error.
    std::fs::remove_dir_all(&h.profiles).unwrap();
    let out = h.run(&["policy", "list"], None);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("no profiles in"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn show_prints_the_path_and_what_the_profile_allows() {
    let h = Home::new();
    let path = h.profile("notes", GOOD);
    let out = h.run(&["policy", "show", "notes"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with(&format!("# {}\n", path.display())),
        "{stdout}"
    );
    assert!(stdout.contains("api.example.com:80,443"), "{stdout}");
    let out = h.run(&["--json", "policy", "show", "notes"], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["name"], "notes");
    for bad in ["missing", "../notes", ".notes", ""] {
        let out = h.run(&["policy", "show", bad], None);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        let err = text(&out.stderr);
        assert!(err.starts_with("wardenctl: "), "{bad}: {err}");
        assert!(err.contains("profile"), "{bad}: {err}");
    }
}

/// A profile without `command:` (used with `-- CMD`, or as `wardenctl
/// exec-server`'s ceiling) is shown, its command as none; `policy check`
/// still wants one.
#[test]
fn show_prints_a_profile_without_a_command() {
    let h = Home::new();
    let path = h.profile(
        "ceiling",
        "version: 1\nname: ceiling\nnetwork:\n  allow: [\"api.example.com:443\"]\n",
    );
    let out = h.run(&["policy", "show", "ceiling"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("api.example.com:443"), "{stdout}");
    assert!(stdout.contains("argv: '(none in the profile"), "{stdout}");
    let out = h.run(&["--json", "policy", "show", "ceiling"], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["argv"], serde_json::Value::Null);
    assert_eq!(v["program"], serde_json::Value::Null);
    let out = h.run(&["policy", "check", path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no command"),
        "{}",
        text(&out.stderr)
    );
}

/// An editor script: `sh -c` runs `$EDITOR "$@"`, so the value may hold
/// arguments, as `code --wait` does.
fn editor(h: &Home, name: &str, body: &str) -> String {
    let p = h.root.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("{} --an-argument", p.display())
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn edit_replaces_the_profile_only_with_a_valid_copy() {
    let h = Home::new();
    let path = h.profile("notes", GOOD);
    // A valid change: put in place, with the file's mode.
    let ed = editor(
        &h,
        "ed-ok",
        "shift; sed -i 's/api.example.com/api.github.com/' \"$1\"",
    );
    let out = h.run(&["policy", "edit", "notes"], Some(&ed));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("updated"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        GOOD.replace("api.example.com", "api.github.com")
    );
    assert_eq!(mode(&path), 0o640);
    assert_eq!(h.files(), ["notes.yaml"]);

    // No change: said so, nothing left behind.
    let out = h.run(&["policy", "edit", "notes"], Some("true"));
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("no change"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(h.files(), ["notes.yaml"]);

    // An invalid edit: the profile is untouched, the edit kept and named.
    let before = std::fs::read(&path).unwrap();
    let ed = editor(
        &h,
        "ed-bad",
        "shift; printf 'version: 1\\ncommand: [\"/bin/true\"]\\nfilesytem: {}\\n' > \"$1\"",
    );
    let out = h.run(&["policy", "edit", "notes"], Some(&ed));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("filesytem"), "the error names the key: {err}");
    assert!(err.contains("your edit is kept in"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(h.files(), [".notes.edit.yaml", "notes.yaml"]);
    // A second edit refuses while the kept copy is there (it is not lost).
    let out = h.run(&["policy", "edit", "notes"], Some("true"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("an earlier edit was kept"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_file(h.profiles.join(".notes.edit.yaml")).unwrap();

    // The editor fails: nothing changes, no copy left.
    let out = h.run(&["policy", "edit", "notes"], Some("false"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("the editor failed"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(h.files(), ["notes.yaml"]);

    // A profile that does not exist: a hint, nothing created.
    let out = h.run(&["policy", "edit", "other"], Some("true"));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no profile `other`"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(h.files(), ["notes.yaml"]);
}
