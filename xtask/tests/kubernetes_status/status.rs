//! What the status says (Accepted, ResolvedRefs, their reasons, generations and
//! transition times), and that it is written once per change, not again after a restart.

use xtask::netlab::agent::Agent;

use super::{
    LEASE, logged,
    patches::{
        condition, entry, expect, message, objects_of, of, patches_until, reference, shape_of,
        state, transition,
    },
    start_agent, wrote,
};
use crate::support::{
    Bed, ECHO_BACKEND,
    fakeapi::FakeApi,
    fixtures::{other_backend, xbackend},
    tls::{ApiBackend, Ca},
};

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
/// The objects of the first test, with `api` as the TLS Backend (and its ConfigMap).
fn objects_with(api: &str) -> String {
    // Valid, but its hostname resolves nowhere (the node's resolver is 127.0.0.1, where
    // nothing answers): a node-local problem, which must not show in status.
    let unresolvable = xbackend("demo", "nowhere", "nowhere.redirector.test", 9090);
    // Rejected by the agent's validation (stricter than the CRD: no IP literals).
    let literal = xbackend("demo", "literal", "10.0.0.1", 8080);
    [ECHO_BACKEND, &unresolvable, &literal, api].join("\n---\n")
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
        // The ancestor: the XBackend's own Namespace, in the installed (newest) CRD's
        // shape.
        assert_eq!(shape_of(patch), ("ancestors", "ancestorRef"), "{patch}");
        assert_eq!(
            *reference(patch),
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
        &other_backend().replace("number: 9090", "number: 9091"),
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
