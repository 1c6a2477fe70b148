//! HTTP/1 upstream connections that the client connection's own task reads and writes.
//!
//! hyper-util's pool runs every upstream connection as a task of its own and passes each
//! request, response head and body chunk between that task and the client connection's
//! through channels. Here a request without a body of an HTTP/1 client connection takes
//! an upstream HTTP/1.1 connection on a [`Lease`], and the client connection's task
//! writes the request head and reads the response on it itself (`codec.rs`): what the
//! upstream sent is read and written on in the same poll, with no channel, no second
//! task and no second HTTP/1 state machine (bench/README.md, levers: a quarter less CPU
//! per GiB of response bodies than hyper-util's pool, then a tenth less per small
//! request than hyper's client connection driven the same way). The pool's duties stay:
//!
//! - sharing: when the response ends the connection goes back to the pool's
//!   [`IdleConnections`], lent to whichever request comes next, and closed after
//!   `--http-pool-idle-timeout` unused, so idle client connections hold none; a response
//!   whose end is in doubt, or after which the server sent more, closes it instead;
//! - the safe retry: a request that a connection lent again did not take (writing it
//!   failed before a byte of it went out) is sent again on a new one;
//! - kernel TLS retirement, the 504's account of the connection, the reuse metric.
//!
//! Only requests without a body: a server may answer before it has read all of a body (a
//! 413, a 401) or stream its answer while it reads, which hyper-util's connection task
//! handles. And only for HTTP/1 clients, where the upstream speaks HTTP/1.1, or may (TLS
//! that offers both in ALPN, until a connection tells): the rest goes through
//! hyper-util's pool (`pool.rs`). A new connection on which the server chose h2 goes there
//! too, with the request: the pool's next dial takes it (`Dialer::hand_over`), so the
//! first requests to an HTTP/1.1 server dial once each, and those to an h2 server no more
//! than before (one each, of which the pool keeps one to share).

mod codec;
mod held;
mod idle;
#[cfg(test)]
mod tests;

use std::{
    future::poll_fn,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
};

use bytes::Bytes;
use http::{Request, Response, Uri};
use hyper::body::{Frame, SizeHint};
use tokio::io::AsyncWrite;

use codec::Decoded;
use held::Held;
pub use idle::IdleConnections;

use super::{
    body::{BoxError, RequestBody},
    error::ProxyError,
    pool::UpstreamSpeaks,
    upstream::{DialError, Dialer, Upstream},
};
use crate::proxy::polled_on_wake::PolledOnWake;

/// `answered` while a request has not been sent on any connection yet (still dialing).
pub const DIALING: u64 = u64::MAX;

/// The upstream HTTP/1 connection a request of a client connection holds, from the
/// moment it is sent until its response ends, shared by the request future and the
/// response body that streams from it (each polls it). One per client connection and
/// Backend, empty between requests.
pub struct Lease {
    /// Boxed: a client connection keeps its lease while it idles, empty, and the
    /// connection (TLS state and all) is the larger part.
    held: Mutex<Option<Box<Held>>>,
    idle: Arc<IdleConnections>,
    speaks: Arc<UpstreamSpeaks>,
}

