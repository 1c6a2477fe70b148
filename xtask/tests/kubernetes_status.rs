//! XBackend status (`redirector run --kubernetes`) end to end: real agents, each on its
//! own node (network namespace, cgroup, bpffs), against `fakeapi`, which records every
//! status PATCH as a JSON line and keeps what was applied, and serves the Lease.
//!
//! Why real agents rather than the writer in-process: `redirector` is a binary crate, so
//! its writer cannot be linked into a test; and what matters is what the agent as shipped
//! does (the reconciler's view, the election, shutdown releasing the Lease). For two
//! agents, two test beds: their node namespaces are linked (10.200.3.0/24) and `fakeapi`
//! listens on 0.0.0.0 in the first, so both reach one API server, as nodes of one cluster
//! do. Each agent attaches to its own bed's pod cgroup and pins in its own bpffs.
//!
//! Every step waits for a line (a PATCH, a Lease update, an agent log), never for a
//! fixed time; "no PATCH" is checked after a later PATCH that must come after it.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{
    Bed, ECHO_BACKEND,
    fakeapi::FakeApi,
    fixtures::{other_backend, xbackend},
    tls::{ApiBackend, Ca},
};
use xtask::netlab::agent::Agent;

const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/redirector-system/leases/redirector-status-writer";
const CONTROLLER: &str = "redirector.dev/node-agent";
/// A lease of 15 s, seen expire by a candidate that polls every 5 s (+20 %), after it
/// saw the last renewal: comfortably under this.
const EXPIRY_TIMEOUT: Duration = Duration::from_secs(60);

/// `redirector run` for `node`, reaching the API server at `server`; Backends apply
/// cluster-wide (the test pods are not pods the API knows).
fn start_agent(bed: &Bed, api: &FakeApi, node: &str, server: &str) -> Agent {
    let config = bed.kube_config(api.agent_args_via(node, server));
    Agent::start(&bed.topo, &config).expect("agent")
}

/// One node. Field order is drop order: the agent first, the namespaces last.
struct OneNode {
    agent: Option<Agent>,
    api: FakeApi,
    bed: Bed,
}

impl OneNode {
    fn new(objects: &str) -> OneNode {
        let bed = Bed::new("");
        let api = FakeApi::start(&bed.topo.node, objects);
        let agent = start_agent(&bed, &api, "node1", "127.0.0.1:6443");
        OneNode {
            agent: Some(agent),
            api,
            bed,
        }
    }

    fn agent(&mut self) -> &mut Agent {
        self.agent.as_mut().expect("agent")
    }
}

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
        self.second = Some(start_agent(
            &self.bed2,
            &self.api,
            "node2",
            "10.200.3.1:6443",
        ));
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

/// Every status PATCH answered so far, once there are at least `n`.
fn patches_until(api: &mut FakeApi, n: usize) -> Vec<Value> {
    loop {
        let patches = api.status_patches();
        if patches.len() >= n {
            return patches;
        }
        api.wait_for_status_patches(patches.len());
    }
}

/// `demo/echo` from `.../namespaces/demo/xbackends/echo/status`.
fn object_of(patch: &Value) -> String {
    let path = patch["path"].as_str().unwrap_or_default();
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        [.., "namespaces", ns, "xbackends", name, "status"] => format!("{ns}/{name}"),
        _ => panic!("not an XBackend status path: {path}"),
    }
}

fn objects_of(patches: &[Value]) -> Vec<String> {
    patches.iter().map(object_of).collect()
}

/// The patches of `object`.
fn of<'a>(patches: &'a [Value], object: &str) -> Vec<&'a Value> {
    patches.iter().filter(|p| object_of(p) == object).collect()
}

/// This controller's entry in a patch (checked to be the only one).
fn entry(patch: &Value) -> &Value {
    let parents = patch["body"]["status"]["parents"]
        .as_array()
        .unwrap_or_else(|| panic!("no status.parents: {patch}"));
    assert_eq!(parents.len(), 1, "{patch}");
    assert_eq!(parents[0]["controllerName"], CONTROLLER, "{patch}");
    &parents[0]
}

/// The condition `type_` of a patch's entry.
fn condition<'a>(patch: &'a Value, type_: &str) -> Option<&'a Value> {
    let conditions = entry(patch)["conditions"].as_array()?;
    conditions.iter().find(|c| c["type"] == type_)
}

/// `(status, reason, observedGeneration)` of a condition that must be there.
fn state(patch: &Value, type_: &str) -> (String, String, i64) {
    let c = condition(patch, type_).unwrap_or_else(|| panic!("no {type_} in {patch}"));
    (
        c["status"].as_str().unwrap_or_default().to_owned(),
        c["reason"].as_str().unwrap_or_default().to_owned(),
        c["observedGeneration"].as_i64().unwrap_or(-1),
    )
}

