//! A request body on its way upstream: the client's, streamed; or, when the proxy had to
//! read it before deciding (MCP's JSON-RPC), what it read and then whatever is left.
//! The bytes are the client's own either way: the proxy never re-encodes a request.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

pub enum ClientBody {
    Streamed(Incoming),
    Read(ReadAhead),
}

impl ClientBody {
    /// `req` with its body as the client sends it, if none of it was read.
    pub fn streamed(req: Request<Self>) -> Option<Request<Incoming>> {
        let (parts, body) = req.into_parts();
        match body {
            Self::Streamed(body) => Some(Request::from_parts(parts, body)),
            Self::Read(_) => None,
        }
    }
}

/// What was read of a body, and the rest if the read stopped at its limit.
pub struct ReadAhead {
    head: Option<Bytes>,
    rest: Option<Incoming>,
    trailers: Option<HeaderMap>,
}

impl ReadAhead {
    /// Reads `body` until it ends or more than `limit` bytes came (then the rest is
    /// left unread, to be streamed after what was read).
    pub async fn read(mut body: Incoming, limit: usize) -> Result<Self, hyper::Error> {
        let mut head = BytesMut::new();
        let mut trailers = None;
        let mut rest = None;
        while let Some(frame) = body.frame().await {
            match frame?.into_data() {
                Ok(data) => head.extend_from_slice(&data),
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
            if head.len() > limit {
                rest = Some(body);
                break;
            }
        }
        Ok(Self {
            head: Some(head.freeze()),
            rest,
            trailers,
        })
    }

    /// The whole body, if it was read to its end.
    pub fn whole(&self) -> Option<&[u8]> {
        match (&self.rest, &self.head) {
            (None, Some(head)) => Some(head),
            (None, None) => Some(&[]),
            (Some(_), _) => None,
        }
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let read = match self.get_mut() {
            Self::Streamed(body) => return Pin::new(body).poll_frame(cx),
            Self::Read(read) => read,
        };
        if let Some(head) = read.head.take().filter(|h| !h.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if let Some(rest) = &mut read.rest {
            return Pin::new(rest).poll_frame(cx);
        }
        Poll::Ready(read.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Streamed(body) => body.is_end_stream(),
            Self::Read(read) => {
                read.head.as_ref().is_none_or(Bytes::is_empty)
                    && read.trailers.is_none()
                    && read.rest.as_ref().is_none_or(Incoming::is_end_stream)
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Streamed(body) => body.size_hint(),
            Self::Read(read) => {
                let head = read.head.as_ref().map_or(0, |h| h.len() as u64);
                match &read.rest {
                    None => SizeHint::with_exact(head),
                    Some(rest) => {
                        let rest = rest.size_hint();
                        let mut hint = SizeHint::new();
                        hint.set_lower(head + rest.lower());
                        if let Some(upper) = rest.upper() {
                            hint.set_upper(head + upper);
                        }
                        hint
                    }
                }
            }
        }
    }
}
