//! Server certificate verification as `spec.tls.validation` says.
//!
//! The chain must lead to one of the Backend's roots. Then the name: with no
//! `subjectAltNames`, the certificate must be valid for the SNI (`validation.hostname`);
//! with `subjectAltNames`, it must carry one of them instead (a `Hostname` entry checked
//! like a DNS name, wildcards included; a `URI` entry compared exactly with the
//! certificate's URI SANs, e.g. SPIFFE IDs).

use std::sync::Arc;

use rustls::{
    CertificateError, DigitallySignedStruct, Error, RootCertStore, SignatureScheme,
    client::{
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
        verify_server_cert_signed_by_trust_anchor, verify_server_name,
    },
    crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature},
    server::ParsedCertificate,
};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use crate::backend::SubjectAltName;

#[derive(Debug)]
pub struct BackendVerifier {
    roots: Arc<RootCertStore>,
    subject_alt_names: Vec<SubjectAltName>,
    provider: Arc<CryptoProvider>,
}

impl BackendVerifier {
    pub fn new(
        roots: Arc<RootCertStore>,
        subject_alt_names: Vec<SubjectAltName>,
        provider: Arc<CryptoProvider>,
    ) -> Self {
        Self {
            roots,
            subject_alt_names,
            provider,
        }
    }

    fn verify_name(
        &self,
        certificate: &ParsedCertificate<'_>,
        der: &CertificateDer<'_>,
        sni: &ServerName<'_>,
    ) -> Result<(), Error> {
        if self.subject_alt_names.is_empty() {
            return verify_server_name(certificate, sni);
        }
        let mut uris: Option<Vec<String>> = None;
        for wanted in &self.subject_alt_names {
            let matched = match wanted {
                SubjectAltName::Hostname(hostname) => ServerName::try_from(hostname.as_str())
                    .is_ok_and(|name| verify_server_name(certificate, &name).is_ok()),
                SubjectAltName::Uri(uri) => uris
                    .get_or_insert_with(|| uri_sans(der))
                    .iter()
                    .any(|u| u == uri),
            };
            if matched {
                return Ok(());
            }
        }
        Err(Error::InvalidCertificate(CertificateError::NotValidForName))
    }
}

/// The URI entries of the certificate's subjectAltName extension.
fn uri_sans(der: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::{extensions::GeneralName, prelude::FromDer};
    let Ok((_, certificate)) = x509_parser::certificate::X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let Ok(Some(sans)) = certificate.subject_alternative_name() else {
        return Vec::new();
    };
    sans.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::URI(uri) => Some((*uri).to_owned()),
            _ => None,
        })
        .collect()
}

impl ServerCertVerifier for BackendVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let certificate = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &certificate,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        self.verify_name(&certificate, end_entity, server_name)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
