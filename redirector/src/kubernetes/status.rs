//! XBackend status: one entry of `status.ancestors` (or, on a Gateway API v1.6 CRD,
//! `status.parents`) per XBackend for this controller, written by exactly one agent of
//! the cluster (the holder of the Lease, `lease.rs`).
//!
//! What is written, per XBackend (on a v1.6 CRD: `parents` and `parentRef`):
//!
//! ```yaml
//! status:
//!   ancestors:
//!     - controllerName: redirector.dev/node-agent
//!       ancestorRef: {group: "", kind: Namespace, name: <the XBackend's namespace>}
//!       conditions:
//!         - type: Accepted       # False/Invalid: the validation problems (field: message)
//!           status: "True"
//!           reason: Accepted
//!           observedGeneration: 3
//!           lastTransitionTime: "2024-01-01T00:00:00Z"
//!           message: ...
//!         - type: ResolvedRefs   # False/InvalidCACertificateRef, InvalidClientCertificateRef
//!           ...
//! ```
//!
//! **Why the parentRef is the XBackend's Namespace.** Upstream expects a Gateway-like
//! parent: `status.parents[]` says how a Backend fares with each parent (typically a
//! Gateway) whose controller uses it. This agent has no Gateway. In the mesh model of
//! GEP-1324 (GAMMA) the parent is the thing whose traffic the implementation captures,
//! inside a namespace boundary; what the redirector captures is the egress of the pods
//! of the Backend's namespace (`--backend-scope namespace`, the default: a Backend in X
//! applies to connects from pods in X only). So the parent is that namespace:
//! `{group: "", kind: Namespace, name: X}` (cluster-scoped, hence no `namespace`). It is
//! a valid `ParentReference` (group and kind are written explicitly, since the defaults
//! would mean a Gateway), it names something that exists, it is the same whichever
//! agent leads (a hand-over rewrites nothing), and it needs no knowledge of how the
//! agents were deployed (DaemonSet name...). With `--backend-scope cluster` the Backend
//! applies to every namespace; the parent stays the declaring namespace.
//!
//! **Other controllers' entries are kept.** `status.parents` is an atomic list in the
//! CRD: a server-side apply replaces it whole. So each write reads the object, keeps
//! the entries of other controllers, replaces this controller's entry, and applies the
//! result with `metadata.resourceVersion` as a precondition (a concurrent change makes
//! it 409, and the write is retried on a fresh read).
//!
//! **Written only on change.** The last entry written (or found on the server) is kept
//! per object; an update that renders the same entry sends nothing. On becoming leader
//! the writer lists the XBackends once to learn what the server already holds, so a new
//! leader or a restart writes only what differs. `lastTransitionTime` changes only when
//! a condition's status does.
//!
//! **The installed CRD decides the shape** (`installed`): the agent watches the XBackend
//! CRD, writes in the shape its `status` schema has, logs which it found, and writes
//! nothing while there is none. When the shape changes, every status is written again.
//! `EndpointSelector` XBackends get no status (the catalog gives them no generation).
//!
//! **BackendPolicies** get their status from the same writer, in the same way
//! (`status.ancestors`, one entry per targeted XBackend: `ancestors.rs`,
//! `policy_writer.rs`).
//!
//! **Node-local problems are not status.** A hostname that does not resolve on one node
//! says nothing about the Backend; only what is the same on every node goes here: the
//! validation result and whether the referenced ConfigMaps and Secrets are usable.

use std::{collections::BTreeMap, time::Duration};

use kube::{Api, Client, api::DynamicObject};
use serde_json::json;
use tokio::{sync::watch, task::JoinHandle, time::Instant};
use tokio_util::sync::CancellationToken;

use super::{
    lease::{self, LeaseConfig},
    xbackends,
};
use crate::backend::{ObjectKey, constraints, constraints::SchemaVersion, model};
use crate::crd::entry_names;

/// `status.parents[].controllerName` of this controller (`domain/path`, as the CRD's
/// pattern [`constraints::CONTROLLER_NAME`] requires).
pub const CONTROLLER_NAME: &str = "redirector.dev/node-agent";
/// The server-side apply field manager.
pub const FIELD_MANAGER: &str = "redirector";

/// A failed write is retried after this long.
const RETRY: Duration = Duration::from_secs(5);
/// What the server holds is read again this often (an entry removed by someone else is
/// written again).
const RESYNC: Duration = Duration::from_secs(600);
/// Attempts of one write when the object keeps changing under it (409).
const CONFLICT_ATTEMPTS: usize = 3;
/// The XBackend and BackendPolicy status writer: leader election plus the writes while
/// leading.
pub struct StatusWriter;

