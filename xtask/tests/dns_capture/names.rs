//! Names: a Backend name reaches its Backend whatever the pod's nameserver says; other
//! names keep their real answers.

use std::net::{IpAddr, SocketAddr};

use xtask::netlab::{NODE_EXT_V4, NODE_EXT_V6, POD_V4};

use super::{CaptureBed, POD_VIEW_V4, PodResolver, divergent_zone, is_virtual};
use crate::support::{
    capture::{self, Capture},
    fixtures::admin_get,
    tls::{API_HOST, API_PORT, API_TARGET, ApiBackend, Ca, TlsServer},
};

#[test]
fn divergent_answers_still_reach_the_backend_with_tls_originated() {
    const SECRET: &str = "GET /secret-plaintext HTTP/1.1";
    let ca = Ca::new("test CA");
    let yaml = ApiBackend::server_only(&ca).yaml();
    let mut t = CaptureBed::new(
        &yaml,
        &divergent_zone(&[API_HOST]),
        PodResolver::default(),
        &[],
    );
    // The server listens on every ext address: a connect that went direct to the pod's
    // answer would reach it, in plaintext.
    let mut server = TlsServer::start(&t.bed.topo.ext, "[::]:8443", &ca.server(&[API_HOST]), None);
    let wire = Capture::start(&t.bed.topo.ext, &t.bed.topo.ext_link.remote);

    let answer = t.resolve(API_HOST);
    assert_eq!(
        answer.len(),
        2,
        "one IPv4 and one IPv6 virtual address: {answer:?}"
    );
    assert!(answer.iter().all(is_virtual), "{answer:?}");
    let queries = t.queries();
    assert!(
        queries.is_empty(),
        "the pod's nameserver was asked: {queries:?}"
    );

    for (family, node) in [
        ("-4", format!("{NODE_EXT_V4}:")),
        ("-6", format!("[{NODE_EXT_V6}]:")),
    ] {
        let reply = t.bed.connect_sending(API_TARGET, SECRET, &[family]);
        assert!(reply.ok(), "{family}: {:?}", reply.json);
        assert!(
            reply.reply().ends_with(&format!("got={SECRET}")),
            "{:?}",
            reply.json
        );
        // getpeername() is the virtual address the application dialed.
        let peer: SocketAddr = reply.peer().parse().expect("peer");
        assert!(
            is_virtual(&peer.ip()) && peer.port() == API_PORT,
            "peer {peer}"
        );
        assert!(answer.contains(&peer.ip()), "{peer} not in {answer:?}");
        let seen = reply.seen_by_server().unwrap_or_default();
        assert!(seen.starts_with(&node), "server saw {seen}");
        server.wait_closed();
    }
    let handshakes = server.lines_starting("handshake-ok");
    assert_eq!(handshakes.len(), 2, "{handshakes:?}");
    assert!(
        handshakes
            .iter()
            .all(|h| h.contains(" sni=api.redirector.test ")),
        "{handshakes:?}"
    );

    let segments = capture::segments(&wire.stop_after(capture::send_fence(&t.bed.topo.node)));
    let to_server = capture::stream(&segments, API_PORT, true);
    assert!(
        capture::contains(&to_server, &[0x17, 0x03, 0x03]),
        "TLS application data"
    );
    for needle in [SECRET.as_bytes(), b"secret-plaintext"] {
        assert!(
            !capture::contains(&to_server, needle),
            "plaintext on the wire"
        );
    }
    assert!(t.metric("answered") >= 2.0);
    // /backends (and `redirector status`) show the hostname's virtual addresses.
    let body = admin_get(&t.bed.topo.node, "/backends");
    let rows: serde_json::Value = serde_json::from_slice(&body.stdout).expect("JSON");
    let shown: Vec<IpAddr> = (rows[0]["virtual_addresses"].as_array())
        .expect("virtual_addresses")
        .iter()
        .filter_map(|a| a.as_str()?.parse().ok())
        .collect();
    assert_eq!(shown.len(), 2, "{rows}");
    assert!(
        shown.iter().all(|ip| answer.contains(ip)),
        "{rows} vs {answer:?}"
    );
    drop(server);
}

