//! Reading the server name (SNI) of a TLS ClientHello at the start of a tunnel.
//! Pure functions, no I/O.
//!
//! The ClientHello may be split across several handshake records; at most
//! [`MAX_CLIENT_HELLO`] bytes (record headers included) are looked at. Anything
//! odd — records of another type before the hello is complete, a second message
//! in the same record, duplicate extensions, two `host_name` entries, lengths that
//! do not add up — is an error, and the caller refuses the tunnel.

/// The most bytes of records read to find the end of the ClientHello.
pub const MAX_CLIENT_HELLO: usize = 16 * 1024;

const RECORD_HANDSHAKE: u8 = 0x16;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const NAME_TYPE_HOST_NAME: u8 = 0;
const MAX_RECORD: usize = 1 << 14;

/// What the first bytes of a tunnel are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniff {
    /// Not enough bytes to tell yet.
    NeedMore,
    /// Not a TLS handshake record (the first two bytes are not `16 03`).
    NotTls,
    /// A complete ClientHello in the first `len` bytes, with its `host_name` if any.
    ClientHello { sni: Option<String>, len: usize },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    #[error("ClientHello larger than {MAX_CLIENT_HELLO} bytes")]
    TooLarge,
    #[error("unexpected record type {0:#04x} before the ClientHello ended")]
    RecordType(u8),
    #[error("bad record version")]
    RecordVersion,
    #[error("empty or oversized record")]
    RecordLength,
    #[error("first handshake message is not a ClientHello")]
    NotClientHello,
    #[error("data after the ClientHello in its record")]
    Trailing,
    #[error("malformed ClientHello: {0}")]
    Malformed(&'static str),
    #[error("duplicate extension {0}")]
    DuplicateExtension(u16),
    #[error("more than one host_name in server_name")]
    DuplicateHostName,
    #[error("host_name is not printable ASCII")]
    HostNameBytes,
}

