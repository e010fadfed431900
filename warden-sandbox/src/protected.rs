//! Protected names: files a write grant must not turn into code execution on
//! the host later. The table and the plan, pure data shared by both halves
//! and by the daemon's `session.start` record:
//!
//! - the names that exist are bound read-only by PID 1
//!   (`rootfs::protect`);
//! - the names that are missing are kept from being created by the creation
//!   guard on the daemon's notifier threads (`supervise::guard`).
//!
//! A write grant lets the server change what it was granted. Some names inside
//! a directory are not data but instructions the host follows on its own, long
//! after the session: git runs hooks and `core.fsmonitor` on the `git status` of
//! a shell prompt, a shell sources its start-up files, an editor runs tasks when
//! a folder is opened, an MCP client starts the servers a project's `.mcp.json`
//! lists. `PROTECTED` is the table of those names, each with its reason, and
//! [`plan`] turns it into the paths PID 1 binds read-only over themselves
//! inside each write grant.
//!
//! How a name is matched: relative to each write grant *and to each of its
//! ancestors*, keeping the results strictly inside the grant. So `.git/hooks` is
//! protected in a grant of the repository (`/p` → `/p/.git/hooks`) and in a
//! grant of its git dir (`/p/.git` → `/p/.git/hooks`); `.config/fish` in a grant
//! of `$HOME` and of `$HOME/.config`. Not matched: names deeper in the grant (a
//! grant of `~/src` does not protect `~/src/proj/.git`; walking whole trees at
//! every start is not affordable), and names above it (a grant of `/p/out`
//! cannot reach `/p/.git` at all).
//!
//! What stays writable: a protected path the policy grants for writing by its
//! exact path (or a write grant nested inside one): the policy said so. A
//! protected path that is also a read grant, or lies in one, is read-only anyway.
//!
//! Out of scope, on purpose: the project's own build and tool files
//! (`Makefile`, `package.json` scripts, `build.rs`, `Cargo.toml`,
//! `.cargo/config.toml`, `setup.py`, `.pre-commit-config.yaml`, `.husky/`,
//! `.github/workflows`, ...). A write grant on a project exists so the server
//! can change the project, and the user runs the project's code when they build
//! or test it; an editor's language server even builds it (`build.rs`, proc
//! macros) as soon as the folder is opened. Any source file is then as good as a
//! `Makefile`, so protecting build files would only look safer. The table holds
//! what runs *without* the user running the project: git, shells, login and
//! desktop sessions, editors' own settings, agents and MCP clients.
//! Also out: `.gitattributes` (tracked content that only selects filter and
//! diff drivers, whose commands come from git config, protected here; unlike
//! `.git/info/attributes` it is shared with everyone who clones the project),
//! credential files such as `.pypirc` or `.netrc` (no code runs from them;
//! whether the server may read them is the read grants' business). The user's
//! home directory has a few rows of its own (`Protected::home_only`: global
//! cargo config, the binaries in `~/.cargo/bin`, Warden's own directories),
//! and the daemon adds the paths Warden really uses
//! ([`SandboxSpec::warden_paths`]).
//!
//! Inside `.git`, only what git runs or follows is protected (config, hooks,
//! `commondir`, `info/attributes`, the git dirs under `modules/` and
//! `worktrees/`): objects, refs, logs, the index and `HEAD` stay writable, so a
//! server can commit in a repository it was granted.

use crate::spec::SandboxSpec;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One row: a name relative to a directory, and why the host trusts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protected {
    /// Relative, normalised, no trailing slash. A directory is protected whole.
    pub name: &'static str,
    pub why: &'static str,
    /// Matched only relative to the user's home directory (`~/.cargo/bin`),
    /// not relative to every write grant and its ancestors.
    pub home_only: bool,
    /// Protected when it is a file or a symlink, left writable when it is a
    /// directory (whose own rows say what inside it is protected): `.git`.
    pub unless_dir: bool,
}

