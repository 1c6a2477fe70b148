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
    Shared,
    activity::{Activity, Watched},
    connection::{Routed, report},
    tcp,
};
use crate::tls::sniff::{FirstBytesGuard, Opening};

/// Largest request head (request line and headers) accepted; beyond it the client gets
/// 431. Generous next to what browsers and SDKs send (a few KiB).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// How long a client may take to send a request's head. hyper runs this timer while an
/// HTTP/1 connection waits for its next request too, so idle ones close after it.
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
    let Some((opening, held)) = tcp::first_bytes(&routed, &mut client).await else {
        return;
    };
    let result = match opening {
        Ok(None | Some(Opening::Plain)) => {
            serve_http(shared, routed, FirstBytesGuard::released(client, held)).await;
            return;
        }
        // The client does TLS itself: bytes, judged as for bytes Backends.
        Ok(Some(hello)) => tcp::judged_splice(&shared, &routed, client, held, &hello).await,
        Err(refused) => Err((None, tcp::opening_refusal(refused))),
    };
    if let Err((backend, refused)) = result {
        let original = Some(&routed.original);
        report(
            &shared,
            &routed.peer,
            original,
            backend.as_deref(),
            &refused,
        );
    }
}

/// HTTP/1.x or h2 (prior knowledge, told by its preface) until the client closes, or
/// the agent shuts down (then in-flight requests finish and the client is told to go).
async fn serve_http(shared: Arc<Shared>, routed: Routed, client: FirstBytesGuard<TcpStream>) {
    let label = routed.label();
    let active = shared.stats.active_guard(&label);
    // Requests in progress included: a client that stops reading a response (or an
    // upstream that stops sending one) moves no byte on this connection either.
    let activity = Arc::new(Activity::new());
    let client = Watched::new(client, activity.clone());
    let idle = shared.limits.idle_timeout;
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
        () = activity.idle_for(idle) => {
            shared.stats.idle_closed(&label);
            tracing::debug!(backend = label, "HTTP client connection closed: no bytes either way for {idle:?}");
            Ok(())
        }
    };
    drop(active);
    if let Err(error) = result {
        error::client_connection_failed(&shared, &label, error.as_ref());
    }
    shared.stats.forwarded(&label);
}
