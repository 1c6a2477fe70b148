//! The BackendTable: which Backend owns which (address, port), as the proxy and the
//! datapath both need to see it.
//!
//! The datapath stores a `BackendId` per address; the proxy maps the id in a connection
//! record back to the Backend, or to the Backends that share that address (a CDN serves
//! many names from one address: the proxy then decides by the name the client sends).
//! Ids are a keyed hash of `namespace/name` (see `ids`), so they stay the same across
//! agent restarts and records written before a restart still name the right Backend.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    hash::Hasher,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

use redirector_common::{BackendKey, CLUSTER_SCOPE, PASSTHROUGH_BIT, POD_TREE};

use crate::{
    backend::{Backend, ObjectKey},
    backend_policy::PolicySlot,
    datapath::endpoint,
    ids::IdHasher,
    tls::{TlsConfigError, TlsOrigination},
    virtual_hosts::{VirtualHost, VirtualHosts},
};

/// Stable id of a Backend, or of a group of Backends sharing an address, in the
/// datapath.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendId(pub u64);

impl BackendId {
    pub fn of(key: &ObjectKey) -> BackendId {
        let mut hasher = IdHasher::new();
        hasher.write(key.namespace.as_bytes());
        hasher.write(b"/");
        hasher.write(key.name.as_bytes());
        // 0 is never written: a zeroed record names nothing. The top bit marks
        // passthroughs.
        BackendId((hasher.finish() & !PASSTHROUGH_BIT).max(1))
    }

    /// The id of a virtual host's passthrough (its undeclared ports).
    fn passthrough(hostname: &str) -> BackendId {
        let mut hasher = IdHasher::new();
        hasher.write(b"passthrough:");
        hasher.write(hostname.as_bytes());
        BackendId(hasher.finish() | PASSTHROUGH_BIT)
    }

    pub fn is_passthrough(self) -> bool {
        self.0 & PASSTHROUGH_BIT != 0
    }

    /// The id of the Backends that share one (address, port): derived from their names,
    /// so it is the same after a restart, and never a single Backend's id (the prefix
    /// differs).
    fn of_group<'a>(keys: impl IntoIterator<Item = &'a ObjectKey>) -> BackendId {
        let mut hasher = IdHasher::new();
        hasher.write(b"shared:");
        for key in keys {
            hasher.write(key.namespace.as_bytes());
            hasher.write(b"/");
            hasher.write(key.name.as_bytes());
            hasher.write(b"\0");
        }
        BackendId((hasher.finish() & !PASSTHROUGH_BIT).max(1))
    }
}

/// One Backend, the addresses it currently resolves to, and its TLS origination
/// (`Ok(None)`: bytes pass unchanged; `Err`: its TLS settings are unusable and its
/// connections are refused).
#[derive(Debug, Clone)]
pub struct Entry {
    pub backend: Arc<Backend>,
    pub addresses: Vec<IpAddr>,
    pub origination: Result<Option<Arc<TlsOrigination>>, TlsConfigError>,
    /// The BackendPolicy in force, shared with later tables (see `reconcile/policies.rs`).
    pub policy: Arc<PolicySlot>,
}

impl Entry {
    /// Whether the proxy originates TLS (or would, were its settings usable).
    pub fn originates_tls(&self) -> bool {
        !matches!(self.origination, Ok(None))
    }
}

/// The Backends a connection record names: one, or the several that share the
/// address and port it dialed (sorted by name). The proxy picks among several by the
/// name the client sends (HTTP Host, TLS SNI).
pub type Candidates = Arc<[Arc<Entry>]>;

/// Why the proxy has no usable Backend for a connection record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LookupError {
    #[error("no Backend with id {0:#x} (removed since the connect)")]
    Unknown(u64),
    #[error(
        "id {id:#x} is claimed by {claimants}: their connections are refused until one is renamed"
    )]
    Contested { id: u64, claimants: String },
}

