//! The desktop channel of approvals (docs/approvals.md, "Desktop
//! notifications"): every pending approval is shown as a notification with
//! action buttons through the freedesktop Notifications D-Bus API on the
//! user's session bus, and a click answers it.
//!
//! # Flow
//!
//! [`Desktop::start`] connects in the background to the bus named by
//! `DBUS_SESSION_BUS_ADDRESS` (read once by the daemon at start): no bus, or
//! one that fails, only means no desktop channel, and never delays the
//! daemon. Connected, one task watches the broker and the bus:
//!
//! - `Raised`: `Notify` (summary, body, the actions `once`, `session` and
//!   `deny`, urgency critical, expiring with the approval); the notification
//!   is remembered with the unique bus name of the server that answered the
//!   call.
//! - `ActionInvoked(id, key)` from that same unique name: the approval is
//!   answered through [`Channel::Desktop`] (the first answer wins; a late one
//!   is logged). `NotificationClosed` without an action is no answer: the
//!   approval stays pending and its timeout denies it.
//! - `Resolved` (answered anywhere, or expired): `CloseNotification`, so it is
//!   withdrawn from the desktop.
//! - `NameOwnerChanged` of `org.freedesktop.Notifications`: a server came,
//!   went or was replaced; what an earlier one showed is withdrawn and the
//!   pending approvals are shown by the one there now.
//! - The daemon's stop ([`Desktop::close_all`]): everything still shown is
//!   withdrawn.
//!
//! # Invariants
//!
//! - Only the notification server that showed a notification answers through
//!   it: a signal's sender is set by the bus daemon and unique names are never
//!   reused, so a bus client emitting a forged `ActionInvoked` answers
//!   nothing.
//! - The desktop never offers `always`: that answer edits the policy file,
//!   which a click on a notification (whose text a server chose, and which
//!   can be hit by accident) should not do. It stays with `wardenctl
//!   approve` and the terminal prompt, which show the file.
//! - [`Broker::set_desktop`] is true only while a notification server is
//!   there to show the question (owning `org.freedesktop.Notifications`, or
//!   activatable), so `approval.request` lists `desktop` only when it was
//!   offered.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{broadcast, mpsc, oneshot};
use zbus::message::Type as MessageType;
use zbus::zvariant::Value;
use zbus::{Connection, MatchRule, Message, MessageStream};

use crate::approvals::{Broker, Channel, Event, Kind, Scope, View};

/// The variable naming the session bus (read once, at the daemon's start).
pub const BUS_ENV: &str = "DBUS_SESSION_BUS_ADDRESS";
/// The well-known name, path and interface of the notification server.
pub const NOTIFICATIONS: &str = "org.freedesktop.Notifications";
const PATH: &str = "/org/freedesktop/Notifications";
/// The actions shown (key, label) pairs, flattened as the API wants them.
pub const ACTIONS: [&str; 6] = [
    "once",
    "Allow once",
    "session",
    "Allow for session",
    "deny",
    "Deny",
];
/// Who answered, in `approval.answer` records.
pub const BY: &str = "desktop notification";
/// Connecting and authenticating to the bus.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// One method call to the bus or the notification server.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the daemon's stop waits to withdraw what is still shown.
const CLOSE_ALL_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest resource shown (a server chooses it; the rest is elided).
const MAX_SHOWN: usize = 200;
/// `urgency` hint: critical.
const URGENCY_CRITICAL: u8 = 2;

/// Why there is no desktop channel (logged, never fatal).
#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    #[error("cannot connect to the session bus at {address}: {source}")]
    Connect {
        address: String,
        #[source]
        source: zbus::Error,
    },
    #[error("the session bus at {0} did not answer within 10s")]
    ConnectTimeout(String),
    #[error("cannot watch the session bus: {0}")]
    Watch(#[source] zbus::Error),
}

/// The desktop channel of one daemon; a handle to its task.
#[derive(Debug, Clone)]
pub struct Desktop {
    /// Asks the task to withdraw every notification and stop.
    stop: Option<mpsc::Sender<oneshot::Sender<()>>>,
}

