//! The semantic rules, one small function each. Each returns the one [`Invalid`]
//! variant it can fail with; the caller attaches where the value came from (a key
//! path in the file, or a flag).

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// Why one value was refused. The message names the bad value; the key is added
/// by the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Invalid {
    #[error("path is empty")]
    EmptyPath,
    #[error("{what} contains a NUL byte: {value:?}")]
    Nul { what: &'static str, value: String },
    #[error("`{0}`: `~user` is not supported; write the full path")]
    TildeUser(String),
    #[error("path is not valid UTF-8: {0}")]
    NotUtf8(String),
    #[error(
        "refusing to grant `/` (the whole filesystem); grant only the directories the server needs"
    )]
    Root,
    #[error("path does not exist: {0}")]
    Missing(String),
    #[error("cannot inspect {path}: {reason}")]
    Inaccessible { path: String, reason: String },
    #[error("path is a symlink: {path}; {hint}")]
    IsSymlink { path: String, hint: String },
    #[error("path {path} passes through the symlink {link}; {hint}")]
    ThroughSymlink {
        path: String,
        link: String,
        hint: String,
    },
    #[error("cwd {0} is not a directory")]
    CwdNotDir(String),
    #[error("cwd {0} is not inside any filesystem grant")]
    CwdOutsideGrants(String),
    #[error("program name is empty")]
    EmptyProgram,
    #[error("program does not exist: {0}")]
    ProgramMissing(String),
    #[error("program is not a regular file: {0}")]
    ProgramNotFile(String),
    #[error("program is not executable: {0}")]
    ProgramNotExecutable(String),
    #[error("command `{0}` not found on PATH")]
    NotOnPath(String),
    #[error("command is empty; give the program and its arguments as a list, e.g. [\"npx\", \"-y\", \"pkg\"]")]
    EmptyCommand,
    #[error("unsupported policy version {0}; this version of Warden reads version 1")]
    Version(i64),
    #[error("invalid name `{0}`: use 1 to 64 characters from A-Z, a-z, 0-9, `.`, `_` and `-`")]
    Name(String),
    #[error("{grant} {relation}; granting it, even read-only, hands the server what it holds (a Unix socket in a grant hands over its service: connect works on a read-only mount); grant a narrower path, or list {need} in filesystem.dangerously_expose to grant it anyway")]
    Reserved {
        grant: String,
        /// "is Warden's control socket directory", "lies inside /run (...)".
        relation: String,
        /// The paths to list, each in backticks.
        need: String,
    },
    #[error("the policy file {policy} lies inside this write grant ({grant}): the server could rewrite its own policy for its next session; keep the policy outside the directories it grants for writing")]
    PolicyInsideWrite { policy: String, grant: String },
    #[error("{grant} {what}: a server that can write there can change what your shell, git, editors and Warden itself run next; grant only the directories the server needs, or set filesystem.allow_home_write: true")]
    HomeWrite { grant: String, what: String },
    #[error("`{name}` cannot be passed through: {why}")]
    EnvRefused { name: String, why: &'static str },
    #[error("variable name is empty")]
    EmptyEnvName,
    #[error("invalid variable name `{0}`: a name cannot contain `=`")]
    EnvNameEquals(String),
    /// A `network.allow` entry; the message (from [`super::net`]) names it.
    #[error("{0}")]
    NetworkEntry(String),
    #[error("unknown mode `{0}`: use `proxy` (the proxy variables only), `transparent` (the sandbox's own resolver and connect hand-over only) or `both`")]
    NetMode(String),
    #[error("unknown backend `{0}`: use `auto` (this platform's own sandbox, else Docker), `linux`, `docker` or `macos`")]
    Backend(String),
    #[error("`{0}` is not a Docker image reference: use a name such as `debian:12`, `registry.example:5000/team/server:1.2` or `sha256:<digest>` (letters, digits and `._-/:@`, starting with a letter or digit, at most 255 characters)")]
    DockerImage(String),
    #[error("{0}")]
    ToolPattern(String),
    #[error("unknown pin mode `{0}`: use `flag` (record changed tool definitions, the default), `enforce` (also withhold new and changed tools until a person accepts them with `wardenctl approve`) or `off`")]
    McpPin(String),
    #[error("unknown level `{0}`: use `denied` (record the accesses the sandbox denies), `all` (every access) or `off`")]
    AuditFiles(String),
    #[error("{0} is out of range: must be between 0.01 and 1024 (CPU cores, e.g. 0.5)")]
    Cpu(String),
    #[error("{value} is out of range: must be between {min} and {max} ({unit})")]
    Range {
        value: i64,
        min: i64,
        max: i64,
        unit: &'static str,
    },
}

