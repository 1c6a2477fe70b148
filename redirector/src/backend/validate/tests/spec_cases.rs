//! Cases for `metadata` and `spec` outside `tls`.

use super::{Case, HOST, META, plain};

/// One row per line: the table is read across, so rustfmt's vertical layout is skipped.
#[rustfmt::skip]
pub fn cases() -> Vec<Case> {
    let h = Some("spec.externalHostname.hostname");
    let ok = "a.example.com";
    let named = |port: &str| format!("type: ExternalHostname, {HOST}, port: {{{port}}}");
    vec![
        ("meta.name", "name ok", META, plain(ok, "80"), None),
        ("meta.name", "name missing", "{namespace: demo}", plain(ok, "80"), Some("metadata.name")),
        ("meta.name", "name empty", "{name: ''}", plain(ok, "80"), Some("metadata.name")),
        ("meta.name", "name not dns", "{name: Echo_1}", plain(ok, "80"), Some("metadata.name")),
        ("meta.namespace", "namespace defaulted", "{name: echo}", plain(ok, "80"), None),
        ("meta.namespace", "namespace not label", "{name: echo, namespace: a.b}", plain(ok, "80"), Some("metadata.namespace")),
        ("spec.required", "spec present", META, plain(ok, "80"), None),
        ("spec.required", "spec missing", META, "-".into(), Some("spec")),
        ("unknown-field", "known fields", META, format!("{}, protocol: TCP", plain(ok, "80")), None),
        ("unknown-field", "typo in spec", META, format!("{}, protocl: TCP", plain(ok, "80")), Some("spec.protocl")),
        ("unknown-field", "typo in hostname", META, "type: ExternalHostname, externalHostname: {hostnme: a.example.com}, port: {port: 80}".into(), Some("spec.externalHostname.hostnme")),
        // type and the externalHostname union member
        ("type.required", "type set", META, plain(ok, "80"), None),
        ("type.required", "type missing", META, format!("{HOST}, port: {{port: 80}}"), Some("spec.type")),
        ("type.enum", "ExternalHostname", META, plain(ok, "80"), None),
        ("type.enum", "unknown type", META, format!("type: External, {HOST}, port: {{port: 80}}"), Some("spec.type")),
        ("type.enum", "endpoint selector", META, "type: EndpointSelector, port: {port: 80}".into(), Some("spec.type")),
        ("type.member", "member set", META, plain(ok, "80"), None),
        ("type.member", "member missing", META, "type: ExternalHostname, port: {port: 80}".into(), Some("spec.externalHostname")),
        // port
        ("port.required", "port given", META, plain(ok, "80"), None),
        ("port.required", "port block missing", META, format!("type: ExternalHostname, {HOST}"), Some("spec.port")),
        ("port.required", "port number missing", META, named("name: https"), Some("spec.port.port")),
        ("port.type", "integer", META, plain(ok, "443"), None),
        ("port.type", "string", META, plain(ok, "'443'"), Some("spec.port.port")),
        ("port.type", "beyond int32", META, plain(ok, "4294967296"), Some("spec.port.port")),
        ("port.range", "port 1", META, plain(ok, "1"), None),
        ("port.range", "port 65535", META, plain(ok, "65535"), None),
        ("port.range", "port 0", META, plain(ok, "0"), Some("spec.port.port")),
        ("port.range", "port 65536", META, plain(ok, "65536"), Some("spec.port.port")),
        ("port.range", "port negative", META, plain(ok, "-1"), Some("spec.port.port")),
        ("port.name", "name ok", META, named("name: https, port: 443"), None),
        ("port.name", "name empty", META, named("name: '', port: 443"), None),
        ("port.name", "name 63", META, named(&format!("name: {}, port: 443", "p".repeat(63))), None),
        ("port.name", "name 64", META, named(&format!("name: {}, port: 443", "p".repeat(64))), Some("spec.port.name")),
        ("port.name", "name not a label", META, named("name: Https_1, port: 443"), Some("spec.port.name")),
        ("port.name", "name with dot", META, named("name: a.b, port: 443"), Some("spec.port.name")),
        // externalHostname.hostname
        ("host.required", "hostname set", META, plain(ok, "443"), None),
        ("host.required", "hostname missing", META, "type: ExternalHostname, externalHostname: {}, port: {port: 80}".into(), h),
        ("host.required", "hostname empty", META, plain("", "443"), h),
        ("host.pattern", "single label", META, plain("localhost-svc", "443"), None),
        ("host.pattern", "253 characters", META, plain(&[&*"a".repeat(63), &"b".repeat(63), &"c".repeat(63), &"d".repeat(61)].join("."), "443"), None),
        ("host.pattern", "254 characters", META, plain(&[&*"a".repeat(63), &"b".repeat(63), &"c".repeat(63), &"d".repeat(62)].join("."), "443"), h),
        ("host.pattern", "uppercase", META, plain("API.example.com", "443"), h),
        ("host.pattern", "trailing dot", META, plain("api.example.com.", "443"), h),
        ("host.pattern", "empty label", META, plain("a..example.com", "443"), h),
        ("host.pattern", "two trailing dots", META, plain("example.com..", "443"), h),
        ("host.pattern", "leading dash", META, plain("-a.example.com", "443"), h),
        ("host.pattern", "trailing dash", META, plain("a-.example.com", "443"), h),
        ("host.pattern", "underscore", META, plain("a_b.example.com", "443"), h),
        ("host.pattern", "port suffix", META, plain("a.example.com:443", "443"), h),
        ("host.pattern", "label of 64", META, plain(&format!("{}.com", "a".repeat(64)), "443"), h),
        ("host.cluster-local", "lookalike", META, plain("notcluster.local", "443"), None),
        ("host.cluster-local", "local but not cluster", META, plain("printer.local", "443"), None),
        ("host.cluster-local", "service name", META, plain("db.ns.svc.cluster.local", "443"), h),
        ("host.cluster-local", "uppercase, trailing dot", META, plain("DB.ns.svc.cluster.local.", "443"), h),
        ("host.cluster-local", "the domain itself", META, plain("cluster.local", "443"), h),
        ("host.ip", "digits inside a name", META, plain("1.2.3.example", "443"), None),
        ("host.ip", "ipv4", META, plain("10.0.0.1", "443"), h),
        ("host.ip", "ipv6", META, plain("::1", "443"), h),
        ("host.ip", "bracketed ipv6", META, plain("[fe80::1]", "443"), h),
        ("host.ip", "short ipv4", META, plain("127.1", "443"), h),
        ("host.ip", "decimal ipv4", META, plain("2130706433", "443"), h),
        ("host.ip", "hex ipv4", META, plain("0x7f.0x1", "443"), h),
        ("host.wildcard", "exact name", META, plain("www.example.com", "443"), None),
        ("host.wildcard", "leading wildcard", META, plain("*.example.com", "443"), h),
        ("host.wildcard", "bare wildcard", META, plain("*", "443"), h),
        // protocol
        ("protocol.enum", "absent", META, plain(ok, "80"), None),
        ("protocol.enum", "H2C", META, format!("{}, protocol: H2C", plain(ok, "80")), None),
        ("protocol.enum", "TLS", META, format!("{}, protocol: TLS", plain(ok, "80")), Some("spec.protocol")),
        ("protocol.enum", "GRPC (upstream's newest enum)", META, format!("{}, protocol: GRPC", plain(ok, "80")), None),
        ("protocol.enum", "lowercase", META, format!("{}, protocol: tcp", plain(ok, "80")), Some("spec.protocol")),
    ]
}