/// Looks at the bytes a client sent first in a tunnel.
pub fn sniff(buf: &[u8]) -> Result<Sniff, TlsError> {
    match buf {
        [] | [RECORD_HANDSHAKE] => return Ok(Sniff::NeedMore),
        [RECORD_HANDSHAKE, 3, ..] => {}
        _ => return Ok(Sniff::NotTls),
    }
    let mut hs: Vec<u8> = Vec::new();
    let mut pos = 0;
    loop {
        let Some(header) = buf.get(pos..pos + 5) else {
            return need_more(buf);
        };
        if header[0] != RECORD_HANDSHAKE {
            return Err(TlsError::RecordType(header[0]));
        }
        if header[1] != 3 {
            return Err(TlsError::RecordVersion);
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > MAX_RECORD {
            return Err(TlsError::RecordLength);
        }
        let end = pos + 5 + len;
        if end > MAX_CLIENT_HELLO {
            return Err(TlsError::TooLarge);
        }
        let Some(fragment) = buf.get(pos + 5..end) else {
            return need_more(buf);
        };
        hs.extend_from_slice(fragment);
        pos = end;
        if hs.len() < 4 {
            continue;
        }
        if hs[0] != HANDSHAKE_CLIENT_HELLO {
            return Err(TlsError::NotClientHello);
        }
        let msg_len = (usize::from(hs[1]) << 16) | (usize::from(hs[2]) << 8) | usize::from(hs[3]);
        if 4 + msg_len > MAX_CLIENT_HELLO {
            return Err(TlsError::TooLarge);
        }
        if hs.len() < 4 + msg_len {
            continue;
        }
        if hs.len() > 4 + msg_len {
            return Err(TlsError::Trailing);
        }
        let sni = client_hello_sni(&hs[4..])?;
        return Ok(Sniff::ClientHello { sni, len: pos });
    }
}

fn need_more(buf: &[u8]) -> Result<Sniff, TlsError> {
    if buf.len() >= MAX_CLIENT_HELLO {
        Err(TlsError::TooLarge)
    } else {
        Ok(Sniff::NeedMore)
    }
}

/// A cursor over a byte slice with length-prefixed reads.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], TlsError> {
        if self.buf.len() < n {
            return Err(TlsError::Malformed(what));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, TlsError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, TlsError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn vec8(&mut self, what: &'static str) -> Result<&'a [u8], TlsError> {
        let n = self.u8(what)?;
        self.take(usize::from(n), what)
    }

    fn vec16(&mut self, what: &'static str) -> Result<&'a [u8], TlsError> {
        let n = self.u16(what)?;
        self.take(usize::from(n), what)
    }
}

/// The `host_name` of a ClientHello body (after the 4-byte handshake header).
pub fn client_hello_sni(body: &[u8]) -> Result<Option<String>, TlsError> {
    let mut r = Reader { buf: body };
    let version = r.take(2, "version")?;
    if version[0] != 3 {
        return Err(TlsError::Malformed("version"));
    }
    r.take(32, "random")?;
    if r.vec8("session id")?.len() > 32 {
        return Err(TlsError::Malformed("session id"));
    }
    let suites = r.vec16("cipher suites")?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err(TlsError::Malformed("cipher suites"));
    }
    if r.vec8("compression methods")?.is_empty() {
        return Err(TlsError::Malformed("compression methods"));
    }
    if r.buf.is_empty() {
        return Ok(None);
    }
    let extensions = r.vec16("extensions")?;
    if !r.buf.is_empty() {
        return Err(TlsError::Malformed("data after extensions"));
    }
    let mut r = Reader { buf: extensions };
    let mut seen: Vec<u16> = Vec::new();
    let mut sni = None;
    while !r.buf.is_empty() {
        let kind = r.u16("extension type")?;
        let data = r.vec16("extension data")?;
        if seen.contains(&kind) {
            return Err(TlsError::DuplicateExtension(kind));
        }
        seen.push(kind);
        if kind == EXT_SERVER_NAME {
            sni = server_name(data)?;
        }
    }
    Ok(sni)
}

fn server_name(data: &[u8]) -> Result<Option<String>, TlsError> {
    let mut outer = Reader { buf: data };
    let list = outer.vec16("server name list")?;
    if !outer.buf.is_empty() || list.is_empty() {
        return Err(TlsError::Malformed("server name list"));
    }
    let mut r = Reader { buf: list };
    let mut host = None;
    while !r.buf.is_empty() {
        let kind = r.u8("name type")?;
        let name = r.vec16("server name")?;
        if kind != NAME_TYPE_HOST_NAME {
            continue;
        }
        if host.is_some() {
            return Err(TlsError::DuplicateHostName);
        }
        if name.is_empty() || !name.iter().all(u8::is_ascii_graphic) {
            return Err(TlsError::HostNameBytes);
        }
        host = Some(String::from_utf8_lossy(name).into_owned());
    }
    Ok(host)
}

/// Builds ClientHello records for tests and fuzz seeds: `names` become
/// `host_name` entries of one server_name extension (none: no extension),
/// `extra` are further raw extensions, the handshake message is cut into records
/// of at most `record_size` bytes.
#[doc(hidden)]
pub fn build_client_hello(names: &[&str], extra: &[(u16, Vec<u8>)], record_size: usize) -> Vec<u8> {
    let mut exts = Vec::new();
    if !names.is_empty() {
        let mut list = Vec::new();
        for n in names {
            list.push(NAME_TYPE_HOST_NAME);
            list.extend_from_slice(&(n.len() as u16).to_be_bytes());
            list.extend_from_slice(n.as_bytes());
        }
        exts.extend_from_slice(&EXT_SERVER_NAME.to_be_bytes());
        exts.extend_from_slice(&((list.len() + 2) as u16).to_be_bytes());
        exts.extend_from_slice(&(list.len() as u16).to_be_bytes());
        exts.extend_from_slice(&list);
    }
    for (kind, data) in extra {
        exts.extend_from_slice(&kind.to_be_bytes());
        exts.extend_from_slice(&(data.len() as u16).to_be_bytes());
        exts.extend_from_slice(data);
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(32);
    body.extend_from_slice(&[9; 32]);
    body.extend_from_slice(&[0, 4, 0x13, 0x01, 0x13, 0x02]);
    body.extend_from_slice(&[1, 0]);
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut msg = vec![HANDSHAKE_CLIENT_HELLO];
    msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    msg.extend_from_slice(&body);
    let mut out = Vec::new();
    for chunk in msg.chunks(record_size.max(1)) {
        out.extend_from_slice(&[RECORD_HANDSHAKE, 3, 1]);
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sni_of(buf: &[u8]) -> Result<Sniff, TlsError> {
        sniff(buf)
    }

    #[test]
    fn finds_the_server_name() {
        let hello = build_client_hello(&["api.github.com"], &[(10, vec![0, 2, 0, 29])], 16384);
        assert_eq!(
            sni_of(&hello),
            Ok(Sniff::ClientHello {
                sni: Some("api.github.com".into()),
                len: hello.len()
            })
        );
        // Every strict prefix needs more.
        for i in 0..hello.len() {
            assert_eq!(sni_of(&hello[..i]), Ok(Sniff::NeedMore), "{i}");
        }
        // Application data after the hello is not part of it.
        let mut more = hello.clone();
        more.extend_from_slice(b"\x17\x03\x03\x00\x01x");
        assert_eq!(
            sni_of(&more),
            Ok(Sniff::ClientHello {
                sni: Some("api.github.com".into()),
                len: hello.len()
            })
        );
    }

    #[test]
    fn split_across_records() {
        for size in [1, 2, 3, 5, 50, 100] {
            let hello = build_client_hello(&["a.example"], &[], size);
            assert_eq!(
                sni_of(&hello),
                Ok(Sniff::ClientHello {
                    sni: Some("a.example".into()),
                    len: hello.len()
                }),
                "{size}"
            );
        }
    }

    #[test]
    fn no_sni_and_not_tls() {
        let hello = build_client_hello(&[], &[], 16384);
        assert!(matches!(
            sni_of(&hello),
            Ok(Sniff::ClientHello { sni: None, .. })
        ));
        assert_eq!(sni_of(b"GET / HTTP/1.1\r\n"), Ok(Sniff::NotTls));
        assert_eq!(sni_of(b"\x16\x02"), Ok(Sniff::NotTls));
        assert_eq!(sni_of(b"\x16"), Ok(Sniff::NeedMore));
        assert_eq!(sni_of(b""), Ok(Sniff::NeedMore));
    }

    #[test]
    fn refusals() {
        assert_eq!(
            sni_of(&build_client_hello(&["a.com", "b.com"], &[], 16384)),
            Err(TlsError::DuplicateHostName)
        );
        let mut dup = build_client_hello(&["a.com"], &[], 16384);
        // A second server_name extension.
        let ext = build_client_hello(&["b.com"], &[], 16384);
        let second = ext[ext.len() - (2 + 2 + 2 + 1 + 2 + 5)..].to_vec(); // the server_name extension of "b.com"
        dup = rebuild_with_extra(&dup, &second);
        assert_eq!(sni_of(&dup), Err(TlsError::DuplicateExtension(0)));
        assert_eq!(
            sni_of(&build_client_hello(&["a\u{7f}b"], &[], 16384)),
            Err(TlsError::HostNameBytes)
        );
        assert_eq!(
            sni_of(&build_client_hello(&[""], &[], 16384)),
            Err(TlsError::HostNameBytes)
        );
        // A change_cipher_spec record in the middle.
        let split = build_client_hello(&["a.com"], &[], 20);
        let mut bad = split[..25].to_vec();
        bad.extend_from_slice(b"\x14\x03\x03\x00\x01\x01");
        bad.extend_from_slice(&split[25..]);
        assert_eq!(sni_of(&bad), Err(TlsError::RecordType(0x14)));
        // Not a ClientHello.
        assert_eq!(
            sni_of(b"\x16\x03\x01\x00\x04\x02\x00\x00\x00"),
            Err(TlsError::NotClientHello)
        );
        // Zero-length record.
        assert_eq!(sni_of(b"\x16\x03\x01\x00\x00"), Err(TlsError::RecordLength));
        // Declared larger than the cap.
        assert_eq!(
            sni_of(b"\x16\x03\x01\x40\x00\x01\xff\xff\xff"),
            Err(TlsError::TooLarge)
        );
        // Trailing handshake bytes in the last record.
        let hello = build_client_hello(&["a.com"], &[], 16384);
        let mut trailing = hello.clone();
        let len = u16::from_be_bytes([hello[3], hello[4]]) + 1;
        trailing[3..5].copy_from_slice(&len.to_be_bytes());
        trailing.push(0);
        assert_eq!(sni_of(&trailing), Err(TlsError::Trailing));
        // Truncated lengths inside the body.
        let mut short = hello.clone();
        let n = short.len();
        short[n - 1] = b'x';
        short.truncate(n - 1);
        assert!(sni_of(&short).is_ok()); // only needs more
                                         // Many tiny records exceeding the cap.
        let tiny = build_client_hello(&["a.com"], &[(21, vec![0; 4000])], 1);
        assert_eq!(sni_of(&tiny), Err(TlsError::TooLarge));
    }

    /// Appends a raw extension to a single-record hello, fixing every length.
    fn rebuild_with_extra(hello: &[u8], ext: &[u8]) -> Vec<u8> {
        let mut out = hello.to_vec();
        out.extend_from_slice(ext);
        let add = ext.len();
        let rec = u16::from_be_bytes([out[3], out[4]]) as usize + add;
        out[3..5].copy_from_slice(&(rec as u16).to_be_bytes());
        let msg =
            (usize::from(out[6]) << 16 | usize::from(out[7]) << 8 | usize::from(out[8])) + add;
        out[6..9].copy_from_slice(&(msg as u32).to_be_bytes()[1..]);
        // extensions length sits after version, random, session id, suites, compression
        let at = 9 + 2 + 32 + 1 + 32 + 2 + 4 + 2;
        let exts = u16::from_be_bytes([out[at], out[at + 1]]) as usize + add;
        out[at..at + 2].copy_from_slice(&(exts as u16).to_be_bytes());
        out
    }
}
