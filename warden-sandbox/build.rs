//! Builds `bridge/main.rs`, the Docker backend's container entrypoint, as a
//! separate, statically linked program in `OUT_DIR/warden-bridge`
//! (embedded by `src/bridge.rs`).
//!
//! It is compiled with the very `rustc` cargo uses for this crate (`RUSTC`,
//! with `--target TARGET`, and the linker cargo resolved), never through
//! `RUSTC_WRAPPER` or `RUSTC_WORKSPACE_WRAPPER`: under `cargo clippy` those
//! are clippy's driver, and the bridge is not a crate of the workspace.
//! `-C target-feature=+crt-static` links glibc statically on the gnu targets
//! (a `-static` link argument on a normal build does not: that binary
//! crashes at start). Off Linux the embedded file is empty.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=bridge/main.rs");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_else(|| panic!("no OUT_DIR")));
    let bridge = out.join("warden-bridge");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        std::fs::write(&bridge, b"")
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", bridge.display()));
        return;
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = std::env::var("TARGET").unwrap_or_else(|e| panic!("TARGET: {e}"));
    let mut cmd = Command::new(&rustc);
    cmd.args(["--edition", "2021", "--crate-type", "bin"])
        .args(["--crate-name", "warden_bridge"])
        .args(["--target", &target])
        .args([
            "-C",
            "opt-level=s",
            "-C",
            "panic=abort",
            "-C",
            "strip=symbols",
        ])
        .args(["-C", "target-feature=+crt-static", "-C", "codegen-units=1"])
        .arg("-o")
        .arg(&bridge)
        .arg("bridge/main.rs")
        // Nothing of the outer build's flags: they are for this crate.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS");
    if let Some(linker) = std::env::var_os("RUSTC_LINKER") {
        cmd.arg("-C").arg({
            let mut a = std::ffi::OsString::from("linker=");
            a.push(linker);
            a
        });
    }
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", rustc.to_string_lossy()));
    if !output.status.success() {
        panic!(
            "building bridge/main.rs failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
