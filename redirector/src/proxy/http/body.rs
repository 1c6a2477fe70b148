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

use super::{access_log::Entry, inline::Lease, metrics::BackendHttp};
use crate::proxy::Shared;

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
}

/// The request's fields in the access log.
pub struct LogFields {
    pub method: Method,
    pub authority: String,
    pub path: String,
}

/// Wraps the upstream `response`'s body, passed through as it streams, so that its end
/// (or the client going away) is recorded. `driver`: the upstream connection the body
/// comes from, when this client connection drives it itself (`inline.rs`).
pub fn metered(
    response: Response<Incoming>,
    completion: Completion,
    shared: Arc<Shared>,
    driver: Option<Arc<Lease>>,
) -> Response<ProxyBody> {
    let status = response.status().as_u16();
    let version = response.version();
    response.map(|inner| {
        Metered {
            inner,
            driver,
            bytes: 0,
            record: Some(Record {
                completion,
                status,
                version,
                shared,
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
}

struct Metered {
    inner: Incoming,
    /// Let go of once, when the body ends or is dropped: the lease then gives its
    /// connection back to the pool, or closes it.
    driver: Option<Arc<Lease>>,
    bytes: u64,
    record: Option<Record>,
}

impl Metered {
    fn finish(&mut self) {
        let Some(Record {
            completion,
            status,
            version,
            shared,
        }) = self.record.take()
        else {
            return;
        };
        let took = completion.started.elapsed();
        completion.metrics.finished(took);
        if let (Some(log), Some(fields)) = (&shared.http.access_log, &completion.log) {
            log.write(&Entry {
                backend: &completion.metrics.name,
                method: fields.method.as_str(),
                authority: &fields.authority,
                path: &fields.path,
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
        let this = &mut *self;
        let inner = Pin::new(&mut this.inner);
        let polled = match &this.driver {
            // Reads what the upstream sent on into `inner` first.
            Some(driver) => driver.poll_body(cx, |own| inner.poll_frame(own)),
            None => inner.poll_frame(cx),
        }
        .map_err(BoxError::from);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.bytes += data.len() as u64;
                } else if frame.is_trailers()
                    && let Some(driver) = self.driver.take()
                {
                    // Trailers end a chunked body: hyper's server writes them and
                    // polls no further, and the upstream connection is done with it.
                    driver.ended(true);
                }
            }
            Poll::Ready(None) => {
                self.finish();
                if let Some(driver) = self.driver.take() {
                    // The connection can carry the next request, of any client.
                    driver.ended(true);
                }
            }
            Poll::Ready(Some(Err(_))) => self.finish(),
            Poll::Pending => {}
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

impl Drop for Metered {
    /// A client that went away mid-body ends the request too.
    fn drop(&mut self) {
        self.finish();
        if let Some(driver) = self.driver.take() {
            // A body with nothing to read (HEAD, 204, 304) is complete unread; any
            // other is cut short.
            driver.ended(self.inner.is_end_stream());
        }
    }
}

/// A request body on its way upstream. The receiver [`RequestBody::new`] returns resolves
/// once the body has ended (or was dropped, or failed): a server that answers only after
/// a long upload has not been slow to answer.
pub struct RequestBody {
    inner: Incoming,
    /// Dropped when the body ends, which resolves the receiver.
    sending: Option<oneshot::Sender<()>>,
}

impl RequestBody {
    /// The body, and what tells its end (`None`: no body, ended already).
    pub fn new(inner: Incoming) -> (Self, Option<oneshot::Receiver<()>>) {
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
