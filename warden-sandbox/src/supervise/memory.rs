//! Reading a notified caller's memory (`process_vm_readv`): the path
//! arguments of an observed call, and `openat2`'s `struct open_how`. Runs on
//! the notifier's threads while the caller waits; what it read is used only
//! once `SECCOMP_IOCTL_NOTIF_ID_VALID` says the caller still waits
//! ([`super::capture`]).

use nix::errno::Errno;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::{sysconf, Pid, SysconfVar};
use std::io::IoSliceMut;

fn page_size() -> usize {
    match sysconf(SysconfVar::PAGE_SIZE) {
        Ok(Some(p)) if p > 0 => p as usize,
        _ => 4096,
    }
}

/// Reads up to `buf.len()` bytes at `addr` in `pid`'s memory; returns how
/// many were read (fewer when an unmapped page follows).
/// A native-endian `u64` at `addr` in `pid`'s memory.
pub(crate) fn read_u64(pid: u32, addr: u64) -> Result<u64, Errno> {
    let mut b = [0u8; 8];
    match read_memory(pid, addr, &mut b)? {
        8 => Ok(u64::from_ne_bytes(b)),
        _ => Err(Errno::EFAULT),
    }
}

pub(crate) fn read_memory(pid: u32, addr: u64, buf: &mut [u8]) -> Result<usize, Errno> {
    if buf.is_empty() {
        return Ok(0);
    }
    // The remote address is only interpreted by the kernel in the other
    // process: a bad one is EFAULT, never a fault here.
    let remote = [RemoteIoVec {
        base: addr as usize,
        len: buf.len(),
    }];
    process_vm_readv(
        Pid::from_raw(pid as libc::pid_t),
        &mut [IoSliceMut::new(buf)],
        &remote,
    )
}

/// A NUL-terminated string at `addr` in `pid`'s memory, read one page at a
/// time (a string ending just before an unmapped page reads fine). At most
/// `max` bytes; `Ok((bytes, true))` when no NUL came within them (the kernel
/// would refuse such a path with `ENAMETOOLONG`).
pub(crate) fn read_cstring(pid: u32, addr: u64, max: usize) -> Result<(Vec<u8>, bool), Errno> {
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let page = page_size();
    let mut out = Vec::new();
    let mut at = addr;
    let mut buf = vec![0u8; page];
    while out.len() < max {
        let to_page_end = page - (at as usize % page);
        let want = to_page_end.min(max - out.len());
        let n = match read_memory(pid, at, &mut buf[..want]) {
            Ok(0) => return Err(Errno::EFAULT),
            Ok(n) => n,
            // A string running into an unmapped page: the kernel would fail
            // the call with EFAULT too.
            Err(e) => return Err(e),
        };
        if let Some(end) = buf[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Ok((out, false));
        }
        out.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    Ok((out, true))
}

#[cfg(test)]
#[allow(unsafe_code)] // maps, unmaps and forks to have memory to read
mod tests {
    use super::*;
    use crate::sys::fs::PATH_MAX;

    fn me() -> u32 {
        std::process::id()
    }

    #[test]
    fn reads_a_string_from_a_process() {
        let s = b"/home/ana/.ssh/id_rsa\0trailing".to_vec();
        let (got, long) = read_cstring(me(), s.as_ptr() as u64, PATH_MAX).unwrap();
        assert_eq!(
            (got.as_slice(), long),
            (&b"/home/ana/.ssh/id_rsa"[..], false)
        );
        // Empty string, NULL.
        let e = b"\0".to_vec();
        assert_eq!(
            read_cstring(me(), e.as_ptr() as u64, PATH_MAX).unwrap().0,
            b""
        );
        assert_eq!(read_cstring(me(), 0, PATH_MAX), Err(Errno::EFAULT));
    }

    /// Two pages, the second unmapped after filling the first: a string that
    /// ends right before the hole reads fine, one that runs into it is EFAULT
    /// (as the kernel's own copy would be), and one across two mapped pages
    /// is read whole.
    #[test]
    fn reads_page_by_page_and_stops_at_a_hole() {
        let page = page_size();
        // SAFETY: an anonymous private mapping of two pages, unmapped below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        // SAFETY: the mapping is ours and 2 pages long.
        let mem = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, 2 * page) };
        mem.fill(b'a');
        // Across the page boundary: starts 10 bytes before it.
        let start = page - 10;
        mem[page + 5] = 0;
        let (got, long) = read_cstring(me(), (base as u64) + start as u64, PATH_MAX).unwrap();
        assert_eq!((got.len(), long), (15, false));
        // No NUL within the limit: truncated, flagged.
        mem[page + 5] = b'a';
        let (got, long) = read_cstring(me(), base as u64, 100).unwrap();
        assert_eq!((got.len(), long), (100, true));
        assert_eq!(
            // SAFETY: unmapping the second page of our own mapping.
            unsafe { libc::munmap((base as usize + page) as *mut _, page) },
            0
        );
        mem[page - 1] = 0;
        let (got, _) = read_cstring(me(), (base as u64) + start as u64, PATH_MAX).unwrap();
        assert_eq!(got.len(), 9);
        mem[page - 1] = b'a';
        assert_eq!(
            read_cstring(me(), (base as u64) + start as u64, PATH_MAX),
            Err(Errno::EFAULT)
        );
        // SAFETY: the first page is still ours.
        unsafe { libc::munmap(base, page) };
    }

    /// Another process's memory: a forked child changes its copy of a buffer;
    /// reading the child's pid gives the child's bytes, not ours.
    #[test]
    fn reads_another_processs_memory() {
        let mut buf = *b"/parent/path\0\0\0\0";
        let (r, w) = nix::unistd::pipe().unwrap();
        let (r2, w2) = nix::unistd::pipe().unwrap();
        // SAFETY: the child only writes to its own buffer and pipes, then _exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                buf[..12].copy_from_slice(b"/child/path\0");
                let _ = nix::unistd::write(&w, b"x");
                let mut b = [0u8; 1];
                let _ = nix::unistd::read(&r2, &mut b);
                // SAFETY: leaving the forked child without running destructors.
                unsafe { libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                let mut b = [0u8; 1];
                nix::unistd::read(&r, &mut b).unwrap();
                let got = read_cstring(child.as_raw() as u32, buf.as_ptr() as u64, PATH_MAX);
                let _ = nix::unistd::write(&w2, b"x");
                nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(got.unwrap().0, b"/child/path");
                assert_eq!(&buf[..12], b"/parent/path");
            }
        }
    }
}
