//! Turns a parsed [`XBackend`] into the agent's [`Backend`], or into every reason it is
//! unusable.
//!
//! Parsing (`model`) checks shape: required fields, types and enums fail there, with the
//! field path (`spec.port.port: required`, `spec.tls.mode: unknown variant ...`). This
//! module owns meaning. All errors of an object are collected rather than stopping at the
//! first, so `redirector check` shows an operator everything to fix in one pass. Each
//! error names its field in upstream JSON names, like `spec.tls.validation.hostname`.
//!
//! # Upstream rules enforced
//!
//! Every rule of the upstream CRD (`gateway.networking.x-k8s.io_xbackends.yaml`) on
//! `spec`, with where it is enforced. An object is read in the shape it is written in
//! (`shape`): the newest (Gateway API main) or v1.6.1 (`spec.port.port`); rows marked
//! *newest* or *v1.6* hold for that shape only.
//!
//! | field | upstream rule | here |
//! |---|---|---|
//! | `spec` | required | `model` (serde) |
//! | `spec.type` | required, enum `ExternalHostname EndpointSelector` (*v1.6*: `ExternalHostname`) | `model`; `shape::members` |
//! | `spec` | CEL: `type == ExternalHostname` ⇔ `externalHostname` set | [`external_hostname`] |
//! | `spec` | *newest* CEL: `type == EndpointSelector` ⇔ `endpointSelector` set; `matchLabels` 1..=64 | `shape::members` |
//! | `spec` | *newest* CEL: `sessionPersistence` only with `EndpointSelector` | `shape::members` |
//! | `spec` | *newest* CEL: H2C without TLS, HTTP2 and WSS with TLS (mode not `None`) | `shape::protocol` |
//! | `spec.port` | *newest*: `{number}`, `minProperties: 1`; *v1.6*: `port` required | `shape::port` |
//! | `spec.port.number`, `spec.port.port` | `minimum: 1`, `maximum: 65535`, int32 | `model`; `shape::port` |
//! | `spec.port.name` | *v1.6*: `maxLength: 63`; CEL: empty or `format.dns1123Label()` | `shape::port` |
//! | `spec.externalHostname.hostname` | required; `PreciseHostname` (1..=253, lowercase labels pattern) | [`external_hostname`] |
//! | `spec.externalHostname.hostname` | CEL: `!endsWith('.cluster.local')` | [`external_hostname`] |
//! | `spec.protocol` | enum `TCP HTTP HTTP2 HTTP11 H2C MCP GRPC WSS` (*v1.6*: without `GRPC WSS`) | `model`; `shape::protocol` |
//! | `spec.tls.mode` | required, enum `None ServerOnly ClientAndServer` | `model` |
//! | `spec.tls` | CEL: `clientCertificateRef` set ⇔ mode `ClientAndServer` | `tls::client_certificate` |
//! | `spec.tls.clientCertificateRef` | `name` required (1..=253); `group` pattern (<= 253); `kind` pattern (1..=63); `namespace` DNS label | `model`; `tls::client_certificate` |
//! | `spec.tls.validation.hostname` | required; `PreciseHostname` | `tls::validation` |
//! | `spec.tls.validation` | CEL: not both `caCertificateRefs` and `wellKnownCACertificates` | `tls::ca_source` |
//! | `spec.tls.validation` | CEL: one of `caCertificateRefs` (non-empty) or `wellKnownCACertificates` | `tls::ca_source` |
//! | `spec.tls.validation.caCertificateRefs` | `maxItems: 8`; each `group`, `kind`, `name` required, with the `Group`/`Kind` patterns and name 1..=253 | `model`; `tls::ca_refs` |
//! | `spec.tls.validation.wellKnownCACertificates` | 1..=253, `System` or a domain-prefixed name | `model` (see below) |
//! | `spec.tls.validation.subjectAltNames` | `maxItems: 5`; each `type` required, enum `Hostname URI` | `model`; `tls::subject_alt_names` |
//! | `subjectAltNames[i].hostname` | 1..=253, pattern `(*.)?` + `PreciseHostname` | `tls::subject_alt_names` |
//! | `subjectAltNames[i].uri` | 1..=253, pattern `scheme://authority...` | `tls::subject_alt_names` |
//! | `subjectAltNames[i]` | four CEL rules: the field the `type` names is set (non-empty), the other is not | `tls::subject_alt_names` |
//!
//! The API server also requires `metadata.name` to be a DNS subdomain and
//! `metadata.namespace` a DNS label; both are checked here so that a directory of YAML
//! and a cluster accept the same objects.
//!
//! # Stricter than upstream
//!
//! Each is also stated at the function that enforces it.
//!
//! - Hostnames (`externalHostname.hostname`, `validation.hostname`, SAN hostnames) must not
//!   be IP literals or end in a numeric label (`10.0.0.1`, `127.1`, `0x7f.1`): the
//!   `PreciseHostname` pattern admits dotted numbers, but an IP-shaped name would bypass
//!   the resolver's address checks. Labels are at most 63 characters (the pattern does
//!   not limit them; DNS cannot carry longer ones).
//! - No wildcards in `externalHostname.hostname` or `validation.hostname` (the pattern
//!   already refuses `*`; the message says so plainly). SAN hostnames keep upstream's
//!   `*.` prefix, since certificates carry wildcard SANs.
//! - `cluster.local` itself is refused, not only names ending in `.cluster.local`.
//! - `spec.tls.validation` is required when `mode` is `ServerOnly` or `ClientAndServer`
//!   (upstream leaves it optional): without it there is nothing to verify the server
//!   certificate against, and the agent never originates unverified TLS.
//! - References: `clientCertificateRef` must be a core `Secret` in the Backend's own
//!   namespace (cross-namespace needs ReferenceGrant, not implemented);
//!   `caCertificateRefs` entries must be core `ConfigMap`s or `Secret`s; referenced names
//!   must be valid object names (DNS subdomains) rather than any 1..=253 characters.
//!   Upstream makes unsupported kinds an `InvalidKind` status condition; here they are a
//!   validation error, which is the same outcome for a directory of files.
//! - `wellKnownCACertificates`: only `System`. Upstream's pattern also admits
//!   implementation-specific names (`example.com/bundle`); this agent defines none, and
//!   upstream requires an unrecognised value to make the object not Accepted.
//! - SAN URIs: the scheme must be RFC 3986 (a letter first) and no whitespace.
//! - *v1.6*: `protocol: H2C` with TLS originated (`mode` `ServerOnly`/`ClientAndServer`)
//!   is an error (upstream's newest has the same rule; v1.6 did not).
//! - `matchLabels` keys must be label keys (the CRD cannot check map keys).
//! - Both `port.number` and `port.port` set must agree.
//! - Unknown fields are errors (`model` uses `deny_unknown_fields`); the API server
//!   would prune them silently, and `kubectl apply` (strict field validation) refuses them.
//!
//! Not enforced: `status` (written by controllers, ignored when loading; the API server
//! enforces its schema on write), and upstream defaulting is applied by `model` instead
//! (`group: ""` and `kind: Secret` on `clientCertificateRef`).

