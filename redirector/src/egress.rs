//! Egress policy, the agent's side: writes `--egress-policy` and `--allow-cidr` into the
//! pinned maps the hooks judge from (`redirector-ebpf/src/policy.rs`), and reads back
//! what they refused or audited (`events.rs`). On Kubernetes, `cluster.rs` keeps them in
//! step with the Namespace labels and the cluster's own address ranges.
//!
//! The kernel holds the policy: the agent only writes it. Whatever the agent does later
//! (crash, restart, upgrade), what was written stays in force.

pub mod cluster;
mod events;

use std::{collections::BTreeMap, io, path::Path};

use clap::ValueEnum;
use ipnet::IpNet;
use redirector_common::{EgressConfig, egress_mode};

pub use events::{EgressMetrics, spawn_reader};

use crate::datapath::{DatapathError, EgressMaps, NetPrefix};

/// The Namespace label whose value (`allow`, `audit`, `deny`) overrides `--egress-policy`
/// for that namespace's pods.
pub const POLICY_LABEL: &str = "egress.redirector.dev/policy";

/// `--egress-policy`, and the values of the Namespace label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EgressPolicy {
    /// Anything may be reached (no policy).
    Allow,
    /// Anything may be reached; what `deny` would refuse is counted and logged.
    Audit,
    /// Only declared Backends, allowed networks, loopback, the agent's listeners and DNS.
    Deny,
}

