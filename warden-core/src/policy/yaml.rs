//! The strict structural pass over the policy text.
//!
//! serde_yaml (libyaml) is the authority on values, but it stops at the first error
//! and keeps no positions once a value is parsed. This pass parses the same text with
//! yaml-rust2's event parser into a small tree with a position on every node, then
//! checks it against the v1 schema, reporting *every* unknown key (with a
//! suggestion), duplicate key and wrongly typed value, each with its line, column
//! and key path. It also returns [`Locations`], the map from key path
//! (`filesystem.read[1]`) to position that later, semantic rules use.

use std::collections::{HashMap, HashSet};

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A 1-based position in the policy text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    pub line: usize,
    pub column: usize,
}

impl From<Marker> for Mark {
    fn from(m: Marker) -> Self {
        // yaml-rust2 lines are 1-based, columns 0-based.
        Mark {
            line: m.line(),
            column: m.col() + 1,
        }
    }
}

/// Where each key path's value starts.
#[derive(Debug, Default)]
pub(crate) struct Locations(HashMap<String, Mark>);

impl Locations {
    pub(crate) fn get(&self, key: &str) -> Option<Mark> {
        self.0.get(key).copied()
    }
}

/// A structural problem: position, key path, message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub mark: Option<Mark>,
    pub key: Option<String>,
    pub message: String,
}

#[derive(Debug, Clone)]
struct Node {
    mark: Mark,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Scalar { value: String, plain: bool },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Node {
    fn is_null(&self) -> bool {
        matches!(&self.kind, Kind::Scalar { value, plain: true } if is_null(value))
    }

    /// "a list", "an integer `5`", ... for "expected X, found Y" messages.
    fn describe(&self) -> String {
        match &self.kind {
            Kind::Seq(_) => "a list".into(),
            Kind::Map(_) => "a mapping".into(),
            Kind::Scalar {
                value,
                plain: false,
            } => format!("a string `{value}`"),
            Kind::Scalar { value, plain: true } => {
                if is_null(value) {
                    "nothing (null)".into()
                } else if is_bool(value) {
                    format!("a boolean `{value}`")
                } else if is_int(value) {
                    format!("an integer `{value}`")
                } else if is_float(value) {
                    format!("a number `{value}`")
                } else {
                    format!("a string `{value}`")
                }
            }
        }
    }
}

// YAML 1.2 core schema resolution of plain scalars, as serde_yaml 0.9 does it.
fn is_null(s: &str) -> bool {
    matches!(s, "" | "~" | "null" | "Null" | "NULL")
}

fn is_bool(s: &str) -> bool {
    matches!(s, "true" | "True" | "TRUE" | "false" | "False" | "FALSE")
}

fn is_int(s: &str) -> bool {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (digits, radix) = if let Some(d) = digits.strip_prefix("0x") {
        (d, 16)
    } else if let Some(d) = digits.strip_prefix("0o") {
        (d, 8)
    } else if let Some(d) = digits.strip_prefix("0b") {
        (d, 2)
    } else {
        (digits, 10)
    };
    !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix))
}

fn is_float(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    matches!(lower.trim_start_matches(['+', '-']), ".inf" | ".nan")
        || (s.chars().any(|c| c.is_ascii_digit()) && s.parse::<f64>().is_ok())
}

/// Builds the node tree from yaml-rust2 events. Aliases are expanded (with a budget,
/// against "billion laughs" documents).
#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    documents: Vec<Node>,
    anchors: HashMap<usize, Node>,
    expanded: usize,
    too_many_aliases: Option<Mark>,
}

enum Frame {
    Seq(Mark, usize, Vec<Node>),
    Map(Mark, usize, Vec<(Node, Node)>, Option<Node>),
}

const ALIAS_BUDGET: usize = 10_000;

fn count(node: &Node) -> usize {
    match &node.kind {
        Kind::Scalar { .. } => 1,
        Kind::Seq(items) => 1 + items.iter().map(count).sum::<usize>(),
        Kind::Map(entries) => {
            1 + entries
                .iter()
                .map(|(k, v)| count(k) + count(v))
                .sum::<usize>()
        }
    }
}

