//! MCP tool filtering with the official MCP Python SDK on both sides: FastMCP servers
//! (streamable HTTP over TLS) in the external namespace, `demo/api` answering with event
//! streams and `demo/other` with JSON bodies, both `protocol: MCP` with TLS originated
//! and one BackendPolicy allowing `search`, `fetch` and `steps` (and setting an API key
//! from a Secret); the SDK's client in the pod speaks plaintext to the Backend names. `tools/list` shows only those tools, a
//! `tools/call` of `delete` is a JSON-RPC error the SDK raises and never reaches the
//! server, and the progress notifications of `steps` reach the client one by one (the
//! server sends the next only once the test has seen the client print the last).

use std::{
    os::unix::net::UnixDatagram,
    path::{Path, PathBuf},
    time::Duration,
};

use serde_json::Value;
use xtask::netlab::{ChildGuard, agent::redirector};

use super::{
    API_BACKEND, API_HOST, ERRORS, HttpBackend, HttpBed, OTHER_BACKEND, OTHER_HOST, PLAIN_PORT,
    TLS_H1_PORT, TLS_PORT,
};
use crate::support::{curl::Response, python::python, tls::Ca};

/// Python clients take a second or two to start; a progress event that does not come
/// within this was held somewhere.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
const STEPS: usize = 3;

const POLICY: &str = r#"apiVersion: policy.redirector.dev/v1alpha1
kind: BackendPolicy
metadata: {name: tools, namespace: demo}
spec:
  targetRefs:
    - {group: gateway.networking.x-k8s.io, kind: XBackend, name: api}
    - {group: gateway.networking.x-k8s.io, kind: XBackend, name: other}
  credentials:
    - header: Authorization
      valueFrom: {secretKeyRef: {name: mcp-key, key: token}}
      format: "Bearer {value}"
  mcp:
    tools: {allow: [search, fetch, steps]}
---
apiVersion: v1
kind: Secret
metadata: {name: mcp-key, namespace: demo}
stringData: {token: sk-mcp}
---
apiVersion: policy.redirector.dev/v1alpha1
kind: BackendPolicy
metadata: {name: tools-on-http, namespace: demo}
spec:
  targetRefs:
    - {group: gateway.networking.x-k8s.io, kind: XBackend, name: plain}
  mcp:
    tools: {allow: [search]}
"#;

