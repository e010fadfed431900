//! The v1 schema, written once: [`RawPolicy`] and the structs under it.
//!
//! Everything else follows from these structs. [`schema`] reads their field names
//! and types from their `Deserialize` impls (by tracing them, see [`trace`]); that
//! table drives [`check`], the strict pass that reports *every* unknown key (with a
//! suggestion), duplicate key, YAML tag and wrongly typed value, each with its line,
//! column and key path; and a test holds the key table of `docs/policy.md` to it.
//! The typed values then come from the same tree ([`super::de`]).
//!
//! Adding a key: add the field (an `Option`) here, document it in `docs/policy.md`,
//! and give it a rule in `rules.rs` if its values need one.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::OnceLock;

use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess};
use serde::Deserialize;

use super::yaml::{self, Kind, Node, Position, Problem, Resolved, Span};

/// The v1 schema as serde sees it; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    pub version: Option<i64>,
    pub name: Option<String>,
    pub command: Option<Vec<String>>,
    pub cwd: Option<String>,
    pub filesystem: Option<RawFilesystem>,
    pub network: Option<RawNetwork>,
    pub env: Option<RawEnv>,
    pub limits: Option<RawLimits>,
    pub sandbox: Option<RawSandbox>,
    pub audit: Option<RawAudit>,
    pub approve: Option<bool>,
    pub backend: Option<String>,
    pub docker: Option<RawDocker>,
    pub mcp: Option<RawMcp>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcp {
    pub tools: Option<RawMcpTools>,
    pub pin: Option<String>,
    pub explain_denials: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcpTools {
    pub allow: Option<Vec<String>>,
    pub deny: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDocker {
    pub image: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFilesystem {
    pub read: Option<Vec<String>>,
    pub write: Option<Vec<String>>,
    pub allow_git_init: Option<bool>,
    pub dangerously_expose: Option<Vec<String>>,
    pub allow_home_write: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNetwork {
    pub allow: Option<Vec<String>>,
    pub allow_private: Option<bool>,
    pub mode: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEnv {
    pub allow: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub memory_mb: Option<i64>,
    pub timeout_s: Option<i64>,
    pub pids: Option<i64>,
    pub tmp_mb: Option<i64>,
    pub cpu: Option<f64>,
    pub best_effort: Option<bool>,
    pub output_kb: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSandbox {
    pub landlock_min_abi: Option<i64>,
    pub best_effort_write_protection: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAudit {
    pub files: Option<String>,
    pub mcp_arguments: Option<bool>,
}

/// The value types a key can have.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
    /// An integer (an `i64` field).
    Int,
    /// An integer or a decimal number (an `f64` field).
    Num,
    Bool,
    Str,
    /// A list of strings (a `Vec<String>` field).
    StrList,
    /// A section: its keys, in the order they are declared.
    Map(Vec<(&'static str, Ty)>),
}

/// The schema of [`RawPolicy`], traced once.
pub(crate) fn schema() -> &'static Ty {
    static SCHEMA: OnceLock<Ty> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        trace::<RawPolicy>().unwrap_or_else(|e| panic!("the policy schema cannot be traced: {e}"))
    })
}

// ---------------------------------------------------------------------------
// Tracing: a Deserializer that feeds a `Deserialize` impl one placeholder of
// every type it asks for and notes what it asked for.

/// What the traced impl asked for.
#[derive(Debug)]
struct TraceError(String);

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TraceError {}

impl de::Error for TraceError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        TraceError(msg.to_string())
    }
}

fn trace<'de, T: Deserialize<'de>>() -> Result<Ty, TraceError> {
    let mut slot = None;
    T::deserialize(Tracer {
        slot: &mut slot,
        optional: true,
    })?;
    slot.ok_or_else(|| TraceError("nothing was deserialised".into()))
}

/// Records the type of the value it stands for in `slot`. `optional`: inside an
/// `Option` (every key must be: a key may always be left out).
struct Tracer<'a> {
    slot: &'a mut Option<Ty>,
    optional: bool,
}

impl Tracer<'_> {
    fn record(self, ty: Ty) -> Result<(), TraceError> {
        if !self.optional {
            return Err(TraceError(format!(
                "a key of type {ty:?} is not an Option: every key may be left out"
            )));
        }
        *self.slot = Some(ty);
        Ok(())
    }
}

impl<'de> Deserializer<'de> for Tracer<'_> {
    type Error = TraceError;

    fn deserialize_any<V: de::Visitor<'de>>(self, _: V) -> Result<V::Value, TraceError> {
        Err(TraceError(
            "a key's type must be an integer, a float, a boolean, a string, a list of strings or a section".into(),
        ))
    }

    fn deserialize_option<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        visitor.visit_some(Tracer {
            slot: self.slot,
            optional: true,
        })
    }

    fn deserialize_i64<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.record(Ty::Int)?;
        visitor.visit_i64(0)
    }

    fn deserialize_f64<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.record(Ty::Num)?;
        visitor.visit_f64(0.0)
    }

    fn deserialize_bool<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.record(Ty::Bool)?;
        visitor.visit_bool(false)
    }

    fn deserialize_string<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.record(Ty::Str)?;
        visitor.visit_str("")
    }

    fn deserialize_str<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.deserialize_string(visitor)
    }

    fn deserialize_seq<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        let mut item = None;
        let value = visitor.visit_seq(OneItem {
            slot: Some(&mut item),
        })?;
        match item {
            Some(Ty::Str) => self.record(Ty::StrList)?,
            other => return Err(TraceError(format!("lists hold strings, not {other:?}"))),
        }
        Ok(value)
    }

    fn deserialize_struct<V: de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        let mut types = Vec::new();
        let value = visitor.visit_map(Fields {
            fields,
            types: &mut types,
        })?;
        if types.len() != fields.len() {
            return Err(TraceError(format!(
                "not every field of {fields:?} was read"
            )));
        }
        self.record(Ty::Map(fields.iter().copied().zip(types).collect()))?;
        Ok(value)
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i128 u8 u16 u32 u64 u128 f32 char bytes byte_buf unit unit_struct
        newtype_struct tuple tuple_struct map enum identifier ignored_any
    }
}

