//! XBackend objects from the API server -> the validated model, or problems named the way
//! the directory source names them (`XBackend ns/name`, field path in JSON names).
//!
//! Objects are watched as [`DynamicObject`]s and parsed one by one into
//! [`backend::model::XBackend`]: a typed watcher would fail the whole list on the first
//! object the model refuses, and one bad object must never hide the others.

use std::path::PathBuf;

use kube::{api::DynamicObject, discovery::ApiResource};
use serde_json::Value;

use crate::backend::{
    self, Backend, CaSource, ObjectKey, ObjectRef, Problem,
    model::{self, XBackend},
};

/// `gateway.networking.x-k8s.io/v1alpha1`, `xbackends`.
pub(super) fn api_resource() -> ApiResource {
    let (group, version) = model::API_VERSION
        .split_once('/')
        .unwrap_or((model::API_VERSION, ""));
    ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: model::API_VERSION.to_owned(),
        kind: model::KIND.to_owned(),
        plural: "xbackends".to_owned(),
    }
}

/// The pseudo path that stands for an object in problems and catalog origins.
pub(super) fn origin(key: &ObjectKey) -> PathBuf {
    PathBuf::from(format!("k8s://{}/{}", key.namespace, key.name))
}

/// The key of a watched object (the API server always sets both parts for XBackends).
pub(super) fn key(object: &DynamicObject) -> ObjectKey {
    let namespace = object.metadata.namespace.as_deref().unwrap_or("default");
    ObjectKey::new(
        namespace,
        object.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// Whether the object says `spec.type: EndpointSelector` (whatever else is wrong with it).
pub(super) fn is_endpoint_selector(object: &DynamicObject) -> bool {
    let type_ = serde_json::from_value::<model::BackendType>(object.data["spec"]["type"].clone());
    type_.is_ok_and(|t| t == model::BackendType::EndpointSelector)
}

/// Fuzzing: untrusted JSON as the API server could send it, parsed and validated.
pub(crate) fn fuzz(json: &[u8]) -> bool {
    serde_json::from_slice::<DynamicObject>(json).is_ok_and(|object| load(&object).is_ok())
}

/// A valid object: its Backend (`None` for an `EndpointSelector` one, which this agent
/// leaves to other controllers) and the notices to log about it.
pub(super) struct Loaded {
    pub backend: Option<Backend>,
    pub notices: Vec<Problem>,
}

/// Parses and validates one object.
pub(super) fn load(object: &DynamicObject) -> Result<Loaded, Vec<Problem>> {
    let key = key(object);
    let problem = |field: Option<String>, message: String| Problem {
        file: origin(&key),
        object: Some(format!("{} {key}", model::KIND)),
        field,
        message,
    };
    let parsed = parse(object).map_err(|(field, message)| vec![problem(field, message)])?;
    match backend::validate(&parsed) {
        Ok(validated) => Ok(Loaded {
            backend: validated.backend,
            notices: (validated.notices.into_iter())
                .map(|n| problem(Some(n.field), n.message))
                .collect(),
        }),
        Err(errors) => Err(errors
            .into_iter()
            .map(|e| problem(Some(e.field), e.message))
            .collect()),
    }
}

/// The object as the model sees it. `status` is dropped: other controllers write it, the
/// API server has checked it against the CRD, and the agent never reads it, so it must
/// not be able to make a Backend invalid. `apiVersion` and `kind` are filled in when a
/// list omits them on items.
fn parse(object: &DynamicObject) -> Result<XBackend, (Option<String>, String)> {
    let mut value = serde_json::to_value(object).map_err(|e| (None, e.to_string()))?;
    if let Value::Object(fields) = &mut value {
        fields.remove("status");
        for (name, default) in [("apiVersion", model::API_VERSION), ("kind", model::KIND)] {
            fields
                .entry(name)
                .or_insert_with(|| Value::String(default.to_owned()));
        }
    }
    serde_path_to_error::deserialize(value).map_err(backend::located)
}

/// The ConfigMaps and Secrets a Backend needs: its CA bundles and client certificate.
pub(super) fn references(backend: &Backend) -> impl Iterator<Item = &ObjectRef> {
    let tls = backend.tls.as_ref();
    let ca = tls.and_then(|tls| match &tls.ca {
        CaSource::Refs(refs) => Some(refs.iter()),
        CaSource::System => None,
    });
    let client = tls.and_then(|tls| tls.client_certificate.as_ref());
    ca.into_iter().flatten().chain(client)
}
