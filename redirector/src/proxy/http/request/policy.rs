//! The Backend's policy on one request: refused when it matches no rule (403) or when
//! its credentials cannot be resolved (503, never sent without them); otherwise its
//! credential headers set, replacing whatever the client sent under those names.

use http::Request;
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
        for (name, value) in headers {
            // `insert` drops every value the client sent under the name.
            map.insert(name.clone(), value.value().clone());
        }
        Ok(())
    }
}
