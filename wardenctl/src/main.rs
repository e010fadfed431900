//! `wardenctl`: watch and steer `wardend`.
//!
//! `ps`, `kill ID`, `status`, `approve` (approve.rs) talk to the daemon; `policy check FILE` works
//! offline, as do `install` and `uninstall` (service/: the user service); `logs` reads the audit store (`logs -f` follows it through the
//! daemon, see `logs.rs`). Every command takes `--socket PATH` and `--json`;
//! JSON output is typed structs serialised, human output is aligned columns.
#![forbid(unsafe_code)]

mod approve;
mod doctor;
mod exec;
mod init;
mod logs;
mod mcp;
mod profiles;
mod service;
mod suggest;
mod trace;
mod wrap;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde::Serialize;
use warden_client::pb;
use warden_core::policy;

#[derive(Parser, Debug)]
#[command(name = "wardenctl", version, about = "Watch and steer Warden sessions")]
struct Cli {
    /// Control socket of wardend.
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// List live sessions.
    Ps,
    /// End a session: SIGTERM to its whole sandbox, SIGKILL after a grace.
    Kill(KillArgs),
    /// Show the daemon and what the kernel offers.
    Status,
    /// Show, follow (-f) or verify (--verify) the audit log.
    Logs(logs::LogsArgs),
    /// List, answer (ID --once|--session|--always|--deny) or watch approvals.
    Approve(approve::ApproveArgs),
    /// The smallest policy change that would have allowed what a session was
    /// denied, as a diff of its policy file (--apply makes it).
    Suggest(suggest::SuggestArgs),
    /// Run a command in the observe-everything sandbox and write every file
    /// access, exec and connection it made as JSONL (--mcp drives the server).
    Trace(trace::TraceArgs),
    /// Write a starter policy from a trace (--log FILE), or trace the server
    /// first (-- CMD ...): only what it used, collapsed, each grant commented.
    Init(init::InitArgs),
    /// Check this machine: kernel features and what needs them, the daemon,
    /// the audit store, the service and the MCP clients' configs, with the
    /// fix for each problem.
    Doctor(doctor::DoctorArgs),
    /// Install wardend as a user service (systemd socket activation, or a
    /// launchd agent); --dry-run prints what it would do.
    Install(service::InstallArgs),
    /// Stop and remove what install set up (never policies or the audit store).
    Uninstall(service::UninstallArgs),
    /// Put warden-shim in front of each stdio server of an MCP client's
    /// config (claude-desktop, claude-code, cursor, vscode, windsurf, codex).
    Wrap(wrap::WrapArgs),
    /// Restore the entries wrap changed, byte for byte (policies are kept).
    Unwrap(wrap::WrapArgs),
    /// An MCP server (stdio) with one tool, run_sandboxed: every call runs
    /// in a fresh sandbox under the policy (the ceiling of every call).
    ExecServer(exec::ExecServerArgs),
    /// Policy tools.
    Policy {
        #[command(subcommand)]
        cmd: PolicyCmd,
    },
}

#[derive(clap::Args, Debug)]
struct KillArgs {
    /// Session id (or a unique prefix).
    id: String,
}

#[derive(Subcommand, Debug)]
enum PolicyCmd {
    /// Validate a policy file and print the compiled policy.
    Check { file: PathBuf },
    /// List the profiles (`warden-shim --profile NAME`), each compiled.
    List,
    /// Print a profile's path and its compiled policy: what it allows.
    Show { name: String },
    /// Edit a profile with $VISUAL/$EDITOR on a copy, put in place only
    /// once it compiles.
    Edit { name: String },
}

