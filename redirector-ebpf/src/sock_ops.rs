//! `sock_ops`: the life of a redirect record on its socket (steps 2 and 4 of the crate
//! docs): state callbacks for redirected connects, the record handed to `PENDING` once
//! established, both deleted at close; a record left by a connect that failed before
//! its SYN is dropped when the socket connects elsewhere.

use core::ptr::{addr_of, read_volatile};

use aya_ebpf::{
    bindings::{
        BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB, BPF_SOCK_OPS_STATE_CB, BPF_SOCK_OPS_STATE_CB_FLAG,
        BPF_SOCK_OPS_TCP_CONNECT_CB,
    },
    programs::SockOpsContext,
};
use redirector_common::{Endpoint, ProxyConfig};

use crate::{AF_INET, CONFIG, PENDING, SOCKETS, TCP_CLOSE, cookie_of};

#[inline(always)]
pub fn track_socket(ctx: &SockOpsContext) {
    let cookie = cookie_of(ctx);
    // SAFETY: the record is copied out by value.
    let Some(record) = (unsafe { SOCKETS.get(&cookie) }).copied() else {
        return;
    };
    match ctx.op() {
        BPF_SOCK_OPS_TCP_CONNECT_CB => {
            if !dials_proxy(ctx) {
                // Left by a redirected connect that failed before its SYN (an IPv6-only
                // socket dialing a mapped address, a port in use): this connect is not
                // redirected, and must not be reported or recorded as if it were.
                let _ = SOCKETS.remove(&cookie);
                return;
            }
            // Ask for state callbacks so the records go away when the socket closes,
            // including connects that never complete.
            let _ = ctx.set_cb_flags((ctx.cb_flags() | BPF_SOCK_OPS_STATE_CB_FLAG) as i32);
        }
        BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB => {
            // If this fails the proxy finds no record and closes the connection: safe.
            let _ = PENDING.insert(&local_endpoint(ctx), &record, 0);
        }
        BPF_SOCK_OPS_STATE_CB if ctx.arg(1) == TCP_CLOSE => {
            let _ = PENDING.remove(&local_endpoint(ctx));
            let _ = SOCKETS.remove(&cookie);
        }
        _ => {}
    }
}

/// The four words of a `bpf_sock_ops` IPv6 address field, one 4-byte load each, as the
/// verifier demands of context reads.
macro_rules! ip6_words {
    ($ctx:expr, $field:ident) => {{
        let ops = $ctx.ops;
        // SAFETY: reads of the context's own fields.
        unsafe {
            [
                read_volatile(addr_of!((*ops).$field[0])),
                read_volatile(addr_of!((*ops).$field[1])),
                read_volatile(addr_of!((*ops).$field[2])),
                read_volatile(addr_of!((*ops).$field[3])),
            ]
        }
    }};
}

/// Whether the socket connects to one of the proxy's addresses (in the form it uses:
/// IPv4, or IPv4-mapped on an IPv6 socket).
#[inline(always)]
fn dials_proxy(ctx: &SockOpsContext) -> bool {
    let Some(config) = CONFIG.get(0) else {
        return false;
    };
    // `remote_port` holds the port in network order in its upper half.
    let port = u32::from_be(ctx.remote_port()) as u16;
    let remote = match ctx.family() {
        AF_INET => Endpoint::v4(ctx.remote_ip4(), port),
        _ => Endpoint::v6(ip6_words!(ctx, remote_ip6), port),
    };
    let v4 = config.flags & ProxyConfig::HAS_V4 != 0 && remote == config.v4;
    v4 || config.flags & ProxyConfig::HAS_V6 != 0 && remote == config.v6
}

/// The socket's own address: what the proxy sees as the peer of the accepted connection.
#[inline(always)]
fn local_endpoint(ctx: &SockOpsContext) -> Endpoint {
    // `local_port` is in host byte order, unlike the address fields.
    let port = ctx.local_port() as u16;
    match ctx.family() {
        AF_INET => Endpoint::v4(ctx.local_ip4(), port),
        _ => Endpoint::v6(ip6_words!(ctx, local_ip6), port),
    }
}
