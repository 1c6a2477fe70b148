//! The two shapes of XBackend `v1alpha1` and the rules that differ between them.
//!
//! An object is read in the shape it is written in: `spec.port.port` without
//! `spec.port.number` makes it a Gateway API v1.6 object (accepted, with one deprecation
//! notice, and v1.6's rules: its protocol enum, no `EndpointSelector`, and this project's
//! H2C rule, so an object v1.6 accepted stays accepted); anything else is read with
//! upstream's newest rules and their exact messages. Both `number` and `port` set is a
//! newest-shape object in transition: the two must agree.

use std::collections::BTreeMap;
use std::fmt;

use super::Report;
use super::names;
use super::types::{Protocol, TlsMode};
use crate::backend::constraints::{
    MATCH_LABELS_RANGE, MAX_DNS_LABEL, MAX_DNS_SUBDOMAIN, MSG_H2C_NO_TLS, MSG_HTTP2_TLS,
    MSG_SELECTOR_MEMBER, MSG_SESSION_PERSISTENCE, MSG_WSS_TLS, PORT_RANGE, SchemaVersion,
};
use crate::backend::model::{BackendPort, BackendSpec, BackendType};

/// Something an operator should know about an accepted object (a deprecated shape, a
/// Backend this agent leaves to others). Displays as `spec.port.port: deprecated ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub field: String,
    pub message: String,
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Which shape `spec` is written in (see the module comment).
pub fn schema_of(spec: &BackendSpec) -> SchemaVersion {
    match (spec.port.number, spec.port.port) {
        (None, Some(_)) => SchemaVersion::V1_6,
        _ => SchemaVersion::Newest,
    }
}

/// The deprecation notice of a v1.6-shaped port (also given when `number` is there too).
pub fn deprecation(port: &BackendPort) -> Option<Notice> {
    port.port.map(|number| Notice {
        field: "spec.port.port".to_owned(),
        message: format!(
            "deprecated Gateway API v1.6 shape, read with v1.6's rules; upstream's newest \
             schema writes `port: {{number: {number}}}` (port.port and port.name are gone there)"
        ),
    })
}

/// The notice of an `EndpointSelector` Backend, which this agent leaves alone.
pub fn skipped() -> Notice {
    Notice {
        field: "spec.type".to_owned(),
        message: "EndpointSelector: in-cluster endpoints for other controllers; this agent \
                  makes no redirect and writes no status for it"
            .to_owned(),
    }
}

/// The port number, from `number` (newest) or `port` (v1.6), with the range and the
/// fields each shape admits.
pub fn port(port: &BackendPort, report: &mut Report) -> Option<u16> {
    let (min, max) = PORT_RANGE;
    let in_range = |field: &str, value: i32, report: &mut Report| match u16::try_from(value) {
        Ok(n) if (min..=max).contains(&i64::from(n)) => Some(n),
        _ => {
            report.fail(field, format!("must be {min}..={max}"));
            None
        }
    };
    if port.name.is_some() && port.port.is_none() && port.number.is_none() {
        // `{name}` alone: a v1.6 port without its number.
        report.fail("spec.port.port", "required");
        return None;
    }
    if let Some(name) = port.name.as_deref() {
        if port.port.is_none() {
            report.fail(
                "spec.port.name",
                "not part of the newest schema (it went with spec.port.port); remove it",
            );
        } else if !name.is_empty() {
            // v1.6: maxLength 63 and CEL `format.dns1123Label()`.
            report.check(|| "spec.port.name".to_owned(), names::dns_label(name));
        }
    }
    match (port.number, port.port) {
        (None, None) => {
            report.fail(
                "spec.port.number",
                "required (spec.port must have at least 1 properties)",
            );
            None
        }
        (None, Some(v16)) => in_range("spec.port.port", v16, report),
        (Some(number), None) => in_range("spec.port.number", number, report),
        (Some(number), Some(v16)) if number == v16 => in_range("spec.port.number", number, report),
        (Some(number), Some(v16)) => {
            report.fail(
                "spec.port.port",
                format!(
                    "{v16} disagrees with spec.port.number {number}; set only spec.port.number \
                     (spec.port.port is the deprecated v1.6 field)"
                ),
            );
            None
        }
    }
}

