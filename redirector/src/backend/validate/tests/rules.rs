//! The rules the tables cover, each with its source: an OpenAPI constraint or CEL rule of
//! the upstream CRD (newest, or v1.6.1 for v1.6-shaped objects), the Kubernetes API
//! server, or "stricter" for a rule this agent adds (listed in the module doc of
//! `validate`).

/// `(rule id used by the case tables, where the rule comes from)`.
pub const RULES: &[(&str, &str)] = &[
    (
        "meta.name",
        "API server: metadata.name required, DNS subdomain",
    ),
    ("meta.namespace", "API server: metadata.namespace DNS label"),
    ("spec.required", "OpenAPI: required [spec]"),
    (
        "unknown-field",
        "stricter: unknown fields are errors (kubectl strict field validation)",
    ),
    ("type.required", "OpenAPI: spec required [type]"),
    (
        "type.enum",
        "OpenAPI: spec.type enum [ExternalHostname EndpointSelector] (v1.6: [ExternalHostname])",
    ),
    (
        "type.member",
        "CEL on spec: type == 'ExternalHostname' ? has(externalHostname) : !has(externalHostname)",
    ),
    (
        "port.required",
        "OpenAPI: spec required [port]; spec.port minProperties 1 (v1.6: required [port])",
    ),
    (
        "port.type",
        "OpenAPI: spec.port.number (v1.6: spec.port.port) type integer, format int32",
    ),
    (
        "port.range",
        "OpenAPI: spec.port.number (v1.6: spec.port.port) minimum 1, maximum 65535",
    ),
    (
        "port.agree",
        "stricter: spec.port.number and the v1.6 spec.port.port, both set, must agree",
    ),
    (
        "port.name",
        "OpenAPI v1.6: spec.port.name maxLength 63; CEL size(self) == 0 || format.dns1123Label(); gone in the newest",
    ),
    (
        "selector.labels",
        "OpenAPI: endpointSelector required [matchLabels], minProperties 1, maxProperties 64, LabelValue (+ stricter: label keys)",
    ),
    (
        "selector.member",
        "CEL on spec: type == 'EndpointSelector' ? has(endpointSelector) : !has(endpointSelector)",
    ),
    (
        "cel.h2c",
        "CEL on spec: H2C only without tls or with mode None (v1.6: stricter, the same)",
    ),
    (
        "cel.http2",
        "CEL on spec: HTTP2 needs tls with mode not None (not in v1.6)",
    ),
    ("cel.wss", "CEL on spec: WSS needs tls with mode not None"),
    (
        "cel.session",
        "CEL on spec: sessionPersistence only when type is EndpointSelector",
    ),
    (
        "host.required",
        "OpenAPI: externalHostname required [hostname], minLength 1",
    ),
    (
        "host.pattern",
        "OpenAPI: PreciseHostname pattern, maxLength 253 (+ stricter: labels <= 63)",
    ),
    (
        "host.cluster-local",
        "CEL on hostname: !self.endsWith('.cluster.local') (+ stricter: cluster.local itself)",
    ),
    ("host.ip", "stricter: no IP literals or numeric last label"),
    (
        "host.wildcard",
        "OpenAPI pattern has no '*'; stated as: no wildcards",
    ),
    (
        "protocol.enum",
        "OpenAPI: spec.protocol enum [TCP HTTP HTTP2 HTTP11 H2C MCP GRPC WSS] (v1.6: without GRPC WSS)",
    ),
    (
        "tls.mode",
        "OpenAPI: spec.tls required [mode], enum [None ServerOnly ClientAndServer]",
    ),
    (
        "tls.client-cert",
        "CEL on spec.tls: mode == 'ClientAndServer' ? has(clientCertificateRef) : !has(...)",
    ),
    (
        "tls.client-cert.ref",
        "OpenAPI: SecretObjectReference required [name], group/kind/namespace patterns (+ stricter: core Secret, same namespace)",
    ),
    (
        "tls.validation.required",
        "stricter: validation required unless mode is None",
    ),
    (
        "validation.hostname",
        "OpenAPI: validation required [hostname], PreciseHostname (+ stricter: no IP)",
    ),
    (
        "validation.ca-source",
        "CEL on validation: not both, and one of, caCertificateRefs / wellKnownCACertificates",
    ),
    ("ca-refs.max", "OpenAPI: caCertificateRefs maxItems 8"),
    (
        "ca-refs.item",
        "OpenAPI: LocalObjectReference required [group kind name], Group/Kind patterns (+ stricter: core ConfigMap/Secret)",
    ),
    (
        "well-known-ca",
        "OpenAPI: wellKnownCACertificates pattern System|domain/name (+ stricter: System only)",
    ),
    ("sans.max", "OpenAPI: subjectAltNames maxItems 5"),
    (
        "san.type",
        "OpenAPI: SubjectAltName required [type], enum [Hostname URI]",
    ),
    (
        "san.cel",
        "CEL on SubjectAltName: the four type/field consistency rules",
    ),
    (
        "san.hostname",
        "OpenAPI: SAN hostname pattern (*.)?PreciseHostname, 1..=253 (+ stricter: no IP)",
    ),
    (
        "san.uri",
        "OpenAPI: SAN uri pattern scheme://authority..., 1..=253 (+ stricter: RFC 3986 scheme)",
    ),
];
