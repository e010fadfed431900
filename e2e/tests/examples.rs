//! The policies in `examples/` stay valid and do what their comments say. They are
//! embedded at build time (the tests also run from a copy without the source tree) and
//! written into a temporary `examples/` layout.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use warden_e2e::*;

const FIXTURE_YAML: &str = include_str!("../../examples/fixture.yaml");
const FILESYSTEM_YAML: &str = include_str!("../../examples/filesystem.yaml");
const SANDBOX_README: &str = include_str!("../../examples/sandbox-data/README.txt");

/// `root/examples/` with `sandbox-data/README.txt`, an empty `.deps/` and both policies.
fn layout(env: &TestEnv) -> PathBuf {
    env.write("examples/sandbox-data/README.txt", SANDBOX_README);
    env.mkdir("examples/.deps");
    env.write("examples/fixture.yaml", FIXTURE_YAML);
    env.write("examples/filesystem.yaml", FILESYSTEM_YAML);
    env.root.join("examples")
}

/// `$PATH` with the directory of the built binaries first, as the examples' comments
/// tell users to set it (fixture.yaml runs `warden-fixture-mcp` from PATH).
fn path_with_bin_dir() -> std::ffi::OsString {
    let bin_dir = fixture().parent().unwrap().to_path_buf();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bin_dir).chain(std::env::split_paths(&rest))).unwrap()
}

#[test]
fn example_policies_pass_policy_check() {
    let env = TestEnv::new();
    let examples = layout(&env);
    for name in ["fixture.yaml", "filesystem.yaml"] {
        let path = examples.join(name);
        let mut cmd = env.ctl(["policy", "check", path.to_str().unwrap()]);
        cmd.env("PATH", path_with_bin_dir());
        let out = run(&mut cmd, Duration::from_secs(30));
        assert!(
            out.status.success(),
            "examples/{name} rejected:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn fixture_example_reads_sandbox_data() {
    let env = TestEnv::new();
    let examples = layout(&env);
    let _daemon = env.start_daemon();
    let mut cmd = env.shim(["--policy", examples.join("fixture.yaml").to_str().unwrap()]);
    cmd.env("PATH", path_with_bin_dir())
        .env("FIXTURE_GREETING", "hello");
    let mut c = McpClient::spawn(cmd);
    c.initialize();
    let readme = examples.join("sandbox-data/README.txt");
    assert_eq!(
        c.tool_text("read_file", json!({"path": readme})),
        SANDBOX_README
    );
    assert_eq!(
        c.tool_json("getenv", json!({"name": "FIXTURE_GREETING"})),
        json!("hello")
    );
    let r = c.call_tool(
        "write_file",
        json!({"path": examples.join("sandbox-data/new.txt"), "content": "x"}),
    );
    assert!(is_tool_error(&r), "fixture.yaml grants read only: {r}");
    c.close_stdin();
    assert_eq!(
        c.wait_code(Duration::from_secs(15)),
        0,
        "stderr:\n{}",
        c.stderr()
    );
}