impl Desktop {
    /// Starts the desktop channel in the background when `address` (the
    /// value of [`BUS_ENV`]) is given; returns at once.
    pub fn start(broker: Arc<Broker>, address: Option<String>) -> Desktop {
        let Some(address) = address.filter(|a| !a.is_empty()) else {
            tracing::info!("no desktop notifications: {BUS_ENV} is not set");
            return Desktop { stop: None };
        };
        let (tx, rx) = mpsc::channel(1);
        // Subscribed now, so approvals raised while it connects are seen too.
        let events = broker.subscribe();
        tokio::spawn(async move {
            match connect(&address).await {
                Ok((conn, streams)) => {
                    tracing::info!(%address, "desktop notifications: connected to the session bus");
                    let mut n = Notifier {
                        broker: broker.clone(),
                        conn,
                        shown: HashMap::new(),
                        offered: None,
                    };
                    n.serve(events, streams, rx).await;
                    broker.set_desktop(false);
                }
                Err(e) => tracing::info!("no desktop notifications: {e}"),
            }
        });
        Desktop { stop: Some(tx) }
    }

    /// Withdraws every notification still shown (the daemon stops; its
    /// approvals were denied) and ends the channel.
    pub async fn close_all(&self) {
        let Some(stop) = &self.stop else { return };
        let (tx, rx) = oneshot::channel();
        if stop.send(tx).await.is_ok() {
            let _ = tokio::time::timeout(CLOSE_ALL_TIMEOUT, rx).await;
        }
    }
}

/// The signals watched: the notification server's, and the owner changes of
/// its name.
struct Streams {
    notifications: MessageStream,
    owners: MessageStream,
}

async fn connect(address: &str) -> Result<(Connection, Streams), DesktopError> {
    let failed = |source| DesktopError::Connect {
        address: address.to_owned(),
        source,
    };
    let build = zbus::connection::Builder::address(address)
        .map_err(failed)?
        .method_timeout(CALL_TIMEOUT)
        .build();
    let conn = tokio::time::timeout(CONNECT_TIMEOUT, build)
        .await
        .map_err(|_| DesktopError::ConnectTimeout(address.to_owned()))?
        .map_err(failed)?;
    // Every such signal, whoever sent it: the sender is checked per
    // notification (Notifier::on_signal), not left to the match rule.
    let rule = MatchRule::builder()
        .msg_type(MessageType::Signal)
        .interface(NOTIFICATIONS)
        .and_then(|b| b.path(PATH))
        .map_err(DesktopError::Watch)?
        .build();
    let notifications = MessageStream::for_match_rule(rule, &conn, Some(64))
        .await
        .map_err(DesktopError::Watch)?;
    let rule = MatchRule::builder()
        .msg_type(MessageType::Signal)
        .sender("org.freedesktop.DBus")
        .and_then(|b| b.interface("org.freedesktop.DBus"))
        .and_then(|b| b.member("NameOwnerChanged"))
        .and_then(|b| b.arg(0, NOTIFICATIONS))
        .map_err(DesktopError::Watch)?
        .build();
    let owners = MessageStream::for_match_rule(rule, &conn, Some(16))
        .await
        .map_err(DesktopError::Watch)?;
    Ok((
        conn,
        Streams {
            notifications,
            owners,
        },
    ))
}

/// A notification shown: by which server (its unique bus name), under
/// which id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Note {
    server: String,
    id: u32,
}

struct Notifier {
    broker: Arc<Broker>,
    conn: Connection,
    /// Approval id → its notification.
    shown: HashMap<String, Note>,
    /// What [`Notifier::update_offered`] found last.
    offered: Option<bool>,
}

