//! Wire types of the wardend control API, package `warden.v1`.
//!
//! Generated code, plus the one part of the wire that is not gRPC: the stdio
//! preamble ([`STDIO_PREAMBLE`]). Conversions to domain types are in
//! `warden-core` and the binaries.
#![forbid(unsafe_code)]

/// The first bytes of a connection that carries the shim's stdin, stdout and
/// stderr (attached as SCM_RIGHTS to these bytes, [`STDIO_FDS`] of them)
/// before its gRPC traffic. gRPC (HTTP/2) connections start with
/// `PRI * HTTP/2.0`, so the two cannot be confused.
pub const STDIO_PREAMBLE: &[u8; 8] = b"WARDFD01";

/// The fds attached to the preamble: stdin, stdout, stderr.
pub const STDIO_FDS: usize = 3;

pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("warden.v1");
}
