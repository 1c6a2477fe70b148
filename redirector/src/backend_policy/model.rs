//! The `BackendPolicy` API as it is written (YAML in a directory), before validation.
//! Unknown fields under `spec` are refused: a misspelt `rules` would otherwise leave a
//! Backend open that the operator meant to restrict.

use serde::Deserialize;

pub const API_VERSION: &str = "policy.redirector.dev/v1alpha1";
pub const KIND: &str = "BackendPolicy";
/// What `spec.targetRefs` may name.
pub const TARGET_GROUP: &str = "gateway.networking.x-k8s.io";
pub const TARGET_KIND: &str = "XBackend";

/// The document; `apiVersion`, `kind`, `metadata` and `status` are read by the loader.
#[derive(Debug, Deserialize)]
pub struct BackendPolicyDoc {
    pub metadata: Option<Metadata>,
    pub spec: Spec,
}

/// The one field of `metadata` a policy's meaning depends on (its age decides
/// conflicts); namespace and name are read by the loader.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub creation_timestamp: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    pub target_refs: Vec<TargetRef>,
    #[serde(default)]
    pub credentials: Vec<CredentialDoc>,
    pub rules: Option<Vec<RuleDoc>>,
    pub mcp: Option<McpDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TargetRef {
    pub group: String,
    pub kind: String,
    pub name: String,
    pub section_name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialDoc {
    pub header: String,
    pub value_from: ValueFrom,
    pub format: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValueFrom {
    pub secret_key_ref: SecretKeyRef,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleDoc {
    pub methods: Option<Vec<String>>,
    pub paths: Option<Vec<PathDoc>>,
    pub sources: Option<SourcesDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathDoc {
    #[serde(rename = "type")]
    pub kind: PathType,
    pub value: String,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub enum PathType {
    PathPrefix,
    Exact,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourcesDoc {
    pub service_accounts: Option<Vec<String>>,
    pub cgroups: Option<Vec<String>>,
}

/// `spec.mcp`: what clients of an MCP Backend may do.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpDoc {
    pub tools: Option<McpToolsDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpToolsDoc {
    /// The tools a `tools/call` may name and `tools/list` shows; any other is refused.
    pub allow: Vec<String>,
}