impl Notifier {
    /// One task, in order: a notification's id is known before any signal
    /// about it is read (the reply to `Notify` comes before the server's
    /// signals on the one connection, and calls are awaited here).
    async fn serve(
        &mut self,
        mut events: broadcast::Receiver<Event>,
        mut streams: Streams,
        mut stop: mpsc::Receiver<oneshot::Sender<()>>,
    ) {
        self.update_offered().await;
        self.resync().await;
        loop {
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok(Event::Raised(view)) => self.show(&view).await,
                    Ok(Event::Resolved { id, .. }) => self.withdraw(&id).await,
                    Err(broadcast::error::RecvError::Lagged(_)) => self.resync().await,
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                msg = streams.notifications.next() => match msg {
                    Some(Ok(msg)) => self.on_signal(&msg),
                    Some(Err(e)) => tracing::debug!(error = %e, "unreadable notification signal"),
                    None => {
                        tracing::warn!("the session bus connection closed: no desktop notifications from now on");
                        break;
                    }
                },
                msg = streams.owners.next() => match msg {
                    Some(_) => self.server_changed().await,
                    None => break,
                },
                done = stop.recv() => {
                    let ids: Vec<String> = self.shown.keys().cloned().collect();
                    for id in ids {
                        self.withdraw(&id).await;
                    }
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                    break;
                }
            }
        }
    }

    /// Sets the broker's `desktop` flag: a notification server owns the name,
    /// or the bus can start one. Returns the owner's unique name.
    async fn update_offered(&mut self) -> Option<String> {
        let (owner, offered) = match zbus::fdo::DBusProxy::new(&self.conn).await {
            Ok(dbus) => {
                let owner = match NOTIFICATIONS.try_into() {
                    Ok(name) => dbus.get_name_owner(name).await.ok().map(|o| o.to_string()),
                    Err(_) => None,
                };
                let activatable = owner.is_none()
                    && dbus
                        .list_activatable_names()
                        .await
                        .is_ok_and(|names| names.iter().any(|n| n.as_str() == NOTIFICATIONS));
                let offered = owner.is_some() || activatable;
                (owner, offered)
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot ask the session bus about {NOTIFICATIONS}");
                (None, false)
            }
        };
        self.broker.set_desktop(offered);
        if self.offered != Some(offered) {
            self.offered = Some(offered);
            if offered {
                tracing::info!("desktop notifications: on ({NOTIFICATIONS} is on the session bus)");
            } else {
                tracing::info!(
                    "desktop notifications: off until a notification server ({NOTIFICATIONS}) is on the session bus"
                );
            }
        }
        owner
    }

    /// The notification server changed: what the previous one showed is
    /// withdrawn from it, and the pending approvals are shown again.
    async fn server_changed(&mut self) {
        let owner = self.update_offered().await;
        let stale: Vec<String> = self
            .shown
            .iter()
            .filter(|(_, n)| owner.as_deref() != Some(n.server.as_str()))
            .map(|(a, _)| a.clone())
            .collect();
        for a in stale {
            self.withdraw(&a).await;
        }
        self.resync().await;
    }

    /// Brings what is shown in line with what is pending (at start, and when
    /// events were missed).
    async fn resync(&mut self) {
        let pending = self.broker.list(None);
        let gone: Vec<String> = self
            .shown
            .keys()
            .filter(|id| !pending.iter().any(|v| &v.id == *id))
            .cloned()
            .collect();
        for id in gone {
            self.withdraw(&id).await;
        }
        for view in pending {
            self.show(&view).await;
        }
    }

    async fn show(&mut self, view: &View) {
        if self.offered != Some(true) || self.shown.contains_key(&view.id) {
            return;
        }
        match self.notify(view).await {
            Ok(note) => {
                tracing::debug!(approval = %view.id, server = %note.server, id = note.id, "shown on the desktop");
                self.shown.insert(view.id.clone(), note);
            }
            Err(e) => {
                tracing::warn!(approval = %view.id, error = %e, "cannot show the desktop notification")
            }
        }
    }

    async fn notify(&self, view: &View) -> zbus::Result<Note> {
        let (summary, body) = texts(view);
        let mut hints: HashMap<&str, Value<'_>> = HashMap::new();
        hints.insert("urgency", Value::U8(URGENCY_CRITICAL));
        let expire_ms = i32::try_from(view.remaining.as_millis())
            .unwrap_or(i32::MAX)
            .max(1);
        let reply: Message = self
            .conn
            .call_method(
                Some(NOTIFICATIONS),
                PATH,
                Some(NOTIFICATIONS),
                "Notify",
                &(
                    "Warden",
                    0u32,
                    "",
                    summary.as_str(),
                    body.as_str(),
                    &ACTIONS[..],
                    hints,
                    expire_ms,
                ),
            )
            .await?;
        let id: u32 = reply.body().deserialize()?;
        // The bus daemon sets the sender: the unique name of the server that
        // owned the name and showed it.
        let server = reply
            .header()
            .sender()
            .map(|s| s.to_string())
            .ok_or_else(|| zbus::Error::Failure("a Notify reply without a sender".into()))?;
        Ok(Note { server, id })
    }

    /// Withdraws the notification of `approval`, if it is shown.
    async fn withdraw(&mut self, approval: &str) {
        let Some(note) = self.shown.remove(approval) else {
            return;
        };
        // To the server that showed it (a successor under the well-known
        // name has other ids).
        let r = self
            .conn
            .call_method(
                Some(note.server.as_str()),
                PATH,
                Some(NOTIFICATIONS),
                "CloseNotification",
                &(note.id,),
            )
            .await;
        if let Err(e) = r {
            tracing::debug!(approval, id = note.id, error = %e, "cannot withdraw the desktop notification");
        }
    }

    fn on_signal(&mut self, msg: &Message) {
        let header = msg.header();
        let (Some(member), Some(sender)) = (header.member(), header.sender()) else {
            return;
        };
        let sender = sender.as_str();
        let member = member.as_str();
        let id = match member {
            "ActionInvoked" => match msg.body().deserialize::<(u32, String)>() {
                Ok((id, key)) => Some((id, Some(key))),
                Err(_) => None,
            },
            "NotificationClosed" => match msg.body().deserialize::<(u32, u32)>() {
                Ok((id, _reason)) => Some((id, None)),
                Err(_) => None,
            },
            _ => None,
        };
        let Some((id, key)) = id else { return };
        let found = self
            .shown
            .iter()
            .find(|(_, n)| n.id == id && n.server == sender)
            .map(|(a, _)| a.clone());
        let Some(approval) = found else {
            // Another application's notification, unless the id is one of
            // ours and someone else claims to have clicked it.
            if self.shown.values().any(|n| n.id == id) {
                tracing::warn!(
                    sender,
                    id,
                    signal = member,
                    "ignored a desktop answer from a bus client that is not the notification server"
                );
            }
            return;
        };
        let Some(key) = key else {
            // Dismissed or expired on the desktop: no answer, still pending.
            self.shown.remove(&approval);
            tracing::info!(%approval, "desktop notification closed without an answer: still pending");
            return;
        };
        let Some(scope) = scope_of(&key) else {
            tracing::debug!(%approval, key, "desktop action that is no answer");
            return;
        };
        // The server closes a notification whose action was invoked.
        self.shown.remove(&approval);
        let broker = self.broker.clone();
        tokio::spawn(async move {
            match broker.answer(&approval, scope, Channel::Desktop, BY).await {
                Ok(done) => tracing::info!(%approval, "answered on the desktop: {}", done.message),
                Err(e) => tracing::info!(%approval, "the desktop answer was not applied: {e}"),
            }
        });
    }
}

