//! The proxy's own answers to a request (421, 502, 504, 403...): counted, logged
//! (rate-limited) and written to the access log like the upstream's. A gRPC call gets
//! its answer as a gRPC status (`grpc.rs`).

use std::time::Instant;

use http::Response;
use hyper::body::Body;

use super::Context;
use crate::proxy::{
    access_log,
    http::{body::LogFields, body::ProxyBody, error::ProxyError, grpc},
};

/// What is known of a request when the proxy answers it.
#[derive(Clone, Copy)]
pub(super) struct Asked<'a> {
    /// When it came.
    pub started: Instant,
    /// Its fields, when there is an access log.
    pub log: Option<&'a LogFields>,
    /// It is a gRPC call (`grpc::is_call`).
    pub grpc: bool,
}

impl<'a> Asked<'a> {
    pub fn new(started: Instant, log: &'a Option<LogFields>, grpc: bool) -> Self {
        Asked {
            started,
            log: log.as_ref(),
            grpc,
        }
    }
}

impl Context {
    /// The proxy's own answer, counted and logged, in the access log too.
    pub(super) fn refuse(
        &self,
        backend: &str,
        error: ProxyError,
        Asked { started, log, grpc }: Asked<'_>,
    ) -> Response<ProxyBody> {
        let shared = &self.shared;
        let (response, code) = if grpc {
            let (response, code) = grpc::own_answer(&error);
            (response, Some(code))
        } else {
            (error.response(), None)
        };
        let source_namespace = self.routed.source_namespace();
        let stats = &shared.stats.http;
        stats.error(backend, error.kind, response.status(), source_namespace);
        if let Some(code) = code {
            stats.grpc_answered(backend, code);
        }
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
                grpc_status = code.map(grpc::Code::as_str),
                "HTTP request answered by the proxy: {}", error.detail
            );
        }
        response
    }
}
