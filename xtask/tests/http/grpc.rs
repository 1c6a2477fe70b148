//! GRPC Backends with grpcio (PyPI) on both sides: the server in the external namespace
//! speaks TLS (the test CA), the client in the pod speaks plaintext (h2 with prior
//! knowledge) to the Backend's name; the proxy originates TLS (ALPN h2). Trailers pass
//! intact, and the proxy's own answers are gRPC statuses the client reads as such:
//! UNAVAILABLE when the server's certificate fails the handshake and when the server is
//! down, DEADLINE_EXCEEDED after the response timeout, PERMISSION_DENIED where the
//! BackendPolicy refuses.

use std::collections::BTreeSet;

use serde_json::Value;
use xtask::netlab::{NODE_EXT_V4, NODE_EXT_V6};

use super::{API_HOST, ERRORS, HttpBackend, HttpBed, OTHER_BACKEND, OTHER_HOST};
use crate::support::{
    python::{GRPC_PEER, PythonServer, run_in_pod},
    tls::Ca,
};

/// grpcio's server, TLS.
const GRPC_PORT: u16 = 50051;
const BACKEND: &str = "demo/grpc";
const CALLS: &str = "redirector_grpc_requests_total";

/// Only the test service's methods: anything else is refused by the proxy.
const POLICY: &str = "apiVersion: policy.redirector.dev/v1alpha1\nkind: BackendPolicy\n\
metadata: {name: grpc-rules, namespace: demo}\nspec:\n  targetRefs:\n    \
- {group: gateway.networking.x-k8s.io, kind: XBackend, name: grpc}\n  rules:\n    \
- paths: [{type: PathPrefix, value: /redirector.test.Echo}]\n";

/// `grpc_peer.py call` to `host` from the pod: one JSON object per case, in order.
fn call(t: &HttpBed, host: &str, cases: &[&str]) -> Vec<Value> {
    let target = format!("{host}:{GRPC_PORT}");
    let mut args = vec![GRPC_PEER, "call", &target];
    args.extend(cases);
    let lines = run_in_pod(&t.bed.topo, &args);
    let results: Vec<Value> = (lines.iter())
        .map(|line| serde_json::from_str(line).expect("grpc client JSON"))
        .collect();
    assert_eq!(results.len(), cases.len(), "{lines:?}");
    results
}

/// What one case's result must hold: its code, and `fields` equal to these values.
#[track_caller]
fn assert_case(result: &Value, code: &str, fields: &[(&str, Value)], t: &HttpBed) {
    let logs = || t.agent.logs().join("\n");
    assert_eq!(result["code"], code, "{result}\nagent:\n{}", logs());
    for (name, value) in fields {
        assert_eq!(&result[*name], value, "{name} of {result}");
    }
}

/// The proxy's own answer: its detail comes as the status message.
#[track_caller]
fn assert_own_answer(result: &Value, code: &str, detail: &str, t: &HttpBed) {
    assert_case(result, code, &[], t);
    let details = result["details"].as_str().unwrap_or_default();
    assert!(
        details.starts_with("redirector: ") && details.contains(detail),
        "{result}"
    );
}

#[test]
fn grpcio_calls_through_a_grpc_backend_and_the_proxy_s_own_answers_are_grpc_statuses() {
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST]);
    let backend = HttpBackend {
        name: "grpc",
        host: API_HOST,
        port: GRPC_PORT,
        protocol: "GRPC",
        ca: Some(&ca),
    };
    // The same server under another name, whose certificate it does not have.
    let wrong_ca = Ca::new("another CA");
    let other = HttpBackend::other(GRPC_PORT, "GRPC", Some(&wrong_ca));
    let yaml = format!("{}---\n{}---\n{POLICY}", backend.yaml(), other.yaml());
    let t = HttpBed::new(&yaml, &["--http-response-timeout", "2s"]);
    let server = PythonServer::start(&t.bed.topo.ext, GRPC_PEER, GRPC_PORT, &leaf);

    let cases = ["unary", "stream", "fail", "big", "slow", "forbidden"];
    let results = call(&t, API_HOST, &cases);
    assert_case(&results[0], "OK", &[("echoed", true.into())], &t);
    let stream = [("messages", 1000.into()), ("in_order", true.into())];
    assert_case(&results[1], "OK", &stream, &t);
    // A non-OK status with its message and custom trailing metadata, text and binary.
    let trailing = serde_json::json!({"x-detail": "kept intact", "x-detail-bin": "0001feff"});
    let fail = [("details", "no such thing".into()), ("trailing", trailing)];
    assert_case(&results[2], "NOT_FOUND", &fail, &t);
    let big = [("bytes", (1024 * 1024).into()), ("echoed", true.into())];
    assert_case(&results[3], "OK", &big, &t);
    // The client's own deadline is 20 s: this one is the proxy's, after 2 s.
    assert_own_answer(&results[4], "DEADLINE_EXCEEDED", "within 2s", &t);
    assert_own_answer(&results[5], "PERMISSION_DENIED", "grpc-rules", &t);

    // Every call the server saw came from the node, over the proxy's TLS, both echoes
    // on one upstream connection; the refused one never reached the server.
    let calls = server.lines_starting("call ");
    assert_eq!(calls.len(), 5, "{calls:?}");
    // grpcio's peer strings: `ipv4:ADDR:PORT`, `ipv6:%5BADDR%5D:PORT`.
    let node = [
        format!("ipv4:{NODE_EXT_V4}:"),
        format!("ipv6:%5B{NODE_EXT_V6}%5D:"),
    ];
    let peers: BTreeSet<&str> = (calls.iter())
        .filter_map(|c| c.strip_prefix("call Echo ")?.split(" from ").nth(1))
        .collect();
    assert!(
        peers.len() == 1 && peers.iter().all(|p| node.iter().any(|n| p.starts_with(n))),
        "{calls:?}"
    );

    // A failed TLS handshake, and then the server gone: the client reads UNAVAILABLE,
    // not UNKNOWN or INTERNAL.
    let refused = call(&t, OTHER_HOST, &["unary"]);
    assert_own_answer(&refused[0], "UNAVAILABLE", "", &t);
    drop(server);
    let down = call(&t, API_HOST, &["unary"]);
    assert_own_answer(&down[0], "UNAVAILABLE", "", &t);
    let other = ("backend", OTHER_BACKEND);
    t.assert_sample(CALLS, &[other, ("code", "UNAVAILABLE")], 1.0);
    t.assert_sample(ERRORS, &[other, ("reason", "upstream_handshake")], 1.0);

    let backend = ("backend", BACKEND);
    for (code, count) in [
        ("OK", 3.0),
        ("NOT_FOUND", 1.0),
        ("DEADLINE_EXCEEDED", 1.0),
        ("PERMISSION_DENIED", 1.0),
        ("UNAVAILABLE", 1.0),
    ] {
        t.assert_sample(CALLS, &[backend, ("code", code)], count);
    }
    t.assert_sample(ERRORS, &[backend, ("reason", "upstream_timeout")], 1.0);
    t.assert_sample(ERRORS, &[backend, ("reason", "policy_denied")], 1.0);
    // The proxy's gRPC answers are HTTP 200s (trailers-only), counted as such.
    let answered = [backend, ("class", "2xx")];
    t.assert_sample(super::REQUESTS, &answered, 7.0);
}
