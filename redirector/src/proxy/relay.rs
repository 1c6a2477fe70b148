//! Copies bytes both ways between the client and the upstream.
//!
//! Half-close is kept (EOF on one side shuts down writing on the other, the other
//! direction goes on), and an idle timer closes a connection with no bytes read either
//! way for `--idle-timeout`. Two ways to move the bytes:
//! - [`relay`], for any two streams (TLS on either side): each direction copies through
//!   a buffer that grows with the traffic and is given back while idle (`buffered.rs`).
//! - [`relay_tcp`], for a plain TCP client and a plain TCP upstream (Backends that
//!   originate no TLS, passthrough): once the client's opening is judged, splice(2)
//!   moves the bytes inside the kernel, through pipes lent per chunk (`pipe.rs`).
//!   [`relay_spliced`] does the same towards an upstream whose TLS the kernel seals
//!   and opens (`--kernel-tls`).

mod buffered;
mod ends;
mod pipe;

use std::{
    future::poll_fn,
    io,
    pin::pin,
    sync::atomic::{AtomicU64, Ordering},
    task::Poll,
    time::Duration,
};

use tokio::{
    io::{AsyncBufRead, AsyncRead, AsyncReadExt, AsyncWrite},
    net::{TcpStream, tcp::ReadHalf},
};

use self::buffered::{Buffered, Direction, FromReaderBuffer};
pub use self::{
    ends::{SpliceSink, SpliceSource, Spliced},
    pipe::{DEFAULT_PIPE_SIZE, Pipes},
};
use super::{activity::Activity, polled_on_wake::PolledOnWake};
use crate::tls::sniff::FirstBytesGuard;

/// Bytes copied each way.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Transferred {
    pub client_to_upstream: u64,
    pub upstream_to_client: u64,
}

/// Byte counts as the directions move them, readable when the relay is cut short.
#[derive(Debug, Default)]
struct Counts {
    client_to_upstream: AtomicU64,
    upstream_to_client: AtomicU64,
}

impl Counts {
    fn get(&self) -> Transferred {
        Transferred {
            client_to_upstream: self.client_to_upstream.load(Ordering::Relaxed),
            upstream_to_client: self.upstream_to_client.load(Ordering::Relaxed),
        }
    }
}

/// Runs until both directions reached EOF, an I/O error, or `idle` passed with no byte
/// read from either side. The byte counts cover what moved until the end, also when it
/// ends with an error (a buffered direction counts a read not yet written).
pub async fn relay<C, U>(
    client: &mut C,
    upstream: &mut U,
    buffer_size: usize,
    idle: Duration,
) -> (Transferred, io::Result<()>)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (up, down) = (Buffered::new(buffer_size), Buffered::new(buffer_size));
    both_ways(client, upstream, up, down, idle).await
}

/// The most plaintext a TLS record carries (RFC 8446 5.1): rustls hands out one record's
/// plaintext at a time, and a sender that fills its records is streaming.
const TLS_RECORD_PLAINTEXT: usize = 16 * 1024;

/// [`relay`] where the upstream keeps its own read buffer (TLS): the end of each thing
/// the upstream wrote goes to the client from there; a stream of whole records is
/// gathered into large writes (`buffered.rs`).
pub async fn relay_tls<C, U>(
    client: &mut C,
    upstream: &mut U,
    buffer_size: usize,
    idle: Duration,
) -> (Transferred, io::Result<()>)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncBufRead + AsyncWrite + Unpin,
{
    let down = FromReaderBuffer::new(TLS_RECORD_PLAINTEXT, buffer_size);
    let (up, down) = (Buffered::new(buffer_size), down);
    both_ways(client, upstream, up, down, idle).await
}

