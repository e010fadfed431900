//! The macOS Seatbelt backend. Here: the profile of a session, generated
//! from its compiled policy (pure text generation, no macOS call). In
//! [`fit`] (pure too, tested everywhere): what the backend refuses, the
//! session's facts and limits, and what the launcher is given (the
//! profile's context, the command line, the environment). In `launch`
//! (macOS only): `sandbox-exec -p PROFILE -- PROGRAM ARGS...` in a process
//! group of its own, its end and its signals.
//!
//! SBPL semantics relied on: for one operation the *last* matching rule
//! wins, so a later deny carves a path out of an earlier allow. Apple does
//! not document SBPL; this is what third-party SBPL guides state (e.g.
//! "Last-match semantics" in the guide at mdview.io/s/22fe803f) and is not
//! yet checked on a Mac here. So the profile is `(deny default)` first, then
//! the allows, then the protected-name denies of the write grants.
//!
//! Every path is written as an SBPL string literal inside `literal` or
//! `subpath`: never inside `regex`, so a path cannot become a pattern.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use warden_core::policy::CompiledPolicy;
use warden_sandbox::protected::PROTECTED;

pub mod fit;
#[cfg(target_os = "macos")]
pub mod launch;

pub use fit::{describe_limits, fit, sandbox_facts, Fitted};

#[cfg(target_os = "macos")]
pub use launch::spawn;

/// Off macOS there is no Seatbelt: the daemon never chooses this backend
/// there (`backend::not_in_this_build`), and a start is refused.
#[cfg(not(target_os = "macos"))]
pub async fn spawn(
    _state_dir: &Path,
    _id: &str,
    _spec: &warden_sandbox::spec::SandboxSpec,
    _policy: &CompiledPolicy,
    _fitted: &Fitted,
    _stdio: [std::os::fd::OwnedFd; 3],
    _watch: crate::stdio::Watch,
) -> Result<super::Launched, crate::error::DaemonError> {
    Err(crate::error::DaemonError::Seatbelt(format!(
        "Seatbelt (sandbox-exec) exists only on macOS; this is {}",
        std::env::consts::OS
    )))
}

/// macOS paths any dynamically linked program needs read-only, each with why.
/// Kept minimal: nothing in `/private/etc` (DNS goes through the proxy, so no
/// `resolv.conf`; no user database lookups are granted).
pub const SYSTEM_READ: &[(&str, &str)] = &[
    ("/usr/lib", "libSystem and the other system dylibs"),
    (
        "/System/Library/Frameworks",
        "system frameworks the runtime links",
    ),
    (
        "/System/Library/PrivateFrameworks",
        "frameworks the public ones load",
    ),
    (
        "/System/Volumes/Preboot/Cryptexes/OS",
        "the dyld shared cache (macOS 13+)",
    ),
    (
        "/System/Library/dyld",
        "the dyld shared cache (macOS 11-12)",
    ),
    ("/usr/share/zoneinfo", "local time for libc"),
    (
        "/private/var/db/timezone",
        "the timezone database /etc/localtime points to",
    ),
];

/// Single files read (and for the null device, written) by the runtime.
pub const SYSTEM_LITERALS: &[(&str, &str)] = &[
    ("/dev/null", "read and written by nearly every program"),
    ("/dev/urandom", "randomness (node, python hash seeds)"),
    ("/dev/random", "randomness"),
    ("/private/etc/localtime", "local time for libc"),
];

/// Mach services the runtime looks up; each is a named system daemon.
pub const MACH_LOOKUP: &[(&str, &str)] = &[
    (
        "com.apple.system.logger",
        "libSystem's logging (os_log/asl)",
    ),
    (
        "com.apple.system.notification_center",
        "notify(3), used by libc for timezone changes",
    ),
];

