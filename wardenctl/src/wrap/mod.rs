//! `wardenctl wrap CLIENT` / `wardenctl unwrap CLIENT` (docs/install.md,
//! "Wrapping MCP clients"): put `warden-shim --profile PROFILE` in front of
//! each stdio server of an MCP client's config, and take it away again.
//!
//! The config is edited in place by replacing byte spans (`jsonc.rs` for
//! the JSON clients, `toml_edit`'s spans for Codex's `config.toml`): only
//! the wrapped entries' `command` and `args` values change, every other byte
//! (comments, key order, unknown keys, the trailing newline) stays. The
//! original values' exact text is recorded in Warden's state
//! (`$XDG_STATE_HOME/warden/wrap/`), so `unwrap` restores them byte for byte
//! even after other edits of the file. Each changed file is backed up first
//! and written atomically (a temporary file in its directory, renamed over
//! it, with its mode), and never if it changed since it was read.

pub mod jsonc;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::ops::Range;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

#[derive(clap::Args, Debug)]
pub struct WrapArgs {
    /// The MCP client: claude-desktop, claude-code, cursor, vscode, windsurf, codex.
    pub client: String,
    /// Only this server (repeatable).
    #[arg(long = "server", value_name = "NAME")]
    pub servers: Vec<String>,
    /// Print what would change; touch nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// A file in the client's format instead of its default locations.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Do not trace a server to write its policy (`wardenctl init`): write
    /// the deny-everything policy at once.
    #[arg(long)]
    pub no_trace: bool,
}

/// The clients whose configs are JSON(C) with an object of servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    ClaudeDesktop,
    ClaudeCode,
    Cursor,
    Vscode,
    Windsurf,
    /// TOML (`[mcp_servers.NAME]`), edited through toml_edit's spans.
    Codex,
}

pub const CLIENTS: &[(&str, Client)] = &[
    ("claude-desktop", Client::ClaudeDesktop),
    ("claude-code", Client::ClaudeCode),
    ("cursor", Client::Cursor),
    ("vscode", Client::Vscode),
    ("windsurf", Client::Windsurf),
    ("codex", Client::Codex),
];

/// Where the client configs are looked for.
#[derive(Debug, Clone)]
pub struct Env {
    pub home: PathBuf,
    pub xdg_config_home: Option<PathBuf>,
    pub cwd: PathBuf,
    pub macos: bool,
    pub codex_home: Option<PathBuf>,
}

impl Env {
    pub fn from_process() -> anyhow::Result<Env> {
        Ok(Env {
            home: warden_core::paths::home_dir()?,
            xdg_config_home: std::env::var_os("XDG_CONFIG_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            cwd: std::env::current_dir()?,
            macos: cfg!(target_os = "macos"),
            codex_home: std::env::var_os("CODEX_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        })
    }

    fn config_home(&self) -> PathBuf {
        self.xdg_config_home
            .clone()
            .unwrap_or_else(|| self.home.join(".config"))
    }
}

impl Client {
    pub fn parse(name: &str) -> anyhow::Result<Client> {
        CLIENTS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| *c)
            .with_context(|| {
                let names: Vec<&str> = CLIENTS.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown client `{name}`; known clients: {}",
                    names.join(", ")
                )
            })
    }

    pub fn name(self) -> &'static str {
        CLIENTS
            .iter()
            .find(|(_, c)| *c == self)
            .map_or("?", |(n, _)| n)
    }

    /// The key of the servers object.
    fn key(self) -> &'static str {
        match self {
            Client::Vscode => "servers",
            _ => "mcpServers",
        }
    }

    /// The default config files, with their scope.
    pub fn defaults(self, env: &Env) -> Vec<(&'static str, PathBuf)> {
        let support = env.home.join("Library/Application Support");
        match self {
            Client::ClaudeDesktop => vec![(
                "user",
                if env.macos {
                    support.join("Claude/claude_desktop_config.json")
                } else {
                    env.config_home().join("Claude/claude_desktop_config.json")
                },
            )],
            Client::ClaudeCode => vec![
                ("project", env.cwd.join(".mcp.json")),
                ("user", env.home.join(".claude.json")),
            ],
            Client::Cursor => vec![
                ("project", env.cwd.join(".cursor/mcp.json")),
                ("user", env.home.join(".cursor/mcp.json")),
            ],
            Client::Vscode => vec![
                ("workspace", env.cwd.join(".vscode/mcp.json")),
                (
                    "user",
                    if env.macos {
                        support.join("Code/User/mcp.json")
                    } else {
                        env.config_home().join("Code/User/mcp.json")
                    },
                ),
            ],
            Client::Windsurf => vec![("user", env.home.join(".codeium/windsurf/mcp_config.json"))],
            Client::Codex => vec![(
                "user",
                env.codex_home
                    .clone()
                    .unwrap_or_else(|| env.home.join(".codex"))
                    .join("config.toml"),
            )],
        }
    }
}

/// What one server entry is.
#[derive(Debug, Clone, PartialEq)]
pub enum EntryKind {
    Stdio {
        command: String,
        args: Vec<String>,
        /// The names the entry's `env` sets.
        env: Vec<String>,
        /// Those of them with a string value, as the client would set them
        /// (the trace runs the server with them).
        env_values: Vec<(String, String)>,
    },
    /// Its command is a `warden-shim` (by wrap or by hand).
    Shim {
        args: Vec<String>,
    },
    Remote(String),
    Unusable(String),
}

