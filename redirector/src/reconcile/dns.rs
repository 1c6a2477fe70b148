//! Addresses of Backend hostnames over time: refreshed by TTL, vanished addresses kept
//! for a grace period, failures keeping the last good answer.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::IpAddr,
    time::Duration,
};

use tokio::time::Instant;

use crate::resolver::{Resolution, ResolverError};

/// `--dns-*` settings.
#[derive(Debug, Clone, Copy)]
pub struct DnsSettings {
    /// TTLs are clamped into [min_ttl, max_ttl]; answers without a TTL (hosts file) and
    /// retries after a failure use `min_ttl`.
    pub min_ttl: Duration,
    pub max_ttl: Duration,
    /// How long an address that vanished from the answers stays matched, so clients
    /// with a cached DNS answer still go through the proxy.
    pub grace: Duration,
}

#[derive(Debug, Default)]
struct HostState {
    /// In the latest good answer.
    live: BTreeSet<IpAddr>,
    /// Gone from the answers; matched until the deadline.
    lingering: BTreeMap<IpAddr, Instant>,
    /// When to resolve again; `None` until the first attempt.
    next_refresh: Option<Instant>,
    last_error: Option<String>,
}

/// What one answer did to a hostname's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Changed,
    Unchanged,
    /// Resolution failed; the last good addresses are kept.
    Failed,
}

#[derive(Debug)]
pub struct DnsCache {
    settings: DnsSettings,
    hosts: HashMap<String, HostState>,
}

impl DnsCache {
    pub fn new(settings: DnsSettings) -> Self {
        Self {
            settings,
            hosts: HashMap::new(),
        }
    }

    /// Forgets hostnames no Backend uses any more; starts tracking new ones.
    pub fn track(&mut self, hostnames: &BTreeSet<String>) {
        self.hosts.retain(|name, _| hostnames.contains(name));
        for name in hostnames {
            self.hosts.entry(name.clone()).or_default();
        }
    }

    /// Hostnames never resolved, or whose refresh time has come.
    pub fn due(&self, now: Instant) -> Vec<String> {
        let mut due: Vec<String> = self
            .hosts
            .iter()
            .filter(|(_, state)| state.next_refresh.is_none_or(|at| at <= now))
            .map(|(name, _)| name.clone())
            .collect();
        due.sort();
        due
    }

    pub fn apply(
        &mut self,
        hostname: &str,
        answer: Result<Resolution, ResolverError>,
        now: Instant,
    ) -> Outcome {
        let settings = self.settings;
        let Some(state) = self.hosts.get_mut(hostname) else {
            return Outcome::Unchanged;
        };
        match answer {
            Err(error) => {
                state.next_refresh = Some(now + settings.min_ttl);
                state.last_error = Some(error.to_string());
                Outcome::Failed
            }
            Ok(resolution) => {
                // Hosts-file answers have no TTL: they hold until the file changes, which
                // `refresh_all` signals.
                let ttl = resolution
                    .ttl
                    .unwrap_or(settings.max_ttl)
                    .clamp(settings.min_ttl, settings.max_ttl);
                state.next_refresh = Some(now + ttl);
                state.last_error = None;
                let fresh: BTreeSet<IpAddr> = resolution.addresses.into_iter().collect();
                let before = (state.live.clone(), state.lingering.len());
                for gone in state.live.difference(&fresh) {
                    state.lingering.insert(*gone, now + settings.grace);
                }
                for back in &fresh {
                    state.lingering.remove(back);
                }
                state.live = fresh;
                if (state.live.clone(), state.lingering.len()) == before {
                    Outcome::Unchanged
                } else {
                    Outcome::Changed
                }
            }
        }
    }

    pub fn min_ttl(&self) -> Duration {
        self.settings.min_ttl
    }

    /// Makes every hostname due now (the hosts file changed).
    pub fn refresh_all(&mut self) {
        for state in self.hosts.values_mut() {
            state.next_refresh = None;
        }
    }

    /// Drops lingering addresses whose grace period is over; true if any was dropped.
    pub fn expire(&mut self, now: Instant) -> bool {
        let mut changed = false;
        for state in self.hosts.values_mut() {
            let before = state.lingering.len();
            state.lingering.retain(|_, until| *until > now);
            changed |= state.lingering.len() != before;
        }
        changed
    }

    /// Every address to match for `hostname`: the live ones and those in grace.
    pub fn addresses(&self, hostname: &str) -> Vec<IpAddr> {
        self.hosts
            .get(hostname)
            .map(|state| {
                state
                    .live
                    .iter()
                    .chain(state.lingering.keys())
                    .copied()
                    .collect::<BTreeSet<_>>()
            })
            .unwrap_or_default()
            .into_iter()
            .collect()
    }

    pub fn last_error(&self, hostname: &str) -> Option<&str> {
        self.hosts
            .get(hostname)
            .and_then(|state| state.last_error.as_deref())
    }

    /// The next moment something is due: a refresh or the end of a grace period.
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.hosts
            .values()
            .flat_map(|state| {
                state
                    .next_refresh
                    .into_iter()
                    .chain(state.lingering.values().copied())
            })
            .min()
    }
}

#[cfg(test)]
mod tests;
