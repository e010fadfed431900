//! Receiving file descriptors over Unix sockets (SCM_RIGHTS): the sandbox's
//! control socket (PID 1 → daemon: the pidfd, the seccomp listener, the proxy
//! listener) and the daemon's side of the stdio preamble
//! (`STDIO_PREAMBLE` in `warden-proto`: the
//! shim hands its own stdin, stdout and stderr to the daemon at the start of
//! its connection, so the daemon can move bytes between them and the
//! sandboxed server's pipes without the sandbox ever holding a host fd).
//! Taking ownership of a received fd is the one step no safe wrapper offers
//! (`nix`'s `recvmsg` does not hand out the fds of a message whose control
//! data was truncated, so they would stay open unowned): `recvmsg` stays
//! raw here. The shim's sending side is safe `nix` in `warden-client`.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Most fds accepted in one message.
pub(crate) const MAX_FDS: usize = 3;

/// One `recvmsg` into `buf`, collecting up to `MAX_FDS` (3) fds (received
/// close-on-exec). Returns the bytes read and the fds. With `nonblocking`,
/// `WouldBlock` is returned instead of waiting. A message with more fds than
/// fit is an error (the kernel closes the excess; we close the rest).
pub fn recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    nonblocking: bool,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    recv_with_up_to(sock, buf, nonblocking, MAX_FDS)
}

/// [`recv_with_fds`] taking up to `max` fds (the init role's fork server
/// takes a launch's stdio and its control socket in one message).
pub(crate) fn recv_with_up_to(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    nonblocking: bool,
    max: usize,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE((max * mem::size_of::<RawFd>()) as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: plain data, pointers below outlive the call.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    // Close-on-exec as they arrive where the kernel can; elsewhere (macOS)
    // set just after, below.
    #[cfg(any(target_os = "linux", target_os = "freebsd"))]
    let mut flags = libc::MSG_CMSG_CLOEXEC;
    #[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
    let mut flags = 0;
    if nonblocking {
        flags |= libc::MSG_DONTWAIT;
    }
    let n = loop {
        // SAFETY: msg points at live buffers of the declared sizes.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, flags) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        break n as usize;
    };
    let mut fds = Vec::new();
    // SAFETY: walking the control buffer the kernel filled, within msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                let count = len / mem::size_of::<RawFd>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned((data as *const RawFd).add(i));
                    // The kernel installed this fd for us: we own it now.
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
    for fd in &fds {
        use std::os::fd::AsFd;
        nix::fcntl::fcntl(
            fd.as_fd(),
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )?;
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "too many file descriptors in one message",
        ));
    }
    Ok((n, fds))
}

/// Reads without consuming (MSG_PEEK | MSG_DONTWAIT).
pub fn peek(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    use nix::sys::socket::{recv, MsgFlags};
    loop {
        match recv(
            sock.as_raw_fd(),
            buf,
            MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    const HEAD: &[u8; 8] = b"WARDFD01";

    fn send_with_fds(a: &UnixStream, fds: &[std::os::fd::RawFd]) {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
        let cmsg = [ControlMessage::ScmRights(fds)];
        let iov = [std::io::IoSlice::new(HEAD)];
        let n = sendmsg::<()>(a.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None).unwrap();
        assert_eq!(n, HEAD.len());
    }

    #[test]
    fn fds_cross_a_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut r, mut w) = std::io::pipe().unwrap();
        send_with_fds(&a, &[w.as_raw_fd(), r.as_raw_fd()]);
        let mut head = [0u8; 8];
        assert_eq!(peek(b.as_fd(), &mut head).unwrap(), 8);
        assert_eq!(&head, HEAD);
        let mut buf = [0u8; 8];
        let (n, fds) = recv_with_fds(b.as_fd(), &mut buf, false).unwrap();
        assert_eq!((n, &buf), (8, HEAD));
        assert_eq!(fds.len(), 2);
        let mut w2 = std::fs::File::from(fds.into_iter().next().unwrap());
        w2.write_all(b"hello").unwrap();
        drop(w2);
        w.flush().unwrap();
        drop(w);
        let mut s = String::new();
        r.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
    }
}
