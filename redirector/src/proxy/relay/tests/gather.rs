//! Whole TLS records gathered into large writes: what the down direction writes, write
//! by write, and a stream in bursts through `relay_tls` with real wakeups.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use tokio::io::{AsyncBufRead, AsyncWrite};

use super::*;
use crate::proxy::relay::buffered::FromReaderBuffer;

const KIB: usize = 1024;

/// A buffered reader of `data` that hands out at most `piece` bytes at a time, the way
/// rustls hands out a record at a time; past `available` bytes it waits.
struct Pieces {
    data: Vec<u8>,
    at: usize,
    piece: usize,
    available: usize,
    /// Fail after the data instead of reaching EOF (a TLS stream cut short).
    truncated: bool,
    /// Calls of `poll_fill_buf`: a direction that polls a ready reader again and again
    /// without taking anything would spin forever.
    polls: usize,
}

impl Pieces {
    fn new(len: usize, piece: usize) -> Self {
        Self {
            data: pattern(len),
            at: 0,
            piece,
            available: len,
            truncated: false,
            polls: 0,
        }
    }

    fn end_of_piece(&self) -> usize {
        self.available.min(self.at + self.piece)
    }
}

impl AsyncBufRead for Pieces {
    fn poll_fill_buf(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        this.polls += 1;
        assert!(
            this.polls < 1_000,
            "polled {} times: no progress",
            this.polls
        );
        if this.at == this.available && this.available < this.data.len() {
            return Poll::Pending;
        }
        if this.at == this.data.len() && this.truncated {
            return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
        }
        Poll::Ready(Ok(&this.data[this.at..this.end_of_piece()]))
    }

    fn consume(mut self: Pin<&mut Self>, amt: usize) {
        assert!(
            self.at + amt <= self.end_of_piece(),
            "consumed past the piece"
        );
        self.at += amt;
    }
}

