//! `wardenctl exec-server`: an MCP server (stdio, the official Rust SDK
//! `rmcp`) with one tool, `run_sandboxed`, whose every call runs in a fresh
//! sandbox of `wardend` (docs/exec-server.md).
//!
//! The policy file (`--policy`) is the ceiling of every call: it is compiled
//! once at start (failing fast), and each call's own policy is derived from it
//! (`call.rs`: the call's command, scratch directory, timeout and the
//! `network.allow` entries it asks for) and sent as the request's policy text,
//! which the daemon compiles, audits (`session.start`, fsynced before the
//! command runs) and enforces like any session (`run.rs`). Calls run
//! concurrently, each on a connection of its own.

#![deny(clippy::print_stdout)] // stdout carries the MCP messages only

mod call;
mod run;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use warden_core::policy::{self, CompileContext, CompiledPolicy, Overrides, PolicyInput};

/// The tool's name.
pub const TOOL: &str = "run_sandboxed";

#[derive(clap::Args, Debug)]
pub struct ExecServerArgs {
    /// The ceiling of every call (YAML): its grants, network.allow hosts,
    /// env.allow names and limits; its `command` is not used. Without it a
    /// call gets no grant but its scratch directory, no network, no
    /// environment variable.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The sandbox that runs the calls: auto (this platform's own, else
    /// Docker), linux or docker.
    #[arg(long, value_name = "BACKEND", value_parser = backend)]
    backend: Option<policy::Backend>,
    /// Do not start wardend when none answers.
    #[arg(long)]
    no_autostart: bool,
}

fn backend(s: &str) -> Result<policy::Backend, String> {
    match policy::Backend::parse(s) {
        Some(b @ (policy::Backend::Auto | policy::Backend::Linux | policy::Backend::Docker)) => {
            Ok(b)
        }
        _ => Err(format!("unknown backend `{s}`: use auto, linux or docker")),
    }
}

/// What every call shares.
struct Server {
    ceiling: CompiledPolicy,
    home: PathBuf,
    daemon: run::Daemon,
    tool: Tool,
}

pub fn run(
    args: &ExecServerArgs,
    socket: Option<&std::path::Path>,
) -> anyhow::Result<std::process::ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    let policy_path = args.policy.as_ref().map(|p| cwd.join(p));
    let text = match &policy_path {
        Some(p) => policy::load_file(p)?,
        None => String::new(),
    };
    let socket = cwd.join(warden_core::paths::socket_path(socket)?);
    let home = warden_core::paths::home_dir()?;
    let ctx = CompileContext {
        home: home.clone(),
        cwd,
        path_env: std::env::var_os("PATH"),
        reserved: warden_core::paths::client_reserved(Some(&socket)),
    };
    // The ceiling's `command` is not used: any stands in for it.
    let overrides = Overrides {
        command: vec!["/bin/sh".into()],
        ..Overrides::default()
    };
    let ceiling = policy::compile(
        &PolicyInput {
            path: policy_path.as_deref(),
            text: &text,
        },
        &overrides,
        &ctx,
    )?;
    for w in &ceiling.warnings {
        eprintln!("wardenctl exec-server: warning: {w}");
    }
    let server = Server {
        tool: tool(&ceiling),
        home,
        daemon: run::Daemon {
            socket,
            autostart: !args.no_autostart,
            backend: args.backend.map(|b| b.as_str().to_owned()),
        },
        ceiling,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        // Pipes (what MCP clients give a stdio server) through the event
        // loop; anything else through tokio's blocking stdio, whose every
        // read and write is a hand-off to a thread (a few hundred µs per
        // call: each call's request and answer paid it).
        let service = Handler(Arc::new(server))
            .serve(rmcp::transport::stdio_pipes())
            .await
            .context("MCP initialisation")?;
        service.waiting().await?;
        anyhow::Ok(())
    })?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// The tool: its schemas from the input and output types; open-world only