#[derive(Serialize)]
struct SessionRow {
    id: String,
    name: String,
    pid: u32,
    command: Vec<String>,
    policy: String,
    started_at_ms: i64,
    uptime_ms: u64,
    client_pid: u32,
    limits: Vec<String>,
    network_allowed: u64,
    network_denied: u64,
    last_denial: Option<String>,
    memory_bytes: u64,
    /// None: no memory_mb limit.
    memory_limit_bytes: Option<u64>,
    cpu_ms: u64,
    stdin_bytes: u64,
    stdout_bytes: u64,
    stderr_bytes: u64,
    /// Approvals are on; how many accesses wait for an answer.
    approve: bool,
    approvals_pending: u32,
    files_denied: u64,
    /// The backend that runs it, and why each one `auto` tried first could not.
    backend: String,
    backend_skipped: Vec<String>,
    /// The `tools/call` requests in flight ("TOOL (id ID)").
    tool_calls: Vec<String>,
    /// Tool definitions that differ from the profile's pin ("TOOL
    /// (changed)"), and those `mcp.pin: enforce` withholds now.
    tools_unpinned: Vec<String>,
    tools_withheld: Vec<String>,
}

#[derive(Serialize)]
struct Feature {
    name: String,
    available: bool,
    detail: String,
}

impl From<pb::KernelFeature> for Feature {
    fn from(f: pb::KernelFeature) -> Feature {
        Feature {
            name: f.name,
            available: f.available,
            detail: f.detail,
        }
    }
}

#[derive(Serialize)]
struct StatusOut {
    version: String,
    pid: u32,
    uid: u32,
    socket: String,
    state_dir: String,
    audit_path: String,
    sessions: u32,
    uptime_ms: u64,
    features: Vec<Feature>,
    /// Each sandbox backend in `auto`'s order here, and why one cannot run.
    backends: Vec<Feature>,
    /// Settings of this user's machine that Warden's protections assume or
    /// recommend (read by `wardenctl` itself, not the daemon).
    host: Vec<Feature>,
}

