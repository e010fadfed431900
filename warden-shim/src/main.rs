//! `warden-shim`: what an MCP client runs instead of the server.
//!
//! It parses its flags and the policy (failing fast with file:line:column
//! errors), connects to `wardend` (starting it if none answers), hands over its
//! own stdin, stdout and stderr, and asks for a session. The daemon moves the
//! bytes; the shim forwards signals and exits the way the server did.
//!
//! The shim never writes to stdout: stdout carries the server's bytes only.
//! Its own messages are single lines on stderr starting with `warden:`.
//!
//! Errors are `anyhow` errors with context; [`message`] prints each chain once
//! (the library errors already name their sources in their own messages), one
//! `warden:` line per line of it, and the exit code is `ShimExit::WardenError`.
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout)]

use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

mod prompt;

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};
use warden_client::pb;
use warden_core::exit::ShimExit;
use warden_core::policy::{self, CompileContext, Overrides, PolicyInput};

#[derive(Parser, Debug)]
#[command(
    name = "warden-shim",
    version,
    about = "Run an MCP server inside Warden's sandbox, transparently on stdio",
    after_help = "Exit status: the server's; 128+N if it died by signal N; 124 on timeout; \
                  137 on a memory breach; 125 for Warden's own errors."
)]
struct Args {
    /// Control socket of wardend.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Policy file (YAML).
    #[arg(long, value_name = "FILE", conflicts_with = "profile")]
    policy: Option<PathBuf>,
    /// Policy $XDG_CONFIG_HOME/warden/policies/NAME.yaml.
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Grant read-only access to PATH (repeatable).
    #[arg(long = "read", value_name = "PATH")]
    read: Vec<String>,
    /// Grant read-write access to PATH (repeatable).
    #[arg(long = "write", value_name = "PATH")]
    write: Vec<String>,
    /// Pass environment variable NAME through (repeatable).
    #[arg(long = "allow-env", value_name = "NAME")]
    allow_env: Vec<String>,
    /// Session name shown by `wardenctl ps`.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// The sandbox that enforces the policy (overrides its `backend:`):
    /// auto (this platform's own, else Docker, else refuse), linux, docker
    /// or macos. A backend that is not available here is refused (exit 125).
    #[arg(long, value_name = "BACKEND", value_parser = backend)]
    backend: Option<warden_core::policy::Backend>,
    /// Do not start wardend when none answers.
    #[arg(long)]
    no_autostart: bool,
    /// Hold what the policy denies and ask a person (`wardenctl approve`, this
    /// terminal, a desktop notification); see docs/approvals.md.
    #[arg(long)]
    approve: bool,
    /// How long a held access waits for an answer before it is denied
    /// (1s to 1h; default 60s).
    #[arg(long, value_name = "DUR", requires = "approve", value_parser = approve_timeout)]
    approve_timeout: Option<Duration>,
    /// The observe-everything sandbox of `wardenctl trace` (docs/init.md);
    /// `wardenctl trace` passes it, people run that.
    #[arg(long, hide = true, conflicts_with_all = ["policy", "profile", "approve"])]
    trace: bool,
    /// With --trace: the host's directories read-write.
    #[arg(long, hide = true, requires = "trace")]
    trace_allow_writes: bool,
    /// The server command (overrides the policy's `command`).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// `--backend`: one of the names `backend:` takes.
fn backend(s: &str) -> Result<warden_core::policy::Backend, String> {
    warden_core::policy::Backend::parse(s)
        .ok_or_else(|| format!("unknown backend `{s}`: use auto, linux, docker or macos"))
}

/// `--approve-timeout`: a duration from 1 s to 1 h.
fn approve_timeout(s: &str) -> Result<Duration, String> {
    let d = warden_core::duration::parse(s)
        .ok_or_else(|| format!("`{s}` is not a duration (30s, 2m, 1h)"))?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(3600) {
        return Err(format!("{s} is out of range: give 1s to 1h"));
    }
    Ok(d)
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                // Help goes to stderr too: stdout belongs to the server.
                eprint!("{e}");
                return ExitCode::SUCCESS;
            }
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or("invalid arguments");
            eprintln!("warden: {}", first.trim_start_matches("error: "));
            return ExitCode::from(ShimExit::WardenError.code());
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("warden: cannot start the runtime: {e}");
            return ExitCode::from(ShimExit::WardenError.code());
        }
    };
    let exit = match rt.block_on(run(args)) {
        Ok(exit) => exit,
        Err(e) => {
            // A failure of Warden itself: exit 125, one `warden:` line per line.
            for line in message(&e).lines().filter(|l| !l.trim().is_empty()) {
                eprintln!("warden: {line}");
            }
            ShimExit::WardenError
        }
    };
    ExitCode::from(exit.code())
}

fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// The whole chain of `e`, outermost first, joined by `: ` (what `{:#}`
/// prints), leaving out a source whose text the message before it already ends
/// with: most of Warden's errors name their source in their own message.
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if last.ends_with(&text) {
            last = text;
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
        last = text;
    }
    out
}

async fn run(args: Args) -> anyhow::Result<ShimExit> {
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    let policy_path = match (&args.policy, &args.profile) {
        (Some(p), _) => Some(absolute(p, &cwd)),
        (None, Some(name)) => {
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                bail!("--profile `{name}`: a profile is a plain name (no `/`)");
            }
            Some(warden_core::paths::profiles_dir()?.join(format!("{name}.yaml")))
        }
        (None, None) => None,
    };
    if policy_path.is_none() && args.command.is_empty() {
        bail!("nothing to run: give --policy FILE, --profile NAME, or a command after --");
    }
    let text = match &policy_path {
        Some(p) => policy::load_file(p)?,
        None => String::new(),
    };
    let overrides = Overrides {
        read: args.read.clone(),
        write: args.write.clone(),
        allow_env: args.allow_env.clone(),
        name: args.name.clone(),
        command: args.command.clone(),
    };
    let socket = warden_core::paths::socket_path(args.socket.as_deref())?;
    let socket = absolute(&socket, &cwd);
    // Fail fast here; the daemon compiles the same text again, with its own
    // paths, and is the authority.
    let ctx = CompileContext {
        home: warden_core::paths::home_dir()?,
        cwd: cwd.clone(),
        path_env: std::env::var_os("PATH"),
        reserved: warden_core::paths::client_reserved(Some(&socket)),
    };
    let compiled = policy::compile(
        &PolicyInput {
            path: policy_path.as_deref(),
            text: &text,
        },
        &overrides,
        &ctx,
    )?;
    for w in &compiled.warnings {
        eprintln!("warden: warning: {w}");
    }
    let stream = match warden_client::connect_raw(&socket) {
        Ok(s) => s,
        Err(warden_client::ClientError::NotRunning { .. }) if !args.no_autostart => {
            warden_client::autostart(&socket, Duration::from_secs(10))?;
            warden_client::connect_raw(&socket)?
        }
        Err(e @ warden_client::ClientError::NotRunning { .. }) => {
            bail!("{e} (autostart is off: start wardend first)")
        }
        Err(e) => return Err(e.into()),
    };
    {
        let stdin = std::io::stdin();
        let stdout = std::io::stdout();
        let stderr = std::io::stderr();
        warden_client::send_stdio(&stream, [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()])?;
    }
    let mut client = warden_client::client_over(stream).await?;

    // Signals are caught from here on and forwarded once the session runs.
    let mut sigs = Vec::new();
    for (kind, num) in [
        (SignalKind::interrupt(), 2),
        (SignalKind::terminate(), 15),
        (SignalKind::hangup(), 1),
        (SignalKind::quit(), 3),
        (SignalKind::user_defined1(), 10),
        (SignalKind::user_defined2(), 12),
    ] {
        sigs.push((signal(kind)?, num));
    }
    let (sig_tx, mut sig_rx) = tokio::sync::mpsc::unbounded_channel::<i32>();
    for (mut s, num) in sigs {
        let tx = sig_tx.clone();
        tokio::spawn(async move {
            while s.recv().await.is_some() {
                if tx.send(num).is_err() {
                    break;
                }
            }
        });
    }

    // The terminal prompt: only with approvals, only a terminal in line mode.
    let approve = args.approve || compiled.approve;
    let tty = approve.then(prompt::Tty::open).flatten();
    let env = std::env::vars_os()
        .map(|(k, v)| pb::EnvVar {
            name: k.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
        })
        .collect();
    let req = pb::SpawnRequest {
        policy_path: policy_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        policy_text: text,
        extra: Some(pb::PolicyGrants {
            read: args.read,
            write: args.write,
            allow_env: args.allow_env,
        }),
        name: args.name.unwrap_or_default(),
        command: args.command,
        cwd: cwd.display().to_string(),
        env,
        client: Some(pb::ClientInfo {
            pid: std::process::id(),
            program: "warden-shim".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }),
        approve,
        approve_timeout_ms: args.approve_timeout.map_or(0, |d| d.as_millis() as u64),
        approve_terminal: tty.is_some(),
        trace: args.trace,
        trace_allow_writes: args.trace_allow_writes,
        backend: args
            .backend
            .map(|b| b.as_str().to_owned())
            .unwrap_or_default(),
    };
    let mut tty = tty;
    let mut events = client
        .spawn(req)
        .await
        .map_err(|s| anyhow!("{}", s.message()))?
        .into_inner();
    let mut session: Option<String> = None;
    let mut pending: Vec<i32> = Vec::new();
    loop {
        tokio::select! {
            ev = events.message() => {
                let ev = match ev {
                    Ok(Some(ev)) => ev,
                    Ok(None) => bail!("wardend closed the session without an exit status"),
                    Err(s) => bail!("lost the session: {}", s.message()),
                };
                match ev.event {
                    Some(pb::spawn_event::Event::Started(s)) => {
                        let id = s.session_id;
                        for sig in pending.drain(..) {
                            forward(&mut client, &id, sig).await;
                        }
                        if let Some(t) = tty.take() {
                            tokio::spawn(prompt::run(client.clone(), id.clone(), t));
                        }
                        session = Some(id);
                    }
                    Some(pb::spawn_event::Event::Exited(x)) => return Ok(exit_of(x)),
                    None => {}
                }
            }
            Some(sig) = sig_rx.recv() => {
                match &session {
                    Some(id) => forward(&mut client, id, sig).await,
                    None => pending.push(sig),
                }
            }
        }
    }
}

