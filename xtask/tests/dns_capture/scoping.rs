//! Kubernetes namespace scoping: a pod gets virtual addresses only for the Backends of
//! its own namespace; a pod of another namespace gets the real answer.

use super::{CaptureBed, POD_VIEW_V4, PodResolver, divergent_zone, is_virtual};
use crate::support::{PROBE, fakeapi::FakeApi, fixtures::xbackend};
use xtask::netlab::{NODE_EXT_V4, in_cgroup_in_netns};

const UID_A: &str = "0a0a0a0a-1111-4111-8111-aaaaaaaaaaaa";
const UID_B: &str = "0b0b0b0b-2222-4222-8222-bbbbbbbbbbbb";
const NAME: &str = "echo.redirector.test";

#[test]
fn a_pod_of_another_namespace_gets_the_real_answer() {
    let pod = |name: &str, namespace: &str, uid: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}, uid: {uid}}}\n\
             spec: {{nodeName: node1, containers: [{{name: app, image: app}}]}}\n"
        )
    };
    let objects = [
        xbackend("team-a", "echo", NAME, 8080),
        pod("a", "team-a", UID_A),
        pod("b", "team-b", UID_B),
    ]
    .join("---\n");
    let mut t = CaptureBed::without_agent("", &divergent_zone(&[NAME]), PodResolver::default());
    let kubepods = t.bed.topo.pod_cgroup.child("kubepods").expect("kubepods");
    let pod_a = kubepods.child(&format!("pod{UID_A}")).expect("pod a");
    let pod_b = kubepods.child(&format!("pod{UID_B}")).expect("pod b");
    let api = FakeApi::start(&t.bed.topo.node, &objects);
    let mut config = t.bed.config();
    config.extra_args = api.agent_args("node1");
    t.start_agent_with(config);

    let a = t.resolve_in(&pod_a, NAME);
    assert!(!a.is_empty() && a.iter().all(is_virtual), "team-a: {a:?}");
    let b = t.resolve_in(&pod_b, NAME);
    assert!(b.contains(&POD_VIEW_V4.parse().unwrap()), "team-b: {b:?}");
    assert!(!b.iter().any(is_virtual), "team-b: {b:?}");
    // team-a's connect by name goes through the proxy to the Bed's server on ext:8080.
    let args = [
        "connect",
        "echo.redirector.test:8080",
        "-4",
        "--send",
        "hello",
    ];
    let output = in_cgroup_in_netns(&pod_a, &t.bed.topo.pod, PROBE, args)
        .output()
        .expect("netprobe");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains(&format!("peer={NODE_EXT_V4}:")), "{text}");
    drop((t.agent.take(), pod_a, pod_b, kubepods, api));
}
