//! Dialing an upstream for HTTP: TCP to the dialed address from an exempt socket, then
//! TLS as the Backend says, with the ALPN its protocol asks for, its keys handed to the
//! kernel where `--kernel-tls` can (`kernel_tls.rs`).

use std::{
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use http::{Uri, Version};
use hyper_util::{
    client::legacy::connect::{CaptureConnection, Connected, Connection},
    rt::TokioIo,
};
use rustls::ClientConfig;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    time::Instant,
};

use super::{error::HttpError, inline, metrics::BackendHttp, pool::UpstreamSpeaks};
use crate::{
    datapath::AgentSockets,
    proxy::{
        Shared,
        connection::connect_any,
        kernel_tls::{KernelTls, KernelTlsStream, Offload},
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

/// Set on every response: how many requests its upstream connection has carried, and
/// whether it should carry no more (kernel TLS near its record limit).
#[derive(Debug, Clone, Default)]
pub struct UpstreamConnection {
    requests: Arc<AtomicU64>,
    retiring: Option<Arc<AtomicBool>>,
}

impl UpstreamConnection {
    /// Counts a request; `true` if the connection had carried one before.
    pub fn reused(&self) -> bool {
        self.requests.fetch_add(1, Ordering::Relaxed) > 0
    }

    /// `true` once the connection asks to be lent no more (it stays open for the
    /// requests it carries).
    pub fn retiring(&self) -> bool {
        (self.retiring.as_ref()).is_some_and(|retiring| retiring.load(Ordering::Relaxed))
    }

    /// Keeps the pool from lending the connection again once it asks to be retired;
    /// `captured` is the request's `capture_connection`. `true` if it was retired.
    pub fn retire_if_asked(&self, captured: &CaptureConnection) -> bool {
        match &*captured.connection_metadata() {
            Some(connected) if self.retiring() => {
                connected.poison();
                true
            }
            _ => false,
        }
    }

    /// What became of a request on its way upstream (`captured`: the connection it was
    /// lent), for a message: no connection yet (still dialing), a new one, or one that
    /// had answered requests before.
    pub fn describe(captured: &CaptureConnection) -> String {
        let answered = (*captured.connection_metadata()).as_ref().map(|connected| {
            let mut extensions = http::Extensions::new();
            connected.get_extras(&mut extensions);
            (extensions.get::<Self>()).map_or(0, |c| c.requests.load(Ordering::Relaxed))
        });
        Self::describe_answered(answered.unwrap_or(inline::DIALING))
    }

    /// The same, from the responses the connection had carried (`inline::DIALING`: no
    /// connection yet).
    pub fn describe_answered(answered: u64) -> String {
        match answered {
            inline::DIALING => "was still waiting for an upstream connection".to_owned(),
            0 => "went on a new upstream connection".to_owned(),
            n => format!("went on a reused upstream connection (earlier responses on it: {n})"),
        }
    }

    #[cfg(test)]
    pub fn retired() -> Self {
        let retiring = Some(Arc::new(AtomicBool::new(true)));
        Self {
            retiring,
            ..Self::default()
        }
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
    pub kernel_tls: Arc<KernelTls>,
    /// New connections the inline path handed over, for the pool's next dials.
    handed: Arc<HandedOver>,
    /// The pool's account of what its upstream speaks, told by each dial's ALPN.
    speaks: Option<Arc<UpstreamSpeaks>>,
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
            kernel_tls: shared.kernel_tls.clone(),
            handed: Arc::default(),
            speaks: None,
        }
    }

    /// The same, telling `speaks` what the server chose in ALPN on every dial with the
    /// Backend's offer (the pool's dialer).
    pub fn telling(self, speaks: Arc<UpstreamSpeaks>) -> Self {
        Self {
            speaks: Some(speaks),
            ..self
        }
    }

    /// Keeps `upstream`, new, on which the server chose h2, for the pool's next dial:
    /// the request it was dialed for goes to the pool next (`inline.rs`). One the pool
    /// does not take (it had an h2 connection to share, or to wait for, by then) is
    /// closed after [`HANDED_OVER_FOR`].
    pub fn hand_over(&self, upstream: Upstream) {
        self.handed.keep(upstream);
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
            None => Upstream::Plain(tcp),
            Some(tls) => {
                // Only the Backend's own offer tells what the server speaks.
                let speaks = self.speaks.as_ref().filter(|_| config.is_none());
                let config = config.unwrap_or_else(|| tls.config.clone());
                let bounded = self.kernel_tls.enabled();
                let stream = tcp::handshake_with(tls, config, tcp, self.connect_timeout, bounded)
                    .await
                    .map_err(|refused| DialError {
                        kind: HttpError::UpstreamHandshake,
                        detail: format!("{to}: {}", refused.detail),
                    })?;
                let h2 = stream.get_ref().1.alpn_protocol() == Some(H2);
                if let Some(speaks) = speaks {
                    speaks.learn(if h2 {
                        Version::HTTP_2
                    } else {
                        Version::HTTP_11
                    });
                }
                match self.kernel_tls.offload(stream) {
                    Ok(Offload::Kernel(stream)) => {
                        self.stats.kernel_tls_connection();
                        Upstream::Kernel(Box::new(stream), h2)
                    }
                    Ok(Offload::Rustls(stream)) => Upstream::Tls(Box::new(stream)),
                    Err(error) => {
                        return Err(DialError {
                            kind: HttpError::UpstreamHandshake,
                            detail: format!("{to}: {error}"),
                        });
                    }
                }
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
        if let Some(upstream) = self.handed.take() {
            return Box::pin(std::future::ready(Ok(TokioIo::new(upstream))));
        }
        let dialer = self.clone();
        Box::pin(async move { dialer.dial(None).await.map(TokioIo::new) })
    }
}

/// How long a connection handed over to the pool waits for a dial to take it. A pool
/// with no connection to share dials in the same poll in which it is given the request,
/// so a second is plenty, and short next to any server's wait for a client's first
/// bytes.
const HANDED_OVER_FOR: Duration = Duration::from_secs(1);

/// A pool's connections handed over by the inline path, newest last.
#[derive(Default)]
struct HandedOver(Mutex<Vec<(Instant, Upstream)>>);

impl HandedOver {
    fn list(&self) -> std::sync::MutexGuard<'_, Vec<(Instant, Upstream)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `upstream` for [`HANDED_OVER_FOR`].
    fn keep(self: &Arc<Self>, upstream: Upstream) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Outside the runtime (it is shutting down): nothing to keep it for.
            return;
        };
        self.list().push((Instant::now(), upstream));
        let handed = Arc::downgrade(self);
        runtime.spawn(async move {
            tokio::time::sleep(HANDED_OVER_FOR).await;
            if let Some(handed) = handed.upgrade() {
                handed.expire();
            }
        });
    }

    /// Closes those kept for [`HANDED_OVER_FOR`].
    fn expire(&self) {
        self.list()
            .retain(|(since, _)| since.elapsed() < HANDED_OVER_FOR);
    }

    /// The newest one handed over less than [`HANDED_OVER_FOR`] ago; older ones close.
    fn take(&self) -> Option<Upstream> {
        self.expire();
        self.list().pop().map(|(_, upstream)| upstream)
    }
}

