//! Kernel TLS against an in-process rustls server over loopback TCP. The keys handed to
//! the kernel are checked by opening and sealing real records with them here, so they
//! are verified even on a kernel without TLS; the hand-over itself (HTTP through hyper:
//! `tests/http.rs`) runs where the kernel has it and is checked to fall back where it
//! does not.

use std::{future::Future, sync::Arc};

use aws_lc_rs::aead::{AES_128_GCM, AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce};
use rustls::ServerConfig;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};
use tokio_rustls::TlsAcceptor;

use super::{sys::ALERT, *};
use crate::{
    backend::{Protocol, TlsMode},
    proxy::tcp::handshake_with,
    tls::{
        TlsOrigination,
        tests::{Ca, backend, catalog, certs, key, server},
    },
};

const GREETING: &[u8] = b"hello from the server";
const UPDATE: &[u8] = b"update your keys";
const UPDATED: &[u8] = b"keys updated";

/// A TLS 1.3 connection to a server that greets, then echoes what it reads until the
/// client closes, except that on reading exactly [`UPDATE`] it updates its keys
/// (KeyUpdate) and says [`UPDATED`]. The server task returns whether the client closed
/// with close_notify. The server picks `cipher`.
async fn connected(record_bounded: bool, cipher: CipherSuite) -> (UpstreamTls, JoinHandle<bool>) {
    connected_to(record_bounded, cipher, echo).await
}

/// The server of [`connected`].
async fn echo(mut tls: ServerTls) -> bool {
    tls.write_all(GREETING).await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tls.read(&mut buf).await {
            Ok(0) => return true,
            Ok(n) if &buf[..n] == UPDATE => {
                tls.get_mut().1.refresh_traffic_keys().unwrap();
                tls.write_all(UPDATED).await.unwrap();
            }
            Ok(n) => tls.write_all(&buf[..n]).await.unwrap(),
            Err(_) => return false,
        }
    }
}

pub(in crate::proxy) type ServerTls = tokio_rustls::server::TlsStream<TcpStream>;

/// A TLS 1.3 connection to a server that picks `cipher` and runs `serve` (also the
/// inline HTTP path's tests).
pub(in crate::proxy) async fn connected_to<F, Served>(
    record_bounded: bool,
    cipher: CipherSuite,
    serve: F,
) -> (UpstreamTls, JoinHandle<Served::Output>)
where
    F: FnOnce(ServerTls) -> Served + Send + 'static,
    Served: Future + Send + 'static,
    Served::Output: Send + 'static,
{
    let ca = Ca::new("kernel TLS test CA");
    let leaf = ca.leaf(&["api.example.test"], false);
    let mut server_config = Arc::unwrap_or_clone(server(&leaf, None));
    server_config.alpn_protocols.clear();
    let mut provider = Arc::unwrap_or_clone(server_config.crypto_provider().clone());
    provider.cipher_suites.retain(|s| s.suite() == cipher);
    assert_eq!(provider.cipher_suites.len(), 1, "{cipher:?}");
    let mut server_config = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs(&leaf.0), key(&leaf.1))
        .unwrap();
    // For servers that go on sealing records themselves (`tests/records.rs`).
    server_config.enable_secret_extraction = true;
    let acceptor = TlsAcceptor::from(Arc::new(server_config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        serve(acceptor.accept(tcp).await.unwrap()).await
    });
    let origination = TlsOrigination::for_backend(
        &backend(TlsMode::ServerOnly, vec![], Protocol::Tcp),
        &catalog(&ca, None),
    )
    .unwrap()
    .unwrap();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let config = origination.config.clone();
    let timeout = std::time::Duration::from_secs(5);
    let Ok(stream) = handshake_with(&origination, config, tcp, timeout, record_bounded).await
    else {
        panic!("the handshake failed");
    };
    (stream, served)
}

/// Opens and seals TLS 1.3 records with one direction's key as the kernel got it.
struct RecordKey {
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl RecordKey {
    fn new(info: &CryptoInfo) -> Self {
        let (key, salt, iv, seq) = info.parts();
        let algorithm = match info {
            CryptoInfo::Aes128Gcm(_) => &AES_128_GCM,
            CryptoInfo::Aes256Gcm(_) => &AES_256_GCM,
            CryptoInfo::Chacha20Poly1305(_) => &CHACHA20_POLY1305,
        };
        let key = aws_lc_rs::aead::UnboundKey::new(algorithm, key).unwrap();
        Self {
            key: LessSafeKey::new(key),
            iv: [salt, iv].concat().try_into().unwrap(),
            seq: u64::from_be_bytes(seq),
        }
    }

    fn nonce(&mut self) -> Nonce {
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *n ^= s;
        }
        self.seq += 1;
        Nonce::assume_unique_for_key(nonce)
    }

    /// The inner content type and plaintext of one whole record.
    fn open(&mut self, record: &[u8]) -> (u8, Vec<u8>) {
        let (header, body) = record.split_at(5);
        let mut body = body.to_vec();
        let nonce = self.nonce();
        let plain = (self.key)
            .open_in_place(nonce, Aad::from(header), &mut body)
            .expect("the record opens with the key handed to the kernel");
        let end = plain.iter().rposition(|&b| b != 0).unwrap();
        (plain[end], plain[..end].to_vec())
    }

