//! TLS towards Backends: what `spec.tls` asks for, built once per Backend.
//!
//! - `origination`: the rustls client configuration of a Backend (roots, SNI, SAN check,
//!   client certificate, ALPN), built when the Backend or its referenced ConfigMaps and
//!   Secrets change, never per connection.
//! - `verifier`: server certificate verification with `subjectAltNames` support.
//! - `sniff`: recognises a client's own TLS ClientHello without consuming it.
//! - `failure`: names handshake failures for logs and counters.
//! - `provider`: the one rustls crypto provider.

mod failure;
mod material;
mod origination;
mod provider;
pub mod sniff;
mod verifier;

pub use failure::HandshakeFailure;
pub use origination::{H2, TlsConfigError, TlsInputs, TlsOrigination};
pub use provider::{CRYPTO_PROVIDER_NAME, crypto_provider};

#[cfg(test)]
pub(crate) mod tests;
