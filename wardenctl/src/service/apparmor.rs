//! AppArmor and unprivileged user namespaces.
//!
//! Ubuntu 23.10 and later set `kernel.apparmor_restrict_unprivileged_userns=1`:
//! an unprivileged program may still call `unshare(CLONE_NEWUSER)`, but gets
//! no capabilities in the namespace (so no mount, no `pivot_root`) unless an
//! AppArmor profile attached to it allows `userns`. Every Warden sandbox
//! starts that way, so there `wardend` needs the profile [`profile`] writes:
//! unconfined but for that one permission, attached to `wardend`'s path
//! (the sandbox init is a re-exec of that binary). `packaging/apparmor/wardend`
//! is its output for [`ServiceValues::packaged`].
//!
//! [`userns_restriction`] tells whether this machine needs it, for
//! `wardenctl status` and `doctor`: the setting, and a trial run of the
//! `wardend` binary itself, since only a trial tells a restriction that is
//! lifted for `wardend` (its profile is loaded) from one that is not.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{ServiceValues, ValueError, MARKER};

/// Where the profile goes.
pub const PROFILE_PATH: &str = "/etc/apparmor.d/wardend";

/// The profile's name (`aa-status` shows it).
pub const PROFILE_NAME: &str = "wardend";

/// A path as an AppArmor attachment: quoted, with quotes, backslashes and
/// the pattern characters escaped so the path matches only itself.
fn attachment(path: &Path) -> Result<String, ValueError> {
    let s = super::text(path)?;
    let mut out = String::from("\"");
    for c in s.chars() {
        if matches!(
            c,
            '"' | '\\' | '*' | '?' | '[' | ']' | '{' | '}' | '^' | '@'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// The profile for `v.wardend`.
pub fn profile(v: &ServiceValues) -> Result<String, ValueError> {
    let attach = attachment(&v.wardend)?;
    Ok(format!(
        "# {MARKER} (docs/install.md).
# An AppArmor profile that lets wardend create the user namespaces its
# sandboxes start in, where AppArmor restricts them (Ubuntu 23.10+:
# kernel.apparmor_restrict_unprivileged_userns=1). wardend stays unconfined
# otherwise; its sandboxes confine themselves. Install:
#   wardenctl install --print-apparmor-profile | sudo tee {PROFILE_PATH} >/dev/null
#   sudo apparmor_parser -r {PROFILE_PATH}
abi <abi/4.0>,
include <tunables/global>

profile {PROFILE_NAME} {attach} flags=(unconfined) {{
  userns,

  # Site-specific additions and overrides. See local/README for details.
  include if exists <local/{PROFILE_NAME}>
}}
"
    ))
}

/// What the trial run of `wardend` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
// Only Linux runs the trial (elsewhere it is always `NotRun`).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub enum Trial {
    /// Not run: no `wardend` to run it with.
    NotRun,
    /// A user and mount namespace with a tmpfs mounted in it worked.
    Worked,
    /// It failed, with the sandbox's reason.
    Failed { error: String },
}

/// The verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UsernsState {
    /// No AppArmor restriction, and the trial worked (or was not run).
    Unrestricted,
    /// Restricted, and still `wardend` may (its profile is loaded, or it
    /// runs as root).
    Allowed,
    /// Restricted, and the trial failed: every session fails to start
    /// until the profile is loaded ([`Restriction::fix`]).
    Blocked,
    /// Restricted, and no trial could tell whether `wardend` may.
    Unknown,
    /// Not restricted by AppArmor, and the trial failed all the same
    /// (another setting: `wardenctl status`'s `user_namespaces` row).
    Unavailable,
}

/// Whether unprivileged user namespaces work for `wardend`, and what to do
/// when they do not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Restriction {
    /// `kernel.apparmor_restrict_unprivileged_userns`: `Some(true)` for 1,
    /// `None` when the kernel has no such setting.
    pub sysctl: Option<bool>,
    /// The `wardend` the trial ran.
    pub wardend: Option<PathBuf>,
    pub trial: Trial,
    pub state: UsernsState,
    /// The commands that fix it, in order (empty when there is nothing to do).
    pub fix: Vec<String>,
}

