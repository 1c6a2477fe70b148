//! An upstream connection whose TLS records the kernel seals and opens: reads and
//! writes carry plaintext, records that are not application data are handled here.

use std::{
    io,
    os::fd::AsRawFd,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, ready},
};

use rustls::AlertDescription;
use tokio::{
    io::{AsyncRead, AsyncWrite, Interest, ReadBuf},
    net::TcpStream,
};

use super::sys::{self, ALERT, APPLICATION_DATA, HANDSHAKE};

/// The most plaintext one TLS record carries (RFC 8446 §5.1).
const MAX_PLAINTEXT: usize = 16 * 1024;

/// Alerts that do not end the connection as an error (RFC 8446 §6.1).
const CLOSE_NOTIFY: u8 = 0;
const USER_CANCELED: u8 = 90;

/// TLS 1.3 post-handshake messages (RFC 8446 §4.6).
const NEW_SESSION_TICKET: u8 = 4;
const KEY_UPDATE: u8 = 24;
/// Longer post-handshake messages are refused rather than buffered (a ticket is a few
/// hundred bytes, a KeyUpdate one).
const MAX_POST_HANDSHAKE: usize = 64 * 1024;

/// What is left of the record limit when a connection asks to be retired: a 16th
/// (2^20 writes for AES-GCM), for the requests in flight on it to finish.
const RETIRE_SHARE: u64 = 16;

/// A TCP connection with kernel TLS keys both ways.
#[derive(Debug)]
pub struct KernelTlsStream {
    socket: TcpStream,
    /// A post-handshake message split over records or reads: its bytes so far.
    handshake: Vec<u8>,
    /// An alert read in parts (a caller's buffer of one byte): its bytes so far.
    alert: Vec<u8>,
    /// Records sent with these keys, as the kernel cuts them when it has memory (every
    /// write ends a record). Under memory pressure it may close records earlier than
    /// counted; rustls's limit (AES-GCM: 2^24) sits below RFC 8446's (2^24.5), which
    /// absorbs that.
    records_sent: u64,
    /// The cipher suite's confidentiality limit: the kernel does not rekey, so the
    /// connection ends before its keys reach it.
    record_limit: u64,
    /// Set once the records sent come within a [`RETIRE_SHARE`] of the limit: a pool
    /// should stop lending the connection ([`KernelTlsStream::retiring`]).
    retiring: Arc<AtomicBool>,
    /// The server's close_notify arrived: reads return EOF.
    peer_closed: bool,
    close_notify_sent: bool,
}

impl KernelTlsStream {
    /// `socket` has its keys set; `records_sent` were sent with the send key so far.
    pub fn new(socket: TcpStream, records_sent: u64, record_limit: u64) -> Self {
        let mut stream = Self {
            socket,
            handshake: Vec::new(),
            alert: Vec::new(),
            records_sent,
            record_limit,
            retiring: Arc::new(AtomicBool::new(false)),
            peer_closed: false,
            close_notify_sent: false,
        };
        stream.count(0);
        stream
    }

    /// A flag that turns true once this connection nears its cipher's record limit,
    /// where the kernel cannot rekey and writes start to fail: new requests belong on
    /// a fresh connection by then.
    pub fn retiring(&self) -> Arc<AtomicBool> {
        self.retiring.clone()
    }

    /// Adds `records` to those sent, raising [`Self::retiring`] near the limit.
    fn count(&mut self, records: u64) {
        self.records_sent += records;
        let left = self.record_limit.saturating_sub(self.records_sent);
        if left <= self.record_limit / RETIRE_SHARE {
            self.retiring.store(true, Ordering::Relaxed);
        }
    }

    /// (Part of) a record that is not application data: close_notify ends reading,
    /// user_canceled and session tickets are dropped, anything else ends the connection.
    fn control(&mut self, record_type: u8, bytes: &[u8]) -> io::Result<()> {
        match record_type {
            ALERT => {
                self.alert.extend_from_slice(bytes);
                match *self.alert {
                    [_] => Ok(()),
                    [_, CLOSE_NOTIFY] => {
                        self.peer_closed = true;
                        Ok(())
                    }
                    // Followed by a close_notify.
                    [_, USER_CANCELED] => {
                        self.alert.clear();
                        Ok(())
                    }
                    [_, description] => Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        rustls::Error::AlertReceived(AlertDescription::from(description)),
                    )),
                    _ => Err(invalid("a malformed alert record")),
                }
            }
            HANDSHAKE => {
                self.handshake.extend_from_slice(bytes);
                while let Some((message, length)) = post_handshake(&self.handshake)? {
                    if message == KEY_UPDATE {
                        return Err(invalid(
                            "the server updated its TLS keys (KeyUpdate), which kernel TLS \
                             here does not follow",
                        ));
                    }
                    // A NEW_SESSION_TICKET: rustls's secret extraction keeps no session to
                    // store it in, so connections handed to the kernel are not resumed.
                    self.handshake.drain(..length);
                }
                Ok(())
            }
            other => Err(invalid(&format!(
                "an unexpected TLS record of content type {other}"
            ))),
        }
    }
}

