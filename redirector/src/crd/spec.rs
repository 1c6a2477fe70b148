//! The schema of `spec`: every field of upstream's `BackendSpec` with its OpenAPI
//! constraints and CEL rules, in the newest shape or v1.6.1's. The constraints come from
//! [`crate::backend::constraints`], which the validator implements, so the two agree.
//! Descriptions are written for this project, not copied; CEL messages are upstream's
//! where the issue that follows upstream made them a contract (the `spec` rules).

use super::builder::Schema;
use crate::backend::constraints::{
    CEL_CLIENT_CERTIFICATE, CEL_H2C_NO_TLS, CEL_HTTP2_TLS, CEL_NOT_BOTH_CA_SOURCES,
    CEL_NOT_CLUSTER_LOCAL, CEL_ONE_CA_SOURCE, CEL_PORT_NAME, CEL_SAN, CEL_SELECTOR_MEMBER,
    CEL_SESSION_PERSISTENCE, CEL_TYPE_MEMBER, CEL_WSS_TLS, GROUP, KIND, LABEL_VALUE,
    MATCH_LABELS_RANGE, MAX_CA_CERTIFICATE_REFS, MAX_DNS_LABEL, MAX_DNS_SUBDOMAIN,
    MAX_SUBJECT_ALT_NAMES, MSG_H2C_NO_TLS, MSG_HTTP2_TLS, MSG_SELECTOR_MEMBER,
    MSG_SESSION_PERSISTENCE, MSG_TYPE_MEMBER, MSG_WSS_TLS, NAMESPACE, PORT_RANGE, PRECISE_HOSTNAME,
    SAN_HOSTNAME, SAN_URI, SchemaVersion, WELL_KNOWN_CA_CERTIFICATES,
};

/// `spec`: where the backend is and how to connect to it.
pub fn spec(schema: SchemaVersion) -> Schema {
    let common = [
        ("type", backend_type(schema)),
        ("externalHostname", external_hostname()),
        ("port", port(schema)),
        ("protocol", protocol(schema)),
        ("tls", tls()),
    ];
    let description = "Where the backend is and how to connect to it.";
    match schema {
        SchemaVersion::V1_6 => Schema::object(description, common)
            .required(&["port", "type"])
            .rule(CEL_TYPE_MEMBER, MSG_TYPE_MEMBER),
        SchemaVersion::Newest => {
            let newest = [
                ("endpointSelector", endpoint_selector()),
                ("sessionPersistence", session_persistence()),
            ];
            Schema::object(description, common.into_iter().chain(newest))
                .required(&["port", "type"])
                .rule(CEL_TYPE_MEMBER, MSG_TYPE_MEMBER)
                .rule(CEL_SELECTOR_MEMBER, MSG_SELECTOR_MEMBER)
                .rule(CEL_H2C_NO_TLS, MSG_H2C_NO_TLS)
                .rule(CEL_HTTP2_TLS, MSG_HTTP2_TLS)
                .rule(CEL_WSS_TLS, MSG_WSS_TLS)
                .rule(CEL_SESSION_PERSISTENCE, MSG_SESSION_PERSISTENCE)
        }
    }
}

fn backend_type(schema: SchemaVersion) -> Schema {
    let values: &[&str] = match schema {
        SchemaVersion::Newest => &["ExternalHostname", "EndpointSelector"],
        SchemaVersion::V1_6 => &["ExternalHostname"],
    };
    Schema::string("The kind of destination; selects the member field that describes it.")
        .enumeration(values)
}

/// Newest: in-cluster endpoints chosen by pod labels (for other controllers; this agent
/// skips such Backends).
fn endpoint_selector() -> Schema {
    let value = Schema::string("A label value: empty, or alphanumerics with '-', '_', '.'.")
        .length(0, MAX_DNS_LABEL)
        .pattern(LABEL_VALUE);
    let (min, max) = MATCH_LABELS_RANGE;
    let match_labels = Schema::map(
        "Labels a pod must all carry to be an endpoint of this backend.",
        value,
    )
    .properties_range(min, max);
    Schema::object(
        "The backend is the set of pods matching a label selector. Set exactly when type \
         is EndpointSelector.",
        [("matchLabels", match_labels)],
    )
    .required(&["matchLabels"])
}