#[test]
fn undeclared_names_keep_their_real_answer_and_go_direct() {
    let zone = format!(
        "{}elsewhere.test 30 {POD_VIEW_V4}\n",
        divergent_zone(&[API_HOST])
    );
    let ca = Ca::new("test CA");
    let mut t = CaptureBed::new(
        &ApiBackend::server_only(&ca).yaml(),
        &zone,
        PodResolver::default(),
        &[],
    );
    let answer = t.resolve("elsewhere.test");
    assert_eq!(answer, [POD_VIEW_V4.parse::<IpAddr>().unwrap()]);
    let queries = t.queries();
    assert!(
        queries
            .iter()
            .any(|q| q.starts_with("query elsewhere.test A udp")),
        "{queries:?}"
    );
    // A name the zone does not know: NXDOMAIN comes back as it is.
    assert!(t.resolve("nowhere.test").is_empty());
    let reply = t.bed.connect("elsewhere.test:8080", &["-4"]);
    assert!(reply.ok(), "{:?}", reply.json);
    assert_eq!(reply.peer(), format!("{POD_VIEW_V4}:8080"));
    let seen = reply.seen_by_server().unwrap_or_default();
    assert!(
        seen.starts_with(&format!("{POD_V4}:")),
        "went direct: server saw {seen}"
    );
    assert!(t.metric("forwarded") >= 1.0);
}

/// Two TCP Backends with different TLS settings on one real address: by address alone
/// the proxy could only refuse plaintext there; by name each gets its own SNI.
#[test]
fn two_tls_backends_on_one_real_address_each_get_their_own_sni() {
    let ca = Ca::new("test CA");
    let first = ApiBackend::server_only(&ca).yaml();
    // The same CA ConfigMap; another name, hostname and SNI.
    let second = (first.split("---").next().unwrap_or_default())
        .replace("name: api,", "name: api2,")
        .replace(API_HOST, "other.redirector.test");
    let yaml = format!("{first}---\n{second}");
    let zone = divergent_zone(&[API_HOST, "other.redirector.test"]);
    let t = CaptureBed::new(&yaml, &zone, PodResolver::default(), &[]);
    let mut server = TlsServer::start(
        &t.bed.topo.ext,
        "[::]:8443",
        &ca.server(&[API_HOST, "other.redirector.test"]),
        None,
    );
    let a = t.resolve(API_HOST);
    let b = t.resolve("other.redirector.test");
    assert!(a.iter().chain(&b).all(is_virtual), "{a:?} {b:?}");
    assert!(
        a.iter().all(|ip| !b.contains(ip)),
        "one virtual address per hostname"
    );
    for name in [API_HOST, "other.redirector.test"] {
        let reply = t.bed.connect(&format!("{name}:{API_PORT}"), &["-4"]);
        assert!(reply.ok(), "{name}: {:?}", reply.json);
        assert!(reply.reply().ends_with("got=hello"), "{:?}", reply.json);
        server.wait_closed();
    }
    let handshakes = server.lines_starting("handshake-ok");
    assert_eq!(handshakes.len(), 2, "{handshakes:?}");
    assert!(
        handshakes[0].contains(&format!(" sni={API_HOST} ")),
        "{handshakes:?}"
    );
    assert!(
        handshakes[1].contains(" sni=other.redirector.test "),
        "{handshakes:?}"
    );
}

