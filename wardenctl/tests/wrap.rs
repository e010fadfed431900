//! `wardenctl wrap` / `unwrap` through the real binary, with HOME and the
//! XDG directories in a tempdir: golden wrapped output for a fixture of each
//! client (comments, unknown keys, a remote server, an entry already
//! wrapped, names with shell metacharacters), wrap→unwrap byte-identical,
//! wrap twice = once, unwrap keeps the user's other edits, drift re-wrapped,
//! --dry-run and bad input touch nothing.
//!
//! Regenerate the goldens with `WARDEN_BLESS=1 cargo test -p wardenctl --test wrap`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FIXTURES: &[(&str, &str, &str)] = &[
    (
        "claude-desktop",
        include_str!("fixtures/wrap/claude-desktop.json"),
        include_str!("fixtures/wrap/claude-desktop.wrapped.json"),
    ),
    (
        "claude-code",
        include_str!("fixtures/wrap/claude-code.json"),
        include_str!("fixtures/wrap/claude-code.wrapped.json"),
    ),
    (
        "cursor",
        include_str!("fixtures/wrap/cursor.json"),
        include_str!("fixtures/wrap/cursor.wrapped.json"),
    ),
    (
        "vscode",
        include_str!("fixtures/wrap/vscode.json"),
        include_str!("fixtures/wrap/vscode.wrapped.json"),
    ),
    (
        "windsurf",
        include_str!("fixtures/wrap/windsurf.json"),
        include_str!("fixtures/wrap/windsurf.wrapped.json"),
    ),
    (
        "codex",
        include_str!("fixtures/wrap/codex.toml"),
        include_str!("fixtures/wrap/codex.wrapped.toml"),
    ),
];

/// An edit of the user's elsewhere in the file.
fn user_edit(client: &str, text: &str) -> String {
    if client == "codex" {
        format!("# user edit\n{text}")
    } else {
        text.replacen('{', "{\n  \"userEdit\": true,", 1)
    }
}

struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["home", "config", "state", "work"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        World { _dir: dir, root }
    }

    fn ctl(&self, args: &[&str]) -> Output {
        // No daemon here: the deny-everything policies, not a trace
        // (e2e/tests/wrap.rs traces one).
        let no_trace: &[&str] = if args.first() == Some(&"wrap") {
            &["--no-trace"]
        } else {
            &[]
        };
        Command::new(wardenctl())
            .args(args)
            .args(no_trace)
            .env("HOME", self.root.join("home"))
            .env("XDG_CONFIG_HOME", self.root.join("config"))
            .env("XDG_STATE_HOME", self.root.join("state"))
            .env("PATH", "/usr/bin:/bin")
            .current_dir(self.root.join("work"))
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.ctl(args);
        assert!(
            o.status.success(),
            "wardenctl {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }
}

/// `$WARDEN_BIN_DIR/wardenctl` (scripts/test's unprivileged copy), else cargo's.
fn wardenctl() -> PathBuf {
    match std::env::var_os("WARDEN_BIN_DIR").filter(|d| !d.is_empty()) {
        Some(d) => Path::new(&d).join("wardenctl"),
        None => PathBuf::from(env!("CARGO_BIN_EXE_wardenctl")),
    }
}

fn shim() -> String {
    wardenctl()
        .with_file_name("warden-shim")
        .display()
        .to_string()
}

fn placeholders(text: &str) -> String {
    text.replace(&serde_json::to_string(&shim()).unwrap(), "\"<SHIM>\"")
}

#[test]
fn golden_round_trip_idempotent_for_every_client() {
    let bless = std::env::var_os("WARDEN_BLESS").is_some_and(|v| v == "1");
    for (client, input, golden) in FIXTURES {
        let w = World::new();
        let cfg = w.root.join("work/config.json");
        std::fs::write(&cfg, input).unwrap();
        let c = cfg.to_str().unwrap();
        let out = w.ok(&["wrap", client, "--config", c]);
        let wrapped = std::fs::read_to_string(&cfg).unwrap();
        if bless {
            let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
                "tests/fixtures/wrap/{client}.wrapped.{}",
                if *client == "codex" { "toml" } else { "json" }
            ));
            std::fs::write(p, placeholders(&wrapped)).unwrap();
        } else {
            assert_eq!(placeholders(&wrapped), *golden, "{client}: golden\n{out}");
        }
        assert!(out.contains("backup of the previous file"), "{out}");
        assert!(out.contains("already wrapped (by hand)"), "{out}");
        assert!(out.contains("left alone: remote"), "{out}");
        // Each policy written compiles and carries the command and env names.
        let policies = w.root.join("config/warden/policies");
        for e in std::fs::read_dir(&policies).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            assert!(
                !name.starts_with('.') && !name.contains(['$', ';', '`', ' ']),
                "{name}"
            );
            let p = policies.join(&name);
            let o = w.ctl(&["policy", "check", p.to_str().unwrap()]);
            assert!(
                o.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        // Twice is once.
        let again = w.ok(&["wrap", client, "--config", c]);
        assert_eq!(std::fs::read_to_string(&cfg).unwrap(), wrapped, "{client}");
        assert!(again.contains("unchanged"), "{again}");
        // Unwrap after an edit elsewhere in the file keeps the edit.
        let edited = user_edit(client, &wrapped);
        std::fs::write(&cfg, &edited).unwrap();
        let out = w.ok(&["unwrap", client, "--config", c]);
        assert!(out.contains("restored; its policy"), "{out}");
        assert_eq!(
            std::fs::read_to_string(&cfg).unwrap(),
            user_edit(client, input),
            "{client}: unwrap"
        );
        // Plain round trip, then drift: the client puts the entries back as
        // they were; wrap re-applies.
        std::fs::write(&cfg, input).unwrap();
        w.ok(&["wrap", client, "--config", c]);
        w.ok(&["unwrap", client, "--config", c]);
        assert_eq!(
            std::fs::read_to_string(&cfg).unwrap(),
            *input,
            "{client}: round trip"
        );
        w.ok(&["wrap", client, "--config", c]);
        std::fs::write(&cfg, input).unwrap();
        let out = w.ok(&["wrap", client, "--config", c]);
        assert!(out.contains("drift re-wrapped"), "{out}");
        assert!(out.contains("existing policy"), "{out}");
        assert_eq!(
            std::fs::read_to_string(&cfg).unwrap(),
            wrapped,
            "{client}: drift"
        );
    }
}

