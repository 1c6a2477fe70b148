//! Transports and resolver behaviour: TCP queries, truncation and the retry over TCP,
//! search-list expansions, an IPv6 nameserver.

use std::{net::Ipv4Addr, time::Duration};

use xtask::netlab::{ChildGuard, EXT_V6, Stream};

use super::{CaptureBed, FAKEDNS, PodResolver, divergent_zone, zone_with_elsewhere};
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
    let mut t = CaptureBed::new(&backend(), &zone, resolver, &[]);
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
    let mut t = CaptureBed::new(&backend(), &many, PodResolver::default(), &[]);
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
    let mut t = CaptureBed::new(&backend(), &divergent_zone(&[API_HOST]), resolver, &[]);
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

#[test]
fn a_query_to_the_unspecified_address_never_reaches_the_nodes_loopback() {
    // Linux delivers 0.0.0.0 to loopback: captured and forwarded by the agent, the query
    // would reach a nameserver listening only on the node's own loopback.
    let resolver = PodResolver {
        nameserver: Ipv4Addr::UNSPECIFIED.into(),
        ..PodResolver::default()
    };
    let t = CaptureBed::new(&backend(), &zone_with_elsewhere(&[API_HOST]), resolver, &[]);
    let zone = t.bed.backends.path().join("node-zone.txt.off");
    std::fs::write(&zone, "node-only.test 30 10.200.9.9\n").expect("zone");
    let mut command = t.bed.topo.node.exec(FAKEDNS);
    let mut node_dns = ChildGuard::spawn("node fakedns", command.arg("127.0.0.1:53").arg(&zone))
        .expect("fakedns on the node's loopback");
    (node_dns.wait_for_line("listening", Duration::from_secs(15))).expect("fakedns ready");
    let answer = t.resolve("node-only.test");
    assert!(
        answer.is_empty(),
        "the node's loopback nameserver answered: {answer:?}"
    );
    let asked = node_dns.lines(Stream::Stdout);
    assert!(!asked.iter().any(|l| l.starts_with("query ")), "{asked:?}");
}
