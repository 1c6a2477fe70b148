//! What the hooks refused or audited: read from the `EGRESS_EVENTS` ring buffer,
//! counted in `redirector_egress_denied_total`, and logged with the workload, the
//! destination and the name the workload had resolved for it, rate-limited per
//! (source, destination) so that a pod retrying in a loop cannot flood the log.

use std::{collections::HashMap, net::SocketAddr, sync::Arc, time::Duration};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use redirector_common::{EgressEvent, egress_mode, egress_reason};
use tokio::{
    io::{Interest, unix::AsyncFd},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use crate::{
    datapath::{EgressEvents, endpoint},
    resolved_names::ResolvedNames,
    workload::Workloads,
};

/// One line per (source, destination) and window; the rest are counted into it.
const LOG_WINDOW: Duration = Duration::from_secs(10);
/// (source, destination) pairs whose window is remembered at most.
const MAX_LOGGED_PAIRS: usize = 4096;
/// How often the hooks' lost-event count is read into the metrics.
const LOST_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeniedLabels {
    source_namespace: String,
    reason: &'static str,
    /// `deny` (refused) or `audit` (let through, reported).
    policy: &'static str,
}

#[derive(Default)]
pub struct EgressMetrics {
    denied: Family<DeniedLabels, Counter>,
    lost: Gauge,
}

impl EgressMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "redirector_egress_denied",
            "Destinations the egress policy refused (policy=deny) or would have \
             (policy=audit), by source namespace (empty outside Kubernetes) and reason",
            self.denied.clone(),
        );
        registry.register(
            "redirector_egress_events_lost",
            "Refusals and audit hits the hooks could not report (their ring buffer was \
             full): counted nowhere else",
            self.lost.clone(),
        );
    }
}

/// Reads events until `shutdown`.
pub fn spawn_reader(
    source: EgressEvents,
    workloads: Arc<Workloads>,
    names: Option<Arc<ResolvedNames>>,
    metrics: Arc<EgressMetrics>,
    shutdown: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let EgressEvents { ring, lost } = source;
    // SAFETY: the ring buffer owns its map's descriptor, which stays open and the same
    // for as long as the `AsyncFd` owns the ring buffer.
    let registered = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) };
    let mut ring = registered.map_err(std::io::Error::from)?;
    let reader = Reader {
        workloads,
        names,
        metrics,
        logged: HashMap::new(),
    };
    Ok(tokio::spawn(async move {
        let mut reader = reader;
        let mut tick = tokio::time::interval(LOST_EVERY);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {
                    reader.metrics.lost.set(lost.count().try_into().unwrap_or(i64::MAX));
                }
                ready = ring.readable_mut() => {
                    let mut guard = match ready {
                        Ok(guard) => guard,
                        Err(error) => {
                            tracing::error!(%error, "the egress policy's event ring buffer cannot be read: refusals are no longer counted or logged (the policy itself holds)");
                            return;
                        }
                    };
                    let ring = guard.get_inner_mut();
                    let mut events = Vec::new();
                    while let Some(item) = ring.next() {
                        events.extend(decode(&item));
                    }
                    guard.clear_ready();
                    for event in events {
                        reader.handle(&event).await;
                    }
                }
            }
        }
    }))
}

/// An event from its bytes, laid out as `#[repr(C)]` [`EgressEvent`] is (native order).
fn decode(bytes: &[u8]) -> Option<EgressEvent> {
    let bytes: &[u8; 32] = bytes.get(..32)?.try_into().ok()?;
    let word =
        |at: usize| u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let mut cgroup = [0u8; 8];
    cgroup.copy_from_slice(&bytes[..8]);
    Some(EgressEvent {
        cgroup: u64::from_ne_bytes(cgroup),
        destination: redirector_common::Endpoint {
            addr: [word(8), word(12), word(16), word(20)],
            port: u16::from_ne_bytes([bytes[24], bytes[25]]),
            _pad: [0; 2],
        },
        protocol: bytes[28],
        reason: bytes[29],
        mode: bytes[30],
        _pad: 0,
    })
}

struct Window {
    started: Instant,
    suppressed: u64,
}

struct Reader {
    workloads: Arc<Workloads>,
    names: Option<Arc<ResolvedNames>>,
    metrics: Arc<EgressMetrics>,
    logged: HashMap<(u64, SocketAddr, u8), Window>,
}

