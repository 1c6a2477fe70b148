//! Every `spec.protocol`: what the client may speak (HTTP/1.1 or HTTP/2 with prior
//! knowledge, always) and what the server gets (nginx's `$server_protocol` and
//! `$ssl_alpn_protocol`), with and without TLS origination.

use super::{
    API_BACKEND, API_HOST, H2C_PORT, HttpBackend, HttpBed, OTHER_HOST, PLAIN_PORT, REQUESTS,
    TLS_H1_PORT, TLS_PORT, assert_from_node, url,
};
use xtask::netlab::EXT_V4;

use crate::support::{
    curl,
    nginx::{Nginx, Site, field},
    tls::{Ca, Leaf, sample},
};

/// The four nginx listeners of these tests: TLS with h2, TLS HTTP/1.1 only, cleartext
/// HTTP/1.1 and cleartext HTTP/2.
fn sites(leaf: &Leaf) -> Vec<Site<'_>> {
    vec![
        Site {
            names: vec![API_HOST, OTHER_HOST],
            ..Site::tls(TLS_PORT, API_HOST, leaf)
        },
        Site {
            names: vec![API_HOST, OTHER_HOST],
            http2: false,
            ..Site::tls(TLS_H1_PORT, API_HOST, leaf)
        },
        Site::plain(PLAIN_PORT),
        Site::h2c(H2C_PORT),
    ]
}

/// The clients: curl's flag and the HTTP version it then speaks to the proxy.
const CLIENTS: [(&str, &str); 2] = [("--http1.1", "1.1"), ("--http2-prior-knowledge", "2")];

/// A `protocol` Backend on `port` (with TLS origination if `tls`): both kinds of client
/// get nginx's answer, and nginx saw each request from the node with `upstream`
/// (`HTTP/1.1`, `HTTP/2.0`) and, with TLS, ALPN `alpn` and SNI api.redirector.test.
fn protocol_row(protocol: &str, tls: bool, port: u16, upstream: &str, alpn: &str) -> HttpBed {
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST, OTHER_HOST]);
    let backend = HttpBackend::api(port, protocol, tls.then_some(&ca));
    let t = HttpBed::new(&backend.yaml(), &[]);
    let nginx = Nginx::start(&t.bed.topo.ext, &sites(&leaf));
    for (flag, version) in CLIENTS {
        let response = t.curl(&[flag, &url(API_HOST, port, "/")]);
        response.assert_status(200);
        assert_eq!(response.http_version(), version, "{protocol} {flag}");
        assert!(
            response.text().starts_with("host=api.redirector.test "),
            "{protocol} {flag}: {}",
            response.text()
        );
    }
    let requests = nginx.wait_for_requests(2);
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_from_node(&requests);
    let empty = |v: &str| v.is_empty() || v == "-";
    for request in &requests {
        assert_eq!(
            field(request, "protocol"),
            upstream,
            "{protocol}: {request}"
        );
        assert_eq!(field(request, "host"), API_HOST, "{protocol}: {request}");
        assert_eq!(field(request, "status"), "200", "{request}");
        if tls {
            assert_eq!(field(request, "alpn"), alpn, "{protocol}: {request}");
            assert_eq!(field(request, "sni"), API_HOST, "{protocol}: {request}");
        } else {
            assert!(empty(field(request, "sni")), "cleartext: {request}");
        }
    }
    t.assert_sample(REQUESTS, &[("backend", API_BACKEND), ("class", "2xx")], 2.0);
    t
}

#[test]
fn http_backend_with_tls_uses_h2_when_the_server_offers_it() {
    let t = protocol_row("HTTP", true, TLS_PORT, "HTTP/2.0", "h2");
    // --access-log: one JSON line per request, written when the response body ends
    // (after the 2xx counter that protocol_row waited for), by a writer of its own.
    let log = t.wait_for_access_log(2);
    assert_eq!(log.len(), 2, "{log:?}");
    for line in &log {
        assert_eq!(line["backend"], API_BACKEND, "{line}");
        assert_eq!(line["method"], "GET", "{line}");
        assert_eq!(line["path"], "/", "{line}");
        assert_eq!(line["status"], 200, "{line}");
        assert_eq!(line["upstream_protocol"], "HTTP/2", "{line}");
        let authority = line["authority"].as_str().unwrap_or_default();
        assert!(authority.starts_with(API_HOST), "{line}");
        assert!(line["time"].is_string(), "{line}");
        assert!(line["bytes"].is_u64(), "{line}");
        assert!(line["duration_ms"].is_number(), "{line}");
        assert_eq!(line["event"], "request", "{line}");
        // Directory mode: the client's cgroup below --cgroup (curl runs in the pod's
        // cgroup, which is --cgroup itself), no Kubernetes keys.
        assert_eq!(line["source"], serde_json::json!({"cgroup": "/"}), "{line}");
    }
    let text = t.metrics();
    let count = sample(
        &text,
        "redirector_http_request_duration_seconds_count",
        &[("backend", API_BACKEND)],
    );
    assert_eq!(
        count,
        Some(2.0),
        "request duration histogram; /metrics:\n{text}"
    );
}

