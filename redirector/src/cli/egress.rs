//! `redirector run`'s egress policy flags.

use clap::Args;

use crate::egress::EgressPolicy;

#[derive(Debug, Args)]
pub struct EgressArgs {
    /// What processes may reach besides declared Backends: `allow` (anything: no
    /// policy), `audit` (anything; what `deny` would refuse is counted in
    /// redirector_egress_denied_total and logged), `deny` (only declared Backends,
    /// --allow-cidr networks, loopback, the agent's own listeners and DNS to port 53;
    /// the rest fails: TCP connect() and UDP sends with EPERM, raw and ICMP packets are
    /// dropped).
    ///
    /// The kernel enforces it from pinned maps: it holds while no agent runs. Who is
    /// subject: without --kubernetes, every process in --cgroup (point --cgroup at what
    /// is to be controlled); with --kubernetes, pods only (the kubelet's pod tree), never
    /// the kubelet, the container runtime or host daemons, and a Namespace label
    /// `egress.redirector.dev/policy: allow|audit|deny` overrides this flag for that
    /// namespace's pods (a relabel applies at once). The agent's own cgroup is never
    /// refused.
    #[arg(long, value_enum, value_name = "POLICY", default_value_t = EgressPolicy::Allow)]
    pub egress_policy: EgressPolicy,

    /// A network every process may reach under `audit` and `deny` (repeatable): a
    /// node-local cache, an internal registry, pod addresses a CNI assigns outside the
    /// Nodes' podCIDRs. With --kubernetes every Node's podCIDRs and the ServiceCIDR
    /// objects' ranges are added without it.
    #[arg(long = "allow-cidr", value_name = "CIDR")]
    pub allow_cidrs: Vec<ipnet::IpNet>,
}
