//! The Backend's policy on one request: refused when it matches no rule (403) or when
//! its credentials cannot be resolved (503, never sent without them); otherwise its
//! credential headers set, replacing whatever the client sent under those names.

use http::{HeaderMap, HeaderName, HeaderValue, Request, header::CONNECTION};
use hyper::body::Incoming;

use super::Context;
use crate::{
    backend_policy::RequestFacts,
    proxy::http::error::{HttpError, ProxyError},
    table::Entry,
};

impl Context {
    /// `originates_tls`: the proxy originates TLS on this request's upstream connection;
    /// credentials go on no other.
    pub(super) fn apply_policy(
        &self,
        entry: &Entry,
        originates_tls: bool,
        req: &mut Request<Incoming>,
    ) -> Result<(), ProxyError> {
        let Some(applied) = entry.policy.current() else {
            return Ok(());
        };
        let source = &self.routed.source;
        let facts = RequestFacts {
            method: req.method(),
            path: req.uri().path(),
            cgroup: &source.cgroup,
            namespace: source.namespace.as_deref(),
            service_account: source.service_account.as_deref(),
        };
        if !applied.allows(&facts) {
            return Err(ProxyError::new(
                HttpError::PolicyDenied,
                format!(
                    "{} {} from {source} matches no rule of BackendPolicy {} (Backend {})",
                    req.method(),
                    req.uri().path(),
                    applied.policy,
                    entry.backend.key
                ),
            ));
        }
        let unresolved = |why: &dyn std::fmt::Display| {
            ProxyError::new(
                HttpError::PolicyUnresolved,
                format!(
                    "BackendPolicy {} (Backend {}): {why}; the request is not sent without \
                     its credentials",
                    applied.policy, entry.backend.key
                ),
            )
        };
        let headers = applied.credentials.as_ref().map_err(|e| unresolved(e))?;
        if headers.is_empty() {
            return Ok(());
        }
        if !originates_tls {
            // Only reachable while a table made before a TLS change is in use.
            return Err(unresolved(
                &"the proxy does not originate TLS to this Backend",
            ));
        }
        let map = req.headers_mut();
        unlist(map, headers.iter().map(|(name, _)| name));
        for (name, value) in headers {
            // `insert` drops every value the client sent under the name.
            map.insert(name.clone(), value.value().clone());
        }
        Ok(())
    }
}

/// Takes `names` out of the client's `Connection` header: a name listed there is
/// stripped as hop-by-hop before the request goes upstream, which would send it
/// without the credential.
fn unlist<'a>(map: &mut HeaderMap, names: impl Iterator<Item = &'a HeaderName> + Clone) {
    if !map.contains_key(CONNECTION) {
        return;
    }
    let listed = |token: &str| {
        names
            .clone()
            .any(|n| n.as_str().eq_ignore_ascii_case(token))
    };
    let tokens: Vec<String> = (map.get_all(CONNECTION).iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|token| !token.is_empty())
        .map(str::to_owned)
        .collect();
    if !tokens.iter().any(|t| listed(t)) {
        return;
    }
    let kept: Vec<&str> = (tokens.iter())
        .map(String::as_str)
        .filter(|t| !listed(t))
        .collect();
    map.remove(CONNECTION);
    if let Ok(value) = HeaderValue::from_str(&kept.join(", "))
        && !kept.is_empty()
    {
        map.insert(CONNECTION, value);
    }
}
