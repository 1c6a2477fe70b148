//! Zero-downtime upgrade, as a DaemonSet rollout with `maxSurge: 1` does it: a second
//! agent starts with the same flags and pins while the first runs, joins it (shared
//! listeners, adopted pins with its own programs swapped in), and the first is then
//! SIGTERMed. A pod connecting every 5 ms throughout sees no refusal, no reset and no
//! direct connection; a connection opened through the old agent finishes normally.

mod support;

use std::time::Duration;

use support::{
    Bed, ECHO_BACKEND,
    connect_loop::{ConnectLoop, LongConnection},
};
use xtask::netlab::{EXT_V4, agent::Agent};

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_rollout_refuses_resets_and_leaks_nothing() {
    let bed = Bed::new(ECHO_BACKEND);
    let config = bed.config();
    let old = Agent::start(&bed.topo, &config).expect("old agent");

    // Opened through the old agent; sends only after the old agent has gone.
    let long = LongConnection::open(&bed.topo, 4000, WAIT);

    // 1,200 connects, one every 5 ms: 6 s, across the whole handover.
    let target = format!("{EXT_V4}:8080");
    let client = ConnectLoop::start(&bed.topo, &target, 1200, 5);

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

    client.assert_all_proxied(WAIT);

    long.assert_answered(WAIT);
    // The new agent keeps serving.
    assert!(bed.via_proxy(&target));
    drop(new);
}
