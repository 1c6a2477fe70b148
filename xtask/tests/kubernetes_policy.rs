//! BackendPolicy on Kubernetes (`redirector run --kubernetes`), end to end: the agent's
//! kube-rs client against `fakeapi`, real eBPF, two pods of namespace `demo` in
//! kubelet-style cgroups (service accounts `chat` and `batch`) sending plaintext HTTP with
//! curl through the pod's network namespace, and nginx echoing the `Authorization`
//! header it received over the TLS the proxy originates.
//!
//! One agent for the whole story: the key from a Secret arrives (replacing the client's
//! own, HTTP/1.1 and h2), a `serviceAccounts` rule lets `chat` through and refuses
//! `batch` (403), the Secret is rotated (the next request has the new key) and deleted
//! (503 and `ResolvedRefs=False`), credentials on a Backend without TLS are not accepted,
//! the newer of two policies is `Conflicted`, the key is in no status, log or metric,
//! and only the referenced Secret was ever asked for. A second test: a cluster without
//! the CRD. Each step waits for a line the agent or `fakeapi` prints.

mod support;

use serde_json::Value;
use support::{
    Bed,
    curl::{Response, curl_from},
    fakeapi::FakeApi,
    fixtures::xbackend,
    nginx::{Nginx, Site},
    tls::{API_HOST, API_PORT, ApiBackend, Ca},
};
use xtask::netlab::{Cgroup, agent::Agent};

const NODE: &str = "node1";
const UID_CHAT: &str = "0c0c0c0c-1111-4111-8111-cccccccccccc";
const UID_BATCH: &str = "0d0d0d0d-2222-4222-8222-dddddddddddd";
/// nginx, cleartext, for the Backend without TLS.
const PLAIN_PORT: u16 = 8081;
const POLICIES: &str = "/apis/policy.redirector.dev/v1alpha1/backendpolicies";

const KEY: &str = "sk-k8s-first";
const ROTATED: &str = "sk-k8s-second";

/// Every site answers `/echo/...` with the `Authorization` header nginx received.
const ECHO: &str = r#"location /echo/ { return 200 "authorization=$http_authorization\n"; }"#;

fn pods() -> String {
    let pod = |name: &str, uid: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: demo, uid: {uid}}}\n\
             spec: {{nodeName: {NODE}, serviceAccountName: {name}, containers: [{{name: app, image: app}}]}}\n"
        )
    };
    [pod("chat", UID_CHAT), pod("batch", UID_BATCH)].join("---\n")
}

fn policy(name: &str, target: &str, spec: &str) -> String {
    format!(
        "apiVersion: policy.redirector.dev/v1alpha1\nkind: BackendPolicy\n\
         metadata: {{name: {name}, namespace: demo}}\nspec:\n  targetRefs:\n    \
         - {{group: gateway.networking.x-k8s.io, kind: XBackend, name: {target}}}\n{spec}"
    )
}

const CREDENTIALS: &str = r#"  credentials:
    - header: Authorization
      valueFrom: {secretKeyRef: {name: api-key, key: token}}
      format: "Bearer {value}"
"#;

/// Only the `chat` service account may call.
const CHAT_ONLY: &str = "  rules:\n    - sources: {serviceAccounts: [chat]}\n";

fn secret(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: api-key, namespace: demo}}\n\
         stringData: {{token: {value}}}\n"
    )
}

/// `demo/api` (HTTP, TLS originated to nginx) and `demo/plain` (HTTP, `tls.mode: None`).
fn backends(ca: &Ca) -> String {
    let api = ApiBackend {
        protocol: "HTTP",
        ..ApiBackend::server_only(ca)
    };
    let plain = xbackend("demo", "plain", "echo.redirector.test", PLAIN_PORT.into());
    format!(
        "{}---\n{plain}  protocol: HTTP\n  tls: {{mode: None}}\n",
        api.yaml()
    )
}

/// Field order is drop order: the agent first, the namespaces last.
struct PolicyBed {
    agent: Agent,
    api: FakeApi,
    chat: Cgroup,
    batch: Cgroup,
    _kubepods: Cgroup,
    bed: Bed,
}

impl PolicyBed {
    /// The API holds `objects`, this node's two pods and `secret` (as `secret`, to be
    /// replaced or deleted alone) before the agent starts; with `crd: false`
    /// BackendPolicies are not served.
    fn new(objects: &str, secret: Option<&str>, crd: bool) -> PolicyBed {
        let bed = Bed::new("");
        let kubepods = bed.topo.pod_cgroup.child("kubepods").expect("kubepods");
        let chat = kubepods.child(&format!("pod{UID_CHAT}")).expect("chat");
        let batch = kubepods.child(&format!("pod{UID_BATCH}")).expect("batch");
        let mut api = FakeApi::start(&bed.topo.node, &format!("{objects}---\n{}", pods()));
        if let Some(secret) = secret {
            api.apply("secret", secret);
            api.wait_for("event ADDED secrets demo/");
        }
        if !crd {
            api.hide("backendpolicies");
        }
        let mut config = bed.config();
        // Pods' own cgroups below the attached one, as the kubelet makes them; the
        // default per-namespace scoping, since the API knows these pods.
        config.in_pod_cgroup = false;
        config.extra_args = api.agent_args(NODE);
        let agent = Agent::start(&bed.topo, &config).expect("agent");
        PolicyBed {
            agent,
            api,
            chat,
            batch,
            _kubepods: kubepods,
            bed,
        }
    }

