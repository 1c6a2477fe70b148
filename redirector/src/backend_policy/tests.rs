use std::sync::Arc;

use http::Method;

use super::model::BackendPolicyDoc;
use super::*;

fn parse(yaml: &str) -> Result<BackendPolicy, Vec<PolicyError>> {
    let doc: BackendPolicyDoc = serde_yaml_ng::from_str(yaml).unwrap();
    validate("ai", "openai", doc)
}

fn fields(errors: Vec<PolicyError>) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

const GOOD: &str = r#"
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: openai}]
  credentials:
    - header: Authorization
      valueFrom: {secretKeyRef: {name: openai-key, key: token}}
      format: "Bearer {value}"
  rules:
    - methods: [POST]
      paths: [{type: PathPrefix, value: /v1/}, {type: Exact, value: /health}]
      sources: {serviceAccounts: [chat], cgroups: [/app.slice/chat.service]}
"#;

#[test]
fn a_valid_policy_is_read_whole() {
    let policy = parse(GOOD).unwrap();
    assert_eq!(policy.targets, ["openai"]);
    let credential = &policy.credentials[0];
    assert_eq!(credential.header.as_str(), "authorization");
    assert_eq!(
        (credential.prefix.as_str(), credential.suffix.as_str()),
        ("Bearer ", "")
    );
    let rule = &policy.rules.as_ref().unwrap()[0];
    assert_eq!(rule.methods, Some(vec![Method::POST]));
    let paths = rule.paths.as_ref().unwrap();
    assert_eq!(paths[0], PathMatch::Prefix("/v1".into()));
    assert_eq!(
        rule.sources.as_ref().unwrap().cgroups,
        ["app.slice/chat.service"]
    );
}

#[test]
fn invalid_fields_are_each_named() {
    let yaml = r#"
spec:
  targetRefs: [{group: example.com, kind: Service, name: x}]
  credentials:
    - {header: "Bad Name", valueFrom: {secretKeyRef: {name: s, key: k}}}
    - {header: Host, valueFrom: {secretKeyRef: {name: s, key: k}}}
    - {header: ":authority", valueFrom: {secretKeyRef: {name: s, key: k}}}
    - {header: Connection, valueFrom: {secretKeyRef: {name: s, key: k}}}
    - {header: X-Key, valueFrom: {secretKeyRef: {name: s, key: k}}, format: "{value}{value}"}
    - {header: X-Other, valueFrom: {secretKeyRef: {name: s, key: k}}, format: "none"}
  rules:
    - methods: ["GE T"]
      paths: [{type: Exact, value: v1}]
      sources: {cgroups: [a/../b]}
  mcp: {tools: {allow: [search, ""]}}
"#;
    let got = fields(parse(yaml).unwrap_err());
    let want = [
        "spec.targetRefs[0].group",
        "spec.targetRefs[0].kind",
        "spec.credentials[0].header",
        "spec.credentials[1].header",
        "spec.credentials[2].header",
        "spec.credentials[3].header",
        "spec.credentials[4].format",
        "spec.credentials[5].format",
        "spec.rules[0].methods[0]",
        "spec.rules[0].paths[0].value",
        "spec.rules[0].sources.cgroups[0]",
        "spec.mcp.tools.allow[1]",
    ];
    for field in want {
        assert!(
            got.iter().any(|e| e.starts_with(&format!("{field}: "))),
            "{field} in {got:#?}"
        );
    }
    assert_eq!(got.len(), want.len(), "{got:#?}");
}

fn attach_one(
    policy: &BackendPolicy,
    facts: Option<TargetFacts>,
    secret: Option<&'static [u8]>,
) -> Attachment {
    attach(
        &[Arc::new(policy.clone())],
        |_, _| facts,
        |_, _, _| match secret {
            Some(bytes) => SecretLookup::Found(bytes),
            None => SecretLookup::NoSecret,
        },
    )
}

const TLS_HTTP: TargetFacts = TargetFacts {
    originates_tls: true,
    speaks_http: true,
    speaks_mcp: false,
};

