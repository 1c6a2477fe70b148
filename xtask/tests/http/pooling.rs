//! Upstream connections: pooled and reused across client connections, HTTP/2 streams of
//! many clients multiplexed on one connection, idle ones closed after
//! `--http-pool-idle-timeout`, and one the server closed while idle replaced without the
//! client noticing. A client connection routed by a Backend that changed since (its pool
//! retired) is closed after its next request, so the one after goes the new way.

use std::time::Duration;

use serde_json::Value;
use xtask::netlab::ChildGuard;

use super::{
    API_BACKEND, API_HOST, HttpBackend, HttpBed, OPENED, PROBE_HTTP_PORT, REQUESTS, REUSED,
    TLS_PORT, assert_from_node, next_served, url,
};
use crate::support::{
    curl,
    nginx::{Nginx, Site, field},
    tls::{Ca, sample},
};

/// A bed with one `protocol` Backend originating TLS to nginx on 8443 (HTTP/2 offered),
/// whose server block has `extra` directives.
fn tls_bed(protocol: &str, extra: &'static str, agent_args: &[&str]) -> (HttpBed, Nginx) {
    tls_bed_speaking(protocol, true, extra, agent_args)
}

/// The same, with nginx offering HTTP/2 in ALPN or not (`http2`).
fn tls_bed_speaking(
    protocol: &str,
    http2: bool,
    extra: &'static str,
    agent_args: &[&str],
) -> (HttpBed, Nginx) {
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST]);
    let t = HttpBed::new(
        &HttpBackend::api(TLS_PORT, protocol, Some(&ca)).yaml(),
        agent_args,
    );
    let site = Site {
        extra,
        http2,
        ..Site::tls(TLS_PORT, API_HOST, &leaf)
    };
    let nginx = Nginx::start(&t.bed.topo.ext, &[site]);
    (t, nginx)
}

#[test]
fn idle_upstream_connections_are_reused_across_client_connections() {
    let (t, nginx) = tls_bed("HTTP", "", &[]);
    for i in 0..20 {
        // Each curl run is a new client connection.
        let flag = if i % 2 == 0 {
            "--http1.1"
        } else {
            "--http2-prior-knowledge"
        };
        t.curl(&[flag, &url(API_HOST, TLS_PORT, "/")])
            .assert_status(200);
    }
    let requests = nginx.wait_for_requests(20);
    assert_eq!(requests.len(), 20);
    assert_from_node(&requests);
    let connections = nginx.connections();
    assert!(
        connections.len() <= 2,
        "20 requests came on {} upstream TLS connections: {requests:?}",
        connections.len()
    );
    t.assert_sample(
        REQUESTS,
        &[("backend", API_BACKEND), ("class", "2xx")],
        20.0,
    );
    let text = t.metrics();
    let backend = [("backend", API_BACKEND)];
    let opened = sample(&text, OPENED, &backend).unwrap_or(0.0);
    let reused = sample(&text, REUSED, &backend).unwrap_or(0.0);
    assert!(
        (1.0..=2.0).contains(&opened),
        "{OPENED} {opened}; /metrics:\n{text}"
    );
    assert!(reused >= 18.0, "{REUSED} {reused}; /metrics:\n{text}");
}

/// The span [start, end] in seconds of a logged request.
fn span(request: &Value) -> (f64, f64) {
    let end: f64 = field(request, "msec").parse().expect("msec");
    let took: f64 = field(request, "request_time")
        .parse()
        .expect("request_time");
    (end - took, end)
}

