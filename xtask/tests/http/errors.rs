//! Answers the proxy makes itself: 421 for a Host no Backend of the dialed address
//! declares, 502 when the upstream cannot be reached or fails its TLS handshake, 504 when
//! no response headers come in time (upgrades included; not for MCP), 400 and 431 for requests hyper will
//! not parse; in each case nothing reaches the server, and the reason is counted. An
//! exchange with no byte either way for `--idle-timeout` is closed and counted.

use std::time::{Duration, Instant};

use super::{
    API_BACKEND, API_HOST, ERRORS, HttpBackend, HttpBed, PLAIN_PORT, PROBE_HTTP_PORT, TLS_PORT, url,
};
use crate::support::{
    nginx::{Nginx, Site, field},
    tls::{Ca, sample},
};

const IDLE_CLOSED: &str = "redirector_connections_idle_closed_total";

/// `redirector_http_errors_total{reason}` (any backend label) reaches `count`.
#[track_caller]
fn assert_error_counted(t: &HttpBed, reason: &str, count: f64) {
    let labels = [("reason", reason)];
    let text = t.wait_for_sample(ERRORS, &labels, count);
    assert_eq!(
        sample(&text, ERRORS, &labels),
        Some(count),
        "{ERRORS}{labels:?}; /metrics:\n{text}"
    );
}

/// An HTTP Backend originating TLS to nginx on 8443, and nginx.
fn tls_bed(extra: &[&str]) -> (HttpBed, Nginx) {
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST]);
    let t = HttpBed::new(&HttpBackend::api(TLS_PORT, "HTTP", Some(&ca)).yaml(), extra);
    let nginx = Nginx::start(&t.bed.topo.ext, &[Site::tls(TLS_PORT, API_HOST, &leaf)]);
    (t, nginx)
}

/// Sends a good request after the bad ones and checks that nginx logged nothing but
/// `before` and the fence (nginx logs in order, so the bad ones would be there by then).
#[track_caller]
fn assert_only_the_fence_reached(t: &HttpBed, nginx: &Nginx, port: u16, before: &[&str]) {
    t.curl(&["--http1.1", &url(API_HOST, port, "/fence")])
        .assert_status(200);
    let requests = nginx.wait_for_requests(before.len() + 1);
    let uris: Vec<&str> = requests.iter().map(|r| field(r, "uri")).collect();
    let mut expected = before.to_vec();
    expected.push("/fence");
    assert_eq!(uris, expected, "nothing else may reach nginx");
}

#[test]
fn host_of_no_declared_backend_is_answered_421_without_upstream_request() {
    let (t, nginx) = tls_bed(&[]);
    let target = url(API_HOST, TLS_PORT, "/misdirected");
    for args in [
        ["--http1.1", "-H", "Host: evil.example"],
        ["--http2-prior-knowledge", "-H", "Host: evil.example:8443"],
        // The right name on another port is another authority.
        ["--http1.1", "-H", "Host: api.redirector.test:9999"],
    ] {
        let mut all = args.to_vec();
        all.push(&target);
        t.curl(&all).assert_status(421);
    }
    // The port is optional in the Host.
    let portless = url(API_HOST, TLS_PORT, "/portless");
    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        t.curl(&[flag, "-H", "Host: api.redirector.test", &portless])
            .assert_status(200);
    }
    assert_only_the_fence_reached(&t, &nginx, TLS_PORT, &["/portless", "/portless"]);
    assert_error_counted(&t, "misdirected", 3.0);
    // The proxy's own answers are in the access log too, with no upstream protocol.
    let log = t.wait_for_access_log(5);
    let refused: Vec<_> = log.iter().filter(|l| l["status"] == 421).collect();
    assert_eq!(refused.len(), 3, "{log:?}");
    for line in refused {
        assert_eq!(line["backend"], "-", "{line}");
        assert_eq!(line["path"], "/misdirected", "{line}");
        assert_eq!(line["upstream_protocol"], "-", "{line}");
        assert!(line["bytes"].as_u64().is_some_and(|b| b > 0), "{line}");
    }
}

#[test]
fn unreachable_upstream_is_answered_502() {
    // Nothing listens on 8445.
    let t = HttpBed::new(&HttpBackend::api(8445, "HTTP", None).yaml(), &[]);
    t.curl(&["--http1.1", &url(API_HOST, 8445, "/")])
        .assert_status(502);
    t.curl(&["--http2-prior-knowledge", &url(API_HOST, 8445, "/")])
        .assert_status(502);
    assert_error_counted(&t, "upstream_connect", 2.0);
}

