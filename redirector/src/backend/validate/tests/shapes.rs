//! The two shapes side by side: the same Backend from each, the notices, and upstream's
//! exact messages.

use super::upstream_cases::spec;
use super::*;

#[test]
fn both_shapes_make_the_same_backend() {
    let newest = validate(&parse(META, &plain("api.example.com", "443"))).expect("newest");
    let v16 = validate(&parse(META, &plain16("api.example.com", "443"))).expect("v1.6");
    assert_eq!(newest.backend, v16.backend);
    assert!(newest.backend.is_some());
    assert_eq!(newest.schema, SchemaVersion::Newest);
    assert_eq!(v16.schema, SchemaVersion::V1_6);
    assert_eq!(newest.notices, []);
    let notices: Vec<String> = v16.notices.iter().map(ToString::to_string).collect();
    assert_eq!(
        notices,
        [
            "spec.port.port: deprecated Gateway API v1.6 shape, read with v1.6's rules; upstream's \
          newest schema writes `port: {number: 443}` (port.port and port.name are gone there)"
        ]
    );
}

#[test]
fn endpoint_selector_is_valid_but_makes_no_backend() {
    let spec = "type: EndpointSelector, endpointSelector: {matchLabels: {app: db}}, port: {number: 5432}, sessionPersistence: {cookie: {lifetimeType: Session}}";
    let validated = validate(&parse(META, spec)).expect("valid");
    assert_eq!(validated.backend, None);
    let notices: Vec<String> = validated.notices.iter().map(ToString::to_string).collect();
    assert_eq!(
        notices,
        [
            "spec.type: EndpointSelector: in-cluster endpoints for other controllers; this agent \
          makes no redirect and writes no status for it"
        ]
    );
}

/// The message strings are upstream's, word for word.
#[test]
fn newest_rules_use_upstream_messages() {
    let host = "type: ExternalHostname, externalHostname: {hostname: example.com}";
    let cases = [
        (
            spec("H2C", "mode: ServerOnly", false),
            "spec.protocol: tls must be disabled when protocol is H2C, use protocol HTTP2 for HTTP/2 with tls",
        ),
        (
            spec("HTTP2", "-", false),
            "spec.protocol: tls must be enabled when protocol is HTTP2, use protocol H2C for HTTP/2 without tls",
        ),
        (
            spec("HTTP2", "mode: None", false),
            "spec.protocol: tls must be enabled when protocol is HTTP2, use protocol H2C for HTTP/2 without tls",
        ),
        (
            spec("WSS", "mode: None", false),
            "spec.protocol: tls must be enabled when protocol is WSS",
        ),
        (
            format!("{host}, port: {{number: 80}}, sessionPersistence: {{cookie: {{}}}}"),
            "spec.sessionPersistence: sessionPersistence must be unset when type is not EndpointSelector",
        ),
        (
            "type: ExternalHostname, port: {number: 80}".to_owned(),
            "spec.externalHostname: externalHostname must be set when type is ExternalHostname and must be unset otherwise",
        ),
        (
            "type: EndpointSelector, port: {number: 80}".to_owned(),
            "spec.endpointSelector: endpointSelector must be set when type is EndpointSelector and must be unset otherwise",
        ),
        (
            format!("{host}, port: {{}}"),
            "spec.port.number: required (spec.port must have at least 1 properties)",
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(backend(META, &spec), Err(vec![want.to_owned()]), "{spec}");
    }
}

#[test]
fn disagreeing_port_fields_name_both() {
    let spec = "type: ExternalHostname, externalHostname: {hostname: example.com}, port: {number: 443, port: 8443}";
    assert_eq!(
        backend(META, spec),
        Err(vec![
            "spec.port.port: 8443 disagrees with spec.port.number 443; set only \
             spec.port.number (spec.port.port is the deprecated v1.6 field)"
                .to_owned()
        ])
    );
}