/// A lowercase description of an I/O error, without the "(os error N)" tail.
fn io_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "not found".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => {
            let s = e.to_string();
            let s = s.split(" (os error").next().unwrap_or(&s);
            let mut chars = s.chars();
            chars.next().map_or_else(String::new, |c| {
                c.to_lowercase().chain(chars).collect::<String>()
            })
        }
    }
}

fn show(p: &Path) -> String {
    p.display().to_string()
}

/// Lexical normalisation: drops `.`, resolves `..` against the preceding component
/// (`/..` is `/`). Does not touch the filesystem.
pub(crate) fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => out.push(c.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(s) => out.push(s),
        }
    }
    out
}

pub(crate) fn not_empty(raw: &str) -> Result<(), Invalid> {
    if raw.is_empty() {
        return Err(Invalid::EmptyPath);
    }
    Ok(())
}

pub(crate) fn no_nul(what: &'static str, raw: &str) -> Result<(), Invalid> {
    if raw.contains('\0') {
        return Err(Invalid::Nul {
            what,
            value: raw.to_owned(),
        });
    }
    Ok(())
}

/// `~` and `~/x` expand to `home`; `~user` is refused (we do not read passwd).
pub(crate) fn expand_tilde(raw: &str, home: &Path) -> Result<PathBuf, Invalid> {
    match raw.strip_prefix('~') {
        None => Ok(PathBuf::from(raw)),
        Some("") => Ok(home.to_path_buf()),
        Some(rest) => match rest.strip_prefix('/') {
            Some(rest) => Ok(home.join(rest)),
            None => Err(Invalid::TildeUser(raw.to_owned())),
        },
    }
}

pub(crate) fn utf8(p: &Path) -> Result<(), Invalid> {
    if p.to_str().is_none() {
        return Err(Invalid::NotUtf8(p.to_string_lossy().into_owned()));
    }
    Ok(())
}

pub(crate) fn not_root(p: &Path) -> Result<(), Invalid> {
    if p.parent().is_none() {
        return Err(Invalid::Root);
    }
    Ok(())
}

fn real_path_hint(p: &Path) -> String {
    match fs::canonicalize(p) {
        Ok(real) => format!("grant the real path {} instead", real.display()),
        Err(_) => "its target does not exist".into(),
    }
}

/// Every component of the absolute, normalised `p` exists and none is a symlink.
/// A grant through a symlink could be redirected between sessions by whoever can
/// write the directory holding the link (the sandboxed server itself, for a link
/// inside a write grant), so the user must name the real path.
pub(crate) fn exists_without_symlinks(p: &Path) -> Result<(), Invalid> {
    let mut prefix = PathBuf::new();
    for c in p.components() {
        prefix.push(c.as_os_str());
        if !matches!(c, Component::Normal(_)) {
            continue;
        }
        match fs::symlink_metadata(&prefix) {
            Ok(m) if m.file_type().is_symlink() => {
                let hint = real_path_hint(p);
                return Err(if prefix == p {
                    Invalid::IsSymlink {
                        path: show(p),
                        hint,
                    }
                } else {
                    Invalid::ThroughSymlink {
                        path: show(p),
                        link: show(&prefix),
                        hint,
                    }
                });
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Invalid::Missing(show(p)));
            }
            Err(e) => {
                return Err(Invalid::Inaccessible {
                    path: show(&prefix),
                    reason: io_reason(&e),
                })
            }
        }
    }
    Ok(())
}

/// Turns a path as written into an absolute, normalised path, without touching
/// the filesystem: NUL, `~`, relative to `base`, `.`/`..`, UTF-8.
pub(crate) fn absolute(raw: &str, base: &Path, home: &Path) -> Result<PathBuf, Invalid> {
    not_empty(raw)?;
    no_nul("path", raw)?;
    let expanded = expand_tilde(raw, home)?;
    let p = normalize(&base.join(expanded));
    utf8(&p)?;
    Ok(p)
}

/// A filesystem grant: absolute, normalised, not `/`, existing, no symlinks.
pub(crate) fn grant(raw: &str, base: &Path, home: &Path) -> Result<PathBuf, Invalid> {
    let p = absolute(raw, base, home)?;
    not_root(&p)?;
    exists_without_symlinks(&p)?;
    Ok(p)
}

