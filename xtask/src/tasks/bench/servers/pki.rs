//! The test CA and server certificate, and the Backend directory that trusts that CA.

use super::{HOSTNAME, write};
use anyhow::{Context, Result};
use std::path::Path;

const BACKEND_TEMPLATE: &str = include_str!("../../../../../bench/backend.yaml.tmpl");
const PLAIN_BACKEND_TEMPLATE: &str = include_str!("../../../../../bench/backend-plain.yaml.tmpl");
const POLICY_TEMPLATE: &str = include_str!("../../../../../bench/backend-policy.yaml.tmpl");

/// The Backend a redirector case declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendSpec {
    /// Port 443, `tls.mode: ServerOnly` against the bench CA, with this `spec.protocol`,
    /// and with `policy` the BackendPolicy of bench/backend-policy.yaml.tmpl beside it.
    Tls {
        protocol: &'static str,
        policy: bool,
    },
    /// No `tls`, `protocol: TCP`, on this port: bytes forwarded unchanged.
    Plain { port: u16 },
}

/// The bench CA and the server certificate, as PEM.
pub struct Pki {
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
}

impl Pki {
    /// A fresh CA and an ECDSA P-256 server certificate for [`HOSTNAME`] signed by it.
    pub fn generate() -> Result<Pki> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "redirector bench CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);

        let mut server = CertificateParams::new(vec![HOSTNAME.to_owned()])?;
        server.distinguished_name.push(DnType::CommonName, HOSTNAME);
        server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate()?;
        let server_cert = server.signed_by(&server_key, &issuer)?;
        Ok(Pki {
            ca_pem: ca_cert.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
        })
    }

    /// Writes `ca.crt`, `server.crt` and `server.key` (0600) into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write(&dir.join("ca.crt"), &self.ca_pem, 0o644)?;
        write(&dir.join("server.crt"), &self.server_cert_pem, 0o644)?;
        write(&dir.join("server.key"), &self.server_key_pem, 0o600)
    }
}

/// The Backend directory of a redirector case: a TLS XBackend with its CA ConfigMap, or
/// a plaintext one. Each case gets its own directory (and its own agent), so a TCP and an
/// HTTP Backend for the same name and port never meet.
pub fn write_backend_dir(dir: &Path, ca_pem: &str, spec: BackendSpec) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let yaml = match spec {
        BackendSpec::Tls { protocol, policy } => {
            if policy {
                write(&dir.join("policy.yaml"), POLICY_TEMPLATE, 0o644)?;
            }
            let indented: String = ca_pem.lines().map(|line| format!("    {line}\n")).collect();
            BACKEND_TEMPLATE
                .replace("{{PROTOCOL}}", protocol)
                .replace("{{CA_PEM}}\n", &indented)
        }
        BackendSpec::Plain { port } => {
            PLAIN_BACKEND_TEMPLATE.replace("{{PORT}}", &port.to_string())
        }
    };
    write(&dir.join("backend.yaml"), &yaml, 0o644)
}
