//! One proxied connection: accepted -> matched -> forwarded.
//!
//! The datapath's record names the Backend the client dialed (or the Backends sharing
//! that address). HTTP Backends go to [`super::http`], the rest to [`super::tcp`].

use std::{
    io,
    net::{IpAddr, SocketAddr},
    os::fd::AsFd,
    sync::Arc,
    time::Duration,
};

use redirector_common::Redirect;
use tokio::net::{TcpSocket, TcpStream};

use super::{Refusal, Shared, http, tcp};
use crate::{
    datapath::{AgentSockets, endpoint},
    table::{BackendId, Candidates},
};

/// How often, and how long apart, the record is looked for. The datapath writes it
/// before the client's handshake completes, so the first try nearly always finds it.
const RECORD_ATTEMPTS: u32 = 5;
const RECORD_RETRY: Duration = Duration::from_millis(2);

/// A refusal and what to say about it.
pub struct Refused {
    pub reason: Refusal,
    pub detail: String,
}

impl Refused {
    pub fn new(reason: Refusal, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
        }
    }
}

/// Where a redirected connection was going, and who may answer for that address.
pub struct Routed {
    pub candidates: Candidates,
    /// The address and port the client dialed.
    pub original: SocketAddr,
    /// Where to connect, tried in order: the original destination, or for a virtual
    /// address the hostname's real addresses on the same port.
    pub upstream: Arc<[SocketAddr]>,
    pub peer: SocketAddr,
}

impl Routed {
    /// The Backend's name when the address names one Backend, for per-connection
    /// metrics; `-` for a shared address (requests are counted by their own Backend).
    pub fn label(&self) -> String {
        match &*self.candidates {
            [only] => only.backend.key.to_string(),
            _ => "-".to_owned(),
        }
    }
}

/// Routes a connection, then serves it on the path its Backends ask for. Each path is
/// boxed: a task is as large as its future, which holds room for the largest path it
/// may take (the TCP one, 6.9 KiB), so an HTTP/1 connection paid for paths it never
/// took (`-Zprint-type-sizes`; memory per held connection is bench/load.md's).
pub async fn handle(shared: Arc<Shared>, client: TcpStream, peer: SocketAddr) {
    let routed = match route(&shared, peer).await {
        Ok(Route::Backends(routed)) => routed,
        Ok(Route::Passthrough(routed)) => {
            tune_client(&client);
            if let Err((_, refused)) = Box::pin(tcp::splice_to_dialed(
                &shared,
                &routed,
                client,
                Vec::new(),
                None,
            ))
            .await
            {
                report(&shared, &peer, Some(&routed.original), None, &refused);
            }
            return;
        }
        Err(refused) => {
            // A stray connect to the proxy port is routine noise; the rest is something
            // an operator can act on.
            if refused.reason == Refusal::NoRecord {
                shared.stats.refused(None, refused.reason);
                tracing::debug!(%peer, "closed: {}", refused.detail);
            } else {
                report(&shared, &peer, None, None, &refused);
            }
            return;
        }
    };
    tune_client(&client);
    if routed
        .candidates
        .iter()
        .all(|e| e.backend.protocol.is_http())
    {
        Box::pin(http::serve(shared, routed, client)).await;
    } else if let Err((backend, refused)) = Box::pin(tcp::forward(&shared, &routed, client)).await {
        report(
            &shared,
            &peer,
            Some(&routed.original),
            backend.as_deref(),
            &refused,
        );
    }
}

/// No Nagle delay, and a TCP urgent (MSG_OOB) byte read in line with the others so
/// every path passes it on (a plain read would skip it). Neither failing stops the
/// connection: both only refine how bytes move.
fn tune_client(client: &TcpStream) {
    let _ = client.set_nodelay(true);
    let _ = socket2::SockRef::from(client).set_out_of_band_inline(true);
}

