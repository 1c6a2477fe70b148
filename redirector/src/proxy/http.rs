//! HTTP Backends (`protocol` HTTP, HTTP11, HTTP2, H2C, MCP): the proxy speaks HTTP
//! (hyper) to both sides.
//!
//! - [`serve`] reads the client's opening: plaintext is served as HTTP/1.x or h2 with
//!   prior knowledge; the client's own TLS is judged like bytes Backends judge it.
//! - [`request`] checks each request's Host against the names declared for the dialed
//!   address (421 otherwise) and forwards it on a pooled upstream connection.
//! - [`pool`] keeps one hyper client per (Backend, upstream address, TLS settings);
//!   [`upstream`] dials for it (TLS origination, ALPN, the datapath exemption).
//! - [`upgrade`] gives Upgrade requests (WebSocket) an HTTP/1.1 connection of their own.
//! - [`body`] measures each response as it streams: metrics and the access log.

mod access_log;
mod body;
mod error;
mod headers;
pub mod metrics;
mod pool;
mod request;
mod upgrade;
mod upstream;

use std::{convert::Infallible, path::Path, sync::Arc, time::Duration};

use hyper::service::service_fn;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use tokio::net::TcpStream;

pub use access_log::AccessLog;
pub use pool::Pools;

use super::{
    Refusal, Shared,
    connection::{Refused, Routed, report},
    tcp,
};
use crate::tls::sniff::{self, FirstBytesGuard, Opening, RefusedKind, Verdict};

/// Largest request head (request line and headers) accepted; beyond it the client gets
/// 431. Generous next to what browsers and SDKs send (a few KiB).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// How long a client may take to send its first bytes, or a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// HTTP settings from the command line.
#[derive(Debug, Clone, Copy)]
pub struct HttpSettings {
    /// Idle upstream connections are closed after this long.
    pub pool_idle_timeout: Duration,
    /// Longest wait for an upstream's response head (not for MCP).
    pub response_timeout: Duration,
}

/// What HTTP forwarding shares across connections.
pub struct HttpProxy {
    pub settings: HttpSettings,
    pub pools: Pools,
    pub access_log: Option<AccessLog>,
}

impl HttpProxy {
    pub fn new(settings: HttpSettings, access_log: Option<&Path>) -> std::io::Result<Self> {
        Ok(Self {
            settings,
            pools: Pools::new(settings.pool_idle_timeout),
            access_log: access_log.map(AccessLog::open).transpose()?,
        })
    }
}

/// Serves one client connection to HTTP Backends.
pub async fn serve(shared: Arc<Shared>, routed: Routed, mut client: TcpStream) {
    let opening = tokio::time::timeout(HEAD_TIMEOUT, sniff::read_opening(&mut client)).await;
    let (opening, held) = match opening {
        Ok(Ok(read)) => read,
        Ok(Err(error)) => {
            tracing::debug!(peer = %routed.peer, %error, "client connection failed before its first request");
            return;
        }
        Err(_) => {
            tracing::debug!(peer = %routed.peer, "client sent nothing within {HEAD_TIMEOUT:?}");
            return;
        }
    };
    let client = FirstBytesGuard::released(client, held);
    match opening {
        Ok(None | Some(Opening::Plain)) => serve_http(shared, routed, client).await,
        Ok(Some(hello @ Opening::ClientHello { .. })) => {
            // The client does TLS itself: bytes, judged as for bytes Backends.
            let rule = tcp::opening_rule(&routed.candidates, routed.original);
            let result = match rule.judge(&hello) {
                Ok(Verdict::Declared { sni }) => {
                    let backend = sni.map(|sni| tcp::named(&routed.candidates, &sni, "-"));
                    tcp::splice_to_dialed(&shared, &routed, client, backend).await
                }
                Ok(Verdict::Passthrough { .. }) => {
                    tcp::splice_to_dialed(&shared, &routed, client, None).await
                }
                Err(refused) => Err((Some(routed.label()), opening_refusal(refused))),
            };
            if let Err((backend, refused)) = result {
                report(
                    &shared,
                    &routed.peer,
                    Some(&routed.original),
                    backend.as_deref(),
                    &refused,
                );
            }
        }
        Err(refused) => {
            let refused = opening_refusal(refused);
            report(
                &shared,
                &routed.peer,
                Some(&routed.original),
                None,
                &refused,
            );
        }
    }
}

fn opening_refusal(refused: sniff::OpeningRefused) -> Refused {
    let reason = match refused.kind {
        RefusedKind::ClientOpening => Refusal::ClientOpening,
        RefusedKind::Ambiguous => Refusal::Ambiguous,
    };
    Refused::new(reason, refused.message)
}

/// HTTP/1.x or h2 (prior knowledge, told by its preface) until the client closes, or
/// the agent shuts down (then in-flight requests finish and the client is told to go).
async fn serve_http(shared: Arc<Shared>, routed: Routed, client: FirstBytesGuard<TcpStream>) {
    let label = routed.label();
    let active = shared.stats.active_guard(&label);
    let context = Arc::new(request::Context::new(shared.clone(), routed));
    let service = service_fn(move |req| {
        let context = context.clone();
        async move { Ok::<_, Infallible>(context.handle(req).await) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES);
    builder.http2().timer(TokioTimer::new());
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(client), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = shared.shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    drop(active);
    if let Err(error) = result {
        error::client_connection_failed(&shared, &label, error.as_ref());
    }
    shared.stats.forwarded(&label);
}
