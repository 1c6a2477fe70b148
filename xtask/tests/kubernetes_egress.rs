//! The egress policy on Kubernetes (`fakeapi`, kubelet-style pod cgroups below the
//! attached cgroup): with `--egress-policy allow`, a pod of a namespace labelled `deny`
//! is refused an undeclared address while a pod of an unlabelled namespace reaches it;
//! a Node's podCIDR and then a ServiceCIDR holding that address let the labelled pod
//! through, and their removal refuses it again; relabelling to `allow` lets it through,
//! without a restart; an invalid value is warned about. One agent start.
//!
//! Each step waits for the agent's `egress policy updated` line (or the fake API
//! server's event line), never for a fixed time.

mod support;

use support::{Bed, fakeapi::FakeApi, fixtures::connect_from_cgroup};
use xtask::netlab::{Cgroup, EXT_V4, Topology, agent::Agent, probe::Reply};

const NODE: &str = "node1";
const UID_A: &str = "0a0a0a0a-5555-4555-8555-aaaaaaaaaaaa";
const UID_B: &str = "0b0b0b0b-6666-4666-8666-bbbbbbbbbbbb";
const PORT: u16 = 9090;

fn pods() -> String {
    let pod = |name: &str, namespace: &str, uid: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}, uid: {uid}}}\n\
             spec: {{nodeName: {NODE}, containers: [{{name: app, image: app}}]}}\n"
        )
    };
    [pod("a", "team-a", UID_A), pod("b", "team-b", UID_B)].join("---\n")
}

/// team-a labelled `policy` (unlabelled when `None`), team-b unlabelled.
fn namespaces(policy: Option<&str>) -> String {
    let labels = policy.map_or(String::new(), |p| {
        format!(", labels: {{egress.redirector.dev/policy: {p}}}")
    });
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: team-a{labels}}}\n---\n\
         apiVersion: v1\nkind: Namespace\nmetadata: {{name: team-b}}\n"
    )
}

fn node(pod_cidrs: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {NODE}}}\nspec: {{podCIDRs: {pod_cidrs}}}\n"
    )
}

fn service_cidr(cidrs: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {{name: kubernetes}}\n\
         spec: {{cidrs: {cidrs}}}\n"
    )
}

/// `netprobe connect EXT_V4:PORT` in the pod netns from inside `cgroup`.
fn connect(topology: &Topology, cgroup: &Cgroup) -> Reply {
    connect_from_cgroup(topology, cgroup, &format!("{EXT_V4}:{PORT}"))
}

fn assert_refused(reply: &Reply, why: &str) {
    assert!(!reply.ok(), "{why}: {:?}", reply.json);
    assert_eq!(reply.json["stage"], "connect", "{why}: {:?}", reply.json);
    let error = reply.json["error"].as_str().unwrap_or_default();
    assert!(error.contains("not permitted"), "{why}: {:?}", reply.json);
}

#[test]
fn namespace_labels_choose_the_policy_live_and_cluster_ranges_are_reachable() {
    let bed = Bed::new("");
    let _server = bed.serve(&format!("[::]:{PORT}"));
    let kubepods = bed.topo.pod_cgroup.child("kubepods").expect("kubepods");
    let pod_a = kubepods.child(&format!("pod{UID_A}")).expect("pod a");
    let pod_b = kubepods.child(&format!("pod{UID_B}")).expect("pod b");
    let mut api = FakeApi::start(&bed.topo.node, &pods());
    api.apply("namespaces", &namespaces(Some("deny")));
    api.wait_for("event ADDED namespaces /team-b");
    let mut config = bed.config();
    config.in_pod_cgroup = false;
    config.extra_args = api.agent_args(NODE);
    config
        .extra_args
        .extend(["--egress-policy".into(), "allow".into()]);
    let mut agent = Agent::start(&bed.topo, &config).expect("agent");

    // The first write already holds the label: the agent waited for the lists.
    let logs = agent.logs();
    let written = (logs.iter())
        .find(|l| l.contains("egress policy written"))
        .unwrap_or_else(|| panic!("no policy written before ready: {logs:#?}"));
    assert!(
        written.contains("labelled_pods=1") && written.contains("active=true"),
        "{written}"
    );
    assert_refused(&connect(&bed.topo, &pod_a), "team-a under deny");
    let b = connect(&bed.topo, &pod_b);
    assert!(b.ok(), "team-b under the flag's allow: {:?}", b.json);

    // A Node's pod range holding the address.
    api.apply("ranges", &node("[10.200.2.0/24, fd00:200:2::/64]"));
    let line = agent.wait_for_log("10.200.2.0/24").expect("node range");
    assert!(line.contains("egress policy updated"), "{line}");
    let a = connect(&bed.topo, &pod_a);
    assert!(a.ok(), "a Node's podCIDR under deny: {:?}", a.json);

    // The Node goes, a ServiceCIDR holding the address comes.
    api.apply("ranges", &service_cidr("[10.200.2.2/32]"));
    let line = agent.wait_for_log("10.200.2.2/32").expect("service range");
    assert!(
        !line.contains("10.200.2.0/24"),
        "the Node's range stays: {line}"
    );
    let a = connect(&bed.topo, &pod_a);
    assert!(a.ok(), "a ServiceCIDR under deny: {:?}", a.json);

    // Both gone: refused again.
    api.delete("ranges");
    agent.wait_for_log("allowed=[]").expect("ranges removed");
    assert_refused(&connect(&bed.topo, &pod_a), "team-a, no ranges");

    // Relabelled: through at once, and nothing left to judge.
    api.apply("namespaces", &namespaces(Some("allow")));
    let line = agent.wait_for_log("active=false").expect("relabelled");
    assert!(line.contains("egress policy updated"), "{line}");
    let a = connect(&bed.topo, &pod_a);
    assert!(a.ok(), "team-a relabelled allow: {:?}", a.json);

    // An invalid value: warned about, naming the namespace and value; the flag applies.
    api.apply("namespaces", &namespaces(Some("blocked")));
    let warning = (agent.wait_for_log("invalid egress policy label")).expect("warned");
    assert!(
        warning.contains("team-a") && warning.contains("blocked"),
        "{warning}"
    );
    let a = connect(&bed.topo, &pod_a);
    assert!(a.ok(), "team-a with an invalid label: {:?}", a.json);
    drop((agent, pod_a, pod_b, kubepods, api));
}
