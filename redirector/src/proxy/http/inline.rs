//! HTTP/1 upstream connections that the client connection's own task drives.
//!
//! hyper-util's pool runs every upstream connection as a task of its own and passes each
//! request, response head and body chunk between that task and the client connection's
//! through channels, waking one task and then the other for every chunk. Here a request
//! of an HTTP/1 client connection instead takes an upstream HTTP/1.1 connection on a
//! [`Lease`] and the client connection's task polls it itself, while it waits for the
//! response head and while the response body streams: what the upstream sent is read
//! and written on in the same poll (bench/README.md, levers: a quarter less CPU per GiB
//! of response bodies, the same per small request). The pool's duties stay:
//!
//! - sharing: when the response ends the connection goes back to the pool's
//!   [`IdleConnections`], lent to whichever request comes next, and closed after
//!   `--http-pool-idle-timeout` unused, so idle client connections hold none;
//! - the safe retry: a request that a connection did not take (it closed before a byte
//!   of the request was written) is sent again on a new one;
//! - kernel TLS retirement, the 504's account of the connection, the reuse metric.
//!
//! Only requests without a body: hyper's client writes a body only while its connection
//! is polled, and a server may answer before it has read all of it (a 413, a 401) or
//! stream its answer while it reads; hyper-util's connection task goes on writing it
//! whatever the client does with the response. And only for HTTP/1 clients, where the
//! upstream speaks HTTP/1.1, or may (TLS that offers both in ALPN, until a connection
//! tells): the rest goes through hyper-util's pool (`pool.rs`). A new connection on which
//! the server chose h2 goes there too, with the request: the pool's next dial takes it
//! (`Dialer::hand_over`), so the first requests to an HTTP/1.1 server dial once each,
//! and those to an h2 server no more than before (one each, of which the pool keeps
//! one to share).

mod idle;
mod own_wakes;
#[cfg(test)]
mod tests;

use std::{
    future::poll_fn,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll, Waker},
};

use bytes::Bytes;
use http::{Request, Response, Uri};
use hyper::{
    body::{Body, Incoming},
    client::conn::http1::{self, Connection, SendRequest},
};
use hyper_util::rt::TokioIo;

pub use idle::IdleConnections;
use own_wakes::OwnWakes;

use super::{
    body::{BoxError, RequestBody},
    error::{HttpError, ProxyError},
    pool::UpstreamSpeaks,
    upstream::{DialError, Dialer, Upstream},
};

/// What a request body sent upstream must be: the proxy's [`RequestBody`], or any body
/// in tests.
pub trait UpstreamBody: Body<Data = Bytes, Error: Into<BoxError>> + Send + Unpin + 'static {}

impl<B: Body<Data = Bytes, Error: Into<BoxError>> + Send + Unpin + 'static> UpstreamBody for B {}

/// `answered` while a request has not been sent on any connection yet (still dialing).
pub const DIALING: u64 = u64::MAX;

/// One upstream HTTP/1 connection and the handle that sends requests on it.
struct Held<B: UpstreamBody> {
    sender: SendRequest<B>,
    /// Polled by whoever waits on it: the request future, then the response body.
    connection: Pin<Box<Connection<TokioIo<Upstream>, B>>>,
    /// Responses it carried.
    answered: u64,
    /// Set by kernel TLS when the connection nears its record limit: it finishes what it
    /// carries and is lent no more.
    retiring: Option<Arc<AtomicBool>>,
}

impl<B: UpstreamBody> Held<B> {
    /// Moves the connection on (reads, writes, state changes); `false` once it closed.
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        self.connection.as_mut().poll(cx).is_pending()
    }

    fn retiring(&self) -> bool {
        (self.retiring.as_ref()).is_some_and(|retiring| retiring.load(Ordering::Relaxed))
    }
}

/// The upstream HTTP/1 connection a request of a client connection holds, from the
/// moment it is sent until its response ends, shared by the request future and the
/// response body that streams from it (each polls it). One per client connection and
/// Backend, empty between requests.
pub struct Lease<B: UpstreamBody = RequestBody> {
    held: Mutex<Option<Held<B>>>,
    idle: Arc<IdleConnections<B>>,
    speaks: Arc<UpstreamSpeaks>,
    /// The waker the connection and what it hands over are polled with
    /// (`own_wakes.rs`).
    own: OwnWakes,
}

