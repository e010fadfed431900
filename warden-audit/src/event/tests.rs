//! The record types against `docs/audit-format.md`: every example there
//! reads back into its type and comes out byte for byte the same, every type
//! has an example, and each type built field by field (as the daemon builds
//! it) gives its example's line.

use super::*;
use crate::to_line;

const DOC: &str = include_str!("../../../docs/audit-format.md");

/// Every stored line the document shows (the lines of its ```json blocks).
fn doc_lines() -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in DOC.lines() {
        match line.trim_end() {
            "```json" => inside = true,
            "```" => inside = false,
            l if inside && l.starts_with('{') => out.push(l),
            _ => {}
        }
    }
    out
}

fn read(line: &str) -> Record {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// The examples of one record type (an [`AnyEvent`] variant name).
fn examples(name: &str) -> Vec<(&'static str, Record)> {
    doc_lines()
        .into_iter()
        .map(|l| (l, read(l)))
        .filter(|(l, r)| {
            AnyEvent::parse(r)
                .unwrap_or_else(|e| panic!("{e}: {l}"))
                .name()
                == name
        })
        .collect()
}

/// `event` as the store writes it, stamped with `example`'s `v`, `ts`,
/// `seq` and `prev`.
fn stored(event: impl Into<Record>, example: &Record) -> String {
    let mut r = event.into();
    r.v = example.v;
    r.ts = example.ts.clone();
    r.seq = example.seq;
    r.prev = example.prev.clone();
    String::from_utf8(to_line(&r)).unwrap()
}

/// The `nth` example of `name` is exactly `event`'s line.
fn pin(name: &str, nth: usize, event: impl Into<Record>) {
    let all = examples(name);
    let (line, rec) = all
        .get(nth)
        .unwrap_or_else(|| panic!("docs/audit-format.md has no example {nth} of {name}"));
    assert_eq!(stored(event, rec), *line, "{name} example {nth}");
}

fn s(v: &str) -> String {
    v.to_owned()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| s(x)).collect()
}

#[test]
fn every_example_reads_back_byte_for_byte() {
    let lines = doc_lines();
    assert!(lines.len() >= AnyEvent::NAMES.len(), "{}", lines.len());
    for line in lines {
        let rec = read(line);
        // The examples are stored lines: pure ASCII, as `to_line` writes them.
        assert_eq!(String::from_utf8(to_line(&rec)).unwrap(), line);
        let event = AnyEvent::parse(&rec).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(stored(event, &rec), line);
    }
}

#[test]
fn every_record_type_has_an_example() {
    let lines: Vec<Record> = doc_lines().into_iter().map(read).collect();
    for name in AnyEvent::NAMES {
        assert!(
            lines
                .iter()
                .any(|r| AnyEvent::parse(r).is_ok_and(|e| e.name() == *name)),
            "docs/audit-format.md shows no {name} record"
        );
    }
}

#[test]
fn a_record_is_not_read_as_another_type() {
    let (_, exit) = &examples("SessionExit")[0];
    assert!(matches!(
        SessionStart::from_record(exit),
        Err(EventError::Kind { .. })
    ));
    let mut denied_exit = exit.clone();
    denied_exit.decision = Decision::Deny;
    assert!(matches!(
        SessionExit::from_record(&denied_exit),
        Err(EventError::Decision { .. })
    ));
    let mut garbled = exit.clone();
    garbled.details = serde_json::json!({"code": "zero"});
    assert!(matches!(
        SessionExit::from_record(&garbled),
        Err(EventError::Details { .. })
    ));
    let env = Record::new(RecordType::Env, "read", None, "X", Decision::Info, "");
    assert!(matches!(AnyEvent::parse(&env), Err(EventError::Unknown(_))));
}

