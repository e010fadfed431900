//! What the Seatbelt backend decides before anything runs, as pure
//! functions (tested on every platform): what of a policy it cannot enforce
//! and refuses ([`fit`]), the session's limits and facts as `session.start`
//! records them, and what the launcher is given: the profile's context
//! ([`context`], with the program's runtime found by [`runtime`]), the
//! command line ([`args`]) and the environment ([`env`]).

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use warden_core::policy::CompiledPolicy;
use warden_sandbox::spec::SandboxSpec;

use super::SeatbeltContext;
use crate::error::DaemonError;

/// Apple's launcher of a command under a Seatbelt profile. Its presence
/// is what makes the backend available on a Mac.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// What the Seatbelt backend decided for a policy before anything starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    /// What this backend does differently from the native one (also in
    /// `session.start`'s `warnings`, one sentence each).
    pub notes: Vec<String>,
}

/// Fits `policy` to the Seatbelt backend: refuses what it cannot enforce
/// (never silently weaker; `auto` does not move on for these), turns off
/// what is only the native sandbox's to record, and notes it. `trace`,
/// `approve`: the request's `wardenctl trace` and `warden-shim --approve`.
pub fn fit(policy: &mut CompiledPolicy, trace: bool, approve: bool) -> Result<Fitted, DaemonError> {
    let refuse = |what: &str| {
        DaemonError::Policy(format!(
            "the Seatbelt backend cannot enforce {what}; use the native sandbox \
             (backend: linux) or Docker (backend: docker) for this policy"
        ))
    };
    super::super::refuse_notifier_only(policy, trace, approve, refuse)?;
    if policy.sandbox.landlock_min_abi > 0 {
        return Err(refuse("sandbox.landlock_min_abi: Landlock is Linux's"));
    }
    let mut notes = Vec::new();
    super::super::fit_without_notifier(policy, "the server", refuse, &mut notes)?;
    if !policy.write.is_empty() && !policy.sandbox.best_effort_write_protection {
        return Err(DaemonError::Policy(
            "this policy has write grants, and the Seatbelt backend protects only the \
             protected names at each write grant and its parents (.git/hooks, .bashrc, \
             .mcp.json..., denied for writing whether they exist or not) and Warden's own \
             files: it has no creation guard for those deeper inside a grant (a nested \
             repository's .git/hooks); set sandbox.best_effort_write_protection: true to \
             run anyway (recorded in session.start), or use the native sandbox (backend: \
             linux)"
                .into(),
        ));
    }
    let best_effort = policy.limits.best_effort;
    let unenforced = |what: String, why: &str| -> Result<(), DaemonError> {
        if best_effort {
            Ok(())
        } else {
            Err(DaemonError::Policy(format!(
                "{what} cannot be enforced by the Seatbelt backend: {why}; remove it or set \
                 limits.best_effort: true to run without it"
            )))
        }
    };
    if let Some(cpu) = policy.limits.cpu {
        unenforced(
            format!("limits.cpu ({cpu} cores)"),
            "macOS has no CPU quota for a process group",
        )?;
        notes.push(format!(
            "limits.cpu ({cpu}) is not enforced (limits.best_effort)"
        ));
    }
    if let Some(n) = policy.limits.pids {
        unenforced(
            format!("limits.pids ({n})"),
            "RLIMIT_NPROC counts every process of the user on macOS, not the session's",
        )?;
        notes.push(format!(
            "limits.pids ({n}) is not enforced (limits.best_effort)"
        ));
    }
    if let Some(mb) = policy.limits.tmp_mb {
        unenforced(
            format!("limits.tmp_mb ({mb})"),
            "the session's scratch directory is a plain directory, with no size limit",
        )?;
        notes.push(format!(
            "limits.tmp_mb ({mb}) is not enforced (limits.best_effort)"
        ));
    }
    notes.push(
        "the process group is the session: a process that leaves it and whose parent is \
         gone is not ended with it"
            .into(),
    );
    for n in &notes {
        policy.warnings.push(format!("seatbelt: {n}"));
    }
    Ok(Fitted { notes })
}

