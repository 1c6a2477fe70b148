//! The proxy's own answers to a request (421, 502, 504, 403...): counted, logged
//! (rate-limited) and written to the access log like the upstream's.

use std::time::Instant;

use http::Response;
use hyper::body::Body;

use super::Context;
use crate::proxy::{
    access_log,
    http::{body::LogFields, body::ProxyBody, error::ProxyError},
};

impl Context {
    /// The proxy's own answer, counted and logged, in the access log too (`asked`: when
    /// the request came, and its fields when there is an access log).
    pub(super) fn refuse(
        &self,
        backend: &str,
        error: ProxyError,
        (started, log): (Instant, Option<&LogFields>),
    ) -> Response<ProxyBody> {
        let shared = &self.shared;
        let response = error.response();
        let source_namespace = self.routed.source_namespace();
        shared
            .stats
            .http
            .error(backend, error.kind, source_namespace);
        if let (Some(log), Some(fields)) = (&shared.access_log, log) {
            log.request(&access_log::Request {
                backend,
                source: &fields.source,
                method: fields.method.as_str(),
                authority: &fields.authority,
                path: &fields.path,
                mcp: fields.mcp.as_ref(),
                status: response.status().as_u16(),
                bytes: response.body().size_hint().exact().unwrap_or(0),
                duration_ms: started.elapsed().as_secs_f64() * 1e3,
                // No upstream answered.
                upstream_protocol: "-",
            });
        }
        if let Some(suppressed) = shared.log_limit.allow(error.kind.as_str()) {
            tracing::warn!(
                peer = %self.routed.peer, source = %self.routed.source, backend,
                original = %self.routed.original,
                reason = error.kind.as_str(), status = response.status().as_u16(), suppressed,
                "HTTP request answered by the proxy: {}", error.detail
            );
        }
        response
    }
}
