//! `wardenctl trace [--output FILE] [--mcp] [--call TOOL JSON]...
//! [--allow-writes] -- CMD [ARGS...]` (docs/init.md, "trace"): runs the
//! command through `warden-shim --trace` in the observe-everything sandbox
//! and writes the session's audit records (every file access, exec and
//! connection, the environment names passed) as JSONL, exactly as stored.
//!
//! Without `--mcp` the shim gets this process's stdio, so a real MCP client
//! that runs `wardenctl trace -- CMD` drives the server; the trace then goes
//! to `--output` (default `./warden-trace-SESSION.jsonl`). With `--mcp` the
//! command drives the server itself ([`crate::mcp`]): the handshake, the
//! listings and the `--call`s; the trace goes to `--output` or stdout.
//! An output file that exists is never overwritten.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use warden_audit::{Record, RecordType};

#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// Write the trace here (never over an existing file).
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Drive the server: the MCP handshake, tools/resources/prompts listings
    /// and the --call tool calls (instead of passing stdio through).
    #[arg(long)]
    mcp: bool,
    /// With --mcp: call TOOL with the arguments JSON, an object (repeatable).
    #[arg(long, num_args = 2, value_names = ["TOOL", "JSON"], requires = "mcp")]
    call: Vec<String>,
    /// Show the host's directories read-write (default: read-only).
    #[arg(long)]
    allow_writes: bool,
    /// With --mcp: how long each request may take.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = per_request)]
    timeout: Duration,
    /// Read the store of this state directory (default: the running daemon's).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The command to trace.
    #[arg(last = true, value_name = "CMD", required = true)]
    command: Vec<String>,
}

pub fn per_request(s: &str) -> Result<Duration, String> {
    match warden_core::duration::parse(s) {
        Some(d) if d >= Duration::from_secs(1) && d <= Duration::from_secs(3600) => Ok(d),
        Some(_) => Err("must be 1s to 1h".into()),
        None => Err("expected a duration: 30s, 2m, 1h".into()),
    }
}

/// `warden-shim`: next to this binary, else on PATH.
pub fn shim_path() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("warden-shim")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("warden-shim"))
}

/// What the traced session did, from its records.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub records: usize,
    pub files: usize,
    pub execs: usize,
    pub connections: usize,
}

/// A traced run: its session, its records as stored, what they count, how
/// the shim ended and what driving the server said (with `--mcp`).
pub struct Traced {
    pub session: String,
    pub lines: Vec<u8>,
    pub counts: Counts,
    pub status: std::process::ExitStatus,
    pub drove: Option<anyhow::Result<String>>,
}

/// How to trace.
pub struct How<'a> {
    pub socket: Option<&'a Path>,
    pub state_dir: Option<&'a Path>,
    pub command: &'a [String],
    pub mcp: bool,
    pub calls: &'a [(String, serde_json::Value)],
    pub allow_writes: bool,
    pub timeout: Duration,
}

