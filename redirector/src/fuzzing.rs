//! Entry points of the fuzz targets (`fuzz/`, `cargo xtask fuzz`): each feeds untrusted
//! bytes to one parser the way the agent meets them. Not an API; nothing else uses it.

use std::sync::{Arc, OnceLock};

use crate::{
    backend::{Backend, ObjectKey, Protocol},
    table::{BackendTable, Entry, Scoping},
    virtual_hosts::{VirtualHosts, VirtualRanges},
};

/// A client's first bytes, as the proxy sniffs them for a ClientHello.
pub fn client_hello(bytes: &[u8]) {
    let _ = crate::tls::sniff::inspect(bytes);
}

/// A file in a Backend directory.
pub fn backend_yaml(bytes: &[u8]) {
    if let Ok(text) = std::str::from_utf8(bytes) {
        crate::backend::directory::file::fuzz(text);
    }
}

/// An XBackend object from the API server.
pub fn backend_json(bytes: &[u8]) {
    crate::kubernetes::xbackends::fuzz(bytes);
}

/// `/etc/hosts`.
pub fn hosts_file(bytes: &[u8]) {
    if let Ok(text) = std::str::from_utf8(bytes) {
        let hosts = crate::resolver::hosts::HostsFile::parse(text);
        let _ = hosts.lookup("api.example.com");
    }
}

/// A captured DNS query, against a table with one Backend hostname.
pub fn dns_query(bytes: &[u8]) {
    let how = crate::nameserver::Answering {
        ttl: 5,
        v4: true,
        v6: true,
    };
    let _ = crate::nameserver::answer::decide(bytes, 0, table(), &how);
}

fn table() -> &'static BackendTable {
    static TABLE: OnceLock<BackendTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let addresses = vec![std::net::IpAddr::from([10, 0, 0, 1])];
        let mut virtuals = VirtualHosts::new(default_ranges(), None, Default::default());
        virtuals.track(
            [(
                "api.example.com".to_owned(),
                ([0].into(), addresses.clone()),
            )]
            .into(),
        );
        let entry = Entry {
            backend: Arc::new(Backend {
                key: ObjectKey::new("default", "api"),
                hostname: "api.example.com".to_owned(),
                port: 443,
                protocol: Protocol::Tcp,
                tls: None,
            }),
            addresses,
            origination: Ok(None),
            policy: Default::default(),
        };
        BackendTable::new([entry], Scoping::Cluster, Some(&virtuals))
    })
}

fn default_ranges() -> VirtualRanges {
    VirtualRanges {
        v4: "240.0.0.0/16"
            .parse()
            .unwrap_or_else(|_| unreachable!("a valid literal")),
        v6: "fd72:6564:6972::/96"
            .parse()
            .unwrap_or_else(|_| unreachable!("a valid literal")),
    }
}
