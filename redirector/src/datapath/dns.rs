//! The DNS capture maps as the agent sees them: settings, heartbeat, the records of
//! captured sockets, and the pinned virtual address assignments.

use std::{collections::BTreeMap, net::SocketAddr, sync::Mutex, time::Duration};

use aya::maps::{Array, HashMap, MapData, MapError};
use redirector_common::{DnsConfig, DnsRecord, Endpoint};

use super::endpoint;

/// `DNS_CONFIG`, `HEARTBEAT`, `DNS_PENDING` and `VIRTUAL_HOSTS`.
pub struct DnsMaps {
    pub heartbeat: Heartbeat,
    pub pending: DnsPending,
    pub virtual_hosts: VirtualHostPins,
}

/// `HEARTBEAT`: refreshed every [`Heartbeat::INTERVAL`]; the hooks capture DNS only
/// while it is younger than `DnsConfig::liveness_ns`.
pub struct Heartbeat {
    map: Array<MapData, u64>,
}

impl Heartbeat {
    pub const INTERVAL: Duration = Duration::from_millis(500);
    /// How long capture outlives the last beat: four missed beats. A query captured in
    /// that window after a crash goes unanswered, and its resolver retries (glibc after
    /// 5 s) without capture.
    pub const LIVENESS: Duration = Duration::from_secs(2);

    pub fn new(map: Array<MapData, u64>) -> Self {
        Self { map }
    }

    /// Says "alive" now; returns the value written.
    pub fn beat(&mut self) -> Result<u64, MapError> {
        let now = boot_time_ns();
        self.map.set(0, now, 0)?;
        Ok(now)
    }

    /// The value in the map: ours, or another agent's (during an upgrade both beat).
    pub fn read(&self) -> Result<u64, MapError> {
        self.map.get(&0, 0)
    }

    /// Says "gone": pods use their own nameservers at once.
    pub fn stop(&mut self) -> Result<(), MapError> {
        self.map.set(0, 0, 0)
    }
}

/// `CLOCK_BOOTTIME` in nanoseconds: the clock of `bpf_ktime_get_boot_ns`.
fn boot_time_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`, a valid exclusive borrow.
    // CLOCK_BOOTTIME exists on every kernel that runs these programs, so it cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &raw mut now) };
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
}

/// `DNS_PENDING`: where a captured query came from -> its nameserver and scope.
pub struct DnsPending {
    map: Mutex<HashMap<MapData, Endpoint, DnsRecord>>,
}

impl DnsPending {
    pub fn new(map: HashMap<MapData, Endpoint, DnsRecord>) -> Self {
        Self {
            map: Mutex::new(map),
        }
    }

    /// The record of the client at `peer`. Left in place: a client sends several
    /// queries from one socket (A and AAAA at least), and the egress program rewrites
    /// it with every packet.
    pub fn get(&self, peer: SocketAddr) -> Result<Option<DnsRecord>, MapError> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(&endpoint::from_socket_addr(peer), 0) {
            Ok(record) => Ok(Some(record)),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

/// `VIRTUAL_HOSTS`: hostname hash -> virtual address offset, so a restarted agent
/// hands out the same addresses.
pub struct VirtualHostPins {
    map: HashMap<MapData, u64, u32>,
}

impl VirtualHostPins {
    pub fn new(map: HashMap<MapData, u64, u32>) -> Self {
        Self { map }
    }

    pub fn read(&self) -> Result<BTreeMap<u64, u32>, MapError> {
        self.map.iter().collect()
    }

    pub fn insert(&mut self, hash: u64, offset: u32) -> Result<(), MapError> {
        self.map.insert(hash, offset, 0)
    }

    pub fn remove(&mut self, hash: u64) -> Result<(), MapError> {
        match self.map.remove(&hash) {
            Err(MapError::KeyNotFound) => Ok(()),
            other => other,
        }
    }
}

/// Writes the capture settings to `DNS_CONFIG`.
pub fn write_config(
    map: &mut Array<MapData, DnsConfig>,
    config: &DnsConfig,
) -> Result<(), MapError> {
    map.set(0, config, 0)
}
