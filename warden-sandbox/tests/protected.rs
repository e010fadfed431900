//! Write grants and the files the host trusts (`warden_sandbox::protected`): real
//! sandboxes driven through `warden-sandbox-run`, as root and as an unprivileged
//! user (`tests/run-unprivileged.sh`).
//!
//! Every refusal is paired with a control in the same sandbox: the same
//! operation on an ordinary file of the same grant succeeds, and the same
//! operation on the protected file succeeds once the policy grants that exact
//! path for writing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use warden_sandbox::spec::SandboxSpec;

mod common;
use common::{decided, runner, sh_spec, userns_available};

/// The files planted in the project before each run, with their contents.
const PLANTED: &[(&str, &str)] = &[
    (".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n"),
    (".git/config", "[core]\n\tbare = false\n"),
    (".git/HEAD", "ref: refs/heads/main\n"),
    // A git dir as git recognises one: HEAD, objects/ and refs/.
    (".git/objects/info/packs", ""),
    (
        ".git/refs/heads/main",
        "0123456789012345678901234567890123456789\n",
    ),
    (".bashrc", "# rc\n"),
    (".vscode/tasks.json", "{}\n"),
    (".mcp.json", "{\"mcpServers\": {}}\n"),
    (".config/fish/config.fish", "# fish\n"),
    ("ordinary.txt", "data\n"),
];

/// The protected files of [`PLANTED`] the tests attack.
const TARGETS: &[&str] = &[
    ".git/hooks/pre-commit",
    ".git/config",
    ".bashrc",
    ".vscode/tasks.json",
    ".mcp.json",
];

/// A scratch directory holding `proj/` (the write grant) and `outside/` (no grant).
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("warden-protect-")
            .tempdir()
            .unwrap();
        let f = Fixture { dir };
        for (rel, content) in PLANTED {
            let p = f.proj(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, content).unwrap();
        }
        std::fs::set_permissions(
            f.proj(".git/hooks/pre-commit"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::create_dir(f.path("outside")).unwrap();
        std::fs::write(f.path("outside/rc"), "host rc\n").unwrap();
        f
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn proj(&self, rel: &str) -> PathBuf {
        self.path("proj").join(rel)
    }

    fn spec(&self, script: &str, write: Vec<PathBuf>) -> SandboxSpec {
        let home = self.path("home");
        std::fs::create_dir_all(&home).unwrap();
        let proj = self.path("proj");
        let mut spec = sh_spec(home, &format!("{PRELUDE}\n{script}"));
        spec.session_id = "pr0tect1234abcd".into();
        spec.env.push((b"LC_ALL".to_vec(), b"C".to_vec()));
        spec.env
            .push((b"P".to_vec(), proj.as_os_str().as_encoded_bytes().to_vec()));
        spec.cwd = proj;
        spec.write = write;
        // Layers: decided when run.
        spec
    }

    /// Runs the spec with the layers this kernel gives it; requires exit 0;
    /// returns stdout.
    fn sh(&self, spec: &SandboxSpec) -> String {
        let file = self.dir.path().join("spec.json");
        std::fs::write(&file, serde_json::to_vec(&decided(spec)).unwrap()).unwrap();
        let out = Command::new(runner()).arg(&file).output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "stdout: {stdout}\nstderr: {stderr}"
        );
        stdout
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.proj(rel)).unwrap()
    }

    fn planted(rel: &str) -> &'static str {
        PLANTED.iter().find(|(p, _)| *p == rel).unwrap().1
    }
}

/// `t LABEL CMD...`: runs CMD, prints `LABEL ok` or `LABEL refused: <stderr>`.
const PRELUDE: &str = r#"
t() { l=$1; shift; if e=$("$@" 2>&1); then echo "$l ok"; else echo "$l refused: $(echo $e | tr '\n' ' ')"; fi; }
"#;

/// Every way to change a file in place or replace it, as `t` lines for `f`.
fn attacks(f: &str) -> String {
    format!(
        "t 'write {f}' sh -c 'echo evil > \"$1\"' _ {f}\n\
         t 'append {f}' sh -c 'echo evil >> \"$1\"' _ {f}\n\
         t 'truncate {f}' truncate -s 0 {f}\n\
         t 'chmod {f}' chmod 777 {f}\n\
         t 'rename-over {f}' sh -c 'echo evil > \"$P/scratch\" && mv -f \"$P/scratch\" \"$1\"' _ {f}\n\
         t 'symlink-over {f}' ln -sf /tmp/evil {f}\n\
         t 'delete {f}' rm -f {f}\n"
    )
}

/// Parses `t` output: label → Ok(()) or Err(message).
fn results(out: &str) -> Vec<(String, Result<(), String>)> {
    out.lines()
        .filter_map(|l| {
            if let Some(label) = l.strip_suffix(" ok") {
                Some((label.to_string(), Ok(())))
            } else {
                l.split_once(" refused: ")
                    .map(|(label, e)| (label.to_string(), Err(e.to_string())))
            }
        })
        .collect()
}