/// `session.start`'s limits, as this backend enforces them.
pub fn describe_limits(p: &CompiledPolicy) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(t) = p.limits.timeout_s {
        out.push(format!(
            "timeout_s={t} (daemon timer; the process group is killed)"
        ));
    }
    if let Some(n) = p.limits.pids {
        out.push(format!("pids={n} (NOT enforced: limits.best_effort)"));
    }
    match p.limits.tmp_mb {
        Some(mb) => out.push(format!("tmp_mb={mb} (NOT enforced: limits.best_effort)")),
        None => out.push("tmp_mb (none: the scratch directory has no size limit)".into()),
    }
    if let Some(c) = p.limits.cpu {
        out.push(format!("cpu={c} (NOT enforced: limits.best_effort)"));
    }
    if let Some(m) = p.limits.memory_mb {
        out.push(format!(
            "memory_mb={m} (resident memory of the process group and its descendants, \
             sampled every {} ms with ps)",
            crate::ps::SAMPLE_INTERVAL.as_millis()
        ));
    }
    out
}

/// `session.start`'s `sandbox` for a Seatbelt session.
pub fn sandbox_facts(
    policy: &CompiledPolicy,
    backend: &crate::backend::Choice,
    _fitted: &Fitted,
) -> warden_audit::event::SandboxFacts {
    use warden_audit::event;
    let has_writes = !policy.write.is_empty();
    event::SandboxFacts {
        backend: backend.backend.to_string(),
        backend_requested: backend.requested.to_string(),
        backend_skipped: backend.skipped_facts(),
        namespaces: Vec::new(),
        landlock_abi: None,
        landlock_min_abi: policy.sandbox.landlock_min_abi,
        syscall_audit: "unavailable".into(),
        file_audit: "unavailable".into(),
        create_guard: false,
        host_root: warden_core::paths::current_uid() == 0,
        write_protection: event::WriteProtection {
            mode: if has_writes {
                "best effort"
            } else {
                "no write grants"
            }
            .into(),
            active: vec![
                "the Seatbelt profile denies writes to the protected names at each write \
                 grant and its parents, existing or not, and to Warden's own files"
                    .into(),
            ],
            missing: vec![
                "the creation guard: protected names deeper inside a grant are not kept from \
                 being created"
                    .into(),
                "Landlock".into(),
            ],
        },
        best_effort_write_protection: policy.sandbox.best_effort_write_protection,
        docker: None,
    }
}

/// The session's scratch directory under the daemon's state directory
/// (private, 0700): `tmp` (the server's `TMPDIR`) and `home` (its `HOME`
/// when no grant holds the client's), removed with the session.
pub fn scratch_dir(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("seatbelt").join(id)
}

/// Whether the server gets a private home in the scratch directory: no
/// grant holds its `HOME` (the native sandbox mounts a private tmpfs there).
pub fn private_home(spec: &SandboxSpec) -> bool {
    !spec
        .read
        .iter()
        .chain(&spec.write)
        .any(|g| spec.home.starts_with(g))
}

/// The server's environment: the spec's (filtered by `env.allow` as for
/// every backend, `session/plan.rs`) with the proxy variables pointing at
/// `port`, `TMPDIR` the scratch directory's `tmp`, and `HOME` its `home`
/// when it is private.
pub fn env(spec: &SandboxSpec, port: u16, scratch: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let proxy = crate::egress::proxy_env_at(port);
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = spec
        .env
        .iter()
        .map(|(k, v)| {
            match proxy
                .iter()
                .find(|(name, _)| name.as_bytes() == k.as_slice())
            {
                Some((_, at)) => (k.clone(), at.as_bytes().to_vec()),
                None => (k.clone(), v.clone()),
            }
        })
        .collect();
    let mut set = |k: &str, v: &Path| {
        out.retain(|(n, _)| n != k.as_bytes());
        out.push((k.as_bytes().to_vec(), v.as_os_str().as_bytes().to_vec()));
    };
    set("TMPDIR", &scratch.join("tmp"));
    if private_home(spec) {
        set("HOME", &scratch.join("home"));
    }
    out
}

/// Install prefixes too broad to hand a server whole (the system's own
/// libraries are in the profile's system list already).
const TOO_BROAD: &[&str] = &[
    "/",
    "/usr",
    "/usr/local",
    "/opt",
    "/opt/homebrew",
    "/System",
    "/Library",
    "/bin",
    "/sbin",
];

