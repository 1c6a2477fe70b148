//! Status in the shape of the installed XBackend CRD: `status.parents[].parentRef` on a
//! Gateway API v1.6 CRD, `status.ancestors[].ancestorRef` on upstream's newest, switching
//! when the CRD is replaced; objects of both shapes get status, `EndpointSelector` ones
//! none.

use xtask::netlab::agent::Agent;

use super::{
    LEASE, logged,
    patches::{expect, objects_of, patches_until, reference, shape_of, state},
    start_agent,
};
use crate::support::{
    Bed,
    fakeapi::{API_ADDR, FakeApi},
    fixtures::xbackend,
};

/// A newest-shape Backend, a v1.6-shape one, and an EndpointSelector one.
fn objects() -> String {
    let newest = xbackend("demo", "echo", "echo.redirector.test", 8080);
    let v16 = xbackend("demo", "legacy", "api.redirector.test", 9090)
        .replace("port: {number: 9090}", "port: {port: 9090}");
    let selector = "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackend\n\
                    metadata: {name: in-cluster, namespace: demo}\n\
                    spec: {type: EndpointSelector, endpointSelector: {matchLabels: {app: db}}, \
                    port: {number: 5432}}\n";
    [newest.as_str(), &v16, selector].join("---\n")
}

#[test]
fn status_goes_where_the_installed_crd_has_it() {
    let bed = Bed::new("");
    let mut api = FakeApi::start_with_crd(&bed.topo.node, &objects(), API_ADDR, "v1.6");
    let mut agent: Agent = start_agent(&bed, &api, "node1", API_ADDR);
    let found = logged(&mut agent, "XBackend CRD found");
    assert!(
        found.contains("status.parents[].parentRef") && found.contains("v1.6.1"),
        "{found}"
    );
    api.wait_for(&format!("create {LEASE} rv="));

    // v1.6 CRD: both Backends get an entry in status.parents, the EndpointSelector one
    // nothing.
    let first = patches_until(&mut api, 2);
    let mut objects = objects_of(&first);
    objects.sort();
    assert_eq!(
        objects,
        ["demo/echo", "demo/legacy"],
        "no status for in-cluster"
    );
    for patch in &first {
        assert_eq!(shape_of(patch), ("parents", "parentRef"), "{patch}");
        assert_eq!(reference(patch)["kind"], "Namespace", "{patch}");
        assert_eq!(state(patch, "Accepted"), expect("True", "Accepted", 1));
    }

    // The CRD is upgraded to upstream's newest: every status is written again, in
    // status.ancestors.
    api.install_crd("newest");
    let found = agent
        .wait_for_log("status.ancestors[].ancestorRef")
        .expect("the agent sees the new CRD");
    assert!(found.contains("v0.0.0-dev"), "{found}");
    let all = patches_until(&mut api, 4);
    let second = &all[2..];
    let mut objects = objects_of(second);
    objects.sort();
    assert_eq!(objects, ["demo/echo", "demo/legacy"]);
    for patch in second {
        assert_eq!(shape_of(patch), ("ancestors", "ancestorRef"), "{patch}");
        assert_eq!(reference(patch)["kind"], "Namespace", "{patch}");
    }

    // One note per object, however often the catalog is rebuilt.
    let logs = agent.logs();
    let notes = |needle: &str| {
        (logs.iter())
            .filter(|l| l.contains("note: ") && l.contains(needle))
            .count()
    };
    assert_eq!(notes("demo/legacy"), 1, "{logs:#?}");
    assert_eq!(notes("demo/in-cluster"), 1, "{logs:#?}");
}
