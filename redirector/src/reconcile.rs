//! The reconciler: the one place where Backends, DNS answers and TLS material become the
//! proxy's [`BackendTable`] and the datapath's Backend map.
//!
//! Inputs arrive as events: a new [`Catalog`] from a source (the directory watcher), or
//! the DNS timer. Each event ends in [`Reconciler::publish`]: a new table is swapped in
//! for new connections (open connections keep the `Arc<Entry>` they started with, so they
//! finish on the old settings) and the map is synced by diff.

mod alerts;
mod dns;
mod policies;
mod rows;
mod statuses;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::Arc,
};

use alerts::Alerts;
pub use dns::DnsSettings;
use dns::{DnsCache, Outcome};
use policies::Policies;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use tokio::{sync::mpsc, task::JoinSet, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{
    backend::{Backend, Catalog, ObjectKey, Problem},
    datapath::{BackendMap, SyncStats},
    kubernetes::status::{ObjectStatus, PolicyStatus},
    proxy::Shared,
    resolver::Resolver,
    status::StatusBoard,
    table::{BackendTable, Entry, Scoping},
    tls::{TlsConfigError, TlsInputs, TlsOrigination},
    virtual_hosts::VirtualHosts,
};

/// At most this many hostnames are resolved at once.
const RESOLVE_CONCURRENCY: usize = 64;

type Origination = Result<Option<Arc<TlsOrigination>>, TlsConfigError>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// Reconciler metrics (global, not per Backend).
#[derive(Debug, Default)]
pub struct ReconcileMetrics {
    reloads: Family<ResultLabel, Counter>,
    resolutions: Family<ResultLabel, Counter>,
    map_entries: Gauge,
    map_unwritten: Gauge,
}

impl ReconcileMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "redirector_config_reloads",
            "Backend configuration loads, by result (ok, problems)",
            self.reloads.clone(),
        );
        registry.register(
            "redirector_dns_resolutions",
            "Hostname resolutions, by result (changed, unchanged, failed)",
            self.resolutions.clone(),
        );
        registry.register(
            "redirector_backend_map_entries",
            "(address, port) entries in the datapath's Backend map",
            self.map_entries.clone(),
        );
        registry.register(
            "redirector_backend_map_unwritten",
            "Entries the datapath's Backend map had no room for (--max-backend-addresses): \
             connects to them are not redirected",
            self.map_unwritten.clone(),
        );
    }
}

pub struct Reconciler {
    map: BackendMap,
    alerts: Alerts,
    shared: Arc<Shared>,
    resolver: Resolver,
    dns: DnsCache,
    /// The last good version of every Backend.
    backends: BTreeMap<ObjectKey, Arc<Backend>>,
    catalog: Catalog,
    originations: HashMap<ObjectKey, (TlsInputs, Origination)>,
    metrics: Arc<ReconcileMetrics>,
    board: Arc<StatusBoard>,
    scoping: Scoping,
    /// XBackend and BackendPolicy status for the Kubernetes status writer
    /// (`--kubernetes` only).
    statuses: Option<statuses::Senders>,
    /// Virtual addresses of Backend hostnames (DNS capture on).
    virtuals: Option<VirtualHosts>,
    policies: Policies,
}

impl Reconciler {
    pub fn new(
        map: BackendMap,
        shared: Arc<Shared>,
        resolver: Resolver,
        dns: DnsSettings,
        metrics: Arc<ReconcileMetrics>,
        board: Arc<StatusBoard>,
        scoping: Scoping,
    ) -> Self {
        Self {
            map,
            alerts: Alerts::default(),
            shared,
            resolver,
            dns: DnsCache::new(dns),
            backends: BTreeMap::new(),
            catalog: Catalog::default(),
            originations: HashMap::new(),
            metrics,
            board,
            scoping,
            statuses: None,
            virtuals: None,
            policies: Policies::default(),
        }
    }

    /// Also give every Backend hostname virtual addresses (DNS capture).
    pub fn with_virtual_hosts(mut self, virtuals: VirtualHosts) -> Self {
        self.virtuals = Some(virtuals);
        self
    }

    /// Also publish every XBackend's status (validation and references) on `sender`,
    /// and every BackendPolicy's on `policies`, for the status writer.
    pub fn with_object_statuses(
        mut self,
        sender: tokio::sync::watch::Sender<Vec<ObjectStatus>>,
        policies: tokio::sync::watch::Sender<Vec<PolicyStatus>>,
    ) -> Self {
        self.statuses = Some(statuses::Senders {
            backends: sender,
            policies,
        });
        self
    }

