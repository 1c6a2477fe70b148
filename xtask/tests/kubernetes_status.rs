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
//! The fake API server holds the XBackend CRD (`redirector crd`, newest unless a test
//! says otherwise): the agent writes status in its shape (`shapes.rs`).
//!
//! Every step waits for a line (a PATCH, a Lease update, an agent log), never for a
//! fixed time; "no PATCH" is checked after a later PATCH that must come after it.

mod support;

#[path = "kubernetes_status/election.rs"]
mod election;
#[path = "kubernetes_status/patches.rs"]
mod patches;
#[path = "kubernetes_status/shapes.rs"]
mod shapes;
#[path = "kubernetes_status/status.rs"]
mod status;

use support::{Bed, fakeapi::FakeApi};
use xtask::netlab::agent::Agent;

const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/redirector-system/leases/redirector-status-writer";

/// `redirector run` for `node`, reaching the API server at `server`; Backends apply
/// cluster-wide (the test pods are not pods the API knows).
fn start_agent(bed: &Bed, api: &FakeApi, node: &str, server: &str) -> Agent {
    let config = bed.kube_config(api.agent_args_via(node, server));
    Agent::start(&bed.topo, &config).expect("agent")
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
