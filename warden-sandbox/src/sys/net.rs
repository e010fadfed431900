//! The sandbox's network namespace: bringing its loopback device up (PID 1),
//! with the interface-flags ioctls `nix` does not wrap; and socket options
//! copied as raw bytes from one socket to another (transparent egress).

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

/// Copies the socket option `level`/`name` of `from` onto `to`, whatever its
/// type (an int, a `timeval`, a `linger`: at most 32 bytes). `Ok(false)`
/// when `from` has no such option (its family or type lacks it).
pub(crate) fn copy_sockopt(
    from: std::os::fd::BorrowedFd<'_>,
    to: std::os::fd::BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> Result<bool, Errno> {
    let mut buf = [0u8; 32];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: buf is writable for len bytes; the kernel writes at most len
    // and stores the length it wrote.
    let got = unsafe {
        libc::getsockopt(
            from.as_raw_fd(),
            level,
            name,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if got < 0 {
        return match Errno::last() {
            Errno::ENOPROTOOPT | Errno::EOPNOTSUPP | Errno::EINVAL => Ok(false),
            e => Err(e),
        };
    }
    let len = (len as usize).min(buf.len());
    // SAFETY: buf holds len bytes the kernel wrote for this very option.
    let set = unsafe {
        libc::setsockopt(
            to.as_raw_fd(),
            level,
            name,
            buf.as_ptr().cast(),
            len as libc::socklen_t,
        )
    };
    if set < 0 {
        return Err(Errno::last());
    }
    Ok(true)
}
