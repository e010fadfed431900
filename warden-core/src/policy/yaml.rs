//! The policy text, parsed once.
//!
//! yaml-rust2's event parser builds a small tree with a position and a span on every
//! node ([`parse`]); [`super::schema`] checks that tree against the schema and
//! [`super::de`] deserialises the typed policy from it. How a plain scalar reads
//! (`5` an integer, `true` a boolean, `~` null) is decided here, once, by [`resolve`]
//! and the typed parses beside it: the YAML 1.2 core schema, as serde_yaml 0.9 (the
//! reader policies were checked with before) reads it, so a policy means what it
//! meant.
//!
//! What a YAML 1.1 reader (libyaml, under serde_yaml) and this YAML 1.2 one read
//! differently is refused rather than read one way: see [`Node::refused`] and
//! [`parse`].

use std::cell::Cell;
use std::collections::HashMap;
use std::ops::Range;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A place in the policy text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// Byte offset from the start of the text.
    pub offset: usize,
}

/// Where a key or a value lies in the policy text: from `start` up to, not
/// including, `end`.
///
/// A scalar's span covers its quotes (`"./data"`), a flow collection's its brackets
/// (`[a, b]`); a block collection runs from its first entry to the end of its last
/// one. A block scalar (`|`, `>`) is spanned from its first content character to
/// its last one (not its indicator line), and a key written with no value (`read:`)
/// has an empty value span just after its colon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: Position,
    pub end: Position,
}

impl Span {
    /// The byte range of the text this span covers.
    pub fn range(&self) -> Range<usize> {
        self.start.offset..self.end.offset
    }

    fn empty(at: Position) -> Span {
        Span { start: at, end: at }
    }
}

/// A syntax or structural problem: position, key path, message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub mark: Option<Position>,
    pub key: Option<String>,
    pub message: String,
}

/// One node of the document.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// Where diagnostics about this node point: a scalar's or a sequence's first
    /// character, a mapping's first key, or the alias (`*a`) it came from.
    pub mark: Position,
    /// What it covers in the text (see [`Span`]).
    pub span: Span,
    /// Why this node is refused whatever the schema says: a YAML tag (`!!str`), or
    /// a spelling YAML 1.1 and 1.2 readers read differently.
    pub refused: Option<String>,
    /// Written with an anchor (`&a`): other places may hold it too, through
    /// aliases.
    pub anchored: bool,
    /// Written as an alias (`*a`): its text is elsewhere, where it was anchored.
    pub alias: bool,
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Scalar { value: String, plain: bool },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// A plain scalar that reads as null (`~`, `null`, nothing).
    pub fn is_null(&self) -> bool {
        matches!(&self.kind, Kind::Scalar { value, plain: true } if is_null(value))
    }

    /// "a list", "an integer `5`", ... for "expected X, found Y" messages.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Seq(_) => "a list".into(),
            Kind::Map(_) => "a mapping".into(),
            Kind::Scalar {
                value,
                plain: false,
            } => format!("a string `{value}`"),
            Kind::Scalar { value, plain: true } => match resolve(value) {
                Resolved::Null => "nothing (null)".into(),
                Resolved::Bool(_) => format!("a boolean `{value}`"),
                Resolved::Int(_) => format!("an integer `{value}`"),
                Resolved::Float(_) => format!("a number `{value}`"),
                Resolved::Str => format!("a string `{value}`"),
            },
        }
    }
}

// ---------------------------------------------------------------------------
// Plain scalars: the YAML 1.2 core schema, as serde_yaml 0.9 (`de.rs`) reads it.

/// What a plain scalar is, read on its own (no type expected).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Resolved {
    Null,
    Bool(bool),
    Int(Int),
    Float(f64),
    Str,
}

/// An integer, in the narrowest of the types serde visits that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Int {
    U64(u64),
    I64(i64),
    U128(u128),
    I128(i128),
}

pub(crate) fn is_null(s: &str) -> bool {
    matches!(s, "" | "~" | "null" | "Null" | "NULL")
}

