//! `warden-bridge`: the Docker backend's container entrypoint, a separate,
//! statically linked program (built by `warden-sandbox/build.rs`, embedded in
//! `wardend` as `warden_sandbox::bridge::BRIDGE`, bind-mounted read-only at
//! `/.warden/bridge`). It runs in any image: std only, no crates, no dynamic
//! loader and no libc from the image.
//!
//! ```text
//! /.warden/bridge SOCKET_PATH PORT -- PROGRAM [ARGS...]
//! ```
//!
//! 1. Listens on 127.0.0.1:PORT (TCP, SO_REUSEADDR, close-on-exec, backlog
//!    1024) in the container's network namespace, before any server code runs.
//! 2. Connects to the daemon's Unix socket SOCKET_PATH (bind-mounted from
//!    the host) and sends the listener with SCM_RIGHTS in one `sendmsg`
//!    carrying the one byte `L`.
//! 3. Waits for one byte: `K` is accepted; anything else, or EOF, is a
//!    refusal (exit 125, the program never runs).
//! 4. Closes the Unix socket and its own copy of the listener (the daemon
//!    now holds the only one), then execs PROGRAM with PATH lookup and the
//!    environment it was given.
//!
//! Exit codes, as a shell's: 125 usage or handoff failure, 126 PROGRAM
//! cannot run, 127 PROGRAM not found.
//!
//! The one raw call std has no stable wrapper for is `sendmsg` with
//! SCM_RIGHTS (plus `listen` again, to set the backlog: std's is 128); both
//! are declared here, for Linux glibc and musl on LP64 (x86_64, aarch64).
//! The layouts are checked at compile time below.

use std::ffi::{c_int, c_void, OsString};
use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{exit, Command};

/// The listener's backlog, as the native sandbox's.
const BACKLOG: c_int = 1024;

// Linux's values, the same on every architecture (asm-generic/socket.h).
const SOL_SOCKET: c_int = 1;
const SCM_RIGHTS: c_int = 1;
/// No SIGPIPE if the daemon has gone (std ignores it anyway; this says so).
const MSG_NOSIGNAL: c_int = 0x4000;

/// `struct iovec` (LP64: pointer, size_t).
#[repr(C)]
struct Iovec {
    iov_base: *mut c_void,
    iov_len: usize,
}

/// `struct msghdr` as glibc and musl lay it out on LP64 Linux: `socklen_t`
/// (u32) name length, then 4 bytes of padding (implicit under `repr(C)`);
/// `msg_iovlen` and `msg_controllen` are `size_t`. 56 bytes.
#[repr(C)]
struct Msghdr {
    msg_name: *mut c_void,
    msg_namelen: u32,
    msg_iov: *mut Iovec,
    msg_iovlen: usize,
    msg_control: *mut c_void,
    msg_controllen: usize,
    msg_flags: c_int,
}

/// `struct cmsghdr` (LP64: `size_t cmsg_len`, then level and type). 16 bytes.
#[repr(C)]
struct Cmsghdr {
    cmsg_len: usize,
    cmsg_level: c_int,
    cmsg_type: c_int,
}

/// The control buffer of one SCM_RIGHTS message with one fd, written out
/// instead of the CMSG_* macros: the header is 16 bytes, a multiple of
/// `CMSG_ALIGN`'s 8, so `CMSG_DATA` is at offset 16; `CMSG_LEN(4)` is 20 and
/// `CMSG_SPACE(4)` is 24, this struct's size (8-aligned, 4 bytes of tail
/// padding).
#[repr(C, align(8))]
struct OneFd {
    hdr: Cmsghdr,
    fd: c_int,
}

const CMSG_LEN_ONE_FD: usize = size_of::<Cmsghdr>() + size_of::<c_int>();

// The ABI assumptions, checked: a target where they do not hold fails to build.
const _: () = assert!(size_of::<usize>() == 8);
const _: () = assert!(size_of::<Iovec>() == 16);
const _: () = assert!(size_of::<Msghdr>() == 56);
const _: () = assert!(std::mem::offset_of!(Msghdr, msg_iov) == 16);
const _: () = assert!(size_of::<Cmsghdr>() == 16);
const _: () = assert!(std::mem::offset_of!(OneFd, fd) == 16);
const _: () = assert!(size_of::<OneFd>() == 24);
const _: () = assert!(CMSG_LEN_ONE_FD == 20);