/// Not read by `FromReaderBuffer`, which takes its reader's buffer.
impl tokio::io::AsyncRead for Pieces {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        unreachable!("a buffered reader's buffer is taken, not read into ours")
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
async fn copied(
    direction: &mut FromReaderBuffer,
    reader: &mut Pieces,
) -> (Poll<io::Result<()>>, Writes, u64) {
    let mut writes = Writes::default();
    let (moved, activity) = (AtomicU64::new(0), Activity::new());
    let poll =
        poll_fn(|cx| Poll::Ready(direction.poll_copy(cx, reader, &mut writes, &moved, &activity)))
            .await;
    (poll, writes, moved.load(Ordering::Relaxed))
}

fn in_kib(lengths: &[usize]) -> Vec<f64> {
    lengths
        .iter()
        .map(|&length| length as f64 / KIB as f64)
        .collect()
}

#[tokio::test]
async fn whole_records_are_gathered_into_writes_that_grow_to_the_buffer_size() {
    let mut reader = Pieces::new(256 * KIB + 100, 16 * KIB);
    let mut direction = FromReaderBuffer::new(16 * KIB, 64 * KIB);
    let (poll, writes, moved) = copied(&mut direction, &mut reader).await;
    assert!(matches!(poll, Poll::Ready(Ok(()))), "{poll:?}");
    // Two records, then four; the short last piece fits beside two more records.
    let expected = [32.0, 64.0, 64.0, 64.0, 32.0 + 100.0 / 1024.0];
    assert_eq!(in_kib(&writes.lengths), expected);
    assert_eq!((moved, writes.shut_down), (256 * KIB as u64 + 100, true));
    assert!(writes.bytes == reader.data);
    assert!(!direction.holds_buffer());
}

#[tokio::test]
async fn short_records_are_written_as_they_come_from_the_readers_buffer() {
    let mut reader = Pieces::new(10_000, 1_000);
    let mut direction = FromReaderBuffer::new(16 * KIB, 64 * KIB);
    let (poll, writes, moved) = copied(&mut direction, &mut reader).await;
    assert!(matches!(poll, Poll::Ready(Ok(()))), "{poll:?}");
    assert_eq!(writes.lengths, [1_000; 10]);
    assert_eq!(moved, 10_000);
    assert!(writes.bytes == reader.data);
    assert!(
        !direction.holds_buffer(),
        "nothing was copied into a buffer"
    );
}

#[tokio::test]
async fn buffer_sizes_round_down_to_whole_records() {
    // 40 KiB holds two records: the short piece after the second one is not taken into
    // the slack, it goes on its own.
    let mut reader = Pieces::new(72 * KIB, 16 * KIB);
    let mut direction = FromReaderBuffer::new(16 * KIB, 40 * KIB);
    let (_, writes, _) = copied(&mut direction, &mut reader).await;
    assert_eq!(in_kib(&writes.lengths), [32.0, 32.0, 8.0]);
    assert!(writes.bytes == reader.data);
}

#[tokio::test]
async fn below_two_records_nothing_is_gathered() {
    for max in [0, 8 * KIB, 16 * KIB, 20 * KIB] {
        let mut reader = Pieces::new(64 * KIB, 16 * KIB);
        let mut direction = FromReaderBuffer::new(16 * KIB, max);
        let (poll, writes, _) = copied(&mut direction, &mut reader).await;
        assert!(matches!(poll, Poll::Ready(Ok(()))), "{max}: {poll:?}");
        assert_eq!(in_kib(&writes.lengths), [16.0; 4], "{max}");
        assert!(writes.bytes == reader.data);
    }
}

#[tokio::test]
async fn pieces_larger_than_a_record_are_written_as_they_come() {
    let mut reader = Pieces::new(60 * KIB, 20 * KIB);
    let mut direction = FromReaderBuffer::new(16 * KIB, 64 * KIB);
    let (_, writes, _) = copied(&mut direction, &mut reader).await;
    assert_eq!(in_kib(&writes.lengths), [20.0; 3]);
    assert!(writes.bytes == reader.data);
}

#[tokio::test]
async fn what_was_gathered_is_written_when_the_reader_waits() {
    let mut reader = Pieces::new(64 * KIB, 16 * KIB);
    reader.available = 20 * KIB;
    let mut direction = FromReaderBuffer::new(16 * KIB, 64 * KIB);
    let (poll, writes, moved) = copied(&mut direction, &mut reader).await;
    assert!(poll.is_pending(), "the rest has not arrived");
    assert_eq!(writes.lengths, [20 * KIB]);
    assert!(writes.bytes == reader.data[..20 * KIB]);
    assert_eq!((moved, writes.shut_down), (20 * KIB as u64, false));
    assert!(
        !direction.holds_buffer(),
        "a waiting direction holds no buffer"
    );
}

#[tokio::test]
async fn what_was_gathered_before_a_read_error_is_written_before_the_error_is_returned() {
    let mut reader = Pieces::new(48 * KIB, 16 * KIB);
    reader.truncated = true;
    let mut direction = FromReaderBuffer::new(16 * KIB, 64 * KIB);
    let (poll, writes, _) = copied(&mut direction, &mut reader).await;
    let Poll::Ready(Err(error)) = poll else {
        panic!("the truncation is an error: {poll:?}");
    };
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    // The third record was gathered when the error came.
    assert_eq!(in_kib(&writes.lengths), [32.0, 16.0]);
    assert!(writes.bytes == reader.data);
    assert!(
        !writes.shut_down,
        "a failed stream is not ended as if whole"
    );
}

#[tokio::test]
async fn a_stream_of_records_in_bursts_reaches_a_slow_client_whole() {
    // The client's side takes 1,000 bytes at a time (partial writes, waits); the
    // upstream hands out 16 KiB pieces, as rustls does records.
    let (mut client_app, mut client_side) = duplex(1_000);
    let (upstream_side, mut server_app) = duplex(64 * KIB);
    let proxy = tokio::spawn(async move {
        let mut upstream = tokio::io::BufReader::with_capacity(16 * KIB, upstream_side);
        relay_tls(
            &mut client_side,
            &mut upstream,
            64 * KIB,
            Duration::from_secs(5),
        )
        .await
    });
    client_app.shutdown().await.unwrap();
    let answer = pattern(300_000);
    let (first, rest) = answer.split_at(100_000);
    let mut got = vec![0u8; first.len()];
    let (wrote, read) = in_time(async {
        tokio::join!(server_app.write_all(first), client_app.read_exact(&mut got))
    })
    .await;
    wrote.unwrap();
    read.unwrap();
    // Everything sent was delivered, so the relay waits on the upstream: the second
    // burst must wake it.
    let mut got_rest = Vec::new();
    let (wrote, read) = in_time(async {
        let send = async {
            server_app.write_all(rest).await?;
            server_app.shutdown().await
        };
        tokio::join!(send, client_app.read_to_end(&mut got_rest))
    })
    .await;
    wrote.unwrap();
    read.unwrap();
    assert!(got == first && got_rest == rest);
    let (transferred, result) = in_time(proxy).await.unwrap();
    result.unwrap();
    assert_eq!(transferred.upstream_to_client, 300_000);
}