/// The members of the `type` union other than `externalHostname`, and
/// `sessionPersistence`. Newest: upstream's CEL rules with their messages, and
/// `matchLabels` checked. v1.6: none of these fields exist.
pub fn members(spec: &BackendSpec, schema: SchemaVersion, report: &mut Report) {
    let selector = spec.backend_type == BackendType::EndpointSelector;
    if schema == SchemaVersion::V1_6 {
        let v16 = |what: &str| {
            format!(
                "{what} is not part of Gateway API v1.6 (spec.port.port makes this a v1.6 \
                 object); write the port as `port: {{number: N}}` (the newest schema) to use it"
            )
        };
        if selector {
            report.fail("spec.type", v16("EndpointSelector"));
        }
        if spec.endpoint_selector.is_some() {
            report.fail("spec.endpointSelector", v16("endpointSelector"));
        }
        if spec.session_persistence.is_some() {
            report.fail("spec.sessionPersistence", v16("sessionPersistence"));
        }
        return;
    }
    match &spec.endpoint_selector {
        Some(_) if !selector => report.fail("spec.endpointSelector", MSG_SELECTOR_MEMBER),
        None if selector => report.fail("spec.endpointSelector", MSG_SELECTOR_MEMBER),
        Some(member) => match_labels(&member.match_labels, report),
        None => {}
    }
    if spec.session_persistence.is_some() && !selector {
        report.fail("spec.sessionPersistence", MSG_SESSION_PERSISTENCE);
    }
}

/// `matchLabels`: 1..=64 entries (upstream min/maxProperties), values Gateway API
/// `LabelValue`s. Keys are checked as Kubernetes label keys (Gateway API `LabelKey`),
/// which the CRD cannot do for map keys.
fn match_labels(labels: &BTreeMap<String, String>, report: &mut Report) {
    let field = "spec.endpointSelector.matchLabels";
    let (min, max) = MATCH_LABELS_RANGE;
    if !(min..=max).contains(&labels.len()) {
        report.fail(
            field,
            format!("must have {min}..={max} labels, has {}", labels.len()),
        );
    }
    for (key, value) in labels {
        report.check(|| format!("{field}.{key}"), label_key(key));
        report.check(|| format!("{field}.{key}"), label_value(value));
    }
}

/// Gateway API `LabelKey`: an optional DNS-subdomain prefix and `/`, then a name of
/// 1..=63 alphanumerics with `-_.` inside.
fn label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        names::dns_subdomain(prefix).map_err(|e| format!("label key prefix: {e}"))?;
    }
    if prefix.map_or(0, str::len) + name.len() >= MAX_DNS_SUBDOMAIN + MAX_DNS_LABEL {
        return Err("label key is too long".to_owned());
    }
    label_name(name).map_err(|e| format!("label key {key:?}: {e}"))
}

/// Gateway API `LabelValue`: empty, or a label name.
fn label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    label_name(value).map_err(|e| format!("label value {value:?}: {e}"))
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]`.
fn label_name(name: &str) -> Result<(), String> {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > MAX_DNS_LABEL {
        return Err(format!("must be 1..={MAX_DNS_LABEL} characters"));
    }
    if !edge(name.chars().next()) || !edge(name.chars().last()) || !name.chars().all(inner) {
        return Err(
            "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
                .to_owned(),
        );
    }
    Ok(())
}

/// The protocol and its rules against TLS. Newest: upstream's three rules, with their
/// messages. v1.6: its enum (no `GRPC`, `WSS`) and this project's H2C rule, which v1.6
/// objects have always had; `HTTP2` without TLS stays accepted, as v1.6 accepted it.
/// `tls_mode` is the raw `spec.tls.mode`, so the rules hold even when `tls` is invalid.
pub fn protocol(
    protocol: Protocol,
    tls_mode: Option<TlsMode>,
    schema: SchemaVersion,
    report: &mut Report,
) {
    let field = "spec.protocol";
    let encrypted = tls_mode.is_some_and(|mode| mode != TlsMode::None);
    match (schema, protocol) {
        (SchemaVersion::Newest, Protocol::H2c) if encrypted => report.fail(field, MSG_H2C_NO_TLS),
        (SchemaVersion::Newest, Protocol::Http2) if !encrypted => report.fail(field, MSG_HTTP2_TLS),
        (SchemaVersion::Newest, Protocol::Wss) if !encrypted => report.fail(field, MSG_WSS_TLS),
        (SchemaVersion::V1_6, Protocol::Grpc | Protocol::Wss) => report.fail(
            field,
            format!(
                "{protocol} is not in Gateway API v1.6's protocol enum (spec.port.port makes \
                 this a v1.6 object); write the port as `port: {{number: N}}` (the newest \
                 schema) to use it"
            ),
        ),
        (SchemaVersion::V1_6, Protocol::H2c) if encrypted => report.fail(
            field,
            "H2C is cleartext HTTP/2 and cannot be combined with spec.tls.mode ServerOnly or \
             ClientAndServer; use protocol HTTP2 for HTTP/2 over TLS",
        ),
        _ => {}
    }
}