const fn row(name: &'static str, why: &'static str) -> Protected {
    Protected {
        name,
        why,
        home_only: false,
        unless_dir: false,
    }
}

/// A row matched at the home directory only.
const fn home_row(name: &'static str, why: &'static str) -> Protected {
    Protected {
        home_only: true,
        ..row(name, why)
    }
}

/// Why Warden's own files ([`SandboxSpec::warden_paths`]) are protected.
pub(crate) const WARDEN_WHY: &str =
    "Warden's own files (policies, audit store, binaries): what it will do next";

/// Names the host runs or trusts. Directories are protected whole: nothing can
/// be changed, created or removed inside.
///
/// Git: what git *runs* is protected, what it *stores* is not, so `git add`
/// and `git commit` work in a granted repository (index, objects, refs, logs,
/// `HEAD`, `COMMIT_EDITMSG` are data). The list follows git's own readers:
/// `setup.c` (`.git` files, `commondir`, the `HEAD`/`objects`/`refs` layout
/// of a git dir), `config.c` (`config`, `config.worktree`, `include.path`),
/// `hook.c` (`hooks/`), `attr.c` (`info/attributes`), `submodule.c` and
/// `worktree.c` (`modules/`, `worktrees/`: further git dirs with their own
/// config, hooks and `gitdir`/`commondir` files). Names that turn any
/// directory into a git dir (`.git`, `HEAD`, `commondir`, `gitdir`) cannot be
/// created anywhere in a write grant outside an existing git dir: see
/// [`crate::supervise::guard`].
pub const PROTECTED: &[Protected] = &[
    Protected {
        unless_dir: true,
        ..row(
            ".git",
            "a .git file points git at another git dir, whose config and hooks \
             then run; a new .git directory is a new repository",
        )
    },
    row(
        ".git/config",
        "core.fsmonitor, core.hooksPath, core.sshCommand, core.pager, aliases, \
         filters and include.path run commands on any git command",
    ),
    row(
        ".git/config.worktree",
        "read like config when extensions.worktreeConfig is set",
    ),
    row(
        ".git/hooks",
        "git runs them at commit, merge, checkout and push",
    ),
    row(
        ".git/commondir",
        "redirects config, hooks and refs to another directory",
    ),
    row(
        ".git/info/attributes",
        "selects filter and diff drivers, which run commands",
    ),
    row(
        ".git/modules",
        "submodules' git dirs, each with its own config and hooks",
    ),
    row(
        ".git/worktrees",
        "linked worktrees' git dirs: config.worktree, commondir and gitdir files",
    ),
    row(
        ".gitmodules",
        "submodule URLs and paths that git submodule clones and checks out",
    ),
    row(
        ".gitconfig",
        "global git config: commands for every repository",
    ),
    row(
        ".config/git",
        "global git config (XDG): commands for every repository",
    ),
    // Warden's own defaults (the daemon adds the paths it really uses, see
    // `SandboxSpec::warden_paths`) and the binaries' usual home.
    home_row(".config/warden", WARDEN_WHY),
    home_row(".local/state/warden", WARDEN_WHY),
    home_row(
        ".cargo/bin",
        "where `cargo install` puts wardend, warden-shim and wardenctl, and \
         tools on PATH",
    ),
    home_row(
        ".cargo/config.toml",
        "global cargo config: build.rustc-wrapper and runners run on every build",
    ),
    home_row(
        ".cargo/config",
        "global cargo config (old name): rustc-wrapper and runners",
    ),
    // Shells: sourced when a shell starts.
    row(".bashrc", "bash sources it in every interactive shell"),
    row(".bash_profile", "bash sources it in login shells"),
    row(".bash_login", "bash sources it in login shells"),
    row(".bash_logout", "bash sources it when a login shell exits"),
    row(
        ".bash_aliases",
        "the default .bashrc of Debian and Ubuntu sources it",
    ),
    row(".profile", "sh, dash and bash source it in login shells"),
    row(".zshenv", "zsh sources it in every shell, even scripts"),
    row(".zprofile", "zsh sources it in login shells"),
    row(".zshrc", "zsh sources it in every interactive shell"),
    row(".zlogin", "zsh sources it in login shells"),
    row(".zlogout", "zsh sources it when a login shell exits"),
    row(
        ".config/fish",
        "fish sources config.fish, conf.d/ and functions/",
    ),
    row(
        ".inputrc",
        "readline macros type text, newline included, into every shell",
    ),
    // Login and desktop sessions.
    row(
        ".ssh",
        "authorized_keys lets anyone in; config's ProxyCommand and \
         LocalCommand and rc run commands",
    ),
    row(
        ".config/autostart",
        "desktop entries run at every graphical login",
    ),
    row(".config/systemd", "user units run at login and on timers"),
    row(
        ".config/environment.d",
        "environment of every user service (LD_PRELOAD...)",
    ),
    row(
        ".local/share/applications",
        "desktop entries override the system's: Exec= runs when an \
         application is opened",
    ),
    row(
        ".local/bin",
        "on PATH by default (~/.profile): a planted `git` runs instead of git",
    ),
    row(".xprofile", "sourced at graphical login"),
    row(".xsession", "run as the graphical session"),
    row(".xinitrc", "startx runs it as the X session"),
    // Editors and IDEs: settings and tasks that run when a folder is opened.
    row(
        ".vscode",
        "tasks.json (runOn: folderOpen), settings.json (interpreter and tool \
         paths, terminal profiles), launch.json, mcp.json",
    ),
    row(
        ".idea",
        "JetBrains run configurations, startup tasks and tool paths",
    ),
    row(
        ".devcontainer",
        "initializeCommand runs on the host when the folder is opened",
    ),
    row(".vimrc", "vim runs it at start"),
    row(".exrc", "vi and vim (with 'exrc') run it at start"),
    row(".config/nvim", "neovim runs init.lua/init.vim and plugins"),
    row(".emacs", "emacs runs it at start"),
    row(".emacs.d", "emacs runs init.el at start"),
    // Agents and MCP clients: they start the servers these files list.
    row(".mcp.json", "MCP servers a client starts for the project"),
    row(
        ".claude",
        "Claude Code settings: hooks run shell commands, MCP servers, \
         permissions",
    ),
    row(
        ".claude.json",
        "Claude Code user config: MCP servers it starts",
    ),
    row(".cursor", "Cursor: mcp.json servers and rules"),
    row(".gemini", "Gemini CLI settings: MCP servers it starts"),
    row(".codex", "Codex CLI config: MCP servers it starts"),
    // Developer environment.
    row(
        ".envrc",
        "direnv runs it on cd once allowed (an edit asks again; habits allow)",
    ),
    row(
        ".npmrc",
        "node-options (--require) and script-shell run code on any npm \
         command; every project's when it is ~/.npmrc",
    ),
];

