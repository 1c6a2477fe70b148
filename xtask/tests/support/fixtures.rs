//! Fixtures several test binaries share: XBackend YAML, the agent's admin endpoint, and
//! the datapath's log line.

use std::process::Output;

use xtask::netlab::{
    Cgroup, ChildGuard, Netns, Topology,
    agent::Agent,
    in_cgroup_in_netns,
    probe::{PROBE_TIMEOUT, Reply},
};

use super::{Bed, PROBE};

/// Where the agent's admin endpoint listens, inside the node.
pub const ADMIN_ADDR: &str = "127.0.0.1:15000";

/// An `ExternalHostname` XBackend `namespace/name` for `hostname:port`, plain TCP. More
/// `spec` fields (a `tls:` block indented by two) may be appended to it.
pub fn xbackend(namespace: &str, name: &str, hostname: &str, port: u32) -> String {
    format!(
        "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackend\n\
         metadata: {{name: {name}, namespace: {namespace}}}\n\
         spec:\n  type: ExternalHostname\n  externalHostname: {{hostname: {hostname}}}\n  \
         port: {{number: {port}}}\n"
    )
}

/// The second Backend of the tests that add one: `demo/other`, other.redirector.test:9090.
pub fn other_backend() -> String {
    xbackend("demo", "other", "other.redirector.test", 9090)
}

/// `netprobe get 127.0.0.1:15000 {path}` from inside `node`.
pub fn admin_get(node: &Netns, path: &str) -> Output {
    (node.exec(PROBE))
        .args(["get", ADMIN_ADDR, path])
        .output()
        .expect("run netprobe get")
}

/// `GET http://127.0.0.1:15000{path}` from inside the node: whether it answered 2xx.
pub fn admin_ok(bed: &Bed, path: &str) -> bool {
    admin_get(&bed.topo.node, path).status.success()
}

/// Waits for the agent's next "Backend address map updated" line, which must contain
/// `what` (`added=2`, `removed=2`).
pub fn wait_for_map_update(agent: &mut Agent, what: &str) -> String {
    let line = agent
        .wait_for_log("Backend address map updated")
        .expect("map update");
    assert!(line.contains(what), "expected {what} in {line}");
    line
}

/// `netprobe connect TARGET --send hello` (IPv4) in the pod netns from inside `cgroup`
/// (a kubelet-style pod cgroup of the `--kubernetes` tests).
pub fn connect_from_cgroup(topology: &Topology, cgroup: &Cgroup, target: &str) -> Reply {
    let args = ["connect", target, "-4", "--send", "hello"];
    let mut command = in_cgroup_in_netns(cgroup, &topology.pod, PROBE, args);
    let mut client = ChildGuard::spawn("client", &mut command).expect("client");
    let done = client.finish(PROBE_TIMEOUT).expect("client exits");
    let line = done.stdout.first().cloned().unwrap_or_default();
    Reply {
        json: serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}")),
    }
}
