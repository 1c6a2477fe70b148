//! Per-request metrics of HTTP Backends.

use std::{
    sync::{Arc, OnceLock},
    time::Duration,
};

use http::StatusCode;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use super::{
    error::HttpError,
    grpc::{CODES, Code},
};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabel {
    backend: String,
}

/// `source_namespace`: the namespace of the pod that sent the request (`""` outside
/// Kubernetes), as on the connection metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendClass {
    backend: String,
    class: &'static str,
    source_namespace: String,
}

/// `code`: a gRPC status name, or [`NO_CODE`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendCode {
    backend: String,
    code: &'static str,
}

/// The `code` of a gRPC call whose response ended without `grpc-status`.
const NO_CODE: &str = "none";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendReason {
    backend: String,
    reason: &'static str,
}

fn duration_buckets() -> Histogram {
    // 0.5 ms .. ~65 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

#[derive(Debug)]
pub struct HttpStats {
    requests: Family<BackendClass, Counter>,
    duration: Family<BackendLabel, Histogram, fn() -> Histogram>,
    opened: Family<BackendLabel, Counter>,
    reused: Family<BackendLabel, Counter>,
    errors: Family<BackendReason, Counter>,
    grpc: Family<BackendCode, Counter>,
}

impl Default for HttpStats {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(duration_buckets),
            opened: Family::default(),
            reused: Family::default(),
            errors: Family::default(),
            grpc: Family::default(),
        }
    }
}

impl HttpStats {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "redirector_http_requests",
            "HTTP requests answered, by Backend, status class (1xx..5xx) and source \
             namespace, the proxy's own answers included",
            self.requests.clone(),
        );
        registry.register(
            "redirector_http_request_duration_seconds",
            "Time from a request's arrival to the end of its response body",
            self.duration.clone(),
        );
        registry.register(
            "redirector_http_upstream_connections_opened",
            "Upstream connections opened for HTTP Backends",
            self.opened.clone(),
        );
        registry.register(
            "redirector_http_upstream_connections_reused",
            "HTTP requests sent on an upstream connection that had carried one before",
            self.reused.clone(),
        );
        registry.register(
            "redirector_http_errors",
            "HTTP requests the proxy answered itself, by reason (misdirected 421, \
             upstream_connect/upstream_handshake/tls_config/upstream_error 502, \
             upstream_timeout 504, malformed_request 400, headers_too_large 431, \
             transfer_coding 501, policy_denied 403, policy_unresolved 503, MCP: \
             mcp_tool_denied 200 with a JSON-RPC error, mcp_request_too_large 413, \
             mcp_malformed 400, mcp_unfilterable 502; to gRPC calls as gRPC statuses, \
             see redirector_grpc_requests)",
            self.errors.clone(),
        );
        registry.register(
            "redirector_grpc_requests",
            "gRPC calls (content-type application/grpc) answered, by Backend and the \
             grpc-status their response ended with (OK, UNAVAILABLE...; none: it ended \
             without one), the proxy's own answers included",
            self.grpc.clone(),
        );
    }

    /// `backend`'s metrics, looked up once (per pool) rather than per request.
    pub fn of(&self, backend: &str) -> Arc<BackendHttp> {
        Arc::new(BackendHttp {
            name: Arc::from(backend),
            duration: self.duration.get_or_create(&label(backend)).clone(),
            opened: self.opened.get_or_create(&label(backend)).clone(),
            reused: self.reused.get_or_create(&label(backend)).clone(),
            grpc: GrpcCalls {
                family: self.grpc.clone(),
                counters: OnceLock::new(),
            },
        })
    }

    /// The request counters of `backend` for requests from `source_namespace`, looked
    /// up once per client connection rather than per request.
    pub fn requests(&self, backend: &str, source_namespace: &str) -> Requests {
        let class = |class| {
            let labels = BackendClass {
                backend: backend.to_owned(),
                class,
                source_namespace: source_namespace.to_owned(),
            };
            self.requests.get_or_create(&labels).clone()
        };
        Requests(CLASSES.map(class))
    }

    /// A request the proxy answered itself (or hyper did: 400, 431), by reason, with
    /// `answered`: the HTTP status it was sent (200 for a gRPC call's trailers-only
    /// answer, else the reason's own).
    pub fn error(
        &self,
        backend: &str,
        kind: HttpError,
        answered: StatusCode,
        source_namespace: &str,
    ) {
        let labels = BackendReason {
            backend: backend.to_owned(),
            reason: kind.as_str(),
        };
        self.errors.get_or_create(&labels).inc();
        // Its status too ([`Requests`] count the upstreams' answers).
        let labels = BackendClass {
            backend: backend.to_owned(),
            class: class(answered),
            source_namespace: source_namespace.to_owned(),
        };
        self.requests.get_or_create(&labels).inc();
    }

    /// A gRPC call the proxy answered itself with `code`.
    pub fn grpc_answered(&self, backend: &str, code: Code) {
        let labels = BackendCode {
            backend: backend.to_owned(),
            code: code.as_str(),
        };
        self.grpc.get_or_create(&labels).inc();
    }
}

