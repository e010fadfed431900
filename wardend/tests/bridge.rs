//! The Docker backend's egress bridge, on the host (no Docker): the
//! embedded program is a static ELF, its installation, and the handoff end
//! to end (the real bridge and the real `receive`), with the refusals on
//! both sides.

// The helpers below are test code too: a failed set-up is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use wardend::backend::bridge::{self, BRIDGE};

const WAIT: Duration = Duration::from_secs(10);
const PT_LOAD: u32 = 1;
const PT_INTERP: u32 = 3;

/// The `p_type` of every program header of a 64-bit little-endian ELF.
fn program_headers(elf: &[u8]) -> Vec<u32> {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!((elf[4], elf[5]), (2, 1), "not a 64-bit little-endian ELF");
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum)
        .map(|i| {
            let o = phoff + i * phentsize;
            u32::from_le_bytes(elf[o..o + 4].try_into().unwrap())
        })
        .collect()
}

#[test]
fn the_embedded_bridge_is_a_static_elf() {
    assert!(!BRIDGE.is_empty());
    let headers = program_headers(BRIDGE);
    assert!(headers.contains(&PT_LOAD), "{headers:?}");
    assert!(
        !headers.contains(&PT_INTERP),
        "the bridge asks for a dynamic loader: {headers:?}"
    );
    // Control: the parser finds the loader of a dynamically linked program
    // (this test).
    let this = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    assert!(program_headers(&this).contains(&PT_INTERP));
    println!("the static bridge is {} bytes", BRIDGE.len());
}

#[test]
fn install_is_idempotent_and_mode_0555() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    let path = bridge::install(&dir).unwrap();
    assert_eq!(path, dir.join(bridge::file_name()));
    let name = bridge::file_name();
    let hash = name.strip_prefix("warden-bridge-").unwrap();
    assert!(
        hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        "{name}"
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&path), 0o555);
    assert_eq!(std::fs::read(&path).unwrap(), BRIDGE);

    // Again: the same file, not rewritten.
    let inode = std::fs::metadata(&path).unwrap().ino();
    assert_eq!(bridge::install(&dir).unwrap(), path);
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);

    // A damaged copy is replaced, and no temporary file stays behind.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&path, b"not the bridge").unwrap();
    assert_eq!(bridge::install(&dir).unwrap(), path);
    assert_eq!(std::fs::read(&path).unwrap(), BRIDGE);
    assert_eq!(mode(&path), 0o555);
    assert_ne!(std::fs::metadata(&path).unwrap().ino(), inode);
    let entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, [std::ffi::OsString::from(&name)]);
}

/// The installed bridge, the daemon's socket, in a temp directory.
struct Setup {
    _tmp: tempfile::TempDir,
    bridge: PathBuf,
    sock: PathBuf,
    listener: UnixListener,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let bridge = bridge::install(&tmp.path().join("state")).unwrap();
    let sock = tmp.path().join("egress.sock");
    std::fs::write(&sock, b"stale").unwrap();
    let listener = bridge::listen(&sock).unwrap();
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666);
    Setup {
        _tmp: tmp,
        bridge,
        sock,
        listener,
    }
}

impl Setup {
    fn command(&self, port: &str, program: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bridge);
        cmd.arg(&self.sock).arg(port).arg("--").args(program);
        cmd
    }
}

/// Spawning a program just written can meet ETXTBSY: another test's thread
/// forked while the file was open for writing, and its child holds that fd
/// until it execs. Retried, as the kernel's answer is only "not yet".
trait Retrying {
    fn spawn_retrying(&mut self) -> std::process::Child;
    fn output_retrying(&mut self) -> Output;
}

impl Retrying for Command {
    fn spawn_retrying(&mut self) -> std::process::Child {
        for _ in 0..100 {
            match self.spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => return r.unwrap(),
            }
        }
        self.spawn().unwrap()
    }

    fn output_retrying(&mut self) -> Output {
        for _ in 0..100 {
            match self.output() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => return r.unwrap(),
            }
        }
        self.output().unwrap()
    }
}

/// The socket inode of `fd` in this process.
fn inode(fd: RawFd) -> u64 {
    std::fs::metadata(format!("/proc/self/fd/{fd}"))
        .unwrap()
        .ino()
}

