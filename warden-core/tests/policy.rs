//! Policy compilation end to end: real files in a temp dir, whole-value asserts on
//! the compiled policy and on every diagnostic line.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use warden_core::policy::net::{HostPattern, NetRule, NetworkPolicy, PortSpec};
use warden_core::policy::{
    compile, digest, load_file, reserved, CompileContext, CompiledPolicy, Limits, Overrides,
    PolicyError, PolicyInput, Reserved, SandboxReq,
};

/// A temp tree:
///
/// ```text
/// $T/home/.npm/_cacache/        ~ of the client
/// $T/client/                    the client's cwd
/// $T/bin/server                 on PATH (executable)
/// $T/bin/alias -> ../opt/real   on PATH, a symlink to a program
/// $T/opt/real                   executable
/// $T/proj/{data,output,tool}    next to the policy file (tool is executable)
/// ```
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

fn executable(path: &Path) {
    fs::write(path, "#!/bin/sh\n").unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        for d in [
            "home/.npm/_cacache",
            "client/sub",
            "bin",
            "opt",
            "proj/data",
            "proj/output/work",
            "run/warden",
            "state/warden/audit",
            "config/warden",
        ] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        executable(&root.join("bin/server"));
        executable(&root.join("opt/real"));
        executable(&root.join("proj/tool"));
        symlink("../opt/real", root.join("bin/alias")).unwrap();
        Fixture { _dir: dir, root }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn ctx(&self) -> CompileContext {
        CompileContext {
            home: self.p("home"),
            cwd: self.p("client"),
            path_env: Some(OsString::from(format!(
                "{}:/nonexistent",
                self.p("bin").display()
            ))),
            reserved: self.reserved(),
        }
    }

    /// Warden's paths as the daemon would pass them, inside the fixture:
    /// `$T/run/warden/wardend.sock`, `$T/state/warden`, `$T/config/warden`,
    /// and `$T/run` as the runtime directory.
    fn reserved(&self) -> Vec<Reserved> {
        let mut out = reserved::warden(
            Some(&self.p("run/warden/wardend.sock")),
            Some(&self.p("state/warden")),
            Some(&self.p("config/warden")),
        );
        let rt = self.p("run");
        out.extend(reserved::user(
            |k| (k == "XDG_RUNTIME_DIR").then(|| rt.clone().into_os_string()),
            4242,
        ));
        out
    }

    fn policy_path(&self) -> PathBuf {
        self.p("proj/policy.yaml")
    }

    fn compile(&self, text: &str, overrides: &Overrides) -> Result<CompiledPolicy, PolicyError> {
        let path = self.policy_path();
        fs::write(&path, text).unwrap();
        let text = load_file(&path).unwrap();
        let input = PolicyInput {
            path: Some(&path),
            text: &text,
        };
        compile(&input, overrides, &self.ctx())
    }

    fn ok(&self, text: &str) -> CompiledPolicy {
        self.compile(text, &Overrides::default())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The error's lines, with the temp root written as `$T`.
    fn err_with(&self, text: &str, overrides: &Overrides) -> Vec<String> {
        let err = self
            .compile(text, overrides)
            .expect_err("policy should be refused");
        let root = self.root.display().to_string();
        err.to_string()
            .lines()
            .map(|l| l.replace(&root, "$T"))
            .collect()
    }

    fn err(&self, text: &str) -> Vec<String> {
        self.err_with(text, &Overrides::default())
    }

    /// A compiled policy with what every test leaves at its default.
    fn base(&self, text: &str) -> CompiledPolicy {
        CompiledPolicy {
            version: 1,
            name: None,
            source: Some(self.policy_path()),
            digest: digest(text),
            argv: vec!["server".into()],
            program: self.p("bin/server"),
            cwd: PathBuf::from("/tmp"),
            read: vec![],
            write: vec![],
            allow_git_init: false,
            env_allow: vec![],
            network: Default::default(),
            limits: Limits::default(),
            sandbox: SandboxReq::default(),
            audit: Default::default(),
            exposed: vec![],
            warnings: vec![],
            approve: false,
            backend: Default::default(),
            docker_image: None,
            mcp: Default::default(),
        }
    }
}

fn lines(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    lines(v)
}

const P: &str = "$T/proj/policy.yaml";

#[test]
fn design_example_adapted_to_temp_paths() {
    let f = Fixture::new();
    let text = r#"version: 1                      # optional; absent means 1
name: github                    # optional label for ps/logs
command: ["server", "-y", "@modelcontextprotocol/server-github"]
cwd: ./output/work              # optional; default: first write grant, else /tmp
filesystem:
  read: ["./data", "~/.npm/_cacache"]   # read-only; relative to the policy file; ~ expands
  write: ["./output"]                   # read-write; a path in both is write
network:
  allow: []
env:
  allow: ["GITHUB_TOKEN"]       # names passed through from the client's environment
limits:
  memory_mb: 512
  timeout_s: 300
"#;
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            name: Some("github".into()),
            argv: strings(&["server", "-y", "@modelcontextprotocol/server-github"]),
            cwd: f.p("proj/output/work"),
            read: vec![f.p("home/.npm/_cacache"), f.p("proj/data")],
            write: vec![f.p("proj/output")],
            env_allow: strings(&["GITHUB_TOKEN"]),
            limits: Limits {
                memory_mb: Some(512),
                timeout_s: Some(300),
                ..Limits::default()
            },
            ..f.base(text)
        }
    );
}

#[test]
fn design_example_network_entries_compile() {
    let f = Fixture::new();
    let text = "command: [server]\nnetwork:\n  allow: [\"api.github.com\", \"*.githubusercontent.com\", \"registry.npmjs.org:443\"]\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            network: NetworkPolicy {
                allow: vec![
                    rule(
                        "api.github.com",
                        HostPattern::Name("api.github.com".into()),
                        PortSpec::Web
                    ),
                    rule(
                        "*.githubusercontent.com",
                        HostPattern::Suffix("githubusercontent.com".into()),
                        PortSpec::Web
                    ),
                    rule(
                        "registry.npmjs.org:443",
                        HostPattern::Name("registry.npmjs.org".into()),
                        PortSpec::One(443)
                    ),
                ],
                allow_private: false,
                mode: Default::default(),
            },
            ..f.base(text)
        }
    );
}

fn rule(source: &str, host: HostPattern, ports: PortSpec) -> NetRule {
    NetRule {
        source: source.into(),
        host,
        ports,
        private: false,
        no_sni: false,
        direct: false,
    }
}

