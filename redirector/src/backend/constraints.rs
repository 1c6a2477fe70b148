//! The limits and formats the upstream XBackend CRD puts on fields, as data.
//!
//! Two consumers keep each other honest through these constants: `validate` enforces them
//! (by hand-written checks in `validate/names.rs`, since the agent carries no regex
//! engine) and `crate::crd` publishes them in the CustomResourceDefinition it prints.
//! The CRD test compares that schema with expectations rewritten from upstream
//! (`config/crd/experimental/gateway.networking.x-k8s.io_xbackends.yaml`, Gateway API
//! v1.6.1 and main), so a constant that drifts from upstream fails there.

/// Which upstream shape of XBackend `v1alpha1`: what an object is written in, what
/// `redirector crd` prints and what the installed CRD holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SchemaVersion {
    /// Gateway API main after 2026-08-21 (PRs #5187, #5276, #5255, issue #5278; not yet
    /// in a release): `spec.port.number`, `EndpointSelector`, `GRPC`/`WSS`,
    /// `status.ancestors[].ancestorRef`.
    #[default]
    Newest,
    /// Gateway API v1.6.1: `spec.port.port`, `status.parents[].parentRef`.
    V1_6,
}

impl SchemaVersion {
    /// The `gateway.networking.k8s.io/bundle-version` annotation of the CRD. Upstream's
    /// main branch generates `v0.0.0-dev` (the version is set only at release).
    pub fn bundle_version(self) -> &'static str {
        match self {
            Self::Newest => "v0.0.0-dev",
            Self::V1_6 => "v1.6.1",
        }
    }

    /// How logs and notes name it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Newest => "newest (Gateway API main)",
            Self::V1_6 => "Gateway API v1.6",
        }
    }
}

/// `maxLength` of DNS subdomains: `PreciseHostname`, object names, API groups, SANs.
pub const MAX_DNS_SUBDOMAIN: usize = 253;
/// `maxLength` of DNS labels (`spec.port.name`, namespaces) and of `Kind` names.
pub const MAX_DNS_LABEL: usize = 63;
/// `maxItems` of `spec.tls.validation.caCertificateRefs`.
pub const MAX_CA_CERTIFICATE_REFS: usize = 8;
/// `maxItems` of `spec.tls.validation.subjectAltNames`.
pub const MAX_SUBJECT_ALT_NAMES: usize = 5;
/// `maxItems` of `status.parents` (v1.6) and `status.ancestors` (newest).
pub const MAX_PARENTS: usize = 32;
/// `minProperties` / `maxProperties` of `spec.endpointSelector.matchLabels`.
pub const MATCH_LABELS_RANGE: (usize, usize) = (1, 64);
/// Gateway API `LabelValue`: empty, or alphanumerics with `-_.` inside.
pub const LABEL_VALUE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// `minimum` / `maximum` of `spec.port.port` (and of `parentRef.port`).
pub const PORT_RANGE: (i64, i64) = (1, 65_535);

