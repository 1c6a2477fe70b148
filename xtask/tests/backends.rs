//! Backend files as operators write them: bad objects are named and skipped, good ones
//! still work; TLS Backends are never forwarded in plaintext.

mod support;

use support::{Bed, ECHO_BACKEND, fixtures::xbackend};
use xtask::netlab::agent::redirector;

#[test]
fn a_broken_object_is_named_and_the_good_ones_still_load() {
    // Two good Backends and, between them, one with an out-of-range port.
    let with_one_broken = [
        xbackend("demo", "echo", "echo.redirector.test", 8080),
        xbackend("demo", "broken", "other.redirector.test", 70000),
        xbackend("demo", "api", "api.redirector.test", 9090),
    ];
    let bed = Bed::new(&with_one_broken.join("---\n"));
    let dir = bed.backends.path().display().to_string();

    let check = redirector(&["check", &dir]).expect("check");
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{stdout}");
    let problem = stdout.lines().next().unwrap_or_default();
    for part in ["backends.yaml", "XBackend demo/broken", "spec.port.port"] {
        assert!(problem.contains(part), "{problem:?} should name {part}");
    }
    assert_eq!(stdout.lines().count(), 1, "exactly one problem: {stdout}");

    let agent = bed.agent();
    assert!(
        agent.ready_line.contains("backends=2"),
        "{}",
        agent.ready_line
    );
    let logs = agent.logs();
    let skipped: Vec<&String> = logs.iter().filter(|l| l.contains("skipped")).collect();
    assert_eq!(skipped.len(), 1, "{logs:#?}");
    assert!(skipped[0].contains("demo/broken") && skipped[0].contains("spec.port.port"));
    assert!(bed.via_proxy("echo.redirector.test:8080"));
}

#[test]
fn check_accepts_a_valid_directory() {
    let bed = Bed::new(ECHO_BACKEND);
    let out = redirector(&["check", &bed.backends.path().display().to_string()]).expect("check");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok: 1 Backends valid"
    );
}

#[test]
fn a_tls_backend_never_sends_plaintext_to_a_server_that_does_not_speak_tls() {
    let tls_backend = xbackend("demo", "api", "api.redirector.test", 8080)
        + "  tls:\n    mode: ServerOnly\n    validation:\n      \
           hostname: api.redirector.test\n      wellKnownCACertificates: System\n";
    let bed = Bed::new(&tls_backend);
    let mut agent = bed.agent();
    // The server on :8080 is plain TCP: it receives a ClientHello, answers garbage, and
    // the handshake fails. The client's "hello" must never reach it.
    let reply = bed.connect("api.redirector.test:8080", &["-4"]);
    assert!(!reply.reply().contains("got=hello"), "{:?}", reply.json);
    assert!(!reply.ok() || reply.reply().is_empty(), "{:?}", reply.json);
    let refused = agent.wait_for_log("refused").expect("logged");
    assert!(
        refused.contains("demo/api") && refused.contains("tls_handshake"),
        "{refused}"
    );
}
