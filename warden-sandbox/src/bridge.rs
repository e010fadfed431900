//! The Docker backend's container entrypoint, `bridge/main.rs` (its own
//! program, statically linked, built by `build.rs`): the bytes `wardend`
//! installs and bind-mounts at `/.warden/bridge`. The daemon's side of the
//! handoff is `wardend::backend::bridge`. Empty when the target is not Linux.

/// The static `warden-bridge` executable.
pub const BRIDGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/warden-bridge"));
