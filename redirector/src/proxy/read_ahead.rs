//! Large socket reads under rustls.
//!
//! rustls reads TLS records from its transport 4 KiB at a time, so a 16 KiB record costs
//! four read syscalls. [`ReadAhead`] sits between rustls and the socket: while reads
//! come back full (a bulk transfer), it reads up to [`READ_AHEAD`] at once and serves
//! rustls from memory; as soon as a read comes back short (request/response traffic),
//! it reads straight into rustls's buffer again, with no copy and no buffer held.
//!
//! Before its keys go to the kernel (`kernel_tls.rs`), a connection's handshake is read
//! [`ReadAhead::record_bounded`]: no read hands rustls bytes past the end of a TLS record,
//! so when rustls is done with the handshake it holds no part of a later record, and
//! what was read beyond it is visible here ([`ReadAhead::is_clean`]).

use std::{
    io,
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, ReadBuf};

/// The most one read from the socket asks for once reads come back full.
pub const READ_AHEAD: usize = 64 * 1024;

/// A transport that reads ahead while the peer sends faster than it is read.
#[derive(Debug)]
pub struct ReadAhead<S> {
    inner: S,
    /// Read but not yet handed on; empty (and unallocated) when reading straight through.
    buf: BytesMut,
    /// Whether the last read from the socket filled what it was given.
    ahead: bool,
    /// Where the bytes handed on stand in the TLS record stream, while reads stop at
    /// record ends (`None`: they do not).
    records: Option<RecordPosition>,
}

