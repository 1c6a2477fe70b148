//! Objects against the printed CRDs and the validator: the shipped examples, a v1.6
//! object, a full object of each shape, and the OpenAPI constraints both must enforce.

use std::path::Path;

use serde_json::{Value, json};

use super::{SCHEMAS, SchemaVersion, check, entry_names, schema, schema_of};
use crate::backend::{self, XBackend, model};

/// Every `XBackend` document of a directory, as JSON.
fn xbackend_documents(dir: &Path) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("examples directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("example file");
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document).expect("YAML");
            if value["kind"] == model::KIND {
                out.push((
                    format!("{}: {}", file.display(), value["metadata"]["name"]),
                    value,
                ));
            }
        }
    }
    out
}

#[test]
fn shipped_examples_pass_the_schema_and_the_validator() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    let documents = xbackend_documents(&dir);
    assert!(documents.len() >= 3, "examples found: {}", documents.len());
    for (name, value) in &documents {
        // Each example against the CRD of the shape it is written in.
        let version = match value["spec"]["port"].get("port") {
            Some(_) => SchemaVersion::V1_6,
            None => SchemaVersion::Newest,
        };
        assert_eq!(
            check(&schema_of(version), value),
            Vec::<String>::new(),
            "{name}"
        );
        let object: XBackend = serde_json::from_value(value.clone()).expect(name);
        assert!(backend::validate(&object).is_ok(), "{name}");
    }
    let catalog = backend::load(&[dir]).expect("examples load");
    assert!(catalog.problems.is_empty(), "{:?}", catalog.problems);
    assert_eq!(catalog.backends.len(), documents.len());
}

/// A v1.6-shaped object fits the v1.6 CRD, not the newest, and the agent reads it with
/// one deprecation note.
#[test]
fn a_v1_6_object_fits_the_v1_6_crd_and_loads_with_a_note() {
    let value: Value = serde_yaml_ng::from_str(include_str!("v1.6-backend.yaml")).expect("YAML");
    assert_eq!(
        check(&schema_of(SchemaVersion::V1_6), &value),
        Vec::<String>::new()
    );
    let newest = check(&schema(), &value);
    assert!(
        newest.iter().any(|e| e.starts_with("spec.port.port")),
        "{newest:?}"
    );
    let object: XBackend = serde_json::from_value(value).expect("parses");
    let validated = backend::validate(&object).expect("valid");
    assert_eq!(validated.schema, SchemaVersion::V1_6);
    assert_eq!(validated.backend.map(|b| b.port), Some(8443));
    assert_eq!(validated.notices.len(), 1, "{:?}", validated.notices);
}

/// A ClientAndServer Backend using every spec field (of ExternalHostname), with a
/// status a controller wrote, in the shape of `version`.
fn full_object_of(version: SchemaVersion) -> Value {
    let (list, reference) = entry_names(version);
    let port = match version {
        SchemaVersion::Newest => json!({"number": 443}),
        SchemaVersion::V1_6 => json!({"name": "https", "port": 443}),
    };
    json!({
        "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
        "kind": "XBackend",
        "metadata": {"name": "full", "namespace": "demo", "labels": {"a": "b"}},
        "spec": {
            "type": "ExternalHostname",
            "externalHostname": {"hostname": "api.example.com"},
            "port": port,
            "protocol": "HTTP2",
            "tls": {
                "mode": "ClientAndServer",
                "clientCertificateRef": {"group": "", "kind": "Secret", "name": "client"},
                "validation": {
                    "hostname": "api.example.com",
                    "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}],
                    "subjectAltNames": [
                        {"type": "Hostname", "hostname": "*.example.com"},
                        {"type": "URI", "uri": "spiffe://td.example/ns/demo/sa/api"},
                    ],
                },
            },
        },
        "status": {(list): [{
            "controllerName": "example.net/redirector",
            (reference): {"name": "egress", "namespace": "demo", "port": 443},
            "conditions": [{
                "type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z",
            }],
        }]},
    })
}

fn full_object() -> Value {
    full_object_of(SchemaVersion::Newest)
}

#[test]
fn a_full_object_passes_the_schema_and_the_validator() {
    for version in SCHEMAS {
        let value = full_object_of(version);
        assert_eq!(check(&schema_of(version), &value), Vec::<String>::new());
        let object: XBackend = serde_json::from_value(value).expect("parses");
        let validated = backend::validate(&object);
        assert!(validated.is_ok(), "{version:?}: {validated:?}");
    }
}

/// An object of one shape does not fit the other shape's CRD (so the agent must not
/// assume every cluster has the newest).
#[test]
fn each_shape_fits_only_its_own_crd() {
    let newest = check(
        &schema_of(SchemaVersion::V1_6),
        &full_object_of(SchemaVersion::Newest),
    );
    assert!(
        newest.iter().any(|e| e.starts_with("spec.port.number")),
        "{newest:?}"
    );
    let v16 = check(
        &schema_of(SchemaVersion::Newest),
        &full_object_of(SchemaVersion::V1_6),
    );
    assert!(
        v16.iter().any(|e| e.starts_with("spec.port.port")),
        "{v16:?}"
    );
}

/// Objects that break an OpenAPI constraint: the structural check and the agent (parse
/// plus validation) must both refuse each, at the same field.
#[test]
fn schema_and_validator_reject_the_same_shapes() {
    let ca_ref = json!({"group": "", "kind": "ConfigMap", "name": "ca"});
    let cases: Vec<(&str, &str, Value)> = vec![
        ("minimum", "spec.port.number", json!(0)),
        ("maximum", "spec.port.number", json!(65_536)),
        ("type", "spec.port.number", json!("443")),
        ("enum", "spec.protocol", json!("TLS")),
        ("enum", "spec.tls.mode", json!("Strict")),
        ("enum", "spec.type", json!("Service")),
        ("minLength", "spec.externalHostname.hostname", json!("")),
        (
            "maxLength",
            "spec.tls.validation.hostname",
            json!("h".repeat(254)),
        ),
        (
            "maxItems",
            "spec.tls.validation.caCertificateRefs",
            json!(vec![ca_ref; 9]),
        ),
        (
            "maxItems",
            "spec.tls.validation.subjectAltNames",
            json!(vec![json!({"type": "URI", "uri": "a://b"}); 6]),
        ),
        (
            "enum",
            "spec.tls.validation.subjectAltNames",
            json!([{"type": "DNS", "hostname": "a.example.com"}]),
        ),
        (
            "required",
            "spec.tls.validation.caCertificateRefs",
            json!([{"kind": "ConfigMap", "name": "ca"}]),
        ),
        ("unknown field", "spec.tls.validation.extra", json!(true)),
    ];
    for (constraint, field, replacement) in cases {
        let mut value = full_object();
        set(&mut value, field, replacement);
        let structural = check(&schema(), &value);
        assert!(
            structural.iter().any(|e| e.starts_with(field)),
            "{constraint} at {field}: schema accepted it: {structural:?}"
        );
        let agent = serde_json::from_value::<XBackend>(value)
            .map_err(|e| e.to_string())
            .and_then(|object| backend::validate(&object).map_err(|errors| format!("{errors:?}")));
        assert!(agent.is_err(), "{constraint} at {field}: agent accepted it");
    }
}

fn set(value: &mut Value, path: &str, replacement: Value) {
    let mut node = value;
    let parts: Vec<&str> = path.split('.').collect();
    for part in &parts[..parts.len() - 1] {
        node = &mut node[*part];
    }
    node[parts[parts.len() - 1]] = replacement;
}
