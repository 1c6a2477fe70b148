//! An upstream connection whose TLS records the kernel seals and opens: reads and
//! writes carry plaintext, records that are not application data are handled here.
//! Its reading and writing state are apart, so that its two sides can work at once
//! ([`KernelTlsStream::split`], spliced in `splice.rs`).

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
    reading: Reading,
    writing: Writing,
}

/// What reading has seen of the records that are not application data.
#[derive(Debug, Default)]
pub(super) struct Reading {
    /// A post-handshake message split over records or reads: its bytes so far.
    handshake: Vec<u8>,
    /// An alert read in parts (a caller's buffer of one byte): its bytes so far.
    alert: Vec<u8>,
    /// The server's close_notify arrived: reads return EOF.
    peer_closed: bool,
}

/// What writing has sent with the send key.
#[derive(Debug)]
pub(super) struct Writing {
    /// Records sent with these keys, counted as if every write ended a record (a record
    /// is at most 16 KiB): a write that the kernel took in part, leaving its record open
    /// for the next, is counted twice, which only errs on the safe side. Under memory
    /// pressure the kernel may close records earlier than counted; rustls's limit
    /// (AES-GCM: 2^24) sits below RFC 8446's (2^24.5), which absorbs that.
    records_sent: u64,
    /// The cipher suite's confidentiality limit: the kernel does not rekey, so the
    /// connection ends before its keys reach it.
    record_limit: u64,
    /// Set once the records sent come within a [`RETIRE_SHARE`] of the limit: a pool
    /// should stop lending the connection ([`KernelTlsStream::retiring`]).
    retiring: Arc<AtomicBool>,
    close_notify_sent: bool,
}

/// The reading side of a [`KernelTlsStream`], beside its writing side
/// ([`KernelTlsStream::split`]).
pub struct KernelTlsRead<'a> {
    pub(super) socket: &'a TcpStream,
    pub(super) reading: &'a mut Reading,
}

/// The writing side of a [`KernelTlsStream`].
pub struct KernelTlsWrite<'a> {
    pub(super) socket: &'a TcpStream,
    pub(super) writing: &'a mut Writing,
}

impl KernelTlsStream {
    /// `socket` has its keys set; `records_sent` were sent with the send key so far.
    pub fn new(socket: TcpStream, records_sent: u64, record_limit: u64) -> Self {
        let mut writing = Writing {
            records_sent,
            record_limit,
            retiring: Arc::new(AtomicBool::new(false)),
            close_notify_sent: false,
        };
        writing.count(0);
        Self {
            socket,
            reading: Reading::default(),
            writing,
        }
    }

    /// A flag that turns true once this connection nears its cipher's record limit,
    /// where the kernel cannot rekey and writes start to fail: new requests belong on
    /// a fresh connection by then.
    pub fn retiring(&self) -> Arc<AtomicBool> {
        self.writing.retiring.clone()
    }

    /// The two sides, to read and write at once (each keeps its own state).
    pub fn split(&mut self) -> (KernelTlsRead<'_>, KernelTlsWrite<'_>) {
        let socket = &self.socket;
        (
            KernelTlsRead {
                socket,
                reading: &mut self.reading,
            },
            KernelTlsWrite {
                socket,
                writing: &mut self.writing,
            },
        )
    }
}

impl Writing {
    /// An error if a write of `len` bytes could take the key past its record limit, or
    /// to it: the last record is kept for the close_notify.
    pub(super) fn admit(&self, len: usize) -> io::Result<()> {
        if self.records_sent + records(len) < self.record_limit {
            return Ok(());
        }
        Err(io::Error::other(format!(
            "kernel TLS: the connection's key reached its cipher suite's limit of {} \
             records; closed, as the kernel does not rekey",
            self.record_limit
        )))
    }

    /// Counts one write of `len` bytes.
    pub(super) fn wrote(&mut self, len: usize) {
        self.count(records(len));
    }

    /// Adds `records` to those sent, raising [`Self::retiring`] near the limit.
    fn count(&mut self, records: u64) {
        self.records_sent += records;
        let left = self.record_limit.saturating_sub(self.records_sent);
        if left <= self.record_limit / RETIRE_SHARE {
            self.retiring.store(true, Ordering::Relaxed);
        }
    }

