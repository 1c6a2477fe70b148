//! What the operator must hear about after a publish, once per change rather than at
//! every DNS refresh:
//! - entries the datapath's Backend map had no room for: connects to those addresses
//!   are not redirected (`redirector_backend_map_unwritten` says how many wait);
//! - ids several Backends hash to: their connections are refused.

use std::collections::{BTreeMap, BTreeSet};

use prometheus_client::metrics::gauge::Gauge;

use crate::{
    datapath::SyncStats,
    table::{BackendId, BackendTable, join},
};

#[derive(Debug, Default)]
pub struct Alerts {
    /// The Backends (or groups) with unwritten entries at the last report.
    short: BTreeSet<BackendId>,
    /// The contested ids at the last report.
    contested: BTreeMap<BackendId, String>,
}

impl Alerts {
    /// Logs when the set of contested ids changes.
    pub fn contested(&mut self, table: &BackendTable) {
        if *table.contested() == self.contested {
            return;
        }
        for (id, claimants) in table.contested() {
            if !self.contested.contains_key(id) {
                tracing::error!(
                    "Backend id {:#x} is claimed by {claimants} (the names hash alike): \
                     connections to their addresses are refused until one is renamed",
                    id.0
                );
            }
        }
        self.contested = table.contested().clone();
    }

    /// Logs when the set of Backends left out of the map changes; sets `gauge` every
    /// time.
    pub fn map_room(&mut self, stats: &SyncStats, table: &BackendTable, gauge: &Gauge) {
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
