//! The policy: the YAML schema (v1, see `docs/policy.md`), its strict parser, and
//! the compiled, always-valid [`CompiledPolicy`] that the daemon enforces.
//!
//! The text is parsed once ([`parse`]), into a tree with a position on every node
//! ([`yaml`]). That tree is checked against the schema, which is written once as
//! the `Raw*` structs of [`schema`]: every unknown key (with a suggestion), duplicate
//! key, YAML tag and wrong type is reported, with file, line, column and key path.
//! The typed [`schema::RawPolicy`] is deserialised from the same tree ([`de`]), and
//! [`ParsedPolicy::positions`] says where each key and value is, for tools that
//! edit the file in place.
//!
//! [`compile`] then applies [`rules`]: one small function per rule (paths exist and
//! hold no symlink, command resolves, cwd is granted, limits in range, ...), merging
//! the shim's flags ([`Overrides`]). All problems are collected into one
//! [`PolicyError`].
//!
//! [`edit`] adds an approved grant to a policy text in place, keeping the
//! user's bytes, and [`edit::file`] to the policy file on disk.

mod de;
mod diagnostic;
pub mod edit;
pub mod net;
pub mod reserved;
mod rules;
mod schema;
pub mod sensitive;
mod tools;
mod yaml;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use diagnostic::{Diagnostic, PolicyError};
pub use reserved::Reserved;
use rules::Invalid;
pub use schema::Located;
use schema::RawPolicy;
pub use tools::{McpPolicy, PinMode, ToolPattern};
pub use yaml::{Position, Span};

/// The policy version this build reads and writes.
pub const VERSION: u32 = 1;

/// Policy files larger than this are refused unread.
pub const MAX_POLICY_BYTES: u64 = 1024 * 1024;

/// The text of a policy and where it came from.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInput<'a> {
    /// Absolute path of the policy file; `None` for a flags-only policy (`text` "").
    pub path: Option<&'a Path>,
    pub text: &'a str,
}

/// What `warden-shim`'s flags add to (or replace in) the policy file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--read PATH`, relative to [`CompileContext::cwd`]; added to the file's grants.
    pub read: Vec<String>,
    /// `--write PATH`, relative to [`CompileContext::cwd`]; added to the file's grants.
    pub write: Vec<String>,
    /// `--allow-env NAME`; added to `env.allow`.
    pub allow_env: Vec<String>,
    /// `--name NAME`; replaces `name`.
    pub name: Option<String>,
    /// `-- CMD...`; replaces `command` when non-empty.
    pub command: Vec<String>,
}

/// The client's side of things, which the daemon gets from the shim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileContext {
    /// What `~` expands to.
    pub home: PathBuf,
    /// The client's working directory: base of relative flag paths, and of the
    /// policy's relative paths when there is no policy file.
    pub cwd: PathBuf,
    /// The client's `PATH`, searched for a bare command name.
    pub path_env: Option<OsString>,
    /// Paths no grant may expose (Warden's socket, state and config
    /// directories, the user's runtime directory and agent sockets), on top
    /// of [`reserved::system`], which is always applied. The daemon passes
    /// its real paths; see [`reserved::warden`] and [`reserved::user`].
    pub reserved: Vec<Reserved>,
}

/// Resource limits; `None` means no limit beyond the daemon's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub memory_mb: Option<u64>,
    pub timeout_s: Option<u64>,
    /// Most tasks (processes and threads) the sandbox may hold at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Size of the private /tmp in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_mb: Option<u64>,
    /// CPU cores (e.g. 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    /// Run even when a limit cannot be enforced on this machine (the session
    /// records which limit is not enforced). Default false: refuse.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub best_effort: bool,
    /// `limits.output_kb`: what `wardenctl exec-server` keeps of each output
    /// stream of a call, in KiB (the rest is drained and discarded). The
    /// daemon does not use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_kb: Option<u64>,
}