    fn seal(&mut self, content_type: u8, plain: &[u8]) -> Vec<u8> {
        let mut body = [plain, &[content_type]].concat();
        let length = u16::try_from(body.len() + 16).unwrap().to_be_bytes();
        let header = [23, 3, 3, length[0], length[1]];
        let nonce = self.nonce();
        (self.key)
            .seal_in_place_append_tag(nonce, Aad::from(header), &mut body)
            .unwrap();
        [&header[..], &body].concat()
    }
}

/// The socket under a connection, and its keys as the kernel would be given them.
fn extracted(stream: UpstreamTls) -> (TcpStream, RecordKey, RecordKey) {
    let (transport, session) = stream.into_inner();
    let secrets = session.dangerous_extract_secrets().unwrap();
    let key = |(seq, secret): &(u64, _)| RecordKey::new(&CryptoInfo::tls13(*seq, secret).unwrap());
    (transport.into_inner(), key(&secrets.rx), key(&secrets.tx))
}

async fn read_record(tcp: &mut TcpStream) -> Vec<u8> {
    let mut header = [0u8; 5];
    tcp.read_exact(&mut header).await.unwrap();
    let mut body = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
    tcp.read_exact(&mut body).await.unwrap();
    [&header[..], &body].concat()
}

/// Every TLS 1.3 cipher the kernel may be handed.
fn ciphers() -> Vec<CipherSuite> {
    CryptoInfo::probes().map(|(cipher, _)| cipher).to_vec()
}

#[tokio::test]
async fn the_keys_as_handed_to_the_kernel_open_and_seal_the_servers_records() {
    for cipher in ciphers() {
        keys_open_and_seal(cipher).await;
    }
}

async fn keys_open_and_seal(cipher: CipherSuite) {
    let (stream, served) = connected(true, cipher).await;
    let (transport, session) = stream.get_ref();
    assert!(transport.is_clean(), "nothing read past the handshake");
    assert_eq!(session.protocol_version(), Some(ProtocolVersion::TLSv1_3));
    let (mut tcp, mut opener, mut sealer) = extracted(stream);

    // The server's session tickets come first, as post-handshake messages.
    let mut handshake = Vec::new();
    let greeting = loop {
        match opener.open(&read_record(&mut tcp).await) {
            (sys::HANDSHAKE, message) => handshake.extend(message),
            (sys::APPLICATION_DATA, data) => break data,
            other => panic!("unexpected record {other:?}"),
        }
    };
    assert_eq!(greeting, GREETING, "{cipher:?}");
    let mut tickets = 0;
    while let Some((message, length)) = stream::post_handshake(&handshake).unwrap() {
        assert_eq!(message, 4, "a NewSessionTicket");
        handshake.drain(..length);
        tickets += 1;
    }
    assert!(tickets > 0 && handshake.is_empty(), "{tickets} tickets");

    tcp.write_all(&sealer.seal(sys::APPLICATION_DATA, b"ping"))
        .await
        .unwrap();
    let (kind, echo) = opener.open(&read_record(&mut tcp).await);
    assert_eq!(
        (kind, echo.as_slice()),
        (sys::APPLICATION_DATA, &b"ping"[..])
    );
    tcp.write_all(&sealer.seal(ALERT, &[1, 0])).await.unwrap();
    assert!(served.await.unwrap(), "the server took our close_notify");
}

#[tokio::test]
async fn a_key_handed_over_mid_stream_starts_at_the_next_record() {
    let (mut stream, served) = connected(true, CipherSuite::TLS13_AES_128_GCM_SHA256).await;
    let mut greeting = vec![0u8; GREETING.len()];
    stream.read_exact(&mut greeting).await.unwrap();
    let (mut tcp, mut opener, mut sealer) = extracted(stream);
    assert!(
        opener.seq > 1,
        "tickets and the greeting were read: {}",
        opener.seq
    );
    assert_eq!(sealer.seq, 0, "nothing was sent");
    tcp.write_all(&sealer.seal(sys::APPLICATION_DATA, b"later"))
        .await
        .unwrap();
    let (kind, echo) = opener.open(&read_record(&mut tcp).await);
    assert_eq!(
        (kind, echo.as_slice()),
        (sys::APPLICATION_DATA, &b"later"[..])
    );
    drop(tcp);
    assert!(!served.await.unwrap(), "closed without close_notify");
}

/// Offloads a fresh connection: to the kernel where the probe finds kernel TLS, else
/// it stays in rustls (and the test checks that it does). `true`: handed over.
async fn offloaded(cipher: CipherSuite) -> (Box<dyn Io>, bool, JoinHandle<bool>) {
    let (stream, served) = connected(true, cipher).await;
    let (stream, handed) = offload_here(stream);
    (stream, handed, served)
}

