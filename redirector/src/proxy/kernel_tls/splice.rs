//! The two sides of a [`KernelTlsStream`](super::KernelTlsStream) as ends of a spliced
//! relay: the kernel opens and seals the records as splice(2) moves the bytes, so they
//! never enter userspace. What splice(2) cannot do is done here: a record that is not
//! application data (splice(2) refuses it with EINVAL, and an empty data record reads
//! as 0, like EOF) is read with recvmsg(2), which names its type; writes are counted
//! against the key's record limit; the FIN follows a close_notify.

use std::{future::poll_fn, io};

use tokio::{io::ReadBuf, net::TcpStream};

use super::stream::{KernelTlsRead, KernelTlsWrite};
use crate::proxy::relay::{DEFAULT_PIPE_SIZE, SpliceSink, SpliceSource, Spliced};

impl SpliceSource for KernelTlsRead<'_> {
    fn socket(&self) -> &TcpStream {
        self.socket
    }

    fn classify(&self, result: io::Result<usize>) -> io::Result<Spliced> {
        match result {
            // An empty data record, or the end (with or without close_notify before
            // it): recvmsg(2) tells which.
            Ok(0) => Ok(Spliced::ReadInstead),
            Ok(moved) => Ok(Spliced::Moved(moved)),
            // A record of another type, which the kernel keeps for the next read.
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) => Ok(Spliced::ReadInstead),
            Err(error) => Err(error),
        }
    }

    /// Without waiting: a connection whose server says nothing more after its session
    /// tickets holds no buffer.
    async fn read_chunk(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // recvmsg(2) through try_io does not count against tokio's cooperative budget.
        tokio::task::consume_budget().await;
        let mut out = ReadBuf::new(buf);
        let read = self.reading.try_read(self.socket, &mut out)?;
        Ok(read.map(|()| out.filled().len()))
    }

    fn pipe_needed(&self) -> usize {
        // The kernel moves a record into the pipe and frees it even when the pipe took
        // only part of it (tls_sw_splice_read checks what it asked, not what moved). A
        // decrypted record is at most 16 KiB in at most 5 pages, and a pipe is given 16
        // buffers unless its user is over `pipe-user-pages-soft` (then 2): only a pipe
        // of the default size is used, else the record is read instead.
        DEFAULT_PIPE_SIZE
    }

    fn read_after_short_chunk(&self) -> bool {
        // No ioctl to save: an empty splice out of a kernel TLS socket is EAGAIN and
        // nothing more. And a read into a small buffer would leave the rest of a longer
        // record decrypted in the kernel for the splice after it, a path this relay
        // otherwise takes only after a record that is not data: whole records, as before.
        false
    }
}

impl SpliceSink for KernelTlsWrite<'_> {
    fn socket(&self) -> &TcpStream {
        self.socket
    }

    fn admit(&self, len: usize) -> io::Result<()> {
        self.writing.admit(len)
    }

    fn wrote(&mut self, len: usize) {
        self.writing.wrote(len);
    }

    async fn finish(&mut self) -> io::Result<()> {
        poll_fn(|cx| self.writing.poll_shutdown(self.socket, cx)).await
    }
}