/// `clients` curl runs at once, each downloading a 256 KiB file that nginx sends at
/// 128 KiB/s (2 s), through a `protocol` Backend; returns what nginx logged of them,
/// after checking that every download was complete and that they overlapped at the
/// server.
fn concurrent_downloads(t: &HttpBed, nginx: &Nginx, clients: usize) -> Vec<Value> {
    let before = nginx.requests().len();
    nginx.file("quarter", 256 * 1024);
    let target = url(API_HOST, TLS_PORT, "/paced/quarter");
    let running: Vec<curl::Running> = (0..clients)
        .map(|_| curl::spawn(&t.bed.topo, &["--http1.1", &target]))
        .collect();
    for response in running.into_iter().map(curl::Running::finish) {
        response.assert_status(200);
        assert_eq!(response.body.len(), 256 * 1024);
    }
    let requests = nginx.wait_for_requests(before + clients).split_off(before);
    assert_eq!(requests.len(), clients, "{requests:?}");
    let spans: Vec<(f64, f64)> = requests.iter().map(span).collect();
    let last_start = spans.iter().map(|s| s.0).fold(f64::MIN, f64::max);
    let first_end = spans.iter().map(|s| s.1).fold(f64::MAX, f64::min);
    assert!(
        last_start < first_end,
        "the {clients} requests must have been in flight together at the server: {requests:?}"
    );
    requests
}

#[test]
fn http2_backend_multiplexes_concurrent_clients_on_one_connection() {
    let (t, nginx) = tls_bed("HTTP2", "", &[]);
    let requests = concurrent_downloads(&t, &nginx, 8);
    assert!(
        requests.iter().all(|r| field(r, "protocol") == "HTTP/2.0"),
        "{requests:?}"
    );
    let connections = nginx.connections();
    assert!(
        connections.len() <= 2,
        "8 concurrent client connections took {} upstream connections: {requests:?}",
        connections.len()
    );
}

#[test]
fn http11_backend_opens_a_connection_per_concurrent_request() {
    // The counterpart of the multiplexing test: HTTP/1.1 cannot share a busy connection.
    let (t, nginx) = tls_bed("HTTP11", "", &[]);
    concurrent_downloads(&t, &nginx, 4);
    assert_eq!(nginx.connections().len(), 4, "{:?}", nginx.requests());
}

/// `protocol: HTTP` with TLS offers h2 and HTTP/1.1 in ALPN, and this server picks
/// HTTP/1.1: concurrent first requests dial a connection each, and the next ones reuse
/// them. None is dialed twice: the first requests used to go through the shared pool
/// while the protocol was unknown, and its connections then sat idle while the next
/// requests dialed connections of their own.
#[test]
fn first_requests_to_a_server_that_picks_http11_dial_once_each() {
    let (t, nginx) = tls_bed_speaking("HTTP", false, "", &[]);
    for round in 0..2 {
        let requests = concurrent_downloads(&t, &nginx, 4);
        assert!(
            requests.iter().all(|r| field(r, "protocol") == "HTTP/1.1"),
            "round {round}: {requests:?}"
        );
    }
    let connections = nginx.connections();
    assert_eq!(connections.len(), 4, "{:?}", nginx.requests());
    t.assert_sample(OPENED, &[("backend", API_BACKEND)], 4.0);
}

/// The same offer to a server that picks h2: the connection the first request dialed
/// is handed to the shared pool, which sends that request on it and the next ones too.
#[test]
fn a_first_connection_on_which_the_server_picks_h2_carries_its_request() {
    let (t, nginx) = tls_bed("HTTP", "", &[]);
    for _ in 0..3 {
        t.curl(&["--http1.1", &url(API_HOST, TLS_PORT, "/")])
            .assert_status(200);
    }
    let requests = nginx.wait_for_requests(3);
    assert!(
        requests.iter().all(|r| field(r, "protocol") == "HTTP/2.0"),
        "{requests:?}"
    );
    assert_eq!(nginx.connections().len(), 1, "{requests:?}");
    t.assert_sample(OPENED, &[("backend", API_BACKEND)], 1.0);
}

