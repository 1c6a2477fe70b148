//! What must never be buffered whole: WebSocket upgrades (bytes both ways on their own
//! HTTP/1.1 upstream connection), server-sent events of MCP Backends (each event reaches
//! the client as it is sent), and 100 MiB bodies both ways with flat agent memory.

use std::time::{Duration, Instant};

use serde_json::Value;
use xtask::netlab::{ChildGuard, NODE_EXT_V4};

use super::{
    API_BACKEND, API_HOST, HttpBackend, HttpBed, PROBE_HTTP_PORT, TLS_PORT, served_request, url,
};
use crate::support::{
    PROBE, curl,
    nginx::{Nginx, Site, field},
    poll,
    tls::{Ca, sample},
};

/// The `request {json}` lines `netprobe serve-http` printed, once there are `expected`
/// (or after the poll's deadline): the server prints before it answers, but its lines
/// reach the test through a reader thread, which may not have passed them on yet.
fn served(server: &ChildGuard, expected: usize) -> Vec<Value> {
    let read = || {
        (server.lines(xtask::netlab::Stream::Stdout).iter())
            .filter_map(|line| served_request(line))
            .collect::<Vec<_>>()
    };
    poll(read, |requests| requests.len() >= expected)
}

/// `netprobe ws TARGET /ws --send one --send two` from the pod: what it printed, after
/// checking that the upgrade worked, both messages came back and the close was answered.
fn ws_echo(t: &HttpBed, target: &str) -> Value {
    let args = ["ws", target, "/ws", "-4", "--send", "one", "--send", "two"];
    let mut client = ChildGuard::spawn("ws", &mut t.bed.topo.spawn_in_pod(PROBE, args))
        .expect("start ws client");
    let done = client.finish(Duration::from_secs(20)).expect("ws client");
    let line = done.stdout.first().cloned().unwrap_or_default();
    let reply: Value = serde_json::from_str(&line).expect("ws client JSON");
    assert_eq!(
        reply["ok"],
        true,
        "{reply}\nagent:\n{}",
        t.agent.logs().join("\n")
    );
    assert_eq!(reply["status"], 101, "{reply}");
    assert_eq!(reply["accept_ok"], true, "Sec-WebSocket-Accept: {reply}");
    assert_eq!(reply["echo"], serde_json::json!(["one", "two"]), "{reply}");
    assert_eq!(reply["close_answered"], true, "{reply}");
    reply
}

/// A WebSocket through a cleartext `protocol` Backend to `netprobe serve-http`.
fn websocket_echo(protocol: &str) {
    let t = HttpBed::new(
        &HttpBackend::api(PROBE_HTTP_PORT, protocol, None).yaml(),
        &[],
    );
    let server = t.serve_http();
    ws_echo(&t, &format!("{API_HOST}:{PROBE_HTTP_PORT}"));
    let requests = served(&server, 1);
    assert_eq!(requests.len(), 1, "{requests:?}");
    let request = &requests[0];
    assert_eq!(request["version"], "HTTP/1.1", "{request}");
    assert_eq!(request["headers"]["upgrade"], "websocket", "{request}");
    let peer = request["peer"].as_str().unwrap_or_default();
    assert!(peer.starts_with(&format!("{NODE_EXT_V4}:")), "{request}");
    let text_frames = || {
        (server.lines(xtask::netlab::Stream::Stdout).into_iter())
            .filter(|l| l.contains("opcode=1 "))
            .collect::<Vec<_>>()
    };
    let texts = poll(text_frames, |texts| texts.len() >= 2);
    assert_eq!(texts.len(), 2, "{texts:?}");
}

#[test]
fn websocket_upgrade_through_an_http11_backend() {
    websocket_echo("HTTP11");
}

#[test]
fn websocket_upgrade_through_an_http2_backend_gets_its_own_http11_connection() {
    // The Backend says h2 (prior knowledge, cleartext), the server speaks only HTTP/1.1:
    // the upgrade must not go on an h2 connection.
    websocket_echo("HTTP2");
}

/// nginx passing `/ws` upgrades on to `netprobe serve-http` in its namespace.
const WS_PROXY: &str = "location /ws { proxy_pass http://127.0.0.1:9000; \
                        proxy_http_version 1.1; proxy_set_header Upgrade $http_upgrade; \
                        proxy_set_header Connection upgrade; }";