/// when the ceiling allows some network host.
fn tool(ceiling: &CompiledPolicy) -> Tool {
    let hosts: Vec<&str> = ceiling
        .network
        .allow
        .iter()
        .map(|r| r.source.as_str())
        .collect();
    let network = if hosts.is_empty() {
        "No network: the policy allows no host.".to_owned()
    } else {
        format!(
            "Network only through `network`, a subset of: {}.",
            hosts.join(", ")
        )
    };
    let timeout = ceiling.limits.timeout_s.unwrap_or(call::DEFAULT_TIMEOUT_S);
    let description = format!(
        "Run a command in a fresh, locked-down Warden sandbox (nothing of the host but the \
         runtime and the policy's grants, a fresh scratch directory as the working directory, \
         removed afterwards; no secrets; resource limits). Give `command` (run by /bin/sh -c) or \
         `argv`. Timeout at most {timeout} s (default {timeout} s). {network} Returns the exit \
         code, stdout, stderr (each capped at {} KiB) and the session id.",
        ceiling.limits.output_kb.unwrap_or(call::DEFAULT_OUTPUT_KB)
    );
    let input = rmcp::handler::server::common::schema_for_input::<call::Input>()
        .unwrap_or_else(|_| Arc::new(Default::default()));
    Tool::new(TOOL, description, input)
        .with_title("Run in a Warden sandbox")
        .with_output_schema::<run::Outcome>()
        .with_annotations(
            ToolAnnotations::with_title("Run in a Warden sandbox")
                .read_only(false)
                .destructive(!ceiling.write.is_empty())
                .idempotent(false)
                .open_world(!hosts.is_empty()),
        )
}

#[derive(Clone)]
struct Handler(Arc<Server>);

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "warden-exec-server",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "run_sandboxed runs each command in a fresh Warden sandbox; only the policy's \
                 grants persist between calls.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![self.0.tool.clone()]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == TOOL).then(|| self.0.tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != TOOL {
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{}`: this server has {TOOL}", request.name),
                None,
            ));
        }
        let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let input: call::Input = match serde_json::from_value(args) {
            Ok(i) => i,
            Err(e) => return Err(ErrorData::invalid_params(format!("{TOOL}: {e}"), None)),
        };
        let server = self.0.clone();
        // A cancelled request drops the call: its connection closes, and the
        // daemon ends the session.
        let result = tokio::select! {
            r = execute(&server, input) => r,
            _ = context.ct.cancelled() => Err(anyhow::anyhow!("cancelled")),
        };
        Ok(match result {
            Ok(outcome) => match serde_json::to_value(&outcome) {
                Ok(v) => CallToolResult::structured(v),
                Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("warden: {e}"))]),
            },
            Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("warden: {e:#}"))]),
        }
        .into())
    }
}

/// One call: checked against the ceiling, its scratch directory made and
/// filled, run, the scratch directory removed.
async fn execute(server: &Server, input: call::Input) -> anyhow::Result<run::Outcome> {
    let call = call::check(input, &server.ceiling)?;
    let scratch = Scratch::new()?;
    for (rel, text) in &call.files {
        let p = scratch.path.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("file `{}`", rel.display()))?;
        }
        std::fs::write(&p, text).with_context(|| format!("file `{}`", rel.display()))?;
    }
    let text = call::policy_text(&server.ceiling, &call, &scratch.path, &server.home)?;
    let cap = server
        .ceiling
        .limits
        .output_kb
        .unwrap_or(call::DEFAULT_OUTPUT_KB)
        .saturating_mul(1024);
    let req = run::Request {
        policy_path: server.ceiling.source.as_deref(),
        policy_text: text,
        cwd: &scratch.path,
        stdin: call.stdin,
        timeout_s: call.timeout_s,
        output_cap: usize::try_from(cap).unwrap_or(usize::MAX),
    };
    run::run(&server.daemon, req).await
}

/// A call's scratch directory (0700, in the temp directory), removed with
/// whatever the command left in it, also directories it made read-only.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix("warden-exec.")
            .tempdir()
            .context("cannot create the call's scratch directory")?;
        // Canonical: the daemon refuses grants through symlinks.
        let path = dir.keep().canonicalize()?;
        Ok(Scratch { path })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::fs::remove_dir_all(&self.path).is_ok() {
            return;
        }
        make_writable(&self.path);
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!(
                "wardenctl exec-server: cannot remove {}: {e}",
                self.path.display()
            );
        }
    }
}

/// Gives the owner rwx on every directory under `p` (not following symlinks).
fn make_writable(p: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return;
    };
    if !m.is_dir() {
        return;
    }
    let mode = m.permissions().mode() | 0o700;
    let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    if let Ok(entries) = std::fs::read_dir(p) {
        for e in entries.flatten() {
            make_writable(&e.path());
        }
    }
}
