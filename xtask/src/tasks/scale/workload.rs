//! The generated Backends and the hosts file that resolves them.
//!
//! Every address is in 10.201.0.0/16 or fd00:201::/32, which no namespace of the test bed
//! routes: the benchmark only fills the Backend map, it never sends a packet.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Namespace of every generated Backend.
pub const NAMESPACE: &str = "scale";
/// Port of every generated Backend.
pub const PORT: u16 = 443;
/// Backends per generated file (multi-document YAML).
pub const PER_FILE: usize = 100;
/// IPv4 addresses of the `b` names come from 10.201.0.0 .. 10.201.249.255; the third
/// octet 250 is left for the `c` names added during the change test.
const V4_BULK_LIMIT: usize = 250 * 256;

/// Name of the `i`-th bulk Backend (`b00000`).
pub fn bulk_name(i: usize) -> String {
    format!("b{i:05}")
}

/// Name of the `j`-th Backend added by the change test (`c000`).
pub fn change_name(j: usize) -> String {
    format!("c{j:03}")
}

/// The Backend's hostname: `<name>.scale.test`.
pub fn hostname(name: &str) -> String {
    format!("{name}.{NAMESPACE}.test")
}

/// One XBackend document (with its leading `---`).
pub fn xbackend(name: &str) -> String {
    format!(
        "---\n\
         apiVersion: gateway.networking.x-k8s.io/v1alpha1\n\
         kind: XBackend\n\
         metadata:\n  name: {name}\n  namespace: {NAMESPACE}\n\
         spec:\n  type: ExternalHostname\n  externalHostname:\n    hostname: {host}\n  \
         port:\n    port: {PORT}\n  protocol: TCP\n",
        host = hostname(name)
    )
}

/// Writes `count` bulk Backends into `dir`, [`PER_FILE`] per file; returns the file count.
pub fn write_bulk(dir: &Path, count: usize) -> Result<usize> {
    let mut files = 0;
    for (n, chunk) in (0..count).collect::<Vec<_>>().chunks(PER_FILE).enumerate() {
        let mut text = String::with_capacity(chunk.len() * 260);
        for &i in chunk {
            text.push_str(&xbackend(&bulk_name(i)));
        }
        let path = dir.join(format!("backends-{n:04}.yaml"));
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        files += 1;
    }
    Ok(files)
}

/// Hosts file lines: `per_name` distinct addresses for each of `count` bulk names
/// (alternately IPv4 and IPv6, IPv4 first), and one IPv4 address for each of `changes`
/// change-test names.
pub fn hosts_entries(
    count: usize,
    per_name: usize,
    changes: usize,
) -> Result<Vec<(IpAddr, String)>> {
    let v4_needed = count * per_name.div_ceil(2);
    if v4_needed > V4_BULK_LIMIT {
        bail!(
            "{count} names x {per_name} addresses need {v4_needed} IPv4 addresses; 10.201.0.0/16 holds {V4_BULK_LIMIT} for them"
        );
    }
    if changes > 256 {
        bail!("at most 256 change-test names (10.201.250.0/24)");
    }
    let mut entries = Vec::with_capacity(count * per_name + changes);
    let (mut v4, mut v6) = (0usize, 0usize);
    for i in 0..count {
        let host = hostname(&bulk_name(i));
        for k in 0..per_name {
            let addr = if k % 2 == 0 {
                v4 += 1;
                IpAddr::V4(bulk_v4(v4 - 1))
            } else {
                v6 += 1;
                IpAddr::V6(bulk_v6(v6 - 1))
            };
            entries.push((addr, host.clone()));
        }
    }
    for j in 0..changes {
        let last = u8::try_from(j).context("change index")?;
        entries.push((
            IpAddr::V4(Ipv4Addr::new(10, 201, 250, last)),
            hostname(&change_name(j)),
        ));
    }
    Ok(entries)
}

fn bulk_v4(n: usize) -> Ipv4Addr {
    // n < V4_BULK_LIMIT, checked by the caller, so both octets fit.
    Ipv4Addr::new(10, 201, (n >> 8) as u8, (n & 0xff) as u8)
}

fn bulk_v6(n: usize) -> Ipv6Addr {
    Ipv6Addr::new(
        0xfd00,
        0x201,
        0,
        0,
        0,
        0,
        (n >> 16) as u16,
        (n & 0xffff) as u16,
    )
}

/// A short human description of a hosts file made by [`hosts_entries`].
pub fn describe_addresses(per_name: usize) -> String {
    let v4 = per_name.div_ceil(2);
    let v6 = per_name / 2;
    let mut text = String::new();
    let _ = write!(text, "{v4} IPv4 (10.201.0.0/16)");
    if v6 > 0 {
        let _ = write!(text, " + {v6} IPv6 (fd00:201::/32)");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn addresses_are_distinct_and_unroutable() {
        let entries = hosts_entries(10_000, 10, 100).unwrap();
        assert_eq!(entries.len(), 100_100);
        let distinct: BTreeSet<IpAddr> = entries.iter().map(|(a, _)| *a).collect();
        assert_eq!(distinct.len(), entries.len());
        for (addr, _) in &entries {
            match addr {
                IpAddr::V4(v4) => assert_eq!(v4.octets()[..2], [10, 201]),
                IpAddr::V6(v6) => assert_eq!(v6.segments()[..2], [0xfd00, 0x201]),
            }
        }
        assert!(hosts_entries(20_000, 10, 0).is_err());
    }

    #[test]
    fn documents_name_their_backend() {
        let doc = xbackend(&bulk_name(7));
        assert!(doc.contains("name: b00007\n"), "{doc}");
        assert!(doc.contains("hostname: b00007.scale.test\n"), "{doc}");
        assert_eq!(change_name(5), "c005");
    }
}
