//! Sandbox backends other than the Linux one. The backend interface (what a
//! session asks of a sandbox, whatever the platform) will live here; for now
//! only the macOS Seatbelt profile generator exists.
pub mod seatbelt;
