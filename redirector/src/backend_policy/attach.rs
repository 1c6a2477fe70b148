//! Policies joined to their targets: which policy applies to which Backend, and with
//! what header values. A policy that cannot attach is rejected as a whole (never half
//! applied); a credential whose Secret is missing still attaches, unresolved, so that
//! the Backend's requests are refused (503) rather than sent without the key.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::HeaderName;

use super::{BackendPolicy, PolicyError, Rule, SensitiveHeader};

/// What attachment needs to know of a target Backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetFacts {
    /// The proxy originates TLS to it (`ServerOnly`, `ClientAndServer`).
    pub originates_tls: bool,
    /// The proxy parses its requests (any protocol but `TCP`).
    pub speaks_http: bool,
}

/// A Secret key as the source has it.
pub enum SecretLookup<'a> {
    NoSecret,
    NoKey,
    Found(&'a [u8]),
}

/// The policy in force for one Backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// `namespace/name` of the policy, for logs.
    pub policy: String,
    pub namespace: String,
    /// The headers to set, or why they cannot be (then every request gets 503).
    pub credentials: Result<Vec<(HeaderName, SensitiveHeader)>, PolicyError>,
    pub rules: Option<Vec<Rule>>,
}

/// A policy that does not apply, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// `namespace/name` of the policy.
    pub policy: String,
    pub error: PolicyError,
}

#[derive(Debug, Default)]
pub struct Attachment {
    /// By target Backend (`namespace`, `name`).
    pub applied: BTreeMap<(String, String), Arc<Applied>>,
    pub rejected: Vec<Rejection>,
}

/// Attaches `policies` (in any order) to the Backends `target` knows, with the Secrets
/// `secret` finds. Several policies on one Backend: the first by namespace/name applies
/// and the others are rejected as conflicting (directory mode has no creation time).
pub fn attach<'a>(
    policies: &[Arc<BackendPolicy>],
    target: impl Fn(&str, &str) -> Option<TargetFacts>,
    secret: impl Fn(&str, &str, &str) -> SecretLookup<'a>,
) -> Attachment {
    let mut sorted: Vec<&Arc<BackendPolicy>> = policies.iter().collect();
    sorted.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut out = Attachment::default();
    for policy in sorted {
        let label = format!("{}/{}", policy.namespace, policy.name);
        let reject = |out: &mut Attachment, field: String, message: String| {
            let error = PolicyError::NotAccepted { field, message };
            out.rejected.push(Rejection {
                policy: label.clone(),
                error,
            });
        };
        let mut accepted = true;
        for (i, name) in policy.targets.iter().enumerate() {
            let field = format!("spec.targetRefs[{i}].name");
            let Some(facts) = target(&policy.namespace, name) else {
                let message = format!("no XBackend {}/{name}", policy.namespace);
                reject(&mut out, field, message);
                accepted = false;
                continue;
            };
            let key = (policy.namespace.clone(), name.clone());
            if let Some(first) = out.applied.get(&key) {
                let message = format!(
                    "Conflicted: XBackend {}/{name} already has policy {}",
                    policy.namespace, first.policy
                );
                reject(&mut out, field, message);
                accepted = false;
            }
            if policy.rules.is_some() && !facts.speaks_http {
                // Rules are judged per request: on bytes they could not be enforced.
                let message = format!(
                    "rules cannot apply to XBackend {}/{name}: its protocol is TCP (bytes \
                     the proxy does not parse)",
                    policy.namespace
                );
                reject(&mut out, "spec.rules".to_owned(), message);
                accepted = false;
            }
            if policy.credentials.is_empty() {
                continue;
            }
            // A key never crosses the wire in plaintext, nor rides on bytes the proxy
            // does not parse.
            let why = match facts {
                TargetFacts {
                    speaks_http: false, ..
                } => Some("its protocol is TCP (bytes the proxy does not parse)"),
                TargetFacts {
                    originates_tls: false,
                    ..
                } => Some("the proxy does not originate TLS to it (spec.tls absent or mode None)"),
                _ => None,
            };
            if let Some(why) = why {
                let message = format!(
                    "credentials cannot be set on XBackend {}/{name}: {why}",
                    policy.namespace
                );
                reject(&mut out, "spec.credentials".to_owned(), message);
                accepted = false;
            }
        }
        if !accepted {
            continue;
        }
        let applied = Arc::new(Applied {
            policy: label.clone(),
            namespace: policy.namespace.clone(),
            credentials: headers(policy, &secret),
            rules: policy.rules.clone(),
        });
        for name in &policy.targets {
            out.applied
                .insert((policy.namespace.clone(), name.clone()), applied.clone());
        }
    }
    out
}

fn headers<'a>(
    policy: &BackendPolicy,
    secret: &impl Fn(&str, &str, &str) -> SecretLookup<'a>,
) -> Result<Vec<(HeaderName, SensitiveHeader)>, PolicyError> {
    let mut out = Vec::with_capacity(policy.credentials.len());
    for credential in &policy.credentials {
        let named = format!("Secret {}/{}", policy.namespace, credential.secret);
        let bytes = match secret(&policy.namespace, &credential.secret, &credential.key) {
            SecretLookup::NoSecret => {
                return Err(PolicyError::Unresolved(format!("{named} not found")));
            }
            SecretLookup::NoKey => {
                let message = format!("{named} has no key {:?}", credential.key);
                return Err(PolicyError::Unresolved(message));
            }
            SecretLookup::Found(bytes) => bytes,
        };
        let mut value = credential.prefix.as_bytes().to_vec();
        value.extend_from_slice(bytes);
        value.extend_from_slice(credential.suffix.as_bytes());
        let Some(value) = SensitiveHeader::new(&value) else {
            let message = format!(
                "{named} key {:?} cannot be a header value (a line break, e.g. a trailing \
                 newline, or another control character)",
                credential.key
            );
            return Err(PolicyError::Unresolved(message));
        };
        out.push((credential.header.clone(), value));
    }
    Ok(out)
}
