//! The Linux constants the deny list is written with. On Linux they are
//! libc's. Elsewhere the list still has a use, the Docker backend's seccomp
//! profile for containers that run Linux (Docker Desktop's VM, of the
//! host's architecture), and the host's libc has other values or none
//! (`ENOSYS` is 78 on macOS, 38 on Linux), so they are Linux's own, for
//! x86_64 and aarch64; a test on Linux checks them against libc's.

#[cfg(target_os = "linux")]
pub(crate) use libc::{
    AF_INET, AF_INET6, AF_UNIX, CLONE_NEWCGROUP, CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS,
    CLONE_NEWPID, CLONE_NEWTIME, CLONE_NEWUSER, CLONE_NEWUTS, EAFNOSUPPORT, ENOSYS, EPERM,
    EPROTONOSUPPORT, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP, O_CREAT, O_DIRECTORY,
    O_TMPFILE, SOCK_DGRAM, SOCK_STREAM, S_ISGID, S_ISUID, TIOCLINUX, TIOCSETD, TIOCSTI,
};

#[cfg(not(target_os = "linux"))]
pub(crate) use own::*;

/// Linux's values (asm-generic, and x86_64's and aarch64's where they
/// differ).
#[cfg(any(test, not(target_os = "linux")))]
#[allow(dead_code)] // on Linux only the test reads them
mod own {
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    compile_error!(
        "the Linux constants of the seccomp deny list are written for x86_64 and aarch64"
    );

    pub(crate) const AF_UNIX: i32 = 1;
    pub(crate) const AF_INET: i32 = 2;
    pub(crate) const AF_INET6: i32 = 10;
    pub(crate) const CLONE_NEWTIME: i32 = 0x0000_0080;
    pub(crate) const CLONE_NEWNS: i32 = 0x0002_0000;
    pub(crate) const CLONE_NEWCGROUP: i32 = 0x0200_0000;
    pub(crate) const CLONE_NEWUTS: i32 = 0x0400_0000;
    pub(crate) const CLONE_NEWIPC: i32 = 0x0800_0000;
    pub(crate) const CLONE_NEWUSER: i32 = 0x1000_0000;
    pub(crate) const CLONE_NEWPID: i32 = 0x2000_0000;
    pub(crate) const CLONE_NEWNET: i32 = 0x4000_0000;
    pub(crate) const EPERM: i32 = 1;
    pub(crate) const ENOSYS: i32 = 38;
    pub(crate) const EPROTONOSUPPORT: i32 = 93;
    pub(crate) const EAFNOSUPPORT: i32 = 97;
    pub(crate) const IPPROTO_ICMP: i32 = 1;
    pub(crate) const IPPROTO_TCP: i32 = 6;
    pub(crate) const IPPROTO_UDP: i32 = 17;
    pub(crate) const IPPROTO_ICMPV6: i32 = 58;
    pub(crate) const O_CREAT: i32 = 0o100;
    #[cfg(target_arch = "x86_64")]
    pub(crate) const O_DIRECTORY: i32 = 0o200000;
    #[cfg(target_arch = "aarch64")]
    pub(crate) const O_DIRECTORY: i32 = 0o40000;
    /// `__O_TMPFILE | O_DIRECTORY`.
    pub(crate) const O_TMPFILE: i32 = 0o20000000 | O_DIRECTORY;
    pub(crate) const SOCK_STREAM: i32 = 1;
    pub(crate) const SOCK_DGRAM: i32 = 2;
    pub(crate) const S_ISUID: u32 = 0o4000;
    pub(crate) const S_ISGID: u32 = 0o2000;
    pub(crate) const TIOCSTI: u64 = 0x5412;
    pub(crate) const TIOCLINUX: u64 = 0x541C;
    pub(crate) const TIOCSETD: u64 = 0x5423;
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests {
    #[test]
    fn the_own_values_are_linuxs() {
        macro_rules! same {
            ($($c:ident),* $(,)?) => {
                $(assert_eq!(super::own::$c as i64, libc::$c as i64, stringify!($c));)*
            };
        }
        same!(
            AF_INET,
            AF_INET6,
            AF_UNIX,
            CLONE_NEWCGROUP,
            CLONE_NEWIPC,
            CLONE_NEWNET,
            CLONE_NEWNS,
            CLONE_NEWPID,
            CLONE_NEWTIME,
            CLONE_NEWUSER,
            CLONE_NEWUTS,
            EAFNOSUPPORT,
            ENOSYS,
            EPERM,
            EPROTONOSUPPORT,
            IPPROTO_ICMP,
            IPPROTO_ICMPV6,
            IPPROTO_TCP,
            IPPROTO_UDP,
            O_CREAT,
            O_DIRECTORY,
            O_TMPFILE,
            SOCK_DGRAM,
            SOCK_STREAM,
            S_ISGID,
            S_ISUID,
            TIOCLINUX,
            TIOCSETD,
            TIOCSTI,
        );
    }
}
