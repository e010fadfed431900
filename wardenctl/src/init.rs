//! `wardenctl init [--log FILE] [--output FILE] [--name NAME] [--call TOOL
//! JSON]... [-- CMD [ARGS...]]` (docs/init.md, "init"): a starter policy from
//! a trace (`--log`, a `wardenctl trace` file) or from tracing the command
//! first (`--mcp`, so the server starts up and lists what it offers).
//!
//! From the trace's successful accesses only (what exists on the host now):
//! nothing the sandbox gives every server (the runtime, its own `/proc`,
//! `/dev`, `/tmp`), reads apart from writes, files collapsed into the smallest
//! sensible directory — a package tree (`node_modules`, a virtualenv, an
//! `npx` or `uv` cache entry) becomes that package tree, a directory with
//! [`SIBLINGS`] or more entries used becomes the directory, never `/`, a
//! top-level directory, `$HOME`, or a whole `~/.config`, `~/.cache`,
//! `~/.local` — the hosts connected to with their ports, the command; each
//! grant with a comment saying what the trace saw, secrets with a warning.
//! The text is compiled by the policy engine before it is written, to a new
//! file only.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use warden_audit::{Decision, Record, RecordType};
use warden_core::policy::sensitive::sensitive;

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// Build from this trace (a `wardenctl trace` file) instead of tracing.
    #[arg(long, value_name = "FILE", conflicts_with = "command")]
    log: Option<PathBuf>,
    /// Write the policy here (default: the policies directory, NAME.yaml,
    /// so `warden-shim --profile NAME` runs it). Never over an existing file.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// The policy's name (default: from the command).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// While tracing: call TOOL with the arguments JSON, an object (repeatable).
    #[arg(long, num_args = 2, value_names = ["TOOL", "JSON"], conflicts_with = "log")]
    call: Vec<String>,
    /// While tracing: show the host's directories read-write, so what the
    /// server writes (its data file, a cache) is seen and granted.
    #[arg(long, conflicts_with = "log")]
    allow_writes: bool,
    /// Pass this variable through whether or not the trace shows it used
    /// (repeatable; `wardenctl wrap` gives the names an MCP client's
    /// config sets for the server).
    #[arg(long = "allow-env", value_name = "NAME")]
    allow_env: Vec<String>,
    /// While tracing: how long each MCP request may take.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = crate::trace::per_request)]
    timeout: Duration,
    /// Read the store of this state directory (default: the running daemon's).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The server to trace (with `--mcp`) when there is no --log.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Programs that fetch and run a package (their cache is written to).
const PACKAGE_RUNNERS: &[&str] = &["npx", "bunx", "uvx", "pipx"];

/// Entries of one directory used from which the directory is granted.
pub const SIBLINGS: usize = 3;

/// Accesses that change what is at a path.
const WRITES: &[&str] = &[
    "open-write",
    "create",
    "mkdir",
    "mknod",
    "unlink",
    "rmdir",
    "rename",
    "link",
    "symlink",
    "truncate",
    "chmod",
    "chown",
];
/// Of those, the ones the kernel checks on the directory (an entry made,
/// removed or renamed).
const ENTRY_WRITES: &[&str] = &[
    "create", "mkdir", "mknod", "unlink", "rmdir", "rename", "link", "symlink",
];

/// One grant of the starter policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    pub path: PathBuf,
    pub why: String,
    pub warning: Option<String>,
}

/// The starter policy, before it is written out.
#[derive(Debug, Default)]
pub struct Starter {
    pub name: String,
    pub command: Vec<String>,
    pub cwd: Option<PathBuf>,
    pub read: Vec<Granted>,
    pub write: Vec<Granted>,
    /// `host:port` (with ` private` when it resolved to a private address),
    /// and how often.
    pub hosts: Vec<(String, u64, bool)>,
    pub env_names: Vec<String>,
    /// The names whose value (in this environment) is a path the trace used
    /// or a host it connected to: the server read those, most likely.
    pub env_used: Vec<(String, String)>,
    /// Left out on purpose, for the header comment.
    pub left_out: Vec<String>,
    /// The trace's peak (`session.exit` `peak`): memory bytes, processes.
    pub peak: Option<(u64, u64)>,
}

