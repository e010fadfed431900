//! MCP-aware sessions in both protocol eras (issue 17), through the real shim,
//! with the official Python SDK on both ends: its client (`PY_SDK_CLIENT`) and a
//! server built on it (`PY_SDK_SERVER`, whose dual-era loop lets the client's
//! first request decide). `2025`: the `initialize` handshake. `2026`: the
//! 2026-07-28 stateless revision, `server/discover` and no handshake, every
//! request carrying its protocol version and client capabilities in `_meta`,
//! every result its `resultType`.
//!
//! Each check runs in both eras (`NAME::handshake_2025`, `NAME::stateless_2026`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_e2e::*;

/// Each check as two tests, one per era.
macro_rules! in_both_eras {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn handshake_2025() {
                super::$name(warden_e2e::Era::Handshake2025)
            }
            #[test]
            fn stateless_2026() {
                super::$name(warden_e2e::Era::Stateless2026)
            }
        }
    )*};
}

in_both_eras!(
    calls_progress_cancellation_and_denials_have_their_records,
    a_call_that_needs_the_clients_input_is_followed,
    the_gate_refuses_hides_and_explains,
);

/// A session of the SDK server, its policy named `name` granting read of
/// the server's files and of `read`, writes to `write`, with `yaml` (more
/// keys), driven by the SDK client in `era` through the shim with `steps`;
/// `None` when the venv is missing (after `skipping:`).
fn run_steps(
    env: &TestEnv,
    era: Era,
    name: &str,
    (read, write): (&[&Path], &[&Path]),
    yaml: &str,
    steps: Value,
) -> Option<PyRun> {
    let server = sdk_server(env)?;
    let list = |paths: &[&Path]| -> String {
        paths
            .iter()
            .map(|p| format!(", {:?}", p.display().to_string()))
            .collect()
    };
    let policy = env.policy(
        &format!("{name}.yaml"),
        &format!(
            "version: 1\nname: {name}\nfilesystem:\n  read: [{}{}]\n  write: [{}]\n{yaml}",
            server.read_yaml(),
            list(read),
            list(write).trim_start_matches(", "),
        ),
    );
    let argv: Vec<&str> = server.argv.iter().map(String::as_str).collect();
    let args = client_shim_args(env, &policy, &argv);
    let run = python_sdk_client_in(env, era, &args, &steps)?;
    assert_eq!(run.server, "warden-sdk-server", "{run:?}");
    let want = match era {
        Era::Handshake2025 => "2025-",
        Era::Stateless2026 => "2026-07-28",
    };
    assert!(
        run.protocol_version
            .as_str()
            .is_some_and(|v| v.starts_with(want)),
        "not the {era:?} era: {run:?}"
    );
    assert_eq!(run.returncode, 0, "server stderr:\n{}", run.server_stderr);
    assert!(run.stream_errors.is_empty(), "{run:?}");
    Some(run)
}

/// Every audit record, once the session's `session.exit` is written (each
/// `mcp` record precedes it).
fn after_the_session(env: &TestEnv) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = audit_records(env);
        if all
            .iter()
            .any(|r| r["type"] == "session" && r["action"] == "exit")
        {
            return all;
        }
        assert!(Instant::now() < deadline, "{:?}", audit_summary(env));
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mcp<'a>(recs: &'a [Value], action: &str) -> Vec<&'a Value> {
    recs.iter()
        .filter(|r| r["type"] == "mcp" && r["action"] == action)
        .collect()
}

/// The `mcp.end` records of the calls of `tool`, in order.
fn ends_of<'a>(recs: &'a [Value], tool: &str) -> Vec<&'a Value> {
    mcp(recs, "end")
        .into_iter()
        .filter(|r| r["details"]["tool"] == tool)
        .collect()
}

