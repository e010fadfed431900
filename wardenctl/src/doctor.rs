//! `wardenctl doctor [--json]`: is this machine ready to sandbox MCP
//! servers, and what to do where it is not. One [`Check`] per thing looked
//! at, each with a status and, for every problem, the command that fixes
//! it. Works without a daemon (a daemon that does not answer is one of the
//! findings; the kernel is then probed by `wardend --features`).
//!
//! The JSON (`--json`) is a contract for scripts (`docs/doctor.md`):
//! `{"schema": 1, "ok": bool, "checks": [{"id", "area", "status",
//! "summary", "fix"}]}`, `status` one of `ok`, `warn`, `fail`, `skip`;
//! `ok` is false when any check failed. Exit status: 0 when `ok`, 1 when
//! not.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use warden_client::pb;

/// The version of the JSON's shape.
pub const SCHEMA: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, but something is weaker than it could be.
    Warn,
    /// Sessions (or the feature named) will not work until fixed.
    Fail,
    /// Not applicable here (nothing to look at).
    Skip,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable, dotted (`kernel.landlock`, `client.cursor`).
    pub id: String,
    /// `daemon`, `kernel`, `service`, `audit`, `host`, `client`.
    pub area: &'static str,
    pub status: Status,
    pub summary: String,
    /// The command (or step) that fixes it; None when nothing is wrong.
    pub fix: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub schema: u32,
    pub ok: bool,
    pub checks: Vec<Check>,
}

fn check(
    id: &str,
    area: &'static str,
    status: Status,
    summary: String,
    fix: Option<String>,
) -> Check {
    Check {
        id: id.to_owned(),
        area,
        status,
        summary,
        fix,
    }
}

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Skip verifying the audit store's hash chain (it reads every record).
    #[arg(long)]
    pub no_verify: bool,
}

/// What the daemon said, when it answered.
struct Daemon {
    status: pb::StatusResponse,
}

pub fn run(args: &DoctorArgs, socket: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
    let report = gather(args, socket)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub fn gather(args: &DoctorArgs, socket: Option<&Path>) -> anyhow::Result<Report> {
    let mut checks = Vec::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let daemon = daemon_checks(&rt, socket, &mut checks);
    kernel_checks(daemon.as_ref(), &mut checks);
    service_checks(socket, daemon.as_ref(), &mut checks);
    audit_checks(&rt, args, socket, daemon.as_ref(), &mut checks);
    host_checks(&mut checks);
    client_checks(&mut checks);
    let ok = !checks.iter().any(|c| c.status == Status::Fail);
    Ok(Report {
        schema: SCHEMA,
        ok,
        checks,
    })
}

fn daemon_checks(
    rt: &tokio::runtime::Runtime,
    socket: Option<&Path>,
    checks: &mut Vec<Check>,
) -> Option<Daemon> {
    let path = match warden_core::paths::socket_path(socket) {
        Ok(p) => p,
        Err(e) => {
            checks.push(check(
                "daemon.socket",
                "daemon",
                Status::Fail,
                format!("no socket path: {e}"),
                Some("set HOME, or XDG_RUNTIME_DIR, or pass --socket PATH".into()),
            ));
            return None;
        }
    };
    let answered = rt.block_on(async {
        let mut c = warden_client::connect(&path)
            .await
            .map_err(|e| e.to_string())?;
        c.status(pb::StatusRequest {})
            .await
            .map(|r| r.into_inner())
            .map_err(|s| s.message().to_owned())
    });
    match answered {
        Ok(status) => {
            checks.push(check(
                "daemon.socket",
                "daemon",
                Status::Ok,
                format!(
                    "wardend {} answers on {} (pid {}, {} session{})",
                    status.version,
                    path.display(),
                    status.pid,
                    status.sessions,
                    if status.sessions == 1 { "" } else { "s" }
                ),
                None,
            ));
            let ours = env!("CARGO_PKG_VERSION");
            if status.version != ours {
                checks.push(check(
                    "daemon.version",
                    "daemon",
                    Status::Warn,
                    format!("wardend is {}, wardenctl {ours}", status.version),
                    Some("restart the daemon after upgrading: systemctl --user restart wardend (or stop it: the shim starts the new one)".into()),
                ));
            }
            Some(Daemon { status })
        }
        Err(e) => {
            // Not a failure by itself: the shim starts a daemon when none
            // answers (unless --no-autostart).
            checks.push(check(
                "daemon.socket",
                "daemon",
                Status::Warn,
                format!(
                    "no daemon answers on {} ({e}); warden-shim starts one on first use",
                    path.display()
                ),
                Some("wardenctl install (a user service), or run wardend".into()),
            ));
            None
        }
    }
}

/// The policy features each kernel feature serves, for the summary.
fn needed_by(name: &str) -> &'static str {
    match name {
        "user_namespaces" => "every session",
        "landlock" => "filesystem grants as a second layer, the TCP port rule",
        "seccomp" => "every session",
        "seccomp_user_notif" => {
            "recorded refusals, file audit, approvals (approve:), transparent egress (network.mode)"
        }
        "file_audit" => "audit.files, approvals of file access",
        "create_guard" => "write grants (protected names such as .git/hooks)",
        "write_protection" => "write grants",
        "cgroup_v2_delegation" => {
            "limits.memory_mb, limits.pids, limits.cpu (enforced by the kernel)"
        }
        _ => "",
    }
}