/// The working directory: `/tmp` (the sandbox's own), or an existing directory,
/// without symlinks, inside one of `grants`.
pub(crate) fn cwd(
    raw: &str,
    base: &Path,
    home: &Path,
    grants: &[&PathBuf],
) -> Result<PathBuf, Invalid> {
    let p = absolute(raw, base, home)?;
    if p == Path::new("/tmp") {
        return Ok(p);
    }
    exists_without_symlinks(&p)?;
    if !p.is_dir() {
        return Err(Invalid::CwdNotDir(show(&p)));
    }
    cwd_inside_grants(&p, grants)?;
    Ok(p)
}

pub(crate) fn cwd_inside_grants(p: &Path, grants: &[&PathBuf]) -> Result<(), Invalid> {
    if p == Path::new("/tmp") || grants.iter().any(|g| p.starts_with(g)) {
        return Ok(());
    }
    Err(Invalid::CwdOutsideGrants(show(p)))
}

fn is_executable_file(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// An explicit program path must exist, be a regular file and be executable.
pub(crate) fn executable(p: &Path) -> Result<(), Invalid> {
    let m = fs::metadata(p).map_err(|_| Invalid::ProgramMissing(show(p)))?;
    if !m.is_file() {
        return Err(Invalid::ProgramNotFile(show(p)));
    }
    if m.permissions().mode() & 0o111 == 0 {
        return Err(Invalid::ProgramNotExecutable(show(p)));
    }
    Ok(())
}

/// Resolves argv[0] to the canonical path of the program that will be exec'd.
/// `base` is where a relative path with a `/` starts; `cwd` is where relative PATH
/// entries start (empty PATH entries are skipped, not taken as the cwd).
pub(crate) fn program(
    argv0: &str,
    base: &Path,
    home: &Path,
    path_env: Option<&OsStr>,
    cwd: &Path,
) -> Result<PathBuf, Invalid> {
    if argv0.is_empty() {
        return Err(Invalid::EmptyProgram);
    }
    no_nul("program", argv0)?;
    let found = if argv0.contains('/') || argv0.starts_with('~') {
        let p = absolute(argv0, base, home)?;
        executable(&p)?;
        p
    } else {
        path_env
            .into_iter()
            .flat_map(std::env::split_paths)
            .filter(|dir| !dir.as_os_str().is_empty())
            .map(|dir| normalize(&cwd.join(dir).join(argv0)))
            .find(|p| is_executable_file(p))
            .ok_or_else(|| Invalid::NotOnPath(argv0.to_owned()))?
    };
    let real = fs::canonicalize(&found).map_err(|e| Invalid::Inaccessible {
        path: show(&found),
        reason: io_reason(&e),
    })?;
    utf8(&real)?;
    Ok(real)
}

pub(crate) fn argument(arg: &str) -> Result<(), Invalid> {
    no_nul("argument", arg)
}

pub(crate) fn version(v: i64) -> Result<(), Invalid> {
    if v != 1 {
        return Err(Invalid::Version(v));
    }
    Ok(())
}

pub(crate) fn name(n: &str) -> Result<(), Invalid> {
    let ok = (1..=64).contains(&n.len())
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok {
        return Err(Invalid::Name(n.to_owned()));
    }
    Ok(())
}

pub(crate) fn env_name(n: &str) -> Result<(), Invalid> {
    if n.is_empty() {
        return Err(Invalid::EmptyEnvName);
    }
    if n.contains('=') {
        return Err(Invalid::EnvNameEquals(n.to_owned()));
    }
    no_nul("variable name", n)?;
    if let Some(why) = env_refused(n) {
        return Err(Invalid::EnvRefused {
            name: n.to_owned(),
            why,
        });
    }
    Ok(())
}

/// Names `env.allow` refuses, and why: the ones that steer the dynamic loader
/// or make glibc load or run code from a path the value names, and Warden's
/// own. Compared without regard to ASCII case (no spelling gets through).
///
/// The rest of glibc's "unsecure" list (what it strips for setuid programs:
/// `HOSTALIASES`, `LOCALDOMAIN`, `RES_OPTIONS`, `RESOLV_HOST_CONF`,
/// `LOCPATH`, `NLSPATH`, `MALLOC_TRACE`, `TZDIR`, `TMPDIR`) is allowed: those
/// name data the program reads or writes in the sandbox's own view, where
/// nothing is privileged (no setuid, no capabilities), so they give the server
/// nothing it could not do itself; the resolver ones have no resolver to steer.
pub(crate) const ENV_REFUSED: &[(&str, &str)] = &[
    (
        "LD_*",
        "LD_* variables steer the dynamic loader (which libraries every program in the sandbox loads, and from where)",
    ),
    (
        "WARDEN_*",
        "WARDEN_* variables configure Warden itself (its socket, its logs), not the server",
    ),
    (
        "GCONV_PATH",
        "it makes glibc load shared objects (iconv modules) from the directory it names",
    ),
    (
        "GETCONF_DIR",
        "it makes getconf run programs from the directory it names",
    ),
    (
        "GLIBC_TUNABLES",
        "it is parsed by the dynamic loader itself before any program runs (CVE-2023-4911)",
    ),
];

fn env_refused(n: &str) -> Option<&'static str> {
    let upper = n.to_ascii_uppercase();
    ENV_REFUSED.iter().find_map(|(pat, why)| {
        let hit = match pat.strip_suffix('*') {
            Some(prefix) => upper.starts_with(prefix),
            None => upper == *pat,
        };
        hit.then_some(*why)
    })
}

