//! The Kubernetes source's pure parts; the watches themselves are tested end to end
//! against `fakeapi` (xtask/tests/kubernetes.rs).
//!
//! "One model, two sources": the same YAML, loaded by the directory source and as an
//! object from the API server, must give the same Backend or the same problems.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::{
    ByteString,
    api::core::v1::{ConfigMap, Secret},
};
use kube::api::DynamicObject;

use super::{policies, refs, xbackends};
use crate::backend::{self, ObjectKey, ObjectRef, Problem, RefKind};

const VALID: &str = r#"
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: api, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: api.example.com}
  port: {port: 443}
  protocol: HTTP
  tls:
    mode: ClientAndServer
    clientCertificateRef: {name: api-client}
    validation:
      hostname: api.example.com
      caCertificateRefs:
        - {group: "", kind: ConfigMap, name: api-ca}
        - {group: "", kind: Secret, name: api-ca-secret}
"#;

/// As the API server would send it: server-set metadata, and a `status` that the model
/// would refuse (`conditions` without their required fields).
fn from_server(yaml: &str) -> DynamicObject {
    let mut value: serde_json::Value = serde_yaml_ng::from_str(yaml).expect("YAML");
    value["metadata"]["uid"] = "0000-1111".into();
    value["metadata"]["resourceVersion"] = "42".into();
    value["metadata"]["generation"] = 3.into();
    value["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z".into();
    value["metadata"]["managedFields"] = serde_json::json!([{"manager": "kubectl"}]);
    value["status"] = serde_json::json!({"parents": [{"conditions": [{"type": "Accepted"}]}]});
    serde_json::from_value(value).expect("DynamicObject")
}

/// What the directory source makes of `yaml`.
fn from_directory(yaml: &str) -> backend::Catalog {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("x.yaml"), yaml).expect("write");
    backend::load(&[dir.path().to_path_buf()]).expect("load")
}

/// Object, field and message (the file differs by design).
fn located(problems: &[Problem]) -> Vec<(Option<String>, Option<String>, String)> {
    let fields = |p: &Problem| (p.object.clone(), p.field.clone(), p.message.clone());
    problems.iter().map(fields).collect()
}

#[test]
fn a_valid_object_gives_the_same_backend_as_the_directory_source() {
    let loaded = (xbackends::load(&from_server(VALID)).expect("valid").backend)
        .expect("an ExternalHostname Backend");
    let directory = from_directory(VALID);
    assert_eq!(directory.backends, vec![Arc::new(loaded.clone())]);
    let refs: Vec<&ObjectRef> = xbackends::references(&loaded).collect();
    let expected = [
        (RefKind::ConfigMap, "api-ca"),
        (RefKind::Secret, "api-ca-secret"),
        (RefKind::Secret, "api-client"),
    ];
    let expected: Vec<ObjectRef> = (expected.iter())
        .map(|(kind, name)| ObjectRef {
            kind: *kind,
            key: ObjectKey::new("demo", *name),
        })
        .collect();
    assert_eq!(refs, expected.iter().collect::<Vec<_>>());
}

#[test]
fn problems_are_named_as_by_the_directory_source() {
    let cases = [
        VALID.replace("port: 443", "port: 0"),
        VALID.replace("port: {port: 443}", "port: {}"),
        VALID.replace("hostname: api.example.com}", "hostnme: api.example.com}"),
        VALID.replace("protocol: HTTP", "protocol: TLS"),
        VALID.replace("mode: ClientAndServer", "mode: ServerOnly"),
        VALID.replace("      hostname: api.example.com\n", ""),
        VALID.replace("name: api,", "name: Not_A_Name,"),
        VALID.replace(
            "      caCertificateRefs:\n        - {group: \"\", kind: ConfigMap, name: api-ca}\n        \
             - {group: \"\", kind: Secret, name: api-ca-secret}\n",
            "      wellKnownCACertificates: Other\n",
        ),
    ];
    for yaml in &cases {
        let Err(problems) = xbackends::load(&from_server(yaml)) else {
            panic!("accepted:\n{yaml}");
        };
        let directory = from_directory(yaml);
        assert!(directory.backends.is_empty(), "{yaml}");
        assert_eq!(located(&problems), located(&directory.problems), "{yaml}");
        let key = xbackends::key(&from_server(yaml));
        for problem in &problems {
            assert_eq!(
                problem.file.display().to_string(),
                format!("k8s://{}/{}", key.namespace, key.name)
            );
        }
    }
}

#[test]
fn type_errors_name_the_same_field() {
    // The messages are the deserializers' own (JSON says "expected string or map", YAML
    // "expected a Value::Tagged enum"); the field is what the operator needs.
    let yaml = VALID.replace("type: ExternalHostname", "type: 7");
    let Err(problems) = xbackends::load(&from_server(&yaml)) else {
        panic!("accepted");
    };
    let directory = from_directory(&yaml);
    let fields = |problems: &[Problem]| -> Vec<_> {
        let field = |p: &Problem| (p.object.clone(), p.field.clone());
        problems.iter().map(field).collect()
    };
    assert_eq!(fields(&problems), fields(&directory.problems));
    assert_eq!(problems[0].field.as_deref(), Some("spec.type"));
}

