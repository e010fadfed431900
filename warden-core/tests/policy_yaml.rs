//! How the YAML of a policy reads: what it meant when serde_yaml (libyaml) decided
//! the values, it still means (each accepted case below read the same there), and
//! what YAML readers read differently is refused. The expected values were
//! checked against the serde_yaml-based parser this one replaced.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use warden_core::policy::{compile, CompileContext, CompiledPolicy, Overrides, PolicyInput};

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        for d in ["home", "proj", "bin"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        let server = root.join("bin/server");
        fs::write(&server, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&server, fs::Permissions::from_mode(0o755)).unwrap();
        Fixture { _dir: dir, root }
    }

    fn compile(&self, text: &str) -> Result<CompiledPolicy, String> {
        let path = self.root.join("proj/policy.yaml");
        let ctx = CompileContext {
            home: self.root.join("home"),
            cwd: self.root.join("proj"),
            path_env: Some(self.root.join("bin").into_os_string()),
            reserved: vec![],
        };
        let input = PolicyInput {
            path: Some(Path::new(&path)),
            text,
        };
        compile(&input, &Overrides::default(), &ctx)
            .map_err(|e| e.to_string().replace(&format!("{}:", path.display()), ""))
    }

    fn argv(&self, text: &str) -> Vec<String> {
        self.compile(text)
            .unwrap_or_else(|e| panic!("{text:?}: {e}"))
            .argv
    }
}

#[test]
fn strings_read_as_they_did() {
    let f = Fixture::new();
    for (text, want) in [
        (
            "command: [server, 'it''s', \"\\x41\\u00e9\\t\"]\n",
            vec!["server", "it's", "Aé\t"],
        ),
        (
            "command: [server, a\n  b, \"c\\\n  d\"]\n",
            vec!["server", "a b", "cd"],
        ),
        (
            "command: [server, 0123, 1.50, TRUE, \"null\", 0x1f]\n",
            vec!["server", "0123", "1.50", "TRUE", "null", "0x1f"],
        ),
        (
            "command:\n  - server\n  - |\n    one\n      two\n  - >-\n    folded\n    line\n",
            vec!["server", "one\n  two\n", "folded line"],
        ),
        // A block scalar the file ends in, without a final line break.
        (
            "command:\n  - server\n  - |\n    last",
            vec!["server", "last"],
        ),
        (
            "command:\n  - server\n  - >+\n    kept\n\n",
            vec!["server", "kept\n\n"],
        ),
        // Tabs where YAML 1.2 allows them: between values, inside block content.
        ("command:\t[server, \"a\tb\"]\n", vec!["server", "a\tb"]),
        ("command: &c [server, x]\nname: n\n", vec!["server", "x"]),
        ("? command\n: [server]\n", vec!["server"]),
        ("\"command\": [server]\n", vec!["server"]),
        (
            "command:\r\n  - server\r\n  - \"a\r\n    b\"\r\n",
            vec!["server", "a b"],
        ),
    ] {
        assert_eq!(f.argv(text), want, "{text:?}");
    }
}

#[test]
fn numbers_and_booleans_read_as_they_did() {
    let f = Fixture::new();
    let limits = |text: &str| {
        let p = f
            .compile(&format!("command: [server]\n{text}"))
            .unwrap_or_else(|e| panic!("{text:?}: {e}"));
        (p.limits.timeout_s, p.limits.cpu, p.limits.best_effort)
    };
    assert_eq!(limits("limits: {timeout_s: 0x1f}\n").0, Some(31));
    assert_eq!(limits("limits: {timeout_s: +0o17}\n").0, Some(15));
    assert_eq!(limits("limits: {timeout_s: 0b101}\n").0, Some(5));
    assert_eq!(limits("limits: {cpu: .5}\n").1, Some(0.5));
    assert_eq!(limits("limits: {cpu: 1e-1}\n").1, Some(0.1));
    // A number key reads leading zeros as decimal, as serde_yaml did.
    assert_eq!(limits("limits: {cpu: 0012}\n").1, Some(12.0));
    assert!(limits("limits: {best_effort: True}\n").2);
    assert!(!limits("limits: {best_effort: FALSE}\n").2);
}