    /// Takes a new catalog: Backends added, changed and removed; an object that is now
    /// broken keeps its last good version. Resolves new hostnames, then publishes.
    pub async fn apply_catalog(&mut self, mut catalog: Catalog) -> anyhow::Result<SyncStats> {
        let started = Instant::now();
        let mut next: BTreeMap<ObjectKey, Arc<Backend>> = catalog
            .backends
            .iter()
            .map(|b| (b.key.clone(), b.clone()))
            .collect();
        // Once per object: a notice repeats on every load while the object is unchanged.
        let noticed: HashSet<&Problem> = self.catalog.notices.iter().collect();
        for notice in (catalog.notices.iter()).filter(|n| !noticed.contains(n)) {
            tracing::info!("note: {notice}");
        }
        for problem in &catalog.problems {
            tracing::warn!("skipped: {problem}");
            // An object that is now broken, or every Backend of a file that no longer
            // parses at all, keeps its last good version.
            let broken: Vec<ObjectKey> = match problem.xbackend_key() {
                Some(key) => vec![key],
                None => self.origins_in(&problem.file),
            };
            for key in broken {
                if let (false, Some(previous)) = (next.contains_key(&key), self.backends.get(&key))
                {
                    tracing::warn!(backend = %key, "keeping the last good version of this Backend");
                    next.insert(key.clone(), previous.clone());
                    if let Some(origin) = self.catalog.origins.get(&key) {
                        catalog.origins.insert(key, origin.clone());
                    }
                }
            }
        }
        let result = if catalog.problems.is_empty() {
            "ok"
        } else {
            "problems"
        };
        self.metrics
            .reloads
            .get_or_create(&ResultLabel { result })
            .inc();
        for key in self.backends.keys().filter(|key| !next.contains_key(*key)) {
            tracing::info!(backend = %key, "Backend removed");
        }
        for (key, backend) in &next {
            match self.backends.get(key) {
                None => {
                    tracing::info!(backend = %key, hostname = backend.hostname, port = backend.port, "Backend added")
                }
                Some(old) if old != backend => tracing::info!(backend = %key, "Backend changed"),
                Some(_) => {}
            }
        }
        self.backends = next;
        self.policies.apply(&mut catalog, &self.backends);
        self.catalog = catalog;
        self.refresh_originations();
        let hostnames: BTreeSet<String> =
            self.backends.values().map(|b| b.hostname.clone()).collect();
        self.dns.track(&hostnames);
        self.resolve_due().await;
        let synced = self.publish()?;
        tracing::info!(
            backends = self.backends.len(),
            addresses = synced.total,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "Backends applied"
        );
        Ok(synced)
    }

