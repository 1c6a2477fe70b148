//! The install's RBAC as the API server's RBAC authorizer applies it to the agent's
//! ServiceAccount, the agent's requests as `fakeapi` logs them, and a reviewed list of
//! every grant (scope, group/resource, names, verb): a change of the RBAC must change the
//! list too. `rbac_agent.rs` runs the agent and checks its requests against the grants.

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use serde_json::Value;

use super::{
    NAMESPACE, SERVICE_ACCOUNT,
    render::{deploy_dir, identity, render},
};

/// Where a binding grants its role's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    Cluster,
    Namespace(String),
}

/// One rule of a role, as one binding grants it to the agent.
#[derive(Debug)]
pub struct Grant {
    scope: Scope,
    pub rule: PolicyRule,
    /// `ClusterRole x via ClusterRoleBinding y`, for messages.
    pub origin: String,
}

/// A request as the RBAC authorizer sees it.
#[derive(Debug, Clone)]
pub struct Request {
    pub verb: String,
    group: String,
    /// `xbackends`, or `xbackends/status` for a subresource.
    pub resource: String,
    pub namespace: Option<String>,
    /// The object's name: from the path, or for list/watch from a
    /// `metadata.name=` field selector (as the API server derives it).
    pub name: Option<String>,
    pub query: String,
    pub line: String,
}

impl Grant {
    pub fn allows(&self, request: &Request) -> bool {
        let rule = &self.rule;
        let in_scope = match &self.scope {
            Scope::Cluster => true,
            Scope::Namespace(ns) => request.namespace.as_deref() == Some(ns.as_str()),
        };
        let names = rule.resource_names.as_deref().unwrap_or_default();
        in_scope
            && (rule.api_groups.as_deref().unwrap_or_default()).contains(&request.group)
            && (rule.resources.as_deref().unwrap_or_default()).contains(&request.resource)
            && rule.verbs.contains(&request.verb)
            && (names.is_empty() || request.name.as_ref().is_some_and(|n| names.contains(n)))
    }

    /// `cluster group/resource[names] verb` for each verb and resource of the rule.
    fn describe(&self) -> Vec<String> {
        let scope = match &self.scope {
            Scope::Cluster => "cluster".to_owned(),
            Scope::Namespace(ns) => format!("namespace {ns}"),
        };
        let names = match self.rule.resource_names.as_deref() {
            Some(names) if !names.is_empty() => format!("[{}]", names.join(",")),
            _ => String::new(),
        };
        let rule = &self.rule;
        let mut out = Vec::new();
        for group in rule.api_groups.as_deref().unwrap_or_default() {
            for resource in rule.resources.as_deref().unwrap_or_default() {
                for verb in &rule.verbs {
                    out.push(format!("{scope} {group}/{resource}{names} {verb}"));
                }
            }
        }
        out
    }
}

/// Every rule granted to the agent's ServiceAccount by the bindings among `objects`. A
/// binding to anyone else, or to a role that is not there, fails the test.
pub fn grants(objects: &[Value]) -> Vec<Grant> {
    let mut grants = Vec::new();
    for binding in objects {
        let kind = binding["kind"].as_str().unwrap_or_default();
        let scope = match kind {
            "ClusterRoleBinding" => Scope::Cluster,
            "RoleBinding" => Scope::Namespace(
                binding["metadata"]["namespace"]
                    .as_str()
                    .expect("a RoleBinding's namespace")
                    .to_owned(),
            ),
            _ => continue,
        };
        let subjects = binding["subjects"].as_array().cloned().unwrap_or_default();
        let agent = serde_json::json!({
            "kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE,
        });
        assert_eq!(
            subjects,
            [agent],
            "{}: bound to the agent only",
            identity(binding)
        );
        let role_ref = &binding["roleRef"];
        let role_name = role_ref["name"].as_str().unwrap_or_default();
        let role = objects
            .iter()
            .find(|o| {
                o["kind"] == role_ref["kind"]
                    && o["metadata"]["name"] == role_name
                    && (o["kind"] == "ClusterRole"
                        || o["metadata"]["namespace"] == binding["metadata"]["namespace"])
            })
            .unwrap_or_else(|| panic!("{}: its roleRef is not installed", identity(binding)));
        let rules = match role["kind"].as_str() {
            Some("ClusterRole") => serde_json::from_value::<ClusterRole>(role.clone())
                .unwrap()
                .rules
                .unwrap_or_default(),
            Some("Role") => serde_json::from_value::<Role>(role.clone())
                .unwrap()
                .rules
                .unwrap_or_default(),
            other => panic!("{}: roleRef kind {other:?}", identity(binding)),
        };
        for rule in rules {
            grants.push(Grant {
                scope: scope.clone(),
                rule,
                origin: format!("{} via {}", identity(role), identity(binding)),
            });
        }
    }
    grants
}