/// One server of a config, with the spans wrap and unwrap edit.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The keys leading to the servers object (`["mcpServers"]`,
    /// `["projects", "/abs", "mcpServers"]`).
    pub section: Vec<String>,
    pub name: String,
    pub kind: EntryKind,
    command: Option<Range<usize>>,
    args: Option<Range<usize>>,
    /// Whitespace before the `command` key (the member indentation).
    indent: String,
    /// TOML: `Some(inline)` (an inline table or a `[table]`); JSON: None.
    toml: Option<bool>,
    /// TOML: just after the newline ending the `command` line.
    line_end: Option<usize>,
    text_len: usize,
}

fn is_shim(command: &str) -> bool {
    Path::new(command)
        .file_name()
        .is_some_and(|n| n == "warden-shim")
}

fn strings(v: &jsonc::Value) -> Option<Vec<String>> {
    match &v.kind {
        jsonc::Kind::Array(a) => a.iter().map(|x| x.as_str().map(str::to_owned)).collect(),
        _ => None,
    }
}

fn classify(v: &jsonc::Value) -> EntryKind {
    if !matches!(v.kind, jsonc::Kind::Object(_)) {
        return EntryKind::Unusable(format!("the entry is {}, not an object", v.type_name()));
    }
    let ty = v.get("type").and_then(|m| m.value.as_str());
    for key in ["url", "serverUrl", "httpUrl"] {
        if v.get(key).is_some() {
            return EntryKind::Remote(format!("`{key}`"));
        }
    }
    match ty {
        None | Some("stdio") => {}
        Some(t @ ("http" | "sse" | "streamable-http" | "streamableHttp")) => {
            return EntryKind::Remote(format!("type {t}"))
        }
        Some(t) => return EntryKind::Unusable(format!("unknown type `{t}`")),
    }
    let Some(command) = v.get("command").and_then(|m| m.value.as_str()) else {
        return EntryKind::Unusable("no `command` string".into());
    };
    let args = match v.get("args") {
        None => vec![],
        Some(m) => match strings(&m.value) {
            Some(a) => a,
            None => return EntryKind::Unusable("`args` is not an array of strings".into()),
        },
    };
    if is_shim(command) {
        return EntryKind::Shim { args };
    }
    let (env, env_values) = match v.get("env").map(|m| &m.value.kind) {
        None => (vec![], vec![]),
        Some(jsonc::Kind::Object(m)) => (
            m.iter().map(|m| m.key.clone()).collect(),
            m.iter()
                .filter_map(|m| Some((m.key.clone(), m.value.as_str()?.to_owned())))
                .collect(),
        ),
        Some(_) => return EntryKind::Unusable("`env` is not an object".into()),
    };
    EntryKind::Stdio {
        command: command.to_owned(),
        args,
        env,
        env_values,
    }
}

/// The entries of a client's config text. Errors name the file, line and column.
pub fn entries(client: Client, path: &Path, text: &str) -> anyhow::Result<Vec<Entry>> {
    if client == Client::Codex {
        return toml_entries(path, text);
    }
    let root = jsonc::parse(text).map_err(|e| anyhow::anyhow!("{}:{e}", path.display()))?;
    if !matches!(root.kind, jsonc::Kind::Object(_)) {
        bail!(
            "{}: the file is {}, not an object",
            path.display(),
            root.type_name()
        );
    }
    let mut sections: Vec<(Vec<String>, &jsonc::Value)> = Vec::new();
    if let Some(m) = root.get(client.key()) {
        sections.push((vec![client.key().to_owned()], &m.value));
    }
    if client == Client::ClaudeCode {
        if let Some(jsonc::Kind::Object(projects)) = root.get("projects").map(|m| &m.value.kind) {
            for p in projects {
                if let Some(m) = p.value.get("mcpServers") {
                    sections.push((
                        vec!["projects".into(), p.key.clone(), "mcpServers".into()],
                        &m.value,
                    ));
                }
            }
        }
    }
    let mut out = Vec::new();
    for (section, servers) in sections {
        let jsonc::Kind::Object(members) = &servers.kind else {
            let (l, c) = jsonc::line_col(text, servers.span.start);
            bail!(
                "{}:{l}:{c}: `{}` is {}, not an object of servers",
                path.display(),
                section.join("."),
                servers.type_name()
            );
        };
        for m in members {
            let cmd = m.value.get("command");
            let indent = cmd
                .map(|c| {
                    let before = &text[..c.key_span.start];
                    let ws = before.len() - before.trim_end().len();
                    before[before.len() - ws..].to_owned()
                })
                .unwrap_or_default();
            out.push(Entry {
                section: section.clone(),
                name: m.key.clone(),
                kind: classify(&m.value),
                command: cmd.map(|c| c.value.span.clone()),
                args: m.value.get("args").map(|a| a.value.span.clone()),
                indent,
                toml: None,
                line_end: None,
                text_len: text.len(),
            });
        }
    }
    Ok(out)
}

