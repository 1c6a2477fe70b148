//! Dialing an upstream for HTTP: TCP to the dialed address from an exempt socket, then
//! TLS as the Backend says, with the ALPN its protocol asks for.

use std::{
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use http::Uri;
use hyper_util::{
    client::legacy::connect::{Connected, Connection},
    rt::TokioIo,
};
use rustls::ClientConfig;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};
use tokio_util::either::Either;

use super::{error::HttpError, metrics::BackendHttp};
use crate::{
    datapath::AgentSockets,
    proxy::{
        Shared,
        connection::connect_any,
        stats::Stats,
        tcp::{self, UpstreamTls},
    },
    tls::{H2, TlsOrigination},
};

/// Why an upstream connection could not be made.
#[derive(Debug, thiserror::Error)]
#[error("{detail}")]
pub struct DialError {
    pub kind: HttpError,
    pub detail: String,
}

/// Set on every response: how many requests its upstream connection has carried.
#[derive(Debug, Clone, Default)]
pub struct UpstreamConnection {
    requests: Arc<AtomicU64>,
}

impl UpstreamConnection {
    /// Counts a request; `true` if the connection had carried one before.
    pub fn reused(&self) -> bool {
        self.requests.fetch_add(1, Ordering::Relaxed) > 0
    }
}

/// Dials one upstream (Backend, address, TLS settings) for the pool.
#[derive(Clone)]
pub struct Dialer {
    /// Tried in order until one accepts.
    pub to: Arc<[SocketAddr]>,
    pub tls: Option<Arc<TlsOrigination>>,
    pub agent_sockets: Arc<AgentSockets>,
    pub connect_timeout: Duration,
    pub metrics: Arc<BackendHttp>,
    pub stats: Arc<Stats>,
}

impl Dialer {
    pub fn new(
        shared: &Shared,
        metrics: Arc<BackendHttp>,
        tls: Option<&Arc<TlsOrigination>>,
        to: Arc<[SocketAddr]>,
    ) -> Self {
        Self {
            to,
            tls: tls.cloned(),
            agent_sockets: shared.agent_sockets.clone(),
            connect_timeout: shared.limits.connect_timeout,
            metrics,
            stats: shared.stats.clone(),
        }
    }

    /// A connection with the Backend's ALPN offer, or `config` instead (upgrades).
    pub async fn dial(&self, config: Option<Arc<ClientConfig>>) -> Result<Upstream, DialError> {
        let started = std::time::Instant::now();
        let (tcp, to) = connect_any(&self.agent_sockets, &self.to, self.connect_timeout)
            .await
            .map_err(|error| DialError {
                kind: HttpError::UpstreamConnect,
                detail: format!("cannot connect to {error}"),
            })?;
        let upstream = match &self.tls {
            None => Upstream(Either::Left(tcp)),
            Some(tls) => {
                let config = config.unwrap_or_else(|| tls.config.clone());
                let stream = tcp::handshake_with(tls, config, tcp, self.connect_timeout, false)
                    .await
                    .map_err(|refused| DialError {
                        kind: HttpError::UpstreamHandshake,
                        detail: format!("{to}: {}", refused.detail),
                    })?;
                Upstream(Either::Right(Box::new(stream)))
            }
        };
        self.stats.connected(&self.metrics.name, started.elapsed());
        self.metrics.opened();
        Ok(upstream)
    }
}

impl tower_service::Service<Uri> for Dialer {
    type Response = TokioIo<Upstream>;
    type Error = DialError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, DialError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), DialError>> {
        Poll::Ready(Ok(()))
    }

    /// The URI names the Backend's host for the request line; the address to dial is
    /// this pool's, whatever the URI says.
    fn call(&mut self, _: Uri) -> Self::Future {
        let dialer = self.clone();
        Box::pin(async move { dialer.dial(None).await.map(TokioIo::new) })
    }
}

/// An upstream connection, plain or TLS; what hyper's client is told about it.
pub struct Upstream(Either<TcpStream, Box<UpstreamTls>>);

impl Connection for Upstream {
    fn connected(&self) -> Connected {
        let connected = Connected::new().extra(UpstreamConnection::default());
        match &self.0 {
            Either::Right(tls) if tls.get_ref().1.alpn_protocol() == Some(H2) => {
                connected.negotiated_h2()
            }
            _ => connected,
        }
    }
}

impl AsyncRead for Upstream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Upstream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
