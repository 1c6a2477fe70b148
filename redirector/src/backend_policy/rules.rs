//! Whether a request may reach the Backend: it must match one rule, when there are rules.

use http::Method;

use super::{Applied, PathMatch, Rule, Sources};

/// What a rule looks at in a request and its connection.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    pub method: &'a Method,
    /// The request path, without the query.
    pub path: &'a str,
    /// The workload's cgroup relative to `--cgroup` (`/` for `--cgroup` itself).
    pub cgroup: &'a str,
    pub namespace: Option<&'a str>,
    pub service_account: Option<&'a str>,
}

impl Applied {
    /// True when there are no rules, or `request` matches one.
    pub fn allows(&self, request: &RequestFacts<'_>) -> bool {
        match &self.rules {
            None => true,
            Some(rules) => rules.iter().any(|rule| self.matches(rule, request)),
        }
    }

    fn matches(&self, rule: &Rule, request: &RequestFacts<'_>) -> bool {
        let method = (rule.methods.as_ref()).is_none_or(|methods| methods.contains(request.method));
        let path = (rule.paths.as_ref())
            .is_none_or(|paths| paths.iter().any(|p| path_matches(p, request.path)));
        let source = (rule.sources.as_ref()).is_none_or(|s| self.source_matches(s, request));
        method && path && source
    }

    fn source_matches(&self, sources: &Sources, request: &RequestFacts<'_>) -> bool {
        let account = request.namespace == Some(self.namespace.as_str())
            && request
                .service_account
                .is_some_and(|sa| sources.service_accounts.iter().any(|s| s == sa));
        let cgroup = request.cgroup.trim_matches('/');
        account || (sources.cgroups.iter()).any(|prefix| segment_prefix(prefix, cgroup))
    }
}

/// Gateway API path matching. A path with dot segments or an encoded `/` or `.` matches
/// no path condition: the upstream may normalise it into a path the rule does not allow.
fn path_matches(condition: &PathMatch, path: &str) -> bool {
    if !is_plain(path) {
        return false;
    }
    match condition {
        PathMatch::Exact(exact) => path == exact,
        PathMatch::Prefix(prefix) => segment_prefix(prefix, path),
    }
}

/// `prefix` is `path` or its leading whole segments (`/v1` matches `/v1` and `/v1/x`,
/// not `/v1x`); the empty prefix matches everything.
fn segment_prefix(prefix: &str, path: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.is_empty() || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

fn is_plain(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    !lower.contains("%2f")
        && !lower.contains("%2e")
        && !lower.contains("%5c")
        && !path.contains('\\')
        && path
            .split('/')
            .all(|segment| segment != "." && segment != "..")
}
