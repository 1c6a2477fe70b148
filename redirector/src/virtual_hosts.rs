//! Virtual addresses: one IPv4 and one IPv6 address per Backend hostname, which the
//! agent's DNS listener hands to pods instead of the public answer.
//!
//! A connect to a virtual address names its hostname exactly, whatever other names
//! share the real addresses and whatever the pod's nameserver would have said. The
//! addresses come from ranges no real network uses (see `--virtual-ipv4-range`), at an
//! offset derived from the hostname's hash (probing on a collision). Assignments are
//! pinned (`VIRTUAL_HOSTS`), so a hostname keeps its addresses across restarts even
//! when a collision made the order of arrival matter.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    hash::Hasher,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    str::FromStr,
    time::Duration,
};

use redirector_common::DnsConfig;
use tokio::time::Instant;

use crate::{
    datapath::{VirtualHostPins, endpoint},
    ids::IdHasher,
};

/// A hostname's virtual addresses and the real ones connections to them go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualHost {
    pub hostname: String,
    pub v4: Ipv4Addr,
    pub v6: Ipv6Addr,
    /// The agent's own resolution of the hostname (refreshed by TTL).
    pub addresses: Vec<IpAddr>,
}

/// An IPv4 range for virtual addresses, `a.b.c.d/len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Range {
    base: u32,
    len: u8,
}

impl FromStr for Ipv4Range {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (address, len) = text
            .split_once('/')
            .ok_or_else(|| format!("`{text}` is not a range like 240.0.0.0/16"))?;
        let address: Ipv4Addr = address
            .parse()
            .map_err(|_| format!("`{address}` is not an IPv4 address"))?;
        let len: u8 = len
            .parse()
            .ok()
            .filter(|len| (8..=24).contains(len))
            .ok_or_else(|| format!("prefix length `{len}` must be 8..=24"))?;
        let base = u32::from(address);
        if base & !mask(len) != 0 {
            return Err(format!("`{text}` has host bits set"));
        }
        // 240.0.0.0/4, without the limited broadcast address at its end.
        if address.octets()[0] < 240 {
            return Err(format!(
                "`{text}` is not inside 240.0.0.0/4: virtual addresses must never be real ones"
            ));
        }
        Ok(Self { base, len })
    }
}

fn mask(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

/// An IPv6 /96 for virtual addresses; the offset fills the last 32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Range {
    base: Ipv6Addr,
}

impl FromStr for Ipv6Range {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (address, len) = text
            .split_once('/')
            .ok_or_else(|| format!("`{text}` is not a range like fd72:6564:6972::/96"))?;
        let base: Ipv6Addr = address
            .parse()
            .map_err(|_| format!("`{address}` is not an IPv6 address"))?;
        if len != "96" {
            return Err(format!("`{text}`: only /96 ranges are supported"));
        }
        if u128::from(base) & 0xffff_ffff != 0 {
            return Err(format!("`{text}` has host bits set"));
        }
        Ok(Self { base })
    }
}

/// Both ranges; an offset names one address in each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VirtualRanges {
    pub v4: Ipv4Range,
    pub v6: Ipv6Range,
}

impl VirtualRanges {
    /// Usable offsets: the range without its first and last address.
    fn size(&self) -> u32 {
        (1u32 << (32 - self.v4.len)) - 2
    }

    fn addresses(&self, offset: u32) -> (Ipv4Addr, Ipv6Addr) {
        let v4 = Ipv4Addr::from(self.v4.base + 1 + offset);
        let v6 = Ipv6Addr::from(u128::from(self.v6.base) + 1 + u128::from(offset));
        (v4, v6)
    }

    /// Whether `at` is a virtual address (as the datapath decides it).
    pub fn contains(&self, at: &redirector_common::Endpoint) -> bool {
        let mut config = DnsConfig::default();
        self.write_to(&mut config);
        config.is_virtual(at)
    }

    /// Fills the virtual range fields of the datapath's DNS settings.
    pub fn write_to(&self, config: &mut DnsConfig) {
        config.virtual_v4 = u32::from(Ipv4Addr::from(self.v4.base)).to_be();
        config.virtual_v4_mask = mask(self.v4.len).to_be();
        let words = endpoint::from_socket_addr((self.v6.base, 0).into()).addr;
        config.virtual_v6 = [words[0], words[1], words[2]];
    }
}