pub(crate) fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// Leading zeros followed by digits (`0123`): a string in YAML 1.2.
fn digits_but_not_number(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    s.len() > 1 && s.starts_with('0') && s[1..].bytes().all(|b| b.is_ascii_digit())
}

type Radix<T> = fn(&str, u32) -> Result<T, std::num::ParseIntError>;

/// `5`, `+5`, `0x1f`, `0o17`, `0b101`; no sign after the prefix.
fn parse_unsigned<T>(s: &str, from_str_radix: Radix<T>) -> Option<T> {
    let unsigned = s.strip_prefix('+').unwrap_or(s);
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(rest) = unsigned.strip_prefix(prefix) {
            if rest.starts_with(['+', '-']) {
                return None;
            }
            if let Ok(n) = from_str_radix(rest, radix) {
                return Some(n);
            }
        }
    }
    if unsigned.starts_with(['+', '-']) || digits_but_not_number(s) {
        return None;
    }
    from_str_radix(unsigned, 10).ok()
}

/// `-5`, `-0x1f`, `-0o17`, `-0b101`.
fn parse_negative<T>(s: &str, from_str_radix: Radix<T>) -> Option<T> {
    for (prefix, radix) in [("-0x", 16), ("-0o", 8), ("-0b", 2)] {
        if let Some(rest) = s.strip_prefix(prefix) {
            if let Ok(n) = from_str_radix(&format!("-{rest}"), radix) {
                return Some(n);
            }
        }
    }
    if digits_but_not_number(s) {
        return None;
    }
    from_str_radix(s, 10).ok()
}

/// A plain scalar read as an `i64` (what an integer key expects).
pub(crate) fn parse_i64(s: &str) -> Option<i64> {
    let unsigned = match s.strip_prefix('+') {
        Some(u) if u.starts_with(['+', '-']) => return None,
        Some(u) => u,
        None => s,
    };
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(rest) = unsigned.strip_prefix(prefix) {
            if rest.starts_with(['+', '-']) {
                return None;
            }
            if let Ok(n) = i64::from_str_radix(rest, radix) {
                return Some(n);
            }
        }
        if let Some(rest) = s.strip_prefix(&format!("-{prefix}")) {
            if let Ok(n) = i64::from_str_radix(&format!("-{rest}"), radix) {
                return Some(n);
            }
        }
    }
    if digits_but_not_number(s) {
        return None;
    }
    unsigned.parse().ok()
}

/// A plain scalar read as a `u64`.
pub(crate) fn parse_u64(s: &str) -> Option<u64> {
    parse_unsigned(s, u64::from_str_radix)
}

/// A plain scalar read as a float (what a number key expects): decimal and
/// exponent forms, `.inf`, `-.inf`, `.nan`.
pub(crate) fn parse_f64(s: &str) -> Option<f64> {
    let unsigned = match s.strip_prefix('+') {
        Some(u) if u.starts_with(['+', '-']) => return None,
        Some(u) => u,
        None => s,
    };
    if let ".inf" | ".Inf" | ".INF" = unsigned {
        return Some(f64::INFINITY);
    }
    if let "-.inf" | "-.Inf" | "-.INF" = s {
        return Some(f64::NEG_INFINITY);
    }
    if let ".nan" | ".NaN" | ".NAN" = s {
        return Some(f64::NAN.copysign(1.0));
    }
    unsigned.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// What a plain scalar is when no type is expected: null, a boolean, an
/// integer, a float, else a string.
pub(crate) fn resolve(s: &str) -> Resolved {
    if is_null(s) {
        return Resolved::Null;
    }
    if let Some(b) = parse_bool(s) {
        return Resolved::Bool(b);
    }
    if let Some(n) = parse_unsigned(s, u64::from_str_radix) {
        return Resolved::Int(Int::U64(n));
    }
    if let Some(n) = parse_negative(s, i64::from_str_radix) {
        return Resolved::Int(Int::I64(n));
    }
    if let Some(n) = parse_unsigned(s, u128::from_str_radix) {
        return Resolved::Int(Int::U128(n));
    }
    if let Some(n) = parse_negative(s, i128::from_str_radix) {
        return Resolved::Int(Int::I128(n));
    }
    match parse_f64(s) {
        Some(f) if !digits_but_not_number(s) => Resolved::Float(f),
        _ => Resolved::Str,
    }
}

// ---------------------------------------------------------------------------
// The tree.

/// Position arithmetic over the text. Line breaks are what yaml-rust2 counts:
/// `\r\n`, `\r` and `\n`. Every position is found by walking forward from one
/// already known (the last one asked for, or the start of a node), so that
/// placing every node of a document costs time in proportion to its length.
struct Text<'t> {
    text: &'t str,
    /// The last position [`Text::at`] returned.
    cursor: Cell<Position>,
}

