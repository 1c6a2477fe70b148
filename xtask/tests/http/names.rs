//! Names over addresses: Backends sharing one address and port are told apart by Host /
//! `:authority` (HTTP) or by the client's own SNI; a client doing TLS with a name no
//! Backend there declares goes to the address it dialed, untouched; plaintext bytes are
//! refused where the Backends sharing the address disagree on TLS.

use xtask::netlab::EXT_V4;

use super::{
    API_BACKEND, API_HOST, HttpBackend, HttpBed, OTHER_BACKEND, OTHER_HOST, PASSTHROUGH, REFUSED,
    TLS_PORT, assert_from_node, url, yaml_of,
};
use crate::support::{
    ECHO_BACKEND,
    fixtures::xbackend,
    nginx::{Nginx, Site, field},
    tls::{Ca, sample},
};

/// nginx on 8443 with a server block (and a certificate of its own) per name.
fn two_sites(t: &HttpBed, ca: &Ca) -> Nginx {
    let api = ca.server(&[API_HOST]);
    let other = ca.server(&[OTHER_HOST]);
    Nginx::start(
        &t.bed.topo.ext,
        &[
            Site::tls(TLS_PORT, API_HOST, &api),
            Site::tls(TLS_PORT, OTHER_HOST, &other),
        ],
    )
}

#[test]
fn two_tls_backends_on_one_address_each_get_their_own_sni_host_and_protocol() {
    let ca = Ca::new("test CA");
    let yaml = yaml_of(&[
        HttpBackend::api(TLS_PORT, "HTTP", Some(&ca)),
        HttpBackend::other(TLS_PORT, "HTTP11", Some(&ca)),
    ]);
    let t = HttpBed::new(&yaml, &[]);
    let nginx = two_sites(&t, &ca);
    // Interleaved, so that pooled connections of one name would show under the other.
    let order = [API_HOST, OTHER_HOST, API_HOST, OTHER_HOST];
    for (i, host) in order.iter().enumerate() {
        let flag = if i < 2 {
            "--http1.1"
        } else {
            "--http2-prior-knowledge"
        };
        let response = t.curl(&[flag, &url(host, TLS_PORT, "/")]);
        response.assert_status(200);
        assert!(
            response
                .text()
                .starts_with(&format!("host={host} sni={host} ")),
            "{host}: {}",
            response.text()
        );
    }
    let requests = nginx.wait_for_requests(4);
    assert_eq!(requests.len(), 4, "{requests:?}");
    assert_from_node(&requests);
    for (request, host) in requests.iter().zip(order) {
        assert_eq!(field(request, "sni"), host, "{request}");
        assert_eq!(field(request, "host"), host, "{request}");
        // demo/api is HTTP (h2 negotiated), demo/other HTTP11.
        let protocol = if host == API_HOST {
            "HTTP/2.0"
        } else {
            "HTTP/1.1"
        };
        assert_eq!(field(request, "protocol"), protocol, "{request}");
    }
    for backend in [API_BACKEND, OTHER_BACKEND] {
        t.assert_sample(
            super::REQUESTS,
            &[("backend", backend), ("class", "2xx")],
            2.0,
        );
    }
}

/// curl doing TLS itself, trusting `ca`, to `https://TARGET:8443/`.
fn https(t: &HttpBed, ca: &Ca, host: &str, extra: &[&str]) -> crate::support::curl::Response {
    let files = tempfile::tempdir().expect("ca dir");
    let ca_file = files.path().join("ca.crt");
    std::fs::write(&ca_file, ca.pem()).expect("ca.crt");
    let ca_file = ca_file.display().to_string();
    let target = format!("https://{host}:{TLS_PORT}/");
    let mut args = vec!["--cacert", &ca_file];
    args.extend_from_slice(extra);
    args.push(&target);
    t.curl(&args)
}

#[test]
fn client_tls_with_an_undeclared_sni_passes_through_to_the_dialed_address() {
    let ca = Ca::new("test CA");
    let t = HttpBed::new(&HttpBackend::api(TLS_PORT, "HTTP", Some(&ca)).yaml(), &[]);
    let nginx = two_sites(&t, &ca);
    // other.redirector.test resolves to the Backend's address, but no Backend there
    // declares it: the client's own TLS reaches the server, which sees its SNI.
    let response = https(&t, &ca, OTHER_HOST, &[]);
    response.assert_status(200);
    assert!(
        (response.text()).starts_with("host=other.redirector.test sni=other.redirector.test "),
        "{}",
        response.text()
    );
    // No SNI at all (an IP literal): passed through as well.
    let ip = EXT_V4.to_string();
    let response = https(&t, &ca, &ip, &["-k"]);
    response.assert_status(200);
    let requests = nginx.wait_for_requests(2);
    assert_eq!(requests.len(), 2, "{requests:?}");
    // Still through the proxy: the datapath redirected the connects.
    assert_from_node(&requests);
    assert_eq!(field(&requests[0], "sni"), OTHER_HOST);
    assert!(
        ["", "-"].contains(&field(&requests[1], "sni")),
        "{:?}",
        requests[1]
    );
    t.assert_sample(PASSTHROUGH, &[("reason", "undeclared_sni")], 2.0);
    let text = t.metrics();
    assert_eq!(
        sample(&text, super::REQUESTS, &[("backend", API_BACKEND)]),
        None
    );
    // Bytes, not requests, in the access log: a connection line for each.
    let log = t.wait_for_access_log(2);
    assert_eq!(log.len(), 2, "{log:?}");
    for line in &log {
        assert_eq!(line["event"], "connection", "{line}");
        assert_eq!(line["outcome"], "passthrough", "{line}");
        assert_eq!(line["reason"], "undeclared_sni", "{line}");
        assert_eq!(line["backend"], "-", "{line}");
        assert_eq!(line["port"], TLS_PORT, "{line}");
    }
}

