//! Bytes Backends (`protocol` absent or `TCP`): the client's bytes are spliced to the
//! dialed address, with TLS originated first when the Backend says so.
//!
//! The upstream is connected before the client's first byte is read, so protocols where
//! the server speaks first work. The client's opening ([`super::opening`]) is judged by a
//! [`FirstBytesGuard`]
//! before any byte of it goes upstream: its own TLS towards a TLS-originating Backend is
//! refused; its own TLS to a name no Backend here declares goes to the dialed address
//! unchanged (passthrough), through a fresh connection if TLS was already originated.

use std::{io, net::SocketAddr, time::Instant};

use tokio::net::{
    TcpStream,
    tcp::{ReadHalf, WriteHalf},
};

use super::{
    Refusal, Shared,
    access_log::Outcome,
    connection::{Refused, Routed, connect_any, log_connection},
    kernel_tls::Offload,
    opening::{first_bytes, named, opening_refusal, opening_rule},
    relay::{Transferred, relay_spliced, relay_tcp, relay_tls},
};
use crate::tls::{
    HandshakeFailure,
    sniff::{self, FirstBytesGuard, Opening, Verdict},
};

mod upstream_tls;

use self::upstream_tls::with_pending_alert;
pub use self::upstream_tls::{UpstreamTls, handshake_with};

/// A refusal, with the Backend it is counted against (`None`: none could be named).
pub type Failure = (Option<String>, Refused);

/// Connects to the original destination as the Backend says and copies both ways.
pub async fn forward(
    shared: &Shared,
    routed: &Routed,
    mut client: TcpStream,
) -> Result<(), Failure> {
    let candidates = &routed.candidates;
    if candidates.len() > 1 && candidates.iter().any(|e| e.originates_tls()) {
        // Backends that differ in TLS share the address: plaintext can only be refused
        // and the client's own TLS names its Backend, so judge before dialing anything.
        let Some((opening, held)) = first_bytes(routed, &mut client).await else {
            return Ok(());
        };
        return match opening {
            Ok(Some(opening)) => judged_splice(shared, routed, client, held, &opening).await,
            Ok(None) => Ok(()),
            Err(refused) => Err((None, opening_refusal(refused))),
        };
    }
    let limits = shared.limits;
    let label = routed.label();
    let fail = |refused: Refused| (Some(label.clone()), refused);
    // Several Backends on one address: bytes go to the dialed address unchanged (the
    // rule refuses plaintext there unless none of them originates TLS).
    let origination = match &*routed.candidates {
        [only] => only.origination.clone().map_err(|error| {
            fail(Refused::new(
                Refusal::TlsConfig,
                format!(
                    "Backend {} has unusable TLS settings: {error}",
                    only.backend.key
                ),
            ))
        })?,
        _ => None,
    };
    let connecting = Instant::now();
    let upstream = dial(shared, &routed.upstream).await.map_err(fail)?;
    let active = (shared.stats).active_guard_from(&label, routed.source_namespace());
    let rule = opening_rule(&routed.candidates, routed.original);
    let (moved, result, verdict) = match origination {
        None => {
            shared.stats.connected(&label, connecting.elapsed());
            let (read, write) = client.split();
            let mut guard = FirstBytesGuard::new(read, rule, false);
            let (moved, result) = relay_tcp(
                &mut guard,
                write.as_ref(),
                &upstream,
                &shared.pipes,
                limits.buffer_size,
                limits.idle_timeout,
            )
            .await;
            (moved, result, guard.verdict().cloned())
        }
        Some(tls) => {
            let (read, mut write) = client.split();
            let mut client = FirstBytesGuard::new(read, rule, true);
            let bounded = shared.kernel_tls.enabled();
            let upstream = handshake_with(
                &tls,
                tls.config.clone(),
                upstream,
                limits.connect_timeout,
                bounded,
            )
            .await
            .map_err(fail)?;
            shared.stats.connected(&label, connecting.elapsed());
            // A connection that failed on its way into the kernel was never used.
            let not_handed = |error: io::Error| {
                let refusal = Refusal::Handshake(HandshakeFailure::Other);
                fail(Refused::new(refusal, error.to_string()))
            };
            let relayed = over_tls(shared, &mut client, &mut write, upstream).await;
            let (moved, result) = relayed.map_err(not_handed)?;
            let (moved, result) = match result {
                Err(error) if sniff::is_reroute(&error) => {
                    // Nothing of the client's was written to the TLS connection.
                    let direct = dial(shared, &routed.upstream).await.map_err(fail)?;
                    let (more, result) = relay_tcp(
                        &mut client,
                        write.as_ref(),
                        &direct,
                        &shared.pipes,
                        limits.buffer_size,
                        limits.idle_timeout,
                    )
                    .await;
                    (add(moved, more), result)
                }
                other => (moved, other),
            };
            (moved, result, client.verdict().cloned())
        }
    };
    drop(active);
    let counted = match verdict {
        Some(Verdict::Passthrough { .. }) => None,
        Some(Verdict::Declared { sni: Some(sni) }) => Some(named(&routed.candidates, &sni, &label)),
        _ => Some(label.clone()),
    };
    finish(shared, routed, counted.as_deref(), moved, result).map_err(|refused| (counted, refused))
}