#[test]
fn session_start() {
    let home = "/home/u/warden/examples";
    pin(
        "SessionStart",
        0,
        SessionStart {
            session: s("3fa1c09b22de"),
            name: Some(s("filesystem")),
            argv: strings(&[
                "node",
                "./.deps/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
                "./sandbox-data",
            ]),
            program: "/usr/bin/node".into(),
            cwd: format!("{home}/sandbox-data").into(),
            policy_path: Some(format!("{home}/filesystem.yaml").into()),
            policy_digest: s(
                "sha256:823412d1eacb67956220e532959f0104603057c88704863ca38e7cd188fda812",
            ),
            read: vec![format!("{home}/.deps").into()],
            write: vec![format!("{home}/sandbox-data").into()],
            protected: vec![format!("{home}/sandbox-data/.git").into()],
            exposed: vec![],
            warnings: vec![],
            network_allow: vec![],
            env_names: vec![],
            limits: strings(&[
                "timeout_s=3600 (daemon timer)",
                "pids=4096 (RLIMIT_NPROC in the sandbox's user namespace)",
                "tmp_mb=256 (size of the private /tmp)",
            ]),
            client: Client {
                pid: 4242,
                program: s("warden-shim"),
                version: s("0.1.0"),
            },
            sandbox: SandboxFacts {
                backend: s("linux"),
                backend_requested: s("auto"),
                backend_skipped: vec![],
                namespaces: strings(&["user", "mount", "pid", "net", "ipc", "uts", "cgroup"]),
                landlock_abi: Some(7),
                landlock_min_abi: 0,
                syscall_audit: s("seccomp user notification"),
                file_audit: s("denied"),
                create_guard: true,
                host_root: false,
                write_protection: WriteProtection {
                    mode: s("full"),
                    active: strings(&[
                        "protected names bound read-only",
                        "creation guard",
                        "Landlock ABI 7",
                    ]),
                    missing: vec![],
                },
                best_effort_write_protection: false,
                docker: None,
            },
        },
    );
}

#[test]
fn session_exit() {
    pin(
        "SessionExit",
        0,
        SessionExit {
            session: s("3fa1c09b22de"),
            reason: s("killed by wardenctl kill"),
            code: None,
            signal: Some(15),
            duration_ms: 2522578,
            peak: None,
        },
    );
    pin(
        "SessionExit",
        1,
        SessionExit {
            session: s("0331a5b2e05b"),
            reason: s(""),
            code: Some(0),
            signal: None,
            duration_ms: 1840,
            peak: Some(Peak {
                memory_bytes: 71_303_168,
                processes: 3,
            }),
        },
    );
}

#[test]
fn session_refused() {
    pin(
        "SessionRefused",
        0,
        SessionRefused {
            session: Some(s("bde7b6f33bae")),
            command: s("/usr/bin/node ./server.js"),
            reason: s(
                "too many sessions: 64 are running, the limit is 64 (wardend \
                 --max-sessions; 2725 fit in its file descriptor limit of 65536)",
            ),
            policy_path: s("/home/u/warden/examples/filesystem.yaml"),
            client_pid: Some(4301),
        },
    );
}

#[test]
fn session_kill() {
    pin(
        "SessionKill",
        0,
        SessionKill {
            session: s("3fa1c09b22de"),
            command: s("node ./.deps/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js ./sandbox-data"),
        },
    );
}

#[test]
fn limit_breach() {
    pin(
        "LimitBreach",
        0,
        LimitBreach {
            session: s("f5dbb918b8b3"),
            mechanism: Breach::RssSampling {
                limit_bytes: 64 << 20,
                rss_bytes: 74792960,
                resident_bytes: 74780672,
                shmem_mapped_bytes: 0,
                tmpfs_bytes: 12288,
                memfd_bytes: 0,
            },
        },
    );
    pin(
        "LimitBreach",
        1,
        LimitBreach {
            session: s("9c41e07d3a52"),
            mechanism: Breach::Cgroup { oom_kills: 1 },
        },
    );
}

