//! Persistence: what a server with a write grant leaves behind must not change
//! what the host does after the session.
//!
//! Git (issue 9, review F1): nothing the host's git treats as a repository
//! whose config or hooks the server chose. The user's next `git status` (a
//! shell prompt runs it on every `cd`) would run that command outside any
//! sandbox.
//!
//! Warden's own files (review F3): the policies a later session loads, the
//! audit store, the global cargo config and the binaries' directory cannot be
//! changed through a grant that covers them.
//!
//! Each attack runs inside a real sandbox (the real shim and daemon, `/bin/sh`
//! as the server), then the host's real `git status` runs in every directory
//! the attack aimed at, and its canary (`core.fsmonitor = "touch CANARY"`, a
//! `post-index-change` hook) must not fire. The control runs the same script
//! on the host, in a copy of the same tree, and the same `git status` fires
//! every canary: the attacks are real. Next to them, the legitimate use: `git
//! add`, `git commit`, branches and `git init` where the policy allows it.
//!
//! Run as root and as an unprivileged user (`scripts/test` does both).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use warden_e2e::*;

const RUN: Duration = Duration::from_secs(90);

/// The attacks, one per canary: (name, the directory the host's git runs in,
/// relative to the grant). `git status` runs in each; `git commit` too where
/// the attack is a commit hook.
const ATTACKS: &[(&str, &str)] = &[
    // An implicit bare repository at the grant's top.
    ("bare_top", "."),
    // ... in a directory the server makes.
    ("bare_new_dir", "made"),
    // ... in a directory deep in the grant that existed at the start.
    ("bare_deep", "deep/a/b"),
    // A new `.git` directory in a new subdirectory.
    ("dotgit_new_dir", "sub"),
    // A `.git` file pointing at a git dir the server made.
    ("gitfile", "gf"),
    // The granted repository's own config, hooks and commondir.
    ("repo_config", "repo"),
    ("repo_hook", "repo2"),
    ("repo_commondir", "repo3"),
    // A repository assembled inside the granted `.git` (where `HEAD` files
    // are git's own), then moved out of it.
    ("moved_out", "moved"),
    // A `HEAD` that existed at the start, completed with symlinked
    // `objects/` and `refs/` (git follows them).
    ("symlinked_layout", "fx"),
];

/// The attack script: every step runs whatever happens (`;`), errors go to
/// stdout for the assertions.
fn script(canaries: &Path) -> String {
    let c = |name: &str| canaries.join(name).display().to_string();
    let cfg = |name: &str| {
        format!(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n\
             \tfsmonitor = \"touch {} #\"\n",
            c(name)
        )
    };
    let bare = |dir: &str, name: &str| {
        format!(
            "mkdir -p {dir}/objects {dir}/refs 2>&1\n\
             printf 'ref: refs/heads/main\\n' > {dir}/HEAD 2>&1 || echo 'HEAD refused: {dir}'\n\
             printf '{cfg}' > {dir}/config 2>&1\n",
            cfg = cfg(name).replace('\n', "\\n").replace('\t', "\\t"),
        )
    };
    let mut s = String::from("exec 2>&1\n");
    s += &bare(".", "bare_top");
    s += "mkdir made\n";
    s += &bare("made", "bare_new_dir");
    s += &bare("deep/a/b", "bare_deep");
    s += "mkdir sub 2>&1\n";
    s += "mkdir sub/.git 2>&1 || echo 'dotgit refused'\n";
    s += &bare("sub/.git", "dotgit_new_dir");
    s += "mkdir gf\n";
    s += &bare("gf/store", "gitfile");
    s += "printf 'gitdir: store\\n' > gf/.git 2>&1 || echo 'gitfile refused'\n";
    s += &format!(
        "printf '[core]\\n\\tfsmonitor = \"touch {} #\"\\n' >> repo/.git/config \
         || echo 'config refused'\n",
        c("repo_config")
    );
    s += &format!(
        "printf '#!/bin/sh\\ntouch {}\\n' > repo2/.git/hooks/pre-commit \
         || echo 'hook refused'\n\
         chmod 755 repo2/.git/hooks/pre-commit\n",
        c("repo_hook")
    );
    s += &format!(
        "mkdir -p alt/objects alt/refs\n\
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"touch {} #\"\\n' \
         > alt/config\n\
         printf '%s\\n' \"$PWD/alt\" > repo3/.git/commondir || echo 'commondir refused'\n",
        c("repo_commondir")
    );
    s += "mkdir repo/.git/x\n";
    s += &bare("repo/.git/x", "moved_out");
    s += "mv repo/.git/x moved || echo 'move refused'\n";
    s += &format!(
        "mkdir -p fxstore/objects fxstore/refs\n\
         ln -s ../fxstore/objects fx/objects && ln -s ../fxstore/refs fx/refs\n\
         printf '{}' > fx/config || echo 'symlinked config refused'\n",
        cfg("symlinked_layout")
            .replace('\n', "\\n")
            .replace('\t', "\\t")
    );
    s += "echo done\n";
    s
}