/// Which processes a Backend applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scoping {
    /// Every Backend applies to every process in the attached cgroup.
    #[default]
    Cluster,
    /// A Backend applies to the pods of its own namespace only.
    Namespace,
}

impl Scoping {
    /// The datapath scope of a Backend in `namespace`.
    pub fn scope_of(self, namespace: &str) -> u64 {
        match self {
            Scoping::Cluster => CLUSTER_SCOPE,
            Scoping::Namespace => namespace_scope(namespace),
        }
    }
}

/// The scope of a namespace's pods: a 64-bit keyed hash of its name (never the cluster
/// scope nor the pod-tree marker), the same for every agent of the node and across
/// restarts, with no registry to keep in sync.
pub fn namespace_scope(namespace: &str) -> u64 {
    let mut hasher = IdHasher::new();
    hasher.write(b"namespace:");
    hasher.write(namespace.as_bytes());
    hasher.finish().clamp(CLUSTER_SCOPE + 1, POD_TREE - 1)
}

/// (scope, address, port) -> the Backend, or group of Backends, that owns it.
pub type Endpoints = BTreeMap<BackendKey, BackendId>;

#[derive(Debug, Default)]
pub struct BackendTable {
    by_id: HashMap<BackendId, Arc<Entry>>,
    /// Groups of Backends sharing an (address, port), by group id.
    groups: HashMap<BackendId, Candidates>,
    /// Every (scope, address, port) the datapath must match, with its id.
    /// Shared with the map writer, which keeps the last synced set to diff against.
    endpoints: Arc<Endpoints>,
    /// DNS capture: the hostnames answered with virtual addresses, per scope.
    answers: HashMap<u64, HashMap<String, Arc<VirtualHost>>>,
    /// Virtual address -> its host (live or retiring).
    virtual_addresses: HashMap<IpAddr, Arc<VirtualHost>>,
    passthroughs: HashMap<BackendId, Arc<VirtualHost>>,
    /// Ids that two Backends (or a Backend and a group) hash to, with their claimants.
    /// Never merged nor given to either: the addresses stay redirected and the proxy
    /// refuses their connections, so no name can take over another's connections.
    contested: BTreeMap<BackendId, String>,
    /// The Backends refused for a contested id (their own, or their group's), with the
    /// id's claimants.
    contested_keys: BTreeMap<ObjectKey, String>,
    /// Contested Backends the later claimant displaced from `by_id`, still listed.
    displaced: Vec<Arc<Entry>>,
}

impl BackendTable {
    /// The table of `entries`; with `virtuals`, their hostnames' virtual addresses too.
    pub fn new(
        entries: impl IntoIterator<Item = Entry>,
        scoping: Scoping,
        virtuals: Option<&VirtualHosts>,
    ) -> Self {
        Self::with_ids(entries, scoping, virtuals, BackendId::of)
    }

