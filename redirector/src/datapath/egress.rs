//! Typed handles on the egress policy's maps: the settings, the allowed networks, the
//! per-cgroup modes and the agent's own cgroups, which the agent writes; the events,
//! which it reads.

use std::{collections::BTreeMap, net::IpAddr};

use aya::maps::{
    Array, HashMap, MapData, MapError, PerCpuArray, RingBuf,
    lpm_trie::{Key, LpmTrie},
};
use redirector_common::{EgressConfig, map_names};

use super::{DatapathError, PinLayout, endpoint};

/// How many networks `--allow-cidr` and the cluster's ranges may name together.
pub const MAX_ALLOWED_NETS: u32 = 4096;
/// The agent's cgroups remembered (an LRU: crash loops make new ones, old ones age out).
pub const MAX_AGENT_CGROUPS: u32 = 64;

/// An address prefix as the kernel's trie holds it (IPv4 mapped into IPv6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NetPrefix {
    pub addr: [u32; 4],
    pub len: u32,
}

impl NetPrefix {
    /// `ip/len`, IPv4 in mapped form (an IPv4 /n is a /(96+n)); host bits cleared.
    pub fn new(ip: IpAddr, len: u8) -> Self {
        let (mapped, len) = match ip {
            IpAddr::V4(_) => (ip, u32::from(len.min(32)) + 96),
            IpAddr::V6(_) => (ip, u32::from(len.min(128))),
        };
        let addr = endpoint::from_socket_addr((mapped, 0).into()).addr;
        let mut bytes = bytes_of(addr);
        for (i, byte) in bytes.iter_mut().enumerate() {
            let first_bit = (i * 8) as u32;
            if first_bit >= len {
                *byte = 0;
            } else if first_bit + 8 > len {
                *byte &= 0xffu8 << (8 - (len - first_bit));
            }
        }
        Self {
            addr: words(bytes),
            len,
        }
    }
}

fn bytes_of(addr: [u32; 4]) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    for (chunk, word) in bytes.chunks_exact_mut(4).zip(addr) {
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
    bytes
}