#[test]
fn http_backend_with_tls_uses_http11_when_the_server_offers_only_that() {
    let t = protocol_row("HTTP", true, TLS_H1_PORT, "HTTP/1.1", "http/1.1");
    let log = t.wait_for_access_log(2);
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(
        log.iter().all(|l| l["upstream_protocol"] == "HTTP/1.1"),
        "{log:?}"
    );
}

#[test]
fn http_backend_without_tls_speaks_http11_upstream() {
    protocol_row("HTTP", false, PLAIN_PORT, "HTTP/1.1", "");
}

#[test]
fn http11_backend_speaks_http11_even_when_the_server_offers_h2() {
    protocol_row("HTTP11", true, TLS_PORT, "HTTP/1.1", "http/1.1");
}

#[test]
fn http2_backend_with_tls_speaks_h2() {
    protocol_row("HTTP2", true, TLS_PORT, "HTTP/2.0", "h2");
}

#[test]
fn http2_backend_without_tls_speaks_h2_with_prior_knowledge() {
    protocol_row("HTTP2", false, H2C_PORT, "HTTP/2.0", "");
}

#[test]
fn h2c_backend_speaks_h2_with_prior_knowledge() {
    protocol_row("H2C", false, H2C_PORT, "HTTP/2.0", "");
}

#[test]
fn mcp_backend_speaks_http11() {
    protocol_row("MCP", true, TLS_PORT, "HTTP/1.1", "http/1.1");
}

#[test]
fn tcp_backend_forwards_http_bytes_unchanged() {
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST]);
    let t = HttpBed::new(&HttpBackend::api(PLAIN_PORT, "TCP", None).yaml(), &[]);
    let nginx = Nginx::start(&t.bed.topo.ext, &sites(&leaf));
    // A workload in a cgroup of its own below the attached one.
    let app = t.bed.topo.pod_cgroup.child("app").expect("app cgroup");
    // No Host check for bytes: nginx gets the client's request as it was written.
    let args = [
        "--http1.1",
        "-H",
        "Host: undeclared.example",
        &url(API_HOST, PLAIN_PORT, "/"),
    ];
    let response = curl::curl_from(&t.bed.topo, &app, &args);
    response.assert_status(200);
    assert!(
        response.text().starts_with("host=undeclared.example "),
        "{}",
        response.text()
    );
    let requests = nginx.wait_for_requests(1);
    assert_from_node(&requests);
    assert_eq!(field(&requests[0], "protocol"), "HTTP/1.1");
    let text = t.metrics();
    assert_eq!(sample(&text, REQUESTS, &[("backend", API_BACKEND)]), None);
    // One access-log line for the connection, written when it ends; none per request.
    let log = t.wait_for_access_log(1);
    assert_eq!(log.len(), 1, "{log:?}");
    let line = &log[0];
    assert_eq!(line["event"], "connection", "{line}");
    assert_eq!(line["backend"], API_BACKEND, "{line}");
    assert_eq!(
        line["source"],
        serde_json::json!({"cgroup": "/app"}),
        "{line}"
    );
    assert_eq!(line["destination"], EXT_V4.to_string(), "{line}");
    assert_eq!(line["port"], PLAIN_PORT, "{line}");
    assert_eq!(line["outcome"], "forwarded", "{line}");
    assert!(line.get("reason").is_none(), "{line}");
    let received = response.body.len() as u64;
    assert!(line["bytes_received"].as_u64() > Some(received), "{line}");
    assert!(line["bytes_sent"].as_u64() > Some(0), "{line}");
    assert!(line["duration_ms"].as_f64() > Some(0.0), "{line}");
    t.assert_sample(
        "redirector_connections_forwarded_total",
        &[("backend", API_BACKEND), ("source_namespace", "")],
        1.0,
    );
    drop(app);
}

/// `redirector check` on a directory holding `yaml`.
fn check(yaml: &str) -> std::process::Output {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("backends.yaml"), yaml).expect("write");
    let path = dir.path().display().to_string();
    xtask::netlab::agent::redirector(&["check", &path]).expect("redirector check")
}

#[test]
fn h2c_with_tls_origination_is_rejected_by_check() {
    let ca = Ca::new("test CA");
    let out = check(&HttpBackend::api(TLS_PORT, "H2C", Some(&ca)).yaml());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("spec.protocol") || l.contains("spec.tls")),
        "the problem must name spec.protocol or spec.tls: {stdout}"
    );
    // The same Backend without TLS origination is valid, as is HTTP2 with it.
    for yaml in [
        HttpBackend::api(H2C_PORT, "H2C", None).yaml(),
        HttpBackend::api(TLS_PORT, "HTTP2", Some(&ca)).yaml(),
    ] {
        let out = check(&yaml);
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
