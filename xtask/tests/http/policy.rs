//! BackendPolicy in directory mode, one agent for all of it: nginx echoes the
//! `Authorization` it received; `demo/api` (TLS originated) gets a key from a Secret the
//! pod never had, `demo/other` (TLS originated) lets through only what its rules allow,
//! and `demo/plain` (no TLS) has a policy with credentials that is not accepted.

use std::path::Path;

use super::{
    API_BACKEND, API_HOST, ERRORS, HttpBackend, HttpBed, OTHER_BACKEND, OTHER_HOST, PLAIN_PORT,
    TLS_H1_PORT, TLS_PORT, url,
};
use xtask::netlab::agent::redirector;

use crate::support::{
    curl::{self, Response},
    fixtures::admin_get,
    nginx::{Nginx, Site},
    tls::Ca,
};

/// Every site answers `/echo/...` with the `Authorization` header nginx received.
const ECHO: &str = r#"location /echo/ { return 200 "authorization=$http_authorization\n"; }"#;

const KEY: &str = "sk-test-first";
const ROTATED: &str = "sk-test-second";

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

const RULES: &str = r#"  rules:
    - methods: [GET]
      paths: [{type: PathPrefix, value: /echo/public}]
    - paths: [{type: Exact, value: /echo/app}]
      sources: {cgroups: [app]}
"#;

fn secret(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: api-key, namespace: demo}}\n\
         stringData: {{token: {value}}}\n"
    )
}

/// Replaces `name` in `dir` at once (a rename), so the watcher never reads half of it.
fn write_atomically(dir: &Path, name: &str, text: &str) {
    let temporary = dir.join(format!("{name}.tmp"));
    std::fs::write(&temporary, text).expect("write");
    std::fs::rename(&temporary, dir.join(name)).expect("rename");
}

fn echoed(response: &Response) -> String {
    response.assert_status(200);
    response.text().trim_end().to_owned()
}

