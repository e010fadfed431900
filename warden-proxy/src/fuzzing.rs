//! The bodies of the fuzz targets (`warden-proxy/fuzz/`), shared with the stable
//! smoke test (`tests/fuzz_smoke.rs`). Each feeds one input to a parser and
//! panics when an invariant does not hold; none may panic otherwise.
#![doc(hidden)]
// Fuzz oracles: a broken invariant is a panic, by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use warden_core::policy::net::parse_host;

use crate::events::{printable, MAX_PRINTABLE};
use crate::http::{self, ChunkedDecoder, MAX_HEAD, MAX_HEADERS};
use crate::socks;
use crate::tls::{self, Sniff, MAX_CLIENT_HELLO};

/// Request heads, targets, framing, the rewrite and the chunked decoder.
pub fn http_request(data: &[u8]) {
    check_printable(data);
    if let Ok(Some(head)) = http::parse_request_head(data, MAX_HEAD, MAX_HEADERS) {
        assert!(head.len <= data.len() && head.len <= MAX_HEAD);
        assert!(head.minor <= 1);
        let _ = http::connection_tokens(&head.headers);
        let _ = http::host_header(&head.headers);
        let _ = http::is_upgrade(&head.headers);
        let forwarded = http::method_use(&head.method) == http::MethodUse::Forward;
        assert_eq!(
            forwarded,
            http::FORWARDED_METHODS.contains(&head.method.as_str()),
            "only the listed methods are forwarded"
        );
        if head.method == "CONNECT" {
            if let Ok(a) = http::parse_authority(&head.target, None) {
                assert_ne!(a.port, 0);
                let _ = parse_host(&a.host);
            }
        } else if let Ok((a, path)) = http::parse_absolute_target(&head.target) {
            assert!(path.starts_with('/'));
            assert_ne!(a.port, 0);
            if let (Ok(host), Ok(body)) = (parse_host(&a.host), http::request_body(&head)) {
                // What goes upstream parses back to a request with the same framing.
                let upgrade = http::is_upgrade(&head.headers);
                let out = http::rewrite_request(&head, &path, &host.to_string(), upgrade, false);
                let again = http::parse_request_head(&out, usize::MAX, MAX_HEADERS + 8)
                    .expect("rewritten head parses")
                    .expect("rewritten head is complete");
                assert_eq!(again.len, out.len());
                assert_eq!(again.method, head.method);
                assert_eq!(again.target, path);
                assert_eq!(http::request_body(&again), Ok(body));
                assert_eq!(
                    http::host_header(&again.headers).ok().flatten(),
                    Some(host.to_string().as_bytes())
                );
            }
        }
        chunked(&data[head.len..]);
    } else {
        chunked(data);
    }
    if let Ok(Some(resp)) = http::parse_response_head(data, 64 * 1024, 256) {
        assert!(resp.len <= data.len());
        let _ = http::response_body("GET", resp.status, &resp.headers);
        let out = http::rewrite_response(&resp, true);
        assert!(matches!(
            http::parse_response_head(&out, usize::MAX, 1024),
            Ok(Some(_))
        ));
    }
}