fn kernel_checks(daemon: Option<&Daemon>, checks: &mut Vec<Check>) {
    let features: Vec<(String, bool, String)> = match daemon {
        Some(d) => d
            .status
            .features
            .iter()
            .map(|f| (f.name.clone(), f.available, f.detail.clone()))
            .collect(),
        None => match features_from_wardend() {
            Ok(f) => f,
            Err(e) => {
                checks.push(check(
                    "kernel",
                    "kernel",
                    Status::Warn,
                    format!("could not probe the kernel without a daemon: {e}"),
                    Some("start the daemon (wardend) and run wardenctl doctor again".into()),
                ));
                return;
            }
        },
    };
    for (name, available, detail) in features {
        let required = matches!(name.as_str(), "user_namespaces" | "seccomp");
        let status = match (available, required) {
            (true, _) => Status::Ok,
            (false, true) => Status::Fail,
            (false, false) => Status::Warn,
        };
        let needs = needed_by(&name);
        let summary = if needs.is_empty() {
            detail
        } else {
            format!("{detail}; needed for {needs}")
        };
        let fix = (!available).then(|| kernel_fix(&name));
        checks.push(check(
            &format!("kernel.{name}"),
            "kernel",
            status,
            summary,
            fix,
        ));
    }
}

fn kernel_fix(name: &str) -> String {
    match name {
        "user_namespaces" => {
            "sudo sysctl -w user.max_user_namespaces=15000 kernel.unprivileged_userns_clone=1 \
             (and see the AppArmor check where it restricts them)"
                .into()
        }
        "landlock" => {
            "boot a kernel with Landlock (5.13+, lsm=...,landlock); sessions still run without it"
                .into()
        }
        "seccomp_user_notif" | "file_audit" => {
            "a kernel with seccomp user notification (5.9+; 5.14+ for file audit)".into()
        }
        "cgroup_v2_delegation" => {
            "run wardend as a systemd user service with Delegate=yes: wardenctl install".into()
        }
        _ => "see docs/security-model.md".into(),
    }
}

