//! Transports and resolver behaviour: TCP queries, truncation and the retry over TCP,
//! search-list expansions, an IPv6 nameserver.

use xtask::netlab::EXT_V6;

use super::{CaptureBed, PodResolver, divergent_zone, zone_with_elsewhere};
use crate::support::tls::{API_HOST, ApiBackend, Ca};

fn backend() -> String {
    ApiBackend::server_only(&Ca::new("test CA")).yaml()
}

#[test]
fn queries_over_tcp_are_answered_and_forwarded() {
    let zone = zone_with_elsewhere(&[API_HOST]);
    let resolver = PodResolver {
        extra: "options use-vc\n",
        ..PodResolver::default()
    };
    let t = CaptureBed::new(&backend(), &zone, resolver, &[]);
    t.assert_virtual(API_HOST);
    t.assert_pod_view("elsewhere.test");
    let queries = t.queries();
    assert!(
        queries.iter().any(|q| q == "query elsewhere.test A tcp"),
        "{queries:?}"
    );
    assert!(
        queries
            .iter()
            .all(|q| !q.starts_with(&format!("query {API_HOST}"))),
        "{queries:?}"
    );
}

#[test]
fn a_truncated_answer_is_retried_over_tcp() {
    // 60 addresses: far over the 512 bytes of a UDP answer without EDNS.
    let many: String = (1..=60)
        .map(|i| format!("big.test 30 10.200.9.{i}\n"))
        .collect();
    let t = CaptureBed::new(&backend(), &many, PodResolver::default(), &[]);
    let answer = t.resolve("big.test");
    assert_eq!(answer.len(), 60, "{answer:?}");
    let queries = t.queries();
    assert!(
        queries.iter().any(|q| q == "query big.test A udp"),
        "{queries:?}"
    );
    assert!(
        queries.iter().any(|q| q == "query big.test A tcp"),
        "retried over TCP: {queries:?}"
    );
}

#[test]
fn search_list_expansions_are_forwarded() {
    let resolver = PodResolver {
        extra: "search demo.svc.cluster.local svc.cluster.local\noptions ndots:5\n",
        ..PodResolver::default()
    };
    let t = CaptureBed::new(&backend(), &divergent_zone(&[API_HOST]), resolver, &[]);
    t.assert_virtual(API_HOST);
    let queries = t.queries();
    let expanded = format!("query {API_HOST}.demo.svc.cluster.local A udp");
    assert!(
        queries.contains(&expanded),
        "the expansion went to the nameserver: {queries:?}"
    );
    assert!(
        !queries
            .iter()
            .any(|q| q.starts_with(&format!("query {API_HOST} "))),
        "{queries:?}"
    );
}

#[test]
fn an_ipv6_nameserver_is_captured_too() {
    let resolver = PodResolver {
        nameserver: EXT_V6.into(),
        ..PodResolver::default()
    };
    let zone = zone_with_elsewhere(&[API_HOST]);
    let t = CaptureBed::new(&backend(), &zone, resolver, &[]);
    t.assert_virtual(API_HOST);
    t.assert_pod_view("elsewhere.test");
}
