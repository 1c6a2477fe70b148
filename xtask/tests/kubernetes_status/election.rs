//! Leader election between two agents: only the leader writes, and the Lease passes to
//! the other agent when released, when it expires after a crash, and when both start
//! together.

use std::time::Duration;

use xtask::netlab::agent::Agent;

use super::{
    LEASE, logged,
    patches::{expect, objects_of, patches_until, state},
    start_agent, wrote,
};
use crate::support::{Bed, ECHO_BACKEND, fakeapi::FakeApi, fixtures::other_backend};

/// A lease of 15 s, seen expire by a candidate that polls every 5 s (+20 %), after it
/// saw the last renewal: comfortably under this.
const EXPIRY_TIMEOUT: Duration = Duration::from_secs(60);

/// Two nodes of one cluster, the API server on the first.
/// Field order is drop order: agents, then the API server, then the namespaces.
struct TwoNodes {
    first: Option<Agent>,
    second: Option<Agent>,
    api: FakeApi,
    bed2: Bed,
    bed1: Bed,
}

impl TwoNodes {
    fn new(objects: &str) -> TwoNodes {
        let bed1 = Bed::new("");
        let bed2 = Bed::new("");
        (bed1.topo.node)
            .link(&bed2.topo.node, &["10.200.3.1/24"], &["10.200.3.2/24"])
            .expect("link the nodes");
        let api = FakeApi::start_on(&bed1.topo.node, objects, "0.0.0.0:6443");
        TwoNodes {
            first: None,
            second: None,
            api,
            bed2,
            bed1,
        }
    }

    fn start_first(&mut self) {
        self.first = Some(start_agent(
            &self.bed1,
            &self.api,
            "node1",
            "127.0.0.1:6443",
        ));
    }

    fn start_second(&mut self) {
        self.start_second_as("node2");
    }

    /// The second agent, with `node` for its node name (`node1`: two agents of one
    /// node, as during an upgrade).
    fn start_second_as(&mut self, node: &str) {
        self.second = Some(start_agent(&self.bed2, &self.api, node, "10.200.3.1:6443"));
    }

    fn first(&mut self) -> &mut Agent {
        self.first.as_mut().expect("first agent")
    }

    fn second(&mut self) -> &mut Agent {
        self.second.as_mut().expect("second agent")
    }

    /// Both agents running, the first leading and the second having seen it lead, the
    /// status of every initial object written (`objects` of them).
    fn first_leads(objects: &str, count: usize) -> TwoNodes {
        let mut t = TwoNodes::new(objects);
        t.start_first();
        t.api.wait_for(&format!("create {LEASE} rv="));
        logged(t.first(), "this agent leads");
        patches_until(&mut t.api, count);
        t.start_second();
        let seen = logged(t.second(), "another agent writes XBackend status");
        assert!(seen.contains("node1"), "{seen}");
        t
    }
}
#[test]
fn only_the_leader_writes_and_a_released_lease_passes_to_the_other_agent() {
    let mut t = TwoNodes::first_leads(ECHO_BACKEND, 1);

    // Both agents apply the new Backend; one writes its status.
    t.api.apply("other", &other_backend());
    let added = t.api.wait_for_status_patches(1);
    assert_eq!(objects_of(&added), ["demo/other"]);
    logged(t.second(), "Backend added backend=demo/other");
    logged(t.first(), "XBackend status written backend=demo/other");
    assert_eq!(wrote(t.first()).len(), 2);
    assert!(wrote(t.second()).is_empty());

    // The leader stops (SIGTERM) and releases the Lease: the other takes over at its
    // next look, well before the lease would have expired.
    let stopped = std::time::Instant::now();
    let finished = (t.first.take())
        .expect("first")
        .terminate()
        .expect("terminated");
    assert!(finished.status.success());
    t.api.wait_for("holder=-");
    t.api.wait_for("holder=node2");
    let took = stopped.elapsed();
    assert!(took < Duration::from_secs(12), "took over after {took:?}");
    logged(t.second(), "this agent leads");

    // The new leader finds the status current (nothing rewritten) and writes the next
    // change.
    let before = t.api.status_patches().len();
    t.api.apply(
        "other",
        &other_backend().replace("number: 9090", "number: 9091"),
    );
    let moved = t.api.wait_for_status_patches(before);
    assert_eq!(objects_of(&moved), ["demo/other"]);
    assert_eq!(state(&moved[0], "Accepted"), expect("True", "Accepted", 2));
    logged(t.second(), "XBackend status written backend=demo/other");
    let second = wrote(t.second());
    assert_eq!(second.len(), 1, "{second:#?}");
    assert!(second[0].contains("demo/other"), "{second:#?}");
}