fn toml_entries(path: &Path, text: &str) -> anyhow::Result<Vec<Entry>> {
    let doc = toml_edit::Document::parse(text.to_owned()).map_err(|e| {
        let (l, c) = jsonc::line_col(text, e.span().map_or(0, |s| s.start));
        anyhow::anyhow!("{}:{l}:{c}: {}", path.display(), e.message())
    })?;
    let Some(item) = doc.as_table().get("mcp_servers") else {
        return Ok(vec![]);
    };
    let Some(servers) = item.as_table_like() else {
        bail!(
            "{}: `mcp_servers` is not a table of servers",
            path.display()
        );
    };
    let mut out = Vec::new();
    for (name, it) in servers.iter() {
        let mut e = Entry {
            section: vec!["mcp_servers".into()],
            name: name.to_owned(),
            kind: EntryKind::Unusable("not a table".into()),
            command: None,
            args: None,
            indent: String::new(),
            toml: Some(it.is_value()),
            line_end: None,
            text_len: text.len(),
        };
        if let Some(t) = it.as_table_like() {
            e.kind = toml_classify(t);
            if let Some(c) = t
                .get("command")
                .and_then(|i| i.as_value())
                .and_then(|v| v.span())
            {
                let start = text[..c.start].rfind('\n').map_or(0, |i| i + 1);
                let lead = &text[start..c.start];
                e.indent = lead[..lead.len() - lead.trim_start().len()].to_owned();
                if e.toml == Some(false) && !lead.trim_start().starts_with("command") {
                    e.kind = EntryKind::Unusable("`command` is a dotted key".into());
                }
                e.line_end = text[c.end..].find('\n').map(|i| c.end + i + 1);
                e.command = Some(c);
            }
            e.args = t
                .get("args")
                .and_then(|i| i.as_value())
                .and_then(|v| v.span());
        }
        out.push(e);
    }
    Ok(out)
}

fn toml_classify(t: &dyn toml_edit::TableLike) -> EntryKind {
    if t.get("url").is_some() {
        return EntryKind::Remote("`url`".into());
    }
    let Some(command) = t.get("command").and_then(|i| i.as_str()) else {
        return EntryKind::Unusable("no `command` string".into());
    };
    let args = match t.get("args") {
        None => vec![],
        Some(i) => match i.as_array().and_then(|a| {
            a.iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        }) {
            Some(a) => a,
            None => return EntryKind::Unusable("`args` is not an array of strings".into()),
        },
    };
    if is_shim(command) {
        return EntryKind::Shim { args };
    }
    let (env, env_values) = match t.get("env") {
        None => (vec![], vec![]),
        Some(i) => match i.as_table_like() {
            Some(e) => (
                e.iter().map(|(k, _)| k.to_owned()).collect(),
                e.iter()
                    .filter_map(|(k, v)| Some((k.to_owned(), v.as_str()?.to_owned())))
                    .collect(),
            ),
            None => return EntryKind::Unusable("`env` is not a table".into()),
        },
    };
    EntryKind::Stdio {
        command: command.to_owned(),
        args,
        env,
        env_values,
    }
}

/// One entry as wrap recorded it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Recorded {
    pub section: Vec<String>,
    pub server: String,
    pub profile: String,
    /// The `command` value's exact source text before wrapping.
    pub original_command: String,
    /// The `args` value's exact source text, None when there was none.
    pub original_args: Option<String>,
    pub wrapped_at: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct StateFile {
    pub client: String,
    pub config: PathBuf,
    pub entries: Vec<Recorded>,
}

fn state_dir() -> anyhow::Result<PathBuf> {
    Ok(warden_core::paths::default_state_dir()?.join("wrap"))
}

fn state_path(config: &Path) -> anyhow::Result<PathBuf> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in config.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    let stem: String = config
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    Ok(state_dir()?.join(format!("{stem}-{h:016x}.json")))
}

fn load_state(config: &Path) -> anyhow::Result<StateFile> {
    let p = state_path(config)?;
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b).with_context(|| format!("reading {}", p.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(StateFile::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

/// Every profile name recorded for any config (collisions get a suffix).
fn recorded_profiles() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Ok(dir) = state_dir() else { return out };
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if let Ok(b) = std::fs::read(e.path()) {
            if let Ok(s) = serde_json::from_slice::<StateFile>(&b) {
                out.extend(s.entries.into_iter().map(|r| r.profile));
            }
        }
    }
    out
}

fn save_state(config: &Path, s: &StateFile) -> anyhow::Result<()> {
    let dir = state_dir()?;
    warden_core::paths::ensure_private_dir(&dir)?;
    let p = state_path(config)?;
    let mut t = tempfile::NamedTempFile::new_in(&dir)?;
    t.write_all(serde_json::to_string_pretty(s)?.as_bytes())?;
    t.as_file().sync_all()?;
    t.persist(&p)
        .with_context(|| format!("writing {}", p.display()))?;
    Ok(())
}

/// A safe profile name: `<client>-<server>` with everything but ASCII
/// letters, digits and `_` turned into `-`, never empty, never with `/` or a
/// leading `.`.
pub fn profile_name(client: &str, server: &str) -> String {
    let mut s = String::new();
    for c in server.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' {
            c.to_ascii_lowercase()
        } else {
            '-'
        };
        if !(c == '-' && s.ends_with('-')) {
            s.push(c);
        }
    }
    let s: String = s.trim_matches('-').chars().take(48).collect();
    let s = s.trim_end_matches('-');
    if s.is_empty() {
        format!("{client}-server")
    } else {
        format!("{client}-{s}")
    }
}

