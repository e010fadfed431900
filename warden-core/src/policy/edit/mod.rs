//! Adding one grant to a policy text in place, as `wardenctl approve ID
//! --always` does: a pure function of the text ([`add_grant`]);
//! [`file`](mod@file) applies it to the policy file on disk.
//!
//! The user's bytes are kept: the edit only adds lines (or, inside brackets,
//! one item and a comment line), placed by the spans of the one parse of the
//! text (`policy/yaml.rs`); the one thing it takes out is a `~` (or `null`)
//! that the new list replaces. Comments, key order, quoting, indentation, blank lines,
//! line endings and a missing final newline outside the added text stay as they
//! were. The added item carries the approval's note as a YAML comment.
//!
//! Every edit is checked by parsing the result again: the edited list must be
//! the old one plus exactly the new item, and nothing else in the policy may
//! read differently. An edit that would fail that check, and a key written in a
//! form that cannot be edited safely (an anchor or an alias), is refused with
//! an [`EditError`] naming the line; the text is never changed then.

pub mod file;

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::schema::RawPolicy;
use super::yaml::{self, Kind, Node, Resolved};
use super::{net, PolicyError};

/// A grant a person approved for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// A `network.allow` entry, as the policy writes it: `api.example.com:443`,
    /// `[2001:db8::1]:8443`.
    Network(String),
    /// A `filesystem.read` path (absolute).
    Read(String),
    /// A `filesystem.write` path (absolute).
    Write(String),
}

impl Grant {
    /// The key path the grant is added to: `network.allow`, `filesystem.read`,
    /// `filesystem.write`.
    pub fn key(&self) -> &'static str {
        match self {
            Grant::Network(_) => "network.allow",
            Grant::Read(_) => "filesystem.read",
            Grant::Write(_) => "filesystem.write",
        }
    }

    /// The entry added.
    pub fn value(&self) -> &str {
        match self {
            Grant::Network(v) | Grant::Read(v) | Grant::Write(v) => v,
        }
    }

    /// The section and the key in it: `("network", "allow")`.
    fn path(&self) -> [&'static str; 2] {
        match self {
            Grant::Network(_) => ["network", "allow"],
            Grant::Read(_) => ["filesystem", "read"],
            Grant::Write(_) => ["filesystem", "write"],
        }
    }

    /// The list in a parsed policy (`None`: not written, or written empty).
    fn list<'r>(&self, raw: &'r RawPolicy) -> Option<&'r Vec<String>> {
        match self {
            Grant::Network(_) => raw.network.as_ref()?.allow.as_ref(),
            Grant::Read(_) => raw.filesystem.as_ref()?.read.as_ref(),
            Grant::Write(_) => raw.filesystem.as_ref()?.write.as_ref(),
        }
    }

    /// Takes the list out of a parsed policy; a section left empty is the same
    /// as one left out (both mean nothing), so it goes too.
    fn take_list(&self, raw: &mut RawPolicy) -> Option<Vec<String>> {
        match self {
            Grant::Network(_) => {
                let section = raw.network.as_mut()?;
                let list = section.allow.take();
                if *section == Default::default() {
                    raw.network = None;
                }
                list
            }
            Grant::Read(_) | Grant::Write(_) => {
                let section = raw.filesystem.as_mut()?;
                let list = match self {
                    Grant::Read(_) => section.read.take(),
                    _ => section.write.take(),
                };
                if *section == Default::default() {
                    raw.filesystem = None;
                }
                list
            }
        }
    }
}

/// The text after [`add_grant`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    /// The edited text; the text as it was when `already_present`.
    pub text: String,
    /// The list already held the entry (the same string, as parsed): nothing
    /// was changed.
    pub already_present: bool,
}