/// A policy that passed every rule. Paths are absolute, normalised, existing and
/// free of symlinks at compile time; the program is canonical.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CompiledPolicy {
    /// Always [`VERSION`].
    pub version: u32,
    pub name: Option<String>,
    /// The policy file, if any.
    pub source: Option<PathBuf>,
    /// `sha256:<hex>` of the exact policy text (of "" for a flags-only policy).
    pub digest: String,
    /// The command as written; `argv[0]` unchanged.
    pub argv: Vec<String>,
    /// `argv[0]` resolved: absolute and canonical. It is exec'd, and bound into the
    /// sandbox, at this path.
    pub program: PathBuf,
    pub cwd: PathBuf,
    /// Read-only grants: sorted, deduplicated; a path also in `write` is only there.
    pub read: Vec<PathBuf>,
    /// Read-write grants: sorted, deduplicated.
    pub write: Vec<PathBuf>,
    /// `filesystem.allow_git_init`: the server may create new git repositories
    /// in its write grants (refused by default: a repository's config and
    /// hooks run commands on the host when the user later runs git there).
    #[serde(default)]
    pub allow_git_init: bool,
    /// Environment variable names passed through: sorted, deduplicated.
    pub env_allow: Vec<String>,
    /// `network:` — the egress allowlist.
    #[serde(default)]
    pub network: net::NetworkPolicy,
    pub limits: Limits,
    /// Requirements on the sandbox itself.
    #[serde(default)]
    pub sandbox: SandboxReq,
    /// `audit:` — what is recorded beyond the session's own records.
    #[serde(default)]
    pub audit: AuditPolicy,
    /// `filesystem.dangerously_expose` entries that let a grant through the
    /// reserved-path check: sorted, deduplicated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exposed: Vec<PathBuf>,
    /// Loud warnings (a write grant of `$HOME`, an exposed reserved path),
    /// one `file:line:col: key: message` line each, shown by `policy check`,
    /// the shim and `session.start`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// `approve`: hold the denied network connections and file accesses of
    /// the session and ask a person (see `docs/approvals.md`). Default false:
    /// nothing is ever held.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub approve: bool,
    /// `backend`: which sandbox enforces the policy (`auto`, the default:
    /// this platform's own, else Docker; never a plain process).
    #[serde(default, skip_serializing_if = "Backend::is_auto")]
    pub backend: Backend,
    /// `docker.image`: the image the Docker backend runs the server in
    /// (else `WARDEN_DOCKER_IMAGE`); never pulled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_image: Option<String>,
    /// `mcp:`: per-tool policy and tool-definition pinning, enforced on the
    /// MCP stream by the daemon.
    #[serde(default, skip_serializing_if = "is_default")]
    pub mcp: McpPolicy,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// Checks a Docker image reference as `docker.image` takes it (also for
/// `WARDEN_DOCKER_IMAGE`); the error says what a reference looks like.
pub fn docker_image(v: &str) -> Result<String, String> {
    rules::docker_image(v).map_err(|e| e.to_string())
}

/// `backend:` (and `warden-shim --backend`): the sandbox that enforces a
/// policy. The daemon picks one for `auto` (`wardend/src/backend`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Linux native → Docker on Linux; Seatbelt → Docker on macOS; Docker
    /// elsewhere; refused when none is available.
    #[default]
    Auto,
    /// The native Linux sandbox (namespaces, seccomp, Landlock).
    Linux,
    /// A container per session.
    Docker,
    /// macOS Seatbelt (`sandbox-exec`).
    Macos,
}

impl Backend {
    pub const ALL: [Backend; 4] = [
        Backend::Auto,
        Backend::Linux,
        Backend::Docker,
        Backend::Macos,
    ];