const START: Position = Position {
    line: 1,
    column: 1,
    offset: 0,
};

impl<'t> Text<'t> {
    fn new(text: &'t str) -> Self {
        Text {
            text,
            cursor: Cell::new(START),
        }
    }

    /// The position of byte `to` (at or after `from`, on a character boundary).
    fn advance(&self, from: Position, to: usize) -> Position {
        let to = to.min(self.text.len());
        let mut p = from;
        let mut chars = self.text[from.offset..to].chars().peekable();
        while let Some(c) = chars.next() {
            let pair = c == '\r' && chars.peek() == Some(&'\n');
            if (c == '\n' || c == '\r') && !pair {
                p.line += 1;
                p.column = 1;
            } else if !pair {
                p.column += 1;
            }
        }
        p.offset = to;
        p
    }

    /// Where a yaml-rust2 marker is (its lines are 1-based, its columns 0-based
    /// characters), walking from the last marker placed: the parser moves along
    /// the text, sometimes back a little.
    fn at(&self, m: Marker) -> Position {
        let (line, column) = (m.line().max(1), m.col() + 1);
        let last = self.cursor.get();
        let mut p = if last.line == line && last.column <= column {
            last
        } else {
            self.line_start(last, line)
        };
        let mut chars = self.text[p.offset..].chars();
        while p.column < column {
            match chars.next() {
                Some('\n' | '\r') | None => break,
                Some(c) => {
                    p.column += 1;
                    p.offset += c.len_utf8();
                }
            }
        }
        self.cursor.set(p);
        // As yaml-rust2 counts, even past the end of the text (an error there).
        Position {
            line,
            column,
            offset: p.offset,
        }
    }

    /// The start of `line`, found by walking from `from`, forward or back.
    fn line_start(&self, from: Position, line: usize) -> Position {
        let bytes = self.text.as_bytes();
        // A line break ends at `i` (`\r\n` counts once, at its `\n`).
        let break_before = |i: usize| {
            i > 0
                && (bytes[i - 1] == b'\n'
                    || (bytes[i - 1] == b'\r' && bytes.get(i) != Some(&b'\n')))
        };
        let (mut at_line, mut i) = (from.line, from.offset);
        // Back to the start of `from`'s line, then to earlier lines.
        while i > 0 && !break_before(i) {
            i -= 1;
        }
        while at_line > line && i > 0 {
            i -= 1;
            while i > 0 && !break_before(i) {
                i -= 1;
            }
            at_line -= 1;
        }
        while at_line < line && i < bytes.len() {
            i += 1;
            if break_before(i) {
                at_line += 1;
            }
        }
        Position {
            line: at_line,
            column: 1,
            offset: i.min(bytes.len()),
        }
    }

    fn char_at(&self, p: Position) -> Option<char> {
        self.text[p.offset..].chars().next()
    }

