//! The egress policy at start: written into the maps before the agent says it is
//! ready, and its events read from then on. On Kubernetes, kept in step with the
//! Namespace labels and the cluster's ranges from then on too.

use std::{path::Path, sync::Arc, time::Duration};

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::cgroup2_root;
use crate::{
    cli::RunArgs,
    datapath::{self, EgressMaps, PinLayout},
    egress::{
        self, EgressMetrics, EgressPolicy, EgressSettings,
        cluster::{ClusterView, EgressSync, Planner, wait_listed},
    },
    resolved_names::ResolvedNames,
    workload::Workloads,
};

/// How long the first write waits for Namespaces, Nodes, ServiceCIDRs and this node's
/// pods to be listed (they are, by then, as long as the API server answers: the
/// Backends it served first were listed by watches started at the same time).
const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// Writes the policy and starts reading its events (and, on Kubernetes, following the
/// cluster through `view`). Returns where the DNS capture remembers names, when the
/// policy can refuse or audit anything.
pub async fn start(
    args: &RunArgs,
    mut maps: EgressMaps,
    cgroup: &Path,
    mut view: ClusterView,
    workloads: Arc<Workloads>,
    metrics: Arc<EgressMetrics>,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Arc<ResolvedNames>>> {
    let policy = args.egress.egress_policy;
    let mount = cgroup2_root().context("finding the cgroup2 mount for the agent's own cgroup")?;
    let attached = std::fs::metadata(cgroup).ok().map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.ino()
    });
    let events = maps.events.take();
    let names = match args.kubernetes {
        true => {
            let root = args.pod_cgroup_root.as_deref().unwrap_or(cgroup);
            let pods_listed = wait_listed(&mut view, LIST_TIMEOUT).await;
            let allow = args.egress.allow_cidrs.clone();
            let mut planner = Planner::new(policy, allow, root.to_path_buf());
            if pods_listed {
                planner.pods_listed();
            }
            let (settings, _) = planner.plan(&mut view);
            let no_trees = settings.pod_trees.as_ref().is_none_or(Vec::is_empty);
            if no_trees && settings.active() {
                tracing::error!(root = %root.display(), ?policy, "no kubepods cgroup found below --pod-cgroup-root: the egress policy applies to pods only and finds none; pass --pod-cgroup-root");
            }
            egress::install(&mut maps, &settings, &mount, attached)?;
            let sync = EgressSync::new(maps, planner, settings);
            tokio::spawn(sync.run(view, shutdown.clone()));
            // A label may turn the policy on at any time: the names are kept from the
            // start, so that its first refusals already name what the pod resolved.
            Some(Arc::new(ResolvedNames::new(args.dns.dns_grace)))
        }
        false => {
            let settings = EgressSettings {
                default: policy,
                allowed: args.egress.allow_cidrs.clone(),
                pod_trees: None,
                pod_modes: Default::default(),
                complete: true,
            };
            egress::install(&mut maps, &settings, &mount, attached)?;
            (policy != EgressPolicy::Allow)
                .then(|| Arc::new(ResolvedNames::new(args.dns.dns_grace)))
        }
    };
    if let Some(events) = events {
        egress::spawn_reader(events, workloads, names.clone(), metrics, shutdown.clone())
            .context("reading the egress policy's events")?;
    }
    Ok(names)
}

/// Before anything of the agent's connects: its own cgroup is listed in a pinned policy
/// (a restart or an upgrade in a new container, under `deny`). Failing here is logged,
/// not fatal: the policy is written whole once the datapath is installed.
pub fn exempt_self_early(args: &RunArgs) {
    let layout = PinLayout::new(&args.bpffs.bpffs);
    let own = cgroup2_root().and_then(|mount| Ok(egress::own_cgroup(&mount)?));
    match own.map(|own| (own, datapath::exempt_agent_cgroup(&layout, own))) {
        Ok((own, Ok(true))) => tracing::debug!(
            cgroup = own,
            "the agent's cgroup exempt in the pinned egress policy"
        ),
        Ok((_, Ok(false))) => {}
        Ok((own, Err(error))) => {
            tracing::warn!(cgroup = own, error = %anyhow::Error::from(error), "cannot exempt the agent's cgroup from the pinned egress policy yet: its API requests may be refused until the datapath is installed")
        }
        Err(error) => tracing::warn!(error = %error, "cannot find the agent's own cgroup"),
    }
}
