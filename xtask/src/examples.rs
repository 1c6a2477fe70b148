//! `deploy/examples` made runnable on the test bed: a CA made at run time stands in for
//! the placeholder CA bundle, and a server certificate for api.redirector.test signed by
//! it. Used by `cargo xtask demo` and the container test.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use anyhow::Result;

use crate::netlab::{EXT_V4, EXT_V6};

/// The hostnames of `deploy/examples`, all served by the test bed's external host.
pub const HOSTNAMES: [&str; 3] = [
    "echo.redirector.test",
    "tls.redirector.test",
    "api.redirector.test",
];

/// The hostnames of `deploy/examples` the test bed does not serve, left unresolved: the
/// MCP example's server (resolved to the external host it would share port 443 with
/// `api.redirector.test`, and a plaintext connect there could name neither). Each agent
/// then starts with a name whose resolution fails, which the container test's handover
/// goes through.
pub const UNSERVED: [&str; 1] = ["mcp.redirector.test"];

/// Hosts-file entries resolving [`HOSTNAMES`] to the external host (IPv4 and IPv6).
pub fn hosts() -> Vec<(IpAddr, &'static str)> {
    (HOSTNAMES.iter())
        .flat_map(|name| [(EXT_V4.into(), *name), (EXT_V6.into(), *name)])
        .collect()
}

/// `deploy/examples` of this workspace.
pub fn examples_dir() -> PathBuf {
    crate::manifest::deploy_dir().join("examples")
}

/// A CA and a server certificate for api.redirector.test, as PEM files under `dir`.
pub fn tls_material(dir: &Path) -> Result<(String, PathBuf, PathBuf)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "redirector demo CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate()?;
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca, ca_key);
    let leaf_key = KeyPair::generate()?;
    let leaf = CertificateParams::new(vec!["api.redirector.test".to_owned()])?
        .signed_by(&leaf_key, &issuer)?;
    let (cert, key) = (dir.join("api.crt"), dir.join("api.key"));
    std::fs::write(&cert, leaf.pem())?;
    std::fs::write(&key, leaf_key.serialize_pem())?;
    Ok((ca_pem, cert, key))
}

/// Copies the example Backends, putting `ca_pem` in place of the placeholder CA bundle.
pub fn copy_examples(from: &Path, to: &Path, ca_pem: &str) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        let Some(name) = path.file_name() else {
            continue;
        };
        let mut text = std::fs::read_to_string(&path)?;
        if let Some(at) = text.find("  ca.crt: |\n") {
            let indented: String = ca_pem.lines().map(|l| format!("    {l}\n")).collect();
            text = format!("{}  ca.crt: |\n{indented}", &text[..at]);
        }
        std::fs::write(to.join(name), text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name of the examples is either served or known not to be.
    #[test]
    fn every_hostname_of_the_examples_is_accounted_for() {
        let mut named = Vec::new();
        for entry in std::fs::read_dir(examples_dir()).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for line in text.lines() {
                if let Some(name) = line.trim().strip_prefix("hostname: ") {
                    named.push(name.trim().to_owned());
                }
            }
        }
        assert!(!named.is_empty());
        for name in &named {
            assert!(
                HOSTNAMES.contains(&name.as_str()) || UNSERVED.contains(&name.as_str()),
                "{name} is neither in HOSTNAMES nor in UNSERVED"
            );
        }
    }
}
