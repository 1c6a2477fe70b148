//! The Kubernetes source (`redirector run --kubernetes`) end to end: the real kube-rs
//! client of the agent against `fakeapi` (a list/watch server over plain HTTP, in the
//! node's network namespace), real eBPF, a pod in its own network namespace.
//!
//! Each step waits for a line the agent or the fake API server prints (a datapath
//! update, a relist, a request), never for a fixed time.

mod support;

use support::{
    Bed, ECHO_BACKEND,
    fakeapi::{FakeApi, documents},
    fixtures::{admin_ok, other_backend, wait_for_map_update},
    tls::{API_HOST, API_TARGET, ApiBackend, Ca, TlsServer},
};
use xtask::netlab::agent::Agent;

const NODE: &str = "node1";
const XBACKENDS: &str = "/apis/gateway.networking.x-k8s.io/v1alpha1/xbackends";

/// A bed whose Backends come from the fake API server.
/// Field order is drop order: the agent first, the namespaces last.
struct KubeBed {
    agent: Agent,
    api: FakeApi,
    bed: Bed,
}

impl KubeBed {
    /// The fake API server holds `objects` (YAML) as `initial` before the agent starts.
    fn new(objects: &str) -> KubeBed {
        // No Backend files: everything comes from the API.
        let bed = Bed::new("");
        let api = FakeApi::start(&bed.topo.node, objects);
        // The source is under test here, not per-namespace scoping.
        let config = bed.kube_config(api.agent_args(NODE));
        let agent = Agent::start(&bed.topo, &config).expect("agent");
        KubeBed { agent, api, bed }
    }

    /// Connects from the pod; true if the connection went through the proxy.
    fn via_proxy(&self, target: &str) -> bool {
        self.bed.via_proxy(target)
    }

    /// How many catalogs the agent has applied so far.
    fn catalogs_applied(&self) -> usize {
        let logs = self.agent.logs();
        logs.iter()
            .filter(|l| l.contains("Backends applied"))
            .count()
    }

    /// Waits until the agent has applied more than `before` catalogs.
    fn wait_for_catalog(&mut self, before: usize) {
        while self.catalogs_applied() <= before {
            self.agent
                .wait_for_log("Backends applied")
                .expect("a catalog applied");
        }
    }

    fn wait_for_map_update(&mut self, what: &str) -> String {
        wait_for_map_update(&mut self.agent, what)
    }
}

#[test]
fn initial_sync_redirects_a_backend_from_the_api() {
    let pods = r#"
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: demo}
spec: {nodeName: node1}
---
apiVersion: v1
kind: Pod
metadata: {name: elsewhere, namespace: demo}
spec: {nodeName: node2}
"#;
    let mut t = KubeBed::new(&format!("{ECHO_BACKEND}---{pods}"));
    assert!(
        t.agent.ready_line.contains("backends=1"),
        "ready only once the XBackends are listed: {}",
        t.agent.ready_line
    );
    assert!(t.via_proxy("echo.redirector.test:8080"));

    t.api.wait_for(&format!("list {XBACKENDS}"));
    t.api.wait_for(&format!("watch {XBACKENDS}?"));
    // Pods: only this node's, by field selector.
    let selector = "fieldSelector=spec.nodeName=node1";
    t.api.wait_for_request("watch", "/api/v1/pods", &[selector]);
    // Logged just before the watch is sent, but read through the agent's stderr reader.
    let listed = |logs: &Vec<String>| {
        logs.iter()
            .any(|l| l.contains("pods of this node listed") && l.contains("pods=1"))
    };
    let logs = support::poll(|| t.agent.logs(), listed);
    assert!(listed(&logs), "{logs:#?}");
    let lines = t.api.lines();
    // No Backend references anything: no ConfigMap or Secret is ever asked for.
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("/configmaps") || l.contains("/secrets")),
        "{lines:#?}"
    );
}

#[test]
fn backends_added_modified_and_deleted_through_the_api() {
    let mut t = KubeBed::new(ECHO_BACKEND);
    let _servers = ["[::]:9090", "[::]:9091"].map(|addr| t.bed.serve(addr));
    assert!(
        !t.via_proxy("other.redirector.test:9090"),
        "not declared yet"
    );

    t.api.apply("other", &other_backend());
    t.wait_for_map_update("added=2");
    assert!(t.via_proxy("other.redirector.test:9090"));

    // Modify: other moves to port 9091.
    t.api.apply(
        "other",
        &other_backend().replace("number: 9090", "number: 9091"),
    );
    t.wait_for_map_update("removed=2");
    assert!(t.via_proxy("other.redirector.test:9091"));
    assert!(!t.via_proxy("other.redirector.test:9090"));

    t.api.delete("other");
    t.wait_for_map_update("removed=2");
    assert!(!t.via_proxy("other.redirector.test:9091"));
    assert!(
        t.via_proxy("echo.redirector.test:8080"),
        "the untouched Backend stays"
    );
}

