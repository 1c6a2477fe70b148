//! The agent's validated Backend model: what the resolver, datapath and proxy consume.
//!
//! Kept apart from the upstream serde types (`model`) so that API churn upstream changes
//! only the translation in `validate`, and so that every value here is known-good.
//! Equality is structural because the datapath diffs old and new catalogs.

use std::fmt;

use crate::backend::model::{BackendProtocol, BackendTlsMode};

/// Namespace and name of a Kubernetes object; the identity of a Backend and the key of
/// the ConfigMap and Secret maps. Ordered so that catalogs and diffs are deterministic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// `namespace/name`, the form `kubectl` users recognise.
impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A validated Backend: everything the resolver, datapath and proxy need, already checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub key: ObjectKey,
    /// Lowercase, without a trailing dot: validation refuses other spellings, as upstream does.
    pub hostname: String,
    pub port: u16,
    pub protocol: Protocol,
    /// `Some` whenever `spec.tls` is present, even with mode `None`, so that the mode an
    /// operator wrote is visible (e.g. in `/backends`) and diffs notice a change to it.
    pub tls: Option<BackendTls>,
}

/// What the proxy speaks to the upstream. Upstream leaves an absent `protocol` to "the
/// route"; a transparent redirector has no route, so absent means [`Protocol::Tcp`]
/// (opaque bytes), the only choice that cannot misinterpret the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Tcp,
    Http,
    Http2,
    Http11,
    H2c,
    Mcp,
    Grpc,
    Wss,
}

impl Protocol {
    /// The upstream spelling, for logs and the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Http => "HTTP",
            Self::Http2 => "HTTP2",
            Self::Http11 => "HTTP11",
            Self::H2c => "H2C",
            Self::Mcp => "MCP",
            Self::Grpc => "GRPC",
            Self::Wss => "WSS",
        }
    }

    /// Whether the proxy speaks HTTP to both sides (everything but `TCP`).
    pub fn is_http(self) -> bool {
        self != Self::Tcp
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<BackendProtocol> for Protocol {
    fn from(p: BackendProtocol) -> Self {
        match p {
            BackendProtocol::Tcp => Self::Tcp,
            BackendProtocol::Http => Self::Http,
            BackendProtocol::Http2 => Self::Http2,
            BackendProtocol::Http11 => Self::Http11,
            BackendProtocol::H2c => Self::H2c,
            BackendProtocol::Mcp => Self::Mcp,
            BackendProtocol::Grpc => Self::Grpc,
            BackendProtocol::Wss => Self::Wss,
        }
    }
}

/// How the proxy treats the connection to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlsMode {
    /// Bytes pass unchanged.
    None,
    /// TLS is originated and the server certificate verified.
    ServerOnly,
    /// As `ServerOnly`, also presenting a client certificate.
    ClientAndServer,
}

impl TlsMode {
    /// The upstream spelling, for logs and the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "None",
            Self::ServerOnly => "ServerOnly",
            Self::ClientAndServer => "ClientAndServer",
        }
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<BackendTlsMode> for TlsMode {
    fn from(m: BackendTlsMode) -> Self {
        match m {
            BackendTlsMode::None => Self::None,
            BackendTlsMode::ServerOnly => Self::ServerOnly,
            BackendTlsMode::ClientAndServer => Self::ClientAndServer,
        }
    }
}

/// TLS settings of a Backend, references already resolved to namespaced keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendTls {
    pub mode: TlsMode,
    /// SNI and, without `subject_alt_names`, the name the certificate must carry.
    /// With mode `None` and no `validation`, this is the Backend hostname (unused).
    pub hostname: String,
    /// With mode `None` and no `validation`, [`CaSource::System`] (unused).
    pub ca: CaSource,
    pub subject_alt_names: Vec<SubjectAltName>,
    /// `Some` exactly when mode is `ClientAndServer`.
    pub client_certificate: Option<ObjectRef>,
}

/// Where the roots that verify the upstream certificate come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    /// PEM bundles (key `ca.crt`) in these objects, in the Backend's namespace.
    Refs(Vec<ObjectRef>),
    /// The system / webpki roots (`wellKnownCACertificates: System`).
    System,
}

/// A reference to a ConfigMap or Secret, with the namespace already defaulted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub kind: RefKind,
    pub key: ObjectKey,
}

/// `ConfigMap demo/api-ca`, as messages name referenced objects.
impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            RefKind::ConfigMap => "ConfigMap",
            RefKind::Secret => "Secret",
        };
        write!(f, "{kind} {}", self.key)
    }
}

/// The kinds of object a Backend may reference (both in the core API group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RefKind {
    ConfigMap,
    Secret,
}

/// A name the upstream certificate must present (at least one of the list must match).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SubjectAltName {
    /// DNS name, lowercase (validated); may start with `*.`.
    Hostname(String),
    /// URI SAN, e.g. a SPIFFE ID, compared verbatim.
    Uri(String),
}

/// One reason an object is rejected. Displays as `spec.tls.validation.hostname: required`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// Dotted path in upstream JSON names, `[i]` for list items.
    pub field: String,
    pub message: String,
}
