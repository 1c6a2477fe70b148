//! A captured DNS query, answered by the agent or forwarded.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| redirector::fuzzing::dns_query(data));
