//! Typed handles on the pinned maps, one per job.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    os::fd::{AsRawFd, BorrowedFd},
    sync::{Arc, Mutex},
};

use aya::maps::{Array, HashMap, MapData, MapError};
use redirector_common::{BackendKey, Endpoint, ProxyConfig, Redirect};

use super::{MapWriter, endpoint};
use crate::table::{BackendId, Endpoints};

/// `BACKENDS`: (scope, address, port) -> Backend id, and `ENDPOINTS`, the same addresses
/// without scope. Written only by the agent, by diff.
pub struct BackendMap {
    /// Only the holder of the node's writer lock writes (two agents run during an
    /// upgrade); the other one computes what it would write.
    writer: MapWriter,
    map: HashMap<MapData, BackendKey, u64>,
    endpoints: HashMap<MapData, Endpoint, u32>,
    /// What the kernel maps hold after the last successful sync: a sync touches only
    /// the differences instead of reading 100k entries back through the bpf syscall.
    /// The table's own set, shared rather than copied. `None` until a first sync, or
    /// after a failed one: then the kernel's state is read (pins adopted from an
    /// earlier agent, or a sync that stopped half way).
    synced: Option<Arc<Endpoints>>,
}

/// What one [`BackendMap::sync`] changed. Entries of virtual addresses (DNS capture)
/// are counted apart: `added`, `changed`, `removed` and `total` are about the
/// addresses Backends resolve to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncStats {
    pub added: usize,
    pub changed: usize,
    pub removed: usize,
    pub total: usize,
    /// Entries of virtual addresses in the map, and how many were written or deleted.
    pub virtual_total: usize,
    pub virtual_changed: usize,
    /// Entries the kernel refused (the map is full: `--max-backend-addresses`), and the
    /// Backends they belong to. Connects to those addresses are not redirected.
    pub unwritten: usize,
    pub unwritten_backends: BTreeSet<BackendId>,
}

impl SyncStats {
    /// The sizes a sync to `desired` would leave, without writing (another agent writes).
    fn of(desired: &Endpoints, is_virtual: impl Fn(&Endpoint) -> bool) -> Self {
        let virtual_total = desired.keys().filter(|at| is_virtual(&at.endpoint)).count();
        Self {
            total: desired.len() - virtual_total,
            virtual_total,
            ..Self::default()
        }
    }

    /// Counts a write or delete of the entry at `at`.
    fn count(&mut self, at: &BackendKey, is_virtual: &impl Fn(&Endpoint) -> bool, kind: Change) {
        if is_virtual(&at.endpoint) {
            self.virtual_changed += 1;
            return;
        }
        match kind {
            Change::Added => self.added += 1,
            Change::Changed => self.changed += 1,
            Change::Removed => self.removed += 1,
        }
    }
}

enum Change {
    Added,
    Changed,
    Removed,
}

impl BackendMap {
    pub fn new(
        writer: MapWriter,
        map: HashMap<MapData, BackendKey, u64>,
        endpoints: HashMap<MapData, Endpoint, u32>,
    ) -> Self {
        Self {
            writer,
            map,
            endpoints,
            synced: None,
        }
    }

    /// Whether another agent on the node writes the map now: this one joined it (an
    /// upgrade) and has not taken over yet.
    pub fn beside_another_agent(&self) -> bool {
        matches!(self.writer, MapWriter::Waiting(_))
    }

    /// Resolves when this agent has just taken over writing the map from another one
    /// (the next sync reads the kernel's state, which the other agent wrote); never
    /// while it holds the lock already.
    pub async fn take_over(&mut self) {
        let MapWriter::Waiting(waiting) = &mut self.writer else {
            return std::future::pending().await;
        };
        match waiting.await {
            Ok(Ok(lock)) => {
                tracing::info!("took over writing the Backend map: syncing it by diff");
                self.writer = MapWriter::Holding(lock);
                self.synced = None;
            }
            Ok(Err(error)) => {
                tracing::error!(%error, "cannot take the Backend map's writer lock; this agent will not write the map");
                self.writer = MapWriter::Waiting(tokio::sync::oneshot::channel().1);
            }
            // The waiting thread is gone: wait forever rather than write unlocked.
            Err(_) => std::future::pending().await,
        }
    }

