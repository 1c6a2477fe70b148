//! As root: the agent, with the DaemonSet's arguments, against `fakeapi`, through
//! everything it does with the API (XBackends, a CA ConfigMap, a client Secret, a
//! BackendPolicy and its credential Secret, this node's pods, the status Lease, status
//! writes of both kinds, the Lease released on shutdown). Every
//! request `fakeapi` logged must be allowed by the rendered RBAC (`rbac.rs`), and every
//! grant must have been used by some request: nothing is missing, nothing is granted in
//! vain. Each step waits for a line `fakeapi` prints, never for a fixed time.

use anyhow::Result;
use k8s_openapi::api::apps::v1::DaemonSet;
use xtask::netlab::agent::Agent;

use super::{
    NAMESPACE, agent_container,
    args::{NODE_NAME, expanded_args, flags},
    rbac::{Request, field_selector, grants, request},
    render::{deploy_dir, render, typed},
    support::{
        Bed,
        fakeapi::FakeApi,
        tls::{ApiBackend, Ca},
    },
};

/// The DaemonSet's arguments that the test bed does not set itself (it picks the
/// cgroup, bpffs and proxy address of its own node, and reads plain-text logs).
const BED_FLAGS: &[&str] = &[
    "--cgroup",
    "--bpffs",
    "--proxy-addr",
    "--admin-addr",
    "--admin-socket",
    "--log-format",
];

#[test]
fn every_api_request_of_the_agent_is_authorized_and_every_grant_is_used() {
    let objects = render(&deploy_dir());
    let grants = grants(&objects);
    let daemon_set: DaemonSet = typed(&objects, "DaemonSet", "redirector");
    let args = expanded_args(agent_container(&daemon_set), NAMESPACE).unwrap();
    let mut agent_args: Vec<String> = Vec::new();
    for arg in &args[1..] {
        let flag = flags(std::slice::from_ref(arg));
        assert_eq!(flag.len(), 1, "{arg}: the DaemonSet writes --flag=value");
        if !BED_FLAGS.contains(&flag[0]) {
            agent_args.push(arg.clone());
        }
    }
    assert!(agent_args.iter().any(|a| a == "--kubernetes"), "{args:?}");

    // A Backend with a CA ConfigMap and a client Secret, a BackendPolicy with a
    // credential from another Secret (absent: it is watched all the same), and a pod on
    // the agent's node.
    let ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let backend = ApiBackend {
        protocol: "HTTP",
        ..ApiBackend::client_and_server(&ca, client_ca.client("workload.demo"))
    };
    let policy = "apiVersion: policy.redirector.dev/v1alpha1\nkind: BackendPolicy\n\
                  metadata: {name: keys, namespace: demo}\nspec:\n  targetRefs:\n  \
                  - {group: gateway.networking.x-k8s.io, kind: XBackend, name: api}\n  \
                  credentials:\n  - header: Authorization\n    \
                  valueFrom: {secretKeyRef: {name: api-key, key: token}}\n";
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: client, namespace: demo}}\n\
         spec: {{nodeName: {NODE_NAME}}}\n"
    );
    let bed = Bed::new("");
    let objects = format!("{}---\n{policy}---\n{pod}", backend.yaml());
    let mut api = FakeApi::start(&bed.topo.node, &objects);
    let mut config = bed.config();
    config.extra_args = vec![
        "--kubeconfig".to_owned(),
        api.kubeconfig().display().to_string(),
    ];
    config.extra_args.extend(agent_args);
    let agent = Agent::start(&bed.topo, &config).expect("agent");

    // Everything the agent does at least once: it leads (a fresh API server has no
    // Lease), so it writes status; it watches what it listed; on SIGTERM it releases
    // the Lease.
    let policy_status = "/backendpolicies/keys/status";
    let mut seen = 0;
    while !(api.status_patches().iter()).any(|p| {
        p["path"]
            .as_str()
            .is_some_and(|p| p.ends_with(policy_status))
    }) {
        seen += api.wait_for_status_patches(seen).len();
    }
    let xbackends = "/apis/gateway.networking.x-k8s.io/v1alpha1/xbackends";
    api.wait_for_request("watch", xbackends, &[]);
    let policies = "/apis/policy.redirector.dev/v1alpha1/backendpolicies";
    api.wait_for_request("watch", policies, &[]);
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let crd_name = "fieldSelector=metadata.name=xbackends.gateway.networking.x-k8s.io";
    api.wait_for_request("watch", crds, &[crd_name]);
    let on_node = format!("fieldSelector=spec.nodeName={NODE_NAME}");
    api.wait_for_request("watch", "/api/v1/pods", &[&on_node]);
    let ca_name = "fieldSelector=metadata.name=api-ca";
    api.wait_for_request("watch", "/api/v1/namespaces/demo/configmaps", &[ca_name]);
    for secret in ["api-client", "api-key"] {
        let name = format!("fieldSelector=metadata.name={secret}");
        api.wait_for_request("watch", "/api/v1/namespaces/demo/secrets", &[&name]);
    }
    let finished = agent.terminate().expect("the agent exits");
    assert!(finished.status.success(), "{:?}", finished.status);
    api.wait_for(" holder=-");

    let requests: Vec<Request> = (api.lines().iter())
        .filter_map(|line| request(line))
        .collect::<Result<_>>()
        .unwrap();
    let denied: Vec<&str> = (requests.iter())
        .filter(|r| !grants.iter().any(|g| g.allows(r)))
        .map(|r| r.line.as_str())
        .collect();
    assert!(
        denied.is_empty(),
        "requests the RBAC in deploy/ does not allow:\n{denied:#?}"
    );

    let mut unused = Vec::new();
    for grant in &grants {
        let rule = &grant.rule;
        for resource in rule.resources.as_deref().unwrap_or_default() {
            for verb in &rule.verbs {
                let used = requests
                    .iter()
                    .any(|r| r.resource == *resource && r.verb == *verb && grant.allows(r));
                if !used {
                    unused.push(format!("{verb} {resource} ({})", grant.origin));
                }
            }
        }
    }
    assert!(
        unused.is_empty(),
        "granted but never requested:\n{unused:#?}\nrequests:\n{:#?}",
        requests.iter().map(|r| &r.line).collect::<Vec<_>>()
    );

    // What RBAC cannot enforce, the agent does: Secrets and ConfigMaps one named object
    // at a time, pods of its own node only.
    for r in &requests {
        match r.resource.as_str() {
            "secrets" | "configmaps" => assert!(
                r.namespace.is_some() && r.name.is_some(),
                "not one named object: {}",
                r.line
            ),
            "pods" => assert!(
                field_selector(&r.query).contains(&&on_node["fieldSelector=".len()..]),
                "not this node's pods only: {}",
                r.line
            ),
            _ => {}
        }
    }
}