/// A port of the virtual address that no Backend declares: the bytes go to the real
/// address and port unchanged, as they would have without the agent.
#[test]
fn undeclared_ports_of_a_virtual_address_pass_through_to_the_real_one() {
    let ca = Ca::new("test CA");
    let t = CaptureBed::new(
        &ApiBackend::server_only(&ca).yaml(),
        &divergent_zone(&[API_HOST]),
        PodResolver::default(),
        &[],
    );
    // The Bed's plain server on ext [::]:8080.
    let reply = t.bed.connect(&format!("{API_HOST}:8080"), &["-4"]);
    assert!(reply.ok(), "{:?}", reply.json);
    assert!(
        reply.reply().ends_with("got=hello"),
        "unchanged bytes: {:?}",
        reply.json
    );
    let peer: SocketAddr = reply.peer().parse().expect("peer");
    assert!(
        is_virtual(&peer.ip()),
        "getpeername() is the virtual address: {peer}"
    );
    let seen = reply.seen_by_server().unwrap_or_default();
    assert!(
        seen.starts_with(&format!("{NODE_EXT_V4}:")),
        "through the proxy: {seen}"
    );
    // Nothing listens on 9999: refused like a direct connect would be.
    let refused = t.bed.connect(&format!("{API_HOST}:9999"), &["-4"]);
    assert!(!refused.ok(), "{:?}", refused.json);
}

/// The hostname's first real address refuses: the proxy tries the next one.
#[test]
fn a_real_address_that_refuses_is_followed_by_the_next() {
    let ca = Ca::new("test CA");
    let yaml = ApiBackend::server_only(&ca).yaml();
    let t = CaptureBed::new(
        &yaml,
        &divergent_zone(&[API_HOST]),
        PodResolver::default(),
        &[],
    );
    // Only the IPv6 real address serves; the pod dials the virtual IPv4 address, so the
    // proxy tries the real IPv4 address first (refused), then the IPv6 one.
    let mut server = TlsServer::start(
        &t.bed.topo.ext,
        &format!("[{}]:8443", xtask::netlab::EXT_V6),
        &ca.server(&[API_HOST]),
        None,
    );
    let reply = t.bed.connect(API_TARGET, &["-4"]);
    assert!(reply.ok(), "{:?}", reply.json);
    assert!(reply.reply().ends_with("got=hello"), "{:?}", reply.json);
    let seen = reply.seen_by_server().unwrap_or_default();
    assert!(
        seen.starts_with(&format!("[{NODE_EXT_V6}]:")),
        "server saw {seen}"
    );
    server.wait_closed();
}

#[test]
fn with_an_ipv4_proxy_only_the_virtual_ipv6_address_is_neither_answered_nor_reachable() {
    let ca = Ca::new("test CA");
    let yaml = ApiBackend::server_only(&ca).yaml();
    let zone = divergent_zone(&[API_HOST]);
    let mut t = CaptureBed::without_agent(&yaml, &zone, PodResolver::default());
    let mut config = t.bed.config();
    config.ipv4_proxy_only = true;
    t.start_agent_with(config);

    // AAAA gets an empty answer: the client takes the family that is redirected.
    let answer = t.resolve(API_HOST);
    assert!(
        answer.len() == 1 && answer[0].is_ipv4() && is_virtual(&answer[0]),
        "{answer:?}"
    );
    // The hostname still has an IPv6 virtual address (/backends); a connect to it would
    // not be redirected, and it leads nowhere real: refused, never sent out.
    let body = admin_get(&t.bed.topo.node, "/backends");
    let rows: serde_json::Value = serde_json::from_slice(&body.stdout).expect("JSON");
    let v6 = (rows[0]["virtual_addresses"]
        .as_array()
        .expect("virtual_addresses")
        .iter())
    .filter_map(|a| a.as_str()?.parse::<IpAddr>().ok())
    .find(IpAddr::is_ipv6)
    .unwrap_or_else(|| panic!("no IPv6 virtual address in {rows}"));
    let target = SocketAddr::new(v6, API_PORT).to_string();
    let reply = t.bed.connect_sending(&target, "hello", &["-6"]);
    assert!(!reply.ok(), "{:?}", reply.json);
    assert_eq!(reply.json["stage"], "connect", "{:?}", reply.json);
    let error = reply.json["error"].as_str().unwrap_or_default();
    assert!(error.contains("not permitted"), "{:?}", reply.json);
}
