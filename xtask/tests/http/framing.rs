//! Request framing the proxy must carry across a change of protocol (HTTP/1.x from the
//! client, h2 to nginx): HTTP/1.0 clients, chunked uploads, and `Expect: 100-continue`
//! answered by the proxy so the client does not sit out its own timeout. And to an
//! HTTP/1.1 upstream (`netprobe serve-http`, which reports each request's headers and
//! body size): a GET's chunked body, an upload slower than the response timeout, an
//! upload answered before it was read, cookies sent as separate fields, and transfer
//! codings besides chunked (gzip).

use std::time::{Duration, Instant};

use super::{API_HOST, HttpBackend, HttpBed, PROBE_HTTP_PORT, TLS_PORT, next_served, url};
use crate::support::{
    curl,
    nginx::{Nginx, Site, field},
    tls::Ca,
};

fn h2_upstream_bed() -> (HttpBed, Nginx) {
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST]);
    let t = HttpBed::new(&HttpBackend::api(TLS_PORT, "HTTP", Some(&ca)).yaml(), &[]);
    let nginx = Nginx::start(&t.bed.topo.ext, &[Site::tls(TLS_PORT, API_HOST, &leaf)]);
    (t, nginx)
}

#[test]
fn http10_client_is_answered_over_an_h2_upstream() {
    let (t, nginx) = h2_upstream_bed();
    let response = t.curl(&["-0", &url(API_HOST, TLS_PORT, "/")]);
    response.assert_status(200);
    assert_eq!(response.http_version(), "1", "{:?}", response.json);
    assert!(
        response.text().starts_with("host=api.redirector.test "),
        "{}",
        response.text()
    );
    let requests = nginx.wait_for_requests(1);
    assert_eq!(field(&requests[0], "protocol"), "HTTP/2.0", "{requests:?}");
}

#[test]
fn chunked_upload_with_expect_100_continue_is_streamed_without_waiting() {
    let (t, nginx) = h2_upstream_bed();
    let files = tempfile::tempdir().expect("upload dir");
    let source = files.path().join("chunked");
    let size: u64 = 3 * 1024 * 1024 + 7;
    std::fs::write(&source, vec![b'x'; usize::try_from(size).expect("size")]).expect("file");
    let source = source.display().to_string();
    let target = url(API_HOST, TLS_PORT, "/upload/chunked");
    let started = Instant::now();
    // curl waits up to --expect100-timeout for "100 Continue" before it sends the body
    // anyway: a transfer well under it shows the proxy answered the expectation.
    let args = [
        "--http1.1",
        "--expect100-timeout",
        "20",
        "-H",
        "Transfer-Encoding: chunked",
        "-H",
        "Expect: 100-continue",
        "-T",
        &source,
        &target,
    ];
    let response = curl::spawn_keeping(&t.bed.topo, &args, false).finish();
    response.assert_status(201);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}: no 100 Continue?"
    );
    let stored = std::fs::metadata(nginx.uploaded("chunked")).expect("uploaded file");
    assert_eq!(stored.len(), size);
}

/// A file of `size` bytes for curl to send; the directory goes with the guard.
fn upload_file(size: usize) -> (tempfile::TempDir, String) {
    let files = tempfile::tempdir().expect("upload dir");
    let path = files.path().join("body");
    std::fs::write(&path, vec![b'x'; size]).expect("file");
    (files, path.display().to_string())
}

#[test]
fn a_get_with_a_chunked_body_reaches_the_upstream_with_its_body() {
    // hyper sends a GET with no framing header as bodiless: Transfer-Encoding, stripped
    // as hop-by-hop, must be put back for a body of unknown length.
    let (t, mut server) = HttpBed::http11_probe(&[]);
    let (_files, source) = upload_file(10_000);
    let body = format!("@{source}");
    let target = url(API_HOST, PROBE_HTTP_PORT, "/search");
    let args = ["--http1.1", "-X", "GET", "-H", "Transfer-Encoding: chunked"];
    let response = t.curl(&[&args[..], &["--data-binary", &body, &target]].concat());
    response.assert_status(200);
    let request = next_served(&mut server);
    assert_eq!(request["method"], "GET", "{request}");
    assert_eq!(request["body_bytes"], 10_000, "{request}");
}