/// `wardend --features` of the `wardend` beside this `wardenctl` (else on
/// PATH): name, available, detail.
fn features_from_wardend() -> anyhow::Result<Vec<(String, bool, String)>> {
    let wardend = sibling("wardend");
    let out = std::process::Command::new(&wardend)
        .arg("--features")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| anyhow::anyhow!("{}: {e}", wardend.display()))?;
    if !out.status.success() {
        anyhow::bail!(
            "{} --features: {}",
            wardend.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap_or_default().to_owned(),
                r["available"].as_bool().unwrap_or(false),
                r["detail"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect())
}

/// A Warden executable next to this one, else the bare name (PATH).
pub fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// The user service (`wardenctl install`) and whether AppArmor lets
/// `wardend` make the user namespaces every sandbox starts in.
fn service_checks(socket: Option<&Path>, daemon: Option<&Daemon>, checks: &mut Vec<Check>) {
    let wardend = crate::service::apparmor::wardend_binary(daemon.map(|d| d.status.pid));
    let r = crate::service::apparmor::userns_restriction(wardend.as_deref());
    use crate::service::apparmor::UsernsState;
    let status = match r.state {
        UsernsState::Unrestricted | UsernsState::Allowed => Status::Ok,
        UsernsState::Blocked => Status::Fail,
        // No wardend to try; or not AppArmor (kernel.user_namespaces says why).
        UsernsState::Unknown | UsernsState::Unavailable => Status::Warn,
    };
    checks.push(check(
        "service.apparmor_userns",
        "service",
        status,
        r.detail(),
        (!r.fix.is_empty()).then(|| r.fix.join(" && ")),
    ));

    let platform = crate::service::Platform::this();
    let places = match crate::service::Places::from_env() {
        Ok(p) => p,
        Err(e) => {
            checks.push(check(
                "service.unit",
                "service",
                Status::Warn,
                format!("cannot tell where the user service goes: {e:#}"),
                None,
            ));
            return;
        }
    };
    let socket = match warden_core::paths::socket_path(socket) {
        Ok(s) => s,
        Err(_) => return, // daemon.socket already says why
    };
    let facts = crate::service::probe(platform, crate::service::LABEL, &socket);
    let unit = match platform {
        crate::service::Platform::Linux => places.unit_dir.join(crate::service::systemd::SOCKET),
        crate::service::Platform::Macos => places
            .agents_dir
            .join(format!("{}.plist", crate::service::LABEL)),
    };
    let installed = unit.is_file();
    let (status, summary, fix) = match (&facts.manager, installed, facts.loaded) {
        (Ok(()), true, true) => (
            Status::Ok,
            format!("{} is installed and active", unit.display()),
            None,
        ),
        (Ok(()), true, false) => (
            Status::Warn,
            format!("{} is installed but not active", unit.display()),
            Some(match platform {
                crate::service::Platform::Linux => {
                    "systemctl --user enable --now wardend.socket".to_owned()
                }
                crate::service::Platform::Macos => {
                    format!("launchctl bootstrap gui/{} {}", facts.uid, unit.display())
                }
            }),
        ),
        (Ok(()), false, _) => (
            Status::Warn,
            format!(
                "not installed as a user service ({} is missing); warden-shim starts wardend \
                 itself when none answers",
                unit.display()
            ),
            Some("wardenctl install".to_owned()),
        ),
        (Err(why), installed, _) => (
            Status::Skip,
            format!(
                "no user service manager ({why}){}; warden-shim starts wardend itself when \
                 none answers (autostart)",
                if installed {
                    format!(", though {} is installed", unit.display())
                } else {
                    String::new()
                }
            ),
            None,
        ),
    };
    checks.push(check("service.unit", "service", status, summary, fix));
}

fn audit_checks(
    rt: &tokio::runtime::Runtime,
    args: &DoctorArgs,
    socket: Option<&Path>,
    daemon: Option<&Daemon>,
    checks: &mut Vec<Check>,
) {
    let dir = match daemon {
        Some(d) => Ok(PathBuf::from(&d.status.state_dir).join("audit")),
        None => crate::logs::store_dir(rt, None, socket),
    };
    let dir = match dir {
        Ok(d) => d,
        Err(e) => {
            checks.push(check(
                "audit.store",
                "audit",
                Status::Fail,
                format!("{e:#}"),
                None,
            ));
            return;
        }
    };
    if !dir.exists() {
        checks.push(check(
            "audit.store",
            "audit",
            Status::Skip,
            format!(
                "{}: no audit store yet (the daemon makes it)",
                dir.display()
            ),
            None,
        ));
        return;
    }
    if args.no_verify {
        checks.push(check(
            "audit.store",
            "audit",
            Status::Skip,
            format!("{}: not verified (--no-verify)", dir.display()),
            None,
        ));
        return;
    }
    let snap = match warden_audit::store::snapshot(&dir) {
        Ok(s) => s,
        Err(e) => {
            checks.push(check(
                "audit.store",
                "audit",
                Status::Fail,
                format!("{}: {e}", dir.display()),
                Some(format!("check the permissions of {}", dir.display())),
            ));
            return;
        }
    };
    let r = warden_audit::verify::verify(&snap);
    if r.ok {
        checks.push(check(
            "audit.store",
            "audit",
            Status::Ok,
            format!(
                "{}: {} records, the hash chain holds",
                dir.display(),
                r.records
            ),
            None,
        ));
    } else {
        let what = r
            .problem
            .as_ref()
            .map(|p| format!("{}:{}: {}", p.file, p.line, p.message))
            .unwrap_or_else(|| "the chain does not verify".into());
        checks.push(check(
            "audit.store",
            "audit",
            Status::Fail,
            format!("{}: {what}", dir.display()),
            Some("wardenctl logs --verify (details; the store is evidence: keep a copy before changing it)".into()),
        ));
    }
}

fn host_checks(checks: &mut Vec<Check>) {
    let git = crate::git_bare_repositories();
    checks.push(check(
        "host.git_safe_bare_repository",
        "host",
        if git.available {
            Status::Ok
        } else {
            Status::Warn
        },
        git.detail,
        (!git.available).then(|| "git config --global safe.bareRepository explicit".into()),
    ));
}

/// One check per client config (`crate::wrap::drift_all`): ok when every
/// stdio server is wrapped, a warning listing the others (not wrapped,
/// drifted, unreadable) with the `wardenctl wrap` that fixes it; a config
/// that does not exist is skipped.
fn client_checks(checks: &mut Vec<Check>) {
    use crate::wrap::ServerState;
    let env = match crate::wrap::Env::from_process() {
        Ok(e) => e,
        Err(e) => {
            checks.push(check(
                "client",
                "client",
                Status::Skip,
                format!("client configs not looked at: {e:#}"),
                None,
            ));
            return;
        }
    };
    let mut configs = 0;
    for (i, d) in crate::wrap::drift_all(&env).into_iter().enumerate() {
        let d = match d {
            Ok(d) => d,
            Err(e) => {
                checks.push(check(
                    &format!("client.unreadable.{i}"),
                    "client",
                    Status::Warn,
                    format!("{e:#}"),
                    Some("fix the file (wrap and doctor read it as the client does)".into()),
                ));
                continue;
            }
        };
        let id = if d.scope == "config" {
            configs += 1;
            format!("client.{}.config.{configs}", d.client)
        } else {
            format!("client.{}.{}", d.client, d.scope)
        };
        let path = d.path.display();
        if !d.found {
            checks.push(check(
                &id,
                "client",
                Status::Skip,
                format!("{path}: not found"),
                None,
            ));
            continue;
        }
        let mut wrapped = 0;
        let mut problems = Vec::new();
        let mut notes = Vec::new();
        for (_, name, state) in &d.servers {
            let name = crate::cell(name);
            match state {
                ServerState::Wrapped | ServerState::WrappedByHand => wrapped += 1,
                ServerState::NotWrapped => problems.push(format!("{name} not wrapped")),
                ServerState::Drifted => {
                    problems.push(format!("{name} drifted (lost its wrapping)"))
                }
                ServerState::Unusable(why) => problems.push(format!("{name} unreadable ({why})")),
                ServerState::Missing => notes.push(format!("{name} (wrapped) is gone")),
                ServerState::Remote => notes.push(format!("{name} is remote (left alone)")),
            }
        }
        let mut summary = format!(
            "{path}: {wrapped} of {} server{} wrapped",
            d.servers.len(),
            if d.servers.len() == 1 { "" } else { "s" }
        );
        if !problems.is_empty() {
            summary.push_str(&format!("; {}", problems.join(", ")));
        }
        if !notes.is_empty() {
            summary.push_str(&format!("; {}", notes.join(", ")));
        }
        let ok = problems.is_empty();
        checks.push(check(
            &id,
            "client",
            if ok { Status::Ok } else { Status::Warn },
            summary,
            (!ok).then(|| d.fix()),
        ));
    }
}

fn print(r: &Report) {
    for c in &r.checks {
        let mark = match c.status {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        };
        println!("{mark}  {:34} {}", c.id, c.summary);
        if let Some(f) = &c.fix {
            println!("      {:34} fix: {f}", "");
        }
    }
    let fails = r.checks.iter().filter(|c| c.status == Status::Fail).count();
    let warns = r.checks.iter().filter(|c| c.status == Status::Warn).count();
    println!(
        "\n{}",
        match (fails, warns) {
            (0, 0) => "everything is in order".to_owned(),
            (0, w) => format!("ready; {w} warning{}", if w == 1 { "" } else { "s" }),
            (f, _) => format!("{f} problem{} to fix", if f == 1 { "" } else { "s" }),
        }
    );
}
