//! The sandbox's network namespace: bringing its loopback device up (PID 1),
//! with the interface-flags ioctls `nix` does not wrap.

use nix::errno::Errno;
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
use std::os::fd::AsRawFd;

/// Brings `lo` up: the new network namespace has only a loopback device, down.
pub(crate) fn loopback_up() -> Result<(), Errno> {
    #[repr(C)]
    struct IfReqFlags {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    let s = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let mut req = IfReqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: req is a valid, 40-byte struct ifreq with the flags member filled/read.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(Errno::last());
    }
    req.flags |= libc::IFF_UP as libc::c_short;
    // SAFETY: as above.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}
