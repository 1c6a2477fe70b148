//! The structure of upstream's XBackend schema
//! (`config/crd/experimental/gateway.networking.x-k8s.io_xbackends.yaml`), rewritten as one
//! line per schema node: `path: type` and its constraints in a fixed order, and one
//! `path: rule <CEL>` line per validation rule. `[]` is "each item", `{}` "each value of
//! a map". Descriptions and CEL messages are left out here (the messages of the newest
//! `spec` rules are checked apart, in `tests.rs`). Lines starting with `#` are comments.
//!
//! [`expected`] joins the lines both shapes share ([`COMMON`]), those of one shape
//! ([`V1_6`], [`NEWEST`]) and the status ([`STATUS`], whose list and reference names
//! differ). v1.6 is Gateway API v1.6.1's generated CRD; the newest is upstream main after
//! 2026-08-21, rewritten from `apisx/v1alpha1/xbackend_types.go` (its kubebuilder
//! markers) and the rule texts of issue 36 (#5278's protocol/TLS rules,
//! `sessionPersistence`); `sessionPersistence`'s inner fields are not modelled (kept as
//! written, `x-kubernetes-preserve-unknown-fields`).

use crate::backend::constraints::SchemaVersion;
use crate::crd::entry_names;

/// Every line of the schema of `version`.
pub fn expected(version: SchemaVersion) -> String {
    let (list, reference) = entry_names(version);
    let own = match version {
        SchemaVersion::Newest => NEWEST,
        SchemaVersion::V1_6 => V1_6,
    };
    // `required` lists are compared sorted.
    let mut required = [reference, "controllerName"];
    required.sort_unstable();
    let status = (STATUS.replace("{list}", list))
        .replace("{reference}", reference)
        .replace("{required}", &required.join(","));
    [COMMON, own, &status].join("\n")
}

