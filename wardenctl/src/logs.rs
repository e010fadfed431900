//! `wardenctl logs [-f] [--session ID] [--type T] [--decision D] [--since DUR]
//! [--until TIME] [--json] [--verify] [--state-dir DIR]` (DESIGN.md §7,
//! `docs/audit-format.md`, "Reading").
//!
//! Past records are read from the store files (no daemon needed); `-f` asks
//! the daemon for its `Logs` stream (the stored records, then new ones).
//! Human output escapes every field so a hostile resource or reason can
//! neither forge a line nor drive the terminal; `--json` prints the stored
//! lines as stored (they are pure ASCII).

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use warden_audit::filter::Filter;
use warden_audit::store::{self, Snapshot};
use warden_audit::verify::{self, Report};
use warden_audit::Record;
use warden_client::pb;

#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    /// Keep printing new records as wardend writes them (needs the daemon).
    #[arg(short = 'f', long, conflicts_with_all = ["until", "state_dir", "verify"])]
    follow: bool,
    /// Only this session (an id or a prefix of one).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Only this type (session, file, network, env, limit, approval, policy,
    /// daemon, mcp), or type.action (e.g. session.start).
    #[arg(long = "type", value_name = "TYPE[.ACTION]")]
    kind: Option<String>,
    /// Only this decision: allow, deny or info.
    #[arg(long, value_name = "DECISION")]
    decision: Option<String>,
    /// Only records of this MCP tool's calls: their `mcp` records and what
    /// the server did during them (files, network, refused calls).
    #[arg(long, value_name = "NAME")]
    tool: Option<String>,
    /// Only records of the tool call with this request id, as the `mcp`
    /// records spell it (`7`, `"abc"`).
    #[arg(long, value_name = "ID")]
    call: Option<String>,
    /// Only records from this long ago on (30s, 10m, 1h, 2d, 1h30m) or from
    /// this RFC 3339 time on.
    #[arg(long, value_name = "DUR|TIME")]
    since: Option<String>,
    /// Only records up to this RFC 3339 time (or this long ago).
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    /// Check the hash chain and seq continuity of the whole store; exit 1
    /// naming the first bad record.
    #[arg(long, conflicts_with_all = ["session", "kind", "decision", "tool", "call", "since", "until"])]
    verify: bool,
    /// Read the store of this state directory (default: the running daemon's,
    /// else $XDG_STATE_HOME/warden).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

pub fn run(args: &LogsArgs, socket: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
    let filter = filter(args, now_ms())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut out = Output::new(json);
    if args.follow {
        let socket = warden_core::paths::socket_path(socket)?;
        return rt.block_on(follow(&socket, &filter, &mut out));
    }
    let dir = store_dir(&rt, args.state_dir.as_deref(), socket)?;
    let snap = store::snapshot(&dir)?;
    if args.verify {
        return print_verify(&verify::verify(&snap), &dir, json);
    }
    print_stored(&snap, &filter, &mut out)
}

/// The flags as a [`Filter`]; `now` in Unix milliseconds.
fn filter(args: &LogsArgs, now: i64) -> anyhow::Result<Filter> {
    let mut f = Filter {
        session: args.session.clone(),
        tool: args.tool.clone(),
        call: args.call.clone(),
        ..Filter::default()
    };
    if let Some(t) = &args.kind {
        f.set_type(t)?;
    }
    if let Some(d) = &args.decision {
        f.set_decision(d)?;
    }
    if let Some(s) = &args.since {
        f.since_ms = Some(time_arg(s, now).with_context(|| format!("--since {s}"))?);
    }
    if let Some(u) = &args.until {
        f.until_ms = Some(time_arg(u, now).with_context(|| format!("--until {u}"))?);
    }
    Ok(f)
}

fn now_ms() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

