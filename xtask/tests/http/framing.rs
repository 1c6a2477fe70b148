//! Request framing the proxy must carry across a change of protocol (HTTP/1.x from the
//! client, h2 to nginx): HTTP/1.0 clients, chunked uploads, and `Expect: 100-continue`
//! answered by the proxy so the client does not sit out its own timeout.

use std::time::{Duration, Instant};

use super::{API_HOST, HttpBackend, HttpBed, TLS_PORT, url};
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