#[test]
fn an_invalid_xbackend_is_a_problem_naming_its_field_and_keeps_its_last_good_version() {
    let mut t = KubeBed::new(ECHO_BACKEND);
    t.api.apply(
        "initial",
        &ECHO_BACKEND.replace("number: 8080", "number: 0"),
    );
    let kept = t
        .agent
        .wait_for_log("keeping the last good version")
        .expect("kept");
    assert!(kept.contains("demo/echo"), "{kept}");
    let skipped: Vec<String> = (t.agent.logs().into_iter())
        .filter(|l| l.contains("skipped"))
        .collect();
    assert!(
        skipped.iter().any(|l| l
            .contains("k8s://demo/echo: XBackend demo/echo: spec.port.number: must be 1..=65535")),
        "{skipped:#?}"
    );
    assert!(t.via_proxy("echo.redirector.test:8080"));

    // A field the model does not know is named too (the CRD would prune it; an old or
    // newer CRD might not).
    let typo = ECHO_BACKEND.replace("number: 0", "number: 8080").replace(
        "hostname: echo.redirector.test",
        "hostnme: echo.redirector.test",
    );
    t.api.apply("initial", &typo);
    let skipped = t.agent.wait_for_log("unknown field").expect("skipped");
    assert!(
        skipped
            .contains("XBackend demo/echo: spec.externalHostname.hostnme: unknown field `hostnme`"),
        "{skipped}"
    );
    assert!(t.via_proxy("echo.redirector.test:8080"));
}

#[test]
fn ca_config_map_change_rebuilds_tls() {
    let ca = Ca::new("trusted CA");
    let wrong = Ca::new("another CA");
    // The ConfigMap starts with the wrong CA: the handshake fails.
    let backend = ApiBackend {
        ca_pem: Some(wrong.pem()),
        ..ApiBackend::server_only(&ca)
    };
    let mut t = KubeBed::new(&backend.yaml());
    let mut server = TlsServer::start(&t.bed.topo.ext, "[::]:8443", &ca.server(&[API_HOST]), None);
    let name = "fieldSelector=metadata.name=api-ca";
    t.api
        .wait_for_request("watch", "/api/v1/namespaces/demo/configmaps", &[name]);
    let reply = t.bed.connect(API_TARGET, &["-4"]);
    assert!(
        !reply.ok() || reply.reply().is_empty(),
        "refused: {:?}",
        reply.json
    );
    server.wait_closed();
    assert!(server.lines_starting("received").is_empty());

    // The right CA: the next connection is verified and answered.
    let before = t.catalogs_applied();
    t.api.apply("initial", &ApiBackend::server_only(&ca).yaml());
    t.api.wait_for("event MODIFIED configmaps demo/api-ca");
    t.wait_for_catalog(before);
    let reply = t.bed.connect(API_TARGET, &["-4"]);
    assert!(reply.reply().ends_with("got=hello"), "{:?}", reply.json);
    server.wait_closed();

    // Only the referenced object was ever asked for, never a list of the cluster's.
    let lines = t.api.lines();
    for line in lines
        .iter()
        .filter(|l| l.contains("/configmaps") || l.contains("/secrets"))
    {
        assert!(
            line.contains("/namespaces/demo/configmaps?")
                && line.contains("fieldSelector=metadata.name=api-ca"),
            "{line}"
        );
    }

    // Once no Backend references it, its watch stops.
    t.api.apply("initial", ECHO_BACKEND);
    let stopped = t
        .agent
        .wait_for_log("no longer referenced: stopped watching it")
        .expect("stopped");
    assert!(stopped.contains("demo/api-ca"), "{stopped}");
}

#[test]
fn client_secret_appearing_and_disappearing() {
    let ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let backend = ApiBackend::client_and_server(&ca, client_ca.client("workload.demo"));
    let all = documents(&backend.yaml());
    let without_secret: Vec<_> = (all.iter())
        .filter(|o| o["kind"] != "Secret")
        .cloned()
        .collect();
    let secret: Vec<_> = (all.iter())
        .filter(|o| o["kind"] == "Secret")
        .cloned()
        .collect();
    assert_eq!(secret.len(), 1);
    let mut t = KubeBed::new("");
    let mut server = TlsServer::start(
        &t.bed.topo.ext,
        "[::]:8443",
        &ca.server(&[API_HOST]),
        Some(&client_ca),
    );
    // The Secret does not exist: the Backend is loaded (its addresses redirected) but
    // its connections are refused without connecting.
    let before = t.catalogs_applied();
    t.api.apply_objects("api", without_secret);
    t.wait_for_map_update("added=2");
    // "Backends applied" follows the map update: counted before the next `before`.
    t.wait_for_catalog(before);
    let name = "fieldSelector=metadata.name=api-client";
    t.api
        .wait_for_request("watch", "/api/v1/namespaces/demo/secrets", &[name]);
    let reply = t.bed.connect(API_TARGET, &["-4"]);
    assert!(!reply.ok() || reply.reply().is_empty(), "{:?}", reply.json);
    assert!(server.lines_starting("accepted").is_empty());

    // The Secret appears: mutual TLS works.
    let before = t.catalogs_applied();
    t.api.apply_objects("secret", secret);
    t.api.wait_for("event ADDED secrets demo/api-client");
    t.wait_for_catalog(before);
    let reply = t.bed.connect(API_TARGET, &["-4"]);
    assert!(reply.reply().ends_with("got=hello"), "{:?}", reply.json);
    server.wait_closed();
    let handshake = server.lines_starting("handshake-ok");
    assert!(
        handshake
            .last()
            .is_some_and(|l| l.contains("client-cert=yes")),
        "{handshake:?}"
    );

    // And goes away again: refused again.
    let before = t.catalogs_applied();
    t.api.delete("secret");
    t.api.wait_for("event DELETED secrets demo/api-client");
    t.wait_for_catalog(before);
    let accepted = server.lines_starting("accepted").len();
    let reply = t.bed.connect(API_TARGET, &["-4"]);
    assert!(!reply.ok() || reply.reply().is_empty(), "{:?}", reply.json);
    assert_eq!(server.lines_starting("accepted").len(), accepted);
}

