//! The one rustls crypto provider of the agent: every Backend's client configuration,
//! its certificate verifier and the benchmarks use it, so a change of provider is made
//! here and nowhere else.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// The provider every TLS configuration of the agent is built with.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The provider's name, for logs and benchmark reports.
pub const CRYPTO_PROVIDER_NAME: &str = "ring";
