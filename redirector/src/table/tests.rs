use super::*;
use crate::backend::Protocol;
use redirector_common::Endpoint;

fn entry(namespace: &str, name: &str, port: u16, addresses: &[&str]) -> Entry {
    Entry {
        backend: Arc::new(Backend {
            key: ObjectKey::new(namespace, name),
            hostname: format!("{name}.example.test"),
            port,
            protocol: Protocol::Tcp,
            tls: None,
        }),
        addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        origination: Ok(None),
        policy: Default::default(),
    }
}

fn endpoint(addr: &str) -> Endpoint {
    endpoint::from_socket_addr(addr.parse().unwrap())
}

fn at(addr: &str) -> BackendKey {
    BackendKey::new(CLUSTER_SCOPE, endpoint(addr))
}

#[test]
fn ids_are_stable_and_distinct() {
    let a = BackendId::of(&ObjectKey::new("default", "a"));
    assert_eq!(a, BackendId::of(&ObjectKey::new("default", "a")));
    assert_ne!(a, BackendId::of(&ObjectKey::new("default", "b")));
    // "ns/a" in one namespace is not "a" in namespace "ns/".
    assert_ne!(
        BackendId::of(&ObjectKey::new("x", "y")),
        BackendId::of(&ObjectKey::new("", "x/y"))
    );
}

#[test]
fn every_address_and_port_is_an_endpoint() {
    let table = BackendTable::new(
        [
            entry("default", "a", 443, &["10.0.0.1", "fd00::1"]),
            entry("default", "b", 8080, &["10.0.0.2"]),
        ],
        Scoping::Cluster,
        None,
    );
    let a = BackendId::of(&ObjectKey::new("default", "a"));
    let endpoints = table.endpoints();
    assert_eq!(endpoints.len(), 3);
    assert_eq!(endpoints.get(&at("10.0.0.1:443")), Some(&a));
    assert_eq!(endpoints.get(&at("[fd00::1]:443")), Some(&a));
    assert_eq!(endpoints.get(&at("10.0.0.1:8080")), None);
    let found = table.lookup(a).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].backend.key, ObjectKey::new("default", "a"));
}

#[test]
fn shared_addresses_name_every_backend() {
    let build = || {
        BackendTable::new(
            [
                entry("default", "a", 443, &["10.0.0.1", "10.0.0.9"]),
                entry("other", "b", 443, &["10.0.0.1"]),
                // Same address on another port is not shared.
                entry("other", "c", 80, &["10.0.0.1"]),
            ],
            Scoping::Cluster,
            None,
        )
    };
    let table = build();
    let shared = table.endpoints()[&at("10.0.0.1:443")];
    let a = BackendId::of(&ObjectKey::new("default", "a"));
    let b = BackendId::of(&ObjectKey::new("other", "b"));
    assert!(shared != a && shared != b);
    let names: Vec<String> = (table.lookup(shared).unwrap().iter())
        .map(|e| e.backend.key.to_string())
        .collect();
    assert_eq!(names, ["default/a", "other/b"]);
    // The group id survives a restart (a record written before it still resolves).
    assert_eq!(build().endpoints()[&at("10.0.0.1:443")], shared);
    assert_eq!(table.endpoints().get(&at("10.0.0.9:443")), Some(&a));
    assert!(table.endpoints().get(&at("10.0.0.1:80")).is_some());
}

#[test]
fn unknown_ids_are_reported() {
    let table = BackendTable::new(
        [entry("default", "a", 443, &["10.0.0.1"])],
        Scoping::Cluster,
        None,
    );
    assert_eq!(
        table.lookup(BackendId(42)).unwrap_err(),
        LookupError::Unknown(42)
    );
}

/// Ids as usual, except that `team-b/mallory` is made to hash like `team-a/api`.
fn colliding(key: &ObjectKey) -> BackendId {
    if *key == ObjectKey::new("team-b", "mallory") {
        return BackendId::of(&ObjectKey::new("team-a", "api"));
    }
    BackendId::of(key)
}

#[test]
fn a_name_that_hashes_like_another_takes_over_nothing() {
    let victim = BackendId::of(&ObjectKey::new("team-a", "api"));
    for entries in [
        [
            entry("team-a", "api", 443, &["10.0.0.1"]),
            entry("team-b", "mallory", 443, &["10.0.0.9"]),
        ],
        [
            entry("team-b", "mallory", 443, &["10.0.0.9"]),
            entry("team-a", "api", 443, &["10.0.0.1"]),
        ],
    ] {
        let table = BackendTable::with_ids(entries, Scoping::Cluster, None, colliding);
        // Both sets of addresses stay redirected, and both are refused by the proxy.
        assert_eq!(table.endpoints()[&at("10.0.0.1:443")], victim);
        assert_eq!(table.endpoints()[&at("10.0.0.9:443")], victim);
        let Err(LookupError::Contested { claimants, .. }) = table.lookup(victim) else {
            panic!("the contested id resolved");
        };
        assert!(claimants.contains("team-a/api") && claimants.contains("team-b/mallory"));
        assert_eq!(table.contested().len(), 1);
        // Both stay listed, each shown refused.
        assert_eq!(table.entries().count(), 2);
        for key in [
            ObjectKey::new("team-a", "api"),
            ObjectKey::new("team-b", "mallory"),
        ] {
            assert_eq!(table.contested_by(&key), Some(claimants.as_str()), "{key}");
        }
    }
    // An address shared with a contested Backend is refused with it, not grouped.
    let table = BackendTable::with_ids(
        [
            entry("team-a", "api", 443, &["10.0.0.1"]),
            entry("team-b", "mallory", 443, &["10.0.0.9"]),
            entry("team-c", "cdn", 443, &["10.0.0.1"]),
        ],
        Scoping::Cluster,
        None,
        colliding,
    );
    assert_eq!(table.endpoints()[&at("10.0.0.1:443")], victim);
    let clean = BackendTable::new(
        [entry("team-a", "api", 443, &["10.0.0.1"])],
        Scoping::Cluster,
        None,
    );
    assert!(clean.contested().is_empty());
}

