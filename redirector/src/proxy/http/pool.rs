//! Upstream connection pools: one hyper client per (Backend, upstream address, TLS
//! settings), so idle connections are reused across client connections, and h2
//! connections carry the requests of many clients at once.
//!
//! hyper-util's client does the pooling: idle timeout, HTTP/1 reuse, h2 sharing, and
//! the one safe retry (a request that failed on a reused connection before any byte of
//! it was written is sent again on a fresh one). When a Backend's TLS material changes
//! its origination is rebuilt, the key no longer matches, and [`Pools::retain`] drops
//! the old client with its idle connections.

use std::{
    collections::HashMap,
    hash::{Hash, Hasher},
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU8, Ordering},
    },
    time::Duration,
};

use http::Version;
use hyper_util::{
    client::legacy::Client,
    rt::{TokioExecutor, TokioTimer},
};
use rustls::ClientConfig;
use tokio_util::sync::CancellationToken;

use super::{body::RequestBody, inline::IdleConnections, metrics::BackendHttp, upstream::Dialer};
use crate::{
    backend::Protocol,
    proxy::Shared,
    table::{BackendId, BackendTable, Entry},
    tls::{H2, TlsOrigination},
};

pub type UpstreamClient = Client<Dialer, RequestBody>;

/// A pool's client, its idle HTTP/1 connections for client connections that drive their
/// own (`inline.rs`), and the metrics of its Backend.
#[derive(Clone)]
pub struct Pooled {
    pub client: UpstreamClient,
    pub dialer: Dialer,
    pub idle: Arc<IdleConnections>,
    /// What the upstream speaks, as far as known: HTTP/1.1 upstreams, and those that may
    /// be, are driven inline.
    pub speaks: Arc<UpstreamSpeaks>,
    pub metrics: Arc<BackendHttp>,
    /// Cancelled when the pool is dropped because its Backend changed: a client
    /// connection still holding it is told to go (`Context::handle`).
    pub retired: CancellationToken,
}

/// What a pooled connection is good for.
#[derive(Clone)]
struct PoolKey {
    /// The Backend's stable id (a hash of its name): no allocation per lookup.
    backend: BackendId,
    to: Arc<[SocketAddr]>,
    protocol: Protocol,
    /// Compared by identity: a rebuilt origination is new material.
    tls: Option<Arc<TlsOrigination>>,
}

impl PoolKey {
    fn tls_identity(&self) -> usize {
        self.tls.as_ref().map_or(0, |tls| Arc::as_ptr(tls) as usize)
    }

    /// Whether `entry` (this key's Backend in a table) still has this key's protocol,
    /// TLS material and addresses.
    fn is_current(&self, entry: &Entry) -> bool {
        let tls = match &entry.origination {
            Ok(Some(tls)) => Arc::as_ptr(tls) as usize,
            _ => 0,
        };
        entry.backend.protocol == self.protocol
            && tls == self.tls_identity()
            && (self.to.iter()).all(|to| entry.addresses.contains(&to.ip()))
    }
}

impl PartialEq for PoolKey {
    fn eq(&self, other: &Self) -> bool {
        self.backend == other.backend
            && self.to == other.to
            && self.protocol == other.protocol
            && self.tls_identity() == other.tls_identity()
    }
}

impl Eq for PoolKey {}

impl Hash for PoolKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.backend.hash(state);
        self.to.hash(state);
        self.protocol.hash(state);
        self.tls_identity().hash(state);
    }
}

/// The most an upstream HTTP/1 connection buffers of what it read, and so the largest
/// response head accepted (a larger one is answered 502, `upstream_error`; hyper checks
/// per read, so up to twice this may pass, which the inline path, `inline/codec.rs`,
/// allows whatever the reads. HAProxy's default buffer is 16 KiB, nginx's one page).
pub const UPSTREAM_READ_BUFFER: usize = 32 * 1024;

pub struct Pools {
    idle_timeout: Duration,
    clients: Mutex<HashMap<PoolKey, Pooled>>,
}

impl Pools {
    pub fn new(idle_timeout: Duration) -> Self {
        Self {
            idle_timeout,
            clients: Mutex::default(),
        }
    }

