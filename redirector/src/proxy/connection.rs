//! One proxied connection: accepted -> matched -> forwarded.

use std::{io, net::SocketAddr, os::fd::AsFd, sync::Arc, time::Duration};

use redirector_common::Redirect;
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;

use super::{Refusal, Shared, splice::splice};
use crate::{
    datapath::endpoint,
    table::{BackendId, Entry, LookupError},
    tls::{
        HandshakeFailure, TlsOrigination,
        sniff::{self, FirstBytesGuard, OpeningRule},
    },
};

/// How often, and how long apart, the record is looked for. The datapath writes it
/// before the client's handshake completes, so the first try nearly always finds it.
const RECORD_ATTEMPTS: u32 = 5;
const RECORD_RETRY: Duration = Duration::from_millis(2);
/// How long a failed TLS connection is given to reveal a queued alert.
const ALERT_WAIT: Duration = Duration::from_millis(100);

/// A refusal and what to say about it.
struct Refused {
    reason: Refusal,
    detail: String,
}

impl Refused {
    fn new(reason: Refusal, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
        }
    }
}

pub async fn handle(shared: Arc<Shared>, client: TcpStream, peer: SocketAddr) {
    let (entry, original) = match route(&shared, peer).await {
        Ok(routed) => routed,
        Err(refused) => {
            shared.stats.refused(None, refused.reason);
            // A stray connect to the proxy port is routine noise; the rest is something
            // an operator can act on.
            if refused.reason == Refusal::NoRecord {
                tracing::debug!(%peer, "closed: {}", refused.detail);
            } else if let Some(suppressed) = shared.log_limit.allow(refused.reason.as_str()) {
                tracing::warn!(%peer, reason = refused.reason.as_str(), suppressed, "refused: {}", refused.detail);
            }
            return;
        }
    };
    let backend = entry.backend.key.to_string();
    if let Err(refused) = forward(&shared, &entry, client, original).await {
        shared.stats.refused(Some(&backend), refused.reason);
        if let Some(suppressed) = shared.log_limit.allow(refused.reason.as_str()) {
            tracing::warn!(
                %peer, %backend, %original, reason = refused.reason.as_str(), suppressed,
                "refused: {}", refused.detail
            );
        }
    }
}

/// Connects to the original destination as the Backend says and copies both ways.
async fn forward(
    shared: &Shared,
    entry: &Entry,
    client: TcpStream,
    original: SocketAddr,
) -> Result<(), Refused> {
    let limits = shared.limits;
    let backend = &entry.backend;
    let origination = match &entry.origination {
        Ok(origination) => origination.clone(),
        Err(error) => {
            return Err(Refused::new(
                Refusal::TlsConfig,
                format!("Backend {} has unusable TLS settings: {error}", backend.key),
            ));
        }
    };
    let connecting = std::time::Instant::now();
    let upstream = connect_upstream(shared, original, limits.connect_timeout)
        .await
        .map_err(|error| {
            Refused::new(Refusal::UpstreamConnect, format!("cannot connect: {error}"))
        })?;
    let _ = client.set_nodelay(true);
    let key = backend.key.to_string();
    let active = shared.stats.active_guard(&key);
    let (moved, result) = match origination {
        None => {
            shared.stats.connected(&key, connecting.elapsed());
            let mut client =
                FirstBytesGuard::new(client, OpeningRule::SniMustBe(backend.hostname.clone()));
            let mut upstream = upstream;
            splice(
                &mut client,
                &mut upstream,
                limits.buffer_size,
                limits.idle_timeout,
            )
            .await
        }
        Some(tls) => {
            let mut upstream = handshake(&tls, upstream, limits.connect_timeout).await?;
            shared.stats.connected(&key, connecting.elapsed());
            let mut client = FirstBytesGuard::new(client, OpeningRule::Plaintext);
            let (moved, result) = splice(
                &mut client,
                &mut upstream,
                limits.buffer_size,
                limits.idle_timeout,
            )
            .await;
            let result = match result {
                Err(error) if sniff::refusal(&error).is_none() => {
                    Err(pending_alert(&mut upstream).await.unwrap_or(error))
                }
                other => other,
            };
            (moved, result)
        }
    };
    drop(active);
    shared
        .stats
        .transferred(&key, moved.client_to_upstream, moved.upstream_to_client);
    match result {
        Ok(()) => {
            shared.stats.forwarded(&key);
            tracing::debug!(%key, sent = moved.client_to_upstream, received = moved.upstream_to_client, "finished");
            Ok(())
        }
        Err(error) => match (sniff::refusal(&error), HandshakeFailure::classify(&error)) {
            (Some(refused), _) => Err(Refused::new(Refusal::ClientOpening, refused.to_string())),
            (None, HandshakeFailure::RejectedByServer) => Err(Refused::new(
                Refusal::Handshake(HandshakeFailure::RejectedByServer),
                format!("the server rejected the handshake (client certificate?): {error}"),
            )),
            (None, _) => {
                shared.stats.forwarded(&key);
                tracing::debug!(%key, %error, "connection ended with an error");
                Ok(())
            }
        },
    }
}