    /// [`BackendTable::new`] with the Backends' ids from `id_of` (tests make collisions).
    fn with_ids(
        entries: impl IntoIterator<Item = Entry>,
        scoping: Scoping,
        virtuals: Option<&VirtualHosts>,
        id_of: impl Fn(&ObjectKey) -> BackendId,
    ) -> Self {
        let mut table = BackendTable::default();
        let mut owners: BTreeMap<BackendKey, BTreeSet<BackendId>> = BTreeMap::new();
        let mut endpoints = Endpoints::new();
        for entry in entries {
            let id = id_of(&entry.backend.key);
            let scope = scoping.scope_of(&entry.backend.key.namespace);
            let mut addresses: Vec<IpAddr> = entry.addresses.clone();
            if let Some(host) = virtuals.and_then(|v| table.virtual_host_of(v, &entry)) {
                (table.answers.entry(scope).or_default())
                    .insert(host.hostname.clone(), host.clone());
                table.add_passthrough(&mut endpoints, scope, &host);
                addresses.extend([IpAddr::V4(host.v4), IpAddr::V6(host.v6)]);
            }
            for ip in addresses {
                let address = SocketAddr::new(ip, entry.backend.port);
                let at = BackendKey::new(scope, endpoint::from_socket_addr(address));
                owners.entry(at).or_default().insert(id);
            }
            let key = entry.backend.key.clone();
            if let Some(previous) = table.by_id.insert(id, Arc::new(entry)) {
                let first = previous.backend.key.clone();
                let (first_name, second_name) = (first.to_string(), key.to_string());
                table.contest(id, &first_name, &second_name, [first, key]);
                table.displaced.push(previous);
            }
        }
        for retiring in virtuals.iter().flat_map(|v| v.retiring()) {
            let host = Arc::new(retiring.host.clone());
            for scope in &retiring.scopes {
                table.add_passthrough(&mut endpoints, *scope, &host);
            }
        }
        // Groups first, so a group id that collides with another id is known before any
        // address is given one.
        let mut group_of: HashMap<&BTreeSet<BackendId>, BackendId> = HashMap::new();
        for ids in owners.values().filter(|ids| ids.len() > 1) {
            if !group_of.contains_key(ids) {
                group_of.insert(ids, table.group(ids));
            }
        }
        for (at, ids) in &owners {
            let id = match (ids.first(), group_of.get(ids)) {
                (Some(only), None) => *only,
                (_, Some(group)) => match ids.iter().find(|id| table.contested.contains_key(id)) {
                    // A group with a contested member is refused as that member is, and
                    // never looked up: it would lend that member's entry.
                    Some(member) => {
                        table.groups.remove(group);
                        *member
                    }
                    None => *group,
                },
                (None, None) => continue,
            };
            endpoints.insert(*at, id);
        }
        table.endpoints = Arc::new(endpoints);
        table
    }

    /// The virtual host of `entry`'s hostname (one per hostname, shared by its Backends).
    fn virtual_host_of(&self, virtuals: &VirtualHosts, entry: &Entry) -> Option<Arc<VirtualHost>> {
        let (v4, v6) = virtuals.get(&entry.backend.hostname)?;
        if let Some(known) = self.virtual_addresses.get(&IpAddr::V4(v4)) {
            return Some(known.clone());
        }
        Some(Arc::new(VirtualHost {
            hostname: entry.backend.hostname.clone(),
            v4,
            v6,
            addresses: entry.addresses.clone(),
        }))
    }

    /// Ports of `host`'s virtual addresses that no Backend declares (port 0 in the
    /// map): bytes pass unchanged to its real addresses.
    fn add_passthrough(&mut self, endpoints: &mut Endpoints, scope: u64, host: &Arc<VirtualHost>) {
        let id = BackendId::passthrough(&host.hostname);
        for ip in [IpAddr::V4(host.v4), IpAddr::V6(host.v6)] {
            let at = BackendKey::new(scope, endpoint::from_socket_addr(SocketAddr::new(ip, 0)));
            endpoints.insert(at, id);
            self.virtual_addresses.insert(ip, host.clone());
        }
        self.passthroughs.insert(id, host.clone());
    }

    /// The virtual host answered for `name` to a client in `scope`.
    pub fn answer(&self, scope: u64, name: &str) -> Option<&Arc<VirtualHost>> {
        self.answers.get(&scope)?.get(name)
    }

    /// The virtual addresses of `hostname`, if it is answered in some scope.
    pub fn virtual_addresses_of(&self, hostname: &str) -> Option<(Ipv4Addr, Ipv6Addr)> {
        let host = self
            .answers
            .values()
            .find_map(|names| names.get(hostname))?;
        Some((host.v4, host.v6))
    }

    /// The host whose virtual address is `ip`.
    pub fn virtual_host(&self, ip: IpAddr) -> Option<&Arc<VirtualHost>> {
        self.virtual_addresses.get(&ip)
    }

