//! Landlock inside real sandboxes, driven through the `warden-sandbox-run` binary
//! as in `sandbox.rs` (same runner lookup, same skip rules; run as root and as an
//! unprivileged user with `run-unprivileged.sh`).
//!
//! The layer on its own (no namespaces, no mount layer) is tested in
//! `src/confine/landlock.rs` (`host_tests`). Here: the mounts and Landlock together keep
//! the grants, and inside the sandbox Landlock refuses things the mount layer
//! and file permissions would allow.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::{Path, PathBuf};
use std::process::Command;
use warden_sandbox::spec::{Layers, SandboxSpec};

mod common;
use common::{decided, kernel, runner, userns_available};

fn landlock_abi() -> Option<u32> {
    kernel().landlock_abi()
}

fn abi_or_skip() -> Option<u32> {
    let abi = landlock_abi();
    if abi.is_none() {
        eprintln!("skipping: this kernel offers no Landlock");
    }
    abi
}

/// `ro/` is a read grant, `rw/` a write grant; the home is private.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("warden-ll-")
            .tempdir()
            .unwrap();
        for d in ["ro", "rw", "home"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        std::fs::write(dir.path().join("ro/f"), "original").unwrap();
        Fixture { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn spec(&self, program: &str, argv: &[&str]) -> SandboxSpec {
        // From JSON, so that fields added later with `#[serde(default)]` need
        // no change here.
        let home = self.path("home");
        serde_json::from_value(serde_json::json!({
            "session_id": "l4ndl0ck5678",
            "program": program,
            "argv": argv.iter().map(|a| a.as_bytes()).collect::<Vec<_>>(),
            "env": [
                [b"PATH", b"/usr/bin:/bin"],
                [b"HOME", home.as_os_str().as_encoded_bytes()],
            ],
            "cwd": "/",
            "read": [self.path("ro")],
            "write": [self.path("rw")],
            "home": home,
            "uid": nix::unistd::geteuid().as_raw(),
            "gid": nix::unistd::getegid().as_raw(),
            "user": "tester",
            "tmp_size_mb": 16,
            // Decided when run.
            "layers": Layers::NONE,
        }))
        .unwrap()
    }

    fn sh_spec(&self, script: &str) -> SandboxSpec {
        self.spec("/bin/sh", &["sh", "-c", script])
    }

    /// Runs `spec` with the layers this kernel gives it: (exit code,
    /// stdout, stderr).
    fn run(&self, spec: &SandboxSpec) -> (i32, String, String) {
        self.run_exactly(&decided(spec))
    }

    /// Runs `spec` with the layers it has.
    fn run_exactly(&self, spec: &SandboxSpec) -> (i32, String, String) {
        let file = self.dir.path().join("spec.json");
        std::fs::write(&file, serde_json::to_vec(spec).unwrap()).unwrap();
        let out = Command::new(runner()).arg(&file).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, spec: &SandboxSpec) -> String {
        let (code, out, err) = self.run(spec);
        assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
        out
    }
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn writes_follow_the_grants() {
    if !userns_available() {
        return;
    }
    let f = Fixture::new();
    let script = format!(
        "echo t > /tmp/f && cat /tmp/f; \
         echo w > {rw}/new && cat {rw}/new; \
         mkdir {rw}/d && echo mkdir-rw; \
         echo h > \"$HOME/h\" && cat \"$HOME/h\"; \
         echo s > /dev/shm/s && cat /dev/shm/s; \
         cat {ro}/f; echo; \
         if (echo x > {ro}/f) 2>/dev/null; then echo WROTE-RO; fi; \
         if (: > {ro}/new) 2>/dev/null; then echo CREATED-RO; fi; \
         if mkdir {ro}/d 2>/dev/null; then echo MKDIR-RO; fi",
        rw = f.path("rw").display(),
        ro = f.path("ro").display(),
    );
    let out = f.ok(&f.sh_spec(&script));
    assert_eq!(
        lines(&out),
        ["t", "w", "mkdir-rw", "h", "s", "original"],
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(f.path("ro/f")).unwrap(), "original");
    assert!(!f.path("ro/new").exists() && !f.path("ro/d").exists());
    assert_eq!(std::fs::read_to_string(f.path("rw/new")).unwrap(), "w\n");
}

/// Inside the sandbox, operations that the mount layer and the file modes allow
/// are refused with EACCES: only Landlock says no to these.
#[test]
fn landlock_refuses_what_the_mount_layer_allows() {
    if !userns_available() {
        return;
    }
    let Some(abi) = abi_or_skip() else { return };
    let f = Fixture::new();
    // "/" is a 0755 tmpfs we own inside, listable as far as modes go, but
    // Landlock has no rule for it. /dev/urandom is a 0666 device bound without
    // MOUNT_ATTR_RDONLY; Landlock grants it read only. /usr is listable (rule).
    let script = "\
        [ -d / ] && echo root-exists; \
        ls /usr >/dev/null && echo ls-usr-ok; \
        ls / 2>&1 >/dev/null | grep -q 'Permission denied' && echo ls-root-eacces; \
        (echo x > /dev/urandom) 2>&1 | grep -q 'Permission denied' && echo urandom-write-eacces; \
        head -c 4 /dev/urandom | wc -c; \
        echo x > /dev/null && echo null-write-ok; \
        ls /proc/self/status >/dev/null && cat /proc/self/status | grep -q '^NoNewPrivs:.1' && echo proc-read-ok";
    let out = f.ok(&f.sh_spec(script));
    assert_eq!(
        lines(&out).iter().map(|l| l.trim()).collect::<Vec<_>>(),
        [
            "root-exists",
            "ls-usr-ok",
            "ls-root-eacces",
            "urandom-write-eacces",
            "4",
            "null-write-ok",
            "proc-read-ok"
        ],
        "{out}"
    );
    // The same listing as the same user on the host works: not a file mode issue.
    assert!(Command::new("ls")
        .arg("/")
        .output()
        .unwrap()
        .status
        .success());

    // TCP (ABI 4): with nothing listening in the sandbox's network namespace, a
    // connect is refused by the peer (ECONNREFUSED) unless Landlock refuses it
    // first (EACCES).
    let want = if abi >= 4 {
        "Permission denied"
    } else {
        "Connection refused"
    };
    let (code, out, err) = f.run(&f.spec(
        "/usr/bin/bash",
        &["bash", "-c", "echo > /dev/tcp/127.0.0.1/9"],
    ));
    assert_ne!(code, 0);
    assert!(err.contains(want), "ABI {abi}: stdout {out}\nstderr {err}");
}

/// Bind (ABI 4) from an ordinary program: python's socket.bind on the
/// sandbox's own loopback, which nothing but Landlock refuses.
#[test]
fn tcp_bind_is_refused_inside() {
    if !userns_available() {
        return;
    }
    let Some(abi) = abi_or_skip() else { return };
    if !Path::new("/usr/bin/python3").exists() {
        eprintln!("skipping: no /usr/bin/python3");
        return;
    }
    let f = Fixture::new();
    let code = "import socket, errno\n\
                s = socket.socket()\n\
                try:\n    s.bind(('127.0.0.1', 0)); print('bound')\n\
                except OSError as e:\n    print(errno.errorcode[e.errno])\n";
    let out = f.ok(&f.spec("/usr/bin/python3", &["python3", "-S", "-c", code]));
    let want = if abi >= 4 { "EACCES" } else { "bound" };
    assert_eq!(out.trim(), want, "ABI {abi}");
}

/// An abstract unix socket listening outside cannot be reached from inside.
/// Inside the sandbox the network namespace already gives the server its own
/// abstract namespace (ECONNREFUSED); Landlock's ABI 6 scoping (EPERM) is the
/// second layer, shown on its own in `src/confine/landlock.rs` `host_tests`.
#[test]
fn abstract_unix_socket_outside_is_unreachable() {
    if !userns_available() {
        return;
    }
    if !Path::new("/usr/bin/python3").exists() {
        eprintln!("skipping: no /usr/bin/python3");
        return;
    }
    use std::os::linux::net::SocketAddrExt;
    let name = format!("warden-ll-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let code = format!(
        "import socket, errno\n\
         s = socket.socket(socket.AF_UNIX)\n\
         try:\n    s.connect('\\0{name}'); print('connected')\n\
         except OSError as e:\n    print(errno.errorcode[e.errno])\n"
    );
    // Control: the same client outside connects.
    let host = Command::new("/usr/bin/python3")
        .args(["-S", "-c", &code])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&host.stdout).trim(), "connected");
    let f = Fixture::new();
    let out = f.ok(&f.spec("/usr/bin/python3", &["python3", "-S", "-c", &code]));
    assert!(
        ["ECONNREFUSED", "EPERM"].contains(&out.trim()),
        "inside: {out}"
    );
}

