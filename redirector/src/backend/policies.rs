//! BackendPolicies of a [`Catalog`] attached to its Backends and Secrets: the catalog
//! owns both, so the join is made here and the policy module stays a leaf.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::directory::{Catalog, Problem};
use super::validate::{Backend, ObjectKey, Protocol, TlsMode};
use crate::backend_policy::{
    self, Attachment, BackendPolicy, PolicyError, SecretLookup, TargetFacts,
};

/// Which policy applies to which Backend, and which are rejected.
/// `backends`: the Backends in force (the agent keeps the last good version of a broken
/// one, and its policy must stay on it).
pub fn attach_policies(
    catalog: &Catalog,
    backends: &BTreeMap<ObjectKey, Arc<Backend>>,
) -> Attachment {
    let target = |namespace: &str, name: &str| {
        let backend = backends.get(&ObjectKey::new(namespace, name))?;
        Some(facts(backend))
    };
    backend_policy::attach(&catalog.policies, target, secrets(catalog))
}

/// Why `policy`'s credentials cannot be made from `catalog`'s Secrets, if they cannot
/// (its `ResolvedRefs` condition).
pub fn unresolved_refs(catalog: &Catalog, policy: &BackendPolicy) -> Option<PolicyError> {
    backend_policy::unresolved(policy, secrets(catalog))
}

/// Secret keys as `catalog` has them.
fn secrets<'a>(catalog: &'a Catalog) -> impl Fn(&str, &str, &str) -> SecretLookup<'a> {
    |namespace: &str, name: &str, key: &str| match catalog
        .secrets
        .get(&ObjectKey::new(namespace, name))
    {
        None => SecretLookup::NoSecret,
        Some(data) => data
            .get(key)
            .map_or(SecretLookup::NoKey, |v| SecretLookup::Found(v.as_slice())),
    }
}

fn facts(backend: &Backend) -> TargetFacts {
    TargetFacts {
        originates_tls: backend
            .tls
            .as_ref()
            .is_some_and(|t| t.mode != TlsMode::None),
        speaks_http: backend.protocol.is_http(),
        speaks_mcp: backend.protocol == Protocol::Mcp,
    }
}

/// Rejected policies as problems located at their file and field, for `check` and the
/// log.
pub fn policy_problems(catalog: &Catalog, attachment: &Attachment) -> Vec<Problem> {
    (attachment.rejected.iter())
        .map(|rejection| {
            let file = (catalog.policy_origins.iter())
                .find(|(key, _)| key.to_string() == rejection.policy)
                .map(|(_, file)| file.clone())
                .unwrap_or_default();
            Problem {
                file,
                object: Some(format!("{} {}", backend_policy::KIND, rejection.policy)),
                field: rejection.error.field().map(str::to_owned),
                message: match rejection.error {
                    PolicyError::Conflicted { .. } => {
                        format!("Conflicted: {}", rejection.error.message())
                    }
                    _ => format!("not accepted: {}", rejection.error.message()),
                },
            }
        })
        .collect()
}
