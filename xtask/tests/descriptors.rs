//! At the open file limit the agent backs off instead of spinning, and its probe socket
//! still answers: the kubelet's exec probes must not restart an agent that is only busy.

mod support;

use std::{net::IpAddr, path::Path, time::Duration};

use support::{Bed, PROBE};
use xtask::netlab::{ChildGuard, EXT_V4, agent::Agent};

/// An HTTP Backend: a client connection that sends nothing holds one descriptor of the
/// agent's (the agent waits for its opening) and none upstream. Its address swallows
/// SYNs, so nothing is ever dialed anyway.
const HOLE_BACKEND: &str = r#"
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata:
  name: hole
  namespace: demo
spec:
  type: ExternalHostname
  externalHostname:
    hostname: hole.redirector.test
  port:
    number: 8080
  protocol: HTTP
"#;
const HOLE_NET: &str = "10.200.3.0/24";
const HOLE: &str = "10.200.3.2";

#[test]
fn probes_are_answered_at_the_open_file_limit() {
    let bed = Bed::new(HOLE_BACKEND);
    let hole: IpAddr = HOLE.parse().expect("address");
    for ns in [&bed.topo.node, &bed.topo.pod] {
        ns.set_hosts(&[(hole, "hole.redirector.test")])
            .expect("hosts");
    }
    // The node routes the hole to ext, where a blackhole route drops it without an ICMP
    // error, as a firewalled host does.
    bed.topo
        .node
        .route_add(HOLE_NET, &EXT_V4.to_string())
        .expect("route");
    let forwarding = bed
        .topo
        .ext
        .exec("sysctl")
        .args(["-q", "-w", "net.ipv4.ip_forward=1"])
        .status();
    assert!(forwarding.expect("sysctl").success(), "ip_forward in ext");
    bed.topo
        .ext
        .ip(["route", "add", "blackhole", HOLE_NET])
        .expect("blackhole route");
    let socket_dir = tempfile::tempdir().expect("socket dir");
    let socket = socket_dir.path().join("admin.sock");
    let mut config = bed.config();
    // 96 descriptors: the agent's own (maps, programs, listeners, resolver: about 45)
    // and fewer than the 80 silent connections need (one each, for the 30 s the agent
    // waits for their first bytes).
    config.open_files_limit = Some(96);
    config.extra_args = vec!["--admin-socket".to_owned(), socket.display().to_string()];
    let mut agent = Agent::start(&bed.topo, &config).expect("agent");
    assert!(probe(&socket), "ready before the load");

    let target = format!("{HOLE}:8080");
    // Connected, and silent for 30 s.
    let args = [
        "connect",
        &target,
        "-4",
        "--send",
        "late",
        "--send-after-ms",
        "30000",
    ];
    let silent: Vec<ChildGuard> = (0..80)
        .map(|i| {
            let mut command = bed.topo.spawn_in_pod(PROBE, args);
            ChildGuard::spawn(&format!("silent-{i}"), &mut command).expect("netprobe")
        })
        .collect();
    agent
        .wait_for_log("accept failed; backing off")
        .expect("the agent runs out of descriptors");
    assert!(probe(&socket), "ready at the open file limit");
    assert!(probe(&socket), "and again: the reserve is refilled");
    drop(silent);
}

/// `redirector probe ready`, with a deadline of its own.
fn probe(socket: &Path) -> bool {
    let socket = socket.display().to_string();
    let started = std::time::Instant::now();
    let output = xtask::netlab::agent::redirector(&["probe", "ready", "--admin-socket", &socket])
        .expect("redirector probe");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the probe took {:?}",
        started.elapsed()
    );
    output.status.success()
}