fn words(bytes: [u8; 16]) -> [u32; 4] {
    let mut addr = [0u32; 4];
    for (word, chunk) in addr.iter_mut().zip(bytes.chunks_exact(4)) {
        *word = u32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    addr
}

/// The egress policy's maps.
pub struct EgressMaps {
    config: Array<MapData, EgressConfig>,
    nets: LpmTrie<MapData, [u32; 4], u32>,
    cgroup_modes: HashMap<MapData, u64, u32>,
    agent_cgroups: HashMap<MapData, u64, u32>,
    /// Taken by the event reader.
    pub events: Option<EgressEvents>,
}

/// Where refusals and audit hits arrive, and how many could not.
pub struct EgressEvents {
    pub ring: RingBuf<MapData>,
    pub lost: LostEvents,
}

/// `EGRESS_LOST`.
pub struct LostEvents(PerCpuArray<MapData, u64>);

impl LostEvents {
    /// Events the hooks could not send (the ring buffer was full), all CPUs together.
    pub fn count(&self) -> u64 {
        match self.0.get(&0, 0) {
            Ok(per_cpu) => per_cpu.iter().sum(),
            Err(_) => 0,
        }
    }
}

fn map_error(name: &'static str) -> impl FnOnce(MapError) -> DatapathError {
    move |source| DatapathError::Map { name, source }
}

impl EgressMaps {
    pub(super) fn new(
        config: Array<MapData, EgressConfig>,
        nets: LpmTrie<MapData, [u32; 4], u32>,
        cgroup_modes: HashMap<MapData, u64, u32>,
        agent_cgroups: HashMap<MapData, u64, u32>,
        events: RingBuf<MapData>,
        lost: PerCpuArray<MapData, u64>,
    ) -> Self {
        Self {
            config,
            nets,
            cgroup_modes,
            agent_cgroups,
            events: Some(EgressEvents {
                ring: events,
                lost: LostEvents(lost),
            }),
        }
    }

    /// Whether the settings in force let the hooks refuse or audit anything.
    pub fn is_active(&self) -> Result<bool, DatapathError> {
        let config = (self.config.get(&0, 0)).map_err(map_error(map_names::EGRESS_CONFIG))?;
        Ok(config.flags & EgressConfig::ACTIVE != 0)
    }

    pub fn write_config(&mut self, config: EgressConfig) -> Result<(), DatapathError> {
        (self.config.set(0, config, 0)).map_err(map_error(map_names::EGRESS_CONFIG))
    }

    /// Makes the allowed networks equal to `desired`: new ones first, so nothing allowed
    /// before and after is ever missing in between.
    /// Without `prune`, networks not in `desired` are kept.
    pub fn sync_nets(&mut self, desired: &[NetPrefix], prune: bool) -> Result<(), DatapathError> {
        let error = map_error(map_names::ALLOWED_NETS);
        let current: Vec<Key<[u32; 4]>> =
            self.nets.keys().collect::<Result<_, _>>().map_err(error)?;
        for net in desired {
            let key = Key::new(net.len, net.addr);
            (self.nets.insert(&key, 1, 0)).map_err(map_error(map_names::ALLOWED_NETS))?;
        }
        for key in current {
            let wanted =
                (desired.iter()).any(|net| net.len == key.prefix_len() && net.addr == key.data());
            if prune && !wanted {
                (self.nets.remove(&key)).map_err(map_error(map_names::ALLOWED_NETS))?;
            }
        }
        Ok(())
    }

    /// Makes the per-cgroup modes equal to `desired` (without `prune`, entries not in it
    /// are kept); returns (written, removed).
    pub fn sync_cgroup_modes(
        &mut self,
        desired: &BTreeMap<u64, u32>,
        prune: bool,
    ) -> Result<(usize, usize), DatapathError> {
        let error = || map_error(map_names::CGROUP_MODES);
        let current: BTreeMap<u64, u32> =
            (self.cgroup_modes.iter().collect::<Result<_, _>>()).map_err(error())?;
        let mut written = 0;
        for (cgroup, mode) in desired {
            if current.get(cgroup) != Some(mode) {
                (self.cgroup_modes.insert(cgroup, mode, 0)).map_err(error())?;
                written += 1;
            }
        }
        let stale: Vec<u64> = (current.keys())
            .filter(|cgroup| prune && !desired.contains_key(*cgroup))
            .copied()
            .collect();
        for cgroup in &stale {
            (self.cgroup_modes.remove(cgroup)).map_err(error())?;
        }
        Ok((written, stale.len()))
    }

    /// Lists the agent's own cgroup: its processes are never refused.
    pub fn add_agent_cgroup(&mut self, cgroup: u64) -> Result<(), DatapathError> {
        (self.agent_cgroups.insert(cgroup, 1, 0)).map_err(map_error(map_names::AGENT_CGROUPS))
    }
}

/// Lists `cgroup` (the agent's own) in the pinned `AGENT_CGROUPS` of an installed
/// datapath, before anything else runs: a restarting agent in a new cgroup (a new
/// container) must reach its API server and resolver under a pinned `deny` before the
/// datapath is installed again. `false`: nothing is pinned (nothing is enforced either).
pub fn exempt_agent_cgroup(layout: &PinLayout, cgroup: u64) -> Result<bool, DatapathError> {
    let path = layout.map(map_names::AGENT_CGROUPS);
    if !path.exists() {
        return Ok(false);
    }
    let error = || map_error(map_names::AGENT_CGROUPS);
    let data = MapData::from_pin(&path).map_err(error())?;
    let map = aya::maps::Map::from_map_data(data).map_err(error())?;
    let mut cgroups: HashMap<MapData, u64, u32> = HashMap::try_from(map).map_err(error())?;
    cgroups.insert(cgroup, 1, 0).map_err(error())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_mapped_and_masked() {
        let v4 = NetPrefix::new("10.200.7.9".parse().unwrap(), 16);
        assert_eq!(v4.len, 112);
        assert_eq!(v4, NetPrefix::new("10.200.0.0".parse().unwrap(), 16));
        assert_eq!(
            v4.addr,
            endpoint::from_socket_addr("10.200.0.0:0".parse().unwrap()).addr
        );
        let v6 = NetPrefix::new("fd00:1:2:3::1".parse().unwrap(), 33);
        assert_eq!(v6, NetPrefix::new("fd00:1::".parse().unwrap(), 33));
        assert_eq!(NetPrefix::new("1.2.3.4".parse().unwrap(), 0).len, 96);
    }
}
