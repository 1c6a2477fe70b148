//! TLS origination against an in-process rustls server, with certificates made here.

use std::{collections::BTreeMap, sync::Arc};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
use rustls::{ServerConfig, server::WebPkiClientVerifier};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{HandshakeFailure, TlsConfigError, TlsOrigination};
use crate::backend::{
    Backend, BackendTls, CaSource, Catalog, ObjectKey, ObjectRef, Protocol, RefKind,
    SubjectAltName, TlsMode,
};

pub(crate) struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// A leaf for `sans` (DNS names, or `uri:` prefixed URIs); `expired` backdates it.
    pub(crate) fn leaf(&self, sans: &[&str], expired: bool) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = sans
            .iter()
            .map(|san| match san.strip_prefix("uri:") {
                Some(uri) => SanType::URI(uri.try_into().unwrap()),
                None => SanType::DnsName((*san).try_into().unwrap()),
            })
            .collect();
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

pub(crate) fn certs(pem: &str) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap()
}

pub(crate) fn key(pem: &str) -> PrivateKeyDer<'static> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).unwrap()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    crate::tls::crypto_provider()
}

/// A server presenting `leaf`; with `client_ca`, it requires a client certificate.
pub(crate) fn server(leaf: &(String, String), client_ca: Option<&Ca>) -> Arc<ServerConfig> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(certs(&ca.pem).remove(0)).unwrap();
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs(&leaf.0), key(&leaf.1))
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

fn object(kind: RefKind, name: &str) -> ObjectRef {
    ObjectRef {
        kind,
        key: ObjectKey::new("demo", name),
    }
}

pub(crate) fn backend(mode: TlsMode, sans: Vec<SubjectAltName>, protocol: Protocol) -> Backend {
    Backend {
        key: ObjectKey::new("demo", "api"),
        hostname: "api.example.test".into(),
        port: 443,
        protocol,
        tls: Some(BackendTls {
            mode,
            hostname: "api.example.test".into(),
            ca: CaSource::Refs(vec![object(RefKind::ConfigMap, "api-ca")]),
            subject_alt_names: sans,
            client_certificate: (mode == TlsMode::ClientAndServer)
                .then(|| object(RefKind::Secret, "api-client")),
        }),
    }
}

pub(crate) fn catalog(ca: &Ca, client: Option<&(String, String)>) -> Catalog {
    let mut catalog = Catalog::default();
    catalog.config_maps.insert(
        ObjectKey::new("demo", "api-ca"),
        BTreeMap::from([("ca.crt".into(), ca.pem.clone())]),
    );
    if let Some((cert, key)) = client {
        catalog.secrets.insert(
            ObjectKey::new("demo", "api-client"),
            BTreeMap::from([
                ("tls.crt".into(), cert.clone().into_bytes()),
                ("tls.key".into(), key.clone().into_bytes()),
            ]),
        );
    }
    catalog
}

/// Handshake through an in-memory pipe, then one request/response, like the proxy's
/// first bytes. Returns the negotiated ALPN.
async fn exchange(
    origination: &TlsOrigination,
    server: Arc<ServerConfig>,
) -> Result<Option<Vec<u8>>, HandshakeFailure> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let acceptor = tokio_rustls::TlsAcceptor::from(server);
    let server_task = tokio::spawn(async move {
        let mut stream = acceptor.accept(server_io).await?;
        let mut buf = [0u8; 5];
        stream.read_exact(&mut buf).await?;
        stream.write_all(b"world").await?;
        stream.shutdown().await
    });
    let connector = tokio_rustls::TlsConnector::from(origination.config.clone());
    let outcome = async {
        let mut stream = connector
            .connect(origination.server_name.clone(), client_io)
            .await?;
        stream.write_all(b"hello").await?;
        let mut buf = [0u8; 5];
        stream.read_exact(&mut buf).await?;
        Ok::<_, std::io::Error>(stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec))
    }
    .await;
    let _ = server_task.await;
    outcome.map_err(|error| HandshakeFailure::classify(&error))
}

