//! The CRD against upstream's structure, its envelope, its YAML, and the shipped examples
//! against both the CRD's structural constraints and the validator.

mod cel;
mod expected;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};

use super::structural::check;
use super::*;
use crate::backend::{self, XBackend, model};

const SCHEMAS: [SchemaVersion; 2] = [SchemaVersion::Newest, SchemaVersion::V1_6];

/// The newest schema, which `redirector crd` prints by default.
fn schema() -> Value {
    schema_of(SchemaVersion::Newest)
}

fn schema_of(version: SchemaVersion) -> Value {
    crd(version)["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Constraint keys in the order the summary lines list them, with their short names.
const ATTRIBUTES: [(&str, &str); 15] = [
    ("enum", "enum"),
    ("required", "required"),
    ("format", "format"),
    ("default", "default"),
    ("minimum", "minimum"),
    ("maximum", "maximum"),
    ("minLength", "minLength"),
    ("maxLength", "maxLength"),
    ("maxItems", "maxItems"),
    ("minProperties", "minProperties"),
    ("maxProperties", "maxProperties"),
    ("x-kubernetes-list-type", "listType"),
    ("x-kubernetes-list-map-keys", "listMapKeys"),
    ("pattern", "pattern"),
    (
        "x-kubernetes-preserve-unknown-fields",
        "preserveUnknownFields",
    ),
];

/// One line per schema node and per CEL rule, in the format of [`expected::UPSTREAM`].
fn summarize(node: &Value, path: &str, out: &mut BTreeSet<String>) {
    let mut line = format!("{path}: {}", node["type"].as_str().unwrap_or("?"));
    for (key, short) in ATTRIBUTES {
        let Some(value) = node.get(key) else { continue };
        let rendered = match (key, value) {
            ("enum", Value::Array(values)) => join(values, "|", false),
            (_, Value::Array(values)) => join(values, ",", true),
            ("default", value) => value.to_string(),
            (_, Value::String(s)) => s.clone(),
            (_, value) => value.to_string(),
        };
        line.push_str(&format!(" {short}={rendered}"));
    }
    let known = [
        "type",
        "description",
        "properties",
        "items",
        "additionalProperties",
        "x-kubernetes-validations",
    ];
    for key in node.as_object().into_iter().flatten().map(|(k, _)| k) {
        if !known.contains(&key.as_str()) && !ATTRIBUTES.iter().any(|(k, _)| k == key) {
            line.push_str(&format!(" UNKNOWN:{key}"));
        }
    }
    out.insert(line);
    for rule in node["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let text = rule["rule"].as_str().unwrap_or_default();
        out.insert(format!(
            "{path}: rule {}",
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    for (name, child) in node["properties"].as_object().into_iter().flatten() {
        let child_path = match path {
            "(root)" => name.clone(),
            _ => format!("{path}.{name}"),
        };
        summarize(child, &child_path, out);
    }
    if let Some(items) = node.get("items") {
        summarize(items, &format!("{path}[]"), out);
    }
    if let Some(values) = node.get("additionalProperties") {
        summarize(values, &format!("{path}{{}}"), out);
    }
}

fn join(values: &[Value], separator: &str, sorted: bool) -> String {
    let mut texts: Vec<&str> = values.iter().filter_map(Value::as_str).collect();
    if sorted {
        texts.sort_unstable();
    }
    texts.join(separator)
}

#[test]
fn schema_structure_matches_upstream() {
    for (version, expected) in [
        (SchemaVersion::Newest, expected::NEWEST),
        (SchemaVersion::V1_6, expected::V1_6),
    ] {
        structure_matches(version, expected);
    }
}

fn structure_matches(version: SchemaVersion, expected: &str) {
    let mut ours = BTreeSet::new();
    summarize(&schema_of(version), "(root)", &mut ours);
    let upstream: BTreeSet<String> = expected
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let missing: Vec<_> = upstream.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&upstream).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{version:?} schema differs from upstream\nmissing:\n  {}\nunexpected:\n  {}",
        missing
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n  "),
        extra
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n  "),
    );
}

#[test]
fn every_node_has_a_description_except_metadata() {
    fn walk(node: &Value, path: &str, missing: &mut Vec<String>) {
        if path != "metadata" && node["description"].as_str().is_none_or(str::is_empty) {
            missing.push(path.to_owned());
        }
        for (name, child) in node["properties"].as_object().into_iter().flatten() {
            walk(child, name, missing);
        }
        if let Some(items) = node.get("items") {
            walk(items, &format!("{path}[]"), missing);
        }
    }
    for version in SCHEMAS {
        let mut missing = Vec::new();
        walk(&schema_of(version), "(root)", &mut missing);
        assert!(missing.is_empty(), "{version:?}: {missing:?}");
    }
}

#[test]
fn envelope_matches_upstream() {
    for version in SCHEMAS {
        envelope_of(version);
    }
}

fn envelope_of(version: SchemaVersion) {
    let crd = crd(version);
    assert_eq!(format!("{GROUP}/{VERSION}"), model::API_VERSION);
    assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(
        crd["metadata"]["name"],
        "xbackends.gateway.networking.x-k8s.io"
    );
    let annotations = &crd["metadata"]["annotations"];
    let bundle = match version {
        SchemaVersion::Newest => "v0.0.0-dev",
        SchemaVersion::V1_6 => "v1.6.1",
    };
    assert_eq!(
        annotations["gateway.networking.k8s.io/bundle-version"],
        bundle
    );
    assert_eq!(
        annotations["gateway.networking.k8s.io/channel"],
        "experimental"
    );
    let spec = &crd["spec"];
    assert_eq!(spec["group"], GROUP);
    assert_eq!(spec["scope"], "Namespaced");
    assert_eq!(
        spec["names"],
        json!({
            "kind": model::KIND,
            "listKind": "XBackendList",
            "plural": "xbackends",
            "singular": "xbackend",
            "shortNames": ["xbackend"],
            "categories": ["gateway-api"],
        })
    );
    let versions = spec["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 1);
    let version = &versions[0];
    assert_eq!(
        (&version["name"], &version["served"], &version["storage"]),
        (&json!("v1alpha1"), &json!(true), &json!(true))
    );
    assert_eq!(version["subresources"], json!({"status": {}}));
    assert_eq!(
        version["additionalPrinterColumns"],
        json!([{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}])
    );
}

#[test]
fn yaml_output_parses_back_to_the_same_definition() {
    for version in SCHEMAS {
        yaml_of(version);
    }
}

fn yaml_of(version: SchemaVersion) {
    let (list, _) = entry_names(version);
    let yaml = crd_yaml(version);
    let parsed: Value = serde_yaml_ng::from_str(&yaml).expect("CRD YAML parses");
    assert_eq!(parsed, crd(version));
    assert!(
        yaml.starts_with("apiVersion: apiextensions.k8s.io/v1\n"),
        "{yaml}"
    );
    // YAML 1.1 readers take a bare True as a boolean; the enum must stay strings.
    let conditions = &parsed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        ["properties"][list]["items"]["properties"]["conditions"];
    assert_eq!(
        conditions["items"]["properties"]["status"]["enum"],
        json!(["True", "False", "Unknown"])
    );
    assert!(!yaml.contains("- True\n"), "unquoted True in the output");
}

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
    let value: Value =
        serde_yaml_ng::from_str(include_str!("tests/v1.6-backend.yaml")).expect("YAML");
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

#[test]
fn the_backend_policy_crd_takes_the_shipped_example() {
    let crd = policy::crd();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/backend-policy.yaml");
    let text = std::fs::read_to_string(path).expect("example");
    let policies: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .filter(|d: &Value| d["kind"] == "BackendPolicy")
        .collect();
    assert_eq!(policies.len(), 1);
    assert_eq!(check(schema, &policies[0]), Vec::<String>::new());
    let yaml = policy_crd_yaml();
    assert_eq!(
        serde_yaml_ng::from_str::<Value>(&yaml).expect("parses"),
        crd
    );
    assert_eq!(
        crd["metadata"]["name"],
        "backendpolicies.policy.redirector.dev"
    );
}