impl StatusWriter {
    /// Runs until `shutdown` (or until the sender of `updates` is gone): takes part in
    /// the election for the Lease `lease_namespace/redirector-status-writer` as
    /// `identity` (the node name) and, while it holds the Lease, writes the status of
    /// every XBackend in the latest `updates` whose entry differs from what the server
    /// holds, and of every BackendPolicy in the latest `policies`. The task ends after
    /// releasing the Lease (if held), so await it on shutdown to hand over at once.
    pub fn spawn(
        client: Client,
        identity: String,
        lease_namespace: String,
        updates: watch::Receiver<Vec<ObjectStatus>>,
        policies: watch::Receiver<Vec<PolicyStatus>>,
        shutdown: CancellationToken,
    ) -> JoinHandle<()> {
        Self::spawn_with(
            client,
            LeaseConfig::new(lease_namespace, identity),
            (updates, policies),
            shutdown,
        )
    }

    /// [`Self::spawn`] with the election's timing spelled out.
    pub fn spawn_with(
        client: Client,
        lease: LeaseConfig,
        mut updates: Updates,
        shutdown: CancellationToken,
    ) -> JoinHandle<()> {
        tokio::spawn(async move {
            // The election outlives the writes: the Lease is released only once nothing
            // more is written.
            let election_stop = CancellationToken::new();
            let (mut leading, election) =
                lease::spawn(client.clone(), lease, election_stop.clone());
            let mut installed = installed::spawn(client.clone(), election_stop.clone());
            let receivers = (&mut leading, &mut updates, &mut installed);
            write_while_leading(client, receivers, &shutdown).await;
            election_stop.cancel();
            let _ = election.await;
        })
    }
}

/// The statuses to write: of the XBackends, of the BackendPolicies.
pub type Updates = (
    watch::Receiver<Vec<ObjectStatus>>,
    watch::Receiver<Vec<PolicyStatus>>,
);

/// What the writer waits on: whether this agent leads, the statuses to write, and the
/// installed XBackend CRD.
type Receivers<'a> = (
    &'a mut watch::Receiver<bool>,
    &'a mut Updates,
    &'a mut watch::Receiver<InstalledCrd>,
);

async fn write_while_leading(
    client: Client,
    (leading, (updates, policies), installed): Receivers<'_>,
    shutdown: &CancellationToken,
) {
    loop {
        // Leading, and a CRD whose shape is known.
        let schema = loop {
            let schema = installed.borrow_and_update().schema();
            match schema {
                Some(schema) if *leading.borrow_and_update() => break schema,
                _ => {}
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = leading.changed() => if changed.is_err() { return },
                changed = installed.changed() => if changed.is_err() { return },
            }
        };
        let mut writer = Writer::new(client.clone(), schema);
        let mut policy_writer = PolicyWriter::new(client.clone());
        let mut synced: Option<Instant> = None;
        let same_shape =
            |installed: &watch::Receiver<InstalledCrd>| installed.borrow().schema() == Some(schema);
        while *leading.borrow() && same_shape(installed) {
            let resync = synced.is_none_or(|at| at.elapsed() >= RESYNC);
            let wrote = tokio::select! {
                () = shutdown.cancelled() => return,
                done = async {
                    if resync {
                        writer.sync().await?;
                        policy_writer.sync().await?;
                        synced = Some(Instant::now());
                    }
                    let desired = updates.borrow_and_update().clone();
                    let backends_written = writer.write_all(&desired, leading).await;
                    let desired = policies.borrow_and_update().clone();
                    let policies_written = policy_writer.write_all(&desired, leading).await;
                    backends_written.and(policies_written)
                } => done,
            };
            let retry_at = match wrote {
                Ok(()) => None,
                Err(error) => {
                    tracing::warn!(%error, retry_s = RETRY.as_secs(), "writing status failed");
                    Some(Instant::now() + RETRY)
                }
            };
            let next_resync = synced.map_or_else(Instant::now, |at| at + RESYNC);
            let wake = retry_at.map_or(next_resync, |at| at.min(next_resync));
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = leading.changed() => if changed.is_err() { return },
                changed = updates.changed() => if changed.is_err() { return },
                changed = policies.changed() => if changed.is_err() { return },
                changed = installed.changed() => if changed.is_err() { return },
                () = tokio::time::sleep_until(wake) => {}
            }
        }
        if !*leading.borrow() {
            tracing::info!("no longer the status writer: stopped writing status");
        }
    }
}

