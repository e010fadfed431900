//! The user service (docs/install.md): socket activation for real
//! (`systemd-socket-activate` starts `wardend` on the first connection and
//! a shim session works through it; `READY=1`/`STOPPING=1`; the refusals of
//! sockets `wardend` must not serve), the generated units under
//! `systemd-analyze verify`, the launchd plist under Python's `plistlib`,
//! the AppArmor profile under `apparmor_parser`, and `wardenctl
//! install|uninstall` (dry runs against goldens; real runs against stand-in
//! `systemctl`/`launchctl` that record what they were asked).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_e2e::*;

fn require_deps() -> bool {
    std::env::var_os("WARDEN_REQUIRE_DEPS").is_some_and(|v| v == "1")
}

/// A tool the test needs: on `PATH`, else in `/usr/sbin` or `/sbin`
/// (`apparmor_parser`, which the unprivileged run's `PATH` leaves out).
/// Missing: a panic under `WARDEN_REQUIRE_DEPS=1` (CI installs it: `.ci/run`),
/// else `skipping:` and `None`.
fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = find_on_path(name).or_else(|| {
        ["/usr/sbin", "/sbin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if require_deps() {
            panic!("{name} not found (install the {package} package; WARDEN_REQUIRE_DEPS=1)");
        }
        println!("skipping: {name} not found (install the {package} package)");
    }
    found
}

/// `systemd-socket-activate -l SOCKET... wardend --state-dir STATE ARGS`,
/// with the env's variables passed by `-E` (it gives its child no other
/// environment), its output in a log file.
struct Activator {
    child: Option<Child>,
    log: PathBuf,
}

