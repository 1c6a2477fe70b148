//! BackendPolicy status writes, made by the XBackend status writer while it leads, the
//! same way: read the object, keep other controllers' `status.ancestors` entries
//! (an atomic list), replace this controller's, server-side apply with the
//! resourceVersion read as a precondition, again on a conflict; nothing sent for an
//! unchanged entry. A cluster without the BackendPolicy CRD has nothing to write.

use std::collections::{BTreeMap, BTreeSet};

use kube::{Api, Client, api::DynamicObject};
use serde_json::json;
use tokio::sync::watch;

use super::{
    CONFLICT_ATTEMPTS,
    ancestors::{AncestorEntry, PolicyStatus, render_ancestors, split_ancestors},
    now,
    render::state_of,
    requests::{Applied, apply_status, describe, list_all, timed},
};
use crate::{
    backend::ObjectKey,
    backend_policy,
    kubernetes::{policies, xbackends},
};

/// Gateway API's limit on `status.ancestors`.
const MAX_ANCESTORS: usize = 16;

/// The policy writes of one term as leader.
pub(super) struct PolicyWriter {
    client: Client,
    /// This controller's entries as the server holds them, per object.
    known: BTreeMap<ObjectKey, Vec<AncestorEntry>>,
}

impl PolicyWriter {
    pub(super) fn new(client: Client) -> Self {
        Self {
            client,
            known: BTreeMap::new(),
        }
    }

    fn api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &policies::api_resource())
    }

    /// Learns what the server holds: one paged list of every BackendPolicy (none when
    /// their CRD is not served).
    pub(super) async fn sync(&mut self) -> Result<(), String> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &policies::api_resource());
        let objects = match list_all(&api).await {
            Ok(objects) => objects,
            Err(Some(kube::Error::Api(status))) if status.code == 404 => Vec::new(),
            Err(error) => return Err(describe(error)),
        };
        let mut known = BTreeMap::new();
        for object in &objects {
            let (ours, _) = split_ancestors(object);
            if !ours.is_empty() {
                known.insert(xbackends::key(object), ours);
            }
        }
        self.known = known;
        Ok(())
    }

    /// Writes every status whose entries differ from the known ones. Stops early
    /// (without an error) when leadership is lost; the first error is returned after
    /// trying all.
    pub(super) async fn write_all(
        &mut self,
        statuses: &[PolicyStatus],
        leading: &watch::Receiver<bool>,
    ) -> Result<(), String> {
        let present: BTreeSet<&ObjectKey> = statuses.iter().map(|s| &s.key).collect();
        self.known.retain(|key, _| present.contains(key));
        let now = now();
        let mut first_error = None;
        for status in statuses {
            let known = self.known.get(&status.key).map_or(&[][..], Vec::as_slice);
            if render_ancestors(status, known, &now) == known {
                continue;
            }
            if !*leading.borrow() {
                return Ok(());
            }
            if let Err(error) = self.write(status, leading).await {
                first_error.get_or_insert(format!("BackendPolicy {}: {error}", status.key));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Read, merge, apply with the resourceVersion read; again on a conflict.
    async fn write(
        &mut self,
        status: &PolicyStatus,
        leading: &watch::Receiver<bool>,
    ) -> Result<(), String> {
        let key = &status.key;
        let api = self.api(&key.namespace);
        for _ in 0..CONFLICT_ATTEMPTS {
            let Some(current) = timed(api.get_opt(&key.name)).await? else {
                self.known.remove(key);
                return Ok(());
            };
            let (ours, others) = split_ancestors(&current);
            let entries = render_ancestors(status, &ours, &now());
            if ours == entries {
                self.known.insert(key.clone(), entries);
                return Ok(());
            }
            if !*leading.borrow() {
                return Ok(());
            }
            // Other controllers' entries first: they were there before ours.
            let mut ancestors = others;
            for entry in &entries {
                ancestors.push(serde_json::to_value(entry).map_err(|e| e.to_string())?);
            }
            if ancestors.len() > MAX_ANCESTORS {
                return Err(format!(
                    "status.ancestors would hold {} entries (at most {MAX_ANCESTORS}, \
                     {} of other controllers)",
                    ancestors.len(),
                    ancestors.len() - entries.len()
                ));
            }
            let body = json!({
                "apiVersion": backend_policy::API_VERSION,
                "kind": backend_policy::KIND,
                "metadata": {
                    "name": key.name,
                    "namespace": key.namespace,
                    "resourceVersion": current.metadata.resource_version,
                },
                "status": {"ancestors": ancestors},
            });
            match apply_status(&api, &key.name, &body).await? {
                Applied::Written => {
                    for entry in &entries {
                        let state = |type_| state_of(&entry.conditions, type_);
                        tracing::info!(
                            policy = %key,
                            backend = entry.ancestor_ref.name.as_str(),
                            generation = status.generation,
                            accepted = state("Accepted"),
                            resolved_refs = state("ResolvedRefs"),
                            "BackendPolicy status written"
                        );
                    }
                    self.known.insert(key.clone(), entries);
                    return Ok(());
                }
                Applied::Conflict => {
                    tracing::debug!(policy = %key, "BackendPolicy changed while writing its status; again");
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
