//! One request: Host check, then forwarded on the Backend's pooled upstream.

use std::{
    fmt::Display,
    pin::pin,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Instant,
};

use http::{
    HeaderValue, Method, Request, Response, Uri, Version,
    header::HOST,
    uri::{PathAndQuery, Scheme},
};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::capture_connection;
use tokio_util::sync::CancellationToken;

mod authority;
mod mcp;
mod own_answer;
mod policy;

use own_answer::Asked;

use authority::{
    UpstreamAuthority, authority_of, bad_authority, canonical_authority, split_host_port,
};

use super::{
    body::{Completion, LogFields, ProxyBody, RequestBody, Upstreamed, metered},
    client_body::ClientBody,
    error::{HttpError, ProxyError},
    grpc, headers,
    inline::{self, Lease, Sent},
    metrics::Requests,
    pool::Pooled,
    upgrade,
    upstream::UpstreamConnection,
};
use crate::{
    backend::{Backend, Protocol},
    proxy::{Shared, connection::Routed},
    table::{Entry, join},
    tls::TlsOrigination,
};

/// What the requests of one client connection share.
pub struct Context {
    pub shared: Arc<Shared>,
    pub routed: Routed,
    /// Per candidate Backend (same order), made on its first request.
    targets: Box<[OnceLock<Target>]>,
    /// Cancelled once a request met a pool that a change of its Backend retired: this
    /// connection was routed by an older table (TLS material, protocol, addresses), so
    /// it is closed gracefully and the client's next connection is routed anew.
    pub go_away: CancellationToken,
}

/// What the requests to one candidate Backend share: its pool, and the authority the
/// upstream sees, formed once per client connection rather than per request.
struct Target {
    pooled: Pooled,
    /// This connection's requests to the Backend, counted with their source namespace.
    requests: Requests,
    /// The upstream HTTP/1 connection a request holds and this client connection's task
    /// drives (`inline.rs`).
    lease: Arc<Lease>,
    /// `host[:port]` (Host on HTTP/1.1, `:authority` on h2), or the one that would not
    /// parse.
    authority: Result<UpstreamAuthority, String>,
}

impl Context {
    pub fn new(shared: Arc<Shared>, routed: Routed) -> Self {
        let targets = routed.candidates.iter().map(|_| OnceLock::new()).collect();
        Self {
            shared,
            routed,
            targets,
            go_away: CancellationToken::new(),
        }
    }

    /// Answers one request: the upstream's response, or the proxy's own error.
    pub async fn handle(&self, mut req: Request<Incoming>) -> Response<ProxyBody> {
        let started = Instant::now();
        let mut log = self.shared.access_log.is_some().then(|| LogFields {
            method: req.method().clone(),
            authority: authority_of(&req).unwrap_or_default().to_owned(),
            path: req.uri().path().to_owned(),
            source: self.routed.source.clone(),
            mcp: None,
        });
        let grpc = grpc::is_call(req.headers());
        let index = match self.backend_for(&req) {
            Ok(index) => index,
            Err(error) => return self.refuse("-", error, Asked::new(started, &log, grpc)),
        };
        let entry = &self.routed.candidates[index];
        let tls = match &entry.origination {
            Ok(tls) => tls,
            Err(error) => {
                let detail = format!(
                    "Backend {} has unusable TLS settings: {error}",
                    entry.backend.key
                );
                let label = entry.backend.key.to_string();
                let error = ProxyError::new(HttpError::TlsConfig, detail);
                return self.refuse(&label, error, Asked::new(started, &log, grpc));
            }
        };
        if let Err(error) = self.apply_policy(entry, tls.is_some(), &mut req) {
            let label = entry.backend.key.to_string();
            return self.refuse(&label, error, Asked::new(started, &log, grpc));
        }
        let (req, tool_filter) = if entry.backend.protocol == Protocol::Mcp {
            // Boxed: only MCP requests carry its future.
            match Box::pin(self.inspect_mcp(entry, req, &mut log, started)).await {
                Ok(inspected) => inspected,
                Err(refused) => return refused,
            }
        } else {
            (req.map(ClientBody::Streamed), None)
        };
        let shared = &self.shared;
        let upstream = &self.routed.upstream;
        let target = self.targets[index].get_or_init(|| {
            let backend = &entry.backend;
            let authority = canonical_authority(&backend.hostname, backend.port, tls.is_some());
            let pooled = (shared.http.pools).get(shared, entry, tls.as_ref(), upstream);
            let source_namespace = self.routed.source_namespace();
            Target {
                requests: (shared.stats.http).requests(&pooled.metrics.name, source_namespace),
                lease: Arc::new(Lease::new(pooled.idle.clone(), pooled.speaks.clone())),
                pooled,
                authority: UpstreamAuthority::parse(authority),
            }
        });
        let pooled = &target.pooled;
        if pooled.retired.is_cancelled() {
            // This request still goes the old way; the next ones come on a new
            // connection.
            self.go_away.cancel();
        }
        match self.forward(entry, tls.as_ref(), target, req).await {
            Ok(response) => {
                target.requests.answered(response.status());
                let completion = Completion {
                    started,
                    metrics: pooled.metrics.clone(),
                    log,
                    grpc,
                };
                let response = metered(response, completion, shared.clone());
                match tool_filter {
                    None => response,
                    Some(filter) => {
                        let backend = (&*pooled.metrics.name, started);
                        Box::pin(self.filtered(filter, response, backend)).await
                    }
                }
            }
            Err(error) => {
                let asked = Asked::new(started, &log, grpc);
                let response = self.refuse(&pooled.metrics.name, error, asked);
                pooled.metrics.finished(started.elapsed());
                response
            }
        }
    }

