//! BackendPolicy objects (`policy.redirector.dev/v1alpha1`, `backendpolicies`) from the API
//! server -> validated policies, or problems named the way the directory source names
//! them (`BackendPolicy ns/name`, field path in JSON names). Watched as
//! [`DynamicObject`]s of every namespace, for the reason XBackends are: one object the
//! model refuses must not hide the others.
//!
//! The Secrets their credentials name are watched like a Backend's client certificate
//! (`catalog.rs`, `refs.rs`): one watch per referenced Secret, never a list of all.
//!
//! A cluster without the BackendPolicy CRD has no BackendPolicies. The first request
//! answered 404 is said once (how to install the CRD) and counts as a list of none, so
//! an agent upgraded before its CRD still becomes ready with its XBackends; the watch
//! keeps retrying and applies policies as soon as the CRD is served.

use std::path::PathBuf;

use kube::{
    Api, Client,
    api::{DynamicObject, ListParams},
    discovery::ApiResource,
    runtime::{
        reflector::{Store, store::Writer},
        watcher,
    },
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{follow::follow, xbackends};
use crate::{
    backend::{self, ObjectKey, ObjectRef, Problem, RefKind},
    backend_policy::{self, BackendPolicy, Observed, model::BackendPolicyDoc},
};

/// `policy.redirector.dev/v1alpha1`, `backendpolicies`.
pub(super) fn api_resource() -> ApiResource {
    let api_version = backend_policy::API_VERSION;
    let (group, version) = api_version.split_once('/').unwrap_or((api_version, ""));
    ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: api_version.to_owned(),
        kind: backend_policy::KIND.to_owned(),
        plural: "backendpolicies".to_owned(),
    }
}

/// The pseudo path that stands for a policy in problems; not an XBackend's (a policy is
/// often named after the Backend it targets).
pub(super) fn origin(key: &ObjectKey) -> PathBuf {
    PathBuf::from(format!(
        "k8s://backendpolicies/{}/{}",
        key.namespace, key.name
    ))
}

/// Parses and validates one object.
pub(super) fn load(object: &DynamicObject) -> Result<BackendPolicy, Vec<Problem>> {
    let key = xbackends::key(object);
    let problem = |field: Option<&str>, message: &str| Problem {
        file: origin(&key),
        object: Some(format!("{} {key}", backend_policy::KIND)),
        field: field.map(str::to_owned),
        message: message.to_owned(),
    };
    // `status` is the agent's own output and other controllers': never an input.
    let mut value =
        serde_json::to_value(object).map_err(|e| vec![problem(None, &e.to_string())])?;
    if let Value::Object(fields) = &mut value {
        fields.remove("status");
    }
    let doc: BackendPolicyDoc = serde_path_to_error::deserialize(value).map_err(|e| {
        let (field, message) = backend::located(e);
        vec![problem(field.as_deref(), &message)]
    })?;
    backend_policy::validate(&key.namespace, &key.name, doc).map_err(|errors| {
        (errors.iter())
            .map(|e| problem(e.field(), e.message()))
            .collect()
    })
}

/// What the status of `object` is written for, read from the raw object so that an
/// invalid policy still says so on each Backend it names.
pub(super) fn observed(object: &DynamicObject) -> Observed {
    let refs = object.data["spec"]["targetRefs"].as_array();
    let mut targets: Vec<String> = (refs.into_iter().flatten())
        .filter_map(|r| r["name"].as_str())
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    targets.sort();
    targets.dedup();
    Observed {
        generation: object.metadata.generation.unwrap_or(0),
        targets,
    }
}

/// The Secrets `policy`'s credentials are made from.
pub(super) fn references(policy: &BackendPolicy) -> impl Iterator<Item = ObjectRef> + '_ {
    (policy.credentials.iter()).map(|credential| ObjectRef {
        kind: RefKind::Secret,
        key: ObjectKey::new(&policy.namespace, &credential.secret),
    })
}

/// Follows the BackendPolicies of every namespace into `writer`'s store until `stop`,
/// with a message on `changed` after every change (and once if the CRD is not served).
pub(super) async fn run(
    client: Client,
    writer: Writer<DynamicObject>,
    changed: mpsc::UnboundedSender<()>,
    stop: CancellationToken,
) {
    let resource = api_resource();
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let one = ListParams::default().limit(1);
    let probe = tokio::select! {
        () = stop.cancelled() => return,
        probe = api.list_metadata(&one) => probe,
    };
    if let Err(kube::Error::Api(status)) = &probe
        && status.code == 404
    {
        tracing::warn!(
            "the API server serves no BackendPolicies (policy.redirector.dev/v1alpha1): \
             none apply until their CRD is installed (redirector crd | kubectl apply -f -)"
        );
        let _ = changed.send(());
    }
    let start = || watcher(api.clone(), watcher::Config::default());
    let notify = |_: &Store<DynamicObject>| {
        let _ = changed.send(());
    };
    follow("BackendPolicies", start, writer, notify, stop).await;
}
