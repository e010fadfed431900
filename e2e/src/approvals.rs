//! What the approval tests (`tests/approvals.rs`, `tests/approvals_desktop.rs`,
//! `tests/mcp_records.rs`) ask of a daemon: its pending approvals, answers
//! through `wardenctl approve`, and the `approval.*` records; and the shim
//! under a pseudo-terminal, where it prompts.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{audit_records, bin, run, TestEnv};

/// `wardenctl ARGS` with this env (30 s at most).
pub fn ctl(env: &TestEnv, args: &[&str]) -> Output {
    run(&mut env.ctl(args), Duration::from_secs(30))
}

/// The pending approvals (`wardenctl approve --json`: one object a line).
pub fn pending(env: &TestEnv) -> Vec<Value> {
    let out = ctl(env, &["approve", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// `wardenctl approve ID --SCOPE`.
pub fn answer(env: &TestEnv, id: &str, scope: &str) -> Output {
    ctl(env, &["approve", id, &format!("--{scope}")])
}

/// As [`answer`], which must succeed; its stdout.
#[track_caller]
pub fn answer_ok(env: &TestEnv, id: &str, scope: &str) -> String {
    let out = answer(env, id, scope);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "approve {id} --{scope}: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `approval` records of `action`, once there are `n` (the store commits
/// in groups), or what there is after 15 s.
pub fn approval_records(env: &TestEnv, action: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r: Vec<Value> = audit_records(env)
            .into_iter()
            .filter(|r| r["type"] == "approval" && r["action"] == action)
            .collect();
        if r.len() >= n || Instant::now() >= deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs the shim with a pseudo-terminal as its controlling terminal (stdin
/// and stdout stay the test's pipes: the MCP channel). The Python parent
/// records everything written to the terminal in `transcript` and, when the
/// prompt asks, types `answer`. With `raw`, the terminal is put in raw mode
/// first (as a full-screen client would), and nothing is typed.
pub const PTY_DRIVER: &str = r#"
import os, pty, sys, termios, fcntl, tty, time, select
transcript, answer, raw = sys.argv[1], sys.argv[2], sys.argv[3] == "raw"
argv = sys.argv[4:]
master, slave = pty.openpty()
pid = os.fork()
if pid == 0:
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    if raw:
        tty.setraw(slave)
    os.close(master)
    os.close(slave)
    os.execv(argv[0], argv)
os.close(slave)
seen = b""
answered = False
status = None
# The master reads EIO while no process holds the terminal open (before
# the shim opens /dev/tty): poll until the shim has exited.
with open(transcript, "wb") as out:
    while status is None:
        r, _, _ = select.select([master], [], [], 0.05)
        chunk = b""
        if r:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                time.sleep(0.05)
        if chunk:
            out.write(chunk)
            out.flush()
            seen += chunk
            if not answered and not raw and b"(default)? " in seen:
                os.write(master, answer.encode() + b"\n")
                answered = True
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
sys.exit(os.waitstatus_to_exitcode(status))
"#;

/// `warden-shim --socket S SHIM_ARGS...` under [`PTY_DRIVER`], typing
/// `answer` at the prompt (nothing with `raw`): the command to spawn (its
/// stdin and stdout, which the caller sets, are the shim's MCP channel) and
/// the transcript of the terminal.
pub fn shim_under_pty(
    env: &TestEnv,
    answer: &str,
    raw: bool,
    shim_args: &[OsString],
) -> (Command, PathBuf) {
    let transcript = env.root.join(format!("tty-{answer}-{raw}.log"));
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg("-c")
        .arg(PTY_DRIVER)
        .arg(&transcript)
        .arg(answer)
        .arg(if raw { "raw" } else { "cooked" })
        .arg(bin("warden-shim"))
        .arg("--socket")
        .arg(&env.socket)
        .args(shim_args);
    env.apply_env(&mut cmd);
    (cmd, transcript)
}
