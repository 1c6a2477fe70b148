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
    for part in ["backends.yaml", "XBackend demo/broken", "spec.port.number"] {
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
    assert!(skipped[0].contains("demo/broken") && skipped[0].contains("spec.port.number"));
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

/// Both shapes of XBackend `v1alpha1` load and route the same: upstream's newest
/// (`port: {number}`) and Gateway API v1.6's (`port: {port}`), the latter with one
/// deprecation note in `check` and in the agent's log; an `EndpointSelector` Backend is
/// accepted with a note and redirects nothing.
#[test]
fn both_xbackend_shapes_load_and_route_the_same() {
    let newest = xbackend("demo", "echo", "echo.redirector.test", 8080);
    let v16 = xbackend("demo", "api", "api.redirector.test", 9090)
        .replace("port: {number: 9090}", "port: {name: api, port: 9090}");
    assert!(v16.contains("port: 9090}"), "{v16}");
    let selector = "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackend\n\
                    metadata: {name: in-cluster, namespace: demo}\n\
                    spec: {type: EndpointSelector, endpointSelector: {matchLabels: {app: db}}, \
                    port: {number: 5432}}\n";
    let bed = Bed::new(&[newest.as_str(), &v16, selector].join("---\n"));
    let _other = bed.serve("[::]:9090");

    let check = redirector(&["check", &bed.backends.path().display().to_string()]).expect("check");
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "two notes and the verdict: {stdout}");
    assert!(
        lines[0].starts_with("note: ")
            && lines[0]
                .contains("XBackend demo/api: spec.port.port: deprecated Gateway API v1.6 shape")
            && lines[0].contains("`port: {number: 9090}`"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("note: ")
            && lines[1].contains("XBackend demo/in-cluster: spec.type: EndpointSelector"),
        "{stdout}"
    );
    assert_eq!(lines[2], "ok: 2 Backends valid");

    let agent = bed.agent();
    assert!(
        agent.ready_line.contains("backends=2"),
        "{}",
        agent.ready_line
    );
    assert!(bed.via_proxy("echo.redirector.test:8080"), "newest shape");
    assert!(bed.via_proxy("api.redirector.test:9090"), "v1.6 shape");
    let logs = agent.logs();
    let notes: Vec<&String> = logs.iter().filter(|l| l.contains("note: ")).collect();
    assert_eq!(notes.len(), 2, "one note per object: {logs:#?}");
    assert!(
        notes
            .iter()
            .any(|l| l.contains("demo/api") && l.contains("deprecated"))
    );
    assert!(
        notes
            .iter()
            .any(|l| l.contains("demo/in-cluster") && l.contains("EndpointSelector"))
    );
}
