//! /etc/hosts, as the resolver reads it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| redirector::fuzzing::hosts_file(data));