    /// The end of a scalar that starts at `start`.
    fn scalar_end(&self, start: Position, style: TScalarStyle, value: &str) -> Position {
        let rest = &self.text[start.offset..];
        let end = match style {
            TScalarStyle::SingleQuoted => {
                let mut chars = rest.char_indices().skip(1).peekable();
                let mut end = rest.len();
                while let Some((i, c)) = chars.next() {
                    // `''` is a quote inside the string.
                    if c == '\'' && chars.next_if(|&(_, c)| c == '\'').is_none() {
                        end = i + 1;
                        break;
                    }
                }
                end
            }
            TScalarStyle::DoubleQuoted => {
                let mut chars = rest.char_indices().skip(1);
                let mut end = rest.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => {
                            end = i + 1;
                            break;
                        }
                        _ => {}
                    }
                }
                end
            }
            // Plain and block scalars hold the value's visible characters verbatim
            // and in order; only whitespace (folding, indentation) differs.
            _ => {
                let ws = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r');
                let mut src = rest.char_indices().filter(|&(_, c)| !ws(c));
                let mut end = 0;
                for v in value.chars().filter(|&c| !ws(c)) {
                    match src.next() {
                        Some((i, c)) if c == v => end = i + c.len_utf8(),
                        _ => break,
                    }
                }
                end
            }
        };
        self.advance(start, start.offset + end)
    }

    /// The end of an alias `*name` that starts at `start`.
    fn alias_end(&self, start: Position) -> Position {
        let rest = &self.text[start.offset..];
        let end = rest
            .char_indices()
            .skip(1)
            .find(|&(_, c)| c.is_whitespace() || ",[]{}".contains(c))
            .map_or(rest.len(), |(i, _)| i);
        self.advance(start, start.offset + end)
    }

    /// Just after the `:` that follows a key ending at `key_end`, if it does.
    fn after_colon(&self, key_end: Position) -> Position {
        let rest = &self.text[key_end.offset..];
        let skipped = rest.len() - rest.trim_start_matches([' ', '\t']).len();
        if rest[skipped..].starts_with(':') {
            self.advance(key_end, key_end.offset + skipped + 1)
        } else {
            key_end
        }
    }
}

/// Builds the node tree from yaml-rust2 events. Aliases are expanded (with a budget,
/// against "billion laughs" documents).
struct Builder<'t> {
    text: Text<'t>,
    stack: Vec<Frame>,
    documents: Vec<Node>,
    anchors: HashMap<usize, Node>,
    expanded: usize,
    too_many_aliases: Option<Position>,
}

struct Open {
    start: Position,
    anchor: usize,
    tag: Option<Tag>,
    /// Written in brackets (`[a]`, `{k: v}`).
    flow: bool,
}

enum Frame {
    Seq(Open, Vec<Node>),
    Map(Open, Vec<(Node, Node)>, Option<Node>),
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

/// A tag changes what a value means to other YAML readers; a policy has none.
fn tag_refusal(tag: Option<Tag>) -> Option<String> {
    let tag = tag?;
    let shown = match tag.handle.as_str() {
        "tag:yaml.org,2002:" => format!("!!{}", tag.suffix),
        "" => format!("!<{}>", tag.suffix),
        handle => format!("{handle}{}", tag.suffix),
    };
    Some(format!("YAML tags are not supported: remove `{shown}`"))
}

impl Builder<'_> {
    fn in_flow(&self) -> bool {
        self.stack.iter().any(|f| match f {
            Frame::Seq(open, _) | Frame::Map(open, _, _) => open.flow,
        })
    }

    /// What YAML 1.1 readers (libyaml, which read policies before) and this
    /// YAML 1.2 one read differently is refused, so that no policy changes its
    /// meaning with the reader.
    fn scalar_refusal(&self, value: &str, style: TScalarStyle) -> Option<String> {
        match style {
            // yaml-rust2 reads an empty `|` as a line break, where YAML says "".
            TScalarStyle::Literal | TScalarStyle::Folded
                if !value.is_empty() && value.bytes().all(|b| b == b'\n') =>
            {
                Some("a block scalar (`|`, `>`) with no content is not supported; write \"\" for an empty string".into())
            }
            // In brackets `?a` is a string to YAML 1.2, a mapping (or an error) to 1.1.
            TScalarStyle::Plain if self.in_flow() && value.starts_with(['?', ':']) => Some(format!(
                "`{value}` in brackets reads differently to different YAML readers; quote it"
            )),
            _ => None,
        }
    }