/// The answer an action key stands for (never `always`, see the module doc).
fn scope_of(key: &str) -> Option<Scope> {
    match key {
        "once" => Some(Scope::Once),
        "session" => Some(Scope::Session),
        "deny" => Some(Scope::Deny),
        _ => None,
    }
}

/// The summary and body of `view`'s notification.
fn texts(view: &View) -> (String, String) {
    let who = match &view.server {
        Some(s) => shown(s),
        None => format!("session {}", view.session),
    };
    // The tool call the access was made during (its name is the server's).
    let who = match view.via.shown() {
        Some(via) if view.request.kind != Kind::Tool => format!("{who} ({})", shown(&via)),
        _ => who,
    };
    let resource = shown(&view.request.resource);
    let summary = match view.request.kind {
        Kind::Network => format!("{who} wants {resource}"),
        Kind::File => format!(
            "{who} wants to {} {resource}",
            shown(&view.request.operation)
        ),
        Kind::Tool => format!(
            "{who} offers the {} tool {resource}",
            shown(&view.request.operation)
        ),
    };

    let secs = view.remaining.as_secs();
    let body = format!(
        "session {}, approval {}\ndenied in {secs}s unless answered (or: wardenctl approve {})",
        view.session, view.id, view.id
    );
    // Servers that support markup would read the body as markup.
    (summary, escape_markup(&body))
}

