//! Serde mirror of the upstream `XBackend` API (`gateway.networking.x-k8s.io/v1alpha1`).
//!
//! The types follow `apisx/v1alpha1/xbackend_types.go` and the generated CRD
//! `config/crd/experimental/gateway.networking.x-k8s.io_xbackends.yaml` of
//! kubernetes-sigs/gateway-api field for field, with the same camelCase JSON names, so that
//! an object accepted by the API server parses here and vice versa. Nothing here judges
//! meaning (port ranges, hostname syntax, cross-field rules): that is `validate`'s job, so
//! parsing stays a faithful transcription and every semantic rule lives in one place.
//!
//! `v1alpha1` has had two shapes, and both parse here: Gateway API v1.6 (`spec.port:
//! {port, name}`, `status.parents[].parentRef`) and upstream's newest (`spec.port:
//! {number}`, `spec.endpointSelector`, `spec.sessionPersistence`, protocols `GRPC` and
//! `WSS`, `status.ancestors[].ancestorRef`). The union of both is modelled, and
//! `validate` decides per object which shape it is and which rules apply
//! ([`crate::backend::constraints::SchemaVersion`]).
//!
//! Spec-level structs use `deny_unknown_fields`: a typo such as `hostnme` is an error
//! naming the field rather than a silently ignored key (the API server prunes unknown
//! fields, but in a directory of YAML nothing else would tell the operator). `metadata`
//! and `status` stay lenient because servers and controllers add fields there freely.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `apiVersion` of the only XBackend version this agent understands.
pub const API_VERSION: &str = "gateway.networking.x-k8s.io/v1alpha1";
/// `kind` of the object.
pub const KIND: &str = "XBackend";

/// One `XBackend` object as written in YAML or returned by the API server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct XBackend {
    /// Checked by the caller that dispatches documents; kept so objects round-trip.
    pub api_version: String,
    /// Checked by the caller that dispatches documents; kept so objects round-trip.
    pub kind: String,
    /// Lenient: servers add uid, resourceVersion, managedFields and more.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Required upstream (`+required`).
    pub spec: BackendSpec,
    /// Written by controllers; ignored by the agent when loading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<BackendStatus>,
}

/// The subset of Kubernetes `ObjectMeta` the agent uses; other keys are accepted and dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Optional here so that a missing name is a validation error naming
    /// `metadata.name` instead of a bare serde "missing field".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Defaults to `default`, as `kubectl apply` does for a namespaced object.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Needed later for `observedGeneration` in status conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Manual so that an object with no `metadata` at all still lands in `default`.
impl Default for ObjectMeta {
    fn default() -> Self {
        Self {
            name: None,
            namespace: default_namespace(),
            uid: None,
            resource_version: None,
            generation: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        }
    }
}

fn default_namespace() -> String {
    "default".to_owned()
}

/// `BackendSpec`: where the backend is and how to talk to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendSpec {
    #[serde(rename = "type")]
    pub backend_type: BackendType,
    pub port: BackendPort,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_hostname: Option<ExternalHostnameBackend>,
    /// Newest schema only: in-cluster endpoints for other controllers (the agent makes
    /// no redirect for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_selector: Option<EndpointSelectorBackend>,
    /// Newest schema only, and only with `EndpointSelector`. Kept opaque: the agent never
    /// acts on it (it skips EndpointSelector Backends), so only its presence is judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_persistence: Option<serde_json::Value>,
    /// Absent upstream means "as the route says"; there is no route here, see `validate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<BackendProtocol>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<BackendTls>,
}

/// `BackendType` (union discriminator). v1.6 admits only `ExternalHostname`; the newest
/// schema (upstream PR #5255) adds `EndpointSelector`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BackendType {
    ExternalHostname,
    EndpointSelector,
}

/// `BackendPort` in either shape: newest `{number}` (`minProperties: 1`), or v1.6's
/// `{port, name}` (modelled on `discoveryv1.EndpointPort`). Every field is optional here
/// so that `validate` can tell the shapes apart and name the field of any mistake.
/// Numbers are `int32` as upstream; the 1..=65535 range is checked in `validate` so
/// that the error names the field and states the range.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendPort {
    /// Newest schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<i32>,
    /// v1.6 (deprecated here; gone upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// v1.6 only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `EndpointSelectorBackend` (newest schema): the inlined `LabelSelector`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointSelectorBackend {
    /// Required upstream, 1..=64 labels (checked in `validate`).
    pub match_labels: BTreeMap<String, String>,
}

/// `ExternalHostnameBackend`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExternalHostnameBackend {
    pub hostname: String,
}