/// Newest: how requests stick to one endpoint (EndpointSelector only). Its inner
/// fields are not modelled here (the agent never acts on it), so they are preserved
/// as written.
fn session_persistence() -> Schema {
    Schema::object(
        "Session persistence (e.g. a cookie) across the backend's endpoints. Only with \
         type EndpointSelector.",
        [],
    )
    .preserve_unknown_fields()
}

fn external_hostname() -> Schema {
    let hostname = Schema::string(
        "Fully qualified DNS name of the backend. Not an IP address, not a wildcard, \
         not inside the cluster's own domain.",
    )
    .length(1, MAX_DNS_SUBDOMAIN)
    .pattern(PRECISE_HOSTNAME)
    .rule(
        CEL_NOT_CLUSTER_LOCAL,
        "hostname must not be an IP address or end with .cluster.local",
    );
    Schema::object(
        "The backend is an external DNS name. Set exactly when type is ExternalHostname.",
        [("hostname", hostname)],
    )
    .required(&["hostname"])
}

fn port(schema: SchemaVersion) -> Schema {
    let number = Schema::integer("Port number to connect to.", "int32").range(PORT_RANGE);
    let description = "The port to connect to on the backend.";
    match schema {
        SchemaVersion::Newest => {
            Schema::object(description, [("number", number)]).min_properties(1)
        }
        SchemaVersion::V1_6 => {
            let name = Schema::string("Optional name of the port: empty, or a DNS label.")
                .max_length(MAX_DNS_LABEL)
                .rule(CEL_PORT_NAME, "Name must be a valid DNS label");
            Schema::object(description, [("name", name), ("port", number)]).required(&["port"])
        }
    }
}

fn protocol(schema: SchemaVersion) -> Schema {
    let values: &[&str] = match schema {
        SchemaVersion::Newest => &[
            "TCP", "HTTP", "HTTP2", "HTTP11", "H2C", "MCP", "GRPC", "WSS",
        ],
        SchemaVersion::V1_6 => &["TCP", "HTTP", "HTTP2", "HTTP11", "H2C", "MCP"],
    };
    Schema::string(
        "Protocol spoken to the backend. When unset, the route or listener decides \
         (for a transparent redirector: opaque TCP).",
    )
    .enumeration(values)
}

fn tls() -> Schema {
    let mode = Schema::string(
        "None: no TLS to the backend. ServerOnly: TLS, verifying the server. \
         ClientAndServer: mutual TLS.",
    )
    .enumeration(&["None", "ServerOnly", "ClientAndServer"]);
    Schema::object(
        "TLS to use when connecting to the backend.",
        [
            ("mode", mode),
            ("clientCertificateRef", secret_reference()),
            ("validation", validation()),
        ],
    )
    .required(&["mode"])
    .rule(
        CEL_CLIENT_CERTIFICATE,
        "clientCertificateRef must be set if and only if mode is ClientAndServer",
    )
}

/// Gateway API `SecretObjectReference`.
fn secret_reference() -> Schema {
    Schema::object(
        "Secret holding the client certificate and key (tls.crt, tls.key). Set exactly \
         when mode is ClientAndServer.",
        [
            (
                "group",
                group("API group of the referent; empty for the core group.").default(""),
            ),
            ("kind", kind("Kind of the referent.").default("Secret")),
            ("name", object_name()),
            (
                "namespace",
                Schema::string(
                    "Namespace of the referent; the referrer's own when unset. Another \
                     namespace needs a ReferenceGrant there.",
                )
                .length(1, MAX_DNS_LABEL)
                .pattern(NAMESPACE),
            ),
        ],
    )
    .required(&["name"])
}

