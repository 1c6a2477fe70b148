use std::collections::BTreeMap;

use super::*;
use crate::backend_policy::Observed;

const OBJECTS: &str = r#"
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: api, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: api.example.com}
  port: {port: 443}
  protocol: HTTP
  tls:
    mode: ServerOnly
    validation: {hostname: api.example.com, wellKnownCACertificates: System}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: plain, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: plain.example.com}
  port: {port: 80}
  protocol: HTTP
---
apiVersion: policy.redirector.dev/v1alpha1
kind: BackendPolicy
metadata: {name: keys, namespace: demo, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: api}]
  credentials: [{header: Authorization, valueFrom: {secretKeyRef: {name: api-key, key: token}}}]
---
apiVersion: policy.redirector.dev/v1alpha1
kind: BackendPolicy
metadata: {name: newer, namespace: demo, creationTimestamp: "2024-02-01T00:00:00Z"}
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: api}]
  credentials: [{header: authorization, valueFrom: {secretKeyRef: {name: other, key: token}}}]
---
apiVersion: policy.redirector.dev/v1alpha1
kind: BackendPolicy
metadata: {name: plaintext, namespace: demo}
spec:
  targetRefs:
    - {group: gateway.networking.x-k8s.io, kind: XBackend, name: api}
    - {group: gateway.networking.x-k8s.io, kind: XBackend, name: plain}
    - {group: gateway.networking.x-k8s.io, kind: XBackend, name: nowhere}
  credentials: [{header: X-Key, valueFrom: {secretKeyRef: {name: api-key, key: token}}}]
---
apiVersion: policy.redirector.dev/v1alpha1
kind: BackendPolicy
metadata: {name: broken, namespace: demo}
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: api}]
  credentials: [{header: X-Other, format: "no placeholder", valueFrom: {secretKeyRef: {name: api-key, key: token}}}]
---
apiVersion: v1
kind: Secret
metadata: {name: api-key, namespace: demo}
stringData: {token: sk-unit-test}
"#;

fn statuses() -> BTreeMap<String, PolicyStatus> {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("x.yaml"), OBJECTS).expect("write");
    let mut catalog = backend::load(&[dir.path().to_path_buf()]).expect("load");
    let targets = [
        ("keys", &["api"][..]),
        ("newer", &["api"]),
        ("plaintext", &["api", "nowhere", "plain"]),
        ("broken", &["api"]),
    ];
    for (name, targets) in targets {
        let observed = Observed {
            generation: 3,
            targets: targets.iter().map(|t| (*t).to_owned()).collect(),
        };
        catalog
            .policy_objects
            .insert(ObjectKey::new("demo", name), observed);
    }
    let backends = (catalog.backends.iter())
        .map(|b| (b.key.clone(), b.clone()))
        .collect();
    let attachment = backend::attach_policies(&catalog, &backends);
    let in_force = (catalog.policies.iter())
        .map(|p| (ObjectKey::new(&p.namespace, &p.name), p.clone()))
        .collect();
    (policy_statuses(&catalog, &in_force, &attachment.rejected).into_iter())
        .map(|s| (s.key.name.clone(), s))
        .collect()
}

#[test]
fn each_target_says_whether_the_policy_is_accepted_on_it_and_why_not() {
    let statuses = statuses();
    let keys = &statuses["keys"];
    assert_eq!(keys.generation, 3);
    assert_eq!(keys.ancestors.len(), 1);
    assert_eq!(keys.ancestors[0].accepted, Ok(()));
    assert_eq!(keys.ancestors[0].resolved_refs, Some(Ok(())));

    // The newer policy loses the header (names compare case-insensitively), and its
    // own Secret is missing.
    let newer = &statuses["newer"].ancestors[0];
    let (reason, message) = newer.accepted.clone().expect_err("conflicted");
    assert_eq!(reason, "Conflicted");
    assert!(
        message.starts_with("spec.credentials[0].header: ") && message.contains("demo/keys"),
        "{message}"
    );
    let refs = newer.resolved_refs.clone().expect("evaluated");
    assert_eq!(refs, Err("Secret demo/other not found".to_owned()));

    // Not accepted anywhere: the target without TLS and the missing one say why, the
    // fine one that it is not applied either.
    let plaintext = &statuses["plaintext"].ancestors;
    let by_target: BTreeMap<&str, &AncestorStatus> =
        plaintext.iter().map(|a| (a.backend.as_str(), a)).collect();
    let reason = |name: &str| by_target[name].accepted.clone().expect_err(name).0;
    assert_eq!(reason("plain"), "Invalid");
    assert_eq!(reason("nowhere"), "TargetNotFound");
    assert_eq!(reason("api"), "Invalid");
    let (_, message) = by_target["api"].accepted.clone().expect_err("api");
    assert!(
        message.contains("spec.credentials: credentials cannot be set on XBackend demo/plain"),
        "{message}"
    );
    assert!(
        message.contains("spec.targetRefs[2].name: no XBackend demo/nowhere"),
        "{message}"
    );

    // Invalid: the validation problem, references not judged.
    let broken = &statuses["broken"].ancestors[0];
    let (reason, message) = broken.accepted.clone().expect_err("invalid");
    assert_eq!(reason, "Invalid");
    assert!(
        message.starts_with("spec.credentials[0].format: "),
        "{message}"
    );
    assert_eq!(broken.resolved_refs, None);

    // No key anywhere.
    assert!(!format!("{statuses:?}").contains("sk-unit-test"));
}

#[test]
fn rendered_entries_name_the_xbackend_and_keep_transition_times() {
    let statuses = statuses();
    let newer = &statuses["newer"];
    let first = render_ancestors(newer, &[], "2024-01-01T00:00:00Z");
    let value = serde_json::to_value(&first).expect("JSON");
    assert_eq!(
        value[0]["ancestorRef"],
        serde_json::json!({"group": "gateway.networking.x-k8s.io", "kind": "XBackend",
                           "name": "api", "namespace": "demo"})
    );
    assert_eq!(value[0]["controllerName"], CONTROLLER_NAME);
    let types: Vec<&str> = first[0]
        .conditions
        .iter()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(types, ["Accepted", "ResolvedRefs"]);
    assert_eq!(first[0].conditions[0].observed_generation, Some(3));

    // ResolvedRefs turns True later: only its time moves.
    let mut fixed = newer.clone();
    fixed.ancestors[0].resolved_refs = Some(Ok(()));
    let later = render_ancestors(&fixed, &first, "2024-01-01T00:05:00Z");
    let times: Vec<&str> = (later[0].conditions.iter())
        .map(|c| c.last_transition_time.as_str())
        .collect();
    assert_eq!(times, ["2024-01-01T00:00:00Z", "2024-01-01T00:05:00Z"]);
    // Unchanged: the same entries, so nothing is written.
    assert_eq!(
        render_ancestors(&fixed, &later, "2024-01-02T00:00:00Z"),
        later
    );
}