/// Why a grant was not added. The text (or the file) is left as it was.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The grant itself cannot be written to the policy.
    #[error("{key}: `{}` cannot be added: {why}", .value.escape_default())]
    BadGrant {
        key: &'static str,
        value: String,
        why: String,
    },
    /// The note cannot be a YAML comment.
    #[error("the approval note `{}` cannot be written as a comment: {why}", .note.escape_default())]
    BadNote { note: String, why: &'static str },
    /// The policy text does not parse, so it is not edited.
    #[error("the policy is not valid, so it was not edited: {}", shown(.0))]
    Invalid(PolicyError),
    /// The key is written in a form that cannot be edited safely.
    #[error("{}: {key}: {why}; add `{}` to {list} by hand", place(.file.as_deref(), *.line), .value.escape_default())]
    Refused {
        file: Option<PathBuf>,
        line: usize,
        /// The key (or "the document") written in that form.
        key: String,
        why: String,
        /// The list the grant was for.
        list: &'static str,
        value: String,
    },
    /// The edited text would not have meant the old policy plus the grant.
    #[error("the edit of {key} was not made: {why}; add `{}` to {key} by hand", .value.escape_default())]
    Unverified {
        key: &'static str,
        value: String,
        why: String,
    },
    /// The policy file could not be read.
    #[error("cannot read the policy file {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The policy path is a symbolic link.
    #[error("{} is a symbolic link: the policy file is only edited where it lies; edit the file it points to by hand", .path.display())]
    Symlink { path: PathBuf },
    /// The policy path is not a regular file.
    #[error("{} is not a regular file, so it is not edited", .path.display())]
    NotRegular { path: PathBuf },
    /// The policy file is larger than [`super::MAX_POLICY_BYTES`].
    #[error("{} is larger than {} bytes, so it is not edited", .path.display(), super::MAX_POLICY_BYTES)]
    TooLarge { path: PathBuf },
    /// The policy file is not UTF-8.
    #[error("{} is not valid UTF-8, so it is not edited", .path.display())]
    NotUtf8 { path: PathBuf },
    /// The policy file changed since the session started and no longer parses.
    #[error("{} changed since the session started and is now invalid, so it was left as it is: {problem}", .path.display())]
    ChangedInvalid { path: PathBuf, problem: PolicyError },
    /// The policy file changed while the edit was being written.
    #[error("{} changed while the grant was being added, so it was left as it is; answer again to add it to the new text", .path.display())]
    ChangedMeanwhile { path: PathBuf },
    /// A step of writing the new file failed (nothing was left behind).
    #[error("cannot write the policy file {}: {what}: {source}", .path.display())]
    Write {
        path: PathBuf,
        what: String,
        source: std::io::Error,
    },
    /// The new file is in place, but its directory could not be synced.
    #[error("the grant was written to {}, but syncing its directory {} failed (the change may not survive a crash): {source}", .path.display(), .dir.display())]
    SyncDir {
        path: PathBuf,
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// The diagnostics of a policy error, with `line L, column C` where no file
/// names the place.
fn shown(e: &PolicyError) -> String {
    let lines: Vec<String> = e
        .diagnostics
        .iter()
        .map(|d| match (&d.file, d.line) {
            (None, Some(line)) => {
                let column = d
                    .column
                    .map(|c| format!(", column {c}"))
                    .unwrap_or_default();
                format!("line {line}{column}: {d}")
            }
            _ => d.to_string(),
        })
        .collect();
    lines.join("\n")
}

/// `policy.yaml:3` or `line 3`.
fn place(file: Option<&Path>, line: usize) -> String {
    match file {
        Some(f) => format!("{}:{line}", f.display()),
        None => format!("line {line}"),
    }
}

/// Adds `grant` to its list in the policy `text`, with `note` (e.g.
/// `approved 2026-12-02 by wardenctl approve (ap-1x9...)`) as a comment on the
/// added lines. See the module's documentation for what is kept and checked.
pub fn add_grant(text: &str, grant: &Grant, note: &str) -> Result<Edited, EditError> {
    add_grant_in(text, None, grant, note)
}

/// [`add_grant`], naming `file` in its errors.
pub(crate) fn add_grant_in(
    text: &str,
    file: Option<&Path>,
    grant: &Grant,
    note: &str,
) -> Result<Edited, EditError> {
    check_grant(grant)?;
    check_note(note)?;
    let (before, root) = super::parse_tree(text, file).map_err(EditError::Invalid)?;
    if grant
        .list(&before.raw)
        .is_some_and(|l| l.iter().any(|v| v == grant.value()))
    {
        return Ok(Edited {
            text: text.to_owned(),
            already_present: true,
        });
    }
    let doc = Doc::new(text, root.as_ref(), grant, note);
    let splices = doc.plan(root.as_ref()).map_err(|r| EditError::Refused {
        file: file.map(Path::to_path_buf),
        line: r.line,
        key: r.key,
        why: r.why,
        list: grant.key(),
        value: grant.value().to_owned(),
    })?;
    let edited = apply(text, splices);
    verify(&before.raw, &edited, grant).map_err(|why| EditError::Unverified {
        key: grant.key(),
        value: grant.value().to_owned(),
        why,
    })?;
    Ok(Edited {
        text: edited,
        already_present: false,
    })
}

/// Characters no policy may hold (the parser refuses them too) and the line
/// breaks YAML readers disagree on.
fn unwritable(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{fffe}' | '\u{ffff}')
}

fn check_grant(grant: &Grant) -> Result<(), EditError> {
    let value = grant.value();
    let bad = |why: String| EditError::BadGrant {
        key: grant.key(),
        value: value.to_owned(),
        why,
    };
    if value.is_empty() {
        return Err(bad("it is empty".into()));
    }
    if value.chars().any(unwritable) {
        return Err(bad("it holds a control character or a line break".into()));
    }
    match grant {
        Grant::Network(_) => {
            if let Err(errors) = net::NetworkPolicy::compile(&[value.to_owned()], false) {
                let why = errors.into_iter().map(|(_, m)| m).collect::<Vec<_>>();
                return Err(bad(format!(
                    "it is not a valid network.allow entry: {}",
                    why.join("; ")
                )));
            }
        }
        Grant::Read(_) | Grant::Write(_) => {
            if !value.starts_with('/') {
                return Err(bad("an approved path must be absolute".into()));
            }
        }
    }
    Ok(())
}

fn check_note(note: &str) -> Result<(), EditError> {
    let bad = |why| EditError::BadNote {
        note: note.to_owned(),
        why,
    };
    if note.chars().any(unwritable) {
        return Err(bad("it holds a control character or a line break"));
    }
    if note.trim() != note {
        return Err(bad("it starts or ends with a space"));
    }
    Ok(())
}

/// Parses the edited text and checks that it means the old policy with exactly
/// the new item added to the grant's list. The reason, when it does not.
fn verify(old: &RawPolicy, edited: &str, grant: &Grant) -> Result<(), String> {
    let after =
        super::parse(edited, None).map_err(|e| format!("the edited text would not parse ({e})"))?;
    let mut expected = grant.list(old).cloned().unwrap_or_default();
    expected.push(grant.value().to_owned());
    let mut new_raw = after.raw;
    let got = grant.take_list(&mut new_raw).unwrap_or_default();
    if got != expected {
        return Err(format!(
            "the edited text would read {} as {got:?} instead of {expected:?}",
            grant.key()
        ));
    }
    let mut old_raw = old.clone();
    grant.take_list(&mut old_raw);
    if old_raw != new_raw {
        return Err(format!(
            "the edited text would change keys other than {}",
            grant.key()
        ));
    }
    Ok(())
}

/// Replaces each range with its text (the ranges do not overlap).
fn apply(text: &str, mut splices: Vec<Splice>) -> String {
    splices.sort_by_key(|s| s.at.start);
    let mut out = String::with_capacity(text.len() + 256);
    let mut from = 0;
    for s in splices {
        out.push_str(&text[from..s.at.start]);
        out.push_str(&s.with);
        from = s.at.end;
    }
    out.push_str(&text[from..]);
    out
}

/// One change: the bytes of `at` (usually none) become `with`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Splice {
    at: Range<usize>,
    with: String,
}

impl Splice {
    fn insert(at: usize, with: String) -> Splice {
        Splice { at: at..at, with }
    }
}

/// Why a key cannot be edited, and where.
#[derive(Debug)]
struct Refusal {
    line: usize,
    key: String,
    why: String,
}

/// How a scalar is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quote {
    Plain,
    Single,
    Double,
}

