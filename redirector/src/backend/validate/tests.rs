//! Table-driven tests. Every rule in [`rules::RULES`] (one per upstream OpenAPI constraint
//! or CEL rule, plus the stricter ones) has at least one accepted and one rejected case in
//! the tables of `spec_cases` and `tls_cases`, and a rejected case must fail with exactly
//! one error at exactly the expected field. Cases go through parsing as well as
//! validation, as a file does, because required fields, types and enums fail in `model`.

mod rules;
mod shapes;
mod spec_cases;
mod tls_cases;
pub(crate) mod upstream_cases;

use super::*;
use crate::backend::constraints::SchemaVersion;
use crate::backend::directory::Failure;
use crate::backend::model::XBackend;

const META: &str = "{name: echo, namespace: demo}";
const HOST: &str = "externalHostname: {hostname: api.example.com}";
const SYSTEM: &str = "wellKnownCACertificates: System";
const CA_REF: &str = "caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}]";

/// `(rule id, case name, metadata, spec, None if valid else the one field reported)`.
pub(crate) type Case = (
    &'static str,
    &'static str,
    &'static str,
    String,
    Option<&'static str>,
);

/// An XBackend document in YAML flow style, so that a case fits on one line. A `spec`
/// of `-` leaves the spec out.
pub(crate) fn document(meta: &str, spec: &str) -> String {
    let spec = match spec {
        "-" => String::new(),
        spec => format!(", spec: {{{spec}}}"),
    };
    format!(
        "{{apiVersion: gateway.networking.x-k8s.io/v1alpha1, kind: XBackend, metadata: {meta}{spec}}}"
    )
}

/// Parses as the directory source does (so parse errors carry the same field paths).
fn parse_checked(meta: &str, spec: &str) -> Result<XBackend, Failure> {
    let doc = document(meta, spec);
    let value: serde_yaml_ng::Value = match serde_yaml_ng::from_str(&doc) {
        Ok(v) => v,
        Err(e) => panic!("test document is not YAML: {e}\n{doc}"),
    };
    serde_path_to_error::deserialize(value).map_err(Failure::from)
}

fn parse(meta: &str, spec: &str) -> XBackend {
    parse_checked(meta, spec).unwrap_or_else(|e| panic!("does not parse: {e:?}"))
}

/// Parsing then validation; the fields of every error.
fn outcome(meta: &str, spec: &str) -> Result<Validated, Vec<String>> {
    let object = parse_checked(meta, spec).map_err(|f| vec![f.field.unwrap_or_default()])?;
    validate(&object).map_err(|errors| errors.into_iter().map(|e| e.field).collect())
}

/// Parsing then validation; the Backend of a valid object, every error rendered.
fn backend(meta: &str, spec: &str) -> Result<Option<Backend>, Vec<String>> {
    validate(&parse(meta, spec))
        .map(|v| v.backend)
        .map_err(|errors| errors.iter().map(ToString::to_string).collect())
}

/// An ExternalHostname Backend in the newest shape (`port: {number}`).
fn plain(hostname: &str, port: &str) -> String {
    format!(
        "type: ExternalHostname, externalHostname: {{hostname: '{hostname}'}}, port: {{number: {port}}}"
    )
}

/// The same in the v1.6 shape (`port: {port}`).
fn plain16(hostname: &str, port: &str) -> String {
    format!(
        "type: ExternalHostname, externalHostname: {{hostname: '{hostname}'}}, port: {{port: {port}}}"
    )
}

fn with_tls(tls: &str) -> String {
    format!("type: ExternalHostname, {HOST}, port: {{number: 443}}, tls: {{{tls}}}")
}

fn server_only(validation: &str) -> String {
    with_tls(&format!("mode: ServerOnly, validation: {{{validation}}}"))
}

fn mtls(cert: &str) -> String {
    with_tls(&format!(
        "mode: ClientAndServer, clientCertificateRef: {{{cert}}}, validation: {{hostname: a.example.com, {SYSTEM}}}"
    ))
}

fn sans(entries: &str) -> String {
    server_only(&format!(
        "hostname: api.example.com, {SYSTEM}, subjectAltNames: [{entries}]"
    ))
}

