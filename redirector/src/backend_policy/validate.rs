//! The policy API as written -> [`BackendPolicy`], every field checked on its own so that
//! `redirector check` can name all that is wrong at once.

use std::{collections::BTreeSet, sync::Arc};

use http::{HeaderName, Method};

use super::PolicyError;
use super::model::{
    BackendPolicyDoc, CredentialDoc, McpDoc, PathType, RuleDoc, SourcesDoc, TARGET_GROUP,
    TARGET_KIND,
};

/// The placeholder `format` replaces with the Secret's value.
const PLACEHOLDER: &str = "{value}";
/// The longest tool name MCP allows (the CRD says the same).
pub const MAX_TOOL_NAME: usize = 128;

/// A validated policy: what attachment and the proxy work from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendPolicy {
    pub namespace: String,
    pub name: String,
    /// `metadata.creationTimestamp` (RFC 3339, as the API server writes it): the older
    /// policy wins a field two set.
    pub created: Option<String>,
    /// Names of the XBackends it attaches to (in its own namespace).
    pub targets: Vec<String>,
    pub credentials: Vec<Credential>,
    /// `None`: every request allowed.
    pub rules: Option<Vec<Rule>>,
    /// `spec.mcp.tools.allow`; `None`: every tool.
    pub mcp_tools: Option<ToolAllowList>,
}

/// The MCP tools a client may list and call; every other is hidden and refused.
/// Shared: each request to the Backend holds it while its response is filtered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolAllowList(Arc<BTreeSet<String>>);

impl ToolAllowList {
    pub fn new(names: impl IntoIterator<Item = String>) -> Self {
        Self(Arc::new(names.into_iter().collect()))
    }

    pub fn allows(&self, tool: &str) -> bool {
        self.0.contains(tool)
    }
}

/// A header set from a Secret: `prefix` + value + `suffix` (the `format` around
/// `{value}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub header: HeaderName,
    pub secret: String,
    pub key: String,
    pub prefix: String,
    pub suffix: String,
}

/// A request matches when each condition present matches (absent: any).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rule {
    pub methods: Option<Vec<Method>>,
    pub paths: Option<Vec<PathMatch>>,
    pub sources: Option<Sources>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// Gateway API `PathPrefix`: whole segments; stored without a trailing `/`.
    Prefix(String),
    Exact(String),
}

/// Who may send: a workload matching either list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sources {
    /// Service accounts of the policy's namespace.
    pub service_accounts: Vec<String>,
    /// cgroup paths relative to `--cgroup`, without leading or trailing `/`; each a
    /// prefix on segment boundaries.
    pub cgroups: Vec<String>,
}

/// Validates one parsed document named `namespace/name`.
pub fn validate(
    namespace: &str,
    name: &str,
    doc: BackendPolicyDoc,
) -> Result<BackendPolicy, Vec<PolicyError>> {
    let created = doc.metadata.and_then(|m| m.creation_timestamp);
    let spec = doc.spec;
    let mut errors = Vec::new();
    if spec.target_refs.is_empty() {
        errors.push(PolicyError::invalid(
            "spec.targetRefs",
            "at least one is required",
        ));
    }
    let mut targets = Vec::new();
    for (i, target) in spec.target_refs.into_iter().enumerate() {
        let field = format!("spec.targetRefs[{i}]");
        if target.group != TARGET_GROUP {
            let message = format!("must be {TARGET_GROUP:?}, not {:?}", target.group);
            errors.push(PolicyError::invalid(format!("{field}.group"), message));
        }
        if target.kind != TARGET_KIND {
            let message = format!("must be {TARGET_KIND:?}, not {:?}", target.kind);
            errors.push(PolicyError::invalid(format!("{field}.kind"), message));
        }
        if target.section_name.is_some() {
            let message = "not supported: a policy applies to the whole XBackend";
            errors.push(PolicyError::invalid(
                format!("{field}.sectionName"),
                message,
            ));
        }
        if target.name.is_empty() {
            errors.push(PolicyError::invalid(format!("{field}.name"), "required"));
        }
        targets.push(target.name);
    }
    let mut credentials: Vec<Credential> = Vec::new();
    for (i, doc) in spec.credentials.into_iter().enumerate() {
        match credential(&format!("spec.credentials[{i}]"), doc) {
            Ok(c) if credentials.iter().any(|known| known.header == c.header) => {
                let message = format!("header {} is set by an earlier credential", c.header);
                errors.push(PolicyError::invalid(
                    format!("spec.credentials[{i}].header"),
                    message,
                ));
            }
            Ok(c) => credentials.push(c),
            Err(e) => errors.extend(e),
        }
    }
    let rules = spec.rules.map(|docs| {
        (docs.into_iter().enumerate())
            .map(|(i, doc)| rule(&format!("spec.rules[{i}]"), doc, &mut errors))
            .collect()
    });
    let mcp_tools = spec.mcp.and_then(|doc| mcp_tools(doc, &mut errors));
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(BackendPolicy {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        created,
        targets,
        credentials,
        rules,
        mcp_tools,
    })
}

