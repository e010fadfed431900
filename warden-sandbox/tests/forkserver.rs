//! The init role's fork server (`ForkServer`): launches through it are the
//! same sandboxes as launches that execute the init afresh, the launcher is
//! the caller's own child, nothing of the fork server or of another launch
//! reaches a sandbox, and a fork server that died is replaced.
//!
//! Run as root and as an unprivileged user, with `warden-sandbox-run` as the
//! init binary (`WARDEN_SANDBOX_RUN` for copies run by another user).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::io::Read;
use std::path::{Path, PathBuf};
use warden_sandbox::spec::{Layers, SandboxSpec};
use warden_sandbox::{ExitOutcome, ForkServer, Hooks, Sandbox, SandboxError};

mod common;
use common::{api_stdio as stdio, decided, runner, sh_spec, userns_available};

/// A spec running `script` under `sh -c`, with a private home in `dir`,
/// the layers this kernel gives it.
fn spec(dir: &Path, script: &str) -> SandboxSpec {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    decided(&sh_spec(home, script))
}

/// Runs `script` through the fork server (or, without one, by executing the
/// init afresh): (outcome, stdout). Reading stdout to EOF also shows that no
/// process outside the sandbox (the fork server) kept a copy of its pipe.
fn run(forks: Option<&ForkServer>, dir: &Path, script: &str) -> (ExitOutcome, String) {
    let (fds, out) = stdio();
    let spec = spec(dir, script);
    let spawned = match forks {
        Some(f) => Sandbox::spawn_forked(f, &spec, fds, Hooks::default(), || Ok(())),
        None => Sandbox::spawn_hooked(&runner(), &spec, fds, Hooks::default()),
    }
    .unwrap();
    let mut text = String::new();
    std::fs::File::from(out).read_to_string(&mut text).unwrap();
    (spawned.sandbox.wait().unwrap(), text)
}

/// What a sandbox shows of itself: its pid (in its own pid namespace), its open fds,
/// whether a host path exists, its environment.
const INTROSPECT: &str = "echo pid=$$; ls /proc/self/fd | tr '\\n' ' '; echo; \
     test -e HOSTPATH && echo host-visible || echo host-absent; env | sort; exit 7";

#[test]
fn a_forked_launch_is_the_same_sandbox_as_an_executed_one() {
    if !userns_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("hostfile");
    std::fs::write(&host, "host").unwrap();
    let script = INTROSPECT.replace("HOSTPATH", &host.to_string_lossy());
    let forks = ForkServer::new(&runner());
    let forked = run(Some(&forks), dir.path(), &script);
    // Control: the same spec with the init executed afresh.
    let executed = run(None, dir.path(), &script);
    assert_eq!(forked, executed);
    assert_eq!(forked.0, ExitOutcome::Code(7));
    assert!(forked.1.contains("host-absent"), "{}", forked.1);
    // sh's fds and ls's directory: nothing of the fork server's.
    assert!(forked.1.contains("\n0 1 2 3 \n"), "{}", forked.1);
}

/// The parent of a live process.
fn ppid(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name's closing parenthesis: state, then ppid.
    stat.rsplit(") ")
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn one_fork_server_serves_many_launches_and_its_launchers_are_our_children() {
    if !userns_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let forks = ForkServer::new(&runner());
    forks.warm().unwrap();
    let server = forks.pid().unwrap();
    for code in 0..5 {
        // `sleep` keeps the sandbox up while its parents are looked at.
        let (fds, _out) = stdio();
        let spawned = Sandbox::spawn_forked(
            &forks,
            &spec(dir.path(), &format!("sleep 0.2; exit {code}")),
            fds,
            Hooks::default(),
            || Ok(()),
        )
        .unwrap();
        // PID 1's parent is the launcher, whose parent is this process,
        // not the fork server.
        let launcher = ppid(spawned.sandbox.pid());
        assert_eq!(ppid(launcher), std::process::id());
        assert_eq!(spawned.sandbox.wait().unwrap(), ExitOutcome::Code(code));
    }
    assert_eq!(
        forks.pid(),
        Some(server),
        "one fork server for all launches"
    );
}

#[test]
fn concurrent_launches_each_get_their_own_stdio() {
    if !userns_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let forks = std::sync::Arc::new(ForkServer::new(&runner()));
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let forks = forks.clone();
            let dir: PathBuf = dir.path().join(format!("d{i}"));
            std::fs::create_dir(&dir).unwrap();
            std::thread::spawn(move || run(Some(&forks), &dir, &format!("echo launch-{i}")))
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        let (outcome, out) = t.join().unwrap();
        assert_eq!(outcome, ExitOutcome::Code(0));
        assert_eq!(out, format!("launch-{i}\n"));
    }
}

