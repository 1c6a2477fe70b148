//! Map keys and values shared by the eBPF programs (`redirector-ebpf`) and the agent.
//!
//! Every type is `#[repr(C)]`, holds no `bool` and spells out its padding, so the byte
//! layout the kernel hashes is the same on both sides and padding is always zeroed.
//! With the `user` feature the types implement `aya::Pod` for the agent.
#![no_std]

/// Names of the maps, as the agent finds them in the object and pins them.
pub mod map_names {
    /// [`BackendKey`](super::BackendKey) (scope, address, port) -> backend id (`u64`).
    pub const BACKENDS: &str = "BACKENDS";
    /// Every Backend [`Endpoint`](super::Endpoint) of any scope -> 1: lets connects to
    /// other destinations skip the scope lookup.
    pub const ENDPOINTS: &str = "ENDPOINTS";
    /// cgroup id of a pod -> its scope (`u64`), when Backends are scoped.
    pub const SCOPES: &str = "SCOPES";
    /// Socket cookie -> [`Redirect`](super::Redirect), for `getpeername` and `sock_ops`.
    pub const SOCKETS: &str = "SOCKETS";
    /// Client's local [`Endpoint`](super::Endpoint) -> [`Redirect`](super::Redirect),
    /// consumed (deleted) by the proxy on accept.
    pub const PENDING: &str = "PENDING";
    /// Socket cookies of the agent's own upstream sockets, never redirected.
    pub const AGENT_SOCKETS: &str = "AGENT_SOCKETS";
    /// Single [`ProxyConfig`](super::ProxyConfig) at index 0.
    pub const CONFIG: &str = "CONFIG";
    /// Single [`DnsConfig`](super::DnsConfig) at index 0: where captured DNS goes and
    /// which addresses are virtual.
    pub const DNS_CONFIG: &str = "DNS_CONFIG";
    /// Single `u64` at index 0: the agent's heartbeat (`CLOCK_BOOTTIME` nanoseconds).
    /// DNS is captured only while it is fresh, so pods resolve without a live agent.
    pub const HEARTBEAT: &str = "HEARTBEAT";
    /// Socket cookie -> [`DnsRecord`](super::DnsRecord) of a socket whose DNS traffic
    /// was sent to the agent (`recvmsg` and `getpeername` restore the nameserver).
    pub const DNS_SOCKETS: &str = "DNS_SOCKETS";
    /// Client's local [`Endpoint`](super::Endpoint) -> [`DnsRecord`](super::DnsRecord),
    /// written per packet by the egress program; the agent's DNS listener reads it.
    pub const DNS_PENDING: &str = "DNS_PENDING";
    /// Hostname hash (`u64`) -> virtual address offset (`u32`): written and read only by
    /// the agent, pinned so a hostname keeps its virtual addresses across restarts.
    pub const VIRTUAL_HOSTS: &str = "VIRTUAL_HOSTS";
    /// Single [`EgressConfig`](super::EgressConfig) at index 0: the egress policy.
    pub const EGRESS_CONFIG: &str = "EGRESS_CONFIG";
    /// LPM trie of address prefixes (the 16 bytes of [`Endpoint::addr`](super::Endpoint),
    /// IPv4 mapped, so an IPv4 /n is a /(96+n)) -> 1: networks always reachable
    /// (`--allow-cidr`, the cluster's pod and Service ranges).
    pub const ALLOWED_NETS: &str = "ALLOWED_NETS";
    /// cgroup id -> [`egress_mode`](super::egress_mode) (`u32`): the mode of the processes at or
    /// below that cgroup (a pod of a labelled namespace, the top of the pod tree).
    pub const CGROUP_MODES: &str = "CGROUP_MODES";
    /// cgroup ids of the agent itself: never refused, wherever it runs.
    pub const AGENT_CGROUPS: &str = "AGENT_CGROUPS";
    /// Ring buffer of [`EgressEvent`](super::EgressEvent)s: refusals and audit hits.
    pub const EGRESS_EVENTS: &str = "EGRESS_EVENTS";
    /// Per-CPU `u64` at index 0: events the ring buffer had no room for.
    pub const EGRESS_LOST: &str = "EGRESS_LOST";
}

/// Names of the programs (the Rust function names in `redirector-ebpf`).
pub mod program_names {
    pub const CONNECT4: &str = "connect4";
    pub const CONNECT6: &str = "connect6";
    pub const SOCK_OPS: &str = "sock_ops";
    pub const GETPEERNAME4: &str = "getpeername4";
    pub const GETPEERNAME6: &str = "getpeername6";
    pub const SENDMSG4: &str = "sendmsg4";
    pub const SENDMSG6: &str = "sendmsg6";
    pub const RECVMSG4: &str = "recvmsg4";
    pub const RECVMSG6: &str = "recvmsg6";
    pub const DNS_EGRESS: &str = "dns_egress";
}