    /// `entry`'s pool towards `to`. Looked up once per client connection and Backend:
    /// a connection's requests use what it returned.
    pub fn get(
        &self,
        shared: &Shared,
        entry: &Entry,
        tls: Option<&Arc<TlsOrigination>>,
        to: &Arc<[SocketAddr]>,
    ) -> Pooled {
        let key = PoolKey {
            backend: BackendId::of(&entry.backend.key),
            to: to.clone(),
            protocol: entry.backend.protocol,
            tls: tls.cloned(),
        };
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pooled) = clients.get(&key) {
            return pooled.clone();
        }
        let metrics = shared.stats.http.of(&entry.backend.key.to_string());
        let speaks = Arc::new(UpstreamSpeaks::of(
            entry.backend.protocol,
            tls.map(|tls| &*tls.config),
        ));
        let dialer = Dialer::new(shared, metrics.clone(), tls, to.clone()).telling(speaks.clone());
        let retired = CancellationToken::new();
        let pooled = Pooled {
            client: self.build(entry.backend.protocol, dialer.clone()),
            dialer,
            idle: IdleConnections::new(self.idle_timeout, retired.clone()),
            speaks,
            metrics,
            retired,
        };
        // A client connection routed before its Backend changed asks with the old
        // settings: it gets a pool retired already (and not kept), so it is told to go.
        let table = shared.table();
        let current = (table.lookup(key.backend).ok())
            .is_some_and(|entries| entries.iter().any(|entry| key.is_current(entry)));
        if !current {
            pooled.retired.cancel();
            return pooled;
        }
        clients.insert(key, pooled.clone());
        pooled
    }

    fn build(&self, protocol: Protocol, dialer: Dialer) -> UpstreamClient {
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            .pool_idle_timeout(self.idle_timeout)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            // Host from the URI, which the proxy builds from the Backend's hostname.
            .set_host(true)
            .retry_canceled_requests(true)
            // hyper would let a connection's read buffer grow to ~400 KiB while a body
            // is read faster than the client takes it, and keep it. Worse, every body
            // chunk waiting in the client connection's write queue pins the whole read
            // buffer it was cut from, and hyper reads the next one into a new buffer:
            // a client that stops reading holds several. bench-load, 1,000 clients that
            // GET 1 GiB and never read, agent peak: 345 MiB at 64 KiB, 248 at 32, 190 at
            // 16; TLS bulk through an HTTP Backend showed no cost at 32 (proxy CPU per
            // GiB 0.91 s at 64, 0.78 at 32, 0.98 at 16: bench/README.md). TLS yields
            // 16 KiB records per read anyway.
            .http1_max_buf_size(UPSTREAM_READ_BUFFER);
        // HTTP2, H2C and GRPC: h2 whatever ALPN says (prior knowledge in cleartext). HTTP
        // with TLS: h2 if the server picks it in ALPN (the dialer says so), else HTTP/1.1.
        if protocol.is_h2() {
            builder.http2_only(true);
        }
        builder.build(dialer)
    }

    /// Drops the pools whose Backend, address or TLS material is no longer in `table`:
    /// their idle connections close, requests in flight on them finish, and client
    /// connections that hold them are told to go after their next request.
    pub fn retain(&self, table: &BackendTable) {
        let current: HashMap<BackendId, &Arc<Entry>> = table
            .entries()
            .map(|e| (BackendId::of(&e.backend.key), e))
            .collect();
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        clients.retain(|key, pooled| {
            let contested = table.contested().contains_key(&key.backend);
            let current =
                !contested && current.get(&key.backend).is_some_and(|e| key.is_current(e));
            if !current {
                pooled.retired.cancel();
                pooled.idle.clear();
            }
            current
        });
    }
}

/// What a pool's upstream speaks, as far as known: HTTP/1.1 ones, and those that may
/// be, are driven inline.
pub struct UpstreamSpeaks(AtomicU8);

const UNKNOWN: u8 = 0;
const HTTP1: u8 = 1;
const HTTP2: u8 = 2;

