//! The CRD against upstream's structure, its envelope, its YAML, and the shipped examples
//! against both the CRD's structural constraints and the validator.

mod expected;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};

use super::structural::check;
use super::*;
use crate::backend::{self, XBackend, model};

fn schema() -> Value {
    crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Constraint keys in the order the summary lines list them, with their short names.
const ATTRIBUTES: [(&str, &str); 12] = [
    ("enum", "enum"),
    ("required", "required"),
    ("format", "format"),
    ("default", "default"),
    ("minimum", "minimum"),
    ("maximum", "maximum"),
    ("minLength", "minLength"),
    ("maxLength", "maxLength"),
    ("maxItems", "maxItems"),
    ("x-kubernetes-list-type", "listType"),
    ("x-kubernetes-list-map-keys", "listMapKeys"),
    ("pattern", "pattern"),
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
    let mut ours = BTreeSet::new();
    summarize(&schema(), "(root)", &mut ours);
    let upstream: BTreeSet<String> = expected::UPSTREAM
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let missing: Vec<_> = upstream.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&upstream).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "schema differs from upstream\nmissing:\n  {}\nunexpected:\n  {}",
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
    let mut missing = Vec::new();
    walk(&schema(), "(root)", &mut missing);
    assert!(missing.is_empty(), "{missing:?}");
}

#[test]
fn envelope_matches_upstream() {
    let crd = crd();
    assert_eq!(format!("{GROUP}/{VERSION}"), model::API_VERSION);
    assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(
        crd["metadata"]["name"],
        "xbackends.gateway.networking.x-k8s.io"
    );
    let annotations = &crd["metadata"]["annotations"];
    assert_eq!(
        annotations["gateway.networking.k8s.io/bundle-version"],
        "v1.6.1"
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
    let yaml = crd_yaml();
    let parsed: Value = serde_yaml_ng::from_str(&yaml).expect("CRD YAML parses");
    assert_eq!(parsed, crd());
    assert!(
        yaml.starts_with("apiVersion: apiextensions.k8s.io/v1\n"),
        "{yaml}"
    );
    // YAML 1.1 readers take a bare True as a boolean; the enum must stay strings.
    let conditions = &parsed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        ["properties"]["parents"]["items"]["properties"]["conditions"];
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
    let schema = schema();
    for (name, value) in &documents {
        assert_eq!(check(&schema, value), Vec::<String>::new(), "{name}");
        let object: XBackend = serde_json::from_value(value.clone()).expect(name);
        assert!(backend::validate(&object).is_ok(), "{name}");
    }
    let catalog = backend::load(&[dir]).expect("examples load");
    assert!(catalog.problems.is_empty(), "{:?}", catalog.problems);
    assert_eq!(catalog.backends.len(), documents.len());
}

/// A ClientAndServer Backend using every spec field, with a status a controller wrote.
fn full_object() -> Value {
    json!({
        "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
        "kind": "XBackend",
        "metadata": {"name": "full", "namespace": "demo", "labels": {"a": "b"}},
        "spec": {
            "type": "ExternalHostname",
            "externalHostname": {"hostname": "api.example.com"},
            "port": {"name": "https", "port": 443},
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
        "status": {"parents": [{
            "controllerName": "example.net/redirector",
            "parentRef": {"name": "egress", "namespace": "demo", "port": 443},
            "conditions": [{
                "type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z",
            }],
        }]},
    })
}

#[test]
fn a_full_object_passes_the_schema_and_the_validator() {
    let value = full_object();
    assert_eq!(check(&schema(), &value), Vec::<String>::new());
    let object: XBackend = serde_json::from_value(value).expect("parses");
    assert!(
        backend::validate(&object).is_ok(),
        "{:?}",
        backend::validate(&object)
    );
}

/// Objects that break an OpenAPI constraint: the structural check and the agent (parse
/// plus validation) must both refuse each, at the same field.
#[test]
fn schema_and_validator_reject_the_same_shapes() {
    let ca_ref = json!({"group": "", "kind": "ConfigMap", "name": "ca"});
    let cases: Vec<(&str, &str, Value)> = vec![
        ("minimum", "spec.port.port", json!(0)),
        ("maximum", "spec.port.port", json!(65_536)),
        ("type", "spec.port.port", json!("443")),
        ("enum", "spec.protocol", json!("TLS")),
        ("enum", "spec.tls.mode", json!("Strict")),
        ("enum", "spec.type", json!("EndpointSelector")),
        ("maxLength", "spec.port.name", json!("p".repeat(64))),
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
    assert_eq!(policies.len(), 2, "credentials and rules; MCP tools");
    for policy in &policies {
        assert_eq!(check(schema, policy), Vec::<String>::new(), "{policy}");
    }
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