impl<S> ReadAhead<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            buf: BytesMut::new(),
            ahead: false,
            records: None,
        }
    }

    /// A transport whose reads never hand on bytes past the end of a TLS record.
    pub fn record_bounded(inner: S) -> Self {
        Self {
            records: Some(RecordPosition::default()),
            ..Self::new(inner)
        }
    }

    /// True if everything read was handed on and ended at a record's end: a reader that
    /// processed every whole record it was given holds nothing of the stream. Only a
    /// record-bounded transport can tell.
    pub fn is_clean(&self) -> bool {
        self.buf.is_empty()
            && self
                .records
                .as_ref()
                .is_some_and(RecordPosition::at_boundary)
    }

    /// Reads go on as [`ReadAhead::new`]'s do.
    pub fn unbound(&mut self) {
        self.records = None;
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// The length of a TLS record header: type, version, length (RFC 8446 §5.1).
const RECORD_HEADER: usize = 5;

/// A position in a TLS record stream, kept from the bytes that pass it.
#[derive(Debug, Default)]
struct RecordPosition {
    header: [u8; RECORD_HEADER],
    /// Header bytes seen of the current record (all of them once its body is reached).
    header_seen: usize,
    /// Body bytes of the current record not seen yet.
    body_left: usize,
}

impl RecordPosition {
    fn at_boundary(&self) -> bool {
        self.header_seen == 0 && self.body_left == 0
    }

    /// How many of `bytes` (the next in the stream) to hand on so that the hand-over
    /// ends at the latest where the record it starts in ends; moves past them.
    fn take(&mut self, bytes: &[u8]) -> usize {
        let mut taken = 0;
        while self.header_seen < RECORD_HEADER {
            let Some(&byte) = bytes.get(taken) else {
                return taken;
            };
            self.header[self.header_seen] = byte;
            self.header_seen += 1;
            taken += 1;
            if self.header_seen == RECORD_HEADER {
                self.body_left = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
            }
        }
        let body = self.body_left.min(bytes.len() - taken);
        self.body_left -= body;
        if self.body_left == 0 {
            self.header_seen = 0;
        }
        taken + body
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadAhead<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.buf.is_empty() {
            if !this.ahead && this.records.is_none() {
                let wanted = out.remaining();
                ready!(Pin::new(&mut this.inner).poll_read(cx, out))?;
                this.ahead = wanted > 0 && out.remaining() == 0;
                return Poll::Ready(Ok(()));
            }
            this.buf.reserve(READ_AHEAD);
            let poll = tokio_util::io::poll_read_buf(Pin::new(&mut this.inner), cx, &mut this.buf);
            let Poll::Ready(read) = poll else {
                // Silence after a burst: hold no buffer while waiting.
                this.buf = BytesMut::new();
                return Poll::Pending;
            };
            this.ahead = read? >= READ_AHEAD;
        }
        let mut n = out.remaining().min(this.buf.len());
        if let Some(records) = &mut this.records {
            n = records.take(&this.buf[..n]);
        }
        out.put_slice(&this.buf[..n]);
        this.buf.advance(n);
        if this.buf.is_empty() {
            // Given back between bursts: an idle connection holds no buffer.
            this.buf = BytesMut::new();
        }
        Poll::Ready(Ok(()))
    }
}

write_through!(ReadAhead);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    #[tokio::test]
    async fn reads_ahead_only_while_reads_come_back_full() {
        let (mut peer, inner) = duplex(1 << 20);
        let mut stream = ReadAhead::new(inner);
        peer.write_all(&[1u8; 100]).await.unwrap();
        let mut small = [0u8; 4096];
        assert_eq!(stream.read(&mut small).await.unwrap(), 100);
        assert!(!stream.ahead, "a short read keeps reading straight through");

        peer.write_all(&[2u8; 200 * 1024]).await.unwrap();
        assert_eq!(stream.read(&mut small).await.unwrap(), 4096);
        assert!(stream.ahead, "a full read switches to reading ahead");
        assert_eq!(stream.read(&mut small).await.unwrap(), 4096);
        assert_eq!(
            stream.buf.len(),
            READ_AHEAD - 4096,
            "one large read, served from memory"
        );

        let mut rest = vec![0u8; 200 * 1024 - 8192];
        stream.read_exact(&mut rest).await.unwrap();
        assert!(rest.iter().all(|&b| b == 2));
        assert_eq!(stream.buf.capacity(), 0, "drained: no buffer held");
        peer.write_all(b"end").await.unwrap();
        drop(peer);
        let mut tail = Vec::new();
        stream.read_to_end(&mut tail).await.unwrap();
        assert_eq!(tail, b"end");
    }

    fn record(body: &[u8]) -> Vec<u8> {
        let mut record = vec![23, 3, 3];
        record.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
        record.extend_from_slice(body);
        record
    }

    #[test]
    fn a_record_position_stops_at_record_ends_across_splits() {
        let stream = [record(b"first"), record(b""), record(&[7u8; 300])].concat();
        let mut position = RecordPosition::default();
        assert_eq!(position.take(&stream), 10, "header and body of the first");
        assert!(position.at_boundary());
        assert_eq!(position.take(&stream[10..]), 5, "an empty record");
        assert_eq!(position.take(&stream[15..18]), 3, "part of a header");
        assert!(!position.at_boundary());
        assert_eq!(position.take(&stream[18..100]), 82);
        assert_eq!(position.take(&stream[100..]), stream.len() - 100);
        assert!(position.at_boundary());
        assert_eq!(position.take(&[]), 0);
    }

    #[tokio::test]
    async fn a_record_bounded_read_never_crosses_a_record_end() {
        let (mut peer, inner) = duplex(1 << 20);
        let mut stream = ReadAhead::record_bounded(inner);
        let (one, two) = (record(&[1u8; 100]), record(&[2u8; 50]));
        peer.write_all(&[one.clone(), two.clone()].concat())
            .await
            .unwrap();
        let mut big = [0u8; 4096];
        assert_eq!(stream.read(&mut big).await.unwrap(), one.len());
        assert!(
            !stream.is_clean(),
            "the second record was read but not handed on"
        );
        let mut small = [0u8; 20];
        assert_eq!(stream.read(&mut small).await.unwrap(), 20);
        assert!(!stream.is_clean(), "handed on mid-record");
        let mut rest = vec![0u8; two.len() - 20];
        stream.read_exact(&mut rest).await.unwrap();
        assert!(stream.is_clean());
        assert!(
            !ReadAhead::new(duplex(1).0).is_clean(),
            "only a bounded one can tell"
        );
    }
}
