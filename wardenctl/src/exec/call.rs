//! One `run_sandboxed` call, from its arguments to the policy text the daemon
//! runs it under. Pure: the ceiling is already compiled, the scratch directory
//! already named; nothing here touches the filesystem or the daemon.
//!
//! The call's policy is the ceiling narrowed: its grants plus the call's
//! scratch directory (read-write), only the `network.allow` entries the call
//! asks for, the call's timeout, and its command. Everything else the ceiling
//! says (env names, limits, sandbox and audit requirements, backend) is carried
//! over unchanged, so a call can never get more than the ceiling.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use rmcp::schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use warden_core::policy::{self, CompiledPolicy};

/// A call's timeout when neither the call nor the policy sets one.
pub const DEFAULT_TIMEOUT_S: u64 = 60;
/// What a result keeps of each output stream without `limits.output_kb`.
pub const DEFAULT_OUTPUT_KB: u64 = 1024;
/// Most files one call may write into its scratch directory, and their total
/// size: the arguments of one JSON-RPC message, not a transfer channel.
pub const MAX_FILES: usize = 1000;
pub const MAX_FILES_BYTES: usize = 64 << 20;

/// The tool's arguments, as the client sends them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "rmcp::schemars")]
pub struct Input {
    /// A shell command line, run by `/bin/sh -c`. Give this or `argv`.
    #[serde(default)]
    pub command: Option<String>,
    /// A program and its arguments, run without a shell (`argv[0]` absolute
    /// or a name on PATH). Give this or `command`.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// Text written to the command's standard input, which is then closed
    /// (without it, standard input is empty).
    #[serde(default)]
    pub stdin: Option<String>,
    /// Wall-clock limit in seconds (rounded up to whole seconds), at most the
    /// policy's `limits.timeout_s`; default the policy's, else 60. The whole
    /// process tree is killed when it runs out.
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// Hosts this call may reach, each one of the policy's `network.allow`
    /// entries (its text, or the part before its options). Default: none.
    #[serde(default)]
    pub network: Option<Vec<String>>,
    /// Files written into the call's fresh scratch directory before the command
    /// runs: relative path → text. The scratch directory is the working
    /// directory (unless `workdir` is given) and is removed afterwards.
    #[serde(default)]
    pub files: Option<BTreeMap<String, String>>,
    /// Working directory: an absolute path that is, or is inside, one of the
    /// policy's filesystem grants. Cannot be combined with `files` (they go to
    /// the scratch directory, the default working directory).
    #[serde(default)]
    pub workdir: Option<String>,
}

/// A call's arguments, checked against the ceiling.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub argv: Vec<String>,
    pub stdin: Vec<u8>,
    pub timeout_s: u64,
    /// The ceiling's `network.allow` entries this call gets, as written there.
    pub network: Vec<String>,
    /// Relative path (checked) → content.
    pub files: Vec<(PathBuf, String)>,
    pub workdir: Option<PathBuf>,
}