/// The text being edited and how it is laid out.
struct Doc<'t> {
    text: &'t str,
    /// The file's line break (`\n`, `\r\n` or `\r`).
    eol: &'static str,
    /// How far a section's keys are indented below it.
    unit: usize,
    /// How far a block list's dashes are indented below its key (0 or more).
    dash: usize,
    /// The spans of the scalars written over several lines: no line is
    /// inserted inside one.
    multiline: Vec<Range<usize>>,
    grant: &'t Grant,
    note: &'t str,
}

fn spaces(n: usize) -> String {
    " ".repeat(n)
}

/// The entry `name` of a mapping's entries.
fn entry<'n>(entries: &'n [(Node, Node)], name: &str) -> Option<&'n (Node, Node)> {
    entries
        .iter()
        .find(|(k, _)| matches!(&k.kind, Kind::Scalar { value, .. } if value == name))
}

impl<'t> Doc<'t> {
    fn new(text: &'t str, root: Option<&Node>, grant: &'t Grant, note: &'t str) -> Doc<'t> {
        let eol = match text.find(['\n', '\r']) {
            Some(i) if text[i..].starts_with("\r\n") => "\r\n",
            Some(i) if text[i..].starts_with('\r') => "\r",
            _ => "\n",
        };
        let mut doc = Doc {
            text,
            eol,
            unit: 2,
            dash: 2,
            multiline: Vec::new(),
            grant,
            note,
        };
        let (mut unit, mut dash) = (None, None);
        if let Some(root) = root {
            doc.survey(root, &mut unit, &mut dash);
        }
        doc.unit = unit.unwrap_or(2);
        doc.dash = dash.unwrap_or(doc.unit);
        doc
    }

    /// Learns the layout from the text: the first section's indentation, the
    /// first block list's dash offset, every multi-line scalar.
    fn survey(&mut self, node: &Node, unit: &mut Option<usize>, dash: &mut Option<usize>) {
        if node.alias {
            return;
        }
        match &node.kind {
            Kind::Scalar { .. } => {
                let at = node.span.range();
                if self.text[at.clone()].contains(['\n', '\r']) {
                    self.multiline.push(at);
                }
            }
            Kind::Seq(items) => {
                for item in items {
                    self.survey(item, unit, dash);
                }
            }
            Kind::Map(entries) => {
                for (k, v) in entries {
                    let col = k.span.start.column;
                    match &v.kind {
                        Kind::Map(inner) if !v.alias && !self.is_flow(v) => {
                            if let Some((first, _)) = inner.first() {
                                let d = first.span.start.column.saturating_sub(col);
                                if d > 0 {
                                    unit.get_or_insert(d);
                                }
                            }
                        }
                        Kind::Seq(items) if !v.alias && !self.is_flow(v) => {
                            if let Some(d) = items.first().and_then(|i| self.dash_column(i)) {
                                dash.get_or_insert(d.saturating_sub(col));
                            }
                        }
                        _ => {}
                    }
                    self.survey(k, unit, dash);
                    self.survey(v, unit, dash);
                }
            }
        }
    }

    /// Written in brackets (`[a]`, `{k: v}`).
    fn is_flow(&self, node: &Node) -> bool {
        !node.alias && self.text[node.span.start.offset..].starts_with(['[', '{'])
    }

    /// Where the line holding byte `at` starts.
    fn line_start(&self, at: usize) -> usize {
        self.text[..at].rfind(['\n', '\r']).map_or(0, |i| i + 1)
    }

    /// The part of a block list item's line before the item: its indentation,
    /// its dash and the spaces after it (`"  - "`); `None` if it is not that.
    fn item_prefix(&self, item: &Node) -> Option<(usize, String)> {
        let start = item.span.start.offset;
        let before = &self.text[self.line_start(start)..start];
        let indent = before.len() - before.trim_start_matches(' ').len();
        let after = before[indent..].strip_prefix('-')?;
        let gap = after.len() - after.trim_start_matches(' ').len();
        let prefix = format!("{}-{}", &before[..indent], spaces(gap.max(1)));
        Some((indent + 1, prefix))
    }

    /// The 1-based column of a block list item's dash.
    fn dash_column(&self, item: &Node) -> Option<usize> {
        self.item_prefix(item).map(|(col, _)| col)
    }

    /// The new item, quoted only when it must be, or when every item beside it
    /// is quoted the same way (then as they are).
    fn scalar(&self, neighbours: &[&Node], flow: bool) -> String {
        let value = self.grant.value();
        let styles: Vec<Quote> = neighbours
            .iter()
            .filter(|n| !n.alias && matches!(n.kind, Kind::Scalar { .. }))
            .map(|n| match self.text[n.span.start.offset..].chars().next() {
                Some('\'') => Quote::Single,
                Some('"') => Quote::Double,
                _ => Quote::Plain,
            })
            .collect();
        let style = match styles.first() {
            Some(&q) if q != Quote::Plain && styles.iter().all(|&s| s == q) => q,
            _ if plain_ok(value, flow) => Quote::Plain,
            _ => styles
                .iter()
                .rev()
                .copied()
                .find(|&q| q != Quote::Plain)
                .unwrap_or(Quote::Double),
        };
        match style {
            Quote::Plain => value.to_owned(),
            Quote::Single => format!("'{}'", value.replace('\'', "''")),
            Quote::Double => format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\"")),
        }
    }

    /// ` # NOTE` after an added item (nothing for an empty note).
    fn comment(&self) -> String {
        if self.note.is_empty() {
            String::new()
        } else {
            format!("  # {}", self.note)
        }
    }

    /// The lines of a new block list (and the sections above it, `keys`): the
    /// first key at column `indent`, or with no keys, the item below the list's
    /// key at column `indent`.
    fn block_lines(&self, keys: &[&str], indent: usize) -> Vec<String> {
        let mut lines = Vec::new();
        let mut key_indent = indent;
        for (i, k) in keys.iter().enumerate() {
            if i > 0 {
                key_indent += self.unit;
            }
            lines.push(format!("{}{k}:", spaces(key_indent)));
        }
        let item = self.scalar(&[], false);
        lines.push(format!(
            "{}- {item}{}",
            spaces(key_indent + self.dash),
            self.comment()
        ));
        lines
    }

    /// A new value in brackets, with the sections above the list (`keys`):
    /// `[ITEM]`, `{allow: [ITEM]}`.
    fn flow_value(&self, keys: &[&str]) -> String {
        let mut out = format!("[{}]", self.scalar(&[], true));
        for k in keys.iter().rev() {
            out = format!("{{{k}: {out}}}");
        }
        out
    }

    /// A new entry in brackets: `allow: [ITEM]`, `network: {allow: [ITEM]}`.
    fn flow_entry(&self, keys: &[&str]) -> String {
        match keys.split_first() {
            Some((first, rest)) => format!("{first}: {}", self.flow_value(rest)),
            None => self.flow_value(&[]),
        }
    }

    /// Inserts `lines` after the line holding byte `at`, in the file's line
    /// breaks; at the end of a file without a final line break, that stays so.
    fn lines_after(&self, at: usize, lines: &[String]) -> Splice {
        match self.text[at..].find(['\n', '\r']) {
            Some(i) => {
                let brk = at + i;
                let len = if self.text[brk..].starts_with("\r\n") {
                    2
                } else {
                    1
                };
                let mut with = String::new();
                for l in lines {
                    with.push_str(l);
                    with.push_str(self.eol);
                }
                Splice::insert(brk + len, with)
            }
            None => {
                let mut with = String::new();
                for l in lines {
                    with.push_str(self.eol);
                    with.push_str(l);
                }
                Splice::insert(self.text.len(), with)
            }
        }
    }

    /// The note on a line of its own, above the line holding byte `at` (for an
    /// item added inside brackets), indented as that line. Never inside a
    /// scalar written over several lines: then above the scalar's first line.
    fn note_above(&self, at: usize) -> Option<Splice> {
        if self.note.is_empty() {
            return None;
        }
        let mut start = self.line_start(at);
        while let Some(s) = self
            .multiline
            .iter()
            .find(|s| s.start < start && start < s.end)
        {
            start = self.line_start(s.start);
        }
        let line = &self.text[start..];
        let indent = &line[..line.len() - line.trim_start_matches([' ', '\t']).len()];
        let with = format!(
            "{indent}# {}: {}{}",
            self.grant.value(),
            self.note,
            self.eol
        );
        Some(Splice::insert(start, with))
    }

    /// The changes that add the grant.
    fn plan(&self, root: Option<&Node>) -> Result<Vec<Splice>, Refusal> {
        let [section, leaf] = self.grant.path();
        let Some(root) = root else {
            return self.add_to_empty(&[section, leaf]);
        };
        self.guard(root, "the document")?;
        let Kind::Map(entries) = &root.kind else {
            return Err(self.refusal(root, "the document", "it is not a mapping"));
        };
        let Some((key, value)) = entry(entries, section) else {
            return Ok(self.add_entry(root, entries, &[section, leaf]));
        };
        self.guard(value, section)?;
        if value.is_null() {
            return Ok(self.fill_null(root, key, value, &[leaf]));
        }
        let Kind::Map(inner) = &value.kind else {
            return Err(self.refusal(value, section, "it is not a mapping"));
        };
        let Some((list_key, list)) = entry(inner, leaf) else {
            return Ok(self.add_entry(value, inner, &[leaf]));
        };
        let path = self.grant.key();
        self.guard(list, path)?;
        if list.is_null() {
            return Ok(self.fill_null(value, list_key, list, &[]));
        }
        match &list.kind {
            Kind::Seq(items) => Ok(self.append(list, items)),
            _ => Err(self.refusal(list, path, "it is not a list")),
        }
    }

    fn refusal(&self, node: &Node, key: &str, why: &str) -> Refusal {
        Refusal {
            line: node.span.start.line,
            key: key.to_owned(),
            why: why.to_owned(),
        }
    }

    /// Anchors and aliases: the text of such a value is shared with other
    /// places, which an edit would change too.
    fn guard(&self, node: &Node, key: &str) -> Result<(), Refusal> {
        if node.alias {
            let alias = &self.text[node.span.range()];
            let why = format!(
                "it is written as an alias (`{alias}`) of a value written elsewhere, which other keys may share"
            );
            return Err(self.refusal(node, key, &why));
        }
        if node.anchored {
            let why =
                "it carries an anchor (`&`), so other keys may share its value through aliases";
            return Err(self.refusal(node, key, why));
        }
        Ok(())
    }

    /// An empty policy (nothing, or only comments, directives and document
    /// markers): the section goes at the end, or before a `...` marker.
    fn add_to_empty(&self, keys: &[&str]) -> Result<Vec<Splice>, Refusal> {
        let mut at = self.text.len();
        for (n, (offset, line)) in lines(self.text).enumerate() {
            let content = line.trim();
            // A marker alone on its line, or followed by a comment.
            let marker = |m: &str| match content.strip_prefix(m) {
                Some("") => true,
                Some(rest) if rest.starts_with([' ', '\t']) => {
                    let rest = rest.trim_start();
                    rest.is_empty() || rest.starts_with('#')
                }
                _ => false,
            };
            if marker("...") {
                at = offset;
                break;
            }
            let blank = content.is_empty() || content.starts_with(['#', '%']);
            if !blank && !marker("---") {
                return Err(Refusal {
                    line: n + 1,
                    key: "the document".into(),
                    why: format!("it is written as `{content}`, which reads as nothing"),
                });
            }
        }
        let lines = self.block_lines(keys, 0);
        let with: String =
            if at == self.text.len() && !self.text.is_empty() && !self.text.ends_with(['\n', '\r'])
            {
                lines.iter().map(|l| format!("{}{l}", self.eol)).collect()
            } else {
                lines.iter().map(|l| format!("{l}{}", self.eol)).collect()
            };
        Ok(vec![Splice::insert(at, with)])
    }

    /// A mapping that lacks the key `keys[0]`: a new entry after its last one.
    fn add_entry(&self, map: &Node, entries: &[(Node, Node)], keys: &[&str]) -> Vec<Splice> {
        if self.is_flow(map) {
            let value = self.flow_entry(keys);
            let (at, with) = match entries.last() {
                None => (map.span.start.offset + 1, value),
                Some((k, v)) => (
                    k.span.end.offset.max(v.span.end.offset),
                    format!(", {value}"),
                ),
            };
            return self
                .note_above(at)
                .into_iter()
                .chain([Splice::insert(at, with)])
                .collect();
        }
        let end = entries
            .iter()
            .map(|(k, v)| k.span.end.offset.max(v.span.end.offset))
            .max()
            .unwrap_or(map.span.end.offset);
        let indent = entries
            .first()
            .map_or(0, |(k, _)| k.span.start.column.saturating_sub(1));
        vec![self.lines_after(end, &self.block_lines(keys, indent))]
    }

    /// A key written with no value (`allow:`, `allow: ~`): the value added.
    fn fill_null(&self, map: &Node, key: &Node, value: &Node, keys: &[&str]) -> Vec<Splice> {
        let token = value.span.range();
        let same_line = value.span.start.line == key.span.end.line;
        if self.is_flow(map) || !same_line {
            // In brackets, or `~` on a line of its own: the value in brackets.
            let flow = self.flow_value(keys);
            let at = if token.is_empty() {
                let spaced = self.text[token.start..].starts_with(' ');
                if spaced {
                    Splice::insert(token.start + 1, flow)
                } else {
                    Splice::insert(token.start, format!(" {flow}"))
                }
            } else {
                Splice {
                    at: token.clone(),
                    with: flow,
                }
            };
            return self
                .note_above(token.start)
                .into_iter()
                .chain([at])
                .collect();
        }
        // `allow: ~  # c` becomes `allow:  # c`, the list on the lines below.
        let mut splices = Vec::new();
        if !token.is_empty() {
            let before = &self.text[..token.start];
            let gap = before.len() - before.trim_end_matches([' ', '\t']).len();
            splices.push(Splice {
                at: token.start - gap..token.end,
                with: String::new(),
            });
        }
        let key_indent = key.span.start.column.saturating_sub(1);
        let indent = if keys.is_empty() {
            key_indent
        } else {
            key_indent + self.unit
        };
        splices.push(self.lines_after(token.end, &self.block_lines(keys, indent)));
        splices
    }

    /// A list with items: the new one after the last.
    fn append(&self, list: &Node, items: &[Node]) -> Vec<Splice> {
        let neighbours: Vec<&Node> = items.iter().collect();
        if self.is_flow(list) {
            let item = self.scalar(&neighbours, true);
            let (at, with) = match items.last() {
                None => (list.span.start.offset + 1, item),
                Some(last) => (last.span.end.offset, format!(", {item}")),
            };
            return self
                .note_above(at)
                .into_iter()
                .chain([Splice::insert(at, with)])
                .collect();
        }
        let item = self.scalar(&neighbours, false);
        let Some(last) = items.last() else {
            return Vec::new();
        };
        let prefix = match self.item_prefix(last) {
            Some((_, prefix)) => prefix,
            None => format!("{}- ", spaces(last.span.start.column.saturating_sub(3))),
        };
        let line = format!("{prefix}{item}{}", self.comment());
        vec![self.lines_after(last.span.end.offset, &[line])]
    }
}