#[test]
fn every_entry_form_and_allow_private() {
    let f = Fixture::new();
    let text = r#"command: [server]
network:
  allow:
    - BÜCHER.example.          # IDNA, case, trailing dot
    - "*.example.com:*"
    - localhost:3000
    - 2130706433:8080          # 127.0.0.1 in another spelling
    - "[::1]:8080"
    - 10.0.0.0/8:443
    - "[fd00::/8]"
  allow_private: true
"#;
    let ip = |s: &str| s.parse().unwrap();
    assert_eq!(
        f.ok(text).network,
        NetworkPolicy {
            allow: vec![
                rule(
                    "BÜCHER.example.",
                    HostPattern::Name("xn--bcher-kva.example".into()),
                    PortSpec::Web
                ),
                rule(
                    "*.example.com:*",
                    HostPattern::Suffix("example.com".into()),
                    PortSpec::Any
                ),
                rule(
                    "localhost:3000",
                    HostPattern::Name("localhost".into()),
                    PortSpec::One(3000)
                ),
                rule(
                    "2130706433:8080",
                    HostPattern::Ip(ip("127.0.0.1")),
                    PortSpec::One(8080)
                ),
                rule(
                    "[::1]:8080",
                    HostPattern::Ip(ip("::1")),
                    PortSpec::One(8080)
                ),
                rule(
                    "10.0.0.0/8:443",
                    HostPattern::Cidr {
                        addr: ip("10.0.0.0"),
                        prefix: 8
                    },
                    PortSpec::One(443)
                ),
                rule(
                    "[fd00::/8]",
                    HostPattern::Cidr {
                        addr: ip("fd00::"),
                        prefix: 8
                    },
                    PortSpec::Web
                ),
            ],
            allow_private: true,
            mode: Default::default(),
        }
    );
}

#[test]
fn allow_private_alone_and_empty_network_section() {
    let f = Fixture::new();
    let text = "command: [server]\nnetwork:\n  allow_private: true\n";
    assert_eq!(
        f.ok(text).network,
        NetworkPolicy {
            allow: vec![],
            allow_private: true,
            mode: Default::default(),
        }
    );
    let text = "command: [server]\nnetwork:\n  mode: both\n";
    assert_eq!(
        f.ok(text).network.mode,
        warden_core::policy::net::NetMode::Both
    );
    let text = "command: [server]\nnetwork:\n";
    assert_eq!(f.ok(text), f.base(text));
}

#[test]
fn bad_network_entries_are_reported_each_at_its_line_and_column() {
    let f = Fixture::new();
    let text = r#"command: [server]
network:
  allow:
    - api.github.com
    - "a b.com"
    - "*"
    - "*.com"
    - 10.0.0.1/8
    -   example.com:0
    - 1.2.3.4.5
    - "[::1"
    - ::1
"#;
    assert_eq!(
        f.err(text),
        lines(&[
            &format!("{P}:5:7: network.allow[1]: `a b.com`: ` ` (space) is not allowed in a host name (letters, digits, `-`, `_` and `.` are)"),
            &format!("{P}:6:7: network.allow[2]: `*`: `*` alone would allow every host; list the hosts the server needs (`*.example.com` allows the subdomains of one domain)"),
            &format!("{P}:7:7: network.allow[3]: `*.com`: `*.com` is too broad: a wildcard needs a suffix of at least two labels, as in `*.example.com`"),
            &format!("{P}:8:7: network.allow[4]: `10.0.0.1/8`: host bits are set after the /8 prefix: write the range as `10.0.0.0/8`, or `10.0.0.1` for the one address"),
            &format!("{P}:9:9: network.allow[5]: `example.com:0`: port 0 cannot be connected to; write a port from 1 to 65535, or `*` for any port"),
            &format!("{P}:10:7: network.allow[6]: `1.2.3.4.5`: its last label is a number, so it is an IPv4 address, but not a valid one"),
            &format!("{P}:11:7: network.allow[7]: `[::1`: `[` without a closing `]`"),
            &format!("{P}:12:7: network.allow[8]: `::1`: write an IPv6 address in brackets: `[::1]`, or `[::1]:PORT` for one port"),
        ])
    );
}

#[test]
fn entry_options_and_refused_ranges_are_reported_at_their_line_and_column() {
    let f = Fixture::new();
    let text = r#"command: [server]
network:
  allow:
    - git.corp.example:443 private
    - "legacy.example:443 insecure-no-sni"
    - 0.0.0.0/0:443
    - "[::/0]"
    - 0.0.0.0/4
    - 127.0.0.0/8:3000
    - 10.0.0.1 private
    - api.example privat
"#;
    assert_eq!(
        f.err(text),
        lines(&[
            &format!("{P}:6:7: network.allow[2]: `0.0.0.0/0:443`: `0.0.0.0/0` would allow every address; list the hosts or ranges the server needs"),
            &format!("{P}:7:7: network.allow[3]: `[::/0]`: `[::/0]` would allow every address; list the hosts or ranges the server needs"),
            &format!("{P}:8:7: network.allow[4]: `0.0.0.0/4`: `0.0.0.0/4` is too broad: a range needs a prefix of at least /8 (IPv4)"),
            &format!("{P}:9:7: network.allow[5]: `127.0.0.0/8:3000`: `127.0.0.0/8` is a loopback range: a range never opens loopback addresses; list each address, as in `127.0.0.1:PORT`"),
            &format!("{P}:10:7: network.allow[6]: `10.0.0.1 private`: `private` is for names: an address entry reaches its own addresses whatever their class (loopback and metadata only by an entry for the exact address)"),
            &format!("{P}:11:7: network.allow[7]: `api.example privat`: unknown option `privat`: after a space only the options `private`, `insecure-no-sni` and `direct` may follow"),
        ])
    );
    let ok = "command: [server]\nnetwork:\n  allow:\n    - git.corp.example:443 private\n    - \"legacy.example:443 insecure-no-sni\"\n";
    let net = f.ok(ok).network;
    assert!(net.allow[0].private && !net.allow[0].no_sni);
    assert!(net.allow[1].no_sni && !net.allow[1].private);
    assert_eq!(net.allow[0].source, "git.corp.example:443 private");
    assert_eq!(net.allow[0].to_string(), "git.corp.example:443 private");
}

#[test]
fn bad_network_entries_in_a_flow_list() {
    let f = Fixture::new();
    let text =
        "command: [server]\nnetwork: {allow: [ok.example, \"user@evil.com\", \"x.com:http\"]}\n";
    assert_eq!(
        f.err(text),
        lines(&[
            &format!("{P}:2:31: network.allow[1]: `user@evil.com`: `@` is not allowed in a host name (letters, digits, `-`, `_` and `.` are)"),
            &format!("{P}:2:48: network.allow[2]: `x.com:http`: invalid port `http`: write a number from 1 to 65535, or `*` for any port"),
        ])
    );
}

#[test]
fn network_section_structure_is_checked() {
    let f = Fixture::new();
    assert_eq!(
        f.err("command: [server]\nnetwork:\n  alow: [a.com]\n  allow_private: yes\n  allow: a.com\n"),
        lines(&[
            &format!("{P}:3:3: network.alow: unknown key `alow`, did you mean `allow`?"),
            &format!("{P}:4:18: network.allow_private: expected `true` or `false`, found a string `yes`"),
            &format!("{P}:5:10: network.allow: expected a list of strings, found a string; write it as a list: allow: [\"a.com\"]"),
        ])
    );
}