/// The install prefix of a binary at `bin`: `PREFIX` of `PREFIX/bin/NAME`
/// unless it is too broad, else none (the binary alone is granted).
fn prefix(bin: &Path) -> Option<PathBuf> {
    let dir = bin.parent()?;
    if dir.file_name()? != "bin" {
        return None;
    }
    let p = dir.parent()?;
    (!TOO_BROAD.iter().any(|b| p == Path::new(b))).then(|| p.to_path_buf())
}

/// The runtime a program needs beyond itself, as read-only directories and
/// binaries it may exec: its own install prefix (`…/node/22/bin/node` →
/// `…/node/22`), and for a script the interpreter of its `#!` line (`head`:
/// the file's first bytes), found on `path_env` when it is `/usr/bin/env
/// NAME`. `resolve` gives a path's canonical form when it is a file.
pub fn runtime(
    program: &Path,
    head: &[u8],
    path_env: Option<&[u8]>,
    resolve: impl Fn(&Path) -> Option<PathBuf>,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut dirs: Vec<PathBuf> = prefix(program).into_iter().collect();
    let mut execs: Vec<PathBuf> = Vec::new();
    if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|&c| c == b'\n').next().unwrap_or_default();
        let words: Vec<&[u8]> = line
            .split(|c| c.is_ascii_whitespace())
            .filter(|w| !w.is_empty())
            .collect();
        if let Some(interp) = words
            .first()
            .map(|w| PathBuf::from(OsString::from_vec(w.to_vec())))
        {
            let mut add = |bin: PathBuf| {
                if let Some(p) = prefix(&bin) {
                    dirs.push(p);
                }
                dirs.push(bin.clone());
                execs.push(bin);
            };
            let name = words[1..].iter().find(|w| !w.starts_with(b"-"));
            let via_env = interp.file_name().is_some_and(|n| n == "env");
            if let Some(real) = resolve(&interp) {
                add(real);
            }
            if let (true, Some(name), Some(path)) = (via_env, name, path_env) {
                let name = Path::new(std::ffi::OsStr::from_bytes(name));
                let found = path
                    .split(|&c| c == b':')
                    .filter(|d| d.starts_with(b"/"))
                    .find_map(|d| resolve(&Path::new(std::ffi::OsStr::from_bytes(d)).join(name)));
                if let Some(real) = found {
                    add(real);
                }
            }
        }
    }
    dirs.sort();
    dirs.dedup();
    execs.sort();
    execs.dedup();
    (dirs, execs)
}

/// The profile's context for `spec`: the proxy at `port`, the scratch
/// directory, the runtime ([`runtime`]) and Warden's own paths.
pub fn context(
    spec: &SandboxSpec,
    port: u16,
    scratch: &Path,
    runtime: (Vec<PathBuf>, Vec<PathBuf>),
) -> SeatbeltContext {
    SeatbeltContext {
        proxy_port: port,
        scratch: scratch.to_path_buf(),
        runtime_dirs: runtime.0,
        runtime_exec: runtime.1,
        protect: spec.warden_paths.clone(),
    }
}