    /// Makes the map equal to `desired`, as far as it has room. Stale entries are
    /// deleted first, so they never hold the room new ones need; entries present before
    /// and after are not touched, so their addresses stay matched throughout; nothing
    /// is cleared wholesale. An entry the kernel refuses (a full map) is counted in
    /// `unwritten` and the rest are still written: the next sync tries it again.
    pub fn sync(
        &mut self,
        desired: &Arc<Endpoints>,
        is_virtual: impl Fn(&Endpoint) -> bool,
    ) -> Result<SyncStats, MapError> {
        if let MapWriter::Waiting(_) = self.writer {
            // The other agent keeps the map as its table says.
            return Ok(SyncStats::of(desired, is_virtual));
        }
        let (current, present): (Arc<Endpoints>, BTreeSet<Endpoint>) = match self.synced.take() {
            Some(synced) => {
                let present = synced.keys().map(|at| at.endpoint).collect();
                (synced, present)
            }
            None => (
                Arc::new(
                    (self.map.iter())
                        .map(|entry| entry.map(|(at, id)| (at, BackendId(id))))
                        .collect::<Result<_, _>>()?,
                ),
                self.endpoints.keys().collect::<Result<_, _>>()?,
            ),
        };
        let mut stats = SyncStats::of(desired, &is_virtual);
        let wanted: BTreeSet<Endpoint> = desired.keys().map(|key| key.endpoint).collect();
        for at in current.keys().filter(|at| !desired.contains_key(at)) {
            self.map.remove(at)?;
            stats.count(at, &is_virtual, Change::Removed);
        }
        // ENDPOINTS shrinks after BACKENDS and grows before it: a connect never misses a
        // Backend entry because the pre-filter did not know its address yet.
        for at in present.difference(&wanted) {
            self.endpoints.remove(at)?;
        }
        let mut refused = BTreeSet::new();
        for at in wanted.difference(&present) {
            if let Err(error) = self.endpoints.insert(at, 1, 0) {
                tracing::debug!(%error, "ENDPOINTS refused an entry");
                refused.insert(*at);
            }
        }
        for (at, id) in desired.iter() {
            let found = current.get(at);
            if found == Some(id) {
                continue;
            }
            let written = if refused.contains(&at.endpoint) {
                false
            } else if let Err(error) = self.map.insert(at, id.0, 0) {
                tracing::debug!(%error, "BACKENDS refused an entry");
                false
            } else {
                true
            };
            if !written {
                stats.unwritten += 1;
                stats.unwritten_backends.insert(*id);
                continue;
            }
            let kind = match found {
                Some(_) => Change::Changed,
                None => Change::Added,
            };
            stats.count(at, &is_virtual, kind);
        }
        // Kept only after a complete sync: otherwise the next one reads the kernel's
        // state again (and retries what was refused).
        if stats.unwritten == 0 {
            self.synced = Some(desired.clone());
        }
        Ok(stats)
    }
}

/// `SCOPES`: cgroup id of a pod -> the scope of its namespace.
pub struct ScopeMap {
    map: HashMap<MapData, u64, u64>,
}

impl ScopeMap {
    pub fn new(map: HashMap<MapData, u64, u64>) -> Self {
        Self { map }
    }

    /// Makes the map equal to `desired` (cgroup id -> scope); returns (written, removed).
    pub fn sync(&mut self, desired: &BTreeMap<u64, u64>) -> Result<(usize, usize), MapError> {
        let current: BTreeMap<u64, u64> = self.map.iter().collect::<Result<_, _>>()?;
        let mut written = 0;
        for (cgroup, scope) in desired {
            if current.get(cgroup) != Some(scope) {
                self.map.insert(cgroup, scope, 0)?;
                written += 1;
            }
        }
        let stale: Vec<u64> = current
            .keys()
            .filter(|c| !desired.contains_key(*c))
            .copied()
            .collect();
        for cgroup in &stale {
            self.map.remove(cgroup)?;
        }
        Ok((written, stale.len()))
    }
}

/// `PENDING`: records of accepted-to-be connections, keyed by the client's address.
pub struct PendingRecords {
    map: Mutex<HashMap<MapData, Endpoint, Redirect>>,
}

impl PendingRecords {
    pub fn new(map: HashMap<MapData, Endpoint, Redirect>) -> Self {
        Self {
            map: Mutex::new(map),
        }
    }