/// What PID 1 (`rootfs`) does for the write grants of one spec: host paths, all
/// absolute, normalised and sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Bound read-only over themselves when they exist (a symlink is bound as
    /// the link itself, never followed): nothing in them can be written,
    /// created, removed, renamed or replaced.
    pub protect: Vec<PathBuf>,
    /// The paths of `protect` that are protected only when they are not a
    /// directory (`Protected::unless_dir`).
    pub unless_dir: Vec<PathBuf>,
    /// Directories between a write grant and a protected path, bound over
    /// themselves with the grant's own (read-write) mode: a mount point cannot
    /// be renamed or removed, so the protected path cannot be moved away with
    /// its parent (`mv .config x; mkdir -p .config/fish`).
    pub pin: Vec<PathBuf>,
    /// Why each path of `protect` is protected.
    pub why: BTreeMap<PathBuf, &'static str>,
}

/// The grants as the mount layer binds them: (path, writable). A path in both
/// lists is a write grant.
fn grants(spec: &SandboxSpec) -> Vec<(&Path, bool)> {
    let mut g: Vec<(&Path, bool)> = spec.write.iter().map(|p| (p.as_path(), true)).collect();
    g.extend(
        spec.read
            .iter()
            .filter(|p| !spec.write.contains(p))
            .map(|p| (p.as_path(), false)),
    );
    g
}

