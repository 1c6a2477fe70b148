//! Turns a parsed [`XBackend`] into the agent's [`Backend`], or into every reason it is
//! unusable.
//!
//! Parsing (`model`) only checks shape; this module owns meaning. All errors of an object
//! are collected rather than stopping at the first, so `redirector check` shows an
//! operator everything to fix in one pass. Each rule is a small function that reports
//! into a [`Report`] with the field path it concerns, which keeps the rule set a flat,
//! table-like list that can grow to full upstream parity (issue #5) without restructuring.
//!
//! Where this is stricter than the upstream CRD it says so at the rule.

mod names;
#[cfg(test)]
mod tests;
mod types;

pub use types::{
    Backend, BackendTls, CaSource, ObjectKey, ObjectRef, Protocol, RefKind, SubjectAltName,
    TlsMode, ValidationError,
};

use super::model::{
    BackendSpec, BackendTlsPolicyValidation, BackendType, SecretObjectReference,
    SubjectAltNameType, WellKnownCaCertificates, XBackend,
};

/// Upstream `MaxItems` on `validation.caCertificateRefs`.
pub const MAX_CA_CERTIFICATE_REFS: usize = 8;
/// Upstream `MaxItems` on `validation.subjectAltNames`.
pub const MAX_SUBJECT_ALT_NAMES: usize = 5;

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
    let tls = tls(&object.spec, namespace, hostname.as_deref(), &mut report);
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

/// `metadata.name` is required (a file may omit it; the API server never does) and both
/// parts must be what Kubernetes itself would accept, so keys look the same in both modes.
fn object_key(object: &XBackend, report: &mut Report) -> Option<ObjectKey> {
    let namespace = &object.metadata.namespace;
    let ns_ok = match names::dns_label(namespace) {
        Ok(()) => true,
        Err(e) => {
            report.fail("metadata.namespace", e);
            false
        }
    };
    let name = match object.metadata.name.as_deref() {
        None | Some("") => {
            report.fail("metadata.name", "required");
            return None;
        }
        Some(name) => name,
    };
    if let Err(e) = names::dns_subdomain(name) {
        report.fail("metadata.name", e);
        return None;
    }
    ns_ok.then(|| ObjectKey::new(namespace.clone(), name))
}

