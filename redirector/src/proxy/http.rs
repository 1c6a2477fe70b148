//! HTTP Backends (`protocol` HTTP, HTTP11, HTTP2, H2C, MCP, GRPC, WSS): the proxy
//! speaks HTTP (hyper) to both sides.
//!
//! - [`serve`] reads the client's opening: plaintext is served as HTTP/1.x or h2 with
//!   prior knowledge; the client's own TLS is judged like bytes Backends judge it.
//! - [`request`] checks each request's Host against the names declared for the dialed
//!   address (421 otherwise) and forwards it on a pooled upstream connection.
//! - [`pool`] keeps one hyper client per (Backend, upstream address, TLS settings);
//!   [`upstream`] dials for it (TLS origination, ALPN, the datapath exemption).
//! - [`inline`]: a request without a body from an HTTP/1 client takes an HTTP/1.1
//!   upstream connection from the pool's idle ones, and the client connection's task
//!   drives it until the response ends.
//! - [`upgrade`] gives Upgrade requests (WebSocket) an HTTP/1.1 connection of their own;
//!   an `Upgrade: h2c` offer is declined (answered in HTTP/1.1, forwarded pooled).
//! - [`body`] measures each response as it streams: metrics and the access log.
//! - [`grpc`]: the proxy's own answers to gRPC calls are gRPC statuses, and calls are
//!   counted by the status they ended with.
//! - [`mcp`] reads the JSON-RPC of `MCP` Backends: tool policy, access log fields.

mod body;
mod client_body;
mod error;
mod grpc;
mod headers;
mod inline;
mod mcp;
pub mod metrics;
mod pool;
mod request;
#[cfg(test)]
mod test_server;
mod upgrade;
mod upstream;

use std::{
    convert::Infallible,
    future::Future,
    pin::{Pin, pin},
    sync::Arc,
    time::Duration,
};

use hyper::{
    server::conn::{http1, http2},
    service::service_fn,
};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncReadExt},
    net::TcpStream,
};
use tokio_util::sync::CancellationToken;

pub use pool::Pools;

use super::{
    Shared,
    activity::{Activity, Watched},
    connection::{Routed, report},
    opening,
    polled_on_wake::PolledOnWake,
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
}

impl HttpProxy {
    pub fn new(settings: HttpSettings) -> Self {
        Self {
            settings,
            pools: Pools::new(settings.pool_idle_timeout),
        }
    }
}

/// Serves one client connection to HTTP Backends.
pub async fn serve(shared: Arc<Shared>, routed: Routed, mut client: TcpStream) {
    let Some((opening, held)) = opening::first_bytes(&routed, &mut client).await else {
        return;
    };
    let result = match opening {
        Ok(None | Some(Opening::Plain)) => {
            serve_http(shared, routed, client, held).await;
            return;
        }
        // The client does TLS itself: bytes, judged as for bytes Backends.
        // Boxed, like h2 below: an HTTP/1 connection's task holds no room for them.
        Ok(Some(hello)) => {
            Box::pin(tcp::judged_splice(&shared, &routed, client, held, &hello)).await
        }
        Err(refused) => Err((None, opening::opening_refusal(refused))),
    };
    if let Err((backend, refused)) = result {
        report(&shared, &routed, backend.as_deref(), &refused);
    }
}

/// What a plaintext client opens with when it speaks h2 with prior knowledge.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the client speaks h2 with prior knowledge: its opening is the h2 preface.
/// Reads on into `held` while what came so far is a strict prefix of it, for at most
/// the head timeout (a client that stops inside the preface is let go like one that
/// stops inside a request head).
///
/// Told here rather than by hyper-util's auto builder: that one reads the first 24 bytes
/// apart and replays them, so hyper's first read of every HTTP/1 connection stops short
/// and its read buffer doubles to 16 KiB for good (measured with heaptrack: 16 KiB of
/// the ~36 KiB an idle HTTP/1 client connection cost).
async fn speaks_h2<S: AsyncRead + Unpin>(
    client: &mut S,
    held: &mut Vec<u8>,
) -> std::io::Result<bool> {
    let judged = async {
        loop {
            let seen = held.len().min(H2_PREFACE.len());
            if held[..seen] != H2_PREFACE[..seen] {
                return Ok(false);
            }
            if seen == H2_PREFACE.len() {
                return Ok(true);
            }
            held.reserve(H2_PREFACE.len());
            if client.read_buf(held).await? == 0 {
                return Ok(false);
            }
        }
    };
    tokio::time::timeout(HEAD_TIMEOUT, judged)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// HTTP/1.x or h2 (prior knowledge, told by its preface) until the client closes, or
/// the agent shuts down (then in-flight requests finish and the client is told to go).
async fn serve_http(shared: Arc<Shared>, routed: Routed, mut client: TcpStream, mut held: Vec<u8>) {
    let label = routed.label();
    let h2 = match speaks_h2(&mut client, &mut held).await {
        Ok(h2) => h2,
        Err(error) => {
            tracing::debug!(backend = label, %error, "HTTP client connection ended before its first request");
            return;
        }
    };
    // Kept past `routed`, which the requests' context takes.
    let source = routed.source.clone();
    let active = (shared.stats).active_guard_from(&label, source.source_namespace());
    // Requests in progress included: a client that stops reading a response (or an
    // upstream that stops sending one) moves no byte on this connection either.
    let activity = Arc::new(Activity::new());
    let client = TokioIo::new(Watched::new(
        FirstBytesGuard::released(client, held),
        activity.clone(),
    ));
    let context = Arc::new(request::Context::new(shared.clone(), routed));
    let go_away = context.go_away.clone();
    // hyper keeps one slot for the request in progress per connection, sized for the
    // service's future and held while the connection idles: boxing the request's future
    // (3.4 KiB, measured) costs an allocation per request and spares every idle one.
    let service = service_fn(move |req| {
        let context = context.clone();
        async move { Ok::<_, Infallible>(Box::pin(context.handle(req)).await) }
    });
    let watch = (&*shared, label.as_str(), &*activity, &go_away);
    let finished = if h2 {
        // No Date of the proxy's own on h2: on a gRPC trailers-only response (headers
        // that end the stream) the client reads every header as the call's trailing
        // metadata, and one the server never sent would be among it.
        let connection = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .auto_date_header(false)
            .serve_connection(client, service);
        Box::pin(until_done(watch, connection, |c| c.graceful_shutdown())).await
    } else {
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEAD_TIMEOUT)
            .max_buf_size(MAX_HEAD_BYTES)
            .serve_connection(client, service)
            .with_upgrades();
        until_done(watch, connection, |c| c.graceful_shutdown()).await
    };
    drop(active);
    let source_namespace = source.source_namespace();
    if let Err(error) = finished {
        error::client_connection_failed(&shared, (&label, source_namespace), &error);
    }
    shared.stats.forwarded(&label, source_namespace);
}

