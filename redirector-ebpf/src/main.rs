//! The redirector datapath: cgroup hooks that send connects to declared Backends to the
//! node's proxy, and tell the application the address it dialed.
//!
//! Life of a redirected socket:
//! 1. `connect4`/`connect6`: the destination is a Backend address (in the caller's scope,
//!    found through its cgroup ancestry in `SCOPES`, or in the cluster scope) -> record the
//!    original destination under the socket cookie (`SOCKETS`), rewrite it to the proxy.
//!    From a pod not mapped to its namespace yet (below the `POD_TREE` marker, in no
//!    listed pod) a connect to a Backend address is refused instead.
//! 2. `sock_ops`, TCP_CONNECT: ask for state callbacks on that socket.
//!    `sock_ops`, ACTIVE_ESTABLISHED: copy the record to `PENDING` under the client's local
//!    address, which is the peer address the proxy sees on `accept`; the proxy deletes it.
//! 3. `getpeername4`/`getpeername6`: answer with the original destination.
//! 4. `sock_ops`, state -> TCP_CLOSE: delete both records. LRU maps are only a backstop.
//!
//! The agent's own upstream sockets are listed in `AGENT_SOCKETS` (by cookie) before they
//! connect, and are never redirected.
//!
//! DNS capture (`dns.rs`) sends queries to port 53 to the agent, which answers Backend
//! names with virtual addresses. A connect to a virtual address is matched like any
//! Backend address: (address, port) names the Backend; (address, port 0) the hostname's
//! passthrough for undeclared ports. A virtual address with neither is refused: it
//! leads nowhere real.
//!
//! Helpers are `#[inline(always)]`: with `family` a constant at each call site, every
//! context access gets a fixed offset, which the verifier requires.
#![no_std]
#![no_main]
// Map calls take `&key` on purpose: aya-ebpf 0.2 accepts `impl Borrow<K>`, 0.3 wants `&K`.
#![allow(clippy::needless_borrows_for_generic_args)]

mod dns;
mod policy;
mod sock_ops;
mod sockaddr;

use aya_ebpf::{
    EbpfContext,
    helpers::{
        bpf_get_current_ancestor_cgroup_id, bpf_get_current_cgroup_id, bpf_get_socket_cookie,
    },
    macros::{cgroup_skb, cgroup_sock_addr, map, sock_ops},
    maps::{Array, HashMap, LruHashMap},
    programs::{SkBuffContext, SockAddrContext, SockOpsContext},
};
use redirector_common::{
    BackendKey, CLUSTER_SCOPE, Endpoint, MAX_CGROUP_DEPTH, PASSTHROUGH_BIT, POD_TREE, ProxyConfig,
    Redirect, egress_reason,
};

/// Verdict of a cgroup sock_addr program: let the (possibly rewritten) call proceed.
const ALLOW: i32 = 1;
/// Verdict of a cgroup sock_addr program: fail the call with EPERM.
const DENY: i32 = 0;
const AF_INET: u32 = 2;
pub(crate) const IPPROTO_TCP: u32 = 6;
pub(crate) const IPPROTO_UDP: u32 = 17;
/// `TCP_CLOSE` of the kernel's TCP state enum.
const TCP_CLOSE: u32 = 7;

// Sizes are placeholders: the agent sets them at load time (`--max-*` flags).
#[map]
static BACKENDS: HashMap<BackendKey, u64> = HashMap::with_max_entries(1, 0);
#[map]
static ENDPOINTS: HashMap<Endpoint, u32> = HashMap::with_max_entries(1, 0);
#[map]
static SCOPES: HashMap<u64, u64> = HashMap::with_max_entries(1, 0);
#[map]
static SOCKETS: LruHashMap<u64, Redirect> = LruHashMap::with_max_entries(1, 0);
#[map]
static PENDING: LruHashMap<Endpoint, Redirect> = LruHashMap::with_max_entries(1, 0);
#[map]
static AGENT_SOCKETS: LruHashMap<u64, u32> = LruHashMap::with_max_entries(1, 0);
#[map]
static CONFIG: Array<ProxyConfig> = Array::with_max_entries(1, 0);

#[cgroup_sock_addr(connect4)]
pub fn connect4(ctx: SockAddrContext) -> i32 {
    redirect_connect(&ctx, sockaddr::Family::V4)
}

#[cgroup_sock_addr(connect6)]
pub fn connect6(ctx: SockAddrContext) -> i32 {
    redirect_connect(&ctx, sockaddr::Family::V6)
}

#[cgroup_sock_addr(sendmsg4)]
pub fn sendmsg4(ctx: SockAddrContext) -> i32 {
    redirect_datagram(&ctx, sockaddr::Family::V4)
}

#[cgroup_sock_addr(sendmsg6)]
pub fn sendmsg6(ctx: SockAddrContext) -> i32 {
    redirect_datagram(&ctx, sockaddr::Family::V6)
}

#[cgroup_sock_addr(recvmsg4)]
pub fn recvmsg4(ctx: SockAddrContext) -> i32 {
    dns::restore_source(&ctx, sockaddr::Family::V4);
    // recvmsg programs must allow.
    ALLOW
}

