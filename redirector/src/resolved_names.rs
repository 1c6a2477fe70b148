//! Which name each workload resolved to each address: the DNS capture remembers the
//! answers it forwards, so an egress refusal names what the pod was trying to reach
//! (`api.example.com`), not just an address that tells an operator nothing.
//!
//! Kept per source (cgroup): two pods resolving different names to one CDN address
//! each see their own name. An answer is kept for its TTL plus `--dns-grace` (clients
//! cache answers), and the map is bounded: past [`MAX_ENTRIES`] the oldest go first.

use std::{
    collections::{HashMap, VecDeque},
    net::IpAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// Addresses remembered at most (about 100 bytes each).
pub const MAX_ENTRIES: usize = 65_536;

type Key = (u64, IpAddr);

#[derive(Default)]
struct Inner {
    names: HashMap<Key, (Arc<str>, Instant)>,
    /// Keys in the order they were (last) remembered, with the expiry then given: the
    /// front is the first to go when full or expired.
    order: VecDeque<(Key, Instant)>,
}

/// Recent DNS answers: (source cgroup, address) -> the name asked.
pub struct ResolvedNames {
    inner: Mutex<Inner>,
    grace: Duration,
}

impl ResolvedNames {
    pub fn new(grace: Duration) -> Self {
        Self {
            inner: Mutex::default(),
            grace,
        }
    }

    /// Remembers that `cgroup` got `addresses` (with their TTLs) for `name`.
    pub fn remember(&self, cgroup: u64, name: &str, addresses: &[(IpAddr, u32)]) {
        if addresses.is_empty() {
            return;
        }
        let name: Arc<str> = Arc::from(name.trim_end_matches('.'));
        let now = Instant::now();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        expire(&mut inner, now);
        for (ip, ttl) in addresses {
            let until = now + Duration::from_secs(u64::from(*ttl)) + self.grace;
            let key = (cgroup, *ip);
            inner.names.insert(key, (name.clone(), until));
            inner.order.push_back((key, until));
        }
        while inner.names.len() > MAX_ENTRIES {
            let Some((key, until)) = inner.order.pop_front() else {
                break;
            };
            remove_if_current(&mut inner, key, until);
        }
        // Re-remembered keys leave stale entries in `order`: never let it outgrow the map
        // by much.
        if inner.order.len() > 2 * MAX_ENTRIES.max(inner.names.len()) {
            let names = &inner.names;
            let kept: VecDeque<(Key, Instant)> = (inner.order.iter())
                .filter(|(key, until)| names.get(key).is_some_and(|(_, at)| at == until))
                .copied()
                .collect();
            inner.order = kept;
        }
    }

    /// Remembers the addresses of a DNS `answer` forwarded to `cgroup`, if it has any.
    pub fn remember_answer(&self, cgroup: u64, answer: &[u8]) {
        if let Some((name, addresses)) = addresses_of_answer(answer) {
            self.remember(cgroup, &name, &addresses);
        }
    }

    /// The name `cgroup` resolved to `ip`, if it did recently.
    pub fn name_of(&self, cgroup: u64, ip: IpAddr) -> Option<Arc<str>> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (name, until) = inner.names.get(&(cgroup, ip))?;
        (*until > Instant::now()).then(|| name.clone())
    }
}

fn expire(inner: &mut Inner, now: Instant) {
    while let Some(&(key, until)) = inner.order.front() {
        if until > now {
            break;
        }
        inner.order.pop_front();
        remove_if_current(inner, key, until);
    }
}

/// Removes `key` unless it was remembered again since (with a later expiry).
fn remove_if_current(inner: &mut Inner, key: Key, until: Instant) {
    if inner.names.get(&key).is_some_and(|(_, at)| *at == until) {
        inner.names.remove(&key);
    }
}

/// The name asked and the A/AAAA addresses (with TTLs) of a DNS answer; `None` for
/// anything else (errors, other types, unparseable messages).
pub fn addresses_of_answer(answer: &[u8]) -> Option<(String, Vec<(IpAddr, u32)>)> {
    use hickory_proto::{op::Message, rr::RData};
    let message = Message::from_vec(answer).ok()?;
    let name = message.queries().first()?.name().to_ascii();
    let addresses: Vec<(IpAddr, u32)> = (message.answers().iter())
        .filter_map(|record| match record.data() {
            RData::A(a) => Some((IpAddr::V4(a.0), record.ttl())),
            RData::AAAA(aaaa) => Some((IpAddr::V6(aaaa.0), record.ttl())),
            _ => None,
        })
        .collect();
    (!addresses.is_empty()).then_some((name, addresses))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_per_source_and_expire() {
        let names = ResolvedNames::new(Duration::ZERO);
        let ip: IpAddr = "10.200.9.9".parse().unwrap();
        names.remember(7, "api.example.com.", &[(ip, 60)]);
        names.remember(8, "other.example.com", &[(ip, 0)]);
        assert_eq!(names.name_of(7, ip).as_deref(), Some("api.example.com"));
        // TTL 0 and no grace: already gone.
        assert_eq!(names.name_of(8, ip), None);
        assert_eq!(names.name_of(9, ip), None);
    }

    #[test]
    fn the_map_stays_bounded() {
        let names = ResolvedNames::new(Duration::from_secs(60));
        for i in 0..(MAX_ENTRIES as u32 + 10) {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(i));
            names.remember(1, "many.example.com", &[(ip, 60)]);
        }
        let inner = names.inner.lock().unwrap();
        assert_eq!(inner.names.len(), MAX_ENTRIES);
        // The first ones went first.
        assert!(!inner.names.contains_key(&(1, IpAddr::V4(0.into()))));
    }

    #[test]
    fn answers_give_the_name_asked_and_its_addresses() {
        use hickory_proto::{
            op::{Message, Query},
            rr::{Name, RData, Record, RecordType, rdata::A},
        };
        let name = Name::from_ascii("api.example.com.").unwrap();
        let mut message = Message::new();
        message.add_query(Query::query(name.clone(), RecordType::A));
        let target = Name::from_ascii("cdn.example.net.").unwrap();
        message.add_answer(Record::from_rdata(
            target,
            30,
            RData::A(A::new(10, 200, 1, 2)),
        ));
        let bytes = message.to_vec().unwrap();
        let (asked, addresses) = addresses_of_answer(&bytes).unwrap();
        assert_eq!(asked, "api.example.com.");
        assert_eq!(addresses, [("10.200.1.2".parse().unwrap(), 30)]);
    }
}