/// The first complete post-handshake message in `bytes`: its type and length with its
/// header, `None` if it is not complete yet.
pub(super) fn post_handshake(bytes: &[u8]) -> io::Result<Option<(u8, usize)>> {
    let [message, a, b, c, ..] = *bytes else {
        return Ok(None);
    };
    if !matches!(message, NEW_SESSION_TICKET | KEY_UPDATE) {
        return Err(invalid(&format!(
            "an unexpected post-handshake message of type {message}"
        )));
    }
    let length = 4 + (usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c));
    if length > MAX_POST_HANDSHAKE {
        return Err(invalid(&format!(
            "a post-handshake message of {length} bytes"
        )));
    }
    Ok((bytes.len() >= length).then_some((message, length)))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("kernel TLS: {what}"))
}

impl AsyncRead for KernelTlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.peer_closed || out.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            ready!(this.socket.poll_read_ready(cx))?;
            let fd = this.socket.as_raw_fd();
            // Straight into the caller's buffer: a record that does not fit is returned
            // in parts, each naming its type.
            let read = (this.socket).try_io(Interest::READABLE, || sys::recv_record(fd, out));
            let (n, record_type) = match read {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => return Poll::Ready(Err(error)),
                Ok(read) => read,
            };
            // A kernel that read no record names no type: the end of the stream.
            let Some(record_type) = record_type.or((n > 0).then_some(APPLICATION_DATA)) else {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed connection without sending TLS close_notify",
                )));
            };
            match (n, record_type) {
                // An empty data record (TLS 1.3 allows them), perhaps followed by a
                // record of another type that the kernel keeps for the next read.
                (0, APPLICATION_DATA) => {}
                (_, APPLICATION_DATA) => {
                    out.advance(n);
                    return Poll::Ready(Ok(()));
                }
                (0, other) => {
                    return Poll::Ready(Err(invalid(&format!(
                        "an empty record of content type {other}"
                    ))));
                }
                (_, other) => {
                    // Read into the caller's buffer, not handed on.
                    let start = out.filled().len();
                    let bytes = out.initialized()[start..start + n].to_vec();
                    this.control(other, &bytes)?;
                }
            }
        }
    }
}

impl AsyncWrite for KernelTlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let records = |bytes: usize| (bytes.div_ceil(MAX_PLAINTEXT) as u64).max(1);
        if self.records_sent + records(buf.len()) > self.record_limit {
            return Poll::Ready(Err(io::Error::other(format!(
                "kernel TLS: the connection's key reached its cipher suite's limit of {} \
                 records; closed, as the kernel does not rekey",
                self.record_limit
            ))));
        }
        let written = ready!(Pin::new(&mut self.socket).poll_write(cx, buf))?;
        self.count(records(written));
        Poll::Ready(Ok(written))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.close_notify_sent {
            ready!(self.socket.poll_write_ready(cx))?;
            let fd = self.socket.as_raw_fd();
            // close_notify: alert level warning (1), description 0.
            let sent =
                (self.socket).try_io(Interest::WRITABLE, || sys::send_record(fd, ALERT, &[1, 0]));
            match sent {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
                Ok(_) => self.close_notify_sent = true,
            }
        }
        Pin::new(&mut self.socket).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn post_handshake_messages_are_framed_across_records() {
        let ticket = [NEW_SESSION_TICKET, 0, 0, 3, 9, 9, 9];
        assert_eq!(post_handshake(&ticket[..3]).unwrap(), None);
        assert_eq!(post_handshake(&ticket[..6]).unwrap(), None);
        assert_eq!(
            post_handshake(&ticket).unwrap(),
            Some((NEW_SESSION_TICKET, 7))
        );
        let update = [KEY_UPDATE, 0, 0, 1, 0];
        assert_eq!(post_handshake(&update).unwrap(), Some((KEY_UPDATE, 5)));
        assert!(
            post_handshake(&[KEY_UPDATE, 1, 0, 0]).is_err(),
            "64 KiB and more"
        );
        assert!(post_handshake(&[1, 0, 0, 0]).is_err(), "a ClientHello");
    }

    /// The counting alone: the socket has no keys, so its bytes go out as they are.
    #[tokio::test]
    async fn a_connection_asks_to_be_retired_a_sixteenth_before_its_record_limit() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limit = 1 << 24;
        let retire_at = limit - limit / RETIRE_SHARE;
        for (sent, limit, retiring) in [
            (0, limit, false),
            (retire_at, limit, true),
            (u64::MAX / 2, u64::MAX, false),
        ] {
            let socket = TcpStream::connect(addr).await.unwrap();
            let stream = KernelTlsStream::new(socket, sent, limit);
            assert_eq!(
                stream.retiring().load(Ordering::Relaxed),
                retiring,
                "{sent}"
            );
        }
        let socket = TcpStream::connect(addr).await.unwrap();
        let mut stream = KernelTlsStream::new(socket, retire_at - 2, limit);
        let retiring = stream.retiring();
        stream.write_all(b"one record").await.unwrap();
        assert!(!retiring.load(Ordering::Relaxed), "one record short");
        stream.write_all(&[0; MAX_PLAINTEXT + 1]).await.unwrap();
        assert!(retiring.load(Ordering::Relaxed), "two more records");
    }
}