/// Refused as before. The messages for `0123` and `1e400` are new: the old
/// structural pass took them for numbers and left the refusal to serde_yaml
/// (`invalid type: string "0123", expected i64`).
#[test]
fn numbers_that_do_not_fit_or_are_not_numbers() {
    let f = Fixture::new();
    for (text, want) in [
        ("limits: {timeout_s: 9223372036854775808}", "2:21: limits.timeout_s: invalid type: integer `9223372036854775808`, expected i64"),
        ("limits: {timeout_s: -9223372036854775809}", "2:21: limits.timeout_s: invalid type: integer `-9223372036854775809` as i128, expected i64"),
        ("limits: {cpu: 0x10}", "2:15: limits.cpu: invalid type: integer `16`, expected f64"),
        ("limits: {timeout_s: 0123}", "2:21: limits.timeout_s: expected an integer, found a string `0123`"),
        ("limits: {timeout_s: 1_000}", "2:21: limits.timeout_s: expected an integer, found a string `1_000`"),
        ("limits: {cpu: 1e400}", "2:15: limits.cpu: expected a number, found a string `1e400`"),
        ("limits: {best_effort: yes}", "2:23: limits.best_effort: expected `true` or `false`, found a string `yes`"),
    ] {
        assert_eq!(f.compile(&format!("command: [server]\n{text}\n")).unwrap_err(), want, "{text:?}");
    }
}

#[test]
fn what_yaml_readers_read_differently_is_refused() {
    let f = Fixture::new();
    for (text, want) in [
        ("command: [server]\nname: !!str x\n", "2:13: name: YAML tags are not supported: remove `!!str`"),
        ("command: !seq [server]\n", "1:15: command: YAML tags are not supported: remove `!seq`"),
        ("command: [server]\nlimits: {timeout_s: !!int \"5\"}\n", "2:27: limits.timeout_s: YAML tags are not supported: remove `!!int`"),
        ("!!map {command: [server]}\n", "1:8: YAML tags are not supported: remove `!!map`"),
        ("command: [server, ?a]\n", "1:19: command[1]: `?a` in brackets reads differently to different YAML readers; quote it"),
        ("command: [server, :a]\n", "1:19: command[1]: `:a` in brackets reads differently to different YAML readers; quote it"),
        ("command:\n  - server\n  - |\n", "3:5: command[1]: a block scalar (`|`, `>`) with no content is not supported; write \"\" for an empty string"),
        ("command: [server, \"a\u{2028}b\"]\n", "1:21: invalid YAML: the character U+2028 is not supported: YAML readers disagree on whether it breaks a line"),
        ("command: [server, \"a\u{85}b\"]\n", "1:21: invalid YAML: the character U+0085 is not supported: YAML readers disagree on whether it breaks a line"),
        ("command: [server]\n# \u{7f}\n", "2:3: invalid YAML: the character U+007F is not allowed"),
        ("command: [server]\nname: \"\u{1b}[31m\"\n", "2:8: invalid YAML: the character U+001B is not allowed"),
    ] {
        assert_eq!(f.compile(text).unwrap_err(), want, "{text:?}");
    }
}

#[test]
fn merge_keys_non_string_keys_and_documents_stay_refused() {
    let f = Fixture::new();
    let expected = "expected one of `version`, `name`, `command`, `cwd`, `filesystem`, `network`, `env`, `limits`, `sandbox`, `audit`, `approve`, `backend`, `docker`, `mcp`";
    for (text, want) in [
        (
            "base: &b {name: x}\ncommand: [server]\n<<: *b\n",
            format!(
                "1:1: base: unknown key `base`; {expected}\n3:1: <<: unknown key `<<`; {expected}"
            ),
        ),
        (
            "command: [server]\n[a]: b\n",
            "2:1: expected a key name, found a list".into(),
        ),
        (
            "command: [server]\n{a: b}: c\n",
            "2:2: expected a key name, found a mapping".into(),
        ),
        (
            "command: [server]\n~: x\n",
            "2:1: expected a key name, found nothing (null)".into(),
        ),
        (
            "command: [server]\n1: x\n",
            format!("2:1: 1: unknown key `1`; {expected}"),
        ),
        (
            "command: [server]\nname: a\n\"name\": b\n",
            "3:1: name: duplicate key `name`".into(),
        ),
        (
            "command: [server]\n---\nname: b\n",
            "3:1: a policy file holds one YAML document; remove the extra `---` document".into(),
        ),
        (
            "command: [server]\n...\nname: b\n",
            "3:1: a policy file holds one YAML document; remove the extra `---` document".into(),
        ),
    ] {
        assert_eq!(f.compile(text).unwrap_err(), want, "{text:?}");
    }
}