/// Both shapes: the envelope, `externalHostname` and `tls`.
const COMMON: &str = r#"
# The envelope.
(root): object required=spec
apiVersion: string
kind: string
metadata: object
# spec, outside tls.
spec.externalHostname.hostname: rule !self.endsWith('.cluster.local')
spec.externalHostname.hostname: string minLength=1 maxLength=253 pattern=^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$
spec.externalHostname: object required=hostname
# spec.tls, outside validation.
spec.tls.clientCertificateRef.group: string default="" maxLength=253 pattern=^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$
spec.tls.clientCertificateRef.kind: string default="Secret" minLength=1 maxLength=63 pattern=^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$
spec.tls.clientCertificateRef.name: string minLength=1 maxLength=253
spec.tls.clientCertificateRef.namespace: string minLength=1 maxLength=63 pattern=^[a-z0-9]([-a-z0-9]*[a-z0-9])?$
spec.tls.clientCertificateRef: object required=name
spec.tls.mode: string enum=None|ServerOnly|ClientAndServer
spec.tls: object required=mode
spec.tls: rule self.mode == 'ClientAndServer' ? has(self.clientCertificateRef) : !has(self.clientCertificateRef)
# spec.tls.validation.
spec.tls.validation.caCertificateRefs: array maxItems=8 listType=atomic
spec.tls.validation.caCertificateRefs[].group: string maxLength=253 pattern=^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$
spec.tls.validation.caCertificateRefs[].kind: string minLength=1 maxLength=63 pattern=^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$
spec.tls.validation.caCertificateRefs[].name: string minLength=1 maxLength=253
spec.tls.validation.caCertificateRefs[]: object required=group,kind,name
spec.tls.validation.hostname: string minLength=1 maxLength=253 pattern=^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$
spec.tls.validation.subjectAltNames: array maxItems=5 listType=atomic
spec.tls.validation.subjectAltNames[].hostname: string minLength=1 maxLength=253 pattern=^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$
spec.tls.validation.subjectAltNames[].type: string enum=Hostname|URI
spec.tls.validation.subjectAltNames[].uri: string minLength=1 maxLength=253 pattern=^(([^:/?#]+):)(//([^/?#]*))([^?#]*)(\?([^#]*))?(#(.*))?
spec.tls.validation.subjectAltNames[]: object required=type
spec.tls.validation.subjectAltNames[]: rule !(self.type != "Hostname" && has(self.hostname) && self.hostname != "")
spec.tls.validation.subjectAltNames[]: rule !(self.type != "URI" && has(self.uri) && self.uri != "")
spec.tls.validation.subjectAltNames[]: rule !(self.type == "Hostname" && (!has(self.hostname) || self.hostname == ""))
spec.tls.validation.subjectAltNames[]: rule !(self.type == "URI" && (!has(self.uri) || self.uri == ""))
spec.tls.validation.wellKnownCACertificates: string minLength=1 maxLength=253 pattern=^(System|([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]))$
spec.tls.validation: object required=hostname
spec.tls.validation: rule !(has(self.caCertificateRefs) && size(self.caCertificateRefs) > 0 && has(self.wellKnownCACertificates) && self.wellKnownCACertificates != "")
spec.tls.validation: rule (has(self.caCertificateRefs) && size(self.caCertificateRefs) > 0 || has(self.wellKnownCACertificates) && self.wellKnownCACertificates != "")
"#;

/// Gateway API v1.6.1 only.
const V1_6: &str = r#"
spec.port.name: rule size(self) == 0 || format.dns1123Label().validate(self) == null
spec.port.name: string maxLength=63
spec.port.port: integer format=int32 minimum=1 maximum=65535
spec.port: object required=port
spec.protocol: string enum=TCP|HTTP|HTTP2|HTTP11|H2C|MCP
spec.type: string enum=ExternalHostname
spec: object required=port,type
spec: rule self.type == 'ExternalHostname' ? has(self.externalHostname) : !has(self.externalHostname)
"#;

/// Upstream's newest only.
const NEWEST: &str = r#"
spec.type: string enum=ExternalHostname|EndpointSelector
spec.protocol: string enum=TCP|HTTP|HTTP2|HTTP11|H2C|MCP|GRPC|WSS
spec: object required=port,type
spec: rule self.type == 'ExternalHostname' ? has(self.externalHostname) : !has(self.externalHostname)
spec: rule self.type == 'EndpointSelector' ? has(self.endpointSelector) : !has(self.endpointSelector)
spec: rule !has(self.protocol) || self.protocol != 'H2C' || !has(self.tls) || self.tls.mode == 'None'
spec: rule !has(self.protocol) || self.protocol != 'HTTP2' || (has(self.tls) && self.tls.mode != 'None')
spec: rule !has(self.protocol) || self.protocol != 'WSS' || (has(self.tls) && self.tls.mode != 'None')
spec: rule self.type == 'EndpointSelector' || !has(self.sessionPersistence)
spec.port.number: integer format=int32 minimum=1 maximum=65535
spec.port: object minProperties=1
spec.endpointSelector: object required=matchLabels
spec.endpointSelector.matchLabels: object minProperties=1 maxProperties=64
spec.endpointSelector.matchLabels{}: string minLength=0 maxLength=63 pattern=^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$
spec.sessionPersistence: object preserveUnknownFields=true
"#;

/// `status`, with `{list}`, `{reference}` and `{required}` for the names of the shape.
const STATUS: &str = r#"
status.{list}: array maxItems=32 listType=atomic
status.{list}[].conditions: array listType=map listMapKeys=type
status.{list}[].conditions[].lastTransitionTime: string format=date-time
status.{list}[].conditions[].message: string maxLength=32768
status.{list}[].conditions[].observedGeneration: integer format=int64 minimum=0
status.{list}[].conditions[].reason: string minLength=1 maxLength=1024 pattern=^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$
status.{list}[].conditions[].status: string enum=True|False|Unknown
status.{list}[].conditions[].type: string maxLength=316 pattern=^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$
status.{list}[].conditions[]: object required=lastTransitionTime,message,reason,status,type
status.{list}[].controllerName: string minLength=1 maxLength=253 pattern=^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$
status.{list}[].{reference}.group: string default="gateway.networking.k8s.io" maxLength=253 pattern=^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$
status.{list}[].{reference}.kind: string default="Gateway" minLength=1 maxLength=63 pattern=^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$
status.{list}[].{reference}.name: string minLength=1 maxLength=253
status.{list}[].{reference}.namespace: string minLength=1 maxLength=63 pattern=^[a-z0-9]([-a-z0-9]*[a-z0-9])?$
status.{list}[].{reference}.port: integer format=int32 minimum=1 maximum=65535
status.{list}[].{reference}.sectionName: string minLength=1 maxLength=253 pattern=^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$
status.{list}[].{reference}: object required=name
status.{list}[]: object required={required}
status: object
"#;