    pub fn is_auto(&self) -> bool {
        *self == Backend::Auto
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Linux => "linux",
            Backend::Docker => "docker",
            Backend::Macos => "macos",
        }
    }

    pub fn parse(s: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.as_str() == s)
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `sandbox:` — what the policy requires of the sandbox layers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxReq {
    /// Refuse to start unless the kernel offers at least this Landlock ABI
    /// (0: no requirement; Landlock is used whenever available anyway).
    #[serde(default)]
    pub landlock_min_abi: u32,
    /// Run write grants even when a protection they rely on (the creation
    /// guard, Landlock) is missing on this kernel. Default false: refuse.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub best_effort_write_protection: bool,
}

/// `audit:` — what the audit trail records of the server's activity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPolicy {
    /// `audit.files`: which file accesses become `file` records.
    #[serde(default)]
    pub files: FileAudit,
    /// Whether the policy wrote `audit.files` itself: a level asked for
    /// explicitly is refused where it cannot be had; the default runs with
    /// `file_audit: unavailable` recorded instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub files_explicit: bool,
    /// `audit.mcp_arguments`: `mcp.request` records carry the arguments of
    /// each `tools/call`, with the values of the variables passed from the
    /// client redacted. Default false: never an argument value.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mcp_arguments: bool,
}

/// `audit.files`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileAudit {
    /// Only the accesses the sandbox denies (outside the grants, writes to
    /// read-only grants). The default.
    #[default]
    Denied,
    /// Every access, allowed ones too.
    All,
    /// None: the path-taking calls are not observed at all.
    Off,
}

impl FileAudit {
    /// `denied`, `all`, `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileAudit::Denied => "denied",
            FileAudit::All => "all",
            FileAudit::Off => "off",
        }
    }
}

/// Reads a policy file. The error names the path.
pub fn load_file(path: &Path) -> Result<String, PolicyError> {
    let fail = |message: String| {
        PolicyError::from(Diagnostic {
            file: Some(path.to_path_buf()),
            line: None,
            column: None,
            key: None,
            message,
        })
    };
    let reason = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => "cannot read policy file: no such file".to_owned(),
        io::ErrorKind::PermissionDenied => "cannot read policy file: permission denied".to_owned(),
        io::ErrorKind::IsADirectory => "cannot read policy file: it is a directory".to_owned(),
        io::ErrorKind::InvalidData => "cannot read policy file: it is not valid UTF-8".to_owned(),
        _ => {
            let s = e.to_string();
            let s = s.split(" (os error").next().unwrap_or(&s).to_lowercase();
            format!("cannot read policy file: {s}")
        }
    };
    let file = fs::File::open(path).map_err(|e| fail(reason(e)))?;
    let mut text = String::new();
    file.take(MAX_POLICY_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| fail(reason(e)))?;
    if text.len() as u64 > MAX_POLICY_BYTES {
        return Err(fail(format!(
            "policy file is larger than {MAX_POLICY_BYTES} bytes"
        )));
    }
    Ok(text)
}