/// Counts a refusal and logs it (rate-limited per reason).
pub fn report(
    shared: &Shared,
    peer: &SocketAddr,
    original: Option<&SocketAddr>,
    backend: Option<&str>,
    refused: &Refused,
) {
    shared.stats.refused(backend, refused.reason);
    let Some(suppressed) = shared.log_limit.allow(refused.reason.as_str()) else {
        return;
    };
    let reason = refused.reason.as_str();
    let backend = backend.unwrap_or("-");
    match original {
        Some(original) => tracing::warn!(
            %peer, %backend, %original, reason, suppressed, "refused: {}", refused.detail
        ),
        None => tracing::warn!(%peer, reason, suppressed, "refused: {}", refused.detail),
    }
}

/// What a connection is for.
enum Route {
    Backends(Routed),
    /// A port of a virtual address that no Backend declares: the bytes go to the
    /// hostname's real address unchanged, as they would without the agent.
    Passthrough(Routed),
}

/// Finds the Backends and original destination of the connection from `peer`.
async fn route(shared: &Shared, peer: SocketAddr) -> Result<Route, Refused> {
    let record = take_record(shared, peer).await?;
    let original = endpoint::to_socket_addr(&record.original);
    let table = shared.table();
    let id = BackendId(record.backend_id);
    let upstream = match table.virtual_host(original.ip()) {
        Some(host) if host.addresses.is_empty() => {
            return Err(Refused::new(
                Refusal::UnknownBackend,
                format!(
                    "{original} is the virtual address of {}, which has no resolved address yet",
                    host.hostname
                ),
            ));
        }
        // The family the client dialed first, then the other: a failed address is
        // followed by the next.
        Some(host) => {
            let (same, other): (Vec<IpAddr>, Vec<IpAddr>) =
                (host.addresses.iter()).partition(|ip| ip.is_ipv4() == original.is_ipv4());
            (same.into_iter().chain(other))
                .map(|ip| SocketAddr::new(ip, original.port()))
                .collect()
        }
        None => Arc::from([original]),
    };
    if id.is_passthrough() {
        return match table.passthrough(id) {
            Some(_) => Ok(Route::Passthrough(Routed {
                candidates: Arc::from([]),
                original,
                upstream,
                peer,
            })),
            None => Err(Refused::new(
                Refusal::UnknownBackend,
                format!("{original}: its hostname has no Backend any more and its hold ended"),
            )),
        };
    }
    let candidates = table
        .lookup(id)
        .map_err(|error| Refused::new(Refusal::UnknownBackend, error.to_string()))?;
    Ok(Route::Backends(Routed {
        candidates,
        original,
        upstream,
        peer,
    }))
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

/// Connects to the first of `to` that accepts (a hostname's addresses, in order).
pub async fn connect_any(
    agent_sockets: &AgentSockets,
    to: &[SocketAddr],
    timeout: Duration,
) -> io::Result<(TcpStream, SocketAddr)> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address to connect to");
    for (tried, address) in to.iter().enumerate() {
        match connect_upstream(agent_sockets, *address, timeout).await {
            Ok(stream) => return Ok((stream, *address)),
            Err(error) => {
                if tried + 1 < to.len() {
                    tracing::debug!(%address, %error, "upstream address failed; trying the next");
                }
                last = io::Error::new(error.kind(), format!("{address}: {error}"));
            }
        }
    }
    Err(last)
}

/// Connects to the original destination from a socket the datapath will not redirect.
pub async fn connect_upstream(
    agent_sockets: &AgentSockets,
    to: SocketAddr,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let socket = if to.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_nodelay(true)?;
    // A TCP urgent (MSG_OOB) byte in line, as for clients (`tune_client`).
    socket2::SockRef::from(&socket).set_out_of_band_inline(true)?;
    // Listed before connect() runs; the hook checks the list during the syscall.
    let exemption = agent_sockets.exempt(socket.as_fd())?;
    let connected = tokio::time::timeout(timeout, socket.connect(to)).await;
    drop(exemption);
    connected.map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("timed out after {timeout:?}"),
        )
    })?
}
