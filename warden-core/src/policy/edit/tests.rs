use super::*;

const NOTE: &str = "approved 2026-12-02 by wardenctl approve (ap-1x9)";

fn net(v: &str) -> Grant {
    Grant::Network(v.into())
}

fn edited(text: &str, grant: &Grant) -> String {
    let e = add_grant(text, grant, NOTE).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert!(!e.already_present, "{text:?}");
    e.text
}

/// Each case: the text, the grant, the text after the edit.
fn cases(cases: &[(&str, Grant, &str)]) {
    for (before, grant, after) in cases {
        let got = edited(before, grant);
        assert_eq!(got, *after, "editing {before:?}");
        // What it means: the old policy plus the one item.
        let parsed = crate::policy::parse(&got, None).unwrap();
        let list = grant.list(&parsed.raw).unwrap();
        assert_eq!(list.last().map(String::as_str), Some(grant.value()));
    }
}

/// A policy with comments everywhere, a block list in the middle.
const COMMENTED: &str = "\
# Policy for the GitHub server.   
# Keep this list short.

version: 1          # the schema
name: github
command: [\"server\", '-y']   # argv

network:
  # The hosts it needs.
  allow:
    - api.github.com        # the API
    # - uploads.github.com  (not yet)
    - \"*.githubusercontent.com\"

  allow_private: false # never

env:
  allow: [GITHUB_TOKEN]   # only this

# trailing comment
";

#[test]
fn a_block_list_gets_one_line_after_its_last_item_and_nothing_else_changes() {
    let want = COMMENTED.replace(
        "    - \"*.githubusercontent.com\"\n",
        "    - \"*.githubusercontent.com\"\n    - api.example.com:443  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n",
    );
    cases(&[(COMMENTED, net("api.example.com:443"), &want)]);
}

#[test]
fn block_lists_keep_their_indentation_and_dash_style() {
    cases(&[
        // Dashes at the key's own indentation.
        (
            "network:\n  allow:\n  - a.example\n  - b.example\nname: x\n",
            net("c.example"),
            "network:\n  allow:\n  - a.example\n  - b.example\n  - c.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\nname: x\n",
        ),
        // Four spaces, and three after the dash.
        (
            "network:\n    allow:\n        -   a.example   # a\n",
            net("c.example"),
            "network:\n    allow:\n        -   a.example   # a\n        -   c.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n",
        ),
        // The last item over two lines; an anchored item beside.
        (
            "filesystem:\n  read:\n    - &d /data\n    - /very/long\n      /path\n  write: []\n",
            Grant::Read("/srv".into()),
            "filesystem:\n  read:\n    - &d /data\n    - /very/long\n      /path\n    - /srv  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n  write: []\n",
        ),
    ]);
}

#[test]
fn flow_lists_get_the_item_inside_their_brackets_and_the_note_above() {
    cases(&[
        (
            "network:\n  allow: [\"a.example\", \"b.example\"]   # hosts\n",
            net("c.example:8443"),
            "network:\n  # c.example:8443: approved 2026-12-02 by wardenctl approve (ap-1x9)\n  allow: [\"a.example\", \"b.example\", \"c.example:8443\"]   # hosts\n",
        ),
        (
            "network:\n  allow: [a.example, 'b.example']\n",
            net("c.example"),
            "network:\n  # c.example: approved 2026-12-02 by wardenctl approve (ap-1x9)\n  allow: [a.example, 'b.example', c.example]\n",
        ),
        // Over several lines, with a trailing comma and comments.
        (
            "network:\n  allow: [\n    'a.example',   # a\n    'b.example',   # b\n    ]\n",
            net("[2001:db8::1]:8443"),
            "network:\n  allow: [\n    'a.example',   # a\n    # [2001:db8::1]:8443: approved 2026-12-02 by wardenctl approve (ap-1x9)\n    'b.example', '[2001:db8::1]:8443',   # b\n    ]\n",
        ),
        // Empty brackets.
        (
            "network:\n  allow: []   # none yet\n",
            net("a.example"),
            "network:\n  # a.example: approved 2026-12-02 by wardenctl approve (ap-1x9)\n  allow: [a.example]   # none yet\n",
        ),
        // The note goes above a multi-line scalar, never inside it.
        (
            "filesystem:\n  read: [\"/a\", \"/b\n    c\", /d]\n",
            Grant::Read("/e".into()),
            "filesystem:\n  read: [\"/a\", \"/b\n    c\", /d, /e]\n"
                .replace("  read:", "  # /e: approved 2026-12-02 by wardenctl approve (ap-1x9)\n  read:")
                .as_str(),
        ),
    ]);
}

#[test]
fn a_key_without_a_value_gets_a_block_list() {
    cases(&[
        (
            "network:\n  allow:\n  allow_private: true\n",
            net("a.example"),
            "network:\n  allow:\n    - a.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n  allow_private: true\n",
        ),
        (
            "network:\n  allow:    # to be filled\n",
            net("a.example"),
            "network:\n  allow:    # to be filled\n    - a.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n",
        ),
        // `~` and `null` are taken out (with the space before them), the comment kept.
        (
            "network:\n  allow: ~   # none\n",
            net("a.example"),
            "network:\n  allow:   # none\n    - a.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n",
        ),
        (
            "filesystem:\n  write: null\n",
            Grant::Write("/out".into()),
            "filesystem:\n  write:\n    - /out  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n",
        ),
        // `~` on a line of its own becomes brackets.
        (
            "network:\n  allow:\n    ~\n",
            net("a.example"),
            "network:\n  allow:\n    # a.example: approved 2026-12-02 by wardenctl approve (ap-1x9)\n    [a.example]\n",
        ),
        // The file's dash style, learnt from another list.
        (
            "env:\n  allow:\n  - A\nnetwork:\n  allow:\n",
            net("a.example"),
            "env:\n  allow:\n  - A\nnetwork:\n  allow:\n  - a.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n",
        ),
    ]);
}

#[test]
fn a_section_without_the_key_gets_it_after_its_last_entry() {
    cases(&[
        (
            "network:\n  allow_private: true   # c\n\nenv:\n  allow: [A]\n",
            net("a.example"),
            "network:\n  allow_private: true   # c\n  allow:\n    - a.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n\nenv:\n  allow: [A]\n",
        ),
        (
            "filesystem:\n    read:\n        - /a\n",
            Grant::Write("/b".into()),
            "filesystem:\n    read:\n        - /a\n    write:\n        - /b  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n",
        ),
        // A section with no value at all.
        (
            "network:   # later\nname: x\n",
            net("a.example"),
            "network:   # later\n  allow:\n    - a.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\nname: x\n",
        ),
        (
            "network: ~\n",
            net("a.example"),
            "network:\n  allow:\n    - a.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n",
        ),
    ]);
}

#[test]
fn a_missing_section_is_appended_in_the_files_indentation() {
    cases(&[
        (
            "name: x   # a label\ncommand: [server]\n\n# the end\n",
            net("a.example"),
            "name: x   # a label\ncommand: [server]\nnetwork:\n  allow:\n    - a.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n\n# the end\n",
        ),
        (
            "limits:\n    memory_mb: 512\nenv:\n    allow:\n    - A\n",
            Grant::Read("/data".into()),
            "limits:\n    memory_mb: 512\nenv:\n    allow:\n    - A\nfilesystem:\n    read:\n    - /data  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n",
        ),
    ]);
}

#[test]
fn empty_files_comment_only_files_and_document_markers() {
    let block = "network:\n  allow:\n    - a.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n";
    cases(&[
        ("", net("a.example"), block),
        (
            "# nothing yet\n\n",
            net("a.example"),
            &format!("# nothing yet\n\n{block}"),
        ),
        (
            "# no final line break",
            net("a.example"),
            "# no final line break\nnetwork:\n  allow:\n    - a.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)",
        ),
        (
            "%YAML 1.2\n--- # start\n# c\n... # end\n# after\n",
            net("a.example"),
            &format!("%YAML 1.2\n--- # start\n# c\n{block}... # end\n# after\n"),
        ),
        (
            "---\nname: x\n...\n",
            net("a.example"),
            &format!("---\nname: x\n{block}...\n"),
        ),
    ]);
}

#[test]
fn line_endings_and_a_missing_final_line_break_are_kept() {
    cases(&[
        (
            "# c\r\nnetwork:\r\n  allow:\r\n    - a.example\r\nname: x\r\n",
            net("b.example"),
            "# c\r\nnetwork:\r\n  allow:\r\n    - a.example\r\n    - b.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\r\nname: x\r\n",
        ),
        (
            "network:\r\n  allow: [a.example]\r\n",
            net("b.example"),
            "network:\r\n  # b.example: approved 2026-12-02 by wardenctl approve (ap-1x9)\r\n  allow: [a.example, b.example]\r\n",
        ),
        (
            "name: x\rnetwork:\r  allow:\r    - a.example",
            net("b.example"),
            "name: x\rnetwork:\r  allow:\r    - a.example\r    - b.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)",
        ),
        (
            "network:\n  allow:\n    - a.example",
            net("b.example"),
            "network:\n  allow:\n    - a.example\n    - b.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)",
        ),
        (
            "name: x",
            net("b.example"),
            "name: x\nnetwork:\n  allow:\n    - b.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)",
        ),
        (
            "network:\r\n  allow: ~",
            net("b.example"),
            "network:\r\n  allow:\r\n    - b.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)",
        ),
    ]);
}

#[test]
fn flow_mappings_are_edited_in_their_braces() {
    cases(&[
        (
            "network: {allow: [a.example], allow_private: true}\n",
            net("b.example"),
            "# b.example: approved 2026-12-02 by wardenctl approve (ap-1x9)\nnetwork: {allow: [a.example, b.example], allow_private: true}\n",
        ),
        (
            "network: {allow_private: true}   # c\n",
            net("b.example"),
            "# b.example: approved 2026-12-02 by wardenctl approve (ap-1x9)\nnetwork: {allow_private: true, allow: [b.example]}   # c\n",
        ),
        (
            "network: {}\n",
            net("b.example"),
            "# b.example: approved 2026-12-02 by wardenctl approve (ap-1x9)\nnetwork: {allow: [b.example]}\n",
        ),
        (
            "{name: x, command: [server]}\n",
            Grant::Write("/out".into()),
            "# /out: approved 2026-12-02 by wardenctl approve (ap-1x9)\n{name: x, command: [server], filesystem: {write: [/out]}}\n",
        ),
        (
            "{network: {allow: }}\n",
            net("b.example"),
            "# b.example: approved 2026-12-02 by wardenctl approve (ap-1x9)\n{network: {allow: [b.example]}}\n",
        ),
        (
            "{network: ~, name: x}\n",
            net("b.example"),
            "# b.example: approved 2026-12-02 by wardenctl approve (ap-1x9)\n{network: {allow: [b.example]}, name: x}\n",
        ),
    ]);
}

#[test]
fn the_item_is_quoted_only_when_it_must_be_or_as_its_neighbours_are() {
    let line = |item: &str| {
        format!("network:\n  allow:\n    - {item}  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n")
    };
    cases(&[
        ("", net("api.example.com:443"), &line("api.example.com:443")),
        ("", net("*.example.com"), &line("\"*.example.com\"")),
        ("", net("[2001:db8::1]:8443"), &line("\"[2001:db8::1]:8443\"")),
        ("", net("10.0.0.1:443"), &line("10.0.0.1:443")),
        ("", net("yes.example private"), &line("yes.example private")),
        (
            "filesystem:\n  read: ['/a']\n",
            Grant::Read("/it's".into()),
            "filesystem:\n  # /it's: approved 2026-12-02 by wardenctl approve (ap-1x9)\n  read: ['/a', '/it''s']\n",
        ),
        (
            "filesystem:\n  read:\n    - \"/a\"\n",
            Grant::Read("/b \"q\" #1".into()),
            "filesystem:\n  read:\n    - \"/a\"\n    - \"/b \\\"q\\\" #1\"  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n",
        ),
        // Mixed neighbours: plain where it can be.
        (
            "filesystem:\n  write: [\"/a\", /b]\n",
            Grant::Write("/c".into()),
            "filesystem:\n  # /c: approved 2026-12-02 by wardenctl approve (ap-1x9)\n  write: [\"/a\", /b, /c]\n",
        ),
    ]);
    for (value, flow, ok) in [
        ("api.example.com", false, true),
        ("api.example.com:443", false, true),
        ("api.example.com:443", true, false),
        ("/home/u/my docs", false, true),
        ("/a, b", true, false),
        ("*.a.com", false, false),
        ("yes", false, false),
        ("123", false, false),
        ("1.5", false, false),
        ("~", false, false),
        ("null", false, false),
        ("a #b", false, false),
        ("a: b", false, false),
        ("a:", false, false),
        ("-a", false, false),
        ("", false, false),
    ] {
        assert_eq!(plain_ok(value, flow), ok, "{value:?} flow={flow}");
    }
}

#[test]
fn read_and_write_grants_go_to_their_lists() {
    let text = "filesystem:\n  read:\n    - /a\n  write:\n    - /b\n";
    cases(&[
        (
            text,
            Grant::Read("/c".into()),
            "filesystem:\n  read:\n    - /a\n    - /c  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n  write:\n    - /b\n",
        ),
        (
            text,
            Grant::Write("/c".into()),
            "filesystem:\n  read:\n    - /a\n  write:\n    - /b\n    - /c  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n",
        ),
    ]);
}

#[test]
fn an_empty_note_adds_no_comment() {
    let e = add_grant("network:\n  allow: [a]\n", &net("b.example"), "").unwrap();
    assert_eq!(e.text, "network:\n  allow: [a, b.example]\n");
    let e = add_grant("", &net("b.example"), "").unwrap();
    assert_eq!(e.text, "network:\n  allow:\n    - b.example\n");
}

#[test]
fn an_entry_already_there_leaves_the_text_as_it_is() {
    for (text, grant) in [
        (
            "network:\n  allow:\n    - a.example  # x\n",
            net("a.example"),
        ),
        ("network:\n  allow: ['a.example']\n", net("a.example")),
        (
            "filesystem:\n  read: &r [/a]\n  write: *r\n",
            Grant::Write("/a".into()),
        ),
    ] {
        let e = add_grant(text, &grant, NOTE).unwrap();
        assert_eq!(
            e,
            Edited {
                text: text.to_owned(),
                already_present: true
            }
        );
    }
}

fn refused(text: &str, grant: &Grant) -> String {
    add_grant(text, grant, NOTE)
        .expect_err("the edit should be refused")
        .to_string()
}

#[test]
fn anchors_and_aliases_on_the_way_are_refused_with_their_line() {
    for (text, grant, want) in [
        (
            "filesystem:\n  read: &r [/a]\n  write: *r\n",
            Grant::Write("/b".into()),
            "line 3: filesystem.write: it is written as an alias (`*r`) of a value written elsewhere, which other keys may share; add `/b` to filesystem.write by hand",
        ),
        (
            "filesystem:\n  read: &r [/a]\n  write: *r\n",
            Grant::Read("/b".into()),
            "line 2: filesystem.read: it carries an anchor (`&`), so other keys may share its value through aliases; add `/b` to filesystem.read by hand",
        ),
        (
            "env: &e\n  allow: [A]\nnetwork: *e\n",
            net("b.example"),
            "line 3: network: it is written as an alias (`*e`) of a value written elsewhere, which other keys may share; add `b.example` to network.allow by hand",
        ),
        (
            "network: &n\n  allow:\n    - a.example\nenv: *n\n",
            net("b.example"),
            "line 2: network: it carries an anchor (`&`), so other keys may share its value through aliases; add `b.example` to network.allow by hand",
        ),
        (
            "~\n",
            net("b.example"),
            "line 1: the document: it is written as `~`, which reads as nothing; add `b.example` to network.allow by hand",
        ),
        (
            "--- null # c\n",
            net("b.example"),
            "line 1: the document: it is written as `--- null # c`, which reads as nothing; add `b.example` to network.allow by hand",
        ),
    ] {
        assert_eq!(refused(text, &grant), want, "{text:?}");
    }
}

#[test]
fn an_invalid_policy_is_not_edited() {
    for (text, want) in [
        (
            "network:\n  allow: a.example\n",
            "the policy is not valid, so it was not edited: line 2, column 10: network.allow: expected a list of strings, found a string; write it as a list: allow: [\"a.example\"]",
        ),
        (
            "network: !!map {allow: [a]}\n",
            "the policy is not valid, so it was not edited: line 1, column 17: network: YAML tags are not supported: remove `!!map`",
        ),
        (
            "network:\n  allow: [a\n",
            "the policy is not valid, so it was not edited: line 3, column 1: invalid YAML: while parsing a flow sequence, expected ',' or ']'",
        ),
    ] {
        assert_eq!(refused(text, &net("b.example")), want, "{text:?}");
    }
}

#[test]
fn bad_grants_and_notes_are_refused() {
    for (grant, note, want) in [
        (
            Grant::Read("data".into()),
            NOTE,
            "filesystem.read: `data` cannot be added: an approved path must be absolute",
        ),
        (
            Grant::Write(String::new()),
            NOTE,
            "filesystem.write: `` cannot be added: it is empty",
        ),
        (
            net("a.example\nb: x"),
            NOTE,
            "network.allow: `a.example\\nb: x` cannot be added: it holds a control character or a line break",
        ),
        (
            net("*"),
            NOTE,
            "network.allow: `*` cannot be added: it is not a valid network.allow entry: `*`: `*` alone would allow every host; list the hosts the server needs (`*.example.com` allows the subdomains of one domain)",
        ),
        (
            net("a.example"),
            "ok\nname: evil",
            "the approval note `ok\\nname: evil` cannot be written as a comment: it holds a control character or a line break",
        ),
    ] {
        let err = add_grant("", &grant, note).expect_err("refused").to_string();
        assert_eq!(err, want);
    }
}

#[test]
fn an_edit_that_would_change_another_key_is_refused() {
    // The insertion point after `cwd`'s block scalar would take its kept
    // trailing line break away.
    let text = "cwd: |+\n  /tmp\n\n";
    assert_eq!(
        refused(text, &net("a.example")),
        "the edit of network.allow was not made: the edited text would change keys other than network.allow; add `a.example` to network.allow by hand"
    );
}

#[test]
fn errors_name_the_file_when_there_is_one() {
    let err = add_grant_in(
        "filesystem:\n  read: &r [/a]\n  write: *r\n",
        Some(Path::new("/p/policy.yaml")),
        &Grant::Write("/b".into()),
        NOTE,
    )
    .expect_err("refused");
    assert!(
        err.to_string()
            .starts_with("/p/policy.yaml:3: filesystem.write: "),
        "{err}"
    );
    let err = add_grant_in(
        "a: 1\n",
        Some(Path::new("/p/policy.yaml")),
        &net("x.example"),
        NOTE,
    )
    .expect_err("refused");
    assert!(
        err.to_string().starts_with(
            "the policy is not valid, so it was not edited: /p/policy.yaml:1:1: a: unknown key"
        ),
        "{err}"
    );
}

#[test]
fn edits_of_edits_keep_adding() {
    let mut text = String::from("# mine\nname: x\n");
    for host in ["a.example", "b.example", "c.example"] {
        text = edited(&text, &net(host));
    }
    assert_eq!(
        text,
        "# mine\nname: x\nnetwork:\n  allow:\n    - a.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n    - b.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n    - c.example  # approved 2026-12-02 by wardenctl approve (ap-1x9)\n"
    );
}

/// Whether `original` can be had from `edited` by only taking characters out
/// (a `~` that a list replaces aside).
fn only_added(original: &str, edited: &str) -> bool {
    let mut rest = edited.chars();
    original
        .replace(": ~", ":")
        .chars()
        .all(|c| rest.any(|e| e == c))
}

/// Policies full of comments, in every shape the three lists can be in.
const SHAPES: &[&str] = &[
    COMMENTED,
    "# top\n\n# more\n",
    "--- # doc\n# only comments\n...\n",
    "# c\r\nname: x   # n\r\n\r\nfilesystem:   # fs\r\n  read:   # r\r\n  - /a   # a\r\n  write: [   # w\r\n      /b,   # b\r\n    ]\r\n",
    "network:  # n\n    allow: []  # none\n    allow_private: true  # p\nfilesystem: {read: [/a], write: ['/b']}  # flow\n",
    "name: 'x'  # q\nnetwork: ~  # nothing\nfilesystem:\n  # nothing here either\n",
    "env:\n    allow:\n    -   A   # a\n# between\nlimits: {memory_mb: 512}  # l",
];

#[test]
fn every_shape_only_gains_text_and_a_second_edit_changes_nothing() {
    let grants = [
        net("api.example.com:443"),
        net("[2001:db8::1]:8443"),
        net("*.cdn.example"),
        Grant::Read("/srv/data".into()),
        Grant::Write("/home/u/my notes".into()),
    ];
    for text in SHAPES {
        for grant in &grants {
            let once = edited(text, grant);
            assert!(only_added(text, &once), "{text:?} became {once:?}");
            assert!(once.contains("(ap-1x9)"), "{once:?}");
            let crlf = text.contains("\r\n");
            assert_eq!(once.matches('\r').count() > 0, crlf, "{once:?}");
            let twice = add_grant(&once, grant, NOTE).unwrap();
            assert!(twice.already_present && twice.text == once, "{once:?}");
        }
        // All five, one after another, each keeping what came before.
        let mut all = text.to_string();
        for grant in &grants {
            let next = edited(&all, grant);
            assert!(only_added(&all, &next), "{all:?} became {next:?}");
            all = next;
        }
        let parsed = crate::policy::parse(&all, None).unwrap();
        for grant in &grants {
            assert!(
                grant
                    .list(&parsed.raw)
                    .unwrap()
                    .iter()
                    .any(|v| v == grant.value()),
                "{all:?}"
            );
        }
    }
}