/// `sandbox-exec`'s arguments: the profile, then the program (its resolved
/// host path: `sandbox-exec` execs it, so it is also the server's argv\[0\])
/// and the arguments after `command[0]`, each as given.
pub fn args(profile: &str, spec: &SandboxSpec) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec!["-p".into(), profile.into(), "--".into()];
    a.push(spec.program.clone().into_os_string());
    a.extend(
        spec.argv
            .iter()
            .skip(1)
            .map(|b| OsString::from_vec(b.clone())),
    );
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_core::policy;

    fn policy() -> CompiledPolicy {
        crate::session::plan::test_policy("/opt/srv/bin/srv")
    }

    fn refusal(p: &mut CompiledPolicy, trace: bool, approve: bool) -> String {
        match fit(p, trace, approve) {
            Err(DaemonError::Policy(why)) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn what_seatbelt_cannot_enforce_is_refused_and_what_it_only_records_is_noted() {
        // A plain policy runs; what only the native sandbox records is
        // turned off and said.
        let mut p = policy();
        p.network.mode = policy::net::NetMode::Both;
        p.audit.files = policy::FileAudit::Denied;
        let f = fit(&mut p, false, false).unwrap();
        assert_eq!(p.network.mode, policy::net::NetMode::Proxy);
        assert_eq!(p.audit.files, policy::FileAudit::Off);
        assert_eq!(f.notes.len(), 3, "{:?}", f.notes);
        assert!(p.warnings.iter().all(|w| w.starts_with("seatbelt: ")));
        assert!(
            p.limits.pids.is_none(),
            "no default process limit it cannot hold"
        );

        type Set = Box<dyn Fn(&mut CompiledPolicy)>;
        let cases: Vec<(Set, bool, bool, &str)> = vec![
            (Box::new(|_| {}), true, false, "a trace"),
            (Box::new(|_| {}), false, true, "approvals"),
            (Box::new(|p| p.approve = true), false, false, "approvals"),
            (
                Box::new(|p| p.network.mode = policy::net::NetMode::Transparent),
                false,
                false,
                "network.mode: transparent",
            ),
            (
                Box::new(|p| {
                    p.audit.files = policy::FileAudit::All;
                    p.audit.files_explicit = true
                }),
                false,
                false,
                "audit.files",
            ),
            (
                Box::new(|p| p.write = vec!["/out".into()]),
                false,
                false,
                "best_effort_write_protection",
            ),
            (
                Box::new(|p| p.sandbox.landlock_min_abi = 4),
                false,
                false,
                "Landlock",
            ),
            (
                Box::new(|p| p.limits.cpu = Some(0.5)),
                false,
                false,
                "limits.cpu",
            ),
            (
                Box::new(|p| p.limits.pids = Some(64)),
                false,
                false,
                "limits.pids",
            ),
            (
                Box::new(|p| p.limits.tmp_mb = Some(64)),
                false,
                false,
                "limits.tmp_mb",
            ),
        ];
        for (set, trace, approve, want) in cases {
            let mut p = policy();
            set(&mut p);
            let why = refusal(&mut p, trace, approve);
            assert!(why.contains(want), "{want}: {why}");
            assert!(why.contains("Seatbelt"), "{why}");
        }
        // Opted into: run, the limits recorded as not enforced.
        let mut p = policy();
        p.write = vec!["/out".into()];
        p.sandbox.best_effort_write_protection = true;
        p.limits.best_effort = true;
        p.limits.pids = Some(64);
        p.limits.cpu = Some(1.0);
        p.limits.memory_mb = Some(256);
        p.limits.timeout_s = Some(30);
        fit(&mut p, false, false).unwrap();
        let l = describe_limits(&p);
        assert_eq!(
            l,
            [
                "timeout_s=30 (daemon timer; the process group is killed)",
                "pids=64 (NOT enforced: limits.best_effort)",
                "tmp_mb (none: the scratch directory has no size limit)",
                "cpu=1 (NOT enforced: limits.best_effort)",
                "memory_mb=256 (resident memory of the process group and its descendants, \
                 sampled every 200 ms with ps)",
            ]
        );
    }

    fn spec() -> SandboxSpec {
        let p = policy();
        let (spec, _) = crate::session::plan::base_spec(
            "abc",
            &p,
            &[],
            "/Users/u".into(),
            501,
            20,
            vec!["/Users/u/.local/state/warden".into()],
        );
        spec
    }

    #[test]
    fn the_command_line_is_the_profile_then_the_program_and_its_arguments() {
        let mut s = spec();
        s.argv = vec![
            b"srv".to_vec(),
            b"-p".to_vec(),
            b"--x".to_vec(),
            b"a b".to_vec(),
        ];
        let a = args("(version 1)\n(deny default)\n", &s);
        assert_eq!(
            a,
            [
                "-p",
                "(version 1)\n(deny default)\n",
                "--",
                "/opt/srv/bin/srv",
                "-p",
                "--x",
                "a b"
            ]
            .map(OsString::from)
        );
    }

    #[test]
    fn the_environment_is_the_native_ones_with_the_proxy_port_tmpdir_and_a_private_home() {
        let s = spec();
        let scratch = Path::new("/state/seatbelt/abc");
        let e = env(&s, 49152, scratch);
        let get = |k: &str| {
            e.iter()
                .rev()
                .find(|(n, _)| n == k.as_bytes())
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(get("HTTP_PROXY").as_deref(), Some("http://127.0.0.1:49152"));
        assert_eq!(
            get("ALL_PROXY").as_deref(),
            Some("socks5h://127.0.0.1:49152")
        );
        assert_eq!(get("TMPDIR").as_deref(), Some("/state/seatbelt/abc/tmp"));
        assert_eq!(get("HOME").as_deref(), Some("/state/seatbelt/abc/home"));
        assert_eq!(get("PATH").as_deref(), Some("/usr/local/bin:/usr/bin:/bin"));
        // The same names as the native sandbox's, plus TMPDIR; nothing
        // named twice.
        let names: Vec<&[u8]> = e.iter().map(|(n, _)| n.as_slice()).collect();
        let mut want: Vec<&[u8]> = s.env.iter().map(|(n, _)| n.as_slice()).collect();
        want.push(b"TMPDIR");
        let (mut a, mut b) = (names.clone(), want);
        a.sort();
        b.sort();
        assert_eq!(a, b);
        // A grant holding HOME keeps it.
        let mut s = spec();
        s.read.push("/Users/u".into());
        let e = env(&s, 1, scratch);
        assert!(e.iter().any(|(n, v)| n == b"HOME" && v == b"/Users/u"));
    }

    #[test]
    fn the_runtime_is_the_programs_prefix_and_its_interpreter() {
        let files = [
            "/opt/homebrew/Cellar/node/22.1.0/bin/node",
            "/usr/bin/env",
            "/usr/bin/python3",
        ];
        let resolve = |p: &Path| {
            let real = match p.to_str()? {
                "/opt/homebrew/bin/node" => "/opt/homebrew/Cellar/node/22.1.0/bin/node",
                other => other,
            };
            files.contains(&real).then(|| PathBuf::from(real))
        };
        let path = Some(&b"/nowhere:/opt/homebrew/bin:/usr/bin"[..]);
        // A binary: its prefix.
        let (d, x) = runtime(
            Path::new("/opt/homebrew/Cellar/node/22.1.0/bin/node"),
            b"\xcf\xfa\xed\xfe",
            path,
            resolve,
        );
        assert_eq!(d, [PathBuf::from("/opt/homebrew/Cellar/node/22.1.0")]);
        assert!(x.is_empty());
        // A script through env: env and the interpreter found on PATH.
        let (d, x) = runtime(
            Path::new("/w/srv/index.js"),
            b"#!/usr/bin/env -S node --no-warnings\nrequire('x')\n",
            path,
            resolve,
        );
        assert_eq!(
            x,
            [
                PathBuf::from("/opt/homebrew/Cellar/node/22.1.0/bin/node"),
                PathBuf::from("/usr/bin/env")
            ]
        );
        assert!(d.contains(&PathBuf::from("/opt/homebrew/Cellar/node/22.1.0")));
        // A system interpreter: itself, never all of /usr.
        let (d, x) = runtime(
            Path::new("/w/tool.py"),
            b"#!/usr/bin/python3\n",
            None,
            resolve,
        );
        assert_eq!(x, [PathBuf::from("/usr/bin/python3")]);
        assert_eq!(d, [PathBuf::from("/usr/bin/python3")]);
        // Too broad a prefix is never granted.
        assert_eq!(prefix(Path::new("/usr/local/bin/node")), None);
        assert_eq!(prefix(Path::new("/opt/homebrew/bin/node")), None);
        assert_eq!(prefix(Path::new("/w/a.out")), None);
    }

    #[test]
    fn the_profile_context_protects_wardens_own_files_and_the_scratch() {
        let s = spec();
        let c = context(&s, 7, Path::new("/state/seatbelt/abc"), (vec![], vec![]));
        assert_eq!(c.proxy_port, 7);
        assert_eq!(c.protect, [PathBuf::from("/Users/u/.local/state/warden")]);
        assert_eq!(
            scratch_dir(Path::new("/state"), "abc"),
            Path::new("/state/seatbelt/abc")
        );
    }
}
