//! Verification of the whole store: `seq` continuity and the hash chain
//! across every file, the head, and retention (`wardenctl logs --verify`,
//! `docs/audit-format.md`, "Verification").
//!
//! What is accepted:
//! - the oldest remaining file starting mid-chain, when the newest
//!   `daemon.rotate`/`daemon.retention` record says files before it were
//!   deleted by retention (`details.oldest_seq` at or after its first seq);
//! - schema v1 records (no `prev`) before the first chained record.
//!
//! What fails, with the file, line and seq of the first bad record: a record
//! whose bytes changed (the next record's `prev` or the head no longer
//! matches), a missing record or file (a gap in `seq`), records out of order,
//! a line that is not a record, a file cut short (the head names a later
//! record, or a rotated file ends mid-line) and a torn last line.

use serde::{Deserialize, Serialize};

use crate::store::{Head, Snapshot};
use crate::{line_hash, GENESIS};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProblemKind {
    /// A record's bytes changed (or a line that is no record was written).
    Edited,
    /// Records are missing: deleted lines or a deleted file.
    Missing,
    /// Records are in the wrong order or repeated.
    Reordered,
    /// The store ends before a record known to have been on disk.
    Truncated,
    /// The last line is incomplete: a write cut short by a crash.
    Torn,
}

impl ProblemKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemKind::Edited => "edited",
            ProblemKind::Missing => "missing",
            ProblemKind::Reordered => "reordered",
            ProblemKind::Truncated => "truncated",
            ProblemKind::Torn => "torn",
        }
    }
}

/// The first bad record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    /// File name within the store directory.
    pub file: String,
    /// 1-based line number (where a missing record should have been).
    pub line: u64,
    /// The seq of the bad (or first missing) record, when known.
    pub seq: Option<u64>,
    pub message: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub ok: bool,
    pub records: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// `line_hash` of the last record: with `last_seq`, what to keep elsewhere
    /// to detect a later rewrite of the whole store.
    pub last_hash: Option<String>,
    pub files: Vec<String>,
    /// Schema v1 records (before the chain started).
    pub unchained: u64,
    pub head: Option<Head>,
    pub notes: Vec<String>,
    pub problem: Option<Problem>,
}

/// Where a record is.
#[derive(Debug, Clone)]
struct Loc {
    file: String,
    line: u64,
    seq: u64,
}

/// The fields verification reads.
#[derive(Deserialize)]
struct Fields {
    seq: u64,
    #[serde(default)]
    prev: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    action: Option<String>,
}

struct Prev {
    loc: Loc,
    hash: String,
}

/// A chain break at `cur` awaiting the next record to tell which one changed.
struct Break {
    prev: Loc,
    cur: Loc,
    cur_hash: String,
}

/// Verifies a snapshot. Reads every line once; stops at the first problem.
pub fn verify(snap: &Snapshot) -> Report {
    let mut report = Report {
        head: snap.head.clone(),
        files: snap.files.iter().map(|f| f.name.clone()).collect(),
        ..Report::default()
    };
    let problem = walk(snap, &mut report);
    for t in &snap.torn {
        report.notes.push(format!(
            "{t}: an incomplete line a crash left, moved aside when wardend restarted (not part of the chain)"
        ));
    }
    report.ok = problem.is_none();
    report.problem = problem;
    report
}

fn problem(kind: ProblemKind, loc: &Loc, seq: Option<u64>, message: String) -> Option<Problem> {
    Some(Problem {
        kind,
        file: loc.file.clone(),
        line: loc.line,
        seq,
        message,
    })
}

/// "record 4 is" / "records 4..7 are".
fn span(a: u64, b: u64) -> String {
    if a == b {
        format!("record {a} is")
    } else {
        format!("records {a}..{b} are")
    }
}

fn at(loc: &Loc) -> String {
    format!("{}:{}", loc.file, loc.line)
}

