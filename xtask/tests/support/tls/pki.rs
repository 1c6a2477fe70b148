//! Certificates made at test time (rcgen): one-test CAs, intermediates, and leaf
//! certificates with the key kinds and validity periods the TLS tests need.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType, date_time_ymd,
};

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
