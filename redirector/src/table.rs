//! The BackendTable: which Backend owns which (address, port), as the proxy and the
//! datapath both need to see it.
//!
//! The datapath stores a `BackendId` per address; the proxy maps the id in a connection
//! record back to the Backend. Ids are a hash of `namespace/name`, so they stay the same
//! across agent restarts and records written before a restart still name the right
//! Backend.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    hash::Hasher,
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use redirector_common::{BackendKey, CLUSTER_SCOPE, Endpoint, POD_TREE};

use crate::{
    backend::{Backend, ObjectKey},
    datapath::endpoint,
    tls::{TlsConfigError, TlsOrigination},
};

/// Stable id of a Backend in the datapath.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendId(pub u64);

impl BackendId {
    /// Written for an (address, port) that two Backends claim: the proxy refuses those
    /// connections rather than guess which Backend's TLS settings apply.
    pub const AMBIGUOUS: BackendId = BackendId(0);

    pub fn of(key: &ObjectKey) -> BackendId {
        let mut hasher = fnv::FnvHasher::default();
        hasher.write(key.namespace.as_bytes());
        hasher.write(b"/");
        hasher.write(key.name.as_bytes());
        // 0 is reserved for AMBIGUOUS.
        BackendId(hasher.finish().max(1))
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
}

/// Why the proxy has no usable Backend for a connection record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LookupError {
    #[error(
        "{original} is claimed by several Backends ({claimants}); refusing rather than guessing"
    )]
    Ambiguous {
        original: SocketAddr,
        claimants: String,
    },
    #[error("no Backend with id {0:#x} (removed since the connect)")]
    Unknown(u64),
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

/// The scope of a namespace's pods: a 64-bit hash of its name (never the cluster scope
/// nor the pod-tree marker), the same on every node and across restarts, with no
/// registry to keep in sync.
pub fn namespace_scope(namespace: &str) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(b"namespace:");
    hasher.write(namespace.as_bytes());
    hasher.finish().clamp(CLUSTER_SCOPE + 1, POD_TREE - 1)
}

/// (scope, address, port) -> the Backend that owns it.
pub type Endpoints = BTreeMap<BackendKey, BackendId>;

#[derive(Debug, Default)]
pub struct BackendTable {
    by_id: HashMap<BackendId, Arc<Entry>>,
    /// Every (scope, address, port) the datapath must match, with its Backend id.
    /// Shared with the map writer, which keeps the last synced set to diff against.
    endpoints: Arc<Endpoints>,
    /// (scope, address, port) claimed by more than one Backend, with the claimants.
    conflicts: BTreeMap<BackendKey, BTreeSet<ObjectKey>>,
}

impl BackendTable {
    pub fn new(entries: impl IntoIterator<Item = Entry>, scoping: Scoping) -> Self {
        use std::collections::btree_map::Entry as Slot;
        let mut table = BackendTable::default();
        let mut endpoints = Endpoints::new();
        for entry in entries {
            let id = BackendId::of(&entry.backend.key);
            let scope = scoping.scope_of(&entry.backend.key.namespace);
            let entry = Arc::new(entry);
            if let Some(previous) = table.by_id.insert(id, entry.clone()) {
                // Two names hashing alike is astronomically unlikely; never merge them.
                tracing::error!(backend = %previous.backend.key, "Backend id collision; dropping");
            }
            for ip in &entry.addresses {
                let address = SocketAddr::new(*ip, entry.backend.port);
                let at = BackendKey::new(scope, endpoint::from_socket_addr(address));
                match endpoints.entry(at) {
                    Slot::Vacant(slot) => {
                        slot.insert(id);
                    }
                    Slot::Occupied(slot) if *slot.get() == id => {}
                    Slot::Occupied(mut slot) => {
                        // A second Backend claims this address: record both claimants.
                        let previous = slot.insert(BackendId::AMBIGUOUS);
                        let owners = table.conflicts.entry(at).or_default();
                        if let Some(owner) = table.by_id.get(&previous) {
                            owners.insert(owner.backend.key.clone());
                        }
                        owners.insert(entry.backend.key.clone());
                    }
                }
            }
        }
        table.endpoints = Arc::new(endpoints);
        for (at, owners) in &table.conflicts {
            tracing::warn!(
                address = %endpoint::to_socket_addr(&at.endpoint),
                backends = %join(owners),
                "address claimed by several Backends: its connections will be refused"
            );
        }
        table
    }

    /// What the datapath's Backend map must hold.
    pub fn endpoints(&self) -> &Arc<Endpoints> {
        &self.endpoints
    }

    pub fn entries(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.by_id.values()
    }

    /// The Backend a connection record names.
    pub fn lookup(&self, id: BackendId, original: &Endpoint) -> Result<Arc<Entry>, LookupError> {
        if id == BackendId::AMBIGUOUS {
            return Err(LookupError::Ambiguous {
                original: endpoint::to_socket_addr(original),
                claimants: self
                    .conflicts
                    .iter()
                    .find(|(at, _)| at.endpoint == *original)
                    .map(|(_, owners)| join(owners))
                    .unwrap_or_default(),
            });
        }
        self.by_id
            .get(&id)
            .cloned()
            .ok_or(LookupError::Unknown(id.0))
    }
}

fn join(keys: &BTreeSet<ObjectKey>) -> String {
    let names: Vec<String> = keys.iter().map(ToString::to_string).collect();
    names.join(", ")
}

#[cfg(test)]
mod tests;
