//! TLS origination that works: server verification against the Backend's CA (chains,
//! bundles, URI SANs), SNI and ALPN as the Backend says, and session resumption.

use xtask::netlab::{EXT_V4, EXT_V6, NODE_EXT_V4, NODE_EXT_V6};

use super::{FORWARDED, REFUSED, TlsBed};
use crate::support::{
    curl,
    tls::{
        API_BACKEND, API_HOST, API_PORT, API_TARGET, ApiBackend, Ca, LeafSpec, SPIFFE_ID, sample,
        wait_for_sample,
    },
};

#[test]
fn server_only_originates_tls_for_a_plaintext_client() {
    let ca = Ca::new("test CA");
    let mut t = TlsBed::new(&ApiBackend::server_only(&ca), &ca.server(&[API_HOST]), None);
    for (family, dialed, node) in [
        (
            "-4",
            format!("{EXT_V4}:{API_PORT}"),
            format!("{NODE_EXT_V4}:"),
        ),
        (
            "-6",
            format!("[{EXT_V6}]:{API_PORT}"),
            format!("[{NODE_EXT_V6}]:"),
        ),
    ] {
        let reply = t.bed.connect(API_TARGET, &[family]);
        assert!(reply.ok(), "{family}: {:?}", reply.json);
        assert_eq!(reply.peer(), dialed, "getpeername()");
        assert!(reply.reply().ends_with("got=hello"), "{:?}", reply.json);
        let seen = reply.seen_by_server().unwrap_or_default();
        assert!(seen.starts_with(&node), "server saw {seen}");
        t.server.wait_closed();
        let handshake = t.last_handshake();
        assert!(
            handshake.contains(" sni=api.redirector.test alpn=- client-cert=no "),
            "SNI is spec.tls.validation.hostname; no ALPN for protocol TCP: {handshake}"
        );
    }
    let received = t.server.lines_starting("received");
    assert_eq!(received.len(), 2, "{received:?}");
    assert!(
        received.iter().all(|l| l.ends_with(" hello")),
        "{received:?}"
    );
    // Counted when the relay ends, about when the client sees its EOF.
    let labels = [("backend", API_BACKEND)];
    let text = wait_for_sample(&t.bed.topo.node, FORWARDED, &labels, 2.0);
    assert_eq!(sample(&text, FORWARDED, &labels), Some(2.0), "{text}");
    assert_eq!(sample(&text, REFUSED, &labels), None);
}

#[test]
fn upstream_sessions_are_resumed() {
    let ca = Ca::new("test CA");
    let mut t = TlsBed::new(&ApiBackend::server_only(&ca), &ca.server(&[API_HOST]), None);
    for _ in 0..3 {
        let reply = t.connect(&[]);
        t.assert_answered(&reply);
    }
    let resumed: Vec<String> = t
        .server
        .lines_starting("handshake-ok")
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap_or_default().to_owned())
        .collect();
    // One TLS configuration (and session cache) per Backend, not per connection.
    assert_eq!(resumed, ["resumed=no", "resumed=yes", "resumed=yes"]);
}

/// The ALPN a `protocol` Backend negotiates with a server offering `h2` and `http/1.1`
/// (preferring h2). HTTP protocols make the proxy speak HTTP, so an HTTP request (curl)
/// opens the upstream connection; the server is no HTTP server, so the request itself
/// fails, and only the handshake matters here.
fn alpn_offer(protocol: &str, expected: &str) {
    let ca = Ca::new("test CA");
    let backend = ApiBackend {
        protocol,
        ..ApiBackend::server_only(&ca)
    };
    let mut t = TlsBed::new(&backend, &ca.server(&[API_HOST]), None);
    let target = format!("http://{API_TARGET}/");
    let response = curl::curl(&t.bed.topo, &["--http1.1", &target]);
    assert_eq!(response.code(), 502, "not an HTTP server: {response:?}");
    t.server.wait_closed();
    let handshake = t.last_handshake();
    assert!(
        handshake.contains(&format!(" alpn={expected} ")),
        "protocol {protocol}: {handshake}"
    );
}

#[test]
fn http_backend_offers_alpn_h2_and_http11() {
    // h2 wins with this server; tests/http.rs shows http/1.1 with a server without h2.
    alpn_offer("HTTP", "h2");
}

#[test]
fn http11_backend_offers_alpn_http11() {
    alpn_offer("HTTP11", "http/1.1");
}

#[test]
fn mcp_backend_offers_alpn_http11() {
    alpn_offer("MCP", "http/1.1");
}

#[test]
fn http2_backend_offers_alpn_h2() {
    alpn_offer("HTTP2", "h2");
}

#[test]
fn chain_through_an_intermediate_ca_is_verified_up_to_the_root() {
    let root = Ca::new("root CA");
    let intermediate = root.intermediate("issuing CA");
    // The ConfigMap holds only the root; the server sends leaf + intermediate.
    let mut t = TlsBed::new(
        &ApiBackend::server_only(&root),
        &intermediate.server(&[API_HOST]),
        None,
    );
    let reply = t.connect(&[]);
    t.assert_answered(&reply);
}

#[test]
fn ca_bundle_with_several_certificates_trusts_each_of_them() {
    let ca = Ca::new("test CA");
    let other = Ca::new("another CA");
    let backend = ApiBackend {
        ca_pem: Some(format!("{}{}", other.pem(), ca.pem())),
        ..ApiBackend::server_only(&ca)
    };
    let mut t = TlsBed::new(&backend, &ca.server(&[API_HOST]), None);
    let reply = t.connect(&[]);
    t.assert_answered(&reply);
}

#[test]
fn uri_subject_alt_name_is_accepted_instead_of_the_hostname() {
    let ca = Ca::new("test CA");
    let backend = ApiBackend {
        subject_alt_names: vec![("URI", SPIFFE_ID)],
        ..ApiBackend::server_only(&ca)
    };
    // The certificate carries only the SPIFFE ID, not api.redirector.test.
    let leaf = ca.leaf(&LeafSpec {
        uris: &[SPIFFE_ID],
        ..LeafSpec::default()
    });
    let mut t = TlsBed::new(&backend, &leaf, None);
    let reply = t.connect(&[]);
    t.assert_answered(&reply);
    assert!(
        t.last_handshake().contains(" sni=api.redirector.test "),
        "SNI is still the validation hostname: {}",
        t.last_handshake()
    );
}
