//! The shim's exit codes (DESIGN.md §4 item 6), as one typed enum.

/// How `warden-shim` exits. Converted to a process exit code in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShimExit {
    /// The server exited with this code.
    Code(u8),
    /// The server died by this signal: exit `128 + N`.
    Signal(i32),
    /// Warden ended the session on `limits.timeout_s`: exit 124.
    Timeout,
    /// Warden ended the session on a memory breach: exit 137.
    Memory,
    /// Warden's own error (bad policy, no daemon, sandbox setup failure): exit 125.
    WardenError,
}

pub const EXIT_TIMEOUT: u8 = 124;
pub const EXIT_WARDEN_ERROR: u8 = 125;
pub const EXIT_MEMORY: u8 = 137;

impl ShimExit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ShimExit::Code(c) => c,
            // Signals are 1..=64 on Linux; anything else is out of the 8-bit range
            // and is reported as Warden's own error rather than wrapped.
            ShimExit::Signal(s) if (1..=127).contains(&s) => 128 + s as u8,
            ShimExit::Signal(_) => EXIT_WARDEN_ERROR,
            ShimExit::Timeout => EXIT_TIMEOUT,
            ShimExit::Memory => EXIT_MEMORY,
            ShimExit::WardenError => EXIT_WARDEN_ERROR,
        }
    }

    /// From a server exit code as reported by the kernel (low 8 bits kept).
    pub fn from_code(code: i32) -> Self {
        ShimExit::Code((code & 0xff) as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(ShimExit::Code(0).code(), 0);
        assert_eq!(ShimExit::from_code(3).code(), 3);
        assert_eq!(ShimExit::from_code(256 + 7).code(), 7);
        assert_eq!(ShimExit::Signal(15).code(), 143);
        assert_eq!(ShimExit::Signal(9).code(), 137);
        assert_eq!(ShimExit::Signal(0).code(), 125);
        assert_eq!(ShimExit::Timeout.code(), 124);
        assert_eq!(ShimExit::Memory.code(), 137);
        assert_eq!(ShimExit::WardenError.code(), 125);
    }
}
