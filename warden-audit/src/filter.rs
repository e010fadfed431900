//! Which records `wardenctl logs` shows: `--session`, `--type`, `--decision`,
//! `--since`, `--until`. The daemon's `Logs` stream applies the same filter.

use crate::{parse_timestamp_ms, Decision, Record, RecordType};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// A session id or a prefix of one.
    pub session: Option<String>,
    pub kind: Option<RecordType>,
    /// With `kind`: only this action (`--type session.start`).
    pub action: Option<String>,
    pub decision: Option<Decision>,
    /// Unix milliseconds, inclusive.
    pub since_ms: Option<i64>,
    /// Unix milliseconds, inclusive.
    pub until_ms: Option<i64>,
    /// Only records of this tool's calls: `details.tool`, or one of
    /// `details.calls` ("TOOL (id ID)").
    pub tool: Option<String>,
    /// Only records of the call with this request id (as `mcp.*` spell it):
    /// `details.call` or `details.id` of an `mcp` record, or one of
    /// `details.calls`.
    pub call: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    #[error("unknown record type `{0}` (one of: session, file, network, env, limit, approval, policy, daemon, mcp; optionally with .ACTION, e.g. session.start)")]
    Type(String),
    #[error("unknown decision `{0}` (one of: allow, deny, info)")]
    Decision(String),
}

/// `details.calls` of a record made while several tool calls were in
/// flight: ("TOOL", "ID") pairs.
fn calls(r: &Record) -> impl Iterator<Item = (&str, &str)> {
    r.details
        .get("calls")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .filter_map(|s| {
            let (tool, rest) = s.rsplit_once(" (id ")?;
            Some((tool, rest.strip_suffix(')')?))
        })
}

impl Filter {
    /// `--type`: `TYPE` or `TYPE.ACTION`.
    pub fn set_type(&mut self, spec: &str) -> Result<(), FilterError> {
        let (t, action) = match spec.split_once('.') {
            Some((t, a)) if !a.is_empty() => (t, Some(a.to_string())),
            Some(_) => return Err(FilterError::Type(spec.to_string())),
            None => (spec, None),
        };
        self.kind = Some(RecordType::parse(t).ok_or_else(|| FilterError::Type(spec.to_string()))?);
        self.action = action;
        Ok(())
    }

    /// `--decision`.
    pub fn set_decision(&mut self, d: &str) -> Result<(), FilterError> {
        self.decision =
            Some(Decision::parse(d).ok_or_else(|| FilterError::Decision(d.to_string()))?);
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        *self == Filter::default()
    }

    pub fn matches(&self, r: &Record) -> bool {
        if let Some(t) = &self.tool {
            let one = r.details.get("tool").and_then(|v| v.as_str()) == Some(t.as_str());
            let among = calls(r).any(|(tool, _)| tool == t);
            if !one && !among {
                return false;
            }
        }
        if let Some(c) = &self.call {
            let key = if r.kind == RecordType::Mcp {
                "id"
            } else {
                "call"
            };
            let one = r.details.get(key).and_then(|v| v.as_str()) == Some(c.as_str())
                && (r.kind != RecordType::Mcp || r.details.get("tool").is_some());
            let among = calls(r).any(|(_, id)| id == c);
            if !one && !among {
                return false;
            }
        }
        if let Some(s) = &self.session {
            if !r
                .session
                .as_deref()
                .is_some_and(|id| id.starts_with(s.as_str()))
            {
                return false;
            }
        }
        if self.kind.is_some_and(|k| k != r.kind) {
            return false;
        }
        if self.action.as_deref().is_some_and(|a| a != r.action) {
            return false;
        }
        if self.decision.is_some_and(|d| d != r.decision) {
            return false;
        }
        if self.since_ms.is_some() || self.until_ms.is_some() {
            let Some(t) = parse_timestamp_ms(&r.ts) else {
                return false;
            };
            if self.since_ms.is_some_and(|s| t < s) || self.until_ms.is_some_and(|u| t > u) {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tool_and_call_pick_a_calls_records() {
        let rec = |kind, details: serde_json::Value| {
            Record::new(kind, "x", Some("s"), "r", Decision::Info, "").with_details(details)
        };
        let during = rec(
            RecordType::File,
            serde_json::json!({"call": "7", "tool": "fetch"}),
        );
        let several = rec(
            RecordType::Network,
            serde_json::json!({"calls": ["fetch (id 7)", "read (id \"a\")"]}),
        );
        let mcp_end = rec(
            RecordType::Mcp,
            serde_json::json!({"id": "7", "tool": "fetch"}),
        );
        let mcp_init = rec(RecordType::Mcp, serde_json::json!({"id": "7"}));
        let plain = rec(RecordType::File, serde_json::json!({}));
        let f = Filter {
            tool: Some("fetch".into()),
            ..Filter::default()
        };
        assert!(f.matches(&during) && f.matches(&several) && f.matches(&mcp_end));
        assert!(!f.matches(&plain) && !f.matches(&mcp_init));
        let f = Filter {
            call: Some("7".into()),
            ..Filter::default()
        };
        assert!(f.matches(&during) && f.matches(&several) && f.matches(&mcp_end));
        assert!(!f.matches(&plain) && !f.matches(&mcp_init));
        let f = Filter {
            call: Some("\"a\"".into()),
            ..Filter::default()
        };
        assert!(f.matches(&several) && !f.matches(&during));
    }

    use super::*;

    fn rec(session: Option<&str>, kind: RecordType, action: &str, d: Decision, ts: &str) -> Record {
        let mut r = Record::new(kind, action, session, "x", d, "");
        r.ts = ts.into();
        r
    }

    #[test]
    fn each_criterion() {
        let a = rec(
            Some("3fa1c09b22de"),
            RecordType::Session,
            "start",
            Decision::Allow,
            "2026-01-01T00:00:10.000Z",
        );
        let b = rec(
            None,
            RecordType::Daemon,
            "start",
            Decision::Info,
            "2026-01-01T00:00:20.000Z",
        );
        let mut f = Filter::default();
        assert!(f.is_empty() && f.matches(&a) && f.matches(&b));
        f.session = Some("3fa1".into());
        assert!(f.matches(&a) && !f.matches(&b));
        let mut f = Filter::default();
        f.set_type("session.start").unwrap();
        assert!(f.matches(&a) && !f.matches(&b));
        f.set_type("session.exit").unwrap();
        assert!(!f.matches(&a));
        f.set_type("daemon").unwrap();
        assert!(!f.matches(&a) && f.matches(&b));
        assert!(f.set_type("sesion").is_err() && f.set_type("session.").is_err());
        let mut f = Filter::default();
        f.set_decision("info").unwrap();
        assert!(!f.matches(&a) && f.matches(&b));
        assert!(f.set_decision("maybe").is_err());
        let t0 = parse_timestamp_ms("2026-01-01T00:00:15.000Z").unwrap();
        let f = Filter {
            since_ms: Some(t0),
            ..Filter::default()
        };
        assert!(!f.matches(&a) && f.matches(&b));
        let f = Filter {
            until_ms: Some(t0),
            ..Filter::default()
        };
        assert!(f.matches(&a) && !f.matches(&b));
    }
}
