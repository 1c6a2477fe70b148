//! TLS towards Backends, end to end: a plaintext client in the pod, the agent in the node
//! originating TLS as `spec.tls` says, a rustls server (`netprobe serve-tls`) in the
//! external namespace, certificates made at test time.
//!
//! A refused connection is checked from three sides: the client gets a closed connection,
//! the server never sees an application byte, and the agent counts the reason in
//! `/metrics` and logs it.

mod support;

use support::{
    Bed, ECHO_BACKEND, PROBE,
    capture::{self, Capture},
    tls::{
        API_BACKEND, API_HOST, API_PORT, API_TARGET, ApiBackend, Ca, KeyKind, Leaf, LeafSpec,
        SPIFFE_ID, TlsServer, metrics, sample, wait_for_sample,
    },
};
use xtask::netlab::{EXT_V4, EXT_V6, NODE_EXT_V4, NODE_EXT_V6, agent::Agent, probe::Reply};

const REFUSED: &str = "redirector_connections_refused_total";
const HANDSHAKE_FAILURES: &str = "redirector_tls_handshake_failures_total";
const FORWARDED: &str = "redirector_connections_forwarded_total";

/// A bed with the TLS server on ext `[::]:8443` and the agent running.
/// Field order is drop order: processes first, namespaces last.
struct TlsBed {
    server: TlsServer,
    agent: Agent,
    bed: Bed,
}

impl TlsBed {
    fn new(backend: &ApiBackend<'_>, leaf: &Leaf, client_ca: Option<&Ca>) -> TlsBed {
        TlsBed::with_yaml(&backend.yaml(), leaf, client_ca)
    }

    fn with_yaml(yaml: &str, leaf: &Leaf, client_ca: Option<&Ca>) -> TlsBed {
        let bed = Bed::new(yaml);
        let server = TlsServer::start(&bed.topo.ext, "[::]:8443", leaf, client_ca);
        let agent = bed.agent();
        TlsBed { server, agent, bed }
    }

    /// The plaintext client: `netprobe connect api.redirector.test:8443 -4 --send hello`.
    fn connect(&self, extra: &[&str]) -> Reply {
        let mut args = vec!["-4"];
        args.extend_from_slice(extra);
        self.bed.connect(API_TARGET, &args)
    }

    /// One connection went through: the client got the server's answer over TLS.
    fn assert_answered(&mut self, reply: &Reply) {
        assert!(reply.ok(), "{:?}", reply.json);
        assert_eq!(
            reply.peer(),
            format!("{EXT_V4}:{API_PORT}"),
            "getpeername()"
        );
        assert!(reply.reply().ends_with("got=hello"), "{:?}", reply.json);
        let seen = reply.seen_by_server().unwrap_or_default();
        assert!(
            seen.starts_with(&format!("{NODE_EXT_V4}:")),
            "the server must see the node (the proxy), saw {seen}"
        );
        self.server.wait_closed();
    }

    /// The handshake the server completed last (`handshake-ok <peer> sni=.. alpn=..`).
    fn last_handshake(&self) -> String {
        let ok = self.server.lines_starting("handshake-ok");
        ok.last()
            .cloned()
            .expect("the server completed a handshake")
    }

    /// A refused connection: closed for the client, no application byte at the server,
    /// `reason` counted once for demo/api (and `failure` among handshake failures), and
    /// a log line naming the Backend, the destination and the reason.
    fn assert_refused(&mut self, reply: &Reply, reason: &str, failure: Option<&str>) {
        assert!(
            !reply.ok() || reply.reply().is_empty(),
            "the client got an answer from a refused connection: {:?}",
            reply.json
        );
        let lines = self.server.wait_closed();
        let received: Vec<&String> = lines.iter().filter(|l| l.starts_with("received")).collect();
        assert!(
            received.is_empty(),
            "application bytes reached the server: {received:?}"
        );
        self.assert_counted(reason, failure);
    }

    fn assert_counted(&mut self, reason: &str, failure: Option<&str>) {
        let node = &self.bed.topo.node;
        let labels = [("backend", API_BACKEND), ("reason", reason)];
        let text = wait_for_sample(node, REFUSED, &labels, 1.0);
        assert_eq!(
            sample(&text, REFUSED, &labels),
            Some(1.0),
            "{REFUSED}{labels:?} must count the refusal once; /metrics:\n{text}\nagent:\n{}",
            self.agent.logs().join("\n")
        );
        if let Some(failure) = failure {
            let labels = [("backend", API_BACKEND), ("reason", failure)];
            assert_eq!(
                sample(&text, HANDSHAKE_FAILURES, &labels),
                Some(1.0),
                "{HANDSHAKE_FAILURES}{labels:?}; /metrics:\n{text}"
            );
            // With TLS 1.3 the server judges our client certificate after the proxy's
            // side of the handshake is complete: the proxy is already forwarding (the
            // client's bytes go out encrypted, and the server drops them) when the
            // rejection arrives. Every other failure happens before forwarding.
            if failure != "rejected_by_server" {
                assert_eq!(
                    sample(&text, FORWARDED, &[("backend", API_BACKEND)]).unwrap_or(0.0),
                    0.0,
                    "a failed handshake is not a forwarded connection; /metrics:\n{text}"
                );
            }
        }
        let needle = format!("reason=\"{reason}\"");
        let line = self.agent.wait_for_log(&needle).expect("refusal logged");
        for part in ["refused", API_BACKEND, &format!("{EXT_V4}:{API_PORT}")] {
            assert!(line.contains(part), "the log line must name {part}: {line}");
        }
    }
}

