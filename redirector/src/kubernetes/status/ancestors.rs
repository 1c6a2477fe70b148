//! What the status of one BackendPolicy says, and how it is rendered into this
//! controller's `status.ancestors` entries: one per targeted XBackend (GEP-713 direct
//! attachment: the ancestor is the target itself).
//!
//! ```yaml
//! status:
//!   ancestors:
//!     - ancestorRef: {group: gateway.networking.x-k8s.io, kind: XBackend, namespace: ai, name: openai}
//!       controllerName: redirector.dev/node-agent
//!       conditions:
//!         - type: Accepted      # False: Invalid, TargetNotFound or Conflicted
//!         - type: ResolvedRefs  # False: InvalidSecretRef (missing Secret or key)
//! ```
//!
//! Reasons are Gateway API's for policies (`PolicyConditionReason`): `Invalid` for a
//! policy that fails validation or cannot apply to a target (e.g. credentials on a
//! Backend without TLS: the message names the field), `TargetNotFound`, and `Conflicted`
//! for a field an older policy sets on the same Backend. Messages name Secrets and keys,
//! never a value.

use std::{collections::BTreeMap, sync::Arc};

use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    CONTROLLER_NAME,
    render::{Condition, ParentRef, condition_since},
};
use crate::{
    backend::{self, Catalog, ObjectKey},
    backend_policy::{self, BackendPolicy, PolicyError, Rejection},
};

#[cfg(test)]
mod tests;

/// What the status of one BackendPolicy says, as the reconciler knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyStatus {
    pub key: ObjectKey,
    /// `metadata.generation` of the object the results were computed from.
    pub generation: i64,
    pub ancestors: Vec<AncestorStatus>,
}

/// The policy with respect to one XBackend it targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AncestorStatus {
    /// The XBackend's name (in the policy's namespace).
    pub backend: String,
    /// `Err((reason, message))`: `Accepted=False`.
    pub accepted: Result<(), (&'static str, String)>,
    /// `None` when the spec is invalid (its references were not evaluated).
    pub resolved_refs: Option<Result<(), String>>,
}

/// The status of every BackendPolicy object of `catalog`.
///
/// - `in_force`: the policies the agent applies (valid ones, and the last good version
///   of one that is now invalid), by key;
/// - `rejected`: what attachment refused (not accepted, or conflicted), per target.
pub fn policy_statuses(
    catalog: &Catalog,
    in_force: &BTreeMap<ObjectKey, Arc<BackendPolicy>>,
    rejected: &[Rejection],
) -> Vec<PolicyStatus> {
    let mut invalid: BTreeMap<ObjectKey, Vec<String>> = BTreeMap::new();
    for problem in &catalog.problems {
        if let Some(key) = problem.key_of(backend_policy::KIND) {
            let text = match &problem.field {
                Some(field) => format!("{field}: {}", problem.message),
                None => problem.message.clone(),
            };
            invalid.entry(key).or_default().push(text);
        }
    }
    let mut refused: BTreeMap<String, Vec<&Rejection>> = BTreeMap::new();
    for rejection in rejected {
        refused
            .entry(rejection.policy.clone())
            .or_default()
            .push(rejection);
    }
    (catalog.policy_objects.iter())
        .map(|(key, observed)| {
            let policy = in_force.get(key);
            let refs = policy.map(|p| match backend::unresolved_refs(catalog, p) {
                Some(error) => Err(error.to_string()),
                None => Ok(()),
            });
            let rejections = refused.get(&key.to_string()).map_or(&[][..], Vec::as_slice);
            let ancestors = (observed.targets.iter())
                .map(|backend| match invalid.get(key) {
                    Some(texts) => {
                        let mut message = texts.join("; ");
                        if policy.is_some() {
                            message.push_str(" (the last accepted version stays in force)");
                        }
                        AncestorStatus {
                            backend: backend.clone(),
                            accepted: Err(("Invalid", message)),
                            resolved_refs: None,
                        }
                    }
                    None => AncestorStatus {
                        backend: backend.clone(),
                        accepted: accepted(backend, rejections),
                        resolved_refs: refs.clone(),
                    },
                })
                .collect();
            PolicyStatus {
                key: key.clone(),
                generation: observed.generation,
                ancestors,
            }
        })
        .collect()
}