const UNSHARE: &str = "new namespaces (userns unlocks CVE-2022-0185, CVE-2023-32233, \
                       CVE-2022-0492); CLONE_FILES/FS pass";

#[test]
fn syscall_refused() {
    pin(
        "SyscallRefused",
        0,
        SyscallRefused {
            session: s("3fa1c09b22de"),
            syscall: s("unshare"),
            reason: s(UNSHARE),
            pid: 81234,
            nr: 272,
            args: [0x1000_0000, 0, 0, 0, 0, 0],
            checked_arg: Some(CheckedArg {
                index: 0,
                value: 0x1000_0000,
            }),
            errno: 1,
            error: errno_name(1),
        },
    );
}

#[test]
fn syscall_summary() {
    pin(
        "SyscallSummary",
        0,
        SyscallSummary {
            session: s("3fa1c09b22de"),
            syscall: s("unshare"),
            reason: s(UNSHARE),
            suppressed: 9990,
            nr: 272,
            errno: 1,
            error: s("EPERM"),
            rate_limit: s("10 records per second per rule"),
        },
    );
}

#[test]
fn syscalls_lost() {
    pin(
        "SyscallsLost",
        0,
        SyscallsLost {
            session: s("3fa1c09b22de"),
            lost: 212,
        },
    );
}

fn file_access(action: &str, path: &str, resolved: &str) -> FileAccess {
    FileAccess {
        session: s("3fa1c09b22de"),
        action: s(action),
        decision: Decision::Deny,
        reason: s("read-only grant"),
        path: s(path),
        path_bytes_hex: None,
        syscall: s("openat"),
        resolved: s(resolved),
        resolved_bytes_hex: None,
        to: None,
        to_bytes_hex: None,
        to_resolved: None,
        to_resolved_bytes_hex: None,
        target: None,
        target_bytes_hex: None,
        errno: Some(30),
        error: Some(s("EROFS")),
        flags: 0,
        pid: 81240,
    }
}

#[test]
fn file_access_records() {
    pin(
        "FileAccess",
        0,
        FileAccess {
            reason: s(
                "outside the sandbox's grants (the sandbox has a private $HOME; the \
                 host's is hidden)",
            ),
            errno: Some(2),
            error: Some(errno_name(2)),
            flags: 524288,
            ..file_access("open-read", "/home/u/.ssh/id_rsa", "/home/u/.ssh/id_rsa")
        },
    );
    pin(
        "FileAccess",
        1,
        FileAccess {
            flags: 524865,
            ..file_access("create", "notes.txt", "/home/u/data/notes.txt")
        },
    );
    // A new name that is not UTF-8: its text has U+FFFD, its bytes are in hex.
    let (to, to_hex) = path_text(b"caf\xe9.txt");
    let (to_resolved, to_resolved_hex) = path_text(b"/home/u/docs/caf\xe9.txt");
    assert_eq!(path_text(b"draft.txt"), (s("draft.txt"), None));
    pin(
        "FileAccess",
        2,
        FileAccess {
            syscall: s("renameat2"),
            to: Some(to),
            to_bytes_hex: to_hex,
            to_resolved: Some(to_resolved),
            to_resolved_bytes_hex: to_resolved_hex,
            ..file_access("rename", "draft.txt", "/home/u/docs/draft.txt")
        },
    );
}

#[test]
fn file_summary() {
    let rate_limit = s("10 records per second per path, 1000 per session");
    pin(
        "FileSummary",
        0,
        FileSummary {
            session: s("3fa1c09b22de"),
            action: s("open-read"),
            decision: Decision::Deny,
            reason: s(
                "outside the sandbox's grants (the sandbox has a private $HOME; the \
                 host's is hidden)",
            ),
            path: Some(s("/home/u/.ssh/id_rsa")),
            path_bytes_hex: None,
            suppressed: 9990,
            rate_limit: rate_limit.clone(),
        },
    );
    pin(
        "FileSummary",
        1,
        FileSummary {
            session: s("3fa1c09b22de"),
            action: s("open-read"),
            decision: Decision::Allow,
            reason: s("more file records than the session's budget per second"),
            path: None,
            path_bytes_hex: None,
            suppressed: 4410,
            rate_limit,
        },
    );
}