/// The tree every run starts from, under `w`: a real repository with one
/// commit (`repo/`) and a deep directory.
fn prepare(w: &Path) {
    std::fs::create_dir_all(w.join("deep/a/b")).unwrap();
    // A project file that happens to be called HEAD.
    std::fs::create_dir_all(w.join("fx")).unwrap();
    std::fs::write(w.join("fx/HEAD"), "ref: refs/heads/main\n").unwrap();
    for name in ["repo", "repo2", "repo3"] {
        let repo = w.join(name);
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("README"), "hello\n").unwrap();
        git(&repo, &["add", "README"]);
        git(&repo, &["commit", "-q", "-m", "first"]);
    }
}

/// The host's git, isolated from this machine's configuration, never looking
/// above `ceiling`.
fn host_git(dir: &Path, ceiling: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=warden",
            "-c",
            "user.email=warden@example.invalid",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CEILING_DIRECTORIES", ceiling)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
    run(&mut cmd, RUN)
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = host_git(dir, dir.parent().unwrap(), args);
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn git_available() -> bool {
    Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `git status` where each attack aimed; returns the attacks whose
/// canary fired.
fn fired(w: &Path, canaries: &Path) -> Vec<&'static str> {
    for (_, dir) in ATTACKS {
        let d = w.join(dir);
        if d.is_dir() {
            let _ = host_git(&d, w.parent().unwrap(), &["status", "--porcelain"]);
            let _ = host_git(
                &d,
                w.parent().unwrap(),
                &["commit", "-q", "--allow-empty", "-m", "x"],
            );
        }
    }
    ATTACKS
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| canaries.join(name).exists())
        .collect()
}

/// `warden-shim --policy P --write W -- /bin/sh -c SCRIPT` in `w`.
fn inside(env: &TestEnv, policy: &Path, w: &Path, script: &str) -> Output {
    let mut cmd = env.shim([
        "--policy".as_ref(),
        policy.as_os_str(),
        "--write".as_ref(),
        w.as_os_str(),
        "--".as_ref(),
        "/bin/sh".as_ref(),
        "-c".as_ref(),
        script.as_ref(),
    ]);
    cmd.current_dir(w);
    run(&mut cmd, RUN)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn dir(env: &TestEnv, rel: &str) -> PathBuf {
    env.mkdir(rel)
}

#[test]
fn no_repository_the_server_plants_runs_its_commands_on_the_host() {
    if !git_available() {
        println!("skipping: git is not installed");
        return;
    }
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let canaries = dir(&env, "canaries");
    let w = dir(&env, "work/w");
    prepare(&w);
    let out = inside(&env, &env.minimal_policy(), &w, &script(&canaries));
    let said = text(&out);
    eprintln!("inside:\n{said}");
    assert_eq!(exit_code(out.status), 0, "{said}");
    assert!(said.contains("done"), "{said}");
    for refused in [
        "HEAD refused: .",
        "HEAD refused: made",
        "HEAD refused: deep/a/b",
        "dotgit refused",
        "HEAD refused: gf/store",
        "gitfile refused",
        "config refused",
        "hook refused",
        "commondir refused",
        "symlinked config refused",
    ] {
        assert!(said.contains(refused), "{refused}: {said}");
    }
    // HEAD inside the granted git dir is git's own business: allowed there,
    // but the directory holding it cannot leave.
    assert!(!said.contains("HEAD refused: repo/.git/x"), "{said}");
    assert!(!w.join("moved/HEAD").exists(), "{said}");
    assert!(said.contains("Read-only file system"), "{said}");
    assert_eq!(fired(&w, &canaries), Vec::<&str>::new(), "{said}");
    // The repository still works on the host, unchanged.
    assert!(git(&w.join("repo"), &["log", "--oneline"]).contains("first"));

    // Control: the same script on the host, in a copy of the same tree.
    let host_canaries = dir(&env, "host-canaries");
    let hw = dir(&env, "host/w");
    prepare(&hw);
    let mut sh = Command::new("/bin/sh");
    sh.arg("-c").arg(script(&host_canaries)).current_dir(&hw);
    let out = run(&mut sh, RUN);
    eprintln!("host:\n{}", text(&out));
    let all: Vec<&str> = ATTACKS.iter().map(|(n, _)| *n).collect();
    assert_eq!(fired(&hw, &host_canaries), all, "{}", text(&out));
}

/// The names that make a git dir cannot be created by any spelling of their
/// case either (a case-insensitive directory finds `.GIT` for `.git`), nor by
/// link, symlink or rename; in the private /tmp they are ordinary.
#[test]
fn git_names_by_any_call_and_case_are_refused_in_a_write_grant() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let w = dir(&env, "work/w");
    std::fs::write(w.join("file"), "x\n").unwrap();
    let attempts = [
        ("mkdir .GIT", "mkdir .GIT"),
        ("touch Head", "touch d/Head"),
        ("ln -s file HEAD", "ln -s file d/HEAD"),
        ("ln file commondir", "ln file d/commondir"),
        ("mv file2 gitdir", "cp file d/f2 && mv d/f2 d/gitdir"),
        ("mkdir d/x/.git", "mkdir -p d/x && mkdir d/x/.git"),
    ];
    let mut s = String::from("exec 2>&1\nmkdir d\n");
    for (label, cmd) in attempts {
        s += &format!("if {cmd}; then echo 'made: {label}'; else echo 'refused: {label}'; fi\n");
    }
    s += "cd /tmp && mkdir -p t/objects t/refs && echo 'ref: refs/heads/main' > t/HEAD \
          && mkdir t/.git && echo 'tmp: ordinary'\n";
    let out = inside(&env, &env.minimal_policy(), &w, &s);
    let said = text(&out);
    eprintln!("{said}");
    for (label, _) in attempts {
        assert!(
            said.contains(&format!("refused: {label}")),
            "{label}: {said}"
        );
    }
    assert!(said.contains("tmp: ordinary"), "{said}");
    for name in [
        ".GIT",
        "d/Head",
        "d/HEAD",
        "d/commondir",
        "d/gitdir",
        "d/x/.git",
    ] {
        assert!(w.join(name).symlink_metadata().is_err(), "{name} exists");
    }
    // Control: the same commands on the host make every name.
    let hw = dir(&env, "host/w");
    std::fs::write(hw.join("file"), "x\n").unwrap();
    let mut sh = Command::new("/bin/sh");
    sh.arg("-c")
        .arg(s.replace("cd /tmp", "cd ."))
        .current_dir(&hw);
    let said = text(&run(&mut sh, RUN));
    for (label, _) in attempts {
        assert!(
            said.contains(&format!("made: {label}")),
            "host {label}: {said}"
        );
    }
}

