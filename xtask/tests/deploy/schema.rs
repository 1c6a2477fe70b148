//! Every object against the Kubernetes schema: it must deserialize into the k8s-openapi
//! type of its kind, and a field the type does not know is an error. Those types ignore
//! unknown fields themselves, so the object is re-serialized and every key of the input
//! that did not survive the round trip is reported.

use std::fmt::Write as _;

use k8s_openapi::{
    api::{
        apps::v1::DaemonSet,
        core::v1::{ConfigMap, Namespace, Secret, ServiceAccount},
        rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use super::render::identity;

/// Problems of one object against the schema of its kind (empty when it is valid).
pub fn schema_problems(object: &Value) -> Vec<String> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    match (api_version, kind) {
        ("v1", "Namespace") => round_trip::<Namespace>(object),
        ("v1", "ServiceAccount") => round_trip::<ServiceAccount>(object),
        ("v1", "ConfigMap") => round_trip::<ConfigMap>(object),
        ("v1", "Secret") => round_trip::<Secret>(object),
        ("apps/v1", "DaemonSet") => round_trip::<DaemonSet>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            round_trip::<ClusterRoleBinding>(object)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<Role>(object),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<RoleBinding>(object),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            round_trip::<CustomResourceDefinition>(object)
        }
        _ => vec![format!(
            "no schema known for {api_version} {kind}: add its k8s-openapi type to this test"
        )],
    }
}

/// Deserializes `object` as `T` and compares the re-serialized value with the input.
fn round_trip<T: DeserializeOwned + Serialize>(object: &Value) -> Vec<String> {
    let typed: T = match serde_path_to_error::deserialize(object.clone()) {
        Ok(typed) => typed,
        Err(e) => return vec![format!("{}: {}", e.path(), e.inner())],
    };
    let back = serde_json::to_value(&typed).expect("a k8s-openapi type serializes");
    differences(object, &back)
}

/// Where `back` lacks a key of `input` or holds another value for it. Numbers are
/// compared by value: k8s-openapi holds a CRD schema's `minimum` and `maximum` as floats,
/// so `1` comes back as `1.0`, which is the same number to the API server.
pub fn differences(input: &Value, back: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    compare(input, back, "", &mut problems);
    problems
}

fn compare(input: &Value, back: &Value, path: &str, problems: &mut Vec<String>) {
    match (input, back) {
        (Value::Object(input), Value::Object(back)) => {
            for (key, value) in input {
                let path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match back.get(key) {
                    Some(back) => compare(value, back, &path, problems),
                    // Kubernetes drops explicit nulls; they name no field.
                    None if value.is_null() => {}
                    None => problems.push(format!("{path}: unknown field")),
                }
            }
        }
        (Value::Array(input), Value::Array(back)) if input.len() == back.len() => {
            for (i, (value, back)) in input.iter().zip(back).enumerate() {
                compare(value, back, &format!("{path}[{i}]"), problems);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        _ if input == back => {}
        _ => problems.push(format!("{path}: {input} came back as {back}")),
    }
}

pub fn assert_schema_valid(objects: &[Value]) {
    let mut report = String::new();
    for object in objects {
        for problem in schema_problems(object) {
            let _ = writeln!(report, "{}: {problem}", identity(object));
        }
    }
    assert!(
        report.is_empty(),
        "objects that do not match their schema:\n{report}"
    );
}

#[test]
fn the_schema_check_catches_unknown_and_mistyped_fields() {
    let object: Value = serde_yaml_ng::from_str(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespce: y}\ndata: {a: b}\n",
    )
    .unwrap();
    assert_eq!(
        schema_problems(&object),
        ["metadata.namespce: unknown field"]
    );

    let object: Value = serde_yaml_ng::from_str(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  selector: {}\n  \
         template:\n    spec:\n      containers:\n      - name: a\n        ports: \
         [{containerPort: '15001'}]\n        securityContext: {capabilities: {add: [BPF]}, \
         privileged: false, apparmor: {}}\n",
    )
    .unwrap();
    let problems = schema_problems(&object);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("spec.template.spec.containers[0].ports[0].containerPort:"),
        "{problems:?}"
    );

    let object: Value = serde_yaml_ng::from_str(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: []}\n",
    )
    .unwrap();
    assert!(schema_problems(&object)[0].contains("no schema known for v1 Pod"));
}

#[test]
fn numbers_compare_by_value_and_everything_else_exactly() {
    let crd = |minimum: &str, property: &str| -> Value {
        serde_yaml_ng::from_str(&format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
             metadata: {{name: xs.example.com}}\nspec:\n  group: example.com\n  \
             names: {{kind: X, plural: xs}}\n  scope: Namespaced\n  versions:\n  \
             - name: v1\n    served: true\n    storage: true\n    schema:\n      \
             openAPIV3Schema:\n        type: object\n        properties:\n          \
             port: {{type: integer, minimum: {minimum}, {property}: 65535}}\n"
        ))
        .unwrap()
    };
    // An integer limit comes back as a float: the same number.
    assert_eq!(schema_problems(&crd("1", "maximum")), Vec::<String>::new());
    // A misspelt keyword is still an unknown field.
    let problems = schema_problems(&crd("1", "maximun"));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].ends_with("port.maximun: unknown field"),
        "{problems:?}"
    );
    // And different numbers still differ.
    let a: Value = serde_json::json!({"minimum": 1});
    assert_eq!(
        differences(&a, &serde_json::json!({"minimum": 1.0})),
        Vec::<String>::new()
    );
    assert_eq!(
        differences(&a, &serde_json::json!({"minimum": 2.0})),
        ["minimum: 1 came back as 2.0"]
    );
    assert_eq!(
        differences(&a, &serde_json::json!({"minimum": "1"})),
        ["minimum: 1 came back as \"1\""]
    );
}