/// The session opens as its era says, each call has its `mcp.request` and
/// `mcp.end` (with the tool, the outcome, its progress, a cancellation as
/// such), no argument value is recorded, and a file denial made during a
/// call carries the call's id and tool.
fn calls_progress_cancellation_and_denials_have_their_records(era: Era) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let go = env.mkdir("go");
    let hold = env.mkdir("hold");
    let secret = env.write("outside/secret.txt", "not for the server");
    let Some(run) = run_steps(
        &env,
        era,
        "eras",
        (&[&go, &hold], &[]),
        "",
        json!([
            {"op": "list_tools"},
            {"op": "call_tool", "name": "echo", "arguments": {"text": "secret-argument-value"}},
            {"op": "call_tool", "name": "paced", "arguments": {"steps": 3, "dir": go},
             "progress": true, "go_ahead": go},
            // Abandoned after its first progress: the SDK sends
            // notifications/cancelled (`hold` never gets a go-ahead).
            {"op": "call_tool", "name": "paced", "arguments": {"steps": 3, "dir": hold},
             "progress": true, "cancel_after_progress": 1},
            {"op": "call_tool", "name": "read_file", "arguments": {"path": secret}},
        ]),
    ) else {
        return;
    };
    let [list, echo, paced, cancelled, read] = &run.steps[..] else {
        panic!("five step results: {run:?}");
    };
    assert!(
        list["tools"].as_array().unwrap().contains(&json!("paced")),
        "{list}"
    );
    assert_eq!(echo["text"], json!(["secret-argument-value"]), "{echo}");
    assert_eq!(paced["text"], json!(["done after 3 steps"]), "{paced}");
    assert_eq!(paced["progress"], 3, "{paced}");
    assert_eq!(cancelled["cancelled"], true, "{cancelled}");
    assert_eq!(read["isError"], true, "{read}");

    let all = after_the_session(&env);
    let (opened, not) = match era {
        Era::Handshake2025 => ("initialize", "server/discover"),
        Era::Stateless2026 => ("server/discover", "initialize"),
    };
    let requests = mcp(&all, "request");
    assert_eq!(requests[0]["resource"], opened, "{requests:#?}");
    assert!(
        !all.iter()
            .any(|r| r["type"] == "mcp" && r["resource"] == not),
        "{all:#?}"
    );
    for tool in ["echo", "read_file"] {
        let e = ends_of(&all, tool);
        assert_eq!(e.len(), 1, "{all:#?}");
        let want = if tool == "echo" {
            "result"
        } else {
            "tool-error"
        };
        assert_eq!(e[0]["details"]["outcome"], want, "{}", e[0]);
        assert_eq!(e[0]["resource"], "tools/call");
        let id = &e[0]["details"]["id"];
        assert!(
            requests
                .iter()
                .any(|r| r["details"]["tool"] == tool && r["details"]["id"] == *id),
            "no mcp.request of {tool}: {requests:#?}"
        );
    }
    let paced = ends_of(&all, "paced");
    assert_eq!(paced.len(), 2, "{all:#?}");
    assert_eq!(paced[0]["details"]["outcome"], "result", "{}", paced[0]);
    assert_eq!(paced[0]["details"]["progress"], 3, "{}", paced[0]);
    assert_eq!(paced[1]["details"]["outcome"], "cancelled", "{}", paced[1]);
    assert_eq!(paced[1]["details"]["progress"], 1, "{}", paced[1]);
    for r in all.iter().filter(|r| r["type"] == "mcp") {
        assert!(
            !r.to_string().contains("secret-argument-value"),
            "an argument value in {r}"
        );
    }
    // The denial of the secret, made during the read_file call.
    let read_id = &ends_of(&all, "read_file")[0]["details"]["id"];
    let denied: Vec<&Value> = all
        .iter()
        .filter(|r| r["type"] == "file" && r["decision"] == "deny")
        .filter(|r| {
            r["resource"]
                .as_str()
                .is_some_and(|p| p.ends_with("secret.txt"))
        })
        .collect();
    assert!(!denied.is_empty(), "no file denial: {all:#?}");
    for d in denied {
        assert_eq!(d["details"]["call"], *read_id, "{d}");
        assert_eq!(d["details"]["tool"], "read_file", "{d}");
    }
}