    fn push(&mut self, mut node: Node, anchor: usize) {
        if anchor != 0 {
            node.anchored = true;
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => self.documents.push(node),
            Some(Frame::Seq(_, items)) => items.push(node),
            Some(Frame::Map(_, entries, pending)) => match pending.take() {
                None => *pending = Some(node),
                Some(key) => {
                    // `read:` with nothing after it: an empty value after the colon
                    // (yaml-rust2 places it where the next token starts).
                    if matches!(&node.kind, Kind::Scalar { value, plain: true } if value.is_empty())
                    {
                        node.span = Span::empty(self.text.after_colon(key.span.end));
                    }
                    entries.push((key, node));
                }
            },
        }
    }

    fn open(&mut self, at: Position, anchor: usize, tag: Option<Tag>, map: bool) {
        let flow = self.text.char_at(at) == Some(if map { '{' } else { '[' });
        let open = Open {
            start: at,
            anchor,
            tag,
            flow,
        };
        self.stack.push(if map {
            Frame::Map(open, Vec::new(), None)
        } else {
            Frame::Seq(open, Vec::new())
        });
    }

    fn close(&mut self, end: Position) {
        let (node, anchor) = match self.stack.pop() {
            Some(Frame::Seq(open, items)) => {
                let last = items.iter().map(|n| n.span.end).max();
                let span = self.collection_span(&open, end, ']', last);
                let node = Node {
                    mark: open.start,
                    span,
                    refused: tag_refusal(open.tag),
                    anchored: false,
                    alias: false,
                    kind: Kind::Seq(items),
                };
                (node, open.anchor)
            }
            Some(Frame::Map(open, entries, _)) => {
                let last = entries
                    .iter()
                    .map(|(k, v)| k.span.end.max(v.span.end))
                    .max();
                let mut span = self.collection_span(&open, end, '}', last);
                if !open.flow {
                    // A block mapping's start mark is where the parser noticed it,
                    // not where it begins; its first key is what a reader sees.
                    span.start = entries.first().map_or(open.start, |(k, _)| k.span.start);
                }
                let node = Node {
                    mark: entries.first().map_or(open.start, |(k, _)| k.mark),
                    span,
                    refused: tag_refusal(open.tag),
                    anchored: false,
                    alias: false,
                    kind: Kind::Map(entries),
                };
                (node, open.anchor)
            }
            None => return,
        };
        self.push(node, anchor);
    }

    /// A flow collection ends after its closing bracket; a block one with its
    /// last entry.
    fn collection_span(
        &self,
        open: &Open,
        end: Position,
        closing: char,
        last: Option<Position>,
    ) -> Span {
        let end = if open.flow && self.text.char_at(end) == Some(closing) {
            self.text.advance(end, end.offset + closing.len_utf8())
        } else {
            last.unwrap_or(open.start)
        };
        Span {
            start: open.start,
            end,
        }
    }
}

