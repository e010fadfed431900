//! `wardenctl policy list | show NAME | edit NAME`: the profiles, the
//! policies `warden-shim --profile NAME` runs (`NAME.yaml` in
//! `warden_core::paths::profiles_dir()`, `~/.config/warden/policies`).
//!
//! `list` compiles each one and says whether it is valid; `show` prints one
//! compiled (what it allows, as `policy check` does); `edit` opens
//! `$VISUAL`/`$EDITOR` on a copy, validates the copy and only then puts it
//! in place (atomically, with the file's mode): a profile is never left
//! invalid by an edit, and an invalid edit is never lost.

use std::io::{BufRead, IsTerminal, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde::Serialize;
use warden_core::policy::{self, CompileContext, CompiledPolicy, Overrides, PolicyInput};

/// The file of profile `name`: a plain name, as the shim requires.
pub fn profile_path(name: &str) -> anyhow::Result<PathBuf> {
    if name.is_empty()
        || name.contains('/')
        || name == "."
        || name == ".."
        || name.starts_with('.')
        || name.contains('\0')
    {
        bail!("profile `{name}`: a profile is a plain name (no `/`, not starting with `.`)");
    }
    let name = name.strip_suffix(".yaml").unwrap_or(name);
    Ok(warden_core::paths::profiles_dir()?.join(format!("{name}.yaml")))
}

/// What the shim would compile for the file at `path` with the text `text`
/// (relative grants resolve against `path`'s directory).
pub fn compile_text(
    path: &Path,
    text: &str,
    socket: Option<&Path>,
) -> anyhow::Result<Result<CompiledPolicy, String>> {
    compile_text_with(path, text, socket, &Overrides::default())
}

/// [`compile_text`] with `overrides` (a stand-in command for a profile
/// without one).
fn compile_text_with(
    path: &Path,
    text: &str,
    socket: Option<&Path>,
    overrides: &Overrides,
) -> anyhow::Result<Result<CompiledPolicy, String>> {
    let cwd = std::env::current_dir()?;
    let ctx = CompileContext {
        home: warden_core::paths::home_dir()?,
        cwd: cwd.clone(),
        path_env: std::env::var_os("PATH"),
        // Warden's socket, to refuse grants that expose it; none if it cannot
        // be determined (the daemon checks again with its real paths).
        reserved: warden_core::paths::client_reserved(
            warden_core::paths::socket_path(socket)
                .ok()
                .map(|s| cwd.join(s))
                .as_deref(),
        ),
    };
    let input = PolicyInput {
        path: Some(path),
        text,
    };
    Ok(policy::compile(&input, overrides, &ctx).map_err(|e| e.to_string()))
}

/// What `policy show` compiles: the profile as [`compile_file`] does, except
/// that a profile without a `command:` key (one used with `warden-shim
/// --profile NAME -- CMD`, or as `wardenctl exec-server`'s ceiling, whose
/// calls bring their own) is compiled with a stand-in command, and says so
/// (`true`), so that its grants, hosts and limits can be shown.
pub fn compile_profile(
    path: &Path,
    socket: Option<&Path>,
) -> anyhow::Result<(Result<CompiledPolicy, String>, bool)> {
    let text = match policy::load_file(path) {
        Ok(t) => t,
        Err(e) => return Ok((Err(e.to_string()), false)),
    };
    let no_command = policy::parse(&text, Some(path))
        .map(|p| p.position("command").is_none())
        .unwrap_or(false);
    if !no_command {
        return Ok((compile_text(path, &text, socket)?, false));
    }
    let stand_in = Overrides {
        command: vec!["/bin/sh".into()],
        ..Overrides::default()
    };
    Ok((compile_text_with(path, &text, socket, &stand_in)?, true))
}

/// [`compile_text`] of the file itself; a file that cannot be read is an
/// invalid policy (the message says why).
pub fn compile_file(
    path: &Path,
    socket: Option<&Path>,
) -> anyhow::Result<Result<CompiledPolicy, String>> {
    match policy::load_file(path) {
        Ok(text) => compile_text(path, &text, socket),
        Err(e) => Ok(Err(e.to_string())),
    }
}

#[derive(Serialize)]
struct Row {
    profile: String,
    path: String,
    /// The policy's `name:`.
    name: Option<String>,
    command: Vec<String>,
    valid: bool,
    /// The first line of the compile error, when invalid.
    error: Option<String>,
}

/// `policy list`: every `*.yaml` in the profiles directory (dot files are
/// `edit`'s copies, not profiles), sorted by name.
pub fn list(socket: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
    let dir = warden_core::paths::profiles_dir()?;
    let mut rows = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => Some(e),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    for entry in entries.into_iter().flatten() {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let Some(stem) = file.strip_suffix(".yaml") else {
            continue;
        };
        if stem.is_empty() || file.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let row = match compile_file(&path, socket)? {
            Ok(p) => Row {
                profile: stem.to_owned(),
                path: path.display().to_string(),
                name: p.name.clone(),
                command: p.argv.clone(),
                valid: true,
                error: None,
            },
            Err(e) => Row {
                profile: stem.to_owned(),
                path: path.display().to_string(),
                name: None,
                command: vec![],
                valid: false,
                error: Some(e.lines().next().unwrap_or_default().to_owned()),
            },
        };
        rows.push(row);
    }
    rows.sort_by(|a, b| a.profile.cmp(&b.profile));
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        println!(
            "no profiles in {} (write one with `wardenctl init`, or `wardenctl wrap CLIENT`)",
            dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let width = rows
        .iter()
        .map(|r| r.profile.len())
        .max()
        .unwrap_or(0)
        .max(7);
    println!("{:width$}  STATUS   COMMAND", "PROFILE");
    for r in &rows {
        let status = if r.valid { "ok" } else { "invalid" };
        let what = match &r.error {
            Some(e) => e.clone(),
            None => r.command.join(" "),
        };
        println!("{:width$}  {status:7}  {what}", r.profile);
    }
    Ok(ExitCode::SUCCESS)
}

/// `policy show NAME`: the file's path, then the compiled policy (what
/// `policy check` prints).
pub fn show(name: &str, socket: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
    let path = profile_path(name)?;
    if !path.exists() {
        bail!(
            "no profile `{name}` ({} does not exist); `wardenctl policy list` shows the profiles",
            path.display()
        );
    }
    if !json {
        println!("# {}", path.display());
    }
    let (compiled, no_command) = compile_profile(&path, socket)?;
    crate::print_policy(compiled, no_command, json)
}

/// What ended an edit.
enum Outcome {
    Replaced,
    Unchanged,
}

/// `policy edit NAME`: `$VISUAL`, else `$EDITOR`, else `vi`, on a copy
/// (`.NAME.edit.yaml` beside the profile); the copy replaces the profile
/// only once it compiles. An invalid copy: asked to edit again on a
/// terminal, otherwise kept (its path printed) and exit 1, the profile
/// untouched.
pub fn edit(name: &str, socket: Option<&Path>) -> anyhow::Result<ExitCode> {
    let path = profile_path(name)?;
    let original = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "no profile `{name}` ({} does not exist): write one with `wardenctl init`, or `wardenctl wrap CLIENT`",
            path.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mode = std::fs::metadata(&path)?.permissions().mode() & 0o7777;
    let dir = path.parent().context("the profile has no directory")?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .context("the profile's name is not UTF-8")?;
    let copy = dir.join(format!(".{stem}.edit.yaml"));
    if copy.exists() {
        bail!(
            "{} exists: an earlier edit was kept there (another edit may be running); \
             move or remove it first",
            copy.display()
        );
    }
    write_file(&copy, &original, 0o600)?;
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    loop {
        let status = run_editor(&copy)?;
        if !status.success() {
            let _ = std::fs::remove_file(&copy);
            eprintln!(
                "wardenctl: the editor failed ({status}); {} is unchanged",
                path.display()
            );
            return Ok(ExitCode::from(1));
        }
        let edited = std::fs::read(&copy).with_context(|| format!("reading {}", copy.display()))?;
        let text = match String::from_utf8(edited.clone()) {
            Ok(t) => Ok(t),
            Err(_) => Err("the policy is not UTF-8".to_owned()),
        };
        let compiled = match text {
            Ok(t) => compile_text(&path, &t, socket)?,
            Err(e) => Err(e),
        };
        match compiled {
            Ok(p) => {
                for w in &p.warnings {
                    eprintln!("warning: {w}");
                }
                let outcome = if edited == original {
                    let _ = std::fs::remove_file(&copy);
                    Outcome::Unchanged
                } else {
                    replace(&copy, &path, mode)?;
                    Outcome::Replaced
                };
                match outcome {
                    Outcome::Replaced => println!("updated {}", path.display()),
                    Outcome::Unchanged => println!("no change to {}", path.display()),
                }
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) => {
                eprint!("{}", crate::with_newline(&e));
                if interactive && ask("edit again? [Y/n] ")? {
                    continue;
                }
                eprintln!(
                    "wardenctl: {} is unchanged; your edit is kept in {}",
                    path.display(),
                    copy.display()
                );
                return Ok(ExitCode::from(1));
            }
        }
    }
}

/// Runs the user's editor on `file` the way git does: the variable may hold
/// arguments (`code --wait`), so it goes through `sh -c`.
fn run_editor(file: &Path) -> anyhow::Result<std::process::ExitStatus> {
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .find(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "vi".to_owned());
    std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{editor} \"$@\""))
        .arg(&editor)
        .arg(file)
        .status()
        .with_context(|| format!("running the editor `{editor}`"))
}

fn ask(prompt: &str) -> anyhow::Result<bool> {
    eprint!("{prompt}");
    std::io::stderr().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let a = line.trim().to_ascii_lowercase();
    Ok(a.is_empty() || a == "y" || a == "yes")
}

/// Creates `path` (which must not exist) with `bytes` and `mode`, synced.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

/// Puts `copy` in place of `path` with `mode`: synced, then renamed (the
/// profile is the old file or the new one, never half of either), then the
/// directory synced.
fn replace(copy: &Path, path: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::set_permissions(copy, std::fs::Permissions::from_mode(mode))?;
    std::fs::File::open(copy)?.sync_all()?;
    std::fs::rename(copy, path)
        .with_context(|| format!("replacing {} with {}", path.display(), copy.display()))?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}
