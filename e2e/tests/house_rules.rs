//! The house rules of `docs/dev.md` that no lint checks, held against the source
//! tree and `cargo metadata`:
//!
//! - `unsafe` only in the crates named on `docs/dev.md`'s marked line (at most
//!   two, each a workspace member): no other member allows `unsafe_code` (its
//!   `Cargo.toml` lint table, or an `allow`/`warn`/`expect(unsafe_code)` in its
//!   sources), and no `.rs` file outside those crates holds an `unsafe` token
//!   (block, fn, impl, trait, extern block). The token scan is proc-macro2's
//!   lexer, so comments, doc comments and string literals of every kind are not
//!   read as code; its own tests below show what it finds and what it skips.
//! - `warden-core` depends, directly or through any crate, on none of `tokio`,
//!   `tonic` and `nix` (the dependency graph of `cargo metadata`).
//! - `docs/architecture.md`'s crate table lists exactly the workspace members,
//!   each with the internal dependencies `cargo metadata` reports.
//! - `warden_core::runtime`'s tables (what `wardenctl init` leaves out) are
//!   the sandbox's own (`warden-sandbox/src/rootfs/mod.rs`), entry for entry.
//!
//! These tests read the source tree at run time, the one exception to the rule
//! that tests do not (`docs/dev.md`): they check the tree itself. Phase 2 of
//! `scripts/test` runs a copy of this executable as another user, without the
//! tree and without cargo; there (`WARDEN_UNPRIVILEGED_RUN`) they say so and
//! skip. Phase 1 (`cargo test`) runs them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use serde_json::Value;

/// The crates `tokio`, `tonic` and `nix` must stay out of (docs/architecture.md).
const CORE: &str = "warden-core";
const NOT_IN_CORE: [&str; 3] = ["tokio", "tonic", "nix"];
/// How docs/dev.md's line naming the crates that may hold `unsafe` starts.
const UNSAFE_LINE: &str = "Crates that may hold `unsafe`";
/// At most this many crates may hold `unsafe` (issue 10).
const MAX_UNSAFE_CRATES: usize = 2;

// ---------------------------------------------------------------------------
// The scanner

/// What one source file holds that the rules care about.
#[derive(Debug, Default, PartialEq, Eq)]
struct Scan {
    /// Lines of `unsafe` tokens.
    unsafe_lines: Vec<usize>,
    /// Lines of `allow(unsafe_code)`, `warn(unsafe_code)`, `expect(unsafe_code)`.
    allow_lines: Vec<usize>,
}

/// Lexes `source` as Rust tokens (comments, doc comments and literals are not
/// identifiers) and finds the `unsafe` keywords and the lint levels that would
/// let them in.
fn scan(source: &str) -> Result<Scan, String> {
    // A `#!` line that is not an inner attribute (a script's shebang) is no token.
    let source = match source.strip_prefix("#!") {
        Some(rest) if !rest.trim_start().starts_with('[') => {
            rest.split_once('\n').map_or("", |(_, body)| body)
        }
        _ => source,
    };
    let tokens = TokenStream::from_str(source).map_err(|e| e.to_string())?;
    let mut found = Scan::default();
    walk(tokens, &mut found);
    Ok(found)
}

fn walk(tokens: TokenStream, found: &mut Scan) {
    let mut prev_level: Option<usize> = None;
    for tree in tokens {
        let level = prev_level.take();
        match tree {
            TokenTree::Ident(ident) => {
                let name = ident.to_string();
                let line = ident.span().start().line;
                if name == "unsafe" {
                    found.unsafe_lines.push(line);
                }
                if matches!(name.as_str(), "allow" | "warn" | "expect") {
                    prev_level = Some(line);
                }
            }
            TokenTree::Group(group) => {
                if let (Some(line), Delimiter::Parenthesis) = (level, group.delimiter()) {
                    let names_lint = group
                        .stream()
                        .into_iter()
                        .any(|t| matches!(&t, TokenTree::Ident(i) if i == "unsafe_code"));
                    if names_lint {
                        found.allow_lines.push(line);
                    }
                }
                walk(group.stream(), found);
            }
            TokenTree::Punct(_) | TokenTree::Literal(_) => {}
        }
    }
}