extern "C" {
    fn sendmsg(fd: c_int, msg: *const Msghdr, flags: c_int) -> isize;
    fn listen(fd: c_int, backlog: c_int) -> c_int;
}

fn fail(code: i32, message: std::fmt::Arguments<'_>) -> ! {
    eprintln!("warden-bridge: {message}");
    exit(code)
}

fn usage() -> ! {
    fail(
        125,
        format_args!("usage: /.warden/bridge SOCKET_PATH PORT -- PROGRAM [ARGS...]"),
    )
}

/// Sends `fd` over `sock` with the one payload byte `L`.
fn send_listener(sock: &UnixStream, fd: c_int) -> io::Result<()> {
    let mut byte = *b"L";
    let mut iov = Iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = OneFd {
        hdr: Cmsghdr {
            cmsg_len: CMSG_LEN_ONE_FD,
            cmsg_level: SOL_SOCKET,
            cmsg_type: SCM_RIGHTS,
        },
        fd,
    };
    let msg = Msghdr {
        msg_name: std::ptr::null_mut(),
        msg_namelen: 0,
        msg_iov: &mut iov,
        msg_iovlen: 1,
        msg_control: (&mut control as *mut OneFd).cast(),
        msg_controllen: size_of::<OneFd>(),
        msg_flags: 0,
    };
    loop {
        // SAFETY: `msg` and what it points at (`iov`, `byte`, `control`) are
        // live locals of the sizes declared, laid out as the C ABI (checked
        // above); the kernel only reads them.
        let n = unsafe { sendmsg(sock.as_raw_fd(), &msg, MSG_NOSIGNAL) };
        match n {
            1 => return Ok(()),
            0 => return Err(io::Error::new(io::ErrorKind::WriteZero, "nothing sent")),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.len() < 5 || args[3].as_bytes() != b"--" {
        usage();
    }
    let socket_path = &args[1];
    let Some(port) = args[2].to_str().and_then(|p| p.parse::<u16>().ok()) else {
        usage();
    };
    let program = &args[4];
    let shown = program.to_string_lossy();

    // std's bind sets SO_REUSEADDR and SOCK_CLOEXEC and listens with 128.
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port)))
        .unwrap_or_else(|e| fail(125, format_args!("cannot listen on 127.0.0.1:{port}: {e}")));
    // SAFETY: a plain syscall on a socket we own; listen on a listening
    // socket only changes its backlog.
    if unsafe { listen(listener.as_raw_fd(), BACKLOG) } != 0 {
        let e = io::Error::last_os_error();
        fail(125, format_args!("cannot set the listener's backlog: {e}"));
    }

    let mut sock = UnixStream::connect(socket_path).unwrap_or_else(|e| {
        fail(
            125,
            format_args!("cannot connect to {}: {e}", socket_path.to_string_lossy()),
        )
    });
    if let Err(e) = send_listener(&sock, listener.as_raw_fd()) {
        fail(125, format_args!("cannot hand the egress listener over: {e}"));
    }
    let mut answer = [0u8; 1];
    let accepted = loop {
        match sock.read(&mut answer) {
            Ok(1) => break answer[0] == b'K',
            Ok(_) => break false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break false,
        }
    };
    if !accepted {
        fail(
            125,
            format_args!("the daemon refused the egress listener"),
        );
    }
    // The daemon holds the only listener from here on, and the server
    // cannot reach the daemon's socket: both are closed before it runs.
    drop(sock);
    drop(listener);

    // PATH lookup from this environment when PROGRAM has no `/` (std execs
    // with execvp when the environment is left as it is), SIGPIPE back to
    // its default.
    let e = Command::new(program).args(&args[5..]).exec();
    let code = if e.kind() == io::ErrorKind::NotFound { 127 } else { 126 };
    fail(code, format_args!("cannot run {shown}: {}", strerror(&e)))
}

/// The error as strerror(3) says it, without std's " (os error N)".
fn strerror(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}