mod names;
mod shape;
/// Crate-visible so that the CRD's tests evaluate the same upstream cases.
#[cfg(test)]
pub(crate) mod tests;
mod tls;
mod types;

pub use shape::Notice;
pub use types::{
    Backend, BackendTls, CaSource, ObjectKey, ObjectRef, Protocol, RefKind, SubjectAltName,
    TlsMode, ValidationError,
};

use super::constraints::{MSG_TYPE_MEMBER, SchemaVersion};
use super::model::{BackendSpec, BackendType, XBackend};

/// Collects errors so that every rule runs and all problems are reported at once.
#[derive(Debug, Default)]
struct Report {
    errors: Vec<ValidationError>,
}

impl Report {
    fn fail(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ValidationError {
            field: field.into(),
            message: message.into(),
        });
    }

    /// Runs a check and reports its error at `field`; `true` if it passed.
    fn check(&mut self, field: impl FnOnce() -> String, result: Result<(), String>) -> bool {
        match result {
            Ok(()) => true,
            Err(message) => {
                self.fail(field(), message);
                false
            }
        }
    }
}

/// An object that passed every rule of its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validated {
    /// `None` for an `EndpointSelector` Backend: valid, but in-cluster endpoints for
    /// other controllers, so nothing for this agent to redirect (see `notices`).
    pub backend: Option<Backend>,
    /// The shape the object is written in.
    pub schema: SchemaVersion,
    /// What the operator should hear about once: a deprecated shape, a skipped Backend.
    pub notices: Vec<Notice>,
}