/// A duration back from `now` (`90s`, `10m`, `1h30m`, `2d`, `1w`) or an RFC
/// 3339 time, as Unix milliseconds.
fn time_arg(s: &str, now: i64) -> anyhow::Result<i64> {
    if let Some(ms) = duration_ms(s) {
        return Ok(now - ms);
    }
    match time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339) {
        Ok(t) => Ok((t.unix_timestamp_nanos() / 1_000_000) as i64),
        Err(_) => bail!(
            "expected a duration (30s, 10m, 1h, 2d, 1h30m) or an RFC 3339 time (2026-11-29T14:47:00Z)"
        ),
    }
}

fn duration_ms(s: &str) -> Option<i64> {
    warden_core::duration::parse(s).and_then(|d| i64::try_from(d.as_millis()).ok())
}

/// `--state-dir`'s store; else the running daemon's; else the default.
pub(crate) fn store_dir(
    rt: &tokio::runtime::Runtime,
    state_dir: Option<&Path>,
    socket: Option<&Path>,
) -> anyhow::Result<PathBuf> {
    if let Some(d) = state_dir {
        return Ok(d.join("audit"));
    }
    if let Ok(socket) = warden_core::paths::socket_path(socket) {
        let from_daemon = rt.block_on(async {
            let mut c = warden_client::connect(&socket).await.ok()?;
            let s = c.status(pb::StatusRequest {}).await.ok()?.into_inner();
            Some(PathBuf::from(s.state_dir).join("audit"))
        });
        if let Some(d) = from_daemon {
            return Ok(d);
        }
    }
    Ok(warden_core::paths::default_state_dir()?.join("audit"))
}

fn print_stored(snap: &Snapshot, filter: &Filter, out: &mut Output) -> anyhow::Result<ExitCode> {
    out.header()?;
    each_stored(snap, |rec, bytes| {
        if filter.matches(rec) {
            return out.record(rec, bytes);
        }
        Ok(true)
    })?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Calls `f` with every stored record of `snap` in order (and its stored
/// line) until it returns false; a torn last line ends a file, a line that is
/// not a record is skipped, each said on stderr.
pub(crate) fn each_stored(
    snap: &Snapshot,
    mut f: impl FnMut(&Record, &[u8]) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    for file in &snap.files {
        let lines = file
            .lines()
            .with_context(|| format!("reading {}", snap.dir.join(&file.name).display()))?;
        for line in lines {
            let line =
                line.with_context(|| format!("reading {}", snap.dir.join(&file.name).display()))?;
            if !line.complete {
                eprintln!(
                    "wardenctl: {}:{}: an incomplete last line (a torn write; see wardenctl logs --verify)",
                    file.name, line.number
                );
                break;
            }
            let text = String::from_utf8_lossy(&line.bytes);
            let rec: Record = match serde_json::from_str(&text) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!(
                        "wardenctl: {}:{}: not an audit record ({e}); see wardenctl logs --verify",
                        file.name, line.number
                    );
                    continue;
                }
            };
            if !f(&rec, &line.bytes)? {
                return Ok(());
            }
        }
    }
    Ok(())
}

async fn follow(socket: &Path, filter: &Filter, out: &mut Output) -> anyhow::Result<ExitCode> {
    let mut c = warden_client::connect(socket)
        .await
        .context("logs -f needs a running wardend")?;
    let req = pb::LogsRequest {
        from_seq: 0,
        follow: true,
        session: filter.session.clone().unwrap_or_default(),
        r#type: match (filter.kind, &filter.action) {
            (Some(k), Some(a)) => format!("{}.{a}", k.as_str()),
            (Some(k), None) => k.as_str().to_string(),
            _ => String::new(),
        },
        decision: filter
            .decision
            .map(|d| d.as_str().to_string())
            .unwrap_or_default(),
        since_ms: filter.since_ms.unwrap_or(0),
        until_ms: 0,
        tool: filter.tool.clone().unwrap_or_default(),
        call: filter.call.clone().unwrap_or_default(),
    };
    let mut stream = c
        .logs(req)
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?
        .into_inner();
    out.header()?;
    out.flush()?;
    let mut last = 0u64;
    loop {
        match stream.message().await {
            Ok(Some(r)) => {
                if r.seq <= last {
                    continue; // never printed twice
                }
                last = r.seq;
                let rec: Record = match serde_json::from_str(&r.line) {
                    Ok(rec) => rec,
                    Err(e) => {
                        eprintln!("wardenctl: seq {}: not an audit record ({e})", r.seq);
                        continue;
                    }
                };
                if !out.record(&rec, r.line.as_bytes())? {
                    return Ok(ExitCode::SUCCESS);
                }
                out.flush()?;
            }
            Ok(None) => {
                eprintln!("wardenctl: the daemon ended the stream");
                return Ok(ExitCode::SUCCESS);
            }
            Err(s) if s.code() == tonic::Code::Unavailable => {
                eprintln!("wardenctl: {}; no more records", s.message());
                return Ok(ExitCode::SUCCESS);
            }
            Err(s) => bail!("{}", s.message()),
        }
    }
}

