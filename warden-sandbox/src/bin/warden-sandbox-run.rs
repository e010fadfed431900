//! Debug driver: runs one sandbox from a `SandboxSpec` JSON file with this process's
//! own stdin/stdout/stderr, and exits with the server's code (128+N on signal N).
//! Setup errors go to stderr prefixed `warden-sandbox-run:` with exit code 125.
//!
//! A spec without `layers` gets what the daemon would give it on this kernel
//! (`Kernel::probe().layers(..)`); a spec with `layers` is run with exactly
//! those, so tests can ask for a layer the kernel lacks. Linux only (the
//! native sandbox); elsewhere it says so and exits 125.

#[cfg(target_os = "linux")]
use std::os::fd::AsFd;
#[cfg(target_os = "linux")]
use std::path::PathBuf;
#[cfg(target_os = "linux")]
use warden_sandbox::spec::{Layers, SandboxSpec};
#[cfg(target_os = "linux")]
use warden_sandbox::{init_entry_if_requested, ExitOutcome, Kernel, Sandbox};

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!(
        "warden-sandbox-run: the native sandbox needs Linux (namespaces, Landlock, seccomp); this is {}",
        std::env::consts::OS
    );
    std::process::exit(125)
}

#[cfg(target_os = "linux")]
fn main() {
    // Before anything else: this binary is also the sandbox init.
    init_entry_if_requested();
    std::process::exit(match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("warden-sandbox-run: {e}");
            125
        }
    })
}

#[cfg(target_os = "linux")]
fn run() -> Result<i32, String> {
    let path = std::env::args_os()
        .nth(1)
        .ok_or("usage: warden-sandbox-run SPEC.json")?;
    let text =
        std::fs::read(&path).map_err(|e| format!("{}: {e}", PathBuf::from(&path).display()))?;
    let mut json: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| format!("bad spec: {e}"))?;
    let decide = match json.as_object_mut() {
        Some(o) if !o.contains_key("layers") => {
            let none = serde_json::to_value(Layers::NONE).map_err(|e| format!("layers: {e}"))?;
            o.insert("layers".into(), none);
            true
        }
        _ => false,
    };
    let mut spec: SandboxSpec =
        serde_json::from_value(json).map_err(|e| format!("bad spec: {e}"))?;
    if decide {
        spec.layers = Kernel::probe().layers(&spec);
    }
    let dup = |fd: std::os::fd::BorrowedFd<'_>| {
        fd.try_clone_to_owned()
            .map_err(|e| format!("dup stdio: {e}"))
    };
    let stdio = [
        dup(std::io::stdin().as_fd())?,
        dup(std::io::stdout().as_fd())?,
        dup(std::io::stderr().as_fd())?,
    ];
    let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
    // Nobody reads the refused calls or file accesses here; they are
    // answered all the same.
    let sandbox = Sandbox::spawn(&exe, &spec, stdio)
        .map_err(|e| e.to_string())?
        .sandbox;
    if let Ok(p) = std::env::var("WARDEN_SANDBOX_RUN_PIDFILE") {
        std::fs::write(p, sandbox.pid().to_string()).map_err(|e| format!("pidfile: {e}"))?;
    }
    Ok(match sandbox.wait().map_err(|e| e.to_string())? {
        ExitOutcome::Code(c) => c,
        ExitOutcome::Signal(s) => 128 + s,
    })
}