#[test]
fn the_scanner_finds_unsafe_code() {
    let unsafe_lines = |s: &str| scan(s).unwrap().unsafe_lines;
    assert_eq!(unsafe_lines("fn f() {\n    unsafe { g() }\n}\n"), [2]);
    assert_eq!(unsafe_lines("unsafe fn f() {}"), [1]);
    assert_eq!(unsafe_lines("unsafe impl Send for X {}"), [1]);
    assert_eq!(unsafe_lines("unsafe trait T {}"), [1]);
    assert_eq!(unsafe_lines("unsafe extern \"C\" { fn g(); }"), [1]);
    assert_eq!(unsafe_lines("#[unsafe(no_mangle)]\nfn f() {}"), [1]);
    assert_eq!(
        unsafe_lines("macro_rules! m { () => { unsafe { g() } } }"),
        [1],
        "inside a macro's body too"
    );
    assert_eq!(
        unsafe_lines("fn f<'a>(x: &'a u8) -> char { let c = '\\''; unsafe { h(x) }; c }"),
        [1],
        "lifetimes and char literals do not hide what follows"
    );
    assert_eq!(
        unsafe_lines("let s = r#\"a \" quote\"#; unsafe { g(s) }"),
        [1],
        "a raw string ends where it ends"
    );
    assert_eq!(
        unsafe_lines("/* a /* nested */ comment */ unsafe { g() }"),
        [1],
        "a nested block comment ends where it ends"
    );
    let allow_lines = |s: &str| scan(s).unwrap().allow_lines;
    assert_eq!(allow_lines("#![allow(unsafe_code)]"), [1]);
    assert_eq!(
        allow_lines("#[allow(dead_code, unsafe_code)]\nfn f() {}"),
        [1]
    );
    assert_eq!(allow_lines("#![cfg_attr(test, warn(unsafe_code))]"), [1]);
    assert_eq!(allow_lines("mod m {\n  #![expect(unsafe_code)]\n}"), [2]);
}

#[test]
fn the_scanner_skips_comments_and_literals() {
    let nothing = Scan::default();
    for source in [
        "// unsafe { g() }",
        "/* unsafe { g() } */",
        "/* outer /* unsafe */ still a comment: unsafe */",
        "/// unsafe fn f() {}\nfn f() {}",
        "//! the crate has no unsafe block\n",
        "/** unsafe */ fn f() {}",
        "let s = \"unsafe { g() }\";",
        "let s = \"a \\\" unsafe { g() }\";",
        "let s = r#\"unsafe \" { g() }\"#;",
        "let s = b\"unsafe\"; let c = c\"unsafe\"; let r = br\"unsafe\";",
        "let r#unsafe = 1;",
        "#![forbid(unsafe_code)]",
        "#![deny(unsafe_code)]",
        "#![allow(clippy::undocumented_unsafe_blocks)]",
        "fn unsafe_is_root() -> bool { true }",
        "#!/usr/bin/env run-cargo-script\nfn main() {}",
    ] {
        assert_eq!(scan(source).unwrap(), nothing, "{source}");
    }
    assert!(scan("fn f() { \"unterminated }").is_err());
}

// ---------------------------------------------------------------------------
// The tree and its metadata

/// The repository root, or None when this runs from phase 2's copy.
fn repo() -> Option<PathBuf> {
    if std::env::var_os("WARDEN_UNPRIVILEGED_RUN").is_some() {
        println!(
            "skipping: the house rules read the source tree and run cargo, which the \
             unprivileged copy of scripts/test's phase 2 has neither of; phase 1 checks them"
        );
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf();
    assert!(
        root.join("Cargo.toml").is_file() && root.join("docs/dev.md").is_file(),
        "the source tree is not at {}",
        root.display()
    );
    Some(root)
}

/// `cargo metadata --format-version 1` of the workspace (with the resolved graph).
fn metadata(root: &Path) -> Value {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--manifest-path",
        ])
        .arg(root.join("Cargo.toml"))
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON")
}

/// The source tree and what `cargo metadata` says of it.
struct Tree {
    root: PathBuf,
    meta: Value,
    members: Vec<Member>,
}

/// The tree, or None when this runs from phase 2's copy (see [`repo`]).
fn tree() -> Option<Tree> {
    let root = repo()?;
    let meta = metadata(&root);
    let members = members(&root, &meta);
    Some(Tree {
        root,
        meta,
        members,
    })
}