/// Human or JSON output on stdout; a closed stdout (`| head`) ends quietly.
struct Output {
    json: bool,
    color: bool,
    w: io::BufWriter<io::Stdout>,
}

const WIDTHS: [usize; 5] = [23, 8, 17, 8, 40];

impl Output {
    fn new(json: bool) -> Output {
        let color = io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Output {
            json,
            color,
            w: io::BufWriter::new(io::stdout()),
        }
    }

    fn header(&mut self) -> anyhow::Result<bool> {
        if self.json {
            return Ok(true);
        }
        let cells = [
            "TIME (UTC)",
            "SESSION",
            "TYPE.ACTION",
            "DECISION",
            "RESOURCE",
        ];
        let mut s = String::new();
        for (c, w) in cells.iter().zip(WIDTHS) {
            s.push_str(&format!("{c:<w$}  "));
        }
        s.push_str("REASON");
        self.line(&s)
    }

    /// False when stdout is closed.
    fn record(&mut self, rec: &Record, stored: &[u8]) -> anyhow::Result<bool> {
        if self.json {
            let mut bytes = stored.to_vec();
            bytes.push(b'\n');
            return self.write(&bytes);
        }
        let line = row(rec, self.color);
        self.line(&line)
    }

    fn line(&mut self, s: &str) -> anyhow::Result<bool> {
        self.write(format!("{}\n", s.trim_end()).as_bytes())
    }

    fn write(&mut self, b: &[u8]) -> anyhow::Result<bool> {
        match self.w.write_all(b) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        match self.w.flush() {
            Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e.into()),
            _ => Ok(()),
        }
    }
}

/// One table row; every field escaped.
fn row(r: &Record, color: bool) -> String {
    let time = match (r.ts.len(), r.ts.get(..23)) {
        (24, Some(t)) if r.ts.ends_with('Z') => t.replacen('T', " ", 1),
        _ => r.ts.clone(),
    };
    let session = match &r.session {
        Some(s) => s.chars().take(8).collect(),
        None => "-".to_string(),
    };
    let cells = [
        escape(&time),
        escape(&session),
        escape(&format!("{}.{}", r.kind.as_str(), r.action)),
        r.decision.as_str().to_string(),
        escape(&r.resource),
    ];
    let mut s = String::new();
    for (i, (c, w)) in cells.iter().zip(WIDTHS).enumerate() {
        let pad = w.saturating_sub(c.chars().count());
        if i == 3 && color {
            let code = match r.decision {
                warden_audit::Decision::Deny => "31",
                warden_audit::Decision::Allow => "32",
                warden_audit::Decision::Info => "2",
            };
            s.push_str(&format!("\x1b[{code}m{c}\x1b[0m"));
        } else {
            s.push_str(c);
        }
        s.push_str(&" ".repeat(pad + 2));
    }
    s.push_str(&escape(&r.reason));
    s
}

/// Makes a field safe to print on one terminal line: `\\`, `\n`, `\r`, `\t`
/// and `\u{..}` for every other control, format or bidi character (C0, DEL,
/// C1, zero-width, line/paragraph separators, bidi embeddings and isolates,
/// BOM, tags). Printable text (including U+FFFD, which replaced invalid
/// UTF-8) is kept.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || invisible(c) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