/// `name`, or `name-2`, `name-3`... the first not in `taken`.
fn unique(name: String, taken: &BTreeSet<String>) -> String {
    if !taken.contains(&name) {
        return name;
    }
    (2..)
        .map(|i| format!("{name}-{i}"))
        .find(|n| !taken.contains(n))
        .unwrap_or(name)
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn shim_args(profile: &str) -> String {
    format!("[\"--profile\", {}]", json_str(profile))
}

/// The edits that wrap `e` (command and args replaced, or args inserted).
fn wrap_edits(e: &Entry, shim: &str, profile: &str) -> Vec<(Range<usize>, String)> {
    let Some(cmd) = e.command.clone() else {
        return vec![];
    };
    match (e.args.clone(), e.toml) {
        (Some(a), _) => vec![(cmd, json_str(shim)), (a, shim_args(profile))],
        (None, Some(true)) => vec![(
            cmd,
            format!("{}, args = {}", json_str(shim), shim_args(profile)),
        )],
        (None, Some(false)) => {
            let line = format!("{}args = {}\n", e.indent, shim_args(profile));
            let mut v = vec![(cmd, json_str(shim))];
            match e.line_end {
                Some(i) => v.push((i..i, line)),
                None => v.push((
                    e.text_len..e.text_len,
                    format!("\n{}", line.trim_end_matches('\n')),
                )),
            }
            v
        }
        (None, None) => {
            let sep = if e.indent.contains('\n') {
                e.indent.clone()
            } else {
                " ".into()
            };
            vec![(
                cmd,
                format!("{},{sep}\"args\": {}", json_str(shim), shim_args(profile)),
            )]
        }
    }
}

/// The edits that put `r`'s original values back into `e` (wrapped by us).
fn unwrap_edits(text: &str, e: &Entry, r: &Recorded) -> Vec<(Range<usize>, String)> {
    let (Some(cmd), Some(args)) = (e.command.clone(), e.args.clone()) else {
        return vec![];
    };
    if e.toml == Some(false) && r.original_args.is_none() {
        // The `args = [...]` line wrap inserted: drop the line.
        let start = text[..args.start].rfind('\n').map_or(0, |i| i + 1);
        if text[start..args.start].trim_start().starts_with("args") {
            let range = match text[args.end..].find('\n') {
                Some(i) => start..args.end + i + 1,
                None => start.saturating_sub(1)..text.len(),
            };
            return vec![(cmd, r.original_command.clone()), (range, String::new())];
        }
        return vec![(cmd, r.original_command.clone())];
    }
    match &r.original_args {
        Some(a) => vec![(cmd, r.original_command.clone()), (args, a.clone())],
        None if cmd.end <= args.start => {
            // The args member wrap inserted after the command: drop it with
            // its separator.
            let between = &text[cmd.end..args.start];
            let t = between.trim();
            let key = t
                .trim_start_matches(',')
                .trim()
                .trim_end_matches([':', '='])
                .trim();
            if t.starts_with(',') && (key == "\"args\"" || key == "args") {
                vec![(cmd.start..args.end, r.original_command.clone())]
            } else {
                vec![(cmd, r.original_command.clone())]
            }
        }
        None => vec![(cmd, r.original_command.clone())],
    }
}

fn apply(text: &str, mut edits: Vec<(Range<usize>, String)>) -> String {
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut out = text.to_owned();
    for (r, s) in edits {
        out.replace_range(r, &s);
    }
    out
}

/// The `warden-shim` beside this `wardenctl`, absolute.
fn shim_path() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("finding wardenctl's own path")?;
    let dir = exe.parent().context("wardenctl's directory")?;
    Ok(dir.join("warden-shim"))
}

#[derive(Debug, Serialize)]
pub struct ServerOut {
    pub server: String,
    pub section: String,
    /// wrapped, already-wrapped, rewrapped, remote, unusable, restored,
    /// not-ours, not-wrapped, error.
    pub action: &'static str,
    pub profile: Option<String>,
    pub policy: Option<String>,
    pub detail: String,
}

#[derive(Debug, Serialize)]
pub struct ConfigOut {
    pub path: String,
    pub changed: bool,
    pub backup: Option<String>,
    pub diff: Option<String>,
    pub servers: Vec<ServerOut>,
}

#[derive(Debug, Serialize)]
pub struct Out {
    pub client: String,
    pub dry_run: bool,
    pub configs: Vec<ConfigOut>,
}

/// The configs to work on: `--config`, or the client's defaults that exist.
fn configs(client: Client, args: &WrapArgs) -> anyhow::Result<Vec<PathBuf>> {
    if let Some(c) = &args.config {
        let abs = std::env::current_dir()?.join(c);
        if !abs.exists() {
            bail!("{}: no such file", abs.display());
        }
        return Ok(vec![abs]);
    }
    let env = Env::from_process()?;
    let d = client.defaults(&env);
    let found: Vec<PathBuf> = d
        .iter()
        .map(|(_, p)| p.clone())
        .filter(|p| p.exists())
        .collect();
    if found.is_empty() {
        let looked: Vec<String> = d.iter().map(|(_, p)| p.display().to_string()).collect();
        bail!(
            "no {} config found (looked at {}); pass --config FILE",
            client.name(),
            looked.join(", ")
        );
    }
    Ok(found)
}