/// What the egress policy does with a destination nothing declares or allows.
/// Values of `CGROUP_MODES` and [`EgressConfig::default_mode`].
pub mod egress_mode {
    /// Let it through (the default: no policy).
    pub const ALLOW: u32 = 0;
    /// Let it through, and report it as `DENY` would.
    pub const AUDIT: u32 = 1;
    /// Refuse it, and report it.
    pub const DENY: u32 = 2;
}

/// Why an [`EgressEvent`] was raised (`reason` label of `redirector_egress_denied_total`).
pub mod egress_reason {
    /// An address no Backend declares and no allowed network holds.
    pub const UNDECLARED_ADDRESS: u8 = 1;
    /// A port of a Backend hostname's virtual address that no Backend declares.
    pub const UNDECLARED_PORT: u8 = 2;
    /// A packet of a raw or ICMP socket (or any socket the connect hooks do not see) to
    /// a destination the policy does not allow.
    pub const RAW_SOCKET: u8 = 3;
    /// A TCP or UDP packet with IPv4 options or an IPv6 routing (or hop-by-hop,
    /// destination options) header: source routing past the destination the hooks judged.
    pub const SOURCE_ROUTE: u8 = 4;
}

/// The egress policy, written by the agent.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EgressConfig {
    /// [`egress_mode`] of processes no `CGROUP_MODES` entry covers (`--egress-policy`).
    pub default_mode: u32,
    /// [`EgressConfig::PODS_ONLY`] | [`EgressConfig::ACTIVE`].
    pub flags: u32,
}

impl EgressConfig {
    /// Only processes below a `CGROUP_MODES` entry are subject to the policy (Kubernetes:
    /// the pod tree); the rest (kubelet, runtime, host daemons) are never refused.
    pub const PODS_ONLY: u32 = 1;
    /// Some process may be subject to `AUDIT` or `DENY`: without it, the hooks skip the
    /// policy altogether.
    pub const ACTIVE: u32 = 2;
}

/// A destination the egress policy refused (or, under audit, would have).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EgressEvent {
    /// The cgroup id of the socket's process.
    pub cgroup: u64,
    pub destination: Endpoint,
    /// IP protocol number (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6, ...).
    pub protocol: u8,
    /// [`egress_reason`].
    pub reason: u8,
    /// [`egress_mode::AUDIT`] (let through) or [`egress_mode::DENY`] (refused).
    pub mode: u8,
    pub _pad: u8,
}

/// The DNS port: UDP and TCP connects and datagrams to it are captured.
pub const DNS_PORT: u16 = 53;

/// `Redirect::backend_id` (and `BACKENDS` value) with this bit set names a virtual
/// host's passthrough: a port of a virtual address that no Backend declares. The
/// connection goes to the hostname's real address, bytes unchanged.
pub const PASSTHROUGH_BIT: u64 = 1 << 63;

/// An IP address and TCP port.
///
/// IPv4 addresses are stored IPv4-mapped (`::ffff:a.b.c.d`) so one key type serves
/// `connect4`, `connect6` and dual-stack sockets dialing mapped addresses alike.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Endpoint {
    /// The 16 address bytes in network order, as four words exactly as the kernel's
    /// `bpf_sock_addr.user_ip6` / `bpf_sock_ops.local_ip6` hold them.
    pub addr: [u32; 4],
    /// Port in host byte order.
    pub port: u16,
    pub _pad: [u8; 2],
}

/// The third word of an IPv4-mapped IPv6 address (`0000:ffff`), in network order.
pub const V4_MAPPED_WORD: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);

impl Endpoint {
    /// `ip4` is in network order (as `bpf_sock_addr.user_ip4`), `port` in host order.
    #[inline(always)]
    pub const fn v4(ip4: u32, port: u16) -> Self {
        Self {
            addr: [0, 0, V4_MAPPED_WORD, ip4],
            port,
            _pad: [0; 2],
        }
    }

    #[inline(always)]
    pub const fn v6(ip6: [u32; 4], port: u16) -> Self {
        Self {
            addr: ip6,
            port,
            _pad: [0; 2],
        }
    }

    #[inline(always)]
    pub const fn is_v4_mapped(&self) -> bool {
        self.addr[0] == 0 && self.addr[1] == 0 && self.addr[2] == V4_MAPPED_WORD
    }
}

/// Scope of Backends that apply to every process in the attached cgroup.
pub const CLUSTER_SCOPE: u64 = 0;

/// Value in `SCOPES` marking the top of the kubelet's pod tree (`kubepods`,
/// `kubepods.slice`) rather than one pod: a process below it in no listed pod cgroup is
/// a pod the agent has not mapped yet, and its connects to Backend addresses are refused
/// (never sent direct) until it is. No namespace scope takes this value.
pub const POD_TREE: u64 = u64::MAX;

/// How deep below the attached cgroup's root the connect hooks look for a pod cgroup
/// (kubelet nests pods 2-4 levels deep: kubepods[/qos]/pod<uid>/<container>).
pub const MAX_CGROUP_DEPTH: i32 = 8;

/// Key of the Backend map: a Backend address and port, within a scope.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BackendKey {
    /// [`CLUSTER_SCOPE`], or the scope of one namespace's pods.
    pub scope: u64,
    pub endpoint: Endpoint,
    pub _pad: [u8; 4],
}