fn invisible(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x034F | 0x061C | 0x115F | 0x1160 | 0x17B4 | 0x17B5 | 0x180B..=0x180F
        | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F
        | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFFB | 0x1D173..=0x1D17A | 0xE0000..=0xE0FFF)
}

fn print_verify(r: &Report, dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let code = if r.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(code);
    }
    let range = match (r.first_seq, r.last_seq) {
        (Some(a), Some(b)) => format!("seq {a}..{b}"),
        _ => "no records".to_string(),
    };
    match &r.problem {
        None => {
            println!(
                "OK: {} records ({range}) in {} files of {}; chain intact",
                r.records,
                r.files.len(),
                dir.display()
            );
            if let (Some(seq), Some(h)) = (r.last_seq, &r.last_hash) {
                println!("last record: seq {seq} sha256 {h}");
            }
        }
        Some(p) => {
            let seq = p.seq.map(|s| format!(" seq {s}:")).unwrap_or_default();
            println!(
                "FAILED: {}:{}:{seq} {}: {}",
                escape(&p.file),
                p.line,
                p.kind.as_str(),
                escape(&p.message)
            );
            println!("{} records read ({range}) in {}", r.records, dir.display());
        }
    }
    for n in &r.notes {
        println!("note: {}", escape(n));
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_audit::{Decision, RecordType};

    #[test]
    fn durations_and_times() {
        assert_eq!(duration_ms("30s"), Some(30_000));
        assert_eq!(duration_ms("10m"), Some(600_000));
        assert_eq!(duration_ms("1h30m"), Some(5_400_000));
        assert_eq!(duration_ms("2d"), Some(172_800_000));
        for bad in ["", "10", "m", "10x", "1h30", "-1h"] {
            assert_eq!(duration_ms(bad), None, "{bad}");
        }
        let now = 1_000_000_000_000;
        assert_eq!(time_arg("1h", now).unwrap(), now - 3_600_000);
        assert_eq!(
            time_arg("2026-11-29T14:47:32.123Z", now).unwrap(),
            warden_audit::parse_timestamp_ms("2026-11-29T14:47:32.123Z").unwrap()
        );
        assert_eq!(
            time_arg("2026-11-29T16:47:32.123+02:00", now).unwrap(),
            warden_audit::parse_timestamp_ms("2026-11-29T14:47:32.123Z").unwrap()
        );
        assert!(time_arg("yesterday", now).is_err());
    }

    #[test]
    fn escape_leaves_one_harmless_line() {
        let hostile = "a\nb\r\t\\ \u{1b}[2J\u{7}\u{7f}\u{9b}31m\u{202e}txt\u{2028}\u{200b}\u{feff}\u{e0041}é\u{fffd}";
        let e = escape(hostile);
        assert_eq!(
            e,
            "a\\nb\\r\\t\\\\ \\u{1b}[2J\\u{7}\\u{7f}\\u{9b}31m\\u{202e}txt\\u{2028}\\u{200b}\\u{feff}\\u{e0041}é\u{fffd}"
        );
        assert!(!e.chars().any(|c| c.is_control()));
    }

    #[test]
    fn rows_escape_every_field_and_colour_only_the_decision() {
        let mut r = Record::new(
            RecordType::Session,
            "kill\n",
            Some("3fa1c09b22de"),
            "/bin/x\n2026-01-01 00:00:00.000  evil",
            Decision::Deny,
            "\u{1b}]0;title\u{7}",
        );
        r.ts = "2026-11-29T14:47:32.123Z".into();
        let plain = row(&r, false);
        assert!(
            !plain.contains('\n') && !plain.contains('\u{1b}'),
            "{plain}"
        );
        assert!(plain.starts_with("2026-11-29 14:47:32.123  3fa1c09b  session.kill\\n"));
        let coloured = row(&r, true);
        assert_eq!(coloured.matches('\u{1b}').count(), 2, "{coloured:?}");
        assert!(coloured.contains("\u{1b}[31mdeny\u{1b}[0m"));
    }
}