/// `audit.files`: `denied`, `all` or `off`.
pub(crate) fn audit_files(v: &str) -> Result<super::FileAudit, Invalid> {
    match v {
        "denied" => Ok(super::FileAudit::Denied),
        "all" => Ok(super::FileAudit::All),
        "off" => Ok(super::FileAudit::Off),
        other => Err(Invalid::AuditFiles(other.to_owned())),
    }
}

/// `mcp.pin`.
pub(crate) fn mcp_pin(v: &str) -> Result<super::PinMode, Invalid> {
    super::PinMode::parse(v).ok_or_else(|| Invalid::McpPin(v.to_owned()))
}

/// An `mcp.tools.allow`/`deny` entry: a tool name, or a glob of one.
pub(crate) fn tool_pattern(v: &str) -> Result<String, Invalid> {
    super::ToolPattern::check(v)
        .map(|()| v.to_owned())
        .map_err(Invalid::ToolPattern)
}

/// `docker.image`: a Docker image reference (or id). Strict on purpose: it
/// becomes an argument of the docker command line, so it can never start
/// with `-` or hold a space.
pub(crate) fn docker_image(v: &str) -> Result<String, Invalid> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "._-/:@".contains(c);
    let ok = !v.is_empty()
        && v.len() <= 255
        && v.starts_with(|c: char| c.is_ascii_alphanumeric())
        && v.chars().all(ok_char);
    if ok {
        Ok(v.to_owned())
    } else {
        Err(Invalid::DockerImage(v.to_owned()))
    }
}

pub(crate) fn timeout_s(v: i64) -> Result<u64, Invalid> {
    in_range(v, 1, 604_800, "seconds, up to 7 days")
}

pub(crate) fn memory_mb(v: i64) -> Result<u64, Invalid> {
    in_range(v, 16, 1_048_576, "MiB, up to 1 TiB")
}

pub(crate) fn landlock_min_abi(v: i64) -> Result<u32, Invalid> {
    in_range(v, 1, 64, "Landlock ABI version").map(|v| v as u32)
}

pub(crate) fn pids(v: i64) -> Result<u64, Invalid> {
    in_range(v, 1, 65_536, "processes and threads")
}

pub(crate) fn tmp_mb(v: i64) -> Result<u64, Invalid> {
    in_range(v, 1, 1_048_576, "MiB, up to 1 TiB")
}

/// `limits.output_kb`: 1 KiB to 1 GiB per stream.
pub(crate) fn output_kb(v: i64) -> Result<u64, Invalid> {
    in_range(v, 1, 1_048_576, "KiB, up to 1 GiB")
}

pub(crate) fn cpu(v: f64) -> Result<f64, Invalid> {
    if v.is_finite() && (0.01..=1024.0).contains(&v) {
        Ok(v)
    } else {
        Err(Invalid::Cpu(v.to_string()))
    }
}