/// The writes of one term as leader, in one shape of the CRD.
struct Writer {
    client: Client,
    schema: SchemaVersion,
    /// This controller's entry as the server holds it, per object (what was last
    /// written or read).
    known: BTreeMap<ObjectKey, ParentStatus>,
}

impl Writer {
    fn new(client: Client, schema: SchemaVersion) -> Self {
        Self {
            client,
            schema,
            known: BTreeMap::new(),
        }
    }

    fn api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &xbackends::api_resource())
    }

    /// Learns what the server holds: one paged list of every XBackend.
    async fn sync(&mut self) -> Result<(), String> {
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &xbackends::api_resource());
        let mut known = BTreeMap::new();
        for object in &list_all(&api).await.map_err(describe)? {
            if let (Some(ours), _) = split_parents(object, self.schema) {
                known.insert(xbackends::key(object), ours);
            }
        }
        tracing::debug!(
            entries = known.len(),
            "XBackend status read from the API server"
        );
        self.known = known;
        Ok(())
    }

    /// Writes every status whose entry differs from the known one. Stops early (without
    /// an error) when leadership is lost; the first error is returned after trying all.
    async fn write_all(
        &mut self,
        statuses: &[ObjectStatus],
        leading: &watch::Receiver<bool>,
    ) -> Result<(), String> {
        let present: std::collections::BTreeSet<&ObjectKey> =
            statuses.iter().map(|s| &s.key).collect();
        self.known.retain(|key, _| present.contains(key));
        let now = now();
        let mut first_error = None;
        for status in statuses {
            let known = self.known.get(&status.key);
            if known.is_some_and(|k| *k == render(status, Some(k), &now)) {
                continue;
            }
            if !*leading.borrow() {
                return Ok(());
            }
            if let Err(error) = self.write(status, leading).await {
                let error = format!("{}: {error}", status.key);
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Read, merge, apply with the resourceVersion read; again on a conflict.
    async fn write(
        &mut self,
        status: &ObjectStatus,
        leading: &watch::Receiver<bool>,
    ) -> Result<(), String> {
        let key = &status.key;
        let api = self.api(&key.namespace);
        for _ in 0..CONFLICT_ATTEMPTS {
            let Some(current) = timed(api.get_opt(&key.name)).await? else {
                // Deleted meanwhile: its status went with it.
                self.known.remove(key);
                return Ok(());
            };
            let (ours, mut parents) = split_parents(&current, self.schema);
            let entry = render(status, ours.as_ref(), &now());
            if ours.as_ref() == Some(&entry) {
                self.known.insert(key.clone(), entry);
                return Ok(());
            }
            if !*leading.borrow() {
                return Ok(());
            }
            let (list, _) = entry_names(self.schema);
            parents.push(entry_json(&entry, self.schema).map_err(|e| e.to_string())?);
            if parents.len() > constraints::MAX_PARENTS {
                return Err(format!(
                    "status.{list} already holds {} entries of other controllers",
                    parents.len() - 1
                ));
            }
            let body = json!({
                "apiVersion": model::API_VERSION,
                "kind": model::KIND,
                "metadata": {
                    "name": key.name,
                    "namespace": key.namespace,
                    "resourceVersion": current.metadata.resource_version,
                },
                "status": {(list): parents},
            });
            match apply_status(&api, &key.name, &body).await? {
                Applied::Written => {
                    let state = |type_| state_of(&entry.conditions, type_);
                    tracing::info!(
                        backend = %key,
                        generation = status.generation,
                        accepted = state("Accepted"),
                        resolved_refs = state("ResolvedRefs"),
                        "XBackend status written"
                    );
                    self.known.insert(key.clone(), entry);
                    return Ok(());
                }
                Applied::Conflict => {
                    tracing::debug!(backend = %key, "XBackend changed while writing its status; again");
                }
                Applied::Gone => {
                    self.known.remove(key);
                    return Ok(());
                }
            }
        }
        Err(format!(
            "the object kept changing ({CONFLICT_ATTEMPTS} conflicts in a row)"
        ))
    }
}

mod ancestors;
mod installed;
mod policy_writer;
mod render;
mod requests;

pub use ancestors::{PolicyStatus, policy_statuses};
use installed::InstalledCrd;
use policy_writer::PolicyWriter;
use render::*;
pub use render::{ObjectStatus, object_statuses};
use requests::{Applied, apply_status, describe, list_all, timed};

#[cfg(test)]
mod tests;
