//! What runs on the daemon's threads to watch a sandbox.
pub mod files;
pub(crate) mod guard;
pub mod notify;
pub(crate) mod queue;