#[test]
fn an_upload_slower_than_the_response_timeout_is_not_cut_off() {
    // The response timeout starts once the request body has gone out: serve-http answers
    // only after reading the whole body, 3 s after the first byte at 100 kB/s.
    let (t, mut server) = HttpBed::http11_probe(&["--http-response-timeout", "1s"]);
    let (_files, source) = upload_file(300_000);
    let target = url(API_HOST, PROBE_HTTP_PORT, "/upload");
    let started = Instant::now();
    let args = ["--http1.1", "--limit-rate", "100k", "-H", "Expect:", "-T"];
    let response = t.curl(&[&args[..], &[&source, &target]].concat());
    let took = started.elapsed();
    response.assert_status(200);
    assert!(
        took >= Duration::from_secs(2),
        "the upload took only {took:?}"
    );
    let request = next_served(&mut server);
    assert_eq!(request["body_bytes"], 300_000, "{request}");
}

#[test]
fn an_upload_answered_before_it_was_read_is_still_sent_whole() {
    // serve-http answers /early first and reads the body after: the proxy must go on
    // sending the upload once the response has ended, or the client (which sends its
    // whole body before it reads) and the upstream wait on each other.
    let (t, mut server) = HttpBed::http11_probe(&[]);
    let size = 4 * 1024 * 1024;
    let (_files, source) = upload_file(size);
    let body = format!("@{source}");
    let target = url(API_HOST, PROBE_HTTP_PORT, "/early");
    for _ in 0..2 {
        let args = ["--http1.1", "-H", "Expect:", "--data-binary"];
        let response = t.curl(&[&args[..], &[&body, &target]].concat());
        response.assert_status(200);
        assert_eq!(response.text(), "early\n");
        let request = next_served(&mut server);
        assert_eq!(request["body_bytes"], size, "{request}");
    }
}

#[test]
fn cookies_sent_as_separate_fields_reach_an_http11_upstream_as_one() {
    let (t, mut server) = HttpBed::http11_probe(&[]);
    let target = url(API_HOST, PROBE_HTTP_PORT, "/");
    for client in ["--http1.1", "--http2-prior-knowledge"] {
        let args = [
            client,
            "-H",
            "Cookie: a=1",
            "-H",
            "Cookie: b=2; c=3",
            &target,
        ];
        t.curl(&args).assert_status(200);
        let request = next_served(&mut server);
        // serve-http keeps the last of repeated header lines: one joined field shows whole.
        assert_eq!(
            request["headers"]["cookie"], "a=1; b=2; c=3",
            "{client}: {request}"
        );
    }
}

#[test]
fn a_request_body_with_a_transfer_coding_besides_chunked_is_refused() {
    // Passed on without its Transfer-Encoding, a gzip-coded body would reach the server
    // as plain content: 501, and nothing goes upstream.
    let (t, mut server) = HttpBed::http11_probe(&[]);
    let (_files, source) = upload_file(1_000);
    let body = format!("@{source}");
    let args = ["--http1.1", "-H", "Transfer-Encoding: gzip, chunked"];
    let target = url(API_HOST, PROBE_HTTP_PORT, "/coded");
    let response = t.curl(&[&args[..], &["--data-binary", &body, &target]].concat());
    response.assert_status(501);
    assert!(
        response.text().contains("transfer coding"),
        "{}",
        response.text()
    );
    t.curl(&[&url(API_HOST, PROBE_HTTP_PORT, "/after")])
        .assert_status(200);
    let request = next_served(&mut server);
    assert_eq!(
        request["path"], "/after",
        "the refused request went upstream: {request}"
    );
}

#[test]
fn a_response_transfer_coding_reaches_http11_clients_and_is_not_passed_to_h2_as_plain() {
    let (t, _server) = HttpBed::http11_probe(&[]);
    let target = url(API_HOST, PROBE_HTTP_PORT, "/gzip-coded");
    // --tr-encoding: curl undoes a gzip transfer coding (and only then).
    let response = t.curl(&["--http1.1", "--tr-encoding", &target]);
    response.assert_status(200);
    assert_eq!(response.text(), "hello, gzip-coded");
    let response = t.curl(&["--http2-prior-knowledge", &target]);
    response.assert_status(502);
    assert!(
        response.text().contains("transfer coding"),
        "{}",
        response.text()
    );
}