/// `type` and the `externalHostname` union member must agree (upstream CEL rule), and the
/// hostname must be a precise, external DNS name.
fn external_hostname(spec: &BackendSpec, report: &mut Report) -> Option<String> {
    match (spec.backend_type, &spec.external_hostname) {
        (BackendType::EndpointSelector, _) => {
            report.fail(
                "spec.type",
                "EndpointSelector is provisional upstream and not supported; use ExternalHostname",
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
            let field = "spec.externalHostname.hostname";
            match names::precise_hostname(&ext.hostname) {
                Ok(name) if names::is_cluster_local(&name) => {
                    report.fail(
                        field,
                        "must not end with .cluster.local (in-cluster names are not external)",
                    );
                    None
                }
                Ok(name) => Some(name),
                Err(e) => {
                    report.fail(field, e);
                    None
                }
            }
        }
    }
}

/// `port.port` in 1..=65535; `port.name`, if non-empty, a DNS label (upstream rule).
fn port(spec: &BackendSpec, report: &mut Report) -> Option<u16> {
    if let Some(name) = spec.port.name.as_deref().filter(|n| !n.is_empty())
        && let Err(e) = names::dns_label(name)
    {
        report.fail("spec.port.name", e);
    }
    match u16::try_from(spec.port.port) {
        Ok(port) if port != 0 => Some(port),
        _ => {
            report.fail("spec.port.port", "must be 1..=65535");
            None
        }
    }
}

/// The `tls` block. Returns `Some(None)` when absent, `None` when invalid.
fn tls(
    spec: &BackendSpec,
    namespace: &str,
    backend_hostname: Option<&str>,
    report: &mut Report,
) -> Option<Option<BackendTls>> {
    let Some(tls) = &spec.tls else {
        return Some(None);
    };
    let before = report.errors.len();
    let mode = TlsMode::from(tls.mode);
    let client_certificate =
        client_certificate(mode, tls.client_certificate_ref.as_ref(), namespace, report);
    let validated = match &tls.validation {
        Some(v) => validation(v, namespace, report),
        None if mode == TlsMode::None => None,
        None => {
            report.fail(
                "spec.tls.validation",
                format!("required when spec.tls.mode is {mode}"),
            );
            None
        }
    };
    if report.errors.len() != before {
        return None;
    }
    let (hostname, ca, subject_alt_names) = match validated {
        Some(v) => v,
        // Only reachable with mode None: nothing will use these, but the struct stays total.
        None => (backend_hostname?.to_owned(), CaSource::System, Vec::new()),
    };
    Some(Some(BackendTls {
        mode,
        hostname,
        ca,
        subject_alt_names,
        client_certificate,
    }))
}

/// `clientCertificateRef` is set if and only if mode is `ClientAndServer` (upstream CEL).
///
/// Stricter than upstream: only a core `Secret` is supported, and a namespace other than
/// the Backend's is rejected, because honouring it would need ReferenceGrant checks the
/// agent does not implement, and without them any namespace could borrow another's key.
fn client_certificate(
    mode: TlsMode,
    reference: Option<&SecretObjectReference>,
    namespace: &str,
    report: &mut Report,
) -> Option<ObjectRef> {
    let field = "spec.tls.clientCertificateRef";
    let reference = match (mode, reference) {
        (TlsMode::ClientAndServer, Some(r)) => r,
        (TlsMode::ClientAndServer, None) => {
            report.fail(field, "required when spec.tls.mode is ClientAndServer");
            return None;
        }
        (_, Some(_)) => {
            report.fail(
                field,
                "must be unset unless spec.tls.mode is ClientAndServer",
            );
            return None;
        }
        (_, None) => return None,
    };
    let before = report.errors.len();
    if !reference.group.is_empty() {
        report.fail(format!("{field}.group"), "must be \"\" (core API group)");
    }
    if reference.kind != "Secret" {
        report.fail(format!("{field}.kind"), "must be Secret");
    }
    if let Err(e) = names::dns_subdomain(&reference.name) {
        report.fail(format!("{field}.name"), e);
    }
    if reference
        .namespace
        .as_deref()
        .is_some_and(|ns| ns != namespace)
    {
        report.fail(
            format!("{field}.namespace"),
            "cross-namespace references are not supported (ReferenceGrant is not implemented)",
        );
    }
    (report.errors.len() == before).then(|| ObjectRef {
        kind: RefKind::Secret,
        key: ObjectKey::new(namespace, reference.name.clone()),
    })
}

/// `validation`: exactly one CA source, a precise SNI hostname, well-formed SANs.
fn validation(
    v: &BackendTlsPolicyValidation,
    namespace: &str,
    report: &mut Report,
) -> Option<(String, CaSource, Vec<SubjectAltName>)> {
    let field = "spec.tls.validation";
    let before = report.errors.len();
    let ca = match (
        v.ca_certificate_refs.is_empty(),
        v.well_known_ca_certificates,
    ) {
        (false, Some(_)) => {
            report.fail(
                field,
                "must not set both caCertificateRefs and wellKnownCACertificates",
            );
            None
        }
        (true, None) => {
            report.fail(
                field,
                "must set one of caCertificateRefs or wellKnownCACertificates",
            );
            None
        }
        (true, Some(WellKnownCaCertificates::System)) => Some(CaSource::System),
        (false, None) => ca_refs(v, namespace, report).map(CaSource::Refs),
    };
    let hostname = match v.hostname.as_deref() {
        None | Some("") => {
            report.fail(format!("{field}.hostname"), "required");
            None
        }
        Some(raw) => names::precise_hostname(raw)
            .map_err(|e| report.fail(format!("{field}.hostname"), e))
            .ok(),
    };
    let sans = subject_alt_names(v, report);
    if report.errors.len() != before {
        return None;
    }
    Some((hostname?, ca?, sans))
}

/// At most 8 references, each to a core ConfigMap or Secret. A `LocalObjectReference` has
/// no namespace: it always means the Backend's own.
fn ca_refs(
    v: &BackendTlsPolicyValidation,
    namespace: &str,
    report: &mut Report,
) -> Option<Vec<ObjectRef>> {
    let field = "spec.tls.validation.caCertificateRefs";
    let refs = &v.ca_certificate_refs;
    if refs.len() > MAX_CA_CERTIFICATE_REFS {
        report.fail(
            field,
            format!(
                "at most {MAX_CA_CERTIFICATE_REFS} entries (got {})",
                refs.len()
            ),
        );
        return None;
    }
    let before = report.errors.len();
    let mut out = Vec::with_capacity(refs.len());
    for (i, r) in refs.iter().enumerate() {
        if !r.group.is_empty() {
            report.fail(
                format!("{field}[{i}].group"),
                "must be \"\" (core API group)",
            );
        }
        let kind = match r.kind.as_str() {
            "ConfigMap" => Some(RefKind::ConfigMap),
            "Secret" => Some(RefKind::Secret),
            other => {
                report.fail(
                    format!("{field}[{i}].kind"),
                    format!("{other:?} is not supported; use ConfigMap or Secret"),
                );
                None
            }
        };
        if let Err(e) = names::dns_subdomain(&r.name) {
            report.fail(format!("{field}[{i}].name"), e);
        }
        if let Some(kind) = kind {
            out.push(ObjectRef {
                kind,
                key: ObjectKey::new(namespace, r.name.clone()),
            });
        }
    }
    (report.errors.len() == before).then_some(out)
}

/// At most 5 entries, each carrying exactly the field its `type` names (upstream CEL).
fn subject_alt_names(v: &BackendTlsPolicyValidation, report: &mut Report) -> Vec<SubjectAltName> {
    let field = "spec.tls.validation.subjectAltNames";
    let sans = &v.subject_alt_names;
    if sans.len() > MAX_SUBJECT_ALT_NAMES {
        report.fail(
            field,
            format!(
                "at most {MAX_SUBJECT_ALT_NAMES} entries (got {})",
                sans.len()
            ),
        );
        return Vec::new();
    }
    let mut out = Vec::with_capacity(sans.len());
    for (i, san) in sans.iter().enumerate() {
        let hostname = san.hostname.as_deref().filter(|s| !s.is_empty());
        let uri = san.uri.as_deref().filter(|s| !s.is_empty());
        match (san.san_type, hostname, uri) {
            (SubjectAltNameType::Hostname, Some(h), None) => match names::san_hostname(h) {
                Ok(h) => out.push(SubjectAltName::Hostname(h)),
                Err(e) => report.fail(format!("{field}[{i}].hostname"), e),
            },
            (SubjectAltNameType::Uri, None, Some(u)) => match names::san_uri(u) {
                Ok(()) => out.push(SubjectAltName::Uri(u.to_owned())),
                Err(e) => report.fail(format!("{field}[{i}].uri"), e),
            },
            (SubjectAltNameType::Hostname, None, _) => {
                report.fail(
                    format!("{field}[{i}].hostname"),
                    "required when type is Hostname",
                );
            }
            (SubjectAltNameType::Uri, _, None) => {
                report.fail(format!("{field}[{i}].uri"), "required when type is URI");
            }
            (SubjectAltNameType::Hostname, Some(_), Some(_)) => {
                report.fail(
                    format!("{field}[{i}].uri"),
                    "must be unset when type is Hostname",
                );
            }
            (SubjectAltNameType::Uri, Some(_), Some(_)) => {
                report.fail(
                    format!("{field}[{i}].hostname"),
                    "must be unset when type is URI",
                );
            }
        }
    }
    out
}
