//! The fuzz targets' bodies on stable, without libFuzzer: every parser gets a few
//! hundred thousand deterministic inputs (pseudo-random bytes and mutated valid
//! seeds), so CI exercises them on each run. `WARDEN_FUZZ_SMOKE_ITERS` changes
//! the count per target; a failure prints the input that caused it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a panic

use std::panic::{catch_unwind, AssertUnwindSafe};

use warden_proxy::fuzzing;
use warden_proxy::tls::build_client_hello;

const DEFAULT_ITERS: usize = 300_000;

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn byte(&mut self) -> u8 {
        const INTERESTING: &[u8] =
            b"\r\n\t :;,.[]@%/?#0123456789aAfFxX\x00\x01\x03\x05\x16\x7f\x80\xff";
        if self.below(2) == 0 {
            INTERESTING[self.below(INTERESTING.len())]
        } else {
            self.next() as u8
        }
    }
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seeds[rng.below(seeds.len())].clone();
    for _ in 0..=rng.below(4) {
        let len = data.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                data[i] = rng.byte();
            }
            2 => {
                let i = rng.below(len + 1);
                for _ in 0..=rng.below(8) {
                    let b = rng.byte();
                    data.insert(i, b);
                }
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = rng.below(len - i + 1);
                data.drain(i..i + n);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = rng.below((len - i).min(64) + 1);
                let piece: Vec<u8> = data[i..i + n].to_vec();
                let at = rng.below(len + 1);
                data.splice(at..at, piece);
            }
            5 => data.truncate(rng.below(len + 1)),
            6 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                let at = rng.below(len + 1);
                data.truncate(at);
                data.extend_from_slice(&other[from..]);
            }
            _ if len >= 2 => {
                // A length-looking pair of bytes.
                let i = rng.below(len - 1);
                let v = [0u16, 1, 0x7f, 0xff, 0x100, 0x3fff, 0x4000, 0xffff][rng.below(8)];
                data[i..i + 2].copy_from_slice(&v.to_be_bytes());
            }
            _ => {}
        }
    }
    data
}

const ALPHABET: &[u8] = b" !\"#$%&'()*+,-./0123456789:;<=>?@ABCXYZ[\\]^_`abcxyz{|}~\r\n\t";

fn random(rng: &mut Rng, ascii: bool) -> Vec<u8> {
    let len = rng.below(96);
    (0..len)
        .map(|_| {
            if ascii {
                ALPHABET[rng.below(ALPHABET.len())]
            } else {
                rng.byte()
            }
        })
        .collect()
}

