//! The egress policy at start: written into the maps before the agent says it is
//! ready, and its events read from then on.

use std::{path::Path, sync::Arc};

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::cgroup2_root;
use crate::{
    cli::RunArgs,
    datapath::EgressMaps,
    egress::{self, EgressMetrics, EgressPolicy, EgressSettings},
    resolved_names::ResolvedNames,
    scopes::pod_trees,
    workload::Workloads,
};

/// Writes the policy and starts reading its events. Returns where the DNS capture
/// remembers names, when the policy can refuse or audit anything.
pub fn start(
    args: &RunArgs,
    mut maps: EgressMaps,
    cgroup: &Path,
    workloads: Arc<Workloads>,
    metrics: Arc<EgressMetrics>,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Arc<ResolvedNames>>> {
    let policy = args.egress.egress_policy;
    let pod_trees = match args.kubernetes {
        true => {
            let root = args.pod_cgroup_root.as_deref().unwrap_or(cgroup);
            let trees = pod_trees(root);
            if trees.is_empty() && policy != EgressPolicy::Allow {
                tracing::error!(root = %root.display(), ?policy, "no kubepods cgroup found below --pod-cgroup-root: the egress policy applies to pods only and finds none; pass --pod-cgroup-root");
            }
            Some(trees)
        }
        false => None,
    };
    let settings = EgressSettings {
        default: policy,
        allowed: args.egress.allow_cidrs.clone(),
        pod_trees,
    };
    let mount = cgroup2_root().context("finding the cgroup2 mount for the agent's own cgroup")?;
    let attached = std::fs::metadata(cgroup).ok().map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.ino()
    });
    egress::install(&mut maps, &settings, &mount, attached)?;
    let names =
        (policy != EgressPolicy::Allow).then(|| Arc::new(ResolvedNames::new(args.dns.dns_grace)));
    if let Some(events) = maps.events.take() {
        egress::spawn_reader(events, workloads, names.clone(), metrics, shutdown.clone())
            .context("reading the egress policy's events")?;
    }
    Ok(names)
}