/// Refused by the kernel for the reason we expect: a read-only mount (EROFS),
/// a mount point that cannot be removed or replaced (EBUSY), or, for a rename
/// that `mv` turns into a copy, across mounts (EXDEV) then EROFS.
fn refused_as_expected(e: &str) -> bool {
    [
        "Read-only file system",
        "Device or resource busy",
        "Permission denied",
        "Invalid cross-device link",
    ]
    .iter()
    .any(|m| e.contains(m))
}

#[test]
fn protected_files_in_a_write_grant_cannot_be_changed() {
    if !userns_available() {
        return;
    }
    let f = Fixture::new();
    let mut script = String::new();
    for t in TARGETS.iter().chain(&["ordinary.txt"]) {
        script.push_str(&attacks(t));
    }
    // Creating inside protected directories, and moving them away.
    script.push_str(
        "t 'create .git/hooks/post-checkout' sh -c 'echo evil > .git/hooks/post-checkout'\n\
         t 'mkdir .git/hooks/x' mkdir .git/hooks/x\n\
         t 'create .git/commondir' sh -c 'echo /tmp > .git/commondir'\n\
         t 'create .vscode/settings.json' sh -c 'echo {} > .vscode/settings.json'\n\
         t 'move .git' mv .git .git-old\n\
         t 'move .git/hooks' mv .git/hooks .git/hooks-old\n\
         t 'move .vscode' mv .vscode .vscode-old\n\
         t 'remove .vscode' rm -rf .vscode\n\
         t 'move .config' mv .config .config-old\n\
         t 'create .config/fish/conf.d/x.fish' sh -c 'mkdir -p .config/fish/conf.d && echo evil > .config/fish/conf.d/x.fish'\n\
         t 'create new.txt' sh -c 'echo new > new.txt'\n\
         t 'mkdir newdir' mkdir newdir\n\
         t 'create .config/other' sh -c 'echo ok > .config/other'\n\
         t 'git status' sh -c 'test -d .git && cat .git/HEAD'\n",
    );
    let out = f.sh(&f.spec(&script, vec![f.path("proj")]));
    let got = results(&out);
    // Print the whole table (for the record and for the report).
    for (l, r) in &got {
        eprintln!("{l}: {r:?}");
    }
    let allowed = |label: &str| {
        label.ends_with("ordinary.txt")
            || matches!(
                label,
                "create new.txt" | "mkdir newdir" | "create .config/other" | "git status"
            )
    };
    assert!(got.len() >= 7 * 6 + 14, "{out}");
    for (label, r) in &got {
        if allowed(label) {
            assert!(r.is_ok(), "control {label} failed: {r:?}");
        } else {
            match r {
                Ok(()) => panic!("{label} succeeded inside a protected path\n{out}"),
                Err(e) => assert!(refused_as_expected(e), "{label}: {e}"),
            }
        }
    }
    // The host's files are untouched; the controls landed.
    for t in TARGETS
        .iter()
        .chain(&[".config/fish/config.fish", ".git/HEAD"])
    {
        assert_eq!(f.read(t), Fixture::planted(t), "{t} changed on the host");
    }
    let mode = std::fs::metadata(f.proj(".git/hooks/pre-commit"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    for absent in [
        ".git/hooks/post-checkout",
        ".git/hooks/x",
        ".git/commondir",
        ".vscode/settings.json",
        ".git-old",
        ".vscode-old",
        ".config-old",
        ".config/fish/conf.d",
        "ordinary.txt",
    ] {
        assert!(!f.proj(absent).exists(), "{absent} exists on the host");
    }
    assert_eq!(f.read("new.txt"), "new\n");
    assert_eq!(f.read(".config/other"), "ok\n");
    assert!(f.proj("newdir").is_dir());
}

#[test]
fn protected_files_granted_by_exact_path_stay_writable() {
    if !userns_available() {
        return;
    }
    let f = Fixture::new();
    let mut script = String::new();
    for t in TARGETS {
        script.push_str(&format!(
            "t 'append {t}' sh -c 'echo granted >> \"$1\"' _ {t}\n"
        ));
    }
    script.push_str(
        "t 'create .git/hooks/post-checkout' sh -c 'echo hook > .git/hooks/post-checkout'\n",
    );
    // .git itself is not granted: the rest of it stays read-only.
    script.push_str("t 'create .git/commondir' sh -c 'echo /tmp > .git/commondir'\n");
    let mut write = vec![f.path("proj")];
    write.extend(
        [
            ".git/hooks",
            ".git/config",
            ".bashrc",
            ".vscode",
            ".mcp.json",
        ]
        .iter()
        .map(|t| f.proj(t)),
    );
    let out = f.sh(&f.spec(&script, write));
    for (label, r) in results(&out) {
        if label == "create .git/commondir" {
            assert!(r.is_err(), "{out}");
        } else {
            assert!(r.is_ok(), "{label}: {r:?}");
        }
    }
    for t in TARGETS {
        assert_eq!(
            f.read(t),
            format!("{}granted\n", Fixture::planted(t)),
            "{t}"
        );
    }
    assert_eq!(f.read(".git/hooks/post-checkout"), "hook\n");
    assert!(!f.proj(".git/commondir").exists());
}

#[test]
fn a_granted_git_dir_keeps_its_hooks_and_config_read_only() {
    if !userns_available() {
        return;
    }
    let f = Fixture::new();
    let script = "t 'write HEAD' sh -c 'echo ref: refs/heads/x > .git/HEAD'\n\
                  t 'write config' sh -c 'echo evil >> .git/config'\n\
                  t 'create hook' sh -c 'echo evil > .git/hooks/post-checkout'\n";
    let out = f.sh(&f.spec(script, vec![f.path("proj"), f.proj(".git")]));
    let got = results(&out);
    assert_eq!(got[0], ("write HEAD".into(), Ok(())), "{out}");
    assert!(got[1].1.is_err() && got[2].1.is_err(), "{out}");
    assert_eq!(f.read(".git/HEAD"), "ref: refs/heads/x\n");
    assert_eq!(f.read(".git/config"), Fixture::planted(".git/config"));
}

#[test]
fn a_protected_symlink_does_not_expose_or_write_its_target() {
    if !userns_available() {
        return;
    }
    let f = Fixture::new();
    // .bashrc → a host file outside every grant; .mcp.json → inside the grant.
    std::fs::remove_file(f.proj(".bashrc")).unwrap();
    std::os::unix::fs::symlink(f.path("outside/rc"), f.proj(".bashrc")).unwrap();
    std::fs::remove_file(f.proj(".mcp.json")).unwrap();
    std::fs::create_dir(f.proj("dotfiles")).unwrap();
    std::fs::write(f.proj("dotfiles/mcp.json"), "{}\n").unwrap();
    std::os::unix::fs::symlink("dotfiles/mcp.json", f.proj(".mcp.json")).unwrap();
    let script = format!(
        "t 'read .bashrc' cat .bashrc\n\
         t 'read target' cat {outside}\n\
         {a}{b}\
         t 'write dotfiles/mcp.json' sh -c 'echo evil >> dotfiles/mcp.json'\n\
         t 'write dotfiles/other' sh -c 'echo ok > dotfiles/other'\n",
        outside = f.path("outside/rc").display(),
        a = attacks(".bashrc"),
        b = attacks(".mcp.json"),
    );
    let out = f.sh(&f.spec(&script, vec![f.path("proj")]));
    eprintln!("{out}");
    for (label, r) in results(&out) {
        match label.as_str() {
            "write dotfiles/other" => assert!(r.is_ok(), "{label}: {r:?}"),
            // Not visible inside at all.
            "read .bashrc" | "read target" => {
                assert!(r.unwrap_err().contains("No such file"), "{out}")
            }
            _ => assert!(r.is_err(), "{label} succeeded\n{out}"),
        }
    }
    // The links are unchanged, and so are their targets.
    assert_eq!(
        std::fs::read_link(f.proj(".bashrc")).unwrap(),
        f.path("outside/rc")
    );
    assert_eq!(
        std::fs::read_link(f.proj(".mcp.json")).unwrap(),
        Path::new("dotfiles/mcp.json")
    );
    assert_eq!(
        std::fs::read_to_string(f.path("outside/rc")).unwrap(),
        "host rc\n"
    );
    assert_eq!(f.read("dotfiles/mcp.json"), "{}\n");
    assert_eq!(f.read("dotfiles/other"), "ok\n");
    assert!(!f.path("tmp/evil").exists());
}

/// A protected name that does not exist when the session starts cannot be
/// created either (the creation guard, `supervise/guard.rs`: the notifier
/// performs creations and refuses protected names), while an ordinary new
/// file next to it can. Control: the same command outside the sandbox plants
/// the file.
#[test]
fn a_missing_protected_name_cannot_be_created() {
    if !userns_available() {
        return;
    }
    let f = Fixture::new();
    std::fs::remove_file(f.proj(".mcp.json")).unwrap();
    let out = f.sh(&f.spec(
        "t 'create .mcp.json' sh -c 'echo planted > .mcp.json'\n\
         t 'create notes' sh -c 'echo fine > notes-new.txt'\n",
        vec![f.path("proj")],
    ));
    let r = results(&out);
    assert_eq!(r.len(), 2, "{out}");
    assert!(
        matches!(&r[0], (n, Err(e)) if n == "create .mcp.json" && e.contains("Read-only file system")),
        "{r:?}"
    );
    assert_eq!(r[1], ("create notes".into(), Ok(())));
    assert!(!f.proj(".mcp.json").exists(), "planted on the host");
    assert_eq!(f.read("notes-new.txt"), "fine\n");
    // Control: outside Warden the same command plants it.
    let st = std::process::Command::new("sh")
        .arg("-c")
        .arg("echo planted > .mcp.json")
        .current_dir(f.proj(""))
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(f.read(".mcp.json"), "planted\n");
}
