//! The client's own TLS: refused towards an originating Backend; passed through a
//! plain Backend only with the Backend's SNI, even in a ClientHello split across segments.

use super::TlsBed;
use crate::support::tls::{API_HOST, ApiBackend, Ca};

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

/// A `None` Backend and a ClientHello it must refuse: the proxy has connected upstream
/// already, but the server never completes a handshake nor gets application bytes.
fn plain_backend_refuses_client_tls(mode: Option<&str>, tls: &[&str]) {
    let ca = Ca::new("test CA");
    let mut t = TlsBed::new(&ApiBackend::plain(mode), &ca.server(&[API_HOST]), None);
    let reply = t.connect(tls);
    t.assert_refused(&reply, "client_opening", None);
    assert_eq!(
        t.server.lines_starting("handshake-ok"),
        Vec::<String>::new(),
        "the ClientHello must not reach the server"
    );
}

#[test]
fn mode_none_backend_refuses_client_tls_with_another_sni() {
    plain_backend_refuses_client_tls(Some("None"), &["--tls-sni", "other.redirector.test"]);
}

#[test]
fn backend_without_tls_refuses_client_tls_without_sni() {
    plain_backend_refuses_client_tls(None, &["--tls-no-sni"]);
}

#[test]
fn plain_backend_refuses_another_sni_in_a_split_client_hello() {
    plain_backend_refuses_client_tls(
        None,
        &["--tls-sni", "other.redirector.test", "--tls-split", "40"],
    );
}