#[test]
fn credentials_need_a_tls_http_backend() {
    let policy = parse(GOOD).unwrap();
    for facts in [
        TargetFacts {
            originates_tls: false,
            ..TLS_HTTP
        },
        TargetFacts {
            speaks_http: false,
            ..TLS_HTTP
        },
    ] {
        let attached = attach_one(&policy, Some(facts), Some(b"k"));
        assert!(attached.applied.is_empty());
        let fields: Vec<_> = attached.rejected.iter().map(|r| r.error.field()).collect();
        assert!(fields.contains(&Some("spec.credentials")), "{fields:?}");
        // Rules need requests to judge.
        assert_eq!(fields.contains(&Some("spec.rules")), !facts.speaks_http);
    }
    let unknown = attach_one(&policy, None, Some(b"k"));
    assert_eq!(
        unknown.rejected[0].error.field(),
        Some("spec.targetRefs[0].name")
    );
}

#[test]
fn credential_values_are_formatted_and_redacted() {
    let policy = parse(GOOD).unwrap();
    let attached = attach_one(&policy, Some(TLS_HTTP), Some(b"sk-123"));
    let applied = &attached.applied[&("ai".to_owned(), "openai".to_owned())];
    let headers = applied.credentials.as_ref().unwrap();
    assert_eq!(headers[0].1.value(), "Bearer sk-123");
    assert!(headers[0].1.value().is_sensitive());
    let debug = format!("{applied:?}");
    assert!(
        debug.contains("<redacted>") && !debug.contains("sk-123"),
        "{debug}"
    );
}

#[test]
fn a_missing_or_unusable_secret_leaves_the_policy_unresolved() {
    let policy = parse(GOOD).unwrap();
    let key = ("ai".to_owned(), "openai".to_owned());
    for secret in [None, Some(&b"line\n"[..])] {
        let attached = attach_one(&policy, Some(TLS_HTTP), secret);
        let credentials = &attached.applied[&key].credentials;
        assert!(
            matches!(credentials, Err(PolicyError::Unresolved(_))),
            "{credentials:?}"
        );
    }
}

/// Policies on one Backend, `secret` resolving every key to `k`.
fn attach_all(policies: Vec<BackendPolicy>) -> Attachment {
    let policies: Vec<_> = policies.into_iter().map(Arc::new).collect();
    attach(
        &policies,
        |_, _| Some(TLS_HTTP),
        |_, _, _| SecretLookup::Found(b"k"),
    )
}

#[test]
fn the_oldest_policy_wins_each_field_the_others_are_conflicted() {
    let first = parse(GOOD).unwrap();
    let later = BackendPolicy {
        name: "zz-later".into(),
        ..first.clone()
    };
    let attached = attach_all(vec![later.clone(), first.clone()]);
    let applied = &attached.applied[&("ai".to_owned(), "openai".to_owned())];
    assert_eq!(applied.policy, "ai/openai, ai/zz-later");
    let conflicts: Vec<_> = (attached.rejected.iter())
        .map(|r| (r.policy.as_str(), r.error.field().unwrap_or_default()))
        .collect();
    assert_eq!(
        conflicts,
        [
            ("ai/zz-later", "spec.credentials[0].header"),
            ("ai/zz-later", "spec.rules")
        ]
    );
    assert!(matches!(
        attached.rejected[0].error,
        PolicyError::Conflicted { .. }
    ));
    // A creation time makes a policy older than those without one (directory mode).
    let dated = BackendPolicy {
        created: Some("2026-01-01T00:00:00Z".into()),
        ..later
    };
    let attached = attach_all(vec![first, dated]);
    assert_eq!(attached.rejected[0].policy, "ai/openai");
}

#[test]
fn policies_setting_different_fields_merge() {
    let good = parse(GOOD).unwrap();
    let keys = BackendPolicy {
        rules: None,
        ..good.clone()
    };
    let rules = BackendPolicy {
        name: "rules".into(),
        credentials: Vec::new(),
        ..good.clone()
    };
    let attached = attach_all(vec![keys, rules]);
    assert_eq!(attached.rejected, []);
    let applied = &attached.applied[&("ai".to_owned(), "openai".to_owned())];
    assert_eq!(applied.credentials.as_ref().map(Vec::len), Ok(1));
    assert_eq!(applied.rules, good.rules);
}

fn facts<'a>(method: &'a Method, path: &'a str, cgroup: &'a str) -> RequestFacts<'a> {
    RequestFacts {
        method,
        path,
        cgroup,
        namespace: None,
        service_account: None,
    }
}

