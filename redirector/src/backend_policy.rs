//! Backend policies (`policy.redirector.dev/v1alpha1` `BackendPolicy`): headers the proxy
//! sets on requests it forwards over TLS it originates (so API keys live on the node, not
//! in pods), rules saying which requests may reach a Backend at all, and which tools
//! the clients of an MCP Backend may see and call.
//!
//! A leaf module: it knows nothing of the Backend model or the proxy. `model` mirrors the
//! API, `validate` turns it into [`BackendPolicy`] (every field checked on its own),
//! `attach` joins policies to what it is told about their target Backends and Secrets
//! (the caller passes closures, so the Backend catalog stays the one owner of those), and
//! `rules` decides a request (`mcp.tools` is judged by the proxy's MCP module, which
//! reads JSON-RPC). The result, [`Applied`], sits in a [`PolicySlot`] per Backend that
//! the reconciler updates in place: a rotated Secret reaches the next request even on a
//! client connection opened before the rotation.

mod attach;
pub mod model;
mod rules;
mod secret;
#[cfg(test)]
mod tests;
mod validate;

use std::sync::{Arc, RwLock};

pub use attach::{Applied, Attachment, Rejection, SecretLookup, TargetFacts, attach, unresolved};
pub use model::{API_VERSION, KIND};
pub use rules::RequestFacts;
pub use secret::SensitiveHeader;
pub use validate::{
    BackendPolicy, Credential, MAX_TOOL_NAME, PathMatch, Rule, Sources, ToolAllowList, validate,
};

/// Why a policy (or one of its fields) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A field of the policy itself is invalid (reported with its path).
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The policy is valid but cannot attach to its target (reported with its path).
    #[error("{field}: {message}")]
    NotAccepted { field: String, message: String },
    /// Another, older policy sets the field on the same Backend (reported with its path).
    #[error("{field}: {message}")]
    Conflicted { field: String, message: String },
    /// A credential's Secret or key is missing or unusable: requests to the Backend are
    /// refused rather than sent without the key.
    #[error("{0}")]
    Unresolved(String),
}

impl PolicyError {
    fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The field path, for problems located like XBackend ones.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Invalid { field, .. }
            | Self::NotAccepted { field, .. }
            | Self::Conflicted { field, .. } => Some(field),
            Self::Unresolved(_) => None,
        }
    }

    /// The message without the field.
    pub fn message(&self) -> &str {
        match self {
            Self::Invalid { message, .. }
            | Self::NotAccepted { message, .. }
            | Self::Conflicted { message, .. } => message,
            Self::Unresolved(message) => message,
        }
    }
}

/// A BackendPolicy object as the API server holds it, valid or not: what its status is
/// written for (Kubernetes source only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// `metadata.generation`: the `observedGeneration` of its conditions.
    pub generation: i64,
    /// `spec.targetRefs[].name`, as far as they can be read even from an invalid
    /// object: one `status.ancestors` entry each.
    pub targets: Vec<String>,
}

/// The policy in force for one Backend, shared by every table that has the Backend so
/// that a change reaches open connections' next requests.
#[derive(Debug, Default)]
pub struct PolicySlot(RwLock<Option<Arc<Applied>>>);

impl PolicySlot {
    pub fn current(&self) -> Option<Arc<Applied>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the policy; true if it changed.
    pub fn set(&self, applied: Option<Arc<Applied>>) -> bool {
        let mut current = self.0.write().unwrap_or_else(|p| p.into_inner());
        let changed = *current != applied;
        *current = applied;
        changed
    }
}
