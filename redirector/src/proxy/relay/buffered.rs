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
//! A reader that keeps its own buffer and hands it out a piece at a time (rustls: one
//! record's plaintext per `poll_fill_buf`) goes through [`FromReaderBuffer`]: whole
//! records, and what the reader has at once after them, are gathered into one write,
//! since each write costs a syscall and wakes the peer; any other piece is written from
//! the reader's buffer with no copy.

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
                        let flush = &mut self.need_flush;
                        return wait_for_reader(writer.as_mut(), cx, &mut self.buf, flush);
                    }
                };
                if read == 0 {
                    self.read_done = true;
                } else {
                    moved.fetch_add(read as u64, Ordering::Relaxed);
                    activity.touch();
                    if read >= self.size {
                        // The reader had at least a full buffer: read more at once.
                        self.size = self.size.saturating_mul(2).min(self.max);
                    }
                }
            }
            if self.written < self.buf.len() {
                self.need_flush = true;
                ready!(poll_write_rest(
                    writer.as_mut(),
                    cx,
                    &self.buf,
                    &mut self.written
                ))?;
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

/// Copies from a buffered reader to a writer until EOF, then shuts the writer down.
///
/// The reader hands out its buffer a piece at a time (rustls: one record's plaintext,
/// at most `piece` = 16 KiB). A piece of exactly `piece` bytes means the sender is
/// streaming: it and the pieces the reader has at once after it (while they fit) are
/// gathered into a buffer of ours and written together, one write instead of one per
/// record (TLS bulk: proxy CPU per GiB 0.81 -> 0.48 s, bench/README.md). Any other piece
/// met while nothing is gathered is written straight from the reader's buffer, with no
/// copy: a shorter one ends something its sender wrote (request/response traffic), a
/// larger one needs no gathering. The buffer starts at two pieces and doubles while
/// gathers fill it, up to `max` (`--buffer-size`) rounded down to whole pieces, and is
/// given back whenever the reader waits; below two pieces, nothing is gathered.
#[derive(Debug)]
pub struct FromReaderBuffer {
    gathered: BytesMut,
    /// Bytes of `gathered` already written.
    written: usize,
    piece: usize,
    /// The size of the next gathering buffer (a multiple of `piece`).
    size: usize,
    max: usize,
    read_done: bool,
    /// A read error that came after bytes were gathered: returned once they are written
    /// (the records before a truncation still reach the client).
    failed: Option<io::Error>,
    need_flush: bool,
    done: bool,
}

impl FromReaderBuffer {
    pub fn new(piece: usize, max: usize) -> Self {
        let piece = piece.max(1);
        // Whole pieces only: a buffer that ends mid-piece would split a record into a
        // large write and a small one.
        let max = max / piece * piece;
        Self {
            gathered: BytesMut::new(),
            written: 0,
            piece,
            size: (2 * piece).min(max),
            max,
            read_done: false,
            failed: None,
            need_flush: false,
            done: false,
        }
    }

    /// Whether a buffer is held right now (for tests).
    #[cfg(test)]
    pub fn holds_buffer(&self) -> bool {
        self.gathered.capacity() > 0
    }

    /// Takes the pieces the reader has at once into `gathered` while they fit; stops at
    /// EOF, at a read error (kept in `failed`) or when the reader waits (its waker then
    /// registered; what was gathered is written first).
    fn gather<R: AsyncBufRead>(
        &mut self,
        cx: &mut Context<'_>,
        mut reader: Pin<&mut R>,
        moved: &AtomicU64,
        activity: &Activity,
    ) {
        if self.gathered.capacity() < self.size {
            self.gathered = BytesMut::with_capacity(self.size);
        }
        loop {
            let available = match reader.as_mut().poll_fill_buf(cx) {
                Poll::Ready(Ok(available)) => available,
                Poll::Ready(Err(error)) => {
                    self.failed = Some(error);
                    break;
                }
                Poll::Pending => break,
            };
            if available.is_empty() {
                self.read_done = true;
                break;
            }
            if available.len() > self.size - self.gathered.len() {
                break;
            }
            self.gathered.extend_from_slice(available);
            let taken = available.len();
            reader.as_mut().consume(taken);
            moved.fetch_add(taken as u64, Ordering::Relaxed);
            activity.touch();
        }
        if self.gathered.len() + self.piece > self.size {
            // The reader had a buffer's worth at once: gather more next time.
            self.size = self.size.saturating_mul(2).min(self.max);
        }
    }
}

/// Counts bytes as they are taken from the reader.
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
            if self.written < self.gathered.len() {
                self.need_flush = true;
                let (gathered, written) = (&self.gathered, &mut self.written);
                ready!(poll_write_rest(writer.as_mut(), cx, gathered, written))?;
            }
            self.gathered.clear();
            self.written = 0;
            if let Some(error) = self.failed.take() {
                return Poll::Ready(Err(error));
            }
            if self.read_done {
                ready!(writer.as_mut().poll_flush(cx))?;
                ready!(writer.as_mut().poll_shutdown(cx))?;
                self.gathered = BytesMut::new();
                self.done = true;
                continue;
            }
            let available = match reader.as_mut().poll_fill_buf(cx) {
                Poll::Ready(available) => available?,
                Poll::Pending => {
                    let flush = &mut self.need_flush;
                    return wait_for_reader(writer.as_mut(), cx, &mut self.gathered, flush);
                }
            };
            if available.is_empty() {
                self.read_done = true;
            } else if available.len() != self.piece || self.max < 2 * self.piece {
                let n = ready!(writer.as_mut().poll_write(cx, available))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                reader.as_mut().consume(n);
                moved.fetch_add(n as u64, Ordering::Relaxed);
                activity.touch();
                self.need_flush = true;
            } else {
                self.gather(cx, reader.as_mut(), moved, activity);
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// The reader has nothing (its waker is registered): nothing to write until it has more,
/// so `buf` is given back, and what a buffering writer (TLS) still holds is flushed.
fn wait_for_reader<W: AsyncWrite>(
    writer: Pin<&mut W>,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
    need_flush: &mut bool,
) -> Poll<io::Result<()>> {
    *buf = BytesMut::new();
    if *need_flush {
        ready!(writer.poll_flush(cx))?;
        *need_flush = false;
    }
    Poll::Pending
}

/// Writes `buf[*written..]`, moving `written` on as the writer takes bytes: a `Pending`
/// keeps the place.
fn poll_write_rest<W: AsyncWrite>(
    mut writer: Pin<&mut W>,
    cx: &mut Context<'_>,
    buf: &[u8],
    written: &mut usize,
) -> Poll<io::Result<()>> {
    while *written < buf.len() {
        let n = ready!(writer.as_mut().poll_write(cx, &buf[*written..]))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        *written += n;
    }
    Poll::Ready(Ok(()))
}
