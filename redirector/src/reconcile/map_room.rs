//! Entries the datapath's Backend map had no room for: connects to those addresses are
//! not redirected, so the operator is told which Backends lose out, once per change
//! rather than at every DNS refresh, and `redirector_backend_map_unwritten` says how
//! many entries wait.

use std::collections::BTreeSet;

use prometheus_client::metrics::gauge::Gauge;

use crate::{
    datapath::SyncStats,
    table::{BackendId, BackendTable, join},
};

#[derive(Debug, Default)]
pub struct MapRoom {
    /// The Backends (or groups) with unwritten entries at the last report.
    short: BTreeSet<BackendId>,
}

impl MapRoom {
    /// Logs when the set of Backends left out changes; sets `gauge` every time.
    pub fn report(&mut self, stats: &SyncStats, table: &BackendTable, gauge: &Gauge) {
        gauge.set(i64::try_from(stats.unwritten).unwrap_or(i64::MAX));
        if stats.unwritten_backends == self.short {
            return;
        }
        self.short = stats.unwritten_backends.clone();
        if self.short.is_empty() {
            tracing::info!("the Backend map has room again: every entry is written");
            return;
        }
        let owners: Vec<String> = self.short.iter().map(|id| owner(table, *id)).collect();
        tracing::error!(
            unwritten = stats.unwritten,
            "the datapath's Backend map is full: {} (address, port) entries were not \
             written, so connects to them are not redirected (they go direct, without TLS \
             origination), for {}. Raise --max-backend-addresses (a restart with \
             `redirector uninstall` first: the map is pinned) or remove Backends",
            stats.unwritten,
            owners.join("; ")
        );
    }
}

/// The Backends an id stands for, for the log.
fn owner(table: &BackendTable, id: BackendId) -> String {
    if let Ok(candidates) = table.lookup(id) {
        return join(&candidates);
    }
    match table.passthrough(id) {
        Some(host) => format!("the undeclared ports of {}", host.hostname),
        None => format!("id {}", id.0),
    }
}
