//! Backend files as operators write them: bad objects are named and skipped, good ones
//! still work; TLS Backends are never forwarded in plaintext.

mod support;

use support::{Bed, ECHO_BACKEND};
use xtask::netlab::{NODE_EXT_V4, agent::redirector};

/// Two good Backends and, between them, one with an out-of-range port.
const WITH_ONE_BROKEN: &str = r#"
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: echo, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: echo.redirector.test}
  port: {port: 8080}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: broken, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: other.redirector.test}
  port: {port: 70000}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: api, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: api.redirector.test}
  port: {port: 9090}
"#;

#[test]
fn a_broken_object_is_named_and_the_good_ones_still_load() {
    let bed = Bed::new(WITH_ONE_BROKEN);
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
    let reply = bed.connect("echo.redirector.test:8080", &["-4"]);
    assert!(reply.ok(), "{:?}", reply.json);
    assert!(
        reply
            .seen_by_server()
            .unwrap_or_default()
            .starts_with(&format!("{NODE_EXT_V4}:"))
    );
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
    let tls_backend = r#"
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: api, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: api.redirector.test}
  port: {port: 8080}
  tls:
    mode: ServerOnly
    validation:
      hostname: api.redirector.test
      wellKnownCACertificates: System
"#;
    let bed = Bed::new(tls_backend);
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
