#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| warden_proxy::fuzzing::socks5(data));
