//! TLS fixtures: certificates made at test time (rcgen), the `netprobe serve-tls` server,
//! Backend YAML with its ConfigMap and Secret, and reading the agent's metrics.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType, date_time_ymd,
};
use xtask::netlab::{ChildGuard, Netns, probe::PROBE_TIMEOUT};

use super::PROBE;

/// The Backend of the TLS tests: `demo/api`, `api.redirector.test:8443`.
pub const API_BACKEND: &str = "demo/api";
pub const API_HOST: &str = "api.redirector.test";
pub const API_PORT: u16 = 8443;
pub const API_TARGET: &str = "api.redirector.test:8443";
/// The SPIFFE ID of the URI SAN tests.
pub const SPIFFE_ID: &str = "spiffe://cluster.local/ns/demo/sa/api";

/// A certificate authority made for one test.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    /// For an intermediate CA: its certificate (PEM), sent by servers after their own.
    chain: String,
}

/// A leaf certificate (followed by its intermediate CAs, if any) and its private key, PEM.
#[derive(Clone)]
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The key of a leaf certificate and how its PEM is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeyKind {
    /// ECDSA P-256, PKCS#8 (`BEGIN PRIVATE KEY`).
    #[default]
    Ecdsa,
    /// ECDSA P-256, SEC1 (`BEGIN EC PRIVATE KEY`), as `openssl ecparam -genkey` writes.
    EcdsaSec1,
    /// Ed25519, PKCS#8.
    Ed25519,
    /// RSA 2048, PKCS#1 (`BEGIN RSA PRIVATE KEY`); made with the `openssl` command.
    RsaPkcs1,
}

/// What a leaf certificate says.
#[derive(Default)]
pub struct LeafSpec<'a> {
    pub key: KeyKind,
    pub dns: &'a [&'a str],
    pub uris: &'a [&'a str],
    /// A client certificate (extended key usage clientAuth) instead of a server one.
    pub client: bool,
    /// Valid only during 2020.
    pub expired: bool,
    /// Valid only from 2100 on.
    pub not_yet_valid: bool,
}

impl Ca {
    pub fn new(common_name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(Ca::params(common_name), key).expect("CA");
        Ca {
            issuer,
            chain: String::new(),
        }
    }

    /// An intermediate CA signed by this one; its leaves carry it in their chain.
    pub fn intermediate(&self, common_name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::signed_by(Ca::params(common_name), key, &self.issuer)
            .expect("intermediate CA");
        let chain = format!("{}{}", issuer.pem(), self.chain);
        Ca { issuer, chain }
    }

    fn params(common_name: &str) -> CertificateParams {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params
    }

    /// The CA certificate, PEM (what goes into a ConfigMap's `ca.crt`).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    pub fn leaf(&self, spec: &LeafSpec<'_>) -> Leaf {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        let common_name = spec.dns.first().or(spec.uris.first()).copied();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name.unwrap_or("leaf"));
        for name in spec.dns {
            let name = (*name).try_into().expect("DNS name");
            params.subject_alt_names.push(SanType::DnsName(name));
        }
        for uri in spec.uris {
            let uri = (*uri).try_into().expect("URI");
            params.subject_alt_names.push(SanType::URI(uri));
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![if spec.client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        params.use_authority_key_identifier_extension = true;
        if spec.expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2021, 1, 1);
        } else if spec.not_yet_valid {
            params.not_before = date_time_ymd(2100, 1, 1);
            params.not_after = date_time_ymd(2200, 1, 1);
        } else {
            params.not_before = date_time_ymd(2024, 1, 1);
            params.not_after = date_time_ymd(2200, 1, 1);
        }
        let (key, key_pem) = leaf_key(spec.key);
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        Leaf {
            cert_pem: format!("{}{}", cert.pem(), self.chain),
            key_pem,
        }
    }

    /// A server certificate for these DNS names.
    pub fn server(&self, dns: &[&str]) -> Leaf {
        self.leaf(&LeafSpec {
            dns,
            ..LeafSpec::default()
        })
    }

    /// A client certificate.
    pub fn client(&self, name: &str) -> Leaf {
        self.leaf(&LeafSpec {
            dns: &[name],
            client: true,
            ..LeafSpec::default()
        })
    }
}

