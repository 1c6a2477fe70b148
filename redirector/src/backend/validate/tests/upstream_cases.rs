//! Upstream's own CEL test cases for the newest schema
//! (`pkg/test/cel/xbackend_test.go` of kubernetes-sigs/gateway-api: port with and
//! without number; H2C, HTTP2 and WSS against each TLS mode; sessionPersistence with each
//! type), rewritten as table rows, plus the same cases in the v1.6 shape, which keeps
//! v1.6's rules. `ServerOnly` carries a `validation` block because this agent requires
//! one (stricter, see `validate`); upstream's cases leave it out.

use super::{Case, HOST, META, SYSTEM};

/// `tls` in each mode: `-` for none at all.
const MODES: [&str; 3] = ["-", "mode: None", "mode: ServerOnly"];

/// An ExternalHostname spec on port 8080 with `protocol` and `tls` (see [`MODES`]),
/// in the newest shape or (`v16`) the v1.6 one.
pub(crate) fn spec(protocol: &str, tls: &str, v16: bool) -> String {
    let port = if v16 { "port: 8080" } else { "number: 8080" };
    let tls = match tls {
        "-" => String::new(),
        "mode: ServerOnly" => {
            format!(", tls: {{mode: ServerOnly, validation: {{hostname: example.com, {SYSTEM}}}}}")
        }
        mode => format!(", tls: {{{mode}}}"),
    };
    format!("type: ExternalHostname, {HOST}, port: {{{port}}}, protocol: {protocol}{tls}")
}

/// `(rule, protocol, [accepted in each of MODES])` for the newest shape.
const NEWEST: [(&str, &str, [bool; 3]); 3] = [
    ("cel.h2c", "H2C", [true, true, false]),
    ("cel.http2", "HTTP2", [false, false, true]),
    ("cel.wss", "WSS", [false, false, true]),
];

/// The same rows for a v1.6 object: HTTP2 without TLS stays accepted (v1.6 had no such
/// rule), H2C with TLS is refused (this project's rule for v1.6), WSS is not in v1.6.
const V1_6: [(&str, &str, [bool; 3]); 3] = [
    ("cel.h2c", "H2C", [true, true, false]),
    ("cel.http2", "HTTP2", [true, true, true]),
    ("cel.wss", "WSS", [false, false, false]),
];

/// One row per upstream case.
#[rustfmt::skip]
pub(crate) fn cases() -> Vec<Case> {
    let selector = "type: EndpointSelector, endpointSelector: {matchLabels: {app: foo}}, port: {number: 80}";
    let external = format!("type: ExternalHostname, {HOST}, port: {{number: 80}}");
    let mut cases: Vec<Case> = vec![
        ("port.required", "port without number is rejected", META, format!("type: ExternalHostname, {HOST}, port: {{}}"), Some("spec.port.number")),
        ("port.required", "port with number is accepted", META, spec("TCP", "-", false), None),
        ("cel.session", "session persistence is supported for EndpointSelector", META, format!("{selector}, sessionPersistence: {{cookie: {{}}}}"), None),
        ("cel.session", "session persistence is rejected for ExternalHostname", META, format!("{external}, sessionPersistence: {{cookie: {{}}}}"), Some("spec.sessionPersistence")),
        ("cel.session", "session persistence in a v1.6 object", META, format!("{}, sessionPersistence: {{cookie: {{}}}}", spec("TCP", "-", true)), Some("spec.sessionPersistence")),
        ("selector.member", "selector with its type", META, selector.to_owned(), None),
        ("selector.member", "selector type without selector", META, "type: EndpointSelector, port: {number: 80}".to_owned(), Some("spec.endpointSelector")),
        ("selector.member", "selector with the other type", META, format!("{external}, endpointSelector: {{matchLabels: {{app: foo}}}}"), Some("spec.endpointSelector")),
    ];
    for (table, v16) in [(&NEWEST, false), (&V1_6, true)] {
        for (rule, protocol, accepted) in table {
            for (mode, ok) in MODES.iter().zip(accepted) {
                // Test-only: case names are `&'static str`; a few leaked bytes per run.
                let name: &'static str = Box::leak(
                    format!("{protocol} with tls {mode} (v1.6 shape: {v16})").into_boxed_str(),
                );
                let want = (!ok).then_some("spec.protocol");
                cases.push((rule, name, META, spec(protocol, mode, v16), want));
            }
        }
    }
    cases
}
