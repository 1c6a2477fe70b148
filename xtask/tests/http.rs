//! HTTP-aware forwarding, end to end: curl in the pod speaking HTTP/1.1 or HTTP/2 (prior
//! knowledge) in plaintext, the agent in the node speaking HTTP to the server as the
//! Backend's `spec.protocol` says (TLS originated where `spec.tls` says), and nginx (or
//! `netprobe serve-http` for event streams, late answers and WebSockets) in the external
//! namespace, whose access log tells which connection, SNI, ALPN, Host and HTTP version
//! every request arrived with.
//!
//! Ports of the external server: 8443 nginx TLS (h2 and http/1.1), 8444 and 8447 nginx
//! TLS (http/1.1 only), 8445 `netprobe serve-h2` (TLS, h2 only), 8081 nginx cleartext
//! HTTP/1.1, 8082 nginx cleartext HTTP/2 (prior knowledge), 9000 `netprobe serve-http`,
//! 50051 grpcio (TLS) and 8765 `websockets` (TLS), both from PyPI (`support/python.rs`).
//! (8080 is the `netprobe serve` of every bed.)

mod support;

#[path = "http/errors.rs"]
mod errors;
#[path = "http/framing.rs"]
mod framing;
#[path = "http/grpc.rs"]
mod grpc;
#[path = "http/h2c.rs"]
mod h2c;
#[path = "http/mcp.rs"]
mod mcp;
#[path = "http/names.rs"]
mod names;
#[path = "http/policy.rs"]
mod policy;
#[path = "http/pooling.rs"]
mod pooling;
#[path = "http/protocols.rs"]
mod protocols;
#[path = "http/streams.rs"]
mod streams;
#[path = "http/wss.rs"]
mod wss;

use serde_json::Value;
use support::{
    Bed, PROBE,
    curl::{self, Response},
    fixtures::xbackend,
    tls::{Ca, metrics, sample, wait_for_sample},
};
use xtask::netlab::{ChildGuard, NODE_EXT_V4, agent::Agent, probe::PROBE_TIMEOUT};

const API_HOST: &str = "api.redirector.test";
const OTHER_HOST: &str = "other.redirector.test";
const API_BACKEND: &str = "demo/api";
const OTHER_BACKEND: &str = "demo/other";

/// nginx, TLS, HTTP/2 and HTTP/1.1 offered by ALPN.
const TLS_PORT: u16 = 8443;
/// nginx, TLS, HTTP/1.1 only.
const TLS_H1_PORT: u16 = 8444;
/// nginx, cleartext HTTP/1.1.
const PLAIN_PORT: u16 = 8081;
/// nginx, cleartext HTTP/2 with prior knowledge.
const H2C_PORT: u16 = 8082;
/// `netprobe serve-http`.
const PROBE_HTTP_PORT: u16 = 9000;

const REQUESTS: &str = "redirector_http_requests_total";
const ERRORS: &str = "redirector_http_errors_total";
const OPENED: &str = "redirector_http_upstream_connections_opened_total";
const REUSED: &str = "redirector_http_upstream_connections_reused_total";
const PASSTHROUGH: &str = "redirector_connections_passthrough_total";
const REFUSED: &str = "redirector_connections_refused_total";

/// An XBackend `demo/{name}` for `host:port` with `spec.protocol`, originating TLS
/// (`ServerOnly`, SNI and verified name `host`, CA from ConfigMap `{name}-ca`) if `ca`.
struct HttpBackend<'a> {
    name: &'a str,
    host: &'a str,
    port: u16,
    protocol: &'a str,
    ca: Option<&'a Ca>,
}

impl<'a> HttpBackend<'a> {
    /// `demo/api`, `api.redirector.test:port`.
    fn api(port: u16, protocol: &'a str, ca: Option<&'a Ca>) -> Self {
        HttpBackend {
            name: "api",
            host: API_HOST,
            port,
            protocol,
            ca,
        }
    }

    /// `demo/other`, `other.redirector.test:port`.
    fn other(port: u16, protocol: &'a str, ca: Option<&'a Ca>) -> Self {
        HttpBackend {
            name: "other",
            host: OTHER_HOST,
            port,
            protocol,
            ca,
        }
    }

    /// `demo/plain`, `echo.redirector.test:port`, no TLS.
    fn plain(port: u16, protocol: &'a str) -> Self {
        HttpBackend {
            name: "plain",
            host: "echo.redirector.test",
            port,
            protocol,
            ca: None,
        }
    }

    fn yaml(&self) -> String {
        let mut out = xbackend("demo", self.name, self.host, u32::from(self.port));
        if self.protocol == "HTTP2" && self.ca.is_none() {
            // Cleartext HTTP2 is valid only in the Gateway API v1.6 shape (upstream's
            // newest requires TLS for HTTP2 and calls cleartext h2 H2C); v1.6 objects
            // keep v1.6's rules, so these Backends are written the v1.6 way.
            let newest = format!("port: {{number: {}}}", self.port);
            out = out.replace(&newest, &format!("port: {{port: {}}}", self.port));
        }
        out.push_str(&format!("  protocol: {}\n", self.protocol));
        if let Some(ca) = self.ca {
            out.push_str(&format!(
                "  tls:\n    mode: ServerOnly\n    validation:\n      hostname: {}\n      \
                 caCertificateRefs:\n        - {{group: \"\", kind: ConfigMap, name: {}-ca}}\n\
                 ---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {}-ca, namespace: demo}}\n\
                 data:\n  ca.crt: |\n",
                self.host, self.name, self.name
            ));
            for line in ca.pem().lines() {
                out.push_str(&format!("    {line}\n"));
            }
        }
        out
    }
}