/// A key pair of `kind` and its PEM as `kind` says.
fn leaf_key(kind: KeyKind) -> (KeyPair, String) {
    match kind {
        KeyKind::Ecdsa => {
            let key = KeyPair::generate().expect("ECDSA key");
            let pem = key.serialize_pem();
            (key, pem)
        }
        KeyKind::EcdsaSec1 => {
            let key = KeyPair::generate().expect("ECDSA key");
            let sec1 = openssl(&["pkey", "-traditional"], &key.serialize_pem());
            assert!(sec1.contains("BEGIN EC PRIVATE KEY"), "{sec1}");
            (key, sec1)
        }
        KeyKind::Ed25519 => {
            let key = KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("Ed25519 key");
            let pem = key.serialize_pem();
            (key, pem)
        }
        KeyKind::RsaPkcs1 => {
            // ring (rcgen's backend here) signs with RSA keys but cannot make them.
            let pkcs8 = openssl(
                &[
                    "genpkey",
                    "-algorithm",
                    "RSA",
                    "-pkeyopt",
                    "rsa_keygen_bits:2048",
                ],
                "",
            );
            let key =
                KeyPair::from_pem_and_sign_algo(&pkcs8, &rcgen::PKCS_RSA_SHA256).expect("RSA key");
            let pkcs1 = openssl(&["pkey", "-traditional"], &pkcs8);
            assert!(pkcs1.contains("BEGIN RSA PRIVATE KEY"), "{pkcs1}");
            (key, pkcs1)
        }
    }
}

/// `openssl ARGS < input`, its stdout.
fn openssl(args: &[&str], input: &str) -> String {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the openssl command (apt-get install openssl)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write to openssl");
    let out = child.wait_with_output().expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("PEM is text")
}

/// A `netprobe serve-tls` process; killed on drop. Its PEM files live in its own
/// temporary directory (not in the Backend directory the agent reads).
pub struct TlsServer {
    child: ChildGuard,
    _files: tempfile::TempDir,
}

impl TlsServer {
    /// Starts `netprobe serve-tls ADDR` in `netns` with `leaf`, requiring client
    /// certificates signed by `client_ca` if given, and waits until it listens.
    pub fn start(netns: &Netns, addr: &str, leaf: &Leaf, client_ca: Option<&Ca>) -> TlsServer {
        let files = tempfile::tempdir().expect("server files");
        let write = |name: &str, pem: &str| -> PathBuf {
            let path = files.path().join(name);
            std::fs::write(&path, pem).expect("write PEM");
            path
        };
        let cert = write("server.crt", &leaf.cert_pem);
        let key = write("server.key", &leaf.key_pem);
        let mut command = netns.exec(PROBE);
        command
            .args(["serve-tls", addr, "--cert"])
            .arg(&cert)
            .arg("--key")
            .arg(&key);
        if let Some(ca) = client_ca {
            command
                .arg("--client-ca")
                .arg(write("client-ca.crt", &ca.pem()));
        }
        let label = format!("tls-server {addr}");
        let mut child = ChildGuard::spawn(&label, &mut command).expect("start serve-tls");
        child
            .wait_for_line("listening", PROBE_TIMEOUT)
            .expect("serve-tls listens");
        TlsServer {
            child,
            _files: files,
        }
    }

    /// Waits until the server is done with its next connection (its `closed` line) and
    /// returns everything it printed so far.
    pub fn wait_closed(&mut self) -> Vec<String> {
        self.child
            .wait_for_line("closed ", PROBE_TIMEOUT)
            .expect("the TLS server finished a connection");
        self.lines()
    }

    /// Everything the server printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.child.lines(xtask::netlab::Stream::Stdout)
    }

    /// The lines starting with `word` (`accepted`, `handshake-ok`, `received`...).
    pub fn lines_starting(&self, word: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.split(' ').next() == Some(word))
            .collect()
    }
}

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
  port: {{port: {API_PORT}}}
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
                    base64_encode(leaf.cert_pem.as_bytes()),
                    base64_encode(leaf.key_pem.as_bytes())
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

/// Standard padded base64, as Kubernetes writes Secret `data`.
pub fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The agent's `/metrics`, read from inside the node (admin address 127.0.0.1:15000).
pub fn metrics(node: &Netns) -> String {
    let out = super::fixtures::admin_get(node, "/metrics");
    assert!(
        out.status.success(),
        "GET /metrics failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of the sample `name{labels..}` (other labels ignored) in Prometheus text.
pub fn sample(metrics: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (label_set, value) = match rest.strip_prefix('{') {
            Some(rest) => rest.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        let all = labels.iter().all(|(key, wanted)| {
            label_set
                .split(',')
                .any(|pair| pair == format!("{key}=\"{wanted}\""))
        });
        all.then(|| value.trim().parse().ok()).flatten()
    })
}

/// Polls `/metrics` until `name{labels}` reaches `at_least` (the agent counts a refusal
/// right after closing the client, so the client may see the close first); returns the
/// last text read either way.
pub fn wait_for_sample(node: &Netns, name: &str, labels: &[(&str, &str)], at_least: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = metrics(node);
        let reached = sample(&text, name, labels).is_some_and(|v| v >= at_least);
        if reached || Instant::now() >= deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
