//! The standard test bed: a pod, the node it runs on, and an external server.
//!
//! ```text
//!  pod (cgroup)                 node (router, agent)                  ext (servers)
//!  10.200.1.2/24   <-- veth --> 10.200.1.1/24 | 10.200.2.1/24 <-- veth --> 10.200.2.2/24
//!  fd00:200:1::2/64             fd00:200:1::1 | fd00:200:2::1             fd00:200:2::2/64
//! ```
//!
//! It mirrors a Kubernetes node: pod traffic to the outside world crosses the node, where
//! the agent runs. No namespace has a default route, so nothing can leak to a real network.

use super::{Cgroup, Netns, Veth};
use anyhow::Result;
use std::ffi::OsStr;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;

/// The pod's address.
pub const POD_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 2);
/// The pod's IPv6 address.
pub const POD_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 1, 0, 0, 0, 0, 2);
/// The node's address on the pod link (the pod's gateway).
pub const NODE_POD_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 1, 1);
/// The node's IPv6 address on the pod link.
pub const NODE_POD_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 1, 0, 0, 0, 0, 1);
/// The node's address on the external link (ext's gateway back to the pod).
pub const NODE_EXT_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 2, 1);
/// The node's IPv6 address on the external link.
pub const NODE_EXT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 2, 0, 0, 0, 0, 1);
/// The external server's address.
pub const EXT_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 2, 2);
/// The external server's IPv6 address.
pub const EXT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x200, 2, 0, 0, 0, 0, 2);

/// Three namespaces and the pod's cgroup; everything is removed on drop.
///
/// Field order is drop order: the cgroup goes first (its processes are moved out), then
/// the namespaces. Declare child processes after the topology so they are killed before.
#[derive(Debug)]
pub struct Topology {
    /// The cgroup clients are put into; the agent attaches its hooks here.
    pub pod_cgroup: Cgroup,
    pub pod: Netns,
    pub node: Netns,
    pub ext: Netns,
    /// pod <-> node: `local` is in pod, `remote` in node.
    pub pod_link: Veth,
    /// node <-> ext: `local` is in node, `remote` in ext (capture here to see the wire).
    pub ext_link: Veth,
}

impl Topology {
    /// Builds the test bed (about 20 `ip` invocations, ~100 ms).
    pub fn new() -> Result<Topology> {
        let pod_cgroup = Cgroup::new("pod")?;
        let pod = Netns::new("pod")?;
        let node = Netns::new("node")?;
        let ext = Netns::new("ext")?;

        let pod_link = pod.link(
            &node,
            &[&cidr(POD_V4, 24), &cidr(POD_V6, 64)],
            &[&cidr(NODE_POD_V4, 24), &cidr(NODE_POD_V6, 64)],
        )?;
        let ext_link = node.link(
            &ext,
            &[&cidr(NODE_EXT_V4, 24), &cidr(NODE_EXT_V6, 64)],
            &[&cidr(EXT_V4, 24), &cidr(EXT_V6, 64)],
        )?;
        node.enable_forwarding()?;
        pod.route_add("10.200.2.0/24", &NODE_POD_V4.to_string())?;
        pod.route_add("fd00:200:2::/64", &NODE_POD_V6.to_string())?;
        ext.route_add("10.200.1.0/24", &NODE_EXT_V4.to_string())?;
        ext.route_add("fd00:200:1::/64", &NODE_EXT_V6.to_string())?;

        Ok(Topology {
            pod_cgroup,
            pod,
            node,
            ext,
            pod_link,
            ext_link,
        })
    }

    /// A command running `program args..` in the pod netns *and* the pod cgroup.
    ///
    /// The process joins the cgroup before it execs the program, so even its very first
    /// `connect` is seen by hooks attached to the cgroup.
    pub fn spawn_in_pod<I, S>(&self, program: impl AsRef<OsStr>, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        in_cgroup_in_netns(&self.pod_cgroup, &self.pod, program, args)
    }
}

/// A command running `program args..` inside `netns` and `cgroup`:
/// `sh -c 'echo $$ > "$1" && shift && exec "$@"' sh <cgroup.procs> ip netns exec <ns> ...`.
///
/// The shell writes its own pid into the cgroup, then execs (`ip netns exec` execs too),
/// so the final program keeps that pid and is in the cgroup from its first instruction.
/// Used for clients in the pod and for the agent in the node.
pub fn in_cgroup_in_netns<I, S>(
    cgroup: &Cgroup,
    netns: &Netns,
    program: impl AsRef<OsStr>,
    args: I,
) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new("sh");
    cmd.args(["-c", r#"echo $$ > "$1" && shift && exec "$@""#, "sh"])
        .arg(cgroup.procs_file())
        .args(["ip", "netns", "exec", netns.name()])
        .arg(program)
        .args(args);
    cmd
}

fn cidr(addr: impl std::fmt::Display, prefix: u8) -> String {
    format!("{addr}/{prefix}")
}
