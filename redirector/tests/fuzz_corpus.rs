//! Smoke of the fuzz corpora on stable: every input that `cargo xtask fuzz` kept (and
//! every crash it found and we fixed) goes through its parser again on each test run, so
//! a regression shows up here without nightly or libFuzzer.

use std::path::{Path, PathBuf};

use redirector::fuzzing;

/// A fuzz target (`fuzz/fuzz_targets/<name>.rs`) and the function it drives.
type Target = (&'static str, fn(&[u8]));

const TARGETS: [Target; 5] = [
    ("client_hello", fuzzing::client_hello),
    ("backend_yaml", fuzzing::backend_yaml),
    ("backend_json", fuzzing::backend_json),
    ("hosts_file", fuzzing::hosts_file),
    ("dns_query", fuzzing::dns_query),
];

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

#[test]
fn every_corpus_input_parses_without_panicking() {
    // A thread per target: some thousand inputs each, in a debug build.
    std::thread::scope(|scope| {
        for (target, run) in TARGETS {
            scope.spawn(move || smoke(target, run));
        }
    });
}

fn smoke(target: &str, run: fn(&[u8])) {
    let dir = corpus_dir(target);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {} is missing: {e}", dir.display()));
    let mut inputs = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        // On a panic, name the input to rerun with `cargo fuzz run <target> <input>`.
        let outcome = std::panic::catch_unwind(|| run(&bytes));
        assert!(outcome.is_ok(), "{target} panicked on {}", path.display());
        inputs += 1;
    }
    assert!(inputs > 0, "corpus {} is empty", dir.display());
}