#[test]
fn backend_policy_injects_keys_and_enforces_rules() {
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST, OTHER_HOST]);
    let plain = HttpBackend::plain(PLAIN_PORT, "HTTP");
    let backends = [
        HttpBackend::api(TLS_PORT, "HTTP", Some(&ca)).yaml(),
        HttpBackend::other(TLS_H1_PORT, "HTTP", Some(&ca)).yaml(),
        plain.yaml(),
        policy("keys", "api", CREDENTIALS),
        policy("rules", "other", RULES),
        policy("plaintext", "plain", CREDENTIALS),
    ];
    let mut t = HttpBed::new(&backends.join("---\n"), &[]);
    let dir = t.bed.backends.path().to_path_buf();
    write_atomically(&dir, "secret.yaml", &secret(KEY));
    t.agent.wait_for_log("Backends applied").expect("reload");
    let sites = [
        Site {
            extra: ECHO,
            ..Site::tls(TLS_PORT, API_HOST, &leaf)
        },
        Site {
            extra: ECHO,
            http2: false,
            ..Site::tls(TLS_H1_PORT, OTHER_HOST, &leaf)
        },
        Site {
            extra: ECHO,
            ..Site::plain(PLAIN_PORT)
        },
    ];
    let _nginx = Nginx::start(&t.bed.topo.ext, &sites);

    // The key arrives though the pod never had it, and replaces the client's own.
    let api = url(API_HOST, TLS_PORT, "/echo/x");
    let bearer = |key: &str| format!("authorization=Bearer {key}");
    assert_eq!(echoed(&t.curl(&["--http1.1", &api])), bearer(KEY));
    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        let own = t.curl(&[flag, "-H", "Authorization: Bearer mine", &api]);
        assert_eq!(echoed(&own), bearer(KEY), "{flag}");
    }
    // Naming it hop-by-hop does not take it off.
    let listed = [
        "--http1.1",
        "-H",
        "Connection: keep-alive, Authorization",
        &api,
    ];
    assert_eq!(echoed(&t.curl(&listed)), bearer(KEY));

    // The policy on the Backend without TLS is not applied: nothing is added.
    let plain_url = url("echo.redirector.test", PLAIN_PORT, "/echo/x");
    let response = t.curl(&["--http1.1", "-H", "Authorization: mine", &plain_url]);
    assert_eq!(echoed(&response), "authorization=mine");
    let check = redirector(&["check", &dir.display().to_string()]).expect("check");
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    assert!(
        lines[0].contains("BackendPolicy demo/plaintext: spec.credentials: not accepted")
            && lines[0].contains("does not originate TLS"),
        "{stdout}"
    );
    let logs = t.agent.logs().join("\n");
    assert!(
        logs.contains("BackendPolicy not applied") && logs.contains("demo/plaintext"),
        "{logs}"
    );

    // Rules: method, path (segment boundaries) and source cgroup.
    let other = |path: &str| url(OTHER_HOST, TLS_H1_PORT, path);
    t.curl(&[&other("/echo/public/a")]).assert_status(200);
    t.curl(&["-X", "POST", &other("/echo/public/a")])
        .assert_status(403);
    t.curl(&[&other("/echo/publicity")]).assert_status(403);
    let denied = t.curl(&[&other("/echo/app")]);
    denied.assert_status(403);
    assert!(
        denied.text().contains("matches no rule"),
        "{}",
        denied.text()
    );
    let app = t.bed.topo.pod_cgroup.child("app").expect("app cgroup");
    let from_app = curl::curl_from(&t.bed.topo, &app, &[&other("/echo/app")]);
    assert_eq!(echoed(&from_app), "authorization=");
    let reason = [("backend", OTHER_BACKEND), ("reason", "policy_denied")];
    t.assert_sample(ERRORS, &reason, 3.0);
    let log = t.wait_for_access_log(6);
    let refused = log
        .iter()
        .find(|line| line["status"] == 403 && line["method"] == "POST")
        .unwrap_or_else(|| panic!("a 403 POST in {log:#?}"));
    assert_eq!(refused["path"], "/echo/public/a", "{refused}");
    let warned = t.agent.wait_for_log("matches no rule").expect("logged");
    assert!(warned.contains("source=/"), "{warned}");

    // A rotated Secret applies to the next request, without a restart.
    write_atomically(&dir, "secret.yaml", &secret(ROTATED));
    t.agent.wait_for_log("Backends applied").expect("reload");
    assert_eq!(echoed(&t.curl(&["--http1.1", &api])), bearer(ROTATED));

    // The Secret deleted: 503, never sent without the key.
    std::fs::remove_file(dir.join("secret.yaml")).expect("remove");
    t.agent.wait_for_log("Backends applied").expect("reload");
    let refused = t.curl(&["--http1.1", &api]);
    refused.assert_status(503);
    assert!(
        refused.text().contains("Secret demo/api-key not found"),
        "{}",
        refused.text()
    );
    let reason = [("backend", API_BACKEND), ("reason", "policy_unresolved")];
    t.assert_sample(ERRORS, &reason, 1.0);

    // `/backends` names the policy and why the Backend's requests are refused.
    let backends_json = admin_get(&t.bed.topo.node, "/backends");
    let rows: serde_json::Value = serde_json::from_slice(&backends_json.stdout).expect("JSON");
    let row = (rows.as_array().into_iter().flatten())
        .find(|row| row["name"] == API_BACKEND)
        .unwrap_or_else(|| panic!("{API_BACKEND} in {rows}"));
    assert_eq!(row["policy"], "demo/keys", "{row}");
    assert_eq!(row["state"], "RefError", "{row}");
    let reason = row["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("Secret demo/api-key not found"), "{row}");

    // The key is nowhere but on the wire to the upstream.
    let seen = [
        t.agent.logs().join("\n"),
        t.metrics(),
        String::from_utf8_lossy(&backends_json.stdout).into_owned(),
        format!("{log:?}"),
    ];
    for text in seen {
        assert!(!text.contains("sk-test"), "a key leaked: {text}");
    }
}
