//! Per-namespace scoping with the Kubernetes source: a Backend applies to the pods of its
//! own namespace only. Two pods (kubelet-style `pod<uid>` cgroups below the attached
//! cgroup; one a static pod, known to the API by its mirror) in two namespaces dial the
//! same hostname and port, and each gets its own namespace's Backend; a process in no
//! known pod gets none. The access log and `/metrics` name each connection's workload
//! (namespace, pod, service account, cgroup below `--cgroup`). The API server serves no
//! ServiceCIDRs (before Kubernetes 1.33): the agent says so once and goes on.

mod support;

use serde_json::Value;
use support::{
    Bed,
    fakeapi::FakeApi,
    fixtures::{connect_from_cgroup, xbackend},
    tls::{sample, wait_for_sample},
};
use xtask::netlab::{Cgroup, EXT_V4, NODE_EXT_V4, POD_V4, Topology, agent::Agent, probe::Reply};

const UID_A: &str = "0a0a0a0a-1111-4111-8111-aaaaaaaaaaaa";
const UID_B: &str = "0b0b0b0b-2222-4222-8222-bbbbbbbbbbbb";
const UID_C: &str = "0c0c0c0c-3333-4333-8333-cccccccccccc";
const MIRROR_UID: &str = "0d0d0d0d-4444-4444-8444-dddddddddddd";

/// team-a's Backend forwards plain TCP; team-b's, for the same hostname and port, asks
/// for TLS origination (which the plain test server cannot speak, so it is refused).
fn objects() -> String {
    let backend = |namespace: &str, tls: &str| {
        xbackend(namespace, "echo", "echo.redirector.test", 8080) + tls
    };
    let pod = |name: &str, namespace: &str, uid: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}, uid: {uid}}}\n\
             spec: {{nodeName: node1, serviceAccountName: sa-{name}, \
             containers: [{{name: app, image: app}}]}}\n"
        )
    };
    // A static pod's mirror: the API gave it a uid of its own; its cgroup is named after
    // the kubelet's, which the annotation carries.
    let mirror = |name: &str, namespace: &str, uid: &str| {
        let mirrored = format!("{{kubernetes.io/config.mirror: {uid}}}");
        pod(name, namespace, MIRROR_UID)
            .replace("}\nspec", &format!(", annotations: {mirrored}}}\nspec"))
    };
    let tls = "  tls:\n    mode: ServerOnly\n    validation: {hostname: echo.redirector.test, wellKnownCACertificates: System}\n";
    [
        backend("team-a", ""),
        backend("team-b", tls),
        mirror("a", "team-a", UID_A),
        pod("b", "team-b", UID_B),
    ]
    .join("---\n")
}

/// Runs `netprobe connect echo.redirector.test:8080` in the pod netns from inside `cgroup`.
fn connect_from(topology: &Topology, cgroup: &Cgroup) -> Reply {
    connect_from_cgroup(topology, cgroup, "echo.redirector.test:8080")
}

/// The access log's lines so far.
fn read_access_log(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    (text.lines())
        .map(|line| serde_json::from_str(line).expect("access log line is JSON"))
        .collect()
}