fn ca_ref(entry: &str) -> String {
    server_only(&format!(
        "hostname: a.example.com, caCertificateRefs: [{{{entry}}}]"
    ))
}

fn ca_refs(n: usize) -> String {
    let refs: Vec<String> = (0..n)
        .map(|i| format!("{{group: '', kind: ConfigMap, name: ca{i}}}"))
        .collect();
    server_only(&format!(
        "hostname: api.example.com, caCertificateRefs: [{}]",
        refs.join(", ")
    ))
}

fn all_cases() -> Vec<Case> {
    let mut cases = spec_cases::cases();
    cases.extend(tls_cases::cases());
    cases.extend(upstream_cases::cases());
    cases
}

#[test]
fn rules_table() {
    let mut failures = Vec::new();
    for (rule, name, meta, spec, want) in all_cases() {
        let result = outcome(meta, &spec);
        match (want, &result) {
            (None, Ok(_)) => {}
            (Some(field), Err(fields)) if fields.len() == 1 && fields[0] == field => {}
            _ => failures.push(format!("{rule} / {name}: want {want:?}, got {result:?}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_rule_has_a_valid_and_an_invalid_case() {
    let cases = all_cases();
    let mut missing = Vec::new();
    for (rule, source) in rules::RULES {
        let valid = cases.iter().any(|c| c.0 == *rule && c.4.is_none());
        let invalid = cases.iter().any(|c| c.0 == *rule && c.4.is_some());
        if !(valid && invalid) {
            missing.push(format!(
                "{rule} ({source}): valid {valid}, invalid {invalid}"
            ));
        }
    }
    for case in &cases {
        if !rules::RULES.iter().any(|(rule, _)| *rule == case.0) {
            missing.push(format!("case {:?} names unknown rule {:?}", case.1, case.0));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn plain_backend_model() {
    let backend = backend("{name: echo}", &plain("echo.redirector.test", "8080"));
    let want = Backend {
        key: ObjectKey::new("default", "echo"),
        hostname: "echo.redirector.test".into(),
        port: 8080,
        protocol: Protocol::Tcp,
        tls: None,
    };
    assert_eq!(backend, Ok(Some(want)));
}

#[test]
fn mode_none_keeps_tls_block() {
    let backend = backend(META, &with_tls("mode: None")).map(|b| b.and_then(|b| b.tls));
    let want = BackendTls {
        mode: TlsMode::None,
        hostname: "api.example.com".into(),
        ca: CaSource::System,
        subject_alt_names: vec![],
        client_certificate: None,
    };
    assert_eq!(backend, Ok(Some(want)));
}

#[test]
fn mtls_model_resolves_references_in_namespace() {
    let spec = format!(
        "{}, protocol: HTTP2",
        with_tls(
            "mode: ClientAndServer, clientCertificateRef: {name: client}, validation: {hostname: api.example.com, caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}, {group: '', kind: Secret, name: ca2}], subjectAltNames: [{type: URI, uri: 'spiffe://td/x'}, {type: Hostname, hostname: '*.example.com'}]}"
        )
    );
    let backend = backend(META, &spec);
    let object_ref = |kind, name| ObjectRef {
        kind,
        key: ObjectKey::new("demo", name),
    };
    let want = Backend {
        key: ObjectKey::new("demo", "echo"),
        hostname: "api.example.com".into(),
        port: 443,
        protocol: Protocol::Http2,
        tls: Some(BackendTls {
            mode: TlsMode::ClientAndServer,
            hostname: "api.example.com".into(),
            ca: CaSource::Refs(vec![
                object_ref(RefKind::ConfigMap, "ca"),
                object_ref(RefKind::Secret, "ca2"),
            ]),
            subject_alt_names: vec![
                SubjectAltName::Uri("spiffe://td/x".into()),
                SubjectAltName::Hostname("*.example.com".into()),
            ],
            client_certificate: Some(object_ref(RefKind::Secret, "client")),
        }),
    };
    assert_eq!(backend, Ok(Some(want)));
}

#[test]
fn all_errors_are_reported_at_once() {
    let spec = "type: ExternalHostname, externalHostname: {hostname: 10.0.0.1}, port: {number: 0}, tls: {mode: ServerOnly}";
    let errors = validate(&parse("{namespace: demo}", spec))
        .err()
        .unwrap_or_default();
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "metadata.name",
            "spec.externalHostname.hostname",
            "spec.port.number",
            "spec.tls.validation"
        ]
    );
}

#[test]
fn san_with_the_wrong_field_breaks_two_rules() {
    let errors = validate(&parse(META, &sans("{type: URI, hostname: a.example.com}")))
        .err()
        .unwrap_or_default();
    let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let field = "spec.tls.validation.subjectAltNames[0]";
    assert_eq!(
        rendered,
        [
            format!("{field}.hostname: must be unset when type is URI"),
            format!("{field}.uri: required when type is URI"),
        ]
    );
}

#[test]
fn messages_name_the_field_and_the_fix() {
    let cases = [
        (
            server_only(SYSTEM),
            "spec.tls.validation.hostname: required",
        ),
        (
            plain("API.Example.com.", "443"),
            "spec.externalHostname.hostname: \"API.Example.com.\" must be lowercase without a trailing dot; write \"api.example.com\"",
        ),
        (
            plain("DB.svc.cluster.local.", "443"),
            "spec.externalHostname.hostname: must not end with .cluster.local (in-cluster names are not external)",
        ),
        (
            plain("a.example.com", "0"),
            "spec.port.number: must be 1..=65535",
        ),
        (
            plain16("a.example.com", "0"),
            "spec.port.port: must be 1..=65535",
        ),
        (
            mtls("name: c, namespace: other"),
            "spec.tls.clientCertificateRef.namespace: cross-namespace references are not supported (ReferenceGrant is not implemented)",
        ),
    ];
    for (spec, want) in cases {
        let errors = validate(&parse(META, &spec)).err().unwrap_or_default();
        let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(rendered, [want]);
    }
}

#[test]
fn parse_errors_name_the_field() {
    let cases = [
        ("-", "spec", "required"),
        (
            "type: ExternalHostname, port: {number: 1, nam: x}",
            "spec.port.nam",
            "unknown field",
        ),
        (&*with_tls(""), "spec.tls.mode", "required"),
        (
            &*plain("a.example.com", "'443'"),
            "spec.port.number",
            "invalid type",
        ),
        (
            &*server_only("hostname: a.example.com, wellKnownCACertificates: example.com/ca"),
            "spec.tls.validation.wellKnownCACertificates",
            "implementation-specific",
        ),
    ];
    for (spec, field, message) in cases {
        let failure = parse_checked(META, spec).expect_err(spec);
        assert_eq!(failure.field.as_deref(), Some(field), "{spec}");
        assert!(failure.message.contains(message), "{spec}: {failure:?}");
    }
}

#[test]
fn every_protocol_maps() {
    for (yaml, want) in [
        ("TCP", Protocol::Tcp),
        ("HTTP", Protocol::Http),
        ("HTTP2", Protocol::Http2),
        ("HTTP11", Protocol::Http11),
        ("H2C", Protocol::H2c),
        ("MCP", Protocol::Mcp),
        ("GRPC", Protocol::Grpc),
        ("WSS", Protocol::Wss),
    ] {
        let tls = format!("mode: ServerOnly, validation: {{hostname: api.example.com, {SYSTEM}}}");
        let spec = match want {
            Protocol::Http2 | Protocol::Wss => format!("{}, protocol: {yaml}", with_tls(&tls)),
            _ => format!("{}, protocol: {yaml}", plain("a.example.com", "80")),
        };
        let got = backend(META, &spec).map(|b| b.map(|b| b.protocol));
        assert_eq!(got, Ok(Some(want)), "{yaml}");
        assert_eq!(want.as_str(), yaml);
    }
}

#[test]
fn object_key_displays_and_orders() {
    let a = ObjectKey::new("a", "z");
    let b = ObjectKey::new("b", "a");
    assert_eq!(a.to_string(), "a/z");
    assert!(a < b, "namespace sorts first");
}
