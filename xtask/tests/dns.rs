//! DNS refresh against a real DNS server (fakedns) in the node namespace: answers and
//! TTLs change during the test; vanished addresses stay matched for the grace period;
//! failures keep the last good answer.

mod support;

use std::path::PathBuf;

use support::{Bed, fixtures::xbackend};
use xtask::netlab::{
    ChildGuard, EXT_V4,
    agent::{Agent, AgentConfig},
};

const FAKEDNS: &str = env!("CARGO_BIN_EXE_fakedns");
/// An address on ext besides EXT_V4, for the answer to move to.
const SECOND_V4: &str = "10.200.2.3";

/// `demo/dyn`: dyn.redirector.test:8080, resolved by fakedns.
fn dyn_backend() -> String {
    xbackend("demo", "dyn", "dyn.redirector.test", 8080)
}

struct Dns {
    zone: PathBuf,
    server: ChildGuard,
}

impl Dns {
    /// fakedns on 127.0.0.1:53 in the node, the agent's nameserver (resolv.conf).
    fn start(bed: &Bed, zone_text: &str) -> Dns {
        let zone = bed.backends.path().join("zone.txt.off");
        std::fs::write(&zone, zone_text).expect("zone");
        let mut server = ChildGuard::spawn(
            "dns",
            bed.topo.node.exec(FAKEDNS).arg("127.0.0.1:53").arg(&zone),
        )
        .expect("fakedns");
        server
            .wait_for_line("listening", support_timeout())
            .expect("dns ready");
        Dns { zone, server }
    }

    fn set(&self, zone_text: &str) {
        let temporary = self.zone.with_extension("tmp");
        std::fs::write(&temporary, zone_text).expect("zone");
        std::fs::rename(&temporary, &self.zone).expect("zone");
    }
}

fn support_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(15)
}

fn agent(bed: &Bed) -> Agent {
    let mut config: AgentConfig = bed.config();
    config.extra_args = ["--dns-min-ttl", "1s", "--dns-grace", "3s"]
        .map(String::from)
        .to_vec();
    Agent::start(&bed.topo, &config).expect("agent")
}

#[test]
fn answers_move_by_ttl_and_old_addresses_linger_for_the_grace_period() {
    let bed = Bed::new(&dyn_backend());
    bed.topo
        .ext
        .ip([
            "addr",
            "add",
            &format!("{SECOND_V4}/24"),
            "dev",
            &bed.topo.ext_link.remote,
        ])
        .expect("second address");
    let dns = Dns::start(&bed, &format!("dyn.redirector.test 1 {EXT_V4}\n"));
    let mut agent = agent(&bed);
    assert!(
        agent.ready_line.contains("addresses=1"),
        "{}",
        agent.ready_line
    );
    assert!(bed.via_proxy(&format!("{EXT_V4}:8080")));
    assert!(!bed.via_proxy(&format!("{SECOND_V4}:8080")));

    dns.set(&format!("dyn.redirector.test 1 {SECOND_V4}\n"));
    agent.wait_for_log("added=1").expect("new address added");
    assert!(bed.via_proxy(&format!("{SECOND_V4}:8080")));
    // Gone from DNS, but within the grace period: still redirected.
    assert!(bed.via_proxy(&format!("{EXT_V4}:8080")));

    agent
        .wait_for_log("removed=1")
        .expect("old address expired");
    assert!(!bed.via_proxy(&format!("{EXT_V4}:8080")));
    assert!(bed.via_proxy(&format!("{SECOND_V4}:8080")));
    drop(dns.server);
}

#[test]
fn resolution_failures_keep_the_last_good_addresses() {
    let bed = Bed::new(&dyn_backend());
    let _unused = bed.serve("[::]:9090");
    let mut dns = Dns::start(&bed, &format!("dyn.redirector.test 1 {EXT_V4}\n"));
    let mut agent = agent(&bed);
    dns.set("dyn.redirector.test SERVFAIL\n");
    // Two failed refreshes, not just one: the set survives repeated failures.
    agent
        .wait_for_log("keeping the last good addresses")
        .expect("first failure");
    agent
        .wait_for_log("keeping the last good addresses")
        .expect("second failure");
    assert!(bed.via_proxy(&format!("{EXT_V4}:8080")));
    dns.server
        .wait_for_line("query dyn.redirector.test", support_timeout())
        .expect("queried");
}
