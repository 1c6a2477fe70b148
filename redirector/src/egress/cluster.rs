//! The egress policy on Kubernetes: per-namespace modes from the Namespace label
//! [`POLICY_LABEL`](super::POLICY_LABEL), and the cluster's own pod and Service ranges
//! among the allowed networks.
//!
//! `CGROUP_MODES` holds the tops of the kubelet's pod tree with `--egress-policy`, and
//! the cgroup of each pod of a labelled namespace with that namespace's mode (the hooks
//! take the deepest listed ancestor, so a pod's own entry wins over its tree's).
//! `ALLOWED_NETS` holds `--allow-cidr`, every Node's `spec.podCIDRs` and the ServiceCIDR
//! objects' `spec.cidrs`. Both are re-synced by diff whenever the pods of this node, the
//! labels, the ranges or the pod cgroups change, as `ScopeSync` does for `SCOPES`.
//!
//! A pod of a labelled namespace has its tree's (the default) mode from when its cgroup
//! appears until the next look finds it: every [`RETRY_FIRST`] at first, backing off to
//! [`RETRY_MAX`] for pods whose cgroup takes long to appear. The kubelet creates the
//! pod's cgroup with its sandbox, before any of its containers starts.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use clap::ValueEnum;
use ipnet::IpNet;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{EgressPolicy, EgressSettings, POLICY_LABEL, write};
use crate::{
    datapath::EgressMaps,
    scopes::{pod_cgroups, pod_trees},
    workload::Pods,
};

/// First retry period while a labelled pod's cgroup has not been created yet.
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// Longest retry period.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// Namespace name -> the value of its policy label (namespaces without it left out).
pub type NamespaceLabels = BTreeMap<String, String>;

/// The address ranges the cluster publishes; each `None` until first listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterRanges {
    /// Every Node's `spec.podCIDRs`.
    pub nodes: Option<Vec<IpNet>>,
    /// The ServiceCIDR objects' `spec.cidrs` (empty where the cluster serves none).
    pub services: Option<Vec<IpNet>>,
}

impl ClusterRanges {
    pub fn listed(&self) -> bool {
        self.nodes.is_some() && self.services.is_some()
    }
}

/// What the Kubernetes source publishes for the policy.
pub struct ClusterFeeds {
    /// `None` until the Namespaces are listed.
    pub namespaces: watch::Sender<Option<NamespaceLabels>>,
    pub ranges: watch::Sender<ClusterRanges>,
}

/// The receiving ends, with this node's pods.
pub struct ClusterView {
    pub namespaces: watch::Receiver<Option<NamespaceLabels>>,
    pub ranges: watch::Receiver<ClusterRanges>,
    pub pods: watch::Receiver<Pods>,
}

/// The feeds and the view on them; `pods` must not have been read from yet.
pub fn channels(pods: watch::Receiver<Pods>) -> (ClusterFeeds, ClusterView) {
    let (namespaces_tx, namespaces) = watch::channel(None);
    let (ranges_tx, ranges) = watch::channel(ClusterRanges::default());
    let feeds = ClusterFeeds {
        namespaces: namespaces_tx,
        ranges: ranges_tx,
    };
    let view = ClusterView {
        namespaces,
        ranges,
        pods,
    };
    (feeds, view)
}

/// Waits at most `within` for the Namespaces, the ranges and this node's pods to be
/// listed, so that the first write of the policy already holds them: a restarting
/// agent must not take a labelled namespace's mode or a cluster range away, even
/// briefly. What is not listed in time is written when it is; until everything is,
/// writes only add (`EgressSettings::complete`). Returns whether the pods were listed.
pub async fn wait_listed(view: &mut ClusterView, within: Duration) -> bool {
    let mut pods_listed = false;
    let listed = async {
        let _ = view.namespaces.wait_for(Option::is_some).await;
        let _ = view.ranges.wait_for(ClusterRanges::listed).await;
        // The source sends once the pods are listed, even when there are none.
        pods_listed = view.pods.changed().await.is_ok();
    };
    let timed_out = tokio::time::timeout(within, listed).await.is_err();
    if timed_out {
        let ranges = view.ranges.borrow().clone();
        tracing::warn!(
            namespaces_listed = view.namespaces.borrow().is_some(),
            nodes_listed = ranges.nodes.is_some(),
            service_cidrs_listed = ranges.services.is_some(),
            ?within,
            "the egress policy is written before the cluster was fully listed: Namespace \
             labels and cluster ranges apply once their watch lists them (check the \
             agent's RBAC in deploy/: list and watch on namespaces, nodes, servicecidrs)"
        );
    }
    pods_listed
}

/// Each labelled namespace's mode. An invalid value leaves the namespace's pods at the
/// default; it is warned about once per namespace and value (`warned` remembers).
fn namespace_modes(
    labels: &NamespaceLabels,
    default: EgressPolicy,
    warned: &mut NamespaceLabels,
) -> BTreeMap<String, EgressPolicy> {
    let mut modes = BTreeMap::new();
    let mut invalid = NamespaceLabels::new();
    for (namespace, value) in labels {
        match EgressPolicy::from_str(value, false) {
            Ok(mode) => {
                modes.insert(namespace.clone(), mode);
            }
            Err(_) => {
                if warned.get(namespace) != Some(value) {
                    tracing::warn!(
                        namespace,
                        value,
                        label = POLICY_LABEL,
                        default = ?default,
                        "invalid egress policy label (allow, audit or deny): this \
                         namespace's pods get --egress-policy until it is fixed"
                    );
                }
                invalid.insert(namespace.clone(), value.clone());
            }
        }
    }
    *warned = invalid;
    modes
}

