//! Handshake failures in words, and as a short reason for counters.

use std::io;

use rustls::{AlertDescription, CertificateError, Error};

/// Why a handshake with the upstream failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// The chain does not lead to the Backend's roots.
    UnknownCa,
    /// The certificate is not valid for the hostname (or any listed subjectAltName).
    NameMismatch,
    Expired,
    NotYetValid,
    /// The server rejected us (e.g. our client certificate, or none).
    RejectedByServer,
    /// Timeout, reset, protocol error...
    Other,
}

impl HandshakeFailure {
    pub fn classify(error: &io::Error) -> Self {
        let Some(tls) = error.get_ref().and_then(|e| e.downcast_ref::<Error>()) else {
            return HandshakeFailure::Other;
        };
        match tls {
            Error::InvalidCertificate(certificate) => match certificate {
                // A certificate naming one of our CAs as issuer but not signed by it is
                // as untrusted as one from an unknown CA.
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    HandshakeFailure::UnknownCa
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => HandshakeFailure::NameMismatch,
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    HandshakeFailure::Expired
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    HandshakeFailure::NotYetValid
                }
                _ => HandshakeFailure::Other,
            },
            Error::AlertReceived(
                AlertDescription::CertificateRequired
                | AlertDescription::BadCertificate
                | AlertDescription::UnknownCA
                | AlertDescription::CertificateUnknown
                | AlertDescription::AccessDenied
                | AlertDescription::HandshakeFailure,
            ) => HandshakeFailure::RejectedByServer,
            _ => HandshakeFailure::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HandshakeFailure::UnknownCa => "unknown_ca",
            HandshakeFailure::NameMismatch => "name_mismatch",
            HandshakeFailure::Expired => "expired",
            HandshakeFailure::NotYetValid => "not_yet_valid",
            HandshakeFailure::RejectedByServer => "rejected_by_server",
            HandshakeFailure::Other => "other",
        }
    }
}
