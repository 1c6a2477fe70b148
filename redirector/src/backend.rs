//! Backends: what the operator declared (`XBackend` objects) and the validated model the
//! rest of the agent works from.
//!
//! The split is deliberate: `model` mirrors the upstream API so that YAML and cluster
//! objects parse the same way, `validate` is the single place that decides what is
//! acceptable, and sources (`directory`, later the Kubernetes watch) only find objects and
//! report problems. The resolver, datapath and proxy see only [`Backend`], never raw YAML.

/// Upstream limits, formats and CEL rules, shared by `validate` and `redirector crd`.
pub mod constraints;
pub(crate) mod directory;
/// Public so that the Kubernetes source (and `redirector crd`) can use the raw API types;
/// everything else should need only the re-exports below.
pub mod model;
mod policies;
mod validate;
/// Upstream's CEL cases, for the CRD's tests.
#[cfg(test)]
pub(crate) use validate::tests::{document, upstream_cases};

// The public surface of the module, re-exported whole even where no caller uses an
// item yet (the Kubernetes source and TLS proxy arrive later), so the lint is off here.
#[allow(
    unused_imports,
    reason = "public surface; consumers arrive incrementally"
)]
pub use directory::{Catalog, DirectoryError, DirectoryLoader, Problem, load, located};
#[allow(
    unused_imports,
    reason = "public surface; consumers arrive incrementally"
)]
pub use model::XBackend;
pub use policies::{attach_policies, policy_problems, unresolved_refs};
#[allow(
    unused_imports,
    reason = "public surface; consumers arrive incrementally"
)]
pub use validate::{
    Backend, BackendTls, CaSource, Notice, ObjectKey, ObjectRef, Protocol, RefKind, SubjectAltName,
    TlsMode, Validated, ValidationError, validate,
};
