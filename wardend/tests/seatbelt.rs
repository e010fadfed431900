//! The macOS Seatbelt profile generator, on any platform: goldens for the
//! example policies and synthetic ones, an injection test, and a seeded
//! property test that every file allow is for a path the session may touch.

// The helpers below are test code too: a failed set-up is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use warden_core::policy::{self, CompileContext, CompiledPolicy, Overrides, PolicyInput};
use wardend::backend::seatbelt::{
    profile, quote, SeatbeltContext, SeatbeltError, SYSTEM_LITERALS, SYSTEM_READ,
};

/// A token of SBPL: parentheses, string literals (unescaped), atoms.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Open,
    Close,
    Str(String),
    Atom(String),
}

fn tokenize(s: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '(' => out.push(Tok::Open),
            ')' => out.push(Tok::Close),
            ';' => {
                for c in it.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '"' => {
                let mut v = String::new();
                loop {
                    match it.next().expect("unterminated string") {
                        '\\' => v.push(it.next().expect("dangling escape")),
                        '"' => break,
                        c => v.push(c),
                    }
                }
                out.push(Tok::Str(v));
            }
            c if c.is_whitespace() => {}
            c => {
                let mut v = c.to_string();
                while let Some(&n) = it.peek() {
                    if n == '(' || n == ')' || n == '"' || n == ';' || n.is_whitespace() {
                        break;
                    }
                    v.push(n);
                    it.next();
                }
                out.push(Tok::Atom(v));
            }
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Sx {
    List(Vec<Sx>),
    Str(String),
    Atom(String),
}

fn parse(s: &str) -> Vec<Sx> {
    fn one(t: &[Tok], i: &mut usize) -> Sx {
        let tok = t[*i].clone();
        *i += 1;
        match tok {
            Tok::Open => {
                let mut v = Vec::new();
                while t[*i] != Tok::Close {
                    v.push(one(t, i));
                }
                *i += 1;
                Sx::List(v)
            }
            Tok::Close => panic!("unbalanced )"),
            Tok::Str(s) => Sx::Str(s),
            Tok::Atom(a) => Sx::Atom(a),
        }
    }
    let t = tokenize(s);
    let mut i = 0;
    let mut out = Vec::new();
    while i < t.len() {
        out.push(one(&t, &mut i));
    }
    out
}

fn head(sx: &Sx) -> Option<&str> {
    match sx {
        Sx::List(v) => match v.first() {
            Some(Sx::Atom(a)) => Some(a),
            _ => None,
        },
        _ => None,
    }
}

/// The `(allow file-… (subpath|literal "P"))` forms: (operations, filter, P).
fn file_allows(forms: &[Sx]) -> Vec<(Vec<String>, String, String)> {
    let mut out = Vec::new();
    for f in forms {
        let Sx::List(v) = f else { continue };
        if head(f) != Some("allow") {
            continue;
        }
        let ops: Vec<String> = v[1..]
            .iter()
            .filter_map(|x| match x {
                Sx::Atom(a) => Some(a.clone()),
                _ => None,
            })
            .collect();
        if !ops.iter().any(|o| o.starts_with("file-")) {
            continue;
        }
        for x in &v[1..] {
            if let Sx::List(filter) = x {
                let (Some(Sx::Atom(kind)), Some(Sx::Str(p))) = (filter.first(), filter.get(1))
                else {
                    panic!("unexpected filter {filter:?}");
                };
                assert_eq!(filter.len(), 2, "{filter:?}");
                out.push((ops.clone(), kind.clone(), p.clone()));
            }
        }
    }
    out
}

fn ctx(root: &Path) -> SeatbeltContext {
    SeatbeltContext {
        proxy_port: 41000,
        scratch: root.join("scratch"),
        runtime_dirs: vec![root.join("runtime")],
        runtime_exec: vec![],
        protect: vec![],
    }
}

fn fake_bin(dir: &Path, name: &str) {
    fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    fs::write(&p, "#!/bin/sh\n").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Compiles `text` as the file `<root>/examples/<name>.yaml`, with `bin/`
/// on PATH and a fake home, the way the shim does.
fn compile(root: &Path, name: &str, text: &str) -> CompiledPolicy {
    let ex = root.join("examples");
    for d in ["sandbox-data", ".deps", "data", "out", "out/.git"] {
        fs::create_dir_all(ex.join(d)).unwrap();
    }
    fake_bin(&root.join("bin"), "node");
    fake_bin(&root.join("bin"), "warden-fixture-mcp");
    fake_bin(&root.join("bin"), "server");
    let path = ex.join(format!("{name}.yaml"));
    fs::write(&path, text).unwrap();
    let home = root.join("home");
    fs::create_dir_all(&home).unwrap();
    let cc = CompileContext {
        home,
        cwd: ex.clone(),
        path_env: Some(root.join("bin").into_os_string()),
        reserved: vec![],
    };
    let input = PolicyInput {
        path: Some(&path),
        text,
    };
    policy::compile(&input, &Overrides::default(), &cc).unwrap_or_else(|e| panic!("{name}: {e}"))
}

const SYNTHETIC: &[(&str, &str)] = &[
    (
        "synthetic-read-only",
        "version: 1\ncommand: [server]\nfilesystem:\n  read: [./data]\n",
    ),
    (
        "synthetic-write-protected",
        "version: 1\ncommand: [server]\ncwd: ./out\nfilesystem:\n  read: [./data]\n  write: [./out]\n",
    ),
    (
        "synthetic-network",
        "version: 1\ncommand: [server]\nfilesystem:\n  read: [./data]\nnetwork:\n  allow: [api.example.com, \"*.example.org:443\"]\n",
    ),
    (
        "synthetic-no-network",
        "version: 1\ncommand: [server]\nnetwork:\n  allow: []\n",
    ),
];

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/seatbelt")
}

#[test]
fn goldens() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut cases: Vec<(String, String)> = Vec::new();
    let mut names: Vec<_> = fs::read_dir(&examples)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for p in names {
        let name = p.file_stem().unwrap().to_str().unwrap().to_owned();
        cases.push((name, fs::read_to_string(&p).unwrap()));
    }
    for (n, t) in SYNTHETIC {
        cases.push(((*n).to_owned(), (*t).to_owned()));
    }
    let bless = std::env::var_os("WARDEN_BLESS").is_some_and(|v| v == "1");
    let mut failures = Vec::new();
    for (name, text) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let p = compile(&root, &name, &text);
        let out = profile(&p, &ctx(&root)).unwrap();
        let root_s = root.to_str().unwrap();
        let stable = out.replace(root_s, "@ROOT@");
        assert!(!stable.contains(root_s));
        let file = golden_dir().join(format!("{name}.sb"));
        if bless {
            fs::create_dir_all(golden_dir()).unwrap();
            fs::write(&file, &stable).unwrap();
        } else {
            match fs::read_to_string(&file) {
                Ok(want) if want == stable => {}
                _ => failures.push(name),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "seatbelt goldens differ (rerun with WARDEN_BLESS=1 and review the diff): {failures:?}"
    );
}

#[test]
fn deny_default_first_and_no_allow_default() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    for (name, text) in SYNTHETIC {
        let out = profile(&compile(&root, name, text), &ctx(&root)).unwrap();
        let forms = parse(&out);
        assert_eq!(forms[0], parse("(version 1)")[0]);
        assert_eq!(forms[1], parse("(deny default)")[0]);
        for f in &forms {
            assert_ne!(*f, parse("(allow default)")[0]);
        }
    }
}

#[test]
fn hostile_grant_path_stays_one_literal() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let evil = "a\"b\\c (d) e\") (allow default) ; (allow default)";
    let dir = root.join("examples").join(evil);
    fs::create_dir_all(&dir).unwrap();
    let text = "version: 1\ncommand: [server]\nfilesystem:\n  write: ['./a\"b\\c (d) e\") (allow default) ; (allow default)']\n";
    let p = compile(&root, "evil", text);
    assert_eq!(p.write, vec![dir.clone()]);
    let out = profile(&p, &ctx(&root)).unwrap();
    let forms = parse(&out);
    let allows: Vec<&Sx> = forms.iter().filter(|f| head(f) == Some("allow")).collect();
    // Only the generator's own forms: none is `(allow default)`, and the
    // hostile path appears only as the string of the write grant.
    for a in &allows {
        assert_ne!(**a, parse("(allow default)")[0]);
    }
    let evil_s = dir.to_str().unwrap().to_owned();
    let grant_allows: Vec<_> = file_allows(&forms)
        .into_iter()
        .filter(|(_, _, p)| *p == evil_s)
        .collect();
    assert_eq!(
        grant_allows,
        vec![(
            vec!["file-read*".to_owned(), "file-write*".to_owned()],
            "subpath".to_owned(),
            evil_s
        )]
    );
    let n_expected = parse(
        &profile(
            &compile(
                &root,
                "plain",
                "version: 1\ncommand: [server]\nfilesystem:\n  write: [./out]\n",
            ),
            &ctx(&root),
        )
        .unwrap(),
    )
    .iter()
    .filter(|f| head(f) == Some("allow"))
    .count();
    assert_eq!(allows.len(), n_expected);
}