/// Gateway API `BackendTLSPolicyValidation`.
fn validation() -> Schema {
    let ca_refs = Schema::array(
        "Objects in this namespace holding the PEM CA bundle (key ca.crt) that verifies \
         the backend. Exclusive with wellKnownCACertificates.",
        local_reference(),
    )
    .max_items(MAX_CA_CERTIFICATE_REFS)
    .atomic();
    let well_known = Schema::string(
        "A well-known set of CA certificates: System, or an implementation-specific \
         prefixed name. Exclusive with caCertificateRefs.",
    )
    .length(1, MAX_DNS_SUBDOMAIN)
    .pattern(WELL_KNOWN_CA_CERTIFICATES);
    let hostname = Schema::string(
        "Sent as SNI, and the name the backend certificate must carry unless \
         subjectAltNames is set.",
    )
    .length(1, MAX_DNS_SUBDOMAIN)
    .pattern(PRECISE_HOSTNAME);
    let sans = Schema::array(
        "Names of which the backend certificate must carry at least one; replaces the \
         hostname check.",
        subject_alt_name(),
    )
    .max_items(MAX_SUBJECT_ALT_NAMES)
    .atomic();
    Schema::object(
        "How the backend certificate is verified.",
        [
            ("caCertificateRefs", ca_refs),
            ("wellKnownCACertificates", well_known),
            ("hostname", hostname),
            ("subjectAltNames", sans),
        ],
    )
    .required(&["hostname"])
    .rule(
        CEL_NOT_BOTH_CA_SOURCES,
        "must not set both caCertificateRefs and wellKnownCACertificates",
    )
    .rule(
        CEL_ONE_CA_SOURCE,
        "must set one of caCertificateRefs or wellKnownCACertificates",
    )
}

/// Gateway API `LocalObjectReference` (all three fields required).
fn local_reference() -> Schema {
    Schema::object(
        "An object in the referrer's namespace.",
        [
            (
                "group",
                group("API group of the referent; empty for the core group."),
            ),
            ("kind", kind("Kind of the referent, e.g. ConfigMap.")),
            ("name", object_name()),
        ],
    )
    .required(&["group", "kind", "name"])
}

/// Gateway API `SubjectAltName` with its four type/field rules.
fn subject_alt_name() -> Schema {
    let [hostname_set, hostname_unset, uri_set, uri_unset] = CEL_SAN;
    Schema::object(
        "One subject alternative name.",
        [
            (
                "type",
                Schema::string("Which of hostname or uri this entry holds.")
                    .enumeration(&["Hostname", "URI"]),
            ),
            (
                "hostname",
                Schema::string(
                    "DNS name, optionally starting with \"*.\". Only with type Hostname.",
                )
                .length(1, MAX_DNS_SUBDOMAIN)
                .pattern(SAN_HOSTNAME),
            ),
            (
                "uri",
                Schema::string(
                    "Absolute URI with scheme and authority, e.g. a SPIFFE ID. Only with \
                     type URI.",
                )
                .length(1, MAX_DNS_SUBDOMAIN)
                .pattern(SAN_URI),
            ),
        ],
    )
    .required(&["type"])
    .rule(hostname_set, "hostname must be set when type is Hostname")
    .rule(
        hostname_unset,
        "hostname must be unset unless type is Hostname",
    )
    .rule(uri_set, "uri must be set when type is URI")
    .rule(uri_unset, "uri must be unset unless type is URI")
}

/// Gateway API `Group`.
pub fn group(description: &str) -> Schema {
    Schema::string(description)
        .max_length(MAX_DNS_SUBDOMAIN)
        .pattern(GROUP)
}

/// Gateway API `Kind`.
pub fn kind(description: &str) -> Schema {
    Schema::string(description)
        .length(1, MAX_DNS_LABEL)
        .pattern(KIND)
}

/// Gateway API `ObjectName`: any 1..=253 characters (the API server checks real names).
pub fn object_name() -> Schema {
    Schema::string("Name of the referent.").length(1, MAX_DNS_SUBDOMAIN)
}
