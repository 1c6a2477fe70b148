//! Handshake failures: the connection is closed, nothing is sent, and the reason is
//! counted in `/metrics` and logged.

use super::TlsBed;
use crate::support::{
    ECHO_BACKEND,
    tls::{API_HOST, ApiBackend, Ca, LeafSpec, SPIFFE_ID},
};

#[test]
fn server_certificate_from_another_ca_is_refused_as_unknown_ca() {
    let ca = Ca::new("trusted CA");
    let other = Ca::new("unrelated CA");
    let mut t = TlsBed::new(
        &ApiBackend::server_only(&ca),
        &other.server(&[API_HOST]),
        None,
    );
    let reply = t.connect(&[]);
    t.assert_refused(&reply, "tls_handshake", Some("unknown_ca"));
}

#[test]
fn certificate_for_another_name_is_refused_as_name_mismatch() {
    let ca = Ca::new("test CA");
    let mut t = TlsBed::new(
        &ApiBackend::server_only(&ca),
        &ca.server(&["other.redirector.test"]),
        None,
    );
    let reply = t.connect(&[]);
    t.assert_refused(&reply, "tls_handshake", Some("name_mismatch"));
}

#[test]
fn certificate_without_any_listed_subject_alt_name_is_refused_as_name_mismatch() {
    let ca = Ca::new("test CA");
    // The certificate is valid for the hostname, but subjectAltNames replaces the
    // hostname check, and it carries none of them.
    let backend = ApiBackend {
        subject_alt_names: vec![
            ("Hostname", "payments.redirector.test"),
            ("URI", "spiffe://cluster.local/ns/demo/sa/payments"),
        ],
        ..ApiBackend::server_only(&ca)
    };
    let leaf = ca.leaf(&LeafSpec {
        dns: &[API_HOST],
        uris: &[SPIFFE_ID],
        ..LeafSpec::default()
    });
    let mut t = TlsBed::new(&backend, &leaf, None);
    let reply = t.connect(&[]);
    t.assert_refused(&reply, "tls_handshake", Some("name_mismatch"));
}

#[test]
fn expired_certificate_is_refused_as_expired() {
    let ca = Ca::new("test CA");
    let leaf = ca.leaf(&LeafSpec {
        dns: &[API_HOST],
        expired: true,
        ..LeafSpec::default()
    });
    let mut t = TlsBed::new(&ApiBackend::server_only(&ca), &leaf, None);
    let reply = t.connect(&[]);
    t.assert_refused(&reply, "tls_handshake", Some("expired"));
}

#[test]
fn certificate_not_yet_valid_is_refused_as_not_yet_valid() {
    let ca = Ca::new("test CA");
    let leaf = ca.leaf(&LeafSpec {
        dns: &[API_HOST],
        not_yet_valid: true,
        ..LeafSpec::default()
    });
    let mut t = TlsBed::new(&ApiBackend::server_only(&ca), &leaf, None);
    let reply = t.connect(&[]);
    t.assert_refused(&reply, "tls_handshake", Some("not_yet_valid"));
}

#[test]
fn server_requiring_a_client_certificate_rejects_a_server_only_backend() {
    let ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let mut t = TlsBed::new(
        &ApiBackend::server_only(&ca),
        &ca.server(&[API_HOST]),
        Some(&client_ca),
    );
    let reply = t.connect(&[]);
    t.assert_refused(&reply, "tls_handshake", Some("rejected_by_server"));
    assert!(t.server.lines_starting("handshake-ok").is_empty());
}

#[test]
fn client_certificate_from_an_untrusted_ca_is_rejected_by_the_server() {
    let ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let stranger = Ca::new("unrelated CA");
    let backend = ApiBackend::client_and_server(&ca, stranger.client("workload.demo"));
    let mut t = TlsBed::new(&backend, &ca.server(&[API_HOST]), Some(&client_ca));
    let reply = t.connect(&[]);
    t.assert_refused(&reply, "tls_handshake", Some("rejected_by_server"));
    assert!(t.server.lines_starting("handshake-ok").is_empty());
}

#[test]
fn missing_ca_config_map_refuses_only_that_backend_without_connecting() {
    let ca = Ca::new("test CA");
    let backend = ApiBackend {
        ca_pem: None,
        ..ApiBackend::server_only(&ca)
    };
    let yaml = format!("{ECHO_BACKEND}---\n{}", backend.yaml());
    let mut t = TlsBed::with_yaml(&yaml, &ca.server(&[API_HOST]), None);
    let reply = t.connect(&[]);
    assert!(!reply.ok() || reply.reply().is_empty(), "{:?}", reply.json);
    t.assert_counted("tls_config", None);
    assert!(
        t.server.lines().iter().all(|l| !l.starts_with("accepted")),
        "no upstream connection for a Backend whose TLS settings are unusable"
    );
    // The other Backend still works.
    let echo = t.bed.connect("echo.redirector.test:8080", &["-4"]);
    assert!(echo.reply().ends_with("got=hello"), "{:?}", echo.json);
}