/// Runs the command in the trace sandbox and collects its records. `Err`
/// when it did not run there (Warden's own error: the shim said why).
pub fn record(how: &How<'_>) -> anyhow::Result<Traced> {
    let mut cmd = Command::new(shim_path());
    if let Some(s) = how.socket {
        cmd.arg("--socket").arg(s);
    }
    cmd.arg("--trace").arg("--name").arg("trace");
    if how.allow_writes {
        cmd.arg("--trace-allow-writes");
    }
    cmd.arg("--").args(how.command);
    let (status, pid, drove) = if how.mcp {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot run {}", shim_path().display()))?;
        let pid = child.id();
        let drove = crate::mcp::drive(&mut child, how.calls, how.timeout);
        // The server is done once its stdin closes; a server that does not
        // exit is ended.
        drop(child.stdin.take());
        let status = wait_or_kill(&mut child, Duration::from_secs(10))?;
        (status, pid, Some(drove))
    } else {
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot run {}", shim_path().display()))?;
        let pid = child.id();
        (child.wait()?, pid, None)
    };
    if status.code() == Some(i32::from(warden_core::exit::ShimExit::WardenError.code())) {
        bail!(
            "the command did not run in the trace sandbox (see the warden: line above); no trace written"
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let dir = crate::logs::store_dir(&rt, how.state_dir, how.socket)?;
    let (session, lines, counts) = collect(&dir, pid)?;
    Ok(Traced {
        session,
        lines,
        counts,
        status,
        drove,
    })
}

/// Refuses an output path that exists (nothing is ever written over).
pub fn refuse_existing(out: &Path, what: &str) -> anyhow::Result<()> {
    if std::fs::symlink_metadata(out).is_ok() {
        bail!(
            "{} exists; {what} is never written over a file (choose another --output)",
            out.display()
        );
    }
    Ok(())
}

/// Writes `bytes` to a new file at `path` (never over one), synced.
pub fn write_new(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(())
}

pub fn run(args: &TraceArgs, socket: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
    // Refused before anything runs: an output that exists.
    if let Some(out) = &args.output {
        refuse_existing(out, "the trace")?;
    }
    let calls = parse_calls(&args.call)?;
    let t = record(&How {
        socket,
        state_dir: args.state_dir.as_deref(),
        command: &args.command,
        mcp: args.mcp,
        calls: &calls,
        allow_writes: args.allow_writes,
        timeout: args.timeout,
    })?;
    let out_path = match (&args.output, args.mcp) {
        (Some(p), _) => Some(p.clone()),
        (None, true) => None,
        (None, false) => Some(PathBuf::from(format!("warden-trace-{}.jsonl", t.session))),
    };
    match &out_path {
        Some(p) => write_new(p, &t.lines)?,
        None => std::io::stdout().lock().write_all(&t.lines)?,
    }
    let mut err = std::io::stderr().lock();
    if let Some(d) = &t.drove {
        match d {
            Ok(s) => writeln!(err, "trace: {s}")?,
            Err(e) => writeln!(err, "trace: the MCP session did not complete: {e:#}")?,
        }
    }
    let c = &t.counts;
    if json {
        let v = serde_json::json!({
            "session": t.session,
            "output": out_path,
            "records": c.records,
            "files": c.files,
            "execs": c.execs,
            "connections": c.connections,
            "exit_code": t.status.code(),
        });
        writeln!(err, "{v}")?;
    } else {
        writeln!(
            err,
            "trace: session {}: {} records ({} file accesses, {} execs, {} connections){}",
            t.session,
            c.records,
            c.files,
            c.execs,
            c.connections,
            out_path
                .as_ref()
                .map(|p| format!(" in {}", p.display()))
                .unwrap_or_default()
        )?;
    }
    match t.drove {
        Some(Err(_)) => Ok(ExitCode::from(1)),
        _ => Ok(ExitCode::from(
            t.status.code().unwrap_or(1).clamp(0, 255) as u8
        )),
    }
}

pub fn parse_calls(raw: &[String]) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    raw.chunks(2)
        .map(|c| {
            let (tool, args) = (&c[0], c.get(1).map(String::as_str).unwrap_or("{}"));
            let v: serde_json::Value = serde_json::from_str(args)
                .with_context(|| format!("--call {tool}: the arguments are not JSON"))?;
            if !v.is_object() {
                bail!("--call {tool}: the arguments must be a JSON object, got {v}");
            }
            Ok((tool.clone(), v))
        })
        .collect()
}

fn wait_or_kill(
    child: &mut std::process::Child,
    grace: Duration,
) -> anyhow::Result<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + grace;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(st);
        }
        if std::time::Instant::now() >= deadline {
            // SIGKILL to the shim: the daemon ends the session (client gone).
            let _ = child.kill();
            return Ok(child.wait()?);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The records of the session the shim `pid` started (its `session.start`
/// names the client pid), as stored, and what they count.
fn collect(dir: &Path, pid: u32) -> anyhow::Result<(String, Vec<u8>, Counts)> {
    let snap = warden_audit::store::snapshot(dir)?;
    let mut session: Option<String> = None;
    let mut lines = Vec::new();
    let mut counts = Counts::default();
    crate::logs::each_stored(&snap, |r: &Record, bytes| {
        if session.is_none()
            && r.kind == RecordType::Session
            && r.action == "start"
            && r.details["client"]["pid"].as_u64() == Some(u64::from(pid))
        {
            session = r.session.clone();
        }
        if session.is_some() && r.session == session {
            count(&mut counts, r);
            lines.extend_from_slice(bytes);
            lines.push(b'\n');
        }
        Ok(true)
    })?;
    let Some(session) = session else {
        bail!(
            "no session of the traced command in the audit store {} (was it started by another daemon?)",
            dir.display()
        );
    };
    Ok((session, lines, counts))
}

fn count(c: &mut Counts, r: &Record) {
    c.records += 1;
    match (r.kind, r.action.as_str()) {
        (RecordType::File, "exec") => {
            c.files += 1;
            c.execs += 1;
        }
        (RecordType::File, _) => c.files += 1,
        (RecordType::Network, "connect") => c.connections += 1,
        _ => {}
    }
}