/// What a profile needs that is not in the policy.
#[derive(Debug, Clone)]
pub struct SeatbeltContext {
    /// The session's egress proxy port on loopback.
    pub proxy_port: u16,
    /// The session's scratch (TMPDIR) directory, read-write.
    pub scratch: PathBuf,
    /// Install prefixes of the program's runtime (e.g. node's or python's
    /// prefix), read-only.
    pub runtime_dirs: Vec<PathBuf>,
    /// Runtime binaries the program may exec besides itself (e.g. the node
    /// binary a launcher script re-execs).
    pub runtime_exec: Vec<PathBuf>,
    /// Warden's own files and directories (its state and policy
    /// directories, the policy file, its binaries): denied for writing
    /// wherever a write grant holds them, like the protected names.
    pub protect: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SeatbeltError {
    #[error("path {0:?} is not valid UTF-8")]
    NotUtf8(PathBuf),
    #[error("path {0:?} contains a control character")]
    ControlChar(PathBuf),
    #[error("path {0:?} is not absolute")]
    NotAbsolute(PathBuf),
}

/// An SBPL string literal for `path`: `"` and `\` escaped, control characters
/// and non-UTF-8 refused.
pub fn quote(path: &Path) -> Result<String, SeatbeltError> {
    let s = path
        .to_str()
        .ok_or_else(|| SeatbeltError::NotUtf8(path.to_path_buf()))?;
    if !path.is_absolute() {
        return Err(SeatbeltError::NotAbsolute(path.to_path_buf()));
    }
    if s.chars().any(char::is_control) {
        return Err(SeatbeltError::ControlChar(path.to_path_buf()));
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// The protected paths of write grant `grant`: each name matched relative to
/// the grant and to its ancestors, kept inside the grant (as the Linux plan).
/// `unless_dir` names (`.git`) are denied as a literal only, so an existing
/// repository's data stays writable while its hooks and config do not.
fn protected_in(grant: &Path) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    for row in PROTECTED {
        for base in grant.ancestors() {
            let p = base.join(row.name);
            if p.starts_with(grant) {
                out.push((p, !row.unless_dir));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The profile of `p` under `ctx`.
pub fn profile(p: &CompiledPolicy, ctx: &SeatbeltContext) -> Result<String, SeatbeltError> {
    let mut s = String::new();
    let w = &mut s;
    // Writes to a String cannot fail.
    let _ = writeln!(w, "(version 1)");
    let _ = writeln!(w, "(deny default)");
    let _ = writeln!(w, "; the runtime: processes, sysctls, system libraries");
    let _ = writeln!(w, "(allow process-fork)");
    let _ = writeln!(w, "(allow signal (target same-sandbox))");
    let _ = writeln!(w, "(allow sysctl-read)");
    for (name, why) in MACH_LOOKUP {
        let _ = writeln!(w, "(allow mach-lookup (global-name \"{name}\")) ; {why}");
    }
    // The root directory itself (not its contents): path resolution stats it.
    let _ = writeln!(w, "(allow file-read-metadata (literal \"/\"))");
    for (path, why) in SYSTEM_READ {
        let _ = writeln!(
            w,
            "(allow file-read* (subpath {})) ; {why}",
            quote(Path::new(path))?
        );
    }
    for (path, why) in SYSTEM_LITERALS {
        let _ = writeln!(
            w,
            "(allow file-read* (literal {})) ; {why}",
            quote(Path::new(path))?
        );
    }
    let _ = writeln!(w, "(allow file-write-data (literal \"/dev/null\"))");
    let _ = writeln!(w, "; the program and its runtime");
    let _ = writeln!(w, "(allow file-read* (literal {}))", quote(&p.program)?);
    let _ = writeln!(w, "(allow process-exec (literal {}))", quote(&p.program)?);
    for d in &ctx.runtime_dirs {
        let _ = writeln!(w, "(allow file-read* (subpath {}))", quote(d)?);
    }
    for b in &ctx.runtime_exec {
        let _ = writeln!(w, "(allow process-exec (literal {}))", quote(b)?);
    }
    let _ = writeln!(w, "; the session's scratch directory");
    let _ = writeln!(
        w,
        "(allow file-read* file-write* (subpath {}))",
        quote(&ctx.scratch)?
    );
    let _ = writeln!(w, "; read grants");
    for g in &p.read {
        let _ = writeln!(w, "(allow file-read* (subpath {}))", quote(g)?);
    }
    let _ = writeln!(w, "; write grants");
    for g in &p.write {
        let _ = writeln!(w, "(allow file-read* file-write* (subpath {}))", quote(g)?);
    }
    let _ = writeln!(
        w,
        "; protected names in write grants: after the allows, so they win"
    );
    for g in &p.write {
        for (path, sub) in protected_in(g) {
            let filter = if sub { "subpath" } else { "literal" };
            let _ = writeln!(w, "(deny file-write* ({filter} {}))", quote(&path)?);
        }
    }
    let mut own: Vec<&PathBuf> = ctx
        .protect
        .iter()
        .filter(|o| p.write.iter().any(|g| o.starts_with(g)))
        .collect();
    own.sort();
    own.dedup();
    if !own.is_empty() {
        let _ = writeln!(w, "; Warden's own files inside write grants");
    }
    for o in own {
        let _ = writeln!(w, "(deny file-write* (subpath {}))", quote(o)?);
    }
    let _ = writeln!(
        w,
        "; network: only the session's proxy on loopback; no inbound, no unix sockets"
    );
    if !p.network.allow.is_empty() {
        let _ = writeln!(
            w,
            "(allow network-outbound (remote ip \"localhost:{}\"))",
            ctx.proxy_port
        );
    }
    Ok(s)
}
