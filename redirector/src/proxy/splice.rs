//! Copies bytes both ways between the client and the upstream.
//!
//! tokio's `copy_bidirectional_with_sizes` already does half-close right (EOF on one
//! side shuts down writing on the other, the other direction goes on) with bounded
//! buffers; this adds the idle timeout it lacks.

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::Instant,
};

/// Bytes copied each way.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Transferred {
    pub client_to_upstream: u64,
    pub upstream_to_client: u64,
}

/// Runs until both directions reached EOF, an I/O error, or `idle` passed with no byte
/// read from either side. The byte counts are right also when it ends with an error.
pub async fn splice<C, U>(
    client: &mut C,
    upstream: &mut U,
    buffer_size: usize,
    idle: Duration,
) -> (Transferred, io::Result<()>)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let clock = Activity::new();
    let from_client = Arc::new(AtomicU64::new(0));
    let from_upstream = Arc::new(AtomicU64::new(0));
    let mut client = Watched {
        inner: client,
        activity: clock.clone(),
        read: from_client.clone(),
    };
    let mut upstream = Watched {
        inner: upstream,
        activity: clock.clone(),
        read: from_upstream.clone(),
    };
    let copy = tokio::io::copy_bidirectional_with_sizes(
        &mut client,
        &mut upstream,
        buffer_size,
        buffer_size,
    );
    let result = tokio::select! {
        result = copy => result.map(|_| ()),
        () = clock.idle_for(idle) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no bytes in either direction for {idle:?}"),
        )),
    };
    let transferred = Transferred {
        client_to_upstream: from_client.load(Ordering::Relaxed),
        upstream_to_client: from_upstream.load(Ordering::Relaxed),
    };
    (transferred, result)
}

/// Time of the last successful read, in milliseconds since `start`.
#[derive(Clone)]
struct Activity {
    start: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }

    /// Completes once `idle` has passed since the last activity.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A stream that records read activity and counts the bytes read from it.
struct Watched<'a, S> {
    inner: &'a mut S,
    activity: Activity,
    read: Arc<AtomicU64>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut *self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if matches!(poll, Poll::Ready(Ok(()))) && read > 0 {
            self.activity.touch();
            self.read.fetch_add(read as u64, Ordering::Relaxed);
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    #[tokio::test]
    async fn half_close_keeps_the_other_direction_open() {
        let (mut client_app, mut client_side) = duplex(64);
        let (mut upstream_side, mut server_app) = duplex(64);
        let proxy = tokio::spawn(async move {
            splice(
                &mut client_side,
                &mut upstream_side,
                16,
                Duration::from_secs(5),
            )
            .await
        });
        client_app.write_all(b"request").await.unwrap();
        client_app.shutdown().await.unwrap();
        let mut got = Vec::new();
        server_app.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"request");
        // The client finished writing, but the answer still gets through.
        server_app.write_all(b"answer after EOF").await.unwrap();
        server_app.shutdown().await.unwrap();
        let mut answer = Vec::new();
        client_app.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"answer after EOF");
        let (transferred, result) = proxy.await.unwrap();
        result.unwrap();
        assert_eq!(transferred.client_to_upstream, 7);
        assert_eq!(transferred.upstream_to_client, 16);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_time_out() {
        let (_client_app, mut client_side) = duplex(64);
        let (mut upstream_side, _server_app) = duplex(64);
        let (transferred, result) = splice(
            &mut client_side,
            &mut upstream_side,
            16,
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert_eq!(transferred, Transferred::default());
    }
}