#[cgroup_sock_addr(recvmsg6)]
pub fn recvmsg6(ctx: SockAddrContext) -> i32 {
    dns::restore_source(&ctx, sockaddr::Family::V6);
    ALLOW
}

#[cgroup_sock_addr(getpeername4)]
pub fn getpeername4(ctx: SockAddrContext) -> i32 {
    restore_original(&ctx, sockaddr::Family::V4);
    ALLOW
}

#[cgroup_sock_addr(getpeername6)]
pub fn getpeername6(ctx: SockAddrContext) -> i32 {
    restore_original(&ctx, sockaddr::Family::V6);
    ALLOW
}

/// Every outgoing packet of the cgroup: DNS bookkeeping, and the egress policy for
/// sockets the connect hooks never see. (Named before it judged packets: the pinned
/// link keeps the name.)
#[cgroup_skb(egress)]
pub fn dns_egress(ctx: SkBuffContext) -> i32 {
    let _ = dns::note_egress(&ctx);
    match policy::judge_packet(&ctx) {
        policy::Verdict::Pass => 1,
        policy::Verdict::Refuse => 0,
    }
}

#[sock_ops]
pub fn sock_ops(ctx: SockOpsContext) -> u32 {
    sock_ops::track_socket(&ctx);
    1
}

/// An unconnected datagram: DNS is captured; anything to a virtual address is refused
/// (only TCP is proxied, and the address leads nowhere real); the rest is the egress
/// policy's.
#[inline(always)]
fn redirect_datagram(ctx: &SockAddrContext, family: sockaddr::Family) -> i32 {
    let protocol = sockaddr::protocol(ctx);
    let original = sockaddr::destination(ctx, family);
    if dns::is_dns(protocol, &original) {
        let config = CONFIG.get(0).copied();
        return dns::capture(ctx, family, original, config.as_ref(), caller_scope)
            .unwrap_or_else(|| uncaptured_dns(ctx, &original, protocol));
    }
    undeclared(ctx, &original, protocol)
}

/// A connect or datagram that goes nowhere declared: refused at a virtual address (UDP,
/// or another protocol: only TCP is proxied), else as the egress policy says.
#[inline(always)]
fn undeclared(ctx: &SockAddrContext, original: &Endpoint, protocol: u32) -> i32 {
    if dns::config().is_some_and(|dns| dns.is_virtual(original)) {
        return DENY;
    }
    let reason = if protocol == IPPROTO_TCP || protocol == IPPROTO_UDP {
        egress_reason::UNDECLARED_ADDRESS
    } else {
        egress_reason::RAW_SOCKET
    };
    verdict(policy::judge(ctx, original, protocol, reason))
}

/// DNS that is not captured goes where the application sent it, if the egress policy
/// lets it: only captured DNS is exempt (uncaptured, port 53 would carry anything to
/// anyone).
#[inline(always)]
fn uncaptured_dns(ctx: &SockAddrContext, original: &Endpoint, protocol: u32) -> i32 {
    let reason = egress_reason::UNDECLARED_ADDRESS;
    verdict(policy::judge(ctx, original, protocol, reason))
}

#[inline(always)]
fn verdict(judged: policy::Verdict) -> i32 {
    match judged {
        policy::Verdict::Pass => ALLOW,
        policy::Verdict::Refuse => DENY,
    }
}

/// The cgroup (v2) id of the calling process: who the connection or query is from.
#[inline(always)]
fn caller_cgroup() -> u64 {
    // SAFETY: the helper only reads the current task's cgroup.
    unsafe { bpf_get_current_cgroup_id() }
}

#[inline(always)]
fn cookie_of<C: EbpfContext>(ctx: &C) -> u64 {
    // SAFETY: the helper only reads the context pointer the kernel handed us.
    unsafe { bpf_get_socket_cookie(ctx.as_ptr()) }
}

#[inline(always)]
fn redirect_connect(ctx: &SockAddrContext, family: sockaddr::Family) -> i32 {
    match try_redirect_connect(ctx, family) {
        Ok(verdict) => verdict,
        // The record could not be stored: a redirect the proxy cannot resolve would be
        // refused there anyway, and going direct could leak plaintext. Fail the connect.
        Err(()) => DENY,
    }
}

