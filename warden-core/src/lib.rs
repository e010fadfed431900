//! Warden's domain types, shared by the daemon, the shim and the CLI.
//!
//! - [`policy`]: the YAML policy schema (v1), its strict parser and the compiled,
//!   always-valid [`policy::CompiledPolicy`].
//! - [`paths`]: where the socket, state and profiles live for a user.
//! - [`exit`]: the shim's exit codes.
//! - [`runtime`]: what every sandbox gets without a grant.
//! - [`shown`]: text a server chose, made safe to show a person.
#![forbid(unsafe_code)]

pub mod duration;
pub mod exit;
pub mod paths;
pub mod policy;
pub mod runtime;
pub mod shown;