/// A hostname no Backend declares any more: its addresses are no longer handed out,
/// but connects to them still pass (to the last known real addresses) until `until`.
#[derive(Debug, Clone)]
pub struct Retiring {
    pub until: Instant,
    pub scopes: BTreeSet<u64>,
    pub host: VirtualHost,
}

/// The assignments: hostname -> offset, kept stable for the agent's lifetime and,
/// through the pins, across restarts.
pub struct VirtualHosts {
    ranges: VirtualRanges,
    /// Every assigned hostname, live or retiring.
    by_name: BTreeMap<String, u32>,
    taken: HashMap<u32, String>,
    /// Live hostnames: their scopes and real addresses as last tracked.
    live: BTreeMap<String, (BTreeSet<u64>, Vec<IpAddr>)>,
    retiring: BTreeMap<String, Retiring>,
    /// Offsets pinned by an earlier agent, by hostname hash, until claimed.
    pinned: BTreeMap<u64, u32>,
    /// Pinned offsets no hostname claimed (names gone while no agent ran), by hash:
    /// reserved until the hold from this agent's start has passed, since pods may
    /// still hold answers with them.
    unclaimed: BTreeMap<u64, (u32, Instant)>,
    /// Hostnames the range had no free address for (logged once each).
    unassigned: BTreeSet<String>,
    pins: Option<VirtualHostPins>,
    /// How long a retired hostname's addresses keep working.
    hold: Duration,
}

impl VirtualHosts {
    pub fn new(ranges: VirtualRanges, pins: Option<VirtualHostPins>, hold: Duration) -> Self {
        let pinned = match pins.as_ref().map(VirtualHostPins::read) {
            Some(Ok(pinned)) => pinned,
            Some(Err(error)) => {
                tracing::warn!(%error, "cannot read pinned virtual addresses; assigning afresh");
                BTreeMap::new()
            }
            None => BTreeMap::new(),
        };
        Self {
            ranges,
            by_name: BTreeMap::new(),
            taken: HashMap::new(),
            live: BTreeMap::new(),
            retiring: BTreeMap::new(),
            pinned,
            unclaimed: BTreeMap::new(),
            unassigned: BTreeSet::new(),
            pins,
            hold,
        }
    }

    pub fn ranges(&self) -> VirtualRanges {
        self.ranges
    }

    /// The virtual addresses of a live `hostname`.
    pub fn get(&self, hostname: &str) -> Option<(Ipv4Addr, Ipv6Addr)> {
        if !self.live.contains_key(hostname) {
            return None;
        }
        let offset = self.by_name.get(hostname)?;
        Some(self.ranges.addresses(*offset))
    }

    /// Hostnames retired but still honoured.
    pub fn retiring(&self) -> impl Iterator<Item = &Retiring> {
        self.retiring.values()
    }

    /// When the next retired hostname's hold ends.
    pub fn next_expiry(&self) -> Option<Instant> {
        let unclaimed = self.unclaimed.values().map(|(_, until)| *until);
        self.retiring
            .values()
            .map(|r| r.until)
            .chain(unclaimed)
            .min()
    }

    /// Makes `hostnames` (with the scopes they are declared in and their current real
    /// addresses) the live ones. Hostnames that left are retired: their addresses are
    /// no longer handed out, but connects to them keep working for the hold time.
    pub fn track(&mut self, hostnames: BTreeMap<String, (BTreeSet<u64>, Vec<IpAddr>)>) {
        let now = Instant::now();
        let previous = std::mem::take(&mut self.live);
        for (name, (scopes, addresses)) in previous {
            if hostnames.contains_key(&name) {
                continue;
            }
            let Some(offset) = self.by_name.get(&name) else {
                continue;
            };
            let (v4, v6) = self.ranges.addresses(*offset);
            tracing::info!(
                hostname = name, %v4, %v6, hold = ?self.hold,
                "no Backend declares this hostname any more: its virtual addresses are no \
                 longer handed out; connects to them pass through until the hold ends"
            );
            let host = VirtualHost {
                hostname: name.clone(),
                v4,
                v6,
                addresses,
            };
            let until = now + self.hold;
            self.retiring.insert(
                name,
                Retiring {
                    until,
                    scopes,
                    host,
                },
            );
        }
        // What no hostname claims belonged to names gone while no agent ran: held like a
        // retired name's, from now, so no newcomer takes it while pods may cache it.
        let claimed: BTreeSet<u64> = hostnames.keys().map(|name| name_hash(name)).collect();
        let pinned = std::mem::take(&mut self.pinned);
        let (claimed, unclaimed) = pinned.into_iter().partition(|(h, _)| claimed.contains(h));
        self.pinned = claimed;
        for (hash, offset) in unclaimed {
            self.taken.insert(
                offset,
                format!("(a name gone while no agent ran, {hash:#x})"),
            );
            self.unclaimed.insert(hash, (offset, now + self.hold));
        }
        // Names an earlier agent pinned first, so no newcomer takes their offsets.
        let (pinned, fresh): (Vec<&String>, Vec<&String>) =
            (hostnames.keys()).partition(|name| self.pinned.contains_key(&name_hash(name)));
        for name in pinned.into_iter().chain(fresh) {
            self.retiring.remove(name);
            self.assign(name);
        }
        self.unassigned.retain(|name| hostnames.contains_key(name));
        self.live = hostnames;
    }

