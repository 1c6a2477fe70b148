//! Answers the proxy gives itself, and why: each is an HTTP response the client can
//! read, counted by reason in `redirector_http_errors_total`.

use std::{error::Error as StdError, fmt::Display, net::SocketAddr};

use http::{HeaderValue, Response, StatusCode, Version, header::CONTENT_TYPE};

use super::{
    body::{ProxyBody, text},
    upstream::DialError,
};
use crate::proxy::Shared;

/// Why the proxy answered a request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HttpError {
    /// The Host names no Backend of the dialed address (421).
    Misdirected,
    /// The Backend's TLS settings cannot be used (502).
    TlsConfig,
    /// The upstream refused or did not answer the TCP connect (502).
    UpstreamConnect,
    /// The TLS handshake with the upstream failed (502).
    UpstreamHandshake,
    /// No response head within `--http-response-timeout` (504).
    UpstreamTimeout,
    /// The upstream broke off or sent something that is not HTTP (502).
    UpstreamError,
    /// The client's request could not be parsed (400; hyper answers it).
    MalformedRequest,
    /// The client's request head is too large (431; hyper answers it).
    HeadersTooLarge,
    /// The request body has a transfer coding besides chunked, which the proxy does not
    /// pass on: an h2 upstream has no transfer codings (501).
    TransferCoding,
    /// The Backend's policy has rules and the request matches none (403).
    PolicyDenied,
    /// The Backend's policy has credentials the proxy cannot resolve (a Secret or key
    /// missing): never sent without them (503).
    PolicyUnresolved,
    /// An MCP `tools/call` of a tool the Backend's policy does not allow: a JSON-RPC
    /// error in an HTTP 200, as MCP servers answer an unknown tool.
    McpToolDenied,
    /// An MCP request body too large to judge against the policy's tools (413).
    McpRequestTooLarge,
    /// An MCP request body that is not JSON-RPC, with a tool policy to apply (400).
    McpMalformed,
    /// An upstream MCP response the proxy must filter but cannot read (502).
    McpUnfilterable,
}

impl HttpError {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Misdirected => "misdirected",
            Self::TlsConfig => "tls_config",
            Self::UpstreamConnect => "upstream_connect",
            Self::UpstreamHandshake => "upstream_handshake",
            Self::UpstreamTimeout => "upstream_timeout",
            Self::UpstreamError => "upstream_error",
            Self::MalformedRequest => "malformed_request",
            Self::HeadersTooLarge => "headers_too_large",
            Self::TransferCoding => "transfer_coding",
            Self::PolicyDenied => "policy_denied",
            Self::PolicyUnresolved => "policy_unresolved",
            Self::McpToolDenied => "mcp_tool_denied",
            Self::McpRequestTooLarge => "mcp_request_too_large",
            Self::McpMalformed => "mcp_malformed",
            Self::McpUnfilterable => "mcp_unfilterable",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Self::Misdirected => StatusCode::MISDIRECTED_REQUEST,
            Self::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            Self::MalformedRequest => StatusCode::BAD_REQUEST,
            Self::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::TransferCoding => StatusCode::NOT_IMPLEMENTED,
            Self::PolicyDenied => StatusCode::FORBIDDEN,
            Self::PolicyUnresolved => StatusCode::SERVICE_UNAVAILABLE,
            Self::McpToolDenied => StatusCode::OK,
            Self::McpRequestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::McpMalformed => StatusCode::BAD_REQUEST,
            Self::TlsConfig
            | Self::McpUnfilterable
            | Self::UpstreamConnect
            | Self::UpstreamHandshake
            | Self::UpstreamError => StatusCode::BAD_GATEWAY,
        }
    }
}

/// A request the proxy answers itself, and what to tell the client and the log.
#[derive(Debug)]
pub struct ProxyError {
    pub kind: HttpError,
    /// For the log; the client's answer too unless `json_rpc` is set.
    pub detail: String,
    /// The client's answer when it is JSON-RPC (MCP) rather than text.
    pub json_rpc: Option<String>,
}

impl ProxyError {
    pub fn new(kind: HttpError, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            json_rpc: None,
        }
    }

    /// An answer whose body is the JSON-RPC message `json_rpc`, `detail` for the log.
    pub fn json_rpc(kind: HttpError, detail: impl Into<String>, json_rpc: String) -> Self {
        Self {
            json_rpc: Some(json_rpc),
            ..Self::new(kind, detail)
        }
    }

    /// Classifies a failed upstream request: our dialer's errors say what failed; the
    /// rest is the upstream connection breaking.
    pub fn from_client(error: &(dyn StdError + 'static), original: SocketAddr) -> Self {
        let mut cause: Option<&(dyn StdError + 'static)> = Some(error);
        while let Some(current) = cause {
            if let Some(dial) = current.downcast_ref::<DialError>() {
                return Self::new(dial.kind, dial.to_string());
            }
            cause = current.source();
        }
        Self::new(
            HttpError::UpstreamError,
            format!("upstream {original}: {}", chain(error)),
        )
    }

    /// An upstream response whose transfer codings besides chunked the client cannot
    /// be sent (h2 has none, HTTP/1.0 no chunked): 502 rather than a coded body passed
    /// as plain content.
    pub fn coded_response(
        codings: &HeaderValue,
        original: SocketAddr,
        backend: impl Display,
        client: Version,
    ) -> Self {
        Self::new(
            HttpError::UpstreamError,
            format!(
                "upstream {original} (Backend {backend}) sent its response body with \
                 transfer coding {codings:?}, which an {client:?} client cannot be sent"
            ),
        )
    }

    pub fn response(&self) -> Response<ProxyBody> {
        let status = self.kind.status();
        if let Some(json) = &self.json_rpc {
            let mut response = Response::new(text(json.clone()));
            *response.status_mut() = status;
            let json = HeaderValue::from_static("application/json");
            response.headers_mut().insert(CONTENT_TYPE, json);
            return response;
        }
        let mut response = Response::new(text(format!(
            "redirector: {} {}: {}\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            self.detail
        )));
        *response.status_mut() = status;
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}

/// An error and its causes, `: `-separated (hyper's own messages are terse).
fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(current) = cause {
        text.push_str(": ");
        text.push_str(&current.to_string());
        cause = current.source();
    }
    text
}

/// A client connection ended with an error. hyper has already answered a request it
/// could not parse (400, or 431 for an oversized head); count those.
pub fn client_connection_failed(
    shared: &Shared,
    (backend, source_namespace): (&str, &str),
    error: &(dyn StdError + Send + Sync + 'static),
) {
    let hyper_error = error.downcast_ref::<hyper::Error>();
    let kind = match hyper_error {
        Some(e) if e.is_parse_too_large() => Some(HttpError::HeadersTooLarge),
        Some(e) if e.is_parse() => Some(HttpError::MalformedRequest),
        _ => None,
    };
    match kind {
        Some(kind) => {
            (shared.stats.http).error(backend, kind, kind.status(), source_namespace);
            if let Some(suppressed) = shared.log_limit.allow(kind.as_str()) {
                tracing::warn!(
                    backend,
                    reason = kind.as_str(),
                    suppressed,
                    "client request refused: {error}"
                );
            }
        }
        None => tracing::debug!(backend, %error, "client connection ended with an error"),
    }
}