fn script(name: &str) -> String {
    format!("{}/tests/support/mcp/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// An SDK server in the external namespace; its certificate and gate in `dir`.
struct Server {
    child: ChildGuard,
    gate: PathBuf,
}

impl Server {
    fn start(t: &HttpBed, dir: &Path, port: u16, json: bool) -> Server {
        let gate = dir.join(format!("gate-{port}"));
        let mut command = t.bed.topo.ext.exec(python());
        command.arg(script("server.py")).arg(port.to_string());
        command.args([dir.join("cert.pem"), dir.join("key.pem"), gate.clone()]);
        if json {
            command.arg("--json");
        }
        let mut child = ChildGuard::spawn("mcp-server", &mut command).expect("MCP server");
        child
            .wait_for_line("listening", STEP_TIMEOUT)
            .expect("MCP server listens");
        Server { child, gate }
    }

    /// Lets `steps` send its next notification.
    fn open_gate(&self) {
        let socket = UnixDatagram::unbound().expect("datagram socket");
        socket.send_to(b"go", &self.gate).expect("gate");
    }

    fn ran_delete(&self) -> bool {
        (self.child.lines(xtask::netlab::Stream::Stdout).iter())
            .any(|line| line.contains("delete called"))
    }
}

/// The SDK client in the pod against `http://host:port/mcp`.
fn client(t: &HttpBed, host: &str, port: u16, steps: usize) -> ChildGuard {
    let url = format!("http://{host}:{port}/mcp");
    let mut command = t
        .bed
        .topo
        .spawn_in_pod(python(), [script("client.py"), url, steps.to_string()]);
    for proxy in ["http_proxy", "https_proxy", "all_proxy"] {
        command.env_remove(proxy).env_remove(proxy.to_uppercase());
    }
    ChildGuard::spawn("mcp-client", &mut command).expect("MCP client")
}

/// The client's next line of `event`.
fn next(client: &mut ChildGuard, event: &str) -> Value {
    let needle = format!("\"event\": \"{event}\"");
    let line = client
        .wait_for_line(&needle, STEP_TIMEOUT)
        .unwrap_or_else(|e| panic!("the MCP client's {event}: {e:#}"));
    serde_json::from_str(&line).expect("client line is JSON")
}

/// What every client sees first: the filtered list, the refused call, an allowed one.
fn assert_listed_refused_called(client: &mut ChildGuard) {
    let tools = next(client, "tools");
    assert_eq!(
        tools["names"],
        serde_json::json!(["fetch", "search", "steps"])
    );
    let refused = next(client, "refused");
    assert_eq!(
        refused["code"], -32602,
        "an error the SDK raised: {refused}"
    );
    assert_eq!(refused["message"], "Unknown tool: delete", "{refused}");
    let called = next(client, "called");
    // The key from the Secret, on the TLS the agent originates: the pod never had it.
    let text = "found redirector (authorization: Bearer sk-mcp)";
    assert_eq!(called["text"], text, "{called}");
}

#[test]
fn mcp_tools_are_filtered_and_refused_and_streams_stay_event_by_event() {
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST, OTHER_HOST]);
    let plain = HttpBackend::plain(PLAIN_PORT, "HTTP");
    let backends = [
        HttpBackend::api(TLS_PORT, "MCP", Some(&ca)).yaml(),
        HttpBackend::other(TLS_H1_PORT, "MCP", Some(&ca)).yaml(),
        plain.yaml(),
        POLICY.to_owned(),
    ];
    let t = HttpBed::new(&backends.join("---\n"), &[]);
    let dir = tempfile::tempdir().expect("server files");
    std::fs::write(dir.path().join("cert.pem"), &leaf.cert_pem).expect("cert");
    std::fs::write(dir.path().join("key.pem"), &leaf.key_pem).expect("key");
    let events = Server::start(&t, dir.path(), TLS_PORT, false);
    let json = Server::start(&t, dir.path(), TLS_H1_PORT, true);

    // Event streams: the list and the refusal, then a call whose progress streams.
    let mut streaming = client(&t, API_HOST, TLS_PORT, STEPS);
    assert_listed_refused_called(&mut streaming);
    for step in 1..=STEPS {
        let progress = next(&mut streaming, "progress");
        assert_eq!(progress["progress"], step as f64, "{progress}");
        if step < STEPS {
            events.open_gate();
        }
    }
    assert_eq!(
        next(&mut streaming, "steps")["text"],
        format!("done {STEPS}")
    );
    next(&mut streaming, "done");

    // JSON bodies: the list read whole, filtered, its length set anew.
    let mut plain_json = client(&t, OTHER_HOST, TLS_H1_PORT, 0);
    assert_listed_refused_called(&mut plain_json);
    next(&mut plain_json, "done");
    assert!(
        !events.ran_delete() && !json.ran_delete(),
        "delete reached a server"
    );

    for backend in [API_BACKEND, OTHER_BACKEND] {
        t.assert_sample(
            ERRORS,
            &[("backend", backend), ("reason", "mcp_tool_denied")],
            1.0,
        );
    }
    let warned = (t.agent)
        .logs()
        .into_iter()
        .find(|l| l.contains("not in spec.mcp.tools.allow"))
        .expect("the refusal is logged");
    assert!(
        warned.contains("source=/") && warned.contains("delete"),
        "{warned}"
    );

    // The access log names each MCP request's method, and the tool of each call.
    let log = t.wait_for_access_log(12);
    let mcp = |line: &Value, key: &str| line["mcp"][key].as_str().unwrap_or("").to_owned();
    let refused: Vec<&Value> = (log.iter())
        .filter(|l| mcp(l, "method") == "tools/call" && mcp(l, "tool") == "delete")
        .collect();
    assert_eq!(refused.len(), 2, "{log:#?}");
    assert!(
        refused
            .iter()
            .all(|l| l["status"] == 200 && l["upstream_protocol"] == "-")
    );
    for (method, tool) in [
        ("initialize", ""),
        ("tools/list", ""),
        ("tools/call", "steps"),
    ] {
        assert!(
            log.iter()
                .any(|l| mcp(l, "method") == method && mcp(l, "tool") == tool),
            "{method} {tool} in {log:#?}"
        );
    }

    for text in [t.agent.logs().join("\n"), format!("{log:?}")] {
        assert!(!text.contains("sk-mcp"), "the key leaked: {text}");
    }

    // What the proxy answers itself, nothing sent upstream: a batch with a refused call
    // (whole), a body too large to judge, a body that is not JSON.
    refused_by_the_proxy(&t, dir.path());
    assert!(
        !events.ran_delete() && !json.ran_delete(),
        "delete reached a server"
    );

    // Tools on a Backend that is not MCP: not accepted, and `check` says so.
    let check = redirector(&["check", &t.bed.backends.path().display().to_string()]);
    let check = check.expect("check");
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("BackendPolicy demo/tools-on-http: spec.mcp: not accepted")
            && stdout.lines().count() == 1,
        "{stdout}"
    );
}

/// POSTs `curl ARGS` to `demo/other`'s `/mcp` as an MCP client would.
fn post(t: &HttpBed, args: &[&str]) -> Response {
    let url = format!("http://{OTHER_HOST}:{TLS_H1_PORT}/mcp");
    let mut full = vec!["-H", "Content-Type: application/json"];
    full.extend(["-H", "Accept: application/json, text/event-stream"]);
    full.extend_from_slice(args);
    full.push(&url);
    t.curl(&full)
}

fn refused_by_the_proxy(t: &HttpBed, dir: &Path) {
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search"}},
        {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete"}}]"#;
    let answer = post(t, &["--data", batch]);
    answer.assert_status(200);
    let answers: Value = serde_json::from_slice(&answer.body).expect("JSON-RPC answers");
    assert_eq!(answers[0]["id"], 1, "{answers}");
    assert_eq!(answers[0]["error"]["code"], -32600, "{answers}");
    assert_eq!(
        answers[1]["error"]["message"], "Unknown tool: delete",
        "{answers}"
    );

    let large = dir.join("large.json");
    let padding = "x".repeat(2 * 1024 * 1024);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"search","arguments":{{"q":"{padding}"}}}}}}"#
    );
    std::fs::write(&large, body).expect("large body");
    let data = format!("@{}", large.display());
    post(t, &["--data-binary", &data]).assert_status(413);

    let malformed = post(t, &["--data", "{\"jsonrpc\": \"2.0\", \"method\": "]);
    malformed.assert_status(400);
    let answer: Value = serde_json::from_slice(&malformed.body).expect("a JSON-RPC error");
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
    // JSON, but not JSON-RPC messages: a batch inside a batch.
    let nested = format!("[{batch}]");
    let answer = post(t, &["--data", &nested]);
    answer.assert_status(400);
    assert!(answer.text().contains("-32600"), "{}", answer.text());

    for (reason, count) in [
        ("mcp_tool_denied", 2.0),
        ("mcp_request_too_large", 1.0),
        ("mcp_malformed", 2.0),
    ] {
        t.assert_sample(
            ERRORS,
            &[("backend", OTHER_BACKEND), ("reason", reason)],
            count,
        );
    }
}