/// The mode of each pod cgroup (`cgroups`: pod uid -> cgroup id) whose namespace has a
/// mode of its own.
pub fn pod_modes(
    namespaces: &BTreeMap<String, EgressPolicy>,
    pods: &Pods,
    cgroups: &BTreeMap<String, u64>,
) -> BTreeMap<u64, EgressPolicy> {
    (cgroups.iter())
        .filter_map(|(uid, cgroup)| {
            let pod = pods.get(uid)?;
            Some((*cgroup, *namespaces.get(&pod.namespace)?))
        })
        .collect()
}

/// `--allow-cidr` and the cluster's ranges, merged where they touch (a cluster's
/// per-node pod ranges are usually consecutive: one entry instead of one per node).
fn allowed(flag: &[IpNet], ranges: &ClusterRanges) -> Vec<IpNet> {
    let all: Vec<IpNet> = (flag.iter())
        .chain(ranges.nodes.iter().flatten())
        .chain(ranges.services.iter().flatten())
        .copied()
        .collect();
    IpNet::aggregate(&all)
}

/// Turns what the cluster says into [`EgressSettings`].
pub struct Planner {
    pub default: EgressPolicy,
    pub allow_cidrs: Vec<IpNet>,
    /// Where pod cgroups are looked for (`--pod-cgroup-root`, else `--cgroup`).
    pub root: PathBuf,
    warned: NamespaceLabels,
    /// The namespace modes last logged.
    logged: Option<BTreeMap<String, EgressPolicy>>,
    /// Whether this node's pods were listed: until then none is known to be gone.
    pods_listed: bool,
}

impl Planner {
    pub fn new(default: EgressPolicy, allow_cidrs: Vec<IpNet>, root: PathBuf) -> Self {
        Self {
            default,
            allow_cidrs,
            root,
            warned: NamespaceLabels::new(),
            logged: None,
            pods_listed: false,
        }
    }

    /// This node's pods have been listed (the source sends them once it has).
    pub fn pods_listed(&mut self) {
        self.pods_listed = true;
    }

    /// The settings for what `view` holds now, and how many pods of labelled namespaces
    /// have no cgroup yet.
    pub fn plan(&mut self, view: &mut ClusterView) -> (EgressSettings, usize) {
        let labels = view.namespaces.borrow_and_update().clone();
        let labels_listed = labels.is_some();
        let ranges = view.ranges.borrow_and_update().clone();
        let pods = view.pods.borrow_and_update().clone();
        let modes = namespace_modes(&labels.unwrap_or_default(), self.default, &mut self.warned);
        if self.logged.as_ref() != Some(&modes) {
            tracing::info!(namespaces = ?modes, "egress policy labels");
            self.logged = Some(modes.clone());
        }
        let labelled = (pods.iter())
            .filter(|(_, pod)| modes.contains_key(&pod.namespace))
            .map(|(uid, _)| uid.as_str());
        let wanted = labelled.clone().count();
        let cgroups = pod_cgroups(&self.root, labelled);
        let settings = EgressSettings {
            default: self.default,
            allowed: allowed(&self.allow_cidrs, &ranges),
            pod_trees: Some(pod_trees(&self.root)),
            pod_modes: pod_modes(&modes, &pods, &cgroups),
            complete: labels_listed && ranges.listed() && self.pods_listed,
        };
        (settings, wanted - cgroups.len())
    }
}

/// Keeps the policy's maps equal to what the cluster says.
pub struct EgressSync {
    maps: EgressMaps,
    planner: Planner,
    written: EgressSettings,
}

impl EgressSync {
    /// `written`: what [`super::install`] wrote last.
    pub fn new(maps: EgressMaps, planner: Planner, written: EgressSettings) -> Self {
        Self {
            maps,
            planner,
            written,
        }
    }

    /// Writes what changed; returns how many labelled pods have no cgroup yet.
    fn sync(&mut self, view: &mut ClusterView) -> usize {
        let (settings, missing) = self.planner.plan(view);
        if settings == self.written {
            return missing;
        }
        match write(&mut self.maps, &settings) {
            Ok((written, removed)) => {
                let allowed: Vec<String> = settings.allowed.iter().map(IpNet::to_string).collect();
                tracing::info!(
                    active = settings.active(),
                    labelled_pods = settings.pod_modes.len(),
                    allowed = ?allowed,
                    written,
                    removed,
                    "egress policy updated"
                );
                self.written = settings;
            }
            // What was written before stays in force; looked at again shortly.
            Err(error) => {
                tracing::error!(
                    error = %anyhow::Error::from(error),
                    "updating the egress policy from the cluster; retrying"
                );
                return missing.max(1);
            }
        }
        missing
    }

    /// Follows `view` until `shutdown` or until the Kubernetes source ends.
    pub async fn run(mut self, mut view: ClusterView, shutdown: CancellationToken) {
        let mut retry = RETRY_FIRST;
        loop {
            let missing = self.sync(&mut view);
            let changed = tokio::select! {
                () = shutdown.cancelled() => return,
                changed = view.namespaces.changed() => changed,
                changed = view.ranges.changed() => changed,
                changed = view.pods.changed() => {
                    self.planner.pods_listed();
                    changed
                }
                () = tokio::time::sleep(retry), if missing > 0 => {
                    retry = (retry * 2).min(RETRY_MAX);
                    continue;
                }
            };
            if changed.is_err() {
                return;
            }
            retry = RETRY_FIRST;
        }
    }
}

#[cfg(test)]
mod tests;