fn expect(status: &str, reason: &str, generation: i64) -> (String, String, i64) {
    (status.to_owned(), reason.to_owned(), generation)
}

fn message<'a>(patch: &'a Value, type_: &str) -> &'a str {
    (condition(patch, type_).and_then(|c| c["message"].as_str())).unwrap_or_default()
}

fn transition<'a>(patch: &'a Value, type_: &str) -> &'a str {
    (condition(patch, type_).and_then(|c| c["lastTransitionTime"].as_str())).unwrap_or_default()
}

/// The objects of the first test, with `api` as the TLS Backend (and its ConfigMap).
fn objects_with(api: &str) -> String {
    // Valid, but its hostname resolves nowhere (the node's resolver is 127.0.0.1, where
    // nothing answers): a node-local problem, which must not show in status.
    let unresolvable = xbackend("demo", "nowhere", "nowhere.redirector.test", 9090);
    // Rejected by the agent's validation (stricter than the CRD: no IP literals).
    let literal = xbackend("demo", "literal", "10.0.0.1", 8080);
    [ECHO_BACKEND, &unresolvable, &literal, api].join("\n---\n")
}

/// The first line of `agent`'s log containing `needle`, logged before now or later
/// (the election may be decided before or after the ready line).
fn logged(agent: &mut Agent, needle: &str) -> String {
    if let Some(line) = agent.logs().into_iter().find(|l| l.contains(needle)) {
        return line;
    }
    (agent.wait_for_log(needle)).unwrap_or_else(|e| panic!("{needle}: {e:#}"))
}

/// Whether `agent` wrote any status (its log says so for every write).
fn wrote(agent: &Agent) -> Vec<String> {
    (agent.logs().into_iter())
        .filter(|l| l.contains("XBackend status written"))
        .collect()
}