/// `s` as one POSIX shell word.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=,@%".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The commands that install and load the profile for `wardend`.
pub fn fix_commands(wardend: &Path) -> Vec<String> {
    vec![
        format!(
            "wardenctl install --print-apparmor-profile --wardend {} | sudo tee {PROFILE_PATH} >/dev/null",
            shell_word(&wardend.to_string_lossy())
        ),
        format!("sudo apparmor_parser -r {PROFILE_PATH}"),
    ]
}

/// The verdict from what was found (pure).
pub fn judge(sysctl: Option<bool>, wardend: Option<&Path>, trial: Trial) -> Restriction {
    let restricted = sysctl == Some(true);
    let state = match (&trial, restricted) {
        (Trial::Worked, true) => UsernsState::Allowed,
        (Trial::Worked, false) | (Trial::NotRun, false) => UsernsState::Unrestricted,
        (Trial::NotRun, true) => UsernsState::Unknown,
        (Trial::Failed { .. }, true) => UsernsState::Blocked,
        (Trial::Failed { .. }, false) => UsernsState::Unavailable,
    };
    let fix = match (state, wardend) {
        (UsernsState::Blocked | UsernsState::Unknown, Some(w)) => fix_commands(w),
        (UsernsState::Blocked | UsernsState::Unknown, None) => {
            fix_commands(Path::new("/path/to/wardend"))
        }
        _ => Vec::new(),
    };
    Restriction {
        sysctl,
        wardend: wardend.map(Path::to_path_buf),
        trial,
        state,
        fix,
    }
}

impl Restriction {
    /// Sessions can start as far as this goes.
    pub fn ok(&self) -> bool {
        matches!(self.state, UsernsState::Unrestricted | UsernsState::Allowed)
    }

    /// One line for `wardenctl status`.
    pub fn detail(&self) -> String {
        let setting = match self.sysctl {
            Some(true) => "kernel.apparmor_restrict_unprivileged_userns=1",
            Some(false) => "kernel.apparmor_restrict_unprivileged_userns=0",
            None => "no AppArmor user namespace restriction in this kernel",
        };
        let who = self
            .wardend
            .as_ref()
            .map(|w| w.display().to_string())
            .unwrap_or_else(|| "wardend".into());
        let error = match &self.trial {
            Trial::Failed { error } => error.as_str(),
            _ => "",
        };
        let fix = self.fix.join(" && ");
        match self.state {
            UsernsState::Unrestricted => format!("{setting}: user namespaces work for {who}"),
            UsernsState::Allowed => format!(
                "{setting}, but {who} may create user namespaces (its AppArmor profile is loaded, \
                 or it runs as root)"
            ),
            UsernsState::Blocked => format!(
                "{setting}: {who} cannot set up a sandbox ({error}), so every session fails to \
                 start; load an AppArmor profile that allows it: {fix}"
            ),
            UsernsState::Unknown => format!(
                "{setting}: sessions fail to start unless wardend's AppArmor profile is loaded \
                 (no wardend found to try): {fix}"
            ),
            UsernsState::Unavailable => format!(
                "{setting}, yet {who} cannot set up a sandbox ({error}); see the user_namespaces \
                 row of wardenctl status"
            ),
        }
    }
}

/// The `wardend` the restriction applies to: the running daemon's own
/// binary (`/proc/PID/exe`) when one answered, else the `wardend` beside
/// this `wardenctl`.
pub fn wardend_binary(daemon_pid: Option<u32>) -> Option<PathBuf> {
    daemon_pid
        .and_then(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).ok())
        .filter(|p| p.is_file())
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(|d| d.join("wardend")))
                .filter(|p| p.is_file())
        })
}