    /// Looks up and deletes the record of the connection whose client is `peer`.
    pub fn take(&self, peer: SocketAddr) -> Result<Option<Redirect>, MapError> {
        let key = endpoint::from_socket_addr(peer);
        let mut map = self
            .map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match map.get(&key, 0) {
            Ok(record) => {
                // Deleted at once: a later connection from the same client port must
                // never find this record.
                map.remove(&key)?;
                Ok(Some(record))
            }
            Err(MapError::KeyNotFound) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

/// `AGENT_SOCKETS`: cookies of the agent's own sockets. The hooks never redirect a
/// socket listed here (connects, and DNS capture: the agent's resolver and forwarder
/// must see the real answers), so the agent can sit inside the cgroup it redirects.
pub struct AgentSockets {
    map: Mutex<HashMap<MapData, u64, u32>>,
}

impl AgentSockets {
    pub fn new(map: HashMap<MapData, u64, u32>) -> Self {
        Self {
            map: Mutex::new(map),
        }
    }

    /// Lists `socket` until the returned guard is dropped (after `connect` returned).
    pub fn exempt(&self, socket: BorrowedFd<'_>) -> std::io::Result<Exemption<'_>> {
        let cookie = socket_cookie(socket)?;
        self.lock()
            .insert(cookie, 1, 0)
            .map_err(std::io::Error::other)?;
        Ok(Exemption {
            owner: self,
            cookie,
        })
    }

    /// Lists `socket` for as long as the returned guard lives: for sockets whose every
    /// send is a hook call (unconnected UDP), not just their `connect`.
    pub fn exempt_owned(
        self: &Arc<Self>,
        socket: BorrowedFd<'_>,
    ) -> std::io::Result<OwnedExemption> {
        let cookie = socket_cookie(socket)?;
        self.lock()
            .insert(cookie, 1, 0)
            .map_err(std::io::Error::other)?;
        Ok(OwnedExemption {
            owner: self.clone(),
            cookie,
        })
    }

    fn forget(&self, cookie: u64) {
        if let Err(error) = self.lock().remove(&cookie) {
            // The LRU evicts it eventually; cookies are never reused, so a stale entry
            // cannot exempt another socket.
            tracing::debug!(%error, cookie, "could not remove agent socket cookie");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<MapData, u64, u32>> {
        self.map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Removes the socket from `AGENT_SOCKETS` when dropped.
pub struct Exemption<'a> {
    owner: &'a AgentSockets,
    cookie: u64,
}

impl Drop for Exemption<'_> {
    fn drop(&mut self) {
        self.owner.forget(self.cookie);
    }
}

/// [`Exemption`] that owns its list (see [`AgentSockets::exempt_owned`]).
pub struct OwnedExemption {
    owner: Arc<AgentSockets>,
    cookie: u64,
}

impl Drop for OwnedExemption {
    fn drop(&mut self) {
        self.owner.forget(self.cookie);
    }
}

/// The kernel's socket cookie (`SO_COOKIE`), the key the eBPF programs see.
fn socket_cookie(socket: BorrowedFd<'_>) -> std::io::Result<u64> {
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cookie`, which is a valid,
    // exclusively borrowed u64; the fd is borrowed for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_COOKIE,
            (&raw mut cookie).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cookie)
}

/// Writes the proxy addresses to `CONFIG`.
/// `config` for an operator: the proxy addresses and whether Backends are scoped.
pub fn describe_config(config: &ProxyConfig) -> String {
    let mut parts = Vec::new();
    if config.flags & ProxyConfig::HAS_V4 != 0 {
        parts.push(endpoint::to_socket_addr(&config.v4).to_string());
    }
    if config.flags & ProxyConfig::HAS_V6 != 0 {
        parts.push(endpoint::to_socket_addr(&config.v6).to_string());
    }
    let scope = match config.flags & ProxyConfig::SCOPED {
        0 => "Backends cluster-wide",
        _ => "Backends scoped by namespace",
    };
    format!("proxy {}, {scope}", parts.join(" and "))
}

pub fn write_config(
    map: &mut Array<MapData, ProxyConfig>,
    config: &ProxyConfig,
) -> Result<(), MapError> {
    map.set(0, config, 0)
}