#[test]
fn a_crashed_leaders_lease_is_taken_over_once_it_expires() {
    let mut t = TwoNodes::first_leads(ECHO_BACKEND, 1);
    // SIGKILL: no release; the Lease must expire first (15 s without a renewal seen).
    let killed = std::time::Instant::now();
    (t.first.take()).expect("first").kill().expect("killed");
    t.api.wait_for_within("holder=node2", EXPIRY_TIMEOUT);
    let took = killed.elapsed();
    assert!(
        took >= Duration::from_secs(9),
        "taken over after {took:?}, before the lease could have expired"
    );
    logged(t.second(), "this agent leads");
    let before = t.api.status_patches().len();
    t.api.apply("other", &other_backend());
    let added = t.api.wait_for_status_patches(before);
    assert_eq!(objects_of(&added), ["demo/other"]);
    logged(t.second(), "XBackend status written backend=demo/other");
    assert_eq!(wrote(t.second()).len(), 1);
}

#[test]
fn agents_started_together_elect_one_writer() {
    let mut t = TwoNodes::new(ECHO_BACKEND);
    let (first, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| start_agent(&t.bed1, &t.api, "node1", "127.0.0.1:6443"));
        let second = scope.spawn(|| start_agent(&t.bed2, &t.api, "node2", "10.200.3.1:6443"));
        (first.join().expect("first"), second.join().expect("second"))
    });
    t.first = Some(first);
    t.second = Some(second);
    let patches = patches_until(&mut t.api, 1);
    assert_eq!(objects_of(&patches), ["demo/echo"]);
    // The loser has seen the winner hold the Lease.
    let leads = |agent: &Agent| agent.logs().iter().any(|l| l.contains("this agent leads"));
    // The winner logs that it leads before it writes, but its stderr reaches us through
    // a reader thread: wait for one of the two to say so before telling them apart.
    let (first_leads, _) = crate::support::poll(
        || (leads(t.first()), leads(t.second())),
        |(first, second)| *first || *second,
    );
    let (winner, loser) = if first_leads {
        (t.first.as_mut(), t.second.as_mut())
    } else {
        (t.second.as_mut(), t.first.as_mut())
    };
    let (winner, loser) = (winner.expect("winner"), loser.expect("loser"));
    logged(winner, "XBackend status written backend=demo/echo");
    logged(loser, "another agent writes XBackend status");
    assert!(leads(winner));
    assert!(!leads(loser), "{:#?}", loser.logs());
    assert_eq!(wrote(winner).len(), 1);
    assert!(wrote(loser).is_empty());
    // Exactly one Lease was created; any other attempt was refused by the server.
    let lines = t.api.lines();
    let created = lines
        .iter()
        .filter(|l| l.starts_with(&format!("create {LEASE} ")))
        .count();
    assert_eq!(created, 1, "{lines:#?}");
}

#[test]
fn two_agents_of_one_node_are_two_candidates() {
    // During an upgrade both agents of a node run: one leads, the other does not think
    // it does because the holder bears its node's name.
    let mut t = TwoNodes::new(ECHO_BACKEND);
    t.start_first();
    logged(t.first(), "this agent leads");
    patches_until(&mut t.api, 1);
    t.start_second_as("node1");
    let seen = logged(t.second(), "another agent writes XBackend status");
    assert!(seen.contains("node1/"), "{seen}");
    t.api.apply("other", &other_backend());
    logged(t.first(), "XBackend status written backend=demo/other");
    logged(t.second(), "Backend added backend=demo/other");
    assert!(wrote(t.second()).is_empty(), "{:?}", wrote(t.second()));
    assert!(
        !t.second()
            .logs()
            .iter()
            .any(|l| l.contains("this agent leads"))
    );
}
