//! `wardenctl suggest SESSION [--apply] [--state-dir DIR]` (docs/init.md,
//! "suggest"): the smallest policy change that would have allowed what a
//! session was denied, from its audit records, as a diff of its policy file;
//! `--apply` makes that edit (format kept, one atomic replacement:
//! `warden_core::policy::edit::file::add_grants_to_file`).
//!
//! What becomes a grant, from the session's `deny` records:
//! - a file outside the grants (`ENOENT`, hidden): reading, listing, looking
//!   up or executing it → `filesystem.read` of that exact path; opening it for
//!   writing → `filesystem.write` of it;
//! - a write where only reads are granted, or on the read-only root (`EROFS`):
//!   writing, truncating or changing a file → `filesystem.write` of the file;
//!   creating, removing or renaming an entry → `filesystem.write` of its
//!   directory (the kernel checks those on the directory), the nearest one
//!   that exists;
//! - a host outside `network.allow` (`not-allowed`) → its `host:port`; a name
//!   whose addresses are private (`private-address`) → `host:port private`,
//!   with a warning.
//!
//! Never suggested, and said so: protected names and the runtime (they cannot
//! be granted), directories too broad to grant (`/`, `$HOME`, a whole
//! `~/.config`, `~/.cache`, `~/.local`, a top-level system directory), the
//! listing of the sandbox's own skeleton directories. Five or more denied
//! entries of one directory become that directory. Secrets and identities
//! (`warden_core::policy::sensitive`) are suggested with a warning in their
//! comment and on stderr.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use warden_audit::{Decision, Record, RecordType};
use warden_core::policy::edit::Grant;
use warden_core::policy::sensitive::sensitive;

#[derive(clap::Args, Debug)]
pub struct SuggestArgs {
    /// The session (an id or a unique prefix), live or ended.
    #[arg(value_name = "SESSION")]
    session: String,
    /// Make the edit in the policy file (comments and formatting kept).
    #[arg(long)]
    apply: bool,
    /// Read the store of this state directory (default: the running daemon's,
    /// else $XDG_STATE_HOME/warden).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

/// Denied entries of one directory from which the directory itself is
/// suggested instead.
const SIBLINGS: usize = 5;

/// One suggested grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suggested {
    pub grant: Grant,
    /// What was denied, for the comment: `open-read denied (2×)`.
    pub why: String,
    /// What the path holds, when it is a secret.
    pub warning: Option<String>,
}

/// What `suggest` found in a session's records.
#[derive(Debug, Default)]
pub struct Plan {
    pub policy_path: Option<PathBuf>,
    pub policy_digest: Option<String>,
    pub grants: Vec<Suggested>,
    /// Denials that no grant can allow, one line each.
    pub notes: Vec<String>,
}

/// `path` is too broad to grant (by `suggest` and `init`): `/`, `$HOME`, `/home`, a whole
/// `~/.config`, `~/.cache`, `~/.local` (or `~/.local/share`), or a top-level
/// directory.
pub(crate) fn too_broad(path: &Path, home: Option<&Path>) -> bool {
    if path.components().count() <= 2 {
        return true;
    }
    let Some(home) = home else { return false };
    path == home
        || [
            ".config",
            ".cache",
            ".local",
            ".local/share",
            ".local/state",
        ]
        .iter()
        .any(|d| path == home.join(d))
}

/// The nearest existing directory at or above `path`'s parent.
fn existing_parent(path: &Path) -> Option<PathBuf> {
    let mut p = path.parent()?;
    loop {
        if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
            return Some(p.to_path_buf());
        }
        p = p.parent()?;
    }
}

/// The denied path of a file record: `details.resolved` (the sandbox's view,
/// which mirrors host paths), else `resource` when absolute.
fn denied_path(r: &Record) -> Option<PathBuf> {
    let resolved = r.details.get("resolved").and_then(|v| v.as_str());
    let p = resolved.unwrap_or(&r.resource);
    // Not valid UTF-8 (`*_bytes_hex`): not suggested from a replaced name.
    if p.contains('\u{fffd}') || !p.starts_with('/') {
        return None;
    }
    Some(PathBuf::from(p))
}

/// System directories, whose files runtimes probe on their own (the same
/// list as the approvals' `worth_asking` in warden-sandbox's `hold.rs`).
const SYSTEM: &[&str] = &[
    "/etc", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/var", "/run", "/sys",
    "/proc", "/dev", "/boot", "/snap", "/nix",
];

