//! An XBackend object as the Kubernetes API server sends it (JSON).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| redirector::fuzzing::backend_json(data));
