//! Policies joined to their targets: which policy applies to which Backend, and with
//! what header values. A policy that cannot attach is rejected as a whole (never half
//! applied); a credential whose Secret is missing still attaches, unresolved, so that
//! the Backend's requests are refused (503) rather than sent without the key.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::HeaderName;

use super::{BackendPolicy, Credential, PolicyError, Rule, SensitiveHeader, ToolAllowList};

/// What attachment needs to know of a target Backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetFacts {
    /// The proxy originates TLS to it (`ServerOnly`, `ClientAndServer`).
    pub originates_tls: bool,
    /// The proxy parses its requests (any protocol but `TCP`).
    pub speaks_http: bool,
    /// Its protocol is `MCP`: the proxy reads its JSON-RPC.
    pub speaks_mcp: bool,
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
    /// `namespace/name` of the policies merged here (oldest first), for logs.
    pub policy: String,
    pub namespace: String,
    /// The headers to set, or why they cannot be (then every request gets 503).
    pub credentials: Result<Vec<(HeaderName, SensitiveHeader)>, PolicyError>,
    pub rules: Option<Vec<Rule>>,
    /// The MCP tools clients may see and call; `None`: every tool.
    pub mcp_tools: Option<ToolAllowList>,
}

/// A policy that does not apply, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// `namespace/name` of the policy.
    pub policy: String,
    /// The XBackend (name, in the policy's namespace) the error is about. A policy that
    /// cannot attach to one target attaches to none, but its status says which failed.
    pub target: String,
    pub error: PolicyError,
}

#[derive(Debug, Default)]
pub struct Attachment {
    /// By target Backend (`namespace`, `name`).
    pub applied: BTreeMap<(String, String), Arc<Applied>>,
    pub rejected: Vec<Rejection>,
}

/// Attaches `policies` (in any order) to the Backends `target` knows, with the Secrets
/// `secret` finds. Several policies on one Backend merge field by field, the oldest
/// winning each field (Gateway API's rule for policies): a credential per header name,
/// `rules` as a whole. A policy that loses a field is reported `Conflicted` for it; its
/// other fields still apply. Age is `metadata.creationTimestamp`; policies without one
/// (directory mode) come after, by namespace/name.
pub fn attach<'a>(
    policies: &[Arc<BackendPolicy>],
    target: impl Fn(&str, &str) -> Option<TargetFacts>,
    secret: impl Fn(&str, &str, &str) -> SecretLookup<'a>,
) -> Attachment {
    let mut sorted: Vec<&Arc<BackendPolicy>> = policies.iter().collect();
    sorted.sort_by_key(|p| (p.created.is_none(), p.created.clone(), p.label()));
    let mut out = Attachment::default();
    let mut by_target: BTreeMap<(String, String), Vec<&BackendPolicy>> = BTreeMap::new();
    for policy in sorted {
        let errors = fit(policy, &target);
        if errors.is_empty() {
            for name in &policy.targets {
                let key = (policy.namespace.clone(), name.clone());
                by_target.entry(key).or_default().push(policy);
            }
            continue;
        }
        for (target, error) in errors {
            out.rejected.push(Rejection {
                policy: policy.label(),
                target,
                error,
            });
        }
    }
    for (key, policies) in by_target {
        let applied = merge(&key, &policies, &secret, &mut out.rejected);
        out.applied.insert(key, Arc::new(applied));
    }
    out
}

