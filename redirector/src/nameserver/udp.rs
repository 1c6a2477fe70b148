//! Captured queries over UDP.

use std::{
    io,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr},
    os::fd::AsFd,
    sync::Arc,
    time::Instant,
};

use redirector_common::DnsRecord;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use super::{
    Context, FORWARD_TIMEOUT,
    answer::{self, Decision},
    metrics::Outcome,
};
use crate::datapath::endpoint;

/// The largest datagram DNS over UDP can carry.
const MAX_DATAGRAM: usize = 65_535;

pub async fn serve(socket: Arc<UdpSocket>, context: Arc<Context>, shutdown: CancellationToken) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let (len, peer) = tokio::select! {
            () = shutdown.cancelled() => return,
            received = socket.recv_from(&mut buf) => match received {
                Ok(received) => received,
                Err(error) => {
                    tracing::debug!(%error, "DNS receive failed");
                    continue;
                }
            },
        };
        let started = Instant::now();
        let Some(record) = record_of(&context, peer) else {
            context.metrics.record(Outcome::Failed, started.elapsed());
            continue;
        };
        let query = &buf[..len];
        let table = context.shared.table();
        match answer::decide(query, record.scope, &table, context.answer_ttl) {
            Decision::Answer(answer) => {
                let outcome = match socket.send_to(&answer, peer).await {
                    Ok(_) => Outcome::Answered,
                    Err(_) => Outcome::Failed,
                };
                context.metrics.record(outcome, started.elapsed());
            }
            Decision::Forward => {
                let nameserver = endpoint::to_socket_addr(&record.nameserver);
                tokio::spawn(forward(
                    socket.clone(),
                    context.clone(),
                    query.to_vec(),
                    peer,
                    nameserver,
                    started,
                ));
            }
        }
    }
}

/// The client's record; `None` (logged) if the datagram was not captured.
fn record_of(context: &Context, peer: SocketAddr) -> Option<DnsRecord> {
    match context.pending.get(peer) {
        Ok(Some(record)) => Some(record),
        Ok(None) => {
            tracing::debug!(%peer, "DNS datagram without a capture record dropped: not an open resolver");
            None
        }
        Err(error) => {
            tracing::warn!(%peer, %error, "reading the DNS capture record failed; query dropped");
            None
        }
    }
}

/// Asks `nameserver` from a fresh socket (a random source port per query, as a stub
/// resolver would) and relays its answer unchanged; a truncated answer stays truncated,
/// and the client retries over TCP, which is captured too.
async fn forward(
    listener: Arc<UdpSocket>,
    context: Arc<Context>,
    query: Vec<u8>,
    peer: SocketAddr,
    nameserver: SocketAddr,
    started: Instant,
) {
    let asked = tokio::time::timeout(FORWARD_TIMEOUT, ask(&context, &query, nameserver)).await;
    let outcome = match asked {
        Ok(Ok(reply)) => match listener.send_to(&reply, peer).await {
            Ok(_) => Outcome::Forwarded,
            Err(_) => Outcome::Failed,
        },
        Ok(Err(error)) => {
            tracing::debug!(%nameserver, %error, "forwarding a DNS query failed");
            Outcome::Failed
        }
        Err(_) => {
            tracing::debug!(%nameserver, timeout = ?FORWARD_TIMEOUT, "nameserver did not answer");
            Outcome::Failed
        }
    };
    context.metrics.record(outcome, started.elapsed());
}

async fn ask(context: &Context, query: &[u8], nameserver: SocketAddr) -> io::Result<Vec<u8>> {
    let local: SocketAddr = if nameserver.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).await?;
    // Never captured itself, also when the agent sits in the cgroup it watches.
    let _exemption = context.shared.agent_sockets.exempt_owned(socket.as_fd())?;
    socket.connect(nameserver).await?;
    socket.send(query).await?;
    let mut reply = vec![0u8; MAX_DATAGRAM];
    let len = socket.recv(&mut reply).await?;
    reply.truncate(len);
    Ok(reply)
}