/// `BackendProtocol`. v1.6's CRD enum is `TCP;HTTP;HTTP2;HTTP11;H2C;MCP`; the newest adds
/// `GRPC` and `WSS` (`validate` refuses those two in a v1.6-shaped object).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BackendProtocol {
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "HTTP")]
    Http,
    #[serde(rename = "HTTP2")]
    Http2,
    #[serde(rename = "HTTP11")]
    Http11,
    #[serde(rename = "H2C")]
    H2c,
    #[serde(rename = "MCP")]
    Mcp,
    #[serde(rename = "GRPC")]
    Grpc,
    #[serde(rename = "WSS")]
    Wss,
}

/// `BackendTLSMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BackendTlsMode {
    None,
    ServerOnly,
    ClientAndServer,
}

/// `BackendTLS`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendTls {
    pub mode: BackendTlsMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate_ref: Option<SecretObjectReference>,
    /// A value type upstream (`omitempty` on a struct), but the CRD does not require it,
    /// so absence is representable and meaningful (required only for TLS modes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<BackendTlsPolicyValidation>,
}

/// Gateway API v1 `SecretObjectReference`, with the CRD defaults (`group: ""`,
/// `kind: Secret`) applied on parse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretObjectReference {
    #[serde(default)]
    pub group: String,
    #[serde(default = "default_secret_kind")]
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

fn default_secret_kind() -> String {
    "Secret".to_owned()
}

/// Gateway API v1 `BackendTLSPolicyValidation`, reused verbatim by XBackend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendTlsPolicyValidation {
    #[serde(
        default,
        rename = "caCertificateRefs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ca_certificate_refs: Vec<LocalObjectReference>,
    #[serde(
        default,
        rename = "wellKnownCACertificates",
        skip_serializing_if = "Option::is_none"
    )]
    pub well_known_ca_certificates: Option<WellKnownCaCertificates>,
    /// Required upstream; optional here so that absence is reported by `validate` as
    /// `spec.tls.validation.hostname: required`, like every other rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_alt_names: Vec<SubjectAltName>,
}

/// Gateway API v1 `LocalObjectReference`: all three fields are required by the CRD
/// (write `group: ""` for core kinds such as ConfigMap).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalObjectReference {
    pub group: String,
    pub kind: String,
    pub name: String,
}

/// `WellKnownCACertificatesType`. Upstream also admits implementation-specific,
/// domain-prefixed names (`example.com/bundle`); this agent defines none, so only
/// `System` parses and anything else is an error at the field saying so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String")]
pub enum WellKnownCaCertificates {
    System,
}

impl TryFrom<String> for WellKnownCaCertificates {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        match value.as_str() {
            "System" => Ok(Self::System),
            "" => {
                Err("must not be empty (System, or omit it and set caCertificateRefs)".to_owned())
            }
            other if other.contains('/') => Err(format!(
                "{other:?}: implementation-specific CA sets are not defined by this agent; use System or caCertificateRefs"
            )),
            other => Err(format!("{other:?} is not supported; use System")),
        }
    }
}

/// Gateway API v1 `SubjectAltName`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubjectAltName {
    #[serde(rename = "type")]
    pub san_type: SubjectAltNameType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

/// `SubjectAltNameType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SubjectAltNameType {
    Hostname,
    #[serde(rename = "URI")]
    Uri,
}

/// `BackendStatus` in either shape: v1.6 `parents` (Go field `Ancestors`), newest
/// `ancestors`. Read leniently; the agent writes its own entry in the shape of the
/// installed CRD (`kubernetes::status`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<BackendAncestorStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ancestors: Vec<BackendAncestorStatus>,
}

/// `BackendAncestorStatus`: the reference is `parentRef` (v1.6) or `ancestorRef`
/// (newest), the same `ParentReference` type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendAncestorStatus {
    pub controller_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_ref: Option<ParentReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ancestor_ref: Option<ParentReference>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Gateway API v1 `ParentReference`, with the CRD defaults applied on parse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    #[serde(default = "default_parent_group")]
    pub group: String,
    #[serde(default = "default_parent_kind")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

fn default_parent_group() -> String {
    "gateway.networking.k8s.io".to_owned()
}

fn default_parent_kind() -> String {
    "Gateway".to_owned()
}

/// Kubernetes `metav1.Condition`. `lastTransitionTime` is kept as the RFC 3339 string
/// the server sends: the agent never does arithmetic on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub condition_type: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    pub last_transition_time: String,
    pub reason: String,
    pub message: String,
}