#[derive(Serialize)]
struct KillOut {
    killed: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("wardenctl: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Cmd::Policy { cmd } = &cli.cmd {
        let socket = cli.socket.as_deref();
        return match cmd {
            PolicyCmd::Check { file } => policy_check(file, socket, cli.json),
            PolicyCmd::List => profiles::list(socket, cli.json),
            PolicyCmd::Show { name } => profiles::show(name, socket, cli.json),
            PolicyCmd::Edit { name } => profiles::edit(name, socket),
        };
    }
    if let Cmd::Doctor(args) = &cli.cmd {
        return doctor::run(args, cli.socket.as_deref(), cli.json);
    }
    if let Cmd::Logs(args) = &cli.cmd {
        return logs::run(args, cli.socket.as_deref(), cli.json);
    }
    if let Cmd::Suggest(args) = &cli.cmd {
        return suggest::run(args, cli.socket.as_deref(), cli.json);
    }
    if let Cmd::Trace(args) = &cli.cmd {
        return trace::run(args, cli.socket.as_deref(), cli.json);
    }
    if let Cmd::Init(args) = &cli.cmd {
        return init::run(args, cli.socket.as_deref(), cli.json);
    }
    if let Cmd::Wrap(args) = &cli.cmd {
        return wrap::run(args, false, cli.socket.as_deref(), cli.json);
    }
    if let Cmd::Unwrap(args) = &cli.cmd {
        return wrap::run(args, true, cli.socket.as_deref(), cli.json);
    }
    if let Cmd::ExecServer(args) = &cli.cmd {
        return exec::run(args, cli.socket.as_deref());
    }
    if let Cmd::Install(args) = &cli.cmd {
        return service::install(args, cli.socket.as_deref(), cli.json);
    }
    if let Cmd::Uninstall(args) = &cli.cmd {
        return service::uninstall(args, cli.socket.as_deref(), cli.json);
    }
    let socket = warden_core::paths::socket_path(cli.socket.as_deref())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut c = warden_client::connect(&socket).await?;
        match cli.cmd {
            Cmd::Ps => {
                let r = c
                    .list_sessions(pb::ListSessionsRequest {})
                    .await?
                    .into_inner();
                let rows: Vec<SessionRow> = r
                    .sessions
                    .into_iter()
                    .map(|s| SessionRow {
                        id: s.id,
                        name: s.name,
                        pid: s.pid,
                        command: s.command,
                        policy: s.policy_path,
                        started_at_ms: s.started_at_ms,
                        uptime_ms: s.uptime_ms,
                        client_pid: s.client_pid,
                        limits: s.limits,
                        network_allowed: s.network_allowed,
                        network_denied: s.network_denied,
                        last_denial: (!s.last_denial.is_empty()).then_some(s.last_denial),
                        memory_bytes: s.memory_bytes,
                        memory_limit_bytes: (s.memory_limit_bytes > 0)
                            .then_some(s.memory_limit_bytes),
                        cpu_ms: s.cpu_ms,
                        stdin_bytes: s.stdin_bytes,
                        stdout_bytes: s.stdout_bytes,
                        stderr_bytes: s.stderr_bytes,
                        approve: s.approve,
                        approvals_pending: s.approvals_pending,
                        files_denied: s.files_denied,
                        backend: s.backend,
                        backend_skipped: s.backend_skipped,
                        tool_calls: s.tool_calls,
                        tools_unpinned: s.tools_unpinned,
                        tools_withheld: s.tools_withheld,
                    })
                    .collect();
                if cli.json {
                    println!("{}", serde_json::to_string_pretty(&rows)?);
                } else {
                    print_ps(&rows);
                }
            }
            Cmd::Kill(k) => {
                let r = c
                    .kill(pb::KillRequest { session_id: k.id })
                    .await
                    .map_err(|s| anyhow::anyhow!("{}", s.message()))?
                    .into_inner();
                if cli.json {
                    println!(
                        "{}",
                        serde_json::to_string(&KillOut {
                            killed: r.session_id
                        })?
                    );
                } else {
                    println!("killed {}", r.session_id);
                }
            }
            Cmd::Status => {
                let s = c.status(pb::StatusRequest {}).await?.into_inner();
                let out = StatusOut {
                    version: s.version,
                    pid: s.pid,
                    uid: s.uid,
                    socket: s.socket,
                    state_dir: s.state_dir,
                    audit_path: s.audit_path,
                    sessions: s.sessions,
                    uptime_ms: s.uptime_ms,
                    features: s.features.into_iter().map(Feature::from).collect(),
                    backends: s.backends.into_iter().map(Feature::from).collect(),
                    host: vec![git_bare_repositories(), apparmor_userns(s.pid)],
                };
                if cli.json {
                    println!("{}", serde_json::to_string_pretty(&out)?);
                } else {
                    print_status(&out);
                }
            }
            Cmd::Approve(a) => return approve::run(&mut c, &a, cli.json).await,
            Cmd::Policy { .. }
            | Cmd::Doctor(_)
            | Cmd::Logs(_)
            | Cmd::Suggest(_)
            | Cmd::Trace(_)
            | Cmd::Init(_)
            | Cmd::Install(_)
            | Cmd::ExecServer(_)
            | Cmd::Wrap(_)
            | Cmd::Unwrap(_)
            | Cmd::Uninstall(_) => {
                unreachable!("handled above")
            }
        }
        Ok(ExitCode::SUCCESS)
    })
    .map_err(|e: anyhow::Error| match e.downcast_ref::<tonic::Status>() {
        Some(s) => anyhow::anyhow!("{}", s.message()),
        None => e,
    })
}