fn watch_restarts_after_410(http: bool) {
    let mut t = KubeBed::new(ECHO_BACKEND);
    let _other_server = t.bed.serve("[::]:9090");
    t.api.wait_for(&format!("watch {XBACKENDS}?"));
    t.api.expire(http);
    if http {
        // The watch request with the expired resourceVersion is answered HTTP 410.
        let expired = t.api.wait_for(&format!("expired {XBACKENDS}?"));
        assert!(expired.ends_with("Http"), "{expired}");
    }
    // A fresh list, then a watch from its resourceVersion.
    t.api.wait_for(&format!("list {XBACKENDS}"));
    t.api.wait_for(&format!("watch {XBACKENDS}?"));
    assert!(t.via_proxy("echo.redirector.test:8080"), "nothing was lost");

    // A change made after the 410 is picked up.
    t.api.apply("other", &other_backend());
    t.wait_for_map_update("added=2");
    assert!(t.via_proxy("other.redirector.test:9090"));
    // The relist itself changed nothing, so no catalog was sent for it: one catalog at
    // start, one for the new Backend.
    let applied = support::poll(|| t.catalogs_applied(), |n| *n >= 2);
    assert_eq!(applied, 2, "{:#?}", t.agent.logs());
}

#[test]
fn watch_restarts_after_410_gone_in_the_stream() {
    watch_restarts_after_410(false);
}

#[test]
fn watch_restarts_after_410_gone_on_the_watch_request() {
    watch_restarts_after_410(true);
}

#[test]
fn api_server_down_keeps_the_datapath_and_catches_up_afterwards() {
    let mut t = KubeBed::new(ECHO_BACKEND);
    let _other_server = t.bed.serve("[::]:9090");
    t.api.wait_for(&format!("watch {XBACKENDS}?"));

    t.api.down();
    let failed = t
        .agent
        .wait_for_log("Kubernetes watch failed")
        .expect("the agent noticed");
    assert!(failed.contains("WARN"), "{failed}");
    assert!(
        t.via_proxy("echo.redirector.test:8080"),
        "the last good state stays in force"
    );
    // A change while the agent cannot see it...
    t.api.apply("other", &other_backend());
    t.api.wait_for("event ADDED xbackends demo/other");
    assert!(t.via_proxy("echo.redirector.test:8080"));
    assert!(!t.via_proxy("other.redirector.test:9090"));

    // ...arrives once the server is back (the watch resumes from its resourceVersion).
    t.api.up();
    t.wait_for_map_update("added=2");
    assert!(
        (t.agent.logs().iter())
            .any(|l| l.contains("Kubernetes watch recovered") && l.contains("XBackends")),
        "{:#?}",
        t.agent.logs()
    );
    assert!(t.via_proxy("other.redirector.test:9090"));
    // And so does a change made after.
    t.api.delete("other");
    t.wait_for_map_update("removed=2");
    assert!(!t.via_proxy("other.redirector.test:9090"));
    assert!(t.via_proxy("echo.redirector.test:8080"));
}

#[test]
fn liveness_answers_while_the_api_server_is_down_at_start_and_readiness_waits_for_the_sync() {
    let bed = Bed::new("");
    let mut api = FakeApi::start(&bed.topo.node, ECHO_BACKEND);
    api.down();
    let config = bed.kube_config(api.agent_args(NODE));
    let mut agent = Agent::spawn(&bed.topo, &config).expect("agent");
    // The watches start only after the admin listener is bound, so their first failure
    // (logged once, later ones are rate-limited) means /healthz is being served. Not
    // waited for in sequence with "waiting for the initial sync": the watch tasks may
    // log before that line.
    agent
        .wait_for_log("Kubernetes watch failed")
        .expect("a refused list");
    assert!(admin_ok(&bed, "/healthz"), "alive while the API is down");
    assert!(!admin_ok(&bed, "/readyz"), "not ready before the sync");
    assert!(!bed.via_proxy("echo.redirector.test:8080"));

    api.up();
    agent.wait_for_ready().expect("ready once the API answers");
    assert!(
        agent.ready_line.contains("backends=1"),
        "{}",
        agent.ready_line
    );
    assert!(admin_ok(&bed, "/readyz"));
    assert!(bed.via_proxy("echo.redirector.test:8080"));
}
