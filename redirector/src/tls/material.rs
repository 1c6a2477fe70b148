//! Certificates and keys from the ConfigMaps and Secrets a Backend references.

use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

use super::TlsConfigError;
use crate::backend::{Catalog, ObjectRef, RefKind};

/// Key of a CA bundle in a ConfigMap (or Secret), as upstream Gateway API specifies.
pub const CA_KEY: &str = "ca.crt";
/// Keys of a `kubernetes.io/tls` Secret.
pub const CERT_KEY: &str = "tls.crt";
pub const PRIVATE_KEY_KEY: &str = "tls.key";

/// The bytes under `key` in the referenced object.
pub fn lookup<'a>(
    catalog: &'a Catalog,
    object: &ObjectRef,
    key: &str,
) -> Result<&'a [u8], TlsConfigError> {
    let data = match object.kind {
        RefKind::ConfigMap => catalog
            .config_maps
            .get(&object.key)
            .map(|data| data.get(key).map(|value| value.as_bytes())),
        RefKind::Secret => catalog
            .secrets
            .get(&object.key)
            .map(|data| data.get(key).map(Vec::as_slice)),
    };
    match data {
        None => Err(TlsConfigError::MissingObject {
            object: object.to_string(),
        }),
        Some(None) => Err(TlsConfigError::MissingKey {
            object: object.to_string(),
            key: key.to_owned(),
        }),
        Some(Some(bytes)) => Ok(bytes),
    }
}

/// Every certificate of a PEM bundle; an error if it holds none or is malformed.
pub fn certificates(
    pem: &[u8],
    source: impl Fn() -> String,
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsConfigError::BadPem {
            origin: source(),
            reason: error.to_string(),
        })?;
    if certificates.is_empty() {
        return Err(TlsConfigError::BadPem {
            origin: source(),
            reason: "no CERTIFICATE block".into(),
        });
    }
    Ok(certificates)
}

/// The private key of a PEM (PKCS#8, PKCS#1 RSA or SEC1 EC).
pub fn private_key(
    pem: &[u8],
    source: impl Fn() -> String,
) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|error| TlsConfigError::BadPem {
        origin: source(),
        reason: error.to_string(),
    })
}
