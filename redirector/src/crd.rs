//! `redirector crd`: the XBackend CustomResourceDefinition, so that a cluster without the
//! Gateway API experimental CRDs can be prepared with `redirector crd | kubectl apply -f -`.
//!
//! The definition is equivalent to upstream's
//! `config/crd/experimental/gateway.networking.x-k8s.io_xbackends.yaml`, in the newest
//! shape (Gateway API main, the default) or v1.6.1's (`redirector crd --gateway-api
//! v1.6`): the same names, scope, version, subresource and printer column, and a schema
//! with the same properties, types, enums, required lists, limits, patterns, defaults,
//! list types and CEL rules. It is built here from typed parts rather than copied:
//! descriptions are this project's own, CEL messages of `spec` are upstream's, and the
//! limits and rules are the constants in [`crate::backend::constraints`] that the
//! validator implements. `crd/tests` compares its structure with expectations rewritten
//! from upstream, one per shape.

mod builder;
mod policy;
mod spec;
mod status;
#[cfg(test)]
mod structural;
#[cfg(test)]
mod tests;

use serde_json::{Value, json};

use crate::backend::constraints::SchemaVersion;
use builder::Schema;
pub use status::entry_names;

/// API group of XBackend.
pub const GROUP: &str = "gateway.networking.x-k8s.io";
/// The only version defined (and served and stored).
pub const VERSION: &str = "v1alpha1";
/// The CRD's name, `xbackends.gateway.networking.x-k8s.io`.
pub const NAME: &str = "xbackends.gateway.networking.x-k8s.io";
/// The annotation that says which Gateway API release the schema is from
/// ([`SchemaVersion::bundle_version`]).
pub const BUNDLE_VERSION_ANNOTATION: &str = "gateway.networking.k8s.io/bundle-version";
/// Release channel, published as the `gateway.networking.k8s.io/channel` annotation.
pub const CHANNEL: &str = "experimental";

/// The CustomResourceDefinition as YAML, ready for `kubectl apply -f -`.
pub fn crd_yaml(schema: SchemaVersion) -> String {
    // Serialising a `serde_json::Value` cannot fail: every key is a string.
    serde_yaml_ng::to_string(&crd(schema)).unwrap_or_else(|e| unreachable!("CRD to YAML: {e}"))
}

/// The BackendPolicy CustomResourceDefinition as YAML.
pub fn policy_crd_yaml() -> String {
    serde_yaml_ng::to_string(&policy::crd()).unwrap_or_else(|e| unreachable!("CRD to YAML: {e}"))
}

/// The CustomResourceDefinition (`apiextensions.k8s.io/v1`) as a JSON value.
pub fn crd(schema: SchemaVersion) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": NAME,
            "annotations": {
                // Upstream's API review for the x-k8s.io group; kept for equivalence.
                "api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/gateway-api/pull/4530",
                (BUNDLE_VERSION_ANNOTATION): schema.bundle_version(),
                "gateway.networking.k8s.io/channel": CHANNEL,
            },
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": "XBackend",
                "listKind": "XBackendList",
                "plural": "xbackends",
                "singular": "xbackend",
                "shortNames": ["xbackend"],
                "categories": ["gateway-api"],
            },
            "scope": "Namespaced",
            "versions": [served_version(VERSION, root(schema))],
        },
    })
}

/// The one version of a CRD: served and stored, with a status subresource and an Age
/// column, as both of the project's CRDs have it.
fn served_version(name: &str, schema: Schema) -> Value {
    json!({
        "name": name,
        "served": true,
        "storage": true,
        "subresources": {"status": {}},
        "additionalPrinterColumns": [
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        "schema": {"openAPIV3Schema": Value::from(schema)},
    })
}

/// The whole object: the standard envelope around `spec` and `status`.
fn root(schema: SchemaVersion) -> Schema {
    Schema::object(
        "XBackend declares a destination outside the cluster (an external hostname and \
         port) and how to connect to it, including TLS.",
        [
            (
                "apiVersion",
                Schema::string("Versioned schema of this representation of the object."),
            ),
            (
                "kind",
                Schema::string("REST resource this object represents, in CamelCase."),
            ),
            ("metadata", Schema::object("", [])),
            ("spec", spec::spec(schema)),
            ("status", status::status(schema)),
        ],
    )
    .required(&["spec"])
}