/// The limits a starter sets from a trace's peak: twice the memory (at
/// least 256 MiB) and four times the processes (at least 256: threads count
/// against `pids` too, and a trace sees processes only). A trace's start-up
/// and listings are light work; the floors leave room for real calls.
pub fn limits_from(peak_bytes: u64, processes: u64) -> (u64, u64) {
    let mb = peak_bytes.div_ceil(1 << 20);
    ((mb * 2).max(256), (processes * 4).max(256))
}

/// Where a grant may not go: the user's home (for the broad names below
/// it) and Warden's own paths (a grant may not hold them, nor lie inside a
/// reserved subtree).
#[derive(Clone, Copy)]
pub struct Bounds<'a> {
    pub home: Option<&'a Path>,
    pub reserved: &'a [warden_core::policy::Reserved],
}

impl Bounds<'_> {
    fn refuses(&self, path: &Path) -> bool {
        crate::suggest::too_broad(path, self.home)
            || self
                .reserved
                .iter()
                .any(|r| r.path.starts_with(path) || (r.subtree && path.starts_with(&r.path)))
    }
}

/// What every sandbox has without a grant: the runtime, its own file
/// systems (except the host's `/tmp` entries a trace showed, which exist on
/// the host), the runtime's `/etc` entries.
fn provided(path: &Path) -> bool {
    use warden_core::runtime::{PRIVATE_DIRS, RUNTIME_DIRS, RUNTIME_ETC};
    if RUNTIME_DIRS.iter().any(|d| path.starts_with(d)) {
        return true;
    }
    if let Ok(rest) = path.strip_prefix("/etc") {
        // The runtime's entries, those the sandbox writes itself, and the
        // resolver's, absent on purpose (names resolve in the proxy).
        const OWN: &[&str] = &["passwd", "group", "hosts", "resolv.conf"];
        return rest.components().next().is_some_and(|c| {
            let c = c.as_os_str().to_string_lossy();
            RUNTIME_ETC.contains(&c.as_ref()) || OWN.contains(&c.as_ref())
        });
    }
    PRIVATE_DIRS
        .iter()
        .filter(|d| **d != "/tmp")
        .any(|d| path.starts_with(d))
}

/// A package tree `path` lies in, when it is one: the `node_modules` (the
/// first on the way), a virtualenv (the directory above `lib/pythonX.Y`), an
/// `npx` cache entry (`~/.npm/_npx/ID`), a uv or pip cache entry
/// (`~/.cache/uv/X/Y`).
fn package_root(path: &Path, home: Option<&Path>) -> Option<PathBuf> {
    let parts: Vec<Component<'_>> = path.components().collect();
    let name = |i: usize| parts.get(i).map(|c| c.as_os_str().to_string_lossy());
    for i in 0..parts.len() {
        let n = name(i)?;
        if n == "node_modules" {
            return Some(parts[..=i].iter().collect());
        }
        if n == "lib" && name(i + 1).is_some_and(|p| p.starts_with("python")) && i > 1 {
            return Some(parts[..i].iter().collect());
        }
    }
    let home = home?;
    for (cache, depth) in [(".npm/_npx", 1), (".cache/uv", 2), (".cache/pip", 2)] {
        let base = home.join(cache);
        if let Ok(rest) = path.strip_prefix(&base) {
            let mut p = base;
            for c in rest.components().take(depth) {
                p.push(c);
            }
            return (p != path || rest.components().count() == depth).then_some(p);
        }
    }
    None
}

/// What the accesses of one grant were, in a comment.
fn described(seen: &BTreeMap<String, u64>, paths: usize) -> String {
    let total: u64 = seen.values().sum();
    let acts: Vec<String> = seen
        .iter()
        .map(|(a, n)| {
            if a.contains(' ') {
                a.clone()
            } else {
                format!("{a} ×{n}")
            }
        })
        .collect();
    if paths > 1 {
        format!("{paths} paths below it used ({})", acts.join(", "))
    } else if total > 0 {
        acts.join(", ")
    } else {
        "used".into()
    }
}

