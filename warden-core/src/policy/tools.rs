//! `mcp:` — what the daemon enforces on the MCP stream itself: which tools a
//! client may call (`mcp.tools.allow` / `mcp.tools.deny`) and what a change
//! in the server's tool definitions does (`mcp.pin`).

use serde::{Deserialize, Serialize};

/// `mcp.pin`: what a server whose tool definitions differ from those
/// pinned for its profile gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PinMode {
    /// Record the change (`mcp.pin` changed, `wardenctl ps`); the tools stay
    /// callable. The default.
    #[default]
    Flag,
    /// Record it, and withhold the new and changed tools (absent from
    /// `tools/list`, their calls refused) until a person accepts them with
    /// `wardenctl approve`.
    Enforce,
    /// No pin is kept or compared.
    Off,
}

impl PinMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PinMode::Flag => "flag",
            PinMode::Enforce => "enforce",
            PinMode::Off => "off",
        }
    }

    pub fn parse(s: &str) -> Option<PinMode> {
        [PinMode::Flag, PinMode::Enforce, PinMode::Off]
            .into_iter()
            .find(|m| m.as_str() == s)
    }

    pub fn is_flag(&self) -> bool {
        *self == PinMode::Flag
    }
}

/// A tool name or a glob of one: `*` stands for any run of characters, `?`
/// for one; everything else is itself.
pub struct ToolPattern;

impl ToolPattern {
    /// Checks an entry as the policy takes it.
    pub fn check(p: &str) -> Result<(), String> {
        if p.is_empty() {
            return Err("a tool name or pattern cannot be empty".into());
        }
        if p.chars().count() > 256 {
            return Err(format!("`{p}` is longer than 256 characters"));
        }
        if let Some(c) = p.chars().find(|c| c.is_control() || c.is_whitespace()) {
            return Err(format!(
                "`{}` holds {c:?}: tool names have no spaces or control characters",
                p.escape_debug()
            ));
        }
        Ok(())
    }

    /// Whether `name` matches `pattern` (the whole name).
    pub fn matches(pattern: &str, name: &str) -> bool {
        let p: Vec<char> = pattern.chars().collect();
        let n: Vec<char> = name.chars().collect();
        // Iterative glob with one backtrack point: linear in practice, never
        // exponential.
        let (mut i, mut j) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while j < n.len() {
            match p.get(i) {
                Some('*') => {
                    star = Some((i, j));
                    i += 1;
                }
                Some(&c) if c == '?' || c == n[j] => {
                    i += 1;
                    j += 1;
                }
                _ => match star {
                    Some((si, sj)) => {
                        i = si + 1;
                        j = sj + 1;
                        star = Some((si, sj + 1));
                    }
                    None => return false,
                },
            }
        }
        p[i..].iter().all(|c| *c == '*')
    }
}

/// The compiled `mcp:` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpPolicy {
    /// `mcp.tools.allow`: when present, only tools matching one of these
    /// may be called (and are listed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// `mcp.tools.deny`: tools matching one of these are never called (nor
    /// listed); deny wins over allow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// `mcp.pin`.
    #[serde(default, skip_serializing_if = "PinMode::is_flag")]
    pub pin: PinMode,
    /// `mcp.explain_denials`: a tool call that ends in an error after Warden
    /// denied something during it gets one line more in that error, naming
    /// the denial and what would grant it (off by default: it changes the
    /// server's bytes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub explain_denials: bool,
}

impl McpPolicy {
    /// True when the daemon must stand between client and server (read each
    /// message whole, and refuse calls, filter lists or explain denials),
    /// not only watch.
    pub fn gates(&self) -> bool {
        self.filters() || self.explain_denials
    }

    /// True when the policy restricts what the client may call or see (the
    /// gate then refuses what it cannot read).
    pub fn filters(&self) -> bool {
        self.allow.is_some() || !self.deny.is_empty() || self.pin == PinMode::Enforce
    }

    /// Why the policy refuses `tool`, naming the rule (`mcp.tools.deny:
    /// "write_*"`), or None when it may be called.
    pub fn refuses(&self, tool: &str) -> Option<String> {
        if let Some(p) = self.deny.iter().find(|p| ToolPattern::matches(p, tool)) {
            return Some(format!("mcp.tools.deny: {p:?}"));
        }
        match &self.allow {
            Some(allow) if !allow.iter().any(|p| ToolPattern::matches(p, tool)) => {
                Some("not in mcp.tools.allow".into())
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        let m = ToolPattern::matches;
        assert!(m("echo", "echo"));
        assert!(!m("echo", "echo2"));
        assert!(!m("echo", "ech"));
        assert!(m("write_*", "write_file"));
        assert!(m("write_*", "write_"));
        assert!(!m("write_*", "rewrite_file"));
        assert!(m("*_file", "read_file"));
        assert!(m("*", ""));
        assert!(m("*", "anything"));
        assert!(m("get-?um", "get-sum"));
        assert!(!m("get-?um", "get-um"));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(!m("a*b*c", "aXXbYY"));
        assert!(m("*a*a*a*a*a*b", &format!("{}b", "a".repeat(200))));
        assert!(!m("*a*a*a*a*a*b", &"a".repeat(200)));
        // Case matters: tool names are case-sensitive.
        assert!(!m("Echo", "echo"));
    }

    #[test]
    fn deny_wins_over_allow_and_allow_is_a_closed_list() {
        let p = McpPolicy {
            allow: Some(vec!["read_*".into(), "echo".into()]),
            deny: vec!["read_secret*".into()],
            pin: PinMode::Flag,
            explain_denials: false,
        };
        assert_eq!(p.refuses("echo"), None);
        assert_eq!(p.refuses("read_file"), None);
        assert_eq!(
            p.refuses("read_secrets").as_deref(),
            Some("mcp.tools.deny: \"read_secret*\"")
        );
        assert_eq!(
            p.refuses("write_file").as_deref(),
            Some("not in mcp.tools.allow")
        );
        assert!(p.gates());
        let none = McpPolicy::default();
        assert_eq!(none.refuses("anything"), None);
        assert!(!none.gates());
        let explain = McpPolicy {
            explain_denials: true,
            ..McpPolicy::default()
        };
        assert!(explain.gates() && !explain.filters());
        let empty = McpPolicy {
            allow: Some(vec![]),
            ..McpPolicy::default()
        };
        assert!(empty.refuses("echo").is_some());
    }

    #[test]
    fn patterns_are_checked() {
        assert!(ToolPattern::check("write_*").is_ok());
        assert!(ToolPattern::check("").is_err());
        assert!(ToolPattern::check("a b").is_err());
        assert!(ToolPattern::check("a\nb").is_err());
        assert!(ToolPattern::check(&"x".repeat(257)).is_err());
    }
}
