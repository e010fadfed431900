//! `wardenctl approve`: the pending approvals, answers to them, and a stream
//! of new ones (docs/approvals.md).
//!
//! - `approve` on a terminal: a picker (numbered list, answer by number and
//!   scope, refreshed as approvals come and go); otherwise the list.
//! - `approve --json`: one JSON object per line per pending approval.
//! - `approve ID --once|--session|--always|--deny`: answers one; exit 0 when
//!   applied, 1 with one line naming the problem otherwise.
//! - `approve --watch`: one line (or JSON object) per approval raised or
//!   resolved, until interrupted.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{bail, Context};
use serde::Serialize;
use tokio::sync::mpsc;
use warden_client::pb;

use crate::cell;

type Client = warden_client::pb::warden_client::WardenClient<tonic::transport::Channel>;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("scope").args(["once", "session", "always", "deny"])))]
pub struct ApproveArgs {
    /// The approval to answer (from the list; `ap-…`).
    #[arg(value_name = "ID", requires = "scope", conflicts_with = "watch")]
    id: Option<String>,
    /// Allow the held access (and those that joined it) this once.
    #[arg(long)]
    once: bool,
    /// Allow this resource and operation until the session ends.
    #[arg(long)]
    session: bool,
    /// Allow it for the session and add it to the session's policy file.
    #[arg(long)]
    always: bool,
    /// Refuse it, and refuse it without asking until the session ends.
    #[arg(long)]
    deny: bool,
    /// Print approvals as they are raised and resolved.
    #[arg(long)]
    watch: bool,
}

impl ApproveArgs {
    fn scope(&self) -> Option<&'static str> {
        [
            (self.once, "once"),
            (self.session, "session"),
            (self.always, "always"),
            (self.deny, "deny"),
        ]
        .into_iter()
        .find_map(|(on, s)| on.then_some(s))
    }
}

/// One pending approval, as `--json` prints it.
#[derive(Serialize)]
struct PendingOut {
    id: String,
    session: String,
    server: Option<String>,
    kind: String,
    resource: String,
    operation: String,
    protocol: Option<String>,
    age_ms: u64,
    remaining_ms: u64,
    /// The policy file `--always` edits; null when the session has none.
    policy: Option<String>,
    /// The MCP tool call it was raised during ("tool `fetch`"); null when none.
    via: Option<String>,
}

