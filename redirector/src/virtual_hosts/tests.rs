use super::*;

fn ranges(v4: &str) -> VirtualRanges {
    VirtualRanges {
        v4: v4.parse().unwrap(),
        v6: "fd72:6564:6972::/96".parse().unwrap(),
    }
}

fn names(list: &[&str]) -> BTreeMap<String, (BTreeSet<u64>, Vec<IpAddr>)> {
    list.iter()
        .map(|n| {
            (
                n.to_string(),
                (BTreeSet::from([0]), vec!["10.0.0.1".parse().unwrap()]),
            )
        })
        .collect()
}

#[test]
fn ranges_are_checked() {
    assert!("240.0.0.0/16".parse::<Ipv4Range>().is_ok());
    assert!(
        "10.0.0.0/16"
            .parse::<Ipv4Range>()
            .unwrap_err()
            .contains("240.0.0.0/4")
    );
    assert!(
        "240.0.0.1/16"
            .parse::<Ipv4Range>()
            .unwrap_err()
            .contains("host bits")
    );
    assert!("240.0.0.0/4".parse::<Ipv4Range>().is_err());
    assert!("fd72:6564:6972::/64".parse::<Ipv6Range>().is_err());
    assert!("fd72:6564:6972::1/96".parse::<Ipv6Range>().is_err());
}

#[test]
fn a_hostname_gets_the_same_addresses_in_any_agent() {
    let mut a = VirtualHosts::new(ranges("240.0.0.0/16"), None, Duration::ZERO);
    let mut b = VirtualHosts::new(ranges("240.0.0.0/16"), None, Duration::ZERO);
    a.track(names(&["api.example.com", "b.example.com"]));
    b.track(names(&[
        "b.example.com",
        "other.example",
        "api.example.com",
    ]));
    let (v4, v6) = a.get("api.example.com").unwrap();
    assert_eq!(b.get("api.example.com"), Some((v4, v6)));
    assert_eq!(v4.octets()[..2], [240, 0]);
    assert_eq!(v6.segments()[..6], [0xfd72, 0x6564, 0x6972, 0, 0, 0]);
    // The offset is the same in both families.
    assert_eq!(
        u32::from(v4) - u32::from(Ipv4Addr::new(240, 0, 0, 0)),
        (u128::from(v6) & 0xffff_ffff) as u32
    );
}

#[test]
fn collisions_probe_to_distinct_addresses() {
    // A /24 holds 254 offsets: 200 names collide often.
    let mut hosts = VirtualHosts::new(ranges("240.1.2.0/24"), None, Duration::ZERO);
    let list: Vec<String> = (0..200).map(|i| format!("h{i}.example")).collect();
    let refs: Vec<&str> = list.iter().map(String::as_str).collect();
    hosts.track(names(&refs));
    let addresses: BTreeSet<Ipv4Addr> = refs.iter().map(|n| hosts.get(n).unwrap().0).collect();
    assert_eq!(addresses.len(), 200);
    assert!(!addresses.contains(&Ipv4Addr::new(240, 1, 2, 0)));
    assert!(!addresses.contains(&Ipv4Addr::new(240, 1, 2, 255)));
}

#[test]
fn a_removed_hostname_retires_for_the_hold_then_is_released() {
    let mut hosts = VirtualHosts::new(ranges("240.0.0.0/16"), None, Duration::from_secs(30));
    hosts.track(names(&["a.example", "b.example"]));
    let a = hosts.get("a.example").unwrap();
    hosts.track(names(&["b.example"]));
    assert_eq!(hosts.get("a.example"), None, "no longer handed out");
    let retiring: Vec<&Retiring> = hosts.retiring().collect();
    assert_eq!(retiring.len(), 1);
    assert_eq!((retiring[0].host.v4, retiring[0].host.v6), a);
    assert!(!hosts.expire(Instant::now()));
    // Back within the hold: the same addresses, live again.
    hosts.track(names(&["a.example", "b.example"]));
    assert_eq!(hosts.get("a.example"), Some(a));
    assert_eq!(hosts.retiring().count(), 0);
    hosts.track(names(&["b.example"]));
    assert!(hosts.expire(Instant::now() + Duration::from_secs(31)));
    assert_eq!(hosts.retiring().count(), 0);
}

#[test]
fn a_full_range_gives_no_address_rather_than_a_shared_one() {
    let mut hosts = VirtualHosts::new(ranges("240.1.2.0/24"), None, Duration::ZERO);
    let list: Vec<String> = (0..300).map(|i| format!("h{i}.example")).collect();
    let refs: Vec<&str> = list.iter().map(String::as_str).collect();
    hosts.track(names(&refs));
    let given: Vec<Ipv4Addr> = refs
        .iter()
        .filter_map(|n| hosts.get(n))
        .map(|a| a.0)
        .collect();
    assert_eq!(given.len(), 254);
    assert_eq!(
        given.iter().collect::<BTreeSet<_>>().len(),
        254,
        "no address shared"
    );
    assert_eq!(hosts.unassigned.len(), 46);
}

#[test]
fn an_address_pinned_for_a_name_gone_while_no_agent_ran_is_held_before_reuse() {
    let hold = Duration::from_secs(30);
    let mut fresh = VirtualHosts::new(ranges("240.0.0.0/16"), None, hold);
    fresh.track(names(&["new.example"]));
    let natural = fresh.get("new.example").unwrap();
    let offset = fresh.by_name["new.example"];
    // A restarted agent finds that offset pinned for a name no Backend declares now.
    let restarted = || {
        let mut hosts = VirtualHosts::new(ranges("240.0.0.0/16"), None, hold);
        hosts.pinned.insert(name_hash("gone.example"), offset);
        hosts.track(names(&["new.example"]));
        hosts
    };
    let mut hosts = restarted();
    assert_ne!(
        hosts.get("new.example"),
        Some(natural),
        "held for the gone name"
    );
    // The name coming back within the hold gets its address again.
    hosts.track(names(&["new.example", "gone.example"]));
    assert_eq!(hosts.get("gone.example"), Some(natural));
    // Otherwise the hold ends and the address is free.
    let mut hosts = restarted();
    assert!(hosts.next_expiry().is_some());
    assert!(hosts.taken.contains_key(&offset));
    hosts.expire(Instant::now() + hold + Duration::from_secs(1));
    assert!(!hosts.taken.contains_key(&offset));
    assert_eq!(hosts.next_expiry(), None);
}