/// `sha256:<hex>` of `text`.
pub fn digest(text: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// A policy text that parsed and matches the schema: its values, not yet checked
/// by the rules of [`compile`], and where each of them is written.
#[derive(Debug)]
pub struct ParsedPolicy {
    raw: RawPolicy,
    /// Where diagnostics about each key path point.
    marks: HashMap<String, Position>,
    positions: BTreeMap<String, Located>,
}

impl ParsedPolicy {
    /// Where each key path (`network.allow`, `network.allow[1]`, `limits`; `""` for
    /// the whole document) is written: the span of its key (for a value in a
    /// mapping) and of its value. Keys left out are absent; a key written with no
    /// value (`read:`) has an empty value span after its colon. A value that is an
    /// alias (`*r`) is spanned at the alias, what lies inside it where it was
    /// anchored. An empty policy has no positions.
    pub fn positions(&self) -> &BTreeMap<String, Located> {
        &self.positions
    }

    /// Where one key path is written (see [`ParsedPolicy::positions`]).
    pub fn position(&self, key: &str) -> Option<&Located> {
        self.positions.get(key)
    }
}

/// Parses a policy text and checks it against the schema, reporting every
/// unknown key, duplicate key, YAML tag and wrong type (a YAML syntax error alone).
/// `file` names the policy file in the diagnostics.
pub fn parse(text: &str, file: Option<&Path>) -> Result<ParsedPolicy, PolicyError> {
    parse_tree(text, file).map(|(parsed, _)| parsed)
}

/// [`parse`], also handing back the document's tree (`None` for an empty
/// policy), for [`edit`], which places its changes by the tree's spans.
fn parse_tree(
    text: &str,
    file: Option<&Path>,
) -> Result<(ParsedPolicy, Option<yaml::Node>), PolicyError> {
    let diagnostic = |p: yaml::Problem| Diagnostic {
        file: file.map(Path::to_path_buf),
        line: p.mark.map(|m| m.line),
        column: p.mark.map(|m| m.column),
        key: p.key,
        message: p.message,
    };
    let Some(root) = yaml::parse(text).map_err(|p| PolicyError::from(diagnostic(p)))? else {
        let empty = ParsedPolicy {
            raw: RawPolicy::default(),
            marks: HashMap::new(),
            positions: BTreeMap::new(),
        };
        return Ok((empty, None));
    };
    let checked = schema::check(&root);
    if !checked.problems.is_empty() {
        let diagnostics = checked.problems.into_iter().map(diagnostic).collect();
        return Err(PolicyError { diagnostics });
    }
    let raw = de::from_node(&root).map_err(|e| PolicyError::from(diagnostic(e.into())))?;
    let parsed = ParsedPolicy {
        raw,
        marks: checked.marks,
        positions: checked.spans,
    };
    Ok((parsed, Some(root)))
}

/// Collects diagnostics, placing each by key path (file) or flag.
struct Sink<'a> {
    file: Option<PathBuf>,
    marks: &'a HashMap<String, Position>,
    diagnostics: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

/// Where a value came from.
#[derive(Debug, Clone)]
enum Origin {
    /// A key path in the policy file.
    Key(String),
    /// A flag of `warden-shim`.
    Flag(&'static str),
}

impl Sink<'_> {
    fn report(&mut self, origin: &Origin, err: Invalid) {
        let d = self.diagnostic(origin, err.to_string());
        self.diagnostics.push(d);
    }

    fn warn(&mut self, origin: &Origin, message: String) {
        let d = self.diagnostic(origin, message);
        self.warnings.push(d);
    }

    fn diagnostic(&self, origin: &Origin, message: String) -> Diagnostic {
        match origin {
            Origin::Key(key) => {
                let mark = self.marks.get(key);
                Diagnostic {
                    file: self.file.clone(),
                    line: mark.map(|m| m.line),
                    column: mark.map(|m| m.column),
                    key: Some(key.clone()),
                    message,
                }
            }
            Origin::Flag(flag) => Diagnostic {
                file: None,
                line: None,
                column: None,
                key: Some((*flag).to_owned()),
                message,
            },
        }
    }

    fn check<T>(&mut self, origin: &Origin, result: Result<T, Invalid>) -> Option<T> {
        result.map_err(|e| self.report(origin, e)).ok()
    }
}

/// Values from the file, each with its key path, followed by values from a flag.
fn sourced<'v>(
    key: &str,
    from_file: Option<&'v Vec<String>>,
    flag: &'static str,
    from_flags: &'v [String],
) -> Vec<(Origin, &'v str)> {
    let file = from_file.into_iter().flatten().enumerate();
    file.map(|(i, v)| (Origin::Key(format!("{key}[{i}]")), v.as_str()))
        .chain(from_flags.iter().map(|v| (Origin::Flag(flag), v.as_str())))
        .collect()
}