fn system(path: &Path) -> bool {
    SYSTEM.iter().any(|s| path.starts_with(s))
}

#[derive(Default)]
struct Wants {
    /// path → (key is write, actions seen with counts)
    files: BTreeMap<(bool, PathBuf), BTreeMap<String, u64>>,
    hosts: BTreeMap<String, (bool, BTreeMap<String, u64>)>,
    notes: BTreeSet<String>,
    /// Denied system files: a note, not grants.
    system: BTreeSet<String>,
}

/// The plan for session `id` from its records (in store order).
pub fn plan(id: &str, records: &[Record], home: Option<&Path>) -> Plan {
    let mut out = Plan::default();
    let mut w = Wants::default();
    for r in records.iter().filter(|r| r.session.as_deref() == Some(id)) {
        match (r.kind, r.action.as_str()) {
            (RecordType::Session, "start") => {
                out.policy_path = r
                    .details
                    .get("policy_path")
                    .and_then(|v| v.as_str())
                    .map(PathBuf::from);
                out.policy_digest = r
                    .details
                    .get("policy_digest")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned);
            }
            (RecordType::File, action) if r.decision == Decision::Deny => {
                file_denial(&mut w, r, action, home)
            }
            (RecordType::Network, "connect") if r.decision == Decision::Deny => {
                network_denial(&mut w, r)
            }
            _ => {}
        }
    }
    out.grants = collapse(w.files, home, &mut w.notes);
    for (entry, (private, seen)) in w.hosts {
        out.grants.push(Suggested {
            grant: Grant::Network(entry),
            why: counted("connect", &seen),
            warning: private.then(|| {
                "its addresses are private (a host on your network or this machine)".to_owned()
            }),
        });
    }
    if !w.system.is_empty() {
        let shown: Vec<&str> = w.system.iter().take(5).map(String::as_str).collect();
        let more = w.system.len().saturating_sub(shown.len());
        w.notes.insert(format!(
            "system files denied, not suggested (runtimes probe them on their own; grant one by hand if the server needs it): {}{}",
            shown.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        ));
    }
    out.notes = w.notes.into_iter().collect();
    out
}

fn file_denial(w: &mut Wants, r: &Record, action: &str, home: Option<&Path>) {
    let Some(path) = denied_path(r) else { return };
    let errno = r.details.get("errno").and_then(|v| v.as_i64());
    let shown = path.display();
    let reason = r.reason.as_str();
    if reason.starts_with("protected") {
        w.notes.insert(format!(
            "{shown}: {reason}; protected names cannot be granted"
        ));
        return;
    }
    if reason.starts_with("read-only runtime")
        || reason.starts_with("read-only: ")
        || reason.starts_with("a mount point")
        || reason.starts_with("no-exec mount")
    {
        w.notes.insert(format!(
            "{shown} ({action}): {reason}; no grant changes that"
        ));
        return;
    }
    if system(&path) {
        w.system.insert(path.display().to_string());
        return;
    }
    let write_entry = matches!(
        action,
        "create" | "mkdir" | "mknod" | "symlink" | "link" | "unlink" | "rmdir" | "rename"
    );
    let write_file = matches!(action, "open-write" | "truncate" | "chmod" | "chown");
    let (write, target) = match errno {
        // Outside the grants, hidden.
        Some(2) => {
            if write_entry {
                (true, existing_parent(&path))
            } else {
                (write_file, Some(path.clone()))
            }
        }
        // A write where only reads are granted, or the read-only root.
        Some(30) if write_entry => (true, existing_parent(&path)),
        Some(30) => (true, Some(path.clone())),
        // Listing a skeleton directory (the listing itself succeeds).
        None => {
            w.notes.insert(format!(
                "{shown}: only the sandbox's own entries of this directory show; grant what below it is needed"
            ));
            return;
        }
        Some(_) => return,
    };
    let Some(target) = target else { return };
    if too_broad(&target, home) {
        w.notes.insert(format!(
            "{shown} ({action}) would need {} {}, which is too broad to suggest; grant a directory below it by hand",
            if write { "write access to" } else { "a read grant of" },
            target.display()
        ));
        return;
    }
    *w.files
        .entry((write, target))
        .or_default()
        .entry(action.to_owned())
        .or_default() += 1;
}

