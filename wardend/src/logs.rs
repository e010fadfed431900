//! The `Logs` stream (`wardenctl logs -f`): the stored records from a seq on,
//! then every new one as it is written, each exactly once and in `seq` order.
//!
//! No gap, no duplicate: the stream subscribes to new records *before* it
//! reads the files, sends what the files hold, and then drops live records
//! it already sent (by seq). A follower too slow for the live buffer (it
//! "lagged") fills the hole from the files, which hold every record before
//! it is published.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::mpsc;
use tonic::Status;
use warden_audit::filter::Filter;
use warden_audit::store;
use warden_audit::Record;
use warden_proto::v1 as pb;

use crate::error::DaemonError;
use crate::Daemon;

type Tx = mpsc::Sender<Result<pb::LogRecord, Status>>;

/// The request's filters.
pub fn filter(req: &pb::LogsRequest) -> Result<Filter, DaemonError> {
    let bad = |e: warden_audit::filter::FilterError| DaemonError::BadRequest(e.to_string());
    let mut f = Filter::default();
    if !req.session.is_empty() {
        f.session = Some(req.session.clone());
    }
    if !req.r#type.is_empty() {
        f.set_type(&req.r#type).map_err(bad)?;
    }
    if !req.decision.is_empty() {
        f.set_decision(&req.decision).map_err(bad)?;
    }
    f.tool = (!req.tool.is_empty()).then(|| req.tool.clone());
    f.call = (!req.call.is_empty()).then(|| req.call.clone());
    f.since_ms = (req.since_ms != 0).then_some(req.since_ms);
    f.until_ms = (req.until_ms != 0).then_some(req.until_ms);
    if req.follow && f.until_ms.is_some() {
        return Err(DaemonError::BadRequest(
            "a followed stream has no end: until cannot be combined with follow".into(),
        ));
    }
    Ok(f)
}

/// Starts the stream; records arrive on the returned channel.
pub fn stream(
    daemon: Arc<Daemon>,
    req: pb::LogsRequest,
) -> Result<mpsc::Receiver<Result<pb::LogRecord, Status>>, DaemonError> {
    let filter = Arc::new(filter(&req)?);
    // Subscribed before the files are read: nothing written from here on
    // can fall between the files and the live records.
    let mut live = daemon.audit.subscribe();
    let dir = daemon.audit.dir().to_path_buf();
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let mut next = req.from_seq.max(1);
        match replay(&dir, next, u64::MAX, &filter, &tx).await {
            Ok(n) => next = n,
            Err(s) => {
                let _ = tx.send(Err(s)).await;
                return;
            }
        }
        if !req.follow {
            return;
        }
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                _ = tick.tick() => {
                    // Once shutdown has ended every session (their exit
                    // records are written), send what is left and end.
                    if daemon.shutting_down.load(Ordering::SeqCst) && daemon.sessions.is_empty() {
                        loop {
                            match live.try_recv() {
                                Ok(l) => {
                                    if l.seq >= next {
                                        next = l.seq + 1;
                                        if send_live(&filter, &l, &tx).await.is_err() {
                                            return;
                                        }
                                    }
                                }
                                Err(TryRecvError::Lagged(_)) => continue,
                                Err(_) => break,
                            }
                        }
                        let _ = tx.send(Err(DaemonError::ShuttingDown.into())).await;
                        return;
                    }
                }
                r = live.recv() => match r {
                    Ok(l) => {
                        if l.seq < next {
                            continue; // already sent from the files
                        }
                        if l.seq > next {
                            // Lagged: the files hold what the buffer lost.
                            match replay(&dir, next, l.seq - 1, &filter, &tx).await {
                                Ok(_) => {}
                                Err(s) => {
                                    let _ = tx.send(Err(s)).await;
                                    return;
                                }
                            }
                        }
                        next = l.seq + 1;
                        if send_live(&filter, &l, &tx).await.is_err() {
                            return;
                        }
                    }
                    Err(RecvError::Lagged(n)) => {
                        tracing::debug!(missed = n, "logs follower lagged; catching up from the files");
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        }
    });
    Ok(rx)
}

async fn send_live(
    filter: &Filter,
    l: &warden_audit::writer::Live,
    tx: &Tx,
) -> Result<(), mpsc::error::SendError<Result<pb::LogRecord, Status>>> {
    if !filter.matches(&l.record) {
        return Ok(());
    }
    tx.send(Ok(pb::LogRecord {
        seq: l.seq,
        line: l.line.clone(),
    }))
    .await
}

/// Sends the stored records with `from <= seq <= upto` that match; returns
/// the seq after the last record read.
async fn replay(
    dir: &std::path::Path,
    from: u64,
    upto: u64,
    filter: &Arc<Filter>,
    tx: &Tx,
) -> Result<u64, Status> {
    let (dir, filter, tx) = (dir.to_path_buf(), filter.clone(), tx.clone());
    tokio::task::spawn_blocking(move || replay_blocking(dir, from, upto, &filter, &tx))
        .await
        .map_err(DaemonError::from)?
}

fn replay_blocking(
    dir: PathBuf,
    from: u64,
    upto: u64,
    filter: &Filter,
    tx: &Tx,
) -> Result<u64, Status> {
    let snap = store::snapshot(&dir).map_err(DaemonError::from)?;
    let mut next = from;
    for (i, f) in snap.files.iter().enumerate() {
        // Skip whole files that end before `from`.
        if let Some(following) = snap.files.get(i + 1).and_then(|g| g.named_seq) {
            if following <= from {
                continue;
            }
        }
        let lines = f.lines().map_err(DaemonError::AuditRead)?;
        for line in lines {
            let line = line.map_err(DaemonError::AuditRead)?;
            if !line.complete {
                break; // being written: it comes live
            }
            let rec: Record = match serde_json::from_slice(&line.bytes) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(file = %f.name, line = line.number, error = %e, "not an audit record (see wardenctl logs --verify)");
                    continue;
                }
            };
            if rec.seq < from {
                continue;
            }
            if rec.seq > upto {
                return Ok(next);
            }
            next = rec.seq + 1;
            if filter.matches(&rec) {
                let out = pb::LogRecord {
                    seq: rec.seq,
                    line: String::from_utf8_lossy(&line.bytes).into_owned(),
                };
                if tx.blocking_send(Ok(out)).is_err() {
                    return Ok(next);
                }
            }
        }
    }
    Ok(next)
}