#[test]
fn server_certificate_from_another_ca_is_answered_502() {
    let trusted = Ca::new("trusted CA");
    let other = Ca::new("unrelated CA");
    let leaf = other.server(&[API_HOST]);
    let t = HttpBed::new(
        &HttpBackend::api(TLS_PORT, "HTTP", Some(&trusted)).yaml(),
        &[],
    );
    let nginx = Nginx::start(&t.bed.topo.ext, &[Site::tls(TLS_PORT, API_HOST, &leaf)]);
    t.curl(&["--http1.1", &url(API_HOST, TLS_PORT, "/")])
        .assert_status(502);
    assert_error_counted(&t, "upstream_handshake", 1.0);
    assert!(nginx.requests().is_empty(), "{:?}", nginx.requests());
}

#[test]
fn backend_whose_ca_config_map_is_missing_is_answered_502() {
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST]);
    let yaml = HttpBackend::api(TLS_PORT, "HTTP", Some(&ca)).yaml();
    // The XBackend alone: its caCertificateRefs name a ConfigMap that is not there.
    let backend = yaml.split("---").next().expect("the XBackend document");
    let t = HttpBed::new(backend, &[]);
    let nginx = Nginx::start(&t.bed.topo.ext, &[Site::tls(TLS_PORT, API_HOST, &leaf)]);
    t.curl(&["--http1.1", &url(API_HOST, TLS_PORT, "/")])
        .assert_status(502);
    assert_error_counted(&t, "tls_config", 1.0);
    assert!(nginx.requests().is_empty(), "{:?}", nginx.requests());
}

#[test]
fn upstream_answer_that_is_not_http_is_answered_502() {
    // The bed's `netprobe serve` on 8080 answers a line of text, not HTTP.
    let t = HttpBed::new(&HttpBackend::api(8080, "HTTP11", None).yaml(), &[]);
    t.curl(&["--http1.1", &url(API_HOST, 8080, "/")])
        .assert_status(502);
    assert_error_counted(&t, "upstream_error", 1.0);
}

#[test]
fn response_head_far_over_32_kib_is_answered_502_and_one_below_passes() {
    let (t, _server) = HttpBed::http11_probe(&[]);
    // About 28 KB of headers: under the proxy's 32 KiB read buffer.
    t.curl(&[
        "--http1.1",
        &url(API_HOST, PROBE_HTTP_PORT, "/big-head?bytes=28000"),
    ])
    .assert_status(200);
    // About 100 KB: refused whatever the reads. hyper checks the limit when a read
    // leaves the head unfinished, and a read may fill the buffer's spare room past it,
    // so a head between 32 and 64 KiB passes or not depending on how it arrives.
    t.curl(&[
        "--http1.1",
        &url(API_HOST, PROBE_HTTP_PORT, "/big-head?bytes=100000"),
    ])
    .assert_status(502);
    assert_error_counted(&t, "upstream_error", 1.0);
}

/// curl `headers` to `/delay?ms=5000` of `netprobe serve-http` through an HTTP11 Backend
/// with a 1 s response timeout: a 504 well before the answer would come, counted, and
/// saying on what connection the request waited (`waited`).
fn answered_504_in_time(headers: &[&str], waited: &str) -> HttpBed {
    let (t, _server) = HttpBed::http11_probe(&["--http-response-timeout", "1s"]);
    let target = url(API_HOST, PROBE_HTTP_PORT, "/delay?ms=5000");
    answered_504_within_3500_ms(&t, &[&["--http1.1"], headers, &[&target]].concat(), waited);
    t
}

#[track_caller]
fn answered_504_within_3500_ms(t: &HttpBed, args: &[&str], waited: &str) {
    let started = Instant::now();
    let response = t.curl(args);
    response.assert_status(504);
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(3500),
        "504 after {took:?} with a 1 s timeout"
    );
    assert!(response.text().contains(waited), "{}", response.text());
    assert_error_counted(t, "upstream_timeout", 1.0);
}

#[test]
fn no_response_headers_within_the_response_timeout_is_answered_504() {
    let t = answered_504_in_time(&[], "on a new upstream connection");
    let log = t.wait_for_access_log(1);
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["status"], 504, "{log:?}");
    assert_eq!(log[0]["backend"], API_BACKEND, "{log:?}");
}

#[test]
fn an_upgrade_the_upstream_does_not_answer_is_answered_504() {
    let upgrade = ["-H", "Connection: Upgrade", "-H", "Upgrade: websocket"];
    answered_504_in_time(&upgrade, "dialed for the upgrade");
}

