//! Connection counters. (Exported as Prometheus metrics by the admin endpoint later;
//! for now logged at shutdown.)

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a connection was closed without being forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Reached the proxy without a datapath record: not a redirected connect.
    NoRecord,
    /// The address is claimed by several Backends.
    Ambiguous,
    /// The record names a Backend that no longer exists.
    UnknownBackend,
    /// The Backend requires TLS origination, which this version does not do.
    TlsNotImplemented,
    /// The original destination could not be reached.
    UpstreamConnect,
    /// The datapath record could not be read.
    Datapath,
}

impl Refusal {
    const ALL: [Refusal; 6] = [
        Refusal::NoRecord,
        Refusal::Ambiguous,
        Refusal::UnknownBackend,
        Refusal::TlsNotImplemented,
        Refusal::UpstreamConnect,
        Refusal::Datapath,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoRecord => "no_record",
            Refusal::Ambiguous => "ambiguous",
            Refusal::UnknownBackend => "unknown_backend",
            Refusal::TlsNotImplemented => "tls_not_implemented",
            Refusal::UpstreamConnect => "upstream_connect",
            Refusal::Datapath => "datapath",
        }
    }
}

#[derive(Debug, Default)]
pub struct Stats {
    forwarded: AtomicU64,
    refused: [AtomicU64; Refusal::ALL.len()],
}

impl Stats {
    pub fn forwarded(&self) {
        self.forwarded.fetch_add(1, Ordering::Relaxed);
    }

    pub fn refused(&self, reason: Refusal) {
        self.refused[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn forwarded_total(&self) -> u64 {
        self.forwarded.load(Ordering::Relaxed)
    }

    pub fn refused_total(&self, reason: Refusal) -> u64 {
        self.refused[reason as usize].load(Ordering::Relaxed)
    }

    /// `no_record=3 ambiguous=0 ...`, for the shutdown log line.
    pub fn refusals_summary(&self) -> String {
        let parts: Vec<String> = Refusal::ALL
            .iter()
            .map(|r| format!("{}={}", r.as_str(), self.refused_total(*r)))
            .collect();
        parts.join(" ")
    }
}
