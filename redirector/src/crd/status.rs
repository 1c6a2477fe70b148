//! The schema of `status`: upstream's `BackendStatus`, written by controllers (the
//! agent's Kubernetes mode among them). Only the CRD enforces it; the validator ignores
//! `status` because it never decides what a Backend means. v1.6 lists `parents[]` with a
//! `parentRef`; the newest lists `ancestors[]` with an `ancestorRef` (same types).

use super::builder::Schema;
use super::spec::{group, kind, object_name};
use crate::backend::constraints::{
    CONTROLLER_NAME, MAX_DNS_LABEL, MAX_DNS_SUBDOMAIN, MAX_PARENTS, NAMESPACE, PORT_RANGE,
    PRECISE_HOSTNAME, SchemaVersion,
};

/// `metav1.Condition.reason`: CamelCase-ish identifier.
const CONDITION_REASON: &str = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";
/// `metav1.Condition.type`: optionally domain-prefixed, like label keys.
const CONDITION_TYPE: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";
/// `maxLength` of `metav1.Condition.message`.
const MAX_CONDITION_MESSAGE: usize = 32_768;
/// `maxLength` of `metav1.Condition.reason`.
const MAX_CONDITION_REASON: usize = 1024;
/// `maxLength` of `metav1.Condition.type`.
const MAX_CONDITION_TYPE: usize = 316;

/// The list and reference names of each shape: (`parents`, `parentRef`) or
/// (`ancestors`, `ancestorRef`).
pub fn entry_names(schema: SchemaVersion) -> (&'static str, &'static str) {
    match schema {
        SchemaVersion::Newest => ("ancestors", "ancestorRef"),
        SchemaVersion::V1_6 => ("parents", "parentRef"),
    }
}

pub fn status(schema: SchemaVersion) -> Schema {
    let (list, reference) = entry_names(schema);
    let entries = Schema::array(
        "The Backend's status with respect to each ancestor (typically a Gateway) whose \
         controller uses it.",
        ancestor_status(reference),
    )
    .max_items(MAX_PARENTS)
    .atomic();
    Schema::object(
        "Observed state of the Backend, written by controllers.",
        [(list, entries)],
    )
}

fn ancestor_status(reference: &str) -> Schema {
    let controller = Schema::string(
        "The controller that wrote this entry, as DOMAIN/PATH (example.net/controller).",
    )
    .length(1, MAX_DNS_SUBDOMAIN)
    .pattern(CONTROLLER_NAME);
    let conditions = Schema::array("Conditions, one per type.", condition()).list_map(&["type"]);
    Schema::object(
        "Status of the Backend for one ancestor.",
        [
            ("controllerName", controller),
            (reference, parent_reference()),
            ("conditions", conditions),
        ],
    )
    .required(&["controllerName", reference])
}

/// Gateway API `ParentReference`.
pub(super) fn parent_reference() -> Schema {
    Schema::object(
        "The parent resource this entry is about.",
        [
            (
                "group",
                group("API group of the parent; gateway.networking.k8s.io when unset.")
                    .default("gateway.networking.k8s.io"),
            ),
            ("kind", kind("Kind of the parent.").default("Gateway")),
            ("name", object_name()),
            (
                "namespace",
                Schema::string("Namespace of the parent; the local one when unset.")
                    .length(1, MAX_DNS_LABEL)
                    .pattern(NAMESPACE),
            ),
            (
                "port",
                Schema::integer("Port of the parent this entry is about.", "int32")
                    .range(PORT_RANGE),
            ),
            (
                "sectionName",
                Schema::string("Section (e.g. listener) of the parent; all when unset.")
                    .length(1, MAX_DNS_SUBDOMAIN)
                    .pattern(PRECISE_HOSTNAME),
            ),
        ],
    )
    .required(&["name"])
}

/// Kubernetes `metav1.Condition`.
pub(super) fn condition() -> Schema {
    Schema::object(
        "One aspect of the current state.",
        [
            (
                "type",
                Schema::string("Condition type, CamelCase or example.com/CamelCase.")
                    .max_length(MAX_CONDITION_TYPE)
                    .pattern(CONDITION_TYPE),
            ),
            (
                "status",
                Schema::string("True, False or Unknown.")
                    .enumeration(&["True", "False", "Unknown"]),
            ),
            (
                "observedGeneration",
                Schema::integer(
                    "metadata.generation the condition was computed from.",
                    "int64",
                )
                .minimum(0),
            ),
            (
                "lastTransitionTime",
                Schema::string("When the status last changed.").format("date-time"),
            ),
            (
                "reason",
                Schema::string("Programmatic reason, CamelCase.")
                    .length(1, MAX_CONDITION_REASON)
                    .pattern(CONDITION_REASON),
            ),
            (
                "message",
                Schema::string("Human-readable details; may be empty.")
                    .max_length(MAX_CONDITION_MESSAGE),
            ),
        ],
    )
    .required(&["lastTransitionTime", "message", "reason", "status", "type"])
}
