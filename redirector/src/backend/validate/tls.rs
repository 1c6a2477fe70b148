//! The rules on `spec.tls`: the mode and client certificate, the CA source, the SNI
//! hostname and the subject alternative names. The module doc of `validate` lists them
//! with their upstream source.

use super::Report;
use super::names;
use super::types::{BackendTls, CaSource, ObjectKey, ObjectRef, RefKind, SubjectAltName, TlsMode};
use crate::backend::constraints::{MAX_CA_CERTIFICATE_REFS, MAX_SUBJECT_ALT_NAMES};
use crate::backend::model::{
    BackendSpec, BackendTlsPolicyValidation, LocalObjectReference, SecretObjectReference,
    SubjectAltNameType, WellKnownCaCertificates,
};

/// The `tls` block. Returns `Some(None)` when absent, `None` when invalid.
pub(super) fn tls(
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
        // Upstream CEL rules on `validation` hold whatever the mode.
        Some(v) => validation(v, namespace, report),
        None if mode == TlsMode::None => None,
        // Stricter than upstream: TLS without anything to verify against is refused.
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

/// `clientCertificateRef` is set if and only if mode is `ClientAndServer` (upstream CEL),
/// with upstream's `Group`, `Kind` and `Namespace` formats.
///
/// Stricter than upstream: only a core `Secret` is supported, its name must be a valid
/// object name, and a namespace other than the Backend's is rejected, because honouring
/// it would need ReferenceGrant checks the agent does not implement, and without them any
/// namespace could borrow another's key.
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
    let at = |part: &'static str| move || format!("{field}.{part}");
    let mut ok = reference_kind(
        &reference.group,
        &reference.kind,
        &["Secret"],
        field,
        report,
    );
    ok &= report.check(at("name"), names::dns_subdomain(&reference.name));
    if let Some(ns) = reference.namespace.as_deref() {
        let valid = report.check(at("namespace"), names::dns_label(ns));
        if valid && ns != namespace {
            report.fail(
                at("namespace")(),
                "cross-namespace references are not supported (ReferenceGrant is not implemented)",
            );
        }
        ok &= valid && ns == namespace;
    }
    ok.then(|| ObjectRef {
        kind: RefKind::Secret,
        key: ObjectKey::new(namespace, reference.name.clone()),
    })
}

/// `group` and `kind` of a reference: first upstream's formats, then (stricter) the core
/// group and one of the kinds the agent can read. `true` if both pass.
fn reference_kind(
    group: &str,
    kind: &str,
    supported: &[&str],
    field: &str,
    report: &mut Report,
) -> bool {
    let group_ok = report.check(|| format!("{field}.group"), names::group(group));
    if group_ok && !group.is_empty() {
        report.fail(format!("{field}.group"), "must be \"\" (core API group)");
    }
    let kind_ok = report.check(|| format!("{field}.kind"), names::kind(kind));
    if kind_ok && !supported.contains(&kind) {
        report.fail(
            format!("{field}.kind"),
            format!("{kind:?} is not supported; use {}", supported.join(" or ")),
        );
    }
    group_ok && group.is_empty() && kind_ok && supported.contains(&kind)
}

/// `validation`: exactly one CA source, a precise SNI hostname, well-formed SANs.
fn validation(
    v: &BackendTlsPolicyValidation,
    namespace: &str,
    report: &mut Report,
) -> Option<(String, CaSource, Vec<SubjectAltName>)> {
    let before = report.errors.len();
    let ca = ca_source(v, namespace, report);
    let hostname = v.hostname.as_deref().unwrap_or_default();
    let field = || "spec.tls.validation.hostname".to_owned();
    let hostname_ok = report.check(field, names::precise_hostname(hostname));
    let sans = subject_alt_names(v, report);
    if report.errors.len() != before || !hostname_ok {
        return None;
    }
    Some((hostname.to_owned(), ca?, sans))
}

/// Exactly one of `caCertificateRefs` (non-empty) and `wellKnownCACertificates` (the two
/// upstream CEL rules on `validation`).
fn ca_source(
    v: &BackendTlsPolicyValidation,
    namespace: &str,
    report: &mut Report,
) -> Option<CaSource> {
    let field = "spec.tls.validation";
    match (
        v.ca_certificate_refs.is_empty(),
        v.well_known_ca_certificates,
    ) {
        (false, Some(_)) => {
            report.fail(
                field,
                "must not set both caCertificateRefs and wellKnownCACertificates",
            );
            // Still checked, so that every problem is reported in one pass.
            ca_refs(&v.ca_certificate_refs, namespace, report);
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
        (false, None) => ca_refs(&v.ca_certificate_refs, namespace, report).map(CaSource::Refs),
    }
}

/// At most 8 references (upstream `maxItems`), each with upstream's `Group` and `Kind`
/// formats. Stricter: each must be a core ConfigMap or Secret with a valid object name.
/// A `LocalObjectReference` has no namespace: it always means the Backend's own.
fn ca_refs(
    refs: &[LocalObjectReference],
    namespace: &str,
    report: &mut Report,
) -> Option<Vec<ObjectRef>> {
    let field = "spec.tls.validation.caCertificateRefs";
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
    let mut out = Vec::with_capacity(refs.len());
    let mut ok = true;
    for (i, r) in refs.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let supported = ["ConfigMap", "Secret"];
        let kind_ok = reference_kind(&r.group, &r.kind, &supported, &at, report);
        let name_ok = report.check(|| format!("{at}.name"), names::dns_subdomain(&r.name));
        ok &= kind_ok && name_ok;
        let kind = if r.kind == "Secret" {
            RefKind::Secret
        } else {
            RefKind::ConfigMap
        };
        out.push(ObjectRef {
            kind,
            key: ObjectKey::new(namespace, r.name.clone()),
        });
    }
    ok.then_some(out)
}

/// At most 5 entries (upstream `maxItems`). Each carries exactly the field its `type`
/// names, non-empty (upstream's four CEL rules and `minLength: 1`), in upstream's format.
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
        let at = |part: &str| format!("{field}[{i}].{part}");
        let (wanted, other, value, stray) = match san.san_type {
            SubjectAltNameType::Hostname => ("hostname", "uri", &san.hostname, &san.uri),
            SubjectAltNameType::Uri => ("uri", "hostname", &san.uri, &san.hostname),
        };
        let type_name = match san.san_type {
            SubjectAltNameType::Hostname => "Hostname",
            SubjectAltNameType::Uri => "URI",
        };
        // `minLength: 1` holds for either field whenever it is present.
        let stray_ok = match stray.as_deref() {
            None => true,
            Some("") => report.check(|| at(other), Err("must not be empty".to_owned())),
            Some(_) => report.check(
                || at(other),
                Err(format!("must be unset when type is {type_name}")),
            ),
        };
        let Some(value) = value.as_deref() else {
            report.fail(at(wanted), format!("required when type is {type_name}"));
            continue;
        };
        let checked = match san.san_type {
            SubjectAltNameType::Hostname => names::san_hostname(value),
            SubjectAltNameType::Uri => names::san_uri(value),
        };
        if report.check(|| at(wanted), checked) && stray_ok {
            out.push(match san.san_type {
                SubjectAltNameType::Hostname => SubjectAltName::Hostname(value.to_owned()),
                SubjectAltNameType::Uri => SubjectAltName::Uri(value.to_owned()),
            });
        }
    }
    out
}
