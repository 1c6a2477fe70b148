//! What the egress policy reads from the API server (`crate::egress::cluster` turns it
//! into the policy's maps):
//! - Namespaces, metadata only: the value of each one's policy label;
//! - Nodes: every `spec.podCIDRs` (their status, the larger part of a Node, is dropped
//!   as it arrives: every agent holds every Node);
//! - ServiceCIDRs (`networking.k8s.io/v1`): their `spec.cidrs`. Clusters before
//!   Kubernetes 1.33 may not serve the type: a 404 is said once at info, and the
//!   Service range then has to be given with `--allow-cidr`.

use ipnet::IpNet;
use k8s_openapi::api::{
    core::v1::{Namespace, Node},
    networking::v1::ServiceCIDR,
};
use kube::{
    Api, Client,
    api::ListParams,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        reflector::{Store, store::Writer},
        watcher,
    },
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::follow::follow;
use crate::egress::{
    POLICY_LABEL,
    cluster::{ClusterFeeds, ClusterRanges, NamespaceLabels},
};

/// Follows Namespaces, Nodes and ServiceCIDRs until `shutdown`, publishing on `feeds`
/// once each is listed and after every change.
pub(super) async fn run(client: Client, feeds: ClusterFeeds, shutdown: CancellationToken) {
    let ClusterFeeds { namespaces, ranges } = feeds;
    tokio::join!(
        follow_namespaces(client.clone(), namespaces, shutdown.clone()),
        follow_nodes(client.clone(), &ranges, shutdown.clone()),
        follow_service_cidrs(client, &ranges, shutdown),
    );
}

async fn follow_namespaces(
    client: Client,
    sender: watch::Sender<Option<NamespaceLabels>>,
    shutdown: CancellationToken,
) {
    // Not by label selector: a namespace whose label is removed must be seen to lose it.
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
    let changed = |store: &Store<PartialObjectMeta<Namespace>>| {
        let labels: NamespaceLabels = (store.state().iter())
            .filter_map(|namespace| {
                let meta = &namespace.metadata;
                let value = meta.labels.as_ref()?.get(POLICY_LABEL)?;
                Some((meta.name.clone()?, value.clone()))
            })
            .collect();
        sender.send_if_modified(|current| {
            let modified = current.as_ref() != Some(&labels);
            if modified {
                tracing::debug!(labelled = labels.len(), "namespace policy labels changed");
                *current = Some(labels);
            }
            modified
        });
    };
    let start = || watcher(api.clone(), watcher::Config::default());
    follow("namespaces", start, Writer::default(), changed, shutdown).await;
}

async fn follow_nodes(
    client: Client,
    ranges: &watch::Sender<ClusterRanges>,
    shutdown: CancellationToken,
) {
    let api: Api<Node> = Api::all(client);
    let changed = |store: &Store<Node>| {
        let nets = store.state().into_iter().flat_map(|node| {
            let spec = node.spec.as_ref();
            // `podCIDRs` includes `podCIDR`; servers before 1.16 set only the latter.
            let listed = spec.and_then(|s| s.pod_cidrs.clone());
            let single = spec.and_then(|s| s.pod_cidr.clone());
            let name = node.metadata.name.clone().unwrap_or_default();
            (listed
                .unwrap_or_else(|| single.into_iter().collect())
                .into_iter())
            .filter_map(move |text| parse(&text, "Node", &name))
        });
        publish(ranges, sorted(nets.collect()), |r| &mut r.nodes);
    };
    let start = || {
        watcher(api.clone(), watcher::Config::default()).modify(|node: &mut Node| {
            node.status = None;
        })
    };
    follow("nodes", start, Writer::default(), changed, shutdown).await;
}

async fn follow_service_cidrs(
    client: Client,
    ranges: &watch::Sender<ClusterRanges>,
    shutdown: CancellationToken,
) {
    let api: Api<ServiceCIDR> = Api::all(client);
    let one = ListParams::default().limit(1);
    let probe = tokio::select! {
        () = shutdown.cancelled() => return,
        probe = api.list_metadata(&one) => probe,
    };
    if let Err(kube::Error::Api(status)) = &probe
        && status.code == 404
    {
        tracing::info!(
            "the API server serves no ServiceCIDRs (networking.k8s.io/v1, Kubernetes \
             1.33+): under an egress policy, give the Service range with --allow-cidr"
        );
        publish(ranges, Vec::new(), |r| &mut r.services);
        return;
    }
    // Any other answer: the watch retries and says what fails.
    let changed = |store: &Store<ServiceCIDR>| {
        let nets = store.state().into_iter().flat_map(|object| {
            let name = object.metadata.name.clone().unwrap_or_default();
            let cidrs = object.spec.as_ref().and_then(|s| s.cidrs.clone());
            (cidrs.unwrap_or_default().into_iter())
                .filter_map(move |text| parse(&text, "ServiceCIDR", &name))
        });
        publish(ranges, sorted(nets.collect()), |r| &mut r.services);
    };
    let start = || watcher(api.clone(), watcher::Config::default());
    follow("servicecidrs", start, Writer::default(), changed, shutdown).await;
}

/// Sets one part of the ranges, telling receivers only when it changed.
fn publish(
    ranges: &watch::Sender<ClusterRanges>,
    nets: Vec<IpNet>,
    part: impl Fn(&mut ClusterRanges) -> &mut Option<Vec<IpNet>>,
) {
    ranges.send_if_modified(|current| {
        let slot = part(current);
        let modified = slot.as_ref() != Some(&nets);
        if modified {
            tracing::debug!(?nets, "cluster ranges changed");
            *slot = Some(nets);
        }
        modified
    });
}

fn sorted(mut nets: Vec<IpNet>) -> Vec<IpNet> {
    nets.sort();
    nets.dedup();
    nets
}

/// The API server validates these fields: a value that does not parse is only noted.
fn parse(text: &str, kind: &str, name: &str) -> Option<IpNet> {
    let parsed = text.parse().ok();
    if parsed.is_none() {
        tracing::debug!(
            kind,
            name,
            cidr = text,
            "not a CIDR: left out of the allowed networks"
        );
    }
    parsed
}