/// Collapses the paths of one kind into grants.
fn collapse(
    used: &BTreeMap<PathBuf, BTreeMap<String, u64>>,
    bounds: Bounds<'_>,
    packages: bool,
) -> Vec<(PathBuf, BTreeMap<String, u64>, usize)> {
    let home = bounds.home;
    // 1. Package trees.
    let mut groups: BTreeMap<PathBuf, (BTreeMap<String, u64>, BTreeSet<PathBuf>)> = BTreeMap::new();
    for (p, seen) in used {
        let key = packages
            .then(|| package_root(p, home))
            .flatten()
            .filter(|r| !bounds.refuses(r))
            .unwrap_or_else(|| p.clone());
        let g = groups.entry(key).or_default();
        for (a, n) in seen {
            *g.0.entry(a.clone()).or_default() += n;
        }
        g.1.insert(p.clone());
    }
    // 2. Directories with enough entries used, bottom up, until nothing moves.
    loop {
        let mut by_parent: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
        for k in groups.keys() {
            if let Some(parent) = k.parent() {
                by_parent
                    .entry(parent.to_path_buf())
                    .or_default()
                    .push(k.clone());
            }
        }
        let Some((dir, kids)) = by_parent
            .into_iter()
            .filter(|(d, kids)| kids.len() >= SIBLINGS && !bounds.refuses(d))
            .max_by_key(|(d, _)| d.components().count())
        else {
            break;
        };
        let mut merged: (BTreeMap<String, u64>, BTreeSet<PathBuf>) =
            groups.remove(&dir).unwrap_or_default();
        for k in kids {
            if let Some((seen, paths)) = groups.remove(&k) {
                for (a, n) in seen {
                    *merged.0.entry(a).or_default() += n;
                }
                merged.1.extend(paths);
            }
        }
        groups.insert(dir, merged);
    }
    // 3. What may not be granted goes first (a listing of a directory that
    // holds Warden's files must not swallow the grants below it), then a
    // grant below another one.
    groups.retain(|k, _| !bounds.refuses(k));
    let keys: Vec<PathBuf> = groups.keys().cloned().collect();
    groups
        .into_iter()
        .filter(|(k, _)| !keys.iter().any(|o| o != k && k.starts_with(o)))
        .map(|(k, (seen, paths))| (k, seen, paths.len()))
        .collect()
}

/// Whether `addr` (`IP:port`, `[IPv6]:port`) is of a class a plain
/// `network.allow` name entry does not reach (Warden's own classes: private,
/// loopback, link-local, CGNAT, documentation ranges...): the entry then
/// needs `private`.
fn is_private(addr: &str) -> bool {
    addr.rsplit_once(':')
        .map(|(h, _)| h.trim_matches(|c| c == '[' || c == ']'))
        .and_then(|h| h.parse::<IpAddr>().ok())
        .is_some_and(|ip| warden_core::policy::net::address_class(ip).is_some())
}

