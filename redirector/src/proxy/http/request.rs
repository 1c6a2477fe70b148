//! One request: Host check, then forwarded on the Backend's pooled upstream.

use std::{sync::Arc, time::Instant};

use http::{HeaderValue, Request, Response, Uri, Version, header::HOST, uri::Authority};
use hyper::body::Incoming;

use super::{
    body::{self, Completion, ProxyBody, metered},
    error::{HttpError, ProxyError},
    headers, upgrade,
};
use crate::{
    backend::Protocol,
    proxy::{Shared, connection::Routed},
    table::{Entry, join},
};

/// What the requests of one client connection share.
pub struct Context {
    pub shared: Arc<Shared>,
    pub routed: Routed,
}

impl Context {
    pub fn new(shared: Arc<Shared>, routed: Routed) -> Self {
        Self { shared, routed }
    }

    /// Answers one request: the upstream's response, or the proxy's own error.
    pub async fn handle(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let started = Instant::now();
        let authority = authority_of(&req);
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let entry = match self.backend_for(authority.as_deref()) {
            Ok(entry) => entry,
            Err(error) => return self.refuse(None, error),
        };
        let key = entry.backend.key.to_string();
        let completion = Completion {
            started,
            backend: key.clone(),
            method,
            authority: authority.unwrap_or_default(),
            path,
        };
        match self.forward(&entry, req).await {
            Ok(response) => {
                let stats = &self.shared.stats.http;
                stats.answered(&key, response.status());
                metered(response, completion, self.shared.clone())
            }
            Err(error) => {
                let response = self.refuse(Some(&key), error);
                let stats = &self.shared.stats.http;
                stats.answered(&key, response.status());
                stats.finished(&key, started.elapsed());
                response
            }
        }
    }

    /// The Backend whose hostname the request names, among those of the dialed address
    /// and port. Anything else is misdirected: the node's TLS identity and client
    /// certificate are never lent to another name (no domain fronting).
    fn backend_for(&self, authority: Option<&str>) -> Result<Arc<Entry>, ProxyError> {
        let original = self.routed.original;
        let parsed = authority.and_then(|a| a.parse::<Authority>().ok());
        let found = parsed.as_ref().and_then(|authority| {
            let host = authority.host().trim_end_matches('.');
            let port_ok = authority.port_u16().is_none_or(|p| p == original.port());
            (self.routed.candidates.iter())
                .find(|e| port_ok && e.backend.hostname.eq_ignore_ascii_case(host))
        });
        found.cloned().ok_or_else(|| {
            ProxyError::new(
                HttpError::Misdirected,
                format!(
                    "Host {:?} is not a name declared for {original} (Backends: {})",
                    authority.unwrap_or(""),
                    join(&self.routed.candidates)
                ),
            )
        })
    }

    async fn forward(
        &self,
        entry: &Entry,
        mut req: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let backend = &entry.backend;
        let tls = entry.origination.as_ref().map_err(|error| {
            ProxyError::new(
                HttpError::TlsConfig,
                format!("Backend {} has unusable TLS settings: {error}", backend.key),
            )
        })?;
        let authority = canonical_authority(&backend.hostname, backend.port, tls.is_some());
        let upgrade = headers::is_upgrade(&req);
        headers::strip_hop_by_hop(req.headers_mut(), upgrade);
        // The URI carries the authority: hyper writes it as Host on HTTP/1.1 and as
        // `:authority` on h2 (where a Host header too would be a duplicate).
        req.headers_mut().remove(HOST);
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        *req.uri_mut() = Uri::builder()
            .scheme(if tls.is_some() { "https" } else { "http" })
            .authority(authority.as_str())
            .path_and_query(path)
            .build()
            .map_err(|_| bad_authority(&authority))?;
        *req.version_mut() = Version::HTTP_11;
        let original = self.routed.original;
        let shared = &self.shared;
        if upgrade {
            let host = HeaderValue::from_str(&authority).map_err(|_| bad_authority(&authority))?;
            req.headers_mut().insert(HOST, host);
            return upgrade::forward(shared, entry, tls.as_ref(), original, req).await;
        }
        let client = shared
            .http
            .pools
            .client(shared, entry, tls.as_ref(), original);
        let sending = client.request(req);
        let response = if backend.protocol == Protocol::Mcp {
            // Streams may stay silent for long: only the idle timeout applies.
            sending.await
        } else {
            let timeout = shared.http.settings.response_timeout;
            tokio::time::timeout(timeout, sending).await.map_err(|_| {
                ProxyError::new(
                    HttpError::UpstreamTimeout,
                    format!("no response from {original} within {timeout:?}"),
                )
            })?
        };
        let mut response = response.map_err(|error| ProxyError::from_client(&error, original))?;
        if let Some(connection) = response
            .extensions()
            .get::<super::upstream::UpstreamConnection>()
        {
            shared
                .stats
                .http
                .used(&backend.key.to_string(), connection.reused());
        }
        headers::strip_hop_by_hop(response.headers_mut(), false);
        Ok(response.map(body::upstream))
    }

    /// The proxy's own answer, counted and logged.
    fn refuse(&self, backend: Option<&str>, error: ProxyError) -> Response<ProxyBody> {
        let shared = &self.shared;
        let label = backend.unwrap_or("-");
        shared.stats.http.error(label, error.kind);
        if let Some(suppressed) = shared.log_limit.allow(error.kind.as_str()) {
            tracing::warn!(
                peer = %self.routed.peer, backend = label, original = %self.routed.original,
                reason = error.kind.as_str(), status = error.kind.status().as_u16(), suppressed,
                "HTTP request answered by the proxy: {}", error.detail
            );
        }
        error.response()
    }
}

/// The authority the request names: the URI's (h2 `:authority`, HTTP/1 absolute form),
/// else the Host header.
fn authority_of(req: &Request<Incoming>) -> Option<String> {
    match req.uri().authority() {
        Some(authority) => Some(authority.as_str().to_owned()),
        None => (req.headers().get(HOST))
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned),
    }
}

/// `host` or `host:port` when the port is not the scheme's default: what the upstream
/// sees as Host / `:authority`, whichever spelling the client used.
fn canonical_authority(hostname: &str, port: u16, tls: bool) -> String {
    match (tls, port) {
        (true, 443) | (false, 80) => hostname.to_owned(),
        _ => format!("{hostname}:{port}"),
    }
}

fn bad_authority(authority: &str) -> ProxyError {
    ProxyError::new(
        HttpError::UpstreamError,
        format!("cannot form an upstream request for {authority:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::canonical_authority;

    #[test]
    fn default_ports_are_left_out() {
        assert_eq!(canonical_authority("a.test", 443, true), "a.test");
        assert_eq!(canonical_authority("a.test", 443, false), "a.test:443");
        assert_eq!(canonical_authority("a.test", 80, false), "a.test");
        assert_eq!(canonical_authority("a.test", 8443, true), "a.test:8443");
    }
}
