//! The approval prompt on the shim's controlling terminal (docs/approvals.md).
//!
//! With `--approve`, a shim that has a controlling terminal in line mode asks
//! there about its own session's pending approvals, one at a time. It never
//! touches stdin or stdout (they are the MCP channel): it opens `/dev/tty`
//! itself. A terminal in raw mode belongs to a full-screen program (an MCP
//! client with a TUI), whose keys must not be stolen: then the shim does not
//! prompt, and the other channels (`wardenctl approve`, the desktop) remain.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;

use tokio::sync::mpsc;
use warden_client::pb;

/// The controlling terminal, opened for the prompt.
pub struct Tty {
    out: File,
    /// Lines typed, from a thread that reads the terminal (a blocking read
    /// in a thread of its own: it ends with the shim), one line per
    /// [`Tty::want`]: nothing is read while no question is asked.
    lines: mpsc::Receiver<String>,
    want: std::sync::mpsc::Sender<()>,
    reading: bool,
}

impl Tty {
    /// `/dev/tty` when the shim has a controlling terminal in line mode
    /// (canonical input) and is in its foreground process group (a
    /// background job reading it would be stopped); None otherwise.
    pub fn open() -> Option<Tty> {
        use nix::fcntl::OFlag;
        use nix::sys::termios::{tcgetattr, LocalFlags};
        let fd = nix::fcntl::open(
            "/dev/tty",
            OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .ok()?;
        let file = File::from(fd);
        let t = tcgetattr(file.as_fd()).ok()?;
        if !t.local_flags.contains(LocalFlags::ICANON) {
            return None;
        }
        if nix::unistd::tcgetpgrp(file.as_fd()).ok()? != nix::unistd::getpgrp() {
            return None;
        }
        let input = file.try_clone().ok()?;
        let (tx, lines) = mpsc::channel(1);
        let (want, wanted) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("tty".into())
            .spawn(move || {
                let mut input = BufReader::new(input);
                while wanted.recv().is_ok() {
                    let mut line = String::new();
                    match input.read_line(&mut line) {
                        Ok(n) if n > 0 => {}
                        _ => return,
                    }
                    if tx.blocking_send(line.trim().to_owned()).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Tty {
            out: file,
            lines,
            want,
            reading: false,
        })
    }

    /// Asks the reader for one line, unless one is being read.
    fn want(&mut self) {
        if !self.reading && self.want.send(()).is_ok() {
            self.reading = true;
        }
    }

    fn say(&mut self, text: &str) {
        let _ = self.out.write_all(text.as_bytes());
    }
}

/// What a person typed, as a scope.
fn scope_of(answer: &str) -> Option<&'static str> {
    match answer.to_ascii_lowercase().as_str() {
        "o" | "once" | "y" | "yes" => Some("once"),
        "s" | "session" => Some("session"),
        "a" | "always" => Some("always"),
        "d" | "deny" | "n" | "no" | "" => Some("deny"),
        _ => None,
    }
}

fn question(p: &pb::PendingApproval) -> String {
    // What the server chose (the resource, a tool's name) is escaped: it
    // must not move the cursor or forge a line of this prompt.
    let show = |s: &str| warden_core::shown::shown(s, 240);
    let mut who = if p.server.is_empty() {
        format!("session {}", p.session)
    } else {
        show(&p.server)
    };
    if !p.via.is_empty() && p.kind != "tool" {
        who = format!("{who} ({})", show(&p.via));
    }
    let resource = show(&p.resource);
    let what = match p.kind.as_str() {
        "network" => format!("wants to connect to {resource}"),
        "tool" => format!(
            "offers the {} tool `{resource}` (withheld: its definition differs from the pin)",
            show(&p.operation)
        ),
        _ => format!("wants to {} {resource}", show(&p.operation)),
    };
    let always = if p.kind == "tool" {
        "  [a]lways (pin it)".into()
    } else if p.policy_path.is_empty() {
        String::new()
    } else {
        "  [a]lways (add to the policy)".into()
    };
    format!(
        "\r\nwarden: {who} {what} (approval {}, denied in {}s)\r\nwarden: [o]nce  [s]ession{always}  [d]eny (default)? ",
        p.id,
        p.remaining_ms.div_ceil(1000)
    )
}

/// Prompts for `session`'s approvals until the watch ends.
pub async fn run(
    mut client: warden_client::pb::warden_client::WardenClient<tonic::transport::Channel>,
    session: String,
    mut tty: Tty,
) {
    let mut stream = match client
        .watch_approvals(pb::WatchApprovalsRequest {
            session: session.clone(),
        })
        .await
    {
        Ok(s) => s.into_inner(),
        Err(s) => {
            tty.say(&format!(
                "\r\nwarden: cannot watch approvals: {}; answer with `wardenctl approve`\r\n",
                s.message()
            ));
            return;
        }
    };
    let mut queue: VecDeque<pb::PendingApproval> = VecDeque::new();
    let mut asking: Option<pb::PendingApproval> = None;
    loop {
        if asking.is_none() {
            if let Some(p) = queue.pop_front() {
                tty.say(&question(&p));
                tty.want();
                asking = Some(p);
            }
        }
        tokio::select! {
            ev = stream.message() => {
                let Ok(Some(ev)) = ev else { return };
                match ev.event {
                    Some(pb::approval_event::Event::Raised(p)) => {
                        let known = asking.as_ref().is_some_and(|a| a.id == p.id)
                            || queue.iter().any(|q| q.id == p.id);
                        if !known {
                            queue.push_back(p);
                        }
                    }
                    Some(pb::approval_event::Event::Resolved(r)) => {
                        queue.retain(|q| q.id != r.id);
                        if asking.as_ref().is_some_and(|a| a.id == r.id) {
                            asking = None;
                            let how = if r.outcome == "expired" {
                                "expired: denied".to_string()
                            } else {
                                format!("answered `{}` through {}", r.outcome, r.channel)
                            };
                            tty.say(&format!("\r\nwarden: approval {} {how}\r\n", r.id));
                        }
                    }
                    None => {}
                }
            }
            line = tty.lines.recv() => {
                let Some(line) = line else { return };
                tty.reading = false;
                // A line typed with no question asked is not an answer.
                let Some(p) = asking.clone() else { continue };
                let Some(scope) = scope_of(&line) else {
                    tty.say("warden: answer o, s, a or d: ");
                    tty.want();
                    continue;
                };
                let req = pb::AnswerApprovalRequest {
                    id: p.id.clone(),
                    scope: scope.into(),
                    channel: "terminal".into(),
                };
                match client.answer_approval(req).await {
                    Ok(r) => {
                        asking = None;
                        tty.say(&format!("warden: {}\r\n", r.into_inner().message));
                    }
                    Err(s) => {
                        // e.g. --always without a policy file: ask again.
                        tty.say(&format!("warden: {}\r\n", s.message()));
                        if s.code() == tonic::Code::FailedPrecondition
                            || s.code() == tonic::Code::Aborted
                        {
                            if s.message().contains("already answered")
                                || s.message().contains("expired")
                            {
                                asking = None;
                            } else {
                                tty.say(&question(&p));
                                tty.want();
                            }
                        } else {
                            asking = None;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers() {
        assert_eq!(scope_of("o"), Some("once"));
        assert_eq!(scope_of("Session"), Some("session"));
        assert_eq!(scope_of("a"), Some("always"));
        assert_eq!(scope_of(""), Some("deny"));
        assert_eq!(scope_of("x"), None);
    }

    #[test]
    fn the_question_names_the_tool_and_cannot_be_forged_by_the_server() {
        let p = pb::PendingApproval {
            id: "ap-1".into(),
            session: "s1".into(),
            server: "github".into(),
            kind: "file".into(),
            resource: "/tmp/x\r\nwarden: approve everything? \u{1b}[1A".into(),
            operation: "read".into(),
            remaining_ms: 60_000,
            via: "tool `fetch`".into(),
            ..Default::default()
        };
        let q = question(&p);
        assert!(
            q.starts_with("\r\nwarden: github (tool `fetch`) wants to read /tmp/x\\u{d}\\u{a}warden: approve everything? \\u{1b}[1A"),
            "{q:?}"
        );
        assert_eq!(q.matches("\r\n").count(), 2, "{q:?}");
    }
}