/// The starter from a trace's records (`exists`: whether a path is on the
/// host now, so failed probes are left out).
pub fn starter(
    records: &[Record],
    bounds: Bounds<'_>,
    exists: &dyn Fn(&Path) -> bool,
) -> anyhow::Result<Starter> {
    let home = bounds.home;
    let mut s = Starter::default();
    let start = records
        .iter()
        .find(|r| r.kind == RecordType::Session && r.action == "start")
        .context("the trace has no session.start record (is it a `wardenctl trace` file?)")?;
    let d = &start.details;
    let strs = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    // As run: argv[0] as given (a virtualenv's python finds its packages
    // through the path it was started by, not the interpreter it links to).
    let argv = strs(&d["argv"]);
    s.command = argv.clone();
    if s.command.is_empty() {
        bail!("the trace's session.start names no command");
    }
    s.cwd = d["cwd"].as_str().map(PathBuf::from);
    s.env_names = strs(&d["env_names"]);
    s.name = derive_name(&s.command);
    let program_path = d["program"].as_str().map(PathBuf::from);
    let mut reads: BTreeMap<PathBuf, BTreeMap<String, u64>> = BTreeMap::new();
    let mut writes: BTreeMap<PathBuf, BTreeMap<String, u64>> = BTreeMap::new();
    let mut hosts: BTreeMap<String, (u64, bool)> = BTreeMap::new();
    let value_of = |name: &str| std::env::var(name).ok();
    let mut skipped = 0usize;
    for r in records.iter().filter(|r| r.session == start.session) {
        match (r.kind, r.action.as_str()) {
            (RecordType::File, action) if r.decision == Decision::Allow => {
                let Some(p) = r
                    .details
                    .get("resolved")
                    .and_then(|v| v.as_str())
                    .filter(|p| p.starts_with('/') && !p.contains('\u{fffd}'))
                    .map(PathBuf::from)
                else {
                    continue;
                };
                if provided(&p) || program_path.as_deref() == Some(p.as_path()) {
                    continue;
                }
                let target = if ENTRY_WRITES.contains(&action) {
                    p.parent().map(Path::to_path_buf)
                } else {
                    Some(p.clone())
                };
                let Some(target) = target.filter(|t| exists(t)) else {
                    skipped += 1;
                    continue;
                };
                let map = if WRITES.contains(&action) {
                    &mut writes
                } else {
                    &mut reads
                };
                *map.entry(target)
                    .or_default()
                    .entry(action.to_owned())
                    .or_default() += 1;
            }
            (RecordType::Session, "exit") => {
                let p = &r.details["peak"];
                if let (Some(m), Some(n)) = (p["memory_bytes"].as_u64(), p["processes"].as_u64()) {
                    s.peak = Some((m, n));
                }
            }
            (RecordType::Network, "connect") if r.decision == Decision::Allow => {
                let host = r.details["host"].as_str();
                let port = r.details["port"].as_u64();
                let (Some(host), Some(port)) = (host, port) else {
                    continue;
                };
                let entry = if host.contains(':') {
                    format!("[{host}]:{port}")
                } else {
                    format!("{host}:{port}")
                };
                let private = r.details["address"].as_str().is_some_and(is_private);
                let e = hosts.entry(entry).or_default();
                e.0 += 1;
                e.1 |= private;
            }
            _ => {}
        }
    }
    // Paths the command line names: the server was told to use them (it may
    // only `stat` them at start, which a trace does not see).
    for a in s.command.iter().skip(1) {
        let value = a.split_once('=').map_or(a.as_str(), |(_, v)| v);
        let p = Path::new(value);
        if p.is_absolute() && !provided(p) && exists(p) && !writes.contains_key(p) {
            *reads
                .entry(p.to_path_buf())
                .or_default()
                .entry("named on the command line".into())
                .or_default() += 1;
        }
    }
    if skipped > 0 {
        s.left_out.push(format!(
            "{skipped} accesses of paths that do not exist (probes that failed)"
        ));
    }
    let grant = |(p, seen, n): (PathBuf, BTreeMap<String, u64>, usize)| {
        let refused = bounds.refuses(&p);
        (!refused).then(|| Granted {
            warning: sensitive(&p, home).map(|w| format!("it holds {w}")),
            why: described(&seen, n),
            path: p,
        })
    };
    // A write is granted where it was made, never widened to a package tree.
    let w: Vec<Granted> = collapse(&writes, bounds, false)
        .into_iter()
        .filter_map(grant)
        .collect();
    let r: Vec<Granted> = collapse(&reads, bounds, true)
        .into_iter()
        .filter(|(p, _, _)| !w.iter().any(|g| p.starts_with(&g.path)))
        .filter_map(grant)
        .collect();
    s.read = r;
    s.write = w;
    // Environment names whose value this process knows and the trace used.
    let used_paths: Vec<&PathBuf> = reads.keys().chain(writes.keys()).collect();
    // Set by the sandbox or the shell, never configuration of the server.
    const STANDARD: &[&str] = &[
        "HOME", "PATH", "PWD", "OLDPWD", "SHELL", "USER", "LOGNAME", "TMPDIR", "TERM", "LANG",
        "SHLVL", "_", "MAIL",
    ];
    for name in &s.env_names {
        if STANDARD.contains(&name.as_str())
            || ["XDG_", "LC_", "WARDEN_"]
                .iter()
                .any(|p| name.starts_with(p))
        {
            continue;
        }
        let Some(v) = value_of(name) else { continue };
        let p = Path::new(&v);
        let by_path = p.is_absolute()
            && p.components().count() > 2
            && used_paths
                .iter()
                .any(|u| u.starts_with(p) || p.parent() == Some(u.as_path()));
        let by_host = hosts.keys().any(|h| {
            !v.is_empty() && v.contains(h.rsplit_once(':').map_or(h.as_str(), |(h, _)| h))
        });
        if by_path {
            s.env_used.push((
                name.clone(),
                format!("its value, {v}, is a path the server used"),
            ));
        } else if by_host {
            s.env_used.push((
                name.clone(),
                "its value names a host the server connected to".into(),
            ));
        }
    }
    // The trace's cwd only where a grant shows it (else the default).
    let covered = |c: &PathBuf| {
        s.read
            .iter()
            .chain(&s.write)
            .any(|g| c.starts_with(&g.path))
    };
    if !s.cwd.as_ref().is_some_and(covered) {
        s.cwd = None;
    }
    s.hosts = hosts.into_iter().map(|(h, (n, p))| (h, n, p)).collect();
    s.env_used.sort();
    s.env_used.dedup_by(|a, b| a.0 == b.0);
    Ok(s)
}

