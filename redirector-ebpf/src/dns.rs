//! DNS capture: pods' queries to port 53 of any nameserver go to the agent's DNS
//! listener, which answers Backend names with virtual addresses and forwards the rest.
//!
//! 1. `connect4/6` (UDP and TCP) and `sendmsg4/6` (unconnected UDP) to port 53: record
//!    the nameserver under the socket cookie (`DNS_SOCKETS`), send to the agent instead.
//! 2. `dns_egress` (cgroup_skb): for each packet of such a socket to the agent, copy the
//!    record under the packet's source address (`DNS_PENDING`): that is the peer address
//!    the agent sees, and the only key it can compute (a UDP socket may not even have a
//!    port yet when it connects).
//! 3. `recvmsg4/6`: replies from the agent's listener appear to come from the nameserver
//!    the application asked (resolvers check this); `getpeername` says the same.
//!
//! Capture needs a live agent: only while the `HEARTBEAT` it refreshes is fresh. A dead
//! agent stops capture within `DnsConfig::liveness_ns`, and pods resolve as before.

use aya_ebpf::{
    helpers::bpf_ktime_get_boot_ns,
    macros::map,
    maps::{Array, LruHashMap},
    programs::{SkBuffContext, SockAddrContext},
};
use redirector_common::{CLUSTER_SCOPE, DNS_PORT, DnsConfig, DnsRecord, Endpoint, ProxyConfig};

use crate::{AGENT_SOCKETS, ALLOW, caller_cgroup, cookie_of, sockaddr};

#[map]
pub static DNS_CONFIG: Array<DnsConfig> = Array::with_max_entries(1, 0);
#[map]
static HEARTBEAT: Array<u64> = Array::with_max_entries(1, 0);
#[map]
pub static DNS_SOCKETS: LruHashMap<u64, DnsRecord> = LruHashMap::with_max_entries(1, 0);
#[map]
static DNS_PENDING: LruHashMap<Endpoint, DnsRecord> = LruHashMap::with_max_entries(1, 0);
/// Written and read by the agent only; declared here so it is created and pinned with
/// the others.
#[map]
static VIRTUAL_HOSTS: aya_ebpf::maps::HashMap<u64, u32> =
    aya_ebpf::maps::HashMap::with_max_entries(1, 0);

const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

/// The DNS settings, if DNS is captured now (enabled, and the agent's heartbeat fresh).
#[inline(always)]
pub fn live_config() -> Option<DnsConfig> {
    let config = DNS_CONFIG.get(0).copied()?;
    if config.flags & DnsConfig::CAPTURE == 0 {
        return None;
    }
    let beat = HEARTBEAT.get(0).copied().unwrap_or(0);
    // SAFETY: reads the clock.
    let now = unsafe { bpf_ktime_get_boot_ns() };
    if now.wrapping_sub(beat) > config.liveness_ns {
        return None;
    }
    Some(config)
}

/// The settings as written, live agent or not: the virtual ranges are guarded always.
#[inline(always)]
pub fn config() -> Option<DnsConfig> {
    DNS_CONFIG.get(0).copied()
}

/// A connect or datagram to `original` (port 53): recorded and sent to the agent's DNS
/// listener (`Some(ALLOW)`), or the agent's own (`Some(ALLOW)`, untouched). `None`: not
/// captured (capture off, no live agent, no listener of the family, a loopback
/// nameserver): the caller judges it like any destination.
#[inline(always)]
pub fn capture(
    ctx: &SockAddrContext,
    family: sockaddr::Family,
    original: Endpoint,
    proxy: Option<&ProxyConfig>,
    scope: impl FnOnce() -> u64,
) -> Option<i32> {
    // A loopback nameserver lives in the caller's own network namespace, where the
    // agent cannot reach it: such queries stay where they are. So do queries to an
    // unspecified address, which Linux delivers to loopback too (forwarded by the
    // agent, they would reach the node's own loopback).
    if is_local(&original) {
        return None;
    }
    let config = live_config()?;
    // The agent's own sockets (its resolver, its forwarder) see the real answers.
    let cookie = cookie_of(ctx);
    // SAFETY: only tested for presence.
    if unsafe { AGENT_SOCKETS.get(&cookie) }.is_some() {
        return Some(ALLOW);
    }
    let to = match family {
        sockaddr::Family::V6 if !original.is_v4_mapped() => {
            if config.flags & DnsConfig::HAS_V6 == 0 {
                return None;
            }
            config.v6
        }
        _ => {
            if config.flags & DnsConfig::HAS_V4 == 0 {
                return None;
            }
            config.v4
        }
    };
    let scoped = proxy.is_some_and(|p| p.flags & ProxyConfig::SCOPED != 0);
    let record = DnsRecord {
        scope: if scoped { scope() } else { CLUSTER_SCOPE },
        cgroup: caller_cgroup(),
        nameserver: original,
        _pad: [0; 4],
    };
    // Without the record the agent could not tell where to forward: leave this query
    // alone rather than break it (an LRU insert fails only on memory pressure).
    if DNS_SOCKETS.insert(&cookie, &record, 0).is_err() {
        return None;
    }
    sockaddr::set_destination(ctx, family, &to);
    Some(ALLOW)
}