/// Validates a policy and the shim's flags into a [`CompiledPolicy`], or reports
/// every problem found.
pub fn compile(
    input: &PolicyInput,
    overrides: &Overrides,
    ctx: &CompileContext,
) -> Result<CompiledPolicy, PolicyError> {
    let source = input.path.map(|p| rules::normalize(&ctx.cwd.join(p)));
    let file_diag = |line, column, key, message| Diagnostic {
        file: source.clone(),
        line,
        column,
        key,
        message,
    };

    let parsed = parse(input.text, source.as_deref())?;
    let raw = &parsed.raw;

    let mut sink = Sink {
        file: source.clone(),
        marks: &parsed.marks,
        diagnostics: Vec::new(),
        warnings: Vec::new(),
    };
    let policy_dir = source
        .as_deref()
        .and_then(Path::parent)
        .map_or_else(|| ctx.cwd.clone(), Path::to_path_buf);
    let base = |origin: &Origin| match origin {
        Origin::Key(_) => policy_dir.as_path(),
        Origin::Flag(_) => ctx.cwd.as_path(),
    };

    if let Some(v) = raw.version {
        sink.check(&Origin::Key("version".into()), rules::version(v));
    }

    let name = match &overrides.name {
        Some(n) => Some((Origin::Flag("--name"), n)),
        None => raw.name.as_ref().map(|n| (Origin::Key("name".into()), n)),
    };
    let name = name.and_then(|(origin, n)| sink.check(&origin, rules::name(n)).map(|()| n.clone()));

    // Command.
    let (argv, command_origin) = if !overrides.command.is_empty() {
        (overrides.command.clone(), Origin::Flag("--"))
    } else {
        (
            raw.command.clone().unwrap_or_default(),
            Origin::Key("command".into()),
        )
    };
    let program = match (argv.first(), &command_origin) {
        (None, Origin::Key(_)) if raw.command.is_some() => {
            sink.report(&command_origin, Invalid::EmptyCommand);
            None
        }
        (None, _) => {
            sink.diagnostics.push(file_diag(
                None,
                None,
                None,
                "no command: give one in the policy (`command:`) or after `--`".into(),
            ));
            None
        }
        (Some(argv0), origin) => {
            let at = |i: usize| match origin {
                Origin::Key(k) => Origin::Key(format!("{k}[{i}]")),
                Origin::Flag(f) => Origin::Flag(f),
            };
            for (i, arg) in argv.iter().enumerate().skip(1) {
                sink.check(&at(i), rules::argument(arg));
            }
            let found = rules::program(
                argv0,
                base(origin),
                &ctx.home,
                ctx.path_env.as_deref(),
                &ctx.cwd,
            );
            sink.check(&at(0), found)
        }
    };

    // Filesystem grants.
    let fs_raw = raw.filesystem.as_ref();
    let mut grant_failed = false;
    let mut grants = |key: &str, from_file, flag, from_flags: &[String], sink: &mut Sink| {
        let mut out = Vec::new();
        for (origin, value) in sourced(key, from_file, flag, from_flags) {
            match sink.check(&origin, rules::grant(value, base(&origin), &ctx.home)) {
                Some(p) => out.push((origin, p)),
                None => grant_failed = true,
            }
        }
        out
    };
    let write_sourced = grants(
        "filesystem.write",
        fs_raw.and_then(|f| f.write.as_ref()),
        "--write",
        &overrides.write,
        &mut sink,
    );
    let read_sourced = grants(
        "filesystem.read",
        fs_raw.and_then(|f| f.read.as_ref()),
        "--read",
        &overrides.read,
        &mut sink,
    );
    let expose_sourced = grants(
        "filesystem.dangerously_expose",
        fs_raw.and_then(|f| f.dangerously_expose.as_ref()),
        "",
        &[],
        &mut sink,
    );
    let allow_home_write = fs_raw.and_then(|f| f.allow_home_write).unwrap_or(false);
    let exposed = check_exposure(
        &mut sink,
        &write_sourced,
        &read_sourced,
        &expose_sourced,
        &ctx.reserved,
    );
    for (origin, g) in &write_sourced {
        if let Some(src) = source.as_deref().filter(|s| s.starts_with(g)) {
            let err = Invalid::PolicyInsideWrite {
                policy: src.display().to_string(),
                grant: g.display().to_string(),
            };
            sink.report(origin, err);
        }
        if ctx.home.starts_with(g) {
            let what = if *g == ctx.home {
                "is your home directory".to_owned()
            } else {
                format!("holds your home directory {}", ctx.home.display())
            };
            if allow_home_write {
                let msg = format!(
                    "write grant {} {what}: the server can change what your shell, git, \
                     editors and Warden itself run next (filesystem.allow_home_write: true)",
                    g.display()
                );
                sink.warn(origin, msg);
            } else {
                let grant = g.display().to_string();
                sink.report(origin, Invalid::HomeWrite { grant, what });
            }
        }
    }
    let write_in_order: Vec<PathBuf> = write_sourced.into_iter().map(|(_, p)| p).collect();
    let read: Vec<PathBuf> = read_sourced.into_iter().map(|(_, p)| p).collect();
    let mut write = write_in_order.clone();
    write.sort();
    write.dedup();
    let mut read: Vec<PathBuf> = read
        .into_iter()
        .filter(|p| write.binary_search(p).is_err())
        .collect();
    read.sort();
    read.dedup();

    // Working directory.
    let all_grants: Vec<&PathBuf> = read.iter().chain(&write).collect();
    let cwd = match &raw.cwd {
        Some(c) => {
            let origin = Origin::Key("cwd".into());
            match rules::cwd(c, &policy_dir, &ctx.home, &all_grants) {
                // A cwd under a refused grant: the grant's error says it all.
                Err(Invalid::CwdOutsideGrants(_)) if grant_failed => None,
                result => sink.check(&origin, result),
            }
        }
        None => Some(
            write_in_order
                .iter()
                .find(|p| p.is_dir())
                .cloned()
                .unwrap_or_else(|| PathBuf::from("/tmp")),
        ),
    };

    // Environment.
    let env_raw = raw.env.as_ref().and_then(|e| e.allow.as_ref());
    let mut env_allow: Vec<String> =
        sourced("env.allow", env_raw, "--allow-env", &overrides.allow_env)
            .into_iter()
            .filter_map(|(origin, n)| {
                sink.check(&origin, rules::env_name(n))
                    .map(|()| n.to_owned())
            })
            .collect();
    env_allow.sort();
    env_allow.dedup();

    // Network: the egress allowlist, one diagnostic per refused entry.
    let net_raw = raw.network.as_ref();
    let network = net::NetworkPolicy::compile(
        net_raw.and_then(|n| n.allow.as_deref()).unwrap_or_default(),
        net_raw.and_then(|n| n.allow_private).unwrap_or(false),
    )
    .map_err(|errors| {
        for (i, message) in errors {
            let origin = Origin::Key(format!("network.allow[{i}]"));
            sink.report(&origin, Invalid::NetworkEntry(message));
        }
    })
    .ok();
    let mode = match net_raw.and_then(|n| n.mode.as_deref()) {
        None => Some(net::NetMode::default()),
        Some(m) => {
            let parsed = net::NetMode::parse(m);
            if parsed.is_none() {
                sink.report(
                    &Origin::Key("network.mode".into()),
                    Invalid::NetMode(m.to_owned()),
                );
            }
            parsed
        }
    };
    let network = network.zip(mode).map(|(mut n, mode)| {
        n.mode = mode;
        n
    });

    let backend = match raw.backend.as_deref() {
        None => Backend::Auto,
        Some(b) => Backend::parse(b).unwrap_or_else(|| {
            sink.report(
                &Origin::Key("backend".into()),
                Invalid::Backend(b.to_owned()),
            );
            Backend::Auto
        }),
    };

    let docker_image = raw
        .docker
        .as_ref()
        .and_then(|d| d.image.as_deref())
        .and_then(|i| sink.check(&Origin::Key("docker.image".into()), rules::docker_image(i)));

    // MCP: per-tool policy and pinning.
    let mcp_raw = raw.mcp.as_ref();
    let tools_raw = mcp_raw.and_then(|m| m.tools.as_ref());
    let mut patterns = |key: &str, list: Option<&Vec<String>>| -> Option<Vec<String>> {
        let list = list?;
        let mut out = Vec::new();
        for (i, p) in list.iter().enumerate() {
            let origin = Origin::Key(format!("mcp.tools.{key}[{i}]"));
            if let Some(p) = sink.check(&origin, rules::tool_pattern(p)) {
                out.push(p);
            }
        }
        Some(out)
    };
    let tools_allow = patterns("allow", tools_raw.and_then(|t| t.allow.as_ref()));
    let tools_deny = patterns("deny", tools_raw.and_then(|t| t.deny.as_ref())).unwrap_or_default();
    let pin = mcp_raw
        .and_then(|m| m.pin.as_deref())
        .and_then(|v| sink.check(&Origin::Key("mcp.pin".into()), rules::mcp_pin(v)))
        .unwrap_or_default();

    // Limits.
    let limits_raw = raw.limits.as_ref();
    let memory_mb = limits_raw
        .and_then(|l| l.memory_mb)
        .and_then(|v| sink.check(&Origin::Key("limits.memory_mb".into()), rules::memory_mb(v)));
    let timeout_s = limits_raw
        .and_then(|l| l.timeout_s)
        .and_then(|v| sink.check(&Origin::Key("limits.timeout_s".into()), rules::timeout_s(v)));

    let pids = limits_raw
        .and_then(|l| l.pids)
        .and_then(|v| sink.check(&Origin::Key("limits.pids".into()), rules::pids(v)));
    let tmp_mb = limits_raw
        .and_then(|l| l.tmp_mb)
        .and_then(|v| sink.check(&Origin::Key("limits.tmp_mb".into()), rules::tmp_mb(v)));
    let cpu = limits_raw
        .and_then(|l| l.cpu)
        .and_then(|v| sink.check(&Origin::Key("limits.cpu".into()), rules::cpu(v)));
    let best_effort = limits_raw.and_then(|l| l.best_effort).unwrap_or(false);
    let output_kb = limits_raw
        .and_then(|l| l.output_kb)
        .and_then(|v| sink.check(&Origin::Key("limits.output_kb".into()), rules::output_kb(v)));
    let best_effort_write_protection = raw
        .sandbox
        .as_ref()
        .and_then(|s| s.best_effort_write_protection)
        .unwrap_or(false);
    let landlock_min_abi = raw
        .sandbox
        .as_ref()
        .and_then(|s| s.landlock_min_abi)
        .and_then(|v| {
            sink.check(
                &Origin::Key("sandbox.landlock_min_abi".into()),
                rules::landlock_min_abi(v),
            )
        })
        .unwrap_or(0);

    let files_raw = raw.audit.as_ref().and_then(|a| a.files.as_deref());
    let files_explicit = files_raw.is_some();
    let files = files_raw
        .and_then(|v| sink.check(&Origin::Key("audit.files".into()), rules::audit_files(v)))
        .unwrap_or_default();

    let mut diagnostics = sink.diagnostics;
    if !diagnostics.is_empty() {
        // File order first (then file-wide ones), then flags in the order checked.
        diagnostics.sort_by_key(|d| (d.file.is_none(), d.line.is_none(), d.line, d.column));
        return Err(PolicyError { diagnostics });
    }
    let (Some(program), Some(cwd), Some(network)) = (program, cwd, network) else {
        let message = "internal error: a rule failed without a diagnostic".to_owned();
        return Err(file_diag(None, None, None, message).into());
    };
    Ok(CompiledPolicy {
        version: VERSION,
        name,
        source,
        digest: digest(input.text),
        argv,
        program,
        cwd,
        read,
        write,
        allow_git_init: fs_raw.and_then(|f| f.allow_git_init).unwrap_or(false),
        env_allow,
        network,
        limits: Limits {
            memory_mb,
            timeout_s,
            pids,
            tmp_mb,
            cpu,
            best_effort,
            output_kb,
        },
        sandbox: SandboxReq {
            landlock_min_abi,
            best_effort_write_protection,
        },
        audit: AuditPolicy {
            files,
            files_explicit,
            mcp_arguments: raw
                .audit
                .as_ref()
                .and_then(|a| a.mcp_arguments)
                .unwrap_or(false),
        },
        exposed,
        warnings: {
            let mut w = sink.warnings;
            w.sort_by_key(|d| (d.file.is_none(), d.line.is_none(), d.line, d.column));
            w.iter().map(ToString::to_string).collect()
        },
        approve: raw.approve.unwrap_or(false),
        backend,
        docker_image,
        mcp: McpPolicy {
            allow: tools_allow,
            deny: tools_deny,
            pin,
            explain_denials: mcp_raw.and_then(|m| m.explain_denials).unwrap_or(false),
        },
    })
}