#[test]
fn items_without_api_version_and_kind_still_parse() {
    let mut object = from_server(VALID);
    object.types = None;
    assert!(xbackends::load(&object).is_ok());
}

#[test]
fn the_resource_is_the_upstream_one() {
    let resource = xbackends::api_resource();
    assert_eq!(resource.group, "gateway.networking.x-k8s.io");
    assert_eq!(resource.version, "v1alpha1");
    assert_eq!(resource.api_version, "gateway.networking.x-k8s.io/v1alpha1");
    assert_eq!(resource.kind, "XBackend");
    assert_eq!(resource.plural, "xbackends");
}

#[test]
fn config_map_and_secret_payloads_are_read_as_from_a_directory() {
    let config_map = ConfigMap {
        data: Some(BTreeMap::from([("ca.crt".to_owned(), "PEM".to_owned())])),
        binary_data: Some(BTreeMap::from([
            ("extra.crt".to_owned(), ByteString(b"TEXT".to_vec())),
            ("blob".to_owned(), ByteString(vec![0xff, 0xfe])),
        ])),
        ..ConfigMap::default()
    };
    let data = refs::config_map_data(&config_map);
    let expected = [("ca.crt", "PEM"), ("extra.crt", "TEXT")];
    let expected = expected.map(|(k, v)| (k.to_owned(), v.to_owned()));
    assert_eq!(data, BTreeMap::from(expected));

    let secret = Secret {
        data: Some(BTreeMap::from([(
            "tls.key".to_owned(),
            ByteString(vec![1, 2, 3]),
        )])),
        ..Secret::default()
    };
    let expected = BTreeMap::from([("tls.key".to_owned(), vec![1, 2, 3])]);
    assert_eq!(refs::secret_data(&secret), expected);
}

const POLICY: &str = r#"
apiVersion: policy.redirector.dev/v1alpha1
kind: BackendPolicy
metadata: {name: keys, namespace: demo}
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: api}]
  credentials:
    - {header: Authorization, format: "Bearer {value}", valueFrom: {secretKeyRef: {name: api-key, key: token}}}
  rules: [{sources: {serviceAccounts: [chat]}}]
"#;

#[test]
fn a_policy_from_the_api_is_the_directorys_and_names_its_secrets_and_targets() {
    let object = from_server(POLICY);
    let policy = policies::load(&object).expect("valid");
    let mut from_dir = (*from_directory(POLICY).policies[0]).clone();
    // The API server dates every object; its age decides conflicts.
    from_dir.created = Some("2024-01-01T00:00:00Z".into());
    assert_eq!(policy, from_dir);
    let secrets: Vec<ObjectRef> = policies::references(&policy).collect();
    let api_key = ObjectRef {
        kind: RefKind::Secret,
        key: ObjectKey::new("demo", "api-key"),
    };
    assert_eq!(secrets, [api_key]);
    let observed = policies::observed(&object);
    assert_eq!(
        (observed.generation, observed.targets),
        (3, vec!["api".to_owned()])
    );
}

#[test]
fn a_broken_policy_from_the_api_is_the_directorys_problem_and_still_names_its_targets() {
    let broken = POLICY.replace("rules:", "rule:");
    let object = from_server(&broken);
    let problems = policies::load(&object).expect_err("invalid");
    assert_eq!(
        located(&problems),
        located(&from_directory(&broken).problems)
    );
    assert_eq!(problems[0].field.as_deref(), Some("spec.rule"));
    assert_eq!(
        problems[0].file.display().to_string(),
        "k8s://backendpolicies/demo/keys"
    );
    assert_eq!(policies::observed(&object).targets, ["api"]);
}

#[test]
fn an_endpoint_selector_object_loads_with_no_backend_and_a_note() {
    let yaml = "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackend\n\
                metadata: {name: db, namespace: demo}\n\
                spec: {type: EndpointSelector, endpointSelector: {matchLabels: {app: db}}, \
                port: {number: 5432}}\n";
    let object = from_server(yaml);
    assert!(xbackends::is_endpoint_selector(&object));
    let loaded = xbackends::load(&object).expect("valid");
    assert_eq!(loaded.backend, None);
    let notes: Vec<String> = loaded.notices.iter().map(ToString::to_string).collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("k8s://demo/db: XBackend demo/db: spec.type: EndpointSelector"),
        "{notes:?}"
    );
    // Invalid, it is still recognised as one (no status is written for it).
    let invalid = from_server(&yaml.replace("{app: db}", "{}"));
    assert!(xbackends::is_endpoint_selector(&invalid));
    assert!(xbackends::load(&invalid).is_err());
    assert!(!xbackends::is_endpoint_selector(&from_server(VALID)));
}