#[test]
fn dry_run_and_bad_input_touch_nothing() {
    let w = World::new();
    let cfg = w.root.join("work/config.json");
    let (_, input, _) = FIXTURES[0];
    std::fs::write(&cfg, input).unwrap();
    let c = cfg.to_str().unwrap();
    let out = w.ok(&["wrap", "claude-desktop", "--dry-run", "--config", c]);
    assert!(out.contains("would wrap") && out.contains("+++"), "{out}");
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), input);
    assert!(!w.root.join("config/warden/policies").exists());

    std::fs::write(
        &cfg,
        "{\n  \"mcpServers\": {\n    \"a\": {\"command\": }\n  }\n}\n",
    )
    .unwrap();
    let o = w.ctl(&["wrap", "claude-desktop", "--config", c]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{c}:3:")), "{err}");

    std::fs::write(&cfg, "{\"mcpServers\": [1]}").unwrap();
    let err = String::from_utf8(w.ctl(&["wrap", "cursor", "--config", c]).stderr).unwrap();
    assert!(
        err.contains("`mcpServers` is an array, not an object"),
        "{err}"
    );

    let err = String::from_utf8(w.ctl(&["wrap", "emacs", "--config", c]).stderr).unwrap();
    assert!(
        err.contains("known clients: claude-desktop, claude-code"),
        "{err}"
    );

    std::fs::write(&cfg, input).unwrap();
    let err = String::from_utf8(
        w.ctl(&["wrap", "claude-desktop", "--server", "nope", "--config", c])
            .stderr,
    )
    .unwrap();
    assert!(
        err.contains("no server `nope`") && err.contains("filesystem"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), input);

    // --server limits, and a pre-existing policy is kept; --json is typed.
    std::fs::create_dir_all(w.root.join("config/warden/policies")).unwrap();
    let mine = "version: 1\ncommand: [\"sh\"]\n";
    std::fs::write(
        w.root
            .join("config/warden/policies/claude-desktop-filesystem.yaml"),
        mine,
    )
    .unwrap();
    let out = w.ok(&[
        "--json",
        "wrap",
        "claude-desktop",
        "--server",
        "filesystem",
        "--config",
        c,
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let servers = v["configs"][0]["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 1, "{v}");
    assert_eq!(servers[0]["action"], "wrapped");
    assert_eq!(servers[0]["profile"], "claude-desktop-filesystem");
    assert_eq!(
        std::fs::read_to_string(
            w.root
                .join("config/warden/policies/claude-desktop-filesystem.yaml")
        )
        .unwrap(),
        mine
    );
}

#[test]
fn writes_through_a_symlink_and_keeps_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    let real = w.root.join("work/real.json");
    let (_, input, _) = FIXTURES[2];
    std::fs::write(&real, input).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = w.root.join("work/link.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    w.ok(&["wrap", "cursor", "--config", link.to_str().unwrap()]);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_ne!(std::fs::read_to_string(&real).unwrap(), input);
    assert_eq!(
        std::fs::metadata(&real).unwrap().permissions().mode() & 0o777,
        0o640
    );
}
