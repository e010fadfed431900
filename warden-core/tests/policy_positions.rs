//! Where each key and value of a policy is written: what a tool that edits the
//! file in place (keeping the user's comments and formatting) builds on.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use warden_core::policy::{parse, Located, Span};

const TEXT: &str = "\
# Who may connect where.
command: [server]
network:
  allow:
    - api.github.com      # the API
    - \"*.githubusercontent.com\"
  allow_private: false
filesystem: {read: [./data], write: ['./out']}
env:
  allow:
";

fn located(key: &str) -> Located {
    let parsed = parse(TEXT, None).unwrap();
    *parsed
        .position(key)
        .unwrap_or_else(|| panic!("{key} is not located"))
}

fn text(span: Span) -> &'static str {
    &TEXT[span.range()]
}

#[test]
fn a_block_list_and_its_items_are_spanned() {
    let allow = located("network.allow");
    assert_eq!(allow.key.map(text), Some("allow"));
    // From the first item's dash to the end of the last item; the comment
    // between them is the user's and stays where it is.
    assert_eq!(
        text(allow.value),
        "- api.github.com      # the API\n    - \"*.githubusercontent.com\""
    );
    let item = located("network.allow[1]");
    assert_eq!(item.key, None);
    assert_eq!(text(item.value), "\"*.githubusercontent.com\"");
    // Lines and columns are 1-based, columns in characters; offsets in bytes.
    assert_eq!((item.value.start.line, item.value.start.column), (6, 7));
    assert_eq!(item.value.start.offset, TEXT.find("\"*.").unwrap());
    assert_eq!(text(located("network.allow[0]").value), "api.github.com");
}

#[test]
fn flow_collections_are_spanned_with_their_brackets() {
    assert_eq!(
        text(located("filesystem").value),
        "{read: [./data], write: ['./out']}"
    );
    assert_eq!(text(located("filesystem.read").value), "[./data]");
    assert_eq!(text(located("filesystem.write[0]").value), "'./out'");
}

#[test]
fn a_key_without_a_value_has_an_empty_span_after_its_colon() {
    let allow = located("env.allow");
    assert_eq!(allow.key.map(text), Some("allow"));
    assert!(allow.value.range().is_empty());
    assert_eq!(allow.value.start.offset, TEXT.len() - 1);
    assert_eq!(&TEXT[..allow.value.start.offset], TEXT.trim_end());
}

#[test]
fn the_document_and_keys_left_out() {
    let parsed = parse(TEXT, None).unwrap();
    let doc = parsed.position("").unwrap();
    assert_eq!(doc.key, None);
    assert_eq!(
        &TEXT[doc.value.range()],
        TEXT["# Who may connect where.\n".len()..].trim_end()
    );
    assert!(parsed.position("limits").is_none());
    assert!(parse("# nothing\n", None).unwrap().positions().is_empty());
}

#[test]
fn a_text_that_does_not_parse_has_no_positions() {
    let file = std::path::Path::new("/p/policy.yaml");
    let err = parse("command: [server]\nfilesytem: {}\n", Some(file)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "/p/policy.yaml:2:1: filesytem: unknown key `filesytem`, did you mean `filesystem`?"
    );
}