/// How many fds of process `pid` are the socket of inode `ino`.
fn copies(pid: &str, ino: u64) -> usize {
    let want = format!("socket:[{ino}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.as_os_str() == want.as_str())
        .count()
}

#[test]
fn the_bridge_hands_over_its_listener_and_execs_the_server() {
    let s = setup();
    // `sh` without a slash: found on PATH.
    let mut child = s
        .command("0", &["sh", "-c", "echo ran; exec cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn_retrying();
    let fd = bridge::receive(&s.listener, None, WAIT).unwrap();
    let ino = inode(fd.as_raw_fd());
    let egress = TcpListener::from(fd);
    let addr = egress.local_addr().unwrap();
    assert_eq!(addr.ip().to_string(), "127.0.0.1");
    assert_ne!(addr.port(), 0);

    // The server ran, after the handoff.
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ran\n");

    // The daemon's listener serves.
    let mut client = TcpStream::connect(addr).unwrap();
    let (mut served, _) = egress.accept().unwrap();
    client.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    served.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");

    // The server starts with SIGPIPE at its default (the bridge's std
    // ignored it).
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .unwrap();
    let ignored = u64::from_str_radix(ignored.trim(), 16).unwrap();
    assert_eq!(ignored & (1 << (13 - 1)), 0, "SIGPIPE ignored: {ignored:x}");

    // The server holds no copy of it; control: this process does.
    assert_eq!(copies("self", ino), 1);
    assert_eq!(copies(&child.id().to_string(), ino), 0);
    // With the daemon's closed, nobody listens.
    drop(egress);
    let refused = TcpStream::connect(addr).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);

    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

/// Runs the bridge with the real `receive` answering (with `expect_port`),
/// returns what `receive` said and the bridge's output.
fn handoff(
    port: &str,
    expect_port: Option<u16>,
    program: &[&str],
) -> (Result<OwnedFd, String>, Output) {
    let s = setup();
    let child = s
        .command(port, program)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_retrying();
    let received = bridge::receive(&s.listener, expect_port, WAIT);
    (received, child.wait_with_output().unwrap())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_program_that_cannot_run_is_126_or_127_with_the_message() {
    let (got, out) = handoff("0", None, &["/nonexistent/server"]);
    assert!(got.is_ok());
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        stderr(&out),
        "warden-bridge: cannot run /nonexistent/server: No such file or directory\n"
    );
    let (_, out) = handoff("0", None, &["warden-no-such-server", "--flag"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));

    // Not executable: 126.
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    std::fs::write(&plain, b"#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (_, out) = handoff("0", None, &[plain.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(126));
    assert_eq!(
        stderr(&out),
        format!(
            "warden-bridge: cannot run {}: Permission denied\n",
            plain.display()
        )
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_usage_exits_125() {
    let s = setup();
    let cases: &[&[&str]] = &[
        &[],
        &["/sock"],
        &["/sock", "0", "--"],
        &["/sock", "0", "sh"],
        &["/sock", "0", "-x", "sh"],
        &["/sock", "port", "--", "sh"],
        &["/sock", "65536", "--", "sh"],
        &["/sock", "-1", "--", "sh"],
    ];
    for args in cases {
        let out = Command::new(&s.bridge).args(*args).output_retrying();
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        assert!(
            stderr(&out)
                .starts_with("warden-bridge: usage: /.warden/bridge SOCKET_PATH PORT -- PROGRAM"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // No daemon at the socket: 125 too, naming it.
    let out = Command::new(&s.bridge)
        .args([
            "/nonexistent/egress.sock",
            "0",
            "--",
            "sh",
            "-c",
            "echo ran",
        ])
        .output_retrying();
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("cannot connect to /nonexistent/egress.sock"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
}

/// A daemon that takes the listener and answers `answer` (nothing: closes).
fn answering(answer: &[u8]) -> Output {
    let s = setup();
    let child = s
        .command("0", &["sh", "-c", "echo ran"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_retrying();
    let (mut conn, _) = s.listener.accept().unwrap();
    let mut buf = [0u8; 4];
    let (n, fds) =
        warden_sandbox::fdpass::recv_with_fds(std::os::fd::AsFd::as_fd(&conn), &mut buf, false)
            .unwrap();
    assert_eq!((&buf[..n], fds.len()), (&b"L"[..], 1));
    conn.write_all(answer).unwrap();
    drop(conn);
    child.wait_with_output().unwrap()
}

#[test]
fn a_refusal_stops_the_bridge_before_the_program() {
    for answer in [&b"N"[..], b"", b"k"] {
        let out = answering(answer);
        assert_eq!(out.status.code(), Some(125), "{answer:?}");
        assert_eq!(
            stderr(&out),
            "warden-bridge: the daemon refused the egress listener\n"
        );
        assert!(out.stdout.is_empty(), "{answer:?}: the program ran");
    }
    // Control: the same daemon answering `K`.
    let out = answering(b"K");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, b"ran\n");

    // The real receive refusing (another port than the one expected).
    let (got, out) = handoff("0", Some(1), &["sh", "-c", "echo ran"]);
    let e = got.unwrap_err();
    assert!(
        e.starts_with("the egress bridge sent a socket bound to 127.0.0.1:")
            && e.ends_with(", not 127.0.0.1:1"),
        "{e}"
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(out.stdout.is_empty());
}

#[test]
fn the_bridge_listens_on_the_port_it_is_given() {
    let port = {
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let (got, out) = handoff(&port.to_string(), Some(port), &["true"]);
    let egress = TcpListener::from(got.unwrap());
    assert_eq!(
        egress.local_addr().unwrap(),
        SocketAddr::from(([127, 0, 0, 1], port))
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A fake bridge: connects, sends `payload` with `fds`, then `receive`
/// runs; returns its verdict and the answer the fake read.
fn fake(
    payload: &[u8],
    fds: &[RawFd],
    expect_port: Option<u16>,
) -> (Result<OwnedFd, String>, Vec<u8>) {
    let s = setup();
    let mut conn = UnixStream::connect(&s.sock).unwrap();
    let cmsgs: Vec<ControlMessage> = if fds.is_empty() {
        vec![]
    } else {
        vec![ControlMessage::ScmRights(fds)]
    };
    sendmsg::<()>(
        conn.as_raw_fd(),
        &[IoSlice::new(payload)],
        &cmsgs,
        MsgFlags::empty(),
        None,
    )
    .unwrap();
    let got = bridge::receive(&s.listener, expect_port, WAIT);
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).unwrap();
    (got, answer)
}

fn refused(payload: &[u8], fds: &[RawFd], expect_port: Option<u16>) -> String {
    let (got, answer) = fake(payload, fds, expect_port);
    assert_eq!(answer, b"N");
    got.unwrap_err()
}

#[test]
fn receive_refuses_anything_but_a_loopback_tcp_listener() {
    // Control: a good listener is taken, answered `K`.
    let good = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = good.local_addr().unwrap().port();
    let (got, answer) = fake(b"L", &[good.as_raw_fd()], Some(port));
    assert_eq!(answer, b"K");
    let got = TcpListener::from(got.unwrap());
    assert_eq!(got.local_addr().unwrap(), good.local_addr().unwrap());
    drop(got);

    let any = TcpListener::bind("0.0.0.0:0").unwrap();
    let any_port = any.local_addr().unwrap().port();
    assert_eq!(
        refused(b"L", &[any.as_raw_fd()], Some(any_port)),
        format!(
            "the egress bridge sent a socket bound to 0.0.0.0:{any_port}, not 127.0.0.1:{any_port}"
        )
    );
    assert_eq!(
        refused(b"L", &[any.as_raw_fd()], None),
        format!("the egress bridge sent a socket bound to 0.0.0.0:{any_port}, not 127.0.0.1")
    );

    let stream = TcpStream::connect(good.local_addr().unwrap()).unwrap();
    let local = stream.local_addr().unwrap();
    assert_eq!(
        refused(b"L", &[stream.as_raw_fd()], None),
        format!("the egress bridge sent a socket bound to {local} that is not listening")
    );

    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let e = refused(b"L", &[udp.as_raw_fd()], None);
    assert!(
        e.starts_with("the egress bridge sent a socket of type Datagram bound to 127.0.0.1:"),
        "{e}"
    );
    assert!(e.ends_with("not a TCP (SOCK_STREAM) one"), "{e}");

    let tmp = tempfile::tempdir().unwrap();
    let unix = UnixListener::bind(tmp.path().join("u.sock")).unwrap();
    assert_eq!(
        refused(b"L", &[unix.as_raw_fd()], None),
        "the egress bridge sent a Unix socket, not an IPv4 (AF_INET) one"
    );
    let v6 = TcpListener::bind("[::1]:0");
    if let Ok(v6) = v6 {
        assert_eq!(
            refused(b"L", &[v6.as_raw_fd()], None),
            "the egress bridge sent an IPv6 socket, not an IPv4 (AF_INET) one"
        );
    }

    let file = std::fs::File::open("/dev/null").unwrap();
    assert_eq!(
        refused(b"L", &[file.as_raw_fd()], None),
        "the egress bridge sent a file descriptor that is not a socket"
    );

    assert_eq!(
        refused(b"L", &[], None),
        "the egress bridge sent no file descriptor"
    );
    assert_eq!(
        refused(b"X", &[good.as_raw_fd()], None),
        "the egress bridge sent \"X\", not the one byte `L`"
    );
    assert_eq!(
        refused(b"LL", &[good.as_raw_fd()], None),
        "the egress bridge sent \"LL\", not the one byte `L`"
    );

    // Extra fds are refused and closed: no copy of either stays here.
    let (a, b) = (inode(good.as_raw_fd()), inode(any.as_raw_fd()));
    assert_eq!(
        refused(b"L", &[good.as_raw_fd(), any.as_raw_fd()], None),
        "the egress bridge sent 2 file descriptors, not one"
    );
    assert_eq!((copies("self", a), copies("self", b)), (1, 1));
    let e = refused(b"L", &[good.as_raw_fd(); 8], None);
    assert_eq!(e, "the egress bridge sent more than one file descriptor");
    assert_eq!(copies("self", a), 1);
}

#[test]
fn receive_times_out_when_nobody_sends() {
    let s = setup();
    let e = bridge::receive(&s.listener, None, Duration::from_millis(300)).unwrap_err();
    assert_eq!(e, "the egress bridge sent no listener within 300 ms");
    // Connected, silent.
    let _silent = UnixStream::connect(&s.sock).unwrap();
    let e = bridge::receive(&s.listener, None, Duration::from_secs(1)).unwrap_err();
    assert_eq!(e, "the egress bridge sent no listener within 1 s");
    // Connected, gone without a word.
    drop(UnixStream::connect(&s.sock).unwrap());
    let e = bridge::receive(&s.listener, None, WAIT).unwrap_err();
    assert_eq!(
        e,
        "the egress bridge closed its connection without a listener"
    );
}
