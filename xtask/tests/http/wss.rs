//! WSS Backends with `websockets` (PyPI) on both sides: the client in the pod opens
//! `ws://` (plaintext HTTP/1.1 Upgrade) to the Backend's name, the proxy carries it over
//! the TLS connection it originates (ALPN http/1.1) to the server in the external
//! namespace, and frames pass unbuffered both ways: each echo goes out only after the
//! previous one came back, so a frame held anywhere would stall the exchange.

use serde_json::Value;

use super::{API_HOST, HttpBackend, HttpBed, REQUESTS};
use crate::support::{
    poll,
    python::{PythonServer, WS_PEER, run_in_pod},
    tls::Ca,
};

/// The websockets server, TLS.
const WSS_PORT: u16 = 8765;
const ECHOES: u32 = 100;

#[test]
fn websockets_client_over_ws_reaches_a_tls_server_through_a_wss_backend() {
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST]);
    let backend = HttpBackend {
        name: "wss",
        host: API_HOST,
        port: WSS_PORT,
        protocol: "WSS",
        ca: Some(&ca),
    };
    let t = HttpBed::new(&backend.yaml(), &[]);
    let server = PythonServer::start(&t.bed.topo.ext, WS_PEER, WSS_PORT, &leaf);

    let url = format!("ws://{API_HOST}:{WSS_PORT}/echo");
    let lines = run_in_pod(&t.bed.topo, &[WS_PEER, "echo", &url, &ECHOES.to_string()]);
    let line = lines.first().cloned().unwrap_or_default();
    let result: Value = serde_json::from_str(&line).expect("ws client JSON");
    let logs = || t.agent.logs().join("\n");
    assert_eq!(result["echoed"], ECHOES, "{result}\nagent:\n{}", logs());
    assert_eq!(result["mismatched"], 0, "{result}");
    assert_eq!(result["big_bytes"], 1024 * 1024, "{result}");
    assert_eq!(result["big_echoed"], true, "{result}");
    eprintln!(
        "wss: {ECHOES} echoes in {} ms, 1 MiB echoed in {} ms",
        result["echo_ms"], result["big_ms"]
    );

    // The server saw one connection, over TLS with ALPN http/1.1, for the Backend's
    // name and the path the client asked for.
    let read = || server.lines_starting("connection ");
    let connections = poll(read, |lines| !lines.is_empty());
    assert_eq!(connections.len(), 1, "{connections:?}");
    let json = connections[0].trim_start_matches("connection ");
    let seen: Value = serde_json::from_str(json).expect("connection JSON");
    assert_eq!(seen["tls"], true, "{seen}");
    assert_eq!(seen["alpn"], "http/1.1", "{seen}");
    assert_eq!(seen["path"], "/echo", "{seen}");
    let host = seen["host"].as_str().unwrap_or_default();
    assert!(host.starts_with(API_HOST), "{seen}");

    // The upgrade's 101 is the one request counted.
    let switched = [("backend", "demo/wss"), ("class", "1xx")];
    t.assert_sample(REQUESTS, &switched, 1.0);
}
