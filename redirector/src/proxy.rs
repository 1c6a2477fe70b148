//! The node proxy: where redirected connects arrive.
//!
//! `serve` accepts; [`connection::handle`] matches the connection to its Backend(s)
//! through the datapath's record and hands it on: [`tcp`] relays bytes (TLS originated
//! as the Backend says), [`http`] speaks HTTP to both sides; both judge the client's
//! first bytes by [`opening`]. A connection without a
//! record was not redirected by the datapath and is closed at once: the proxy is never
//! an open relay.

pub mod access_log;
mod activity;
mod connection;
pub mod http;
mod kernel_tls;
mod log_limit;
mod opening;
mod polled_on_wake;
mod read_ahead;
mod relay;
mod stats;
mod tcp;

use std::{
    io,
    net::SocketAddr,
    sync::{Arc, RwLock},
    time::Duration,
};

use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use access_log::AccessLog;
pub use connection::connect_upstream;
pub use http::{HttpProxy, HttpSettings};
pub use kernel_tls::{KernelTls, KernelTlsMode};
pub use relay::Pipes;
pub use stats::{Refusal, Stats};

use crate::{
    datapath::{AgentSockets, PendingRecords},
    table::BackendTable,
    workload::Workloads,
};

/// Per-connection limits.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    pub buffer_size: usize,
}

/// What every connection task needs.
pub struct Shared {
    pub pending: PendingRecords,
    pub agent_sockets: Arc<AgentSockets>,
    pub table: RwLock<Arc<BackendTable>>,
    pub limits: ConnectionLimits,
    pub stats: Arc<Stats>,
    /// Rate limit of refused-connection log lines.
    pub log_limit: log_limit::LogLimiter,
    pub http: HttpProxy,
    /// `--access-log`: requests and connections, with their source.
    pub access_log: Option<AccessLog>,
    /// Who connected: the record's cgroup -> workload.
    pub workloads: Arc<Workloads>,
    /// Fires on SIGTERM/SIGINT: HTTP connections finish their requests and close.
    pub shutdown: CancellationToken,
    /// Every connection task, upgraded ones included, for the drain.
    pub tasks: TaskTracker,
    /// Pipes for splice(2) between plain TCP sockets.
    pub pipes: Pipes,
    /// Whether upstream TLS moves into the kernel (`--kernel-tls`).
    pub kernel_tls: Arc<KernelTls>,
}

/// The most pipes the proxy keeps for splice(2) (two descriptors each). A pipe is held
/// only while a chunk moves through it or waits for its destination to take it, so this
/// bounds connections moving bytes at the same instant, not open ones; beyond it, chunks
/// go through a buffer.
pub const MAX_PIPES: usize = 1024;

impl Shared {
    pub fn table(&self) -> Arc<BackendTable> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Makes `table` the one new connections see; HTTP pools of Backends that changed
    /// are dropped. In this order: a pool asked for in between is judged against the
    /// new table, never kept with settings the table no longer has.
    pub fn publish(&self, table: Arc<BackendTable>) {
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = table.clone();
        self.http.pools.retain(&table);
    }
}

/// Binds one listener per proxy address. Done before the datapath is attached, so a
/// redirected connect always finds a listener.
pub fn bind(addrs: &[SocketAddr]) -> io::Result<Bound> {
    let sockets = (addrs.iter())
        .map(|addr| bind_shared(*addr, "--proxy-addr"))
        .collect::<io::Result<_>>()?;
    Ok(Bound(sockets))
}

/// The proxy's sockets, bound but not listening yet. A TCP socket joins the
/// SO_REUSEPORT group of its port, and with it gets a share of the connects, only when
/// it listens: an agent joining a running one (an upgrade) listens once it can serve.
pub struct Bound(Vec<TcpSocket>);

impl Bound {
    pub fn listen(self) -> io::Result<Vec<TcpListener>> {
        self.0
            .into_iter()
            .map(|socket| socket.listen(4096))
            .collect()
    }
}

/// A TCP listener that a second agent on the node can join (SO_REUSEPORT): during an
/// upgrade the new agent listens beside the old one, and when the old one closes its
/// listener the kernel hands its queued connections to the new one (`tcp_migrate_req`).
pub fn listen_shared(addr: SocketAddr, backlog: u32, flag: &str) -> io::Result<TcpListener> {
    bind_shared(addr, flag)?.listen(backlog)
}

/// A socket bound to `addr` for [`listen_shared`] (SO_REUSEADDR, SO_REUSEPORT).
fn bind_shared(addr: SocketAddr, flag: &str) -> io::Result<TcpSocket> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // A restarted agent must be able to bind while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket
        .bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {flag} {addr}: {e}")))?;
    Ok(socket)
}

/// Accepts until `shutdown` fires, then waits up to `drain` for open connections.
/// Returns the number of connections cut off by the drain timeout.
pub async fn serve(listeners: Vec<TcpListener>, shared: Arc<Shared>, drain: Duration) -> usize {
    let connections = shared.tasks.clone();
    let shutdown = shared.shutdown.clone();
    let acceptors = TaskTracker::new();
    for listener in listeners {
        acceptors.spawn(accept_loop(
            listener,
            shared.clone(),
            connections.clone(),
            shutdown.clone(),
        ));
    }
    acceptors.close();
    acceptors.wait().await;
    connections.close();
    let open = connections.len();
    if open > 0 {
        tracing::info!(open, ?drain, "draining open connections");
    }
    match tokio::time::timeout(drain, connections.wait()).await {
        Ok(()) => 0,
        Err(_) => connections.len(),
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    connections: TaskTracker,
    shutdown: CancellationToken,
) {
    accept_until(&listener, &shutdown, |client, peer| {
        connections.spawn(connection::handle(shared.clone(), client, peer));
    })
    .await;
}

/// Accepts on `listener` until `shutdown`, handing each connection to `serve`.
pub async fn accept_until(
    listener: &TcpListener,
    shutdown: &CancellationToken,
    mut serve: impl FnMut(TcpStream, SocketAddr),
) {
    // Failures are logged once per interval with how many there were, not each time:
    // out of descriptors, every retry fails until connections close.
    const LOG_EVERY: Duration = Duration::from_secs(10);
    let mut failures = 0u64;
    let mut logged: Option<tokio::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((client, peer)) => serve(client, peer),
            Err(error) => {
                failures += 1;
                if logged.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
                    tracing::warn!(%error, failures, "accept failed; backing off (out of descriptors? see the open file limit logged at start)");
                    logged = Some(tokio::time::Instant::now());
                    failures = 0;
                }
                // EMFILE and friends: back off a little instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
