//! Wire types of the wardend control API, package `warden.v1`.
//!
//! Only generated code lives here; conversions to domain types are in
//! `warden-core` and the binaries.
#![forbid(unsafe_code)]

pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("warden.v1");
}