// ---- TLS origination that works ----

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
    let text = metrics(&t.bed.topo.node);
    assert_eq!(
        sample(&text, FORWARDED, &[("backend", API_BACKEND)]),
        Some(2.0),
        "{text}"
    );
    assert_eq!(sample(&text, REFUSED, &[("backend", API_BACKEND)]), None);
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

fn alpn_offer(protocol: &str, expected: &str) {
    let ca = Ca::new("test CA");
    let backend = ApiBackend {
        protocol,
        ..ApiBackend::server_only(&ca)
    };
    let mut t = TlsBed::new(&backend, &ca.server(&[API_HOST]), None);
    let reply = t.connect(&[]);
    t.assert_answered(&reply);
    let handshake = t.last_handshake();
    assert!(
        handshake.contains(&format!(" alpn={expected} ")),
        "protocol {protocol}: {handshake}"
    );
}

#[test]
fn http_backend_offers_alpn_http11() {
    alpn_offer("HTTP", "http/1.1");
}

#[test]
fn http2_backend_offers_alpn_h2() {
    alpn_offer("HTTP2", "h2");
}

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

// ---- Handshake failures: closed, nothing sent, counted ----

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

// ---- The client's own TLS ----

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

// ---- The wire ----

#[test]
fn no_plaintext_reaches_the_wire_for_a_tls_backend() {
    const SECRET: &str = "GET /secret-plaintext HTTP/1.1";
    const FENCE: &str = "capture-fence-end-of-test";
    let ca = Ca::new("test CA");
    // demo/echo (plain, :8080) shows that the capture does see plaintext where there is.
    let yaml = format!("{ECHO_BACKEND}---\n{}", ApiBackend::server_only(&ca).yaml());
    let mut t = TlsBed::with_yaml(&yaml, &ca.server(&[API_HOST]), None);
    let wire = Capture::start(&t.bed.topo.ext, &t.bed.topo.ext_link.remote);

    let reply = t.bed.connect_sending(API_TARGET, SECRET, &["-4"]);
    assert!(
        reply.reply().ends_with(&format!("got={SECRET}")),
        "{:?}",
        reply.json
    );
    t.server.wait_closed();
    let plain = t
        .bed
        .connect_sending("echo.redirector.test:8080", SECRET, &["-4"]);
    assert!(
        plain.reply().ends_with(&format!("got={SECRET}")),
        "{:?}",
        plain.json
    );
    // Last, straight from the node (no redirect): its arrival in the file means that
    // everything before it is there too.
    let fence = t
        .bed
        .topo
        .node
        .exec(PROBE)
        .args(["connect", &format!("{EXT_V4}:8080"), "--send", FENCE])
        .output()
        .expect("fence");
    assert!(fence.status.success(), "{fence:?}");
    let segments = capture::segments(&wire.stop_after(FENCE.as_bytes()));

    let to_server = capture::stream(&segments, API_PORT, true);
    let from_server = capture::stream(&segments, API_PORT, false);
    assert!(
        to_server.starts_with(&[0x16, 0x03]),
        "the first bytes towards the server must be a TLS handshake record: {:02x?}",
        &to_server[..to_server.len().min(16)]
    );
    assert!(
        capture::contains(&to_server, &[0x17, 0x03, 0x03]),
        "the request must travel as TLS application data"
    );
    for (direction, bytes) in [("to", &to_server), ("from", &from_server)] {
        for needle in [SECRET.as_bytes(), b"secret-plaintext", b"got="] {
            assert!(
                !capture::contains(bytes, needle),
                "plaintext {:?} on the wire {direction} {API_HOST}:{API_PORT}",
                String::from_utf8_lossy(needle)
            );
        }
    }
    let to_echo = capture::stream(&segments, 8080, true);
    assert!(
        capture::contains(&to_echo, SECRET.as_bytes()),
        "the capture must see the plain Backend's plaintext (else it proves nothing)"
    );
}
