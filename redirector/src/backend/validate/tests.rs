//! Table-driven tests: each rule has at least one accepted and one rejected case, and a
//! rejected case must fail with exactly one error at exactly the expected field.

use super::*;
use crate::backend::model::XBackend;

const META: &str = "{name: echo, namespace: demo}";
const HOST: &str = "externalHostname: {hostname: api.example.com}";
const SYSTEM: &str = "wellKnownCACertificates: System";
const CA_REF: &str = "caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}]";

/// An XBackend written in YAML flow style, so that a case fits on one line.
fn parse(meta: &str, spec: &str) -> XBackend {
    let doc = format!(
        "{{apiVersion: gateway.networking.x-k8s.io/v1alpha1, kind: XBackend, metadata: {meta}, spec: {{{spec}}}}}"
    );
    match serde_yaml_ng::from_str(&doc) {
        Ok(x) => x,
        Err(e) => panic!("test document does not parse: {e}\n{doc}"),
    }
}

fn plain(hostname: &str, port: &str) -> String {
    format!(
        "type: ExternalHostname, externalHostname: {{hostname: '{hostname}'}}, port: {{port: {port}}}"
    )
}

fn with_tls(tls: &str) -> String {
    format!("type: ExternalHostname, {HOST}, port: {{port: 443}}, tls: {{{tls}}}")
}

fn server_only(validation: &str) -> String {
    with_tls(&format!("mode: ServerOnly, validation: {{{validation}}}"))
}