impl<B: UpstreamBody> Lease<B> {
    pub fn new(idle: Arc<IdleConnections<B>>, speaks: Arc<UpstreamSpeaks>) -> Self {
        Self {
            held: Mutex::new(None),
            idle,
            speaks,
            own: OwnWakes::new(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<Held<B>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a request of this client connection holds the connection (HTTP/1 clients
    /// send one at a time; a second one would go through the shared pool).
    pub fn busy(&self) -> bool {
        self.held().is_some()
    }

    /// Moves the held connection on.
    fn drive(&self, cx: &mut Context<'_>) {
        let mut guard = self.held();
        if let Some(held) = guard.as_mut()
            && !held.drive(cx)
        {
            *guard = None;
        }
    }

    /// Polls the response body that the held connection feeds (`poll`), after moving
    /// the connection on so that what the upstream sent reaches the body; neither wakes
    /// the task for what the other hands it (`own_wakes.rs`).
    pub fn poll_body<T>(
        &self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        self.own.poll(cx, |own| {
            self.drive(own);
            poll(own)
        })
    }

    /// The response of the request in flight is done with: `complete`, and the
    /// connection goes back to the pool's idle ones, or not (cut short, or never sent
    /// on), and it closes.
    pub fn ended(&self, complete: bool) {
        let Some(mut held) = self.held().take() else {
            return;
        };
        if !complete || held.retiring() {
            return;
        }
        // Nothing polls it until it is lent again: one look now lets it take in the end
        // of the exchange (or see that the server closed it).
        let mut cx = Context::from_waker(Waker::noop());
        if held.drive(&mut cx) && held.sender.is_ready() {
            self.idle.put(held);
        }
    }

    /// Sends `req` on an idle connection of the pool, else on a new one from `dialer`.
    /// `answered` is set to the responses the connection carried before this request
    /// once it is sent on one (for the 504's account). A request that a connection did
    /// not take (it closed before a byte of it was written) is sent once more, on a new
    /// connection. A new connection on which the server chose h2 in ALPN is handed over
    /// to the shared pool, and the request is given back to go there.
    pub async fn send(
        &self,
        dialer: &impl Connect,
        req: Request<B>,
        (original, answered): (SocketAddr, &AtomicU64),
    ) -> Result<Sent<B>, ProxyError> {
        let reused = match self.ready(dialer, original, false).await? {
            Some(reused) => reused,
            None => return Ok(Sent::Pool(req)),
        };
        let req = match self.try_send(req, answered).await {
            Ok(response) => return Ok(Sent::Response(response, reused)),
            Err(NotSent::Failed(error)) => return Err(ProxyError::from_client(&*error, original)),
            Err(NotSent::Untaken(req, error)) => {
                tracing::debug!(backend = dialer.backend(), %error,
                    "an upstream connection did not take the request: sending it on a new one");
                req
            }
        };
        // `try_send` let go of the connection that did not take it.
        if self.ready(dialer, original, true).await?.is_none() {
            return Ok(Sent::Pool(req));
        }
        match self.try_send(req, answered).await {
            Ok(response) => Ok(Sent::Response(response, false)),
            Err(NotSent::Failed(error) | NotSent::Untaken(_, error)) => {
                Err(ProxyError::from_client(&*error, original))
            }
        }
    }

    /// Waits until the held connection can take a request, after taking one from the
    /// pool's idle ones or dialing one (always dialing when `fresh`). `Some(true)` if the
    /// connection was used before; `None` if a new one speaks h2.
    async fn ready(
        &self,
        dialer: &impl Connect,
        original: SocketAddr,
        fresh: bool,
    ) -> Result<Option<bool>, ProxyError> {
        let mut dialed = false;
        loop {
            let reused = {
                let mut guard = self.held();
                if guard.is_none() && !fresh {
                    *guard = self.idle.take();
                }
                guard.as_ref().map(|held| held.answered > 0)
            };
            let Some(reused) = reused else {
                if dialed {
                    let detail = format!("upstream {original} closed the connection at once");
                    return Err(ProxyError::new(HttpError::UpstreamError, detail));
                }
                let held = match connect(dialer, original).await? {
                    Dialed::Http1(held) => held,
                    Dialed::H2(upstream) => {
                        // The shared pool serves it from now on: if it needs a new
                        // connection for the request, it takes this one.
                        self.speaks.h2();
                        dialer.hand_over(upstream);
                        return Ok(None);
                    }
                };
                // The pool's dialer has told `speaks` the server's ALPN choice already.
                dialed = true;
                *self.held() = Some(held);
                continue;
            };
            let ready = poll_fn(|cx| {
                self.own.poll(cx, |cx| {
                    let mut guard = self.held();
                    let Some(held) = guard.as_mut() else {
                        return Poll::Ready(false);
                    };
                    if held.retiring() {
                        tracing::info!(
                            backend = dialer.backend(),
                            "kernel TLS: an upstream connection nears its cipher's record \
                             limit (the kernel does not rekey); new requests go to a fresh one"
                        );
                    }
                    if !held.drive(cx) || held.retiring() {
                        *guard = None;
                        return Poll::Ready(false);
                    }
                    held.sender.poll_ready(cx).map(|ready| ready.is_ok())
                })
            });
            if ready.await {
                return Ok(Some(reused));
            }
            // Closed (by the server, while idle) or retired: the next one.
            *self.held() = None;
        }
    }

    /// Sends on the held connection (made ready just before) and drives it until the
    /// response head arrives.
    async fn try_send(
        &self,
        req: Request<B>,
        answered: &AtomicU64,
    ) -> Result<Response<Incoming>, NotSent<B>> {
        let sending = {
            let mut guard = self.held();
            let Some(held) = guard.as_mut() else {
                // `ready` leaves one in place, and nothing runs in between.
                return Err(NotSent::Untaken(req, "no upstream connection".into()));
            };
            answered.store(held.answered, Ordering::Relaxed);
            // The connection is driven next, in this same poll.
            self.own.quietly(|| held.sender.try_send_request(req))
        };
        let mut sending = std::pin::pin!(sending);
        let response = poll_fn(|cx| {
            self.own.poll(cx, |own| {
                // A closed connection's error reaches `sending` next.
                self.drive(own);
                sending.as_mut().poll(own)
            })
        })
        .await;
        let mut guard = self.held();
        match response {
            Ok(response) => {
                if let Some(held) = guard.as_mut() {
                    held.answered += 1;
                }
                Ok(response)
            }
            Err(mut error) => {
                *guard = None;
                Err(match error.take_message() {
                    Some(req) => NotSent::Untaken(req, error.into_error().into()),
                    None => NotSent::Failed(error.into_error().into()),
                })
            }
        }
    }
}

/// What came of a request on the held connection.
pub enum Sent<B = RequestBody> {
    /// Its response head, and whether the connection had carried requests before.
    Response(Response<Incoming>, bool),
    /// Not sent: a new connection's server chose h2, which the shared pool serves.
    Pool(Request<B>),
}

/// Why a request got no response on a connection.
#[expect(
    clippy::large_enum_variant,
    reason = "returned once per request, by value, as the response it stands for"
)]
enum NotSent<B> {
    /// The connection closed before a byte of it was written: it may go again.
    Untaken(Request<B>, BoxError),
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

/// A new upstream connection.
enum Dialed<B: UpstreamBody> {
    /// HTTP/1.1, after hyper's handshake.
    Http1(Held<B>),
    /// The server chose h2 in ALPN.
    H2(Upstream),
}

/// A new upstream connection from `dialer`, with hyper's HTTP/1 handshake unless the
/// server chose h2 in ALPN.
async fn connect<B: UpstreamBody>(
    dialer: &impl Connect,
    original: SocketAddr,
) -> Result<Dialed<B>, ProxyError> {
    let upstream =
        (dialer.connect().await).map_err(|error| ProxyError::new(error.kind, error.detail))?;
    if upstream.is_h2() {
        return Ok(Dialed::H2(upstream));
    }
    let retiring = upstream.retiring();
    let (sender, connection) = http1::Builder::new()
        .max_buf_size(super::pool::UPSTREAM_READ_BUFFER)
        .handshake(TokioIo::new(upstream))
        .await
        .map_err(|error| ProxyError::from_client(&error, original))?;
    Ok(Dialed::Http1(Held {
        sender,
        connection: Box::pin(connection),
        answered: 0,
        retiring,
    }))
}

/// The request line's target as an upstream HTTP/1 server expects it: origin-form
/// (`/path?query`; `/` when the client gave none).
pub fn origin_form(uri: &Uri) -> Uri {
    match uri.path_and_query() {
        Some(path) if path.as_str() != "/" => Uri::from(path.clone()),
        _ => Uri::from_static("/"),
    }
}
