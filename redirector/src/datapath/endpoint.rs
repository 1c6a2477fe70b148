//! Conversions between socket addresses and the datapath's [`Endpoint`] keys.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use redirector_common::Endpoint;

/// IPv4 becomes IPv4-mapped IPv6, exactly as the eBPF programs store it.
pub fn from_socket_addr(addr: SocketAddr) -> Endpoint {
    let v6 = match addr.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    let octets = v6.octets();
    let mut words = [0u32; 4];
    for (word, chunk) in words.iter_mut().zip(octets.chunks_exact(4)) {
        // The kernel keeps each 4-byte word in network order in memory, i.e. the octets
        // in their natural order; reading them "as is" gives the same bytes.
        *word = u32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    Endpoint::v6(words, addr.port())
}

/// IPv4-mapped endpoints come back as IPv4 addresses.
pub fn to_socket_addr(endpoint: &Endpoint) -> SocketAddr {
    let mut octets = [0u8; 16];
    for (chunk, word) in octets.chunks_exact_mut(4).zip(endpoint.addr) {
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
    SocketAddr::new(Ipv6Addr::from(octets).to_canonical(), endpoint.port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_matches_the_kernel_layout() {
        let v4: SocketAddr = "10.200.2.2:8080".parse().unwrap();
        let e = from_socket_addr(v4);
        assert!(e.is_v4_mapped());
        // What connect4 builds from user_ip4 (network order in memory).
        assert_eq!(e, Endpoint::v4(u32::from_ne_bytes([10, 200, 2, 2]), 8080));
        assert_eq!(to_socket_addr(&e), v4);

        let v6: SocketAddr = "[fd00:200:2::2]:443".parse().unwrap();
        let e = from_socket_addr(v6);
        assert!(!e.is_v4_mapped());
        assert_eq!(to_socket_addr(&e), v6);

        let mapped: SocketAddr = "[::ffff:10.1.2.3]:80".parse().unwrap();
        assert_eq!(
            from_socket_addr(mapped),
            from_socket_addr("10.1.2.3:80".parse().unwrap())
        );
    }
}