    /// The host of a passthrough id.
    pub fn passthrough(&self, id: BackendId) -> Option<Arc<VirtualHost>> {
        self.passthroughs.get(&id).cloned()
    }

    /// The id of the group `ids` (two or more Backends), registered on first sight.
    fn group(&mut self, ids: &BTreeSet<BackendId>) -> BackendId {
        let mut members: Vec<Arc<Entry>> = ids
            .iter()
            .filter_map(|id| self.by_id.get(id).cloned())
            .collect();
        members.sort_by(|a, b| a.backend.key.cmp(&b.backend.key));
        let id = BackendId::of_group(members.iter().map(|e| &e.backend.key));
        let member_keys = || members.iter().map(|e| e.backend.key.clone());
        if let Some(single) = self.by_id.get(&id) {
            let key = single.backend.key.clone();
            let group = format!("the group {}", join(&members));
            self.contest(id, &key.to_string(), &group, member_keys().chain([key]));
        }
        let group = self.groups.entry(id).or_insert_with(|| {
            tracing::debug!(
                backends = %join(&members),
                "several Backends share an address: the proxy picks by Host or SNI"
            );
            members.clone().into()
        });
        let same = group.len() == members.len()
            && group
                .iter()
                .zip(&members)
                .all(|(a, b)| a.backend.key == b.backend.key);
        if !same {
            let first = format!("the group {}", join(group));
            let keys: Vec<ObjectKey> = group.iter().map(|e| e.backend.key.clone()).collect();
            let second = format!("the group {}", join(&members));
            self.contest(id, &first, &second, member_keys().chain(keys));
        }
        id
    }

    /// Records that `first` and `second` hash to the same id: by chance (1 in 2^63 a
    /// pair), or on purpose where ids are unkeyed (FNV-1a collisions can be computed).
    fn contest(
        &mut self,
        id: BackendId,
        first: &str,
        second: &str,
        refused: impl IntoIterator<Item = ObjectKey>,
    ) {
        let claimants = self.contested.entry(id).or_insert_with(|| first.to_owned());
        // A group meets the same Backend once per address it shares: say it once.
        if !claimants.split(" and ").any(|claimant| claimant == second) {
            claimants.push_str(" and ");
            claimants.push_str(second);
        }
        let claimants = claimants.clone();
        for key in refused {
            self.contested_keys.insert(key, claimants.clone());
        }
    }

    /// Whether `key`'s connections are refused for a contested id, and its claimants.
    pub fn contested_by(&self, key: &ObjectKey) -> Option<&str> {
        self.contested_keys.get(key).map(String::as_str)
    }

    /// Ids claimed by several Backends (or groups), with the claimants: their
    /// connections are refused.
    pub fn contested(&self) -> &BTreeMap<BackendId, String> {
        &self.contested
    }

    /// What the datapath's Backend map must hold.
    pub fn endpoints(&self) -> &Arc<Endpoints> {
        &self.endpoints
    }

    /// Every Backend, contested ones included.
    pub fn entries(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.by_id.values().chain(&self.displaced)
    }

    /// The Backends a connection record names.
    pub fn lookup(&self, id: BackendId) -> Result<Candidates, LookupError> {
        if let Some(claimants) = self.contested.get(&id) {
            return Err(LookupError::Contested {
                id: id.0,
                claimants: claimants.clone(),
            });
        }
        if let Some(entry) = self.by_id.get(&id) {
            return Ok(Arc::from([entry.clone()]));
        }
        self.groups
            .get(&id)
            .cloned()
            .ok_or(LookupError::Unknown(id.0))
    }
}

/// `ns/a, ns/b` for logs and refusals.
pub fn join(entries: &[Arc<Entry>]) -> String {
    let names: Vec<String> = entries.iter().map(|e| e.backend.key.to_string()).collect();
    names.join(", ")
}

#[cfg(test)]
mod tests;
