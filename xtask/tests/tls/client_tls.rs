//! The client's own TLS: refused towards an originating Backend with that Backend's SNI;
//! passed through a plain Backend with its SNI, and with any SNI no Backend of the
//! address declares (or none), even in a ClientHello split across segments.

use super::TlsBed;
use crate::support::tls::{API_HOST, ApiBackend, Ca, sample, wait_for_sample};

const PASSTHROUGH: &str = "redirector_connections_passthrough_total";

#[test]
fn client_starting_tls_towards_an_originating_backend_is_refused() {
    let ca = Ca::new("test CA");
    let mut t = TlsBed::new(&ApiBackend::server_only(&ca), &ca.server(&[API_HOST]), None);
    let reply = t.connect(&["--tls-sni", API_HOST]);
    t.assert_refused(&reply, "client_opening", None);
    let logs = t.agent.logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("client_opening") && l.contains("started TLS itself")),
        "the log must say why: {logs:#?}"
    );
}

#[test]
fn plain_backend_passes_client_tls_with_the_backend_sni() {
    let ca = Ca::new("test CA");
    let mut t = TlsBed::new(&ApiBackend::plain(None), &ca.server(&[API_HOST]), None);
    let reply = t.connect(&["--tls-sni", API_HOST]);
    assert!(reply.json["tls"].is_string(), "{:?}", reply.json);
    t.assert_answered(&reply);
    assert!(
        t.last_handshake().contains(" sni=api.redirector.test "),
        "{}",
        t.last_handshake()
    );
}

#[test]
fn plain_backend_reassembles_a_client_hello_split_across_segments() {
    let ca = Ca::new("test CA");
    let mut t = TlsBed::new(&ApiBackend::plain(None), &ca.server(&[API_HOST]), None);
    let reply = t.connect(&["--tls-sni", API_HOST, "--tls-split", "40"]);
    t.assert_answered(&reply);
    assert!(
        t.last_handshake().contains(" sni=api.redirector.test "),
        "{}",
        t.last_handshake()
    );
}

/// A plain Backend and a ClientHello with a name it does not declare (`sni`, `-` for
/// none): still through the proxy (the datapath redirected the connect), but passed to
/// the dialed address unchanged, so the server completes the handshake with the client's
/// own SNI, and the passthrough is counted.
fn undeclared_client_tls_passes_through(mode: Option<&str>, tls: &[&str], sni: &str) {
    let ca = Ca::new("test CA");
    let mut t = TlsBed::new(&ApiBackend::plain(mode), &ca.server(&[API_HOST]), None);
    let reply = t.connect(tls);
    assert!(reply.json["tls"].is_string(), "{:?}", reply.json);
    t.assert_answered(&reply);
    let handshake = t.last_handshake();
    assert!(handshake.contains(&format!(" sni={sni} ")), "{handshake}");
    let labels = [("reason", "undeclared_sni")];
    let text = wait_for_sample(&t.bed.topo.node, PASSTHROUGH, &labels, 1.0);
    assert_eq!(
        sample(&text, PASSTHROUGH, &labels),
        Some(1.0),
        "{PASSTHROUGH}{labels:?}; /metrics:\n{text}"
    );
}

#[test]
fn mode_none_backend_passes_client_tls_with_another_sni_through() {
    undeclared_client_tls_passes_through(
        Some("None"),
        &["--tls-sni", "other.redirector.test"],
        "other.redirector.test",
    );
}

#[test]
fn backend_without_tls_passes_client_tls_without_sni_through() {
    undeclared_client_tls_passes_through(None, &["--tls-no-sni"], "-");
}

#[test]
fn plain_backend_passes_another_sni_in_a_split_client_hello_through() {
    undeclared_client_tls_passes_through(
        None,
        &["--tls-sni", "other.redirector.test", "--tls-split", "40"],
        "other.redirector.test",
    );
}

/// Another site on a TLS-originating Backend's address (a CDN): the proxy has already
/// originated TLS when the client's ClientHello names another site, so it drops that
/// connection and passes the client's bytes to the dialed address on a fresh one.
#[test]
fn originating_backend_passes_client_tls_for_another_site_through() {
    let ca = Ca::new("test CA");
    let mut t = TlsBed::new(&ApiBackend::server_only(&ca), &ca.server(&[API_HOST]), None);
    let reply = t.connect(&["--tls-sni", "other.redirector.test"]);
    assert!(reply.json["tls"].is_string(), "{:?}", reply.json);
    t.assert_answered(&reply);
    let handshakes = t.server.lines_starting("handshake-ok");
    assert!(
        handshakes
            .iter()
            .any(|h| h.contains(" sni=other.redirector.test ")),
        "the client's own handshake reached the server: {handshakes:?}"
    );
    let labels = [("reason", "undeclared_sni")];
    let text = wait_for_sample(&t.bed.topo.node, PASSTHROUGH, &labels, 1.0);
    assert_eq!(sample(&text, PASSTHROUGH, &labels), Some(1.0), "{text}");
}
