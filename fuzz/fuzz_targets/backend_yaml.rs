//! A file in a Backend directory (multi-document YAML).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| redirector::fuzzing::backend_yaml(data));
