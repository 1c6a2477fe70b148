//! Egress policy: what a process may reach besides declared Backends.
//!
//! The connect and sendmsg hooks ask [`judge`] about every TCP connect and UDP datagram
//! that is neither DNS nor redirected to the proxy; `dns_egress` asks [`judge_packet`]
//! about every packet of a socket the hooks never see (raw, ICMP ping, SCTP...), since a
//! process that keeps CAP_NET_RAW could otherwise send what its connects may not.
//!
//! Exempt always: loopback and unspecified destinations, the agent's own listeners,
//! networks in `ALLOWED_NETS`, the agent's own sockets and cgroups. The rest is judged
//! by the caller's mode: that of its deepest ancestor cgroup in `CGROUP_MODES`, else
//! `EgressConfig::default_mode` (or allow, with `PODS_ONLY`, outside the pod tree).
//! `AUDIT` and `DENY` send an [`EgressEvent`] to the agent through `EGRESS_EVENTS`.
//!
//! Everything here reads pinned maps only: the policy holds with no agent running.

use aya_ebpf::{
    helpers::{
        bpf_get_current_ancestor_cgroup_id, bpf_sk_fullsock, bpf_skb_ancestor_cgroup_id,
        bpf_skb_cgroup_id,
    },
    macros::map,
    maps::{Array, HashMap, LpmTrie, LruHashMap, PerCpuArray, RingBuf, lpm_trie::Key},
    programs::{SkBuffContext, SockAddrContext},
};
use redirector_common::{
    EgressConfig, EgressEvent, Endpoint, MAX_CGROUP_DEPTH, egress_mode, egress_reason,
};

use crate::{AGENT_SOCKETS, CONFIG, IPPROTO_TCP, IPPROTO_UDP, caller_cgroup, cookie_of, dns};

#[map]
static EGRESS_CONFIG: Array<EgressConfig> = Array::with_max_entries(1, 0);
#[map]
static ALLOWED_NETS: LpmTrie<[u32; 4], u32> = LpmTrie::with_max_entries(1, 0);
#[map]
static CGROUP_MODES: HashMap<u64, u32> = HashMap::with_max_entries(1, 0);
#[map]
static AGENT_CGROUPS: LruHashMap<u64, u32> = LruHashMap::with_max_entries(1, 0);
#[map]
static EGRESS_EVENTS: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);
#[map]
static EGRESS_LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

const SOCK_STREAM: u32 = 1;
const SOCK_DGRAM: u32 = 2;

/// What the policy says of one destination.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Refuse,
}

/// The policy's settings, if any process may be subject to it.
#[inline(always)]
pub fn active() -> Option<EgressConfig> {
    EGRESS_CONFIG
        .get(0)
        .copied()
        .filter(|config| config.flags & EgressConfig::ACTIVE != 0)
}

/// Judges a connect or datagram of the calling process to `to` (not DNS, not
/// redirected), raising `reason` if it is refused or audited.
#[inline(always)]
pub fn judge(ctx: &SockAddrContext, to: &Endpoint, protocol: u32, reason: u8) -> Verdict {
    let Some(config) = active() else {
        return Verdict::Pass;
    };
    if exempt_destination(to) {
        return Verdict::Pass;
    }
    // Only now: the first cookie asked of a socket is made then, with an atomic
    // increment every CPU shares.
    let cookie = cookie_of(ctx);
    // SAFETY: both only tested for presence.
    if unsafe { AGENT_SOCKETS.get(&cookie) }.is_some()
        || unsafe { AGENT_CGROUPS.get(&caller_cgroup()) }.is_some()
    {
        return Verdict::Pass;
    }
    let mode = mode_of(&config, |level| {
        // SAFETY: the helper only reads the current task's cgroup.
        unsafe { bpf_get_current_ancestor_cgroup_id(level) }
    });
    report(mode, caller_cgroup(), to, protocol as u8, reason)
}

/// `dns_egress`: judges a packet of a socket the connect hooks do not see (anything but
/// TCP stream and UDP datagram sockets), and a source-routed one of a socket they do see
/// (the hooks judged the final destination; the packet goes to the first hop first).
#[inline(always)]
pub fn judge_packet(skb: &SkBuffContext) -> Verdict {
    let Some(config) = active() else {
        return Verdict::Pass;
    };
    let raw = skb.skb.skb;
    // SAFETY: `sk` is a field of the context the kernel passed; null is checked, and
    // `bpf_sk_fullsock` checks what it points to.
    let sock = unsafe {
        let sk = core::ptr::read_volatile(core::ptr::addr_of!((*raw).__bindgen_anon_2.sk));
        if sk.is_null() {
            return Verdict::Pass;
        }
        bpf_sk_fullsock(sk)
    };
    if sock.is_null() {
        // Request and time-wait sockets: TCP, seen by the connect hooks.
        return Verdict::Pass;
    }
    // SAFETY: a full socket, as the helper checked; fields read one word each.
    let (kind, protocol) = unsafe {
        (
            core::ptr::read_volatile(core::ptr::addr_of!((*sock).type_)),
            core::ptr::read_volatile(core::ptr::addr_of!((*sock).protocol)),
        )
    };
    let hooked = (kind == SOCK_STREAM && protocol == IPPROTO_TCP)
        || (kind == SOCK_DGRAM && protocol == IPPROTO_UDP);
    if hooked && !source_routed(skb) {
        return Verdict::Pass;
    }
    // SAFETY: the helpers read the socket's cgroup through the context.
    let cgroup = unsafe { bpf_skb_cgroup_id(raw) };
    // SAFETY: only tested for presence.
    if unsafe { AGENT_CGROUPS.get(&cgroup) }.is_some() {
        return Verdict::Pass;
    }
    let mode = mode_of(&config, |level| {
        // SAFETY: as above.
        unsafe { bpf_skb_ancestor_cgroup_id(raw, level) }
    });
    let Some(to) = packet_destination(skb) else {
        // Not an IP packet we can read: nothing to let through on trust.
        return match mode {
            egress_mode::DENY => Verdict::Refuse,
            _ => Verdict::Pass,
        };
    };
    if hooked {
        // Source routing: whatever the first hop, the final destination was judged by
        // the hooks alone, and a legitimate application has no use for it.
        return report(
            mode,
            cgroup,
            &to,
            protocol as u8,
            egress_reason::SOURCE_ROUTE,
        );
    }
    if exempt_destination(&to) || link_scope(&to) {
        return Verdict::Pass;
    }
    report(mode, cgroup, &to, protocol as u8, egress_reason::RAW_SOCKET)
}