    pub(super) fn poll_write(
        &mut self,
        socket: &TcpStream,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.admit(buf.len())?;
        let written = loop {
            ready!(socket.poll_write_ready(cx))?;
            match socket.try_write(buf) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                written => break written?,
            }
        };
        self.wrote(written);
        Poll::Ready(Ok(written))
    }

    /// Sends close_notify, then the FIN. The kernel sends the close_notify only once it
    /// has handed TCP the rest of a record it was still holding (a full socket buffer
    /// left it partly sent: until then the send fails with EAGAIN), and seals it only
    /// when the socket buffer has room, so the FIN, which goes straight to TCP, never
    /// overtakes a data record.
    pub(super) fn poll_shutdown(
        &mut self,
        socket: &TcpStream,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        // Data writes leave a record for it; the FIN goes out in any case.
        if self.records_sent >= self.record_limit {
            self.close_notify_sent = true;
        }
        while !self.close_notify_sent {
            ready!(socket.poll_write_ready(cx))?;
            let fd = socket.as_raw_fd();
            // close_notify: alert level warning (1), description 0.
            match socket.try_io(Interest::WRITABLE, || sys::send_record(fd, ALERT, &[1, 0])) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
                Ok(_) => {
                    self.close_notify_sent = true;
                    self.count(1);
                }
            }
        }
        Poll::Ready(socket2::SockRef::from(socket).shutdown(std::net::Shutdown::Write))
    }
}

/// The most records one write of `len` bytes can open (an empty write sends one).
fn records(len: usize) -> u64 {
    (len.div_ceil(MAX_PLAINTEXT) as u64).max(1)
}

impl Reading {
    /// Reads application data into `out`: records of other types are handled on the
    /// way, close_notify reads as EOF.
    pub(super) fn poll_read(
        &mut self,
        socket: &TcpStream,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if let Some(()) = self.try_read(socket, out)? {
                return Poll::Ready(Ok(()));
            }
            ready!(socket.poll_read_ready(cx))?;
        }
    }

    /// [`Self::poll_read`] without waiting: `None` (readiness cleared) when the socket
    /// has no whole record, after handling those that are not data.
    pub(super) fn try_read(
        &mut self,
        socket: &TcpStream,
        out: &mut ReadBuf<'_>,
    ) -> io::Result<Option<()>> {
        loop {
            if self.peer_closed || out.remaining() == 0 {
                return Ok(Some(()));
            }
            let fd = socket.as_raw_fd();
            // Straight into the caller's buffer: a record that does not fit is returned
            // in parts, each naming its type.
            let read = socket.try_io(Interest::READABLE, || sys::recv_record(fd, out));
            let (n, record_type) = match read {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                read => read?,
            };
            // A kernel that read no record names no type: the end of the stream.
            let Some(record_type) = record_type.or((n > 0).then_some(APPLICATION_DATA)) else {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed connection without sending TLS close_notify",
                ));
            };
            match (n, record_type) {
                // An empty data record (TLS 1.3 allows them), perhaps followed by a
                // record of another type that the kernel keeps for the next read.
                (0, APPLICATION_DATA) => {}
                (_, APPLICATION_DATA) => {
                    out.advance(n);
                    return Ok(Some(()));
                }
                (0, other) => {
                    return Err(invalid(&format!("an empty record of content type {other}")));
                }
                (_, other) => {
                    // Read into the caller's buffer, not handed on.
                    let start = out.filled().len();
                    let bytes = out.initialized()[start..start + n].to_vec();
                    self.control(other, &bytes)?;
                }
            }
        }
    }

    /// (Part of) a record that is not application data: close_notify ends reading,
    /// user_canceled and session tickets are dropped, anything else ends the connection.
    fn control(&mut self, record_type: u8, bytes: &[u8]) -> io::Result<()> {
        match record_type {
            ALERT => {
                self.alert.extend_from_slice(bytes);
                // Two bytes each (level, description). Kernels before "tls: stop recv()
                // if initial process_rx_list gave us non-DATA" (2024) may return two
                // alert records in one read, once splice(2) put one back; so a record
                // of more than two bytes is read as several alerts, not refused.
                while let [_, description, ..] = *self.alert {
                    match description {
                        CLOSE_NOTIFY => {
                            self.peer_closed = true;
                            return Ok(());
                        }
                        // Followed by a close_notify.
                        USER_CANCELED => drop(self.alert.drain(..2)),
                        other => {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                rustls::Error::AlertReceived(AlertDescription::from(other)),
                            ));
                        }
                    }
                }
                Ok(())
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
        this.reading.poll_read(&this.socket, cx, out)
    }
}

impl AsyncWrite for KernelTlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        this.writing.poll_write(&this.socket, cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Every write went to the socket.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        this.writing.poll_shutdown(&this.socket, cx)
    }
}

#[cfg(test)]
mod tests;
