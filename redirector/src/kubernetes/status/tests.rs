use std::path::PathBuf;

use super::*;
use crate::{
    backend::{self, Catalog, Problem},
    tls::TlsConfigError,
};

const T0: &str = "2024-01-01T00:00:00Z";
const T1: &str = "2024-01-01T00:01:00Z";

fn status(accepted: Result<(), &str>, refs: Result<(), &str>) -> ObjectStatus {
    ObjectStatus {
        key: ObjectKey::new("demo", "api"),
        generation: 2,
        accepted: accepted.map_err(str::to_owned),
        resolved_refs: refs.map_err(|message| RefProblem {
            reason: "InvalidCACertificateRef",
            message: message.to_owned(),
        }),
    }
}

#[test]
fn a_valid_backend_is_accepted_with_its_references_resolved() {
    let entry = serde_json::to_value(render(&status(Ok(()), Ok(())), None, T0)).expect("JSON");
    assert_eq!(
        entry,
        json!({
            "controllerName": "redirector.dev/node-agent",
            "parentRef": {"group": "", "kind": "Namespace", "name": "demo"},
            "conditions": [
                {"type": "Accepted", "status": "True", "observedGeneration": 2,
                 "lastTransitionTime": T0, "reason": "Accepted",
                 "message": "Backend accepted by the redirector node agents"},
                {"type": "ResolvedRefs", "status": "True", "observedGeneration": 2,
                 "lastTransitionTime": T0, "reason": "ResolvedRefs",
                 "message": "All references resolved"},
            ],
        })
    );
}

#[test]
fn an_invalid_backend_is_not_accepted_and_its_references_are_not_judged() {
    let entry = render(&status(Err("spec.port.port: required"), Err("x")), None, T0);
    assert_eq!(entry.conditions.len(), 1);
    let accepted = &entry.conditions[0];
    assert_eq!(
        (
            accepted.type_.as_str(),
            accepted.status.as_str(),
            accepted.reason.as_str()
        ),
        ("Accepted", "False", "Invalid")
    );
    assert_eq!(accepted.message, "spec.port.port: required");
}

#[test]
fn transition_time_moves_only_when_a_condition_status_changes() {
    let first = render(&status(Ok(()), Ok(())), None, T0);
    // Same statuses, new generation: same times, new observedGeneration.
    let mut next = status(Ok(()), Ok(()));
    next.generation = 3;
    let second = render(&next, Some(&first), T1);
    assert!(
        second
            .conditions
            .iter()
            .all(|c| c.last_transition_time == T0)
    );
    assert!(
        second
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(3))
    );
    // An unchanged status renders the same entry: nothing to write.
    assert_eq!(render(&next, Some(&second), T1), second);
    // ResolvedRefs turns False: only its time moves.
    let third = render(
        &status(
            Ok(()),
            Err("ConfigMap demo/ca (referenced by the Backend) does not exist"),
        ),
        Some(&second),
        T1,
    );
    assert_eq!(third.conditions[0].last_transition_time, T0);
    assert_eq!(third.conditions[1].last_transition_time, T1);
    assert_eq!(third.conditions[1].reason, "InvalidCACertificateRef");
}

#[test]
fn other_controllers_entries_are_kept_apart() {
    for schema in [SchemaVersion::Newest, SchemaVersion::V1_6] {
        let (list, reference) = crate::crd::entry_names(schema);
        let ours = render(&status(Ok(()), Ok(())), None, T0);
        let other = json!({"controllerName": "example.net/gateway", (reference): {"name": "gw"}});
        let mut object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": model::API_VERSION, "kind": model::KIND,
            "metadata": {"name": "api", "namespace": "demo"},
            "status": {(list): [other.clone(), entry_json(&ours, schema).expect("JSON")]},
        }))
        .expect("object");
        assert_eq!(split_parents(&object, schema), (Some(ours), vec![other]));
        object.data["status"] = json!({});
        assert_eq!(split_parents(&object, schema), (None, Vec::new()));
    }
}