/// Requests answered by an upstream, per status class, of one Backend and source
/// namespace: counting is an atomic add.
#[derive(Debug)]
pub struct Requests([Counter; 5]);

impl Requests {
    pub fn answered(&self, status: StatusCode) {
        self.0[class_index(status)].inc();
    }
}

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

fn class(status: StatusCode) -> &'static str {
    CLASSES[class_index(status)]
}

fn class_index(status: StatusCode) -> usize {
    usize::from(status.as_u16() / 100).clamp(1, 5) - 1
}

/// One Backend's HTTP metrics, as handles: counting is an atomic add.
#[derive(Debug)]
pub struct BackendHttp {
    /// `namespace/name`, the label.
    pub name: Arc<str>,
    duration: Histogram,
    opened: Counter,
    reused: Counter,
    grpc: GrpcCalls,
}

impl BackendHttp {
    pub fn finished(&self, took: Duration) {
        self.duration.observe(took.as_secs_f64());
    }

    pub fn opened(&self) {
        self.opened.inc();
    }

    /// A gRPC call's response ended with `code` (`None`: without `grpc-status`).
    pub fn grpc_ended(&self, code: Option<Code>) {
        self.grpc.ended(&self.name, code);
    }

    /// A request went out on a pooled connection (`reused`: one that had carried a
    /// request before).
    pub fn used(&self, reused: bool) {
        if reused {
            self.reused.inc();
        }
    }
}

fn label(backend: &str) -> BackendLabel {
    BackendLabel {
        backend: backend.to_owned(),
    }
}

/// One Backend's gRPC call counters, one per code and [`NO_CODE`], made on its first
/// gRPC call (a Backend that never sees one shows none) and then counted with an add.
#[derive(Debug)]
struct GrpcCalls {
    family: Family<BackendCode, Counter>,
    /// Indexed by code number; the last is [`NO_CODE`].
    counters: OnceLock<Box<[Counter]>>,
}

impl GrpcCalls {
    fn ended(&self, backend: &str, code: Option<Code>) {
        let counters = self.counters.get_or_init(|| {
            let names = CODES.iter().map(|c| c.as_str()).chain([NO_CODE]);
            let counter = |code| {
                let labels = BackendCode {
                    backend: backend.to_owned(),
                    code,
                };
                self.family.get_or_create(&labels).clone()
            };
            names.map(counter).collect()
        });
        let index = code.map_or(CODES.len(), Code::number);
        if let Some(counter) = counters.get(index) {
            counter.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    fn text(stats: &HttpStats) -> String {
        let mut registry = Registry::default();
        stats.register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn grpc_calls_are_counted_by_code_and_only_for_backends_that_had_one() {
        let stats = HttpStats::default();
        let plain = stats.of("demo/plain");
        plain.finished(Duration::from_millis(1));
        assert!(!text(&stats).contains("redirector_grpc_requests_total{"));
        let grpc = stats.of("demo/grpc");
        grpc.grpc_ended(Some(Code::Ok));
        grpc.grpc_ended(Some(Code::Ok));
        grpc.grpc_ended(None);
        stats.grpc_answered("demo/grpc", Code::Unavailable);
        let out = text(&stats);
        for line in [
            r#"redirector_grpc_requests_total{backend="demo/grpc",code="OK"} 2"#,
            r#"redirector_grpc_requests_total{backend="demo/grpc",code="none"} 1"#,
            r#"redirector_grpc_requests_total{backend="demo/grpc",code="UNAVAILABLE"} 1"#,
        ] {
            assert!(out.lines().any(|l| l == line), "{line} in\n{out}");
        }
        assert!(!out.contains(r#"backend="demo/plain",code"#), "{out}");
    }
}