    /// Backends last loaded from `file`.
    fn origins_in(&self, file: &std::path::Path) -> Vec<ObjectKey> {
        let origins = &self.catalog.origins;
        origins
            .iter()
            .filter(|(_, origin)| origin.as_path() == file)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Builds TLS configurations whose inputs changed; keeps the others as they are.
    fn refresh_originations(&mut self) {
        let catalog = &self.catalog;
        self.originations
            .retain(|key, _| self.backends.contains_key(key));
        for (key, backend) in &self.backends {
            let inputs = TlsInputs::of(backend, catalog);
            if self
                .originations
                .get(key)
                .is_some_and(|(known, _)| *known == inputs)
            {
                continue;
            }
            let origination = TlsOrigination::for_backend(backend, catalog);
            if let Err(error) = &origination {
                tracing::warn!(backend = %key, %error, "TLS settings unusable: its connections will be refused");
            }
            self.originations.insert(key.clone(), (inputs, origination));
        }
    }

    /// Resolves every hostname that is due, a bounded number at a time. True if any
    /// address set changed.
    async fn resolve_due(&mut self) -> bool {
        if let Some(fresh) = self.resolver.reread_hosts() {
            tracing::info!("/etc/hosts changed: resolving every Backend hostname again");
            self.resolver = fresh;
            self.dns.refresh_all();
        }
        let due = self.dns.due(Instant::now());
        if due.is_empty() {
            return false;
        }
        let resolver = self.resolver.clone();
        let semaphore = Arc::new(tokio::sync::Semaphore::new(RESOLVE_CONCURRENCY));
        let mut tasks = JoinSet::new();
        for hostname in due {
            let (resolver, semaphore) = (resolver.clone(), semaphore.clone());
            tasks.spawn(async move {
                let _permit = semaphore.acquire().await;
                let answer = resolver.resolve(&hostname).await;
                (hostname, answer)
            });
        }
        let mut changed = false;
        while let Some(joined) = tasks.join_next().await {
            let Ok((hostname, answer)) = joined else {
                continue;
            };
            let failed = answer.as_ref().err().map(ToString::to_string);
            let outcome = self.dns.apply(&hostname, answer, Instant::now());
            let result = match outcome {
                Outcome::Changed => "changed",
                Outcome::Unchanged => "unchanged",
                Outcome::Failed => "failed",
            };
            self.metrics
                .resolutions
                .get_or_create(&ResultLabel { result })
                .inc();
            if let Some(error) = failed {
                tracing::warn!(hostname, %error, "resolution failed; keeping the last good addresses");
            }
            changed |= outcome == Outcome::Changed;
        }
        changed
    }

    /// Swaps in a new table and syncs the datapath map to it.
    fn publish(&mut self) -> anyhow::Result<SyncStats> {
        if let Some(virtuals) = &mut self.virtuals {
            let mut hostnames: BTreeMap<String, (BTreeSet<u64>, Vec<std::net::IpAddr>)> =
                BTreeMap::new();
            for backend in self.backends.values() {
                let (scopes, _) = hostnames
                    .entry(backend.hostname.clone())
                    .or_insert_with(|| (BTreeSet::new(), self.dns.addresses(&backend.hostname)));
                scopes.insert(self.scoping.scope_of(&backend.key.namespace));
            }
            virtuals.track(hostnames);
        }
        let entries = self.backends.values().map(|backend| {
            let addresses = self.dns.addresses(&backend.hostname);
            let origination = match self.originations.get(&backend.key) {
                Some((_, origination)) => origination.clone(),
                None => Ok(None),
            };
            Entry {
                backend: backend.clone(),
                addresses,
                origination,
                policy: self.policies.slot(&backend.key),
            }
        });
        let table = Arc::new(BackendTable::new(
            entries,
            self.scoping,
            self.virtuals.as_ref(),
        ));
        // Table first: a connect redirected by a new map entry must find its Backend.
        self.shared.publish(table.clone());
        let ranges = self.virtuals.as_ref().map(VirtualHosts::ranges);
        let stats = (self.map).sync(table.endpoints(), |at| {
            ranges.is_some_and(|r| r.contains(at))
        })?;
        (self.alerts).map_room(&stats, &table, &self.metrics.map_unwritten);
        self.alerts.contested(&table);
        self.board
            .publish(rows::rows(table, &self.dns, &self.catalog.problems));
        self.publish_statuses();
        let entries = (stats.total + stats.virtual_total).saturating_sub(stats.unwritten);
        (self.metrics.map_entries).set(i64::try_from(entries).unwrap_or(i64::MAX));
        if stats.added + stats.changed + stats.removed + stats.virtual_changed > 0 {
            tracing::info!(
                added = stats.added,
                changed = stats.changed,
                removed = stats.removed,
                total = stats.total,
                virtual_entries = stats.virtual_total,
                "Backend address map updated"
            );
        }
        Ok(stats)
    }

    /// Follows catalog updates and DNS timers until `shutdown`.
    pub async fn run(mut self, mut catalogs: mpsc::Receiver<Catalog>, shutdown: CancellationToken) {
        loop {
            // Also wake at least every --dns-min-ttl to notice a changed /etc/hosts.
            let hosts_check = Instant::now() + self.dns.min_ttl();
            let retire = self.virtuals.as_ref().and_then(VirtualHosts::next_expiry);
            let wakeup = (self.dns.next_wakeup().into_iter())
                .chain(retire)
                .fold(hosts_check, Instant::min);
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.map.take_over() => {
                    if let Err(error) = self.publish() {
                        tracing::error!("syncing the Backend map after the takeover: {error:#}");
                    }
                }
                catalog = catalogs.recv() => {
                    let Some(catalog) = catalog else { return };
                    if let Err(error) = self.apply_catalog(catalog).await {
                        tracing::error!("applying the new Backends: {error:#}");
                    }
                }
                () = tokio::time::sleep_until(wakeup) => {
                    let resolved = self.resolve_due().await;
                    let mut expired = self.dns.expire(Instant::now());
                    if let Some(virtuals) = &mut self.virtuals {
                        expired |= virtuals.expire(Instant::now());
                    }
                    if (resolved || expired)
                        && let Err(error) = self.publish()
                    {
                        tracing::error!("updating the datapath after DNS changes: {error:#}");
                    }
                }
            }
        }
    }
}
