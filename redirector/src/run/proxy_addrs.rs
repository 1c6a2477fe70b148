//! The datapath's view of `--proxy-addr`: where redirected connects go, per address
//! family.

use std::net::SocketAddr;

use anyhow::bail;
use redirector_common::ProxyConfig;

use crate::datapath::endpoint;

pub fn proxy_config(addrs: &[SocketAddr]) -> anyhow::Result<ProxyConfig> {
    let mut config = ProxyConfig::default();
    for addr in addrs {
        let (flag, slot) = if addr.is_ipv4() {
            (ProxyConfig::HAS_V4, &mut config.v4)
        } else {
            (ProxyConfig::HAS_V6, &mut config.v6)
        };
        if config.flags & flag != 0 {
            bail!("--proxy-addr given twice for the same address family ({addr})");
        }
        if addr.ip().is_unspecified() || addr.port() == 0 {
            bail!(
                "--proxy-addr {addr}: needs a concrete address and port that redirected connects can reach"
            );
        }
        config.flags |= flag;
        *slot = endpoint::from_socket_addr(*addr);
    }
    for (flag, family) in [(ProxyConfig::HAS_V4, "IPv4"), (ProxyConfig::HAS_V6, "IPv6")] {
        if config.flags & flag == 0 {
            tracing::warn!(
                "no {family} --proxy-addr: {family} connects to Backends are not redirected"
            );
        }
    }
    Ok(config)
}