/// A process outside cannot be signalled from inside. The pid namespace already
/// hides it (ESRCH); Landlock's ABI 6 signal scoping (EPERM) is the second
/// layer, shown on its own in `src/confine/landlock.rs` `host_tests`.
#[test]
fn processes_outside_cannot_be_signalled() {
    if !userns_available() {
        return;
    }
    let mut sleep = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleep.id();
    // Control: from outside, it can.
    assert!(Command::new("kill")
        .args(["-0", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let f = Fixture::new();
    let out = f.ok(&f.sh_spec(&format!(
        "if kill -0 {pid} 2>/dev/null; then echo SIGNALLED; else echo refused; fi"
    )));
    let _ = sleep.kill();
    let _ = sleep.wait();
    assert_eq!(out.trim(), "refused");
}

#[test]
fn minimum_abi_is_enforced() {
    if !userns_available() {
        return;
    }
    let f = Fixture::new();
    let mut spec = f.sh_spec("echo ran");
    match landlock_abi() {
        Some(abi) => {
            spec.landlock_min_abi = abi.min(7);
            assert_eq!(f.ok(&spec), "ran\n");
            if abi < 7 {
                spec.landlock_min_abi = abi + 1;
                let (code, out, err) = f.run(&spec);
                assert_eq!(code, 125, "{out}");
                assert!(
                    err.contains(&format!(
                        "landlock ABI {} is required by the policy",
                        abi + 1
                    )) && err.contains(&format!("the kernel offers ABI {abi}")),
                    "{err}"
                );
            }
        }
        None => {
            spec.landlock_min_abi = 1;
            let (code, _, err) = f.run(&spec);
            assert_eq!(code, 125);
            assert!(err.contains("offers no landlock"), "{err}");
        }
    }
    // Beyond what this build knows: refused, never silently weakened.
    spec.landlock_min_abi = 99;
    let (code, out, err) = f.run(&spec);
    assert_eq!(code, 125, "{out}");
    assert!(
        err.contains("landlock ABI 99 is required by the policy"),
        "{err}"
    );
    assert!(!out.contains("ran"));
}

/// The daemon decides the layers from its probe; PID 1 applies them as given,
/// and refuses (fail closed, saying why) a Landlock ABI the kernel does not
/// offer instead of applying what the kernel has. The control: the layers as
/// decided for this kernel run.
#[test]
fn a_landlock_abi_the_kernel_lacks_is_refused() {
    if !userns_available() {
        return;
    }
    let f = Fixture::new();
    let spec = decided(&f.sh_spec("echo ran"));
    assert_eq!(f.run_exactly(&spec), (0, "ran\n".into(), String::new()));
    let mut above = spec.clone();
    let expect = match kernel().landlock {
        Ok(k) => {
            above.layers.landlock_abi = Some(k + 1);
            format!(
                "sandbox setup failed at landlock: the sandbox's layers ask for landlock ABI {}, \
                 the kernel offers ABI {k}",
                k + 1
            )
        }
        Err(_) => {
            above.layers.landlock_abi = Some(1);
            "sandbox setup failed at landlock: the sandbox's layers ask for landlock ABI 1, \
             the kernel offers no landlock"
                .into()
        }
    };
    let (code, out, err) = f.run_exactly(&above);
    assert_eq!(code, 125, "{out}");
    assert!(!out.contains("ran"), "{out}");
    assert!(err.contains(&expect), "{err}");
}
