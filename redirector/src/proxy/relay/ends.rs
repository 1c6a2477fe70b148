//! The sockets a spliced direction moves bytes between, and what each needs beside
//! splice(2) itself. A plain TCP socket needs little: its urgent mark read past, a FIN
//! at the end. A socket whose TLS records the kernel seals and opens (`kernel_tls`)
//! needs records that are not data read for it, its writes counted against its key's
//! record limit, and a close_notify before its FIN: it implements these traits there.

use std::{io, net::Shutdown, os::fd::AsRawFd};

use tokio::net::TcpStream;

/// What a splice(2) out of a source socket found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spliced {
    /// Bytes moved into the pipe; 0 at EOF.
    Moved(usize),
    /// Something splice(2) does not pass (the TCP urgent mark, a TLS record that is not
    /// data): the next chunk must be read with [`SpliceSource::read_chunk`].
    ReadInstead,
}

/// The socket a spliced direction reads.
pub trait SpliceSource {
    fn socket(&self) -> &TcpStream;

    /// What a splice(2) out of [`Self::socket`] that returned `result` means. Runs inside
    /// the socket's `try_io`: a would-block must stay an error (it clears readiness),
    /// and a [`Spliced::ReadInstead`] must not (the read after it needs it).
    fn classify(&self, result: io::Result<usize>) -> io::Result<Spliced>;

    /// One chunk into `buf` without splice(2) (0 at EOF): what splice(2) cannot pass,
    /// or anything when no pipe is free. `None`, having waited for nothing, if nothing
    /// was there after all.
    async fn read_chunk(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;

    /// The smallest pipe (bytes) a splice out of this socket may go into; with a smaller
    /// one the chunk is read instead.
    fn pipe_needed(&self) -> usize {
        0
    }

    /// Whether a chunk shorter than `pipe::PROBE` may be followed by a read rather than
    /// a splice (`splice_until_eof` says why that pays on plain TCP).
    fn read_after_short_chunk(&self) -> bool {
        true
    }
}

/// The socket a spliced direction writes.
pub trait SpliceSink {
    fn socket(&self) -> &TcpStream;

    /// Before one write of up to `len` bytes into [`Self::socket`]: an error if they may
    /// not go.
    fn admit(&self, len: usize) -> io::Result<()>;

    /// After one write of `len` bytes.
    fn wrote(&mut self, len: usize);

    /// After the source's EOF: ends the stream this way (FIN).
    async fn finish(&mut self) -> io::Result<()>;
}

/// A plain TCP socket: urgent data is read in line (`SO_OOBINLINE`, set at accept and
/// dial in `connection.rs`), else a read at the mark skips the urgent byte.
impl SpliceSource for &TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }

    fn classify(&self, result: io::Result<usize>) -> io::Result<Spliced> {
        let nothing = match &result {
            Ok(moved) => *moved == 0,
            Err(error) => error.kind() == io::ErrorKind::WouldBlock,
        };
        // splice(2) stops at TCP urgent data: at the mark it moves nothing (0, as at
        // EOF, once the peer closed too) while the socket stays readable. Off the mark,
        // nothing is nothing: EOF, or wait again.
        if nothing && at_urgent_mark(self)? {
            return Ok(Spliced::ReadInstead);
        }
        result.map(Spliced::Moved)
    }

    async fn read_chunk(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // try_read does not count against tokio's cooperative budget (the splice path's
        // async_io does): without this a source that always has data and a destination
        // that always takes it would never let the thread run anything else.
        tokio::task::consume_budget().await;
        match self.try_read(buf) {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => Ok(None),
            read => read.map(Some),
        }
    }
}

impl SpliceSink for &TcpStream {
    fn socket(&self) -> &TcpStream {
        self
    }

    fn admit(&self, _: usize) -> io::Result<()> {
        Ok(())
    }

    fn wrote(&mut self, _: usize) {}

    async fn finish(&mut self) -> io::Result<()> {
        socket2::SockRef::from(*self).shutdown(Shutdown::Write)
    }
}

/// Writes all of `bytes` to `sink`, as the sink admits and counts them.
pub async fn write_all(sink: &mut impl SpliceSink, bytes: &[u8]) -> io::Result<()> {
    let mut written = 0;
    while written < bytes.len() {
        let left = &bytes[written..];
        sink.admit(left.len())?;
        match sink.socket().try_write(left) {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                sink.socket().writable().await?;
            }
            n => {
                let n = n?;
                sink.wrote(n);
                written += n;
            }
        }
    }
    Ok(())
}

/// `ioctl` request asking whether a socket's next byte is the TCP urgent mark. Not in the
/// libc crate for Linux; this is the asm-generic value (x86, arm, riscv, among others;
/// alpha, mips, sh, sparc and xtensa use another).
const SIOCATMARK: libc::Ioctl = 0x8905;

/// Whether the next byte `socket` would read is the TCP urgent mark.
fn at_urgent_mark(socket: &TcpStream) -> io::Result<bool> {
    let mut at_mark: libc::c_int = 0;
    // SAFETY: SIOCATMARK writes one int through the pointer, which points to `at_mark`
    // and is valid for the whole call.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), SIOCATMARK, &mut at_mark) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(at_mark != 0)
}
