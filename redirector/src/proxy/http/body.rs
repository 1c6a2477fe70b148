//! Bodies as the proxy passes them on, streamed frame by frame (never collected).
//! Response bodies are measured, so that a request's duration, size and access log line
//! are recorded when its body ends, not when its head arrives. Request bodies say when
//! they have gone out, which is when the response timeout starts.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use bytes::Bytes;
use http::{Method, Response, Version};
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::oneshot;

use super::{client_body::ClientBody, grpc::Outcome, inline::Lease, metrics::BackendHttp};
use crate::{
    proxy::{Shared, access_log},
    workload::Workload,
};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every body the proxy answers with.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// A short body the proxy writes itself.
pub fn text(text: String) -> ProxyBody {
    Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// What is known of a request when its response starts.
pub struct Completion {
    pub started: Instant,
    pub metrics: Arc<BackendHttp>,
    /// Only kept when there is an access log.
    pub log: Option<LogFields>,
    /// The request is a gRPC call: counted by the status its response ends with.
    pub grpc: bool,
}

/// The request's fields in the access log.
pub struct LogFields {
    pub method: Method,
    pub authority: String,
    pub path: String,
    pub source: Arc<Workload>,
    /// What a request to an MCP Backend asked (read from its JSON-RPC).
    pub mcp: Option<access_log::Mcp>,
}

/// Where an upstream response's body comes from.
pub enum Upstreamed {
    /// hyper's client, through the shared pool.
    Pool(Incoming),
    /// The upstream connection this client connection reads itself (`inline.rs`), let
    /// go of once, when the body ends or is dropped: the lease then gives the connection
    /// back to the pool, or closes it.
    Lease(Option<Arc<Lease>>),
}

/// Wraps the upstream `response`'s body, passed through as it streams, so that its end
/// (or the client going away) is recorded.
pub fn metered(
    response: Response<Upstreamed>,
    completion: Completion,
    shared: Arc<Shared>,
) -> Response<ProxyBody> {
    let status = response.status().as_u16();
    let version = response.version();
    let grpc = (completion.grpc).then(|| Outcome::of_head(response.status(), response.headers()));
    response.map(|inner| {
        Metered {
            inner,
            bytes: 0,
            record: Some(Record {
                completion,
                status,
                version,
                shared,
                grpc,
            }),
        }
        .boxed_unsync()
    })
}

struct Record {
    completion: Completion,
    status: u16,
    version: Version,
    shared: Arc<Shared>,
    /// A gRPC call's outcome so far.
    grpc: Option<Outcome>,
}

/// A response body that records its request when it ends.
struct Metered {
    inner: Upstreamed,
    bytes: u64,
    record: Option<Record>,
}

impl Metered {
    /// The lease's connection is done with, `complete` or cut short.
    fn let_go(&mut self, complete: bool) {
        if let Upstreamed::Lease(lease) = &mut self.inner
            && let Some(lease) = lease.take()
        {
            lease.ended(complete);
        }
    }

    fn finish(&mut self) {
        let Some(Record {
            completion,
            status,
            version,
            shared,
            grpc,
        }) = self.record.take()
        else {
            return;
        };
        let took = completion.started.elapsed();
        completion.metrics.finished(took);
        if let Some(outcome) = grpc {
            completion.metrics.grpc_ended(outcome.code());
        }
        if let (Some(log), Some(fields)) = (&shared.access_log, &completion.log) {
            log.request(&access_log::Request {
                backend: &completion.metrics.name,
                source: &fields.source,
                method: fields.method.as_str(),
                authority: &fields.authority,
                path: &fields.path,
                mcp: fields.mcp.as_ref(),
                status,
                bytes: self.bytes,
                duration_ms: took.as_secs_f64() * 1e3,
                upstream_protocol: match version {
                    Version::HTTP_2 => "HTTP/2",
                    Version::HTTP_10 => "HTTP/1.0",
                    _ => "HTTP/1.1",
                },
            });
        }
    }
}

impl Body for Metered {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = match &mut self.inner {
            Upstreamed::Pool(body) => Pin::new(body).poll_frame(cx).map_err(BoxError::from),
            Upstreamed::Lease(Some(lease)) => lease.poll_frame(cx),
            Upstreamed::Lease(None) => Poll::Ready(None),
        };
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.bytes += data.len() as u64;
                } else if let Some(trailers) = frame.trailers_ref() {
                    if let Some(Record {
                        grpc: Some(outcome),
                        ..
                    }) = &mut self.record
                    {
                        outcome.trailers(trailers);
                    }
                    // Trailers end a chunked body: hyper's server writes them and
                    // polls no further, and the upstream connection is done with it.
                    self.let_go(true);
                }
            }
            Poll::Ready(None) => {
                self.finish();
                // The connection can carry the next request, of any client.
                self.let_go(true);
            }
            Poll::Ready(Some(Err(_))) => {
                self.finish();
                self.let_go(false);
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Upstreamed::Pool(body) => body.is_end_stream(),
            Upstreamed::Lease(Some(lease)) => lease.is_end_stream(),
            Upstreamed::Lease(None) => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Upstreamed::Pool(body) => body.size_hint(),
            Upstreamed::Lease(Some(lease)) => lease.size_hint(),
            Upstreamed::Lease(None) => SizeHint::with_exact(0),
        }
    }
}

impl Drop for Metered {
    /// A client that went away mid-body ends the request too.
    fn drop(&mut self) {
        self.finish();
        // A body with nothing to read (HEAD, 204, 304), or read to its end, is complete
        // (hyper's server polls a body no more once it says it has ended); any other is
        // cut short.
        let complete = self.is_end_stream();
        self.let_go(complete);
    }
}

/// A request body on its way upstream. The receiver [`RequestBody::new`] returns resolves
/// once the body has ended (or was dropped, or failed): a server that answers only after
/// a long upload has not been slow to answer.
pub struct RequestBody {
    inner: ClientBody,
    /// Dropped when the body ends, which resolves the receiver.
    sending: Option<oneshot::Sender<()>>,
}

impl RequestBody {
    /// The body, and what tells its end (`None`: no body, ended already).
    pub fn new(inner: ClientBody) -> (Self, Option<oneshot::Receiver<()>>) {
        if inner.is_end_stream() {
            return (
                Self {
                    inner,
                    sending: None,
                },
                None,
            );
        }
        let (sender, sent) = oneshot::channel();
        let body = Self {
            inner,
            sending: Some(sender),
        };
        (body, Some(sent))
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None | Some(Err(_))) = polled {
            self.sending = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