/// Why `policy` cannot attach to its targets at all, by the target that is why.
fn fit(
    policy: &BackendPolicy,
    target: &impl Fn(&str, &str) -> Option<TargetFacts>,
) -> Vec<(String, PolicyError)> {
    let mut errors = Vec::new();
    for (i, name) in policy.targets.iter().enumerate() {
        let not_accepted = |field: String, message: String| {
            (name.clone(), PolicyError::NotAccepted { field, message })
        };
        let backend = format!("XBackend {}/{name}", policy.namespace);
        let Some(facts) = target(&policy.namespace, name) else {
            let field = format!("spec.targetRefs[{i}].name");
            errors.push(not_accepted(field, format!("no {backend}")));
            continue;
        };
        const BYTES: &str = "its protocol is TCP (bytes the proxy does not parse)";
        if policy.rules.is_some() && !facts.speaks_http {
            // Rules are judged per request: on bytes they could not be enforced.
            let message = format!("rules cannot apply to {backend}: {BYTES}");
            errors.push(not_accepted("spec.rules".to_owned(), message));
        }
        if policy.mcp_tools.is_some() && !facts.speaks_mcp {
            // Tools are JSON-RPC of MCP: another protocol's requests have none to judge.
            let message = format!("tools can only be filtered for protocol MCP, not {backend}");
            errors.push(not_accepted("spec.mcp".to_owned(), message));
        }
        if policy.credentials.is_empty() {
            continue;
        }
        // A key never crosses the wire in plaintext, nor rides on bytes the proxy
        // does not parse.
        let why = match facts {
            TargetFacts {
                speaks_http: false, ..
            } => Some(BYTES),
            TargetFacts {
                originates_tls: false,
                ..
            } => Some("the proxy does not originate TLS to it (spec.tls absent or mode None)"),
            _ => None,
        };
        if let Some(why) = why {
            let message = format!("credentials cannot be set on {backend}: {why}");
            errors.push(not_accepted("spec.credentials".to_owned(), message));
        }
    }
    errors
}

/// The policies of one Backend (oldest first) as one, field by field.
fn merge<'a>(
    (namespace, name): &(String, String),
    policies: &[&BackendPolicy],
    secret: &impl Fn(&str, &str, &str) -> SecretLookup<'a>,
    rejected: &mut Vec<Rejection>,
) -> Applied {
    let mut credentials: Vec<(&Credential, &BackendPolicy)> = Vec::new();
    let mut rules: Option<(&Vec<Rule>, &BackendPolicy)> = None;
    let mut tools: Option<(&ToolAllowList, &BackendPolicy)> = None;
    let mut conflict =
        |policy: &BackendPolicy, field: String, what: String, winner: &BackendPolicy| {
            let message = format!(
                "{what} of XBackend {namespace}/{name} is set by the older policy {}; not applied",
                winner.label()
            );
            rejected.push(Rejection {
                policy: policy.label(),
                target: name.clone(),
                error: PolicyError::Conflicted { field, message },
            });
        };
    for policy in policies {
        for (i, credential) in policy.credentials.iter().enumerate() {
            match credentials
                .iter()
                .find(|(c, _)| c.header == credential.header)
            {
                Some((_, winner)) => {
                    let field = format!("spec.credentials[{i}].header");
                    conflict(
                        policy,
                        field,
                        format!("header {}", credential.header),
                        winner,
                    );
                }
                None => credentials.push((credential, policy)),
            }
        }
        match (&policy.rules, rules) {
            (Some(_), Some((_, winner))) => {
                conflict(
                    policy,
                    "spec.rules".to_owned(),
                    "the rules".to_owned(),
                    winner,
                );
            }
            (Some(own), None) => rules = Some((own, policy)),
            (None, _) => {}
        }
        match (&policy.mcp_tools, tools) {
            (Some(_), Some((_, winner))) => {
                let field = "spec.mcp.tools".to_owned();
                conflict(policy, field, "the MCP tools".to_owned(), winner);
            }
            (Some(own), None) => tools = Some((own, policy)),
            (None, _) => {}
        }
    }
    let labels: Vec<String> = policies.iter().map(|p| p.label()).collect();
    Applied {
        policy: labels.join(", "),
        namespace: namespace.clone(),
        credentials: (credentials.iter())
            .map(|(credential, policy)| header(policy, credential, secret))
            .collect(),
        rules: rules.map(|(rules, _)| rules.clone()),
        mcp_tools: tools.map(|(tools, _)| tools.clone()),
    }
}

/// Why one of `policy`'s credentials cannot be made from the Secrets `secret` finds,
/// if one cannot: its `ResolvedRefs`, whichever policy wins the header on a Backend.
pub fn unresolved<'a>(
    policy: &BackendPolicy,
    secret: impl Fn(&str, &str, &str) -> SecretLookup<'a>,
) -> Option<PolicyError> {
    (policy.credentials.iter()).find_map(|credential| header(policy, credential, &secret).err())
}

fn header<'a>(
    policy: &BackendPolicy,
    credential: &Credential,
    secret: &impl Fn(&str, &str, &str) -> SecretLookup<'a>,
) -> Result<(HeaderName, SensitiveHeader), PolicyError> {
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
    Ok((credential.header.clone(), value))
}