/// A policy name from the command: the npm package, the Python module, or
/// the program's file name.
fn derive_name(command: &[String]) -> String {
    let runner = command
        .first()
        .and_then(|p| Path::new(p).file_name())
        .is_some_and(|n| PACKAGE_RUNNERS.contains(&n.to_string_lossy().as_ref()));
    // npx -y @scope/name@1.2 → name; uvx mcp-server-time → mcp-server-time
    let package = runner
        .then(|| command.iter().skip(1).find(|a| !a.starts_with('-')))
        .flatten()
        .map(|p| {
            let p = p.rsplit('/').next().unwrap_or(p);
            p.split('@').find(|s| !s.is_empty()).unwrap_or(p).to_owned()
        });
    let pick = package
        .or_else(|| {
            command
                .iter()
                .rev()
                .find_map(|a| {
                    let p = Path::new(a);
                    // .../node_modules/@scope/server-x/dist/index.js → server-x
                    let parts: Vec<String> = p
                        .components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect();
                    parts
                        .iter()
                        .position(|c| c == "node_modules")
                        .and_then(|i| {
                            let first = parts.get(i + 1)?;
                            if first.starts_with('@') {
                                parts.get(i + 2).cloned()
                            } else {
                                Some(first.clone())
                            }
                        })
                })
                .or_else(|| {
                    // python -m mcp_server_time → mcp-server-time
                    command
                        .windows(2)
                        .find(|w| w[0] == "-m")
                        .map(|w| w[1].replace('_', "-"))
                })
                .or_else(|| {
                    command
                        .first()
                        .and_then(|p| Path::new(p).file_name())
                        .map(|n| n.to_string_lossy().into_owned())
                })
        })
        .unwrap_or_else(|| "server".into());
    let clean: String = pick
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    clean.trim_matches('-').to_owned()
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// The policy text.
pub fn render(s: &Starter, session: &str, today: &str) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# Starter policy written by `wardenctl init` on {today} from trace session {session}."
    );
    let _ = writeln!(
        t,
        "# Every grant below is something the traced run used; review them, and"
    );
    let _ = writeln!(
        t,
        "# remove what the server should not have. docs/init.md says what a"
    );
    let _ = writeln!(t, "# trace does not see.");
    for l in &s.left_out {
        let _ = writeln!(t, "# Left out: {l}.");
    }
    let _ = writeln!(t, "version: 1");
    let _ = writeln!(t, "name: {}", quoted(&s.name));
    let cmd: Vec<String> = s.command.iter().map(|c| quoted(c)).collect();
    let _ = writeln!(t, "command: [{}]", cmd.join(", "));
    if let Some(cwd) = &s.cwd {
        let _ = writeln!(t, "cwd: {}", quoted(&cwd.display().to_string()));
    }
    let _ = writeln!(t, "filesystem:");
    for (key, list) in [("read", &s.read), ("write", &s.write)] {
        if list.is_empty() {
            let _ = writeln!(t, "  {key}: []");
            continue;
        }
        let _ = writeln!(t, "  {key}:");
        for g in list {
            if let Some(w) = &g.warning {
                let _ = writeln!(
                    t,
                    "    # WARNING: {} — {w}; keep it only if the server must have it.",
                    g.path.display()
                );
            }
            let _ = writeln!(
                t,
                "    - {}  # {}",
                quoted(&g.path.display().to_string()),
                g.why
            );
        }
    }
    let _ = writeln!(t, "network:");
    if s.hosts.is_empty() {
        let _ = writeln!(t, "  allow: []  # the traced run connected nowhere");
    } else {
        let _ = writeln!(t, "  allow:");
        for (h, n, private) in &s.hosts {
            let entry = if *private {
                format!("{h} private")
            } else {
                h.clone()
            };
            let why = if *private {
                format!("connected ×{n}; it resolved to a private address")
            } else {
                format!("connected ×{n}")
            };
            let _ = writeln!(t, "    - {}  # {why}", quoted(&entry));
        }
    }
    if let Some((bytes, procs)) = s.peak {
        let (mb, pids) = limits_from(bytes, procs);
        let _ = writeln!(t, "limits:");
        let _ = writeln!(
            t,
            "  memory_mb: {mb}  # the traced run peaked at {} MiB (twice that, 256 at least)",
            bytes.div_ceil(1 << 20)
        );
        // Commented: RLIMIT_NPROC does not apply to root, where a policy
        // with `pids` is refused (docs/policy.md); uncomment to bound it.
        let _ = writeln!(
            t,
            "  # pids: {pids}  # it ran {procs} process{} at once (four times that, 256 at least; not for a root daemon)",
            if procs == 1 { "" } else { "es" }
        );
    }
    let _ = writeln!(t, "env:");
    let _ = writeln!(
        t,
        "  # A trace cannot see which variables a server reads (docs/init.md); add the"
    );
    let _ = writeln!(t, "  # names it needs, e.g. its API key's.");
    if s.env_used.is_empty() {
        let _ = writeln!(t, "  allow: []");
    } else {
        let _ = writeln!(t, "  allow:");
        for (n, why) in &s.env_used {
            let _ = writeln!(t, "    - {}  # {why}", quoted(n));
        }
    }
    t
}