/// The request behind one line of `fakeapi`'s log, `None` for lines that are no request
/// (events, `listening`...). A request `fakeapi` does not serve is an error: the agent
/// asked for something this test cannot judge.
pub fn request(line: &str) -> Option<Result<Request>> {
    let words: Vec<&str> = line.split(' ').collect();
    // `refused create|update ...`: answered with an error, but authorized first.
    let words = match words.as_slice() {
        ["refused", rest @ ..] => rest,
        all => all,
    };
    let (verb, target) = match words {
        [verb @ ("list" | "watch" | "get" | "update"), target, ..] => (*verb, *target),
        // `create COLLECTION/NAME`: authorized on the collection, without a name.
        ["create", path, ..] => ("create", path.rsplit_once('/').map_or(*path, |(c, _)| c)),
        ["unknown", ..] => {
            return Some(Err(anyhow::anyhow!(
                "a request fakeapi does not serve: {line}"
            )));
        }
        _ if line.starts_with("{\"") => {
            let record: Value = serde_json::from_str(line).ok()?;
            if record["method"] != "PATCH" {
                return None;
            }
            let path = record["path"].as_str()?;
            return Some(parse_request("patch", path).with_context(|| line.to_owned()));
        }
        _ => return None,
    };
    Some(parse_request(verb, target).with_context(|| line.to_owned()))
}

/// `verb` on `/api/v1/...` or `/apis/GROUP/VERSION/...`, with its query.
fn parse_request(verb: &str, target: &str) -> Result<Request> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => bail!("not a resource path: {path}"),
    };
    let (namespace, rest) = match rest {
        ["namespaces", namespace, rest @ ..] if !rest.is_empty() => (Some(*namespace), rest),
        _ => (None, rest),
    };
    let (resource, name) = match rest {
        [resource] => ((*resource).to_owned(), None),
        [resource, name] => ((*resource).to_owned(), Some((*name).to_owned())),
        [resource, name, sub] => (format!("{resource}/{sub}"), Some((*name).to_owned())),
        _ => bail!("not a resource path: {path}"),
    };
    let name = match verb {
        "list" | "watch" => field_selector(query)
            .iter()
            .find_map(|t| t.strip_prefix("metadata.name="))
            .map(|n| n.trim_start_matches('=').to_owned()),
        _ => name,
    };
    Ok(Request {
        verb: verb.to_owned(),
        group: group.to_owned(),
        resource,
        namespace: namespace.map(str::to_owned),
        name,
        query: query.to_owned(),
        line: format!("{verb} {target}"),
    })
}

/// The terms of the `fieldSelector` of a (decoded) query.
pub fn field_selector(query: &str) -> Vec<&str> {
    query
        .split('&')
        .filter_map(|p| p.strip_prefix("fieldSelector="))
        .flat_map(|s| s.split(','))
        .collect()
}