/// A call that needs the client's input before it can finish: in the 2025
/// era the server asks during the call (`elicitation/create`, a request to
/// the client, recorded `to-client`); in the 2026 era it answers
/// `input_required` (recorded as that outcome) and the client calls again
/// with its response, a request of its own.
fn a_call_that_needs_the_clients_input_is_followed(era: Era) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let Some(run) = run_steps(
        &env,
        era,
        "input",
        (&[], &[]),
        "",
        json!([
            {"op": "call_tool", "name": "confirm", "arguments": {"text": "deploy"},
             "input": {"ok": true}},
        ]),
    ) else {
        return;
    };
    let r = &run.steps[0];
    assert_eq!(r["text"], json!(["confirmed deploy"]), "{r}");
    let all = after_the_session(&env);
    let ends = ends_of(&all, "confirm");
    let outcomes: Vec<&Value> = ends.iter().map(|e| &e["details"]["outcome"]).collect();
    let to_client: Vec<&Value> = mcp(&all, "end")
        .into_iter()
        .filter(|r| r["details"]["direction"] == "to-client")
        .collect();
    match era {
        Era::Handshake2025 => {
            assert_eq!(r["rounds"], 1, "{r}");
            assert_eq!(outcomes, [&json!("result")], "{ends:#?}");
            assert_eq!(to_client.len(), 1, "{all:#?}");
            assert_eq!(to_client[0]["resource"], "elicitation/create");
            assert_eq!(to_client[0]["details"]["outcome"], "result");
        }
        Era::Stateless2026 => {
            assert_eq!(r["rounds"], 2, "{r}");
            assert_eq!(
                outcomes,
                [&json!("input-required"), &json!("result")],
                "{ends:#?}"
            );
            assert_ne!(ends[0]["details"]["id"], ends[1]["details"]["id"]);
            assert!(to_client.is_empty(), "{to_client:#?}");
        }
    }
}

/// `mcp.tools.deny` in each era: the refused tool is not listed, its call
/// is answered by Warden with the JSON-RPC error the era prescribes for a
/// tool the server does not offer (`-32602`; the SDK client raises it) and
/// never runs; with `mcp.explain_denials` a tool error after a denial gains
/// its line as one more text item, which the era's client takes as part of
/// the result.
fn the_gate_refuses_hides_and_explains(era: Era) {
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let out = env.mkdir("out");
    let secret = env.write("outside/secret.txt", "not for the server");
    let target = out.join("written-by-the-server.txt");
    let steps = json!([
        {"op": "list_tools"},
        {"op": "call_tool", "name": "write_file", "arguments": {"path": target, "content": "x"}},
        {"op": "call_tool", "name": "echo", "arguments": {"text": "still here"}},
        {"op": "call_tool", "name": "read_file", "arguments": {"path": secret}},
    ]);
    let Some(run) = run_steps(
        &env,
        era,
        "gated",
        (&[], &[&out]),
        "mcp:\n  tools:\n    deny: [\"write_*\"]\n  explain_denials: true\n",
        steps.clone(),
    ) else {
        return;
    };
    let [list, refused, echo, read] = &run.steps[..] else {
        panic!("four step results: {run:?}");
    };
    let tools = list["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("echo")), "{list}");
    assert!(!tools.contains(&json!("write_file")), "{list}");
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let msg = refused["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("Warden's policy refuses the tool `write_file`"),
        "{msg}"
    );
    assert_eq!(echo["text"], json!(["still here"]), "{echo}");
    assert_eq!(read["isError"], true, "{read}");
    let texts = read["text"].as_array().unwrap();
    assert_eq!(texts.len(), 2, "{read}");
    assert!(
        texts[1]
            .as_str()
            .unwrap()
            .starts_with("[Warden] During this call the sandbox denied `open-read` of "),
        "{read}"
    );
    assert!(!target.exists(), "the refused call ran");
    let all = after_the_session(&env);
    let refuse = mcp(&all, "refuse");
    assert_eq!(refuse.len(), 1, "{refuse:#?}");
    assert_eq!(refuse[0]["resource"], "write_file");
    let hide = mcp(&all, "hide");
    assert_eq!(hide.len(), 1, "{hide:#?}");
    assert_eq!(hide[0]["details"]["tools"], json!(["write_file"]));
    assert_eq!(mcp(&all, "explain").len(), 1, "{all:#?}");

    // Control: without the rule the same call writes the file, and without
    // explain_denials the tool error is the server's alone.
    let env = TestEnv::new();
    let _daemon = env.start_daemon();
    let out = env.mkdir("out");
    let target = out.join("written-by-the-server.txt");
    let secret = env.write("outside/secret.txt", "not for the server");
    let steps = json!([
        {"op": "call_tool", "name": "write_file", "arguments": {"path": target, "content": "x"}},
        {"op": "call_tool", "name": "read_file", "arguments": {"path": secret}},
    ]);
    let run = run_steps(&env, era, "open", (&[], &[&out]), "", steps).unwrap();
    assert_eq!(run.steps[0]["isError"], false, "{run:?}");
    assert!(target.exists());
    assert_eq!(run.steps[1]["text"].as_array().unwrap().len(), 1, "{run:?}");
}