#[test]
fn rules_match_method_path_and_source() {
    let policy = parse(GOOD).unwrap();
    let attached = attach_one(&policy, Some(TLS_HTTP), Some(b"k"));
    let applied = &attached.applied[&("ai".to_owned(), "openai".to_owned())];
    let chat = "/app.slice/chat.service";
    let allowed = |m: &Method, p: &str, c: &str| applied.allows(&facts(m, p, c));
    assert!(allowed(&Method::POST, "/v1/chat", chat));
    assert!(
        allowed(&Method::POST, "/v1", chat),
        "prefix /v1/ matches /v1"
    );
    assert!(allowed(&Method::POST, "/health", chat));
    assert!(allowed(
        &Method::POST,
        "/v1/x",
        "/app.slice/chat.service/worker"
    ));
    assert!(!allowed(&Method::GET, "/v1/chat", chat), "method");
    assert!(!allowed(&Method::POST, "/v1x", chat), "segment boundary");
    assert!(!allowed(&Method::POST, "/health/x", chat), "exact");
    assert!(
        !allowed(&Method::POST, "/v1/../admin", chat),
        "dot segments"
    );
    assert!(
        !allowed(&Method::POST, "/v1/%2e%2e/admin", chat),
        "encoded dots"
    );
    assert!(!allowed(
        &Method::POST,
        "/v1/chat",
        "/app.slice/chat.service2"
    ));
    assert!(!allowed(&Method::POST, "/v1/chat", "/other.slice"));
    let by_account = RequestFacts {
        namespace: Some("ai"),
        service_account: Some("chat"),
        ..facts(&Method::POST, "/v1/chat", "/kubepods/pod1")
    };
    assert!(applied.allows(&by_account));
    let other_namespace = RequestFacts {
        namespace: Some("web"),
        ..by_account
    };
    assert!(!applied.allows(&other_namespace));
}

#[test]
fn no_rules_allow_everything() {
    let mut policy = parse(GOOD).unwrap();
    policy.rules = None;
    let attached = attach_one(&policy, Some(TLS_HTTP), Some(b"k"));
    let applied = &attached.applied[&("ai".to_owned(), "openai".to_owned())];
    assert!(applied.allows(&facts(&Method::DELETE, "/anything", "/")));
}

const MCP_TOOLS: &str = r#"
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: openai}]
  mcp: {tools: {allow: [search, fetch]}}
"#;

#[test]
fn mcp_tools_apply_to_mcp_backends_only() {
    let policy = parse(MCP_TOOLS).unwrap();
    let tools = policy.mcp_tools.as_ref().unwrap();
    assert!(tools.allows("search") && tools.allows("fetch"));
    assert!(!tools.allows("delete") && !tools.allows("Search"));
    let mcp = TargetFacts {
        speaks_mcp: true,
        ..TLS_HTTP
    };
    let attached = attach_one(&policy, Some(mcp), None);
    assert_eq!(attached.rejected, []);
    let applied = &attached.applied[&("ai".to_owned(), "openai".to_owned())];
    assert_eq!(applied.mcp_tools.as_ref(), Some(tools));
    let http = attach_one(&policy, Some(TLS_HTTP), None);
    assert!(http.applied.is_empty());
    let fields: Vec<_> = http.rejected.iter().map(|r| r.error.field()).collect();
    assert_eq!(fields, [Some("spec.mcp")]);
    // `mcp` that says nothing is a mistake, not "every tool".
    let empty = parse(&MCP_TOOLS.replace("{tools: {allow: [search, fetch]}}", "{}"));
    assert_eq!(fields_of(empty), ["spec.mcp.tools: required"]);
}

fn fields_of(result: Result<BackendPolicy, Vec<PolicyError>>) -> Vec<String> {
    fields(result.unwrap_err())
}

#[test]
fn the_oldest_policy_wins_the_mcp_tools() {
    let first = parse(MCP_TOOLS).unwrap();
    let later = BackendPolicy {
        name: "zz-later".into(),
        mcp_tools: Some(ToolAllowList::new(["delete".to_owned()])),
        ..first.clone()
    };
    let policies = [Arc::new(later), Arc::new(first.clone())];
    let mcp = TargetFacts {
        speaks_mcp: true,
        ..TLS_HTTP
    };
    let attached = attach(
        &policies,
        |_, _| Some(mcp),
        |_, _, _| SecretLookup::NoSecret,
    );
    let applied = &attached.applied[&("ai".to_owned(), "openai".to_owned())];
    assert_eq!(applied.mcp_tools, first.mcp_tools);
    let conflicts: Vec<_> = (attached.rejected.iter())
        .map(|r| (r.policy.as_str(), r.error.field().unwrap_or_default()))
        .collect();
    assert_eq!(conflicts, [("ai/zz-later", "spec.mcp.tools")]);
}