impl EgressPolicy {
    /// The value the hooks read.
    pub fn mode(self) -> u32 {
        match self {
            EgressPolicy::Allow => egress_mode::ALLOW,
            EgressPolicy::Audit => egress_mode::AUDIT,
            EgressPolicy::Deny => egress_mode::DENY,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("writing the egress policy")]
    Datapath(#[from] DatapathError),
    #[error("finding the agent's own cgroup (/proc/self/cgroup under {mount})")]
    OwnCgroup {
        mount: String,
        #[source]
        source: io::Error,
    },
}

/// What the policy is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressSettings {
    /// For processes no per-cgroup mode covers.
    pub default: EgressPolicy,
    /// Networks every process may reach.
    pub allowed: Vec<IpNet>,
    /// The tops of the kubelet's pod tree, when only pods are subject to the policy
    /// (Kubernetes); empty: every process in `--cgroup` is.
    pub pod_trees: Option<Vec<u64>>,
    /// Pod cgroups whose namespace's label chose a mode of its own (Kubernetes).
    pub pod_modes: BTreeMap<u64, EgressPolicy>,
    /// Whether everything these settings come from was listed (Kubernetes: Namespaces,
    /// cluster ranges, this node's pods). Until then the maps are only added to: a
    /// restarting agent whose API server is slow must not take away the modes and
    /// networks the previous agent pinned.
    pub complete: bool,
}

impl EgressSettings {
    /// Whether any process may be refused or audited: the hooks skip all judging
    /// while no mode in force is other than allow.
    pub fn active(&self) -> bool {
        self.default != EgressPolicy::Allow
            || self
                .pod_modes
                .values()
                .any(|mode| *mode != EgressPolicy::Allow)
    }
}

/// Writes the policy. Everything it allows is written before the mode that refuses, so
/// a starting agent never refuses its own traffic or an allowed network in between.
pub fn install(
    maps: &mut EgressMaps,
    settings: &EgressSettings,
    cgroup2_mount: &Path,
    attached: Option<u64>,
) -> Result<(), EgressError> {
    let own = own_cgroup(cgroup2_mount).map_err(|source| EgressError::OwnCgroup {
        mount: cgroup2_mount.display().to_string(),
        source,
    })?;
    maps.add_agent_cgroup(own)?;
    if settings.active() && Some(own) == attached {
        tracing::warn!(
            cgroup = own,
            "the agent runs in the very cgroup the hooks are attached to: its processes are \
             never refused, and every other process in that cgroup shares the exemption; run \
             the agent in a cgroup of its own (a systemd unit, its own container)"
        );
    }
    write(maps, settings)?;
    let allowed: Vec<String> = settings.allowed.iter().map(IpNet::to_string).collect();
    tracing::info!(
        policy = ?settings.default,
        allowed = ?allowed,
        pods_only = settings.pod_trees.is_some(),
        labelled_pods = settings.pod_modes.len(),
        active = settings.active(),
        agent_cgroup = own,
        "egress policy written"
    );
    Ok(())
}

/// Makes the maps say `settings`: allowed networks first, then the per-cgroup modes,
/// then the settings with `ACTIVE`, so nothing is refused for want of an entry that
/// is about to be written. Returns how many cgroup entries were (written, removed).
pub fn write(
    maps: &mut EgressMaps,
    settings: &EgressSettings,
) -> Result<(usize, usize), EgressError> {
    let nets: Vec<NetPrefix> = (settings.allowed.iter())
        .map(|net| NetPrefix::new(net.addr(), net.prefix_len()))
        .collect();
    // Incomplete settings only add: see `EgressSettings::complete`.
    let prune = settings.complete;
    maps.sync_nets(&nets, prune)?;
    let mode = settings.default.mode();
    let mut config = EgressConfig {
        default_mode: mode,
        flags: 0,
    };
    let mut modes: BTreeMap<u64, u32> = match &settings.pod_trees {
        Some(trees) => {
            config.flags |= EgressConfig::PODS_ONLY;
            trees.iter().map(|tree| (*tree, mode)).collect()
        }
        None => BTreeMap::new(),
    };
    // A pod's own entry is deeper than its tree's top: the deepest listed one wins.
    modes.extend((settings.pod_modes.iter()).map(|(cgroup, policy)| (*cgroup, policy.mode())));
    let changed = maps.sync_cgroup_modes(&modes, prune)?;
    if settings.active() || (!prune && maps.is_active()?) {
        config.flags |= EgressConfig::ACTIVE;
    }
    maps.write_config(config)?;
    Ok(changed)
}

/// The cgroup id (the directory's inode) of this process's cgroup v2 cgroup.
///
/// `/proc/self/cgroup` names it from the root of the hierarchy (of this cgroup
/// namespace), but `mount` may show a subtree only: in a container, the node's cgroup
/// tree is often a bind mount of one of its directories. The mount's own root (from
/// `/proc/self/mountinfo`) is taken off first.
pub fn own_cgroup(mount: &Path) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let listed = std::fs::read_to_string("/proc/self/cgroup")?;
    let path = (listed.lines())
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or_else(|| io::Error::other("no cgroup v2 line (0::) in /proc/self/cgroup"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    let root = mount_root(&mountinfo, mount).unwrap_or("/");
    let below = Path::new(path).strip_prefix(root).map_err(|_| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "this process's cgroup {path} is not below {}, which shows the cgroup tree \
                 from {root} only",
                mount.display()
            ),
        )
    })?;
    Ok(std::fs::metadata(mount.join(below))?.ino())
}

/// The root (the directory of its filesystem it shows) of the mount at `mount_point`,
/// from `/proc/self/mountinfo` ("id parent maj:min root mount-point ...").
fn mount_root<'a>(mountinfo: &'a str, mount_point: &Path) -> Option<&'a str> {
    (mountinfo.lines()).find_map(|line| {
        let mut fields = line.split(' ');
        let root = fields.nth(3)?;
        (Path::new(fields.next()?) == mount_point).then_some(root)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mount_root_of_a_bind_mounted_subtree() {
        let mountinfo = "22 1 0:21 / / rw - ext4 /dev/vda rw\n\
                         60 22 0:30 /rdpod7-0 /run/redirector/cgroup2 ro - cgroup2 cgroup2 rw\n";
        let at = Path::new("/run/redirector/cgroup2");
        assert_eq!(mount_root(mountinfo, at), Some("/rdpod7-0"));
        assert_eq!(mount_root(mountinfo, Path::new("/sys/fs/cgroup")), None);
    }
}