async fn both_ways<C, U>(
    client: &mut C,
    upstream: &mut U,
    mut up: impl Direction<C, U>,
    mut down: impl Direction<U, C>,
    idle: Duration,
) -> (Transferred, io::Result<()>)
where
    C: Unpin,
    U: Unpin,
{
    let counts = Counts::default();
    let activity = Activity::new();
    let copy = poll_fn(|cx| {
        let client_to_upstream = &counts.client_to_upstream;
        let up = up.poll_copy(
            cx,
            &mut *client,
            &mut *upstream,
            client_to_upstream,
            &activity,
        )?;
        let upstream_to_client = &counts.upstream_to_client;
        let down = down.poll_copy(
            cx,
            &mut *upstream,
            &mut *client,
            upstream_to_client,
            &activity,
        )?;
        match (up, down) {
            (Poll::Ready(()), Poll::Ready(())) => Poll::Ready(Ok(())),
            _ => Poll::Pending,
        }
    });
    let result = until_idle(copy, &activity, idle).await;
    (counts.get(), result)
}

/// [`relay`] for a plain TCP client (its opening read through `client`, the guard that
/// judges and replays it) and a plain TCP upstream: after the opening, splice(2)
/// through pipes lent by `pipes`.
pub async fn relay_tcp(
    client: &mut FirstBytesGuard<ReadHalf<'_>>,
    client_write: &TcpStream,
    upstream: &TcpStream,
    pipes: &Pipes,
    buffer_size: usize,
    idle: Duration,
) -> (Transferred, io::Result<()>) {
    let limits = (pipes, buffer_size, idle);
    relay_spliced(client, client_write, upstream, upstream, limits).await
}

/// [`relay_tcp`] towards any upstream that splice(2) can read and write (`ends.rs`):
/// plain TCP, or TCP with kernel TLS. `limits`: the pipes, the size of a chunk that
/// goes through a buffer, the idle timeout.
pub async fn relay_spliced(
    client: &mut FirstBytesGuard<ReadHalf<'_>>,
    client_write: &TcpStream,
    upstream_read: impl SpliceSource,
    mut upstream_write: impl SpliceSink,
    (pipes, buffer_size, idle): (&Pipes, usize, Duration),
) -> (Transferred, io::Result<()>) {
    let counts = Counts::default();
    let activity = Activity::new();
    let to_upstream = async {
        let (moved, activity) = (&counts.client_to_upstream, &activity);
        if opening(client, &mut upstream_write, moved, activity).await? {
            return Ok(());
        }
        let from = client.get_ref().as_ref();
        pipe::splice_until_eof(from, upstream_write, pipes, buffer_size, moved, activity).await
    };
    let to_client = pipe::splice_until_eof(
        upstream_read,
        client_write,
        pipes,
        buffer_size,
        &counts.upstream_to_client,
        &activity,
    );
    let copy = async { tokio::try_join!(to_upstream, to_client).map(|_| ()) };
    let result = until_idle(copy, &activity, idle).await;
    (counts.get(), result)
}

/// Copies the client's opening (held by the guard until judged, then replayed) to the
/// upstream; `true` if the client closed before it was through.
async fn opening(
    client: &mut FirstBytesGuard<ReadHalf<'_>>,
    upstream: &mut impl SpliceSink,
    moved: &AtomicU64,
    activity: &Activity,
) -> io::Result<bool> {
    let mut chunk = vec![0u8; buffered::INITIAL_SIZE];
    while !client.is_passing() {
        let read = client.read(&mut chunk).await?;
        if read == 0 {
            upstream.finish().await?;
            return Ok(true);
        }
        moved.fetch_add(read as u64, Ordering::Relaxed);
        activity.touch();
        ends::write_all(upstream, &chunk[..read]).await?;
    }
    Ok(false)
}

/// Runs `copy` unless `idle` passes with no byte read first.
async fn until_idle(
    copy: impl Future<Output = io::Result<()>>,
    activity: &Activity,
    idle: Duration,
) -> io::Result<()> {
    // The timer is polled only when it fires, not at every read and write of `copy`.
    let idle_for = pin!(activity.idle_for(idle));
    tokio::select! {
        biased;
        () = PolledOnWake::new(idle_for) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no bytes in either direction for {idle:?}"),
        )),
        result = copy => result,
    }
}

#[cfg(test)]
mod tests;