impl Activator {
    fn start(
        env: &TestEnv,
        listen: &[&Path],
        flags: &[&str],
        wardend_args: &[&str],
        extra: &[(&str, &str)],
        private: bool,
    ) -> Activator {
        let activate = tool("systemd-socket-activate", "systemd").expect("checked by the caller");
        for l in listen {
            let dir = l.parent().unwrap();
            std::fs::create_dir_all(dir).unwrap();
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let log = env
            .root
            .join(format!("activate.{}.log", std::process::id()));
        let log = unique(log);
        let out = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(activate);
        cmd.args(flags);
        for l in listen {
            cmd.arg("-l").arg(l);
        }
        let mut vars: Vec<(String, String)> = env
            .env_vars()
            .into_iter()
            .map(|(k, v)| (k, v.display().to_string()))
            .collect();
        vars.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
        if is_root() {
            vars.push(("WARDEN_DANGEROUSLY_RUN_SERVERS_AS_ROOT".into(), "1".into()));
        }
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        for (k, v) in vars {
            cmd.arg("-E").arg(format!("{k}={v}"));
        }
        cmd.arg(bin("wardend"))
            .arg("--state-dir")
            .arg(&env.state)
            .args(wardend_args)
            .current_dir(&env.root)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        let child = cmd.spawn().unwrap();
        let a = Activator {
            child: Some(child),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !listen.iter().all(|l| l.exists()) {
            assert!(
                Instant::now() < deadline,
                "systemd-socket-activate did not listen; its log:\n{}",
                a.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        if private {
            // As SocketMode=0600 makes it (systemd-socket-activate has no such option).
            for l in listen {
                std::fs::set_permissions(l, std::fs::Permissions::from_mode(0o600)).unwrap();
            }
        }
        a
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    fn exe(&self) -> PathBuf {
        std::fs::read_link(format!("/proc/{}/exe", self.pid())).unwrap_or_default()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for it to exit by itself.
    fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let child = self.child.as_mut().unwrap();
        let st = wait_timeout(child, timeout);
        st.unwrap_or_else(|| panic!("still running after {timeout:?}; log:\n{}", self.log()))
    }

    fn stop(&mut self) -> std::process::ExitStatus {
        send_signal(self.pid(), libc::SIGTERM);
        self.wait(Duration::from_secs(20))
    }
}

impl Drop for Activator {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if matches!(c.try_wait(), Ok(None)) {
                send_signal(c.id() as i32, libc::SIGTERM);
                if wait_timeout(&mut c, Duration::from_secs(5)).is_none() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
        }
    }
}

fn unique(p: PathBuf) -> PathBuf {
    let mut n = 0;
    loop {
        let candidate = PathBuf::from(format!("{}.{n}", p.display()));
        if !candidate.exists() {
            return candidate;
        }
        n += 1;
    }
}

/// The `wardend` processes started for `env` (by command line or environment).
fn daemons_of(env: &TestEnv) -> Vec<i32> {
    let root = env.root.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            exe.file_name().is_some_and(|n| n == "wardend")
                && String::from_utf8_lossy(&environ).contains(&root)
        })
        .collect()
}

/// The whole path: `systemd-socket-activate` listens on the default socket,
/// no `wardend` runs until a client connects; the shim (autostart allowed,
/// no `--socket`) connects and its session works; the daemon that served is
/// the activated one (no second daemon was autostarted beside it); it
/// refuses nothing it would refuse otherwise; and on SIGTERM it leaves the
/// socket it did not create in place.
#[test]
fn socket_activation_starts_wardend_on_first_connect_and_a_session_works() {
    if tool("systemd-socket-activate", "systemd").is_none() {
        return;
    }
    let env = TestEnv::new();
    let mut a = Activator::start(&env, &[&env.socket], &[], &[], &[], true);
    // Nothing answers yet but systemd-socket-activate itself.
    assert!(
        a.exe().ends_with("systemd-socket-activate"),
        "{:?}",
        a.exe()
    );
    assert!(daemons_of(&env).is_empty());

    let policy = env.minimal_policy();
    let mut shim = env.shim_default_socket([
        std::ffi::OsString::from("--policy"),
        policy.into(),
        "--".into(),
        fixture().into(),
    ]);
    shim.env_remove("WARDEN_SOCKET");
    let mut client = McpClient::spawn(shim);
    client.initialize();
    assert_eq!(
        client.tool_text("echo", json!({"text": "through the activated socket"})),
        "through the activated socket"
    );
    client.close_stdin();
    assert_eq!(
        client.wait_code(Duration::from_secs(20)),
        0,
        "{}",
        client.stderr()
    );

    // The process systemd-socket-activate became is the daemon, and the only one.
    assert!(a.exe().ends_with("wardend"), "{:?}\n{}", a.exe(), a.log());
    assert_eq!(daemons_of(&env), [a.pid()], "{}", a.log());
    let status = env.ctl_json(&["status"]);
    assert_eq!(status["pid"], json!(a.pid()), "{status}");
    assert_eq!(status["socket"], json!(env.socket), "{status}");
    assert!(
        a.log()
            .contains("serving the socket passed by the service manager"),
        "{}",
        a.log()
    );
    let starts: Vec<Value> = audit_records(&env)
        .into_iter()
        .filter(|r| r["type"] == "daemon" && r["action"] == "start")
        .collect();
    assert_eq!(starts.len(), 1, "{starts:?}");

    let st = a.stop();
    assert!(st.success(), "{st:?}\n{}", a.log());
    // systemd owns the socket: it stays for the next activation.
    let md = std::fs::symlink_metadata(&env.socket).expect("the socket is left in place");
    assert!(std::os::unix::fs::FileTypeExt::is_socket(&md.file_type()));
}

/// `READY=1` reaches the `NOTIFY_SOCKET` (a datagram socket bound here, as
/// systemd binds one) once the activated daemon serves, and `STOPPING=1` on
/// SIGTERM.
#[test]
fn an_activated_daemon_notifies_ready_and_stopping() {
    if tool("systemd-socket-activate", "systemd").is_none() {
        return;
    }
    let env = TestEnv::new();
    let notify = env.root.join("notify.sock");
    let sock = UnixDatagram::bind(&notify).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut a = Activator::start(
        &env,
        &[&env.socket],
        &[],
        &[],
        &[("NOTIFY_SOCKET", notify.to_str().unwrap())],
        true,
    );
    // The first connection starts it.
    let _first = UnixStream::connect(&env.socket).unwrap();
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("READY=1");
    assert_eq!(String::from_utf8_lossy(&buf[..n]).trim(), "READY=1");
    assert!(a.exe().ends_with("wardend"));
    let st = a.stop();
    assert!(st.success(), "{st:?}\n{}", a.log());
    let n = sock.recv(&mut buf).expect("STOPPING=1");
    assert_eq!(String::from_utf8_lossy(&buf[..n]).trim(), "STOPPING=1");
}

/// Runs an activation that must fail: connects once (or sends a datagram),
/// waits for `wardend` to exit 1 and returns its output.
fn failed_activation(
    env: &TestEnv,
    listen: &[&Path],
    flags: &[&str],
    wardend_args: &[&str],
    private: bool,
) -> String {
    let mut a = Activator::start(env, listen, flags, wardend_args, &[], private);
    if flags.contains(&"--datagram") {
        UnixDatagram::unbound()
            .unwrap()
            .send_to(b"x", listen[0])
            .unwrap();
    } else {
        let _c = UnixStream::connect(listen[0]).unwrap();
    }
    let st = a.wait(Duration::from_secs(20));
    let log = a.log();
    assert_eq!(st.code(), Some(1), "{log}");
    // Left by the activator (as systemd would keep it); the next case binds anew.
    for l in listen {
        let _ = std::fs::remove_file(l);
    }
    log
}

/// What an activated `wardend` refuses, each with the message that says
/// what to change: two sockets, a datagram socket, a `--socket` naming
/// another path, a socket others may open (SocketMode), a socket in a
/// directory that is not private. Control: the same `--socket` as the
/// activated path serves, and variables meant for another process are
/// ignored (the daemon binds its own socket).
#[test]
fn sockets_an_activated_daemon_refuses() {
    if tool("systemd-socket-activate", "systemd").is_none() {
        return;
    }
    let env = TestEnv::new();
    let second = env.runtime.join("warden/second.sock");
    let log = failed_activation(&env, &[&env.socket, &second], &[], &[], true);
    assert!(
        log.contains(
            "wardend: socket activation: the service manager passed 2 descriptors \
             (LISTEN_FDS=2); wardend takes exactly one listening socket"
        ),
        "{log}"
    );

    let log = failed_activation(&env, &[&env.socket], &["--datagram"], &[], true);
    assert!(
        log.contains("wardend: socket activation: fd 3 is a datagram socket, not a stream socket"),
        "{log}"
    );

    let other = env.runtime.join("warden/other.sock");
    let other_arg = other.to_str().unwrap().to_owned();
    let log = failed_activation(&env, &[&env.socket], &[], &["--socket", &other_arg], true);
    assert!(
        log.contains(&format!(
            "wardend: socket activation: the service manager passed {} but --socket names {}",
            env.socket.display(),
            other.display()
        )),
        "{log}"
    );
    assert!(!other.exists());

    let log = failed_activation(&env, &[&env.socket], &[], &[], false);
    assert!(
        log.contains("must be yours with mode 0600 (SocketMode=0600)")
            && log.contains("loose permissions"),
        "{log}"
    );

    let shared = env.mkdir("shared");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    let loose = shared.join("wardend.sock");
    let mut a = Activator::start(&env, &[&loose], &[], &[], &[], true);
    // Activator made the directory private; loosen it again.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _c = UnixStream::connect(&loose).unwrap();
    let st = a.wait(Duration::from_secs(20));
    assert_eq!(st.code(), Some(1), "{}", a.log());
    assert!(
        a.log().contains(&format!(
            "the socket's directory {} must be private to you",
            shared.display()
        )),
        "{}",
        a.log()
    );
    drop(a);

    // Control: --socket naming the activated path serves.
    let socket_arg = env.socket.to_str().unwrap().to_owned();
    let mut a = Activator::start(
        &env,
        &[&env.socket],
        &[],
        &["--socket", &socket_arg],
        &[],
        true,
    );
    let status = env.ctl_json(&["status"]);
    assert_eq!(status["pid"], json!(a.pid()), "{status}\n{}", a.log());
    assert!(a.stop().success(), "{}", a.log());

    // LISTEN_* for another process: not activated, the daemon binds its own.
    let own = env.runtime.join("own");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o700)).unwrap();
    let own_socket = own.join("wardend.sock");
    let mut cmd = Command::new(bin("wardend"));
    cmd.arg("--socket")
        .arg(&own_socket)
        .arg("--state-dir")
        .arg(&env.state);
    env.apply_env(&mut cmd);
    cmd.env("LISTEN_PID", "1")
        .env("LISTEN_FDS", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(&own_socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "wardend did not bind its own socket"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    send_signal(child.id() as i32, libc::SIGTERM);
    let st = wait_timeout(&mut child, Duration::from_secs(20)).unwrap();
    assert!(st.success(), "{st:?}");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.contains("LISTEN_FDS is set for another process: not socket-activated"),
        "{err}"
    );
    // Its own socket, which it removes.
    assert!(!own_socket.exists());
}

/// A directory of stand-in commands, first on `PATH`.
fn fakes(env: &TestEnv, scripts: &[(&str, &str)]) -> (PathBuf, String) {
    let dir = env.mkdir("fake-bin");
    for (name, body) in scripts {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", dir.display());
    (dir, path)
}

/// `systemctl` as it answers where no user manager runs (this machine, CI).
const NO_MANAGER: &str = "echo 'Failed to connect to bus: No medium found' >&2; exit 1";

/// `wardenctl ARGS` with the env's variables (no `--socket`), `PATH` set.
fn ctl(env: &TestEnv, path: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(bin("wardenctl"));
    cmd.args(args);
    env.apply_env(&mut cmd);
    cmd.env("PATH", path);
    let out = run(&mut cmd, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "wardenctl {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Output with this run's paths as placeholders, and the notes that depend
/// on who runs it and on the host's AppArmor left out.
fn placeholders(env: &TestEnv, text: &str) -> String {
    let wardend = bin("wardend").display().to_string();
    let uid = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    text.replace(&wardend, "{WARDEND}")
        .replace(&env.root.display().to_string(), "{ROOT}")
        .replace(&format!("gui/{uid}"), "gui/{UID}")
        .lines()
        .filter(|l| !l.starts_with("note: running as root") && !l.starts_with("note: AppArmor"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Every file under `dir`, relative.
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// `install --dry-run` prints exactly what it would write and run (golden,
/// with this run's paths as placeholders) and writes nothing, for both
/// platforms; `uninstall --dry-run` with nothing installed says so.
#[test]
fn install_dry_run_matches_its_golden_and_changes_nothing() {
    let env = TestEnv::new();
    let (_, path) = fakes(&env, &[("systemctl", NO_MANAGER)]);
    let before = files_under(&env.root);
    let out = ctl(&env, &path, &["install", "--dry-run"]);
    assert_eq!(
        placeholders(&env, &String::from_utf8_lossy(&out.stdout)),
        include_str!("golden/install-dry-run-linux.txt")
    );
    let out = ctl(
        &env,
        &path,
        &["install", "--dry-run", "--platform", "macos"],
    );
    assert_eq!(
        placeholders(&env, &String::from_utf8_lossy(&out.stdout)),
        include_str!("golden/install-dry-run-macos.txt")
    );
    let out = ctl(&env, &path, &["uninstall", "--dry-run"]);
    assert_eq!(
        placeholders(&env, &String::from_utf8_lossy(&out.stdout)),
        include_str!("golden/uninstall-dry-run-nothing.txt")
    );
    assert_eq!(files_under(&env.root), before, "a dry run wrote something");
    // The JSON form is the same plan.
    let out = ctl(&env, &path, &["install", "--dry-run", "--json"]);
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["action"], "install");
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["steps"][0]["step"], "write");
    assert_eq!(
        plan["steps"][0]["path"],
        json!(env.config.join("systemd/user/wardend.service"))
    );
}

/// With a user manager (a stand-in `systemctl` that records its calls),
/// install writes the units with this build's `wardend`, reloads, enables
/// and starts the socket; uninstall disables and stops both, removes exactly
/// the files install wrote, reloads, and keeps policies, the audit store and
/// other units. A second uninstall finds nothing to do.
#[test]
fn install_then_uninstall_with_a_user_manager() {
    let env = TestEnv::new();
    let calls = env.root.join("systemctl.calls");
    let (_, path) = fakes(
        &env,
        &[(
            "systemctl",
            &format!(
                "echo \"$*\" >> '{}'\ncase \"$*\" in\n  *show*) echo Version=252 ;;\n  \
                 *is-active*) exit 3 ;;\nesac\nexit 0",
                calls.display()
            ),
        )],
    );
    let units = env.config.join("systemd/user");
    std::fs::create_dir_all(&units).unwrap();
    std::fs::write(
        units.join("other.service"),
        "[Service]\nExecStart=/bin/true\n",
    )
    .unwrap();
    let policy = env.write("config/warden/policies/mine.yaml", "version: 1\n");
    let audit = env.write("state/warden/audit/audit.jsonl", "{}\n");

    let out = ctl(&env, &path, &["install"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let service = std::fs::read_to_string(units.join("wardend.service")).unwrap();
    assert!(
        service.contains(&format!("\nExecStart={}\n", bin("wardend").display())),
        "{service}"
    );
    assert!(std::fs::read_to_string(units.join("wardend.socket"))
        .unwrap()
        .contains("\nListenStream=%t/warden/wardend.sock\n"));
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap(),
        "--user show --property=Version\n--user is-active --quiet wardend.socket\n\
         --user daemon-reload\n--user enable wardend.socket\n--user start wardend.socket\n",
        "{stdout}"
    );
    assert!(
        stdout.contains("ran systemctl --user start wardend.socket"),
        "{stdout}"
    );

    std::fs::remove_file(&calls).unwrap();
    let out = ctl(&env, &path, &["uninstall"]);
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap(),
        "--user show --property=Version\n--user is-active --quiet wardend.socket\n\
         --user disable --now wardend.socket wardend.service\n--user daemon-reload\n",
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(files_under(&units), ["other.service"]);
    assert!(policy.is_file() && audit.is_file());

    std::fs::remove_file(&calls).unwrap();
    let out = ctl(&env, &path, &["uninstall"]);
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains("nothing to remove: no systemd user units written by wardenctl install"));
    // Probing only: nothing disabled or reloaded for files that are not there.
    assert!(!std::fs::read_to_string(&calls).unwrap().contains("disable"));
}

/// Without a user manager (as on this machine), install writes the units,
/// says so, and explains the autostart fallback; the units pass
/// `systemd-analyze verify --user` with the real binary's path, silently
/// (control: a unit with a typo makes it speak, and a missing ExecStart fails it).
#[test]
fn without_a_user_manager_install_writes_units_that_systemd_analyze_accepts() {
    let env = TestEnv::new();
    let (_, path) = fakes(&env, &[("systemctl", NO_MANAGER)]);
    let out = ctl(&env, &path, &["install"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("note: no user service manager answers (systemctl --user: Failed to connect to bus: No medium found): the units are written, not enabled or started"),
        "{stdout}"
    );
    assert!(stdout.contains("warden-shim starts it itself"), "{stdout}");
    let units = env.config.join("systemd/user");
    assert_eq!(files_under(&units), ["wardend.service", "wardend.socket"]);

    let Some(analyze) = tool("systemd-analyze", "systemd") else {
        return;
    };
    let verify = |dir: &Path| {
        let mut cmd = Command::new(&analyze);
        cmd.args(["verify", "--user", "--man=no"])
            .arg(dir.join("wardend.service"))
            .arg(dir.join("wardend.socket"))
            .env("XDG_RUNTIME_DIR", &env.runtime)
            .env("HOME", &env.home)
            // Its warnings at their usual level (debug would dump the units).
            .env_remove("SYSTEMD_LOG_LEVEL");
        run(&mut cmd, Duration::from_secs(60))
    };
    let out = verify(&units);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success() && said.trim().is_empty(), "{said}");

    // The checked-in units (packaging/systemd), with this build's wardend.
    let checked_in = env.mkdir("checked-in");
    std::fs::write(
        checked_in.join("wardend.service"),
        include_str!("../../packaging/systemd/wardend.service").replace(
            "/usr/local/bin/wardend",
            &bin("wardend").display().to_string(),
        ),
    )
    .unwrap();
    std::fs::write(
        checked_in.join("wardend.socket"),
        include_str!("../../packaging/systemd/wardend.socket"),
    )
    .unwrap();
    let out = verify(&checked_in);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success() && said.trim().is_empty(), "{said}");

    // Controls.
    let service = std::fs::read_to_string(units.join("wardend.service")).unwrap();
    std::fs::write(
        units.join("wardend.service"),
        service.replace("Type=notify", "Type=notfy"),
    )
    .unwrap();
    let out = verify(&units);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("notfy"),
        "a typo went unnoticed"
    );
    std::fs::write(
        units.join("wardend.service"),
        service.replace(
            &bin("wardend").display().to_string(),
            "/nonexistent/wardend",
        ),
    )
    .unwrap();
    assert!(
        !verify(&units).status.success(),
        "a missing ExecStart passed"
    );
}

/// The plist parses with Python's `plistlib` into the values it was made
/// from, both the checked-in one and the one install writes (with a
/// stand-in `launchctl` that records its calls: bootstrap into `gui/UID`;
/// uninstall boots it out and removes the file).
#[test]
fn the_launchd_plist_parses_with_plistlib_and_install_bootstraps_it() {
    let python = Path::new("/usr/bin/python3");
    let parse = |file: &Path| -> Value {
        let out = run(
            Command::new(python)
                .arg("-c")
                .arg(
                    "import json, plistlib, sys\n\
                 print(json.dumps(plistlib.load(open(sys.argv[1], 'rb'))))",
                )
                .arg(file),
            Duration::from_secs(30),
        );
        assert!(
            out.status.success(),
            "plistlib refused {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let env = TestEnv::new();
    let checked_in = env.write(
        "checked-in.plist",
        include_str!("../../packaging/launchd/dev.warden.wardend.plist"),
    );
    assert_eq!(
        parse(&checked_in),
        json!({
            "Label": "dev.warden.wardend",
            "ProgramArguments": ["/usr/local/bin/wardend"],
            "RunAtLoad": true,
            "KeepAlive": {"SuccessfulExit": false},
            "ExitTimeOut": 10,
        })
    );

    let calls = env.root.join("launchctl.calls");
    let (_, path) = fakes(
        &env,
        &[(
            "launchctl",
            &format!(
                "echo \"$*\" >> '{}'\ncase \"$1\" in print) exit 113 ;; esac\nexit 0",
                calls.display()
            ),
        )],
    );
    ctl(&env, &path, &["install", "--platform", "macos"]);
    let plist = env
        .home
        .join("Library/LaunchAgents/dev.warden.wardend.plist");
    assert_eq!(
        parse(&plist),
        json!({
            "Label": "dev.warden.wardend",
            "ProgramArguments": [bin("wardend")],
            "RunAtLoad": true,
            "KeepAlive": {"SuccessfulExit": false},
            "ExitTimeOut": 10,
            "StandardErrorPath": env.home.join("Library/Logs/wardend.log"),
        })
    );
    let uid = nix::unistd::getuid();
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap(),
        format!(
            "print gui/{uid}/dev.warden.wardend\nbootstrap gui/{uid} {}\n",
            plist.display()
        )
    );
    // Loaded now: uninstall boots it out and removes the plist.
    std::fs::write(
        env.root.join("fake-bin/launchctl"),
        format!("#!/bin/sh\necho \"$*\" >> '{}'\nexit 0\n", calls.display()),
    )
    .unwrap();
    std::fs::remove_file(&calls).unwrap();
    ctl(&env, &path, &["uninstall", "--platform", "macos"]);
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap(),
        format!("print gui/{uid}/dev.warden.wardend\nbootout gui/{uid}/dev.warden.wardend\n")
    );
    assert!(!plist.exists());
}

/// `apparmor_parser` accepts the profile (checked-in, and generated for a
/// path with spaces and pattern characters) in parse-only mode (`-Q`: no
/// kernel load, `-K`: no cache). Debian 12's parser (AppArmor 3.0) predates
/// the `userns` rule and ABI 4.0 that Ubuntu's restriction needs (AppArmor
/// 4.0), so there the profile is checked without exactly those two lines,
/// and in full where the parser is 4.0 or later. Control: a broken profile
/// is refused.
#[test]
fn apparmor_parser_accepts_the_profile() {
    let Some(parser) = tool("apparmor_parser", "apparmor") else {
        return;
    };
    let env = TestEnv::new();
    let version = run(
        Command::new(&parser).arg("--version"),
        Duration::from_secs(30),
    );
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    let major: u32 = version
        .split_whitespace()
        .find_map(|w| w.split('.').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no version in {version:?}"));
    let check = |name: &str, profile: &str| -> std::process::Output {
        let text = if major >= 4 {
            profile.to_owned()
        } else {
            let older = profile
                .replace("abi <abi/4.0>,\n", "abi <abi/3.0>,\n")
                .replace("\n  userns,\n", "\n");
            assert_eq!(
                older.lines().count() + 1,
                profile.lines().count(),
                "exactly the userns rule left out"
            );
            older
        };
        let file = env.write(name, text);
        run(
            Command::new(&parser).args(["-Q", "-K"]).arg(&file),
            Duration::from_secs(60),
        )
    };
    if major < 4 {
        println!(
            "note: {} predates the userns rule (AppArmor 4.0): checking the profile without it",
            version.lines().next().unwrap_or_default()
        );
    }
    let checked_in = include_str!("../../packaging/apparmor/wardend");
    assert!(checked_in.contains("\n  userns,\n") && checked_in.contains("abi <abi/4.0>,"));
    let out = check("checked-in", checked_in);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let odd = env.mkdir("my tools/[v2]*@{x}");
    let wardend = odd.join("wardend");
    std::fs::copy(bin("wardend"), &wardend).unwrap();
    let (_, path) = fakes(&env, &[]);
    let out = ctl(
        &env,
        &path,
        &[
            "install",
            "--print-apparmor-profile",
            "--wardend",
            wardend.to_str().unwrap(),
        ],
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    assert!(
        generated.contains(&format!(
            "profile wardend \"{}/my tools/\\[v2\\]\\*\\@\\{{x\\}}/wardend\" flags=(unconfined) {{",
            env.root.display()
        )),
        "{generated}"
    );
    let out = check("generated", &generated);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = check(
        "broken",
        &checked_in.replace("flags=(unconfined)", "flags=(unconfined) bogus"),
    );
    assert!(!out.status.success(), "a broken profile was accepted");
}

/// `wardenctl status` has the AppArmor row, judged by a trial run of the
/// daemon's own binary; on a kernel without the restriction it says so.
#[test]
fn status_reports_the_apparmor_user_namespace_restriction() {
    let env = TestEnv::new();
    let _d = env.start_daemon();
    let status = env.ctl_json(&["status"]);
    let row = status["host"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "apparmor_userns")
        .unwrap_or_else(|| panic!("no apparmor_userns row: {status}"))
        .clone();
    let detail = row["detail"].as_str().unwrap();
    match std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") {
        Err(_) => {
            assert_eq!(row["available"], true, "{row}");
            assert_eq!(
                detail,
                format!(
                    "no AppArmor user namespace restriction in this kernel: user namespaces \
                     work for {}",
                    bin("wardend").display()
                )
            );
        }
        Ok(v) if v.trim() == "0" => assert_eq!(row["available"], true, "{row}"),
        // Restricted: either wardend's profile is loaded or the row says how.
        Ok(_) => assert!(
            row["available"] == true || detail.contains("sudo apparmor_parser -r"),
            "{row}"
        ),
    }
}
