//! The agent's own DNS queries are never captured: the resolver's sockets are listed in
//! `AGENT_SOCKETS` (by cookie), like the proxy's upstream sockets, so the capture hooks
//! let them through even when the agent sits inside the cgroup it watches. Otherwise it
//! would ask itself about Backend names and get their virtual addresses back.

use std::{
    future::Future,
    io,
    net::SocketAddr,
    os::fd::AsFd,
    pin::Pin,
    sync::{Arc, OnceLock},
    task::{Context, Poll},
    time::Duration,
};

use hickory_proto::{
    runtime::{RuntimeProvider, TokioHandle, TokioTime, iocompat::AsyncIoTokioAsStd},
    udp::DnsUdpSocket,
};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};

use crate::datapath::{AgentSockets, OwnedExemption};

/// Where the exemptions go: filled once the datapath is installed (the resolver is made
/// before it, to resolve the first Backends).
pub type Exemptions = Arc<OnceLock<Arc<AgentSockets>>>;

/// Tokio sockets, listed in `AGENT_SOCKETS` while they live.
#[derive(Clone, Default)]
pub struct ExemptRuntime {
    handle: TokioHandle,
    exemptions: Exemptions,
}

impl ExemptRuntime {
    pub fn exemptions(&self) -> Exemptions {
        self.exemptions.clone()
    }
}

/// A UDP socket and its exemption: every `sendto` of an unconnected socket is a hook
/// call, so the exemption lasts as long as the socket.
pub struct ExemptUdp {
    socket: UdpSocket,
    _exemption: Option<OwnedExemption>,
}

impl DnsUdpSocket for ExemptUdp {
    type Time = TokioTime;

    fn poll_recv_from(
        &self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<(usize, SocketAddr)>> {
        DnsUdpSocket::poll_recv_from(&self.socket, cx, buf)
    }

    fn poll_send_to(
        &self,
        cx: &mut Context<'_>,
        buf: &[u8],
        target: SocketAddr,
    ) -> Poll<io::Result<usize>> {
        DnsUdpSocket::poll_send_to(&self.socket, cx, buf, target)
    }
}

impl RuntimeProvider for ExemptRuntime {
    type Handle = TokioHandle;
    type Timer = TokioTime;
    type Udp = ExemptUdp;
    type Tcp = AsyncIoTokioAsStd<TcpStream>;

    fn create_handle(&self) -> Self::Handle {
        self.handle.clone()
    }

    fn connect_tcp(
        &self,
        server_addr: SocketAddr,
        bind_addr: Option<SocketAddr>,
        timeout: Option<Duration>,
    ) -> Pin<Box<dyn Send + Future<Output = io::Result<Self::Tcp>>>> {
        let exemptions = self.exemptions.get().cloned();
        Box::pin(async move {
            let socket = match server_addr {
                SocketAddr::V4(_) => TcpSocket::new_v4(),
                SocketAddr::V6(_) => TcpSocket::new_v6(),
            }?;
            if let Some(bind_addr) = bind_addr {
                socket.bind(bind_addr)?;
            }
            socket.set_nodelay(true)?;
            // Only the connect is hooked: the exemption can end with it.
            let exemption = exempt(exemptions.as_ref(), &socket)?;
            let wait = timeout.unwrap_or(Duration::from_secs(5));
            let connected = tokio::time::timeout(wait, socket.connect(server_addr)).await;
            drop(exemption);
            match connected {
                Ok(stream) => Ok(AsyncIoTokioAsStd(stream?)),
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connection to {server_addr} timed out after {wait:?}"),
                )),
            }
        })
    }

    fn bind_udp(
        &self,
        local_addr: SocketAddr,
        _server_addr: SocketAddr,
    ) -> Pin<Box<dyn Send + Future<Output = io::Result<Self::Udp>>>> {
        let exemptions = self.exemptions.get().cloned();
        Box::pin(async move {
            let socket = UdpSocket::bind(local_addr).await?;
            let exemption = exempt(exemptions.as_ref(), &socket)?;
            Ok(ExemptUdp {
                socket,
                _exemption: exemption,
            })
        })
    }
}

/// Lists `socket` if the datapath is installed (before it, no hook can capture).
fn exempt(
    exemptions: Option<&Arc<AgentSockets>>,
    socket: &impl AsFd,
) -> io::Result<Option<OwnedExemption>> {
    exemptions
        .map(|sockets| sockets.exempt_owned(socket.as_fd()))
        .transpose()
}