/// A request with a body goes through the shared pool, whose dial tells that the server
/// picks h2: a request without one, sent while the upload is still going, shares that
/// connection rather than dialing one of its own (which the pool would not use).
#[test]
fn a_dial_of_the_shared_pool_tells_the_next_requests_that_the_server_picks_h2() {
    let (t, nginx) = tls_bed("HTTP", "", &[]);
    let files = tempfile::tempdir().expect("upload dir");
    let source = files.path().join("slow");
    std::fs::write(&source, vec![b'x'; 384 * 1024]).expect("upload file");
    let source = source.display().to_string();
    let upload = url(API_HOST, TLS_PORT, "/upload/slow");
    // 3 s at 128 KiB/s: the response comes only once nginx has read it all.
    let args = ["--http1.1", "--limit-rate", "128K", "-T", &source, &upload];
    let uploading = curl::spawn(&t.bed.topo, &args);
    let backend = [("backend", API_BACKEND)];
    t.wait_for_sample(OPENED, &backend, 1.0);
    t.curl(&["--http1.1", &url(API_HOST, TLS_PORT, "/")])
        .assert_status(200);
    let requests = nginx.wait_for_requests(1);
    assert_eq!(
        requests.len(),
        1,
        "the GET came before the upload's end: {requests:?}"
    );
    uploading.finish().assert_status(201);
    let requests = nginx.wait_for_requests(2);
    assert!(
        requests.iter().all(|r| field(r, "protocol") == "HTTP/2.0"),
        "{requests:?}"
    );
    assert_eq!(nginx.connections().len(), 1, "{requests:?}");
    t.assert_sample(OPENED, &backend, 1.0);
}

/// nginx closes idle connections after 1 s; requests spaced around that keep working.
fn server_closing_idle_connections_is_invisible(protocol: &str) {
    let (t, nginx) = tls_bed(protocol, "keepalive_timeout 1s;", &[]);
    let target = url(API_HOST, TLS_PORT, "/");
    t.curl(&["--http1.1", &target]).assert_status(200);
    // Around nginx's timeout the pooled connection may be closed while the next request
    // is on its way: that request must be sent again on a new connection.
    for gap_ms in [1500, 1000, 990, 1010, 1000, 1005] {
        std::thread::sleep(Duration::from_millis(gap_ms));
        let response = t.curl(&["--http1.1", &target]);
        assert_eq!(
            response.code(),
            200,
            "after {gap_ms} ms idle: {response:?}\nagent:\n{}",
            t.agent.logs().join("\n")
        );
    }
    let requests = nginx.wait_for_requests(7);
    assert_eq!(requests.len(), 7, "{requests:?}");
    assert!(
        nginx.connections().len() >= 2,
        "nginx closed the first connection; the next request needed another: {requests:?}"
    );
    t.assert_sample(REQUESTS, &[("backend", API_BACKEND), ("class", "2xx")], 7.0);
}

#[test]
fn pooled_http11_connection_closed_by_the_server_is_replaced_transparently() {
    server_closing_idle_connections_is_invisible("HTTP11");
}

#[test]
fn pooled_h2_connection_closed_by_the_server_is_replaced_transparently() {
    server_closing_idle_connections_is_invisible("HTTP2");
}

#[test]
fn pool_idle_timeout_closes_idle_upstream_connections() {
    let (t, nginx) = tls_bed("HTTP11", "", &["--http-pool-idle-timeout", "1s"]);
    let target = url(API_HOST, TLS_PORT, "/");
    t.curl(&["--http1.1", &target]).assert_status(200);
    t.curl(&["--http1.1", &target]).assert_status(200);
    std::thread::sleep(Duration::from_millis(2500));
    t.curl(&["--http1.1", &target]).assert_status(200);
    let requests = nginx.wait_for_requests(3);
    let on: Vec<&str> = requests.iter().map(|r| field(r, "connection")).collect();
    assert_eq!(on.len(), 3, "{requests:?}");
    assert_eq!(
        on[0], on[1],
        "back-to-back requests share the pooled connection"
    );
    assert_ne!(
        on[1], on[2],
        "after 2.5 s idle (--http-pool-idle-timeout 1s) a new connection is opened"
    );
    t.assert_sample(OPENED, &[("backend", API_BACKEND)], 2.0);
}