fn in_range(value: i64, min: i64, max: i64, unit: &'static str) -> Result<u64, Invalid> {
    if !(min..=max).contains(&value) {
        return Err(Invalid::Range {
            value,
            min,
            max,
            unit,
        });
    }
    Ok(value as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_is_lexical() {
        let cases = [
            ("/a/./b/../c", "/a/c"),
            ("/..", "/"),
            ("/a/b/../../..", "/"),
            ("/a//b/", "/a/b"),
            ("/", "/"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(Path::new(input)), PathBuf::from(want), "{input}");
        }
    }

    #[test]
    fn tilde_expansion() {
        let home = Path::new("/home/u");
        assert_eq!(expand_tilde("~", home), Ok(PathBuf::from("/home/u")));
        assert_eq!(
            expand_tilde("~/x/y", home),
            Ok(PathBuf::from("/home/u/x/y"))
        );
        assert_eq!(expand_tilde("a/~", home), Ok(PathBuf::from("a/~")));
        assert_eq!(
            expand_tilde("~bob/x", home).unwrap_err().to_string(),
            "`~bob/x`: `~user` is not supported; write the full path"
        );
    }

    #[test]
    fn names() {
        for ok in ["a", "github", "my-server_2.0", &"x".repeat(64)] {
            assert_eq!(name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a b", "é", "a/b", &"x".repeat(65)] {
            assert_eq!(name(bad), Err(Invalid::Name(bad.to_owned())), "{bad}");
        }
    }

    #[test]
    fn ranges() {
        assert_eq!(timeout_s(1), Ok(1));
        assert_eq!(timeout_s(604_800), Ok(604_800));
        assert_eq!(
            timeout_s(0).unwrap_err().to_string(),
            "0 is out of range: must be between 1 and 604800 (seconds, up to 7 days)"
        );
        assert!(timeout_s(604_801).is_err());
        assert_eq!(memory_mb(16), Ok(16));
        assert_eq!(memory_mb(1_048_576), Ok(1_048_576));
        assert_eq!(
            memory_mb(-1).unwrap_err().to_string(),
            "-1 is out of range: must be between 16 and 1048576 (MiB, up to 1 TiB)"
        );
    }

    #[test]
    fn env_names() {
        assert_eq!(env_name("GITHUB_TOKEN"), Ok(()));
        assert_eq!(
            env_name("").unwrap_err().to_string(),
            "variable name is empty"
        );
        assert_eq!(
            env_name("A=B").unwrap_err().to_string(),
            "invalid variable name `A=B`: a name cannot contain `=`"
        );
        assert_eq!(
            env_name("A\0B").unwrap_err().to_string(),
            "variable name contains a NUL byte: \"A\\0B\""
        );
    }

    #[test]
    fn loader_and_warden_variables_are_refused() {
        let ld = "LD_* variables steer the dynamic loader (which libraries every program in the sandbox loads, and from where)";
        for (name, why) in [
            ("LD_PRELOAD", ld),
            ("LD_LIBRARY_PATH", ld),
            ("LD_AUDIT", ld),
            ("ld_preload", ld),
            ("LD_", ld),
            (
                "WARDEN_SOCKET",
                "WARDEN_* variables configure Warden itself (its socket, its logs), not the server",
            ),
            (
                "warden_log",
                "WARDEN_* variables configure Warden itself (its socket, its logs), not the server",
            ),
            (
                "GCONV_PATH",
                "it makes glibc load shared objects (iconv modules) from the directory it names",
            ),
            (
                "GETCONF_DIR",
                "it makes getconf run programs from the directory it names",
            ),
            (
                "GLIBC_TUNABLES",
                "it is parsed by the dynamic loader itself before any program runs (CVE-2023-4911)",
            ),
        ] {
            assert_eq!(
                env_name(name),
                Err(Invalid::EnvRefused {
                    name: name.to_owned(),
                    why
                }),
                "{name}"
            );
        }
        assert_eq!(
            env_name("LD_PRELOAD").unwrap_err().to_string(),
            format!("`LD_PRELOAD` cannot be passed through: {ld}")
        );
        // Controls: names that only look alike, and the data-path variables
        // glibc strips for setuid programs, which are allowed.
        for ok in [
            "OLD_PATH",
            "LDFLAGS",
            "XLD_PRELOAD",
            "MY_WARDEN_TOKEN",
            "WARDEN",
            "TMPDIR",
            "TZDIR",
            "LOCPATH",
            "NLSPATH",
            "HOSTALIASES",
            "LOCALDOMAIN",
            "RES_OPTIONS",
            "RESOLV_HOST_CONF",
            "MALLOC_TRACE",
            "GCONV_PATHS",
        ] {
            assert_eq!(env_name(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn root_is_refused_however_spelled() {
        for raw in ["/", "/..", "/tmp/..", "//"] {
            assert_eq!(
                grant(raw, Path::new("/tmp"), Path::new("/root")),
                Err(Invalid::Root),
                "{raw}"
            );
        }
    }
}
