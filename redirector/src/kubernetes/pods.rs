//! The pods of this node, as uid -> namespace (what per-namespace scoping needs to map pod
//! cgroups to namespaces). Watched by metadata only: a node's pod specs are large and
//! nothing here reads them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    core::PartialObjectMeta,
    runtime::{
        reflector::{Store, store::Writer},
        watcher,
    },
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::follow::follow;

/// Follows the pods whose `spec.nodeName` is `node` until `shutdown`, publishing on
/// `pods` once they are listed and after every change of the map.
pub(super) async fn run(
    client: Client,
    node: String,
    pods: watch::Sender<BTreeMap<String, String>>,
    shutdown: CancellationToken,
) {
    // `Api<PartialObjectMeta<_>>` asks the server for metadata only.
    let api: Api<PartialObjectMeta<Pod>> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let what = format!("pods of node {node}");
    let mut synced = false;
    let changed = |store: &Store<PartialObjectMeta<Pod>>| {
        let map = by_uid(&store.state());
        if !synced {
            // Always sent once, even empty: receivers wait for the initial sync.
            synced = true;
            tracing::info!(node, pods = map.len(), "pods of this node listed");
            pods.send_replace(map);
        } else {
            pods.send_if_modified(|current| {
                let modified = *current != map;
                if modified {
                    tracing::debug!(node, pods = map.len(), "pods of this node changed");
                    *current = map;
                }
                modified
            });
        }
    };
    let start = || watcher(api.clone(), config.clone());
    follow(&what, start, Writer::default(), changed, shutdown).await;
}

/// On a static pod's mirror: the uid the kubelet gave the pod (and named its cgroup
/// after), where `metadata.uid` is the mirror object's own.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Each pod's namespace, by the uid its cgroup is named after.
fn by_uid(pods: &[std::sync::Arc<PartialObjectMeta<Pod>>]) -> BTreeMap<String, String> {
    pods.iter()
        .filter_map(|pod| {
            let meta = &pod.metadata;
            let mirrored = (meta.annotations.as_ref()).and_then(|a| a.get(MIRROR_POD_ANNOTATION));
            let uid = mirrored.or(meta.uid.as_ref())?;
            Some((uid.clone(), meta.namespace.clone()?))
        })
        .collect()
}