impl UpstreamSpeaks {
    /// Known from the Backend where its protocol leaves one choice (HTTP2, H2C and GRPC
    /// are h2; cleartext HTTP, HTTP11, MCP and WSS are HTTP/1.1); with TLS that offers h2
    /// in ALPN the server decides, and the first connection tells.
    pub fn of(protocol: Protocol, tls: Option<&ClientConfig>) -> Self {
        let offers_h2 = |config: &ClientConfig| config.alpn_protocols.iter().any(|p| p == H2);
        let known = match (protocol, tls) {
            (protocol, _) if protocol.is_h2() => HTTP2,
            (_, Some(config)) if offers_h2(config) => UNKNOWN,
            _ => HTTP1,
        };
        Self(AtomicU8::new(known))
    }

    /// Not known to speak h2: requests may go on HTTP/1.1 connections driven inline,
    /// whose dial tells (`inline.rs`).
    pub fn may_be_http1(&self) -> bool {
        self.0.load(Ordering::Relaxed) != HTTP2
    }

    #[cfg(test)]
    fn http1(&self) -> bool {
        self.0.load(Ordering::Relaxed) == HTTP1
    }

    /// What a new connection's ALPN tells while nothing is known.
    pub fn learn(&self, version: Version) {
        let speaks = if version == Version::HTTP_2 {
            HTTP2
        } else {
            HTTP1
        };
        let _ = self
            .0
            .compare_exchange(UNKNOWN, speaks, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// A new connection's server chose h2 after all: the shared pool serves from now on.
    pub fn h2(&self) {
        self.0.store(HTTP2, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, ObjectKey};

    fn entry(protocol: Protocol, addresses: &[&str]) -> Entry {
        Entry {
            backend: Arc::new(Backend {
                key: ObjectKey::new("demo", "api"),
                hostname: "api.example.test".to_owned(),
                port: 80,
                protocol,
                tls: None,
            }),
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
            origination: Ok(None),
            policy: Default::default(),
        }
    }

    #[test]
    fn a_pool_is_current_while_its_backend_keeps_protocol_tls_and_addresses() {
        let routed = entry(Protocol::Http11, &["192.0.2.1", "192.0.2.2"]);
        let key = PoolKey {
            backend: BackendId::of(&routed.backend.key),
            to: Arc::from(["192.0.2.1:80".parse().unwrap()]),
            protocol: Protocol::Http11,
            tls: None,
        };
        assert!(key.is_current(&routed));
        assert!(!key.is_current(&entry(Protocol::Mcp, &["192.0.2.1"])));
        assert!(!key.is_current(&entry(Protocol::Http11, &["192.0.2.9"])));
    }

    #[test]
    fn what_the_upstream_speaks_is_known_from_the_backend_or_learned() {
        let offering = |alpn: &[&[u8]]| {
            let mut config = ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            config
        };
        let both = offering(&[H2, b"http/1.1"]);
        let http1 = offering(&[b"http/1.1"]);
        for (protocol, tls, expected) in [
            (Protocol::Http, None, true),
            (Protocol::Http11, Some(&http1), true),
            (Protocol::Mcp, Some(&http1), true),
            (Protocol::Http, Some(&both), false),
            (Protocol::Http2, None, false),
            (Protocol::H2c, None, false),
        ] {
            let speaks = UpstreamSpeaks::of(protocol, tls);
            assert_eq!(speaks.http1(), expected, "{protocol:?}");
        }
        let learning = UpstreamSpeaks::of(Protocol::Http, Some(&both));
        learning.learn(Version::HTTP_11);
        assert!(learning.http1());
        learning.learn(Version::HTTP_2);
        assert!(learning.http1(), "learned once");
        let picky = UpstreamSpeaks::of(Protocol::Http, Some(&both));
        assert!(picky.may_be_http1(), "not known yet");
        picky.learn(Version::HTTP_2);
        assert!(!picky.http1());
        assert!(!picky.may_be_http1());
        let h2 = UpstreamSpeaks::of(Protocol::Http2, None);
        assert!(!h2.may_be_http1());
    }
}
