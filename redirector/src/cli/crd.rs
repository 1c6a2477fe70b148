//! `redirector crd`'s flags.

use clap::{Args, ValueEnum};

use crate::backend::constraints::SchemaVersion;

#[derive(Debug, Args)]
pub struct CrdArgs {
    /// Print only the BackendPolicy CRD (policy.redirector.dev/v1alpha1), for clusters
    /// whose XBackend CRD comes from the Gateway API experimental channel. Without it,
    /// both CRDs are printed: XBackend, then BackendPolicy.
    #[arg(long)]
    pub backend_policy: bool,

    /// Which upstream XBackend schema to print. `newest` is Gateway API main
    /// (`spec.port.number`, EndpointSelector, GRPC/WSS, `status.ancestors`; bundle-version
    /// v0.0.0-dev, as upstream's main generates it); `v1.6` is Gateway API v1.6.1
    /// (`spec.port.port`, `status.parents`). The agent reads objects of both shapes and
    /// writes status in the shape of whichever CRD is installed, so never replace a newer
    /// CRD on a cluster with this one (`kubectl get crd xbackends.gateway.networking.x-k8s.io
    /// -o jsonpath='{.metadata.annotations}'` shows what is installed).
    #[arg(long, value_enum, value_name = "VERSION", default_value_t = GatewayApi::Newest)]
    pub gateway_api: GatewayApi,
}

/// `redirector crd --gateway-api`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GatewayApi {
    /// Upstream's newest (Gateway API main after 2026-08-21; not yet released).
    Newest,
    /// Gateway API v1.6.1.
    #[value(name = "v1.6")]
    V1_6,
}

impl From<GatewayApi> for SchemaVersion {
    fn from(version: GatewayApi) -> Self {
        match version {
            GatewayApi::Newest => Self::Newest,
            GatewayApi::V1_6 => Self::V1_6,
        }
    }
}