pub fn run(args: &InitArgs, socket: Option<&Path>, _json: bool) -> anyhow::Result<ExitCode> {
    if args.log.is_none() && args.command.is_empty() {
        bail!("give a trace (--log FILE) or the server to trace (-- CMD [ARGS...])");
    }
    // An output that exists is refused before anything runs.
    let explicit = args.output.clone();
    if let Some(out) = &explicit {
        crate::trace::refuse_existing(out, "a policy")?;
    }
    let (session, lines) = match &args.log {
        Some(log) => {
            let bytes = std::fs::read(log).with_context(|| format!("reading {}", log.display()))?;
            (None, bytes)
        }
        None => {
            let calls = crate::trace::parse_calls(&args.call)?;
            let t = crate::trace::record(&crate::trace::How {
                socket,
                state_dir: args.state_dir.as_deref(),
                command: &args.command,
                mcp: true,
                calls: &calls,
                allow_writes: args.allow_writes,
                timeout: args.timeout,
            })?;
            match &t.drove {
                Some(Ok(s)) => eprintln!("init: traced: {s}"),
                Some(Err(e)) => {
                    let runner = args
                        .command
                        .first()
                        .and_then(|p| Path::new(p).file_name())
                        .is_some_and(|n| PACKAGE_RUNNERS.contains(&n.to_string_lossy().as_ref()));
                    let hint = if runner && !args.allow_writes {
                        "; package runners write their cache: try --allow-writes"
                    } else {
                        ""
                    };
                    bail!(
                        "the MCP session with the server did not complete ({e:#}); no policy written (`wardenctl trace` shows what it did){hint}"
                    )
                }
                None => {}
            }
            (Some(t.session), t.lines)
        }
    };
    let mut records = Vec::new();
    for (i, line) in lines.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let r: Record = serde_json::from_slice(line).with_context(|| {
            format!(
                "{}:{}: not an audit record",
                args.log.as_deref().unwrap_or(Path::new("trace")).display(),
                i + 1
            )
        })?;
        records.push(r);
    }
    let home = warden_core::paths::home_dir().ok();
    let reserved = warden_core::paths::client_reserved(
        warden_core::paths::socket_path(socket).ok().as_deref(),
    );
    let bounds = Bounds {
        home: home.as_deref(),
        reserved: &reserved,
    };
    let mut s = starter(&records, bounds, &|p: &Path| {
        std::fs::symlink_metadata(p).is_ok()
    })?;
    if let Some(n) = &args.name {
        s.name = n.clone();
    }
    for n in &args.allow_env {
        if !s.env_used.iter().any(|(u, _)| u == n) {
            s.env_used.push((
                n.clone(),
                "asked for (--allow-env: the client sets it)".into(),
            ));
        }
    }
    s.env_used.sort();
    let session = session
        .or_else(|| records.first().and_then(|r| r.session.clone()))
        .unwrap_or_default();
    let today = time::OffsetDateTime::now_utc().date().to_string();
    let text = render(&s, &session, &today);
    let out = match explicit {
        Some(p) => p,
        None => {
            let p = warden_core::paths::profiles_dir()?.join(format!("{}.yaml", s.name));
            crate::trace::refuse_existing(&p, "a policy")?;
            p
        }
    };
    // Checked by the policy engine as `wardenctl policy check` would.
    let abs = if out.is_absolute() {
        out.clone()
    } else {
        std::env::current_dir()?.join(&out)
    };
    let ctx = warden_core::policy::CompileContext {
        home: warden_core::paths::home_dir()?,
        cwd: std::env::current_dir()?,
        path_env: std::env::var_os("PATH"),
        reserved: reserved.clone(),
    };
    let input = warden_core::policy::PolicyInput {
        path: Some(&abs),
        text: &text,
    };
    if let Err(e) = warden_core::policy::compile(&input, &Default::default(), &ctx) {
        bail!("the starter policy does not compile, so it was not written:\n{e}\n--- the text ---\n{text}");
    }
    if let Some(dir) = abs.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    crate::trace::write_new(&abs, text.as_bytes())?;
    for g in s
        .read
        .iter()
        .chain(&s.write)
        .filter(|g| g.warning.is_some())
    {
        eprintln!(
            "init: warning: {} is granted and {}; review it",
            g.path.display(),
            g.warning.as_deref().unwrap_or("")
        );
    }
    eprintln!(
        "init: wrote {} ({} read, {} write grants, {} hosts); run it with warden-shim --policy {}",
        abs.display(),
        s.read.len(),
        s.write.len(),
        s.hosts.len(),
        abs.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use warden_audit::{Decision, RecordType};

    fn rec(kind: RecordType, action: &str, details: serde_json::Value) -> Record {
        Record {
            v: 2,
            ts: String::new(),
            seq: 0,
            prev: String::new(),
            session: Some("t1".into()),
            kind,
            action: action.into(),
            resource: String::new(),
            decision: Decision::Allow,
            reason: String::new(),
            details,
        }
    }

    fn start(argv: &[&str]) -> Record {
        rec(
            RecordType::Session,
            "start",
            json!({"argv": argv, "program": argv[0], "cwd": "/srv/app", "env_names": ["PATH"]}),
        )
    }

    fn file(action: &str, path: &str) -> Record {
        rec(RecordType::File, action, json!({"resolved": path}))
    }

    fn paths(v: &[Granted]) -> Vec<String> {
        v.iter().map(|g| g.path.display().to_string()).collect()
    }

    #[test]
    fn the_runtime_goes_packages_and_busy_directories_collapse_writes_stay_exact() {
        let home = Path::new("/home/ana");
        let mut records = vec![start(&[
            "/usr/bin/node",
            "/srv/app/node_modules/x/index.js",
        ])];
        for f in [
            "/usr/lib/libc.so.6",
            "/etc/ld.so.cache",
            "/proc/self/maps",
            "/dev/null",
        ] {
            records.push(file("open-read", f));
        }
        for i in 0..40 {
            records.push(file(
                "open-read",
                &format!("/srv/app/node_modules/p{i}/index.js"),
            ));
        }
        for f in ["a.md", "b.md", "c.md"] {
            records.push(file("open-read", &format!("/home/ana/notes/{f}")));
        }
        records.push(file("open-read", "/home/ana/one/only.txt"));
        records.push(file("create", "/srv/data/db.json"));
        records.push(file("open-read", "/srv/data/db.json"));
        records.push(file("open-read", "/etc/locale.alias"));
        records.push(file("open-read", "/home/ana/.ssh/config"));
        records.push(rec(
            RecordType::Network,
            "connect",
            json!({"host": "api.example.com", "port": 443, "address": "93.184.215.14:443"}),
        ));
        records.push(rec(
            RecordType::Network,
            "connect",
            json!({"host": "db.internal", "port": 5432, "address": "10.1.2.3:5432"}),
        ));
        let s = starter(
            &records,
            Bounds {
                home: Some(home),
                reserved: &[],
            },
            &|_| true,
        )
        .unwrap();
        assert_eq!(
            paths(&s.read),
            vec![
                "/etc/locale.alias",
                "/home/ana/.ssh/config",
                "/home/ana/notes",
                "/home/ana/one/only.txt",
                "/srv/app/node_modules",
            ]
        );
        assert_eq!(paths(&s.write), vec!["/srv/data"]);
        assert!(s.read[1].warning.as_deref().unwrap().contains("SSH"));
        assert_eq!(
            s.hosts,
            vec![
                ("api.example.com:443".into(), 1, false),
                ("db.internal:5432".into(), 1, true)
            ]
        );
        // No grant shows /srv/app itself: the default cwd.
        assert_eq!(s.cwd, None);
        assert_eq!(s.name, "x");
        let text = render(&s, "t1", "2026-12-02");
        assert!(text.contains("# WARNING: /home/ana/.ssh/config"), "{text}");
        assert!(text.contains("\"db.internal:5432 private\""), "{text}");
    }

    #[test]
    fn never_home_nor_a_whole_config_and_never_warden_s_own() {
        let home = Path::new("/home/ana");
        let mut records = vec![start(&["/usr/bin/srv"])];
        for d in ["a", "b", "c", "d"] {
            records.push(file("open-read", &format!("/home/ana/.config/{d}.toml")));
            records.push(file("open-read", &format!("/home/ana/{d}.txt")));
            records.push(file("open-read", &format!("/srv/w/{d}/x")));
        }
        let reserved = [warden_core::policy::Reserved {
            path: "/srv/w/state".into(),
            what: "Warden's state directory".into(),
            subtree: true,
        }];
        records.push(file("open-read", "/srv/w/state/audit/x.jsonl"));
        let s = starter(
            &records,
            Bounds {
                home: Some(home),
                reserved: &reserved,
            },
            &|_| true,
        )
        .unwrap();
        let r = paths(&s.read);
        assert!(
            !r.iter()
                .any(|p| p == "/home/ana" || p == "/home/ana/.config"),
            "{r:?}"
        );
        assert!(r.contains(&"/home/ana/.config/a.toml".to_string()), "{r:?}");
        assert!(
            !r.iter()
                .any(|p| p == "/srv/w" || p.starts_with("/srv/w/state")),
            "{r:?}"
        );
        assert!(r.contains(&"/srv/w/a/x".to_string()), "{r:?}");
        // What does not exist now was a failed probe.
        let s = starter(
            &records,
            Bounds {
                home: Some(home),
                reserved: &[],
            },
            &|p| !p.starts_with("/home/ana/.config"),
        )
        .unwrap();
        assert!(!paths(&s.read).iter().any(|p| p.contains(".config")));
        assert!(s.left_out[0].contains("4 accesses"), "{:?}", s.left_out);
    }

    #[test]
    fn limits_are_a_little_above_the_peak_with_floors() {
        assert_eq!(limits_from(40 << 20, 2), (256, 256));
        assert_eq!(limits_from(300 << 20, 100), (600, 400));
        assert_eq!(limits_from((300 << 20) + 1, 1), (602, 256));
        let mut records = vec![start(&["/usr/bin/srv"])];
        records.push(rec(
            RecordType::Session,
            "exit",
            json!({"code": 0, "peak": {"memory_bytes": 300u64 << 20, "processes": 100}}),
        ));
        let s = starter(
            &records,
            Bounds {
                home: None,
                reserved: &[],
            },
            &|_| true,
        )
        .unwrap();
        let text = render(&s, "t1", "2026-12-02");
        assert!(
            text.contains("  memory_mb: 600  # the traced run peaked at 300 MiB"),
            "{text}"
        );
        assert!(
            text.contains("  # pids: 400  # it ran 100 processes at once"),
            "{text}"
        );
    }

    #[test]
    fn names_come_from_the_package_the_module_or_the_program() {
        let n = |c: &[&str]| derive_name(&c.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            n(&[
                "node",
                "/x/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
            ]),
            "server-memory"
        );
        assert_eq!(
            n(&["/v/bin/python3", "-m", "mcp_server_time"]),
            "mcp-server-time"
        );
        assert_eq!(n(&["/usr/local/bin/my server"]), "my-server");
        assert_eq!(
            n(&[
                "npx",
                "-y",
                "@modelcontextprotocol/server-filesystem@2026.8.31",
                "/d"
            ]),
            "server-filesystem"
        );
        assert_eq!(n(&["uvx", "mcp-server-time"]), "mcp-server-time");
    }
}
