//! MCP Backends (`protocol: MCP`, streamable HTTP): the proxy reads the JSON-RPC a
//! client POSTs, to apply the Backend policy's `mcp.tools.allow` and to name what was
//! asked in the access log (`mcp.method`, `mcp.tool`).
//!
//! - A `tools/call` of a tool the list does not name is answered by the proxy with a
//!   JSON-RPC error (HTTP 200, code -32602 "Unknown tool: NAME", as a server without
//!   that tool answers, and as agentgateway does); nothing goes upstream. A batch with
//!   such a call is answered whole by the proxy (`jsonrpc::Asked::refusal`).
//! - `tools/list` results are filtered to the allowed tools, in JSON responses (read
//!   whole, bounded, Content-Length set anew) and in event streams (event by event as
//!   they come, `sse.rs`; never buffered).
//! - Bodies are read up to [`MAX_REQUEST_BODY`]; with a tool policy a larger one is
//!   refused (413), and a body that is not JSON-RPC too (400 with a JSON-RPC parse
//!   error or invalid request): what cannot be judged is not sent. Without one, reading is only for the log and
//!   never changes what is sent.
//!
//! `jsonrpc` and `sse` are pure; this file and `response.rs` are the hyper plumbing.

mod jsonrpc;
mod response;
mod sse;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use http::{
    Method, Request,
    header::{ACCEPT_ENCODING, CONTENT_LENGTH, UPGRADE},
};
use hyper::body::Incoming;

pub use response::ToolFilter;

use self::jsonrpc::Asked;
use super::{
    client_body::{ClientBody, ReadAhead},
    error::{HttpError, ProxyError},
    headers,
};
use crate::{backend_policy::Applied, proxy::access_log};

/// The largest request body read. JSON-RPC requests are small (a tool's arguments);
/// this leaves room for large ones and bounds what one request holds in memory.
pub const MAX_REQUEST_BODY: usize = 1024 * 1024;

/// What the proxy made of one request to an MCP Backend.
pub struct Inspection {
    /// The request to forward, and the filter its response goes through when a tool
    /// policy applies; or the proxy's own answer.
    pub request: Result<(Request<ClientBody>, Option<ToolFilter>), ProxyError>,
    /// For the access log.
    pub log: Option<access_log::Mcp>,
}

/// Reads what `req` asks when a tool policy applies (`policy` with `mcp.tools`) or the
/// access log is on (`logging`), and judges it against the policy. `backend` names the
/// Backend in messages.
pub async fn inspect(
    mut req: Request<Incoming>,
    policy: Option<Arc<Applied>>,
    logging: bool,
    backend: &str,
) -> Inspection {
    let forward = |req: Request<Incoming>, filter| Inspection {
        request: Ok((req.map(ClientBody::Streamed), filter)),
        log: None,
    };
    let Some(tools) = policy.and_then(ToolFilter::of) else {
        let post = req.method() == Method::POST && !headers::is_upgrade(&req);
        if !(logging && post) {
            return forward(req, None);
        }
        return read(req, None, backend).await;
    };
    // What the proxy reads must be what the upstream gets: no compression it could
    // not read, and no upgrade of a POST to bytes it would not see (MCP has none).
    req.headers_mut().remove(ACCEPT_ENCODING);
    if req.method() != Method::POST {
        // A GET opens the server's event stream, where a listing may be replayed.
        return forward(req, Some(tools));
    }
    req.headers_mut().remove(UPGRADE);
    read(req, Some(tools), backend).await
}

/// Reads the body of POST `req` and judges it against `tools`, if any.
async fn read(req: Request<Incoming>, tools: Option<ToolFilter>, backend: &str) -> Inspection {
    let refuse = |error: ProxyError, log| Inspection {
        request: Err(error),
        log,
    };
    let too_large = |tools: &ToolFilter| {
        ProxyError::new(
            HttpError::McpRequestTooLarge,
            format!(
                "an MCP request body over {MAX_REQUEST_BODY} bytes cannot be judged against \
                 the tools of BackendPolicy {} (Backend {backend})",
                tools.policy()
            ),
        )
    };
    let declared =
        (req.headers().get(CONTENT_LENGTH)).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_REQUEST_BODY as u64) {
        return match &tools {
            Some(tools) => refuse(too_large(tools), None),
            None => Inspection {
                request: Ok((req.map(ClientBody::Streamed), None)),
                log: None,
            },
        };
    }
    let (parts, body) = req.into_parts();
    let read = match ReadAhead::read(body, MAX_REQUEST_BODY).await {
        Ok(read) => read,
        Err(error) => {
            let detail = format!("reading the client's MCP request body failed: {error}");
            return refuse(ProxyError::new(HttpError::MalformedRequest, detail), None);
        }
    };
    let asked = read.whole().map(Asked::parse);
    let req = Request::from_parts(parts, ClientBody::Read(read));
    let Some(tools) = tools else {
        // For the log only: whatever it is, it goes as it came.
        let log = asked.and_then(Result::ok).and_then(|asked| asked.log());
        return Inspection {
            request: Ok((req, None)),
            log,
        };
    };
    let asked = match asked {
        None => return refuse(too_large(&tools), None),
        Some(Err(error)) => {
            let detail = format!(
                "an MCP request body that is not JSON ({error}) cannot be judged against the \
                 tools of BackendPolicy {} (Backend {backend})",
                tools.policy()
            );
            let answer = jsonrpc::parse_error(&error);
            return refuse(
                ProxyError::json_rpc(HttpError::McpMalformed, detail, answer),
                None,
            );
        }
        Some(Ok(asked)) => asked,
    };
    let log = asked.log();
    if asked.invalid {
        let detail = format!(
            "an MCP request body that is JSON but not JSON-RPC messages cannot be judged \
             against the tools of BackendPolicy {} (Backend {backend})",
            tools.policy()
        );
        let answer = jsonrpc::invalid_request();
        return refuse(
            ProxyError::json_rpc(HttpError::McpMalformed, detail, answer),
            log,
        );
    }
    let refused: Vec<&str> = (asked.refused(&tools.allow))
        .map(|c| c.tool.as_deref().unwrap_or("(no name)"))
        .collect();
    if !refused.is_empty() {
        let detail = format!(
            "MCP tools/call of {} not in spec.mcp.tools.allow of BackendPolicy {} (Backend \
             {backend}): answered with a JSON-RPC error, nothing sent upstream",
            refused.join(", "),
            tools.policy()
        );
        let answer = asked.refusal(&tools.allow);
        return refuse(
            ProxyError::json_rpc(HttpError::McpToolDenied, detail, answer),
            log,
        );
    }
    let filter = tools.listing(asked.lists_tools());
    Inspection {
        request: Ok((req, Some(filter))),
        log,
    }
}
