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
