//! What the status of one XBackend says, and how it is rendered into this controller's
//! `status.ancestors` (or v1.6 `status.parents`) entry (see the parent module for the
//! choices).

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::CONTROLLER_NAME;
use crate::{
    backend::{Backend, CaSource, Catalog, ObjectKey, constraints::SchemaVersion},
    crd::entry_names,
    tls::TlsConfigError,
};

/// The JSON name of the reference in [`ParentStatus`] as serde writes it; renamed to
/// the shape's own (`ancestorRef`) on the way out and back.
const SERDE_REFERENCE: &str = "parentRef";

/// `maxLength` of `metav1.Condition.message`.
pub(super) const MAX_MESSAGE: usize = 32_768;

/// What the status of one XBackend says, as the reconciler knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectStatus {
    pub key: ObjectKey,
    /// `metadata.generation` of the object the results were computed from.
    pub generation: i64,
    /// `Err`: why the object was rejected (the problems, `field: message`, joined).
    pub accepted: Result<(), String>,
    /// Whether the referenced CA bundles and client certificate are usable. Ignored
    /// (no `ResolvedRefs` condition is written) while `accepted` is `Err`: the references
    /// of a spec that was not accepted were not evaluated.
    pub resolved_refs: Result<(), RefProblem>,
}

/// A `ResolvedRefs=False` condition: an upstream reason and the error text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefProblem {
    /// `InvalidCACertificateRef` (BackendTLSPolicy's reason for a CA bundle reference
    /// that is missing, lacks `ca.crt` or holds no usable certificate),
    /// `InvalidClientCertificateRef` (the Gateway's reason for a broken client
    /// certificate Secret), or `Invalid` (TLS settings unusable for another reason).
    pub reason: &'static str,
    pub message: String,
}

impl RefProblem {
    /// Which reference `error` is about, from the Backend it was built for.
    pub fn of(backend: &Backend, error: &TlsConfigError) -> Self {
        let tls = backend.tls.as_ref();
        let is_ca = |object: &str| {
            tls.is_some_and(|tls| match &tls.ca {
                CaSource::Refs(refs) => refs.iter().any(|r| r.to_string() == object),
                CaSource::System => false,
            })
        };
        let client = "InvalidClientCertificateRef";
        let ca = "InvalidCACertificateRef";
        let reason = match error {
            TlsConfigError::MissingObject { object } => {
                if is_ca(object) {
                    ca
                } else {
                    client
                }
            }
            TlsConfigError::MissingKey { key, .. } => {
                if key == "ca.crt" {
                    ca
                } else {
                    client
                }
            }
            TlsConfigError::BadPem { origin, .. } => {
                if origin.ends_with(" key ca.crt") {
                    ca
                } else {
                    client
                }
            }
            TlsConfigError::BadRoots(_) => ca,
            TlsConfigError::BadClientCertificate(_) => client,
            TlsConfigError::BadHostname { .. } | TlsConfigError::Rustls(_) => "Invalid",
        };
        Self {
            reason,
            message: error.to_string(),
        }
    }
}

/// The status of every XBackend of a catalog, for the writer.
///
/// - `generations`: `metadata.generation` of every XBackend the catalog was built from
///   (valid or not); only these get a status.
/// - `catalog`: its problems make `Accepted=False` (a problem is matched to its object by
///   `XBackend ns/name`).
/// - `in_force`: for a key whose Backend is in force (valid, or its last good version
///   kept), `Some(Err(e))` if its TLS settings cannot be built, `Some(Ok(()))` otherwise;
///   `None` when no version of it is in force.
pub fn object_statuses<'a>(
    generations: &BTreeMap<ObjectKey, i64>,
    catalog: &Catalog,
    in_force: impl Fn(&ObjectKey) -> Option<Result<(), &'a TlsConfigError>>,
) -> Vec<ObjectStatus> {
    let mut problems: BTreeMap<&ObjectKey, Vec<String>> = BTreeMap::new();
    let keys: BTreeMap<ObjectKey, &ObjectKey> =
        generations.keys().map(|k| (k.clone(), k)).collect();
    for problem in &catalog.problems {
        let Some(key) = problem.xbackend_key() else {
            continue;
        };
        let Some(key) = keys.get(&key) else {
            continue;
        };
        let text = match &problem.field {
            Some(field) => format!("{field}: {}", problem.message),
            None => problem.message.clone(),
        };
        problems.entry(key).or_default().push(text);
    }
    let backends: BTreeMap<&ObjectKey, &Backend> =
        catalog.backends.iter().map(|b| (&b.key, &**b)).collect();
    generations
        .iter()
        .map(|(key, generation)| {
            let force = in_force(key);
            let accepted = match problems.get(key) {
                None => Ok(()),
                Some(texts) => {
                    let mut message = texts.join("; ");
                    if force.is_some() {
                        message.push_str(" (the last accepted version stays in force)");
                    }
                    Err(message)
                }
            };
            let resolved_refs = match (force, backends.get(key)) {
                (Some(Err(error)), Some(backend)) => Err(RefProblem::of(backend, error)),
                _ => Ok(()),
            };
            ObjectStatus {
                key: key.clone(),
                generation: *generation,
                accepted,
                resolved_refs,
            }
        })
        .collect()
}

