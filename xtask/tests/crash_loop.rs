//! A crash loop: the agent SIGKILLed every second for 30 s, restarted at once each time,
//! while a pod connects to a TLS Backend every 20 ms sending plaintext. Nothing may leak:
//! every connect is served through a proxy (TLS originated) or refused, or cut by the
//! kill of the agent it was on; none goes direct, and the wire never carries the
//! plaintext. After the last restart, full service returns within 2 s.

mod support;

use std::time::{Duration, Instant};

use support::{
    Bed, PROBE,
    capture::{self, Capture},
    tls::{API_HOST, API_PORT, API_TARGET, ApiBackend, Ca, TlsServer},
};
use xtask::netlab::{ChildGuard, EXT_V4, NODE_EXT_V4, agent::Agent};

const SECRET: &str = "GET /crash-loop-secret HTTP/1.1";
const KILLS: u32 = 30;

#[test]
fn a_crash_looping_agent_never_leaks_plaintext_and_recovers_within_two_seconds() {
    let ca = Ca::new("test CA");
    let bed = Bed::new(&ApiBackend::server_only(&ca).yaml());
    let server = TlsServer::start(&bed.topo.ext, "[::]:8443", &ca.server(&[API_HOST]), None);
    let wire = Capture::start(&bed.topo.ext, &bed.topo.ext_link.remote);
    let config = bed.config();
    let mut agent = Agent::start(&bed.topo, &config).expect("agent");

    // 1,650 connects, one every 20 ms: 33 s, past the last kill.
    let target = format!("{EXT_V4}:{API_PORT}");
    let mut client = ChildGuard::spawn(
        "loop",
        &mut bed.topo.spawn_in_pod(
            PROBE,
            ["connect-many", target.as_str(), "1650", "20", SECRET],
        ),
    )
    .expect("connect loop");

    // The stimulus: one kill a second (a timer, not a synchronisation).
    for _ in 0..KILLS {
        std::thread::sleep(Duration::from_secs(1));
        agent.kill().expect("SIGKILL");
        agent = Agent::spawn(&bed.topo, &config).expect("restart");
    }
    let restarted = Instant::now();
    agent
        .wait_for_ready()
        .expect("ready after the last restart");
    loop {
        let reply = bed.connect(API_TARGET, &["-4"]);
        if reply.ok() && reply.reply().ends_with("got=hello") {
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(2),
            "no full service 2 s after the last restart: {:?}",
            reply.json
        );
    }
    let recovery = restarted.elapsed();

    let done = client
        .finish(Duration::from_secs(60))
        .expect("loop finished");
    let line = done.stdout.last().cloned().unwrap_or_default();
    let counts: serde_json::Value = serde_json::from_str(&line).expect("connect-many JSON");
    eprintln!("crash loop: {counts}; full service {recovery:?} after the last restart");
    // Replies came through a proxy; "-" is a connection its agent closed (killed)
    // before any reply. A direct one would have reached the TLS server in plaintext,
    // which would have failed its handshake (checked below, with the wire).
    let seen = counts["seen_by_server"]
        .as_object()
        .expect("seen_by_server");
    let node = NODE_EXT_V4.to_string();
    assert!(
        seen.keys().all(|peer| *peer == node || peer == "-"),
        "served connects all came through a proxy: {counts}"
    );
    // Handshakes cut by a kill come from the node (the proxy); a pod's plaintext would
    // fail the handshake from the pod's own address.
    let pod = format!(" {}:", xtask::netlab::POD_V4);
    let failed = server.lines_starting("handshake-failed");
    assert!(
        !failed.iter().any(|line| line.contains(&pod)),
        "the pod reached the server directly: {failed:?}"
    );
    assert_eq!(counts["denied"], 0, "{counts}");
    let ok = counts["ok"].as_u64().unwrap_or(0);
    assert!(ok > 1000, "most connects served: {counts}");

    let segments = capture::segments(&wire.stop_after(capture::send_fence(&bed.topo.node)));
    let to_server = capture::stream(&segments, API_PORT, true);
    assert!(
        !capture::contains(&to_server, b"crash-loop-secret"),
        "plaintext on the wire"
    );
    assert!(
        capture::contains(&to_server, &[0x17, 0x03, 0x03]),
        "TLS data seen"
    );
}