#[test]
fn quote_refuses_control_characters_and_escapes() {
    assert_eq!(quote(Path::new("/a\"b\\c")).unwrap(), r#""/a\"b\\c""#);
    let bad = Path::new("/a\nb");
    assert_eq!(
        quote(bad),
        Err(SeatbeltError::ControlChar(bad.to_path_buf()))
    );
    assert!(quote(bad).unwrap_err().to_string().contains("/a\\nb"));
    use std::os::unix::ffi::OsStrExt;
    let nu = Path::new(std::ffi::OsStr::from_bytes(b"/a\xffb"));
    assert_eq!(quote(nu), Err(SeatbeltError::NotUtf8(nu.to_path_buf())));
}

/// A small xorshift: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[(self.next() % v.len() as u64) as usize]
    }
}

#[test]
fn file_allows_stay_inside_what_is_granted() {
    let parts = [
        "a", "b", "src", ".git", "hooks", "x y", "q\"t", "(p)", ".bashrc", "n",
    ];
    let mut rng = Rng(0x5eed_5eed_1234_5678);
    for _ in 0..64 {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let mut read = Vec::new();
        let mut write = Vec::new();
        for i in 0..(1 + rng.next() % 4) {
            let depth = 1 + rng.next() % 3;
            let rel: Vec<&str> = (0..depth).map(|_| rng.pick(&parts)).collect();
            let rel = format!("g{i}/{}", rel.join("/"));
            fs::create_dir_all(root.join("examples").join(&rel)).unwrap();
            let q = format!("'./{}'", rel.replace('\'', "''"));
            if rng.next().is_multiple_of(2) {
                read.push(q)
            } else {
                write.push(q)
            }
        }
        let text = format!(
            "version: 1\ncommand: [server]\nfilesystem:\n  read: [{}]\n  write: [{}]\n",
            read.join(", "),
            write.join(", ")
        );
        let p = compile(&root, "prop", &text);
        let c = ctx(&root);
        let out = profile(&p, &c).unwrap();
        let mut allowed: Vec<PathBuf> = p.read.iter().chain(&p.write).cloned().collect();
        allowed.push(c.scratch.clone());
        allowed.extend(c.runtime_dirs.iter().cloned());
        allowed.extend(SYSTEM_READ.iter().map(|(s, _)| PathBuf::from(s)));
        let literals: Vec<PathBuf> = SYSTEM_LITERALS
            .iter()
            .map(|(s, _)| PathBuf::from(s))
            .chain([p.program.clone(), PathBuf::from("/")])
            .collect();
        for (ops, kind, path) in file_allows(&parse(&out)) {
            let path = PathBuf::from(&path);
            let ok = allowed.iter().any(|a| path.starts_with(a))
                || (kind == "literal" && literals.contains(&path));
            assert!(ok, "{ops:?} {kind} {path:?} outside the grants in\n{out}");
            if ops.iter().any(|o| o.starts_with("file-write")) && path != Path::new("/dev/null") {
                let w: Vec<&PathBuf> = p.write.iter().chain([&c.scratch]).collect();
                assert!(w.iter().any(|a| path.starts_with(a)), "write to {path:?}");
            }
        }
    }
}

#[test]
fn wardens_own_files_inside_a_write_grant_are_denied_for_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let p = compile(
        &root,
        "own",
        "version: 1\ncommand: [server]\nfilesystem:\n  write: [./out]\n",
    );
    let state = root.join("examples/out/state");
    let outside = root.join("elsewhere/state");
    let mut c = ctx(&root);
    c.protect = vec![outside.clone(), state.clone()];
    let out = profile(&p, &c).unwrap();
    let forms = parse(&out);
    let deny = parse(&format!(
        "(deny file-write* (subpath {}))",
        quote(&state).unwrap()
    ))[0]
        .clone();
    // After every allow: the last matching rule wins.
    let at = forms
        .iter()
        .position(|f| *f == deny)
        .expect("a deny for the state dir");
    let last_allow = forms
        .iter()
        .rposition(|f| head(f) == Some("allow"))
        .unwrap();
    assert!(at > last_allow, "{out}");
    // A path no write grant holds needs no deny (nothing allows it).
    assert!(!out.contains(outside.to_str().unwrap()), "{out}");
}