/// With TLS 1.3 the server judges our client certificate after our side of the handshake
/// is done: its refusal is an alert queued behind whatever broke the splice (typically
/// a reset when we wrote). Read once more so rustls surfaces that alert.
async fn pending_alert(
    upstream: &mut tokio_rustls::client::TlsStream<TcpStream>,
) -> Option<io::Error> {
    use tokio::io::AsyncReadExt;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(ALERT_WAIT, upstream.read(&mut byte)).await {
        Ok(Err(error))
            if HandshakeFailure::classify(&error) == HandshakeFailure::RejectedByServer =>
        {
            Some(error)
        }
        _ => None,
    }
}

/// The TLS handshake with the upstream. Nothing from the client has been read yet, so
/// no plaintext can reach the network before it completes.
async fn handshake(
    tls: &TlsOrigination,
    tcp: TcpStream,
    timeout: Duration,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Refused> {
    let connector = TlsConnector::from(tls.config.clone());
    let handshake = connector.connect(tls.server_name.clone(), tcp);
    match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(error)) => {
            let failure = HandshakeFailure::classify(&error);
            Err(Refused::new(
                Refusal::Handshake(failure),
                format!(
                    "TLS handshake with SNI {:?} failed ({}): {error}",
                    server_name(tls),
                    failure.as_str()
                ),
            ))
        }
        Err(_) => Err(Refused::new(
            Refusal::Handshake(HandshakeFailure::Other),
            format!("TLS handshake timed out after {timeout:?}"),
        )),
    }
}

fn server_name(tls: &TlsOrigination) -> String {
    tls.server_name.to_str().into_owned()
}

/// Finds the Backend and original destination of the connection from `peer`.
async fn route(shared: &Shared, peer: SocketAddr) -> Result<(Arc<Entry>, SocketAddr), Refused> {
    let record = take_record(shared, peer).await?;
    let original = endpoint::to_socket_addr(&record.original);
    let entry = shared
        .table()
        .lookup(BackendId(record.backend_id), &record.original)
        .map_err(|error| match error {
            LookupError::Ambiguous { .. } => Refused::new(Refusal::Ambiguous, error.to_string()),
            LookupError::Unknown(_) => Refused::new(Refusal::UnknownBackend, error.to_string()),
        })?;
    Ok((entry, original))
}

async fn take_record(shared: &Shared, peer: SocketAddr) -> Result<Redirect, Refused> {
    for attempt in 1..=RECORD_ATTEMPTS {
        match shared.pending.take(peer) {
            Ok(Some(record)) => return Ok(record),
            Ok(None) if attempt < RECORD_ATTEMPTS => tokio::time::sleep(RECORD_RETRY).await,
            Ok(None) => break,
            Err(error) => {
                return Err(Refused::new(
                    Refusal::Datapath,
                    format!("reading the record: {error}"),
                ));
            }
        }
    }
    Err(Refused::new(
        Refusal::NoRecord,
        "no datapath record: this connection was not redirected, and the proxy is not a relay",
    ))
}

/// Connects to the original destination from a socket the datapath will not redirect.
async fn connect_upstream(
    shared: &Shared,
    to: SocketAddr,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let socket = if to.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_nodelay(true)?;
    // Listed before connect() runs; the hook checks the list during the syscall.
    let exemption = shared.agent_sockets.exempt(socket.as_fd())?;
    let connected = tokio::time::timeout(timeout, socket.connect(to)).await;
    drop(exemption);
    connected.map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("timed out after {timeout:?}"),
        )
    })?
}