#[test]
fn files_lost() {
    pin(
        "FilesLost",
        0,
        FilesLost {
            session: s("3fa1c09b22de"),
            lost: 388,
        },
    );
}

#[test]
fn network_connect() {
    pin(
        "NetworkConnect",
        0,
        NetworkConnect {
            session: s("e7a94eb68290"),
            allowed: true,
            reason: s("allowed by `registry.npmjs.org:443`"),
            protocol: s("connect"),
            host: s("registry.npmjs.org"),
            port: 443,
            address: Some(s("104.16.3.35:443")),
            rule: Some(s("registry.npmjs.org:443")),
            code: s("allowed"),
            approval: None,
        },
    );
    pin(
        "NetworkConnect",
        1,
        NetworkConnect {
            session: s("e7a94eb68290"),
            allowed: false,
            reason: s("example.com:80 is not in network.allow"),
            protocol: s("http"),
            host: s("example.com"),
            port: 80,
            address: None,
            rule: None,
            code: s("not-allowed"),
            approval: None,
        },
    );
    pin(
        "NetworkConnect",
        2,
        NetworkConnect {
            session: s("e7a94eb68290"),
            allowed: true,
            reason: s("allowed by approval ap-5f0c2e9a7b3d4c1e8f6a2b9d0c7e3f1a (session)"),
            protocol: s("connect"),
            host: s("api.example.com"),
            port: 443,
            address: Some(s("93.184.215.14:443")),
            rule: Some(s("api.example.com:443")),
            code: s("allowed"),
            approval: Some(Approved {
                id: s("ap-5f0c2e9a7b3d4c1e8f6a2b9d0c7e3f1a"),
                scope: s("session"),
            }),
        },
    );
}

const AP: &str = "ap-5f0c2e9a7b3d4c1e8f6a2b9d0c7e3f1a";

fn approval_request() -> ApprovalRequest {
    ApprovalRequest {
        session: s("e7a94eb68290"),
        resource: s("api.example.com:443"),
        id: s(AP),
        kind: s("network"),
        operation: s("connect"),
        server: Some(s("fetch")),
        timeout_ms: 60000,
        channels: strings(&["terminal", "desktop"]),
        via: CallRef::of(&[(s("7"), s("fetch"))]),
    }
}

#[test]
fn approval_records() {
    pin("ApprovalRequest", 0, approval_request());
    pin(
        "ApprovalAnswer",
        0,
        ApprovalAnswer {
            session: s("e7a94eb68290"),
            resource: s("api.example.com:443"),
            id: s(AP),
            kind: s("network"),
            operation: s("connect"),
            scope: s("session"),
            channel: s("cli"),
            by: s("uid 1000 pid 4242 (wardenctl)"),
            waited_ms: 5210,
            via: CallRef::of(&[(s("7"), s("fetch"))]),
        },
    );
    pin(
        "ApprovalExpire",
        0,
        ApprovalExpire {
            session: s("e7a94eb68290"),
            resource: s("/home/u/notes/todo.txt"),
            id: s("ap-0b7d1e4f9a2c6e8b3d5f7a9c1e2b4d6f"),
            kind: s("file"),
            operation: s("read"),
            cause: s("timeout"),
            waited_ms: 60001,
            via: CallRef::default(),
        },
    );
    pin(
        "ApprovalRefuse",
        0,
        ApprovalRefuse {
            session: s("e7a94eb68290"),
            resource: s("evil.example:443"),
            kind: s("network"),
            operation: s("connect"),
            cause: s("denied-for-session"),
        },
    );
    pin(
        "ApprovalPolicyEdit",
        0,
        ApprovalPolicyEdit {
            session: s("e7a94eb68290"),
            path: s("/home/u/.config/warden/policies/fetch.yaml"),
            error: None,
            id: s(AP),
            key: s("network.allow"),
            entry: s("api.example.com:443"),
            merged: false,
            already_present: false,
        },
    );
}