#[test]
fn empty_network_list_is_fine() {
    let f = Fixture::new();
    let text = "command: [server]\nnetwork:\n  allow: []\n";
    assert_eq!(f.ok(text), f.base(text));
}

#[test]
fn flags_only_policy() {
    let f = Fixture::new();
    let overrides = Overrides {
        read: strings(&["sub", "../proj/data"]),
        write: strings(&["."]),
        allow_env: strings(&["HOME", "A_TOKEN", "HOME"]),
        name: Some("adhoc".into()),
        command: strings(&["server", "--stdio"]),
    };
    let input = PolicyInput {
        path: None,
        text: "",
    };
    let got = compile(&input, &overrides, &f.ctx()).unwrap();
    assert_eq!(
        got,
        CompiledPolicy {
            name: Some("adhoc".into()),
            source: None,
            digest: digest(""),
            argv: strings(&["server", "--stdio"]),
            cwd: f.p("client"),
            read: vec![f.p("client/sub"), f.p("proj/data")],
            write: vec![f.p("client")],
            env_allow: strings(&["A_TOKEN", "HOME"]),
            ..f.base("")
        }
    );
    assert_eq!(
        got.digest,
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

#[test]
fn no_command_anywhere() {
    let f = Fixture::new();
    assert_eq!(
        f.err("name: x\n"),
        lines(&[&format!(
            "{P}: no command: give one in the policy (`command:`) or after `--`"
        )])
    );
    let input = PolicyInput {
        path: None,
        text: "",
    };
    let err = compile(&input, &Overrides::default(), &f.ctx()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no command: give one in the policy (`command:`) or after `--`"
    );
}

#[test]
fn empty_and_comment_only_files_are_empty_policies() {
    let f = Fixture::new();
    let overrides = Overrides {
        command: strings(&["server"]),
        ..Overrides::default()
    };
    for text in ["", "# nothing here\n\n# at all\n"] {
        let got = f.compile(text, &overrides).unwrap();
        assert_eq!(got, f.base(text), "{text:?}");
    }
}

#[test]
fn overrides_replace_command_and_name_and_add_grants() {
    let f = Fixture::new();
    let text = "name: fromfile\ncommand: [nonexistent-program]\nfilesystem:\n  read: [./data]\nenv:\n  allow: [B]\n";
    let overrides = Overrides {
        read: strings(&["sub"]),
        write: strings(&["../proj/output"]),
        allow_env: strings(&["A"]),
        name: Some("fromflag".into()),
        command: strings(&["../proj/tool", "x"]),
    };
    assert_eq!(
        f.compile(text, &overrides).unwrap(),
        CompiledPolicy {
            name: Some("fromflag".into()),
            argv: strings(&["../proj/tool", "x"]),
            program: f.p("proj/tool"),
            cwd: f.p("proj/output"),
            read: vec![f.p("client/sub"), f.p("proj/data")],
            write: vec![f.p("proj/output")],
            env_allow: strings(&["A", "B"]),
            ..f.base(text)
        }
    );
}

#[test]
fn paths_are_relative_to_the_policy_file_normalised_and_tilde_expanded() {
    let f = Fixture::new();
    let root = f.root.display();
    let text = format!(
        "command: [server]\nfilesystem:\n  read: [./data/., \"output/../data\", \"~\", \"~/.npm/_cacache/\", {root}/opt]\n"
    );
    assert_eq!(
        f.ok(&text),
        CompiledPolicy {
            read: vec![
                f.p("home"),
                f.p("home/.npm/_cacache"),
                f.p("opt"),
                f.p("proj/data")
            ],
            ..f.base(&text)
        }
    );
}

#[test]
fn missing_paths_are_refused_with_position_and_key() {
    let f = Fixture::new();
    let text =
        "command: [server]\nfilesystem:\n  read:\n    - ./data\n    - ./nope\n  write: [~/gone]\n";
    assert_eq!(
        f.err(text),
        lines(&[
            &format!("{P}:5:7: filesystem.read[1]: path does not exist: $T/proj/nope"),
            &format!("{P}:6:11: filesystem.write[0]: path does not exist: $T/home/gone"),
        ])
    );
}

#[test]
fn flag_paths_are_relative_to_the_client_cwd() {
    let f = Fixture::new();
    let overrides = Overrides {
        read: strings(&["data"]),
        write: strings(&["/nonexistent/x"]),
        ..Overrides::default()
    };
    assert_eq!(
        f.err_with("command: [server]\n", &overrides),
        lines(&[
            "--write: path does not exist: /nonexistent/x",
            "--read: path does not exist: $T/client/data",
        ])
    );
}

#[test]
fn tilde_user_is_refused() {
    let f = Fixture::new();
    assert_eq!(
        f.err("command: [server]\nfilesystem:\n  read: [~bob/data]\n"),
        lines(&[&format!(
            "{P}:3:10: filesystem.read[0]: `~bob/data`: `~user` is not supported; write the full path"
        )])
    );
}

#[test]
fn symlinked_grants_are_refused_naming_the_real_path() {
    let f = Fixture::new();
    symlink(f.p("proj/data"), f.p("proj/link")).unwrap();
    symlink(f.p("proj"), f.p("home/p")).unwrap();
    symlink(f.p("proj/absent"), f.p("proj/dangling")).unwrap();
    let text = "command: [server]\nfilesystem:\n  read: [./link, ~/p/data, ./dangling]\n  write: [./link/x]\n";
    fs::write(f.p("proj/data/x"), "").unwrap();
    assert_eq!(
        f.err(text),
        lines(&[
            &format!("{P}:3:10: filesystem.read[0]: path is a symlink: $T/proj/link; grant the real path $T/proj/data instead"),
            &format!("{P}:3:18: filesystem.read[1]: path $T/home/p/data passes through the symlink $T/home/p; grant the real path $T/proj/data instead"),
            &format!("{P}:3:28: filesystem.read[2]: path is a symlink: $T/proj/dangling; its target does not exist"),
            &format!("{P}:4:11: filesystem.write[0]: path $T/proj/link/x passes through the symlink $T/proj/link; grant the real path $T/proj/data/x instead"),
        ])
    );
}

#[test]
fn root_and_empty_paths_are_refused() {
    let f = Fixture::new();
    let text = "command: [server]\nfilesystem:\n  read: [\"/\", \"\", \"/tmp/../..\"]\n  write: [\"a\\0b\"]\n";
    assert_eq!(
        f.err(text),
        lines(&[
            &format!("{P}:3:10: filesystem.read[0]: refusing to grant `/` (the whole filesystem); grant only the directories the server needs"),
            &format!("{P}:3:15: filesystem.read[1]: path is empty"),
            &format!("{P}:3:19: filesystem.read[2]: refusing to grant `/` (the whole filesystem); grant only the directories the server needs"),
            &format!("{P}:4:11: filesystem.write[0]: path contains a NUL byte: \"a\\0b\""),
        ])
    );
}

#[test]
fn non_utf8_paths_are_refused() {
    use std::os::unix::ffi::OsStringExt;
    let f = Fixture::new();
    let ctx = CompileContext {
        home: PathBuf::from(OsString::from_vec(b"/home/\xff".to_vec())),
        ..f.ctx()
    };
    let overrides = Overrides {
        read: strings(&["~/x"]),
        command: strings(&["server"]),
        ..Overrides::default()
    };
    let input = PolicyInput {
        path: None,
        text: "",
    };
    assert_eq!(
        compile(&input, &overrides, &ctx).unwrap_err().to_string(),
        "--read: path is not valid UTF-8: /home/\u{fffd}/x"
    );
}

#[test]
fn write_subsumes_read_and_grants_are_deduped_and_sorted() {
    let f = Fixture::new();
    let text = "command: [server]\nfilesystem:\n  read: [./output, ./data, ./data/, ../proj/data]\n  write: [./output, ./output/.]\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            read: vec![f.p("proj/data")],
            write: vec![f.p("proj/output")],
            cwd: f.p("proj/output"),
            ..f.base(text)
        }
    );
}

