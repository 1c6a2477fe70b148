//! The agent's DNS listener: where captured queries arrive (see `redirector-ebpf/src/dns.rs`).
//!
//! Each query's client is looked up in `DNS_PENDING` (written by the datapath for every
//! captured packet): the nameserver it asked and its scope. A query for a Backend
//! hostname of that scope is answered here with the hostname's virtual addresses
//! ([`answer`]); every other query is forwarded to the nameserver the client asked, over
//! the transport it used, and the answer relayed unchanged. A datagram or connection
//! without a record was not captured and is dropped: the listener is not an open
//! resolver.

pub(crate) mod answer;
mod forward;
mod metrics;
mod tcp;
mod udp;

use std::{
    io,
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use redirector_common::DnsRecord;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use answer::Answering;
pub use forward::Forwarder;
pub use metrics::DnsMetrics;

use crate::{
    datapath::{DnsPending, endpoint},
    proxy::{self, Shared},
};

/// How long a forwarded query may wait for its nameserver.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

/// What every query handler needs.
pub struct Context {
    /// For the current table (names and virtual addresses).
    pub shared: Arc<Shared>,
    pub pending: DnsPending,
    pub metrics: Arc<DnsMetrics>,
    /// Where queries for other names go (UDP; TCP forwards per client connection).
    pub forwarder: Arc<Forwarder>,
    /// TTL and families of the answers with virtual addresses.
    pub answering: Answering,
    /// Where forwarded answers are remembered per client (egress policy on), so a
    /// refusal can name what the client had resolved.
    pub names: Option<Arc<crate::resolved_names::ResolvedNames>>,
}

/// The listeners, bound before the datapath is attached (like the proxy's).
pub struct Listeners {
    udp: Vec<UdpSocket>,
    tcp: Vec<TcpListener>,
}

/// Binds UDP and TCP on every address, shared with a second agent during an upgrade
/// (SO_REUSEPORT, as the proxy's listeners).
pub fn bind(addrs: &[SocketAddr]) -> io::Result<Listeners> {
    let mut listeners = Listeners {
        udp: Vec::new(),
        tcp: Vec::new(),
    };
    for addr in addrs {
        let socket = Socket::new(Domain::for_address(*addr), Type::DGRAM, Some(Protocol::UDP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&(*addr).into()).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("cannot listen for DNS on {addr} (see --dns-port): {error}"),
            )
        })?;
        listeners.udp.push(UdpSocket::from_std(socket.into())?);
        let flag = format!("--dns-port (DNS over TCP on {})", addr.ip());
        listeners
            .tcp
            .push(proxy::listen_shared(*addr, 1024, &flag)?);
    }
    Ok(listeners)
}

/// Serves until `shutdown`.
pub async fn serve(listeners: Listeners, context: Arc<Context>, shutdown: CancellationToken) {
    let tasks = TaskTracker::new();
    for socket in listeners.udp {
        tasks.spawn(udp::serve(
            Arc::new(socket),
            context.clone(),
            shutdown.clone(),
        ));
    }
    for listener in listeners.tcp {
        tasks.spawn(tcp::serve(listener, context.clone(), shutdown.clone()));
    }
    tasks.close();
    tasks.wait().await;
}

/// Where a captured client's query may be forwarded: the nameserver it asked, unless
/// that is a loopback or unspecified address, which from the agent would mean the
/// node's own loopback. The datapath leaves such queries alone; a record that names
/// one anyway is refused here too (`None`).
fn forward_target(context: &Context, record: &DnsRecord) -> Option<SocketAddr> {
    let to = endpoint::to_socket_addr(&record.nameserver);
    if is_node_local(to.ip()) {
        if let Some(suppressed) = context.shared.log_limit.allow("dns_node_local") {
            tracing::warn!(nameserver = %to, suppressed, "a captured DNS query names a node-local nameserver; not forwarded");
        }
        return None;
    }
    Some(to)
}

/// Loopback or unspecified (0.0.0.0/8, ::): from the agent, the node's own loopback.
fn is_node_local(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    let this_network = matches!(ip, IpAddr::V4(v4) if v4.octets()[0] == 0);
    ip.is_loopback() || ip.is_unspecified() || this_network
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_local_nameservers_are_not_forwarded_to() {
        let cases = [
            ("0.0.0.0:53", false),
            ("0.1.2.3:53", false),
            ("127.0.0.53:53", false),
            ("[::]:53", false),
            ("[::1]:53", false),
            ("[::ffff:127.0.0.1]:53", false),
            ("[::ffff:0.0.0.0]:53", false),
            ("10.96.0.10:53", true),
            // NodeLocal DNSCache listens on a link-local address in the host's namespace.
            ("169.254.20.10:53", true),
            ("[fd00::10]:53", true),
        ];
        for (nameserver, forwarded) in cases {
            let at: SocketAddr = nameserver.parse().unwrap();
            // Through the datapath's form, as records carry it.
            let at = endpoint::to_socket_addr(&endpoint::from_socket_addr(at));
            assert_eq!(!is_node_local(at.ip()), forwarded, "{nameserver}");
        }
    }
}