#[test]
fn a_fork_server_that_died_is_replaced_at_the_next_launch() {
    if !userns_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let forks = ForkServer::new(&runner());
    forks.warm().unwrap();
    let first = forks.pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert_eq!(run(Some(&forks), dir.path(), "echo ok").1, "ok\n");
    let second = forks.pid().unwrap();
    assert_ne!(second, first);
    // The dead one was reaped, not left a zombie of ours.
    assert!(!Path::new(&format!("/proc/{first}")).exists());
}

#[test]
fn a_binary_without_the_role_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let forks = ForkServer::new(Path::new("/bin/true"));
    let (fds, _out) = stdio();
    let err = match Sandbox::spawn_forked(
        &forks,
        &spec(dir.path(), "true"),
        fds,
        Hooks::default(),
        || Ok(()),
    ) {
        Err(e) => e,
        Ok(_) => panic!("/bin/true is no fork server"),
    };
    assert!(matches!(err, SandboxError::Start { .. }), "{err:?}");
    assert!(err.to_string().contains("/bin/true"), "{err}");
}

#[test]
fn dropping_the_fork_server_ends_it() {
    let forks = ForkServer::new(&runner());
    forks.warm().unwrap();
    let pid = forks.pid().unwrap();
    drop(forks);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
}

/// A spec whose server leaves a marker in a write grant (`dir/out`). No
/// seccomp layer: with user notification the server's `execve` would wait
/// for the caller's notifier, which the launch starts only after the gate,
/// and so hide whether PID 1 itself waits for the release.
fn marker_spec(dir: &Path) -> (SandboxSpec, PathBuf) {
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let marker = out.join("ran");
    let mut spec = spec(dir, &format!("echo ran > {}", marker.display()));
    spec.write = vec![out];
    spec.layers = Layers::NONE;
    (spec, marker)
}

#[test]
fn the_server_starts_only_once_the_gate_releases_it() {
    if !userns_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (spec, marker) = marker_spec(dir.path());
    let forks = ForkServer::new(&runner());
    let (fds, _out) = stdio();
    let spawned = Sandbox::spawn_forked(&forks, &spec, fds, Hooks::default(), || {
        // The sandbox is being built meanwhile; its server must not run
        // until this returns (without the gate it would have written the
        // marker long before the time is up).
        std::thread::sleep(std::time::Duration::from_millis(500));
        assert!(!marker.exists(), "the server ran before it was released");
        Ok(())
    })
    .unwrap();
    assert_eq!(spawned.sandbox.wait().unwrap(), ExitOutcome::Code(0));
    assert!(marker.exists(), "released, the server ran");
}

#[test]
fn a_gate_that_fails_ends_the_launch_before_the_server_runs() {
    if !userns_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (spec, marker) = marker_spec(dir.path());
    let forks = ForkServer::new(&runner());
    let (fds, out) = stdio();
    let err = match Sandbox::spawn_forked(&forks, &spec, fds, Hooks::default(), || {
        // Failing late: a sandbox that did not wait would have run by now.
        std::thread::sleep(std::time::Duration::from_millis(500));
        Err(std::io::Error::from_raw_os_error(libc::EIO))
    }) {
        Err(e) => e,
        Ok(_) => panic!("a refused release started the sandbox"),
    };
    assert!(matches!(err, SandboxError::Release(_)), "{err:?}");
    assert!(err.to_string().contains("not started"), "{err}");
    // Nothing of the sandbox holds its stdout any more, and nothing ran.
    let mut rest = String::new();
    std::fs::File::from(out).read_to_string(&mut rest).unwrap();
    assert!(
        !marker.exists(),
        "the server ran although its release failed"
    );
}

#[test]
fn a_setup_failure_before_the_release_is_reported_as_itself() {
    if !userns_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path(), "true");
    spec.cwd = "/nonexistent-inside".into();
    let forks = ForkServer::new(&runner());
    let (fds, _out) = stdio();
    // The gate takes its time: the sandbox has failed and exited before the
    // release is sent, which then finds the socket closed.
    let err = match Sandbox::spawn_forked(&forks, &spec, fds, Hooks::default(), || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        Ok(())
    }) {
        Err(e) => e,
        Ok(_) => panic!("a sandbox without its cwd started"),
    };
    assert!(matches!(err, SandboxError::Setup { .. }), "{err:?}");
    assert!(err.to_string().contains("nonexistent-inside"), "{err}");
}