#[test]
fn command_resolution() {
    let f = Fixture::new();
    let root = f.root.display();
    // Bare name through a symlink on PATH: program is the canonical target.
    let text = "command: [alias, --flag]\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            argv: strings(&["alias", "--flag"]),
            program: f.p("opt/real"),
            ..f.base(text)
        }
    );
    // Relative with a slash: from the policy's directory.
    let text = "command: [./tool]\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            argv: strings(&["./tool"]),
            program: f.p("proj/tool"),
            ..f.base(text)
        }
    );
    // Absolute.
    let text = format!("command: [{root}/bin/server]\n");
    assert_eq!(
        f.ok(&text),
        CompiledPolicy {
            argv: vec![format!("{root}/bin/server")],
            ..f.base(&text)
        }
    );
}

#[test]
fn command_errors() {
    let f = Fixture::new();
    fs::write(f.p("proj/plain"), "").unwrap();
    let cases = [
        ("command: [nosuch]\n", "1:11: command[0]: command `nosuch` not found on PATH"),
        ("command: [/nonexistent/x]\n", "1:11: command[0]: program does not exist: /nonexistent/x"),
        ("command: [./plain]\n", "1:11: command[0]: program is not executable: $T/proj/plain"),
        ("command: [./data]\n", "1:11: command[0]: program is not a regular file: $T/proj/data"),
        ("command: [\"\"]\n", "1:11: command[0]: program name is empty"),
        ("command: []\n", "1:10: command: command is empty; give the program and its arguments as a list, e.g. [\"npx\", \"-y\", \"pkg\"]"),
        ("command: [server, \"a\\0\"]\n", "1:19: command[1]: argument contains a NUL byte: \"a\\0\""),
        ("command: npx -y pkg\n", "1:10: command: expected a list of strings, found a string; write it as a list: command: [\"npx\", \"-y\", \"pkg\"]"),
    ];
    for (text, want) in cases {
        assert_eq!(f.err(text), lines(&[&format!("{P}:{want}")]), "{text:?}");
    }
    let overrides = Overrides {
        command: strings(&["nosuch"]),
        ..Overrides::default()
    };
    assert_eq!(
        f.err_with("", &overrides),
        lines(&["--: command `nosuch` not found on PATH"])
    );
    let ctx = CompileContext {
        path_env: None,
        ..f.ctx()
    };
    let input = PolicyInput {
        path: None,
        text: "command: [server]",
    };
    assert_eq!(
        compile(&input, &Overrides::default(), &ctx)
            .unwrap_err()
            .to_string(),
        "command[0]: command `server` not found on PATH"
    );
}

#[test]
fn cwd_rules() {
    let f = Fixture::new();
    fs::write(f.p("proj/output/file"), "").unwrap();
    // Default: the first write grant that is a directory.
    let text =
        "command: [server]\nfilesystem:\n  write: [./output/file, ./output/work, ./output]\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            write: vec![
                f.p("proj/output"),
                f.p("proj/output/file"),
                f.p("proj/output/work")
            ],
            cwd: f.p("proj/output/work"),
            ..f.base(text)
        }
    );
    // Explicit, inside a read grant.
    let text = "command: [server]\ncwd: data\nfilesystem:\n  read: [.]\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            read: vec![f.p("proj")],
            cwd: f.p("proj/data"),
            ..f.base(text)
        }
    );
    // /tmp is always allowed (the sandbox's own).
    let text = "command: [server]\ncwd: /tmp\n";
    assert_eq!(f.ok(text), f.base(text));

    let cases = [
        (
            "cwd: ./data\n",
            "2:6: cwd: cwd $T/proj/data is not inside any filesystem grant",
        ),
        (
            "cwd: ./missing\n",
            "2:6: cwd: path does not exist: $T/proj/missing",
        ),
        (
            "cwd: ./tool\nfilesystem: {read: [.]}\n",
            "2:6: cwd: cwd $T/proj/tool is not a directory",
        ),
    ];
    for (tail, want) in cases {
        let text = format!("command: [server]\n{tail}");
        assert_eq!(f.err(&text), lines(&[&format!("{P}:{want}")]), "{text:?}");
    }
}

#[test]
fn env_rules() {
    let f = Fixture::new();
    let text = "command: [server]\nenv:\n  allow: [B, A, B, \"\", \"X=1\"]\n";
    let overrides = Overrides {
        allow_env: strings(&["C=", "D"]),
        ..Overrides::default()
    };
    assert_eq!(
        f.err_with(text, &overrides),
        lines(&[
            &format!("{P}:3:20: env.allow[3]: variable name is empty"),
            &format!(
                "{P}:3:24: env.allow[4]: invalid variable name `X=1`: a name cannot contain `=`"
            ),
            "--allow-env: invalid variable name `C=`: a name cannot contain `=`",
        ])
    );
    let text = "command: [server]\nenv:\n  allow: [B, A, B]\n";
    let overrides = Overrides {
        allow_env: strings(&["A", "C"]),
        ..Overrides::default()
    };
    assert_eq!(
        f.compile(text, &overrides).unwrap(),
        CompiledPolicy {
            env_allow: strings(&["A", "B", "C"]),
            ..f.base(text)
        }
    );
}