/// Whether an outgoing packet carries IPv4 options or an IPv6 hop-by-hop, routing or
/// destination-options header: where source routing hides (LSRR/SSRR, an SRH).
#[inline(always)]
fn source_routed(skb: &SkBuffContext) -> bool {
    let Ok(first) = skb.load::<u8>(0) else {
        return false;
    };
    match first >> 4 {
        4 => first & 0x0f > 5,
        6 => matches!(skb.load::<u8>(6), Ok(0 | 43 | 60)),
        _ => false,
    }
}

/// Link-scope destinations (neighbour discovery, MLD, IGMP: the kernel's own raw
/// sockets carry their creator's cgroup): ff02::/16, fe80::/10, 224.0.0.0/24. They never
/// leave the link.
#[inline(always)]
fn link_scope(to: &Endpoint) -> bool {
    if to.is_v4_mapped() {
        let [a, b, c, _] = to.addr[3].to_ne_bytes();
        return a == 224 && b == 0 && c == 0;
    }
    let [a, b, _, _] = to.addr[0].to_ne_bytes();
    (a == 0xff && b == 0x02) || (a == 0xfe && b & 0xc0 == 0x80)
}

/// The destination address (port 0) of an outgoing IPv4 or IPv6 packet.
#[inline(always)]
fn packet_destination(skb: &SkBuffContext) -> Option<Endpoint> {
    let first: u8 = skb.load(0).ok()?;
    match first >> 4 {
        4 => Some(Endpoint::v4(skb.load(16).ok()?, 0)),
        6 => Some(Endpoint::v6(skb.load(24).ok()?, 0)),
        _ => None,
    }
}

/// The caller's mode: its deepest ancestor's in `CGROUP_MODES`, else the default (allow
/// outside the pod tree with `PODS_ONLY`).
#[inline(always)]
fn mode_of(config: &EgressConfig, ancestor: impl Fn(i32) -> u64) -> u32 {
    let mut mode = if config.flags & EgressConfig::PODS_ONLY != 0 {
        egress_mode::ALLOW
    } else {
        config.default_mode
    };
    for level in 1..=MAX_CGROUP_DEPTH {
        let id = ancestor(level);
        if id == 0 {
            break;
        }
        // SAFETY: the mode is copied out by value.
        if let Some(found) = unsafe { CGROUP_MODES.get(&id) }.copied() {
            mode = found;
        }
    }
    mode
}

/// Sends an event for a refused or audited destination; the verdict `mode` gives.
#[inline(always)]
fn report(mode: u32, cgroup: u64, to: &Endpoint, protocol: u8, reason: u8) -> Verdict {
    if mode == egress_mode::ALLOW {
        return Verdict::Pass;
    }
    let event = EgressEvent {
        cgroup,
        destination: *to,
        protocol,
        reason,
        mode: mode as u8,
        _pad: 0,
    };
    if EGRESS_EVENTS.output::<EgressEvent>(&event, 0).is_err()
        && let Some(lost) = EGRESS_LOST.get_ptr_mut(0)
    {
        // SAFETY: this CPU's own slot.
        unsafe { *lost += 1 };
    }
    if mode == egress_mode::DENY {
        Verdict::Refuse
    } else {
        Verdict::Pass
    }
}

/// Destinations every process may reach: loopback and unspecified addresses, the
/// agent's listeners, allowed networks.
#[inline(always)]
fn exempt_destination(to: &Endpoint) -> bool {
    if loopback_or_unspecified(to) {
        return true;
    }
    if let Some(proxy) = CONFIG.get(0)
        && (*to == proxy.v4 || *to == proxy.v6)
    {
        return true;
    }
    if let Some(dns) = dns::config()
        && (*to == dns.v4 || *to == dns.v6)
    {
        return true;
    }
    ALLOWED_NETS.get(Key::new(128, to.addr)).is_some()
}

/// 127.0.0.0/8 and 0.0.0.0 (mapped), ::1 and ::. Not the rest of 0.0.0.0/8: since Linux
/// 5.3 those are ordinary unicast addresses that leave through the routes.
#[inline(always)]
fn loopback_or_unspecified(at: &Endpoint) -> bool {
    if at.is_v4_mapped() {
        at.addr[3] == 0 || at.addr[3].to_ne_bytes()[0] == 127
    } else {
        let loopback = u32::from_ne_bytes([0, 0, 0, 1]);
        at.addr[..3] == [0, 0, 0] && (at.addr[3] == 0 || at.addr[3] == loopback)
    }
}
