//! The datapath end to end: real programs on a real cgroup, traffic across namespaces.

mod support;

use support::{Bed, ECHO_BACKEND, poll};
use xtask::netlab::{EXT_V4, EXT_V6, NODE_EXT_V4, NODE_EXT_V6, POD_V4, POD_V6, agent::PROXY_PORT};

/// A redirected connection: the client's getpeername() says what it dialed, the bytes
/// make the round trip, and the server sees the proxy (the node), not the pod.
fn assert_redirected(bed: &Bed, target: &str, family: &str, dialed: &str, node: &str) {
    let reply = bed.connect(target, &[family]);
    assert!(reply.ok(), "{:?}", reply.json);
    assert_eq!(
        reply.peer(),
        dialed,
        "getpeername() must return the dialed address"
    );
    assert!(reply.reply().ends_with("got=hello"), "{:?}", reply.json);
    let seen = reply.seen_by_server().unwrap_or_default();
    assert!(
        seen.starts_with(node),
        "server saw {seen}, expected the node {node}"
    );
}

#[test]
fn declared_hostname_is_redirected_over_ipv4() {
    let bed = Bed::new(ECHO_BACKEND);
    let _agent = bed.agent();
    assert_redirected(
        &bed,
        "echo.redirector.test:8080",
        "-4",
        &format!("{EXT_V4}:8080"),
        &format!("{NODE_EXT_V4}:"),
    );
}

#[test]
fn declared_hostname_is_redirected_over_ipv6() {
    let bed = Bed::new(ECHO_BACKEND);
    let _agent = bed.agent();
    assert_redirected(
        &bed,
        "echo.redirector.test:8080",
        "-6",
        &format!("[{EXT_V6}]:8080"),
        &format!("[{NODE_EXT_V6}]:"),
    );
}

#[test]
fn undeclared_address_and_other_port_go_direct() {
    let bed = Bed::new(ECHO_BACKEND);
    // A second address on the external host that no Backend declares.
    let other_v4 = "10.200.2.3";
    bed.topo
        .ext
        .ip([
            "addr",
            "add",
            &format!("{other_v4}/24"),
            "dev",
            &bed.topo.ext_link.remote,
        ])
        .expect("second address");
    let _other_port = bed.serve("[::]:9090");
    let _agent = bed.agent();

    for target in [
        format!("{other_v4}:8080"),
        format!("{EXT_V4}:9090"),
        format!("[{EXT_V6}]:9090"),
    ] {
        let reply = bed.connect(&target, &[]);
        assert!(reply.ok(), "{target}: {:?}", reply.json);
        let seen = reply.seen_by_server().unwrap_or_default();
        let pod = if target.starts_with('[') {
            format!("[{POD_V6}]:")
        } else {
            format!("{POD_V4}:")
        };
        assert!(
            seen.starts_with(&pod),
            "{target}: server saw {seen}, expected the pod itself"
        );
    }
}

#[test]
fn connection_straight_to_the_proxy_is_closed_without_upstream_connect() {
    let bed = Bed::new(ECHO_BACKEND);
    let _agent = bed.agent();
    for proxy in [
        format!("10.200.1.1:{PROXY_PORT}"),
        format!("[fd00:200:1::1]:{PROXY_PORT}"),
    ] {
        let reply = bed.connect(&proxy, &[]);
        // Closed at once: either an empty answer or a reset, never a relay.
        assert!(
            !reply.ok() || reply.reply().is_empty(),
            "{proxy}: the proxy relayed a connection it did not redirect: {:?}",
            reply.json
        );
    }
    // The refusal happens before any upstream connect, and the client has seen it.
    assert_eq!(bed.server.accepted(), Vec::<String>::new());
}

#[test]
fn agent_inside_the_attached_cgroup_is_not_redirected_to_itself() {
    let bed = Bed::new(ECHO_BACKEND);
    let config = bed.config();
    assert!(
        config.in_pod_cgroup,
        "the agent must sit inside the cgroup it redirects"
    );
    let _agent = xtask::netlab::agent::Agent::start(&bed.topo, &config).expect("agent");
    // If the proxy's own upstream connect were redirected, it would come back to the
    // proxy and loop instead of reaching the server.
    for family in ["-4", "-6"] {
        let reply = bed.connect("echo.redirector.test:8080", &[family]);
        assert!(reply.ok(), "{:?}", reply.json);
        assert!(reply.reply().ends_with("got=hello"), "{:?}", reply.json);
    }
    // The server prints `accepted` before it reads; its lines reach us through a
    // reader thread, which may lag the client's answer.
    let accepted = poll(|| bed.server.accepted(), |a| a.len() >= 2);
    assert_eq!(accepted.len(), 2, "exactly one upstream connect each");
}

#[test]
fn ipv4_mapped_destination_on_an_ipv6_socket_is_redirected() {
    let bed = Bed::new(ECHO_BACKEND);
    let _agent = bed.agent();
    // An AF_INET6 socket dialing ::ffff:10.200.2.2 goes through connect6, not connect4.
    // (netprobe prints IPv4-mapped addresses in their IPv4 form.)
    let mapped = format!("[::ffff:{EXT_V4}]:8080");
    let dialed = format!("{EXT_V4}:8080");
    assert_redirected(&bed, &mapped, "-6", &dialed, &format!("{NODE_EXT_V4}:"));
}

#[test]
fn an_idle_connection_is_closed_and_counted() {
    let bed = Bed::new(ECHO_BACKEND);
    let mut config = bed.config();
    config.extra_args = vec!["--idle-timeout".to_owned(), "1s".to_owned()];
    let _agent = xtask::netlab::agent::Agent::start(&bed.topo, &config).expect("agent");
    // Connected, then silent for 3 s: the proxy closes it after 1 s.
    let started = std::time::Instant::now();
    let reply = bed.connect(
        "echo.redirector.test:8080",
        &["-4", "--send-after-ms", "3000"],
    );
    let json = reply.json.to_string();
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(3),
        "{json}"
    );
    let text = support::tls::metrics(&bed.topo.node);
    assert_eq!(
        support::tls::sample(
            &text,
            "redirector_connections_idle_closed_total",
            &[("backend", "demo/echo")]
        ),
        Some(1.0),
        "{text}"
    );
}

#[test]
fn a_redirected_connect_that_fails_leaves_nothing_on_the_socket() {
    // An IPv6-only socket dialing the Backend's IPv4-mapped address is redirected by the
    // hook, then refused by the kernel; the same socket then dials an undeclared port.
    let bed = Bed::new(ECHO_BACKEND);
    let _agent = bed.agent();
    let _other = bed.serve("[::]:9090");
    let first = format!("[::ffff:{EXT_V4}]:8080");
    let second = format!("[{EXT_V6}]:9090");
    let output = xtask::netlab::in_cgroup_in_netns(
        &bed.topo.pod_cgroup,
        &bed.topo.pod,
        support::PROBE,
        ["reconnect", first.as_str(), second.as_str()],
    )
    .output()
    .expect("netprobe reconnect");
    let text = String::from_utf8_lossy(&output.stdout);
    let line: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
    assert_eq!(line["ok"], true, "{line}");
    // getpeername() tells the address dialed, not the failed redirect's Backend...
    assert_eq!(line["peer"], second, "{line}");
    // ...and the connection went direct, from the pod.
    let reply = line["reply"].as_str().unwrap_or_default();
    assert!(reply.starts_with(&format!("peer=[{POD_V6}]:")), "{line}");
}