fn walk(snap: &Snapshot, report: &mut Report) -> Option<Problem> {
    let mut prev: Option<Prev> = None;
    let mut pending: Option<Break> = None;
    let mut first: Option<Loc> = None;
    let mut chained = false;
    // (seq of the record, oldest_seq it states) of the newest retention record.
    let mut retention: Option<(u64, u64)> = None;
    let head = snap.head.as_ref();
    for f in &snap.files {
        let lines = match f.lines() {
            Ok(l) => l,
            Err(e) => {
                let loc = Loc {
                    file: f.name.clone(),
                    line: 0,
                    seq: 0,
                };
                return problem(
                    ProblemKind::Missing,
                    &loc,
                    None,
                    format!("cannot read: {e}"),
                );
            }
        };
        let mut in_file = 0u64;
        for line in lines {
            let line = match line {
                Ok(l) => l,
                Err(e) => {
                    let loc = Loc {
                        file: f.name.clone(),
                        line: in_file + 1,
                        seq: 0,
                    };
                    return problem(
                        ProblemKind::Missing,
                        &loc,
                        None,
                        format!("cannot read: {e}"),
                    );
                }
            };
            in_file += 1;
            let mut loc = Loc {
                file: f.name.clone(),
                line: line.number,
                seq: prev.as_ref().map_or(0, |p| p.loc.seq + 1),
            };
            if !line.complete {
                if let Some(b) = pending.take() {
                    return resolve(b, None, head);
                }
                let last = prev.as_ref().map_or(0, |p| p.loc.seq);
                let expected = Some(last + 1);
                if let Some(h) = head.filter(|h| h.seq > last) {
                    return problem(
                        ProblemKind::Truncated,
                        &loc,
                        expected,
                        format!(
                            "the file ends in the middle of a line ({} bytes, no newline), but {} says seq {} was on disk: cut short",
                            line.bytes.len(),
                            crate::store::HEAD,
                            h.seq
                        ),
                    );
                }
                if !f.is_live() {
                    return problem(
                        ProblemKind::Truncated,
                        &loc,
                        expected,
                        format!(
                            "a rotated file ends in the middle of a line ({} bytes, no newline): cut short",
                            line.bytes.len()
                        ),
                    );
                }
                return problem(
                    ProblemKind::Torn,
                    &loc,
                    expected,
                    format!(
                        "the last line is incomplete ({} bytes, no newline): a write cut short by a crash \
                         (wardend moves it aside when it next starts) or the file was cut short",
                        line.bytes.len()
                    ),
                );
            }
            let fields: Fields = match serde_json::from_slice(&line.bytes) {
                Ok(v) => v,
                Err(e) => {
                    if let Some(b) = pending.take() {
                        return resolve(b, None, head);
                    }
                    return problem(
                        ProblemKind::Edited,
                        &loc,
                        prev.as_ref().map(|p| p.loc.seq + 1),
                        format!("not an audit record ({e})"),
                    );
                }
            };
            loc.seq = fields.seq;
            let hash = line_hash(&line.bytes);
            if let Some(b) = pending.take() {
                return resolve(b, Some((&fields, &hash)), head);
            }
            // The name promises the first seq of a rotated file.
            if in_file == 1 {
                if let Some(named) = f.named_seq {
                    if fields.seq > named {
                        return problem(
                            ProblemKind::Missing,
                            &loc,
                            Some(named),
                            format!(
                                "the file is named for seq {named} but starts with seq {}: {} missing",
                                fields.seq,
                                span(named, fields.seq - 1)
                            ),
                        );
                    }
                    if fields.seq < named {
                        return problem(
                            ProblemKind::Reordered,
                            &loc,
                            Some(fields.seq),
                            format!(
                                "the file is named for seq {named} but starts with seq {}",
                                fields.seq
                            ),
                        );
                    }
                }
            }
            match &prev {
                None => {
                    first = Some(loc.clone());
                    match &fields.prev {
                        Some(p) if fields.seq == 1 && p != GENESIS => {
                            return problem(
                                ProblemKind::Edited,
                                &loc,
                                Some(1),
                                "the first record's prev is not the genesis value (64 zeros)"
                                    .into(),
                            )
                        }
                        _ => {}
                    }
                }
                Some(p) => {
                    let expected = p.loc.seq + 1;
                    if fields.seq > expected {
                        let across = if p.loc.file != loc.file {
                            format!(
                                " (between {} and {}: a file deleted?)",
                                p.loc.file, loc.file
                            )
                        } else {
                            String::new()
                        };
                        return problem(
                            ProblemKind::Missing,
                            &loc,
                            Some(expected),
                            format!(
                                "seq jumps from {} ({}) to {}: {} missing{across}",
                                p.loc.seq,
                                at(&p.loc),
                                fields.seq,
                                span(expected, fields.seq - 1)
                            ),
                        );
                    }
                    if fields.seq < expected {
                        return problem(
                            ProblemKind::Reordered,
                            &loc,
                            Some(fields.seq),
                            format!(
                                "seq {} follows seq {} ({}): records repeated or out of order",
                                fields.seq,
                                p.loc.seq,
                                at(&p.loc)
                            ),
                        );
                    }
                    match &fields.prev {
                        None if chained => {
                            return problem(
                                ProblemKind::Edited,
                                &loc,
                                Some(fields.seq),
                                "a record without prev (schema v1) after chained records".into(),
                            )
                        }
                        None => {}
                        Some(x) if *x == p.hash => {}
                        Some(_) => {
                            pending = Some(Break {
                                prev: p.loc.clone(),
                                cur: loc.clone(),
                                cur_hash: hash.clone(),
                            });
                        }
                    }
                }
            }
            if fields.prev.is_some() {
                chained = true;
            } else {
                report.unchained += 1;
            }
            if let Some(h) = head {
                if h.seq == fields.seq && h.hash != hash && pending.is_none() {
                    return problem(
                        ProblemKind::Edited,
                        &loc,
                        Some(fields.seq),
                        format!(
                            "the record does not hash to what {} recorded for seq {}: edited",
                            crate::store::HEAD,
                            h.seq
                        ),
                    );
                }
            }
            if fields.kind.as_deref() == Some("daemon")
                && fields.action.as_deref() == Some("damaged")
            {
                let reason = serde_json::from_slice::<serde_json::Value>(&line.bytes)
                    .ok()
                    .and_then(|v| v["reason"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                report.notes.push(format!(
                    "seq {} ({}): wardend found the store damaged when it started: {reason}",
                    fields.seq,
                    at(&loc)
                ));
            }
            if fields.kind.as_deref() == Some("daemon")
                && matches!(fields.action.as_deref(), Some("rotate" | "retention"))
            {
                let oldest = serde_json::from_slice::<serde_json::Value>(&line.bytes)
                    .ok()
                    .and_then(|v| v["details"]["oldest_seq"].as_u64());
                if let Some(oldest) = oldest {
                    retention = Some((fields.seq, oldest));
                }
            }
            report.records += 1;
            report.first_seq.get_or_insert(fields.seq);
            report.last_seq = Some(fields.seq);
            report.last_hash = Some(hash.clone());
            prev = Some(Prev { loc, hash });
        }
        if in_file == 0 && f.named_seq.is_some() {
            let loc = Loc {
                file: f.name.clone(),
                line: 1,
                seq: 0,
            };
            return problem(
                ProblemKind::Missing,
                &loc,
                f.named_seq,
                "a rotated file is empty: its records were deleted".into(),
            );
        }
    }
    if let Some(b) = pending.take() {
        return resolve(b, None, head);
    }
    // A store that starts mid-chain must be explained by retention.
    if let Some(first) = first.filter(|f| f.seq > 1) {
        match retention {
            None => {
                return problem(
                    ProblemKind::Missing,
                    &first,
                    Some(1),
                    format!(
                        "the store starts at seq {} and no daemon.rotate or daemon.retention record \
                         says older files were deleted: {} missing",
                        first.seq,
                        span(1, first.seq - 1)
                    ),
                )
            }
            Some((rseq, oldest)) if first.seq > oldest => {
                return problem(
                    ProblemKind::Missing,
                    &first,
                    Some(oldest),
                    format!(
                        "the store starts at seq {}, but retention (record seq {rseq}) kept records from seq {oldest}: \
                         {} deleted outside retention",
                        first.seq,
                        span(oldest, first.seq - 1).replace(" are", " were").replace(" is", " was")
                    ),
                )
            }
            Some((rseq, oldest)) => report.notes.push(format!(
                "records before seq {} were deleted by retention (record seq {rseq} kept seq {oldest} on)",
                first.seq
            )),
        }
    }
    if let Some(h) = head {
        let last = report.last_seq.unwrap_or(0);
        if h.seq > last {
            let loc = match &prev {
                Some(p) => Loc {
                    file: p.loc.file.clone(),
                    line: p.loc.line + 1,
                    seq: last + 1,
                },
                None => Loc {
                    file: crate::store::LIVE.into(),
                    line: 1,
                    seq: 1,
                },
            };
            return problem(
                ProblemKind::Truncated,
                &loc,
                Some(last + 1),
                format!(
                    "{} says seq {} was on disk, but the store ends at seq {last}: {} missing (cut short)",
                    crate::store::HEAD,
                    h.seq,
                    span(last + 1, h.seq)
                ),
            );
        }
    }
    if report.unchained > 0 {
        report.notes.push(format!(
            "{} schema v1 records (before the chain started) are covered by seq only",
            report.unchained
        ));
    }
    None
}

/// Decides which record of a chain break changed: if the record after the
/// break chains onto the breaking record (or the head confirms it), the
/// breaking record is intact and the one before it was edited; otherwise the
/// breaking record itself was.
fn resolve(b: Break, next: Option<(&Fields, &String)>, head: Option<&Head>) -> Option<Problem> {
    let cur_intact = match next {
        Some((f, _)) => f.prev.as_deref() == Some(b.cur_hash.as_str()),
        None => match head.filter(|h| h.seq == b.cur.seq) {
            Some(h) => h.hash == b.cur_hash,
            // Nothing after it to tell: more often a record is edited than
            // its successor's prev field alone.
            None => true,
        },
    };
    if cur_intact {
        problem(
            ProblemKind::Edited,
            &b.prev,
            Some(b.prev.seq),
            format!(
                "the record's bytes changed: its hash no longer matches the prev stored in seq {} ({})",
                b.cur.seq,
                at(&b.cur)
            ),
        )
    } else {
        problem(
            ProblemKind::Edited,
            &b.cur,
            Some(b.cur.seq),
            format!(
                "the record changed: its prev does not match the hash of seq {} ({}), and the next record does not chain onto it",
                b.prev.seq,
                at(&b.prev)
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{rotated_name, snapshot, Head, HEAD, LIVE};
    use crate::{to_line, Decision, Record, RecordType};
    use std::fs;
    use std::path::Path;

    /// Writes a chain of `n` records starting at `first` (prev of the first:
    /// `prev0`), split into files at the given seqs; returns the lines.
    fn chain(first: u64, n: u64, prev0: &str) -> Vec<Vec<u8>> {
        let mut prev = prev0.to_string();
        (first..first + n)
            .map(|seq| {
                let mut r = Record::new(
                    RecordType::Session,
                    "start",
                    Some("abc"),
                    format!("/bin/x{seq}"),
                    Decision::Allow,
                    "",
                );
                r.ts = "2026-01-01T00:00:00.000Z".into();
                r.seq = seq;
                r.prev = prev.clone();
                let line = to_line(&r);
                prev = line_hash(&line);
                line
            })
            .collect()
    }

    fn write(dir: &Path, name: &str, lines: &[Vec<u8>]) {
        let mut text = Vec::new();
        for l in lines {
            text.extend_from_slice(l);
            text.push(b'\n');
        }
        fs::write(dir.join(name), text).unwrap();
    }

    fn check(dir: &Path) -> Report {
        verify(&snapshot(dir).unwrap())
    }

    fn bad(dir: &Path) -> Problem {
        let r = check(dir);
        assert!(!r.ok, "{r:?}");
        r.problem.unwrap()
    }

    #[test]
    fn intact_store_with_rotation_passes() {
        let t = tempfile::tempdir().unwrap();
        let lines = chain(1, 10, GENESIS);
        write(t.path(), &rotated_name(1), &lines[..4]);
        write(t.path(), &rotated_name(5), &lines[4..7]);
        write(t.path(), LIVE, &lines[7..]);
        let r = check(t.path());
        assert!(r.ok, "{r:?}");
        assert_eq!(
            (r.records, r.first_seq, r.last_seq),
            (10, Some(1), Some(10))
        );
        assert_eq!(r.last_hash.unwrap(), line_hash(&lines[9]));
    }

    #[test]
    fn a_changed_byte_names_the_edited_record() {
        let t = tempfile::tempdir().unwrap();
        let mut lines = chain(1, 6, GENESIS);
        let pos = lines[2].len() - 10;
        lines[2][pos] ^= 1;
        write(t.path(), LIVE, &lines);
        let p = bad(t.path());
        assert_eq!(
            (p.kind, p.file.as_str(), p.line, p.seq),
            (ProblemKind::Edited, LIVE, 3, Some(3)),
            "{p:?}"
        );
    }

    #[test]
    fn an_edited_prev_field_names_that_record() {
        let t = tempfile::tempdir().unwrap();
        let mut lines = chain(1, 6, GENESIS);
        let s = String::from_utf8(lines[3].clone()).unwrap();
        let p = s.find("\"prev\":\"").unwrap() + 8;
        lines[3][p] = if lines[3][p] == b'a' { b'b' } else { b'a' };
        write(t.path(), LIVE, &lines);
        let p = bad(t.path());
        assert_eq!(
            (p.kind, p.line, p.seq),
            (ProblemKind::Edited, 4, Some(4)),
            "{p:?}"
        );
    }

    #[test]
    fn an_edited_last_record_is_caught_by_the_head() {
        let t = tempfile::tempdir().unwrap();
        let mut lines = chain(1, 3, GENESIS);
        let head = Head {
            seq: 3,
            hash: line_hash(&lines[2]),
        };
        fs::write(t.path().join(HEAD), serde_json::to_vec(&head).unwrap()).unwrap();
        write(t.path(), LIVE, &lines);
        assert!(check(t.path()).ok);
        let n = lines[2].len() - 5;
        lines[2][n] ^= 1;
        write(t.path(), LIVE, &lines);
        let p = bad(t.path());
        assert_eq!(
            (p.kind, p.line, p.seq),
            (ProblemKind::Edited, 3, Some(3)),
            "{p:?}"
        );
    }

    #[test]
    fn a_deleted_line_is_missing() {
        let t = tempfile::tempdir().unwrap();
        let mut lines = chain(1, 6, GENESIS);
        lines.remove(3);
        write(t.path(), LIVE, &lines);
        let p = bad(t.path());
        assert_eq!(
            (p.kind, p.line, p.seq),
            (ProblemKind::Missing, 4, Some(4)),
            "{p:?}"
        );
    }

    #[test]
    fn a_deleted_first_line_is_missing() {
        let t = tempfile::tempdir().unwrap();
        let lines = chain(1, 6, GENESIS);
        write(t.path(), LIVE, &lines[1..]);
        let p = bad(t.path());
        assert_eq!(
            (p.kind, p.line, p.seq),
            (ProblemKind::Missing, 1, Some(1)),
            "{p:?}"
        );
    }

    #[test]
    fn a_deleted_middle_file_is_missing() {
        let t = tempfile::tempdir().unwrap();
        let lines = chain(1, 10, GENESIS);
        write(t.path(), &rotated_name(1), &lines[..4]);
        write(t.path(), LIVE, &lines[7..]);
        let p = bad(t.path());
        assert_eq!(
            (p.kind, p.file.as_str(), p.line, p.seq),
            (ProblemKind::Missing, LIVE, 1, Some(5)),
            "{p:?}"
        );
        assert!(p.message.contains("a file deleted?"), "{}", p.message);
    }

    #[test]
    fn truncation_is_torn_or_truncated() {
        let t = tempfile::tempdir().unwrap();
        let lines = chain(1, 5, GENESIS);
        write(t.path(), LIVE, &lines);
        let path = t.path().join(LIVE);
        let len = fs::metadata(&path).unwrap().len();
        let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 20).unwrap();
        let p = bad(t.path());
        assert_eq!(
            (p.kind, p.line, p.seq),
            (ProblemKind::Torn, 5, Some(5)),
            "{p:?}"
        );
        // With a head naming seq 5, it is known to have been complete.
        let head = Head {
            seq: 5,
            hash: line_hash(&lines[4]),
        };
        fs::write(t.path().join(HEAD), serde_json::to_vec(&head).unwrap()).unwrap();
        let p = bad(t.path());
        assert_eq!((p.kind, p.seq), (ProblemKind::Truncated, Some(5)), "{p:?}");
        // Cut at a line boundary: only the head tells.
        write(t.path(), LIVE, &lines[..3]);
        let p = bad(t.path());
        assert_eq!(
            (p.kind, p.line, p.seq),
            (ProblemKind::Truncated, 4, Some(4)),
            "{p:?}"
        );
    }

    #[test]
    fn retention_explains_a_mid_chain_start_and_nothing_else() {
        let t = tempfile::tempdir().unwrap();
        // Records 1..4 deleted by retention; record 8 says it kept seq 5 on.
        let mut lines = chain(1, 7, GENESIS);
        let mut r = Record::new(
            RecordType::Daemon,
            "rotate",
            None,
            rotated_name(5),
            Decision::Info,
            "",
        )
        .with_details(serde_json::json!({"oldest_seq": 5}));
        r.ts = "2026-01-01T00:00:00.000Z".into();
        r.seq = 8;
        r.prev = line_hash(&lines[6]);
        lines.push(to_line(&r));
        lines.extend(chain(9, 2, &line_hash(&lines[7])));
        write(t.path(), &rotated_name(5), &lines[4..7]);
        write(t.path(), LIVE, &lines[7..]);
        let r = check(t.path());
        assert!(r.ok, "{r:?}");
        // Deleting the oldest remaining file is not retention.
        fs::remove_file(t.path().join(rotated_name(5))).unwrap();
        let p = bad(t.path());
        assert_eq!(
            (p.kind, p.file.as_str(), p.seq),
            (ProblemKind::Missing, LIVE, Some(5)),
            "{p:?}"
        );
        // Without any retention record, a mid-chain start fails.
        let t2 = tempfile::tempdir().unwrap();
        write(t2.path(), LIVE, &chain(1, 5, GENESIS)[2..]);
        assert_eq!(bad(t2.path()).kind, ProblemKind::Missing);
    }

    #[test]
    fn v1_records_before_the_chain_are_accepted() {
        let t = tempfile::tempdir().unwrap();
        let v1 = br#"{"v":1,"ts":"2026-01-01T00:00:00.000Z","seq":1,"type":"daemon","action":"start","resource":"s","decision":"info","reason":""}"#.to_vec();
        let mut lines = vec![v1.clone()];
        lines.extend(chain(2, 3, &line_hash(&v1)));
        write(t.path(), LIVE, &lines);
        let r = check(t.path());
        assert!(r.ok, "{r:?}");
        assert_eq!(r.unchained, 1);
        // ...but not after it.
        lines.push(
            br#"{"v":1,"ts":"2026-01-01T00:00:00.000Z","seq":5,"type":"daemon","action":"start","resource":"s","decision":"info","reason":""}"#.to_vec(),
        );
        write(t.path(), LIVE, &lines);
        let p = bad(t.path());
        assert_eq!((p.kind, p.seq), (ProblemKind::Edited, Some(5)));
    }

    #[test]
    fn garbage_and_reordering() {
        let t = tempfile::tempdir().unwrap();
        let mut lines = chain(1, 5, GENESIS);
        lines.insert(2, b"hello".to_vec());
        write(t.path(), LIVE, &lines);
        let p = bad(t.path());
        assert_eq!((p.kind, p.line), (ProblemKind::Edited, 3), "{p:?}");
        let mut lines = chain(1, 5, GENESIS);
        lines.swap(2, 3);
        write(t.path(), LIVE, &lines);
        let p = bad(t.path());
        assert_eq!((p.kind, p.line), (ProblemKind::Missing, 3), "{p:?}");
    }
}