fn sans(entries: &str) -> String {
    server_only(&format!(
        "hostname: api.example.com, {SYSTEM}, subjectAltNames: [{entries}]"
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

/// `(case name, metadata, spec, None if valid else the one field that must be reported)`.
/// One row per line: the table is read across, so rustfmt's vertical layout is skipped.
#[rustfmt::skip]
fn cases() -> Vec<(&'static str, &'static str, String, Option<&'static str>)> {
    let v = "spec.tls.validation";
    let cc = "spec.tls.clientCertificateRef";
    let sn = "spec.tls.validation.subjectAltNames";
    vec![
        // metadata
        ("name ok", META, plain("a.example.com", "80"), None),
        ("name missing", "{namespace: demo}", plain("a.example.com", "80"), Some("metadata.name")),
        ("name empty", "{name: ''}", plain("a.example.com", "80"), Some("metadata.name")),
        ("name not dns", "{name: Echo_1}", plain("a.example.com", "80"), Some("metadata.name")),
        ("namespace defaulted", "{name: echo}", plain("a.example.com", "80"), None),
        ("namespace not label", "{name: echo, namespace: a.b}", plain("a.example.com", "80"), Some("metadata.namespace")),
        // type / externalHostname union
        ("type without member", META, "type: ExternalHostname, port: {port: 80}".into(), Some("spec.externalHostname")),
        ("endpoint selector", META, "type: EndpointSelector, port: {port: 80}".into(), Some("spec.type")),
        // port
        ("port 1", META, plain("a.example.com", "1"), None),
        ("port 65535", META, plain("a.example.com", "65535"), None),
        ("port 0", META, plain("a.example.com", "0"), Some("spec.port.port")),
        ("port 65536", META, plain("a.example.com", "65536"), Some("spec.port.port")),
        ("port negative", META, plain("a.example.com", "-1"), Some("spec.port.port")),
        ("port name ok", META, format!("type: ExternalHostname, {HOST}, port: {{name: https, port: 443}}"), None),
        ("port name empty", META, format!("type: ExternalHostname, {HOST}, port: {{name: '', port: 443}}"), None),
        ("port name bad", META, format!("type: ExternalHostname, {HOST}, port: {{name: Https_1, port: 443}}"), Some("spec.port.name")),
        // hostname
        ("hostname mixed case and dot", META, plain("API.Example.COM.", "443"), None),
        ("hostname single label", META, plain("localhost-svc", "443"), None),
        ("hostname ipv4", META, plain("10.0.0.1", "443"), Some("spec.externalHostname.hostname")),
        ("hostname ipv6", META, plain("::1", "443"), Some("spec.externalHostname.hostname")),
        ("hostname bracketed ipv6", META, plain("[fe80::1]", "443"), Some("spec.externalHostname.hostname")),
        ("hostname short ipv4", META, plain("127.1", "443"), Some("spec.externalHostname.hostname")),
        ("hostname hex ipv4", META, plain("0x7f.0x1", "443"), Some("spec.externalHostname.hostname")),
        ("hostname wildcard", META, plain("*.example.com", "443"), Some("spec.externalHostname.hostname")),
        ("hostname cluster.local", META, plain("db.ns.svc.cluster.local", "443"), Some("spec.externalHostname.hostname")),
        ("hostname cluster.local dot", META, plain("db.ns.svc.cluster.local.", "443"), Some("spec.externalHostname.hostname")),
        ("hostname lookalike", META, plain("notcluster.local", "443"), None),
        ("hostname empty label", META, plain("a..example.com", "443"), Some("spec.externalHostname.hostname")),
        ("hostname two dots", META, plain("example.com..", "443"), Some("spec.externalHostname.hostname")),
        ("hostname leading dash", META, plain("-a.example.com", "443"), Some("spec.externalHostname.hostname")),
        ("hostname underscore", META, plain("a_b.example.com", "443"), Some("spec.externalHostname.hostname")),
        ("hostname long label", META, plain(&format!("{}.com", "a".repeat(64)), "443"), Some("spec.externalHostname.hostname")),
        ("hostname too long", META, plain(&vec!["a".repeat(60); 5].join("."), "443"), Some("spec.externalHostname.hostname")),
        ("hostname empty", META, plain("", "443"), Some("spec.externalHostname.hostname")),
        // tls mode and clientCertificateRef
        ("mode None bare", META, with_tls("mode: None"), None),
        ("mode None with cert", META, with_tls("mode: None, clientCertificateRef: {name: c}"), Some(cc)),
        ("server only with cert", META, with_tls(&format!("mode: ServerOnly, clientCertificateRef: {{name: c}}, validation: {{hostname: a.example.com, {SYSTEM}}}")), Some(cc)),
        ("mtls ok", META, with_tls(&format!("mode: ClientAndServer, clientCertificateRef: {{name: c}}, validation: {{hostname: a.example.com, {SYSTEM}}}")), None),
        ("mtls same namespace", META, with_tls(&format!("mode: ClientAndServer, clientCertificateRef: {{name: c, namespace: demo}}, validation: {{hostname: a.example.com, {SYSTEM}}}")), None),
        ("mtls without cert", META, with_tls(&format!("mode: ClientAndServer, validation: {{hostname: a.example.com, {SYSTEM}}}")), Some(cc)),
        ("mtls other namespace", META, with_tls(&format!("mode: ClientAndServer, clientCertificateRef: {{name: c, namespace: other}}, validation: {{hostname: a.example.com, {SYSTEM}}}")), Some("spec.tls.clientCertificateRef.namespace")),
        ("mtls configmap cert", META, with_tls(&format!("mode: ClientAndServer, clientCertificateRef: {{kind: ConfigMap, name: c}}, validation: {{hostname: a.example.com, {SYSTEM}}}")), Some("spec.tls.clientCertificateRef.kind")),
        // validation presence and CA source
        ("server only without validation", META, with_tls("mode: ServerOnly"), Some(v)),
        ("mtls without validation", META, with_tls("mode: ClientAndServer, clientCertificateRef: {name: c}"), Some(v)),
        ("system roots", META, server_only(&format!("hostname: api.example.com, {SYSTEM}")), None),
        ("ca ref", META, server_only(&format!("hostname: api.example.com, {CA_REF}")), None),
        ("both ca sources", META, server_only(&format!("hostname: api.example.com, {SYSTEM}, {CA_REF}")), Some(v)),
        ("no ca source", META, server_only("hostname: api.example.com"), Some(v)),
        ("empty ca refs", META, server_only("hostname: api.example.com, caCertificateRefs: []"), Some(v)),
        ("mode None validation checked", META, with_tls("mode: None, validation: {hostname: api.example.com}"), Some(v)),
        ("8 ca refs", META, ca_refs(8), None),
        ("9 ca refs", META, ca_refs(9), Some("spec.tls.validation.caCertificateRefs")),
        ("ca ref secret", META, server_only("hostname: a.example.com, caCertificateRefs: [{group: '', kind: Secret, name: ca}]"), None),
        ("ca ref kind", META, server_only("hostname: a.example.com, caCertificateRefs: [{group: '', kind: Service, name: ca}]"), Some("spec.tls.validation.caCertificateRefs[0].kind")),
        ("ca ref group", META, server_only("hostname: a.example.com, caCertificateRefs: [{group: example.com, kind: ConfigMap, name: ca}]"), Some("spec.tls.validation.caCertificateRefs[0].group")),
        // validation.hostname
        ("sni missing", META, server_only(SYSTEM), Some("spec.tls.validation.hostname")),
        ("sni empty", META, server_only(&format!("hostname: '', {SYSTEM}")), Some("spec.tls.validation.hostname")),
        ("sni ip", META, server_only(&format!("hostname: 192.0.2.1, {SYSTEM}")), Some("spec.tls.validation.hostname")),
        ("sni wildcard", META, server_only(&format!("hostname: '*.example.com', {SYSTEM}")), Some("spec.tls.validation.hostname")),
        // subjectAltNames
        ("san hostname", META, sans("{type: Hostname, hostname: api.example.com}"), None),
        ("san wildcard", META, sans("{type: Hostname, hostname: '*.example.com'}"), None),
        ("san uri", META, sans("{type: URI, uri: 'spiffe://td.example/ns/a/sa/b'}"), None),
        ("5 sans", META, sans(&["{type: Hostname, hostname: a.example.com}"; 5].join(", ")), None),
        ("6 sans", META, sans(&["{type: Hostname, hostname: a.example.com}"; 6].join(", ")), Some(sn)),
        ("san hostname missing", META, sans("{type: Hostname, uri: 'spiffe://td/x'}"), Some("spec.tls.validation.subjectAltNames[0].hostname")),
        ("san hostname plus uri", META, sans("{type: Hostname, hostname: a.example.com, uri: 'spiffe://td/x'}"), Some("spec.tls.validation.subjectAltNames[0].uri")),
        ("san uri missing", META, sans("{type: URI, hostname: a.example.com}"), Some("spec.tls.validation.subjectAltNames[0].uri")),
        ("san uri plus hostname", META, sans("{type: URI, hostname: a.example.com, uri: 'spiffe://td/x'}"), Some("spec.tls.validation.subjectAltNames[0].hostname")),
        ("san uri no scheme", META, sans("{type: URI, uri: 'td.example/path'}"), Some("spec.tls.validation.subjectAltNames[0].uri")),
        ("san uri no authority", META, sans("{type: URI, uri: 'mailto:a@example.com'}"), Some("spec.tls.validation.subjectAltNames[0].uri")),
        ("san hostname inner wildcard", META, sans("{type: Hostname, hostname: 'a.*.example.com'}"), Some("spec.tls.validation.subjectAltNames[0].hostname")),
        ("san second entry", META, sans("{type: Hostname, hostname: a.example.com}, {type: URI}"), Some("spec.tls.validation.subjectAltNames[1].uri")),
    ]
}

#[test]
fn rules_table() {
    let mut failures = Vec::new();
    for (name, meta, spec, want) in cases() {
        let result = validate(&parse(meta, &spec));
        match (want, &result) {
            (None, Ok(_)) => {}
            (Some(field), Err(errors)) if errors.len() == 1 && errors[0].field == field => {}
            _ => failures.push(format!("{name}: want {want:?}, got {result:?}")),
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
fn plain_backend_model() {
    let backend = validate(&parse(
        "{name: echo}",
        &plain("Echo.Redirector.Test.", "8080"),
    ));
    let want = Backend {
        key: ObjectKey::new("default", "echo"),
        hostname: "echo.redirector.test".into(),
        port: 8080,
        protocol: Protocol::Tcp,
        tls: None,
    };
    assert_eq!(backend, Ok(want));
}

#[test]
fn mode_none_keeps_tls_block() {
    let backend = validate(&parse(META, &with_tls("mode: None"))).map(|b| b.tls);
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
        with_tls(&format!(
            "mode: ClientAndServer, clientCertificateRef: {{name: client}}, validation: {{hostname: API.example.com, {CA_REF}, subjectAltNames: [{{type: URI, uri: 'spiffe://td/x'}}, {{type: Hostname, hostname: '*.Example.com'}}]}}"
        ))
    );
    let backend = validate(&parse(META, &spec));
    let want = Backend {
        key: ObjectKey::new("demo", "echo"),
        hostname: "api.example.com".into(),
        port: 443,
        protocol: Protocol::Http2,
        tls: Some(BackendTls {
            mode: TlsMode::ClientAndServer,
            hostname: "api.example.com".into(),
            ca: CaSource::Refs(vec![ObjectRef {
                kind: RefKind::ConfigMap,
                key: ObjectKey::new("demo", "ca"),
            }]),
            subject_alt_names: vec![
                SubjectAltName::Uri("spiffe://td/x".into()),
                SubjectAltName::Hostname("*.example.com".into()),
            ],
            client_certificate: Some(ObjectRef {
                kind: RefKind::Secret,
                key: ObjectKey::new("demo", "client"),
            }),
        }),
    };
    assert_eq!(backend, Ok(want));
}

#[test]
fn all_errors_are_reported_at_once() {
    let spec = "type: ExternalHostname, externalHostname: {hostname: 10.0.0.1}, port: {port: 0}, tls: {mode: ServerOnly}";
    let errors = validate(&parse("{namespace: demo}", spec))
        .err()
        .unwrap_or_default();
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "metadata.name",
            "spec.externalHostname.hostname",
            "spec.port.port",
            "spec.tls.validation"
        ]
    );
}

#[test]
fn error_display_is_field_colon_message() {
    let errors = validate(&parse(META, &server_only(SYSTEM)))
        .err()
        .unwrap_or_default();
    let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(rendered, ["spec.tls.validation.hostname: required"]);
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
    ] {
        let spec = format!("{}, protocol: {yaml}", plain("a.example.com", "80"));
        let got = validate(&parse(META, &spec)).map(|b| b.protocol);
        assert_eq!(got, Ok(want), "{yaml}");
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