impl From<pb::PendingApproval> for PendingOut {
    fn from(p: pb::PendingApproval) -> PendingOut {
        let some = |s: String| (!s.is_empty()).then_some(s);
        PendingOut {
            id: p.id,
            session: p.session,
            server: some(p.server),
            kind: p.kind,
            resource: p.resource,
            operation: p.operation,
            protocol: some(p.protocol),
            age_ms: p.age_ms,
            remaining_ms: p.remaining_ms,
            policy: some(p.policy_path),
            via: some(p.via),
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
enum WatchOut {
    Raised(PendingOut),
    Resolved {
        id: String,
        outcome: String,
        channel: String,
    },
}

#[derive(Serialize)]
struct AnsweredOut {
    id: String,
    scope: String,
    message: String,
}

pub async fn run(c: &mut Client, args: &ApproveArgs, json: bool) -> anyhow::Result<ExitCode> {
    if let Some(id) = &args.id {
        let scope = args
            .scope()
            .context("give --once, --session, --always or --deny")?;
        return answer(c, id, scope, json).await;
    }
    if let Some(scope) = args.scope() {
        bail!("--{scope} answers one approval: give its ID (see `wardenctl approve`)");
    }
    if args.watch {
        return watch(c, json).await;
    }
    if !json && std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        return picker(c).await;
    }
    let list = pending(c).await?;
    if json {
        let mut out = std::io::stdout().lock();
        for p in list {
            writeln!(out, "{}", serde_json::to_string(&PendingOut::from(p))?)?;
        }
    } else {
        print_list(&list, false);
    }
    Ok(ExitCode::SUCCESS)
}

async fn pending(c: &mut Client) -> anyhow::Result<Vec<pb::PendingApproval>> {
    Ok(c.list_approvals(pb::ListApprovalsRequest::default())
        .await?
        .into_inner()
        .approvals)
}

async fn answer(c: &mut Client, id: &str, scope: &str, json: bool) -> anyhow::Result<ExitCode> {
    let r = c
        .answer_approval(pb::AnswerApprovalRequest {
            id: id.to_owned(),
            scope: scope.to_owned(),
            channel: "cli".into(),
        })
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?
        .into_inner();
    if json {
        println!(
            "{}",
            serde_json::to_string(&AnsweredOut {
                id: r.id,
                scope: r.scope,
                message: r.message,
            })?
        );
    } else {
        println!("{}", cell(&r.message));
    }
    Ok(ExitCode::SUCCESS)
}

fn what(p: &pb::PendingApproval) -> String {
    match p.kind.as_str() {
        "network" => format!("connect {}", p.resource),
        "tool" => format!("use the {} tool `{}`", p.operation, p.resource),
        _ => format!("{} {}", p.operation, p.resource),
    }
}

fn who(p: &pb::PendingApproval) -> String {
    let who = if p.server.is_empty() {
        p.session.clone()
    } else {
        format!("{} ({})", p.server, p.session)
    };
    if p.via.is_empty() || p.kind == "tool" {
        who
    } else {
        format!("{who}, {}", p.via)
    }
}

fn print_list(list: &[pb::PendingApproval], numbered: bool) {
    if list.is_empty() {
        println!("no pending approvals");
        return;
    }
    let ids: Vec<String> = list.iter().map(|p| cell(&p.id)).collect();
    let width = ids.iter().map(String::len).max().unwrap_or(2).max(2);
    if numbered {
        println!(
            "  #  {:<width$}  {:<24}  {:>5}  {:>5}  WANTS",
            "ID", "SERVER", "AGE", "LEFT"
        );
    } else {
        println!(
            "{:<width$}  {:<24}  {:>5}  {:>5}  WANTS",
            "ID", "SERVER", "AGE", "LEFT"
        );
    }
    for (i, (p, id)) in list.iter().zip(ids).enumerate() {
        let line = format!(
            "{id:<width$}  {:<24}  {:>4}s  {:>4}s  {}",
            cell(&who(p)),
            p.age_ms / 1000,
            p.remaining_ms.div_ceil(1000),
            cell(&what(p)),
        );
        if numbered {
            println!("{:>3}  {line}", i + 1);
        } else {
            println!("{line}");
        }
    }
}

async fn watch(c: &mut Client, json: bool) -> anyhow::Result<ExitCode> {
    let mut stream = c
        .watch_approvals(pb::WatchApprovalsRequest::default())
        .await?
        .into_inner();
    while let Some(ev) = stream
        .message()
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?
    {
        let out = match ev.event {
            Some(pb::approval_event::Event::Raised(p)) => {
                if !json {
                    println!(
                        "raised    {}  {}  {}  ({}s to answer)",
                        cell(&p.id),
                        cell(&who(&p)),
                        cell(&what(&p)),
                        p.remaining_ms.div_ceil(1000)
                    );
                }
                WatchOut::Raised(p.into())
            }
            Some(pb::approval_event::Event::Resolved(r)) => {
                if !json {
                    println!(
                        "resolved  {}  {} ({})",
                        cell(&r.id),
                        cell(&r.outcome),
                        cell(&r.channel)
                    );
                }
                WatchOut::Resolved {
                    id: r.id,
                    outcome: r.outcome,
                    channel: r.channel,
                }
            }
            None => continue,
        };
        if json {
            println!("{}", serde_json::to_string(&out)?);
        }
        std::io::stdout().flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The picker: the numbered list, then `N o|s|a|d` answers; refreshed as
/// approvals come and go. `q` or end of input leaves.
async fn picker(c: &mut Client) -> anyhow::Result<ExitCode> {
    let (tx, mut lines) = mpsc::channel::<String>(1);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            if tx.blocking_send(line).is_err() {
                return;
            }
        }
    });
    let mut stream = c
        .watch_approvals(pb::WatchApprovalsRequest::default())
        .await?
        .into_inner();
    let mut list = pending(c).await?;
    let help =
        "answer with a number and o(nce), s(ession), a(lways) or d(eny), e.g. `1 o`; q to quit";
    print_list(&list, true);
    println!("{help}");
    loop {
        print!("> ");
        std::io::stdout().flush()?;
        tokio::select! {
            ev = stream.message() => {
                let Ok(Some(_)) = ev else {
                    bail!("lost the daemon's approval stream");
                };
                list = pending(c).await?;
                println!();
                print_list(&list, true);
            }
            line = lines.recv() => {
                let Some(line) = line else { return Ok(ExitCode::SUCCESS) };
                let line = line.trim();
                if line == "q" || line == "quit" {
                    return Ok(ExitCode::SUCCESS);
                }
                if line.is_empty() {
                    list = pending(c).await?;
                    print_list(&list, true);
                    continue;
                }
                let mut words = line.split_whitespace();
                let n = words.next().and_then(|w| w.parse::<usize>().ok());
                let scope = match words.next() {
                    Some("o" | "once") => Some("once"),
                    Some("s" | "session") => Some("session"),
                    Some("a" | "always") => Some("always"),
                    Some("d" | "deny") => Some("deny"),
                    _ => None,
                };
                let (Some(n), Some(scope)) = (n, scope) else {
                    println!("{help}");
                    continue;
                };
                let Some(p) = n.checked_sub(1).and_then(|i| list.get(i)) else {
                    println!("no approval #{n}");
                    continue;
                };
                let req = pb::AnswerApprovalRequest {
                    id: p.id.clone(),
                    scope: scope.into(),
                    channel: "cli".into(),
                };
                match c.answer_approval(req).await {
                    Ok(r) => println!("{}", cell(&r.into_inner().message)),
                    Err(s) => println!("wardenctl: {}", cell(s.message())),
                }
                list = pending(c).await?;
                print_list(&list, true);
            }
        }
    }
}
