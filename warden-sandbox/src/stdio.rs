//! Moving bytes between the client's stdio (fds the shim passed to the daemon)
//! and the sandboxed server's pipes.
//!
//! One thread per direction. Each moves data with `splice(2)` (zero-copy; one
//! side is always a pipe) and falls back to read/write when the other side
//! cannot splice (a tty, an `O_APPEND` file). Reads wait in `poll(2)` together
//! with a cancel eventfd, so a pump can be stopped while its source is idle.
//! Writes block when the reader is slow: that is the backpressure that keeps a
//! flooding server from growing the daemon's memory (at most one pipe buffer
//! is in flight per direction).
//!
//! The fds received from the shim share their open file description with the
//! shim (and maybe with a terminal the user's shell also uses), so their flags
//! (`O_NONBLOCK`) are never changed here.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const CHUNK: usize = 1 << 16;

/// How long a pump polls without sleeping after its partner moved data.
const SPIN_WINDOW: Duration = Duration::from_micros(150);

fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// When a pump last moved data. The two directions of one session share
/// theirs: a request that just went in means a reply is likely within
/// microseconds, so the reply's pump polls briefly instead of sleeping. On
/// virtual machines, waking a sleeping thread on another CPU costs tens of
/// microseconds per hop; a bounded busy-poll removes that from the round trip
/// and costs nothing when traffic is idle.
#[derive(Debug, Default)]
pub struct Activity {
    last_ns: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        self.last_ns.store(now_ns(), Ordering::Relaxed);
    }

    fn recent(&self) -> bool {
        let last = self.last_ns.load(Ordering::Relaxed);
        last != 0 && now_ns().saturating_sub(last) < SPIN_WINDOW.as_nanos() as u64
    }
}

/// Which activity a pump reports, and which it watches to decide to spin.
#[derive(Debug, Clone, Default)]
pub struct SpinHint {
    pub mine: Option<Arc<Activity>>,
    pub partner: Option<Arc<Activity>>,
}

impl SpinHint {
    /// Hints for the two directions of one session: (inbound, outbound).
    pub fn pair() -> (SpinHint, SpinHint) {
        let a = Arc::new(Activity::default());
        let b = Arc::new(Activity::default());
        (
            SpinHint {
                mine: Some(a.clone()),
                partner: Some(b.clone()),
            },
            SpinHint {
                mine: Some(b),
                partner: Some(a),
            },
        )
    }
}

/// A running copy from `src` to `dst`.
pub struct Pump {
    name: &'static str,
    thread: Option<JoinHandle<io::Result<()>>>,
    cancel: Arc<OwnedFd>,
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
}

impl Pump {
    /// Starts copying until EOF on `src`, an error, or [`Pump::cancel`].
    /// Both fds are closed when the pump ends, which is how EOF travels on.
    pub fn start(name: &'static str, src: OwnedFd, dst: OwnedFd) -> io::Result<Pump> {
        Self::start_with(name, src, dst, SpinHint::default())
    }

