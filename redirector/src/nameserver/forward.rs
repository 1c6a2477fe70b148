//! Forwarding captured UDP queries to the nameservers the clients asked.
//!
//! A few long-lived sockets per address family, listed in `AGENT_SOCKETS` once (so the
//! capture hooks never take the agent's own queries), instead of a socket per query:
//! a query costs two syscalls, not eight. Each query leaves with a fresh random ID on a
//! randomly chosen socket, and its answer gets the client's ID back. An answer is only
//! accepted from the nameserver the query went to, and unmatched ones are dropped.

use std::{
    collections::HashMap,
    io,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr},
    os::fd::AsFd,
    sync::{Arc, Mutex},
    time::Instant,
};

use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use super::{
    FORWARD_TIMEOUT,
    metrics::{DnsMetrics, Outcome},
};
use crate::{
    datapath::{AgentSockets, OwnedExemption},
    resolved_names::ResolvedNames,
};

/// Sockets per address family: the random choice adds three bits to the 16 of the ID
/// that an off-path forger would have to guess.
const SOCKETS: usize = 8;
/// Queries waiting for an answer, per socket, at most.
const MAX_PENDING: usize = 16_384;

/// A query sent and not answered yet.
struct Pending {
    client: SocketAddr,
    /// The asking process's cgroup: whose answer this is, for [`ResolvedNames`].
    cgroup: u64,
    listener: Arc<UdpSocket>,
    id: [u8; 2],
    nameserver: SocketAddr,
    started: Instant,
}

struct Upstream {
    socket: Arc<UdpSocket>,
    pending: Mutex<HashMap<u16, Pending>>,
    _exemption: OwnedExemption,
}

pub struct Forwarder {
    v4: Vec<Arc<Upstream>>,
    v6: Vec<Arc<Upstream>>,
}

impl Forwarder {
    /// Binds the sockets and starts their receive loops.
    /// With `names`, the addresses in each answer are remembered for its client.
    pub fn start(
        agent_sockets: &Arc<AgentSockets>,
        metrics: Arc<DnsMetrics>,
        names: Option<Arc<ResolvedNames>>,
        shutdown: &CancellationToken,
    ) -> io::Result<Arc<Forwarder>> {
        let family = |any: SocketAddr| -> io::Result<Vec<Arc<Upstream>>> {
            (0..SOCKETS)
                .map(|_| {
                    let std = std::net::UdpSocket::bind(any)?;
                    std.set_nonblocking(true)?;
                    let exemption = agent_sockets.exempt_owned(std.as_fd())?;
                    let upstream = Arc::new(Upstream {
                        socket: Arc::new(UdpSocket::from_std(std)?),
                        pending: Mutex::default(),
                        _exemption: exemption,
                    });
                    let names = names.clone();
                    let receiving =
                        receive(upstream.clone(), metrics.clone(), names, shutdown.clone());
                    tokio::spawn(receiving);
                    Ok(upstream)
                })
                .collect()
        };
        let v4 = family((Ipv4Addr::UNSPECIFIED, 0).into())?;
        // A node without IPv6 has no IPv6 nameserver to ask either.
        let v6 = family((Ipv6Addr::UNSPECIFIED, 0).into()).unwrap_or_default();
        Ok(Arc::new(Forwarder { v4, v6 }))
    }

    /// Sends `query` to `nameserver`; the answer goes to `client` (a process in
    /// `cgroup`) through `listener`. `false` if it could not be sent (the caller counts
    /// the failure).
    pub async fn send(
        &self,
        mut query: Vec<u8>,
        nameserver: SocketAddr,
        (client, cgroup): (SocketAddr, u64),
        listener: &Arc<UdpSocket>,
        started: Instant,
    ) -> bool {
        let upstreams = if nameserver.is_ipv4() {
            &self.v4
        } else {
            &self.v6
        };
        let (Some(upstream), Some(id)) = (
            upstreams.get(rand::random_range(0..upstreams.len().max(1))),
            query.get(..2).map(|id| [id[0], id[1]]),
        ) else {
            return false;
        };
        let new_id = {
            let mut pending = upstream.pending.lock().unwrap_or_else(|p| p.into_inner());
            if pending.len() >= MAX_PENDING {
                return false;
            }
            let mut new_id: u16 = rand::random();
            while pending.contains_key(&new_id) {
                new_id = rand::random();
            }
            let entry = Pending {
                client,
                cgroup,
                listener: listener.clone(),
                id,
                nameserver,
                started,
            };
            pending.insert(new_id, entry);
            new_id
        };
        query[..2].copy_from_slice(&new_id.to_be_bytes());
        if upstream.socket.send_to(&query, nameserver).await.is_err() {
            let mut pending = upstream.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.remove(&new_id);
            return false;
        }
        true
    }
}

/// Relays answers to their clients; drops what nobody waits for, and expires queries
/// that got no answer within the forward timeout (the client retries).
async fn receive(
    upstream: Arc<Upstream>,
    metrics: Arc<DnsMetrics>,
    names: Option<Arc<ResolvedNames>>,
    shutdown: CancellationToken,
) {
    let mut buf = vec![0u8; 65_535];
    let mut sweep = tokio::time::interval(FORWARD_TIMEOUT / 5);
    loop {
        let (len, from) = tokio::select! {
            () = shutdown.cancelled() => return,
            _ = sweep.tick() => {
                expire(&upstream, &metrics);
                continue;
            }
            received = upstream.socket.recv_from(&mut buf) => match received {
                Ok(received) => received,
                Err(error) => {
                    tracing::debug!(%error, "forwarder receive failed");
                    continue;
                }
            },
        };
        let Some(answer) = buf.get_mut(..len).filter(|answer| answer.len() >= 12) else {
            continue;
        };
        let id = u16::from_be_bytes([answer[0], answer[1]]);
        let waiting = {
            let mut pending = upstream.pending.lock().unwrap_or_else(|p| p.into_inner());
            match pending.get(&id) {
                Some(query) if query.nameserver == from => pending.remove(&id),
                // Another source with a matching ID: not the nameserver's answer.
                _ => None,
            }
        };
        let Some(query) = waiting else {
            continue;
        };
        answer[..2].copy_from_slice(&query.id);
        if let Some(names) = &names {
            names.remember_answer(query.cgroup, answer);
        }
        let outcome = match query.listener.send_to(answer, query.client).await {
            Ok(_) => Outcome::Forwarded,
            Err(_) => Outcome::Failed,
        };
        metrics.record(outcome, query.started.elapsed());
    }
}

fn expire(upstream: &Upstream, metrics: &DnsMetrics) {
    let mut pending = upstream.pending.lock().unwrap_or_else(|p| p.into_inner());
    let before = pending.len();
    pending.retain(|_, query| query.started.elapsed() < FORWARD_TIMEOUT);
    for _ in pending.len()..before {
        metrics.record(Outcome::Failed, FORWARD_TIMEOUT);
    }
}
