//! `redirector crd`: the XBackend CustomResourceDefinition, so that a cluster without the
//! Gateway API experimental CRDs can be prepared with `redirector crd | kubectl apply -f -`.
//!
//! The definition is equivalent to upstream's
//! `config/crd/experimental/gateway.networking.x-k8s.io_xbackends.yaml` of Gateway API
//! v1.6.1: the same names, scope, version, subresource and printer column, and a schema
//! with the same properties, types, enums, required lists, limits, patterns, defaults,
//! list types and CEL rules. It is built here from typed parts rather than copied:
//! descriptions and CEL messages are this project's own, and the limits and rules are
//! the constants in [`crate::backend::constraints`] that the validator implements.
//! `crd/tests` compares its structure with an expectation rewritten from upstream.

mod builder;
mod policy;
mod spec;
mod status;
#[cfg(test)]
mod structural;
#[cfg(test)]
mod tests;

use serde_json::{Value, json};

use builder::Schema;

/// API group of XBackend.
pub const GROUP: &str = "gateway.networking.x-k8s.io";
/// The only version defined (and served and stored).
pub const VERSION: &str = "v1alpha1";
/// The Gateway API release whose XBackend schema this CRD reproduces, published as the
/// `gateway.networking.k8s.io/bundle-version` annotation that implementations read.
pub const BUNDLE_VERSION: &str = "v1.6.1";
/// Release channel, published as the `gateway.networking.k8s.io/channel` annotation.
pub const CHANNEL: &str = "experimental";

/// The CustomResourceDefinition as YAML, ready for `kubectl apply -f -`.
pub fn crd_yaml() -> String {
    // Serialising a `serde_json::Value` cannot fail: every key is a string.
    serde_yaml_ng::to_string(&crd()).unwrap_or_else(|e| unreachable!("CRD to YAML: {e}"))
}

/// The BackendPolicy CustomResourceDefinition as YAML.
pub fn policy_crd_yaml() -> String {
    serde_yaml_ng::to_string(&policy::crd()).unwrap_or_else(|e| unreachable!("CRD to YAML: {e}"))
}

/// The CustomResourceDefinition (`apiextensions.k8s.io/v1`) as a JSON value.
pub fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("xbackends.{GROUP}"),
            "annotations": {
                // Upstream's API review for the x-k8s.io group; kept for equivalence.
                "api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/gateway-api/pull/4530",
                "gateway.networking.k8s.io/bundle-version": BUNDLE_VERSION,
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
            "versions": [served_version(VERSION, root())],
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
fn root() -> Schema {
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
            ("spec", spec::spec()),
            ("status", status::status()),
        ],
    )
    .required(&["spec"])
}
