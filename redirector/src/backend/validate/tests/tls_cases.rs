//! Cases for `spec.tls`.

use super::{CA_REF, Case, META, SYSTEM, ca_ref, ca_refs, mtls, sans, server_only, with_tls};

/// The field of the first `caCertificateRefs` entry.
macro_rules! r0 {
    ($part:literal) => {
        Some(concat!("spec.tls.validation.caCertificateRefs[0].", $part))
    };
}

/// The field of the first `subjectAltNames` entry.
macro_rules! s0 {
    ($part:literal) => {
        Some(concat!("spec.tls.validation.subjectAltNames[0].", $part))
    };
}

/// One row per line: the table is read across, so rustfmt's vertical layout is skipped.
#[rustfmt::skip]
pub fn cases() -> Vec<Case> {
    let v = Some("spec.tls.validation");
    let cc = Some("spec.tls.clientCertificateRef");
    let vh = Some("spec.tls.validation.hostname");
    let sni = |hostname: &str| server_only(&format!("hostname: '{hostname}', {SYSTEM}"));
    let san_host = |h: &str| sans(&format!("{{type: Hostname, hostname: '{h}'}}"));
    let san_uri = |u: &str| sans(&format!("{{type: URI, uri: '{u}'}}"));
    vec![
        // mode
        ("tls.mode", "None", META, with_tls("mode: None"), None),
        ("tls.mode", "ServerOnly", META, sni("a.example.com"), None),
        ("tls.mode", "missing", META, with_tls(""), Some("spec.tls.mode")),
        ("tls.mode", "unknown", META, with_tls("mode: Strict"), Some("spec.tls.mode")),
        ("tls.mode", "lowercase", META, with_tls("mode: none"), Some("spec.tls.mode")),
        // clientCertificateRef set iff ClientAndServer
        ("tls.client-cert", "mtls with cert", META, mtls("name: c"), None),
        ("tls.client-cert", "None without cert", META, with_tls("mode: None"), None),
        ("tls.client-cert", "None with cert", META, with_tls("mode: None, clientCertificateRef: {name: c}"), cc),
        ("tls.client-cert", "ServerOnly with cert", META, with_tls(&format!("mode: ServerOnly, clientCertificateRef: {{name: c}}, validation: {{hostname: a.example.com, {SYSTEM}}}")), cc),
        ("tls.client-cert", "mtls without cert", META, with_tls(&format!("mode: ClientAndServer, validation: {{hostname: a.example.com, {SYSTEM}}}")), cc),
        // the reference itself
        ("tls.client-cert.ref", "explicit defaults", META, mtls("group: '', kind: Secret, name: c"), None),
        ("tls.client-cert.ref", "same namespace", META, mtls("name: c, namespace: demo"), None),
        ("tls.client-cert.ref", "name missing", META, mtls("kind: Secret"), Some("spec.tls.clientCertificateRef.name")),
        ("tls.client-cert.ref", "name empty", META, mtls("name: ''"), Some("spec.tls.clientCertificateRef.name")),
        ("tls.client-cert.ref", "name not an object name", META, mtls("name: My_Cert"), Some("spec.tls.clientCertificateRef.name")),
        ("tls.client-cert.ref", "group bad format", META, mtls("group: Not_A_Group, name: c"), Some("spec.tls.clientCertificateRef.group")),
        ("tls.client-cert.ref", "group not core", META, mtls("group: example.com, name: c"), Some("spec.tls.clientCertificateRef.group")),
        ("tls.client-cert.ref", "kind bad format", META, mtls("kind: 9Secret, name: c"), Some("spec.tls.clientCertificateRef.kind")),
        ("tls.client-cert.ref", "kind empty", META, mtls("kind: '', name: c"), Some("spec.tls.clientCertificateRef.kind")),
        ("tls.client-cert.ref", "kind not Secret", META, mtls("kind: ConfigMap, name: c"), Some("spec.tls.clientCertificateRef.kind")),
        ("tls.client-cert.ref", "namespace bad format", META, mtls("name: c, namespace: Demo"), Some("spec.tls.clientCertificateRef.namespace")),
        ("tls.client-cert.ref", "namespace empty", META, mtls("name: c, namespace: ''"), Some("spec.tls.clientCertificateRef.namespace")),
        ("tls.client-cert.ref", "other namespace", META, mtls("name: c, namespace: other"), Some("spec.tls.clientCertificateRef.namespace")),
        // validation presence
        ("tls.validation.required", "None without validation", META, with_tls("mode: None"), None),
        ("tls.validation.required", "ServerOnly without validation", META, with_tls("mode: ServerOnly"), v),
        ("tls.validation.required", "mtls without validation", META, with_tls("mode: ClientAndServer, clientCertificateRef: {name: c}"), v),
        // validation.hostname
        ("validation.hostname", "set", META, sni("api.example.com"), None),
        ("validation.hostname", "other than the backend", META, sni("sni.example.net"), None),
        ("validation.hostname", "missing", META, server_only(SYSTEM), vh),
        ("validation.hostname", "empty", META, sni(""), vh),
        ("validation.hostname", "ip", META, sni("192.0.2.1"), vh),
        ("validation.hostname", "wildcard", META, sni("*.example.com"), vh),
        ("validation.hostname", "uppercase", META, sni("Api.example.com"), vh),
        ("validation.hostname", "too long", META, sni(&vec!["a".repeat(60); 5].join(".")), vh),
        // exactly one CA source
        ("validation.ca-source", "system roots", META, server_only(&format!("hostname: api.example.com, {SYSTEM}")), None),
        ("validation.ca-source", "ca ref", META, server_only(&format!("hostname: api.example.com, {CA_REF}")), None),
        ("validation.ca-source", "both", META, server_only(&format!("hostname: api.example.com, {SYSTEM}, {CA_REF}")), v),
        ("validation.ca-source", "neither", META, server_only("hostname: api.example.com"), v),
        ("validation.ca-source", "empty refs only", META, server_only("hostname: api.example.com, caCertificateRefs: []"), v),
        ("validation.ca-source", "empty refs and system", META, server_only(&format!("hostname: api.example.com, caCertificateRefs: [], {SYSTEM}")), None),
        ("validation.ca-source", "checked with mode None", META, with_tls("mode: None, validation: {hostname: api.example.com}"), v),
        // caCertificateRefs
        ("ca-refs.max", "8 refs", META, ca_refs(8), None),
        ("ca-refs.max", "9 refs", META, ca_refs(9), Some("spec.tls.validation.caCertificateRefs")),
        ("ca-refs.item", "ConfigMap", META, ca_ref("group: '', kind: ConfigMap, name: ca"), None),
        ("ca-refs.item", "Secret", META, ca_ref("group: '', kind: Secret, name: ca"), None),
        ("ca-refs.item", "group missing", META, ca_ref("kind: ConfigMap, name: ca"), r0!("group")),
        ("ca-refs.item", "kind missing", META, ca_ref("group: '', name: ca"), r0!("kind")),
        ("ca-refs.item", "name missing", META, ca_ref("group: '', kind: ConfigMap"), r0!("name")),
        ("ca-refs.item", "group bad format", META, ca_ref("group: Core, kind: ConfigMap, name: ca"), r0!("group")),
        ("ca-refs.item", "group not core", META, ca_ref("group: example.com, kind: ConfigMap, name: ca"), r0!("group")),
        ("ca-refs.item", "kind bad format", META, ca_ref("group: '', kind: Config-, name: ca"), r0!("kind")),
        ("ca-refs.item", "kind too long", META, ca_ref(&format!("group: '', kind: {}, name: ca", "K".repeat(64))), r0!("kind")),
        ("ca-refs.item", "kind unsupported", META, ca_ref("group: '', kind: Service, name: ca"), r0!("kind")),
        ("ca-refs.item", "name empty", META, ca_ref("group: '', kind: ConfigMap, name: ''"), r0!("name")),
        ("ca-refs.item", "name too long", META, ca_ref(&format!("group: '', kind: ConfigMap, name: {}", "n".repeat(254))), r0!("name")),
        ("ca-refs.item", "second entry", META, server_only("hostname: a.example.com, caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}, {group: '', kind: Pod, name: x}]"), Some("spec.tls.validation.caCertificateRefs[1].kind")),
        // wellKnownCACertificates
        ("well-known-ca", "System", META, server_only(&format!("hostname: a.example.com, {SYSTEM}")), None),
        ("well-known-ca", "lowercase", META, server_only("hostname: a.example.com, wellKnownCACertificates: system"), Some("spec.tls.validation.wellKnownCACertificates")),
        ("well-known-ca", "empty", META, server_only("hostname: a.example.com, wellKnownCACertificates: ''"), Some("spec.tls.validation.wellKnownCACertificates")),
        ("well-known-ca", "implementation-specific", META, server_only("hostname: a.example.com, wellKnownCACertificates: example.com/bundle"), Some("spec.tls.validation.wellKnownCACertificates")),
        // subjectAltNames
        ("sans.max", "5 sans", META, sans(&["{type: Hostname, hostname: a.example.com}"; 5].join(", ")), None),
        ("sans.max", "6 sans", META, sans(&["{type: Hostname, hostname: a.example.com}"; 6].join(", ")), Some("spec.tls.validation.subjectAltNames")),
        ("san.type", "URI", META, san_uri("spiffe://td.example/ns/a/sa/b"), None),
        ("san.type", "type missing", META, sans("{hostname: a.example.com}"), s0!("type")),
        ("san.type", "type unknown", META, sans("{type: DNS, hostname: a.example.com}"), s0!("type")),
        ("san.type", "type IPAddress", META, sans("{type: IPAddress, hostname: a.example.com}"), s0!("type")),
        ("san.cel", "hostname only", META, san_host("api.example.com"), None),
        ("san.cel", "uri only", META, san_uri("spiffe://td/x"), None),
        ("san.cel", "Hostname without hostname", META, sans("{type: Hostname}"), s0!("hostname")),
        ("san.cel", "Hostname with empty hostname", META, san_host(""), s0!("hostname")),
        ("san.cel", "Hostname with uri too", META, sans("{type: Hostname, hostname: a.example.com, uri: 'spiffe://td/x'}"), s0!("uri")),
        ("san.cel", "Hostname with empty uri", META, sans("{type: Hostname, hostname: a.example.com, uri: ''}"), s0!("uri")),
        ("san.cel", "URI without uri", META, sans("{type: URI}"), s0!("uri")),
        ("san.cel", "URI with hostname too", META, sans("{type: URI, hostname: a.example.com, uri: 'spiffe://td/x'}"), s0!("hostname")),
        ("san.cel", "second entry", META, sans("{type: Hostname, hostname: a.example.com}, {type: URI}"), Some("spec.tls.validation.subjectAltNames[1].uri")),
        ("san.hostname", "wildcard prefix", META, san_host("*.example.com"), None),
        ("san.hostname", "single label", META, san_host("db"), None),
        ("san.hostname", "inner wildcard", META, san_host("a.*.example.com"), s0!("hostname")),
        ("san.hostname", "partial wildcard", META, san_host("a*.example.com"), s0!("hostname")),
        ("san.hostname", "bare wildcard", META, san_host("*."), s0!("hostname")),
        ("san.hostname", "uppercase", META, san_host("*.Example.com"), s0!("hostname")),
        ("san.hostname", "ip", META, san_host("192.0.2.1"), s0!("hostname")),
        ("san.hostname", "too long", META, san_host(&vec!["a".repeat(60); 5].join(".")), s0!("hostname")),
        ("san.uri", "https", META, san_uri("https://api.example.com/path?q#f"), None),
        ("san.uri", "no scheme", META, san_uri("td.example/path"), s0!("uri")),
        ("san.uri", "no authority", META, san_uri("mailto:a@example.com"), s0!("uri")),
        ("san.uri", "scheme starts with digit", META, san_uri("1x://td/x"), s0!("uri")),
        ("san.uri", "whitespace", META, san_uri("spiffe://td/a b"), s0!("uri")),
        ("san.uri", "too long", META, san_uri(&format!("spiffe://td/{}", "p".repeat(250))), s0!("uri")),
    ]
}
