//! The rustls client side of one Backend.

use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::ServerName;

use super::{material, verifier::BackendVerifier};
use crate::backend::{Backend, BackendTls, CaSource, Catalog, Protocol, TlsMode};

/// Why a Backend's TLS settings cannot be used. The Backend's connections are refused
/// (never sent in plaintext) and the reason is logged; other Backends are unaffected.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TlsConfigError {
    #[error("{object} (referenced by the Backend) does not exist")]
    MissingObject { object: String },
    #[error("{object} has no key {key:?}")]
    MissingKey { object: String, key: String },
    #[error("{origin}: not usable PEM: {reason}")]
    BadPem { origin: String, reason: String },
    #[error("spec.tls.validation.hostname {hostname:?} is not a valid SNI name")]
    BadHostname { hostname: String },
    #[error("CA bundle: {0}")]
    BadRoots(String),
    #[error("client certificate: {0}")]
    BadClientCertificate(String),
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

/// Everything needed to originate TLS for one Backend, shared by its connections.
#[derive(Debug)]
pub struct TlsOrigination {
    /// ALPN as the Backend's protocol says.
    pub config: Arc<ClientConfig>,
    /// The same, offering only `http/1.1`: for Upgrade requests (WebSocket), which
    /// need an HTTP/1.1 connection of their own whatever the protocol.
    pub http1_config: Arc<ClientConfig>,
    /// The SNI sent: `spec.tls.validation.hostname`.
    pub server_name: ServerName<'static>,
}

impl TlsOrigination {
    /// `Ok(None)` when the Backend does not ask for TLS origination (`tls` absent or
    /// `mode: None`).
    pub fn for_backend(
        backend: &Backend,
        catalog: &Catalog,
    ) -> Result<Option<Arc<Self>>, TlsConfigError> {
        match &backend.tls {
            Some(tls) if tls.mode != TlsMode::None => {
                build(tls, backend.protocol, catalog).map(|o| Some(Arc::new(o)))
            }
            _ => Ok(None),
        }
    }
}

/// Everything an origination is built from: equal inputs give an equal origination, so
/// the reconciler rebuilds only when these change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsInputs {
    tls: Option<BackendTls>,
    protocol: Protocol,
    /// The referenced ConfigMap/Secret values, in reference order (`None`: missing).
    material: Vec<Option<Vec<u8>>>,
}

impl TlsInputs {
    pub fn of(backend: &Backend, catalog: &Catalog) -> Self {
        let mut material = Vec::new();
        if let Some(tls) = &backend.tls {
            if let CaSource::Refs(refs) = &tls.ca {
                for reference in refs {
                    material.push(fetch(catalog, reference, material::CA_KEY));
                }
            }
            if let Some(secret) = &tls.client_certificate {
                for key in [material::CERT_KEY, material::PRIVATE_KEY_KEY] {
                    material.push(fetch(catalog, secret, key));
                }
            }
        }
        Self {
            tls: backend.tls.clone(),
            protocol: backend.protocol,
            material,
        }
    }
}

fn fetch(catalog: &Catalog, object: &crate::backend::ObjectRef, key: &str) -> Option<Vec<u8>> {
    material::lookup(catalog, object, key)
        .ok()
        .map(<[u8]>::to_vec)
}

fn build(
    tls: &BackendTls,
    protocol: Protocol,
    catalog: &Catalog,
) -> Result<TlsOrigination, TlsConfigError> {
    let provider = super::crypto_provider();
    let server_name =
        ServerName::try_from(tls.hostname.clone()).map_err(|_| TlsConfigError::BadHostname {
            hostname: tls.hostname.clone(),
        })?;
    let verifier = BackendVerifier::new(
        roots(tls, catalog)?,
        tls.subject_alt_names.clone(),
        provider.clone(),
    );
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsConfigError::Rustls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let mut config = match (&tls.mode, &tls.client_certificate) {
        (TlsMode::ClientAndServer, Some(secret)) => {
            let source = || secret.to_string();
            let chain = material::certificates(
                material::lookup(catalog, secret, material::CERT_KEY)?,
                source,
            )?;
            let key = material::private_key(
                material::lookup(catalog, secret, material::PRIVATE_KEY_KEY)?,
                source,
            )?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsConfigError::BadClientCertificate(format!("{}: {e}", source())))?
        }
        _ => builder.with_no_client_auth(),
    };
    // Lets `--kernel-tls` take the keys of a finished handshake; nothing else reads them.
    config.enable_secret_extraction = true;
    // Session resumption is on by default (in-memory, 256 sessions per Backend, shared
    // by both configurations).
    let mut http1_config = config.clone();
    http1_config.alpn_protocols = vec![HTTP11.to_vec()];
    config.alpn_protocols = alpn(protocol);
    Ok(TlsOrigination {
        config: Arc::new(config),
        http1_config: Arc::new(http1_config),
        server_name,
    })
}

fn roots(tls: &BackendTls, catalog: &Catalog) -> Result<Arc<RootCertStore>, TlsConfigError> {
    let mut roots = RootCertStore::empty();
    match &tls.ca {
        // "System": the Mozilla root program as compiled into webpki-roots, the same on
        // every node whatever its distribution ships.
        CaSource::System => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        CaSource::Refs(refs) => {
            for reference in refs {
                let pem = material::lookup(catalog, reference, material::CA_KEY)?;
                let source = || format!("{} key {}", reference, material::CA_KEY);
                for certificate in material::certificates(pem, source)? {
                    roots
                        .add(certificate)
                        .map_err(|e| TlsConfigError::BadRoots(format!("{}: {e}", source())))?;
                }
            }
        }
    }
    Ok(Arc::new(roots))
}

const HTTP11: &[u8] = b"http/1.1";
/// The ALPN name of HTTP/2 over TLS.
pub const H2: &[u8] = b"h2";

/// What the proxy offers in ALPN: the XBackend API says a configured protocol that is
/// negotiated on the wire must be offered and used.
fn alpn(protocol: Protocol) -> Vec<Vec<u8>> {
    match protocol {
        // Either; the proxy speaks what the server picks.
        Protocol::Http => vec![H2.to_vec(), HTTP11.to_vec()],
        Protocol::Http11 | Protocol::Mcp | Protocol::Wss => vec![HTTP11.to_vec()],
        Protocol::Http2 | Protocol::Grpc => vec![H2.to_vec()],
        // H2C is cleartext HTTP/2 by definition; TCP is opaque bytes.
        Protocol::H2c | Protocol::Tcp => Vec::new(),
    }
}