impl BackendKey {
    #[inline(always)]
    pub const fn new(scope: u64, endpoint: Endpoint) -> Self {
        Self {
            scope,
            endpoint,
            _pad: [0; 4],
        }
    }
}

/// What `connect` recorded about a redirected socket.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Redirect {
    /// Id of the Backend whose address matched (see the agent's `BackendId`).
    pub backend_id: u64,
    /// The cgroup (v2) id of the process that connected: who made the connection.
    pub cgroup: u64,
    /// The address and port the application dialed.
    pub original: Endpoint,
    pub _pad: [u8; 4],
}

/// What the capture hooks recorded about a socket whose DNS traffic goes to the agent.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DnsRecord {
    /// The caller's scope (as for connects): which Backend names it may see.
    pub scope: u64,
    /// The cgroup (v2) id of the process that asked: who resolved what.
    pub cgroup: u64,
    /// The nameserver the application addressed.
    pub nameserver: Endpoint,
    pub _pad: [u8; 4],
}

/// DNS capture settings, written by the agent.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DnsConfig {
    /// How old the heartbeat may be for capture to stay on, in nanoseconds.
    pub liveness_ns: u64,
    /// The agent's DNS listener, IPv4 (mapped form).
    pub v4: Endpoint,
    /// The agent's DNS listener, IPv6.
    pub v6: Endpoint,
    /// [`DnsConfig::HAS_V4`] | [`DnsConfig::HAS_V6`] | [`DnsConfig::CAPTURE`].
    pub flags: u32,
    /// Virtual IPv4 range: prefix and mask, network order.
    pub virtual_v4: u32,
    pub virtual_v4_mask: u32,
    /// Virtual IPv6 range: the first 96 bits, as three words of `Endpoint::addr`.
    pub virtual_v6: [u32; 3],
}

impl DnsConfig {
    pub const HAS_V4: u32 = 1;
    pub const HAS_V6: u32 = 2;
    /// Capture DNS (else only the virtual ranges are guarded).
    pub const CAPTURE: u32 = 4;

    /// Whether `at` is a virtual address (IPv4 in mapped form).
    #[inline(always)]
    pub fn is_virtual(&self, at: &Endpoint) -> bool {
        if at.is_v4_mapped() {
            self.virtual_v4_mask != 0 && at.addr[3] & self.virtual_v4_mask == self.virtual_v4
        } else {
            self.virtual_v6 != [0; 3]
                && at.addr[0] == self.virtual_v6[0]
                && at.addr[1] == self.virtual_v6[1]
                && at.addr[2] == self.virtual_v6[2]
        }
    }
}

/// Where redirected connects go. A family whose flag is unset is not redirected.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ProxyConfig {
    /// IPv4 proxy address (IPv4-mapped form).
    pub v4: Endpoint,
    /// IPv6 proxy address.
    pub v6: Endpoint,
    /// [`ProxyConfig::HAS_V4`] | [`ProxyConfig::HAS_V6`].
    pub flags: u32,
}

impl ProxyConfig {
    pub const HAS_V4: u32 = 1;
    pub const HAS_V6: u32 = 2;
    /// Backends are scoped: look up the caller's scope in `SCOPES` by cgroup ancestry.
    pub const SCOPED: u32 = 4;
}

#[cfg(feature = "user")]
mod user {
    // SAFETY: all eight are #[repr(C)], made only of integers with explicit padding
    // fields, so every bit pattern is valid and there are no implicit padding bytes.
    unsafe impl aya::Pod for super::Endpoint {}
    unsafe impl aya::Pod for super::BackendKey {}
    unsafe impl aya::Pod for super::Redirect {}
    unsafe impl aya::Pod for super::ProxyConfig {}
    unsafe impl aya::Pod for super::DnsRecord {}
    unsafe impl aya::Pod for super::DnsConfig {}
    unsafe impl aya::Pod for super::EgressConfig {}
    unsafe impl aya::Pod for super::EgressEvent {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_no_implicit_padding() {
        assert_eq!(core::mem::size_of::<Endpoint>(), 20);
        assert_eq!(core::mem::size_of::<BackendKey>(), 32);
        assert_eq!(core::mem::size_of::<Redirect>(), 40);
        assert_eq!(core::mem::size_of::<ProxyConfig>(), 44);
        assert_eq!(core::mem::size_of::<DnsRecord>(), 40);
        assert_eq!(core::mem::size_of::<DnsConfig>(), 72);
        assert_eq!(core::mem::size_of::<EgressConfig>(), 8);
        assert_eq!(core::mem::size_of::<EgressEvent>(), 32);
    }

    #[test]
    fn v4_endpoints_are_mapped() {
        let e = Endpoint::v4(u32::from_ne_bytes([10, 0, 0, 1]), 443);
        assert!(e.is_v4_mapped());
        assert!(!Endpoint::v6([0x20010db8u32.to_be(), 0, 0, 1], 443).is_v4_mapped());
    }
}
