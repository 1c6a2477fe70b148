//! The two sides of a [`KernelTlsStream`](super::KernelTlsStream) as ends of a spliced
//! relay: the kernel opens and seals the records as splice(2) moves the bytes, so they
//! never enter userspace. What splice(2) cannot do is done here: a record that is not
//! application data (splice(2) refuses it with EINVAL, and an empty data record reads
//! as 0, like EOF) is read with recvmsg(2), which names its type; writes are counted
//! against the key's record limit; the FIN follows a close_notify.

use std::{future::poll_fn, io};

use tokio::{io::ReadBuf, net::TcpStream};

use super::stream::{KernelTlsRead, KernelTlsWrite};
use crate::proxy::relay::{SpliceSink, SpliceSource, Spliced};

impl SpliceSource for KernelTlsRead<'_> {
    fn socket(&self) -> &TcpStream {
        self.socket
    }

    fn judge(&self, result: io::Result<usize>) -> io::Result<Spliced> {
        match result {
            // An empty data record, or the end: recvmsg(2) tells which.
            Ok(0) => Ok(Spliced::ReadInstead),
            Ok(moved) => Ok(Spliced::Moved(moved)),
            // A record of another type, which the kernel keeps for the next read.
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) => Ok(Spliced::ReadInstead),
            Err(error) => Err(error),
        }
    }

    async fn read_chunk(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let mut out = ReadBuf::new(buf);
        poll_fn(|cx| self.reading.poll_read(self.socket, cx, &mut out)).await?;
        Ok(Some(out.filled().len()))
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