/// Relays a client over a TLS connection just made: its keys in the kernel if
/// `--kernel-tls` can take them, and then spliced (the bytes never enter userspace),
/// else through rustls. An error: the connection could not be handed over and is
/// closed.
async fn over_tls(
    shared: &Shared,
    client: &mut FirstBytesGuard<ReadHalf<'_>>,
    client_write: &mut WriteHalf<'_>,
    upstream: UpstreamTls,
) -> io::Result<(Transferred, io::Result<()>)> {
    let (buffer_size, idle) = (shared.limits.buffer_size, shared.limits.idle_timeout);
    Ok(match shared.kernel_tls.offload(upstream)? {
        Offload::Kernel(mut upstream) => {
            shared.stats.kernel_tls_connection();
            let (read, write) = upstream.split();
            let limits = (&shared.pipes, buffer_size, idle);
            let relayed = relay_spliced(client, client_write.as_ref(), read, write, limits).await;
            with_pending_alert(relayed, &mut upstream).await
        }
        Offload::Rustls(mut upstream) => {
            let mut client = tokio::io::join(client, client_write);
            let relayed = relay_tls(&mut client, &mut upstream, buffer_size, idle).await;
            with_pending_alert(relayed, &mut upstream).await
        }
    })
}

/// Judges an opening read before dialing; what passes is spliced to the dialed address
/// unchanged (the client's own TLS, or plaintext where that is allowed).
pub(super) async fn judged_splice(
    shared: &Shared,
    routed: &Routed,
    client: TcpStream,
    held: Vec<u8>,
    opening: &Opening,
) -> Result<(), Failure> {
    let rule = opening_rule(&routed.candidates, routed.original);
    match rule.judge(opening) {
        Ok(Verdict::Declared { sni }) => {
            let backend = match sni {
                Some(sni) => named(&routed.candidates, &sni, "-"),
                None => routed.label(),
            };
            splice_to_dialed(shared, routed, client, held, Some(backend)).await
        }
        Ok(Verdict::Passthrough { .. }) => {
            splice_to_dialed(shared, routed, client, held, None).await
        }
        Err(refused) => Err((Some(routed.label()), opening_refusal(refused))),
    }
}

/// Splices an already-judged client (its opening `held` for replay) to the dialed
/// address as it is; counted for `backend`, or as a passthrough if `None`.
pub(super) async fn splice_to_dialed(
    shared: &Shared,
    routed: &Routed,
    mut client: TcpStream,
    held: Vec<u8>,
    backend: Option<String>,
) -> Result<(), Failure> {
    let upstream = dial(shared, &routed.upstream)
        .await
        .map_err(|refused| (backend.clone(), refused))?;
    let counted = backend.as_deref().unwrap_or("-");
    let active = (shared.stats).active_guard_from(counted, routed.source_namespace());
    let limits = shared.limits;
    let (read, write) = client.split();
    let mut replayed = FirstBytesGuard::released(read, held);
    let (moved, result) = relay_tcp(
        &mut replayed,
        write.as_ref(),
        &upstream,
        &shared.pipes,
        limits.buffer_size,
        limits.idle_timeout,
    )
    .await;
    drop(active);
    let finished = finish(shared, routed, backend.as_deref(), moved, result);
    finished.map_err(|refused| (backend, refused))
}

/// Counts the end of a forwarded (`Some(backend)`) or passed-through (`None`)
/// connection and writes its access-log line, or turns its error into a refusal (which
/// the caller reports, with the bytes moved).
fn finish(
    shared: &Shared,
    routed: &Routed,
    backend: Option<&str>,
    moved: Transferred,
    result: io::Result<()>,
) -> Result<(), Refused> {
    let key = backend.unwrap_or("-");
    shared
        .stats
        .transferred(key, moved.client_to_upstream, moved.upstream_to_client);
    let source_namespace = routed.source_namespace();
    // A virtual address names no Backend on its undeclared ports; any other address
    // was passed on for the client's own TLS to another name.
    let passthrough = match routed.candidates.is_empty() {
        true => "undeclared_port",
        false => "undeclared_sni",
    };
    let count = |reason: Option<&str>| match backend {
        Some(backend) => {
            shared.stats.forwarded(backend, source_namespace);
            log_connection(shared, routed, backend, moved, Outcome::Forwarded, reason);
        }
        None => {
            shared.stats.passthrough(passthrough);
            let reason = Some(passthrough);
            log_connection(shared, routed, key, moved, Outcome::Passthrough, reason);
        }
    };
    let Err(error) = result else {
        count(None);
        tracing::debug!(
            backend = key,
            sent = moved.client_to_upstream,
            received = moved.upstream_to_client,
            "finished"
        );
        return Ok(());
    };
    let refused = match (sniff::refusal(&error), HandshakeFailure::classify(&error)) {
        (Some(refused), _) => opening_refusal(refused.clone()),
        (None, HandshakeFailure::RejectedByServer) => Refused::new(
            Refusal::Handshake(HandshakeFailure::RejectedByServer),
            format!("the server rejected the handshake (client certificate?): {error}"),
        ),
        (None, _) => {
            // The relay's idle timer (see `relay.rs`).
            let idle = error.kind() == io::ErrorKind::TimedOut;
            count(idle.then_some("idle_timeout"));
            if idle {
                shared.stats.idle_closed(key);
            }
            tracing::debug!(backend = key, %error, "connection ended with an error");
            return Ok(());
        }
    };
    Err(Refused { moved, ..refused })
}

fn add(a: Transferred, b: Transferred) -> Transferred {
    Transferred {
        client_to_upstream: a.client_to_upstream + b.client_to_upstream,
        upstream_to_client: a.upstream_to_client + b.upstream_to_client,
    }
}

async fn dial(shared: &Shared, to: &[SocketAddr]) -> Result<TcpStream, Refused> {
    connect_any(&shared.agent_sockets, to, shared.limits.connect_timeout)
        .await
        .map(|(stream, _)| stream)
        .map_err(|error| Refused::new(Refusal::UpstreamConnect, format!("cannot connect: {error}")))
}
