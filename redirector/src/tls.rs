//! TLS towards Backends: what `spec.tls` asks for, built once per Backend.
//!
//! - `origination`: the rustls client configuration of a Backend (roots, SNI, SAN check,
//!   client certificate, ALPN), built when the Backend or its referenced ConfigMaps and
//!   Secrets change, never per connection.
//! - `verifier`: server certificate verification with `subjectAltNames` support.
//! - `sniff`: recognises a client's own TLS ClientHello without consuming it.
//! - `failure`: names handshake failures for logs and counters.

mod failure;
mod material;
mod origination;
pub mod sniff;
mod verifier;

pub use failure::HandshakeFailure;
pub use origination::{H2, TlsConfigError, TlsInputs, TlsOrigination};

#[cfg(test)]
mod tests;