#[test]
fn an_answer_is_allow_unless_it_denies() {
    let mut a = ApprovalAnswer::from_record(&examples("ApprovalAnswer")[0].1).unwrap();
    a.scope = s("deny");
    let r: Record = a.clone().into();
    assert_eq!(r.decision, Decision::Deny);
    assert_eq!(ApprovalAnswer::from_record(&r).unwrap(), a);
    let mut forged = r.clone();
    forged.decision = Decision::Allow;
    assert!(ApprovalAnswer::from_record(&forged).is_err());
}

#[test]
fn network_accept() {
    pin(
        "NetworkAccept",
        0,
        NetworkAccept {
            session: s("e7a94eb68290"),
            listener: s("127.0.0.1:3128"),
            error: s("Too many open files (os error 24)"),
            errno: Some(24),
            failures: 3,
            shed: 3,
        },
    );
}

#[test]
fn network_resolve() {
    pin(
        "NetworkResolve",
        0,
        NetworkResolve {
            session: s("e7a94eb68290"),
            allowed: true,
            reason: s("the host's public addresses for an allowlisted name"),
            name: s("api.example.com"),
            address: Some(s("140.82.112.5,140.82.112.6")),
            code: s("resolved"),
        },
    );
    pin(
        "NetworkResolve",
        1,
        NetworkResolve {
            session: s("e7a94eb68290"),
            allowed: false,
            reason: s("evil.example is not in network.allow: NXDOMAIN, nothing asked upstream"),
            name: s("evil.example"),
            address: None,
            code: s("nxdomain"),
        },
    );
}

#[test]
fn network_close() {
    pin(
        "NetworkClose",
        0,
        NetworkClose {
            session: s("e7a94eb68290"),
            protocol: s("connect"),
            host: s("registry.npmjs.org"),
            port: 443,
            address: s("104.16.3.35:443"),
            bytes_up: 1529,
            bytes_down: 48211,
            duration_ms: 418,
        },
    );
}

#[test]
fn network_summary() {
    let rate_limit = s("10 records per second per target, 100 per session");
    pin(
        "NetworkSummary",
        0,
        NetworkSummary {
            session: s("e7a94eb68290"),
            action: s("connect"),
            decision: Decision::Deny,
            target: Some(s("example.com:80")),
            reason: s("example.com:80 is not in network.allow"),
            suppressed: 4,
            bytes_up: 0,
            bytes_down: 0,
            rate_limit: rate_limit.clone(),
        },
    );
    pin(
        "NetworkSummary",
        1,
        NetworkSummary {
            session: s("e7a94eb68290"),
            action: s("close"),
            decision: Decision::Info,
            target: None,
            reason: s("more network records than the session's budget per second"),
            suppressed: 57,
            bytes_up: 220114,
            bytes_down: 9120331,
            rate_limit,
        },
    );
}

const SOCKET: &str = "/run/user/1000/warden/wardend.sock";
const STORE: &str = "/home/u/.local/state/warden/audit";

#[test]
fn daemon_start_and_stop() {
    pin(
        "DaemonStart",
        0,
        DaemonStart {
            socket: s(SOCKET),
            pid: 8217,
            version: s("0.1.0"),
        },
    );
    pin("DaemonStop", 0, DaemonStop { socket: s(SOCKET) });
}

