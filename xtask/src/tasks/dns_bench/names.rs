//! The names the bench asks for, and every file that declares them: the authoritative
//! zone (NSD), the Backend directory (the agent), the node's hosts file (the agent's own
//! resolution) and dnsperf's query lists.
//!
//! Every address is inside 10.200.0.0/16 or fd00:200::/32 and nothing ever connects to
//! one: the bench only asks for names. Backend names deliberately resolve differently in
//! the zone (what the pod's nameserver says) and in the node's hosts file (what the agent
//! sees), as they do under CDN DNS: a reply then shows who answered.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The zone NSD serves; every name below is in it.
pub const ZONE: &str = "dnsbench.test";
/// Namespace of the generated XBackends.
const NAMESPACE: &str = "dnsbench";
/// The port every generated Backend declares (never dialed).
const BACKEND_PORT: u16 = 443;
/// The most names of a kind: the last octet of their addresses is `1..=250`.
pub const MAX_NAMES: usize = 250;

/// The two kinds of names a pod asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// In the zone, declared by no Backend: the agent forwards them.
    Forwarded,
    /// Declared by a Backend (and in the zone too): the agent answers them.
    Backend,
}

impl Kind {
    fn prefix(self) -> &'static str {
        match self {
            Kind::Forwarded => "fw",
            Kind::Backend => "be",
        }
    }

    /// `fw007.dnsbench.test`.
    pub fn name(self, i: usize) -> String {
        format!("{}{i:03}.{ZONE}", self.prefix())
    }

    /// Third octet (and IPv6 group) of what the zone says for this kind.
    fn zone_net(self) -> u8 {
        match self {
            Kind::Forwarded => 5,
            Kind::Backend => 4,
        }
    }
}

/// Where the node's hosts file puts Backend name `i` (the agent's view, never the zone's).
fn agent_view(i: usize) -> [IpAddr; 2] {
    addresses(3, i)
}

/// `10.200.<net>.<i+1>` and `fd00:200:<net>::<i+1>`.
fn addresses(net: u8, i: usize) -> [IpAddr; 2] {
    let host = u8::try_from(i % MAX_NAMES + 1).unwrap_or(1);
    [
        Ipv4Addr::new(10, 200, net, host).into(),
        Ipv6Addr::new(0xfd00, 0x200, u16::from(net), 0, 0, 0, 0, u16::from(host)).into(),
    ]
}

/// The zone file: SOA, NS, and an A and an AAAA record for `count` names of each kind.
pub fn zone_file(count: usize, nameserver: Ipv4Addr) -> String {
    let mut zone = format!(
        "$ORIGIN {ZONE}.\n$TTL 300\n\
         @ IN SOA ns.{ZONE}. hostmaster.{ZONE}. 1 3600 600 86400 300\n\
         @ IN NS ns.{ZONE}.\nns IN A {nameserver}\n"
    );
    for kind in [Kind::Forwarded, Kind::Backend] {
        for i in 0..count {
            let [v4, v6] = addresses(kind.zone_net(), i);
            // Writing to a String cannot fail.
            let _ = writeln!(
                zone,
                "{}. IN A {v4}\n{}. IN AAAA {v6}",
                kind.name(i),
                kind.name(i)
            );
        }
    }
    zone
}

/// dnsperf's input: every name of `kind`, type A then AAAA (dnsperf loops over the file).
pub fn queries(kind: Kind, count: usize) -> String {
    let mut lines = String::new();
    for i in 0..count {
        let name = kind.name(i);
        let _ = writeln!(lines, "{name} A\n{name} AAAA");
    }
    lines
}

/// The Backend directory's single file: one plain-TCP XBackend per Backend name.
pub fn backends_yaml(count: usize) -> String {
    let mut yaml = String::new();
    for i in 0..count {
        let _ = write!(
            yaml,
            "---\napiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackend\n\
             metadata: {{name: be{i:03}, namespace: {NAMESPACE}}}\n\
             spec:\n  type: ExternalHostname\n  externalHostname: {{hostname: {}}}\n  \
             port: {{number: {BACKEND_PORT}}}\n  protocol: TCP\n",
            Kind::Backend.name(i)
        );
    }
    yaml
}

/// The node's hosts file entries: how the agent resolves the Backend names.
pub fn node_hosts(count: usize) -> Vec<(IpAddr, String)> {
    (0..count)
        .flat_map(|i| agent_view(i).map(|ip| (ip, Kind::Backend.name(i))))
        .collect()
}

/// What the zone says for name `i` of `kind` over IPv4 (the answer when not captured).
pub fn zone_v4(kind: Kind, i: usize) -> IpAddr {
    addresses(kind.zone_net(), i)[0]
}

/// Whether `ip` is one of the agent's virtual addresses (the default ranges).
pub fn is_virtual(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.octets()[..2] == [240, 0],
        IpAddr::V6(v6) => v6.segments()[..6] == [0xfd72, 0x6564, 0x6972, 0, 0, 0],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses() {
        assert_eq!(Kind::Forwarded.name(7), "fw007.dnsbench.test");
        assert_eq!(Kind::Backend.name(99), "be099.dnsbench.test");
        assert_eq!(
            zone_v4(Kind::Backend, 0),
            "10.200.4.1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            zone_v4(Kind::Forwarded, 1),
            "10.200.5.2".parse::<IpAddr>().unwrap()
        );
        let hosts = node_hosts(2);
        assert_eq!(hosts.len(), 4);
        assert_eq!(hosts[3].0, "fd00:200:3::2".parse::<IpAddr>().unwrap());
        assert_eq!(hosts[3].1, "be001.dnsbench.test");
    }

    #[test]
    fn zone_has_both_families_of_both_kinds() {
        let zone = zone_file(2, Ipv4Addr::new(10, 200, 2, 2));
        assert!(
            zone.contains("fw001.dnsbench.test. IN A 10.200.5.2\n"),
            "{zone}"
        );
        assert!(
            zone.contains("be000.dnsbench.test. IN AAAA fd00:200:4::1\n"),
            "{zone}"
        );
        assert!(zone.contains("ns IN A 10.200.2.2\n"), "{zone}");
    }

    #[test]
    fn queries_and_backends() {
        assert_eq!(
            queries(Kind::Backend, 1),
            "be000.dnsbench.test A\nbe000.dnsbench.test AAAA\n"
        );
        let yaml = backends_yaml(3);
        assert_eq!(yaml.matches("kind: XBackend").count(), 3);
        assert!(yaml.contains("hostname: be002.dnsbench.test}"), "{yaml}");
    }

    #[test]
    fn virtual_ranges() {
        assert!(is_virtual(&"240.0.3.9".parse().unwrap()));
        assert!(is_virtual(&"fd72:6564:6972::5".parse().unwrap()));
        assert!(!is_virtual(&"10.200.4.1".parse().unwrap()));
    }
}
