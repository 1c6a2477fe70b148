//! The limits and formats the upstream XBackend CRD puts on fields, as data.
//!
//! Two consumers keep each other honest through these constants: `validate` enforces them
//! (by hand-written checks in `validate/names.rs`, since the agent carries no regex
//! engine) and `crate::crd` publishes them in the CustomResourceDefinition it prints.
//! The CRD test compares that schema with an expectation rewritten from upstream
//! (`config/crd/experimental/gateway.networking.x-k8s.io_xbackends.yaml`, Gateway API
//! v1.6.1), so a constant that drifts from upstream fails there.

/// `maxLength` of DNS subdomains: `PreciseHostname`, object names, API groups, SANs.
pub const MAX_DNS_SUBDOMAIN: usize = 253;
/// `maxLength` of DNS labels (`spec.port.name`, namespaces) and of `Kind` names.
pub const MAX_DNS_LABEL: usize = 63;
/// `maxItems` of `spec.tls.validation.caCertificateRefs`.
pub const MAX_CA_CERTIFICATE_REFS: usize = 8;
/// `maxItems` of `spec.tls.validation.subjectAltNames`.
pub const MAX_SUBJECT_ALT_NAMES: usize = 5;
/// `maxItems` of `status.parents`.
pub const MAX_PARENTS: usize = 32;
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