#[test]
fn limits_rules() {
    let f = Fixture::new();
    assert_eq!(
        f.err("command: [server]\nlimits:\n  memory_mb: 8\n  timeout_s: 604801\n"),
        lines(&[
            &format!("{P}:3:14: limits.memory_mb: 8 is out of range: must be between 16 and 1048576 (MiB, up to 1 TiB)"),
            &format!("{P}:4:14: limits.timeout_s: 604801 is out of range: must be between 1 and 604800 (seconds, up to 7 days)"),
        ])
    );
    assert_eq!(
        f.err("command: [server]\nlimits: {timeout_s: 0, memory_mb: -5}\n"),
        lines(&[
            &format!("{P}:2:21: limits.timeout_s: 0 is out of range: must be between 1 and 604800 (seconds, up to 7 days)"),
            &format!("{P}:2:35: limits.memory_mb: -5 is out of range: must be between 16 and 1048576 (MiB, up to 1 TiB)"),
        ])
    );
    let text = "command: [server]\nlimits: {timeout_s: 604800, memory_mb: 16}\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            limits: Limits {
                memory_mb: Some(16),
                timeout_s: Some(604_800),
                ..Limits::default()
            },
            ..f.base(text)
        }
    );
}

#[test]
fn version_and_name_rules() {
    let f = Fixture::new();
    assert_eq!(
        f.err("version: 2\nname: \"has space\"\ncommand: [server]\n"),
        lines(&[
            &format!("{P}:1:10: version: unsupported policy version 2; this version of Warden reads version 1"),
            &format!("{P}:2:7: name: invalid name `has space`: use 1 to 64 characters from A-Z, a-z, 0-9, `.`, `_` and `-`"),
        ])
    );
    let overrides = Overrides {
        name: Some("bad/name".into()),
        ..Overrides::default()
    };
    assert_eq!(
        f.err_with("name: fine\ncommand: [server]\n", &overrides),
        lines(&["--name: invalid name `bad/name`: use 1 to 64 characters from A-Z, a-z, 0-9, `.`, `_` and `-`"])
    );
    let text = "version: 1\nname: my-server_2.0\ncommand: [server]\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            name: Some("my-server_2.0".into()),
            ..f.base(text)
        }
    );
}

#[test]
fn strict_yaml_structure() {
    let f = Fixture::new();
    assert_eq!(
        f.err("command: [server]\nfilesytem:\n  read: []\nlimits:\n  timeout_s: 5\n  timeout_s: 6\n  memory: 5\n"),
        lines(&[
            &format!("{P}:2:1: filesytem: unknown key `filesytem`, did you mean `filesystem`?"),
            &format!("{P}:6:3: limits.timeout_s: duplicate key `timeout_s`"),
            &format!("{P}:7:3: limits.memory: unknown key `memory`, did you mean `memory_mb`?"),
        ])
    );
    assert_eq!(
        f.err("command: [server]\nlimits:\n  timeout_s: soon\n"),
        lines(&[&format!(
            "{P}:3:14: limits.timeout_s: expected an integer, found a string `soon`"
        )])
    );
}

#[test]
fn yaml_syntax_error_is_reported_alone() {
    let f = Fixture::new();
    assert_eq!(
        f.err("command: [server\nname: x\n"),
        lines(&[&format!(
            "{P}:2:5: invalid YAML: illegal placement of ':' indicator"
        )])
    );
}

#[test]
fn many_problems_in_one_file_are_all_reported_in_file_order() {
    let f = Fixture::new();
    let text = "version: 3\nname: \"a b\"\ncommand: [nosuch]\ncwd: /\nfilesystem:\n  read: [./nope]\n  write: [\"/\"]\nnetwork:\n  allow: [\"a b.com\"]\nenv:\n  allow: [\"=\"]\nlimits:\n  timeout_s: 0\n";
    assert_eq!(
        f.err(text),
        lines(&[
            &format!("{P}:1:10: version: unsupported policy version 3; this version of Warden reads version 1"),
            &format!("{P}:2:7: name: invalid name `a b`: use 1 to 64 characters from A-Z, a-z, 0-9, `.`, `_` and `-`"),
            &format!("{P}:3:11: command[0]: command `nosuch` not found on PATH"),
            &format!("{P}:6:10: filesystem.read[0]: path does not exist: $T/proj/nope"),
            &format!("{P}:7:11: filesystem.write[0]: refusing to grant `/` (the whole filesystem); grant only the directories the server needs"),
            &format!("{P}:9:11: network.allow[0]: `a b.com`: ` ` (space) is not allowed in a host name (letters, digits, `-`, `_` and `.` are)"),
            &format!("{P}:11:11: env.allow[0]: invalid variable name `=`: a name cannot contain `=`"),
            &format!("{P}:13:14: limits.timeout_s: 0 is out of range: must be between 1 and 604800 (seconds, up to 7 days)"),
        ])
    );
}

#[test]
fn digest_is_of_the_exact_text() {
    let f = Fixture::new();
    let a = f.ok("command: [server]\n");
    let b = f.ok("command: [server]  \n");
    assert_ne!(a.digest, b.digest);
    assert_eq!(a.digest, digest("command: [server]\n"));
    assert!(a.digest.starts_with("sha256:") && a.digest.len() == 7 + 64);
}

#[test]
fn compiled_policy_round_trips_through_json() {
    let f = Fixture::new();
    let got = f.ok(
        "name: x\ncommand: [server, a]\nfilesystem: {read: [./data]}\nlimits: {timeout_s: 5}\n",
    );
    let json = serde_json::to_string(&got).unwrap();
    let back: CompiledPolicy = serde_json::from_str(&json).unwrap();
    assert_eq!(back, got);
}

#[test]
fn load_file_errors_name_the_path() {
    let f = Fixture::new();
    let show = |p: &Path| {
        load_file(p)
            .unwrap_err()
            .to_string()
            .replace(&f.root.display().to_string(), "$T")
    };
    assert_eq!(
        show(&f.p("proj/missing.yaml")),
        "$T/proj/missing.yaml: cannot read policy file: no such file"
    );
    assert_eq!(
        show(&f.p("proj")),
        "$T/proj: cannot read policy file: it is a directory"
    );
    fs::write(f.p("proj/bin.yaml"), b"name: \xff\n").unwrap();
    assert_eq!(
        show(&f.p("proj/bin.yaml")),
        "$T/proj/bin.yaml: cannot read policy file: it is not valid UTF-8"
    );
    fs::write(f.p("proj/big.yaml"), vec![b'#'; 1024 * 1024 + 1]).unwrap();
    assert_eq!(
        show(&f.p("proj/big.yaml")),
        "$T/proj/big.yaml: policy file is larger than 1048576 bytes"
    );
    fs::write(f.p("proj/ok.yaml"), "name: x\n").unwrap();
    assert_eq!(load_file(&f.p("proj/ok.yaml")).unwrap(), "name: x\n");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the text, compile returns (never panics), and every diagnostic
        /// is one line.
        #[test]
        fn arbitrary_text_never_panics(text in "[a-z_:\\[\\]{}, \\n\\-'\"~./0-9#&*!|>]{0,80}") {
            let f = Fixture::new();
            let input = PolicyInput { path: Some(&f.policy_path()), text: &text };
            if let Err(e) = compile(&input, &Overrides::default(), &f.ctx()) {
                prop_assert!(!e.diagnostics.is_empty());
                for d in &e.diagnostics {
                    prop_assert!(!d.to_string().contains('\n'), "{}", d);
                }
            }
        }

        /// Any accepted grant is absolute, normalised and its own canonical path (no
        /// symlink anywhere), whatever mix of `.`, `..` and symlinks was written.
        #[test]
        fn accepted_grants_are_canonical(
            segments in proptest::collection::vec(
                prop_oneof![Just("."), Just(".."), Just("data"), Just("output"), Just("link"), Just("work")],
                0..6,
            )
        ) {
            let f = Fixture::new();
            symlink(f.p("proj/output"), f.p("proj/link")).unwrap();
            let rel = if segments.is_empty() { ".".to_owned() } else { segments.join("/") };
            let text = format!("command: [server]\nfilesystem:\n  read: [{rel:?}]\n");
            let input = PolicyInput { path: Some(&f.policy_path()), text: &text };
            match compile(&input, &Overrides::default(), &f.ctx()) {
                Ok(p) => {
                    prop_assert_eq!(p.read.len(), 1);
                    let g = &p.read[0];
                    prop_assert!(g.is_absolute());
                    prop_assert_eq!(&fs::canonicalize(g).unwrap(), g);
                    prop_assert!(g.parent().is_some());
                }
                Err(e) => {
                    prop_assert_eq!(e.diagnostics.len(), 1);
                    prop_assert_eq!(e.diagnostics[0].key.as_deref(), Some("filesystem.read[0]"));
                }
            }
        }
    }
}

