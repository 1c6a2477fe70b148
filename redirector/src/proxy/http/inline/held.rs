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
use tokio::io::AsyncBufRead;

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
        make_room(&mut self.buf, wanted);
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf)
    }

    /// [`Held::poll_fill`] for a response head: from a TLS upstream, what rustls has
    /// opened once it has some, with no further socket read. tokio-rustls's `poll_read`
    /// goes on reading the socket until the caller's buffer is full, and the read that
    /// finds nothing took the socket's waker lock and registered the task's waker again,
    /// once more per request (uprobes) for nothing: the head is read, and the response's
    /// body, if more of it comes, is read from `poll_fill_body`. tokio-rustls keeps an
    /// error its `poll_read` met after data for that method's next call, which this one
    /// does not make; `is_open` makes it (through `poll_read`) before a connection is
    /// lent, so a connection with an error kept is closed, never sent on.
    pub(super) fn poll_fill_head(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Upstream::Tls(tls) = &mut self.io else {
            return self.poll_fill(cx, READ_SIZE);
        };
        make_room(&mut self.buf, READ_SIZE);
        let mut read = 0;
        loop {
            let chunk = match Pin::new(&mut **tls).poll_fill_buf(cx) {
                Poll::Ready(Ok(chunk)) => chunk,
                // Nothing read yet: the socket's answer is this call's.
                other if read == 0 => return other.map_ok(<[u8]>::len),
                // Not met: a later round only asks for plaintext rustls holds already,
                // which it hands out without I/O. Should it ever fail here, the bytes
                // taken go on and the next call meets the failure again.
                _ => break,
            };
            let room = self.buf.capacity() - self.buf.len();
            let taken = chunk.len().min(room);
            self.buf.extend_from_slice(&chunk[..taken]);
            Pin::new(&mut **tls).consume(taken);
            read += taken;
            // Stop at the end of the stream, a full buffer, or once what rustls had
            // opened is taken (`wants_read`: the next chunk needs a socket read).
            if taken == 0 || taken == room || tls.get_ref().1.wants_read() {
                break;
            }
        }
        Poll::Ready(Ok(read))
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

/// Room in `buf` for about `wanted` bytes, at least half of it. A buffer whose parts have
/// all been passed on is used again from its start.
fn make_room(buf: &mut BytesMut, wanted: usize) {
    if buf.capacity() - buf.len() < wanted / 2 {
        buf.reserve(wanted);
    }
}