/// A workspace member as `cargo metadata` describes it.
#[derive(Debug)]
struct Member {
    name: String,
    /// Its directory, relative to the workspace root (`warden-core`, `proto`).
    dir: String,
    /// The members it depends on, with the kind: `normal`, `dev`, `build`.
    internal: BTreeSet<(String, String)>,
}

fn members(root: &Path, meta: &Value) -> Vec<Member> {
    let ids: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let packages: Vec<&Value> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| ids.contains(p["id"].as_str().unwrap()))
        .collect();
    let names: BTreeSet<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let members: Vec<Member> = packages
        .iter()
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().unwrap());
            let dir = manifest
                .parent()
                .unwrap()
                .strip_prefix(root)
                .unwrap_or_else(|_| panic!("{} is outside the workspace", manifest.display()));
            let internal = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| names.contains(d["name"].as_str().unwrap()))
                .map(|d| {
                    let kind = d["kind"].as_str().unwrap_or("normal").to_owned();
                    (d["name"].as_str().unwrap().to_owned(), kind)
                })
                .collect();
            Member {
                name: p["name"].as_str().unwrap().to_owned(),
                dir: dir.to_string_lossy().into_owned(),
                internal,
            }
        })
        .collect();
    assert!(members.len() >= 10, "too few members: {members:?}");
    members
}

/// The crates `docs/dev.md` allows `unsafe` in: the backticked names after the
/// colon of its one line starting with [`UNSAFE_LINE`].
fn allowed_unsafe(dev_md: &str) -> Vec<String> {
    let lines: Vec<&str> = dev_md
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with(UNSAFE_LINE))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "docs/dev.md must have exactly one line starting with {UNSAFE_LINE:?}: {lines:?}"
    );
    let (_, names) = lines[0]
        .split_once("):")
        .or_else(|| lines[0].split_once(':'))
        .expect("a colon before the names");
    names
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_unsafe_line_of_dev_md_is_read_as_written() {
    let doc = "text\n\n  Crates that may hold `unsafe` (read by `x.rs`): `a`, `b-c`.\nmore `d`\n";
    assert_eq!(allowed_unsafe(doc), ["a", "b-c"]);
}

/// Every `.rs` file under `dir`, leaving out build output and hidden directories.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if kind.is_file() && name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// The lint level `[lints]` of a member's Cargo.toml gives `unsafe_code`.
fn unsafe_code_level(manifest: &toml::Table, workspace: &toml::Table) -> Option<String> {
    let lints = manifest.get("lints")?.as_table()?;
    let level = |v: &toml::Value| match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Table(t) => t.get("level")?.as_str().map(str::to_owned),
        _ => None,
    };
    if lints.get("workspace").and_then(toml::Value::as_bool) == Some(true) {
        let ws = workspace.get("workspace")?.get("lints")?.get("rust")?;
        return level(ws.get("unsafe_code")?);
    }
    level(lints.get("rust")?.get("unsafe_code")?)
}