impl Builder {
    fn push(&mut self, node: Node, anchor: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => self.documents.push(node),
            Some(Frame::Seq(_, _, items)) => items.push(node),
            Some(Frame::Map(_, _, entries, pending)) => match pending.take() {
                None => *pending = Some(node),
                Some(key) => entries.push((key, node)),
            },
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, marker: Marker) {
        let mark = Mark::from(marker);
        match ev {
            Event::Scalar(value, style, anchor, _tag) => {
                let plain = style == TScalarStyle::Plain;
                self.push(
                    Node {
                        mark,
                        kind: Kind::Scalar { value, plain },
                    },
                    anchor,
                );
            }
            Event::SequenceStart(anchor, _) => {
                self.stack.push(Frame::Seq(mark, anchor, Vec::new()))
            }
            Event::MappingStart(anchor, _) => {
                self.stack.push(Frame::Map(mark, anchor, Vec::new(), None))
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (node, anchor) = match self.stack.pop() {
                    Some(Frame::Seq(mark, anchor, items)) => (
                        Node {
                            mark,
                            kind: Kind::Seq(items),
                        },
                        anchor,
                    ),
                    Some(Frame::Map(start, anchor, entries, _)) => {
                        // A block mapping's start mark is where the parser noticed it,
                        // not where it begins; the first key is what a reader sees.
                        let mark = entries.first().map_or(start, |(k, _)| k.mark);
                        (
                            Node {
                                mark,
                                kind: Kind::Map(entries),
                            },
                            anchor,
                        )
                    }
                    None => return,
                };
                self.push(node, anchor);
            }
            Event::Alias(id) => {
                let Some(mut node) = self.anchors.get(&id).cloned() else {
                    return;
                };
                // Report problems where the alias is used, not where it was defined.
                node.mark = mark;
                self.expanded += count(&node);
                if self.expanded > ALIAS_BUDGET {
                    self.too_many_aliases.get_or_insert(mark);
                    return;
                }
                self.push(node, 0);
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

/// The value types of the v1 schema.
#[derive(Clone, Copy)]
enum Ty {
    Int,
    /// An integer or a decimal number.
    Num,
    Bool,
    Str,
    StrList,
    Map(&'static [(&'static str, Ty)]),
}

const FILESYSTEM: &[(&str, Ty)] = &[
    ("read", Ty::StrList),
    ("write", Ty::StrList),
    ("allow_git_init", Ty::Bool),
    ("dangerously_expose", Ty::StrList),
    ("allow_home_write", Ty::Bool),
];
const NETWORK: &[(&str, Ty)] = &[("allow", Ty::StrList), ("allow_private", Ty::Bool)];
const ENV: &[(&str, Ty)] = &[("allow", Ty::StrList)];
const LIMITS: &[(&str, Ty)] = &[
    ("memory_mb", Ty::Int),
    ("timeout_s", Ty::Int),
    ("pids", Ty::Int),
    ("tmp_mb", Ty::Int),
    ("cpu", Ty::Num),
    ("best_effort", Ty::Bool),
];
const SANDBOX: &[(&str, Ty)] = &[
    ("landlock_min_abi", Ty::Int),
    ("best_effort_write_protection", Ty::Bool),
];
const AUDIT: &[(&str, Ty)] = &[("files", Ty::Str)];
const TOP: &[(&str, Ty)] = &[
    ("version", Ty::Int),
    ("name", Ty::Str),
    ("command", Ty::StrList),
    ("cwd", Ty::Str),
    ("filesystem", Ty::Map(FILESYSTEM)),
    ("network", Ty::Map(NETWORK)),
    ("env", Ty::Map(ENV)),
    ("limits", Ty::Map(LIMITS)),
    ("sandbox", Ty::Map(SANDBOX)),
    ("audit", Ty::Map(AUDIT)),
];

/// What the structural pass found.
#[derive(Debug)]
pub(crate) struct Checked {
    /// False when the document is empty, only comments, or `null`.
    pub has_content: bool,
    pub locations: Locations,
    pub problems: Vec<Problem>,
}

/// Parses `text` and checks it against the v1 schema. `Err` is a YAML syntax error
/// (reported alone: nothing after it can be trusted).
pub(crate) fn check(text: &str) -> Result<Checked, Problem> {
    let mut builder = Builder::default();
    Parser::new_from_str(text)
        .load(&mut builder, true)
        .map_err(|e| Problem {
            mark: Some(Mark::from(*e.marker())),
            key: None,
            message: format!("invalid YAML: {}", e.info()),
        })?;
    if let Some(mark) = builder.too_many_aliases {
        return Err(Problem {
            mark: Some(mark),
            key: None,
            message: "invalid YAML: too many alias expansions".into(),
        });
    }
    let mut documents = builder.documents.into_iter();
    let root = documents.next();
    if let Some(second) = documents.next() {
        return Err(Problem {
            mark: Some(second.mark),
            key: None,
            message: "a policy file holds one YAML document; remove the extra `---` document"
                .into(),
        });
    }
    let mut checked = Checked {
        has_content: false,
        locations: Locations::default(),
        problems: Vec::new(),
    };
    if let Some(root) = root.filter(|r| !r.is_null()) {
        checked.has_content = true;
        walk(&root, Ty::Map(TOP), "", &mut checked);
    }
    Ok(checked)
}

fn join_key(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

/// The last segment of a key path, for suggestions ("write it as a list: read: [..]").
fn leaf(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

fn problem(checked: &mut Checked, node: &Node, path: &str, message: String) {
    checked.problems.push(Problem {
        mark: Some(node.mark),
        key: (!path.is_empty()).then(|| path.to_owned()),
        message,
    });
}

fn walk(node: &Node, ty: Ty, path: &str, checked: &mut Checked) {
    checked.locations.0.insert(path.to_owned(), node.mark);
    match (ty, &node.kind) {
        (Ty::Int, Kind::Scalar { value, plain: true }) if is_int(value) => {}
        (Ty::Int, _) => {
            let msg = format!("expected an integer, found {}", node.describe());
            problem(checked, node, path, msg);
        }
        (Ty::Num, Kind::Scalar { value, plain: true }) if is_int(value) || is_float(value) => {}
        (Ty::Num, _) => {
            let msg = format!("expected a number, found {}", node.describe());
            problem(checked, node, path, msg);
        }
        (Ty::Bool, Kind::Scalar { value, plain: true }) if is_bool(value) => {}
        (Ty::Bool, _) => {
            let msg = format!("expected `true` or `false`, found {}", node.describe());
            problem(checked, node, path, msg);
        }
        // serde_yaml reads any non-null scalar as a string (`name: 123` is "123").
        (Ty::Str, Kind::Scalar { .. }) if !node.is_null() => {}
        (Ty::Str, _) => {
            let msg = format!("expected a string, found {}", node.describe());
            problem(checked, node, path, msg);
        }
        (Ty::StrList, Kind::Seq(items)) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, Ty::Str, &format!("{path}[{i}]"), checked);
            }
        }
        (Ty::StrList, Kind::Scalar { value, .. }) if !node.is_null() => {
            let words: Vec<&str> = if path == "command" {
                value.split_whitespace().collect()
            } else {
                vec![value.as_str()]
            };
            let list: Vec<String> = words
                .iter()
                .map(|w| serde_json::to_string(w).unwrap_or_default())
                .collect();
            let msg = format!(
                "expected a list of strings, found a string; write it as a list: {}: [{}]",
                leaf(path),
                list.join(", ")
            );
            problem(checked, node, path, msg);
        }
        (Ty::StrList, _) => {
            let msg = format!("expected a list of strings, found {}", node.describe());
            problem(checked, node, path, msg);
        }
        (Ty::Map(fields), Kind::Map(entries)) => walk_map(fields, entries, path, checked),
        (Ty::Map(_), _) => {
            let what = if path.is_empty() {
                "the policy must be a mapping of keys to values"
            } else {
                "expected a mapping"
            };
            let msg = format!("{what}, found {}", node.describe());
            problem(checked, node, path, msg);
        }
    }
}

fn walk_map(
    fields: &'static [(&'static str, Ty)],
    entries: &[(Node, Node)],
    path: &str,
    checked: &mut Checked,
) {
    let mut seen = HashSet::new();
    for (key_node, value) in entries {
        let key = match &key_node.kind {
            Kind::Scalar { value, .. } if !key_node.is_null() => value.as_str(),
            _ => {
                let msg = format!("expected a key name, found {}", key_node.describe());
                problem(checked, key_node, path, msg);
                continue;
            }
        };
        let key_path = join_key(path, key);
        if !seen.insert(key) {
            problem(
                checked,
                key_node,
                &key_path,
                format!("duplicate key `{key}`"),
            );
            continue;
        }
        let Some(&(_, ty)) = fields.iter().find(|(name, _)| *name == key) else {
            let msg = unknown_key(key, fields);
            problem(checked, key_node, &key_path, msg);
            continue;
        };
        if value.is_null() {
            // `read:` with nothing after it: the same as leaving the key out.
            checked.locations.0.insert(key_path, value.mark);
            continue;
        }
        walk(value, ty, &key_path, checked);
    }
}