/// Checks one XBackend and builds the agent model from it, with the rules of the shape
/// it is written in (`shape`).
///
/// `apiVersion`/`kind` are not checked here: the source that dispatched the document did.
pub fn validate(object: &XBackend) -> Result<Validated, Vec<ValidationError>> {
    let mut report = Report::default();
    let spec = &object.spec;
    let schema = shape::schema_of(spec);
    let key = object_key(object, &mut report);
    let hostname = external_hostname(spec, &mut report);
    shape::members(spec, schema, &mut report);
    let port = shape::port(&spec.port, &mut report);
    let protocol = spec.protocol.map_or(Protocol::Tcp, Protocol::from);
    let namespace = object.metadata.namespace.as_str();
    let tls = tls::tls(spec, namespace, hostname.as_deref(), &mut report);
    let tls_mode = spec.tls.as_ref().map(|tls| TlsMode::from(tls.mode));
    shape::protocol(protocol, tls_mode, schema, &mut report);
    if !report.errors.is_empty() {
        return Err(report.errors);
    }
    let notices = shape::deprecation(&spec.port).into_iter();
    if spec.backend_type == BackendType::EndpointSelector {
        return Ok(Validated {
            backend: None,
            schema,
            notices: notices.chain([shape::skipped()]).collect(),
        });
    }
    match (key, hostname, port, tls) {
        (Some(key), Some(hostname), Some(port), Some(tls)) => Ok(Validated {
            backend: Some(Backend {
                key,
                hostname,
                port,
                protocol,
                tls,
            }),
            schema,
            notices: notices.collect(),
        }),
        // Every `None` above reported an error; this keeps the function total.
        _ => Err(report.errors),
    }
}

/// `metadata.name` is required (a file may omit it; the API server never does) and both
/// parts must be what Kubernetes itself would accept, so keys look the same in both modes.
fn object_key(object: &XBackend, report: &mut Report) -> Option<ObjectKey> {
    let namespace = &object.metadata.namespace;
    let ns_ok = report.check(
        || "metadata.namespace".to_owned(),
        names::dns_label(namespace),
    );
    let name = match object.metadata.name.as_deref() {
        None | Some("") => {
            report.fail("metadata.name", "required");
            return None;
        }
        Some(name) => name,
    };
    let name_ok = report.check(|| "metadata.name".to_owned(), names::dns_subdomain(name));
    (ns_ok && name_ok).then(|| ObjectKey::new(namespace.clone(), name))
}

/// `type` and the `externalHostname` union member must agree (upstream CEL rule, with
/// its message), and the hostname must be a `PreciseHostname` outside `cluster.local`
/// (upstream pattern and CEL) that is neither an IP literal nor a wildcard (stricter, see
/// [`names::precise_hostname`]).
fn external_hostname(spec: &BackendSpec, report: &mut Report) -> Option<String> {
    let field = "spec.externalHostname";
    match (spec.backend_type, &spec.external_hostname) {
        (BackendType::EndpointSelector, None) => None,
        (BackendType::EndpointSelector, Some(_)) | (BackendType::ExternalHostname, None) => {
            report.fail(field, MSG_TYPE_MEMBER);
            None
        }
        (BackendType::ExternalHostname, Some(ext)) => {
            let field = || "spec.externalHostname.hostname".to_owned();
            let ok = report.check(field, names::external_hostname(&ext.hostname));
            ok.then(|| ext.hostname.clone())
        }
    }
}