/// Runs a hyper server connection until the client closes it, no byte moves either way
/// for the idle timeout, or the agent shuts down or the connection's routing is out of
/// date (`go_away`): then `graceful` lets requests in flight finish and tells the
/// client to go.
async fn until_done<C>(
    (shared, label, activity, go_away): (&Shared, &str, &Activity, &CancellationToken),
    connection: C,
    graceful: impl FnOnce(Pin<&mut C>),
) -> hyper::Result<()>
where
    C: Future<Output = hyper::Result<()>>,
{
    let idle = shared.limits.idle_timeout;
    tokio::pin!(connection);
    let watchers = pin!(async {
        tokio::select! {
            biased;
            () = shared.shutdown.cancelled() => Stop::Shutdown,
            () = go_away.cancelled() => Stop::GoAway,
            () = activity.idle_for(idle) => Stop::Idle,
        }
    });
    // The watchers first: polling them costs nothing until one is woken, and a busy
    // connection polled first could use up the task's cooperative budget, which
    // `select!` checks before it polls anything.
    let stop = tokio::select! {
        biased;
        stop = PolledOnWake::new(watchers) => stop,
        result = connection.as_mut() => return result,
    };
    match stop {
        Stop::Shutdown => {}
        Stop::GoAway => {
            tracing::debug!(
                backend = label,
                "HTTP client connection told to go: its Backend changed"
            );
        }
        Stop::Idle => {
            shared.stats.idle_closed(label);
            tracing::debug!(
                backend = label,
                "HTTP client connection closed: no bytes either way for {idle:?}"
            );
            return Ok(());
        }
    }
    graceful(connection.as_mut());
    connection.await
}

/// Why a client connection is ended while its work is not done.
enum Stop {
    Shutdown,
    GoAway,
    Idle,
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// Feeds `rest` after `held` was read already: whether `speaks_h2` says h2, and
    /// the bytes it then holds for hyper.
    async fn judge(held: &[u8], rest: &[u8]) -> (bool, Vec<u8>) {
        let (mut client, mut agent) = tokio::io::duplex(64);
        client.write_all(rest).await.unwrap();
        drop(client);
        let mut held = held.to_vec();
        let h2 = speaks_h2(&mut agent, &mut held).await.unwrap();
        (h2, held)
    }

    #[tokio::test]
    async fn the_preface_tells_h2_even_when_it_comes_in_pieces() {
        for split in [H2_PREFACE.len(), 8, 1] {
            let (h2, held) = judge(&H2_PREFACE[..split], &H2_PREFACE[split..]).await;
            assert!(h2, "preface split at {split}");
            assert_eq!(held, H2_PREFACE, "every byte read is kept for hyper");
        }
    }

    #[tokio::test]
    async fn anything_else_is_http1_without_waiting_for_more() {
        let request = b"GET / HTTP/1.1\r\n";
        assert_eq!(judge(request, b"").await, (false, request.to_vec()));
        // One differing byte is enough: no read that could wait on a slow client.
        assert_eq!(judge(b"PRX", b"more").await, (false, b"PRX".to_vec()));
        // A client that closes inside the preface is not h2.
        assert!(!judge(b"PRI * HT", b"").await.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_inside_the_preface_is_let_go_after_the_head_timeout() {
        let (_client, mut agent) = tokio::io::duplex(64);
        let mut held = b"PRI * HT".to_vec();
        let started = tokio::time::Instant::now();
        let error = speaks_h2(&mut agent, &mut held).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), HEAD_TIMEOUT);
    }
}