impl Lease {
    pub fn new(idle: Arc<IdleConnections>, speaks: Arc<UpstreamSpeaks>) -> Self {
        Self {
            held: Mutex::new(None),
            idle,
            speaks,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<Box<Held>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a request of this client connection holds the connection (HTTP/1 clients
    /// send one at a time; a second one would go through the shared pool).
    pub fn busy(&self) -> bool {
        self.held().is_some()
    }

    /// The next part of the response body, read from the held connection as needed.
    pub fn poll_frame(&self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut guard = self.held();
        let Some(held) = guard.as_mut() else {
            return Poll::Ready(Some(Err("the upstream connection was closed".into())));
        };
        let decoded = loop {
            match held.body.decode(&mut held.buf) {
                Ok(Decoded::More) => {}
                decoded => break decoded,
            }
            match held.poll_fill_body(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => break held.body.at_eof(),
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(error)) => {
                    *guard = None;
                    return Poll::Ready(Some(Err(error.into())));
                }
            }
        };
        Poll::Ready(match decoded {
            Ok(Decoded::Data(data)) => Some(Ok(Frame::data(data))),
            Ok(Decoded::Trailers(trailers)) => Some(Ok(Frame::trailers(trailers))),
            Ok(Decoded::End | Decoded::More) => None,
            Err(error) => {
                *guard = None;
                Some(Err(error.into()))
            }
        })
    }

    /// Whether the response body has ended.
    pub fn is_end_stream(&self) -> bool {
        self.held().as_ref().is_none_or(|held| held.body.is_end())
    }

    /// The response body's length, when its framing tells.
    pub fn size_hint(&self) -> SizeHint {
        match self.held().as_ref().and_then(|held| held.body.remaining()) {
            Some(left) => SizeHint::with_exact(left),
            None => SizeHint::default(),
        }
    }

    /// The response of the request in flight is done with: `complete` (read to its
    /// end), and the connection goes back to the pool's idle ones, or not (cut short,
    /// never sent on, its end in doubt, or the server closed it or sent more), and it
    /// closes.
    pub fn ended(&self, complete: bool) {
        let Some(mut held) = self.held().take() else {
            return;
        };
        if complete && held.reusable && held.body.is_end() && !held.retiring() && held.is_open() {
            self.idle.put(held);
        }
    }

    /// Sends `req` on an idle connection of the pool, else on a new one from `dialer`,
    /// and reads the response head. `answered` is set to the responses the connection
    /// carried before this request once it is sent on one (for the 504's account). A
    /// request that a connection lent again did not take (writing it failed before a
    /// byte of it went out) is sent once more, on a new connection. A new connection on which the
    /// server chose h2 in ALPN is handed over to the shared pool, and the request is
    /// given back to go there.
    pub async fn send<B>(
        &self,
        dialer: &impl Connect,
        req: Request<B>,
        (original, answered): (SocketAddr, &AtomicU64),
    ) -> Result<Sent<B>, ProxyError> {
        let head = codec::request_head(&req);
        let reused = match self.ready(dialer, false).await? {
            Some(reused) => reused,
            None => return Ok(Sent::Pool(req)),
        };
        let error = match self.try_send(&head, req.method(), answered).await {
            Ok(response) => return Ok(Sent::Response(response, reused)),
            // Only a connection that idled in the pool may have been closed meanwhile: a
            // new one that fails at once would fail again.
            Err(NotSent::Untaken(error)) if reused => error,
            Err(NotSent::Failed(error) | NotSent::Untaken(error)) => {
                return Err(ProxyError::from_client(&*error, original));
            }
        };
        tracing::debug!(backend = dialer.backend(), %error,
            "an upstream connection did not take the request: sending it on a new one");
        if self.ready(dialer, true).await?.is_none() {
            return Ok(Sent::Pool(req));
        }
        match self.try_send(&head, req.method(), answered).await {
            Ok(response) => Ok(Sent::Response(response, false)),
            Err(NotSent::Failed(error) | NotSent::Untaken(error)) => {
                Err(ProxyError::from_client(&*error, original))
            }
        }
    }

    /// Holds a connection that can take a request: one of the pool's idle ones, or a new
    /// one (always a new one when `fresh`). `Some(true)` if it was used before; `None` if
    /// a new one speaks h2.
    async fn ready(&self, dialer: &impl Connect, fresh: bool) -> Result<Option<bool>, ProxyError> {
        if !fresh {
            while let Some(mut held) = self.idle.take() {
                if held.retiring() {
                    tracing::info!(
                        backend = dialer.backend(),
                        "kernel TLS: an upstream connection nears its cipher's record \
                         limit (the kernel does not rekey); new requests go to a fresh one"
                    );
                } else if held.is_open() {
                    *self.held() = Some(held);
                    return Ok(Some(true));
                }
            }
        }
        let upstream =
            (dialer.connect().await).map_err(|error| ProxyError::new(error.kind, error.detail))?;
        if upstream.is_h2() {
            // The shared pool serves it from now on: if it needs a new connection for the
            // request, it takes this one.
            self.speaks.h2();
            dialer.hand_over(upstream);
            return Ok(None);
        }
        // The pool's dialer has told `speaks` the server's ALPN choice already.
        *self.held() = Some(Box::new(Held::new(upstream)));
        Ok(Some(false))
    }

    /// Writes the request `head` on the held connection and reads the response head.
    async fn try_send(
        &self,
        head: &[u8],
        method: &http::Method,
        answered: &AtomicU64,
    ) -> Result<Response<()>, NotSent> {
        let mut written = 0;
        let wrote = poll_fn(|cx| {
            let mut guard = self.held();
            let Some(held) = guard.as_mut() else {
                return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
            };
            answered.store(held.answered, Ordering::Relaxed);
            while written < head.len() {
                match Pin::new(&mut held.io).poll_write(cx, &head[written..]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => written += n,
                    other => return other.map_ok(|_| ()),
                }
            }
            Pin::new(&mut held.io).poll_flush(cx)
        })
        .await;
        if let Err(error) = wrote {
            *self.held() = None;
            return Err(match written {
                0 => NotSent::Untaken(error.into()),
                _ => NotSent::Failed(error.into()),
            });
        }
        // Polled again only when the upstream socket (or rustls) wakes it: while the
        // response is awaited, hyper polls the request's future several times per wake of
        // the task (its dispatcher's loop, the response timeout's first poll), and each
        // of those polls took the held connection's lock and registered the task's waker
        // with the socket once more (uprobes: 3 per request).
        let read = PolledOnWake::new(poll_fn(|cx| {
            let mut guard = self.held();
            let Some(held) = guard.as_mut() else {
                return Poll::Ready(Err(io::Error::from(io::ErrorKind::NotConnected).into()));
            };
            loop {
                match codec::parse_head(&mut held.buf, method) {
                    Ok(Some(head)) => {
                        held.body = head.body;
                        held.reusable = head.reusable;
                        held.answered += 1;
                        return Poll::Ready(Ok(head.response));
                    }
                    Ok(None) => {}
                    Err(error) => return Poll::Ready(Err(BoxError::from(error))),
                }
                match held.poll_fill_head(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(0)) => {
                        let closed = codec::CodecError::Closed("before the response head");
                        return Poll::Ready(Err(closed.into()));
                    }
                    Poll::Ready(Ok(_)) => {}
                    Poll::Ready(Err(error)) => return Poll::Ready(Err(error.into())),
                }
            }
        }))
        .await;
        read.map_err(|error| {
            *self.held() = None;
            NotSent::Failed(error)
        })
    }
}

/// What came of a request on the held connection.
pub enum Sent<B = RequestBody> {
    /// Its response head (the body comes from the lease), and whether the connection had
    /// carried requests before.
    Response(Response<()>, bool),
    /// Not sent: a new connection's server chose h2, which the shared pool serves.
    Pool(Request<B>),
}

/// Why a request got no response on a connection.
enum NotSent {
    /// Writing it failed before a byte of it went out: it may go again.
    Untaken(BoxError),
    /// It failed on the way or while waiting for the response.
    Failed(BoxError),
}

/// Where a lease's new connections come from.
pub trait Connect: Sync {
    fn connect(&self) -> impl Future<Output = Result<Upstream, DialError>> + Send;
    /// Gives a new connection on which the server chose h2 to the shared pool, for the
    /// request that goes there instead.
    fn hand_over(&self, upstream: Upstream);
    /// The Backend, for logs.
    fn backend(&self) -> &str;
}

impl Connect for Dialer {
    fn connect(&self) -> impl Future<Output = Result<Upstream, DialError>> + Send {
        self.dial(None)
    }

    fn hand_over(&self, upstream: Upstream) {
        Dialer::hand_over(self, upstream);
    }

    fn backend(&self) -> &str {
        &self.metrics.name
    }
}

/// The request line's target as an upstream HTTP/1 server expects it: origin-form
/// (`/path?query`; `/` when the client gave none).
pub fn origin_form(uri: &Uri) -> Uri {
    match uri.path_and_query() {
        Some(path) if path.as_str() != "/" => Uri::from(path.clone()),
        _ => Uri::from_static("/"),
    }
}