#[test]
fn websocket_upgrade_through_a_tls_http_backend_gets_its_own_http11_connection() {
    // Requests of this Backend go on an h2 connection (negotiated by ALPN); the upgrade
    // needs an HTTP/1.1 one, with TLS originated all the same.
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST]);
    let t = HttpBed::new(&HttpBackend::api(TLS_PORT, "HTTP", Some(&ca)).yaml(), &[]);
    let server = t.serve_http();
    let site = Site {
        extra: WS_PROXY,
        ..Site::tls(TLS_PORT, API_HOST, &leaf)
    };
    let nginx = Nginx::start(&t.bed.topo.ext, &[site]);
    t.curl(&["--http1.1", &url(API_HOST, TLS_PORT, "/")])
        .assert_status(200);
    ws_echo(&t, &format!("{API_HOST}:{TLS_PORT}"));
    let requests = nginx.wait_for_requests(2);
    assert_eq!(requests.len(), 2, "{requests:?}");
    let (plain, upgrade) = (&requests[0], &requests[1]);
    assert_eq!(field(plain, "protocol"), "HTTP/2.0", "{plain}");
    assert_eq!(field(upgrade, "uri"), "/ws", "{upgrade}");
    assert_eq!(field(upgrade, "status"), "101", "{upgrade}");
    assert_eq!(field(upgrade, "protocol"), "HTTP/1.1", "{upgrade}");
    assert_eq!(field(upgrade, "alpn"), "http/1.1", "{upgrade}");
    assert_eq!(field(upgrade, "sni"), API_HOST, "{upgrade}");
    assert_ne!(field(plain, "connection"), field(upgrade, "connection"));
    assert_eq!(
        served(&server, 1).len(),
        1,
        "the upgrade reached the WebSocket server"
    );
}

#[test]
fn mcp_event_stream_reaches_the_client_event_by_event() {
    // The events are 3 s apart, longer than the response timeout, which MCP ignores.
    let t = HttpBed::new(
        &HttpBackend::api(PROBE_HTTP_PORT, "MCP", None).yaml(),
        &["--http-response-timeout", "1s"],
    );
    let server = t.serve_http();
    let target = url(API_HOST, PROBE_HTTP_PORT, "/sse?events=2&gap_ms=3000");
    let started = Instant::now();
    let mut clients: Vec<ChildGuard> = ["--http1.1", "--http2-prior-knowledge"]
        .iter()
        .map(|flag| {
            let headers = ["-H", "Mcp-Session-Id: session-42", "-H", "Last-Event-ID: 7"];
            let mut args = vec![*flag];
            args.extend(headers);
            args.push(&target);
            curl::stream(&t.bed.topo, &args)
        })
        .collect();
    for client in &mut clients {
        let first = client
            .wait_for_line("data: event 1 ", Duration::from_millis(2500))
            .expect("the first event arrives before the stream ends");
        assert!(first.ends_with("last-event-id=7"), "{first}");
        assert!(
            matches!(client.wait_timeout(Duration::ZERO), Ok(None)),
            "the stream is still open when the first event is there"
        );
    }
    let first_seen = started.elapsed();
    assert!(first_seen < Duration::from_millis(2500), "{first_seen:?}");
    for client in &mut clients {
        client
            .wait_for_line("data: event 2 ", Duration::from_secs(10))
            .expect("second event");
        let done = client.finish(Duration::from_secs(10)).expect("curl ends");
        assert!(done.status.success(), "{done:?}");
        let headers = done.stderr.join("\n").to_ascii_lowercase();
        assert!(
            headers.contains("mcp-session-id: session-42"),
            "the server's Mcp-Session-Id reaches the client: {headers}"
        );
        assert!(headers.contains("text/event-stream"), "{headers}");
    }
    let requests = served(&server, 2);
    assert_eq!(requests.len(), 2, "{requests:?}");
    for request in &requests {
        assert_eq!(
            request["headers"]["mcp-session-id"], "session-42",
            "{request}"
        );
        assert_eq!(request["headers"]["last-event-id"], "7", "{request}");
    }
    t.assert_sample(
        super::REQUESTS,
        &[("backend", API_BACKEND), ("class", "2xx")],
        2.0,
    );
}

/// 100 MiB.
const BIG: u64 = 100 * 1024 * 1024;
/// How much the agent's resident memory may grow while moving [`BIG`] bytes.
const MEMORY_SLACK_KIB: u64 = 32 * 1024;