/// `s` as shown to a person: control and invisible (format) characters
/// escaped (a server chooses hosts and paths, and must not break or reorder
/// the lines), and at most [`MAX_SHOWN`] characters.
fn shown(s: &str) -> String {
    warden_core::shown::shown(s, MAX_SHOWN)
}

fn escape_markup(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvals::Request;

    fn view(kind: Kind, resource: &str, operation: &str) -> View {
        View {
            id: "ap-1".into(),
            session: "s1".into(),
            server: Some("fetch".into()),
            request: Request {
                kind,
                resource: resource.into(),
                operation: operation.into(),
            },
            protocol: None,
            age: Duration::ZERO,
            remaining: Duration::from_secs(60),
            policy_path: None,
            via: Default::default(),
        }
    }

    #[test]
    fn summaries_name_the_server_and_the_resource() {
        let (s, b) = texts(&view(Kind::Network, "api.example.com:443", "connect"));
        assert_eq!(s, "fetch wants api.example.com:443");
        assert_eq!(
            b,
            "session s1, approval ap-1\ndenied in 60s unless answered (or: wardenctl approve ap-1)"
        );
        let (s, _) = texts(&view(Kind::File, "/home/u/notes.txt", "read"));
        assert_eq!(s, "fetch wants to read /home/u/notes.txt");
        let mut v = view(Kind::File, "/a", "list");
        v.server = None;
        assert_eq!(texts(&v).0, "session s1 wants to list /a");
        // The tool call it was made during, escaped like the rest.
        let mut v = view(Kind::Network, "api.example.com:443", "connect");
        v.via = warden_audit::event::CallRef::of(&[("7".into(), "fetch\u{202e}url".into())]);
        assert_eq!(
            texts(&v).0,
            "fetch (tool `fetch\\u{202e}url`) wants api.example.com:443"
        );
    }

    #[test]
    fn what_a_server_chose_cannot_break_or_reorder_the_text() {
        let (s, _) = texts(&view(
            Kind::File,
            "/tmp/x\n\nAllow: safe\u{202e}txt.exe\u{2028}\u{200b}",
            "read",
        ));
        assert!(!s.contains('\n') && !s.contains('\u{202e}'), "{s}");
        assert!(s.contains("\\u{a}") && s.contains("\\u{202e}"), "{s}");
        assert!(s.contains("\\u{2028}") && s.contains("\\u{200b}"), "{s}");
        let long = format!("/{}", "a".repeat(1000));
        let (s, _) = texts(&view(Kind::File, &long, "read"));
        assert!(s.chars().count() < 260 && s.contains('…'), "{s}");
        assert_eq!(escape_markup("a<b>&c"), "a&lt;b&gt;&amp;c");
    }

    #[test]
    fn the_desktop_never_answers_always() {
        assert_eq!(scope_of("once"), Some(Scope::Once));
        assert_eq!(scope_of("session"), Some(Scope::Session));
        assert_eq!(scope_of("deny"), Some(Scope::Deny));
        assert_eq!(scope_of("always"), None);
        assert_eq!(scope_of("default"), None);
        assert!(!ACTIONS.contains(&"always"));
    }
}