fn network_denial(w: &mut Wants, r: &Record) {
    let code = r.details.get("code").and_then(|v| v.as_str()).unwrap_or("");
    let host = r.details.get("host").and_then(|v| v.as_str());
    let port = r.details.get("port").and_then(|v| v.as_u64());
    let (Some(host), Some(port)) = (host, port) else {
        return;
    };
    let host_port = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let (entry, private) = match code {
        "not-allowed" => (host_port, false),
        "private-address" => (format!("{host_port} private"), true),
        _ => {
            w.notes.insert(format!(
                "{host_port}: {} ({code}); no allow entry changes that",
                r.reason
            ));
            return;
        }
    };
    let e = w.hosts.entry(entry).or_default();
    e.0 |= private;
    *e.1.entry("connect".into()).or_default() += 1;
}

fn counted(what: &str, seen: &BTreeMap<String, u64>) -> String {
    let n: u64 = seen.values().sum();
    let actions: Vec<&str> = seen.keys().map(String::as_str).collect();
    let what = if actions.is_empty() {
        what.to_owned()
    } else {
        actions.join(", ")
    };
    if n == 1 {
        format!("{what} denied")
    } else {
        format!("{what} denied ({n}×)")
    }
}

/// Exact paths, but a directory for five or more denied entries of it; a
/// read dropped where a write of it (or of a directory above it) is
/// suggested; a path dropped below another suggested one of the same kind.
fn collapse(
    files: BTreeMap<(bool, PathBuf), BTreeMap<String, u64>>,
    home: Option<&Path>,
    notes: &mut BTreeSet<String>,
) -> Vec<Suggested> {
    let mut by_parent: BTreeMap<(bool, PathBuf), Vec<PathBuf>> = BTreeMap::new();
    for (write, p) in files.keys() {
        if let Some(parent) = p.parent() {
            by_parent
                .entry((*write, parent.to_path_buf()))
                .or_default()
                .push(p.clone());
        }
    }
    let mut merged: BTreeMap<(bool, PathBuf), BTreeMap<String, u64>> = BTreeMap::new();
    let mut collapsed: BTreeSet<(bool, PathBuf)> = BTreeSet::new();
    for ((write, p), seen) in files {
        let parent = p.parent().map(Path::to_path_buf);
        let key = match parent {
            Some(dir)
                if by_parent.get(&(write, dir.clone())).map_or(0, Vec::len) >= SIBLINGS
                    && !too_broad(&dir, home) =>
            {
                collapsed.insert((write, dir.clone()));
                (write, dir)
            }
            _ => (write, p),
        };
        let m = merged.entry(key).or_default();
        for (a, n) in seen {
            *m.entry(a).or_default() += n;
        }
    }
    let keys: Vec<(bool, PathBuf)> = merged.keys().cloned().collect();
    let covered = |write: bool, p: &Path| {
        keys.iter().any(|(w2, q)| {
            (q != p && p.starts_with(q) && (*w2 || !write)) || (q == p && *w2 && !write)
        })
    };
    let mut out = Vec::new();
    for ((write, p), seen) in &merged {
        if covered(*write, p) {
            continue;
        }
        let value = p.display().to_string();
        let warning = sensitive(p, home).map(|what| format!("it holds {what}"));
        if let Some(w) = &warning {
            notes.insert(format!("{value}: {w}; review it before you grant it"));
        }
        let why = if collapsed.contains(&(*write, p.clone())) {
            format!("{} in it", counted("", seen))
        } else {
            counted("", seen)
        };
        out.push(Suggested {
            grant: if *write {
                Grant::Write(value)
            } else {
                Grant::Read(value)
            },
            why,
            warning,
        });
    }
    out
}

/// The comment of a suggested grant.
fn note(s: &Suggested, session: &str) -> String {
    let today = time::OffsetDateTime::now_utc().date();
    match &s.warning {
        Some(w) => format!(
            "WARNING: {w}. suggested {today} by wardenctl suggest {session}: {}",
            s.why
        ),
        None => format!(
            "suggested {today} by wardenctl suggest {session}: {}",
            s.why
        ),
    }
}

