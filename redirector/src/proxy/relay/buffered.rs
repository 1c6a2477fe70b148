//! One direction of a relay through a userspace buffer: what any two streams get (TLS
//! on either side needs the bytes in userspace anyway).
//!
//! The buffer follows the traffic instead of being sized for the worst case: it starts at
//! [`INITIAL_SIZE`], doubles each time a read fills it, up to the configured maximum
//! (`--buffer-size`), and is given back whenever its direction waits for the reader
//! with nothing left to write. A held idle connection then holds no buffer at all (two
//! eager 64 KiB buffers made 10,000 held TLS connections cost 1.3 GiB), while a bulk
//! transfer reads and writes in large chunks.
//!
//! A reader that keeps its own buffer (rustls holds each decrypted record) is copied
//! from that buffer instead ([`FromReaderBuffer`]): one copy of every byte fewer.

use std::{
    io,
    pin::Pin,
    sync::atomic::{AtomicU64, Ordering},
    task::{Context, Poll, ready},
};

use bytes::BytesMut;
use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite};

use super::Activity;

/// The first buffer of a direction: a request or a small response fits.
pub const INITIAL_SIZE: usize = 4 * 1024;

/// One direction of a relay: ready once the reader reached EOF, everything read was
/// written and the writer shut down. Counts what it moves in `moved` and touches
/// `activity` whenever bytes move.
pub trait Direction<R, W> {
    fn poll_copy(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut R,
        writer: &mut W,
        moved: &AtomicU64,
        activity: &Activity,
    ) -> Poll<io::Result<()>>;
}

/// Copies from a reader to a writer until EOF, then shuts the writer down.
#[derive(Debug)]
pub struct Buffered {
    buf: BytesMut,
    /// Bytes of `buf` already written.
    written: usize,
    /// The size of the next buffer.
    size: usize,
    max: usize,
    read_done: bool,
    need_flush: bool,
    done: bool,
}

impl Buffered {
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            buf: BytesMut::new(),
            written: 0,
            size: INITIAL_SIZE.min(max),
            max,
            read_done: false,
            need_flush: false,
            done: false,
        }
    }

    /// The size the next buffer will have (for tests).
    #[cfg(test)]
    pub fn next_size(&self) -> usize {
        self.size
    }

    /// Whether a buffer is held right now (for tests).
    #[cfg(test)]
    pub fn holds_buffer(&self) -> bool {
        self.buf.capacity() > 0
    }
}

/// Counts bytes as they are read.
impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Direction<R, W> for Buffered {
    fn poll_copy(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut R,
        writer: &mut W,
        moved: &AtomicU64,
        activity: &Activity,
    ) -> Poll<io::Result<()>> {
        let (mut reader, mut writer) = (Pin::new(reader), Pin::new(writer));
        while !self.done {
            if self.written == self.buf.len() && !self.read_done {
                self.buf.clear();
                self.written = 0;
                if self.buf.capacity() < self.size {
                    self.buf = BytesMut::with_capacity(self.size);
                }
                let read = match tokio_util::io::poll_read_buf(reader.as_mut(), cx, &mut self.buf) {
                    Poll::Ready(read) => read?,
                    Poll::Pending => {
                        // Nothing to write until the reader has more: give the buffer
                        // back, and flush what a buffering writer (TLS) still holds.
                        self.buf = BytesMut::new();
                        if self.need_flush {
                            ready!(writer.as_mut().poll_flush(cx))?;
                            self.need_flush = false;
                        }
                        return Poll::Pending;
                    }
                };
                if read == 0 {
                    self.read_done = true;
                } else {
                    moved.fetch_add(read as u64, Ordering::Relaxed);
                    activity.touch();
                    if read >= self.size {
                        // The reader had at least a full buffer: read more at once.
                        self.size = (self.size * 2).min(self.max);
                    }
                }
            }
            while self.written < self.buf.len() {
                let n = ready!(writer.as_mut().poll_write(cx, &self.buf[self.written..]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.written += n;
                self.need_flush = true;
            }
            if self.read_done {
                ready!(writer.as_mut().poll_flush(cx))?;
                ready!(writer.as_mut().poll_shutdown(cx))?;
                self.buf = BytesMut::new();
                self.done = true;
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// Copies from a buffered reader (rustls, which holds each decrypted record) straight to
/// a writer, until EOF, then shuts the writer down: the bytes are written from the
/// reader's own buffer, with no copy into one of ours.
#[derive(Debug, Default)]
pub struct FromReaderBuffer {
    read_done: bool,
    need_flush: bool,
    done: bool,
}

/// Counts bytes as they are written.
impl<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin> Direction<R, W> for FromReaderBuffer {
    fn poll_copy(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut R,
        writer: &mut W,
        moved: &AtomicU64,
        activity: &Activity,
    ) -> Poll<io::Result<()>> {
        let (mut reader, mut writer) = (Pin::new(reader), Pin::new(writer));
        while !self.done {
            if !self.read_done {
                let available = match reader.as_mut().poll_fill_buf(cx) {
                    Poll::Ready(available) => available?,
                    Poll::Pending => {
                        if self.need_flush {
                            ready!(writer.as_mut().poll_flush(cx))?;
                            self.need_flush = false;
                        }
                        return Poll::Pending;
                    }
                };
                if available.is_empty() {
                    self.read_done = true;
                    continue;
                }
                let n = ready!(writer.as_mut().poll_write(cx, available))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                reader.as_mut().consume(n);
                moved.fetch_add(n as u64, Ordering::Relaxed);
                activity.touch();
                self.need_flush = true;
            } else {
                ready!(writer.as_mut().poll_flush(cx))?;
                ready!(writer.as_mut().poll_shutdown(cx))?;
                self.done = true;
            }
        }
        Poll::Ready(Ok(()))
    }
}