impl Reader {
    async fn handle(&mut self, event: &EgressEvent) {
        // A miss walks the cgroup tree: on the blocking pool, not this task's thread.
        let workload = self.workloads.resolve(event.cgroup).await;
        let reason = reason_name(event.reason);
        let policy = if u32::from(event.mode) == egress_mode::DENY {
            "deny"
        } else {
            "audit"
        };
        let labels = DeniedLabels {
            source_namespace: workload.source_namespace().to_owned(),
            reason,
            policy,
        };
        self.metrics.denied.get_or_create(&labels).inc();
        let destination = endpoint::to_socket_addr(&event.destination);
        let Some(suppressed) = self.allow_line((event.cgroup, destination, event.protocol)) else {
            return;
        };
        let name =
            (self.names.as_ref()).and_then(|names| names.name_of(event.cgroup, destination.ip()));
        let name = name.as_deref().unwrap_or("-");
        let protocol = protocol_name(event.protocol);
        let to = match destination.port() {
            0 => destination.ip().to_string(),
            _ => destination.to_string(),
        };
        let namespace = workload.namespace.as_deref().unwrap_or("-");
        let pod = workload.pod.as_deref().unwrap_or("-");
        let account = workload.service_account.as_deref().unwrap_or("-");
        let cgroup = &workload.cgroup;
        let what = if policy == "deny" {
            "refused"
        } else {
            "audited (policy audit: let through)"
        };
        tracing::warn!(
            source_namespace = namespace,
            source_pod = pod,
            source_service_account = account,
            source_cgroup = %cgroup,
            destination = %to,
            protocol,
            name,
            reason,
            policy,
            suppressed,
            "egress {what}: {protocol} to {to} ({name}) is not a declared Backend or an allowed network"
        );
    }

    /// `Some(n)`: log this event, after `n` suppressed for the same pair; `None`: not.
    fn allow_line(&mut self, key: (u64, SocketAddr, u8)) -> Option<u64> {
        let now = Instant::now();
        if self.logged.len() >= MAX_LOGGED_PAIRS && !self.logged.contains_key(&key) {
            self.logged
                .retain(|_, w| now.duration_since(w.started) < LOG_WINDOW);
            if self.logged.len() >= MAX_LOGGED_PAIRS {
                return None;
            }
        }
        match self.logged.get_mut(&key) {
            Some(window) if now.duration_since(window.started) < LOG_WINDOW => {
                window.suppressed += 1;
                None
            }
            Some(window) => {
                window.started = now;
                Some(std::mem::take(&mut window.suppressed))
            }
            None => {
                let window = Window {
                    started: now,
                    suppressed: 0,
                };
                self.logged.insert(key, window);
                Some(0)
            }
        }
    }
}

fn reason_name(reason: u8) -> &'static str {
    match reason {
        egress_reason::UNDECLARED_ADDRESS => "undeclared_address",
        egress_reason::UNDECLARED_PORT => "undeclared_port",
        egress_reason::RAW_SOCKET => "raw_socket",
        egress_reason::SOURCE_ROUTE => "source_route",
        _ => "other",
    }
}

fn protocol_name(protocol: u8) -> &'static str {
    match protocol {
        1 => "icmp",
        6 => "tcp",
        17 => "udp",
        58 => "icmpv6",
        132 => "sctp",
        255 => "raw",
        _ => "ip",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader() -> Reader {
        Reader {
            workloads: Arc::new(Workloads::new("/nonexistent".into(), false)),
            names: None,
            metrics: Arc::new(EgressMetrics::default()),
            logged: HashMap::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_line_per_pair_and_window() {
        let mut reader = reader();
        let a = (1, "10.200.0.1:443".parse().unwrap(), 6);
        let b = (2, "10.200.0.1:443".parse().unwrap(), 6);
        assert_eq!(reader.allow_line(a), Some(0));
        assert_eq!(reader.allow_line(a), None);
        assert_eq!(reader.allow_line(a), None);
        assert_eq!(reader.allow_line(b), Some(0), "another source has its own");
        tokio::time::advance(LOG_WINDOW).await;
        assert_eq!(reader.allow_line(a), Some(2), "the suppressed are counted");
    }

    #[test]
    fn events_decode_from_their_bytes() {
        let event = EgressEvent {
            cgroup: 42,
            destination: endpoint::from_socket_addr("10.200.3.4:8080".parse().unwrap()),
            protocol: 17,
            reason: egress_reason::UNDECLARED_ADDRESS,
            mode: egress_mode::DENY as u8,
            _pad: 0,
        };
        assert_eq!(std::mem::size_of::<EgressEvent>(), 32);
        // SAFETY (test): a `#[repr(C)]` value of plain integers viewed as its bytes.
        let bytes: &[u8] =
            unsafe { std::slice::from_raw_parts((&event as *const EgressEvent).cast::<u8>(), 32) };
        assert_eq!(decode(bytes), Some(event));
        assert_eq!(decode(&bytes[..10]), None);
    }
}