pub fn run(args: &SuggestArgs, socket: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let dir = crate::logs::store_dir(&rt, args.state_dir.as_deref(), socket)?;
    let snap = warden_audit::store::snapshot(&dir)?;
    let mut records = Vec::new();
    crate::logs::each_stored(&snap, |r, _| {
        if r.session
            .as_deref()
            .is_some_and(|s| s.starts_with(&args.session))
        {
            records.push(r.clone());
        }
        Ok(true)
    })?;
    let ids: BTreeSet<&str> = records
        .iter()
        .filter_map(|r| r.session.as_deref())
        .collect();
    let id = match ids.len() {
        0 => bail!(
            "no session {} in the audit store {} (see wardenctl logs --type session.start)",
            args.session,
            dir.display()
        ),
        1 => ids.iter().next().copied().unwrap_or_default().to_owned(),
        _ => bail!(
            "session {} is ambiguous: {}",
            args.session,
            ids.into_iter().collect::<Vec<_>>().join(", ")
        ),
    };
    let home = warden_core::paths::home_dir().ok();
    let plan = plan(&id, &records, home.as_deref());
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    let grants: Vec<(Grant, String)> = plan
        .grants
        .iter()
        .map(|s| (s.grant.clone(), note(s, &id)))
        .collect();

    // The edit, on the file's text as it is now.
    let edit = match &plan.policy_path {
        Some(path) if !grants.is_empty() => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the session's policy file {}", path.display()))?;
            let mut now = text.clone();
            for (g, n) in &grants {
                now = warden_core::policy::edit::add_grant(&now, g, n)
                    .with_context(|| format!("cannot add {} to {}", g.value(), path.display()))?
                    .text;
            }
            Some((path.clone(), text, now))
        }
        _ => None,
    };
    let diff = edit.as_ref().map(|(path, old, new)| {
        let p = path.display().to_string();
        similar::TextDiff::from_lines(old, new)
            .unified_diff()
            .context_radius(2)
            .header(&p, &format!("{p} (suggested)"))
            .to_string()
    });
    if json {
        let v = serde_json::json!({
            "session": id,
            "policy_path": plan.policy_path,
            "grants": plan.grants.iter().map(|s| serde_json::json!({
                "key": s.grant.key(),
                "entry": s.grant.value(),
                "why": s.why,
                "warning": s.warning,
            })).collect::<Vec<_>>(),
            "notes": plan.notes,
            "diff": diff,
        });
        writeln!(stdout, "{v}")?;
    } else if plan.grants.is_empty() {
        writeln!(
            stdout,
            "session {id}: nothing to suggest (no denial that a grant would allow)"
        )?;
    } else {
        match &diff {
            Some(d) => write!(stdout, "{d}")?,
            None => {
                writeln!(
                    stdout,
                    "session {id} was started without a policy file; in a policy these would be:"
                )?;
                for (g, n) in &grants {
                    writeln!(stdout, "  {}: {:?}  # {n}", g.key(), g.value())?;
                }
            }
        }
    }
    if !json {
        for n in &plan.notes {
            writeln!(stderr, "note: {n}")?;
        }
    }
    if let (Some(digest), Some((_, old, _))) = (&plan.policy_digest, &edit) {
        if *digest != warden_core::policy::digest(old) {
            writeln!(
                stderr,
                "note: the policy file changed since session {id} started; the change applies to its text as it is now"
            )?;
        }
    }
    if !args.apply {
        if !json && edit.is_some() {
            writeln!(stderr, "apply it with: wardenctl suggest {id} --apply")?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some((path, old, _)) = edit else {
        if grants.is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
        bail!("session {id} was started without a policy file (flags only): there is no file to edit; add the grants above to a policy, or pass them as flags");
    };
    let done = warden_core::policy::edit::file::add_grants_to_file(&path, old.as_bytes(), &grants)
        .with_context(|| format!("nothing was changed in {}", path.display()))?;
    if !json {
        writeln!(
            stderr,
            "{} {} grant{} to {}{}",
            if done.already_present {
                "already has"
            } else {
                "added"
            },
            grants.len(),
            if grants.len() == 1 { "" } else { "s" },
            path.display(),
            if done.merged {
                " (the file changed meanwhile: merged)"
            } else {
                ""
            }
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rec(
        kind: RecordType,
        action: &str,
        decision: Decision,
        details: serde_json::Value,
    ) -> Record {
        Record {
            v: 2,
            ts: String::new(),
            seq: 0,
            prev: String::new(),
            session: Some("s1".into()),
            kind,
            action: action.into(),
            resource: details["resolved"].as_str().unwrap_or("").into(),
            decision,
            reason: details["reason"]
                .as_str()
                .unwrap_or("outside the sandbox's grants")
                .into(),
            details,
        }
    }

    fn file(action: &str, path: &str, errno: i64) -> Record {
        rec(
            RecordType::File,
            action,
            Decision::Deny,
            json!({"resolved": path, "errno": errno}),
        )
    }

    fn grants(p: &Plan) -> Vec<(String, String)> {
        p.grants
            .iter()
            .map(|s| (s.grant.key().to_owned(), s.grant.value().to_owned()))
            .collect()
    }

    #[test]
    fn exact_paths_the_write_wins_and_hosts_with_ports() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("proj");
        std::fs::create_dir(&d).unwrap();
        let a = d.join("a.txt").display().to_string();
        let b = d.join("b.txt").display().to_string();
        let new = d.join("new.txt").display().to_string();
        let records = vec![
            file("open-read", &a, 2),
            file("open-read", &a, 2),
            file("open-read", &b, 2),
            file("open-write", &b, 30),
            file("create", &new, 30),
            rec(
                RecordType::Network,
                "connect",
                Decision::Deny,
                json!({"code": "not-allowed", "host": "api.example.com", "port": 443}),
            ),
            rec(
                RecordType::Network,
                "connect",
                Decision::Deny,
                json!({"code": "private-address", "host": "git.corp", "port": 22}),
            ),
            rec(
                RecordType::Network,
                "connect",
                Decision::Allow,
                json!({"code": "allowed", "host": "ok.example", "port": 443}),
            ),
        ];
        let p = plan("s1", &records, None);
        assert_eq!(
            grants(&p),
            // The write of the directory (to create new.txt) covers the
            // reads and the write below it.
            vec![
                ("filesystem.write".into(), d.display().to_string()),
                ("network.allow".into(), "api.example.com:443".into()),
                ("network.allow".into(), "git.corp:22 private".into()),
            ],
            "{p:?}"
        );
        assert_eq!(p.grants[0].why, "create denied");
        assert!(p.grants[2].warning.is_some());
        // Without the create: the exact files.
        let p = plan("s1", &records[..4], None);
        assert_eq!(
            grants(&p),
            vec![
                ("filesystem.read".into(), a.clone()),
                ("filesystem.write".into(), b.clone()),
            ],
            "{p:?}"
        );
        assert_eq!(p.grants[0].why, "open-read denied (2×)");
        let _ = new;
    }

    #[test]
    fn many_siblings_become_their_directory_but_never_a_broad_one() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("many");
        std::fs::create_dir(&d).unwrap();
        let mut records: Vec<Record> = (0..5)
            .map(|i| {
                file(
                    "open-read",
                    &d.join(format!("f{i}")).display().to_string(),
                    2,
                )
            })
            .collect();
        records.push(file("open-read", "/home/ana/x", 2));
        for i in 0..6 {
            records.push(file("open-read", &format!("/home/ana/top{i}"), 2));
        }
        let p = plan("s1", &records, Some(Path::new("/home/ana")));
        let g = grants(&p);
        assert!(
            g.contains(&("filesystem.read".into(), d.display().to_string())),
            "{g:?}"
        );
        assert!(!g.iter().any(|(_, v)| v == "/home/ana"), "{g:?}");
        assert!(
            g.contains(&("filesystem.read".into(), "/home/ana/top0".into())),
            "{g:?}"
        );
    }

    #[test]
    fn secrets_are_warned_and_what_cannot_be_granted_is_a_note() {
        let records = vec![
            file("open-read", "/home/ana/.ssh/id_ed25519", 2),
            rec(
                RecordType::File,
                "open-write",
                Decision::Deny,
                json!({"resolved": "/home/ana/p/.git/config", "errno": 30,
                       "reason": "protected in a write grant: git runs it"}),
            ),
            rec(
                RecordType::File,
                "open-write",
                Decision::Deny,
                json!({"resolved": "/usr/lib/x", "errno": 30, "reason": "read-only runtime"}),
            ),
            file("create", "/newfile", 30),
            file("open-read", "/etc/locale.alias", 2),
        ];
        let p = plan("s1", &records, Some(Path::new("/home/ana")));
        assert_eq!(grants(&p).len(), 1, "{p:?}");
        assert!(p.grants[0].warning.as_deref().unwrap().contains("SSH"));
        assert_eq!(p.notes.len(), 5, "{:?}", p.notes);
        assert!(p.notes.iter().any(|n| n.contains("/etc/locale.alias")));
        assert!(note(&p.grants[0], "s1").starts_with("WARNING: "));
    }
}