#[test]
fn anchors_and_aliases() {
    let f = Fixture::new();
    // An alias is expanded; a problem in it is reported where it is used.
    let text = "command: [server]\nfilesystem:\n  read: &r [./data]\n  write: *r\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            write: vec![f.p("proj/data")],
            cwd: f.p("proj/data"),
            ..f.base(text)
        }
    );
    assert_eq!(
        f.err("command: &c [server]\nname: *c\n"),
        lines(&[&format!("{P}:2:7: name: expected a string, found a list")])
    );
    assert_eq!(
        f.err("command: [server]\nname: *nope\n"),
        lines(&[&format!(
            "{P}:2:7: invalid YAML: while parsing node, found unknown anchor"
        )])
    );
}

#[test]
fn what_only_serde_sees_is_still_reported_with_a_position() {
    let f = Fixture::new();
    assert_eq!(
        f.err("command: [server]\nlimits: {timeout_s: 99999999999999999999}\n"),
        lines(&[&format!(
            "{P}:2:21: limits.timeout_s: invalid type: integer `99999999999999999999` as u128, expected i64"
        )])
    );
}

#[test]
fn pids_tmp_cpu_and_best_effort_limits() {
    let f = Fixture::new();
    let text = "command: [server]\nlimits: {pids: 64, tmp_mb: 32, cpu: 0.5, best_effort: true, output_kb: 8}\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            limits: Limits {
                pids: Some(64),
                tmp_mb: Some(32),
                cpu: Some(0.5),
                best_effort: true,
                output_kb: Some(8),
                ..Limits::default()
            },
            ..f.base(text)
        }
    );
    let text = "command: [server]\nlimits:\n  pids: 0\n  tmp_mb: -1\n  cpu: 0\n  output_kb: 0\n";
    assert_eq!(
        f.err(text),
        vec![
            "$T/proj/policy.yaml:3:9: limits.pids: 0 is out of range: must be between 1 and 65536 (processes and threads)".to_string(),
            "$T/proj/policy.yaml:4:11: limits.tmp_mb: -1 is out of range: must be between 1 and 1048576 (MiB, up to 1 TiB)".to_string(),
            "$T/proj/policy.yaml:5:8: limits.cpu: 0 is out of range: must be between 0.01 and 1024 (CPU cores, e.g. 0.5)".to_string(),
            "$T/proj/policy.yaml:6:14: limits.output_kb: 0 is out of range: must be between 1 and 1048576 (KiB, up to 1 GiB)".to_string(),
        ]
    );
    let text = "command: [server]\nlimits:\n  best_effort: 1\n";
    assert_eq!(
        f.err(text),
        vec!["$T/proj/policy.yaml:3:16: limits.best_effort: expected `true` or `false`, found an integer `1`".to_string()]
    );
}

#[test]
fn sandbox_landlock_min_abi() {
    let f = Fixture::new();
    let text = "command: [server]\nsandbox: {landlock_min_abi: 4}\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            sandbox: SandboxReq {
                landlock_min_abi: 4,
                ..SandboxReq::default()
            },
            ..f.base(text)
        }
    );
    assert_eq!(
        f.err("command: [server]\nsandbox:\n  landlock_min_abi: 0\n"),
        vec!["$T/proj/policy.yaml:3:21: sandbox.landlock_min_abi: 0 is out of range: must be between 1 and 64 (Landlock ABI version)".to_string()]
    );
    assert_eq!(
        f.err("command: [server]\nsandbox:\n  landlock: 4\n"),
        vec!["$T/proj/policy.yaml:3:3: sandbox.landlock: unknown key `landlock`, did you mean `landlock_min_abi`?".to_string()]
    );
}

// Reserved paths (F2): Warden's socket, state and config directories, the
// user's runtime directory and the system's socket directories.

#[test]
fn grants_that_expose_reserved_paths_are_refused() {
    let f = Fixture::new();
    let t = f.root.display().to_string();
    let text = format!(
        "command: [server]\nfilesystem:\n  read:\n    - {t}/run/warden\n    - {t}/run\n    - /proc/1\n    - /sys/kernel\n    - /tmp\n    - {t}/config\n  write:\n    - {t}/state/warden/audit\n"
    );
    let tail = "granting it, even read-only, hands the server what it holds (a Unix socket in a grant hands over its service: connect works on a read-only mount); grant a narrower path, or list";
    let rest = "in filesystem.dangerously_expose to grant it anyway";
    assert_eq!(
        f.err(&text),
        vec![
            format!("{P}:4:7: filesystem.read[0]: $T/run/warden is Warden's control socket directory; {tail} `$T/run/warden` {rest}"),
            format!("{P}:5:7: filesystem.read[1]: $T/run is the user's runtime directory ($XDG_RUNTIME_DIR), which holds the session's sockets (D-Bus, Wayland, PulseAudio, gpg-agent, Warden); {tail} `$T/run`, `$T/run/warden` {rest}"),
            format!("{P}:6:7: filesystem.read[2]: /proc/1 lies inside /proc (the host's /proc (the sandbox has its own): other processes, their environment and fds); {tail} `/proc/1` {rest}"),
            format!("{P}:7:7: filesystem.read[3]: /sys/kernel lies inside /sys (the host's kernel and device interface); {tail} `/sys/kernel` {rest}"),
            // The fixture lives in /tmp: so do its Warden directories.
            format!("{P}:8:7: filesystem.read[4]: /tmp is the shared temp directory, which holds other programs' sockets (X11, ssh-agent, Warden's fallback socket directory); the sandbox has a private /tmp; {tail} `/tmp`, `$T/run/warden`, `$T/state/warden`, `$T/config/warden`, `$T/run` {rest}"),
            format!("{P}:9:7: filesystem.read[5]: $T/config holds $T/config/warden (Warden's config directory (the profiles warden-shim --profile loads)); {tail} `$T/config/warden` {rest}"),
            format!("{P}:11:7: filesystem.write[0]: $T/state/warden/audit lies inside $T/state/warden (Warden's state directory (the audit store)); {tail} `$T/state/warden/audit` {rest}"),
        ]
    );
    // Control: grants next to them, and below the shared /tmp (where this
    // fixture lives), are fine.
    let text = format!(
        "command: [server]\nfilesystem:\n  read: [{t}/proj/data, {t}/opt]\n  write: [{t}/proj/output]\n"
    );
    assert_eq!(
        f.ok(&text),
        CompiledPolicy {
            read: vec![f.p("opt"), f.p("proj/data")],
            write: vec![f.p("proj/output")],
            cwd: f.p("proj/output"),
            ..f.base(&text)
        }
    );
}