#[test]
fn each_namespace_gets_its_own_backend_for_the_same_hostname() {
    let bed = Bed::new("");
    // The kubelet's cgroupfs layout below the attached cgroup: kubepods/pod<uid>.
    let kubepods = bed.topo.pod_cgroup.child("kubepods").expect("kubepods");
    let pod_a = kubepods
        .child(&format!("pod{UID_A}"))
        .expect("pod a cgroup");
    let pod_b = kubepods
        .child(&format!("pod{UID_B}"))
        .expect("pod b cgroup");
    // A pod whose cgroup exists but which the API has not told the agent about yet.
    let unmapped = kubepods
        .child(&format!("pod{UID_C}"))
        .expect("pod c cgroup");
    let mut api = FakeApi::start(&bed.topo.node, &objects());
    api.hide_service_cidrs();
    let mut config = bed.config();
    config.in_pod_cgroup = false;
    config.extra_args = api.agent_args("node1");
    let logs = tempfile::tempdir().expect("log dir");
    let access_log = logs.path().join("access.log");
    config
        .extra_args
        .extend(["--access-log".to_owned(), access_log.display().to_string()]);
    let mut agent = Agent::start(&bed.topo, &config).expect("agent");
    // The agent maps the pods before it says it is ready.
    let logs = agent.logs();
    let scoped = logs
        .iter()
        .find(|l| l.contains("pod scopes updated"))
        .unwrap_or_else(|| panic!("pods not mapped: {logs:#?}"));
    assert!(
        scoped.contains("pods=2") && scoped.contains("trees=1"),
        "{scoped}"
    );
    let no_service_cidrs = (logs.iter())
        .filter(|l| l.contains("serves no ServiceCIDRs"))
        .count();
    assert_eq!(no_service_cidrs, 1, "{logs:#?}");
    assert!(
        !logs
            .iter()
            .any(|l| l.contains("WARN") && l.contains("servicecidrs")),
        "{logs:#?}"
    );

    // team-a: plain forwarding through the proxy.
    let a = connect_from(&bed.topo, &pod_a);
    assert!(a.ok(), "{:?}", a.json);
    assert!(
        a.seen_by_server()
            .unwrap_or_default()
            .starts_with(&format!("{NODE_EXT_V4}:")),
        "{:?}",
        a.json
    );

    // team-b: its own Backend, whose TLS origination the plain server refuses.
    let b = connect_from(&bed.topo, &pod_b);
    assert!(!b.reply().contains("got=hello"), "{:?}", b.json);
    let refused = agent
        .wait_for_log("refused")
        .expect("team-b refusal logged");
    assert!(
        refused.contains("team-b/echo") && refused.contains("tls_handshake"),
        "{refused}"
    );
    // Each connection's pod, in the access log and as the metrics' source namespace.
    let lines = support::poll(|| read_access_log(&access_log), |lines| lines.len() >= 2);
    let of = |namespace: &str| {
        (lines.iter())
            .find(|l| l["source"]["namespace"] == namespace)
            .unwrap_or_else(|| panic!("no line from {namespace}: {lines:#?}"))
    };
    let (line_a, line_b) = (of("team-a"), of("team-b"));
    let source_a = serde_json::json!({
        "namespace": "team-a", "pod": "a", "service_account": "sa-a",
        "cgroup": format!("/kubepods/pod{UID_A}"),
    });
    assert_eq!(line_a["source"], source_a, "{line_a}");
    assert_eq!(
        (&line_a["outcome"], &line_a["backend"]),
        (&"forwarded".into(), &"team-a/echo".into()),
        "{line_a}"
    );
    assert_eq!(line_b["source"]["pod"], "b", "{line_b}");
    assert_eq!(line_b["source"]["service_account"], "sa-b", "{line_b}");
    assert_eq!(line_b["outcome"], "refused", "{line_b}");
    let text = wait_for_sample(
        &bed.topo.node,
        "redirector_connections_refused_total",
        &[("backend", "team-b/echo"), ("source_namespace", "team-b")],
        1.0,
    );
    let forwarded = [("backend", "team-a/echo"), ("source_namespace", "team-a")];
    let forwarded = sample(&text, "redirector_connections_forwarded_total", &forwarded);
    assert_eq!(forwarded, Some(1.0), "{text}");

    // A pod not mapped yet: refused, never sent direct, and never to the proxy.
    let early = connect_from(&bed.topo, &unmapped);
    assert!(!early.ok(), "{:?}", early.json);
    assert_eq!(early.json["stage"], "connect", "{:?}", early.json);
    assert!(
        early.json["error"]
            .as_str()
            .is_some_and(|e| e.contains("not permitted")),
        "{:?}",
        early.json
    );
    // Any other address still goes out from that pod, direct.
    let _other = bed.serve("[::]:9090");
    let elsewhere = connect_from_cgroup(&bed.topo, &unmapped, &format!("{EXT_V4}:9090"));
    assert!(elsewhere.ok(), "{:?}", elsewhere.json);
    assert!(
        (elsewhere.seen_by_server().unwrap_or_default()).starts_with(&format!("{POD_V4}:")),
        "{:?}",
        elsewhere.json
    );

    // A process outside the pod tree (a host process): neither namespace's Backend applies.
    let stranger = connect_from(&bed.topo, &bed.topo.pod_cgroup);
    assert!(stranger.ok(), "{:?}", stranger.json);
    assert!(
        stranger
            .seen_by_server()
            .unwrap_or_default()
            .starts_with(&format!("{POD_V4}:")),
        "{:?}",
        stranger.json
    );
    drop((agent, pod_a, pod_b, unmapped, kubepods, api, logs));
}
