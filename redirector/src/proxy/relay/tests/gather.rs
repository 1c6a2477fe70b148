//! Large writes out of small reads: what each direction writes, write by write.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, ReadBuf};

use super::*;
use crate::proxy::relay::buffered::{Buffered, FromReaderBuffer};

const KIB: usize = 1024;

/// A reader of `data` that hands out at most `piece` bytes at a time, the way rustls
/// hands out a record at a time; past `available` bytes it waits.
struct Pieces {
    data: Vec<u8>,
    at: usize,
    piece: usize,
    available: usize,
    /// Fail after the data instead of reaching EOF (a TLS stream cut short).
    truncated: bool,
}

impl Pieces {
    fn new(len: usize, piece: usize) -> Self {
        Self {
            data: pattern(len),
            at: 0,
            piece,
            available: len,
            truncated: false,
        }
    }

    fn next(&self) -> Poll<io::Result<&[u8]>> {
        if self.at == self.available && self.available < self.data.len() {
            return Poll::Pending;
        }
        if self.at == self.data.len() && self.truncated {
            return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
        }
        let end = self.available.min(self.at + self.piece);
        Poll::Ready(Ok(&self.data[self.at..end]))
    }
}

impl AsyncRead for Pieces {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let piece = match self.next() {
            Poll::Ready(piece) => piece?,
            Poll::Pending => return Poll::Pending,
        };
        let len = piece.len().min(buf.remaining());
        buf.put_slice(&piece[..len]);
        self.at += len;
        Poll::Ready(Ok(()))
    }
}

impl AsyncBufRead for Pieces {
    fn poll_fill_buf(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        self.get_mut().next()
    }

    fn consume(mut self: Pin<&mut Self>, amt: usize) {
        self.at += amt;
    }
}

/// A writer that takes everything and notes the length of each write.
#[derive(Default)]
struct Writes {
    lengths: Vec<usize>,
    bytes: Vec<u8>,
    shut_down: bool,
}

impl AsyncWrite for Writes {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.lengths.push(buf.len());
        self.bytes.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shut_down = true;
        Poll::Ready(Ok(()))
    }
}

/// Polls `direction` once from `reader` to a fresh [`Writes`].
async fn copied<D: Direction<Pieces, Writes>>(
    mut direction: D,
    reader: &mut Pieces,
) -> (Poll<io::Result<()>>, Writes, u64) {
    let mut writes = Writes::default();
    let (moved, activity) = (AtomicU64::new(0), Activity::new());
    let poll =
        poll_fn(|cx| Poll::Ready(direction.poll_copy(cx, reader, &mut writes, &moved, &activity)))
            .await;
    (poll, writes, moved.load(Ordering::Relaxed))
}

#[tokio::test]
async fn a_buffer_is_filled_by_as_many_reads_as_it_takes_before_it_is_written() {
    let mut reader = Pieces::new(256 * KIB, 4 * KIB);
    let (poll, writes, moved) = copied(Buffered::new(64 * KIB), &mut reader).await;
    assert!(matches!(poll, Poll::Ready(Ok(()))));
    let lengths: Vec<_> = writes.lengths.iter().map(|length| length / KIB).collect();
    // 4 KiB reads fill a buffer that doubles from 4 KiB to the maximum.
    assert_eq!(lengths, [4, 8, 16, 32, 64, 64, 64, 4]);
    assert_eq!((moved, writes.shut_down), (256 * KIB as u64, true));
    assert!(writes.bytes == reader.data);
}

#[tokio::test]
async fn whole_records_are_gathered_into_large_writes() {
    let mut reader = Pieces::new(256 * KIB + 100, 16 * KIB);
    let direction = FromReaderBuffer::new(16 * KIB, 64 * KIB);
    let (poll, writes, moved) = copied(direction, &mut reader).await;
    assert!(matches!(poll, Poll::Ready(Ok(()))));
    assert_eq!(
        writes.lengths,
        [64 * KIB, 64 * KIB, 64 * KIB, 64 * KIB, 100]
    );
    assert_eq!((moved, writes.shut_down), (256 * KIB as u64 + 100, true));
    assert!(writes.bytes == reader.data);
}

#[tokio::test]
async fn short_records_are_written_as_they_come_from_the_readers_buffer() {
    let mut reader = Pieces::new(10_000, 1_000);
    let direction = FromReaderBuffer::new(16 * KIB, 64 * KIB);
    let (poll, writes, moved) = copied(direction, &mut reader).await;
    assert!(matches!(poll, Poll::Ready(Ok(()))));
    assert_eq!(writes.lengths, [1_000; 10]);
    assert_eq!(moved, 10_000);
    assert!(writes.bytes == reader.data);
}

#[tokio::test]
async fn what_was_gathered_is_written_when_the_reader_waits() {
    let mut reader = Pieces::new(64 * KIB, 16 * KIB);
    reader.available = 20 * KIB;
    let direction = FromReaderBuffer::new(16 * KIB, 64 * KIB);
    let (poll, writes, moved) = copied(direction, &mut reader).await;
    assert!(poll.is_pending(), "the rest has not arrived");
    assert_eq!(writes.lengths, [20 * KIB]);
    assert_eq!((moved, writes.shut_down), (20 * KIB as u64, false));

    let mut reader = Pieces::new(64 * KIB, 4 * KIB);
    reader.available = 20 * KIB;
    let (poll, writes, _) = copied(Buffered::new(64 * KIB), &mut reader).await;
    assert!(poll.is_pending(), "the rest has not arrived");
    assert_eq!(writes.lengths, [4 * KIB, 8 * KIB, 8 * KIB]);
}

#[tokio::test]
async fn what_was_gathered_before_a_read_error_is_written_before_the_error_is_returned() {
    let mut reader = Pieces::new(40 * KIB, 16 * KIB);
    reader.truncated = true;
    let direction = FromReaderBuffer::new(16 * KIB, 64 * KIB);
    let (poll, writes, _) = copied(direction, &mut reader).await;
    let Poll::Ready(Err(error)) = poll else {
        panic!("the truncation is an error: {poll:?}");
    };
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    assert_eq!(writes.lengths, [40 * KIB]);
    assert!(writes.bytes == reader.data);
    assert!(
        !writes.shut_down,
        "a failed stream is not ended as if whole"
    );

    let mut reader = Pieces::new(6 * KIB, 4 * KIB);
    reader.truncated = true;
    let (poll, writes, _) = copied(Buffered::new(64 * KIB), &mut reader).await;
    assert!(matches!(poll, Poll::Ready(Err(_))), "{poll:?}");
    assert_eq!(writes.lengths, [4 * KIB, 2 * KIB]);
    assert!(!writes.shut_down);
}
