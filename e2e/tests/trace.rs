//! `wardenctl trace` (docs/init.md, tracker issue 12), end to end: the real
//! daemon, the real shim in the observe-everything sandbox, real programs and
//! a real MCP server driven with `--mcp`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use warden_e2e::net::*;
use warden_e2e::*;

/// The shared setup ([`NetWorld`]) and this file's steps.
struct World(NetWorld);

impl std::ops::Deref for World {
    type Target = NetWorld;
    fn deref(&self) -> &NetWorld {
        &self.0
    }
}

impl World {
    fn new() -> Option<World> {
        NetWorld::new().map(World)
    }

    fn trace(&self, args: &[&str]) -> Output {
        let mut cmd = self.env.ctl(["trace"].iter().chain(args));
        cmd.current_dir(&self.env.root);
        cmd.env("TRACE_TEST_TOKEN", "s3cr3t-value");
        run(&mut cmd, Duration::from_secs(120))
    }
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_trace_records_files_execs_hosts_and_env_names_and_passes_stdio_through() {
    let Some(w) = World::new() else { return };
    let notes = w.env.write("home/notes.txt", "my notes\n");
    let out_file = w.env.root.join("t1.jsonl");
    let port = w.up.http.port();
    let script = format!(
        "cat {}; cat {}/missing.txt 2>/dev/null; ls {}; {} -s -o /dev/null -w '%{{http_code}}\\n' --max-time 30 http://allowed.test:{port}/hello",
        notes.display(),
        w.env.home.display(),
        w.env.state.display(),
        w.clients.curl.display()
    );
    let out = w.trace(&[
        "-o",
        out_file.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        &script,
    ]);
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "{stdout}\n{stderr}\n{}",
        w.daemon.log()
    );
    // The server's bytes on stdout, as without a trace; Warden's state
    // directory lists nothing inside (an empty tmpfs covers it) while the
    // host's holds the audit store (the control).
    assert_eq!(stdout, "my notes\n200\n", "{stderr}");
    assert!(w.env.state.join("audit").is_dir());
    assert!(stderr.contains("trace: session "), "{stderr}");

    let recs = records(&out_file);
    let start = &recs[0];
    assert_eq!(start["type"], "session");
    assert_eq!(start["action"], "start");
    let names: Vec<&str> = start["details"]["env_names"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(names.contains(&"TRACE_TEST_TOKEN"), "{names:?}");
    assert!(
        !std::fs::read_to_string(&out_file)
            .unwrap()
            .contains("s3cr3t-value"),
        "names, never values"
    );
    let find = |kind: &str, action: &str, resource: &str| {
        recs.iter()
            .find(|r| r["type"] == kind && r["action"] == action && r["resource"] == resource)
            .cloned()
    };
    let read = find("file", "open-read", notes.to_str().unwrap()).expect("the read of notes.txt");
    assert_eq!(read["decision"], "allow", "{read}");
    let missing = w.env.home.join("missing.txt");
    let miss = find("file", "open-read", missing.to_str().unwrap()).expect("the failed read");
    assert_eq!(
        miss["details"]["errno"],
        Value::Null,
        "the sandbox did not deny it: {miss}"
    );
    assert!(
        recs.iter().any(|r| r["type"] == "file"
            && r["action"] == "exec"
            && r["resource"].as_str().is_some_and(|p| p.ends_with("curl"))),
        "the exec of curl"
    );
    let conn = find("network", "connect", &format!("allowed.test:{port}")).expect("the connection");
    assert_eq!(conn["decision"], "allow", "{conn}");
    assert!(recs.iter().all(|r| r["session"] == start["session"]));
    let exit = recs.last().unwrap();
    assert_eq!(exit["action"], "exit");
    // The sampled peak: the shell and curl at least, and their memory.
    assert!(
        exit["details"]["peak"]["memory_bytes"].as_u64() > Some(1 << 20),
        "{exit}"
    );
    assert!(
        exit["details"]["peak"]["processes"].as_u64() >= Some(1),
        "{exit}"
    );

    // The output is never written over.
    let before = std::fs::read(&out_file).unwrap();
    let out = w.trace(&["-o", out_file.to_str().unwrap(), "--", "/bin/true"]);
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(err.contains("exists"), "{err}");
    assert_eq!(std::fs::read(&out_file).unwrap(), before);
}

#[test]
fn a_command_that_cannot_start_writes_nothing() {
    let Some(w) = World::new() else { return };
    let out_file = w.env.root.join("never.jsonl");
    let out = w.trace(&[
        "-o",
        out_file.to_str().unwrap(),
        "--",
        "/nonexistent/server",
    ]);
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(err.contains("no trace written"), "{err}");
    assert!(!out_file.exists());
}

#[test]
fn mcp_drives_a_real_server_and_the_trace_has_its_start_up() {
    let Some(w) = World::new() else { return };
    let node = find_on_path("node").expect("node on PATH");
    let data = w.env.mkdir("home/project");
    std::fs::write(data.join("README.md"), "# project\n").unwrap();
    let server = w
        .clients
        .deps
        .join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    let out = w.trace(&[
        "--mcp",
        "--call",
        "list_directory",
        &format!("{{\"path\": \"{}\"}}", data.display()),
        "--",
        node.to_str().unwrap(),
        server.to_str().unwrap(),
        data.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("drove secure-filesystem-server (initialize)"),
        "{stderr}"
    );
    assert!(stderr.contains("called list_directory ok"), "{stderr}");
    let recs: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Node loaded the server's modules and listed the directory.
    assert!(recs.iter().any(|r| r["type"] == "file"
        && r["resource"]
            .as_str()
            .is_some_and(|p| p.ends_with("server-filesystem/dist/index.js"))));
    assert!(recs.iter().any(|r| r["type"] == "file"
        && r["action"] == "open-read"
        && r["resource"] == data.display().to_string()));
}
