use super::*;
use crate::backend::Protocol;

fn entry(namespace: &str, name: &str, port: u16, addresses: &[&str]) -> Entry {
    Entry {
        backend: Backend {
            key: ObjectKey::new(namespace, name),
            hostname: format!("{name}.example.test"),
            port,
            protocol: Protocol::Tcp,
            tls: None,
        },
        addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        origination: Ok(None),
    }
}

fn at(addr: &str) -> Endpoint {
    endpoint::from_socket_addr(addr.parse().unwrap())
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
    assert_ne!(a, BackendId::AMBIGUOUS);
}

#[test]
fn every_address_and_port_is_an_endpoint() {
    let table = BackendTable::new([
        entry("default", "a", 443, &["10.0.0.1", "fd00::1"]),
        entry("default", "b", 8080, &["10.0.0.2"]),
    ]);
    let a = BackendId::of(&ObjectKey::new("default", "a"));
    let endpoints = table.endpoints();
    assert_eq!(endpoints.len(), 3);
    assert_eq!(endpoints.get(&at("10.0.0.1:443")), Some(&a));
    assert_eq!(endpoints.get(&at("[fd00::1]:443")), Some(&a));
    assert_eq!(endpoints.get(&at("10.0.0.1:8080")), None);
    let found = table.lookup(a, &at("10.0.0.1:443")).unwrap();
    assert_eq!(found.backend.key, ObjectKey::new("default", "a"));
}

#[test]
fn shared_addresses_are_refused_not_guessed() {
    let table = BackendTable::new([
        entry("default", "a", 443, &["10.0.0.1", "10.0.0.9"]),
        entry("other", "b", 443, &["10.0.0.1"]),
        // Same address on another port is no conflict.
        entry("other", "c", 80, &["10.0.0.1"]),
    ]);
    let shared = at("10.0.0.1:443");
    assert_eq!(table.endpoints().get(&shared), Some(&BackendId::AMBIGUOUS));
    let error = table.lookup(BackendId::AMBIGUOUS, &shared).unwrap_err();
    assert_eq!(
        error.to_string(),
        "10.0.0.1:443 is claimed by several Backends (default/a, other/b); refusing rather than guessing"
    );
    let a = BackendId::of(&ObjectKey::new("default", "a"));
    assert_eq!(table.endpoints().get(&at("10.0.0.9:443")), Some(&a));
    assert!(table.endpoints().get(&at("10.0.0.1:80")).is_some());
}

#[test]
fn unknown_ids_are_reported() {
    let table = BackendTable::new([entry("default", "a", 443, &["10.0.0.1"])]);
    assert_eq!(
        table
            .lookup(BackendId(42), &at("10.0.0.1:443"))
            .unwrap_err(),
        LookupError::Unknown(42)
    );
}