/// An upstream connection, plain or TLS (in rustls, or in the kernel with whether ALPN
/// chose HTTP/2); what hyper's client is told about it.
pub enum Upstream {
    Plain(TcpStream),
    Tls(Box<UpstreamTls>),
    Kernel(Box<KernelTlsStream>, bool),
}

impl Upstream {
    /// Whether the server chose HTTP/2 in ALPN.
    pub fn is_h2(&self) -> bool {
        match self {
            Upstream::Plain(_) => false,
            Upstream::Tls(tls) => tls.get_ref().1.alpn_protocol() == Some(H2),
            Upstream::Kernel(_, h2) => *h2,
        }
    }

    /// Set once the connection asks to be lent no more (kernel TLS near its record
    /// limit); `None` where it never will.
    pub fn retiring(&self) -> Option<Arc<AtomicBool>> {
        match self {
            Upstream::Kernel(kernel, _) => Some(kernel.retiring()),
            Upstream::Plain(_) | Upstream::Tls(_) => None,
        }
    }
}

impl Connection for Upstream {
    fn connected(&self) -> Connected {
        let connection = UpstreamConnection {
            retiring: self.retiring(),
            ..UpstreamConnection::default()
        };
        let connected = Connected::new().extra(connection);
        if self.is_h2() {
            connected.negotiated_h2()
        } else {
            connected
        }
    }
}

/// `$call` on whichever stream `$upstream` holds, as `Pin<&mut _>` named `$io`.
macro_rules! each {
    ($upstream:expr, $io:ident => $call:expr) => {
        match &mut *$upstream {
            Upstream::Plain(stream) => {
                let $io = Pin::new(stream);
                $call
            }
            Upstream::Tls(stream) => {
                let $io = Pin::new(&mut **stream);
                $call
            }
            Upstream::Kernel(stream, _) => {
                let $io = Pin::new(&mut **stream);
                $call
            }
        }
    };
}

impl AsyncRead for Upstream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        each!(self, io => io.poll_read(cx, buf))
    }
}

impl AsyncWrite for Upstream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        each!(self, io => io.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        each!(self, io => io.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Upstream::Plain(stream) => stream.is_write_vectored(),
            Upstream::Tls(stream) => stream.is_write_vectored(),
            Upstream::Kernel(stream, _) => stream.is_write_vectored(),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, io => io.poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, io => io.poll_shutdown(cx))
    }
}

#[cfg(test)]
mod tests;