/// Asks the kernel and runs the trial with `wardend` (none: the setting
/// only). The trial is a short-lived re-exec of `wardend` in the sandbox's
/// snapshot role (`warden_sandbox::kernel::userns_trial`).
pub fn userns_restriction(wardend: Option<&Path>) -> Restriction {
    #[cfg(target_os = "linux")]
    {
        let sysctl = warden_sandbox::kernel::apparmor_restricts_userns();
        let trial = match wardend {
            None => Trial::NotRun,
            Some(w) => match warden_sandbox::kernel::userns_trial(w) {
                Ok(()) => Trial::Worked,
                Err(e) => Trial::Failed {
                    error: e.to_string(),
                },
            },
        };
        judge(sysctl, wardend, trial)
    }
    #[cfg(not(target_os = "linux"))]
    {
        judge(None, wardend, Trial::NotRun)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attachment_matches_only_the_path() {
        assert_eq!(
            attachment(Path::new("/usr/local/bin/wardend")).unwrap(),
            "\"/usr/local/bin/wardend\""
        );
        assert_eq!(
            attachment(Path::new("/opt/a b/[x]*/@{HOME}/w\"d")).unwrap(),
            "\"/opt/a b/\\[x\\]\\*/\\@\\{HOME\\}/w\\\"d\""
        );
    }

    #[test]
    fn the_verdict_table() {
        let w = Path::new("/home/u/.cargo/bin/wardend");
        let failed = || Trial::Failed {
            error: "mount: Operation not permitted".into(),
        };
        let cases = [
            (None, Trial::Worked, UsernsState::Unrestricted),
            (Some(false), Trial::Worked, UsernsState::Unrestricted),
            (None, Trial::NotRun, UsernsState::Unrestricted),
            (Some(true), Trial::Worked, UsernsState::Allowed),
            (Some(true), failed(), UsernsState::Blocked),
            (Some(true), Trial::NotRun, UsernsState::Unknown),
            (Some(false), failed(), UsernsState::Unavailable),
            (None, failed(), UsernsState::Unavailable),
        ];
        for (sysctl, trial, state) in cases {
            let r = judge(sysctl, Some(w), trial.clone());
            assert_eq!(r.state, state, "{sysctl:?} {trial:?}");
            assert_eq!(
                r.ok(),
                matches!(state, UsernsState::Unrestricted | UsernsState::Allowed)
            );
            assert_eq!(
                r.fix.is_empty(),
                !matches!(state, UsernsState::Blocked | UsernsState::Unknown)
            );
        }
    }

    #[test]
    fn a_blocked_wardend_is_told_the_exact_commands() {
        let r = judge(
            Some(true),
            Some(Path::new("/home/u/my bin/wardend")),
            Trial::Failed {
                error: "sandbox init failed: make the snapshot filesystem: EPERM".into(),
            },
        );
        assert_eq!(
            r.fix,
            [
                "wardenctl install --print-apparmor-profile --wardend '/home/u/my bin/wardend' | \
                 sudo tee /etc/apparmor.d/wardend >/dev/null",
                "sudo apparmor_parser -r /etc/apparmor.d/wardend",
            ]
        );
        assert_eq!(
            r.detail(),
            "kernel.apparmor_restrict_unprivileged_userns=1: /home/u/my bin/wardend cannot set \
             up a sandbox (sandbox init failed: make the snapshot filesystem: EPERM), so every \
             session fails to start; load an AppArmor profile that allows it: wardenctl install \
             --print-apparmor-profile --wardend '/home/u/my bin/wardend' | sudo tee \
             /etc/apparmor.d/wardend >/dev/null && sudo apparmor_parser -r /etc/apparmor.d/wardend"
        );
        assert_eq!(
            serde_json::to_value(&r).unwrap()["trial"],
            serde_json::json!({"result": "failed", "error": "sandbox init failed: make the snapshot filesystem: EPERM"})
        );
    }
}