#[test]
fn a_backend_that_hashes_like_a_group_takes_over_nothing() {
    let (a, b) = (
        entry("x", "a", 443, &["10.0.0.1"]),
        entry("x", "b", 443, &["10.0.0.1"]),
    );
    let group = BackendId::of_group([&a.backend.key, &b.backend.key]);
    let id_of = |key: &ObjectKey| match key.name.as_str() {
        "mallory" => group,
        _ => BackendId::of(key),
    };
    // Mallory also shares an address with c, one that sorts before the group's.
    let mallory = entry("y", "mallory", 443, &["10.0.0.9", "10.0.0.0"]);
    let c = entry("z", "c", 443, &["10.0.0.0"]);
    let c_and_mallory = BackendId::of_group([&mallory.backend.key, &c.backend.key]);
    let table = BackendTable::with_ids([a, b, mallory, c], Scoping::Cluster, None, id_of);
    assert_eq!(table.endpoints()[&at("10.0.0.1:443")], group);
    assert_eq!(
        table.endpoints()[&at("10.0.0.0:443")],
        group,
        "refused with mallory"
    );
    assert!(
        !table.groups.contains_key(&c_and_mallory),
        "never looked up"
    );
    let Err(LookupError::Contested { claimants, .. }) = table.lookup(group) else {
        panic!("the contested id resolved");
    };
    assert_eq!(
        claimants, "y/mallory and the group x/a, x/b",
        "each claimant once"
    );
}

#[test]
fn namespace_scoping_separates_tenants() {
    let table = BackendTable::new(
        [
            entry("team-a", "api", 443, &["10.0.0.1"]),
            entry("team-b", "api", 443, &["10.0.0.1"]),
        ],
        Scoping::Namespace,
        None,
    );
    // Same address and port, two scopes: no conflict, each tenant gets its own Backend.
    let a = BackendKey::new(namespace_scope("team-a"), endpoint("10.0.0.1:443"));
    let b = BackendKey::new(namespace_scope("team-b"), endpoint("10.0.0.1:443"));
    assert_eq!(
        table.endpoints().get(&a),
        Some(&BackendId::of(&ObjectKey::new("team-a", "api")))
    );
    assert_eq!(
        table.endpoints().get(&b),
        Some(&BackendId::of(&ObjectKey::new("team-b", "api")))
    );
    assert_eq!(table.endpoints().len(), 2);
    assert_ne!(namespace_scope("team-a"), CLUSTER_SCOPE);
}

#[test]
fn virtual_addresses_name_their_backend_and_pass_other_ports_through() {
    use crate::virtual_hosts::{VirtualHosts, VirtualRanges};
    use std::collections::{BTreeMap, BTreeSet};
    let ranges = VirtualRanges {
        v4: "240.0.0.0/16".parse().unwrap(),
        v6: "fd72:6564:6972::/96".parse().unwrap(),
    };
    let mut virtuals = VirtualHosts::new(ranges, None, std::time::Duration::from_secs(60));
    let real: Vec<std::net::IpAddr> = vec!["10.0.0.1".parse().unwrap()];
    virtuals.track(BTreeMap::from([(
        "shared.example".to_owned(),
        (BTreeSet::from([CLUSTER_SCOPE]), real.clone()),
    )]));
    let (v4, v6) = virtuals.get("shared.example").unwrap();
    let mut a = entry("default", "a", 443, &["10.0.0.1"]);
    a.backend = Arc::new(Backend {
        hostname: "shared.example".to_owned(),
        ..(*a.backend).clone()
    });
    let table = BackendTable::new(
        [a, entry("default", "b", 443, &["10.0.0.1"])],
        Scoping::Cluster,
        Some(&virtuals),
    );
    let id_a = BackendId::of(&ObjectKey::new("default", "a"));
    // The real address is shared; the virtual one names a alone.
    assert_ne!(table.endpoints()[&at("10.0.0.1:443")], id_a);
    assert_eq!(table.endpoints()[&at(&format!("{v4}:443"))], id_a);
    assert_eq!(table.endpoints()[&at(&format!("[{v6}]:443"))], id_a);
    let pass = table.endpoints()[&at(&format!("{v4}:0"))];
    assert!(pass.is_passthrough());
    assert_eq!(table.passthrough(pass).unwrap().addresses, real);
    assert_eq!(
        table.answer(CLUSTER_SCOPE, "shared.example").unwrap().v4,
        v4
    );
    assert!(table.answer(CLUSTER_SCOPE, "other.example").is_none());
    assert!(
        table
            .answer(namespace_scope("x"), "shared.example")
            .is_none()
    );
}
