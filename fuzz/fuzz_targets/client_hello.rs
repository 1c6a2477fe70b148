//! A client's first bytes, sniffed for a TLS ClientHello and its SNI.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| redirector::fuzzing::client_hello(data));