#[test]
fn daemon_peer() {
    pin(
        "DaemonPeer",
        0,
        DaemonPeer {
            resource: s("pid 81377"),
            reason: s("peer is inside a sandbox: its user and pid namespaces are not the daemon's"),
            peer_uid: 1000,
            peer_pid: Some(81377),
            daemon_uid: 1000,
            namespaces: Some(PeerNamespaces {
                via: s("SO_PEERPIDFD"),
                daemon_userns: s("[4026531837]"),
                daemon_pidns: s("[4026531836]"),
                peer_userns: Some(s("[4026532866]")),
                peer_pidns: Some(s("[4026532871]")),
                error: None,
            }),
        },
    );
    pin(
        "DaemonPeer",
        1,
        DaemonPeer {
            resource: s("uid 1001"),
            reason: s("peer uid is not the daemon's uid"),
            peer_uid: 1001,
            peer_pid: Some(90211),
            daemon_uid: 1000,
            namespaces: None,
        },
    );
    // Namespaces that could not be read: the peer's are absent, `error` says why.
    let unknown = DaemonPeer {
        resource: s("uid 1000"),
        reason: s(
            "cannot tell whether the peer is inside a sandbox (the peer process has \
             exited); refused",
        ),
        peer_uid: 1000,
        peer_pid: None,
        daemon_uid: 1000,
        namespaces: Some(PeerNamespaces {
            via: s("SO_PEERPIDFD"),
            daemon_userns: s("[1]"),
            daemon_pidns: s("[2]"),
            peer_userns: None,
            peer_pidns: None,
            error: Some(s("the peer process has exited")),
        }),
    };
    let r: Record = unknown.clone().into();
    assert_eq!(
        r.details,
        serde_json::json!({
            "peer_uid": 1000, "peer_pid": null, "daemon_uid": 1000, "via": "SO_PEERPIDFD",
            "daemon_userns": "[1]", "daemon_pidns": "[2]", "error": "the peer process has exited",
        })
    );
    assert_eq!(DaemonPeer::from_record(&r).unwrap(), unknown);
}

#[test]
fn daemon_peer_summary() {
    pin(
        "DaemonPeerSummary",
        0,
        DaemonPeerSummary {
            reason: s("peer is inside a sandbox: its user and pid namespaces are not the daemon's"),
            suppressed: 4187,
            rate_limit: s("10 records per second per reason"),
        },
    );
}

#[test]
fn daemon_rotate() {
    pin(
        "DaemonRotate",
        0,
        DaemonRotate {
            file: crate::store::rotated_name(1),
            first_seq: 1,
            last_seq: 4710,
            max_bytes: 64 << 20,
            keep: 8,
            deleted: vec![],
            oldest_seq: 1,
            kept_for_live_sessions: 0,
        },
    );
}

#[test]
fn daemon_retention() {
    pin(
        "DaemonRetention",
        0,
        DaemonRetention {
            dir: s(STORE),
            keep: 1,
            deleted: vec![
                crate::store::rotated_name(1),
                crate::store::rotated_name(4711),
            ],
            oldest_seq: 9807,
        },
    );
}

#[test]
fn daemon_damaged() {
    let found = s("f0aa8477aaa54d5ddaa7d411e3267716ad95edfa618ae744dae3749a3773d841");
    let head = s("10a42234f1c130e358b1656e797e1733e928dc61983f29f882a16562120518f8");
    pin(
        "DaemonDamaged",
        0,
        DaemonDamaged {
            dir: s(STORE),
            what: Damage::Truncated,
            head_seq: 130,
            head_hash: head.clone(),
            found_seq: 126,
            found_hash: found.clone(),
        },
    );
    pin(
        "DaemonDamaged",
        1,
        DaemonDamaged {
            dir: s(STORE),
            what: Damage::Edited,
            head_seq: 126,
            head_hash: head,
            found_seq: 126,
            found_hash: found,
        },
    );
}

#[test]
fn daemon_torn() {
    pin(
        "DaemonTorn",
        0,
        DaemonTorn {
            moved_to: crate::store::torn_name(124, 1796168974494),
            bytes: 14,
            after_seq: 123,
        },
    );
}