/// The lines of `text` with the offset each starts at, without their line
/// breaks (`\n`, `\r\n`, `\r`, as YAML counts them).
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut offset = 0;
    std::iter::from_fn(move || {
        if offset >= text.len() {
            return None;
        }
        let rest = &text[offset..];
        let (len, brk) = match rest.find(['\n', '\r']) {
            Some(i) if rest[i..].starts_with("\r\n") => (i, 2),
            Some(i) => (i, 1),
            None => (rest.len(), 0),
        };
        let line = (offset, &rest[..len]);
        offset += len + brk;
        Some(line)
    })
}

/// Whether `value` can be written as a plain scalar here and read back as the
/// same string by every YAML reader (YAML 1.1 ones too: `yes` is quoted).
fn plain_ok(value: &str, flow: bool) -> bool {
    const YAML11: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
        "OFF",
    ];
    let Some(first) = value.chars().next() else {
        return false;
    };
    if "-?:,[]{}#&*!|>'\"%@`".contains(first) || first.is_whitespace() {
        return false;
    }
    if value.ends_with([' ', '\t', ':']) || value.contains(": ") || value.contains(" #") {
        return false;
    }
    if value.contains(['\t', '\n', '\r']) || (flow && value.contains([',', '[', ']', '{', '}'])) {
        return false;
    }
    if flow && value.contains(':') {
        // `a:b` is one string in brackets to YAML 1.2, not to every reader.
        return false;
    }
    yaml::resolve(value) == Resolved::Str && !YAML11.contains(&value)
}

#[cfg(test)]
mod tests;