/// What a git MCP server does in a repository it was granted: add, commit,
/// branch, switch, and it lands in the host's repository. `git init` in the
/// grant is refused by default and works with `filesystem.allow_git_init`.
#[test]
fn git_add_commit_and_branch_work_in_a_granted_repository() {
    if !git_available() {
        println!("skipping: git is not installed");
        return;
    }
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let w = dir(&env, "work/w");
    prepare(&w);
    let g = "git -c user.name=server -c user.email=server@example.invalid";
    let s = format!(
        "set -e\nexec 2>&1\ncd repo\n\
         echo change > file.txt\n\
         {g} add file.txt\n\
         {g} commit -q -m 'from the sandbox'\n\
         {g} checkout -q -b feature\n\
         echo more >> file.txt\n\
         {g} commit -q -am 'on a branch'\n\
         {g} checkout -q main\n\
         {g} tag v1\n\
         {g} gc -q\n\
         {g} log --oneline --all\n\
         cd ..\n\
         if {g} init -q fresh; then echo 'init: made'; else echo 'init: refused'; fi\n\
         echo ok\n"
    );
    let out = inside(&env, &env.minimal_policy(), &w, &s);
    let said = text(&out);
    eprintln!("{said}");
    assert_eq!(exit_code(out.status), 0, "{said}");
    assert!(
        said.contains("init: refused") && said.ends_with("ok\n"),
        "{said}"
    );
    let repo = w.join("repo");
    let log = git(&repo, &["log", "--oneline", "--all"]);
    assert!(
        log.contains("from the sandbox") && log.contains("on a branch"),
        "{log}"
    );
    assert_eq!(git(&repo, &["rev-parse", "--abbrev-ref", "HEAD"]), "main\n");
    assert!(git(&repo, &["tag"]).contains("v1"));
    assert!(git(&repo, &["fsck", "--no-progress"]).is_empty());
    assert!(!w.join("fresh/.git").exists());

    // With filesystem.allow_git_init, a new repository can be made.
    let policy = env.policy(
        "init.yaml",
        "version: 1\nname: git-init\nfilesystem:\n  allow_git_init: true\n",
    );
    let out = inside(
        &env,
        &policy,
        &w,
        &format!("exec 2>&1\n{g} init -q fresh && echo made\n"),
    );
    assert!(text(&out).contains("made"), "{}", text(&out));
    assert!(w.join("fresh/.git/HEAD").exists());
}

