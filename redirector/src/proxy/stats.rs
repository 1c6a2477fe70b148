//! Connection counters, exported by the admin endpoint as Prometheus metrics.

use std::{collections::BTreeMap, time::Duration};

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use super::http::metrics::HttpStats;
use crate::tls::HandshakeFailure;

mod by_source;

pub use by_source::BySource;

/// Why a connection was closed without being forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Reached the proxy without a datapath record: not a redirected connect.
    NoRecord,
    /// Plaintext to an address several Backends share while they differ in TLS.
    Ambiguous,
    /// The record names a Backend that no longer exists.
    UnknownBackend,
    /// The Backend's TLS settings cannot be used (missing or bad CA, client certificate).
    TlsConfig,
    /// The TLS handshake with the upstream failed.
    Handshake(HandshakeFailure),
    /// The client's first bytes broke the Backend's rule (TLS towards a TLS-originating
    /// Backend, or the wrong SNI).
    ClientOpening,
    /// The original destination could not be reached.
    UpstreamConnect,
    /// The datapath record could not be read.
    Datapath,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoRecord => "no_record",
            Refusal::Ambiguous => "ambiguous",
            Refusal::UnknownBackend => "unknown_backend",
            Refusal::TlsConfig => "tls_config",
            Refusal::Handshake(_) => "tls_handshake",
            Refusal::ClientOpening => "client_opening",
            Refusal::UpstreamConnect => "upstream_connect",
            Refusal::Datapath => "datapath",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabel {
    backend: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendReason {
    backend: String,
    reason: String,
}

/// Per connection: the namespace of the pod that connected (`""` outside Kubernetes and
/// for processes in no known pod). Never the pod: namespaces are few, pods are not.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendSource {
    backend: String,
    source_namespace: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendReasonSource {
    backend: String,
    reason: String,
    source_namespace: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
enum Direction {
    /// Client to upstream.
    Sent,
    /// Upstream to client.
    Received,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendDirection {
    backend: String,
    direction: Direction,
}

fn connect_buckets() -> Histogram {
    // 0.1 ms .. ~3.3 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

#[derive(Debug)]
pub struct Stats {
    bytes: Family<BackendDirection, Counter>,
    connect_latency: Family<BackendLabel, Histogram, fn() -> Histogram>,
    forwarded: Family<BackendSource, Counter>,
    active: Family<BackendSource, Gauge>,
    /// `active`'s gauges again, for `/backends` and a look-up per connection.
    active_by_source: BySource<Gauge>,
    refused: Family<BackendReasonSource, Counter>,
    handshake_failures: Family<BackendReason, Counter>,
    passthrough: Family<ReasonLabel, Counter>,
    idle_closed: Family<BackendLabel, Counter>,
    pub http: HttpStats,
    kernel_tls_ciphers: Gauge,
    kernel_tls_connections: Counter,
    forwarded_all: Counter,
    refused_all: Counter,
}

impl Stats {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "redirector_bytes",
            "Bytes forwarded, by Backend and direction (sent: client to upstream)",
            self.bytes.clone(),
        );
        registry.register(
            "redirector_upstream_connect_seconds",
            "Time to connect to the original destination (TCP, plus TLS when originated)",
            self.connect_latency.clone(),
        );
        registry.register(
            "redirector_connections_forwarded",
            "Connections forwarded to a Backend, by Backend and source namespace, counted \
             when they end",
            self.forwarded.clone(),
        );
        registry.register(
            "redirector_connections_active",
            "Connections being forwarded now, by Backend and source namespace",
            self.active.clone(),
        );
        registry.register(
            "redirector_connections_refused",
            "Connections closed without forwarding, by Backend (\"-\" if none), reason and \
             source namespace",
            self.refused.clone(),
        );
        registry.register(
            "redirector_tls_handshake_failures",
            "Failed TLS handshakes with Backends, by reason",
            self.handshake_failures.clone(),
        );
        registry.register(
            "redirector_connections_passthrough",
            "Connections passed to the dialed address unchanged because they name no Backend \
             there (the client's own TLS with another SNI), counted when they end",
            self.passthrough.clone(),
        );
        registry.register(
            "redirector_connections_idle_closed",
            "Forwarded connections closed after --idle-timeout without a byte either way \
             (also counted as forwarded)",
            self.idle_closed.clone(),
        );
        registry.register(
            "redirector_kernel_tls_ciphers",
            "TLS 1.3 ciphers whose upstream connections the kernel takes over after the \
             handshake (--kernel-tls); 0: TLS stays in rustls",
            self.kernel_tls_ciphers.clone(),
        );
        registry.register(
            "redirector_kernel_tls_connections",
            "Upstream TLS connections handed to kernel TLS (--kernel-tls)",
            self.kernel_tls_connections.clone(),
        );
        self.http.register(registry);
    }

    /// How many ciphers' connections kernel TLS takes over (from the start-up probe).
    pub fn kernel_tls_ciphers(&self, ciphers: usize) {
        self.kernel_tls_ciphers
            .set(i64::try_from(ciphers).unwrap_or(i64::MAX));
    }

    /// Counts a connection handed to kernel TLS.
    pub fn kernel_tls_connection(&self) {
        self.kernel_tls_connections.inc();
    }

    /// Counts a connection closed for idleness.
    pub fn idle_closed(&self, backend: &str) {
        let label = BackendLabel {
            backend: backend.to_owned(),
        };
        self.idle_closed.get_or_create(&label).inc();
    }

    /// Counts a connection that was passed through, not forwarded for a Backend.
    pub fn passthrough(&self, reason: &'static str) {
        self.passthrough
            .get_or_create(&ReasonLabel { reason })
            .inc();
        self.forwarded_all.inc();
    }

    /// Counts a connection that was forwarded to its end (or to an I/O error), as
    /// opposed to one refused: the two never overlap.
    pub fn forwarded(&self, backend: &str, source_namespace: &str) {
        let label = BackendSource {
            backend: backend.to_owned(),
            source_namespace: source_namespace.to_owned(),
        };
        self.forwarded.get_or_create(&label).inc();
        self.forwarded_all.inc();
    }

    /// Counts `backend`'s connection from `source_namespace` as active until the guard
    /// is dropped.
    pub fn active_guard_from(&self, backend: &str, source_namespace: &str) -> ActiveGuard {
        let gauge = self.active_by_source.get(backend, source_namespace, || {
            let labels = BackendSource {
                backend: backend.to_owned(),
                source_namespace: source_namespace.to_owned(),
            };
            self.active.get_or_create(&labels).clone()
        });
        gauge.inc();
        ActiveGuard(gauge)
    }

    /// `backend` is `None` when the connection could not be tied to a Backend.
    pub fn refused(&self, backend: Option<&str>, reason: Refusal, source_namespace: &str) {
        let backend = backend.unwrap_or("-").to_owned();
        if let Refusal::Handshake(failure) = reason {
            let labels = BackendReason {
                backend: backend.clone(),
                reason: failure.as_str().to_owned(),
            };
            self.handshake_failures.get_or_create(&labels).inc();
        }
        let labels = BackendReasonSource {
            backend,
            reason: reason.as_str().to_owned(),
            source_namespace: source_namespace.to_owned(),
        };
        self.refused.get_or_create(&labels).inc();
        self.refused_all.inc();
    }

    /// Connections of `backend` being forwarded now, by source namespace (those with
    /// none open left out).
    pub fn active(&self, backend: &str) -> BTreeMap<String, i64> {
        let counts = self.active_by_source.each(backend, Gauge::get);
        counts.into_iter().filter(|(_, n)| *n != 0).collect()
    }

    pub fn connected(&self, backend: &str, took: Duration) {
        let label = BackendLabel {
            backend: backend.to_owned(),
        };
        self.connect_latency
            .get_or_create(&label)
            .observe(took.as_secs_f64());
    }

    pub fn transferred(&self, backend: &str, sent: u64, received: u64) {
        for (direction, bytes) in [(Direction::Sent, sent), (Direction::Received, received)] {
            let labels = BackendDirection {
                backend: backend.to_owned(),
                direction,
            };
            self.bytes.get_or_create(&labels).inc_by(bytes);
        }
    }

    /// Totals for the shutdown log line.
    pub fn totals(&self) -> (u64, u64) {
        (self.forwarded_all.get(), self.refused_all.get())
    }
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            bytes: Family::default(),
            connect_latency: Family::new_with_constructor(connect_buckets),
            forwarded: Family::default(),
            active: Family::default(),
            active_by_source: BySource::default(),
            refused: Family::default(),
            handshake_failures: Family::default(),
            passthrough: Family::default(),
            idle_closed: Family::default(),
            http: HttpStats::default(),
            kernel_tls_ciphers: Gauge::default(),
            kernel_tls_connections: Counter::default(),
            forwarded_all: Counter::default(),
            refused_all: Counter::default(),
        }
    }
}

/// Decrements the active-connections gauge when the connection ends.
pub struct ActiveGuard(Gauge);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