    fn curl(&self, from: &Cgroup, args: &[&str]) -> Response {
        curl_from(&self.bed.topo, from, args)
    }

    fn catalogs_applied(&self) -> usize {
        (self.agent.logs().iter())
            .filter(|l| l.contains("Backends applied"))
            .count()
    }

    /// Waits until the agent has applied more than `before` catalogs.
    fn wait_for_catalog(&mut self, before: usize) {
        while self.catalogs_applied() <= before {
            (self.agent.wait_for_log("Backends applied")).expect("a catalog applied");
        }
    }

    /// The first status PATCH of BackendPolicy `demo/{name}` after the first `before`
    /// PATCHes (of any object), waiting for it.
    fn policy_patch(&mut self, before: usize, name: &str) -> Value {
        let path = format!(
            "/apis/policy.redirector.dev/v1alpha1/namespaces/demo/backendpolicies/{name}/status"
        );
        let mut seen = before;
        loop {
            let patches = self.api.wait_for_status_patches(seen);
            if let Some(found) = patches.iter().find(|p| p["path"] == path) {
                return found.clone();
            }
            seen += patches.len();
        }
    }
}

/// This controller's only `status.ancestors` entry of a patch, for XBackend `demo/api`
/// or another `backend`.
fn ancestor<'a>(patch: &'a Value, backend: &str) -> &'a Value {
    let ancestors = (patch["body"]["status"]["ancestors"].as_array())
        .unwrap_or_else(|| panic!("no status.ancestors: {patch}"));
    assert_eq!(ancestors.len(), 1, "{patch}");
    let entry = &ancestors[0];
    assert_eq!(
        entry["controllerName"], "redirector.dev/node-agent",
        "{patch}"
    );
    assert_eq!(
        entry["ancestorRef"],
        serde_json::json!({"group": "gateway.networking.x-k8s.io", "kind": "XBackend",
                           "name": backend, "namespace": "demo"}),
        "{patch}"
    );
    entry
}

/// `(status, reason, message)` of condition `type_` of the only ancestor.
fn condition(patch: &Value, backend: &str, type_: &str) -> (String, String, String) {
    let conditions = ancestor(patch, backend)["conditions"].as_array().cloned();
    let found = (conditions.into_iter().flatten())
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} in {patch}"));
    let text = |name: &str| found[name].as_str().unwrap_or_default().to_owned();
    (text("status"), text("reason"), text("message"))
}

fn echoed(response: &Response) -> String {
    response.assert_status(200);
    response.text().trim_end().to_owned()
}

