//! Field access to `bpf_sock_addr` the way the verifier accepts it: one aligned 4-byte
//! load or store per field word.

use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};

use aya_ebpf::programs::SockAddrContext;
use redirector_common::Endpoint;

#[derive(Clone, Copy)]
pub enum Family {
    V4,
    V6,
}

#[inline(always)]
pub fn protocol(ctx: &SockAddrContext) -> u32 {
    // SAFETY: `sock_addr` is the context pointer the kernel passed to the program.
    unsafe { read_volatile(addr_of!((*ctx.sock_addr).protocol)) }
}

/// The destination of `connect` (or the peer of `getpeername`), IPv4 in mapped form.
#[inline(always)]
pub fn destination(ctx: &SockAddrContext, family: Family) -> Endpoint {
    let sa = ctx.sock_addr;
    // SAFETY: reads of context fields the kernel allows for this program type; each
    // word is read separately because the verifier rejects wider loads of `user_ip6`.
    unsafe {
        let port = u16::from_be(read_volatile(addr_of!((*sa).user_port)) as u16);
        match family {
            Family::V4 => Endpoint::v4(read_volatile(addr_of!((*sa).user_ip4)), port),
            Family::V6 => Endpoint::v6(
                [
                    read_volatile(addr_of!((*sa).user_ip6[0])),
                    read_volatile(addr_of!((*sa).user_ip6[1])),
                    read_volatile(addr_of!((*sa).user_ip6[2])),
                    read_volatile(addr_of!((*sa).user_ip6[3])),
                ],
                port,
            ),
        }
    }
}

/// Rewrites the destination. For `Family::V6` an IPv4-mapped `to` stays mapped, which
/// is what a dual-stack socket dialing an IPv4 address expects.
#[inline(always)]
pub fn set_destination(ctx: &SockAddrContext, family: Family, to: &Endpoint) {
    let sa = ctx.sock_addr;
    // SAFETY: stores to context fields that are writable for connect and getpeername
    // programs, one 4-byte word at a time.
    unsafe {
        write_volatile(addr_of_mut!((*sa).user_port), u32::from(to.port.to_be()));
        match family {
            Family::V4 => write_volatile(addr_of_mut!((*sa).user_ip4), to.addr[3]),
            Family::V6 => {
                write_volatile(addr_of_mut!((*sa).user_ip6[0]), to.addr[0]);
                write_volatile(addr_of_mut!((*sa).user_ip6[1]), to.addr[1]);
                write_volatile(addr_of_mut!((*sa).user_ip6[2]), to.addr[2]);
                write_volatile(addr_of_mut!((*sa).user_ip6[3]), to.addr[3]);
            }
        }
    }
}