#[test]
fn the_same_reserved_paths_are_refused_from_flags() {
    let f = Fixture::new();
    let overrides = Overrides {
        read: strings(&["/proc/1"]),
        write: strings(&[&f.p("run").display().to_string()]),
        ..Overrides::default()
    };
    let tail = "granting it, even read-only, hands the server what it holds (a Unix socket in a grant hands over its service: connect works on a read-only mount); grant a narrower path, or list";
    let rest = "in filesystem.dangerously_expose to grant it anyway";
    assert_eq!(
        f.err_with("command: [server]\n", &overrides),
        vec![
            format!("--write: $T/run is the user's runtime directory ($XDG_RUNTIME_DIR), which holds the session's sockets (D-Bus, Wayland, PulseAudio, gpg-agent, Warden); {tail} `$T/run`, `$T/run/warden` {rest}"),
            format!("--read: /proc/1 lies inside /proc (the host's /proc (the sandbox has its own): other processes, their environment and fds); {tail} `/proc/1` {rest}"),
        ]
    );
}

#[test]
fn dangerously_expose_names_reserved_paths_one_by_one() {
    let f = Fixture::new();
    let t = f.root.display().to_string();
    // The runtime directory holds the socket directory: naming only the
    // grant is not enough, the socket directory must be named too.
    let text = format!(
        "command: [server]\nfilesystem:\n  read: [{t}/run]\n  dangerously_expose: [{t}/run]\n"
    );
    assert_eq!(
        f.err(&text),
        vec![format!("{P}:3:10: filesystem.read[0]: $T/run holds $T/run/warden (Warden's control socket directory); granting it, even read-only, hands the server what it holds (a Unix socket in a grant hands over its service: connect works on a read-only mount); grant a narrower path, or list `$T/run/warden` in filesystem.dangerously_expose to grant it anyway")]
    );
    let text = format!(
        "command: [server]\nfilesystem:\n  read: [{t}/run]\n  dangerously_expose: [{t}/run, {t}/run/warden, {t}/proj/data]\n"
    );
    let got = f.ok(&text);
    let root = f.root.display().to_string();
    let warnings: Vec<String> = got
        .warnings
        .iter()
        .map(|w| w.replace(&root, "$T"))
        .collect();
    assert_eq!(
        CompiledPolicy {
            warnings: vec![],
            ..got
        },
        CompiledPolicy {
            read: vec![f.p("run")],
            exposed: vec![f.p("run"), f.p("run/warden")],
            ..f.base(&text)
        }
    );
    assert_eq!(
        warnings,
        vec![
            format!("{P}:3:10: filesystem.read[0]: dangerously exposed to the server: $T/run holds $T/run/warden (Warden's control socket directory)"),
            format!("{P}:3:10: filesystem.read[0]: dangerously exposed to the server: $T/run is the user's runtime directory ($XDG_RUNTIME_DIR), which holds the session's sockets (D-Bus, Wayland, PulseAudio, gpg-agent, Warden)"),
            // Positions count the real path's characters.
            format!("{P}:4:{}: filesystem.dangerously_expose[2]: $T/proj/data exposes nothing Warden refuses to grant (it is not a granted reserved path, nor one a grant holds); remove it", 43 + 2 * t.len()),
        ]
    );
}

#[test]
fn a_policy_inside_its_own_write_grant_is_refused() {
    let f = Fixture::new();
    assert_eq!(
        f.err("command: [server]\nfilesystem:\n  write: [\".\", ./output]\n"),
        vec![format!("{P}:3:11: filesystem.write[0]: the policy file $T/proj/policy.yaml lies inside this write grant ($T/proj): the server could rewrite its own policy for its next session; keep the policy outside the directories it grants for writing")]
    );
    // Control: a read grant of the same directory is fine.
    let text = "command: [server]\nfilesystem:\n  read: [\".\"]\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            read: vec![f.p("proj")],
            ..f.base(text)
        }
    );
}

#[test]
fn home_write_grants_need_allow_home_write_and_warn() {
    let f = Fixture::new();
    let msg = "a server that can write there can change what your shell, git, editors and Warden itself run next; grant only the directories the server needs, or set filesystem.allow_home_write: true";
    assert_eq!(
        f.err("command: [server]\nfilesystem:\n  write: [\"~\"]\n"),
        vec![format!(
            "{P}:3:11: filesystem.write[0]: $T/home is your home directory: {msg}"
        )]
    );
    let overrides = Overrides {
        write: strings(&[&f.p("home/..").display().to_string()]),
        ..Overrides::default()
    };
    let errors = f.err_with("command: [server]\n", &overrides);
    assert_eq!(
        errors.last().unwrap(),
        &format!("--write: $T holds your home directory $T/home: {msg}")
    );
    let text = "command: [server]\nfilesystem:\n  write: [\"~\"]\n  allow_home_write: true\n";
    let got = f.ok(text);
    assert_eq!(
        got,
        CompiledPolicy {
            write: vec![f.p("home")],
            cwd: f.p("home"),
            warnings: vec![format!(
                "{}:3:11: filesystem.write[0]: write grant {} is your home directory: the server can change what your shell, git, editors and Warden itself run next (filesystem.allow_home_write: true)",
                f.policy_path().display(),
                f.p("home").display()
            )],
            ..f.base(text)
        }
    );
    // Control: a directory inside home needs no opt-in and warns of nothing.
    let text = "command: [server]\nfilesystem:\n  write: [\"~/.npm\"]\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            write: vec![f.p("home/.npm")],
            cwd: f.p("home/.npm"),
            ..f.base(text)
        }
    );
}