#[test]
fn a_504_while_the_upstream_tls_handshake_hangs_says_no_connection_was_made() {
    // The upstream's kernel accepts the TCP connection, but the server is stopped: the
    // ClientHello is never answered, and the connect timeout (10 s) is longer than the
    // response timeout.
    let ca = Ca::new("test CA");
    let t = HttpBed::new(
        &HttpBackend::api(PROBE_HTTP_PORT, "HTTP11", Some(&ca)).yaml(),
        &["--http-response-timeout", "1s"],
    );
    let mut server = t.serve_http();
    server.signal(libc::SIGSTOP).expect("stop serve-http");
    let target = url(API_HOST, PROBE_HTTP_PORT, "/");
    let waited = "still waiting for an upstream connection";
    answered_504_within_3500_ms(&t, &["--http1.1", &target], waited);
    // An upgrade dials a connection of its own: the same is said of it.
    let upgrade = ["-H", "Connection: Upgrade", "-H", "Upgrade: websocket"];
    let response = t.curl(&[&["--http1.1"], &upgrade[..], &[&target]].concat());
    response.assert_status(504);
    let text = response.text();
    assert!(
        text.contains("still waiting for the upstream connection dialed"),
        "{text}"
    );
}

#[test]
fn mcp_backend_waits_past_the_response_timeout() {
    let t = HttpBed::new(
        &HttpBackend::api(PROBE_HTTP_PORT, "MCP", None).yaml(),
        &["--http-response-timeout", "1s"],
    );
    let _server = t.serve_http();
    let response = t.curl(&[
        "--http1.1",
        &url(API_HOST, PROBE_HTTP_PORT, "/delay?ms=2500"),
    ]);
    response.assert_status(200);
    assert_eq!(response.text(), "late\n");
}

#[test]
fn a_response_that_stalls_is_closed_by_the_idle_timeout() {
    // MCP: no response timeout, so only `--idle-timeout` can end a silent exchange.
    let t = HttpBed::new(
        &HttpBackend::api(PROBE_HTTP_PORT, "MCP", None).yaml(),
        &["--idle-timeout", "1s"],
    );
    let _server = t.serve_http();
    let started = Instant::now();
    let response = t.curl(&[
        "--http1.1",
        &url(API_HOST, PROBE_HTTP_PORT, "/delay?ms=6000"),
    ]);
    let took = started.elapsed();
    // curl 52: "Empty reply from server", the connection closed with no response.
    assert_eq!((response.exit, response.code()), (52, 0), "{response:?}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(4000),
        "closed after {took:?} with a 1 s idle timeout"
    );
    let labels = [("backend", "demo/api")];
    let text = t.wait_for_sample(IDLE_CLOSED, &labels, 1.0);
    assert_eq!(sample(&text, IDLE_CLOSED, &labels), Some(1.0), "{text}");
}

#[test]
fn malformed_request_is_answered_400() {
    let t = HttpBed::new(&HttpBackend::api(PLAIN_PORT, "HTTP", None).yaml(), &[]);
    let nginx = Nginx::start(&t.bed.topo.ext, &[Site::plain(PLAIN_PORT)]);
    let target = format!("{API_HOST}:{PLAIN_PORT}");
    let garbage = "GET / HTTP/1.1\r\nHost: api.redirector.test\r\nno colon here\r\n\r\n";
    let reply = t.bed.connect_sending(&target, garbage, &["-4"]);
    assert!(
        reply.reply().starts_with("HTTP/1.1 400"),
        "{:?}\nagent:\n{}",
        reply.json,
        t.agent.logs().join("\n")
    );
    assert_only_the_fence_reached(&t, &nginx, PLAIN_PORT, &[]);
    assert_error_counted(&t, "malformed_request", 1.0);
}

#[test]
fn request_headers_over_64_kib_are_answered_431() {
    let t = HttpBed::new(&HttpBackend::api(PLAIN_PORT, "HTTP", None).yaml(), &[]);
    let nginx = Nginx::start(&t.bed.topo.ext, &[Site::plain(PLAIN_PORT)]);
    // 20 headers of 4000 bytes: 80 kB, each header unremarkable by itself.
    let headers: Vec<String> = (0..20)
        .map(|i| format!("X-Filler-{i}: {}", "f".repeat(4000)))
        .collect();
    let target = url(API_HOST, PLAIN_PORT, "/huge");
    let mut args = vec!["--http1.1"];
    for header in &headers {
        args.extend(["-H", header.as_str()]);
    }
    args.push(&target);
    t.curl(&args).assert_status(431);
    assert_only_the_fence_reached(&t, &nginx, PLAIN_PORT, &[]);
    assert_error_counted(&t, "headers_too_large", 1.0);
}