/// A list of one placeholder item.
struct OneItem<'a> {
    slot: Option<&'a mut Option<Ty>>,
}

impl<'de> SeqAccess<'de> for OneItem<'_> {
    type Error = TraceError;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, TraceError> {
        match self.slot.take() {
            None => Ok(None),
            Some(slot) => seed
                .deserialize(Tracer {
                    slot,
                    optional: true,
                })
                .map(Some),
        }
    }
}

/// A section with every one of its fields, once, in order.
struct Fields<'a> {
    fields: &'static [&'static str],
    types: &'a mut Vec<Ty>,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = TraceError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, TraceError> {
        match self.fields.get(self.types.len()) {
            None => Ok(None),
            Some(name) => seed.deserialize(name.into_deserializer()).map(Some),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, TraceError> {
        let mut slot = None;
        // The field's own type says whether it is optional.
        let value = seed.deserialize(Tracer {
            slot: &mut slot,
            optional: false,
        })?;
        let name = self.fields[self.types.len()];
        self.types
            .push(slot.ok_or_else(|| TraceError(format!("`{name}` has no type")))?);
        Ok(value)
    }
}

// ---------------------------------------------------------------------------
// The strict pass.

/// Where a key and its value are in the text; see [`Span`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    /// The key, for a value in a mapping (`None` for a list item and for the
    /// document itself).
    pub key: Option<Span>,
    pub value: Span,
}

/// What the strict pass found.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// Where diagnostics about each key path point (`filesystem.read[1]`).
    pub marks: HashMap<String, Position>,
    /// The span of each key path's key and value.
    pub spans: BTreeMap<String, Located>,
    pub problems: Vec<Problem>,
}

