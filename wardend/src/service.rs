//! The gRPC service (`warden.v1.Warden`) and the peer-uid check in front of it.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use warden_audit::event::{DaemonPeer, SessionKill};
use warden_proto::v1 as pb;
use warden_proto::v1::warden_server::Warden;

use crate::conn::ConnInfo;
use crate::error::DaemonError;
use crate::session::EndCause;
use crate::Daemon;

/// Signals a client may forward to its server.
const FORWARDABLE: [i32; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

pub struct Service {
    pub daemon: Arc<Daemon>,
}

/// Every call: the peer's uid (SO_PEERCRED, taken at accept) must be the
/// daemon's own, and the peer must not be inside a sandbox (its user and pid
/// namespaces, judged at accept, see [`crate::peer`]). Others get
/// PermissionDenied; the uid refusal is audited here, the sandbox refusal
/// once per connection when it was accepted ([`audit_refused_peer`]).
pub fn check_peer(daemon: &Daemon, req: &Request<()>) -> Result<(), Status> {
    let Some(info) = req.extensions().get::<ConnInfo>() else {
        return Err(DaemonError::NoCredentials.into());
    };
    if info.uid == daemon.uid {
        if let Some(r) = &info.refused {
            return Err(DaemonError::PeerSandboxed(r.reason.clone()).into());
        }
        return Ok(());
    }
    daemon.record_peer(
        Some(DaemonPeer {
            resource: format!("uid {}", info.uid),
            reason: "peer uid is not the daemon's uid".into(),
            peer_uid: info.uid,
            peer_pid: info.pid,
            daemon_uid: daemon.uid,
            namespaces: None,
        }),
        false,
    );
    Err(DaemonError::PeerUid {
        peer: info.uid,
        daemon: daemon.uid,
    }
    .into())
}

/// The `daemon.peer` deny record of a connection refused at accept time.
pub fn audit_refused_peer(daemon: &Daemon, info: &ConnInfo, r: &crate::peer::Refusal) {
    let resource = match info.pid {
        Some(pid) => format!("pid {pid}"),
        None => format!("uid {}", info.uid),
    };
    daemon.record_peer(
        Some(DaemonPeer {
            resource,
            reason: r.reason.clone(),
            peer_uid: info.uid,
            peer_pid: r.peer_pid,
            daemon_uid: daemon.uid,
            namespaces: Some(r.namespaces.clone()),
        }),
        false,
    );
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::SpawnEvent, Status>> + Send>>;
type LogStream = Pin<Box<dyn Stream<Item = Result<pb::LogRecord, Status>> + Send>>;
type ApprovalStream = Pin<Box<dyn Stream<Item = Result<pb::ApprovalEvent, Status>> + Send>>;

/// Who is calling, for approval records: `uid 1000 pid 4242 (wardenctl)`.
fn caller(info: Option<&ConnInfo>) -> String {
    let Some(info) = info else {
        return "unknown peer".into();
    };
    match info.pid {
        Some(pid) => {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let comm: String = comm.trim().chars().filter(|c| !c.is_control()).collect();
            if comm.is_empty() {
                format!("uid {} pid {pid}", info.uid)
            } else {
                format!("uid {} pid {pid} ({comm})", info.uid)
            }
        }
        None => format!("uid {}", info.uid),
    }
}

fn pending_pb(v: crate::approvals::View) -> pb::PendingApproval {
    pb::PendingApproval {
        id: v.id,
        session: v.session,
        server: v.server.unwrap_or_default(),
        kind: v.request.kind.as_str().to_owned(),
        resource: v.request.resource,
        operation: v.request.operation,
        age_ms: v.age.as_millis() as u64,
        remaining_ms: v.remaining.as_millis() as u64,
        policy_path: v
            .policy_path
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        protocol: v.protocol.unwrap_or_default(),
        via: v.via.shown().unwrap_or_default(),
    }
}

#[tonic::async_trait]
impl Warden for Service {
    type SpawnStream = EventStream;
    type LogsStream = LogStream;
    type WatchApprovalsStream = ApprovalStream;

    async fn list_approvals(
        &self,
        req: Request<pb::ListApprovalsRequest>,
    ) -> Result<Response<pb::ListApprovalsResponse>, Status> {
        let req = req.into_inner();
        let session = (!req.session.is_empty()).then_some(req.session.as_str());
        let approvals = self
            .daemon
            .approvals
            .list(session)
            .into_iter()
            .map(pending_pb)
            .collect();
        Ok(Response::new(pb::ListApprovalsResponse { approvals }))
    }

    async fn answer_approval(
        &self,
        req: Request<pb::AnswerApprovalRequest>,
    ) -> Result<Response<pb::AnswerApprovalResponse>, Status> {
        use crate::approvals::{Channel, Scope};
        let by = caller(req.extensions().get::<ConnInfo>());
        let req = req.into_inner();
        let scope = Scope::parse(&req.scope).ok_or_else(|| {
            DaemonError::BadRequest(format!(
                "scope must be once, session, always or deny, got `{}`",
                req.scope.escape_debug()
            ))
        })?;
        // `desktop` answers come from the daemon's own notifications only.
        let channel = match Channel::parse(&req.channel) {
            Some(c @ (Channel::Cli | Channel::Terminal)) => c,
            _ => {
                return Err(DaemonError::BadRequest(format!(
                    "channel must be cli or terminal, got `{}`",
                    req.channel.escape_debug()
                ))
                .into())
            }
        };
        if req.id.is_empty() {
            return Err(DaemonError::BadRequest("empty approval id".into()).into());
        }
        let done = self
            .daemon
            .approvals
            .answer(&req.id, scope, channel, &by)
            .await
            .map_err(DaemonError::from)?;
        Ok(Response::new(pb::AnswerApprovalResponse {
            id: done.id,
            scope: done.scope.as_str().to_owned(),
            message: done.message,
        }))
    }

    async fn watch_approvals(
        &self,
        req: Request<pb::WatchApprovalsRequest>,
    ) -> Result<Response<Self::WatchApprovalsStream>, Status> {
        use crate::approvals::Event;
        let req = req.into_inner();
        let only = (!req.session.is_empty()).then_some(req.session);
        let broker = self.daemon.approvals.clone();
        // Subscribed before listing: nothing raised in between is missed (a
        // pending one may come twice; watchers key by id).
        let mut events = broker.subscribe();
        let existing = broker.list(only.as_deref());
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            for v in existing {
                let ev = pb::ApprovalEvent {
                    event: Some(pb::approval_event::Event::Raised(pending_pb(v))),
                };
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
            loop {
                let ev = tokio::select! {
                    _ = tx.closed() => return,
                    ev = events.recv() => ev,
                };
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        let _ = tx
                            .send(Err(Status::data_loss(format!(
                                "{n} approval events were missed; watch again"
                            ))))
                            .await;
                        return;
                    }
                    Err(_) => return,
                };
                let (session, out) = match ev {
                    Event::Raised(v) => (
                        v.session.clone(),
                        pb::approval_event::Event::Raised(pending_pb(v)),
                    ),
                    Event::Resolved {
                        id,
                        session,
                        outcome,
                        channel,
                    } => (
                        session,
                        pb::approval_event::Event::Resolved(pb::ApprovalResolved {
                            id,
                            outcome,
                            channel,
                        }),
                    ),
                };
                if only.as_ref().is_some_and(|s| *s != session) {
                    continue;
                }
                if tx
                    .send(Ok(pb::ApprovalEvent { event: Some(out) }))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn spawn(
        &self,
        req: Request<pb::SpawnRequest>,
    ) -> Result<Response<Self::SpawnStream>, Status> {
        let stdio = req
            .extensions()
            .get::<ConnInfo>()
            .and_then(|i| i.take_stdio());
        let req = req.into_inner();
        let Some(stdio) = stdio else {
            self.daemon
                .refuse(None, &req, &DaemonError::NoStdio.to_string());
            return Err(DaemonError::NoStdio.into());
        };
        // Off the event loop: compiling reads the filesystem, and choosing
        // Docker may ask the engine (a `docker version` that can take seconds).
        let daemon = self.daemon.clone();
        let prepared = tokio::task::spawn_blocking(move || daemon.prepare(&req))
            .await
            .map_err(DaemonError::Task)??;
        let (tx, rx) = mpsc::channel(4);
        self.daemon.start(prepared, stdio, tx).await?;
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn signal(
        &self,
        req: Request<pb::SignalRequest>,
    ) -> Result<Response<pb::SignalResponse>, Status> {
        let req = req.into_inner();
        if !FORWARDABLE.contains(&req.signal) {
            return Err(DaemonError::BadRequest(format!(
                "signal {} cannot be forwarded (allowed: INT, TERM, HUP, QUIT, USR1, USR2)",
                req.signal
            ))
            .into());
        }
        let session = self
            .daemon
            .sessions
            .get(&req.session_id)
            .map(|s| s.clone())
            .ok_or_else(|| DaemonError::NoSuchSession(req.session_id.clone()))?;
        session.signal(req.signal)?;
        Ok(Response::new(pb::SignalResponse {}))
    }

    async fn list_sessions(
        &self,
        _req: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        // Reading every session's /proc tree (memory, CPU) blocks briefly.
        let live: Vec<_> = self.daemon.sessions.iter().map(|s| s.clone()).collect();
        let mut sessions: Vec<pb::Session> =
            tokio::task::spawn_blocking(move || live.iter().map(|s| s.to_proto()).collect())
                .await
                .map_err(DaemonError::from)?;
        sessions.sort_by_key(|s| s.started_at_ms);
        let approvals = &self.daemon.approvals;
        for s in &mut sessions {
            s.approve = approvals.enabled(&s.id);
            s.approvals_pending = approvals.list(Some(&s.id)).len() as u32;
        }
        Ok(Response::new(pb::ListSessionsResponse { sessions }))
    }

    async fn kill(
        &self,
        req: Request<pb::KillRequest>,
    ) -> Result<Response<pb::KillResponse>, Status> {
        let req = req.into_inner();
        let session = self.daemon.find(&req.session_id)?;
        session.request_end(EndCause::Killed);
        self.daemon.audit.record(SessionKill {
            session: session.id.clone(),
            command: session.argv.join(" "),
        });
        Ok(Response::new(pb::KillResponse {
            session_id: session.id.clone(),
        }))
    }

    async fn status(
        &self,
        _req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let d = self.daemon.clone();
        // Asking the Docker engine may take a while: off the event loop.
        let backends = tokio::task::spawn_blocking({
            let d = d.clone();
            move || {
                crate::backend::listed(crate::backend::Os::this())
                    .into_iter()
                    .map(|b| {
                        let r = d.backend_available(b).and_then(|()| match b {
                            warden_core::policy::Backend::Docker => d
                                .docker
                                .available()
                                .map(|v| format!("Docker engine {v}: runs sessions here")),
                            _ => Ok("runs sessions here".into()),
                        });
                        pb::KernelFeature {
                            name: b.to_string(),
                            available: r.is_ok(),
                            detail: r.unwrap_or_else(|why| why),
                        }
                    })
                    .collect()
            }
        })
        .await
        .map_err(DaemonError::Task)?;
        Ok(Response::new(pb::StatusResponse {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            uid: d.uid,
            socket: d.config.socket.display().to_string(),
            state_dir: d.config.state_dir.display().to_string(),
            audit_path: d.audit.path().display().to_string(),
            sessions: d.sessions.len() as u32,
            uptime_ms: d.started.elapsed().as_millis() as u64,
            #[cfg(target_os = "linux")]
            features: d.native.features(),
            #[cfg(not(target_os = "linux"))]
            features: Vec::new(),
            backends,
        }))
    }

    async fn logs(
        &self,
        req: Request<pb::LogsRequest>,
    ) -> Result<Response<Self::LogsStream>, Status> {
        let rx = crate::logs::stream(self.daemon.clone(), req.into_inner())?;
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
