//! TLS fixtures: certificates made at test time (rcgen), the `netprobe serve-tls` server,
//! Backend YAML with its ConfigMap and Secret, and reading the agent's metrics.

mod metrics;
mod pki;
mod server;

use base64::{Engine as _, engine::general_purpose::STANDARD};

#[allow(unused_imports, reason = "each test binary uses a different part")]
pub use self::{
    metrics::{metrics, sample, wait_for_sample},
    pki::{Ca, KeyKind, Leaf, LeafSpec},
    server::TlsServer,
};

/// The Backend of the TLS tests: `demo/api`, `api.redirector.test:8443`.
pub const API_BACKEND: &str = "demo/api";
pub const API_HOST: &str = "api.redirector.test";
pub const API_PORT: u16 = 8443;
pub const API_TARGET: &str = "api.redirector.test:8443";
/// The SPIFFE ID of the URI SAN tests.
pub const SPIFFE_ID: &str = "spiffe://cluster.local/ns/demo/sa/api";

/// The `demo/api` Backend (`api.redirector.test:8443`) with its ConfigMap and Secret.
pub struct ApiBackend<'a> {
    pub protocol: &'a str,
    /// `None`: no `spec.tls` at all.
    pub mode: Option<&'a str>,
    /// The ConfigMap `api-ca` (`ca.crt`); `None` leaves the reference dangling.
    pub ca_pem: Option<String>,
    /// `(type, value)`: `("Hostname", name)` or `("URI", uri)`.
    pub subject_alt_names: Vec<(&'a str, &'a str)>,
    /// The `kubernetes.io/tls` Secret `api-client`, written with base64 `data` (else
    /// `stringData`).
    pub client: Option<(Leaf, bool)>,
}

impl<'a> ApiBackend<'a> {
    /// `mode: ServerOnly`, `protocol: TCP`, verified against `ca`.
    pub fn server_only(ca: &Ca) -> Self {
        Self {
            protocol: "TCP",
            mode: Some("ServerOnly"),
            ca_pem: Some(ca.pem()),
            subject_alt_names: Vec::new(),
            client: None,
        }
    }

    /// `mode: ClientAndServer` presenting `client` (Secret with base64 `data`).
    pub fn client_and_server(ca: &Ca, client: Leaf) -> Self {
        Self {
            mode: Some("ClientAndServer"),
            client: Some((client, true)),
            ..Self::server_only(ca)
        }
    }

    /// No `spec.tls` (`Some("None")` in `mode` writes `tls: {mode: None}`).
    pub fn plain(mode: Option<&'a str>) -> Self {
        Self {
            protocol: "TCP",
            mode,
            ca_pem: None,
            subject_alt_names: Vec::new(),
            client: None,
        }
    }

    pub fn yaml(&self) -> String {
        let mut out = format!(
            "apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: api, namespace: demo}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: {API_HOST}}}
  port: {{number: {API_PORT}}}
  protocol: {}
",
            self.protocol
        );
        match self.mode {
            None => {}
            Some("None") => out.push_str("  tls: {mode: None}\n"),
            Some(mode) => {
                out.push_str(&format!("  tls:\n    mode: {mode}\n"));
                if self.client.is_some() {
                    out.push_str("    clientCertificateRef: {name: api-client}\n");
                }
                out.push_str(&format!(
                    "    validation:\n      hostname: {API_HOST}\n      caCertificateRefs:\n        \
                     - {{group: \"\", kind: ConfigMap, name: api-ca}}\n"
                ));
                if !self.subject_alt_names.is_empty() {
                    out.push_str("      subjectAltNames:\n");
                    for (kind, value) in &self.subject_alt_names {
                        let field = if *kind == "URI" { "uri" } else { "hostname" };
                        out.push_str(&format!(
                            "        - {{type: {kind}, {field}: \"{value}\"}}\n"
                        ));
                    }
                }
            }
        }
        if let Some(ca) = &self.ca_pem {
            out.push_str(&format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: api-ca, namespace: demo}}\n\
                 data:\n  ca.crt: |\n{}",
                indent(ca, 4)
            ));
        }
        if let Some((leaf, base64)) = &self.client {
            out.push_str(
                "---\napiVersion: v1\nkind: Secret\nmetadata: {name: api-client, namespace: demo}\n\
                 type: kubernetes.io/tls\n",
            );
            if *base64 {
                out.push_str(&format!(
                    "data:\n  tls.crt: {}\n  tls.key: {}\n",
                    STANDARD.encode(leaf.cert_pem.as_bytes()),
                    STANDARD.encode(leaf.key_pem.as_bytes())
                ));
            } else {
                out.push_str(&format!(
                    "stringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
                    indent(&leaf.cert_pem, 4),
                    indent(&leaf.key_pem, 4)
                ));
            }
        }
        out
    }
}

fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}
