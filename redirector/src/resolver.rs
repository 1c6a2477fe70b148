//! Turns Backend hostnames into the addresses the datapath matches.
//!
//! Uses the system configuration (`/etc/resolv.conf`) and honours `/etc/hosts` first,
//! like the system resolver the workloads use, so both sides agree on the addresses.
//! Addresses that point into the node itself (loopback, link-local, unspecified) are
//! dropped: a Backend must never become a way to reach the node's own services.

mod exempt;
pub(crate) mod hosts;

use std::{net::IpAddr, path::Path, sync::Arc, time::Duration};

use hickory_resolver::{
    Name,
    config::{LookupIpStrategy, ResolveHosts},
    name_server::GenericConnector,
};

use crate::file_stamp::FileStamp;
use exempt::ExemptRuntime;
pub use exempt::Exemptions;
use hosts::HostsFile;

/// Hickory on tokio, its sockets exempt from DNS capture.
type DnsClient = hickory_resolver::Resolver<GenericConnector<ExemptRuntime>>;

// Messages carry their cause inline: these errors are logged one by one, not chained.
#[derive(Debug, thiserror::Error)]
pub enum ResolverError {
    #[error("cannot read the system resolver configuration (/etc/resolv.conf): {0}")]
    SystemConfig(hickory_resolver::ResolveError),
    #[error("{hostname} is not a valid DNS name: {reason}")]
    BadName { hostname: String, reason: String },
    #[error("cannot resolve {hostname}: {source}")]
    Lookup {
        hostname: String,
        source: hickory_resolver::ResolveError,
    },
    #[error(
        "{hostname} resolved only to refused addresses ({refused}): loopback, link-local and unspecified addresses are never used for a Backend"
    )]
    OnlyRefused { hostname: String, refused: String },
}

/// Cheap to clone: the DNS client is shared, the hosts file snapshot is an `Arc`.
#[derive(Clone)]
pub struct Resolver {
    /// `/etc/hosts` as read when the resolver was made (or last [`Resolver::reread_hosts`]).
    hosts: Arc<HostsFile>,
    /// What the file looked like then, to read it again only when it changed.
    hosts_stamp: Option<FileStamp>,
    /// DNS only; the hosts file is consulted first, by us.
    dns: DnsClient,
    exemptions: Exemptions,
}

/// The usable addresses of a name, and how long the answer may be cached (`None`: from
/// the hosts file, which has no TTL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub addresses: Vec<IpAddr>,
    pub ttl: Option<Duration>,
}

impl Resolver {
    pub fn from_system() -> Result<Self, ResolverError> {
        let (config, options) = hickory_resolver::system_conf::read_system_conf()
            .map_err(ResolverError::SystemConfig)?;
        let runtime = ExemptRuntime::default();
        let exemptions = runtime.exemptions();
        let mut builder = DnsClient::builder_with_config(config, GenericConnector::new(runtime))
            .with_options(options);
        let options = builder.options_mut();
        options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        options.use_hosts_file = ResolveHosts::Never;
        options.timeout = Duration::from_secs(2);
        options.attempts = 2;
        // One cache, with TTL clamping and grace: the reconciler's. A second one here
        // would only delay changes.
        options.cache_size = 0;
        Ok(Self {
            hosts_stamp: FileStamp::of(Path::new(HOSTS)),
            hosts: Arc::new(read_hosts()),
            dns: builder.build(),
            exemptions,
        })
    }

    /// Where the resolver's sockets are listed once the datapath is installed.
    pub fn exemptions(&self) -> &Exemptions {
        &self.exemptions
    }

    /// The same resolver with `/etc/hosts` read again, if the file changed since it was
    /// last read (`None`: unchanged). A stat is all an unchanged file costs.
    pub fn reread_hosts(&self) -> Option<Self> {
        let stamp = FileStamp::of(Path::new(HOSTS));
        if stamp == self.hosts_stamp {
            return None;
        }
        Some(Self {
            hosts_stamp: stamp,
            hosts: Arc::new(read_hosts()),
            dns: self.dns.clone(),
            exemptions: self.exemptions.clone(),
        })
    }

    /// The usable addresses of `hostname`, sorted; an error if there are none.
    pub async fn resolve(&self, hostname: &str) -> Result<Resolution, ResolverError> {
        // A trailing dot makes the name absolute so search domains are not tried: a
        // Backend names one exact host.
        let name =
            Name::from_ascii(format!("{}.", hostname.trim_end_matches('.'))).map_err(|error| {
                ResolverError::BadName {
                    hostname: hostname.to_owned(),
                    reason: error.to_string(),
                }
            })?;
        // Like glibc's `files` source: when the hosts file knows the name, its entries
        // (of either family) are the whole answer and DNS is not asked.
        let mut found = self.hosts.lookup(hostname).to_vec();
        let mut ttl = None;
        if found.is_empty() {
            let lookup =
                self.dns
                    .lookup_ip(name)
                    .await
                    .map_err(|source| ResolverError::Lookup {
                        hostname: hostname.to_owned(),
                        source,
                    })?;
            ttl = Some(
                lookup
                    .valid_until()
                    .saturating_duration_since(std::time::Instant::now()),
            );
            found = lookup.iter().collect();
        }
        let (mut usable, refused): (Vec<IpAddr>, Vec<IpAddr>) =
            found.into_iter().partition(|ip| is_allowed(*ip));
        usable.sort();
        usable.dedup();
        if usable.is_empty() {
            let refused: Vec<String> = refused.iter().map(ToString::to_string).collect();
            return Err(ResolverError::OnlyRefused {
                hostname: hostname.to_owned(),
                refused: refused.join(", "),
            });
        }
        if !refused.is_empty() {
            tracing::warn!(
                hostname,
                ?refused,
                "ignoring loopback/link-local/unspecified addresses"
            );
        }
        Ok(Resolution {
            addresses: usable,
            ttl,
        })
    }
}

const HOSTS: &str = "/etc/hosts";

fn read_hosts() -> HostsFile {
    HostsFile::read(Path::new(HOSTS))
}

/// Whether `ip` may be a Backend address.
pub fn is_allowed(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() {
        return false;
    }
    match ip {
        IpAddr::V4(v4) => !v4.is_link_local() && !v4.is_broadcast(),
        IpAddr::V6(v6) => !v6.is_unicast_link_local(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_local_addresses_are_refused() {
        for refused in [
            "127.0.0.1",
            "127.8.9.1",
            "0.0.0.0",
            "169.254.169.254",
            "::1",
            "::",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            let ip: IpAddr = refused.parse().unwrap();
            assert!(!is_allowed(ip), "{refused} must be refused");
        }
        for allowed in [
            "10.200.2.2",
            "93.184.216.34",
            "fd00:200:2::2",
            "2001:db8::1",
        ] {
            let ip: IpAddr = allowed.parse().unwrap();
            assert!(is_allowed(ip), "{allowed} must be allowed");
        }
    }
}