/// The file a config path names, through symlinks.
fn target(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

fn now() -> String {
    let f = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    time::OffsetDateTime::now_utc()
        .format(&f)
        .unwrap_or_default()
}

/// Backs `path` (holding `old`) up in the state directory; returns where.
fn backup(path: &Path, old: &[u8]) -> anyhow::Result<PathBuf> {
    let dir = state_dir()?.join("backups");
    warden_core::paths::ensure_private_dir(&dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut p = dir.join(format!("{name}.{}", now()));
    let mut i = 1;
    while p.exists() {
        i += 1;
        p = dir.join(format!("{name}.{}.{i}", now()));
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&p)
        .with_context(|| format!("creating {}", p.display()))?;
    f.write_all(old)?;
    f.sync_all()?;
    Ok(p)
}

use std::os::unix::fs::OpenOptionsExt;

/// Writes `new` over `path` atomically, keeping its mode; refuses when the
/// file no longer holds `old`.
fn write_atomic(path: &Path, old: &[u8], new: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().context("the config's directory")?;
    let mode = std::fs::metadata(path)?.permissions().mode();
    let mut t = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    t.write_all(new)?;
    t.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    t.as_file().sync_all()?;
    let now = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if now != old {
        bail!(
            "{} changed while it was being edited; nothing written (run the command again)",
            path.display()
        );
    }
    t.persist(path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@+,".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A starter policy for `argv` from `wardenctl init` (the server traced in
/// the observe-everything sandbox, through the daemon), or why there is
/// none. The entry's `env` values are set for the traced server, as the
/// client would set them.
fn traced_policy(
    profile: &str,
    argv: &[String],
    names: &[String],
    env: &[(String, String)],
    socket: Option<&Path>,
) -> Result<String, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
    let out = dir.path().join(format!("{profile}.yaml"));
    let exe = std::env::current_exe().map_err(|e| format!("cannot find wardenctl: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    if let Some(s) = socket {
        cmd.arg("--socket").arg(s);
    }
    cmd.args(["init", "--name", profile, "--output"]).arg(&out);
    // The names the client sets are the server's to have, used in the
    // trace or not.
    for name in names {
        cmd.arg("--allow-env").arg(name);
    }
    cmd.arg("--")
        .args(argv)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let done = cmd
        .output()
        .map_err(|e| format!("cannot run wardenctl init: {e}"))?;
    if !done.status.success() {
        let err = String::from_utf8_lossy(&done.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("it failed")
            .trim()
            .to_owned();
        return Err(last);
    }
    std::fs::read_to_string(&out).map_err(|e| format!("reading what init wrote: {e}"))
}

/// A policy that grants nothing but the command and the client's variables.
fn deny_all_policy(
    client: &str,
    server: &str,
    config: &Path,
    profile: &str,
    argv: &[String],
    env: &[String],
) -> String {
    let q = |s: &str| json_str(s);
    let cmd: Vec<String> = argv.iter().map(|a| q(a)).collect();
    let env: Vec<String> = env.iter().map(|a| q(a)).collect();
    format!(
        "# Written by `wardenctl wrap {client}` for the server {} of\n# {}.\n\
         # It grants nothing: no files beyond the runtime, no network; only the\n\
         # variables the client's config sets are passed through. Trace the server\n\
         # for a starter policy that lets it work: `wardenctl init -- COMMAND`.\n\
         version: 1\nname: {}\ncommand: [{}]\nenv:\n  allow: [{}]\n",
        q(server),
        config.display(),
        q(profile),
        cmd.join(", "),
        env.join(", ")
    )
}

pub fn run(
    args: &WrapArgs,
    unwrap: bool,
    socket: Option<&Path>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let client = Client::parse(&args.client)?;
    let paths = configs(client, args)?;
    // Read and parse everything first: a bad file or an unknown --server
    // stops before anything is written.
    let mut loaded = Vec::new();
    for p in &paths {
        let real = target(p);
        let old = std::fs::read(&real).with_context(|| format!("reading {}", real.display()))?;
        let text = String::from_utf8(old.clone())
            .map_err(|_| anyhow::anyhow!("{}: not UTF-8", real.display()))?;
        let es = entries(client, p, &text)?;
        loaded.push((p.clone(), real, old, text, es));
    }
    let names: BTreeSet<&str> = loaded
        .iter()
        .flat_map(|l| l.4.iter().map(|e| e.name.as_str()))
        .collect();
    for s in &args.servers {
        if !names.contains(s.as_str()) {
            let list: Vec<&str> = names.iter().copied().collect();
            bail!(
                "no server `{s}` in the {} config; its servers: {}",
                client.name(),
                if list.is_empty() {
                    "none".to_owned()
                } else {
                    list.join(", ")
                }
            );
        }
    }
    let shim = shim_path()?;
    let shim_s = shim.display().to_string();
    let mut taken = recorded_profiles();
    let mut out = Out {
        client: client.name().into(),
        dry_run: args.dry_run,
        configs: vec![],
    };
    for (path, real, old, text, es) in loaded {
        let mut state = load_state(&real)?;
        state.client = client.name().into();
        state.config = real.clone();
        let mut edits = Vec::new();
        let mut servers = Vec::new();
        let mut policies: Vec<(PathBuf, String)> = Vec::new();
        for e in &es {
            if !args.servers.is_empty() && !args.servers.contains(&e.name) {
                continue;
            }
            let rec = state
                .entries
                .iter()
                .position(|r| r.section == e.section && r.server == e.name);
            let mut so = ServerOut {
                server: e.name.clone(),
                section: e.section.join("."),
                action: "",
                profile: rec.map(|i| state.entries[i].profile.clone()),
                policy: None,
                detail: String::new(),
            };
            if unwrap {
                match (&e.kind, rec) {
                    (EntryKind::Shim { args: a }, Some(i))
                        if *a == ["--profile".to_owned(), state.entries[i].profile.clone()] =>
                    {
                        edits.extend(unwrap_edits(&text, e, &state.entries[i]));
                        so.action = "restored";
                        so.detail = format!(
                            "restored; its policy {} is kept",
                            crate::profiles::profile_path(&state.entries[i].profile)?.display()
                        );
                        state.entries.remove(i);
                    }
                    (_, Some(i)) => {
                        so.action = "not-ours";
                        so.detail = "not Warden's wrapping any more, left as it is".into();
                        state.entries.remove(i);
                    }
                    (EntryKind::Shim { .. }, None) => {
                        so.action = "not-ours";
                        so.detail = "wrapped by hand, not by wrap: left as it is".into();
                    }
                    _ => {
                        so.action = "not-wrapped";
                        so.detail = "not wrapped, left as it is".into();
                    }
                }
                servers.push(so);
                continue;
            }
            match &e.kind {
                EntryKind::Remote(why) => {
                    so.action = "remote";
                    so.detail =
                        format!("left alone: remote ({why}), Warden sandboxes stdio servers");
                }
                EntryKind::Unusable(why) => {
                    so.action = "unusable";
                    so.detail = format!("left alone: {why}");
                }
                EntryKind::Shim { .. } => {
                    so.action = "already-wrapped";
                    so.detail = if rec.is_some() {
                        "already wrapped".into()
                    } else {
                        "already wrapped (by hand)".into()
                    };
                }
                EntryKind::Stdio {
                    command,
                    args: a,
                    env,
                    env_values,
                } => {
                    let profile = match rec {
                        Some(i) => state.entries[i].profile.clone(),
                        None => {
                            let p = unique(profile_name(client.name(), &e.name), &taken);
                            taken.insert(p.clone());
                            p
                        }
                    };
                    let ppath = crate::profiles::profile_path(&profile)?;
                    let mut argv = vec![command.clone()];
                    argv.extend(a.iter().cloned());
                    // A policy from tracing the server, when that works.
                    let traced = if ppath.exists() || args.dry_run || args.no_trace {
                        None
                    } else {
                        if !json {
                            eprintln!(
                                "wrap: tracing {} for its policy (wardenctl init)...",
                                e.name
                            );
                        }
                        Some(
                            traced_policy(&profile, &argv, env, env_values, socket).and_then(|t| {
                                match crate::profiles::compile_text(&ppath, &t, socket) {
                                    Ok(Ok(_)) => Ok(t),
                                    Ok(Err(err)) => Err(format!(
                                        "the traced policy does not compile: {}",
                                        err.lines().next().unwrap_or_default()
                                    )),
                                    Err(err) => Err(format!("{err:#}")),
                                }
                            }),
                        )
                    };
                    let mut pdetail = if ppath.exists() {
                        format!("existing policy {} kept", ppath.display())
                    } else if let Some(Ok(text)) = traced {
                        policies.push((ppath.clone(), text));
                        format!(
                            "wrote {}, a starter policy from tracing it (wardenctl init): review it",
                            ppath.display()
                        )
                    } else {
                        let why = match &traced {
                            Some(Err(why)) => format!("tracing it failed ({why}); "),
                            _ => String::new(),
                        };
                        let text =
                            deny_all_policy(client.name(), &e.name, &real, &profile, &argv, env);
                        match crate::profiles::compile_text(&ppath, &text, socket)? {
                            Ok(_) => {}
                            Err(err) => {
                                so.action = "error";
                                so.detail = format!(
                                    "left alone: its policy would not compile: {}",
                                    err.lines().next().unwrap_or_default()
                                );
                                servers.push(so);
                                continue;
                            }
                        }
                        policies.push((ppath.clone(), text));
                        let words: Vec<String> = argv.iter().map(|w| shell_word(w)).collect();
                        format!(
                            "{why}{} {}, which grants nothing beyond the command; for one that lets it work: \
                             wardenctl init --name {profile} --output {}.traced.yaml -- {} (then review it and move it over {})",
                            if args.dry_run { "would write" } else { "wrote" },
                            ppath.display(),
                            ppath.with_extension("").display(),
                            words.join(" "),
                            ppath.display()
                        )
                    };
                    let w = wrap_edits(e, &shim_s, &profile);
                    let (Some(c), true) = (e.command.clone(), !w.is_empty()) else {
                        continue;
                    };
                    let r = Recorded {
                        section: e.section.clone(),
                        server: e.name.clone(),
                        profile: profile.clone(),
                        original_command: text[c].to_owned(),
                        original_args: e.args.clone().map(|a| text[a].to_owned()),
                        wrapped_at: now(),
                    };
                    so.action = if let Some(i) = rec {
                        state.entries[i] = r;
                        pdetail = format!(
                            "drift re-wrapped (the client had replaced the wrapping); {pdetail}"
                        );
                        "rewrapped"
                    } else {
                        state.entries.push(r);
                        "wrapped"
                    };
                    edits.extend(w);
                    so.profile = Some(profile);
                    so.policy = Some(ppath.display().to_string());
                    so.detail = pdetail;
                }
            }
            servers.push(so);
        }
        let new = apply(&text, edits);
        let changed = new != text;
        let diff = changed.then(|| {
            similar::TextDiff::from_lines(&text, &new)
                .unified_diff()
                .header(&path.display().to_string(), &path.display().to_string())
                .to_string()
        });
        let mut backup_path = None;
        if !args.dry_run {
            if changed {
                // The result must still parse, with the same servers.
                entries(client, &path, &new)
                    .context("the edited config does not parse (a bug); nothing written")?;
                let b = backup(&real, &old)?;
                write_atomic(&real, &old, new.as_bytes())?;
                backup_path = Some(b.display().to_string());
            }
            for (p, t) in &policies {
                if let Some(d) = p.parent() {
                    std::fs::create_dir_all(d)
                        .with_context(|| format!("creating {}", d.display()))?;
                }
                crate::trace::write_new(p, t.as_bytes())?;
            }
            save_state(&real, &state)?;
        }
        out.configs.push(ConfigOut {
            path: path.display().to_string(),
            changed,
            backup: backup_path,
            diff: if args.dry_run { diff } else { None },
            servers,
        });
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print(&out);
    }
    Ok(ExitCode::SUCCESS)
}

fn print(o: &Out) {
    for c in &o.configs {
        println!("{}:", c.path);
        for s in &c.servers {
            let at = if s.section.contains('.') {
                format!(" ({})", s.section)
            } else {
                String::new()
            };
            let name = crate::cell(&s.server);
            match &s.profile {
                Some(p) if s.action == "wrapped" || s.action == "rewrapped" => {
                    println!(
                        "  {name}{at}: {} (profile {p}); {}",
                        if o.dry_run { "would wrap" } else { s.action },
                        s.detail
                    )
                }
                _ => println!("  {name}{at}: {}", s.detail),
            }
        }
        if let Some(d) = &c.diff {
            print!("{d}");
        }
        match (&c.backup, c.changed, o.dry_run) {
            (_, true, true) => println!("  (dry run: nothing written)"),
            (Some(b), true, false) => println!("  backup of the previous file: {b}"),
            _ => println!("  unchanged"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = "{\n  // servers\n  \"mcpServers\": {\n    \"fs\": {\n      \"command\": \"npx\",\n      \"args\": [\"-y\", \"x\"],\n      \"env\": {\"K\": \"v\"},\n      \"extra\": 1,\n    },\n    \"bare\": {\n      \"command\": \"node\"\n    },\n    \"r\": {\"type\": \"http\", \"url\": \"https://x\"},\n    \"w\": {\"command\": \"/opt/warden-shim\", \"args\": [\"--profile\", \"p\"]}\n  }\n}";

    #[test]
    fn classifies_entries() {
        let es = entries(Client::ClaudeDesktop, Path::new("c.json"), CFG).unwrap();
        let kinds: Vec<_> = es
            .iter()
            .map(|e| (e.name.as_str(), e.kind.clone()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (
                    "fs",
                    EntryKind::Stdio {
                        command: "npx".into(),
                        args: vec!["-y".into(), "x".into()],
                        env: vec!["K".into()],
                        env_values: vec![("K".into(), "v".into())],
                    }
                ),
                (
                    "bare",
                    EntryKind::Stdio {
                        command: "node".into(),
                        args: vec![],
                        env: vec![],
                        env_values: vec![],
                    }
                ),
                ("r", EntryKind::Remote("`url`".into())),
                (
                    "w",
                    EntryKind::Shim {
                        args: vec!["--profile".into(), "p".into()]
                    }
                ),
            ]
        );
    }

    #[test]
    fn wrap_then_unwrap_is_byte_identical() {
        let es = entries(Client::ClaudeDesktop, Path::new("c.json"), CFG).unwrap();
        let mut edits = vec![];
        let mut recs = vec![];
        for e in es.iter().take(2) {
            edits.extend(wrap_edits(e, "/b/warden-shim", &format!("p-{}", e.name)));
            recs.push(Recorded {
                section: e.section.clone(),
                server: e.name.clone(),
                profile: format!("p-{}", e.name),
                original_command: CFG[e.command.clone().unwrap()].to_owned(),
                original_args: e.args.clone().map(|a| CFG[a].to_owned()),
                wrapped_at: String::new(),
            });
        }
        let wrapped = apply(CFG, edits);
        assert!(
            wrapped.contains(
                "\"command\": \"/b/warden-shim\",\n      \"args\": [\"--profile\", \"p-bare\"]\n"
            ),
            "{wrapped}"
        );
        assert!(wrapped.contains("// servers") && wrapped.contains("\"extra\": 1,"));
        let es2 = entries(Client::ClaudeDesktop, Path::new("c.json"), &wrapped).unwrap();
        let mut edits = vec![];
        for (e, r) in es2.iter().zip(&recs) {
            assert!(matches!(e.kind, EntryKind::Shim { .. }));
            edits.extend(unwrap_edits(&wrapped, e, r));
        }
        assert_eq!(apply(&wrapped, edits), CFG);
    }

    #[test]
    fn profile_names_are_safe() {
        assert_eq!(
            profile_name("claude-desktop", "; rm -rf ~"),
            "claude-desktop-rm-rf"
        );
        assert_eq!(profile_name("cursor", "$(x)"), "cursor-x");
        assert_eq!(profile_name("cursor", "../.."), "cursor-server");
        assert_eq!(profile_name("cursor", "GitHub.com"), "cursor-github-com");
        let taken = BTreeSet::from(["a".to_owned(), "a-2".to_owned()]);
        assert_eq!(unique("a".into(), &taken), "a-3");
    }

    #[test]
    fn claude_code_project_sections_and_bad_sections() {
        let t = "{\"mcpServers\": {}, \"projects\": {\"/p\": {\"mcpServers\": {\"a\": {\"command\": \"x\"}}}}}";
        let es = entries(Client::ClaudeCode, Path::new("c.json"), t).unwrap();
        assert_eq!(es[0].section, vec!["projects", "/p", "mcpServers"]);
        let e = entries(
            Client::Cursor,
            Path::new("c.json"),
            "{\n \"mcpServers\": []}",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.json:2:16: `mcpServers` is an array, not an object of servers"
        );
        let e = entries(
            Client::Cursor,
            Path::new("c.json"),
            "{\n \"mcpServers\": {,}}",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("c.json:2:"), "{e}");
    }
}

/// What a server of a client config is, as `wardenctl doctor` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Wrapped by `wardenctl wrap`, as recorded.
    Wrapped,
    /// Its command is a `warden-shim`, not recorded by wrap.
    WrappedByHand,
    /// A stdio server without Warden.
    NotWrapped,
    /// Recorded as wrapped, but the entry lost its wrapping (the client or
    /// the user rewrote it).
    Drifted,
    /// Recorded as wrapped, but the entry is gone.
    Missing,
    Remote,
    /// An entry wrap cannot read (the reason).
    Unusable(String),
}

#[derive(Debug, Clone, Serialize)]
pub struct ClientDrift {
    pub client: &'static str,
    /// `user`, `project`, `workspace`, or `config` (a file wrapped with --config).
    pub scope: &'static str,
    pub path: PathBuf,
    pub found: bool,
    /// Section (dotted), server name, state.
    pub servers: Vec<(String, String, ServerState)>,
}

impl ClientDrift {
    /// The command that wraps what is not wrapped.
    pub fn fix(&self) -> String {
        if self.scope == "config" {
            format!(
                "wardenctl wrap {} --config {}",
                self.client,
                shell_word(&self.path.display().to_string())
            )
        } else {
            format!("wardenctl wrap {}", self.client)
        }
    }
}

/// The state of each server of one config.
fn drift_of(client: Client, scope: &'static str, path: &Path) -> anyhow::Result<ClientDrift> {
    let mut d = ClientDrift {
        client: client.name(),
        scope,
        path: path.to_path_buf(),
        found: path.exists(),
        servers: vec![],
    };
    if !d.found {
        return Ok(d);
    }
    let real = target(path);
    let text =
        std::fs::read_to_string(&real).with_context(|| format!("reading {}", real.display()))?;
    let es = entries(client, path, &text)?;
    let state = load_state(&real)?;
    for e in &es {
        let rec = state
            .entries
            .iter()
            .find(|r| r.section == e.section && r.server == e.name);
        let s = match (&e.kind, rec) {
            (EntryKind::Shim { args }, Some(r))
                if *args == ["--profile".to_owned(), r.profile.clone()] =>
            {
                ServerState::Wrapped
            }
            (EntryKind::Shim { .. }, _) => ServerState::WrappedByHand,
            (EntryKind::Stdio { .. }, Some(_)) => ServerState::Drifted,
            (EntryKind::Stdio { .. }, None) => ServerState::NotWrapped,
            (EntryKind::Remote(_), _) => ServerState::Remote,
            (EntryKind::Unusable(why), _) => ServerState::Unusable(why.clone()),
        };
        d.servers.push((e.section.join("."), e.name.clone(), s));
    }
    for r in &state.entries {
        if !es
            .iter()
            .any(|e| e.section == r.section && e.name == r.server)
        {
            d.servers
                .push((r.section.join("."), r.server.clone(), ServerState::Missing));
        }
    }
    Ok(d)
}

/// One [`ClientDrift`] per known client and default config file, then one
/// per other config wrap recorded (wrapped with `--config`).
pub fn drift_all(env: &Env) -> Vec<anyhow::Result<ClientDrift>> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (_, client) in CLIENTS {
        for (scope, path) in client.defaults(env) {
            seen.insert(target(&path));
            out.push(drift_of(*client, scope, &path));
        }
    }
    let Ok(dir) = state_dir() else { return out };
    let mut recorded: Vec<StateFile> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<StateFile>(&b).ok())
        .filter(|s| !s.entries.is_empty())
        .collect();
    recorded.sort_by(|a, b| a.config.cmp(&b.config));
    for s in recorded {
        if seen.contains(&s.config) {
            continue;
        }
        match Client::parse(&s.client) {
            Ok(c) => out.push(drift_of(c, "config", &s.config)),
            Err(e) => out.push(Err(e)),
        }
    }
    out
}