/// Checks the document against the schema.
pub(crate) fn check(root: &Node) -> Checked {
    let mut checked = Checked::default();
    walk(root, schema(), "", None, &mut checked);
    checked
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

/// A node refused whatever its key expects (a YAML tag, ...): reported.
fn refused(checked: &mut Checked, node: &Node, path: &str) -> bool {
    let Some(why) = &node.refused else {
        return false;
    };
    problem(checked, node, path, why.clone());
    true
}

/// A plain scalar, as `f` reads it.
fn plain<T>(node: &Node, f: impl Fn(&str) -> T) -> Option<T> {
    match &node.kind {
        Kind::Scalar { value, plain: true } => Some(f(value)),
        _ => None,
    }
}

fn walk(node: &Node, ty: &Ty, path: &str, key: Option<Span>, checked: &mut Checked) {
    checked.marks.insert(path.to_owned(), node.mark);
    let located = Located {
        key,
        value: node.span,
    };
    checked.spans.insert(path.to_owned(), located);
    if refused(checked, node, path) {
        return;
    }
    // A number that does not fit is left for the typed pass, whose message
    // names the type (`integer `99999999999999999999` as u128, expected i64`).
    let int = |s: &str| matches!(yaml::resolve(s), Resolved::Int(_));
    let num = |s: &str| {
        matches!(yaml::resolve(s), Resolved::Int(_) | Resolved::Float(_))
            || yaml::parse_f64(s).is_some()
    };
    match (ty, &node.kind) {
        (Ty::Int, _) if plain(node, int) == Some(true) => {}
        (Ty::Int, _) => {
            let msg = format!("expected an integer, found {}", node.describe());
            problem(checked, node, path, msg);
        }
        (Ty::Num, _) if plain(node, num) == Some(true) => {}
        (Ty::Num, _) => {
            let msg = format!("expected a number, found {}", node.describe());
            problem(checked, node, path, msg);
        }
        (Ty::Bool, _) if plain(node, yaml::parse_bool).flatten().is_some() => {}
        (Ty::Bool, _) => {
            let msg = format!("expected `true` or `false`, found {}", node.describe());
            problem(checked, node, path, msg);
        }
        // Any scalar but null is a string (`name: 123` is "123").
        (Ty::Str, Kind::Scalar { .. }) if !node.is_null() => {}
        (Ty::Str, _) => {
            let msg = format!("expected a string, found {}", node.describe());
            problem(checked, node, path, msg);
        }
        (Ty::StrList, Kind::Seq(items)) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &Ty::Str, &format!("{path}[{i}]"), None, checked);
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
    fields: &[(&'static str, Ty)],
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
        if refused(checked, key_node, &key_path) {
            continue;
        }
        if !seen.insert(key) {
            problem(
                checked,
                key_node,
                &key_path,
                format!("duplicate key `{key}`"),
            );
            continue;
        }
        let Some((_, ty)) = fields.iter().find(|(name, _)| *name == key) else {
            let msg = unknown_key(key, fields);
            problem(checked, key_node, &key_path, msg);
            continue;
        };
        if value.is_null() && value.refused.is_none() {
            // `read:` with nothing after it: the same as leaving the key out.
            checked.marks.insert(key_path.clone(), value.mark);
            let located = Located {
                key: Some(key_node.span),
                value: value.span,
            };
            checked.spans.insert(key_path, located);
            continue;
        }
        walk(value, ty, &key_path, Some(key_node.span), checked);
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

    /// Every key of the schema as a path (`limits.timeout_s`), with its type; the
    /// sections themselves are left out.
    fn keys() -> Vec<(String, &'static Ty)> {
        fn flatten(prefix: &str, ty: &'static Ty, out: &mut Vec<(String, &'static Ty)>) {
            match ty {
                Ty::Map(fields) => {
                    for (name, ty) in fields {
                        flatten(&join_key(prefix, name), ty, out);
                    }
                }
                _ => out.push((prefix.to_owned(), ty)),
            }
        }
        let mut out = Vec::new();
        flatten("", schema(), &mut out);
        out
    }

    fn problems(text: &str) -> Vec<String> {
        let Some(root) = yaml::parse(text).unwrap() else {
            return Vec::new();
        };
        check(&root)
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
    fn the_schema_is_traced_from_the_structs() {
        let Ty::Map(top) = schema() else {
            panic!("the policy is a mapping")
        };
        let names: Vec<&str> = top.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "version",
                "name",
                "command",
                "cwd",
                "filesystem",
                "network",
                "env",
                "limits",
                "sandbox",
                "audit",
                "approve",
                "backend",
                "docker",
                "mcp"
            ]
        );
        let limits = &top.iter().find(|(n, _)| *n == "limits").unwrap().1;
        assert_eq!(
            *limits,
            Ty::Map(vec![
                ("memory_mb", Ty::Int),
                ("timeout_s", Ty::Int),
                ("pids", Ty::Int),
                ("tmp_mb", Ty::Int),
                ("cpu", Ty::Num),
                ("best_effort", Ty::Bool),
                ("output_kb", Ty::Int),
            ])
        );
        assert_eq!(top[2], ("command", Ty::StrList));
    }

    #[test]
    fn a_key_that_is_not_optional_or_of_another_shape_cannot_be_traced() {
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Required {
            a: i64,
        }
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Numbers {
            a: Option<Vec<i64>>,
        }
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Mapping {
            a: Option<HashMap<String, String>>,
        }
        assert!(trace::<Required>().is_err());
        assert!(trace::<Numbers>().is_err());
        assert!(trace::<Mapping>().is_err());
    }

    /// `docs/policy.md`'s key table lists exactly the schema's keys, in order, each
    /// with a type that says what the schema reads.
    #[test]
    fn the_documented_keys_are_the_schema() {
        let doc = include_str!("../../../docs/policy.md");
        let table = doc
            .split("\n## Keys\n")
            .nth(1)
            .expect("docs/policy.md has a `## Keys` section");
        let rows: Vec<(String, String)> = table
            .lines()
            .skip_while(|l| !l.starts_with("| key |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                (cells[1].trim_matches('`').to_owned(), cells[2].to_owned())
            })
            .collect();
        let documented: Vec<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
        let keys = keys();
        let schema: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(documented, schema);
        for ((key, ty), (_, doc_ty)) in keys.iter().zip(&rows) {
            let ok = match ty {
                Ty::Int => doc_ty == "integer",
                Ty::Num => doc_ty == "number",
                Ty::Bool => doc_ty == "boolean",
                // A string, or one of a few words (`denied`, `all` or `off`).
                Ty::Str => doc_ty.starts_with("string") || doc_ty.starts_with('`'),
                Ty::StrList => doc_ty.starts_with("list of "),
                Ty::Map(_) => false,
            };
            assert!(ok, "{key}: documented as `{doc_ty}`, read as {ty:?}");
        }
    }

    #[test]
    fn valid_policy_has_no_problems_and_locates_every_value() {
        let text = "name: x\ncommand: [a, b]\nfilesystem:\n  read:\n    - ./d\n    - '~/e'\n  write: []\nlimits: {timeout_s: 5}\n";
        let c = check(&yaml::parse(text).unwrap().unwrap());
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        let at = |k: &str| c.marks.get(k).map(|m| (m.line, m.column));
        assert_eq!(at("name"), Some((1, 7)));
        assert_eq!(at("command[1]"), Some((2, 14)));
        assert_eq!(at("filesystem.read[0]"), Some((5, 7)));
        assert_eq!(at("filesystem.read[1]"), Some((6, 7)));
        assert_eq!(at("limits.timeout_s"), Some((8, 21)));
        assert_eq!(at("filesystem"), Some((4, 3)));
    }

    #[test]
    fn unknown_keys_get_suggestions() {
        assert_eq!(
            problems("filesytem:\n  reed: []\nenvironment: {}\nbase: 1\nlimits:\n  timeout: 3\nfoo: 1\n"),
            vec![
                "1:1: filesytem: unknown key `filesytem`, did you mean `filesystem`?",
                "3:1: environment: unknown key `environment`, did you mean `env`?",
                "4:1: base: unknown key `base`; expected one of `version`, `name`, `command`, `cwd`, `filesystem`, `network`, `env`, `limits`, `sandbox`, `audit`, `approve`, `backend`, `docker`, `mcp`",
                "6:3: limits.timeout: unknown key `timeout`, did you mean `timeout_s`?",
                "7:1: foo: unknown key `foo`; expected one of `version`, `name`, `command`, `cwd`, `filesystem`, `network`, `env`, `limits`, `sandbox`, `audit`, `approve`, `backend`, `docker`, `mcp`",
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
            problems("version: '1'\nname: [a]\ncommand: npx -y pkg\nfilesystem:\n  read: ./data\n  write: [a, {b: c}, ~]\nlimits:\n  memory_mb: 1.5\n  timeout_s: true\n  pids: 0123\n  cpu: .iNf\nenv: [A]\n"),
            vec![
                "1:10: version: expected an integer, found a string `1`",
                "2:7: name: expected a string, found a list",
                "3:10: command: expected a list of strings, found a string; write it as a list: command: [\"npx\", \"-y\", \"pkg\"]",
                "5:9: filesystem.read: expected a list of strings, found a string; write it as a list: read: [\"./data\"]",
                "6:15: filesystem.write[1]: expected a string, found a mapping",
                "6:22: filesystem.write[2]: expected a string, found nothing (null)",
                "8:14: limits.memory_mb: expected an integer, found a number `1.5`",
                "9:14: limits.timeout_s: expected an integer, found a boolean `true`",
                "10:9: limits.pids: expected an integer, found a string `0123`",
                "11:8: limits.cpu: expected a number, found a string `.iNf`",
                "12:6: env: expected a mapping, found a list",
            ]
        );
    }

    #[test]
    fn tags_are_refused_wherever_they_are() {
        assert_eq!(
            problems("name: !!str x\n!!str version: 1\ncommand: !seq [a, !x b]\nlimits: !!map {cpu: 1}\n"),
            vec![
                "1:13: name: YAML tags are not supported: remove `!!str`",
                "2:7: version: YAML tags are not supported: remove `!!str`",
                "3:15: command: YAML tags are not supported: remove `!seq`",
                "4:16: limits: YAML tags are not supported: remove `!!map`",
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
    fn every_key_and_value_is_spanned() {
        let text = "network:\n  allow:\n    - api.example.com\n    - \"*.example.org\"   # docs\n  allow_private: true\nfilesystem: {read: [./a, './b']}\nenv:\n  allow:\n";
        let c = check(&yaml::parse(text).unwrap().unwrap());
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        let key = |p: &str| c.spans[p].key.map(|s| &text[s.range()]);
        let value = |p: &str| &text[c.spans[p].value.range()];
        assert_eq!(key("network.allow"), Some("allow"));
        assert_eq!(
            value("network.allow"),
            "- api.example.com\n    - \"*.example.org\""
        );
        assert_eq!(value("network.allow[1]"), "\"*.example.org\"");
        assert_eq!(key("network.allow[1]"), None);
        assert_eq!(value("filesystem.read"), "[./a, './b']");
        assert_eq!(value("filesystem.read[1]"), "'./b'");
        assert_eq!(value("filesystem"), "{read: [./a, './b']}");
        // A key with no value: an empty span after its colon.
        let allow = c.spans["env.allow"];
        assert_eq!(key("env.allow"), Some("allow"));
        assert!(allow.value.range().is_empty());
        assert_eq!(allow.value.start.offset, text.len() - 1);
        assert_eq!(c.spans[""].value.range(), 0..text.len() - 1);
    }
}
