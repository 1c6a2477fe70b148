//! The operator's view of a running agent: `redirector status` over the admin endpoint.

mod support;

use support::Bed;
use xtask::netlab::agent::redirector_bin;

const MIXED: &str = r#"
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: echo, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: echo.redirector.test}
  port: {port: 8080}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: api, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: api.redirector.test}
  port: {port: 443}
  tls:
    mode: ServerOnly
    validation:
      hostname: api.redirector.test
      caCertificateRefs: [{group: "", kind: ConfigMap, name: missing-ca}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: broken, namespace: demo}
spec:
  type: ExternalHostname
  externalHostname: {hostname: 10.0.0.1}
  port: {port: 80}
"#;

#[test]
fn status_shows_each_backend_with_its_state() {
    let bed = Bed::new(MIXED);
    let _agent = bed.agent();
    let out = bed
        .topo
        .node
        .exec(redirector_bin().expect("redirector"))
        .arg("status")
        .output()
        .expect("redirector status");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in\n{table}"))
            .to_owned()
    };
    let echo = line("demo/echo");
    assert!(
        echo.contains("Ready") && echo.contains("10.200.2.2") && echo.contains(":8080"),
        "{echo}"
    );
    let api = line("demo/api");
    assert!(
        api.contains("RefError") && api.contains("ConfigMap demo/missing-ca"),
        "{api}"
    );
    let broken = line("demo/broken");
    assert!(
        broken.contains("Invalid") && broken.contains("spec.externalHostname.hostname"),
        "{broken}"
    );
}
