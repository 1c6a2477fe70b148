//! The pods of this node, as uid -> namespace, name and service account (what
//! per-namespace scoping needs to map pod cgroups to namespaces, and workload identity
//! to name a connection's pod). The service account is in the spec, so whole pods are
//! watched, but each is cut down to that one field before it is stored: a node's pod
//! specs and statuses are large and nothing else here reads them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::{
    Api, Client,
    runtime::{
        WatchStreamExt,
        reflector::{Store, store::Writer},
        watcher,
    },
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::follow::follow;
use crate::workload::{PodIdentity, Pods};

/// Follows the pods whose `spec.nodeName` is `node` until `shutdown`, publishing on
/// `pods` once they are listed and after every change of the map.
pub(super) async fn run(
    client: Client,
    node: String,
    pods: watch::Sender<Pods>,
    shutdown: CancellationToken,
) {
    let api: Api<Pod> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let what = format!("pods of node {node}");
    let mut synced = false;
    let changed = |store: &Store<Pod>| {
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
    let start = || watcher(api.clone(), config.clone()).modify(keep_identity);
    follow(&what, start, Writer::default(), changed, shutdown).await;
}

/// On a static pod's mirror: the uid the kubelet gave the pod (and named its cgroup
/// after), where `metadata.uid` is the mirror object's own.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Keeps of a pod what [`by_uid`] reads (`follow` trims its metadata).
fn keep_identity(pod: &mut Pod) {
    let service_account_name = pod
        .spec
        .as_mut()
        .and_then(|s| s.service_account_name.take());
    pod.spec = Some(PodSpec {
        service_account_name,
        ..PodSpec::default()
    });
    pod.status = None;
}

/// Each pod's identity, by the uid its cgroup is named after. Whoever creates pods can
/// write the mirror annotation: a pod's own uid always wins, and a mirrored uid that
/// pods of two namespaces claim is left out (that pod's connects to Backend addresses
/// are refused) rather than given to either.
fn by_uid(pods: &[std::sync::Arc<Pod>]) -> Pods {
    let mut own = BTreeMap::new();
    let mut mirrored: BTreeMap<&String, Option<PodIdentity>> = BTreeMap::new();
    for pod in pods {
        let meta = &pod.metadata;
        let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) else {
            continue;
        };
        let identity = PodIdentity {
            namespace: namespace.clone(),
            name: name.clone(),
            service_account: (pod.spec.as_ref()).and_then(|s| s.service_account_name.clone()),
        };
        if let Some(uid) = (meta.annotations.as_ref()).and_then(|a| a.get(MIRROR_POD_ANNOTATION)) {
            let claim = mirrored.entry(uid).or_insert(Some(identity.clone()));
            if claim.as_ref().map(|c| &c.namespace) != Some(namespace) {
                tracing::warn!(
                    uid,
                    "pods of two namespaces name the same mirrored uid: that pod is left unmapped"
                );
                *claim = None;
            }
        }
        if let Some(uid) = &meta.uid {
            own.insert(uid.clone(), identity);
        }
    }
    for (uid, identity) in mirrored {
        if let (false, Some(identity)) = (own.contains_key(uid), identity) {
            own.insert(uid.clone(), identity);
        }
    }
    own
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeMap, sync::Arc};

    use k8s_openapi::{api::core::v1::PodStatus, apimachinery::pkg::apis::meta::v1::ObjectMeta};

    use super::*;

    fn pod(namespace: &str, uid: &str, mirror_of: Option<&str>) -> Arc<Pod> {
        let annotations =
            mirror_of.map(|of| BTreeMap::from([(MIRROR_POD_ANNOTATION.to_owned(), of.to_owned())]));
        let metadata = ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(format!("pod-{uid}")),
            uid: Some(uid.into()),
            annotations,
            ..ObjectMeta::default()
        };
        let spec = PodSpec {
            service_account_name: Some(format!("sa-{uid}")),
            ..PodSpec::default()
        };
        Arc::new(Pod {
            metadata,
            spec: Some(spec),
            status: None,
        })
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
        assert_eq!(mapped["static-hash"].namespace, "kube-system");
        assert_eq!(mapped["static-hash"].name, "pod-api-mirror");
        assert_eq!(mapped["a"].namespace, "team-a");
        assert_eq!(mapped["b"].namespace, "team-b");
        assert!(!mapped.contains_key("contested"), "{mapped:?}");
        let a = &mapped["a"];
        assert_eq!(
            (a.name.as_str(), a.service_account.as_deref()),
            ("pod-a", Some("sa-a"))
        );
    }

    #[test]
    fn only_the_service_account_of_the_spec_is_kept() {
        let mut full = Arc::unwrap_or_clone(pod("team-a", "a", None));
        if let Some(spec) = &mut full.spec {
            spec.node_name = Some("node1".into());
            spec.hostname = Some("x".repeat(1000));
        }
        full.status = Some(PodStatus {
            message: Some("y".repeat(1000)),
            ..PodStatus::default()
        });
        keep_identity(&mut full);
        let expected = PodSpec {
            service_account_name: Some("sa-a".into()),
            ..PodSpec::default()
        };
        assert_eq!((full.spec, full.status), (Some(expected), None));
    }
}
