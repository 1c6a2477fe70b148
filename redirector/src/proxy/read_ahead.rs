//! Large socket reads under rustls.
//!
//! rustls reads TLS records from its transport 4 KiB at a time, so a 16 KiB record costs
//! four read syscalls. [`ReadAhead`] sits between rustls and the socket: while reads
//! come back full (a bulk transfer), it reads up to [`READ_AHEAD`] at once and serves
//! rustls from memory; as soon as a read comes back short (request/response traffic),
//! it reads straight into rustls's buffer again, with no copy and no buffer held.

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
}

impl<S> ReadAhead<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            buf: BytesMut::new(),
            ahead: false,
        }
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
            if !this.ahead {
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
        let n = out.remaining().min(this.buf.len());
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
}