#[test]
fn status_says_accepted_and_resolved_refs_with_upstream_reasons() {
    let ca = Ca::new("status CA");
    let dangling = ApiBackend {
        ca_pem: None,
        ..ApiBackend::server_only(&ca)
    };
    let mut t = OneNode::new(&objects_with(&dangling.yaml()));
    t.api.wait_for(&format!("create {LEASE} rv="));
    let patches = patches_until(&mut t.api, 4);
    let mut objects = objects_of(&patches);
    objects.sort();
    assert_eq!(
        objects,
        ["demo/api", "demo/echo", "demo/literal", "demo/nowhere"],
        "one write per object"
    );

    for patch in &patches {
        // Server-side apply of the status subresource, as this field manager.
        assert_eq!(patch["query"]["fieldManager"], "redirector", "{patch}");
        assert_eq!(patch["query"]["force"], "true", "{patch}");
        assert_eq!(
            patch["contentType"], "application/apply-patch+yaml",
            "{patch}"
        );
        let body = &patch["body"];
        assert_eq!(body["apiVersion"], "gateway.networking.x-k8s.io/v1alpha1");
        assert_eq!(body["kind"], "XBackend");
        // The resourceVersion read: the precondition that keeps other controllers'
        // entries (none here) from being lost.
        assert!(body["metadata"]["resourceVersion"].is_string(), "{patch}");
        // The parent: the XBackend's own Namespace.
        assert_eq!(
            entry(patch)["parentRef"],
            serde_json::json!({"group": "", "kind": "Namespace", "name": "demo"}),
            "{patch}"
        );
        for c in entry(patch)["conditions"].as_array().expect("conditions") {
            let time = c["lastTransitionTime"].as_str().unwrap_or_default();
            assert!(time.len() == 20 && time.ends_with('Z'), "{c}");
        }
    }
    let echo = of(&patches, "demo/echo")[0];
    assert_eq!(state(echo, "Accepted"), expect("True", "Accepted", 1));
    assert_eq!(
        state(echo, "ResolvedRefs"),
        expect("True", "ResolvedRefs", 1)
    );

    // Resolution fails on this node: not the Backend's fault, not in status.
    let nowhere = of(&patches, "demo/nowhere")[0];
    assert_eq!(state(nowhere, "Accepted"), expect("True", "Accepted", 1));
    assert_eq!(
        state(nowhere, "ResolvedRefs"),
        expect("True", "ResolvedRefs", 1)
    );

    let literal = of(&patches, "demo/literal")[0];
    assert_eq!(state(literal, "Accepted"), expect("False", "Invalid", 1));
    assert_eq!(
        message(literal, "Accepted"),
        "spec.externalHostname.hostname: must be a DNS name, not an IP address"
    );
    assert!(condition(literal, "ResolvedRefs").is_none(), "{literal}");

    let api = of(&patches, "demo/api")[0];
    assert_eq!(state(api, "Accepted"), expect("True", "Accepted", 1));
    assert_eq!(
        state(api, "ResolvedRefs"),
        expect("False", "InvalidCACertificateRef", 1)
    );
    assert_eq!(
        message(api, "ResolvedRefs"),
        "ConfigMap demo/api-ca (referenced by the Backend) does not exist"
    );

    // The CA appears: ResolvedRefs turns True; Accepted keeps its transition time; the
    // spec did not change, so neither did the generation. Nothing else is written.
    let before = t.api.status_patches().len();
    t.api.apply(
        "initial",
        &objects_with(&ApiBackend::server_only(&ca).yaml()),
    );
    let next = t.api.wait_for_status_patches(before);
    assert_eq!(objects_of(&next), ["demo/api"]);
    let fixed = &next[0];
    assert_eq!(state(fixed, "Accepted"), expect("True", "Accepted", 1));
    assert_eq!(
        state(fixed, "ResolvedRefs"),
        expect("True", "ResolvedRefs", 1)
    );
    assert_eq!(transition(fixed, "Accepted"), transition(api, "Accepted"));
    // What was applied is what the server now holds (the answer and every later read).
    t.api.wait_for("event MODIFIED xbackends demo/api");
    (t.agent())
        .wait_for_log(r#"backend=demo/api generation=1 accepted="True" resolved_refs="True""#)
        .expect("logged");
    let written = wrote(t.agent());
    assert_eq!(written.len(), 5, "{written:#?}");
}

#[test]
fn status_is_written_once_per_change_and_not_again_after_a_restart() {
    let mut t = OneNode::new(ECHO_BACKEND);
    let first = t.api.wait_for_status_patches(0);
    assert_eq!(objects_of(&first), ["demo/echo"]);

    // A new Backend: one write, for it alone.
    t.api.apply("other", &other_backend());
    let added = t.api.wait_for_status_patches(1);
    assert_eq!(objects_of(&added), ["demo/other"]);

    // A label on echo (a new resourceVersion, no new generation, the same catalog),
    // then a spec change of other: only other is written, with its new generation.
    let labelled = ECHO_BACKEND.replace("namespace: demo", "namespace: demo\n  labels: {team: a}");
    t.api.apply("initial", &labelled);
    t.api.wait_for("event MODIFIED xbackends demo/echo");
    t.api.apply(
        "other",
        &other_backend().replace("port: 9090", "port: 9091"),
    );
    let moved = t.api.wait_for_status_patches(2);
    assert_eq!(objects_of(&moved), ["demo/other"]);
    assert_eq!(state(&moved[0], "Accepted"), expect("True", "Accepted", 2));
    assert_eq!(
        transition(&moved[0], "Accepted"),
        transition(&added[0], "Accepted"),
        "a new generation with the same result keeps the transition time"
    );

    // Invalid, then valid again: one write each.
    t.api.apply(
        "other",
        &other_backend().replace("hostname: other.redirector.test", "hostname: 10.0.0.2"),
    );
    let invalid = t.api.wait_for_status_patches(3);
    assert_eq!(objects_of(&invalid), ["demo/other"]);
    assert_eq!(
        state(&invalid[0], "Accepted"),
        expect("False", "Invalid", 3)
    );
    assert!(
        message(&invalid[0], "Accepted").contains("the last accepted version stays in force"),
        "{}",
        invalid[0]
    );
    t.api.apply("other", &other_backend());
    let valid = t.api.wait_for_status_patches(4);
    assert_eq!(objects_of(&valid), ["demo/other"]);
    assert_eq!(state(&valid[0], "Accepted"), expect("True", "Accepted", 4));
    assert!(transition(&valid[0], "Accepted") >= transition(&invalid[0], "Accepted"));
    assert_eq!(of(&t.api.status_patches(), "demo/echo").len(), 1);

    // SIGTERM: the agent releases the Lease on its way out.
    let finished = (t.agent.take())
        .expect("agent")
        .terminate()
        .expect("terminated");
    assert!(finished.status.success(), "{finished:?}");
    assert!(
        finished.stderr.iter().any(|l| l.contains("Lease released")),
        "{:#?}",
        finished.stderr
    );
    t.api.wait_for("holder=-");

    // A restart reads what the server holds (one list) and rewrites none of it: the
    // only write is for the Backend added afterwards.
    let before = t.api.status_patches().len();
    t.agent = Some(start_agent(&t.bed, &t.api, "node1", "127.0.0.1:6443"));
    logged(t.agent(), "this agent leads");
    t.api.apply(
        "third",
        &other_backend().replace("name: other", "name: third"),
    );
    let after = t.api.wait_for_status_patches(before);
    assert_eq!(
        objects_of(&after),
        ["demo/third"],
        "nothing rewritten after the restart"
    );
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
        &other_backend().replace("port: 9090", "port: 9091"),
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
    let (winner, loser) = if leads(t.first()) {
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