    /// Frees the addresses whose hold has ended. True if the table must be built again:
    /// a retired name went, or a name the full range left out may get an address.
    pub fn expire(&mut self, now: Instant) -> bool {
        let unclaimed: Vec<(u64, u32)> = (self.unclaimed.iter())
            .filter(|(_, (_, until))| *until <= now)
            .map(|(hash, (offset, _))| (*hash, *offset))
            .collect();
        // A name the full range left without addresses may take a freed one.
        let room_for_waiting = !unclaimed.is_empty() && !self.unassigned.is_empty();
        for (hash, offset) in unclaimed {
            self.unclaimed.remove(&hash);
            self.taken.remove(&offset);
            if let Some(pins) = &mut self.pins
                && let Err(error) = pins.remove(hash)
            {
                tracing::debug!(%error, "cannot unpin a stale virtual address");
            }
        }
        let done: Vec<String> = (self.retiring.iter())
            .filter(|(_, r)| r.until <= now)
            .map(|(name, _)| name.clone())
            .collect();
        for name in &done {
            self.retiring.remove(name);
            if let Some(offset) = self.by_name.remove(name) {
                self.taken.remove(&offset);
                tracing::info!(hostname = name, "virtual addresses released");
            }
            if let Some(pins) = &mut self.pins
                && let Err(error) = pins.remove(name_hash(name))
            {
                tracing::warn!(%error, hostname = name, "cannot unpin a virtual address");
            }
        }
        !done.is_empty() || room_for_waiting
    }

    /// The offset of `name`: kept if assigned, else the pinned one (also one held since
    /// the name went while no agent ran), else derived from its hash and probed past
    /// collisions. `None` when the range is full: the name gets no virtual addresses.
    fn assign(&mut self, name: &str) -> Option<u32> {
        if let Some(offset) = self.by_name.get(name) {
            return Some(*offset);
        }
        let hash = name_hash(name);
        let size = self.ranges.size();
        let held = self.unclaimed.remove(&hash).map(|(offset, _)| {
            self.taken.remove(&offset);
            offset
        });
        let pinned = (self.pinned.remove(&hash).or(held)).filter(|o| *o < size);
        let start = pinned.unwrap_or_else(|| u32::try_from(hash % u64::from(size)).unwrap_or(0));
        let free = (0..size)
            .map(|step| ((u64::from(start) + u64::from(step)) % u64::from(size)) as u32)
            .find(|offset| !self.taken.contains_key(offset));
        let Some(offset) = free else {
            if self.unassigned.insert(name.to_owned()) {
                tracing::error!(
                    hostname = name,
                    "the virtual address ranges are full ({size} hostnames): this name gets \
                     no virtual addresses, so its connects are matched by address alone \
                     (see --virtual-ipv4-range)"
                );
            }
            return None;
        };
        self.taken.insert(offset, name.to_owned());
        self.by_name.insert(name.to_owned(), offset);
        if pinned != Some(offset)
            && let Some(pins) = &mut self.pins
            && let Err(error) = pins.insert(hash, offset)
        {
            tracing::warn!(%error, hostname = name, "cannot pin a virtual address; it may change on restart");
        }
        Some(offset)
    }
}

fn name_hash(name: &str) -> u64 {
    let mut hasher = IdHasher::new();
    hasher.write(b"virtual:");
    hasher.write(name.as_bytes());
    hasher.finish()
}

#[cfg(test)]
mod tests;
