//! Zero-downtime upgrade, as a DaemonSet rollout with `maxSurge: 1` does it: a second
//! agent starts with the same flags and pins while the first runs, joins it (shared
//! listeners, adopted pins with its own programs swapped in), and the first is then
//! SIGTERMed. A pod connecting every 5 ms throughout sees no refusal, no reset and no
//! direct connection; a connection opened through the old agent finishes normally.

mod support;

use std::time::Duration;

use support::{Bed, ECHO_BACKEND, PROBE};
use xtask::netlab::{ChildGuard, EXT_V4, NODE_EXT_V4, Stream, agent::Agent};

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_rollout_refuses_resets_and_leaks_nothing() {
    let bed = Bed::new(ECHO_BACKEND);
    let config = bed.config();
    let old = Agent::start(&bed.topo, &config).expect("old agent");

    // Opened through the old agent; sends only after the old agent has gone.
    let mut long = ChildGuard::spawn_watching(
        "long",
        &mut bed.topo.spawn_in_pod(
            PROBE,
            [
                "connect",
                "echo.redirector.test:8080",
                "-4",
                "--send",
                "hello",
                "--send-after-ms",
                "4000",
            ],
        ),
        Stream::Stdout,
    )
    .expect("long connection");
    long.wait_for_line("connected", WAIT).expect("connected");

    // 1,200 connects, one every 5 ms: 6 s, across the whole handover.
    let target = format!("{EXT_V4}:8080");
    let mut client = ChildGuard::spawn(
        "loop",
        &mut bed
            .topo
            .spawn_in_pod(PROBE, ["connect-many", target.as_str(), "1200", "5"]),
    )
    .expect("connect loop");

    let mut new = Agent::start(&bed.topo, &config).expect("new agent joins the old one");
    assert!(
        new.ready_line.contains("programs_adopted=10"),
        "{}",
        new.ready_line
    );
    assert!(
        new.logs()
            .iter()
            .any(|l| l.contains("another agent on this node writes the Backend map")),
        "{:#?}",
        new.logs()
    );
    let stopped = old.terminate().expect("old agent stops");
    assert!(stopped.status.success(), "{stopped:?}");
    new.wait_for_log("took over writing the Backend map")
        .expect("takeover");

    let done = client.finish(WAIT).expect("loop finished");
    let line = done.stdout.last().cloned().unwrap_or_default();
    let counts: serde_json::Value = serde_json::from_str(&line).expect("connect-many JSON");
    assert_eq!(counts["connects"], 1200, "{counts}");
    assert_eq!(counts["ok"], 1200, "no refusal, no reset: {counts}");
    let seen = counts["seen_by_server"]
        .as_object()
        .expect("seen_by_server");
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        [&NODE_EXT_V4.to_string()],
        "every connection through a proxy, none direct: {counts}"
    );

    let finished = long.finish(WAIT).expect("long connection finished");
    let reply = finished.stdout.last().cloned().unwrap_or_default();
    assert!(
        reply.contains(&format!("peer={NODE_EXT_V4}:")) && reply.contains("got=hello"),
        "{reply}"
    );
    // The new agent keeps serving.
    assert!(bed.via_proxy(&target));
    drop(new);
}