fn origination(backend: &Backend, catalog: &Catalog) -> Arc<TlsOrigination> {
    TlsOrigination::for_backend(backend, catalog)
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn server_only_verifies_against_the_referenced_ca() {
    let ca = Ca::new("test CA");
    let good = ca.leaf(&["api.example.test"], false);
    let tls = origination(
        &backend(TlsMode::ServerOnly, vec![], Protocol::Http),
        &catalog(&ca, None),
    );
    assert_eq!(
        exchange(&tls, server(&good, None)).await,
        // HTTP offers h2 and http/1.1; this server prefers h2.
        Ok(Some(b"h2".to_vec()))
    );

    let other_ca = Ca::new("another CA");
    let foreign = other_ca.leaf(&["api.example.test"], false);
    assert_eq!(
        exchange(&tls, server(&foreign, None)).await,
        Err(HandshakeFailure::UnknownCa)
    );
    let wrong_name = ca.leaf(&["other.example.test"], false);
    assert_eq!(
        exchange(&tls, server(&wrong_name, None)).await,
        Err(HandshakeFailure::NameMismatch)
    );
    let expired = ca.leaf(&["api.example.test"], true);
    assert_eq!(
        exchange(&tls, server(&expired, None)).await,
        Err(HandshakeFailure::Expired)
    );
}

#[tokio::test]
async fn subject_alt_names_replace_the_hostname_check() {
    let ca = Ca::new("test CA");
    let spiffe = "spiffe://cluster.local/ns/demo/sa/api";
    let by_uri = ca.leaf(&[&format!("uri:{spiffe}")], false);
    let by_name = ca.leaf(&["api-internal.example.test"], false);
    let sans = vec![
        SubjectAltName::Uri(spiffe.into()),
        SubjectAltName::Hostname("*.example.test".into()),
    ];
    let tls = origination(
        &backend(TlsMode::ServerOnly, sans, Protocol::Tcp),
        &catalog(&ca, None),
    );
    assert_eq!(exchange(&tls, server(&by_uri, None)).await, Ok(None));
    // A wildcard Hostname SAN matches a certificate for a name under it.
    let sans = vec![SubjectAltName::Hostname("api-internal.example.test".into())];
    let tls = origination(
        &backend(TlsMode::ServerOnly, sans, Protocol::Tcp),
        &catalog(&ca, None),
    );
    assert_eq!(exchange(&tls, server(&by_name, None)).await, Ok(None));
    // The SNI hostname itself no longer counts when SANs are listed.
    let plain = ca.leaf(&["api.example.test"], false);
    assert_eq!(
        exchange(&tls, server(&plain, None)).await,
        Err(HandshakeFailure::NameMismatch)
    );
}

#[tokio::test]
async fn client_and_server_presents_the_secret_certificate() {
    let ca = Ca::new("test CA");
    let client_ca = Ca::new("client CA");
    let server_leaf = ca.leaf(&["api.example.test"], false);
    let client_leaf = client_ca.leaf(&["client.example.test"], false);
    let mutual = origination(
        &backend(TlsMode::ClientAndServer, vec![], Protocol::Http2),
        &catalog(&ca, Some(&client_leaf)),
    );
    let requiring = server(&server_leaf, Some(&client_ca));
    assert_eq!(
        exchange(&mutual, requiring.clone()).await,
        Ok(Some(b"h2".to_vec()))
    );
    let anonymous = origination(
        &backend(TlsMode::ServerOnly, vec![], Protocol::Tcp),
        &catalog(&ca, None),
    );
    assert_eq!(
        exchange(&anonymous, requiring).await,
        Err(HandshakeFailure::RejectedByServer)
    );
}

#[test]
fn unusable_references_are_reported_per_backend() {
    let ca = Ca::new("test CA");
    let empty = Catalog::default();
    let error =
        TlsOrigination::for_backend(&backend(TlsMode::ServerOnly, vec![], Protocol::Tcp), &empty)
            .unwrap_err();
    assert_eq!(
        error,
        TlsConfigError::MissingObject {
            object: "ConfigMap demo/api-ca".into()
        }
    );
    let error = TlsOrigination::for_backend(
        &backend(TlsMode::ClientAndServer, vec![], Protocol::Tcp),
        &catalog(&ca, None),
    )
    .unwrap_err();
    assert_eq!(
        error,
        TlsConfigError::MissingObject {
            object: "Secret demo/api-client".into()
        }
    );
    let mut broken = catalog(&ca, None);
    broken.config_maps.insert(
        ObjectKey::new("demo", "api-ca"),
        BTreeMap::from([("ca.crt".into(), "not pem".into())]),
    );
    let error = TlsOrigination::for_backend(
        &backend(TlsMode::ServerOnly, vec![], Protocol::Tcp),
        &broken,
    )
    .unwrap_err();
    assert!(matches!(error, TlsConfigError::BadPem { .. }), "{error}");
    // No TLS origination asked: nothing to build.
    let mut none = backend(TlsMode::None, vec![], Protocol::Tcp);
    assert!(
        TlsOrigination::for_backend(&none, &empty)
            .unwrap()
            .is_none()
    );
    none.tls = None;
    assert!(
        TlsOrigination::for_backend(&none, &empty)
            .unwrap()
            .is_none()
    );
}