#[test]
fn unsafe_code_lives_only_in_the_crates_dev_md_names() {
    let Some(Tree { root, members, .. }) = tree() else {
        return;
    };
    let allowed = allowed_unsafe(&std::fs::read_to_string(root.join("docs/dev.md")).unwrap());
    assert!(
        allowed.len() <= MAX_UNSAFE_CRATES,
        "docs/dev.md allows unsafe in {} crates, at most {MAX_UNSAFE_CRATES}: {allowed:?}",
        allowed.len()
    );
    for name in &allowed {
        assert!(
            members.iter().any(|m| &m.name == name),
            "docs/dev.md allows unsafe in `{name}`, which is not a workspace member"
        );
    }
    let kernel_dirs: Vec<PathBuf> = members
        .iter()
        .filter(|m| allowed.contains(&m.name))
        .map(|m| root.join(&m.dir))
        .collect();

    let read_toml = |p: &Path| -> toml::Table {
        std::fs::read_to_string(p)
            .unwrap()
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let workspace = read_toml(&root.join("Cargo.toml"));
    let mut problems = Vec::new();
    for m in members.iter().filter(|m| !allowed.contains(&m.name)) {
        let manifest = read_toml(&root.join(&m.dir).join("Cargo.toml"));
        match unsafe_code_level(&manifest, &workspace).as_deref() {
            Some("forbid" | "deny") => {}
            other => problems.push(format!(
                "{}/Cargo.toml: unsafe_code is {other:?}, not forbid (use `[lints] workspace = true`)",
                m.dir
            )),
        }
    }

    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let (mut outside, mut inside, mut unsafe_inside) = (0, 0, 0);
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(&root).unwrap().display().to_string();
        let found = scan(&text).unwrap_or_else(|e| panic!("{shown}: cannot tokenize: {e}"));
        if kernel_dirs.iter().any(|d| file.starts_with(d)) {
            inside += 1;
            unsafe_inside += found.unsafe_lines.len();
            continue;
        }
        outside += 1;
        for line in found.unsafe_lines {
            problems.push(format!("{shown}:{line}: `unsafe` outside {allowed:?}"));
        }
        for line in found.allow_lines {
            problems.push(format!(
                "{shown}:{line}: a lint level that lets unsafe_code in"
            ));
        }
    }
    println!(
        "scanned {outside} files outside {allowed:?}, {inside} inside ({unsafe_inside} `unsafe` tokens)"
    );
    // Controls: the scan read the tree, and it sees the unsafe the kernel crates do hold.
    assert!(outside > 50, "only {outside} files outside {allowed:?}");
    assert!(inside > 0, "no file of {allowed:?} found");
    assert!(
        unsafe_inside > 0,
        "the scanner found no `unsafe` in {allowed:?}, which hold some"
    );
    assert!(
        problems.is_empty(),
        "house rule (docs/dev.md): unsafe only in {allowed:?}:\n{}",
        problems.join("\n")
    );
}

/// The packages `from` depends on, directly or not (normal and build
/// dependencies, on any platform), each with the path that leads to it.
fn closure(meta: &Value, from: &str) -> BTreeMap<String, Vec<String>> {
    let name_of: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let nodes: BTreeMap<&str, &Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let start = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .find(|id| name_of[id] == from)
        .unwrap_or_else(|| panic!("no workspace member {from}"));
    let mut paths: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut seen = BTreeSet::from([start]);
    let mut queue = VecDeque::from([(start, vec![from.to_owned()])]);
    while let Some((id, path)) = queue.pop_front() {
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let linked = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].as_str() != Some("dev"));
            let dep_id = dep["pkg"].as_str().unwrap();
            if !linked || !seen.insert(dep_id) {
                continue;
            }
            let mut to = path.clone();
            to.push(name_of[dep_id].to_owned());
            paths.insert(name_of[dep_id].to_owned(), to.clone());
            queue.push_back((dep_id, to));
        }
    }
    paths
}

#[test]
fn warden_core_depends_on_no_runtime_transport_or_kernel_crate() {
    let Some(Tree { meta, .. }) = tree() else {
        return;
    };
    // Controls: the walk reaches them from the daemon, and goes past the first
    // step (mio only through tokio).
    let daemon = closure(&meta, "wardend");
    for name in NOT_IN_CORE {
        assert!(daemon.contains_key(name), "wardend without {name}?");
    }
    assert!(
        daemon.get("mio").is_some_and(|p| p.len() > 2),
        "{:?}",
        daemon.get("mio")
    );
    let core = closure(&meta, CORE);
    assert!(core.contains_key("serde"), "{core:?}");
    let found: Vec<String> = NOT_IN_CORE
        .iter()
        .filter_map(|name| core.get(*name))
        .map(|path| path.join(" -> "))
        .collect();
    assert!(
        found.is_empty(),
        "{CORE} must not depend on {NOT_IN_CORE:?} (docs/architecture.md):\n{}",
        found.join("\n")
    );
}

// ---------------------------------------------------------------------------
// docs/architecture.md

/// A row of the crate table: its directory, its package name (when it differs
/// from the directory's), its internal dependencies as written.
#[derive(Debug, PartialEq, Eq)]
struct Row {
    dir: String,
    package: Option<String>,
    internal: BTreeSet<(String, String)>,
}

