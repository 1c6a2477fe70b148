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
//! Every rule of the upstream CRD (Gateway API v1.6.1,
//! `gateway.networking.x-k8s.io_xbackends.yaml`) on `spec`, with where it is enforced:
//!
//! | field | upstream rule | here |
//! |---|---|---|
//! | `spec` | required | `model` (serde) |
//! | `spec.type` | required, enum `ExternalHostname` | `model`; `EndpointSelector` (dropped upstream) gets a precise message here |
//! | `spec` | CEL: `type == ExternalHostname` ⇔ `externalHostname` set | [`external_hostname`] |
//! | `spec.port`, `spec.port.port` | required; `minimum: 1`, `maximum: 65535`, int32 | `model`; [`port`] |
//! | `spec.port.name` | `maxLength: 63`; CEL: empty or `format.dns1123Label()` | [`port`] |
//! | `spec.externalHostname.hostname` | required; `PreciseHostname` (1..=253, lowercase labels pattern) | [`external_hostname`] |
//! | `spec.externalHostname.hostname` | CEL: `!endsWith('.cluster.local')` | [`external_hostname`] |
//! | `spec.protocol` | enum `TCP HTTP HTTP2 HTTP11 H2C MCP` | `model` |
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
//! - `protocol: H2C` with TLS originated (`mode` `ServerOnly`/`ClientAndServer`) is an
//!   error: H2C is cleartext by definition; HTTP/2 over TLS is `HTTP2`.
//! - Unknown fields are errors (`model` uses `deny_unknown_fields`); the API server
//!   would prune them silently, and `kubectl apply` (strict field validation) refuses them.
//!
//! Not enforced: `status` (written by controllers, ignored when loading; the API server
//! enforces its schema on write), and upstream defaulting is applied by `model` instead
//! (`group: ""` and `kind: Secret` on `clientCertificateRef`).

mod names;
#[cfg(test)]
mod tests;
mod tls;
mod types;

pub use types::{
    Backend, BackendTls, CaSource, ObjectKey, ObjectRef, Protocol, RefKind, SubjectAltName,
    TlsMode, ValidationError,
};

use super::constraints::PORT_RANGE;
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

/// Checks one XBackend and builds the agent model from it.
///
/// `apiVersion`/`kind` are not checked here: the source that dispatched the document did.
pub fn validate(object: &XBackend) -> Result<Backend, Vec<ValidationError>> {
    let mut report = Report::default();
    let key = object_key(object, &mut report);
    let hostname = external_hostname(&object.spec, &mut report);
    let port = port(&object.spec, &mut report);
    let protocol = object.spec.protocol.map_or(Protocol::Tcp, Protocol::from);
    let namespace = object.metadata.namespace.as_str();
    let tls = tls::tls(&object.spec, namespace, hostname.as_deref(), &mut report);
    h2c_is_cleartext(protocol, tls.as_ref().and_then(Option::as_ref), &mut report);
    match (key, hostname, port, tls) {
        (Some(key), Some(hostname), Some(port), Some(tls)) if report.errors.is_empty() => {
            Ok(Backend {
                key,
                hostname,
                port,
                protocol,
                tls,
            })
        }
        _ => Err(report.errors),
    }
}

/// `H2C` is HTTP/2 in cleartext by definition: with TLS originated it would be `HTTP2`
/// (ALPN `h2`). Upstream is silent; refusing beats guessing which one was meant.
fn h2c_is_cleartext(protocol: Protocol, tls: Option<&BackendTls>, report: &mut Report) {
    if protocol == Protocol::H2c && tls.is_some_and(|tls| tls.mode != TlsMode::None) {
        report.fail(
            "spec.protocol",
            "H2C is cleartext HTTP/2 and cannot be combined with spec.tls.mode ServerOnly or \
             ClientAndServer; use protocol HTTP2 for HTTP/2 over TLS",
        );
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

/// `type` and the `externalHostname` union member must agree (upstream CEL rule), and the
/// hostname must be a `PreciseHostname` outside `cluster.local` (upstream pattern and CEL)
/// that is neither an IP literal nor a wildcard (stricter, see [`names::precise_hostname`]).
fn external_hostname(spec: &BackendSpec, report: &mut Report) -> Option<String> {
    match (spec.backend_type, &spec.external_hostname) {
        (BackendType::EndpointSelector, _) => {
            report.fail(
                "spec.type",
                "EndpointSelector is not part of the upstream API (only ExternalHostname is)",
            );
            None
        }
        (BackendType::ExternalHostname, None) => {
            report.fail(
                "spec.externalHostname",
                "required when spec.type is ExternalHostname",
            );
            None
        }
        (BackendType::ExternalHostname, Some(ext)) => {
            let field = || "spec.externalHostname.hostname".to_owned();
            let ok = report.check(field, names::external_hostname(&ext.hostname));
            ok.then(|| ext.hostname.clone())
        }
    }
}

/// `port.port` in 1..=65535 (upstream minimum/maximum); `port.name`, if non-empty, a DNS
/// label of at most 63 characters (upstream maxLength and CEL `format.dns1123Label()`).
fn port(spec: &BackendSpec, report: &mut Report) -> Option<u16> {
    if let Some(name) = spec.port.name.as_deref().filter(|n| !n.is_empty()) {
        report.check(|| "spec.port.name".to_owned(), names::dns_label(name));
    }
    let (min, max) = PORT_RANGE;
    match u16::try_from(spec.port.port) {
        Ok(port) if (min..=max).contains(&i64::from(port)) => Some(port),
        _ => {
            report.fail("spec.port.port", format!("must be {min}..={max}"));
            None
        }
    }
}
