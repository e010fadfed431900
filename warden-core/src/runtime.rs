//! What every sandbox gets without a grant (the runtime): the system
//! directories bound read-only and the `/etc` entries the loader, libc and
//! TLS stacks need. `wardenctl init` leaves these out of the policies it
//! writes. The sandbox's own tables (`warden-sandbox`'s `rootfs`) are the
//! ones that apply; `e2e/tests/house_rules.rs` checks that these are the same.

/// Bound read-only from the host.
pub const RUNTIME_DIRS: &[&str] = &[
    "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin",
];

/// Entries of the host's `/etc` bound read-only into the sandbox's own `/etc`.
pub const RUNTIME_ETC: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "host.conf",
    "localtime",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
];

/// The sandbox's own file systems, never the host's: what is there is the
/// sandbox's (or the kernel's) whatever the host has.
pub const PRIVATE_DIRS: &[&str] = &["/proc", "/sys", "/dev", "/run", "/tmp"];