#[test]
fn the_entry_names_its_reference_as_the_shape_does() {
    let entry = render(&status(Ok(()), Ok(())), None, T0);
    let newest = entry_json(&entry, SchemaVersion::Newest).expect("JSON");
    assert_eq!(newest["ancestorRef"]["kind"], "Namespace");
    assert!(newest.get("parentRef").is_none(), "{newest}");
    let v16 = entry_json(&entry, SchemaVersion::V1_6).expect("JSON");
    assert_eq!(v16["parentRef"]["kind"], "Namespace");
    assert!(v16.get("ancestorRef").is_none(), "{v16}");
}

const TLS_BACKEND: &str = r#"
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: api, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: api.example.com}
  port: {port: 443}
  tls:
    mode: ClientAndServer
    clientCertificateRef: {name: api-client}
    validation:
      hostname: api.example.com
      caCertificateRefs: [{group: "", kind: ConfigMap, name: api-ca}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: broken, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: broken.example.com}
  port: {port: 0}
"#;

fn catalog() -> Catalog {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("x.yaml"), TLS_BACKEND).expect("write");
    backend::load(&[dir.path().to_path_buf()]).expect("load")
}

#[test]
fn tls_errors_name_the_reference_they_are_about() {
    let catalog = catalog();
    let backend = &catalog.backends[0];
    let missing_ca = TlsConfigError::MissingObject {
        object: "ConfigMap demo/api-ca".into(),
    };
    let missing_client = TlsConfigError::MissingObject {
        object: "Secret demo/api-client".into(),
    };
    let no_key = TlsConfigError::MissingKey {
        object: "Secret demo/api-client".into(),
        key: "tls.key".into(),
    };
    let bad_ca_pem = TlsConfigError::BadPem {
        origin: "ConfigMap demo/api-ca key ca.crt".into(),
        reason: "no CERTIFICATE block".into(),
    };
    let cases = [
        (missing_ca, "InvalidCACertificateRef"),
        (missing_client, "InvalidClientCertificateRef"),
        (no_key, "InvalidClientCertificateRef"),
        (bad_ca_pem, "InvalidCACertificateRef"),
    ];
    for (error, reason) in cases {
        let problem = RefProblem::of(backend, &error);
        assert_eq!(problem.reason, reason, "{error}");
        assert_eq!(problem.message, error.to_string());
    }
}

#[test]
fn statuses_come_from_generations_problems_and_tls_errors() {
    let mut catalog = catalog();
    let generations: BTreeMap<ObjectKey, i64> = [
        (ObjectKey::new("demo", "api"), 4),
        (ObjectKey::new("demo", "broken"), 7),
    ]
    .into();
    // A problem of another source's object is not matched to anything.
    catalog.problems.push(Problem {
        file: PathBuf::from("elsewhere.yaml"),
        object: Some("XBackend other/x".into()),
        field: None,
        message: "nope".into(),
    });
    let error = TlsConfigError::MissingObject {
        object: "ConfigMap demo/api-ca".into(),
    };
    let statuses = object_statuses(&generations, &catalog, |key| {
        (key.name == "api").then_some(Err(&error))
    });
    assert_eq!(statuses.len(), 2);
    let api = &statuses[0];
    assert_eq!((api.key.name.as_str(), api.generation), ("api", 4));
    assert_eq!(api.accepted, Ok(()));
    assert_eq!(
        api.resolved_refs,
        Err(RefProblem {
            reason: "InvalidCACertificateRef",
            message: "ConfigMap demo/api-ca (referenced by the Backend) does not exist".into(),
        })
    );
    let broken = &statuses[1];
    assert_eq!((broken.key.name.as_str(), broken.generation), ("broken", 7));
    let message = broken.accepted.clone().expect_err("invalid");
    assert!(message.starts_with("spec.port.port: "), "{message}");
    assert!(!message.contains("stays in force"), "{message}");
    assert_eq!(broken.resolved_refs, Ok(()));
}

#[test]
fn long_messages_are_cut_to_the_schema_limit() {
    let long = "é".repeat(MAX_MESSAGE);
    let cut = truncated(&long);
    assert!(cut.len() <= MAX_MESSAGE && cut.ends_with("..."));
    assert_eq!(truncated("short"), "short");
}

#[test]
fn times_are_whole_seconds_in_utc() {
    let now = now();
    assert_eq!(now.len(), "2024-01-01T00:00:00Z".len(), "{now}");
    assert!(now.ends_with('Z'));
}