/// Feeding the chunked decoder all at once and in pieces must agree.
fn chunked(data: &[u8]) {
    let mut whole = ChunkedDecoder::new();
    let all = whole.feed(data);
    let mut pieces = ChunkedDecoder::new();
    let mut used = 0;
    let mut failed = false;
    let step = usize::from(data.first().copied().unwrap_or(1) % 7) + 1;
    for piece in data.chunks(step) {
        match pieces.feed(piece) {
            Ok(n) => {
                assert!(n <= piece.len());
                used += n;
                if pieces.is_done() {
                    break;
                }
                assert_eq!(n, piece.len(), "a partial feed stops only when done");
            }
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    match all {
        Ok(n) => {
            assert!(!failed, "split feeding failed where whole feeding did not");
            assert_eq!(n, used);
            assert_eq!(whole.is_done(), pieces.is_done());
        }
        Err(_) => assert!(failed, "whole feeding failed where split feeding did not"),
    }
}

/// CONNECT authorities, absolute targets and host normalisation.
pub fn connect_target(data: &[u8]) {
    check_printable(data);
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    for default in [None, Some(80)] {
        if let Ok(a) = http::parse_authority(s, default) {
            assert_ne!(a.port, 0);
            assert!(!a.host.is_empty());
            normalise(&a.host);
        }
    }
    if let Ok((a, path)) = http::parse_absolute_target(s) {
        assert!(path.starts_with('/'));
        normalise(&a.host);
    }
    normalise(s);
}

/// A normalised host normalises to itself.
fn normalise(raw: &str) {
    if let Ok(host) = parse_host(raw) {
        let shown = host.to_string();
        assert_eq!(
            parse_host(&shown).as_ref(),
            Ok(&host),
            "{raw:?} -> {shown:?}"
        );
    }
}

/// SOCKS5 greetings and requests.
pub fn socks5(data: &[u8]) {
    let rest = match socks::parse_greeting(data) {
        Ok(Some((g, n))) => {
            assert!(n <= data.len() && n <= socks::MAX_GREETING);
            assert_eq!(g.methods.len() + 2, n);
            assert_eq!(socks::parse_greeting(&data[..n - 1]), Ok(None));
            &data[n..]
        }
        _ => data,
    };
    if let Ok(Some((r, n))) = socks::parse_request(rest) {
        assert!(n <= rest.len() && n <= socks::MAX_REQUEST);
        assert_eq!(socks::parse_request(&rest[..n]), Ok(Some((r.clone(), n))));
        assert_eq!(socks::parse_request(&rest[..n - 1]), Ok(None));
        if let socks::SocksAddr::Domain(d) = &r.addr {
            assert!(!d.is_empty());
            check_printable(d);
            if let Ok(s) = std::str::from_utf8(d) {
                normalise(s);
            }
        }
    }
    let _ = socks::reply(data.first().copied().unwrap_or(0), None);
}

/// ClientHello records and the server name.
pub fn client_hello(data: &[u8]) {
    match tls::sniff(data) {
        Ok(Sniff::ClientHello { sni, len }) => {
            assert!(len <= data.len() && len <= MAX_CLIENT_HELLO);
            assert_eq!(
                tls::sniff(&data[..len]),
                Ok(Sniff::ClientHello {
                    sni: sni.clone(),
                    len
                })
            );
            assert_eq!(tls::sniff(&data[..len - 1]), Ok(Sniff::NeedMore));
            if let Some(name) = sni {
                assert!(!name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic()));
                normalise(&name);
            }
        }
        Ok(Sniff::NeedMore) => assert!(data.len() < MAX_CLIENT_HELLO),
        Ok(Sniff::NotTls) => assert!(!data.is_empty()),
        Err(_) => {}
    }
    let _ = tls::client_hello_sni(data);
}

/// DNS responses to a fixed query; the same bytes as a query name.
pub fn dns_response(data: &[u8]) {
    use crate::dns::{encode_query, parse_response, TYPE_A, TYPE_AAAA};
    for qtype in [TYPE_A, TYPE_AAAA] {
        let id = data
            .get(..2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .unwrap_or(0);
        if let Ok(ips) = parse_response(data, id, "a.example", qtype) {
            assert!(ips.len() <= data.len() / 4);
            // Only addresses of the type asked for.
            assert!(ips.iter().all(|ip| ip.is_ipv4() == (qtype == TYPE_A)));
        }
    }
    // A name the encoder accepts makes a query whose question a response can
    // echo: the parser takes that response (no answers) as ours.
    if let Ok(name) = std::str::from_utf8(data) {
        if let Ok(q) = encode_query(7, name, TYPE_A) {
            assert!(q.len() <= 12 + 255 + 4);
            let mut r = q.clone();
            r[2] |= 0x80;
            assert_eq!(parse_response(&r, 7, name, TYPE_A), Ok(Vec::new()));
            assert_eq!(
                parse_response(&r, 7, name, TYPE_AAAA),
                Err(crate::dns::DnsError::Mismatch)
            );
        }
    }
}

fn check_printable(data: &[u8]) {
    let p = printable(data);
    assert!(p.len() <= MAX_PRINTABLE);
    assert!(p.bytes().all(|b| b.is_ascii_graphic()));
}
