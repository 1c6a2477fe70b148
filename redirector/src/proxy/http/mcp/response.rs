//! Responses of an MCP Backend with a tool policy: tool lists filtered, in a JSON body
//! (read whole, bounded) or an event stream (event by event, `sse.rs`).

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use bytes::{Bytes, BytesMut};
use http::{
    HeaderValue, Response,
    header::{CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE},
};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use serde_json::Value;

use super::{
    jsonrpc::filter_tools,
    sse::{EventStream, MAX_EVENT},
};
use crate::{
    backend_policy::{Applied, ToolAllowList},
    proxy::http::{
        body::{BoxError, ProxyBody, text},
        error::{HttpError, ProxyError},
    },
};

/// The longest JSON response read to filter a tool list (a list of a few hundred
/// tools with their schemas stays well below).
const MAX_JSON_RESPONSE: usize = MAX_EVENT;

/// Filters the tool lists of one response with the policy in force when its request
/// came.
pub struct ToolFilter {
    /// For messages.
    policy: Arc<Applied>,
    pub allow: ToolAllowList,
    /// The request asked `tools/list`: a JSON answer must be read to be filtered.
    lists_tools: bool,
}

impl ToolFilter {
    /// `None` when `policy` says nothing of MCP tools.
    pub fn of(policy: Arc<Applied>) -> Option<Self> {
        Some(Self {
            allow: policy.mcp_tools.clone()?,
            policy,
            lists_tools: false,
        })
    }

    /// The policy's name, for messages.
    pub fn policy(&self) -> &str {
        &self.policy.policy
    }

    /// The request asks `tools/list` (`lists`).
    pub fn listing(self, lists: bool) -> Self {
        Self {
            lists_tools: lists,
            ..self
        }
    }

    /// `response` with only the allowed tools in its lists; an error (502) when it
    /// may list tools but cannot be read: it is never passed unfiltered.
    pub async fn response(
        self,
        response: Response<ProxyBody>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let headers = response.headers();
        let stream = (headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())).is_some_and(|t| {
            t.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        });
        let judged = stream || self.lists_tools;
        if !response.status().is_success() || !judged || response.body().is_end_stream() {
            return Ok(response);
        }
        let encoding = headers.get(CONTENT_ENCODING);
        if let Some(coding) = encoding.filter(|c| !c.as_bytes().eq_ignore_ascii_case(b"identity")) {
            return Err(self.unfilterable(&format!("its body has Content-Encoding {coding:?}")));
        }
        let (mut parts, body) = response.into_parts();
        if stream {
            parts.headers.remove(CONTENT_LENGTH);
            let body = EventsFiltered {
                inner: body,
                events: EventStream::default(),
                allow: self.allow,
                trailers: None,
                ended: false,
            };
            return Ok(Response::from_parts(parts, body.boxed_unsync()));
        }
        let bytes = read_whole(body, MAX_JSON_RESPONSE)
            .await
            .map_err(|why| self.unfilterable(&why))?;
        let mut message: Value = serde_json::from_slice(&bytes)
            .map_err(|e| self.unfilterable(&format!("it is not JSON: {e}")))?;
        if !filter_tools(&mut message, &self.allow) {
            return Ok(Response::from_parts(parts, text_bytes(bytes)));
        }
        let filtered = message.to_string();
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(filtered.len()));
        Ok(Response::from_parts(parts, text(filtered)))
    }

    fn unfilterable(&self, why: &str) -> ProxyError {
        ProxyError::new(
            HttpError::McpUnfilterable,
            format!(
                "an MCP response that may list tools cannot be filtered by BackendPolicy {}: \
                 {why}",
                self.policy()
            ),
        )
    }
}

/// `body` whole, if it ends within `limit` bytes.
async fn read_whole(mut body: ProxyBody, limit: usize) -> Result<Bytes, String> {
    let mut whole = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading it failed: {e}"))?;
        if let Some(data) = frame.data_ref() {
            whole.extend_from_slice(data);
        }
        if whole.len() > limit {
            return Err(format!("it is over {limit} bytes"));
        }
    }
    Ok(whole.freeze())
}

fn text_bytes(bytes: Bytes) -> ProxyBody {
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// An event stream passed on event by event, tool lists filtered.
struct EventsFiltered {
    inner: ProxyBody,
    events: EventStream,
    allow: ToolAllowList,
    /// Trailers that came while an event was held: sent after it.
    trailers: Option<Frame<Bytes>>,
    ended: bool,
}

impl Body for EventsFiltered {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            if this.ended {
                return Poll::Ready(this.trailers.take().map(Ok));
            }
            let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
                Poll::Ready(Some(Ok(frame))) => frame,
                Poll::Ready(None) => {
                    this.ended = true;
                    let rest = this.events.finish(&this.allow);
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                    }
                    continue;
                }
            };
            match frame.into_data() {
                Ok(data) => {
                    let out = (this.events.feed(&data, &this.allow)).map_err(BoxError::from)?;
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                    // Only part of an event came: wait for the rest.
                }
                Err(trailers) => {
                    // Trailers end the body: what is held goes first.
                    this.ended = true;
                    this.trailers = Some(trailers);
                    let rest = this.events.finish(&this.allow);
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        // Rewriting changes lengths.
        SizeHint::default()
    }
}