/// 127.0.0.0/8 or 0.0.0.0/8 (mapped), ::1 or ::.
#[inline(always)]
pub fn is_local(at: &Endpoint) -> bool {
    if at.is_v4_mapped() {
        matches!(at.addr[3].to_ne_bytes()[0], 0 | 127)
    } else {
        let loopback = u32::from_ne_bytes([0, 0, 0, 1]);
        at.addr[..3] == [0, 0, 0] && (at.addr[3] == 0 || at.addr[3] == loopback)
    }
}

/// Whether a connect or datagram to `original` is DNS to capture.
#[inline(always)]
pub fn is_dns(protocol: u32, original: &Endpoint) -> bool {
    original.port == DNS_PORT
        && (protocol == u32::from(IPPROTO_UDP) || protocol == u32::from(IPPROTO_TCP))
}

/// `recvmsg` and `getpeername`: on a captured socket, the agent's listener appears as
/// the nameserver the application asked (resolvers check where replies come from).
#[inline(always)]
pub fn restore_source(ctx: &SockAddrContext, family: sockaddr::Family) {
    let Some(record) = record_of(ctx) else {
        return;
    };
    let Some(config) = config() else {
        return;
    };
    let from = sockaddr::destination(ctx, family);
    if from == config.v4 || from == config.v6 {
        sockaddr::set_destination(ctx, family, &record.nameserver);
    }
}

#[inline(always)]
fn record_of(ctx: &SockAddrContext) -> Option<DnsRecord> {
    // SAFETY: the record is copied out by value.
    unsafe { DNS_SOCKETS.get(&cookie_of(ctx)) }.copied()
}

/// `dns_egress`: copies a captured socket's record under the source address of each of
/// its packets to the agent's DNS listener.
#[inline(always)]
pub fn note_egress(skb: &SkBuffContext) -> Result<(), i64> {
    let Some(config) = config().filter(|c| c.flags & DnsConfig::CAPTURE != 0) else {
        return Ok(());
    };
    let first: u8 = skb.load(0)?;
    let (protocol, l4, src, dst) = match first >> 4 {
        4 => {
            let protocol: u8 = skb.load(9)?;
            let l4 = usize::from(first & 0x0f) * 4;
            let src: u32 = skb.load(12)?;
            let dst: u32 = skb.load(16)?;
            (protocol, l4, Endpoint::v4(src, 0), Endpoint::v4(dst, 0))
        }
        6 => {
            // Extension headers are not followed: the stack adds none to DNS.
            let protocol: u8 = skb.load(6)?;
            let src: [u32; 4] = skb.load(8)?;
            let dst: [u32; 4] = skb.load(24)?;
            (protocol, 40, Endpoint::v6(src, 0), Endpoint::v6(dst, 0))
        }
        _ => return Ok(()),
    };
    if protocol != IPPROTO_UDP && protocol != IPPROTO_TCP {
        return Ok(());
    }
    let ports: u32 = skb.load(l4)?;
    let [s0, s1, d0, d1] = ports.to_ne_bytes();
    let src = Endpoint {
        port: u16::from_be_bytes([s0, s1]),
        ..src
    };
    let dst = Endpoint {
        port: u16::from_be_bytes([d0, d1]),
        ..dst
    };
    if dst != config.v4 && dst != config.v6 {
        return Ok(());
    }
    // SAFETY: the record is copied out by value.
    let Some(record) = (unsafe { DNS_SOCKETS.get(&cookie_of(skb)) }).copied() else {
        return Ok(());
    };
    DNS_PENDING.insert(&src, &record, 0).map_err(i64::from)
}
