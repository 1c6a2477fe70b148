//! Captured queries over TCP (two-byte length prefix, RFC 7766): clients retry here
//! after a truncated UDP answer, and some ask over TCP from the start.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};
use tokio_util::sync::CancellationToken;

use super::{
    Context, FORWARD_TIMEOUT,
    answer::{self, Decision},
    metrics::Outcome,
};
use crate::proxy::{accept_until, connect_upstream};

/// An idle client connection is closed after this long (RFC 7766 suggests seconds).
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// The egress record is written when the client's SYN leaves, before `accept` returns;
/// retried briefly anyway, as the proxy does.
const RECORD_ATTEMPTS: u32 = 5;
const RECORD_RETRY: Duration = Duration::from_millis(2);

/// Client connections served at once per listener, and from one address; more are
/// closed on arrival (the client retries). Pods ask over TCP rarely (after a truncated
/// answer), so this bounds what a flood can hold, and what one pod can take from the
/// others, without limiting real use.
const MAX_CLIENTS: usize = 1024;
const MAX_PER_ADDRESS: usize = 32;

pub async fn serve(listener: TcpListener, context: Arc<Context>, shutdown: CancellationToken) {
    let slots = Arc::new(ClientSlots::default());
    accept_until(&listener, &shutdown, |client, peer| {
        let Some(slot) = slots.take(peer.ip()) else {
            context.metrics.record(Outcome::Failed, Duration::ZERO);
            if let Some(suppressed) = context.shared.log_limit.allow("dns_tcp_clients") {
                tracing::warn!(
                    %peer, suppressed,
                    "DNS over TCP: {MAX_PER_ADDRESS} connections from this address or \
                     {MAX_CLIENTS} in all already; connection closed"
                );
            }
            return;
        };
        let context = context.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            handle(context, client, peer, shutdown).await;
            drop(slot);
        });
    })
    .await;
}

/// Counts of the clients being served, in all and per address.
#[derive(Default)]
struct ClientSlots(Mutex<(usize, HashMap<IpAddr, usize>)>);

/// One client's place, given back when dropped.
struct Slot {
    slots: Arc<ClientSlots>,
    ip: IpAddr,
}

impl ClientSlots {
    fn take(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (total, by_address) = &mut *counts;
        if *total >= MAX_CLIENTS {
            return None;
        }
        // Only an address with clients already can be at its cap: no empty entry stays.
        let from = by_address.entry(ip).or_default();
        if *from >= MAX_PER_ADDRESS {
            return None;
        }
        *from += 1;
        *total += 1;
        let slots = self.clone();
        Some(Slot { slots, ip })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = (self.slots.0.lock()).unwrap_or_else(|p| p.into_inner());
        let (total, by_address) = &mut *counts;
        *total -= 1;
        if let Some(from) = by_address.get_mut(&self.ip) {
            *from -= 1;
            if *from == 0 {
                by_address.remove(&self.ip);
            }
        }
    }
}

async fn handle(
    context: Arc<Context>,
    mut client: TcpStream,
    peer: SocketAddr,
    shutdown: CancellationToken,
) {
    let mut record = None;
    for _ in 0..RECORD_ATTEMPTS {
        if let Ok(Some(found)) = context.pending.get(peer) {
            record = Some(found);
            break;
        }
        tokio::time::sleep(RECORD_RETRY).await;
    }
    let Some(record) = record else {
        tracing::debug!(%peer, "DNS connection without a capture record closed: not an open resolver");
        return;
    };
    let nameserver = super::forward_target(&context, &record);
    let mut upstream: Option<TcpStream> = None;
    loop {
        let query = tokio::select! {
            () = shutdown.cancelled() => return,
            read = tokio::time::timeout(IDLE_TIMEOUT, read_message(&mut client)) => match read {
                Ok(Ok(query)) => query,
                _ => return,
            },
        };
        let started = Instant::now();
        let table = context.shared.table();
        let reply = match answer::decide(&query, record.scope, &table, &context.answering) {
            Decision::Answer(answer) => {
                if let Some(names) = &context.names {
                    names.remember_answer(record.cgroup, &answer);
                }
                Some((answer, Outcome::Answered))
            }
            Decision::Forward => {
                let Some(nameserver) = nameserver else {
                    context.metrics.record(Outcome::Failed, started.elapsed());
                    return;
                };
                let asked = tokio::time::timeout(
                    FORWARD_TIMEOUT,
                    ask(&context, &mut upstream, nameserver, &query),
                )
                .await;
                match asked {
                    Ok(Ok(reply)) => {
                        if let Some(names) = &context.names {
                            names.remember_answer(record.cgroup, &reply);
                        }
                        Some((reply, Outcome::Forwarded))
                    }
                    _ => {
                        tracing::debug!(%nameserver, "forwarding a DNS query over TCP failed");
                        None
                    }
                }
            }
        };
        let Some((reply, outcome)) = reply else {
            context.metrics.record(Outcome::Failed, started.elapsed());
            return;
        };
        let written = write_message(&mut client, &reply).await;
        let outcome = if written.is_ok() {
            outcome
        } else {
            Outcome::Failed
        };
        context.metrics.record(outcome, started.elapsed());
        if written.is_err() {
            return;
        }
    }
}

/// Forwards over one upstream connection per client connection, opened on first need.
async fn ask(
    context: &Context,
    upstream: &mut Option<TcpStream>,
    nameserver: SocketAddr,
    query: &[u8],
) -> std::io::Result<Vec<u8>> {
    let stream = match upstream {
        Some(stream) => stream,
        None => upstream.insert(
            connect_upstream(&context.shared.agent_sockets, nameserver, FORWARD_TIMEOUT).await?,
        ),
    };
    write_message(stream, query).await?;
    let reply = read_message(stream).await;
    if reply.is_err() {
        *upstream = None;
    }
    reply
}

/// One length-prefixed message. The buffer grows with what arrives: a bare length
/// prefix claims no 64 KiB.
async fn read_message(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let len = stream.read_u16().await?;
    let mut message = Vec::new();
    (&mut *stream)
        .take(u64::from(len))
        .read_to_end(&mut message)
        .await?;
    if message.len() < usize::from(len) {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(message)
}

async fn write_message(stream: &mut TcpStream, message: &[u8]) -> std::io::Result<()> {
    let len = u16::try_from(message.len())
        .map_err(|_| std::io::Error::other("DNS message over 65535 bytes"))?;
    let mut framed = Vec::with_capacity(message.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(message);
    stream.write_all(&framed).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_cannot_take_every_slot() {
        let slots = Arc::new(ClientSlots::default());
        let (pod, other): (IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut held: Vec<Slot> = (0..MAX_PER_ADDRESS)
            .filter_map(|_| slots.take(pod))
            .collect();
        assert_eq!(held.len(), MAX_PER_ADDRESS);
        assert!(slots.take(pod).is_none(), "over the per-address cap");
        assert!(slots.take(other).is_some(), "another pod still gets in");
        held.pop();
        assert!(slots.take(pod).is_some(), "a slot given back is free again");
        drop(held);
        let counts = slots.0.lock().unwrap();
        assert_eq!(counts.0, 0);
        assert!(counts.1.is_empty());
    }
}