fn run(name: &str, seed: u64, seeds: Vec<Vec<u8>>, ascii: bool, target: fn(&[u8])) {
    let iters = std::env::var("WARDEN_FUZZ_SMOKE_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ITERS);
    let mut rng = Rng(seed);
    for s in &seeds {
        target(s);
    }
    for i in 0..iters {
        let input = if i % 4 == 0 {
            random(&mut rng, ascii)
        } else {
            mutate(&mut rng, &seeds)
        };
        if catch_unwind(AssertUnwindSafe(|| target(&input))).is_err() {
            panic!(
                "{name}: input #{i} failed: {input:?} ({:?})",
                String::from_utf8_lossy(&input)
            );
        }
    }
    eprintln!("{name}: {iters} inputs");
}

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

#[test]
fn http_request() {
    let seeds = vec![
        b("GET http://api.github.com/x?y=1 HTTP/1.1\r\nHost: api.github.com\r\nAccept: */*\r\n\r\n"),
        b("POST http://a.example:8080/p HTTP/1.1\r\nHost: a.example:8080\r\nContent-Length: 5\r\n\r\nhello"),
        b("POST http://a.example/c HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\nGET"),
        b("CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n\x16\x03\x01"),
        b("GET http://[::1]:81/ws HTTP/1.1\r\nHost: [::1]:81\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nX-A: b\r\n\r\n"),
        b("GET http://2130706433/ HTTP/1.0\r\nHost: 127.1\r\nConnection: close, X-A\r\nX-A: 1\r\nProxy-Authorization: x\r\n\r\n"),
        b("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\nbody\r\n0\r\n\r\n"),
        b("HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n"),
        b("a\r\n0123456789\r\n0\r\n\r\n"),
    ];
    run(
        "http_request",
        0x1234_5678_9abc_def1,
        seeds,
        true,
        fuzzing::http_request,
    );
}

#[test]
fn connect_target() {
    let seeds = vec![
        b("api.github.com:443"),
        b("[::ffff:127.0.0.1]:80"),
        b("http://user@a.example:8080/p?q#f"),
        b("0x7f.1:8080"),
        b("0177.0.0.1"),
        b("xn--bcher-kva.example"),
        "ＡＰＩ．ＧＩＴＨＵＢ．ＣＯＭ".as_bytes().to_vec(),
        "bücher.example.".as_bytes().to_vec(),
        b("a-b_c.d-e.example:65535"),
        b("1.2.3.4.5"),
        b("[fe80::1%25eth0]:1"),
    ];
    run(
        "connect_target",
        0x0ddc_0ffe_e123_4567,
        seeds,
        true,
        fuzzing::connect_target,
    );
}

#[test]
fn socks5() {
    let seeds = vec![
        b"\x05\x01\x00\x05\x01\x00\x03\x0eapi.github.com\x01\xbb".to_vec(),
        b"\x05\x02\x00\x02\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50".to_vec(),
        [
            b"\x05\x01\x00\x05\x02\x00\x04".as_slice(),
            &[0; 15],
            &[1, 0, 22],
        ]
        .concat(),
        b"\x05\x01\x00\x05\x03\x00\x03\x01a\x00\x00".to_vec(),
    ];
    run(
        "socks5",
        0x5eed_5eed_5eed_5eed,
        seeds,
        false,
        fuzzing::socks5,
    );
}

#[test]
fn client_hello() {
    let seeds = vec![
        build_client_hello(
            &["api.github.com"],
            &[(10, vec![0, 2, 0, 29]), (43, vec![2, 3, 4])],
            16384,
        ),
        build_client_hello(&["a.example"], &[], 9),
        build_client_hello(&[], &[(16, b"\x00\x03\x02h2".to_vec())], 16384),
        build_client_hello(&["a.example", "b.example"], &[], 40),
        build_client_hello(&["API.GitHub.COM."], &[(0, vec![0, 3, 0, 0, 0])], 16384),
    ];
    run(
        "client_hello",
        0xc11e_47e1_1000_0001,
        seeds,
        false,
        fuzzing::client_hello,
    );
}

#[test]
fn dns_response() {
    let mut seeds = Vec::new();
    for (qtype, answer) in [
        (1u16, &[93u8, 184, 215, 14][..]),
        (28, &[0x20, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1][..]),
    ] {
        let mut r = warden_proxy::dns::encode_query(0x4242, "a.example", qtype).unwrap();
        r[2..4].copy_from_slice(&[0x81, 0x80]);
        r[6..8].copy_from_slice(&[0, 2]);
        // a.example CNAME b.example; b.example A/AAAA
        r.extend_from_slice(
            b"\xc0\x0c\x00\x05\x00\x01\x00\x00\x00\x3c\x00\x0b\x01b\x07example\x00",
        );
        let owner = r.len() - 11;
        r.extend_from_slice(&[0xc0 | (owner >> 8) as u8, owner as u8]);
        r.extend_from_slice(&qtype.to_be_bytes());
        r.extend_from_slice(&[0, 1, 0, 0, 0, 0x3c, 0, answer.len() as u8]);
        r.extend_from_slice(answer);
        seeds.push(r);
    }
    // a.example A: truncated; NXDOMAIN; records the lookup skips (a TXT, an
    // A of class CH) before its answer; a CNAME loop.
    let q = warden_proxy::dns::encode_query(0x4242, "a.example", 1).unwrap();
    let response = |flags: u16, answers: &[&[u8]]| {
        let mut r = q.clone();
        r[2..4].copy_from_slice(&flags.to_be_bytes());
        r[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
        for a in answers {
            r.extend_from_slice(a);
        }
        r
    };
    seeds.push(response(0x8380, &[]));
    seeds.push(response(0x8183, &[]));
    seeds.push(response(
        0x8180,
        &[
            b"\xc0\x0c\x00\x10\x00\x01\x00\x00\x00\x3c\x00\x04\x03abc",
            b"\xc0\x0c\x00\x01\x00\x03\x00\x00\x00\x3c\x00\x03\x01\x02\x03",
            b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\x01\x02\x03\x04",
        ],
    ));
    seeds.push(response(
        0x8180,
        &[b"\xc0\x0c\x00\x05\x00\x01\x00\x00\x00\x3c\x00\x02\xc0\x0c"],
    ));
    // Names for the encoder.
    for name in ["a.example", "API.GitHub.com.", "x", "a..b", "-._~*.example"] {
        seeds.push(name.as_bytes().to_vec());
    }
    run(
        "dns_response",
        0xd115_0000_0000_0007,
        seeds,
        false,
        fuzzing::dns_response,
    );
}