/// A bed whose HTTP Backend originates TLS to nginx (h2 negotiated).
fn big_bed() -> (HttpBed, Nginx) {
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST]);
    let t = HttpBed::new(&HttpBackend::api(TLS_PORT, "HTTP", Some(&ca)).yaml(), &[]);
    let nginx = Nginx::start(&t.bed.topo.ext, &[Site::tls(TLS_PORT, API_HOST, &leaf)]);
    // One small request first: the pool, TLS session and HTTP/2 connection exist before
    // the memory baseline.
    t.curl(&["--http1.1", &url(API_HOST, TLS_PORT, "/")])
        .assert_status(200);
    (t, nginx)
}

/// Fails unless the agent's memory stayed flat since `before` (VmRSS, VmHWM).
#[track_caller]
fn assert_flat_memory(t: &HttpBed, before: (u64, u64), what: &str) {
    let after = t.agent_memory();
    assert!(
        after.1 <= before.1 + MEMORY_SLACK_KIB && after.0 <= before.0 + MEMORY_SLACK_KIB,
        "{what}: agent memory (VmRSS, VmHWM) went from {before:?} KiB to {after:?} KiB"
    );
    eprintln!("{what}: agent memory (VmRSS, VmHWM) {before:?} -> {after:?} KiB");
}

#[test]
fn hundred_mib_download_streams_with_flat_agent_memory() {
    let (t, nginx) = big_bed();
    nginx.file("big", BIG);
    let before = t.agent_memory();
    let started = Instant::now();
    let target = url(API_HOST, TLS_PORT, "/files/big");
    let response = curl::spawn_keeping(&t.bed.topo, &["--http1.1", &target], false).finish();
    response.assert_status(200);
    assert_eq!(
        response.json["size_download"].as_u64(),
        Some(BIG),
        "{response:?}"
    );
    eprintln!("100 MiB download took {:?}", started.elapsed());
    assert_flat_memory(&t, before, "100 MiB download");
    let requests = nginx.wait_for_requests(2);
    let bytes: u64 = field(&requests[1], "bytes_sent").parse().unwrap_or(0);
    assert!(bytes >= BIG, "{:?}", requests[1]);
}

#[test]
fn hundred_mib_upload_streams_with_flat_agent_memory() {
    let (t, nginx) = big_bed();
    let files = tempfile::tempdir().expect("upload dir");
    let source = files.path().join("big");
    std::fs::File::create(&source)
        .and_then(|f| f.set_len(BIG))
        .expect("upload file");
    let before = t.agent_memory();
    let started = Instant::now();
    let target = url(API_HOST, TLS_PORT, "/upload/big");
    let source = source.display().to_string();
    let args = ["--http2-prior-knowledge", "-T", &source, &target];
    let response = curl::spawn_keeping(&t.bed.topo, &args, false).finish();
    response.assert_status(201);
    eprintln!("100 MiB upload took {:?}", started.elapsed());
    assert_flat_memory(&t, before, "100 MiB upload");
    let stored = std::fs::metadata(nginx.uploaded("big")).expect("uploaded file");
    assert_eq!(stored.len(), BIG);
}

#[test]
fn an_upgraded_connection_counts_as_active_until_it_closes() {
    const ACTIVE: &str = "redirector_connections_active";
    let labels = [("backend", API_BACKEND)];
    let (t, _server) = HttpBed::http11_probe(&[]);
    let target = format!("{API_HOST}:{PROBE_HTTP_PORT}");
    let args = [
        "ws",
        &target,
        "/ws",
        "-4",
        "--send",
        "one",
        "--hold-ms",
        "3000",
    ];
    let mut client = ChildGuard::spawn("ws", &mut t.bed.topo.spawn_in_pod(PROBE, args))
        .expect("start ws client");
    // Upgraded, echoed, and held open: hyper's HTTP connection is over by now.
    client
        .wait_for_line("held", Duration::from_secs(20))
        .expect("the WebSocket echoed and is held");
    t.assert_sample(ACTIVE, &labels, 1.0);
    client.finish(Duration::from_secs(20)).expect("ws client");
    let closed = |text: &String| sample(text, ACTIVE, &labels) == Some(0.0);
    let text = crate::support::poll(|| t.metrics(), closed);
    assert_eq!(sample(&text, ACTIVE, &labels), Some(0.0), "{text}");
}