#[test]
fn client_tls_with_the_sni_of_an_originating_http_backend_is_refused() {
    let ca = Ca::new("test CA");
    let t = HttpBed::new(&HttpBackend::api(TLS_PORT, "HTTP", Some(&ca)).yaml(), &[]);
    let nginx = two_sites(&t, &ca);
    let response = https(&t, &ca, API_HOST, &[]);
    assert_ne!(response.exit, 0, "{response:?}");
    t.assert_sample(
        REFUSED,
        &[("backend", API_BACKEND), ("reason", "client_opening")],
        1.0,
    );
    assert!(nginx.requests().is_empty(), "{:?}", nginx.requests());
    let log = t.wait_for_access_log(1);
    assert_eq!(log.len(), 1, "{log:?}");
    let line = &log[0];
    assert_eq!(line["event"], "connection", "{line}");
    assert_eq!(line["outcome"], "refused", "{line}");
    assert_eq!(line["reason"], "client_opening", "{line}");
    assert_eq!(line["backend"], API_BACKEND, "{line}");
    assert_eq!(line["source"], serde_json::json!({"cgroup": "/"}), "{line}");
}

#[test]
fn plaintext_bytes_to_an_address_whose_backends_disagree_on_tls_are_refused_as_ambiguous() {
    let ca = Ca::new("test CA");
    let yaml = yaml_of(&[
        HttpBackend::api(TLS_PORT, "TCP", Some(&ca)),
        HttpBackend::other(TLS_PORT, "TCP", None),
    ]);
    let mut t = HttpBed::new(&yaml, &[]);
    // Nothing listens on that port: the opening is judged before anything is dialed, so
    // the refusal is `ambiguous` whether or not the upstream is up.
    let reply = t.bed.connect(&format!("{API_HOST}:{TLS_PORT}"), &["-4"]);
    assert!(
        !reply.ok() || reply.reply().is_empty(),
        "refused, not answered: {:?}",
        reply.json
    );
    t.assert_sample(REFUSED, &[("reason", "ambiguous")], 1.0);
    let line = t
        .agent
        .wait_for_log("ambiguous")
        .expect("the refusal is logged");
    for backend in [API_BACKEND, OTHER_BACKEND] {
        assert!(
            line.contains(backend),
            "the log line must name {backend}: {line}"
        );
    }
}

#[test]
fn plaintext_bytes_to_an_address_shared_by_backends_without_tls_pass_unchanged() {
    // Both on 8080, where the bed's `netprobe serve` answers.
    let yaml = format!(
        "{ECHO_BACKEND}---\n{}  protocol: TCP\n",
        xbackend("demo", "other", OTHER_HOST, 8080)
    );
    let t = HttpBed::new(&yaml, &[]);
    for target in ["echo.redirector.test:8080", "other.redirector.test:8080"] {
        assert!(t.bed.via_proxy(target), "{target} goes through the proxy");
    }
}

#[test]
fn client_tls_on_an_address_whose_backends_disagree_on_tls_is_judged_by_its_sni() {
    let ca = Ca::new("test CA");
    let yaml = yaml_of(&[
        HttpBackend::api(TLS_PORT, "TCP", Some(&ca)),
        HttpBackend::other(TLS_PORT, "TCP", None),
    ]);
    let t = HttpBed::new(&yaml, &[]);
    let nginx = two_sites(&t, &ca);
    // The SNI of the Backend without TLS origination: its bytes, forwarded unchanged.
    https(&t, &ca, OTHER_HOST, &[]).assert_status(200);
    // The SNI of the TLS-originating Backend: refused (the proxy does that TLS).
    let refused = https(&t, &ca, API_HOST, &[]);
    assert_eq!(refused.code(), 0, "{refused:?}");
    let requests = nginx.wait_for_requests(1);
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(field(&requests[0], "sni"), OTHER_HOST);
    assert_from_node(&requests);
    t.assert_sample(REFUSED, &[("reason", "client_opening")], 1.0);
}
