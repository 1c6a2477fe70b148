//! The shape of the installed XBackend CRD, which decides where status goes: upstream's
//! newest has `status.ancestors[].ancestorRef`, Gateway API v1.6 `status.parents[].parentRef`.
//! Written in the other shape, the API server prunes the entry and nobody sees it, so
//! the agent never guesses: it watches the one CRD `xbackends.gateway.networking.x-k8s.io`
//! (RBAC get/list/watch on that name, deploy/rbac-kubernetes-source.yaml), reads which
//! list its `status` schema has, logs what it found, and writes nothing while the CRD is
//! absent or has neither list.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::{
    Api, Client,
    runtime::{
        reflector::{Store, store::Writer},
        watcher,
    },
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::backend::constraints::SchemaVersion;
use crate::crd::{self, entry_names};
use crate::kubernetes::follow::follow;

/// What the CRD watch found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstalledCrd {
    /// Not listed yet.
    Unknown,
    /// Listed, and there is no such CRD.
    Absent,
    /// Its `status` has neither `ancestors` nor `parents` (another shape altogether).
    Unrecognised { bundle_version: String },
    Found {
        schema: SchemaVersion,
        bundle_version: String,
    },
}

impl InstalledCrd {
    /// The shape to write status in, if there is one.
    pub fn schema(&self) -> Option<SchemaVersion> {
        match self {
            Self::Found { schema, .. } => Some(*schema),
            _ => None,
        }
    }
}

/// Watches the XBackend CRD until `shutdown`; the receiver holds what is installed.
pub fn spawn(client: Client, shutdown: CancellationToken) -> watch::Receiver<InstalledCrd> {
    let (sender, receiver) = watch::channel(InstalledCrd::Unknown);
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", crd::NAME));
    tokio::spawn(async move {
        let changed = |store: &Store<CustomResourceDefinition>| {
            let found = store
                .state()
                .first()
                .map_or(InstalledCrd::Absent, |crd| shape_of(crd));
            sender.send_if_modified(|current| {
                if *current == found {
                    return false;
                }
                log(&found);
                *current = found;
                true
            });
        };
        let start = || watcher(api.clone(), config.clone());
        follow(
            "the XBackend CRD",
            start,
            Writer::default(),
            changed,
            shutdown,
        )
        .await;
    });
    receiver
}

fn log(found: &InstalledCrd) {
    match found {
        InstalledCrd::Unknown => {}
        InstalledCrd::Absent => tracing::warn!(
            crd = crd::NAME,
            "the XBackend CRD is not installed: no XBackend status is written until it is \
             (install it: kubectl apply -k deploy/crd, or redirector crd | kubectl apply -f -)"
        ),
        InstalledCrd::Unrecognised { bundle_version } => tracing::warn!(
            crd = crd::NAME,
            bundle_version,
            "the installed XBackend CRD has neither status.ancestors (newest) nor \
             status.parents (Gateway API v1.6): no XBackend status is written"
        ),
        InstalledCrd::Found {
            schema,
            bundle_version,
        } => {
            let (list, reference) = entry_names(*schema);
            tracing::info!(
                crd = crd::NAME,
                bundle_version,
                schema = schema.label(),
                "XBackend CRD found: status goes to status.{list}[].{reference}"
            );
        }
    }
}

/// The shape of `crd`, from the `status` schema of its `v1alpha1` version.
fn shape_of(crd: &CustomResourceDefinition) -> InstalledCrd {
    let annotations = crd.metadata.annotations.as_ref();
    let bundle_version = annotations
        .and_then(|a| a.get(crd::BUNDLE_VERSION_ANNOTATION))
        .cloned()
        .unwrap_or_else(|| "(none)".to_owned());
    let status = (crd.spec.versions.iter())
        .find(|v| v.name == crd::VERSION)
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|root| property(root, "status"));
    // The newest first: a CRD in transition with both lists takes the current one.
    let schema = [SchemaVersion::Newest, SchemaVersion::V1_6]
        .into_iter()
        .find(|schema| status.is_some_and(|s| property(s, entry_names(*schema).0).is_some()));
    match schema {
        Some(schema) => InstalledCrd::Found {
            schema,
            bundle_version,
        },
        None => InstalledCrd::Unrecognised { bundle_version },
    }
}

fn property<'a>(schema: &'a JSONSchemaProps, name: &str) -> Option<&'a JSONSchemaProps> {
    schema.properties.as_ref()?.get(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(schema: SchemaVersion) -> CustomResourceDefinition {
        serde_json::from_value(crd::crd(schema)).expect("the printed CRD parses")
    }

    #[test]
    fn each_printed_crd_is_recognised() {
        for (schema, bundle) in [
            (SchemaVersion::Newest, "v0.0.0-dev"),
            (SchemaVersion::V1_6, "v1.6.1"),
        ] {
            let want = InstalledCrd::Found {
                schema,
                bundle_version: bundle.to_owned(),
            };
            assert_eq!(shape_of(&parsed(schema)), want);
        }
    }

    #[test]
    fn a_crd_without_either_list_is_unrecognised() {
        let mut value = crd::crd(SchemaVersion::Newest);
        let status = &mut value["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"];
        *status = serde_json::json!({"conditions": {"type": "array"}});
        let crd: CustomResourceDefinition = serde_json::from_value(value).expect("parses");
        let want = InstalledCrd::Unrecognised {
            bundle_version: "v0.0.0-dev".to_owned(),
        };
        assert_eq!(shape_of(&crd), want);
    }
}
