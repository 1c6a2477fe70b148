//! One watch per ConfigMap or Secret that a Backend references: a field selector on
//! `metadata.name` in the object's namespace, so the API server sends this object and no
//! other, and the agent never holds Secrets that no Backend asked for.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api, Client,
    runtime::{
        reflector::{Store, store::Writer},
        watcher,
    },
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::follow::follow;
use crate::backend::{ObjectRef, RefKind};

/// The content the catalog keeps of a referenced object, in the directory source's form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Payload {
    /// Listed, and it does not exist (its Backends are refused until it does).
    Absent,
    /// `data`, plus the `binaryData` entries that are UTF-8 text.
    ConfigMap(BTreeMap<String, String>),
    /// `data` (the API server has already decoded it; `stringData` is write-only).
    Secret(BTreeMap<String, Vec<u8>>),
}

/// What a reference watch reports: the object as it is now.
#[derive(Debug)]
pub(super) struct Fetched {
    /// Which start of the watch this comes from (a stopped and restarted watch must not be
    /// confused with the one before it).
    pub(super) id: u64,
    pub(super) object: ObjectRef,
    pub(super) payload: Payload,
}

/// Starts the watch of `object`; it reports every change on `updates` until `stop`.
pub(super) fn spawn(
    client: Client,
    id: u64,
    object: ObjectRef,
    updates: mpsc::UnboundedSender<Fetched>,
    stop: CancellationToken,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={}", object.key.name));
    let what = format!("{:?} {}", object.kind, object.key);
    let (kind, namespace) = (object.kind, object.key.namespace.clone());
    let send = move |payload: Payload| {
        let object = object.clone();
        let _ = updates.send(Fetched {
            id,
            object,
            payload,
        });
    };
    match kind {
        RefKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
            tokio::spawn(async move {
                let changed = |store: &Store<ConfigMap>| {
                    send(store.state().first().map_or(Payload::Absent, |cm| {
                        Payload::ConfigMap(config_map_data(cm))
                    }))
                };
                let start = || watcher(api.clone(), config.clone());
                follow(&what, start, Writer::default(), changed, stop).await;
            });
        }
        RefKind::Secret => {
            let api: Api<Secret> = Api::namespaced(client, &namespace);
            tokio::spawn(async move {
                let changed = |store: &Store<Secret>| {
                    send(store.state().first().map_or(Payload::Absent, |secret| {
                        Payload::Secret(secret_data(secret))
                    }))
                };
                let start = || watcher(api.clone(), config.clone());
                follow(&what, start, Writer::default(), changed, stop).await;
            });
        }
    }
}

/// `data` as is, plus `binaryData` entries that are UTF-8 text (a PEM bundle stored there
/// is still a PEM bundle), as the directory source reads a ConfigMap.
pub(super) fn config_map_data(config_map: &ConfigMap) -> BTreeMap<String, String> {
    let mut data = config_map.data.clone().unwrap_or_default();
    for (key, bytes) in config_map.binary_data.iter().flatten() {
        match String::from_utf8(bytes.0.clone()) {
            Ok(text) => {
                data.entry(key.clone()).or_insert(text);
            }
            Err(_) => tracing::debug!(key, "ignoring non-UTF-8 ConfigMap binaryData entry"),
        }
    }
    data
}

pub(super) fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let data = secret.data.iter().flatten();
    data.map(|(key, bytes)| (key.clone(), bytes.0.clone()))
        .collect()
}
