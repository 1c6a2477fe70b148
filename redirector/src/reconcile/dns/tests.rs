use super::*;

const SETTINGS: DnsSettings = DnsSettings {
    min_ttl: Duration::from_secs(5),
    max_ttl: Duration::from_secs(3600),
    grace: Duration::from_secs(60),
};

fn answer(addresses: &[&str], ttl: Option<u64>) -> Result<Resolution, ResolverError> {
    Ok(Resolution {
        addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        ttl: ttl.map(Duration::from_secs),
    })
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|a| a.parse().unwrap()).collect()
}

fn cache_with(name: &str) -> DnsCache {
    let mut cache = DnsCache::new(SETTINGS);
    cache.track(&BTreeSet::from([name.to_owned()]));
    cache
}

#[test]
fn ttl_is_clamped() {
    let now = Instant::now();
    let mut cache = cache_with("a.test");
    assert_eq!(cache.due(now), vec!["a.test".to_owned()]);
    assert_eq!(
        cache.apply("a.test", answer(&["10.0.0.1"], Some(1)), now),
        Outcome::Changed
    );
    assert_eq!(cache.next_wakeup(), Some(now + SETTINGS.min_ttl));
    cache.apply("a.test", answer(&["10.0.0.1"], Some(999_999)), now);
    assert_eq!(cache.next_wakeup(), Some(now + SETTINGS.max_ttl));
    cache.apply("a.test", answer(&["10.0.0.1"], Some(1)), now);
    assert!(cache.due(now + Duration::from_secs(4)).is_empty());
    assert_eq!(cache.due(now + Duration::from_secs(5)).len(), 1);
    // Hosts-file answers hold until the file changes.
    cache.apply("a.test", answer(&["10.0.0.1"], None), now);
    assert_eq!(cache.next_wakeup(), Some(now + SETTINGS.max_ttl));
    cache.refresh_all();
    assert_eq!(cache.due(now).len(), 1);
}

#[test]
fn vanished_addresses_linger_for_the_grace_period() {
    let now = Instant::now();
    let mut cache = cache_with("a.test");
    cache.apply("a.test", answer(&["10.0.0.1", "10.0.0.2"], Some(30)), now);
    assert_eq!(
        cache.apply("a.test", answer(&["10.0.0.2", "10.0.0.3"], Some(30)), now),
        Outcome::Changed
    );
    assert_eq!(
        cache.addresses("a.test"),
        ips(&["10.0.0.1", "10.0.0.2", "10.0.0.3"])
    );
    assert!(!cache.expire(now + Duration::from_secs(59)));
    assert!(cache.expire(now + Duration::from_secs(60)));
    assert_eq!(cache.addresses("a.test"), ips(&["10.0.0.2", "10.0.0.3"]));
}

#[test]
fn an_address_that_comes_back_stops_lingering() {
    let now = Instant::now();
    let mut cache = cache_with("a.test");
    cache.apply("a.test", answer(&["10.0.0.1"], Some(30)), now);
    cache.apply("a.test", answer(&["10.0.0.2"], Some(30)), now);
    cache.apply("a.test", answer(&["10.0.0.1", "10.0.0.2"], Some(30)), now);
    assert!(!cache.expire(now + Duration::from_secs(120)));
    assert_eq!(cache.addresses("a.test"), ips(&["10.0.0.1", "10.0.0.2"]));
}

#[test]
fn failures_keep_the_last_good_answer_and_retry_soon() {
    let now = Instant::now();
    let mut cache = cache_with("a.test");
    cache.apply("a.test", answer(&["10.0.0.1"], Some(300)), now);
    let failure = Err(ResolverError::OnlyRefused {
        hostname: "a.test".into(),
        refused: "127.0.0.1".into(),
    });
    assert_eq!(cache.apply("a.test", failure, now), Outcome::Failed);
    assert_eq!(cache.addresses("a.test"), ips(&["10.0.0.1"]));
    assert!(cache.last_error("a.test").is_some());
    assert_eq!(cache.next_wakeup(), Some(now + SETTINGS.min_ttl));
    assert_eq!(
        cache.apply("a.test", answer(&["10.0.0.1"], Some(300)), now),
        Outcome::Unchanged
    );
    assert!(cache.last_error("a.test").is_none());
}

#[test]
fn untracked_names_are_forgotten() {
    let now = Instant::now();
    let mut cache = cache_with("a.test");
    cache.apply("a.test", answer(&["10.0.0.1"], Some(30)), now);
    cache.track(&BTreeSet::from(["b.test".to_owned()]));
    assert!(cache.addresses("a.test").is_empty());
    assert_eq!(cache.due(now), vec!["b.test".to_owned()]);
}