    /// Like [`Pump::start`], with a [`SpinHint`] shared with the pump of the
    /// other direction.
    pub fn start_with(
        name: &'static str,
        src: OwnedFd,
        dst: OwnedFd,
        hint: SpinHint,
    ) -> io::Result<Pump> {
        // SAFETY: eventfd returns a new fd or -1.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: efd is a fresh fd we own.
        let cancel = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });
        let stop = Arc::new(AtomicBool::new(false));
        let bytes = Arc::new(AtomicU64::new(0));
        let thread = {
            let cancel = cancel.clone();
            let stop = stop.clone();
            let bytes = bytes.clone();
            std::thread::Builder::new()
                .name(format!("pump-{name}"))
                .spawn(move || copy(src, dst, &cancel, &stop, &bytes, &hint))?
        };
        Ok(Pump {
            name,
            thread: Some(thread),
            cancel,
            stop,
            bytes,
        })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Bytes moved so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn bytes_counter(&self) -> Arc<AtomicU64> {
        self.bytes.clone()
    }

    /// Asks the pump to stop at its next wait.
    pub fn cancel(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        unsafe {
            libc::write(
                self.cancel.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }

    /// Waits up to `timeout` for the pump to finish by itself (EOF on its
    /// source). Returns false if it is still running.
    pub fn wait_for(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while let Some(t) = &self.thread {
            if t.is_finished() {
                let _ = self.thread.take().map(|t| t.join());
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    /// Cancels the pump and waits for its thread unless it is blocked in a
    /// write to a reader that never reads (then it is left to finish when
    /// that reader goes away; it holds no lock and owns its fds).
    pub fn stop(mut self, grace: Duration) {
        self.cancel();
        if !self.wait_for(grace) {
            // Detach: dropping the JoinHandle lets the thread end on its own.
            self.thread.take();
        }
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.cancel();
        }
    }
}

enum Wait {
    Ready,
    Cancelled,
}

fn wait_fd(
    fd: RawFd,
    events: libc::c_short,
    cancel: &OwnedFd,
    stop: &AtomicBool,
) -> io::Result<Wait> {
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(Wait::Cancelled);
        }
        let mut fds = [
            libc::pollfd {
                fd,
                events,
                revents: 0,
            },
            libc::pollfd {
                fd: cancel.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: fds is a valid array of two pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[1].revents != 0 {
            return Ok(Wait::Cancelled);
        }
        if fds[0].revents != 0 {
            return Ok(Wait::Ready);
        }
    }
}

fn copy(
    src: OwnedFd,
    dst: OwnedFd,
    cancel: &OwnedFd,
    stop: &AtomicBool,
    bytes: &AtomicU64,
    hint: &SpinHint,
) -> io::Result<()> {
    let (s, d) = (src.as_raw_fd(), dst.as_raw_fd());
    let mut use_splice = true;
    let mut buf: Vec<u8> = Vec::new();
    loop {
        if hint.partner.as_ref().is_some_and(|p| p.recent()) {
            spin_until_readable(s, SPIN_WINDOW);
        }
        match wait_fd(s, libc::POLLIN, cancel, stop)? {
            Wait::Cancelled => return Ok(()),
            Wait::Ready => {}
        }
        if use_splice {
            // SAFETY: splice between two fds we hold; null offsets = current file positions.
            let n = unsafe {
                libc::splice(
                    s,
                    std::ptr::null_mut(),
                    d,
                    std::ptr::null_mut(),
                    CHUNK,
                    libc::SPLICE_F_MOVE,
                )
            };
            if n > 0 {
                bytes.fetch_add(n as u64, Ordering::Relaxed);
                if let Some(m) = &hint.mine {
                    m.touch();
                }
                continue;
            }
            if n == 0 {
                return Ok(()); // EOF
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                // Not spliceable on one side: copy through a buffer instead.
                Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EBADF) => {
                    use_splice = false;
                    buf = vec![0u8; CHUNK];
                }
                Some(libc::EPIPE) => return Ok(()),
                _ => return Err(e),
            }
        }
        // SAFETY: buf is CHUNK writable bytes.
        let n = unsafe { libc::read(s, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        if n == 0 {
            return Ok(());
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                _ => return Err(e),
            }
        }
        let mut off = 0usize;
        let n = n as usize;
        while off < n {
            // SAFETY: writing initialised bytes off..n of buf.
            let w = unsafe { libc::write(d, buf[off..n].as_ptr() as *const libc::c_void, n - off) };
            if w < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => {
                        if let Wait::Cancelled = wait_fd(d, libc::POLLOUT, cancel, stop)? {
                            return Ok(());
                        }
                        continue;
                    }
                    Some(libc::EPIPE) => return Ok(()),
                    _ => return Err(e),
                }
            }
            off += w as usize;
            bytes.fetch_add(w as u64, Ordering::Relaxed);
            if let Some(m) = &hint.mine {
                m.touch();
            }
        }
    }
}

/// Polls `fd` without sleeping for up to `window`; returns early once it is
/// readable (or hung up).
fn spin_until_readable(fd: RawFd, window: Duration) {
    let start = Instant::now();
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    while start.elapsed() < window {
        // SAFETY: one valid pollfd; timeout 0 never sleeps.
        if unsafe { libc::poll(&mut pfd, 1, 0) } != 0 {
            return;
        }
        // Yield rather than spin: a task that needs this CPU (the server
        // computing the reply) runs first, yet the CPU never goes idle.
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh fds that we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn copies_byte_exact_and_forwards_eof() {
        let (src_r, src_w) = pipe().unwrap();
        let (dst_r, dst_w) = pipe().unwrap();
        let mut pump = Pump::start("t", src_r, dst_w).unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let writer = {
            let data = data.clone();
            std::thread::spawn(move || {
                let mut f = std::fs::File::from(src_w);
                f.write_all(&data).unwrap();
            })
        };
        let mut out = Vec::new();
        std::fs::File::from(dst_r).read_to_end(&mut out).unwrap();
        writer.join().unwrap();
        assert!(pump.wait_for(Duration::from_secs(5)));
        assert_eq!(out.len(), data.len());
        assert!(out == data);
        assert_eq!(pump.bytes(), data.len() as u64);
    }

    #[test]
    fn cancel_stops_an_idle_pump() {
        let (src_r, _src_w) = pipe().unwrap();
        let (_dst_r, dst_w) = pipe().unwrap();
        let mut pump = Pump::start("idle", src_r, dst_w).unwrap();
        pump.cancel();
        assert!(pump.wait_for(Duration::from_secs(5)));
    }

    #[test]
    fn falls_back_when_splice_is_refused() {
        // A regular file opened O_APPEND refuses splice (EINVAL).
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("out");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let (src_r, src_w) = pipe().unwrap();
        let mut pump = Pump::start("append", src_r, OwnedFd::from(f)).unwrap();
        std::fs::File::from(src_w).write_all(b"abc\n").unwrap();
        assert!(pump.wait_for(Duration::from_secs(5)));
        assert_eq!(std::fs::read(&path).unwrap(), b"abc\n");
    }
}
