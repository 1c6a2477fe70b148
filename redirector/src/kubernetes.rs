//! The Kubernetes source (`redirector run --kubernetes`): the same [`Catalog`] as the
//! directory source, fed from the API server instead of files. One model, two sources:
//! XBackends go through the same serde model and [`crate::backend::validate`], problems
//! are named the same way, and the reconciler cannot tell the sources apart.
//!
//! What is watched (all with kube-rs watchers whose events feed reflector stores):
//! - XBackends of every namespace (`gateway.networking.x-k8s.io/v1alpha1`), as dynamic
//!   objects, so that one malformed object becomes a [`crate::backend::Problem`] naming its
//!   field instead of failing the whole list (`xbackends.rs`);
//! - BackendPolicies of every namespace (`policy.redirector.dev/v1alpha1`), the same way
//!   (`policies.rs`); a cluster without their CRD counts as having none;
//! - each ConfigMap and Secret that a current Backend or BackendPolicy references, and
//!   nothing else: one watch per object (`fieldSelector=metadata.name=X` in its
//!   namespace), started when the first Backend or policy references it and stopped when
//!   the last one lets go, so the agent never lists or caches the Secrets of the cluster
//!   (`catalog.rs`, `refs.rs`);
//! - the pods of this node (`fieldSelector=spec.nodeName=NODE`, each cut down to its
//!   metadata and service account), as a map from pod uid to namespace, name and
//!   service account (`pods.rs`);
//! - for the egress policy, Namespaces (metadata only: the policy label), Nodes (their
//!   pod ranges) and ServiceCIDRs (`egress.rs`).
//!
//! Resilience (`follow.rs`): kube's default backoff on API errors; a relist whenever the
//! server says 410 Gone, whether inside the watch stream (what API servers do) or as the
//! HTTP status of the watch request (which kube-rs's watcher would otherwise retry with
//! the same expired resourceVersion forever); errors logged at most every 30 s per watch.
//! While the API server is unreachable nothing is sent, so the reconciler keeps the last
//! good state and the datapath never empties because the API server blinked.

mod catalog;
mod egress;
mod follow;
pub mod lease;
mod pods;
mod policies;
mod refs;
pub mod status;
#[cfg(test)]
mod tests;
pub(crate) mod xbackends;

use std::path::{Path, PathBuf};

use kube::{
    Client, Config,
    config::{InClusterError, KubeConfigOptions, Kubeconfig, KubeconfigError},
};
use tokio::{sync::mpsc, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::{backend::Catalog, egress::cluster::ClusterFeeds, workload::Pods};

/// A connection to the API server, not yet watching anything.
pub struct KubeSource {
    client: Client,
}

/// The client could not be configured (nothing has been sent to the API server yet).
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("reading kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: KubeconfigError,
    },
    #[error(
        "in-cluster configuration (KUBERNETES_SERVICE_HOST/PORT and the service account \
         token; pass --kubeconfig outside a pod): {0}"
    )]
    InCluster(#[source] InClusterError),
    #[error("creating the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

impl KubeSource {
    /// Connects with the kubeconfig at `kubeconfig` (its current context), or with the
    /// pod's service account when `None`. Does not contact the API server: an
    /// unreachable server is retried by the watches, and shows as the agent not being
    /// ready rather than as a start-up failure.
    pub async fn connect(kubeconfig: Option<&Path>) -> Result<Self, KubeError> {
        let config = match kubeconfig {
            Some(path) => {
                let failed = |source| KubeError::Kubeconfig {
                    path: path.to_path_buf(),
                    source,
                };
                let file = Kubeconfig::read_from(path).map_err(failed)?;
                Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                    .await
                    .map_err(failed)?
            }
            None => Config::incluster().map_err(KubeError::InCluster)?,
        };
        tracing::info!(server = %config.cluster_url, "Kubernetes API server");
        let client = Client::try_from(config).map_err(KubeError::Client)?;
        Ok(Self { client })
    }

    /// The client, for the status writer.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Follows what the egress policy needs (Namespace labels, the cluster's ranges)
    /// until `shutdown`, publishing on `feeds`.
    pub fn spawn_egress(&self, feeds: ClusterFeeds, shutdown: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(egress::run(self.client.clone(), feeds, shutdown))
    }

    /// Runs until `shutdown`.
    ///
    /// `catalogs` gets a full [`Catalog`] once the initial sync is done (XBackends listed
    /// and every ConfigMap and Secret they reference fetched, or given up on after
    /// [`catalog::REF_SYNC_TIMEOUT`]) and then after every change that alters it.
    /// `pods` gets the pods of `node_name` (uid -> identity) once they are listed and
    /// after every change. Nothing is sent while the API server is unreachable.
    pub fn spawn(
        self,
        node_name: String,
        catalogs: mpsc::Sender<Catalog>,
        pods: tokio::sync::watch::Sender<Pods>,
        shutdown: CancellationToken,
    ) -> JoinHandle<()> {
        let client = self.client;
        tokio::spawn(async move {
            // The catalog side also ends when the reconciler is gone: the pods go with it.
            let stop = shutdown.child_token();
            let pods = tokio::spawn(pods::run(client.clone(), node_name, pods, stop.clone()));
            catalog::run(client, catalogs, stop.clone()).await;
            stop.cancel();
            let _ = pods.await;
        })
    }
}