impl MarkedEventReceiver for Builder<'_> {
    fn on_event(&mut self, ev: Event, marker: Marker) {
        let at = self.text.at(marker);
        match ev {
            Event::Scalar(mut value, style, anchor, tag) => {
                let end = self.text.scalar_end(at, style, &value);
                let block = matches!(style, TScalarStyle::Literal | TScalarStyle::Folded);
                if block && !self.text.text[end.offset..].contains(['\n', '\r']) {
                    // The file ends inside it, without a line break: yaml-rust2
                    // adds the one the last line lacks, YAML does not.
                    if value.ends_with('\n') {
                        value.pop();
                    }
                }
                let refused = tag_refusal(tag).or_else(|| self.scalar_refusal(&value, style));
                let plain = style == TScalarStyle::Plain;
                let node = Node {
                    mark: at,
                    span: Span { start: at, end },
                    refused,
                    anchored: false,
                    alias: false,
                    kind: Kind::Scalar { value, plain },
                };
                self.push(node, anchor);
            }
            Event::SequenceStart(anchor, tag) => self.open(at, anchor, tag, false),
            Event::MappingStart(anchor, tag) => self.open(at, anchor, tag, true),
            Event::SequenceEnd | Event::MappingEnd => self.close(at),
            Event::Alias(id) => {
                let Some(mut node) = self.anchors.get(&id).cloned() else {
                    return;
                };
                // Report problems where the alias is used, not where it was defined.
                node.mark = at;
                node.anchored = false;
                node.alias = true;
                node.span = Span {
                    start: at,
                    end: self.text.alias_end(at),
                };
                self.expanded += count(&node);
                if self.expanded > ALIAS_BUDGET {
                    self.too_many_aliases.get_or_insert(at);
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

/// A character a policy cannot hold: control characters (YAML allows none but
/// tab and line breaks), and U+0085, U+2028, U+2029, line breaks to YAML 1.1
/// readers and text to YAML 1.2 ones.
fn unsupported_char(text: &Text) -> Option<Problem> {
    let (i, c) = text.text.char_indices().find(|&(_, c)| {
        (c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{fffe}' | '\u{ffff}')
    })?;
    let code = format!("U+{:04X}", u32::from(c));
    let message = match c {
        '\u{85}' | '\u{2028}' | '\u{2029}' => format!(
            "invalid YAML: the character {code} is not supported: YAML readers disagree on whether it breaks a line"
        ),
        _ => format!("invalid YAML: the character {code} is not allowed"),
    };
    Some(Problem {
        mark: Some(text.advance(START, i)),
        key: None,
        message,
    })
}

/// Parses `text` into its one document; `None` when it is empty, only comments,
/// or `null`. `Err` is a YAML syntax error, or more than one document (reported
/// alone: nothing after it can be trusted).
pub(crate) fn parse(text: &str) -> Result<Option<Node>, Problem> {
    let mut builder = Builder {
        text: Text::new(text),
        stack: Vec::new(),
        documents: Vec::new(),
        anchors: HashMap::new(),
        expanded: 0,
        too_many_aliases: None,
    };
    if let Some(p) = unsupported_char(&builder.text) {
        return Err(p);
    }
    Parser::new_from_str(text)
        .load(&mut builder, true)
        .map_err(|e| Problem {
            mark: Some(builder.text.at(*e.marker())),
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
    Ok(root.filter(|r| !r.is_null() || r.refused.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(text: &str) -> Node {
        parse(text).unwrap().unwrap()
    }

    fn entries(node: &Node) -> &[(Node, Node)] {
        match &node.kind {
            Kind::Map(e) => e,
            _ => panic!("not a mapping: {node:?}"),
        }
    }

    fn covered(text: &str, span: Span) -> &str {
        &text[span.range()]
    }

    #[test]
    fn empty_and_comment_only_documents_have_no_root() {
        for text in ["", "\n", "# just a comment\n# another\n", "---\n", "~\n"] {
            assert!(parse(text).unwrap().is_none(), "{text:?}");
        }
    }

    #[test]
    fn syntax_errors_are_reported_alone_with_a_position() {
        let p = parse("name: x\ncommand: [a, b\n").unwrap_err();
        assert_eq!(p.mark.map(|m| (m.line, m.column)), Some((3, 1)));
        assert!(p.message.starts_with("invalid YAML: "), "{}", p.message);
    }

    #[test]
    fn several_documents_are_refused() {
        let p = parse("name: a\n---\nname: b\n").unwrap_err();
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
        let p = parse(&text).unwrap_err();
        assert_eq!(p.message, "invalid YAML: too many alias expansions");
    }

    #[test]
    fn scalars_are_spanned_with_their_quotes() {
        let text = "a: plain words\nb: 'it''s'  # c\nc: \"q\\\"uote\" \nd: é ü\ne: ~\nf:\ng: multi\n  line\n";
        let r = root(text);
        let got: Vec<(&str, &str)> = entries(&r)
            .iter()
            .map(|(k, v)| (covered(text, k.span), covered(text, v.span)))
            .collect();
        assert_eq!(
            got,
            [
                ("a", "plain words"),
                ("b", "'it''s'"),
                ("c", "\"q\\\"uote\""),
                ("d", "é ü"),
                ("e", "~"),
                ("f", ""),
                ("g", "multi\n  line"),
            ]
        );
        // The empty value sits right after its colon.
        let f = &entries(&r)[5];
        assert_eq!(f.1.span.start.offset, f.0.span.end.offset + 1);
        // Columns count characters, offsets bytes.
        let d = &entries(&r)[3].1;
        assert_eq!((d.span.start.line, d.span.start.column), (4, 4));
        assert_eq!((d.span.end.column, d.span.end.offset), (7, 53));
    }

    #[test]
    fn collections_are_spanned() {
        let text = "x: [a, [b]]  # c\ny: {k: v}\nz:\n  - a\n  - b   # trailing\n\nw:\n  k: v\n  l: |\n    one\n    two\n";
        let r = root(text);
        let got: Vec<&str> = entries(&r)
            .iter()
            .map(|(_, v)| covered(text, v.span))
            .collect();
        assert_eq!(
            got,
            [
                "[a, [b]]",
                "{k: v}",
                "- a\n  - b",
                "k: v\n  l: |\n    one\n    two"
            ]
        );
        assert_eq!(covered(text, r.span), text.trim_end());
        // A block scalar from its first content character to its last.
        let l = &entries(&entries(&r)[3].1)[1].1;
        assert_eq!(covered(text, l.span), "one\n    two");
    }

    #[test]
    fn aliases_are_expanded_and_placed_where_used() {
        let text = "a: &r [x, y]\nb: *r\n";
        let r = root(text);
        let b = &entries(&r)[1].1;
        assert_eq!(covered(text, b.span), "*r");
        assert_eq!((b.mark.line, b.mark.column), (2, 4));
        assert!(matches!(&b.kind, Kind::Seq(items) if items.len() == 2));
    }

    #[test]
    fn tags_and_what_yaml_readers_disagree_on_are_kept_for_the_schema_to_refuse() {
        let r = root("a: !!str 5\nb: !local x\nc: [d]\nd: !<tag:x> y\ne: [?x, :y, -z, x?]\nf: ?x\ng: |\n\nh: >+\n\n");
        let refused: Vec<Option<String>> = entries(&r)
            .iter()
            .flat_map(|(_, v)| match &v.kind {
                Kind::Seq(items) => items.iter().map(|i| i.refused.clone()).collect(),
                _ => vec![v.refused.clone()],
            })
            .collect();
        let tag = |t: &str| Some(format!("YAML tags are not supported: remove `{t}`"));
        let quote = |v: &str| {
            Some(format!(
                "`{v}` in brackets reads differently to different YAML readers; quote it"
            ))
        };
        let empty = Some("a block scalar (`|`, `>`) with no content is not supported; write \"\" for an empty string".to_owned());
        assert_eq!(
            refused,
            [
                tag("!!str"),
                tag("!local"),
                None,
                tag("!<tag:x>"),
                quote("?x"),
                quote(":y"),
                None,
                None,
                None,
                // `|` alone is "" here, as YAML says; `>+` keeps a line break
                // yaml-rust2 may or may not count.
                None,
                empty,
            ]
        );
    }

    #[test]
    fn control_characters_and_unicode_line_breaks_are_refused() {
        for (text, at, code) in [
            ("a: x\u{7f}\n", (1, 5), "U+007F"),
            ("a: x\nb: \u{0}\n", (2, 4), "U+0000"),
            ("# \u{85}\n", (1, 3), "U+0085"),
            ("a: 'x\u{2028}y'\n", (1, 6), "U+2028"),
        ] {
            let p = parse(text).unwrap_err();
            assert_eq!(p.mark.map(|m| (m.line, m.column)), Some(at), "{text:?}");
            assert!(p.message.contains(code), "{}", p.message);
        }
        assert!(parse("a: \"tab\there\"\r\nb: \u{a0}\u{feff}\n").is_ok());
    }

    #[test]
    fn a_block_scalar_that_ends_the_file_has_no_line_break_it_lacks() {
        for (text, want) in [
            ("a: |\n  x", "x"),
            ("a: >+\n  x\n  y", "x y"),
            ("a: |\n  x\n", "x\n"),
            ("a: |+\n  x\n\n", "x\n\n"),
            ("a: |-\n  x\n", "x"),
        ] {
            let r = root(text);
            let v = &entries(&r)[0].1;
            assert!(
                matches!(&v.kind, Kind::Scalar { value, .. } if value == want),
                "{text:?}: {v:?}"
            );
        }
    }

    #[test]
    fn crlf_and_cr_line_breaks_count_as_one_line() {
        let text = "a: x\r\nb: y\rc: z\n";
        let r = root(text);
        let c = &entries(&r)[2].1;
        assert_eq!((c.span.start.line, c.span.start.column), (3, 4));
        assert_eq!(covered(text, c.span), "z");
    }

    #[test]
    fn scalar_resolution_follows_the_core_schema() {
        use Resolved as R;
        for (s, want) in [
            ("", R::Null),
            ("~", R::Null),
            ("Null", R::Null),
            ("true", R::Bool(true)),
            ("FALSE", R::Bool(false)),
            ("yes", R::Str),
            ("5", R::Int(Int::U64(5))),
            ("+4", R::Int(Int::U64(4))),
            ("-3", R::Int(Int::I64(-3))),
            ("0x1f", R::Int(Int::U64(31))),
            ("-0x1f", R::Int(Int::I64(-31))),
            ("0o17", R::Int(Int::U64(15))),
            ("0b101", R::Int(Int::U64(5))),
            ("0123", R::Str),
            ("1_000", R::Str),
            ("18446744073709551616", R::Int(Int::U128(1 << 64))),
            ("1.5", R::Float(1.5)),
            ("1e3", R::Float(1000.0)),
            (".inf", R::Float(f64::INFINITY)),
            ("-.Inf", R::Float(f64::NEG_INFINITY)),
            (".iNf", R::Str),
            ("1e400", R::Str),
            ("inf", R::Str),
            ("abc", R::Str),
        ] {
            assert_eq!(resolve(s), want, "{s:?}");
        }
        assert!(matches!(resolve(".nan"), R::Float(f) if f.is_nan()));
    }

    #[test]
    fn typed_parses_agree_with_resolution() {
        for s in [
            "5",
            "+5",
            "-5",
            "0",
            "-0",
            "+0",
            "0x1f",
            "+0x1f",
            "-0x1f",
            "0o7",
            "-0b1",
            "0123",
            "00",
            "++5",
            "+-5",
            "0x-1",
            "-0x-1",
            "1e3",
            "1.5",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "abc",
            "",
        ] {
            // Whatever reads as an i64 is an integer in the core schema.
            if let Some(n) = parse_i64(s) {
                assert!(
                    matches!(resolve(s), Resolved::Int(i) if match i {
                        Int::U64(u) => i64::try_from(u) == Ok(n),
                        Int::I64(i) => i == n,
                        _ => false,
                    }),
                    "{s:?}"
                );
            }
        }
        assert_eq!(parse_i64("0123"), None);
        assert_eq!(parse_i64("9223372036854775808"), None);
        // A float key reads `0123` as 123, as serde_yaml did.
        assert_eq!(parse_f64("0123"), Some(123.0));
        assert_eq!(parse_f64("0x10"), None);
    }
}
