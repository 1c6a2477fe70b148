//! One upstream HTTP/1.1 connection a lease holds or the pool keeps idle, and what it has
//! read and not yet given on.

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, Waker},
};

use bytes::BytesMut;

use super::{Upstream, codec::Decoder};

/// What a read asks room for: a response head, or a short body.
pub(super) const READ_SIZE: usize = 16 * 1024;
/// What a read asks room for at most, for a long body (the pool's read buffer).
const MAX_READ_SIZE: usize = super::super::pool::UPSTREAM_READ_BUFFER;

/// One upstream HTTP/1.1 connection, and what it has read and not yet given on.
pub(super) struct Held {
    pub(super) io: Upstream,
    pub(super) buf: BytesMut,
    /// The body of the response in flight, once its head has been read.
    pub(super) body: Decoder,
    /// Whether it may carry another request once that body has ended.
    pub(super) reusable: bool,
    /// Responses it carried.
    pub(super) answered: u64,
    /// Set by kernel TLS when the connection nears its record limit: it finishes what it
    /// carries and is lent no more.
    retiring: Option<Arc<AtomicBool>>,
}

impl Held {
    pub(super) fn new(io: Upstream) -> Self {
        Self {
            retiring: io.retiring(),
            io,
            buf: BytesMut::new(),
            body: Decoder::Done,
            reusable: true,
            answered: 0,
        }
    }

    pub(super) fn retiring(&self) -> bool {
        (self.retiring.as_ref()).is_some_and(|retiring| retiring.load(Ordering::Relaxed))
    }

    /// Reads what the upstream sent on into `buf`, with room for `wanted` bytes: `Ok(0)`
    /// when it has closed.
    pub(super) fn poll_fill(
        &mut self,
        cx: &mut Context<'_>,
        wanted: usize,
    ) -> Poll<io::Result<usize>> {
        // A buffer whose parts have all been passed on is used again from its start.
        if self.buf.capacity() - self.buf.len() < wanted / 2 {
            self.buf.reserve(wanted);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf)
    }

    /// Reads the next part of the response body: as much as is left of it, within
    /// bounds.
    pub(super) fn poll_fill_body(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let left = self
            .body
            .remaining()
            .and_then(|left| usize::try_from(left).ok());
        let wanted = left.map_or(MAX_READ_SIZE, |left| left.clamp(READ_SIZE, MAX_READ_SIZE));
        self.poll_fill(cx, wanted)
    }

    /// Whether an idle connection can take a request: the server has not closed it, nor
    /// sent anything unasked.
    pub(super) fn is_open(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        matches!(self.poll_fill(&mut cx, READ_SIZE), Poll::Pending) && self.buf.is_empty()
    }
}
