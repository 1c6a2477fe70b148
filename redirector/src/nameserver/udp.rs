//! Captured queries over UDP: answered here, or handed to the [`super::Forwarder`],
//! which relays the nameserver's answer unchanged; a truncated answer stays truncated,
//! and the client retries over TCP, which is captured too.

use std::{net::SocketAddr, sync::Arc, time::Instant};

use redirector_common::DnsRecord;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use super::{
    Context,
    answer::{self, Decision},
    metrics::Outcome,
};

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
        match answer::decide(query, record.scope, &table, &context.answering) {
            Decision::Answer(answer) => {
                // A Backend name's virtual addresses: a refusal of an undeclared port of
                // one names the hostname too.
                if let Some(names) = &context.names {
                    names.remember_answer(record.cgroup, &answer);
                }
                let outcome = match socket.send_to(&answer, peer).await {
                    Ok(_) => Outcome::Answered,
                    Err(_) => Outcome::Failed,
                };
                context.metrics.record(outcome, started.elapsed());
            }
            Decision::Forward => {
                let forwarder = &context.forwarder;
                let sent = match super::forward_target(&context, &record) {
                    Some(to) => {
                        forwarder
                            .send(query.to_vec(), to, (peer, record.cgroup), &socket, started)
                            .await
                    }
                    None => false,
                };
                if !sent {
                    context.metrics.record(Outcome::Failed, started.elapsed());
                }
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