/// The reserved-path rule: every grant (read or write) that is, lies inside
/// or holds a reserved path is refused, unless `filesystem.dangerously_expose`
/// names it (the grant itself for "is" and "inside", the reserved path for
/// "holds"). A waived conflict is a warning; an entry that waives nothing is
/// one too. Returns the entries that were used, sorted.
fn check_exposure(
    sink: &mut Sink,
    write: &[(Origin, PathBuf)],
    read: &[(Origin, PathBuf)],
    expose: &[(Origin, PathBuf)],
    extra: &[Reserved],
) -> Vec<PathBuf> {
    use reserved::Relation;
    // Warden's and the user's paths first: they say more than `/run`.
    let all = reserved::expand(&[extra, &reserved::system()].concat());
    let listed = |p: &Path| expose.iter().any(|(_, e)| e == p);
    let mut used: Vec<PathBuf> = Vec::new();
    for (origin, g) in write.iter().chain(read) {
        // The description shown: "is" over "lies inside" over "holds".
        let mut first: Option<(Relation, String)> = None;
        let mut need: Vec<&Path> = Vec::new();
        for r in &all {
            let Some(rel) = reserved::relation(g, r) else {
                continue;
            };
            // What is not there yet cannot be exposed by holding it.
            if rel == Relation::Contains && fs::symlink_metadata(&r.path).is_err() {
                continue;
            }
            let (key, text) = match rel {
                Relation::Is => (g.as_path(), format!("is {}", r.what)),
                Relation::Inside => (
                    g.as_path(),
                    format!("lies inside {} ({})", r.path.display(), r.what),
                ),
                Relation::Contains => (
                    r.path.as_path(),
                    format!("holds {} ({})", r.path.display(), r.what),
                ),
            };
            if listed(key) {
                if !used.iter().any(|u| u == key) {
                    used.push(key.to_path_buf());
                    let msg = format!("dangerously exposed to the server: {} {text}", g.display());
                    sink.warn(origin, msg);
                }
                continue;
            }
            let rank = |r: Relation| match r {
                Relation::Is => 0,
                Relation::Inside => 1,
                Relation::Contains => 2,
            };
            if first.as_ref().is_none_or(|(f, _)| rank(rel) < rank(*f)) {
                first = Some((rel, text));
            }
            if !need.contains(&key) {
                need.push(key);
            }
        }
        // The grant itself first, then what it holds.
        need.sort_by_key(|p| *p != g.as_path());
        if let Some((_, relation)) = first {
            let need: Vec<String> = need.iter().map(|p| format!("`{}`", p.display())).collect();
            let err = Invalid::Reserved {
                grant: g.display().to_string(),
                relation,
                need: need.join(", "),
            };
            sink.report(origin, err);
        }
    }
    for (origin, e) in expose {
        if !used.contains(e) {
            let msg = format!(
                "{} exposes nothing Warden refuses to grant (it is not a granted reserved path, nor one a grant holds); remove it",
                e.display()
            );
            sink.warn(origin, msg);
        }
    }
    used.sort();
    used.dedup();
    used
}
