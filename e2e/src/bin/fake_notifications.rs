//! A desktop notification server for the tests of the desktop approval
//! channel (`e2e/tests/approvals_desktop.rs`): it owns
//! `org.freedesktop.Notifications` on a private bus and clicks what the test
//! tells it to.
//!
//! `warden-fake-notifications serve ADDRESS DIR`: serves `Notify`,
//! `CloseNotification`, `GetCapabilities` and `GetServerInformation` on the
//! bus at ADDRESS; writes `DIR/calls.json` (a JSON array of every call, by
//! rename, so a reader never sees half of it) and then `DIR/ready` once it
//! owns the name; reads commands appended to `DIR/control`, one a line:
//! `click ID KEY` (emits `ActionInvoked(ID, KEY)`, then
//! `NotificationClosed(ID, 2)`, as servers do) and `dismiss ID`
//! (`NotificationClosed(ID, 2)` without an action).
//!
//! `warden-fake-notifications forge ADDRESS ID KEY`: from a connection of
//! its own (not the server's), emits `ActionInvoked(ID, KEY)` as a broadcast
//! signal, the way any bus client can.
#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fixture: a failed step is a panic

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use zbus::message::Header;
use zbus::zvariant::OwnedValue;
use zbus::Connection;

const NAME: &str = "org.freedesktop.Notifications";
const PATH: &str = "/org/freedesktop/Notifications";
/// `NotificationClosed` reasons.
const DISMISSED: u32 = 2;
const CLOSED_BY_CALL: u32 = 3;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Default)]
struct State {
    calls: Vec<Value>,
    next_id: u32,
    open: HashSet<u32>,
}

#[derive(Clone)]
struct Server {
    state: Arc<Mutex<State>>,
    dir: PathBuf,
}

impl Server {
    fn record(&self, call: Value) {
        let mut st = self.state.lock().unwrap();
        st.calls.push(call);
        write_calls(&self.dir, &st.calls);
    }
}

fn write_calls(dir: &Path, calls: &[Value]) {
    let tmp = dir.join("calls.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(calls).unwrap()).unwrap();
    std::fs::rename(&tmp, dir.join("calls.json")).unwrap();
}

fn sender(h: &Header<'_>) -> String {
    h.sender().map(|s| s.to_string()).unwrap_or_default()
}

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl Server {
    #[allow(clippy::too_many_arguments)]
    async fn notify(
        &self,
        #[zbus(header)] h: Header<'_>,
        app_name: String,
        replaces_id: u32,
        app_icon: String,
        summary: String,
        body: String,
        actions: Vec<String>,
        hints: HashMap<String, OwnedValue>,
        expire_timeout: i32,
    ) -> u32 {
        let id = {
            let mut st = self.state.lock().unwrap();
            st.next_id += 1;
            let id = st.next_id;
            st.open.insert(id);
            id
        };
        let urgency = hints.get("urgency").and_then(|v| u8::try_from(v).ok());
        let mut hint_names: Vec<&String> = hints.keys().collect();
        hint_names.sort();
        self.record(json!({
            "call": "Notify",
            "sender": sender(&h),
            "id": id,
            "app_name": app_name,
            "replaces_id": replaces_id,
            "app_icon": app_icon,
            "summary": summary,
            "body": body,
            "actions": actions,
            "hints": hint_names,
            "urgency": urgency,
            "expire_timeout": expire_timeout,
        }));
        id
    }

    async fn close_notification(
        &self,
        #[zbus(header)] h: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        id: u32,
    ) {
        let was_open = self.state.lock().unwrap().open.remove(&id);
        self.record(json!({
            "call": "CloseNotification",
            "sender": sender(&h),
            "id": id,
            "was_open": was_open,
        }));
        if was_open {
            emit(conn, "NotificationClosed", &(id, CLOSED_BY_CALL)).await;
        }
    }

    fn get_capabilities(&self) -> Vec<String> {
        self.record(json!({"call": "GetCapabilities"}));
        vec!["actions".into(), "body".into()]
    }

    #[zbus(out_args("name", "vendor", "version", "spec_version"))]
    fn get_server_information(&self) -> (String, String, String, String) {
        self.record(json!({"call": "GetServerInformation"}));
        (
            "warden-fake-notifications".into(),
            "warden tests".into(),
            "1".into(),
            "1.2".into(),
        )
    }
}

async fn emit<B>(conn: &Connection, member: &str, body: &B)
where
    B: zbus::export::serde::Serialize + zbus::zvariant::DynamicType,
{
    conn.emit_signal(None::<&str>, PATH, NAME, member, body)
        .await
        .unwrap();
}

async fn serve(address: &str, dir: PathBuf) -> Result<()> {
    let server = Server {
        state: Arc::default(),
        dir: dir.clone(),
    };
    write_calls(&dir, &[]);
    let conn = zbus::connection::Builder::address(address)?
        .serve_at(PATH, server.clone())?
        .name(NAME)?
        .build()
        .await?;
    std::fs::write(
        dir.join("ready"),
        conn.unique_name()
            .map(|n| n.to_string())
            .unwrap_or_default(),
    )?;
    let control = dir.join("control");
    let mut done = 0;
    loop {
        let text = std::fs::read_to_string(&control).unwrap_or_default();
        // Only whole lines: the test appends a line in one write.
        let lines: Vec<&str> = text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .collect();
        for line in &lines[done..] {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words[..] {
                ["click", id, key] => {
                    let id: u32 = id.parse()?;
                    emit(&conn, "ActionInvoked", &(id, key)).await;
                    if server.state.lock().unwrap().open.remove(&id) {
                        emit(&conn, "NotificationClosed", &(id, DISMISSED)).await;
                    }
                }
                ["dismiss", id] => {
                    let id: u32 = id.parse()?;
                    if server.state.lock().unwrap().open.remove(&id) {
                        emit(&conn, "NotificationClosed", &(id, DISMISSED)).await;
                    }
                }
                _ => return Err(format!("unknown command {line:?}").into()),
            }
            server.record(json!({"call": "(control)", "command": line.trim_end()}));
        }
        done = lines.len();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn forge(address: &str, id: u32, key: &str) -> Result<()> {
    let conn = zbus::connection::Builder::address(address)?.build().await?;
    conn.emit_signal(None::<&str>, PATH, NAME, "ActionInvoked", &(id, key))
        .await?;
    // A round trip after it: the bus has routed the signal once this returns.
    zbus::fdo::DBusProxy::new(&conn).await?.get_id().await?;
    println!(
        "{}",
        conn.unique_name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args[..] {
        ["serve", address, dir] => serve(address, PathBuf::from(dir)).await,
        ["forge", address, id, key] => forge(address, id.parse()?, key).await,
        _ => {
            Err("usage: warden-fake-notifications serve ADDRESS DIR | forge ADDRESS ID KEY".into())
        }
    }
}