async fn forward(
    client: &mut warden_proto_client::WardenClient<tonic::transport::Channel>,
    id: &str,
    sig: i32,
) {
    let req = pb::SignalRequest {
        session_id: id.to_string(),
        signal: sig,
    };
    if let Err(s) = client.signal(req).await {
        // The server may have just exited; the exit event follows.
        if s.code() != tonic::Code::NotFound {
            eprintln!("warden: cannot forward signal {sig}: {}", s.message());
        }
    }
}

mod warden_proto_client {
    pub use warden_client::pb::warden_client::WardenClient;
}

fn exit_of(x: pb::Exited) -> ShimExit {
    use pb::exited::Outcome;
    let note = |reason: &str| {
        if !reason.is_empty() {
            eprintln!("warden: {reason}");
        }
    };
    match x.outcome {
        Some(Outcome::Code(c)) => {
            note(&x.reason);
            ShimExit::from_code(c)
        }
        Some(Outcome::Signal(s)) => {
            note(&x.reason);
            ShimExit::Signal(s)
        }
        Some(Outcome::Timeout(_)) => {
            note(&x.reason);
            ShimExit::Timeout
        }
        Some(Outcome::Memory(_)) => {
            note(&x.reason);
            ShimExit::Memory
        }
        Some(Outcome::Error(e)) => {
            eprintln!("warden: {e}");
            ShimExit::WardenError
        }
        None => {
            eprintln!("warden: the session ended without an exit status");
            ShimExit::WardenError
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enoent() -> std::io::Error {
        std::io::Error::from_raw_os_error(2)
    }

    #[test]
    fn a_context_and_its_source_are_one_line() {
        let e = anyhow::Error::new(enoent()).context("cannot read the working directory");
        assert_eq!(
            message(&e),
            format!("cannot read the working directory: {}", enoent())
        );
    }

    #[test]
    fn a_source_the_message_already_names_is_not_repeated() {
        let e = anyhow::Error::new(warden_client::ClientError::NotRunning {
            socket: "/run/user/1000/warden/wardend.sock".into(),
            source: enoent(),
        });
        assert_eq!(
            message(&e),
            format!(
                "no daemon is listening on /run/user/1000/warden/wardend.sock: {}",
                enoent()
            )
        );
        let e = anyhow::Error::new(warden_client::ClientError::from(
            warden_client::AutostartError::Spawn {
                daemon: "/usr/bin/wardend".into(),
                source: enoent(),
            },
        ));
        assert_eq!(
            message(&e),
            format!("cannot start wardend: /usr/bin/wardend: {}", enoent())
        );
    }

    #[test]
    fn every_diagnostic_of_a_policy_is_its_own_line() {
        let input = PolicyInput {
            path: None,
            text: "version: 1\nnetwork:\n  alow: []\nlimits:\n  memori_mb: 1\n",
        };
        let ctx = CompileContext {
            home: "/home/u".into(),
            cwd: "/tmp".into(),
            path_env: None,
            reserved: Vec::new(),
        };
        let e = policy::compile(&input, &Overrides::default(), &ctx).expect_err("unknown keys");
        let lines = e.to_string().lines().count();
        assert!(lines >= 2, "{e}");
        assert_eq!(message(&anyhow::Error::new(e)).lines().count(), lines);
    }
}