/// Warden's policies (its profiles directory, `$XDG_CONFIG_HOME/warden`) in a
/// write grant of the config home: read-only inside, while the rest of the
/// grant is written. Control: the same script on the host changes them.
#[test]
fn wardens_own_policies_and_state_cannot_be_changed_through_a_grant() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    env.write(
        "config/warden/policies/github.yaml",
        "version: 1\nname: github\n",
    );
    let s = "exec 2>&1\n\
             echo 'filesystem: {write: [\"~\"]}' >> warden/policies/github.yaml \
               || echo 'refused: edit policy'\n\
             echo 'version: 1' > warden/policies/new.yaml || echo 'refused: new policy'\n\
             mv warden/policies warden/p2 || echo 'refused: move policies'\n\
             mkdir warden/x || echo 'refused: mkdir'\n\
             echo ok > other.txt && echo 'made: other.txt'\n";
    // The policy compiler refuses the grant first (it holds Warden's config
    // directory); exposed by name, the directory is still read-only inside.
    let out = inside(&env, &env.minimal_policy(), &env.config, s);
    assert_eq!(exit_code(out.status), 125, "{}", text(&out));
    assert!(text(&out).contains("dangerously_expose"), "{}", text(&out));
    let policy = env.policy(
        "expose.yaml",
        &format!(
            "version: 1\nname: expose\nfilesystem:\n  dangerously_expose: [\"{}\"]\n",
            env.config.join("warden").display()
        ),
    );
    let out = inside(&env, &policy, &env.config, s);
    let said = text(&out);
    eprintln!("{said}");
    for r in ["edit policy", "new policy", "move policies", "mkdir"] {
        assert!(said.contains(&format!("refused: {r}")), "{r}: {said}");
    }
    assert!(said.contains("made: other.txt"), "{said}");
    assert!(said.contains("Read-only file system"), "{said}");
    assert_eq!(
        std::fs::read_to_string(env.config.join("warden/policies/github.yaml")).unwrap(),
        "version: 1\nname: github\n"
    );
    assert!(!env.config.join("warden/policies/new.yaml").exists());
    // Control: on the host, the same script rewrites the policy.
    let mut sh = Command::new("/bin/sh");
    sh.arg("-c").arg(s).current_dir(&env.config);
    let said = text(&run(&mut sh, RUN));
    assert!(!said.contains("refused"), "host: {said}");
    assert!(
        std::fs::read_to_string(env.config.join("warden/p2/github.yaml"))
            .unwrap()
            .contains("write")
    );
}

/// A write grant of the home directory: the global cargo config, the
/// binaries in `~/.cargo/bin` and Warden's default directories cannot be
/// created or changed; ordinary files in the home directory can.
#[test]
fn home_grant_keeps_cargo_bin_cargo_config_and_warden_dirs() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    env.write("home/.cargo/bin/warden-shim", "#!/bin/sh\necho real\n");
    let s = "exec 2>&1\n\
             echo evil > .cargo/bin/warden-shim || echo 'refused: replace shim'\n\
             echo evil > .cargo/bin/wardenctl || echo 'refused: new binary'\n\
             printf '[build]\\nrustc-wrapper = \"/tmp/x\"\\n' > .cargo/config.toml \
               || echo 'refused: cargo config'\n\
             mkdir -p .local/state/warden || echo 'refused: state dir'\n\
             mkdir -p .config/warden || echo 'refused: config dir'\n\
             echo ok > notes.txt && echo 'made: notes'\n\
             mkdir -p .cargo/registry && echo ok > .cargo/registry/x && echo 'made: registry'\n";
    // Refused by the policy compiler unless the policy says so; then the
    // sandbox still keeps these read-only.
    let out = inside(&env, &env.minimal_policy(), &env.home, s);
    assert_eq!(exit_code(out.status), 125, "{}", text(&out));
    let policy = env.policy(
        "home.yaml",
        "version: 1\nname: home\nfilesystem:\n  allow_home_write: true\n",
    );
    let out = inside(&env, &policy, &env.home, s);
    let said = text(&out);
    eprintln!("{said}");
    for r in [
        "replace shim",
        "new binary",
        "cargo config",
        "state dir",
        "config dir",
    ] {
        assert!(said.contains(&format!("refused: {r}")), "{r}: {said}");
    }
    assert!(
        said.contains("made: notes") && said.contains("made: registry"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(env.home.join(".cargo/bin/warden-shim")).unwrap(),
        "#!/bin/sh\necho real\n"
    );
    for p in [
        ".cargo/config.toml",
        ".cargo/bin/wardenctl",
        ".local/state/warden",
    ] {
        assert!(!env.home.join(p).exists(), "{p}");
    }
    // Control: the same script on the host.
    let mut sh = Command::new("/bin/sh");
    sh.arg("-c").arg(s).current_dir(&env.home);
    let said = text(&run(&mut sh, RUN));
    assert!(!said.contains("refused"), "host: {said}");
}
