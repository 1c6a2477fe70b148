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

/// Each pod's namespace, by the uid its cgroup is named after. Whoever creates pods can
/// write the mirror annotation: a pod's own uid always wins, and a mirrored uid that
/// pods of two namespaces claim is left out (that pod's connects to Backend addresses
/// are refused) rather than given to either.
fn by_uid(pods: &[std::sync::Arc<PartialObjectMeta<Pod>>]) -> BTreeMap<String, String> {
    let mut own = BTreeMap::new();
    let mut mirrored: BTreeMap<&String, Option<&String>> = BTreeMap::new();
    for pod in pods {
        let meta = &pod.metadata;
        let Some(namespace) = &meta.namespace else {
            continue;
        };
        if let Some(uid) = &meta.uid {
            own.insert(uid.clone(), namespace.clone());
        }
        if let Some(uid) = (meta.annotations.as_ref()).and_then(|a| a.get(MIRROR_POD_ANNOTATION)) {
            let claim = mirrored.entry(uid).or_insert(Some(namespace));
            if *claim != Some(namespace) {
                tracing::warn!(
                    uid,
                    "pods of two namespaces name the same mirrored uid: that pod is left unmapped"
                );
                *claim = None;
            }
        }
    }
    for (uid, namespace) in mirrored {
        if let (false, Some(namespace)) = (own.contains_key(uid), namespace) {
            own.insert(uid.clone(), namespace.clone());
        }
    }
    own
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, sync::Arc};

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::core::PartialObjectMetaExt;

    use super::*;

    fn pod(namespace: &str, uid: &str, mirror_of: Option<&str>) -> Arc<PartialObjectMeta<Pod>> {
        let annotations =
            mirror_of.map(|of| BTreeMap::from([(MIRROR_POD_ANNOTATION.to_owned(), of.to_owned())]));
        let meta = ObjectMeta {
            namespace: Some(namespace.into()),
            uid: Some(uid.into()),
            annotations,
            ..ObjectMeta::default()
        };
        Arc::new(meta.into_request_partial::<Pod>())
    }

    #[test]
    fn a_mirror_maps_its_static_pods_uid_and_never_another_namespaces() {
        let mapped = by_uid(&[
            pod("kube-system", "api-mirror", Some("static-hash")),
            pod("team-a", "a", None),
            // Names team-a's pod: its own uid wins.
            pod("team-b", "b", Some("a")),
            // Two namespaces name one mirrored uid: neither gets it.
            pod("team-c", "c1", Some("contested")),
            pod("team-d", "d1", Some("contested")),
        ]);
        assert_eq!(mapped["static-hash"], "kube-system");
        assert_eq!(mapped["a"], "team-a");
        assert_eq!(mapped["b"], "team-b");
        assert!(!mapped.contains_key("contested"), "{mapped:?}");
    }
}
