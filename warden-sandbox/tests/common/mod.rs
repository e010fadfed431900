//! Shared by the integration tests that drive `warden-sandbox-run`.

use std::path::PathBuf;
use std::process::Command;

/// The debug runner: `$WARDEN_SANDBOX_RUN` (for copies of the binaries run by
/// another user), else the one Cargo built.
pub fn runner() -> PathBuf {
    std::env::var_os("WARDEN_SANDBOX_RUN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_warden-sandbox-run")))
}

/// True when this kernel lets us create a user namespace; otherwise the test
/// says why it skips.
pub fn userns_available() -> bool {
    let ok = Command::new("unshare")
        .args(["--user", "--map-current-user", "true"])
        .status()
        .map(|s| s.success())
        // No unshare(1): assume yes and let the test fail loudly if not.
        .unwrap_or(true);
    if !ok {
        eprintln!("skipping: unprivileged user namespaces are not available here");
    }
    ok
}

/// This kernel, probed once per test executable (as the daemon does once).
#[allow(dead_code)] // not every test file builds specs itself
pub fn kernel() -> &'static warden_sandbox::Kernel {
    static KERNEL: std::sync::OnceLock<warden_sandbox::Kernel> = std::sync::OnceLock::new();
    KERNEL.get_or_init(warden_sandbox::Kernel::probe)
}

/// `spec` with the layers this kernel gives it, as the daemon decides them
/// (`Kernel::layers`); whatever layers it had are replaced.
#[allow(dead_code)]
pub fn decided(spec: &warden_sandbox::spec::SandboxSpec) -> warden_sandbox::spec::SandboxSpec {
    let mut spec = spec.clone();
    spec.layers = kernel().layers(&spec);
    spec
}

/// [`warden_sandbox::Sandbox::spawn`] with the layers decided for `spec`.
#[allow(dead_code)]
pub fn spawn(
    exe: &std::path::Path,
    spec: &warden_sandbox::spec::SandboxSpec,
    stdio: [std::os::fd::OwnedFd; 3],
) -> Result<warden_sandbox::Spawned, warden_sandbox::SandboxError> {
    warden_sandbox::Sandbox::spawn(exe, &decided(spec), stdio)
}

/// A spec running `script` under `/bin/sh -c` with `PATH` only, `home` as
/// its home, the caller's ids, no grant and no layer (callers decide them).
#[allow(dead_code)]
pub fn sh_spec(home: std::path::PathBuf, script: &str) -> warden_sandbox::spec::SandboxSpec {
    use warden_sandbox::spec::{FileWatch, Layers, SandboxSpec};
    SandboxSpec {
        session_id: "t3st1234abcdef".into(),
        program: "/bin/sh".into(),
        argv: vec![b"sh".to_vec(), b"-c".to_vec(), script.as_bytes().to_vec()],
        env: vec![(b"PATH".to_vec(), b"/usr/bin:/bin".to_vec())],
        cwd: "/".into(),
        read: vec![],
        write: vec![],
        home,
        uid: nix::unistd::geteuid().as_raw(),
        gid: nix::unistd::getegid().as_raw(),
        user: "tester".into(),
        tmp_size_mb: 16,
        pids_max: None,
        landlock_min_abi: 0,
        proxy_port: None,
        resolver: false,
        cgroup: None,
        audit_files: FileWatch::Off,
        hold_files: false,
        warden_paths: vec![],
        hide: vec![],
        allow_git_init: false,
        dangerously_skip_confinement: false,
        layers: Layers::NONE,
    }
}

/// stdio for the library API: /dev/null in, a pipe out (its read end
/// returned), /dev/null err.
#[allow(dead_code)]
pub fn api_stdio() -> ([std::os::fd::OwnedFd; 3], std::os::fd::OwnedFd) {
    let null = || -> std::os::fd::OwnedFd {
        std::fs::File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .unwrap()
            .into()
    };
    let (r, w) = nix::unistd::pipe().unwrap();
    ([null(), w, null()], r)
}
