//! The launchd agent (macOS): `~/Library/LaunchAgents/<label>.plist`, loaded
//! with `launchctl bootstrap gui/UID`. `RunAtLoad` rather than launchd's
//! sockets: a launchd socket reaches its program through
//! `launch_activate_socket(3)`, which `wardend` does not call, and `wardend`
//! binds the same default socket clients look for. `KeepAlive` restarts it
//! after a crash, not after a clean exit. `packaging/launchd/` holds the
//! output for [`ServiceValues::packaged`].

use super::{ServiceValues, ValueError, MARKER};

/// `&`, `<`, `>` and quotes as XML entities.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The property list.
pub fn plist(v: &ServiceValues) -> Result<String, ValueError> {
    let mut args = vec![xml(&super::text(&v.wardend)?)];
    if let Some(socket) = &v.socket {
        args.push("--socket".into());
        args.push(xml(&super::text(socket)?));
    }
    let args: String = args
        .iter()
        .map(|a| format!("\t\t<string>{a}</string>\n"))
        .collect();
    let log = match &v.log {
        Some(p) => format!(
            "\t<key>StandardErrorPath</key>\n\t<string>{}</string>\n",
            xml(&super::text(p)?)
        ),
        None => String::new(),
    };
    Ok(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>
<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">
<!-- {MARKER} (docs/install.md).
     wardend as a launchd agent, started at login (RunAtLoad) and again
     after a crash (KeepAlive). -->
<plist version=\"1.0\">
<dict>
\t<key>Label</key>
\t<string>{label}</string>
\t<key>ProgramArguments</key>
\t<array>
{args}\t</array>
\t<key>RunAtLoad</key>
\t<true/>
\t<key>KeepAlive</key>
\t<dict>
\t\t<key>SuccessfulExit</key>
\t\t<false/>
\t</dict>
\t<key>ExitTimeOut</key>
\t<integer>10</integer>
{log}</dict>
</plist>
",
        label = xml(&v.label),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn values_are_escaped_and_the_optional_keys_appear_when_set() {
        let v = ServiceValues {
            wardend: PathBuf::from("/Applications/A&B <x>/wardend"),
            socket: Some(PathBuf::from("/tmp/w/s.sock")),
            log: Some(PathBuf::from("/Users/u/Library/Logs/wardend.log")),
            ..ServiceValues::packaged()
        };
        let p = plist(&v).unwrap();
        assert!(p.contains(
            "\t\t<string>/Applications/A&amp;B &lt;x&gt;/wardend</string>\n\
             \t\t<string>--socket</string>\n\t\t<string>/tmp/w/s.sock</string>\n"
        ));
        assert!(p.contains(
            "\t<key>StandardErrorPath</key>\n\t<string>/Users/u/Library/Logs/wardend.log</string>\n</dict>"
        ));
        let d = plist(&ServiceValues::packaged()).unwrap();
        assert!(!d.contains("StandardErrorPath") && !d.contains("--socket"));
    }
}
