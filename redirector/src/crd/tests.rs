//! The CRD against upstream's structure, its envelope, its YAML, and the shipped examples
//! against both the CRD's structural constraints and the validator.

mod cel;
mod expected;
mod objects;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};

use super::structural::check;
use super::*;
use crate::backend::model;

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

/// One line per schema node and per CEL rule, in the format of [`expected::expected`].
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
    for version in SCHEMAS {
        structure_matches(version, &expected::expected(version));
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