#[test]
fn policies_from_the_api_inject_keys_from_referenced_secrets_and_write_status() {
    let ca = Ca::new("policy CA");
    let leaf = ca.server(&[API_HOST]);
    let objects = [
        backends(&ca),
        policy("keys", "api", &format!("{CREDENTIALS}{CHAT_ONLY}")),
        policy("plaintext", "plain", CREDENTIALS),
    ];
    let mut t = PolicyBed::new(&objects.join("---\n"), Some(&secret(KEY)), true);
    let sites = [
        Site {
            extra: ECHO,
            ..Site::tls(API_PORT, API_HOST, &leaf)
        },
        Site {
            extra: ECHO,
            ..Site::plain(PLAIN_PORT)
        },
    ];
    let _nginx = Nginx::start(&t.bed.topo.ext, &sites);

    // Status: accepted with its Secret resolved; credentials on the Backend without TLS
    // not accepted, the reason naming the field.
    let keys = t.policy_patch(0, "keys");
    let states = ["Accepted", "ResolvedRefs"].map(|c| condition(&keys, "api", c).0);
    assert_eq!(states, ["True", "True"], "{keys}");
    // Server-side apply of the status subresource, as for XBackends.
    assert_eq!(keys["query"]["fieldManager"], "redirector", "{keys}");
    let plaintext = t.policy_patch(0, "plaintext");
    let (state, reason, message) = condition(&plaintext, "plain", "Accepted");
    assert_eq!(
        (state.as_str(), reason.as_str()),
        ("False", "Invalid"),
        "{plaintext}"
    );
    assert!(
        message.starts_with("spec.credentials: ") && message.contains("does not originate TLS"),
        "{message}"
    );

    // The key arrives though the pod never had it, and replaces the client's own.
    let url = format!("http://{API_HOST}:{API_PORT}/echo/x");
    let bearer = |key: &str| format!("authorization=Bearer {key}");
    assert_eq!(echoed(&t.curl(&t.chat, &["--http1.1", &url])), bearer(KEY));
    let own = [
        "--http2-prior-knowledge",
        "-H",
        "Authorization: Bearer mine",
        &url,
    ];
    assert_eq!(echoed(&t.curl(&t.chat, &own)), bearer(KEY));
    // The other service account matches no rule: 403, nothing upstream.
    let refused = t.curl(&t.batch, &["--http1.1", &url]);
    refused.assert_status(403);
    let denied = t.agent.wait_for_log("matches no rule").expect("logged");
    assert!(denied.contains("demo/batch"), "{denied}");
    // The Backend without TLS gets nothing added.
    let plain = format!("http://echo.redirector.test:{PLAIN_PORT}/echo/x");
    let plain_args = ["--http1.1", "-H", "Authorization: mine", &plain];
    assert_eq!(echoed(&t.curl(&t.chat, &plain_args)), "authorization=mine");

    // Rotated: the next request has the new key, no restart.
    let before = t.catalogs_applied();
    t.api.apply("secret", &secret(ROTATED));
    t.api.wait_for("event MODIFIED secrets demo/api-key");
    t.wait_for_catalog(before);
    assert_eq!(
        echoed(&t.curl(&t.chat, &["--http1.1", &url])),
        bearer(ROTATED)
    );

    // Deleted: 503, never sent without the key; ResolvedRefs=False.
    let patches = t.api.status_patches().len();
    let before = t.catalogs_applied();
    t.api.delete("secret");
    t.api.wait_for("event DELETED secrets demo/api-key");
    t.wait_for_catalog(before);
    let refused = t.curl(&t.chat, &["--http1.1", &url]);
    refused.assert_status(503);
    assert!(
        refused.text().contains("Secret demo/api-key not found"),
        "{}",
        refused.text()
    );
    let unresolved = t.policy_patch(patches, "keys");
    let (state, reason, message) = condition(&unresolved, "api", "ResolvedRefs");
    assert_eq!(
        (state.as_str(), reason.as_str()),
        ("False", "InvalidSecretRef")
    );
    assert_eq!(message, "Secret demo/api-key not found");
    assert_eq!(condition(&unresolved, "api", "Accepted").0, "True");

    // A newer policy setting the same header on the same Backend: Conflicted.
    let patches = t.api.status_patches().len();
    t.api.apply("newer", &policy("z-newer", "api", CREDENTIALS));
    let newer = t.policy_patch(patches, "z-newer");
    let (state, reason, message) = condition(&newer, "api", "Accepted");
    assert_eq!(
        (state.as_str(), reason.as_str()),
        ("False", "Conflicted"),
        "{newer}"
    );
    assert!(
        message.starts_with("spec.credentials[0].header: ") && message.contains("demo/keys"),
        "{message}"
    );

    // Only the referenced Secret was asked for, by name, in its namespace.
    let lines = t.api.lines();
    let secrets: Vec<&String> = lines.iter().filter(|l| l.contains("/secrets")).collect();
    assert!(
        secrets.iter().any(|l| l.starts_with("watch ")),
        "{lines:#?}"
    );
    for line in secrets
        .iter()
        .filter(|l| l.starts_with("list ") || l.starts_with("watch "))
    {
        assert!(
            line.contains("/api/v1/namespaces/demo/secrets?")
                && line.contains("fieldSelector=metadata.name=api-key"),
            "{line}"
        );
    }
    // The key is nowhere but on the wire to the upstream.
    let written = format!("{:?}", t.api.status_patches());
    for text in [t.agent.logs().join("\n"), written] {
        assert!(!text.contains("sk-k8s"), "a key leaked: {text}");
    }
}

#[test]
fn a_cluster_without_the_policy_crd_runs_its_backends_and_takes_policies_once_it_is_served() {
    let ca = Ca::new("no CRD CA");
    let mut t = PolicyBed::new(&backends(&ca), None, false);
    // Ready with its Backends although the policies' list is answered 404.
    assert!(
        t.agent.ready_line.contains("backends=2"),
        "{}",
        t.agent.ready_line
    );
    let warned = (t.agent.logs().into_iter())
        .find(|l| l.contains("serves no BackendPolicies"))
        .unwrap_or_else(|| panic!("{:#?}", t.agent.logs()));
    assert!(warned.contains("redirector crd"), "{warned}");

    // The CRD appears, then a policy: applied without a restart.
    t.api.unhide("backendpolicies");
    t.api.apply("policy", &policy("rules", "api", CHAT_ONLY));
    t.api.wait_for("event ADDED backendpolicies demo/rules");
    let applied = t
        .agent
        .wait_for_log("BackendPolicy applied")
        .expect("applied");
    assert!(applied.contains("demo/rules"), "{applied}");
    let _ = t.api.wait_for_request("watch", POLICIES, &[]);
}