/// Gateway API `ParentReference`, as this controller fills it in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ParentRef {
    #[serde(default)]
    pub(super) group: Option<String>,
    #[serde(default)]
    pub(super) kind: Option<String>,
    pub(super) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) namespace: Option<String>,
}

/// The parent of an XBackend's entry: its own Namespace (see the module comment).
pub(super) fn parent_ref(key: &ObjectKey) -> ParentRef {
    ParentRef {
        group: Some(String::new()),
        kind: Some("Namespace".to_owned()),
        name: key.namespace.clone(),
        namespace: None,
    }
}

/// `metav1.Condition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Condition {
    #[serde(rename = "type")]
    pub(super) type_: String,
    pub(super) status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) observed_generation: Option<i64>,
    pub(super) last_transition_time: String,
    pub(super) reason: String,
    #[serde(default)]
    pub(super) message: String,
}

/// This controller's entry of `status.parents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ParentStatus {
    pub(super) controller_name: String,
    pub(super) parent_ref: ParentRef,
    #[serde(default)]
    pub(super) conditions: Vec<Condition>,
}

/// The entry for `status`; conditions whose status is unchanged from `previous` keep
/// their `lastTransitionTime`, the others get `now`.
pub(super) fn render(
    status: &ObjectStatus,
    previous: Option<&ParentStatus>,
    now: &str,
) -> ParentStatus {
    let previous = previous.map_or(&[][..], |p| p.conditions.as_slice());
    let condition = |type_: &str, result: Result<(&str, &str), (&str, &str)>| {
        condition_since(type_, result, status.generation, previous, now)
    };
    let mut conditions = Vec::new();
    match &status.accepted {
        Ok(()) => {
            conditions.push(condition(
                "Accepted",
                Ok(("Accepted", "Backend accepted by the redirector node agents")),
            ));
            let refs = match &status.resolved_refs {
                Ok(()) => Ok(("ResolvedRefs", "All references resolved")),
                Err(problem) => Err((problem.reason, problem.message.as_str())),
            };
            conditions.push(condition("ResolvedRefs", refs));
        }
        Err(message) => conditions.push(condition("Accepted", Err(("Invalid", message)))),
    }
    ParentStatus {
        controller_name: CONTROLLER_NAME.to_owned(),
        parent_ref: parent_ref(&status.key),
        conditions,
    }
}

/// Condition `type_` of `generation`, `True` for `Ok((reason, message))`; its
/// `lastTransitionTime` is that of the same condition in `previous` while its status is
/// unchanged, else `now`.
pub(super) fn condition_since(
    type_: &str,
    result: Result<(&str, &str), (&str, &str)>,
    generation: i64,
    previous: &[Condition],
    now: &str,
) -> Condition {
    let (state, reason, message) = match result {
        Ok((reason, message)) => ("True", reason, message),
        Err((reason, message)) => ("False", reason, message),
    };
    let since = (previous.iter())
        .find(|c| c.type_ == type_ && c.status == state)
        .map_or(now, |c| c.last_transition_time.as_str());
    Condition {
        type_: type_.to_owned(),
        status: state.to_owned(),
        observed_generation: Some(generation),
        last_transition_time: since.to_owned(),
        reason: reason.to_owned(),
        message: truncated(message),
    }
}

/// The status of condition `type_` (`-` when absent), for logs.
pub(super) fn state_of<'a>(conditions: &'a [Condition], type_: &str) -> &'a str {
    (conditions.iter())
        .find(|c| c.type_ == type_)
        .map_or("-", |c| c.status.as_str())
}

pub(super) fn truncated(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// RFC 3339 in UTC, whole seconds (`metav1.Time`).
pub(super) fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The entries of the status list of `schema` (`ancestors` or `parents`): this
/// controller's (the first, parsed) and the others, as they are.
pub(super) fn split_parents(
    object: &DynamicObject,
    schema: SchemaVersion,
) -> (Option<ParentStatus>, Vec<Value>) {
    let (list, reference) = entry_names(schema);
    let parents = object.data["status"][list]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let (ours, others): (Vec<Value>, Vec<Value>) = parents
        .into_iter()
        .partition(|p| p["controllerName"].as_str() == Some(CONTROLLER_NAME));
    let ours = ours.into_iter().find_map(|mut p| {
        rename(&mut p, reference, SERDE_REFERENCE);
        serde_json::from_value::<ParentStatus>(p).ok()
    });
    (ours, others)
}

/// `entry` as JSON in the shape of `schema` (`ancestorRef` or `parentRef`).
pub(super) fn entry_json(
    entry: &ParentStatus,
    schema: SchemaVersion,
) -> Result<Value, serde_json::Error> {
    let mut value = serde_json::to_value(entry)?;
    rename(&mut value, SERDE_REFERENCE, entry_names(schema).1);
    Ok(value)
}

fn rename(value: &mut Value, from: &str, to: &str) {
    if from == to {
        return;
    }
    if let Some(fields) = value.as_object_mut()
        && let Some(moved) = fields.remove(from)
    {
        fields.insert(to.to_owned(), moved);
    }
}
