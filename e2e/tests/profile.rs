//! `warden-shim --profile NAME` reads `$XDG_CONFIG_HOME/warden/policies/NAME.yaml`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::time::Duration;

use serde_json::json;
use warden_e2e::*;

#[test]
fn a_profile_is_found_under_xdg_config_home() {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let data = env.mkdir("profile-data");
    std::fs::write(data.join("hello.txt"), "from the profile grant").unwrap();
    env.write(
        "config/warden/policies/demo.yaml",
        format!(
            "name: demo-profile\ncommand: [\"{}\"]\nfilesystem:\n  read: [\"{}\"]\n",
            fixture().display(),
            data.display()
        ),
    );
    let mut c = env.mcp(["--profile", "demo"]);
    c.initialize();
    let text = c.tool_text("read_file", json!({"path": data.join("hello.txt")}));
    assert_eq!(text, "from the profile grant");
    let ps = env.sessions();
    assert_eq!(ps[0]["name"], "demo-profile", "{ps:?}");
    c.close_stdin();
    assert_eq!(c.wait_code(Duration::from_secs(10)), 0);
}

#[test]
fn a_missing_profile_is_125_naming_the_file() {
    let env = TestEnv::new();
    let out = run(
        &mut env.shim(["--profile", "nope"]),
        Duration::from_secs(10),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(exit_code(out.status), EXIT_WARDEN_ERROR, "{stderr}");
    let lines = warden_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("warden/policies/nope.yaml"), "{stderr}");
    let out = run(
        &mut env.shim(["--profile", "../x"]),
        Duration::from_secs(10),
    );
    assert_eq!(exit_code(out.status), EXIT_WARDEN_ERROR);
    assert!(String::from_utf8_lossy(&out.stderr).contains("a profile is a plain name"));
}