#[test]
fn the_authorizer_applies_scopes_verbs_and_resource_names() {
    let yaml = format!(
        "
kind: ClusterRole
metadata: {{name: read}}
rules: [{{apiGroups: [''], resources: [configmaps], verbs: [list, watch]}}]
---
kind: ClusterRoleBinding
metadata: {{name: read}}
roleRef: {{kind: ClusterRole, name: read}}
subjects: [{{kind: ServiceAccount, name: {SERVICE_ACCOUNT}, namespace: {NAMESPACE}}}]
---
kind: Role
metadata: {{name: lease, namespace: x}}
rules:
- {{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [create]}}
- {{apiGroups: [coordination.k8s.io], resources: [leases], resourceNames: [a], verbs: [get]}}
---
kind: RoleBinding
metadata: {{name: lease, namespace: x}}
roleRef: {{kind: Role, name: lease}}
subjects: [{{kind: ServiceAccount, name: {SERVICE_ACCOUNT}, namespace: {NAMESPACE}}}]
"
    );
    let objects = super::render::documents(&yaml).unwrap();
    let grants = grants(&objects);
    let allowed = |line: &str| {
        let request = request(line).expect("a request").expect("parses");
        grants.iter().any(|g| g.allows(&request))
    };
    assert!(allowed("list /api/v1/configmaps"));
    assert!(allowed(
        "watch /api/v1/namespaces/y/configmaps?fieldSelector=metadata.name=ca&watch=true"
    ));
    assert!(!allowed("get /api/v1/namespaces/y/configmaps/ca"));
    assert!(!allowed("list /api/v1/namespaces/y/secrets"));
    let lease = "/apis/coordination.k8s.io/v1/namespaces/x/leases";
    assert!(allowed(&format!("get {lease}/a")));
    assert!(!allowed(&format!("get {lease}/b")), "resourceNames");
    assert!(!allowed(&format!("update {lease}/a rv=2")), "verb");
    assert!(!allowed(
        "get /apis/coordination.k8s.io/v1/namespaces/y/leases/a"
    ));
    assert!(!allowed("list /apis/coordination.k8s.io/v1/leases"));
    // create is authorized without a name: the resourceNames rule cannot allow it.
    assert!(allowed(&format!("create {lease}/b rv=1 holder=n")));
    assert!(allowed(&format!("refused create {lease}/a AlreadyExists")));

    let patch = r#"{"method":"PATCH","path":"/apis/gateway.networking.x-k8s.io/v1alpha1/namespaces/demo/xbackends/api/status","code":200}"#;
    let parsed = request(patch).unwrap().unwrap();
    assert_eq!(
        (
            parsed.verb.as_str(),
            parsed.resource.as_str(),
            parsed.name.as_deref()
        ),
        ("patch", "xbackends/status", Some("api"))
    );
    assert!(request("event ADDED secrets demo/api-client rv=3").is_none());
    assert!(request("unknown GET /version").unwrap().is_err());
}

/// Every grant of the install, reviewed: each is justified in a comment of
/// deploy/rbac-kubernetes-source.yaml, and the root-only test in `rbac_agent.rs` shows
/// each is used.
const REVIEWED: &[&str] = &[
    "cluster gateway.networking.x-k8s.io/xbackends get",
    "cluster gateway.networking.x-k8s.io/xbackends list",
    "cluster gateway.networking.x-k8s.io/xbackends watch",
    "cluster gateway.networking.x-k8s.io/xbackends/status patch",
    "cluster policy.redirector.dev/backendpolicies get",
    "cluster policy.redirector.dev/backendpolicies list",
    "cluster policy.redirector.dev/backendpolicies watch",
    "cluster policy.redirector.dev/backendpolicies/status patch",
    "cluster apiextensions.k8s.io/customresourcedefinitions[xbackends.gateway.networking.x-k8s.io] list",
    "cluster apiextensions.k8s.io/customresourcedefinitions[xbackends.gateway.networking.x-k8s.io] watch",
    "cluster /pods list",
    "cluster /pods watch",
    "cluster /configmaps list",
    "cluster /configmaps watch",
    "cluster /secrets list",
    "cluster /secrets watch",
    "cluster /namespaces list",
    "cluster /namespaces watch",
    "cluster /nodes list",
    "cluster /nodes watch",
    "cluster networking.k8s.io/servicecidrs list",
    "cluster networking.k8s.io/servicecidrs watch",
    "namespace redirector-system coordination.k8s.io/leases create",
    "namespace redirector-system coordination.k8s.io/leases[redirector-status-writer] get",
    "namespace redirector-system coordination.k8s.io/leases[redirector-status-writer] update",
];

#[test]
fn the_install_grants_the_agent_exactly_the_reviewed_verbs() {
    let objects = render(&deploy_dir());
    let grants = grants(&objects);
    let granted: BTreeSet<String> = grants.iter().flat_map(Grant::describe).collect();
    let reviewed: BTreeSet<String> = REVIEWED.iter().map(|g| (*g).to_owned()).collect();
    assert_eq!(granted, reviewed, "grants differ from the reviewed list");
    for grant in &grants {
        let rule = &grant.rule;
        assert!(rule.non_resource_urls.is_none(), "{}", grant.origin);
        let words = (rule.api_groups.iter().flatten())
            .chain(rule.resources.iter().flatten())
            .chain(&rule.verbs);
        assert!(
            words.clone().all(|w| !w.contains('*')),
            "{}: no wildcards",
            grant.origin
        );
    }
    // No role is installed without being bound (it would be dead weight, or a grant
    // meant for someone else).
    for role in objects
        .iter()
        .filter(|o| o["kind"].as_str().is_some_and(|k| k.ends_with("Role")))
    {
        assert!(
            grants
                .iter()
                .any(|g| g.origin.starts_with(&format!("{} via ", identity(role)))),
            "{} is bound to nobody",
            identity(role)
        );
    }
}
