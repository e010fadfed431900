//! Diagnostics: what went wrong, where (file, line, column, key), in one line each.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One problem found while compiling a policy.
///
/// Displays as `FILE:LINE:COLUMN: KEY: MESSAGE`, leaving out the parts that are
/// unknown: `policy.yaml:3:5: filesystem.read[1]: path does not exist: /home/u/data`,
/// or for a command-line flag `--read: path does not exist: /x`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// The policy file, when the problem is in it.
    pub file: Option<PathBuf>,
    /// 1-based line in `file`.
    pub line: Option<usize>,
    /// 1-based column (in characters) in `file`.
    pub column: Option<usize>,
    /// The key path in the file (`filesystem.read[1]`) or the flag (`--read`).
    pub key: Option<String>,
    /// Lowercase, no trailing period.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}", file.display())?;
            if let Some(line) = self.line {
                write!(f, ":{line}")?;
                if let Some(column) = self.column {
                    write!(f, ":{column}")?;
                }
            }
            f.write_str(": ")?;
        }
        if let Some(key) = &self.key {
            write_one_line(f, key)?;
            f.write_str(": ")?;
        }
        write_one_line(f, &self.message)
    }
}

/// Writes `s` with control characters escaped (`\n`, `\u{1b}`), so that a value
/// quoted in a message can neither break the one-line-per-diagnostic format nor
/// drive the terminal.
fn write_one_line(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    for c in s.chars() {
        if c.is_control() {
            write!(f, "{}", c.escape_default())?;
        } else {
            write!(f, "{c}")?;
        }
    }
    Ok(())
}

/// Every problem found in one compilation: those in the file in file order, then
/// those in flags. Displays one diagnostic per line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyError {
    pub diagnostics: Vec<Diagnostic>,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PolicyError {}

impl From<Diagnostic> for PolicyError {
    fn from(d: Diagnostic) -> Self {
        PolicyError {
            diagnostics: vec![d],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diag(
        file: Option<&str>,
        line: Option<usize>,
        column: Option<usize>,
        key: Option<&str>,
    ) -> Diagnostic {
        Diagnostic {
            file: file.map(PathBuf::from),
            line,
            column,
            key: key.map(str::to_owned),
            message: "path does not exist: /x".into(),
        }
    }

    #[test]
    fn display_leaves_out_unknown_parts() {
        let cases = [
            (
                diag(
                    Some("policy.yaml"),
                    Some(3),
                    Some(5),
                    Some("filesystem.read[1]"),
                ),
                "policy.yaml:3:5: filesystem.read[1]: path does not exist: /x",
            ),
            (
                diag(Some("p.yaml"), None, None, None),
                "p.yaml: path does not exist: /x",
            ),
            (
                diag(Some("p.yaml"), Some(2), None, Some("name")),
                "p.yaml:2: name: path does not exist: /x",
            ),
            (
                diag(None, None, None, Some("--read")),
                "--read: path does not exist: /x",
            ),
            (diag(None, None, None, None), "path does not exist: /x"),
        ];
        for (d, want) in cases {
            assert_eq!(d.to_string(), want);
        }
    }

    #[test]
    fn control_characters_are_escaped() {
        let d = Diagnostic {
            message: "invalid name `a\nb\u{1b}[31m`".into(),
            ..diag(None, None, None, Some("na\tme"))
        };
        assert_eq!(d.to_string(), "na\\tme: invalid name `a\\nb\\u{1b}[31m`");
    }

    #[test]
    fn error_is_one_line_per_diagnostic() {
        let err = PolicyError {
            diagnostics: vec![
                diag(None, None, None, Some("--read")),
                diag(None, None, None, Some("--write")),
            ],
        };
        assert_eq!(
            err.to_string(),
            "--read: path does not exist: /x\n--write: path does not exist: /x"
        );
    }
}