/// `--kernel-tls auto`: upstream connections of HTTP Backends are handed to the kernel
/// where it has TLS and stay in rustls where it has none (here); requests work either
/// way, over HTTP/1.1 and HTTP/2 upstreams.
#[test]
fn kernel_tls_auto_serves_http_backends_either_way() {
    for protocol in ["HTTP11", "HTTP2"] {
        let (t, nginx) = tls_bed(protocol, "", &["--kernel-tls", "auto"]);
        for _ in 0..3 {
            t.curl(&["--http1.1", &url(API_HOST, TLS_PORT, "/")])
                .assert_status(200);
        }
        assert_eq!(nginx.wait_for_requests(3).len(), 3, "{protocol}");
        let text = t.metrics();
        let ciphers = sample(&text, "redirector_kernel_tls_ciphers", &[]);
        let handed = sample(&text, "redirector_kernel_tls_connections_total", &[]);
        match ciphers {
            Some(0.0) => assert_eq!(handed, Some(0.0), "{protocol}: {text}"),
            Some(_) => assert!(handed.is_some_and(|h| h >= 1.0), "{protocol}: {text}"),
            None => panic!("{protocol}: no kernel TLS gauge: {text}"),
        }
    }
}

#[test]
fn a_client_connection_of_a_changed_backend_is_closed_after_its_next_request() {
    let (mut t, mut server) = HttpBed::http11_probe(&[]);
    // Three requests 2 s apart, on one connection for as long as the proxy keeps it.
    let target = url(API_HOST, PROBE_HTTP_PORT, "/");
    let mut args = vec![
        "-sS",
        "-4",
        "--noproxy",
        "*",
        "--max-time",
        "30",
        "--http1.1",
    ];
    args.extend(["--rate", "30/m", "-w", "connects=%{num_connects}\n"]);
    for _ in 0..3 {
        args.extend(["-o", "/dev/null", &target]);
    }
    let mut command = t.bed.topo.spawn_in_pod(curl::curl_bin(), &args);
    let mut client = ChildGuard::spawn("curl --rate", &mut command).expect("start curl");
    next_served(&mut server);
    // The same Backend as MCP: another protocol, so its pool is retired.
    let changed = HttpBackend::api(PROBE_HTTP_PORT, "MCP", None).yaml();
    let dir = t.bed.backends.path();
    std::fs::write(dir.join(".backends.yaml.swp"), changed).expect("write");
    std::fs::rename(dir.join(".backends.yaml.swp"), dir.join("backends.yaml")).expect("rename");
    t.agent
        .wait_for_log("Backend changed")
        .expect("the change applied");
    t.agent
        .wait_for_log("Backends applied")
        .expect("the change applied");
    let done = client.finish(Duration::from_secs(30)).expect("curl");
    let connects: Vec<&str> = (done.stdout.iter())
        .filter_map(|line| line.strip_prefix("connects="))
        .collect();
    // The second request still went on the first connection, which the proxy then
    // closed: the third needed a connection of its own.
    assert_eq!(connects, ["1", "0", "1"], "{done:?}");
}

#[test]
fn responses_without_a_body_leave_the_upstream_connection_to_the_next_request() {
    // HEAD and 304 responses carry a Content-Length but no body: the proxy's own HTTP/1.1
    // codec (`inline/codec.rs`) must neither wait for those bytes nor lend the connection
    // on before the response ends.
    let (t, nginx) = tls_bed("HTTP11", "", &[]);
    nginx.file("a", 1000);
    let path = url(API_HOST, TLS_PORT, "/files/a");
    let got = t.curl(&["--http1.1", &path]);
    assert_eq!(got.assert_status(200).body.len(), 1000);
    let head = t.curl(&["--http1.1", "--head", &path]);
    assert_eq!(
        head.assert_status(200).header("content-length").as_deref(),
        Some("1000")
    );
    // (curl writes the head of a HEAD response where its body would go.)
    let etag = got.header("etag").expect("nginx tags its files");
    let since = format!("If-None-Match: {etag}");
    let not_modified = t.curl(&["--http1.1", "-H", &since, &path]);
    assert!(not_modified.assert_status(304).body.is_empty());
    let again = t.curl(&["--http1.1", &path]);
    assert_eq!(again.assert_status(200).body.len(), 1000);
    let requests = nginx.wait_for_requests(4);
    let methods: Vec<_> = requests.iter().map(|r| field(r, "method")).collect();
    assert_eq!(methods, ["GET", "HEAD", "GET", "GET"]);
    assert_eq!(
        nginx.connections().len(),
        1,
        "each response ended where its head said: {requests:?}"
    );
}