    /// The index of the candidate whose hostname the request names, among the Backends
    /// of the dialed address and port. Anything else is misdirected: the node's TLS
    /// identity and client certificate are never lent to another name (no domain
    /// fronting).
    fn backend_for(&self, req: &Request<Incoming>) -> Result<usize, ProxyError> {
        let original = self.routed.original;
        let authority = authority_of(req);
        let found = authority.and_then(|authority| {
            let (host, port) = split_host_port(authority);
            let host = host.trim_end_matches('.');
            let port_ok = port.is_none_or(|p| p == original.port());
            (self.routed.candidates.iter())
                .position(|e| port_ok && e.backend.hostname.eq_ignore_ascii_case(host))
        });
        found.ok_or_else(|| {
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
        tls: Option<&Arc<TlsOrigination>>,
        target: &Target,
        mut req: Request<ClientBody>,
    ) -> Result<Response<Upstreamed>, ProxyError> {
        let backend = &entry.backend;
        let pooled = &target.pooled;
        let upstream_authority = target.authority.as_ref().map_err(|a| bad_authority(a))?;
        let authority = &upstream_authority.uri;
        let upgrade = headers::is_upgrade(&req);
        if let Some(codings) = headers::strip_hop_by_hop(req.headers_mut(), upgrade) {
            return Err(ProxyError::new(
                HttpError::TransferCoding,
                format!(
                    "the request body has transfer coding {codings:?} (Backend {}); only \
                     chunked is passed on (send the coding as Content-Encoding)",
                    backend.key
                ),
            ));
        }
        let client_version = req.version();
        headers::join_cookies(req.headers_mut());
        // The URI carries the authority: hyper writes it as Host on HTTP/1.1 and as
        // `:authority` on h2 (where a Host header too would be a duplicate).
        req.headers_mut().remove(HOST);
        let mut uri = std::mem::take(req.uri_mut()).into_parts();
        uri.scheme = Some(if tls.is_some() {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        });
        uri.authority = Some(authority.clone());
        if uri.path_and_query.is_none() {
            uri.path_and_query = Some(PathAndQuery::from_static("/"));
        }
        *req.uri_mut() = Uri::from_parts(uri).map_err(|_| bad_authority(authority.as_str()))?;
        *req.version_mut() = Version::HTTP_11;
        let original = self.routed.original;
        let shared = &self.shared;
        if upgrade {
            req.headers_mut()
                .insert(HOST, upstream_authority.host.clone());
            let req = ClientBody::streamed(req).ok_or_else(|| {
                // `mcp::inspect` reads no upgrade request's body.
                ProxyError::new(HttpError::UpstreamError, "an upgrade request was read")
            })?;
            let metrics = pooled.metrics.clone();
            // Boxed: the upgrade's future (dial, handshake, 2 KiB) would otherwise size
            // every request's future, which is allocated and moved per request.
            let upstream = &self.routed.upstream;
            let connected = AtomicBool::new(false);
            let source = (original, self.routed.source_namespace());
            let forwarding = Box::pin(upgrade::forward(
                shared, metrics, tls, upstream, source, req, &connected,
            ));
            // An upgrade request has no body to wait for.
            let waited = || match connected.load(Ordering::Relaxed) {
                true => "went on an upstream connection of its own, dialed for the upgrade",
                false => "was still waiting for the upstream connection dialed for the upgrade",
            };
            let response = self.response_within(backend, forwarding, async {}, waited, None);
            return Ok(response.await??.map(Upstreamed::Pool));
        }
        headers::keep_unsized_body(&mut req);
        let (parts, body) = req.into_parts();
        let (body, body_sent) = RequestBody::new(body);
        let mut req = Request::from_parts(parts, body);
        // Requests with a body go through the pool, whose connection task writes it
        // whether or not the response is read meanwhile (`inline.rs`); so does CONNECT,
        // whose request line hyper-util writes in authority-form.
        let inline = body_sent.is_none()
            && client_version != Version::HTTP_2
            && req.method() != Method::CONNECT;
        // Set when the inline path gives the request back for the pool: its response
        // timeout has been running since then.
        let mut counted_from = None;
        if inline && pooled.speaks.may_be_http1() && !target.lease.busy() {
            let host = &upstream_authority.host;
            let since = tokio::time::Instant::now();
            match self.forward_inline(backend, target, host, req, since).await {
                Ok(Sent::Pool(back)) => {
                    req = back;
                    counted_from = Some(since);
                }
                Ok(Sent::Response(mut response, reused)) => {
                    pooled.metrics.used(reused);
                    let stripped = headers::strip_response(response.headers_mut(), client_version);
                    if let Err(codings) = stripped {
                        target.lease.ended(false);
                        let (key, version) = (&backend.key, client_version);
                        return Err(ProxyError::coded_response(&codings, original, key, version));
                    }
                    let lease = Some(target.lease.clone());
                    return Ok(response.map(|()| Upstreamed::Lease(lease)));
                }
                Err(error) => {
                    // A connection the request still holds is in no state to be lent
                    // again (a 504 left its request unanswered).
                    target.lease.ended(false);
                    return Err(error);
                }
            }
        }
        let body_sent = async {
            if let Some(sent) = body_sent {
                // Sent or dropped: either way the body is done with.
                let _ = sent.await;
            }
        };
        // Which connection the request went on: a 504 says, and with kernel TLS a
        // connection near its record limit asks to be lent no more.
        let captured = capture_connection(&mut req);
        let sending = pooled.client.request(req);
        let waited = || UpstreamConnection::describe(&captured);
        let response = self.response_within(backend, sending, body_sent, waited, counted_from);
        let mut response = (response.await?).map_err(|e| ProxyError::from_client(&e, original))?;
        if let Some(connection) = response.extensions().get::<UpstreamConnection>() {
            pooled.metrics.used(connection.reused());
            if shared.kernel_tls.enabled() && connection.retire_if_asked(&captured) {
                tracing::info!(
                    backend = %pooled.metrics.name,
                    "kernel TLS: an upstream connection nears its cipher's record limit \
                     (the kernel does not rekey); new requests go to a fresh one"
                );
            }
        }
        headers::strip_response(response.headers_mut(), client_version)
            .map_err(|c| ProxyError::coded_response(&c, original, &backend.key, client_version))?;
        Ok(response.map(Upstreamed::Pool))
    }

    /// Sends `req` (formed for the shared pool, without a body) on an upstream HTTP/1
    /// connection this client connection's task drives (`inline.rs`), within the
    /// response timeout counted from `since`.
    async fn forward_inline(
        &self,
        backend: &Backend,
        target: &Target,
        host: &HeaderValue,
        mut req: Request<RequestBody>,
        since: tokio::time::Instant,
    ) -> Result<Sent, ProxyError> {
        // What hyper-util's client does for the pool: Host from the URI's authority,
        // and the request line in origin-form.
        req.headers_mut().insert(HOST, host.clone());
        let absolute = std::mem::take(req.uri_mut());
        *req.uri_mut() = inline::origin_form(&absolute);
        let answered = AtomicU64::new(inline::DIALING);
        let dialer = &target.pooled.dialer;
        let original = self.routed.original;
        let sending = target.lease.send(dialer, req, (original, &answered));
        let waited = || UpstreamConnection::describe_answered(answered.load(Ordering::Relaxed));
        let sent = self
            .response_within(backend, sending, async {}, waited, Some(since))
            .await??;
        Ok(match sent {
            // Back in the pool's form.
            Sent::Pool(mut req) => {
                req.headers_mut().remove(HOST);
                *req.uri_mut() = absolute;
                Sent::Pool(req)
            }
            sent => sent,
        })
    }

    /// The upstream's response head from `sending`: 504 if it takes longer than the
    /// response timeout from the moment the request body has gone out (`body_sent`),
    /// so an upload may take as long as it takes. MCP streams may stay silent for long:
    /// only the idle timeout applies to them. `waited` says on what connection, if
    /// any, the request was waiting. `counted_from`: when the timeout started, for a
    /// request without a body (one the inline path gave back keeps its start).
    async fn response_within<T, W: Display>(
        &self,
        backend: &Backend,
        sending: impl Future<Output = T>,
        body_sent: impl Future,
        waited: impl FnOnce() -> W,
        counted_from: Option<tokio::time::Instant>,
    ) -> Result<T, ProxyError> {
        let mut sending = pin!(sending);
        if backend.protocol == Protocol::Mcp {
            return Ok(sending.await);
        }
        tokio::select! {
            biased;
            response = &mut sending => return Ok(response),
            _ = body_sent => {}
        }
        let timeout = self.shared.http.settings.response_timeout;
        let deadline = counted_from.unwrap_or_else(tokio::time::Instant::now) + timeout;
        tokio::time::timeout_at(deadline, sending)
            .await
            .map_err(|_| {
                ProxyError::new(
                    HttpError::UpstreamTimeout,
                    format!(
                        "no response from {} (Backend {}) within {timeout:?}, counted from \
                     the end of the request body: the request {}",
                        self.routed.original,
                        backend.key,
                        waited()
                    ),
                )
            })
    }
}
