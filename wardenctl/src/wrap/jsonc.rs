//! A small span-tracking JSONC parser: `//` and `/* */` comments, trailing
//! commas, strings with escapes. Every value and member key carries its byte
//! span, so callers edit a config by replacing spans and keep every other
//! byte of the file as it was.

use std::ops::Range;

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Object(Vec<Member>),
    Array(Vec<Value>),
    String(String),
    Number(String),
    Bool(bool),
    Null,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub span: Range<usize>,
    pub kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub key: String,
    pub key_span: Range<usize>,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct Error {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl Value {
    /// The last member named `key` (as JavaScript reads duplicates).
    pub fn get(&self, key: &str) -> Option<&Member> {
        match &self.kind {
            Kind::Object(m) => m.iter().rev().find(|m| m.key == key),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self.kind {
            Kind::Object(_) => "an object",
            Kind::Array(_) => "an array",
            Kind::String(_) => "a string",
            Kind::Number(_) => "a number",
            Kind::Bool(_) => "a boolean",
            Kind::Null => "null",
        }
    }

    /// The value as plain JSON (for comparisons).
    #[cfg(test)]
    pub fn to_json(&self) -> serde_json::Value {
        match &self.kind {
            Kind::Object(m) => serde_json::Value::Object(
                m.iter()
                    .map(|m| (m.key.clone(), m.value.to_json()))
                    .collect(),
            ),
            Kind::Array(a) => serde_json::Value::Array(a.iter().map(Value::to_json).collect()),
            Kind::String(s) => serde_json::Value::String(s.clone()),
            Kind::Number(n) => serde_json::from_str(n).unwrap_or(serde_json::Value::Null),
            Kind::Bool(b) => serde_json::Value::Bool(*b),
            Kind::Null => serde_json::Value::Null,
        }
    }
}

/// Line and column (1-based, in characters) of byte `pos` of `text`.
pub fn line_col(text: &str, pos: usize) -> (usize, usize) {
    let before = &text[..pos.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

pub fn parse(text: &str) -> Result<Value, Error> {
    let mut p = Parser {
        text,
        b: text.as_bytes(),
        pos: 0,
        depth: 0,
    };
    // A UTF-8 byte order mark is allowed before the value.
    if text.starts_with('\u{feff}') {
        p.pos = 3;
    }
    p.ws()?;
    let v = p.value()?;
    p.ws()?;
    if p.pos != p.b.len() {
        return Err(p.err("unexpected text after the value"));
    }
    Ok(v)
}

struct Parser<'a> {
    text: &'a str,
    b: &'a [u8],
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn err(&self, message: &str) -> Error {
        let (line, col) = line_col(self.text, self.pos);
        Error {
            line,
            col,
            message: message.to_owned(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    /// Whitespace and comments.
    fn ws(&mut self) -> Result<(), Error> {
        loop {
            match self.peek() {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.pos += 1,
                Some(b'/') if self.b.get(self.pos + 1) == Some(&b'/') => {
                    while let Some(c) = self.peek() {
                        if c == b'\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                Some(b'/') if self.b.get(self.pos + 1) == Some(&b'*') => {
                    let start = self.pos;
                    self.pos += 2;
                    loop {
                        match self.peek() {
                            None => {
                                self.pos = start;
                                return Err(self.err("unterminated comment"));
                            }
                            Some(b'*') if self.b.get(self.pos + 1) == Some(&b'/') => {
                                self.pos += 2;
                                break;
                            }
                            Some(_) => self.pos += 1,
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn value(&mut self) -> Result<Value, Error> {
        let start = self.pos;
        let kind = match self.peek() {
            None => return Err(self.err("unexpected end of file, expected a value")),
            Some(b'{') => self.nested(Self::object)?,
            Some(b'[') => self.nested(Self::array)?,
            Some(b'"') => Kind::String(self.string()?),
            Some(b't') => self.word("true", Kind::Bool(true))?,
            Some(b'f') => self.word("false", Kind::Bool(false))?,
            Some(b'n') => self.word("null", Kind::Null)?,
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(_) => return Err(self.err("expected a value")),
        };
        Ok(Value {
            span: start..self.pos,
            kind,
        })
    }

    fn nested(&mut self, f: fn(&mut Self) -> Result<Kind, Error>) -> Result<Kind, Error> {
        self.depth += 1;
        if self.depth > 256 {
            return Err(self.err("nested too deeply"));
        }
        let k = f(self);
        self.depth -= 1;
        k
    }

    fn word(&mut self, w: &str, k: Kind) -> Result<Kind, Error> {
        if self.b[self.pos..].starts_with(w.as_bytes()) {
            self.pos += w.len();
            Ok(k)
        } else {
            Err(self.err("expected a value"))
        }
    }

    fn number(&mut self) -> Result<Kind, Error> {
        let start = self.pos;
        while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        let s = &self.text[start..self.pos];
        if serde_json::from_str::<serde_json::Number>(s).is_err() {
            self.pos = start;
            return Err(self.err("invalid number"));
        }
        Ok(Kind::Number(s.to_owned()))
    }

    fn string(&mut self) -> Result<String, Error> {
        let start = self.pos;
        self.pos += 1;
        loop {
            match self.peek() {
                None | Some(b'\n') => {
                    self.pos = start;
                    return Err(self.err("unterminated string"));
                }
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => self.pos += 2,
                Some(_) => self.pos += 1,
            }
        }
        serde_json::from_str(&self.text[start..self.pos]).map_err(|e| {
            let mut at = self.err("");
            let (line, col) = line_col(self.text, start);
            at.line = line;
            at.col = col;
            at.message = format!("invalid string: {e}");
            at
        })
    }

    fn object(&mut self) -> Result<Kind, Error> {
        self.pos += 1;
        let mut members = Vec::new();
        loop {
            self.ws()?;
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Kind::Object(members));
                }
                Some(b'"') => {}
                _ => return Err(self.err("expected a member name in quotes or `}`")),
            }
            let key_start = self.pos;
            let key = self.string()?;
            let key_span = key_start..self.pos;
            self.ws()?;
            if self.peek() != Some(b':') {
                return Err(self.err("expected `:`"));
            }
            self.pos += 1;
            self.ws()?;
            let value = self.value()?;
            members.push(Member {
                key,
                key_span,
                value,
            });
            self.ws()?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return Err(self.err("expected `,` or `}`")),
            }
        }
    }

    fn array(&mut self) -> Result<Kind, Error> {
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.ws()?;
            if self.peek() == Some(b']') {
                self.pos += 1;
                return Ok(Kind::Array(items));
            }
            items.push(self.value()?);
            self.ws()?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {}
                _ => return Err(self.err("expected `,` or `]`")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_comments_and_trailing_commas() {
        let t = "// c\n{ /* x */ \"a\": [1, \"b\\\"\",], \"c\": {\"d\": null,}, }\n";
        let v = parse(t).unwrap();
        let a = v.get("a").unwrap();
        assert_eq!(&t[a.key_span.clone()], "\"a\"");
        assert_eq!(&t[a.value.span.clone()], "[1, \"b\\\"\",]");
        assert_eq!(
            v.to_json(),
            serde_json::json!({"a": [1, "b\""], "c": {"d": null}})
        );
    }

    #[test]
    fn errors_have_line_and_column() {
        let e = parse("{\n  \"a\": 1\n  \"b\": 2\n}").unwrap_err();
        assert_eq!((e.line, e.col), (3, 3), "{e}");
        let e = parse("{\"a\": tru}").unwrap_err();
        assert_eq!((e.line, e.col), (1, 7));
        assert!(parse("{\"a\": \"x}").is_err());
        assert!(parse("{} x").is_err());
        assert!(parse("/* open").is_err());
    }
}