/// Gateway API `PreciseHostname`: lowercase RFC 1123 labels, no wildcard, no trailing
/// dot. Implemented by `validate::names::precise_hostname`.
pub const PRECISE_HOSTNAME: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A SAN of type `Hostname`: `PreciseHostname` with an optional leading `*.`.
pub const SAN_HOSTNAME: &str =
    r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A SAN of type `URI`: scheme, `//` and authority are mandatory (RFC 3986 appendix B,
/// anchored at the start only, as upstream writes it).
pub const SAN_URI: &str = r"^(([^:/?#]+):)(//([^/?#]*))([^?#]*)(\?([^#]*))?(#(.*))?";
/// Gateway API `Group`: empty (the core group) or a lowercase DNS subdomain.
pub const GROUP: &str = r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// Gateway API `Kind`: a letter, then letters, digits and `-`, not ending with `-`.
pub const KIND: &str = r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$";
/// Gateway API `Namespace`: a DNS label.
pub const NAMESPACE: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// `wellKnownCACertificates`: `System` or an implementation-specific, domain-prefixed name.
pub const WELL_KNOWN_CA_CERTIFICATES: &str = r"^(System|([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]))$";
/// Gateway API `GatewayController` (`status.parents[].controllerName`): `domain/path`.
pub const CONTROLLER_NAME: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$";

/// CEL rule on `spec`: the `type` discriminator and the `externalHostname` member agree.
pub const CEL_TYPE_MEMBER: &str =
    "self.type == 'ExternalHostname' ? has(self.externalHostname) : !has(self.externalHostname)";
/// Upstream's message for [`CEL_TYPE_MEMBER`].
pub const MSG_TYPE_MEMBER: &str =
    "externalHostname must be set when type is ExternalHostname and must be unset otherwise";
/// CEL rule on `spec` (newest): the `endpointSelector` member.
pub const CEL_SELECTOR_MEMBER: &str =
    "self.type == 'EndpointSelector' ? has(self.endpointSelector) : !has(self.endpointSelector)";
/// Upstream's message for [`CEL_SELECTOR_MEMBER`].
pub const MSG_SELECTOR_MEMBER: &str =
    "endpointSelector must be set when type is EndpointSelector and must be unset otherwise";
/// CEL rule on `spec` (newest): H2C is cleartext.
pub const CEL_H2C_NO_TLS: &str =
    "!has(self.protocol) || self.protocol != 'H2C' || !has(self.tls) || self.tls.mode == 'None'";
/// Upstream's message for [`CEL_H2C_NO_TLS`].
pub const MSG_H2C_NO_TLS: &str =
    "tls must be disabled when protocol is H2C, use protocol HTTP2 for HTTP/2 with tls";
/// CEL rule on `spec` (newest): HTTP2 needs TLS.
pub const CEL_HTTP2_TLS: &str =
    "!has(self.protocol) || self.protocol != 'HTTP2' || (has(self.tls) && self.tls.mode != 'None')";
/// Upstream's message for [`CEL_HTTP2_TLS`].
pub const MSG_HTTP2_TLS: &str =
    "tls must be enabled when protocol is HTTP2, use protocol H2C for HTTP/2 without tls";
/// CEL rule on `spec` (newest): WSS needs TLS.
pub const CEL_WSS_TLS: &str =
    "!has(self.protocol) || self.protocol != 'WSS' || (has(self.tls) && self.tls.mode != 'None')";
/// Upstream's message for [`CEL_WSS_TLS`].
pub const MSG_WSS_TLS: &str = "tls must be enabled when protocol is WSS";
/// CEL rule on `spec` (newest): session persistence only for in-cluster endpoints.
pub const CEL_SESSION_PERSISTENCE: &str =
    "self.type == 'EndpointSelector' || !has(self.sessionPersistence)";
/// Upstream's message for [`CEL_SESSION_PERSISTENCE`].
pub const MSG_SESSION_PERSISTENCE: &str =
    "sessionPersistence must be unset when type is not EndpointSelector";
/// CEL rule on `spec.externalHostname.hostname`.
pub const CEL_NOT_CLUSTER_LOCAL: &str = "!self.endsWith('.cluster.local')";
/// CEL rule on `spec.port.name`.
pub const CEL_PORT_NAME: &str = "size(self) == 0 || format.dns1123Label().validate(self) == null";
/// CEL rule on `spec.tls`.
pub const CEL_CLIENT_CERTIFICATE: &str = "self.mode == 'ClientAndServer' ? has(self.clientCertificateRef) : !has(self.clientCertificateRef)";
/// CEL rule on `spec.tls.validation`: not both CA sources.
pub const CEL_NOT_BOTH_CA_SOURCES: &str = "!(has(self.caCertificateRefs) && size(self.caCertificateRefs) > 0 && has(self.wellKnownCACertificates) && self.wellKnownCACertificates != \"\")";
/// CEL rule on `spec.tls.validation`: at least one CA source.
pub const CEL_ONE_CA_SOURCE: &str = "(has(self.caCertificateRefs) && size(self.caCertificateRefs) > 0 || has(self.wellKnownCACertificates) && self.wellKnownCACertificates != \"\")";
/// CEL rules on each `subjectAltNames` entry: the field its `type` names is set, the
/// other is not.
pub const CEL_SAN: [&str; 4] = [
    "!(self.type == \"Hostname\" && (!has(self.hostname) || self.hostname == \"\"))",
    "!(self.type != \"Hostname\" && has(self.hostname) && self.hostname != \"\")",
    "!(self.type == \"URI\" && (!has(self.uri) || self.uri == \"\"))",
    "!(self.type != \"URI\" && has(self.uri) && self.uri != \"\")",
];