/// `Accepted` on `backend`: a policy that cannot attach to one of its targets attaches to
/// none (each target says why it was refused, the others that it was); a field lost to
/// an older policy is a conflict on that target only.
fn accepted(backend: &str, rejections: &[&Rejection]) -> Result<(), (&'static str, String)> {
    // An error displays as `field: message`.
    let not_accepted: Vec<&&Rejection> = (rejections.iter())
        .filter(|r| matches!(r.error, PolicyError::NotAccepted { .. }))
        .collect();
    if !not_accepted.is_empty() {
        let own: Vec<&&&Rejection> = (not_accepted.iter())
            .filter(|r| r.target == backend)
            .collect();
        let missing = !own.is_empty()
            && (own.iter()).all(|r| {
                r.error
                    .field()
                    .is_some_and(|f| f.starts_with("spec.targetRefs"))
            });
        let reason = if missing { "TargetNotFound" } else { "Invalid" };
        let texts: Vec<String> = not_accepted.iter().map(|r| r.error.to_string()).collect();
        let message = format!(
            "{}; the policy applies to none of its targets",
            texts.join("; ")
        );
        return Err((reason, message));
    }
    let conflicts: Vec<String> = (rejections.iter())
        .filter(|r| r.target == backend && matches!(r.error, PolicyError::Conflicted { .. }))
        .map(|r| r.error.to_string())
        .collect();
    match conflicts.is_empty() {
        true => Ok(()),
        false => Err(("Conflicted", conflicts.join("; "))),
    }
}

/// This controller's entry of `status.ancestors` for one XBackend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AncestorEntry {
    pub(super) ancestor_ref: ParentRef,
    pub(super) controller_name: String,
    #[serde(default)]
    pub(super) conditions: Vec<Condition>,
}

/// The entries for `status`; conditions whose status is unchanged from `previous`'s
/// entry for the same XBackend keep their `lastTransitionTime`, the others get `now`.
pub(super) fn render_ancestors(
    status: &PolicyStatus,
    previous: &[AncestorEntry],
    now: &str,
) -> Vec<AncestorEntry> {
    (status.ancestors.iter())
        .map(|ancestor| {
            let ancestor_ref = ancestor_ref(&status.key.namespace, &ancestor.backend);
            let before = (previous.iter())
                .find(|p| p.ancestor_ref == ancestor_ref)
                .map_or(&[][..], |p| p.conditions.as_slice());
            let condition = |type_: &str, result: Result<(&str, &str), (&str, &str)>| {
                condition_since(type_, result, status.generation, before, now)
            };
            let mut conditions = vec![condition(
                "Accepted",
                match &ancestor.accepted {
                    Ok(()) => Ok(("Accepted", "Policy accepted by the redirector node agents")),
                    Err((reason, message)) => Err((*reason, message.as_str())),
                },
            )];
            if let Some(refs) = &ancestor.resolved_refs {
                conditions.push(condition(
                    "ResolvedRefs",
                    match refs {
                        Ok(()) => Ok(("ResolvedRefs", "All references resolved")),
                        Err(message) => Err(("InvalidSecretRef", message.as_str())),
                    },
                ));
            }
            AncestorEntry {
                ancestor_ref,
                controller_name: CONTROLLER_NAME.to_owned(),
                conditions,
            }
        })
        .collect()
}

/// The targeted XBackend, every field spelled out (the defaults would mean a Gateway).
fn ancestor_ref(namespace: &str, name: &str) -> ParentRef {
    ParentRef {
        group: Some(backend_policy::model::TARGET_GROUP.to_owned()),
        kind: Some(backend_policy::model::TARGET_KIND.to_owned()),
        name: name.to_owned(),
        namespace: Some(namespace.to_owned()),
    }
}

/// The entries of `status.ancestors`: this controller's (parsed) and the others.
pub(super) fn split_ancestors(object: &DynamicObject) -> (Vec<AncestorEntry>, Vec<Value>) {
    let ancestors = object.data["status"]["ancestors"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let (ours, others): (Vec<Value>, Vec<Value>) = ancestors
        .into_iter()
        .partition(|a| a["controllerName"].as_str() == Some(CONTROLLER_NAME));
    let ours = (ours.into_iter())
        .filter_map(|a| serde_json::from_value::<AncestorEntry>(a).ok())
        .collect();
    (ours, others)
}