#[inline(always)]
fn try_redirect_connect(ctx: &SockAddrContext, family: sockaddr::Family) -> Result<i32, ()> {
    let protocol = sockaddr::protocol(ctx);
    let original = sockaddr::destination(ctx, family);
    let config = CONFIG.get(0).copied();
    if dns::is_dns(protocol, &original) {
        return Ok(
            dns::capture(ctx, family, original, config.as_ref(), caller_scope)
                .unwrap_or_else(|| uncaptured_dns(ctx, &original, protocol)),
        );
    }
    if protocol != IPPROTO_TCP {
        return Ok(undeclared(ctx, &original, protocol));
    }
    let Some(config) = config else {
        return Ok(verdict(policy::judge(
            ctx,
            &original,
            protocol,
            egress_reason::UNDECLARED_ADDRESS,
        )));
    };
    let mut matched = backend_for(&config, original);
    let is_virtual = dns::config().is_some_and(|dns| dns.is_virtual(&original));
    if let Match::None = matched
        && is_virtual
    {
        // A port no Backend declares: the hostname's passthrough, or nothing at all.
        matched = backend_for(
            &config,
            Endpoint {
                port: 0,
                ..original
            },
        );
        if let Match::None = matched {
            return Ok(DENY);
        }
    }
    if let Match::None = matched {
        let reason = egress_reason::UNDECLARED_ADDRESS;
        return Ok(verdict(policy::judge(ctx, &original, protocol, reason)));
    }
    let cookie = cookie_of(ctx);
    // SAFETY: only tested for presence.
    if unsafe { AGENT_SOCKETS.get(&cookie) }.is_some() {
        return Ok(ALLOW);
    }
    let Match::Backend(backend_id) = matched else {
        // A pod whose namespace is not known yet: which Backend applies cannot be told,
        // and going direct could leak plaintext. The agent maps new pods within moments.
        return Ok(DENY);
    };
    if backend_id & PASSTHROUGH_BIT != 0 {
        // A port of a Backend hostname that no Backend declares: what the policy says.
        let reason = egress_reason::UNDECLARED_PORT;
        if policy::judge(ctx, &original, protocol, reason) == policy::Verdict::Refuse {
            return Ok(DENY);
        }
    }
    // A family the proxy does not listen on is not redirected; a virtual address of it
    // leads nowhere real, so it is refused rather than sent to the network.
    let unproxied = if is_virtual { DENY } else { ALLOW };
    let proxy = match family {
        sockaddr::Family::V6 if !original.is_v4_mapped() => {
            if config.flags & ProxyConfig::HAS_V6 == 0 {
                return Ok(unproxied);
            }
            config.v6
        }
        // connect4, or an IPv6 socket dialing an IPv4-mapped address: the proxy's IPv4
        // address, written in the form the socket uses.
        _ => {
            if config.flags & ProxyConfig::HAS_V4 == 0 {
                return Ok(unproxied);
            }
            config.v4
        }
    };
    let record = Redirect {
        backend_id,
        cgroup: caller_cgroup(),
        original,
        _pad: [0; 4],
    };
    SOCKETS.insert(&cookie, &record, 0).map_err(|_| ())?;
    sockaddr::set_destination(ctx, family, &proxy);
    Ok(ALLOW)
}

/// What a connect to `original` gets.
enum Match {
    /// Not a Backend address (for this caller): the connect goes ahead unchanged.
    None,
    /// To the proxy, for the Backend with this id.
    Backend(u64),
    /// A Backend address, dialed from a pod not mapped to its namespace yet: refused.
    UnmappedPod,
}

/// The Backend `original` belongs to, for the calling process: its own scope first (when
/// Backends are scoped), then the cluster scope.
#[inline(always)]
fn backend_for(config: &ProxyConfig, original: Endpoint) -> Match {
    if config.flags & ProxyConfig::SCOPED != 0 {
        // Most connects go elsewhere: one lookup settles them before the cgroup walk.
        // SAFETY: only tested for presence.
        if unsafe { ENDPOINTS.get(&original) }.is_none() {
            return Match::None;
        }
        match caller_scope() {
            CLUSTER_SCOPE => {}
            POD_TREE => return Match::UnmappedPod,
            scope => {
                // SAFETY: the id is copied out by value.
                if let Some(id) = unsafe { BACKENDS.get(&BackendKey::new(scope, original)) } {
                    return Match::Backend(*id);
                }
            }
        }
    }
    // SAFETY: as above.
    match unsafe { BACKENDS.get(&BackendKey::new(CLUSTER_SCOPE, original)) } {
        Some(id) => Match::Backend(*id),
        None => Match::None,
    }
}

/// The caller's scope: that of the first ancestor cgroup listed in `SCOPES` as a pod;
/// [`POD_TREE`] if it is below the pod tree's top but in no listed pod; the cluster
/// scope for processes elsewhere (host processes, other runtimes).
#[inline(always)]
fn caller_scope() -> u64 {
    let mut found = CLUSTER_SCOPE;
    for level in 1..=MAX_CGROUP_DEPTH {
        // SAFETY: the helper only reads the current task's cgroup.
        let id = unsafe { bpf_get_current_ancestor_cgroup_id(level) };
        if id == 0 {
            break;
        }
        // SAFETY: the scope is copied out by value.
        match unsafe { SCOPES.get(&id) }.copied() {
            // The pod tree's top: keep walking down to the pod.
            Some(POD_TREE) => found = POD_TREE,
            Some(scope) => return scope,
            None => {}
        }
    }
    found
}

#[inline(always)]
fn restore_original(ctx: &SockAddrContext, family: sockaddr::Family) {
    let cookie = cookie_of(ctx);
    // SAFETY: the record is copied out by value.
    if let Some(record) = unsafe { SOCKETS.get(&cookie) }.copied() {
        sockaddr::set_destination(ctx, family, &record.original);
    } else {
        dns::restore_source(ctx, family);
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