/// The rows of the table under `## Crates` whose header is
/// `| crate | purpose | depends on (internal) |`. A dependency is `` `name` ``,
/// `` `name` (dev) `` or `` `name` (build) ``; `—` for none.
fn crate_table(architecture_md: &str) -> Vec<Row> {
    let section = architecture_md
        .split("\n## Crates\n")
        .nth(1)
        .expect("a `## Crates` section");
    let mut lines = section.lines().skip_while(|l| !l.starts_with('|'));
    let header = lines.next().expect("a table");
    assert_eq!(header, "| crate | purpose | depends on (internal) |");
    lines.next().expect("the table's rule line");
    let backticked =
        |s: &str| -> Vec<String> { s.split('`').skip(1).step_by(2).map(str::to_owned).collect() };
    lines
        .take_while(|l| l.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            assert!(cells.len() >= 3, "a row of fewer than three cells: {line}");
            let first = backticked(cells[0]);
            let dir = first[0].trim_end_matches('/').to_owned();
            let deps = cells[cells.len() - 1].trim();
            let internal = if deps == "—" {
                BTreeSet::new()
            } else {
                deps.split(", ")
                    .map(|d| {
                        let name = backticked(d).first().cloned().unwrap_or_default();
                        let kind = match d.trim() {
                            t if t.ends_with("(dev)") => "dev",
                            t if t.ends_with("(build)") => "build",
                            _ => "normal",
                        };
                        (name, kind.to_owned())
                    })
                    .collect()
            };
            Row {
                dir,
                package: first.get(1).cloned(),
                internal,
            }
        })
        .collect()
}

#[test]
fn the_crate_table_is_read_as_written() {
    let doc = "# A\n\n## Crates\n\nSome words.\n\n| crate | purpose | depends on (internal) |\n\
               | --- | --- | --- |\n\
               | `proto/` (`warden-proto`) | the API, with a | in it | — |\n\
               | `e2e/` | tests | `warden-audit` (dev), `warden-core` |\n\
               \nAfter.\n| not | the | table |\n";
    assert_eq!(
        crate_table(doc),
        [
            Row {
                dir: "proto".into(),
                package: Some("warden-proto".into()),
                internal: BTreeSet::new(),
            },
            Row {
                dir: "e2e".into(),
                package: None,
                internal: BTreeSet::from([
                    ("warden-audit".into(), "dev".into()),
                    ("warden-core".into(), "normal".into()),
                ]),
            },
        ]
    );
}

#[test]
fn the_architecture_crate_table_matches_cargo_metadata() {
    let Some(Tree { root, members, .. }) = tree() else {
        return;
    };
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let rows = crate_table(&doc);
    let listed: BTreeSet<&str> = rows.iter().map(|r| r.dir.as_str()).collect();
    let actual: BTreeSet<&str> = members.iter().map(|m| m.dir.as_str()).collect();
    assert_eq!(
        listed, actual,
        "docs/architecture.md's crate table vs the workspace members (by directory)"
    );
    assert_eq!(rows.len(), members.len(), "a crate listed twice: {rows:?}");
    let mut problems = Vec::new();
    for row in &rows {
        let m = members.iter().find(|m| m.dir == row.dir).unwrap();
        let package = row.package.as_deref().unwrap_or(&row.dir);
        if package != m.name {
            problems.push(format!(
                "`{}/` is the package `{}`, not `{package}`",
                m.dir, m.name
            ));
        }
        if row.internal != m.internal {
            problems.push(format!(
                "`{}`: the table says {:?}, cargo metadata {:?}",
                m.name, row.internal, m.internal
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/architecture.md's crate table:\n{}",
        problems.join("\n")
    );
}

/// The string literals of `const NAME: &[&str] = &[...];` in `source`.
fn const_list(source: &str, name: &str) -> Vec<String> {
    let start = source
        .find(&format!("const {name}: &[&str] = &["))
        .unwrap_or_else(|| panic!("no const {name}"));
    let body = &source[start..];
    let body = &body[body.find("= &[").unwrap() + 4..body.find("];").unwrap()];
    body.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn what_init_leaves_out_is_what_the_sandbox_provides() {
    let Some(root) = repo() else { return };
    let sandbox = std::fs::read_to_string(root.join("warden-sandbox/src/rootfs/mod.rs")).unwrap();
    let core = std::fs::read_to_string(root.join("warden-core/src/runtime.rs")).unwrap();
    assert_eq!(
        const_list(&core, "RUNTIME_DIRS"),
        const_list(&sandbox, "RUNTIME")
    );
    assert_eq!(
        const_list(&core, "RUNTIME_ETC"),
        const_list(&sandbox, "ETC")
    );
    assert!(const_list(&sandbox, "ETC").contains(&"ld.so.cache".to_string()));
}
