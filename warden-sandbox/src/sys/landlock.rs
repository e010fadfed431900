//! Landlock's version call, the one Landlock call the `landlock` crate does
//! not offer (its `ABI` is deliberately not made from run-time detection):
//! the kernel probe and the ABI check before PID 1 builds the ruleset need
//! the number and the errno ([`crate::confine::landlock::probe`]).

use nix::errno::Errno;

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`:
/// `Ok(abi)`, or the errno (ENOSYS: not built in; EOPNOTSUPP: built in but
/// not enabled at boot).
pub(crate) fn abi_version() -> Result<u32, Errno> {
    /// `LANDLOCK_CREATE_RULESET_VERSION`.
    const VERSION: u32 = 1 << 0;
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns an integer.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            VERSION,
        )
    };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r as u32)
    }
}