fn human_duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// One terminal-safe cell: control characters (newlines, ESC...) escaped, so a
/// server's name or arguments cannot forge lines or drive the terminal.
fn cell(v: &str) -> String {
    v.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

fn human_bytes(b: u64) -> String {
    match b {
        0..=1023 => format!("{b}B"),
        1024..=1_048_575 => format!("{:.1}K", b as f64 / 1024.0),
        1_048_576..=1_073_741_823 => format!("{:.1}M", b as f64 / 1_048_576.0),
        _ => format!("{:.1}G", b as f64 / 1_073_741_824.0),
    }
}

/// `ps`'s TOOL PIN cell: the definitions that differ from the pin, and what
/// is withheld (`wardenctl approve` can release it).
fn tool_pin(r: &SessionRow) -> String {
    let mut parts = Vec::new();
    if !r.tools_unpinned.is_empty() {
        parts.push(format!("differs: {}", r.tools_unpinned.join(", ")));
    }
    if !r.tools_withheld.is_empty() {
        parts.push(format!(
            "withheld: {} (`wardenctl approve`)",
            r.tools_withheld.join(", ")
        ));
    }
    if parts.is_empty() {
        "-".into()
    } else {
        cell(&parts.join("; "))
    }
}

fn print_ps(rows: &[SessionRow]) {
    let header = [
        "ID",
        "NAME",
        "PID",
        "BACKEND",
        "UPTIME",
        "CPU",
        "MEM",
        "STDIO",
        "NET",
        "LAST DENIAL / APPROVALS",
        "TOOL CALLS",
        "TOOL PIN",
        "COMMAND",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.id.clone(),
                if r.name.is_empty() {
                    "-".into()
                } else {
                    cell(&r.name)
                },
                r.pid.to_string(),
                if r.backend_skipped.is_empty() {
                    r.backend.clone()
                } else {
                    // `auto` passed over others: the JSON says why.
                    format!("{} (auto)", r.backend)
                },
                human_duration(r.uptime_ms),
                format!("{:.1}s", r.cpu_ms as f64 / 1000.0),
                match r.memory_limit_bytes {
                    Some(l) => format!("{}/{}", human_bytes(r.memory_bytes), human_bytes(l)),
                    None => human_bytes(r.memory_bytes),
                },
                format!(
                    "{}/{}",
                    human_bytes(r.stdin_bytes),
                    human_bytes(r.stdout_bytes)
                ),
                format!("{}/{}", r.network_allowed, r.network_denied),
                match (r.approvals_pending, &r.last_denial) {
                    (n @ 1.., _) => format!("{n} waiting for `wardenctl approve`"),
                    (_, Some(d)) => format!("{} (`wardenctl suggest {}`)", cell(d), r.id),
                    (_, None) if r.files_denied > 0 => format!(
                        "{} file access{} denied (`wardenctl suggest {}`)",
                        r.files_denied,
                        if r.files_denied == 1 { "" } else { "es" },
                        r.id
                    ),
                    (_, None) => "-".into(),
                },
                if r.tool_calls.is_empty() {
                    "-".into()
                } else {
                    cell(&r.tool_calls.join(", "))
                },
                tool_pin(r),
                cell(&r.command.join(" ")),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for c in &cells {
        for (i, v) in c.iter().enumerate() {
            width[i] = width[i].max(v.chars().count());
        }
    }
    let line = |c: &[&str]| {
        let mut s = String::new();
        for (i, v) in c.iter().enumerate() {
            if i == c.len() - 1 {
                s.push_str(v);
            } else {
                s.push_str(&format!("{:<w$}  ", v, w = width[i]));
            }
        }
        println!("{}", s.trim_end());
    };
    line(&header);
    for c in &cells {
        let refs: Vec<&str> = c.iter().map(String::as_str).collect();
        line(&refs);
    }
}

/// `safe.bareRepository` of the user's git: `explicit` makes git ignore
/// implicit bare repositories (a directory that is itself a git dir), a
/// second line of defence behind the sandbox's refusal to let a server make
/// one (docs/security-model.md, "Git: protect what runs, not what stores").
pub(crate) fn git_bare_repositories() -> Feature {
    let name = "git_safe_bare_repository".to_string();
    let out = std::process::Command::new("git")
        .args(["config", "--global", "--get", "safe.bareRepository"])
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Err(_) => Feature {
            name,
            available: true,
            detail: "git not found: nothing to set".into(),
        },
        Ok(o) => {
            let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if v == "explicit" {
                Feature {
                    name,
                    available: true,
                    detail: "explicit: git ignores implicit bare repositories".into(),
                }
            } else {
                Feature {
                    name,
                    available: false,
                    detail: format!(
                        "{}: git opens any directory that looks like a git dir as a \
                         repository; recommended: git config --global safe.bareRepository explicit",
                        if v.is_empty() {
                            "all (the default)"
                        } else {
                            v.as_str()
                        }
                    ),
                }
            }
        }
    }
}

/// Whether AppArmor keeps wardend from creating the user namespaces its
/// sandboxes start in (`service::apparmor::userns_restriction`).
fn apparmor_userns(daemon_pid: u32) -> Feature {
    let exe = service::apparmor::wardend_binary(Some(daemon_pid));
    let r = service::apparmor::userns_restriction(exe.as_deref());
    Feature {
        name: "apparmor_userns".into(),
        available: r.ok(),
        detail: r.detail(),
    }
}

fn print_status(s: &StatusOut) {
    println!("wardend {} (pid {}, uid {})", s.version, s.pid, s.uid);
    println!("socket     {}", s.socket);
    println!("state      {}", s.state_dir);
    println!("audit      {}", s.audit_path);
    println!("sessions   {}", s.sessions);
    println!("uptime     {}", human_duration(s.uptime_ms));
    print_features("kernel", &s.features, 16);
    print_features("backends", &s.backends, 16);
    print_features("host", &s.host, 24);
}

/// `title:` and one line per feature: name, yes/no, what it means.
fn print_features(title: &str, features: &[Feature], width: usize) {
    println!("{title}:");
    for f in features {
        println!(
            "  {:<width$} {:<3}  {}",
            f.name,
            if f.available { "yes" } else { "no" },
            f.detail
        );
    }
}

fn policy_check(file: &Path, socket: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
    let path = if file.is_absolute() {
        file.to_path_buf()
    } else {
        std::env::current_dir()?.join(file)
    };
    print_policy(profiles::compile_file(&path, socket)?, false, json)
}

/// Prints a compiled policy (YAML for people, else JSON), or its errors
/// (exit 1). `no_command`: it was compiled with a stand-in command (a
/// profile without `command:`), shown as none.
fn print_policy(
    compiled: Result<policy::CompiledPolicy, String>,
    no_command: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    const NONE: &str = "(none in the profile: given after `--`, or each exec-server call's)";
    match compiled {
        Ok(p) => {
            for w in &p.warnings {
                eprintln!("warning: {w}");
            }
            if json {
                let mut v = serde_json::to_value(&p)?;
                if no_command {
                    v["argv"] = serde_json::Value::Null;
                    v["program"] = serde_json::Value::Null;
                }
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let mut v = human_policy(&p)?;
                if no_command {
                    v["argv"] = serde_yaml::Value::from(NONE);
                    v["program"] = serde_yaml::Value::Null;
                }
                print!(
                    "{}",
                    serde_yaml::to_string(&v).context("rendering the policy")?
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprint!("{}", with_newline(&e));
            Ok(ExitCode::from(1))
        }
    }
}

/// The compiled policy for people: as serialised, except that each network rule is
/// one line in entry syntax with its ports spelled out (`*.example.com:80,443`),
/// followed by the entry as written when normalisation changed it.
fn human_policy(p: &policy::CompiledPolicy) -> anyhow::Result<serde_yaml::Value> {
    let mut v = serde_yaml::to_value(p).context("rendering the policy")?;
    let allow: Vec<String> = p
        .network
        .allow
        .iter()
        .map(|r| {
            let shown = r.to_string();
            let as_written = r.source == shown
                || (r.ports == policy::net::PortSpec::Web && r.source == r.host.to_string());
            if as_written {
                shown
            } else {
                format!("{shown} (written `{}`)", r.source)
            }
        })
        .collect();
    v["network"]["allow"] = serde_yaml::to_value(allow).context("rendering the policy")?;
    Ok(v)
}

fn with_newline(s: &str) -> String {
    if s.ends_with('\n') {
        s.to_string()
    } else {
        format!("{s}\n")
    }
}
