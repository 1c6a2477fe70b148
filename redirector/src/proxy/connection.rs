//! One proxied connection: accepted -> matched -> forwarded.
//!
//! The datapath's record names the Backend the client dialed (or the Backends sharing
//! that address). HTTP Backends go to [`super::http`], the rest to [`super::tcp`].

use std::{
    io,
    net::{IpAddr, SocketAddr},
    os::fd::AsFd,
    sync::Arc,
    time::{Duration, Instant},
};

use redirector_common::Redirect;
use tokio::net::{TcpSocket, TcpStream};

use super::{
    Refusal, Shared,
    access_log::{self, Outcome},
    http,
    relay::Transferred,
    tcp,
};
use crate::{
    datapath::{AgentSockets, endpoint},
    table::{BackendId, Candidates},
    workload::Workload,
};

/// How often, and how long apart, the record is looked for. The datapath writes it
/// before the client's handshake completes, so the first try nearly always finds it.
const RECORD_ATTEMPTS: u32 = 5;
const RECORD_RETRY: Duration = Duration::from_millis(2);

/// A refusal and what to say about it.
pub struct Refused {
    pub reason: Refusal,
    pub detail: String,
    /// Bytes that moved before the refusal (a client opening refused mid-stream).
    pub moved: Transferred,
}

impl Refused {
    pub fn new(reason: Refusal, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
            moved: Transferred::default(),
        }
    }
}

/// Where a redirected connection was going, who made it, and who may answer for that
/// address.
pub struct Routed {
    pub candidates: Candidates,
    /// The address and port the client dialed.
    pub original: SocketAddr,
    /// Where to connect, tried in order: the original destination, or for a virtual
    /// address the hostname's real addresses on the same port.
    pub upstream: Arc<[SocketAddr]>,
    pub peer: SocketAddr,
    /// The workload that connected (from the record's cgroup id).
    pub source: Arc<Workload>,
    /// When the proxy accepted the connection.
    pub started: Instant,
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

    /// The source's namespace, for metric labels (`""` outside Kubernetes).
    pub fn source_namespace(&self) -> &str {
        self.source.source_namespace()
    }
}

/// Routes a connection, then serves it on the path its Backends ask for. Each path is
/// boxed: a task is as large as its future, which holds room for the largest path it
/// may take (the TCP one, 6.9 KiB), so an HTTP/1 connection paid for paths it never
/// took (`-Zprint-type-sizes`; memory per held connection is bench/load.md's).
pub async fn handle(shared: Arc<Shared>, client: TcpStream, peer: SocketAddr) {
    let started = Instant::now();
    let record = match take_record(&shared, peer).await {
        Ok(record) => record,
        Err(refused) => {
            // Not a redirected connect, so no workload to name: counted and logged,
            // never in the access log. A stray connect to the proxy port is routine
            // noise; the rest is something an operator can act on.
            shared.stats.refused(None, refused.reason, "");
            if refused.reason == Refusal::NoRecord {
                tracing::debug!(%peer, "closed: {}", refused.detail);
            } else if let Some(suppressed) = shared.log_limit.allow(refused.reason.as_str()) {
                let reason = refused.reason.as_str();
                tracing::warn!(%peer, reason, suppressed, "refused: {}", refused.detail);
            }
            return;
        }
    };
    let mut routed = Routed {
        candidates: Arc::from([]),
        original: endpoint::to_socket_addr(&record.original),
        upstream: Arc::from([]),
        peer,
        source: shared.workloads.resolve(record.cgroup).await,
        started,
    };
    match route(&shared, &record, &mut routed) {
        Ok(Route::Backends) => {}
        Ok(Route::Passthrough) => {
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
                report(&shared, &routed, None, &refused);
            }
            return;
        }
        Err(refused) => {
            report(&shared, &routed, None, &refused);
            return;
        }
    }
    tune_client(&client);
    if routed
        .candidates
        .iter()
        .all(|e| e.backend.protocol.is_http())
    {
        Box::pin(http::serve(shared, routed, client)).await;
    } else if let Err((backend, refused)) = Box::pin(tcp::forward(&shared, &routed, client)).await {
        report(&shared, &routed, backend.as_deref(), &refused);
    }
}

/// No Nagle delay, and a TCP urgent (MSG_OOB) byte read in line with the others so
/// every path passes it on (a plain read would skip it). Neither failing stops the
/// connection: both only refine how bytes move.
fn tune_client(client: &TcpStream) {
    let _ = client.set_nodelay(true);
    let _ = socket2::SockRef::from(client).set_out_of_band_inline(true);
}

/// Counts a refusal, logs it (rate-limited per reason) and writes its access-log line.
pub fn report(shared: &Shared, routed: &Routed, backend: Option<&str>, refused: &Refused) {
    let source_namespace = routed.source_namespace();
    shared
        .stats
        .refused(backend, refused.reason, source_namespace);
    let reason = refused.reason.as_str();
    let backend = backend.unwrap_or("-");
    log_connection(
        shared,
        routed,
        backend,
        refused.moved,
        Outcome::Refused,
        Some(reason),
    );
    let Some(suppressed) = shared.log_limit.allow(reason) else {
        return;
    };
    let (peer, original, source) = (&routed.peer, &routed.original, &routed.source);
    tracing::warn!(
        %peer, %source, %backend, %original, reason, suppressed, "refused: {}", refused.detail
    );
}

/// Writes the access-log line of a connection of the bytes path (if there is a log).
pub fn log_connection(
    shared: &Shared,
    routed: &Routed,
    backend: &str,
    moved: Transferred,
    outcome: Outcome,
    reason: Option<&str>,
) {
    if let Some(log) = &shared.access_log {
        log.connection(&access_log::Connection {
            backend,
            source: &routed.source,
            destination: routed.original.ip(),
            port: routed.original.port(),
            bytes_sent: moved.client_to_upstream,
            bytes_received: moved.upstream_to_client,
            duration_ms: routed.started.elapsed().as_secs_f64() * 1e3,
            outcome,
            reason,
        });
    }
}

/// What a connection is for.
enum Route {
    Backends,
    /// A port of a virtual address that no Backend declares: the bytes go to the
    /// hostname's real address unchanged, as they would without the agent.
    Passthrough,
}

/// Finds the Backends (`routed.candidates`) and upstream addresses of the connection
/// `record` describes.
fn route(shared: &Shared, record: &Redirect, routed: &mut Routed) -> Result<Route, Refused> {
    let original = routed.original;
    let table = shared.table();
    let id = BackendId(record.backend_id);
    routed.upstream = match table.virtual_host(original.ip()) {
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
            Some(_) => Ok(Route::Passthrough),
            None => Err(Refused::new(
                Refusal::UnknownBackend,
                format!("{original}: its hostname has no Backend any more and its hold ended"),
            )),
        };
    }
    routed.candidates = table
        .lookup(id)
        .map_err(|error| Refused::new(Refusal::UnknownBackend, error.to_string()))?;
    Ok(Route::Backends)
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