/// The grant whose bind is visible at `p`: the deepest one containing it.
fn owner<'a>(grants: &[(&'a Path, bool)], p: &Path) -> Option<(&'a Path, bool)> {
    grants
        .iter()
        .filter(|(g, _)| p.starts_with(g))
        .max_by_key(|(g, _)| g.components().count())
        .copied()
}

/// One candidate of the plan: a path, the write grant whose bind shows it,
/// and its row (None: one of Warden's own paths).
type Found = (PathBuf, PathBuf, Option<&'static Protected>);

/// The protection plan for `spec`. Pure: nothing here touches the filesystem
/// (whether each path exists is decided inside the sandbox, from fds).
pub fn plan(spec: &SandboxSpec) -> Plan {
    let grants = grants(spec);
    // Visible through a write grant that is not the path itself: its owner.
    let writable_owner = |c: &Path| match owner(&grants, c) {
        Some((o, true)) if o != c => Some(o.to_path_buf()),
        _ => None,
    };
    let mut found: BTreeMap<PathBuf, Found> = BTreeMap::new();
    for g in &spec.write {
        // The last components of `g`, innermost first.
        let tail: Vec<&std::ffi::OsStr> = g.components().rev().map(|c| c.as_os_str()).collect();
        for (up, base) in g.ancestors().enumerate() {
            for row in PROTECTED {
                if row.home_only && base != spec.home {
                    continue;
                }
                // `base/name` is inside `g` (and not `g`) only if the name
                // is longer than the way up from `g` to `base` and starts
                // with that way: most rows fail this without a join.
                let mut parts = Path::new(row.name).components();
                let leads = (0..up).rev().all(|i| {
                    parts
                        .next()
                        .is_some_and(|p| tail.get(i).is_some_and(|t| *t == p.as_os_str()))
                });
                if !leads || parts.next().is_none() {
                    continue;
                }
                let c = base.join(row.name);
                if !c.starts_with(g) || c == *g {
                    continue;
                }
                if let Some(o) = writable_owner(&c) {
                    found.insert(c.clone(), (c, o, Some(row)));
                }
            }
        }
    }
    for w in &spec.warden_paths {
        if let Some(o) = writable_owner(w) {
            found.insert(w.clone(), (w.clone(), o, None));
        }
    }
    // A path inside another protected path of the same grant is covered by
    // it (not by one that is left alone when it is a directory): one of its
    // ancestors is a candidate too (looked up, not compared with every
    // candidate: the pairwise check cost half a millisecond per launch).
    let covered = |c: &Path, o: &Path| {
        c.ancestors().skip(1).any(|a| {
            found
                .get(a)
                .is_some_and(|(_, o2, r2)| o2 == o && !r2.is_some_and(|r| r.unless_dir))
        })
    };
    let kept: Vec<&Found> = found.values().filter(|(c, o, _)| !covered(c, o)).collect();
    let mut pin = BTreeSet::new();
    for (c, o, _) in &kept {
        for a in c.ancestors().skip(1) {
            if a == o {
                break;
            }
            pin.insert(a.to_path_buf());
        }
    }
    Plan {
        protect: kept.iter().map(|(c, _, _)| c.clone()).collect(),
        unless_dir: kept
            .iter()
            .filter(|(_, _, r)| r.is_some_and(|r| r.unless_dir))
            .map(|(c, _, _)| c.clone())
            .collect(),
        pin: pin.into_iter().collect(),
        why: kept
            .iter()
            .map(|(c, _, r)| (c.clone(), r.map_or(WARDEN_WHY, |r| r.why)))
            .collect(),
    }
}

/// Why `path` (absolute, normalised) can never be approved
/// (docs/approvals.md): it is, or is inside, a name of [`PROTECTED`] relative
/// to a directory above it (the home-only rows under `home` only; `.git`
/// itself, not what is inside it), or one of Warden's own paths.
pub fn never_approved(path: &Path, home: &Path, warden_paths: &[PathBuf]) -> Option<&'static str> {
    if warden_paths.iter().any(|w| path.starts_with(w)) {
        return Some(WARDEN_WHY);
    }
    for base in path.ancestors().skip(1) {
        for row in PROTECTED {
            if row.home_only && base != home {
                continue;
            }
            let c = base.join(row.name);
            if path == c || (!row.unless_dir && path.starts_with(&c)) {
                return Some(row.why);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Component;

    fn spec(read: &[&str], write: &[&str]) -> SandboxSpec {
        serde_json::from_value(serde_json::json!({
            "session_id": "s",
            "program": "/bin/sh",
            "argv": [b"sh"],
            "env": [],
            "cwd": "/",
            "read": read,
            "write": write,
            "home": "/home/ana",
            "uid": 1000,
            "gid": 1000,
            "user": "ana",
            "tmp_size_mb": 1,
            "layers": crate::spec::Layers::NONE,
        }))
        .unwrap()
    }

    fn paths(v: &[PathBuf]) -> Vec<&str> {
        v.iter().map(|p| p.to_str().unwrap()).collect()
    }

    #[test]
    fn protected_names_and_wardens_files_are_never_approved() {
        let home = Path::new("/home/ana");
        let warden = [PathBuf::from("/home/ana/.config/warden")];
        let never = |p: &str| never_approved(Path::new(p), home, &warden).is_some();
        assert!(never("/home/ana/.bashrc"));
        assert!(never("/home/ana/src/p/.git/config"));
        assert!(never("/home/ana/src/p/.git/hooks/pre-commit"));
        assert!(never("/home/ana/src/p/.git"));
        assert!(never("/home/ana/.config/warden/policies/fetch.yaml"));
        assert!(never("/home/ana/.cargo/bin/cargo"));
        assert!(!never("/home/ana/src/p/.git/objects/ab/cdef"));
        assert!(!never("/home/ana/notes/todo.txt"));
        assert!(!never("/srv/data/report.csv"));
        // Home-only rows are not matched elsewhere.
        assert!(!never("/srv/x/.cargo/bin/tool"));
    }

    #[test]
    fn table_rows_are_relative_normalised_unique_and_explained() {
        let mut seen = BTreeSet::new();
        for r in PROTECTED {
            let p = Path::new(r.name);
            assert!(
                p.components().all(|c| matches!(c, Component::Normal(_))),
                "{}: must be relative and normalised",
                r.name
            );
            assert!(!r.name.ends_with('/') && !r.name.is_empty(), "{}", r.name);
            assert!(seen.insert(r.name), "{} twice", r.name);
            assert!(r.why.len() >= 15, "{}: say why", r.name);
        }
    }

    #[test]
    fn table_covers_the_known_entry_points() {
        for name in [
            ".git",
            ".git/hooks",
            ".git/config",
            ".bashrc",
            ".bash_profile",
            ".bash_login",
            ".bash_logout",
            ".profile",
            ".zshrc",
            ".zshenv",
            ".zprofile",
            ".zlogin",
            ".config/fish",
            ".inputrc",
            ".mcp.json",
            ".vscode",
            ".idea",
            ".envrc",
            ".npmrc",
            ".ssh",
            ".config/autostart",
            ".local/share/applications",
            ".cursor",
            ".claude",
        ] {
            assert!(PROTECTED.iter().any(|r| r.name == name), "{name} missing");
        }
    }

    #[test]
    fn build_files_and_attributes_are_out_of_scope() {
        for name in [
            "Makefile",
            "package.json",
            "Cargo.toml",
            "build.rs",
            ".cargo",
            ".gitattributes",
            ".pypirc",
            ".github",
        ] {
            assert!(PROTECTED.iter().all(|r| r.name != name), "{name}");
        }
    }

    #[test]
    fn every_row_under_a_project_grant() {
        let p = plan(&spec(&[], &["/p"]));
        // Every row but the home directory's own; `.git` is not protected whole,
        // so its rows are all there; .config/fish & co. need their parents
        // pinned, and so does everything inside .git.
        let want: Vec<String> = PROTECTED
            .iter()
            .filter(|r| !r.home_only)
            .map(|r| format!("/p/{}", r.name))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(paths(&p.protect), want);
        assert_eq!(paths(&p.unless_dir), ["/p/.git"]);
        assert_eq!(
            paths(&p.pin),
            [
                "/p/.config",
                "/p/.git",
                "/p/.git/info",
                "/p/.local",
                "/p/.local/share"
            ]
        );
        assert_eq!(p.why.len(), p.protect.len());
    }

    #[test]
    fn git_protects_what_runs_not_what_stores() {
        let p = plan(&spec(&[], &["/p"]));
        for runs in [
            "/p/.git/config",
            "/p/.git/config.worktree",
            "/p/.git/hooks",
            "/p/.git/commondir",
            "/p/.git/info/attributes",
            "/p/.git/modules",
            "/p/.git/worktrees",
            "/p/.gitmodules",
        ] {
            assert!(p.protect.contains(&PathBuf::from(runs)), "{runs}");
        }
        for stores in [
            "/p/.git/objects",
            "/p/.git/refs",
            "/p/.git/logs",
            "/p/.git/index",
            "/p/.git/HEAD",
            "/p/.git/COMMIT_EDITMSG",
            "/p/.git/info",
            "/p/.git/info/exclude",
        ] {
            let q = Path::new(stores);
            assert!(
                !p.protect
                    .iter()
                    .any(|x| q.starts_with(x) && x != Path::new("/p/.git")),
                "{stores}"
            );
        }
    }

    #[test]
    fn home_rows_and_wardens_own_paths() {
        // The home directory's rows apply at the home directory only.
        let p = plan(&spec(&[], &["/home/ana"]));
        for want in [
            "/home/ana/.cargo/bin",
            "/home/ana/.cargo/config.toml",
            "/home/ana/.config/warden",
            "/home/ana/.local/state/warden",
        ] {
            assert!(p.protect.contains(&PathBuf::from(want)), "{want}");
        }
        let p = plan(&spec(&[], &["/p"]));
        assert!(p.protect.iter().all(|x| !x.starts_with("/p/.cargo")));
        // A grant of ~/.cargo protects bin/ (its ancestor is the home).
        let p = plan(&spec(&[], &["/home/ana/.cargo"]));
        assert!(p.protect.contains(&PathBuf::from("/home/ana/.cargo/bin")));
        // Warden's own paths, wherever a write grant shows them.
        let mut s = spec(&["/opt"], &["/srv", "/home/ana/.local"]);
        s.warden_paths = vec![
            PathBuf::from("/srv/warden/state"),
            PathBuf::from("/srv/policy.yaml"),
            PathBuf::from("/opt/bin/wardend"), // read-only already
            PathBuf::from("/elsewhere/x"),     // not visible
            PathBuf::from("/srv"),             // a grant itself
        ];
        let p = plan(&s);
        for want in ["/srv/warden/state", "/srv/policy.yaml"] {
            assert!(p.protect.contains(&PathBuf::from(want)), "{want}");
            assert_eq!(p.why[Path::new(want)], WARDEN_WHY);
        }
        for not in ["/opt/bin/wardend", "/elsewhere/x", "/srv"] {
            assert!(!p.protect.contains(&PathBuf::from(not)), "{not}");
        }
    }

    #[test]
    fn names_match_at_the_grants_ancestors_too() {
        // A grant of the git dir: its hooks and config stay protected.
        // (Every name also matches at the grant itself, as for any grant.)
        let p = plan(&spec(&[], &["/p/.git"]));
        for want in ["/p/.git/config", "/p/.git/hooks", "/p/.git/.bashrc"] {
            assert!(p.protect.iter().any(|x| x == Path::new(want)), "{want}");
        }
        assert!(!p.protect.iter().any(|x| x == Path::new("/p/.git")));
        // A grant of ~/.config.
        let p = plan(&spec(&[], &["/home/ana/.config"]));
        for want in ["/home/ana/.config/fish", "/home/ana/.config/git"] {
            assert!(p.protect.iter().any(|x| x == Path::new(want)), "{want}");
        }
        // A grant of ~/.local/share/applications/x: inside a protected
        // directory, granted by name.
        // Only the grant's own names are protected, none above it.
        let x = Path::new("/home/ana/.local/share/applications/x");
        let p = plan(&spec(&[], &[x.to_str().unwrap()]));
        assert!(p.protect.contains(&x.join(".git")));
        assert!(p
            .protect
            .iter()
            .chain(&p.pin)
            .all(|q| q.starts_with(x) && q != x));
        // A grant below a repository cannot reach its .git: nothing to do
        // for git there.
        let p = plan(&spec(&[], &["/p/src"]));
        assert!(p.protect.iter().all(|x| !x.starts_with("/p/.git")));
    }

    #[test]
    fn exact_write_grants_stay_writable() {
        let p = plan(&spec(&[], &["/p", "/p/.vscode", "/p/.git/config"]));
        assert!(!p.protect.contains(&PathBuf::from("/p/.vscode")));
        assert!(!p.protect.contains(&PathBuf::from("/p/.git/config")));
        // The rest of .git's rows stay protected.
        assert!(p.protect.contains(&PathBuf::from("/p/.git/hooks")));
        // A grant of .git by name: writable, but its hooks and config not.
        let p = plan(&spec(&[], &["/p", "/p/.git"]));
        assert!(!p.protect.contains(&PathBuf::from("/p/.git")));
        assert!(p.protect.contains(&PathBuf::from("/p/.git/hooks")));
        assert!(p.protect.contains(&PathBuf::from("/p/.git/config")));
    }

    #[test]
    fn read_grants_need_no_protection() {
        // Read-only already, whether nested or covering.
        let p = plan(&spec(&["/p/.vscode", "/p/.git"], &["/p"]));
        assert!(p.protect.iter().all(|x| !x.starts_with("/p/.vscode")));
        assert!(p.protect.iter().all(|x| !x.starts_with("/p/.git")));
        // Read grants alone: nothing.
        assert_eq!(plan(&spec(&["/p"], &[])), Plan::default());
        // In both lists: a write grant.
        let p = plan(&spec(&["/p"], &["/p"]));
        assert!(p.protect.contains(&PathBuf::from("/p/.git")));
    }

    #[test]
    fn a_nested_write_grant_protects_its_own_names() {
        let p = plan(&spec(&[], &["/p", "/p/sub"]));
        assert!(p.protect.contains(&PathBuf::from("/p/.git")));
        assert!(p.protect.contains(&PathBuf::from("/p/sub/.git")));
        // A pin never lands on a grant.
        let p = plan(&spec(&[], &["/h", "/h/.config"]));
        assert!(p.pin.iter().all(|x| x != Path::new("/h/.config")));
        assert!(p.protect.contains(&PathBuf::from("/h/.config/fish")));
    }

    #[test]
    fn protected_paths_are_strictly_inside_a_write_grant_and_never_a_grant() {
        let s = spec(&["/r", "/w/ro"], &["/w", "/w/.vscode", "/h/ana/.config"]);
        let p = plan(&s);
        for x in p.protect.iter().chain(&p.pin) {
            assert!(
                s.write.iter().any(|g| x.starts_with(g) && x != g),
                "{}",
                x.display()
            );
            assert!(!s.read.contains(x) && !s.write.contains(x));
        }
    }
}
