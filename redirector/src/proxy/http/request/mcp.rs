//! Where MCP's JSON-RPC reading (`proxy/http/mcp.rs`) meets a request: before it is
//! forwarded (the tool policy, the access log's `mcp` fields) and on its response (tool
//! lists filtered).

use std::time::Instant;

use http::{Request, Response};
use hyper::body::Incoming;

use super::{Context, own_answer::Asked};
use crate::{
    proxy::http::{
        body::{LogFields, ProxyBody},
        client_body::ClientBody,
        mcp::{self, ToolFilter},
    },
    table::Entry,
};

impl Context {
    /// `req` to MCP Backend `entry` as it is to be forwarded, with the filter its
    /// response goes through; or the proxy's own answer. Names what it asked in `log`.
    pub(super) async fn inspect_mcp(
        &self,
        entry: &Entry,
        req: Request<Incoming>,
        log: &mut Option<LogFields>,
        started: Instant,
    ) -> Result<(Request<ClientBody>, Option<ToolFilter>), Response<ProxyBody>> {
        let label = entry.backend.key.to_string();
        let inspected = mcp::inspect(req, entry.policy.current(), log.is_some(), &label).await;
        if let Some(log) = log {
            log.mcp = inspected.log;
        }
        // An MCP request is JSON-RPC over HTTP, never a gRPC call.
        let asked = Asked::new(started, log, false);
        (inspected.request).map_err(|error| self.refuse(&label, error, asked))
    }

    /// The upstream's `response` (of Backend `backend`) with its tool lists filtered, or
    /// the proxy's 502 when it cannot be. The upstream's answer is in the access log already (its body has
    /// been read, or is being passed on): only the refusal is counted and logged here.
    pub(super) async fn filtered(
        &self,
        filter: ToolFilter,
        response: Response<ProxyBody>,
        (backend, started): (&str, Instant),
    ) -> Response<ProxyBody> {
        match filter.response(response).await {
            Ok(response) => response,
            Err(error) => self.refuse(backend, error, Asked::new(started, &None, false)),
        }
    }
}