fn unknown_key(key: &str, fields: &[(&str, Ty)]) -> String {
    let best = fields
        .iter()
        .map(|(name, _)| (strsim::damerau_levenshtein(key, name), *name))
        .min();
    // A typo (a third of the letters wrong), or a shortened or extended name
    // (`memory` for `memory_mb`, `environment` for `env`).
    let prefix = fields.iter().map(|(n, _)| *n).find(|n| {
        let (short, long) = if key.len() < n.len() {
            (key, *n)
        } else {
            (*n, key)
        };
        short.len() >= 3 && long.starts_with(short)
    });
    match best
        .filter(|(d, n)| *d <= 1.max(n.len() / 3))
        .map(|(_, n)| n)
        .or(prefix)
    {
        Some(name) => {
            format!("unknown key `{key}`, did you mean `{name}`?")
        }
        _ => {
            let names: Vec<String> = fields.iter().map(|(n, _)| format!("`{n}`")).collect();
            format!("unknown key `{key}`; expected one of {}", names.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        check(text)
            .unwrap()
            .problems
            .into_iter()
            .map(|p| {
                let m = p.mark.unwrap();
                format!(
                    "{}:{}: {}: {}",
                    m.line,
                    m.column,
                    p.key.unwrap_or_default(),
                    p.message
                )
            })
            .collect()
    }

    #[test]
    fn valid_policy_has_no_problems_and_locates_every_value() {
        let text = "name: x\ncommand: [a, b]\nfilesystem:\n  read:\n    - ./d\n    - '~/e'\n  write: []\nlimits: {timeout_s: 5}\n";
        let c = check(text).unwrap();
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert!(c.has_content);
        let at = |k: &str| c.locations.get(k).map(|m| (m.line, m.column));
        assert_eq!(at("name"), Some((1, 7)));
        assert_eq!(at("command[1]"), Some((2, 14)));
        assert_eq!(at("filesystem.read[0]"), Some((5, 7)));
        assert_eq!(at("filesystem.read[1]"), Some((6, 7)));
        assert_eq!(at("limits.timeout_s"), Some((8, 21)));
        assert_eq!(at("filesystem"), Some((4, 3)));
    }

    #[test]
    fn empty_and_comment_only_documents_have_no_content() {
        for text in ["", "\n", "# just a comment\n# another\n", "---\n", "~\n"] {
            let c = check(text).unwrap();
            assert!(!c.has_content && c.problems.is_empty(), "{text:?}");
        }
    }

    #[test]
    fn unknown_keys_get_suggestions() {
        assert_eq!(
            problems("filesytem:\n  reed: []\nenvironment: {}\nbase: 1\nlimits:\n  timeout: 3\nfoo: 1\n"),
            vec![
                "1:1: filesytem: unknown key `filesytem`, did you mean `filesystem`?",
                "3:1: environment: unknown key `environment`, did you mean `env`?",
                "4:1: base: unknown key `base`; expected one of `version`, `name`, `command`, `cwd`, `filesystem`, `network`, `env`, `limits`, `sandbox`, `audit`",
                "6:3: limits.timeout: unknown key `timeout`, did you mean `timeout_s`?",
                "7:1: foo: unknown key `foo`; expected one of `version`, `name`, `command`, `cwd`, `filesystem`, `network`, `env`, `limits`, `sandbox`, `audit`",
            ]
        );
    }

    #[test]
    fn duplicate_keys_are_reported_at_the_second_one() {
        assert_eq!(
            problems("name: a\nfilesystem:\n  read: []\n  read: [x]\nname: b\n"),
            vec![
                "4:3: filesystem.read: duplicate key `read`",
                "5:1: name: duplicate key `name`",
            ]
        );
    }

    #[test]
    fn wrong_types_are_all_reported() {
        assert_eq!(
            problems("version: '1'\nname: [a]\ncommand: npx -y pkg\nfilesystem:\n  read: ./data\n  write: [a, {b: c}, ~]\nlimits:\n  memory_mb: 1.5\n  timeout_s: true\nenv: [A]\n"),
            vec![
                "1:10: version: expected an integer, found a string `1`",
                "2:7: name: expected a string, found a list",
                "3:10: command: expected a list of strings, found a string; write it as a list: command: [\"npx\", \"-y\", \"pkg\"]",
                "5:9: filesystem.read: expected a list of strings, found a string; write it as a list: read: [\"./data\"]",
                "6:15: filesystem.write[1]: expected a string, found a mapping",
                "6:22: filesystem.write[2]: expected a string, found nothing (null)",
                "8:14: limits.memory_mb: expected an integer, found a number `1.5`",
                "9:14: limits.timeout_s: expected an integer, found a boolean `true`",
                "10:6: env: expected a mapping, found a list",
            ]
        );
    }

    #[test]
    fn top_level_must_be_a_mapping() {
        assert_eq!(
            problems("- a\n- b\n"),
            vec!["1:1: : the policy must be a mapping of keys to values, found a list"]
        );
    }

    #[test]
    fn syntax_errors_are_reported_alone_with_a_position() {
        let p = check("name: x\ncommand: [a, b\n").unwrap_err();
        assert_eq!(p.mark, Some(Mark { line: 3, column: 1 }));
        assert!(p.message.starts_with("invalid YAML: "), "{}", p.message);
    }

    #[test]
    fn several_documents_are_refused() {
        let p = check("name: a\n---\nname: b\n").unwrap_err();
        assert_eq!(
            p.message,
            "a policy file holds one YAML document; remove the extra `---` document"
        );
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let prev = format!("*a{}", i - 1);
            text.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 10].join(", ")));
        }
        let p = check(&text).unwrap_err();
        assert_eq!(p.message, "invalid YAML: too many alias expansions");
    }

    #[test]
    fn scalar_resolution_matches_yaml_core_schema() {
        for s in ["1", "-3", "+4", "0x1f", "0o17", "0b101"] {
            assert!(is_int(s), "{s}");
        }
        for s in ["", "-", "0x", "1.0", "one", "1e3"] {
            assert!(!is_int(s), "{s}");
        }
        for s in ["1.5", "1e3", ".inf", "-.Inf", ".NaN"] {
            assert!(is_float(s), "{s}");
        }
        for s in ["inf", "nan", "abc", "."] {
            assert!(!is_float(s), "{s}");
        }
    }
}
