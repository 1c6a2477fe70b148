//! Lifecycle: DNS never depends on a live agent; a restarted agent hands out the same
//! virtual addresses; a deleted Backend's addresses are honoured for a while, then not.

use std::{
    net::IpAddr,
    time::{Duration, Instant},
};

use super::{CaptureBed, POD_VIEW_V4, PodResolver, divergent_zone, is_virtual};
use crate::support::tls::{API_HOST, API_TARGET, ApiBackend, Ca, TlsServer};

/// Polls `resolve` until `want` holds (capture follows a heartbeat, not an event).
fn resolves_within(
    t: &CaptureBed,
    name: &str,
    within: Duration,
    want: impl Fn(&[IpAddr]) -> bool,
) -> Vec<IpAddr> {
    let deadline = Instant::now() + within;
    loop {
        let answer = t.resolve(name);
        if want(&answer) || Instant::now() > deadline {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_dead_agent_gives_dns_back_and_a_restarted_one_takes_it_again() {
    let ca = Ca::new("test CA");
    let mut t = CaptureBed::new(
        &ApiBackend::server_only(&ca).yaml(),
        &divergent_zone(&[API_HOST]),
        PodResolver::default(),
        &[],
    );
    let _server = TlsServer::start(&t.bed.topo.ext, "[::]:8443", &ca.server(&[API_HOST]), None);
    let before = t.resolve(API_HOST);
    assert!(
        before.iter().all(is_virtual) && !before.is_empty(),
        "{before:?}"
    );
    let killed = Instant::now();
    t.agent.take().expect("agent").kill().expect("SIGKILL");
    let pod_view: IpAddr = POD_VIEW_V4.parse().unwrap();
    let answer = resolves_within(&t, API_HOST, Duration::from_secs(8), |a| {
        a.contains(&pod_view)
    });
    assert!(
        answer.contains(&pod_view),
        "the pod's own nameserver answers again: {answer:?}"
    );
    let gap = killed.elapsed();
    assert!(gap < Duration::from_secs(8), "took {gap:?}");
    eprintln!("DNS back to the pod's nameserver {gap:?} after SIGKILL");
    // With no agent, a connect to a virtual address never goes anywhere.
    let virtual_v4 = before.iter().find(|ip| ip.is_ipv4()).expect("IPv4");
    let refused = t.bed.connect(&format!("{virtual_v4}:8443"), &["-4"]);
    assert!(!refused.ok(), "{:?}", refused.json);

    t.start_agent(&[]);
    let after = resolves_within(&t, API_HOST, Duration::from_secs(5), |a| {
        a.iter().all(is_virtual)
    });
    assert_eq!(after, before, "the same virtual addresses after a restart");
    let reply = t.bed.connect(API_TARGET, &["-4"]);
    assert!(reply.ok(), "{:?}", reply.json);
}

#[test]
fn a_deleted_backend_stops_being_answered_at_once_and_its_addresses_expire() {
    let ca = Ca::new("test CA");
    let args = ["--dns-answer-ttl", "1s", "--dns-grace", "2s"];
    let mut t = CaptureBed::new(
        &ApiBackend::server_only(&ca).yaml(),
        &divergent_zone(&[API_HOST]),
        PodResolver::default(),
        &args,
    );
    let before = t.resolve(API_HOST);
    let virtual_v4 = *before.iter().find(|ip| ip.is_ipv4()).expect("IPv4");
    std::fs::write(t.bed.backends.path().join("backends.yaml"), "").expect("delete");
    t.agent()
        .wait_for_log("no Backend declares this hostname any more")
        .expect("retired");
    let pod_view: IpAddr = POD_VIEW_V4.parse().unwrap();
    assert!(
        t.resolve(API_HOST).contains(&pod_view),
        "no longer answered by the agent"
    );
    // Within the hold: a pod that kept the answer still gets through (bytes unchanged,
    // to the last known real address).
    let held = t.bed.connect(&format!("{virtual_v4}:8080"), &["-4"]);
    assert!(held.ok(), "{:?}", held.json);
    t.agent()
        .wait_for_log("virtual addresses released")
        .expect("released");
    t.agent()
        .wait_for_log("Backend address map updated")
        .expect("map synced");
    let expired = t.bed.connect(&format!("{virtual_v4}:8080"), &["-4"]);
    assert!(!expired.ok(), "{:?}", expired.json);
}

/// The agent inside the cgroup it watches, resolving through a nameserver the hooks would
/// capture: its own queries still reach the nameserver (its sockets are exempt), so it
/// never learns a Backend name's virtual address as a real one.
#[test]
fn the_agents_own_resolver_is_never_captured() {
    let yaml = crate::support::fixtures::xbackend("demo", "dyn", "dyn.g.test", 8080);
    let zone = format!("dyn.g.test 1 {}\n", xtask::netlab::EXT_V4);
    let mut t = CaptureBed::without_agent(&yaml, &zone, PodResolver::default());
    std::fs::write(
        t.bed.topo.node.etc_dir().join("resolv.conf"),
        format!("nameserver {}\n", xtask::netlab::EXT_V4),
    )
    .expect("node resolv.conf");
    let mut config = t.bed.config();
    config.in_pod_cgroup = true;
    config.extra_args = vec!["--dns-min-ttl".to_owned(), "1s".to_owned()];
    t.agent = Some(xtask::netlab::agent::Agent::start(&t.bed.topo, &config).expect("agent"));
    // Refreshes while capture is on reach the nameserver itself.
    for _ in 0..3 {
        (t.dns)
            .wait_for_line("query dyn.g.test A", Duration::from_secs(10))
            .expect("the agent's refresh reached the nameserver");
    }
    let body = crate::support::fixtures::admin_get(&t.bed.topo.node, "/backends");
    let rows: serde_json::Value = serde_json::from_slice(&body.stdout).expect("JSON");
    assert_eq!(
        rows[0]["addresses"],
        serde_json::json!([xtask::netlab::EXT_V4.to_string()]),
        "{rows}"
    );
    // Its neighbours in the cgroup are captured.
    let answer = t.assert_virtual("dyn.g.test");
    let reply = t.bed.connect("dyn.g.test:8080", &["-4"]);
    assert!(reply.ok(), "{:?}", reply.json);
    assert!(
        answer.contains(
            &reply
                .peer()
                .parse::<std::net::SocketAddr>()
                .expect("peer")
                .ip()
        )
    );
}
