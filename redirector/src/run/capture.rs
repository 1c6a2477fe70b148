//! DNS capture's part of the wiring: the datapath settings and the heartbeat.

use std::net::SocketAddr;

use redirector_common::DnsConfig;
use tokio_util::sync::CancellationToken;

use crate::{
    cli::CaptureArgs,
    datapath::{Heartbeat, endpoint},
    virtual_hosts::VirtualRanges,
};

/// The datapath's DNS capture settings.
pub fn dns_config(capture: &CaptureArgs, listeners: &[SocketAddr]) -> DnsConfig {
    let mut config = DnsConfig {
        liveness_ns: u64::try_from(Heartbeat::LIVENESS.as_nanos()).unwrap_or(u64::MAX),
        ..DnsConfig::default()
    };
    VirtualRanges {
        v4: capture.virtual_ipv4_range,
        v6: capture.virtual_ipv6_range,
    }
    .write_to(&mut config);
    if capture.no_dns_capture {
        tracing::warn!(
            "DNS capture is off (--no-dns-capture): connects are recognised by address \
             alone, and a Backend name that a pod's nameserver answers differently from \
             the agent's goes direct"
        );
        return config;
    }
    config.flags |= DnsConfig::CAPTURE;
    for addr in listeners {
        let (flag, slot) = if addr.is_ipv4() {
            (DnsConfig::HAS_V4, &mut config.v4)
        } else {
            (DnsConfig::HAS_V6, &mut config.v6)
        };
        config.flags |= flag;
        *slot = endpoint::from_socket_addr(*addr);
    }
    tracing::info!(
        "DNS capture: queries to port 53 from the cgroup go to the agent (its own \
         resolver's and forwarder's sockets are exempt)"
    );
    config
}

/// Refreshes the datapath's heartbeat until `shutdown`. Then, unless another agent
/// beats too (an upgrade: the new agent keeps capture alive), stops it at once so pods
/// use their own nameservers; only after that does the DNS listener close (`dns_stop`),
/// so no query is captured towards a closed port.
pub async fn heartbeat(
    mut beat: Heartbeat,
    shutdown: CancellationToken,
    dns_stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval(Heartbeat::INTERVAL);
    let mut last = 0;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = ticks.tick() => match beat.beat() {
                Ok(written) => last = written,
                Err(error) => tracing::warn!(%error, "cannot refresh the DNS capture heartbeat"),
            },
        }
    }
    // Another agent's beat lands within one interval.
    tokio::time::sleep(Heartbeat::INTERVAL + Heartbeat::INTERVAL / 5).await;
    match beat.read() {
        Ok(now) if now != last => {
            tracing::info!("another agent keeps DNS capture alive; leaving the heartbeat to it");
        }
        _ => {
            if let Err(error) = beat.stop() {
                tracing::warn!(%error, "cannot stop the DNS capture heartbeat; it lapses within seconds");
            }
        }
    }
    dns_stop.cancel();
}
