//! Mutual TLS: the Backend's client certificate (Secret `data` or `stringData`, each
//! key kind) is presented to a server that requires one.

use super::TlsBed;
use crate::support::tls::{API_HOST, ApiBackend, Ca, KeyKind, LeafSpec};

fn mutual_tls_presents_the_client_certificate(base64_secret: bool, key: KeyKind) {
    let ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let client = client_ca.leaf(&LeafSpec {
        dns: &["workload.demo"],
        client: true,
        key,
        ..LeafSpec::default()
    });
    let mut backend = ApiBackend::client_and_server(&ca, client);
    if let Some((_, base64)) = &mut backend.client {
        *base64 = base64_secret;
    }
    let mut t = TlsBed::new(&backend, &ca.server(&[API_HOST]), Some(&client_ca));
    let reply = t.connect(&[]);
    t.assert_answered(&reply);
    assert!(
        t.last_handshake().contains(" client-cert=yes "),
        "{key:?}: {}",
        t.last_handshake()
    );
}

#[test]
fn client_and_server_presents_the_client_certificate_from_secret_data() {
    mutual_tls_presents_the_client_certificate(true, KeyKind::Ecdsa);
}

#[test]
fn client_and_server_presents_the_client_certificate_from_secret_string_data() {
    mutual_tls_presents_the_client_certificate(false, KeyKind::Ecdsa);
}

#[test]
fn client_certificate_with_an_ed25519_key() {
    mutual_tls_presents_the_client_certificate(true, KeyKind::Ed25519);
}

#[test]
fn client_certificate_with_an_rsa_pkcs1_key() {
    mutual_tls_presents_the_client_certificate(false, KeyKind::RsaPkcs1);
}

#[test]
fn client_certificate_with_an_ecdsa_sec1_key() {
    mutual_tls_presents_the_client_certificate(false, KeyKind::EcdsaSec1);
}