#[test]
fn loader_and_warden_variables_are_refused_in_env_allow() {
    let f = Fixture::new();
    let overrides = Overrides {
        allow_env: strings(&["WARDEN_SOCKET"]),
        ..Overrides::default()
    };
    assert_eq!(
        f.err_with(
            "command: [server]\nenv:\n  allow: [LD_PRELOAD, GITHUB_TOKEN, GCONV_PATH]\n",
            &overrides
        ),
        vec![
            format!("{P}:3:11: env.allow[0]: `LD_PRELOAD` cannot be passed through: LD_* variables steer the dynamic loader (which libraries every program in the sandbox loads, and from where)"),
            format!("{P}:3:37: env.allow[2]: `GCONV_PATH` cannot be passed through: it makes glibc load shared objects (iconv modules) from the directory it names"),
            "--allow-env: `WARDEN_SOCKET` cannot be passed through: WARDEN_* variables configure Warden itself (its socket, its logs), not the server".to_string(),
        ]
    );
    // Control: ordinary names and TMPDIR pass.
    let text = "command: [server]\nenv:\n  allow: [GITHUB_TOKEN, TMPDIR]\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            env_allow: strings(&["GITHUB_TOKEN", "TMPDIR"]),
            ..f.base(text)
        }
    );
}

#[test]
fn best_effort_write_protection_is_compiled() {
    let f = Fixture::new();
    let text = "command: [server]\nsandbox:\n  best_effort_write_protection: true\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            sandbox: SandboxReq {
                best_effort_write_protection: true,
                ..SandboxReq::default()
            },
            ..f.base(text)
        }
    );
}

#[test]
fn allow_git_init_is_a_filesystem_boolean() {
    let f = Fixture::new();
    let text = "command: [server]\nfilesystem:\n  allow_git_init: true\n";
    let got = f.ok(text);
    assert_eq!(
        got,
        CompiledPolicy {
            allow_git_init: true,
            ..f.base(text)
        }
    );
    let errs = f.err("command: [server]\nfilesystem:\n  allow_git_init: yes please\n");
    assert!(
        errs.iter().any(|e| e.contains("filesystem.allow_git_init")),
        "{errs:?}"
    );
}

#[test]
fn approve_is_a_top_level_boolean_off_by_default() {
    let f = Fixture::new();
    let text = "command: [server]\napprove: true\n";
    assert_eq!(
        f.ok(text),
        CompiledPolicy {
            approve: true,
            ..f.base(text)
        }
    );
    assert!(!f.ok("command: [server]\n").approve);
    assert!(!f.ok("command: [server]\napprove:\n").approve);
    assert_eq!(
        f.err("command: [server]\napprove: yes\n"),
        lines(&[&format!(
            "{P}:2:10: approve: expected `true` or `false`, found a string `yes`"
        )])
    );
    // Only a flag of the shim, not a key.
    let errs = f.err("command: [server]\napprove_timeout: 30s\n");
    assert!(
        errs[0].contains("unknown key `approve_timeout`"),
        "{errs:?}"
    );
    // The compiled policy shows it only when on.
    let json = serde_json::to_value(f.ok("command: [server]\n")).unwrap();
    assert!(json.get("approve").is_none(), "{json}");
    let json = serde_json::to_value(f.ok(text)).unwrap();
    assert_eq!(json["approve"], true);
}

#[test]
fn docker_image_is_a_strict_reference() {
    let f = Fixture::new();
    let text = "command: [server]\nbackend: docker\ndocker:\n  image: registry.example:5000/team/srv:1.2\n";
    let p = f.ok(text);
    assert_eq!(p.backend, warden_core::policy::Backend::Docker);
    assert_eq!(
        p.docker_image.as_deref(),
        Some("registry.example:5000/team/srv:1.2")
    );
    for bad in ["--privileged", "a b", "", "x;y", "\u{e9}t\u{e9}"] {
        let text = format!("command: [server]\ndocker:\n  image: \"{bad}\"\n");
        let e = f.err(&text).join("\n");
        assert!(
            e.contains("docker.image") && e.contains("not a Docker image reference"),
            "{bad}: {e}"
        );
    }
    let e = f.err("command: [server]\ndocker:\n  tag: x\n").join("\n");
    assert!(e.contains("unknown key `tag`"), "{e}");
}

#[test]
fn mcp_tools_and_pin() {
    let f = Fixture::new();
    let text = "command: [server]\nmcp:\n  tools:\n    allow: [\"read_*\", echo]\n    deny: [\"read_secret*\"]\n  pin: enforce\n";
    let p = f.ok(text);
    assert_eq!(
        p.mcp,
        warden_core::policy::McpPolicy {
            allow: Some(strings(&["read_*", "echo"])),
            deny: strings(&["read_secret*"]),
            pin: warden_core::policy::PinMode::Enforce,
            explain_denials: false,
        }
    );
    assert!(p.mcp.gates());
    // Explaining denials alone gates the stream (the error answers are
    // edited) but filters nothing.
    let p = f.ok("command: [server]\nmcp:\n  explain_denials: true\n");
    assert!(p.mcp.explain_denials && p.mcp.gates() && !p.mcp.filters());
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["mcp"]["explain_denials"], true, "{json}");
    assert_eq!(
        f.err("command: [server]\nmcp:\n  explain_denials: yes please\n"),
        vec!["$T/proj/policy.yaml:3:20: mcp.explain_denials: expected `true` or `false`, found a string `yes please`".to_string()]
    );
    // The default: nothing gated, pins flagged.
    let p = f.ok("command: [server]\n");
    assert_eq!(p.mcp, Default::default());
    assert!(!p.mcp.gates());
    let json = serde_json::to_value(&p).unwrap();
    assert!(json.get("mcp").is_none(), "{json}");
    assert_eq!(
        f.err("command: [server]\nmcp:\n  tools:\n    deny: [\"\", \"a b\"]\n  pin: strict\n"),
        vec![
            "$T/proj/policy.yaml:4:12: mcp.tools.deny[0]: a tool name or pattern cannot be empty".to_string(),
            "$T/proj/policy.yaml:4:16: mcp.tools.deny[1]: `a b` holds ' ': tool names have no spaces or control characters".to_string(),
            "$T/proj/policy.yaml:5:8: mcp.pin: unknown pin mode `strict`: use `flag` (record changed tool definitions, the default), `enforce` (also withhold new and changed tools until a person accepts them with `wardenctl approve`) or `off`".to_string(),
        ]
    );
    let e = f
        .err("command: [server]\nmcp:\n  tool:\n    deny: [x]\n")
        .join("\n");
    assert!(
        e.contains("unknown key `tool`") && e.contains("tools"),
        "{e}"
    );
}

#[test]
fn audit_mcp_arguments() {
    let f = Fixture::new();
    assert!(
        f.ok("command: [server]\naudit:\n  mcp_arguments: true\n")
            .audit
            .mcp_arguments
    );
    assert!(!f.ok("command: [server]\n").audit.mcp_arguments);
    let e = f
        .err("command: [server]\naudit:\n  mcp_arguments: yes please\n")
        .join("\n");
    assert!(e.contains("audit.mcp_arguments"), "{e}");
}
