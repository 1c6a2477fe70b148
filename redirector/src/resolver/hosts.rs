//! The hosts file, read the way glibc's `files` source reads it, into a compact table.
//!
//! Our own reader rather than hickory's `Hosts`: that one stores full DNS records per
//! name and type (about 3 KiB for a name with ten addresses), and nodes that pin many
//! Backend names in `/etc/hosts` would pay for it in agent memory. The format is small
//! and stable: `address name [alias...]`, `#` starts a comment.

use std::{collections::HashMap, net::IpAddr, path::Path};

/// Name (lowercase, no trailing dot) -> its addresses, in file order, without repeats.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HostsFile {
    names: HashMap<Box<str>, Box<[IpAddr]>>,
}

impl HostsFile {
    /// Reads `path`; an unreadable file is logged and treated as empty (DNS still works).
    pub fn read(path: &Path) -> Self {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read the hosts file; using DNS only");
                Self::default()
            }
        }
    }

    /// Lines whose address does not parse are skipped, as glibc does.
    pub fn parse(text: &str) -> Self {
        let mut names: HashMap<Box<str>, Vec<IpAddr>> = HashMap::new();
        for line in text.lines() {
            let line = line.split_once('#').map_or(line, |(before, _)| before);
            let mut fields = line.split_whitespace();
            let Some(Ok(address)) = fields.next().map(str::parse::<IpAddr>) else {
                continue;
            };
            for name in fields {
                let addresses = names.entry(normalize(name).into()).or_default();
                if !addresses.contains(&address) {
                    addresses.push(address);
                }
            }
        }
        Self {
            names: names
                .into_iter()
                .map(|(name, addresses)| (name, addresses.into_boxed_slice()))
                .collect(),
        }
    }

    /// The addresses the file gives `hostname` (any case, trailing dot or not).
    pub fn lookup(&self, hostname: &str) -> &[IpAddr] {
        self.names
            .get(normalize(hostname).as_str())
            .map_or(&[], |addresses| addresses)
    }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|ip| ip.parse().unwrap()).collect()
    }

    #[test]
    fn names_aliases_comments_and_both_families() {
        let hosts = HostsFile::parse(
            "# a comment line\n\
             127.0.0.1\tlocalhost\n\
             10.200.2.2  api.example.com  api # trailing comment\n\
             fd00:200:2::2 API.Example.com.\n\
             10.200.2.2 api.example.com\n\
             not-an-address ignored.example.com\n\
             10.200.2.3\n\
             \n\
             10.200.2.4 other.example.com #api.example.com\n",
        );
        assert_eq!(
            hosts.lookup("api.example.com"),
            ips(&["10.200.2.2", "fd00:200:2::2"])
        );
        assert_eq!(
            hosts.lookup("API.example.com."),
            hosts.lookup("api.example.com")
        );
        assert_eq!(hosts.lookup("api"), ips(&["10.200.2.2"]));
        assert_eq!(hosts.lookup("other.example.com"), ips(&["10.200.2.4"]));
        assert_eq!(hosts.lookup("localhost"), ips(&["127.0.0.1"]));
        assert!(hosts.lookup("ignored.example.com").is_empty());
        assert!(hosts.lookup("missing.example.com").is_empty());
    }
}
