//! The operator's view of a running agent: `redirector status` over the admin endpoint.

mod support;

use support::{Bed, fixtures::xbackend};
use xtask::netlab::agent::redirector_bin;

/// One Backend Ready, one whose CA ConfigMap is missing, one invalid (an IP literal).
fn mixed() -> String {
    let api_tls = "  tls:\n    mode: ServerOnly\n    validation:\n      \
                   hostname: api.redirector.test\n      \
                   caCertificateRefs: [{group: \"\", kind: ConfigMap, name: missing-ca}]\n";
    [
        xbackend("demo", "echo", "echo.redirector.test", 8080),
        xbackend("demo", "api", "api.redirector.test", 443) + api_tls,
        xbackend("demo", "broken", "10.0.0.1", 80),
    ]
    .join("---\n")
}

#[test]
fn status_shows_each_backend_with_its_state() {
    let bed = Bed::new(&mixed());
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