/// [`KernelTls::offload`] as this kernel allows: the kernel path where the probe finds
/// kernel TLS, else rustls (checked). `true`: handed over.
fn offload_here(stream: UpstreamTls) -> (Box<dyn Io>, bool) {
    match offload_checked(stream) {
        Offload::Kernel(stream) => (Box::new(stream), true),
        Offload::Rustls(stream) => (Box::new(stream), false),
    }
}

/// [`offload_here`], the stream as the proxy gets it.
fn offload_checked(mut stream: UpstreamTls) -> Offload {
    let kernel = KernelTls { ciphers: ciphers() };
    let cipher = stream.get_ref().1.negotiated_cipher_suite();
    assert!(kernel.eligible(&mut stream).is_some(), "{cipher:?}");
    let offload = kernel.offload(stream).unwrap();
    match (&offload, probe()) {
        (Offload::Kernel(_), Ok(_)) | (Offload::Rustls(_), Err(KernelTlsError::Unavailable(_))) => {
        }
        (Offload::Kernel(_), Err(error)) => panic!("handed over, but the probe says {error}"),
        (Offload::Rustls(_), probed) => panic!("kept in rustls, the probe says {probed:?}"),
    }
    let handed = matches!(offload, Offload::Kernel(_));
    assert!(handed || !expect_kernel_tls(), "kept in rustls");
    offload
}

#[tokio::test]
async fn a_connection_is_handed_to_the_kernel_where_it_has_tls_and_works_either_way() {
    for cipher in ciphers() {
        let (mut stream, handed, served) = offloaded(cipher).await;
        let mut greeting = vec![0u8; GREETING.len()];
        stream.read_exact(&mut greeting).await.unwrap();
        assert_eq!(greeting, GREETING, "{cipher:?}");
        // Small reads and writes, then a megabyte each way at once.
        stream.write_all(b"ping").await.unwrap();
        let mut byte = [0u8; 1];
        for expected in b"ping" {
            stream.read_exact(&mut byte).await.unwrap();
            assert_eq!(byte[0], *expected);
        }
        let sent: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
        let (mut read, mut write) = tokio::io::split(stream);
        let writer = async {
            write.write_all(&sent).await.unwrap();
            write
        };
        let reader = async {
            let mut echoed = vec![0u8; sent.len()];
            read.read_exact(&mut echoed).await.unwrap();
            echoed
        };
        let (mut write, echoed) = tokio::join!(writer, reader);
        assert!(echoed == sent, "{cipher:?}: the megabyte came back changed");
        write.shutdown().await.unwrap();
        assert!(
            served.await.unwrap(),
            "{cipher:?}: closed with close_notify"
        );
        let mut rest = Vec::new();
        read.read_to_end(&mut rest).await.unwrap_or_default();
        assert!(rest.is_empty(), "handed over: {handed}");
    }
}

#[tokio::test]
async fn a_server_key_update_ends_a_kernel_connection_and_not_a_rustls_one() {
    let (mut stream, handed, _served) = offloaded(CipherSuite::TLS13_AES_256_GCM_SHA384).await;
    let mut greeting = vec![0u8; GREETING.len()];
    stream.read_exact(&mut greeting).await.unwrap();
    stream.write_all(UPDATE).await.unwrap();
    let mut reply = vec![0u8; UPDATED.len()];
    let read = stream.read_exact(&mut reply).await;
    if handed {
        let error = read.unwrap_err();
        assert!(error.to_string().contains("KeyUpdate"), "{error}");
    } else {
        read.unwrap();
        assert_eq!(reply, UPDATED);
    }
}

#[tokio::test]
async fn an_unbounded_handshake_stays_in_rustls() {
    let kernel = KernelTls { ciphers: ciphers() };
    let (stream, _served) = connected(false, CipherSuite::TLS13_AES_256_GCM_SHA384).await;
    assert!(matches!(kernel.offload(stream), Ok(Offload::Rustls(_))));
}

#[test]
fn off_never_probes_and_require_fails_where_the_probe_does() {
    assert!(!KernelTls::start(KernelTlsMode::Off).unwrap().enabled());
    let auto = KernelTls::start(KernelTlsMode::Auto).unwrap();
    assert!(
        auto.enabled() || !expect_kernel_tls(),
        "the probe found no kernel TLS"
    );
    match (probe(), KernelTls::start(KernelTlsMode::Require)) {
        (Ok(ciphers), Ok(required)) => {
            assert_eq!(required.ciphers, ciphers);
            assert_eq!(auto.ciphers, ciphers);
        }
        (Err(_), Err(error)) => {
            assert!(!auto.enabled());
            let message = error.to_string();
            assert!(
                message.contains("setsockopt(TCP_ULP, \"tls\")") || message.contains("cipher"),
                "{message}"
            );
        }
        (probed, required) => panic!("probe {probed:?}, require {:?}", required.map(|_| ())),
    }
}

/// Set where the kernel is known to have TLS (`xtask/tests/kernel_tls_guest.rs`): the
/// kernel path must then be the one taken.
fn expect_kernel_tls() -> bool {
    std::env::var_os("REDIRECTOR_EXPECT_KERNEL_TLS").is_some()
}

mod http;
mod records;
mod spliced;

trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}