impl BackendPolicy {
    /// `namespace/name`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

fn credential(field: &str, doc: CredentialDoc) -> Result<Credential, Vec<PolicyError>> {
    let mut errors = Vec::new();
    let header = header_name(&doc.header).map_err(|message| {
        errors.push(PolicyError::invalid(format!("{field}.header"), message));
    });
    let format = doc.format.unwrap_or_else(|| PLACEHOLDER.to_owned());
    let parts = match format.split_once(PLACEHOLDER) {
        Some((prefix, suffix)) if !suffix.contains(PLACEHOLDER) => {
            Some((prefix.to_owned(), suffix.to_owned()))
        }
        _ => {
            let message = format!("must contain {PLACEHOLDER} exactly once");
            errors.push(PolicyError::invalid(format!("{field}.format"), message));
            None
        }
    };
    if format.chars().any(|c| c.is_control()) {
        let message = "must not contain control characters";
        errors.push(PolicyError::invalid(format!("{field}.format"), message));
    }
    let secret_ref = doc.value_from.secret_key_ref;
    for (name, value) in [("name", &secret_ref.name), ("key", &secret_ref.key)] {
        if value.is_empty() {
            let at = format!("{field}.valueFrom.secretKeyRef.{name}");
            errors.push(PolicyError::invalid(at, "required"));
        }
    }
    match (header, parts) {
        (Ok(header), Some((prefix, suffix))) if errors.is_empty() => Ok(Credential {
            header,
            secret: secret_ref.name,
            key: secret_ref.key,
            prefix,
            suffix,
        }),
        _ => Err(errors),
    }
}

/// A field name the proxy may set: valid, and not one the proxy or HTTP itself owns
/// (connection-specific headers are stripped, `Host` routes the request, pseudo-headers
/// are not headers).
fn header_name(name: &str) -> Result<HeaderName, String> {
    if name.starts_with(':') {
        return Err(format!("{name:?} is a pseudo-header, not a header"));
    }
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{name:?} is not a valid HTTP field name"))?;
    const OWNED: [&str; 10] = [
        "host",
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "content-length",
        "proxy-authenticate",
    ];
    if OWNED.contains(&header.as_str()) {
        return Err(format!(
            "{name:?} is hop-by-hop or framing (or Host): the proxy cannot set it"
        ));
    }
    Ok(header)
}

fn rule(field: &str, doc: RuleDoc, errors: &mut Vec<PolicyError>) -> Rule {
    let methods = doc.methods.map(|methods| {
        let mut out = Vec::new();
        for (i, method) in methods.iter().enumerate() {
            match Method::from_bytes(method.as_bytes()) {
                Ok(m) if !method.is_empty() => out.push(m),
                _ => {
                    let message = format!("{method:?} is not an HTTP method");
                    errors.push(PolicyError::invalid(
                        format!("{field}.methods[{i}]"),
                        message,
                    ));
                }
            }
        }
        out
    });
    let paths = doc.paths.map(|paths| {
        let mut out = Vec::new();
        for (i, path) in paths.into_iter().enumerate() {
            if !path.value.starts_with('/') {
                let message = format!("{:?} must start with /", path.value);
                errors.push(PolicyError::invalid(
                    format!("{field}.paths[{i}].value"),
                    message,
                ));
                continue;
            }
            out.push(match path.kind {
                PathType::PathPrefix => {
                    PathMatch::Prefix(path.value.trim_end_matches('/').to_owned())
                }
                PathType::Exact => PathMatch::Exact(path.value),
            });
        }
        out
    });
    let sources = doc
        .sources
        .map(|doc| sources(&format!("{field}.sources"), doc, errors));
    Rule {
        methods,
        paths,
        sources,
    }
}

/// `spec.mcp`: an empty `allow` is valid (no tool at all); `mcp` without `tools` says
/// nothing, which is more likely a mistake than a wish.
fn mcp_tools(doc: McpDoc, errors: &mut Vec<PolicyError>) -> Option<ToolAllowList> {
    let Some(tools) = doc.tools else {
        errors.push(PolicyError::invalid("spec.mcp.tools", "required"));
        return None;
    };
    for (i, name) in tools.allow.iter().enumerate() {
        // MCP's own bounds for a tool name.
        if name.is_empty() || name.len() > MAX_TOOL_NAME {
            let field = format!("spec.mcp.tools.allow[{i}]");
            let message = format!("a tool name has 1 to {MAX_TOOL_NAME} characters");
            errors.push(PolicyError::invalid(field, message));
        }
    }
    Some(ToolAllowList::new(tools.allow))
}

fn sources(field: &str, doc: SourcesDoc, errors: &mut Vec<PolicyError>) -> Sources {
    let mut cgroups = Vec::new();
    for (i, cgroup) in doc.cgroups.unwrap_or_default().into_iter().enumerate() {
        let trimmed = cgroup.trim_matches('/');
        if trimmed
            .split('/')
            .any(|s| s == ".." || s == "." || (s.is_empty() && !trimmed.is_empty()))
        {
            let message = format!("{cgroup:?}: not a plain cgroup path");
            errors.push(PolicyError::invalid(
                format!("{field}.cgroups[{i}]"),
                message,
            ));
            continue;
        }
        cgroups.push(trimmed.to_owned());
    }
    Sources {
        service_accounts: doc.service_accounts.unwrap_or_default(),
        cgroups,
    }
}