/// Why a call was refused before anything ran (a tool error for the client).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CallError {
    #[error("give exactly one of `command` (a shell command line) and `argv` (a program and its arguments)")]
    Command,
    #[error("`argv` is empty")]
    EmptyArgv,
    #[error("`{0}` contains a NUL byte")]
    Nul(&'static str),
    #[error("timeout_s must be a positive number of seconds, got {0}")]
    Timeout(String),
    #[error("timeout_s {asked} is above the policy's limits.timeout_s ({ceiling})")]
    TimeoutAbove { asked: String, ceiling: u64 },
    #[error("network `{0}` is not in the policy's network.allow ({1})")]
    Network(String, String),
    #[error("file `{0}`: {1}")]
    File(String, &'static str),
    #[error("too many files: at most {MAX_FILES}, {MAX_FILES_BYTES} bytes in all")]
    TooManyFiles,
    #[error("workdir `{0}`: {1}")]
    Workdir(String, &'static str),
    #[error("workdir and files cannot be combined: files go into the scratch directory, the working directory of a call without workdir (cd to the workdir in the command instead)")]
    WorkdirAndFiles,
}

/// Checks `input` against the ceiling.
pub fn check(input: Input, ceiling: &CompiledPolicy) -> Result<Call, CallError> {
    let argv = match (input.command, input.argv) {
        (Some(c), None) => {
            if c.contains('\0') {
                return Err(CallError::Nul("command"));
            }
            vec!["/bin/sh".to_owned(), "-c".to_owned(), c]
        }
        (None, Some(a)) => {
            if a.is_empty() || a[0].is_empty() {
                return Err(CallError::EmptyArgv);
            }
            if a.iter().any(|s| s.contains('\0')) {
                return Err(CallError::Nul("argv"));
            }
            a
        }
        _ => return Err(CallError::Command),
    };
    let timeout_s = timeout(input.timeout_s, ceiling.limits.timeout_s)?;
    let network = input
        .network
        .unwrap_or_default()
        .iter()
        .map(|h| network_entry(h, ceiling))
        .collect::<Result<Vec<_>, _>>()?;
    let files = files(input.files.unwrap_or_default())?;
    let workdir = match input.workdir {
        None => None,
        Some(_) if !files.is_empty() => return Err(CallError::WorkdirAndFiles),
        Some(w) => Some(workdir(&w, ceiling)?),
    };
    Ok(Call {
        argv,
        stdin: input.stdin.unwrap_or_default().into_bytes(),
        timeout_s,
        network,
        files,
        workdir,
    })
}

/// The call's timeout in whole seconds: asked (rounded up) ≤ the ceiling's,
/// else the ceiling's, else [`DEFAULT_TIMEOUT_S`].
fn timeout(asked: Option<f64>, ceiling: Option<u64>) -> Result<u64, CallError> {
    let Some(t) = asked else {
        return Ok(ceiling.unwrap_or(DEFAULT_TIMEOUT_S));
    };
    if !t.is_finite() || t <= 0.0 {
        return Err(CallError::Timeout(t.to_string()));
    }
    // The daemon's limit is whole seconds, at most 7 days (its own rule).
    let whole = t.ceil();
    if let Some(c) = ceiling {
        if whole > c as f64 {
            return Err(CallError::TimeoutAbove {
                asked: t.to_string(),
                ceiling: c,
            });
        }
    }
    if whole > 604_800.0 {
        return Err(CallError::Timeout(t.to_string()));
    }
    Ok(whole as u64)
}

/// The ceiling's entry `asked` names: its whole text, or its host part (the
/// text before its options, `"host:port private"` → `host:port`).
fn network_entry(asked: &str, ceiling: &CompiledPolicy) -> Result<String, CallError> {
    let asked = asked.trim();
    ceiling
        .network
        .allow
        .iter()
        .map(|r| r.source.as_str())
        .find(|s| *s == asked || s.split_whitespace().next() == Some(asked))
        .map(str::to_owned)
        .ok_or_else(|| {
            let have: Vec<&str> = ceiling
                .network
                .allow
                .iter()
                .map(|r| r.source.as_str())
                .collect();
            let have = if have.is_empty() {
                "which is empty".to_owned()
            } else {
                format!("which has {}", have.join(", "))
            };
            CallError::Network(asked.to_owned(), have)
        })
}

/// The files, each a relative path with no `..`, `.` only inside, no NUL.
fn files(map: BTreeMap<String, String>) -> Result<Vec<(PathBuf, String)>, CallError> {
    if map.len() > MAX_FILES
        || map.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() > MAX_FILES_BYTES
    {
        return Err(CallError::TooManyFiles);
    }
    let mut out = Vec::new();
    for (name, text) in map {
        let bad = |why| CallError::File(name.clone(), why);
        if name.is_empty() {
            return Err(bad("the path is empty"));
        }
        if name.contains('\0') {
            return Err(bad("the path contains a NUL byte"));
        }
        let p = Path::new(&name);
        if p.is_absolute() {
            return Err(bad("the path must be relative (to the scratch directory)"));
        }
        let mut clean = PathBuf::new();
        for c in p.components() {
            match c {
                Component::Normal(n) => clean.push(n),
                Component::CurDir => {}
                Component::ParentDir => return Err(bad("`..` is not allowed")),
                Component::RootDir | Component::Prefix(_) => {
                    return Err(bad("the path must be relative (to the scratch directory)"))
                }
            }
        }
        if clean.as_os_str().is_empty() || name.ends_with('/') {
            return Err(bad("the path names a directory, not a file"));
        }
        out.push((clean, text));
    }
    // `a` and `a/b` cannot both be files.
    for (p, _) in &out {
        if out.iter().any(|(q, _)| q != p && q.starts_with(p)) {
            return Err(CallError::File(
                p.display().to_string(),
                "another file is inside it",
            ));
        }
    }
    Ok(out)
}

/// `workdir`: absolute, without `.` or `..`, one of the ceiling's grants or
/// inside one. The daemon checks again that it exists and holds no symlink.
fn workdir(w: &str, ceiling: &CompiledPolicy) -> Result<PathBuf, CallError> {
    let bad = |why| CallError::Workdir(w.to_owned(), why);
    let p = Path::new(w);
    if !p.is_absolute() {
        return Err(bad("must be an absolute path"));
    }
    if p.components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
        || w.contains('\0')
    {
        return Err(bad("must not contain `.`, `..` or NUL"));
    }
    let p: PathBuf = p.components().collect();
    if ceiling
        .read
        .iter()
        .chain(&ceiling.write)
        .any(|g| p.starts_with(g))
    {
        Ok(p)
    } else {
        Err(bad(
            "is not one of the policy's filesystem grants, nor inside one",
        ))
    }
}

/// The policy text one call runs under (YAML, every path absolute), with a
/// comment header naming what the record of its digest stands for.
/// `home`: what the ceiling was compiled with (a write grant holding it had
/// `filesystem.allow_home_write` there, or the ceiling would not have compiled).
pub fn policy_text(
    ceiling: &CompiledPolicy,
    call: &Call,
    scratch: &Path,
    home: &Path,
) -> Result<String, serde_yaml::Error> {
    let mut write: Vec<String> = ceiling.write.iter().map(|p| path(p)).collect();
    write.push(path(scratch));
    let cwd = call.workdir.as_deref().unwrap_or(scratch);
    let l = &ceiling.limits;
    let p = CallPolicy {
        version: policy::VERSION,
        name: ceiling.name.clone().unwrap_or_else(|| "exec-server".into()),
        command: call.argv.clone(),
        cwd: path(cwd),
        filesystem: Filesystem {
            read: ceiling.read.iter().map(|p| path(p)).collect(),
            write,
            allow_git_init: ceiling.allow_git_init,
            dangerously_expose: ceiling.exposed.iter().map(|p| path(p)).collect(),
            allow_home_write: ceiling.write.iter().any(|g| home.starts_with(g)),
        },
        network: Network {
            allow: call.network.clone(),
            allow_private: ceiling.network.allow_private,
            mode: ceiling.network.mode,
        },
        env: Env {
            allow: ceiling.env_allow.clone(),
        },
        limits: Limits {
            memory_mb: l.memory_mb,
            timeout_s: call.timeout_s,
            pids: l.pids,
            tmp_mb: l.tmp_mb,
            cpu: l.cpu,
            best_effort: l.best_effort,
            output_kb: l.output_kb,
        },
        sandbox: Sandbox {
            landlock_min_abi: (ceiling.sandbox.landlock_min_abi > 0)
                .then_some(ceiling.sandbox.landlock_min_abi),
            best_effort_write_protection: ceiling.sandbox.best_effort_write_protection,
        },
        audit: ceiling.audit.files_explicit.then_some(Audit {
            files: ceiling.audit.files,
        }),
        backend: (!ceiling.backend.is_auto()).then_some(ceiling.backend),
        docker: ceiling.docker_image.clone().map(|image| Docker { image }),
    };
    let mut text = header(ceiling, call);
    text.push_str(&serde_yaml::to_string(&p)?);
    Ok(text)
}

/// The comment lines at the top of a call's policy: the ceiling and the parts
/// of the call the daemon's records do not otherwise carry (stdin, files).
fn header(ceiling: &CompiledPolicy, call: &Call) -> String {
    let mut h = String::from("# wardenctl exec-server: one run_sandboxed call\n");
    if let Some(src) = &ceiling.source {
        h.push_str(&format!(
            "# ceiling: {} ({})\n",
            comment_safe(&src.display().to_string()),
            ceiling.digest
        ));
    }
    let stdin = String::from_utf8_lossy(&call.stdin);
    h.push_str(&format!(
        "# stdin: {} bytes {}\n",
        call.stdin.len(),
        policy::digest(&stdin)
    ));
    for (p, text) in &call.files {
        h.push_str(&format!(
            "# file: {:?} {} bytes {}\n",
            p.display().to_string(),
            text.len(),
            policy::digest(text)
        ));
    }
    h
}

/// A value fit for a one-line comment.
fn comment_safe(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// The schema's keys this module writes (a subset of `warden-core`'s `Raw*`
/// structs, which the daemon parses it with).
#[derive(Serialize)]
struct CallPolicy {
    version: u32,
    name: String,
    command: Vec<String>,
    cwd: String,
    filesystem: Filesystem,
    network: Network,
    env: Env,
    limits: Limits,
    sandbox: Sandbox,
    #[serde(skip_serializing_if = "Option::is_none")]
    audit: Option<Audit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backend: Option<policy::Backend>,
    #[serde(skip_serializing_if = "Option::is_none")]
    docker: Option<Docker>,
}

#[derive(Serialize)]
struct Filesystem {
    read: Vec<String>,
    write: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    allow_git_init: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    dangerously_expose: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    allow_home_write: bool,
}

#[derive(Serialize)]
struct Network {
    allow: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    allow_private: bool,
    mode: policy::net::NetMode,
}

#[derive(Serialize)]
struct Env {
    allow: Vec<String>,
}

#[derive(Serialize)]
struct Limits {
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_mb: Option<u64>,
    timeout_s: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pids: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tmp_mb: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu: Option<f64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    best_effort: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_kb: Option<u64>,
}

#[derive(Serialize)]
struct Sandbox {
    #[serde(skip_serializing_if = "Option::is_none")]
    landlock_min_abi: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    best_effort_write_protection: bool,
}

#[derive(Serialize)]
struct Audit {
    files: policy::FileAudit,
}

#[derive(Serialize)]
struct Docker {
    image: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_core::policy::{CompileContext, Overrides, PolicyInput};

    /// A ceiling compiled from `yaml` in a temp dir holding `data/` and `out/`.
    fn ceiling(yaml: &str) -> (tempfile::TempDir, CompiledPolicy) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::create_dir_all(root.join("out")).unwrap();
        let path = root.join("ceiling.yaml");
        let ctx = CompileContext {
            home: root.join("home"),
            cwd: root.clone(),
            path_env: None,
            reserved: Vec::new(),
        };
        let overrides = Overrides {
            command: vec!["/bin/sh".into()],
            ..Overrides::default()
        };
        let p = policy::compile(
            &PolicyInput {
                path: Some(&path),
                text: yaml,
            },
            &overrides,
            &ctx,
        )
        .unwrap();
        (dir, p)
    }

    const CEILING: &str = "name: agent\nfilesystem:\n  read: [./data]\n  write: [./out]\nnetwork:\n  allow: [\"api.example.com\", \"localhost:8080 private\"]\nenv:\n  allow: [TOKEN]\nlimits:\n  timeout_s: 30\n  memory_mb: 256\n  pids: 64\n  output_kb: 4\n";

    #[test]
    fn a_command_runs_by_the_shell_with_the_ceilings_timeout() {
        let (_d, c) = ceiling(CEILING);
        let call = check(
            Input {
                command: Some("echo hi".into()),
                ..Input::default()
            },
            &c,
        )
        .unwrap();
        assert_eq!(
            call,
            Call {
                argv: vec!["/bin/sh".into(), "-c".into(), "echo hi".into()],
                stdin: Vec::new(),
                timeout_s: 30,
                network: Vec::new(),
                files: Vec::new(),
                workdir: None,
            }
        );
    }

    #[test]
    fn command_and_argv_are_one_or_the_other() {
        let (_d, c) = ceiling(CEILING);
        for input in [
            Input::default(),
            Input {
                command: Some("a".into()),
                argv: Some(vec!["b".into()]),
                ..Input::default()
            },
        ] {
            assert_eq!(check(input, &c), Err(CallError::Command));
        }
        let input = Input {
            argv: Some(vec![]),
            ..Input::default()
        };
        assert_eq!(check(input, &c), Err(CallError::EmptyArgv));
    }

    #[test]
    fn the_timeout_is_at_most_the_ceilings_and_whole_seconds() {
        assert_eq!(timeout(None, None), Ok(DEFAULT_TIMEOUT_S));
        assert_eq!(timeout(None, Some(5)), Ok(5));
        assert_eq!(timeout(Some(0.2), Some(5)), Ok(1));
        assert_eq!(timeout(Some(5.0), Some(5)), Ok(5));
        assert_eq!(
            timeout(Some(5.5), Some(5)),
            Err(CallError::TimeoutAbove {
                asked: "5.5".into(),
                ceiling: 5
            })
        );
        assert_eq!(
            timeout(Some(0.0), None),
            Err(CallError::Timeout("0".into()))
        );
        assert_eq!(
            timeout(Some(-1.0), None),
            Err(CallError::Timeout("-1".into()))
        );
        assert_eq!(
            timeout(Some(1e9), None),
            Err(CallError::Timeout("1000000000".into()))
        );
        assert_eq!(timeout(Some(1000.0), None), Ok(1000));
    }

    #[test]
    fn network_is_a_subset_of_the_ceilings_entries() {
        let (_d, c) = ceiling(CEILING);
        assert_eq!(
            network_entry("api.example.com", &c),
            Ok("api.example.com".into())
        );
        // By the host part: the entry keeps its options.
        assert_eq!(
            network_entry("localhost:8080", &c),
            Ok("localhost:8080 private".into())
        );
        assert_eq!(
            network_entry("localhost:8080 private", &c),
            Ok("localhost:8080 private".into())
        );
        assert_eq!(
            network_entry("evil.example", &c),
            Err(CallError::Network(
                "evil.example".into(),
                "which has api.example.com, localhost:8080 private".into()
            ))
        );
        // A wildcard is not widened nor narrowed: ask for the entry itself.
        let (_d, c) = ceiling("network:\n  allow: [\"*.example.com\"]\n");
        assert!(network_entry("a.example.com", &c).is_err());
        assert_eq!(
            network_entry("*.example.com", &c),
            Ok("*.example.com".into())
        );
    }

    #[test]
    fn files_are_relative_without_dotdot() {
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            files(map(&[("a.txt", "1"), ("./src/b.py", "2")])).unwrap(),
            // In the map's order (`./src/b.py` sorts first).
            vec![
                ("src/b.py".into(), "2".into()),
                ("a.txt".into(), "1".into())
            ]
        );
        for (bad, why) in [
            (
                "/etc/passwd",
                "the path must be relative (to the scratch directory)",
            ),
            ("../x", "`..` is not allowed"),
            ("a/../../x", "`..` is not allowed"),
            ("", "the path is empty"),
            (".", "the path names a directory, not a file"),
            ("dir/", "the path names a directory, not a file"),
            ("a\0b", "the path contains a NUL byte"),
        ] {
            assert_eq!(
                files(map(&[(bad, "x")])),
                Err(CallError::File(bad.into(), why)),
                "{bad:?}"
            );
        }
        assert_eq!(
            files(map(&[("a", "1"), ("a/b", "2")])),
            Err(CallError::File("a".into(), "another file is inside it"))
        );
    }

    #[test]
    fn workdir_is_a_grant_or_inside_one() {
        let (d, c) = ceiling(CEILING);
        let root = d.path().canonicalize().unwrap();
        let out = root.join("out");
        let w = |p: &Path| workdir(p.to_str().unwrap(), &c);
        assert_eq!(w(&out), Ok(out.clone()));
        assert_eq!(w(&out.join("sub")), Ok(out.join("sub")));
        assert_eq!(w(&root.join("data")), Ok(root.join("data")));
        assert!(w(&root).is_err());
        assert!(w(&out.join("../../etc")).is_err());
        assert!(workdir("out", &c).is_err());
        let input = Input {
            command: Some("true".into()),
            files: Some([("a".to_string(), String::new())].into()),
            workdir: Some(out.display().to_string()),
            ..Input::default()
        };
        assert_eq!(check(input, &c), Err(CallError::WorkdirAndFiles));
    }

    /// The call's policy compiles (as the daemon will compile it), and says
    /// what the ceiling says, narrowed.
    #[test]
    fn the_calls_policy_is_the_ceiling_narrowed_and_compiles() {
        let (d, c) = ceiling(CEILING);
        let root = d.path().canonicalize().unwrap();
        let scratch = root.join("scratch");
        std::fs::create_dir(&scratch).unwrap();
        let call = check(
            Input {
                command: Some("echo hi".into()),
                network: Some(vec!["localhost:8080".into()]),
                timeout_s: Some(2.5),
                stdin: Some("abc".into()),
                files: Some([("in/a.txt".to_string(), "x".to_string())].into()),
                ..Input::default()
            },
            &c,
        )
        .unwrap();
        let text = policy_text(&c, &call, &scratch, &d.path().join("home")).unwrap();
        assert!(
            text.starts_with("# wardenctl exec-server: one run_sandboxed call\n"),
            "{text}"
        );
        assert!(text.contains("\n# stdin: 3 bytes sha256:"), "{text}");
        assert!(
            text.contains("\n# file: \"in/a.txt\" 1 bytes sha256:"),
            "{text}"
        );
        // Compiled elsewhere (the daemon's cwd is not the ceiling's), the
        // paths still name the same directories.
        let ctx = CompileContext {
            home: root.join("home"),
            cwd: "/".into(),
            path_env: None,
            reserved: Vec::new(),
        };
        let got = policy::compile(
            &PolicyInput {
                path: c.source.as_deref(),
                text: &text,
            },
            &Overrides::default(),
            &ctx,
        )
        .unwrap();
        assert_eq!(got.argv, call.argv);
        assert_eq!(got.cwd, scratch);
        assert_eq!(got.read, vec![root.join("data")]);
        assert_eq!(got.write, vec![root.join("out"), scratch.clone()]);
        assert_eq!(got.env_allow, vec!["TOKEN".to_string()]);
        let allow: Vec<&str> = got
            .network
            .allow
            .iter()
            .map(|r| r.source.as_str())
            .collect();
        assert_eq!(allow, ["localhost:8080 private"]);
        assert_eq!(
            got.limits,
            policy::Limits {
                memory_mb: Some(256),
                timeout_s: Some(3),
                pids: Some(64),
                output_kb: Some(4),
                ..policy::Limits::default()
            }
        );
        assert_eq!(got.name.as_deref(), Some("agent"));
    }

    #[test]
    fn without_a_policy_a_call_gets_nothing_but_its_scratch() {
        let (d, c) = ceiling("");
        let scratch = d.path().canonicalize().unwrap().join("out");
        let call = check(
            Input {
                argv: Some(vec!["true".into()]),
                ..Input::default()
            },
            &c,
        )
        .unwrap();
        let text = policy_text(&c, &call, &scratch, &d.path().join("home")).unwrap();
        let body: String = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            body,
            format!(
                "version: 1\nname: exec-server\ncommand:\n- 'true'\ncwd: {s}\nfilesystem:\n  read: []\n  write:\n  - {s}\nnetwork:\n  allow: []\n  mode: both\nenv:\n  allow: []\nlimits:\n  timeout_s: 60\nsandbox: {{}}\n",
                s = scratch.display()
            )
        );
    }
}