/// Several Backends in one file.
fn yaml_of(backends: &[HttpBackend<'_>]) -> String {
    let docs: Vec<String> = backends.iter().map(HttpBackend::yaml).collect();
    docs.join("---\n")
}

/// The agent's access log lives here; dropped after the agent.
/// Field order is drop order: the agent first, the namespaces last.
struct HttpBed {
    agent: Agent,
    bed: Bed,
    logs: tempfile::TempDir,
}

impl HttpBed {
    /// A bed with `yaml` as its Backends and the agent running with `--access-log` and
    /// `extra` arguments.
    fn new(yaml: &str, extra: &[&str]) -> HttpBed {
        let bed = Bed::new(yaml);
        let logs = tempfile::tempdir().expect("log dir");
        let mut config = bed.config();
        let access_log = logs.path().join("access.log").display().to_string();
        config.extra_args = vec!["--access-log".to_owned(), access_log];
        config
            .extra_args
            .extend(extra.iter().map(|a| (*a).to_owned()));
        let agent = Agent::start(&bed.topo, &config).expect("agent");
        HttpBed { agent, bed, logs }
    }

    /// `curl ARGS` in the pod.
    fn curl(&self, args: &[&str]) -> Response {
        curl::curl(&self.bed.topo, args)
    }

    fn metrics(&self) -> String {
        metrics(&self.bed.topo.node)
    }

    /// Polls `/metrics` until `name{labels}` reaches `at_least`; returns the text.
    fn wait_for_sample(&self, name: &str, labels: &[(&str, &str)], at_least: f64) -> String {
        wait_for_sample(&self.bed.topo.node, name, labels, at_least)
    }

    /// `name{labels}` once it has reached `expected` (waiting up to 5 s for it), or the
    /// failure with the whole `/metrics` text.
    #[track_caller]
    fn assert_sample(&self, name: &str, labels: &[(&str, &str)], expected: f64) {
        let text = self.wait_for_sample(name, labels, expected);
        assert_eq!(
            sample(&text, name, labels),
            Some(expected),
            "{name}{labels:?}; /metrics:\n{text}"
        );
    }

    /// The agent's access log: one JSON object per request.
    fn access_log(&self) -> Vec<Value> {
        let path = self.logs.path().join("access.log");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        text.lines()
            .map(|line| serde_json::from_str(line).expect("access log line is JSON"))
            .collect()
    }

    /// The access log once it has `lines` lines (its writer is a task of its own, so a
    /// line may land just after the response), or as it is after 5 s.
    fn wait_for_access_log(&self, lines: usize) -> Vec<Value> {
        support::poll(|| self.access_log(), |log| log.len() >= lines)
    }

    /// `netprobe serve-http [::]:9000` in the external namespace.
    /// An HTTP11 Backend to `netprobe serve-http` on [`PROBE_HTTP_PORT`], with the agent
    /// run with `extra`, and the server.
    fn http11_probe(extra: &[&str]) -> (HttpBed, ChildGuard) {
        let t = HttpBed::new(
            &HttpBackend::api(PROBE_HTTP_PORT, "HTTP11", None).yaml(),
            extra,
        );
        let server = t.serve_http();
        (t, server)
    }

    fn serve_http(&self) -> ChildGuard {
        let mut command = self.bed.topo.ext.exec(PROBE);
        command.args(["serve-http", &format!("[::]:{PROBE_HTTP_PORT}")]);
        let mut child = ChildGuard::spawn("serve-http", &mut command).expect("serve-http");
        child
            .wait_for_line("listening", PROBE_TIMEOUT)
            .expect("serve-http listens");
        child
    }

    /// The agent's pid (the `redirector run` process of this bed's bpffs).
    fn agent_pid(&self) -> u32 {
        let pins = self.bed.pin_dir().display().to_string();
        let entries = std::fs::read_dir("/proc").expect("/proc");
        let pids: Vec<u32> = entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim() == "redirector")
            })
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                    cmdline.split(|b| *b == 0).any(|arg| arg == pins.as_bytes())
                })
            })
            .collect();
        assert_eq!(pids.len(), 1, "redirector processes using {pins}: {pids:?}");
        pids[0]
    }

    /// The agent's (VmRSS, VmHWM) in KiB.
    fn agent_memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.agent_pid()))
            .expect("agent status");
        let kib = |key: &str| {
            (status.lines())
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("{key} in {status}"))
        };
        (kib("VmRSS:"), kib("VmHWM:"))
    }
}

/// `http://HOST:PORT/PATH`.
/// The next `request {json}` line `netprobe serve-http` prints (before it answers).
fn next_served(server: &mut ChildGuard) -> Value {
    let line = server
        .wait_for_line("request ", PROBE_TIMEOUT)
        .expect("serve-http got a request");
    served_request(&line).expect("a request line")
}

/// The request a `request {json}` line of `netprobe serve-http` describes.
fn served_request(line: &str) -> Option<Value> {
    let json = line.strip_prefix("request ")?;
    Some(serde_json::from_str(json).expect("request line is JSON"))
}

fn url(host: &str, port: u16, path: &str) -> String {
    format!("http://{host}:{port}{path}")
}

/// Every request the server logged came from the node (the proxy), never the pod.
#[track_caller]
fn assert_from_node(requests: &[Value]) {
    for request in requests {
        assert_eq!(
            support::nginx::field(request, "remote"),
            NODE_EXT_V4.to_string(),
            "{request}"
        );
    }
}
