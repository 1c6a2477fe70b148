//! `redirector_dns_queries_total{outcome}` and `redirector_dns_query_seconds{outcome}`.

use std::time::Duration;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Outcome {
    /// Answered by the agent with virtual addresses.
    Answered,
    /// Forwarded to the client's nameserver, and its answer relayed.
    Forwarded,
    /// No answer could be given (no record, nameserver unreachable or silent).
    Failed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Forwarded => "forwarded",
            Outcome::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Debug)]
pub struct DnsMetrics {
    queries: Family<OutcomeLabel, Counter>,
    seconds: Family<OutcomeLabel, Histogram>,
}

impl Default for DnsMetrics {
    fn default() -> Self {
        Self {
            queries: Family::default(),
            // 25 µs .. ~3 s.
            seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(25e-6, 2.5, 14))
            }),
        }
    }
}

impl DnsMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "redirector_dns_queries",
            "Captured DNS queries, by outcome (answered, forwarded, failed)",
            self.queries.clone(),
        );
        registry.register(
            "redirector_dns_query_seconds",
            "Time from a captured query's arrival to its answer leaving the agent, by outcome",
            self.seconds.clone(),
        );
    }

    pub fn record(&self, outcome: Outcome, took: Duration) {
        let label = OutcomeLabel {
            outcome: outcome.as_str(),
        };
        self.queries.get_or_create(&label).inc();
        self.seconds
            .get_or_create(&label)
            .observe(took.as_secs_f64());
    }
}
