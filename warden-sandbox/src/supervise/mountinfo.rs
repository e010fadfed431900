//! The sandbox's mount table, as `/proc/<pid>/mountinfo` shows it from
//! inside (read once by the notifier, `resolve::SandboxRoot`), and
//! the daemon's own (the host's automount and network mounts,
//! [`super::classify`]; the cgroup mounts, `wardend`'s limits).

/// One line of `/proc/<pid>/mountinfo`, as seen from inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub id: u64,
    /// The file system's device number, `major:minor`.
    pub dev: String,
    /// Where it is mounted, in the sandbox's view.
    pub point: Vec<u8>,
    /// Per-mount `ro`.
    pub read_only: bool,
    pub noexec: bool,
    pub fstype: String,
}

/// `\040`-style escapes of mountinfo fields.
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = oct.iter().fold(0u32, |a, c| a * 8 + u32::from(c - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Parses mountinfo; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < 6 || sep < 6 || sep + 1 >= fields.len() {
            continue;
        }
        let Ok(id) = fields[0].parse() else { continue };
        let opts: Vec<&str> = fields[5].split(',').collect();
        out.push(Mount {
            id,
            dev: fields[2].to_string(),
            point: unescape(fields[4]),
            read_only: opts.contains(&"ro"),
            noexec: opts.contains(&"noexec"),
            fstype: fields[sep + 1].to_string(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_parsed_with_their_escapes() {
        let text = "120 44 0:56 / / ro,nosuid,nodev,relatime - tmpfs none rw,size=1024k\n\
            121 120 254:0 /usr /usr ro,nosuid,nodev,relatime - ext4 /dev/vda rw\n\
            138 132 0:59 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs none rw\n\
            146 120 254:0 /a\\040b /home/u/a\\040b rw,relatime shared:1 master:2 - ext4 /dev/vda rw\n\
            garbage\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 4);
        assert_eq!(
            m[0],
            Mount {
                id: 120,
                dev: "0:56".into(),
                point: b"/".to_vec(),
                read_only: true,
                noexec: false,
                fstype: "tmpfs".into()
            }
        );
        assert!(m[2].noexec && !m[2].read_only);
        assert_eq!(m[3].point, b"/home/u/a b");
        assert_eq!(m[3].fstype, "ext4");
    }
}
