//! One proxied connection: accepted -> matched -> forwarded.

use std::{io, net::SocketAddr, os::fd::AsFd, sync::Arc, time::Duration};

use redirector_common::Redirect;
use tokio::net::{TcpSocket, TcpStream};

use super::{Refusal, Shared, splice::splice};
use crate::{
    backend::TlsMode,
    datapath::endpoint,
    table::{BackendId, Entry, LookupError},
};

/// How often, and how long apart, the record is looked for. The datapath writes it
/// before the client's handshake completes, so the first try nearly always finds it.
const RECORD_ATTEMPTS: u32 = 5;
const RECORD_RETRY: Duration = Duration::from_millis(2);

pub async fn handle(shared: Arc<Shared>, client: TcpStream, peer: SocketAddr) {
    let (entry, original) = match route(&shared, peer).await {
        Ok(routed) => routed,
        Err((reason, detail)) => {
            shared.stats.refused(reason);
            // A stray connect to the proxy port is routine noise; everything else is
            // something an operator can act on.
            if reason == Refusal::NoRecord {
                tracing::debug!(%peer, "closed: {detail}");
            } else {
                tracing::warn!(%peer, reason = reason.as_str(), "refused: {detail}");
            }
            return;
        }
    };
    let backend = &entry.backend.key;
    let limits = shared.limits;
    let mut upstream = match connect_upstream(&shared, original, limits.connect_timeout).await {
        Ok(upstream) => upstream,
        Err(error) => {
            shared.stats.refused(Refusal::UpstreamConnect);
            tracing::warn!(%peer, %backend, %original, %error, "cannot connect to the original destination");
            return;
        }
    };
    let _ = client.set_nodelay(true);
    shared.stats.forwarded();
    tracing::debug!(%peer, %backend, %original, "forwarding");
    let mut client = client;
    match splice(
        &mut client,
        &mut upstream,
        limits.buffer_size,
        limits.idle_timeout,
    )
    .await
    {
        Ok(moved) => tracing::debug!(
            %peer, %backend,
            sent = moved.client_to_upstream, received = moved.upstream_to_client,
            "connection finished"
        ),
        Err(error) => tracing::debug!(%peer, %backend, %error, "connection ended with an error"),
    }
}

type Refused = (Refusal, String);

/// Finds the Backend and original destination of the connection from `peer`.
async fn route(shared: &Shared, peer: SocketAddr) -> Result<(Arc<Entry>, SocketAddr), Refused> {
    let record = take_record(shared, peer).await?;
    let original = endpoint::to_socket_addr(&record.original);
    let entry = shared
        .table()
        .lookup(BackendId(record.backend_id), &record.original)
        .map_err(|error| match error {
            LookupError::Ambiguous { .. } => (Refusal::Ambiguous, error.to_string()),
            LookupError::Unknown(_) => (Refusal::UnknownBackend, error.to_string()),
        })?;
    if let Some(tls) = &entry.backend.tls
        && tls.mode != TlsMode::None
    {
        return Err((
            Refusal::TlsNotImplemented,
            format!(
                "Backend {} asks for TLS origination (spec.tls.mode {:?}), which this \
                 version does not implement; refusing rather than sending plaintext to {original}",
                entry.backend.key, tls.mode
            ),
        ));
    }
    Ok((entry, original))
}

async fn take_record(shared: &Shared, peer: SocketAddr) -> Result<Redirect, Refused> {
    for attempt in 1..=RECORD_ATTEMPTS {
        match shared.pending.take(peer) {
            Ok(Some(record)) => return Ok(record),
            Ok(None) if attempt < RECORD_ATTEMPTS => tokio::time::sleep(RECORD_RETRY).await,
            Ok(None) => break,
            Err(error) => return Err((Refusal::Datapath, format!("reading the record: {error}"))),
        }
    }
    Err((
        Refusal::NoRecord,
        "no datapath record: this connection was not redirected, and the proxy is not a relay"
            .to_owned(),
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
            format!("connect timed out after {timeout:?}"),
        )
    })?
}
