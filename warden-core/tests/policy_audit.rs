//! `audit:` in the policy (`audit.files: denied | all | off`): compiled
//! values and every error with its position, like the other keys.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::ffi::OsString;
use std::fs;
use std::path::PathBuf;

use warden_core::policy::{
    compile, load_file, CompileContext, CompiledPolicy, FileAudit, Overrides, PolicyError,
    PolicyInput,
};

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(root.join("home")).unwrap();
        Fixture { _dir: dir, root }
    }

    fn compile(&self, text: &str) -> Result<CompiledPolicy, PolicyError> {
        let path = self.root.join("policy.yaml");
        fs::write(&path, format!("command: [/bin/sh]\n{text}")).unwrap();
        let text = load_file(&path).unwrap();
        let input = PolicyInput {
            path: Some(&path),
            text: &text,
        };
        let ctx = CompileContext {
            home: self.root.join("home"),
            cwd: self.root.clone(),
            path_env: Some(OsString::from("/usr/bin:/bin")),
            reserved: vec![],
        };
        compile(&input, &Overrides::default(), &ctx)
    }

    fn files(&self, text: &str) -> FileAudit {
        self.compile(text)
            .unwrap_or_else(|e| panic!("{e}"))
            .audit
            .files
    }

    /// The error's lines, the policy file written as `P`.
    fn err(&self, text: &str) -> Vec<String> {
        let e = self.compile(text).expect_err("policy should be refused");
        let path = self.root.join("policy.yaml").display().to_string();
        e.to_string()
            .lines()
            .map(|l| l.replace(&path, "P"))
            .collect()
    }
}

#[test]
fn denied_is_the_default() {
    let f = Fixture::new();
    assert_eq!(f.files(""), FileAudit::Denied);
    assert_eq!(f.files("audit: {}\n"), FileAudit::Denied);
    assert_eq!(f.files("audit:\n  files:\n"), FileAudit::Denied);
    assert_eq!(FileAudit::default(), FileAudit::Denied);
}

#[test]
fn each_level_compiles() {
    let f = Fixture::new();
    assert_eq!(f.files("audit:\n  files: denied\n"), FileAudit::Denied);
    assert_eq!(f.files("audit:\n  files: all\n"), FileAudit::All);
    assert_eq!(f.files("audit:\n  files: off\n"), FileAudit::Off);
    assert_eq!(f.files("audit: {files: 'all'}\n"), FileAudit::All);
    for l in [FileAudit::Denied, FileAudit::All, FileAudit::Off] {
        let json = serde_json::to_value(l).unwrap();
        assert_eq!(json, l.as_str());
    }
}

#[test]
fn errors_name_the_line_column_and_key() {
    let f = Fixture::new();
    assert_eq!(
        f.err("audit:\n  files: everything\n"),
        ["P:3:10: audit.files: unknown level `everything`: use `denied` (record the accesses the sandbox denies), `all` (every access) or `off`"]
    );
    // YAML 1.1's `off` is a string here; a real boolean is not a level.
    assert_eq!(
        f.err("audit:\n  files: false\n"),
        ["P:3:10: audit.files: unknown level `false`: use `denied` (record the accesses the sandbox denies), `all` (every access) or `off`"]
    );
    assert_eq!(
        f.err("audit:\n  file: all\n"),
        ["P:3:3: audit.file: unknown key `file`, did you mean `files`?"]
    );
    assert_eq!(
        f.err("audit:\n  files: [all]\n"),
        ["P:3:10: audit.files: expected a string, found a list"]
    );
    assert_eq!(
        f.err("audit: all\n"),
        ["P:2:8: audit: expected a mapping, found a string `all`"]
    );
    assert_eq!(
        f.err("audti:\n  files: all\n"),
        ["P:2:1: audti: unknown key `audti`, did you mean `audit`?"]
    );
}

#[test]
fn an_explicit_level_is_marked_as_such() {
    let f = Fixture::new();
    let explicit = |text: &str| f.compile(text).unwrap().audit.files_explicit;
    assert!(!explicit(""));
    assert!(!explicit("audit: {}\n"));
    assert!(explicit("audit:\n  files: denied\n"));
    assert!(explicit("audit:\n  files: all\n"));
    assert!(explicit("audit:\n  files: off\n"));
}
