//! The TLS side of netprobe: `serve-tls` (a rustls server that reports every step of each
//! connection) and the client half of `connect --tls-sni NAME | --tls-no-sni`.
//!
//! Blocking std I/O and one thread per connection, like the plain server: what the tests
//! observe is an ordinary TLS server and an ordinary TLS client.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, HandshakeKind, RootCertStore,
    ServerConfig, ServerConnection, SignatureScheme, StreamOwned,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use super::say;

/// `serve-tls` (and `serve-h2`) arguments.
pub(super) struct ServeArgs {
    pub(super) addr: String,
    cert: String,
    key: String,
    client_ca: Option<String>,
}

impl ServeArgs {
    pub(super) fn parse(args: &[String]) -> Result<ServeArgs, String> {
        let (mut addr, mut cert, mut key, mut client_ca) = (None, None, None, None);
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs PEM"));
            match arg.as_str() {
                "--cert" => cert = Some(value("--cert")?),
                "--key" => key = Some(value("--key")?),
                "--client-ca" => client_ca = Some(value("--client-ca")?),
                _ if addr.is_none() && !arg.starts_with('-') => addr = Some(arg.clone()),
                _ => return Err(format!("unexpected argument {arg:?}")),
            }
        }
        Ok(ServeArgs {
            addr: addr.ok_or("serve-tls needs ADDR")?,
            cert: cert.ok_or("serve-tls needs --cert PEM")?,
            key: key.ok_or("serve-tls needs --key PEM")?,
            client_ca,
        })
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn read_pem(path: &str) -> Result<Vec<u8>, String> {
    std::fs::read(Path::new(path)).map_err(|e| format!("cannot read {path}: {e}"))
}

fn certificates(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_pem(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{path}: no CERTIFICATE block"));
    }
    Ok(certs)
}

/// The server's configuration, offering `alpn` (most preferred first).
pub(super) fn server_config(args: &ServeArgs, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, String> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &args.client_ca {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(path)? {
                roots.add(cert).map_err(|e| format!("{path}: {e}"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider())
                .build()
                .map_err(|e| format!("client verifier: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let key = PrivateKeyDer::from_pem_slice(&read_pem(&args.key)?)
        .map_err(|e| format!("{}: {e}", args.key))?;
    let mut config = builder
        .with_single_cert(certificates(&args.cert)?, key)
        .map_err(|e| format!("certificate and key: {e}"))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// `netprobe serve-tls ADDR --cert PEM --key PEM [--client-ca PEM]`.
pub fn serve(args: &[String]) -> ExitCode {
    let args = match ServeArgs::parse(args) {
        Ok(args) => args,
        Err(e) => return super::usage(&e),
    };
    // Both offers a client might make; `alpn=-` in the log when it made none.
    let config = match server_config(&args, &[b"h2", b"http/1.1"]) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("netprobe: serve-tls: {e}");
            return ExitCode::from(2);
        }
    };
    super::accept_each(&args.addr, move |stream, peer| {
        answer(config.clone(), stream, peer);
        say(&format!("closed {peer}"));
    })
}

/// One connection: handshake, then one line (or everything until EOF), then the reply.
///
/// Prints `handshake-failed`, or `handshake-ok` followed by `received` (only if
/// application bytes arrived) and/or `read-failed`; the caller prints `closed` last.
fn answer(config: Arc<ServerConfig>, mut tcp: TcpStream, peer: &str) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = tcp.set_write_timeout(Some(Duration::from_secs(10)));
    let mut conn = match ServerConnection::new(config) {
        Ok(conn) => conn,
        Err(e) => return say(&format!("handshake-failed {peer} {e}")),
    };
    while conn.is_handshaking() {
        // On a TLS error complete_io still sends the alert (a last-gasp write).
        match conn.complete_io(&mut tcp) {
            Ok((0, 0)) => {
                let e = io::Error::new(ErrorKind::UnexpectedEof, "peer closed during handshake");
                return say(&format!("handshake-failed {peer} {e}"));
            }
            Ok(_) => {}
            Err(e) => return say(&format!("handshake-failed {peer} {e}")),
        }
    }
    let sni = conn.server_name().unwrap_or("-").to_owned();
    let alpn = conn.alpn_protocol().map_or_else(
        || "-".to_owned(),
        |p| String::from_utf8_lossy(p).into_owned(),
    );
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let client_cert = yes_no(conn.peer_certificates().is_some());
    let resumed = yes_no(conn.handshake_kind() == Some(HandshakeKind::Resumed));
    say(&format!(
        "handshake-ok {peer} sni={sni} alpn={alpn} client-cert={client_cert} resumed={resumed}"
    ));

    let mut tls = StreamOwned::new(conn, tcp);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let mut failure = None;
    while !got.contains(&b'\n') {
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&got);
    if !got.is_empty() {
        say(&format!("received {peer} {}", text.trim()));
    }
    if let Some(e) = failure {
        return say(&format!("read-failed {peer} {e}"));
    }
    let reply = format!("peer={peer} got={}\n", text.trim());
    let written = tls.write_all(reply.as_bytes()).and_then(|()| {
        tls.conn.send_close_notify();
        tls.flush()
    });
    if let Err(e) = written {
        say(&format!("write-failed {peer} {e}"));
    }
    let _ = tls.sock.shutdown(Shutdown::Both);
}

/// A test client's verifier: any certificate is fine (signatures are still checked, so
/// the handshake itself is a real one). Never use this outside tests.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The client's own TLS.
pub struct ClientTls {
    /// `Some(name)` sends that SNI, `None` sends no SNI at all.
    pub sni: Option<String>,
    /// Send the handshake in TCP segments of at most this many bytes (a ClientHello
    /// split across segments, as a middlebox must handle).
    pub split: Option<usize>,
}

/// Writes at most `chunk` bytes per call, each in its own TCP segment (TCP_NODELAY, and
/// a pause so that the kernel does not coalesce them).
struct Chopped<'a> {
    tcp: &'a mut TcpStream,
    chunk: usize,
}

impl Read for Chopped<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.tcp.read(buf)
    }
}

impl Write for Chopped<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.tcp.write(&buf[..buf.len().min(self.chunk)])?;
        std::thread::sleep(Duration::from_millis(20));
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

/// A failure and the stage it happened in (`tls` for the handshake).
type Failure = (&'static str, io::Error);

/// Handshake over `tcp`, send `text`, close our direction (close_notify, then a TCP
/// half-close), and read the reply until the server closes. Returns the reply and the
/// negotiated protocol version.
pub fn exchange(
    tls: &ClientTls,
    mut tcp: TcpStream,
    text: Option<&str>,
) -> Result<(Vec<u8>, String), Failure> {
    let provider = provider();
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ("tls", io::Error::other(e)))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
        .with_no_client_auth();
    // Without SNI the name below is only used by the (permissive) verifier.
    config.enable_sni = tls.sni.is_some();
    let name = tls.sni.as_deref().unwrap_or("no-sni.invalid").to_owned();
    let name = ServerName::try_from(name).map_err(|e| ("tls", io::Error::other(e)))?;
    let mut conn =
        ClientConnection::new(Arc::new(config), name).map_err(|e| ("tls", io::Error::other(e)))?;
    if let Some(chunk) = tls.split {
        tcp.set_nodelay(true).map_err(|e| ("tls", e))?;
        // Only the first flight (the ClientHello): then the handshake goes on as usual.
        let mut chopped = Chopped {
            tcp: &mut tcp,
            chunk: chunk.max(1),
        };
        while conn.wants_write() {
            conn.write_tls(&mut chopped).map_err(|e| ("tls", e))?;
        }
    }
    while conn.is_handshaking() {
        match conn.complete_io(&mut tcp) {
            Ok((0, 0)) => {
                let e = io::Error::new(ErrorKind::UnexpectedEof, "closed during the handshake");
                return Err(("tls", e));
            }
            Ok(_) => {}
            Err(e) => return Err(("tls", e)),
        }
    }
    let version = conn
        .protocol_version()
        .map_or_else(|| "-".to_owned(), |v| format!("{v:?}"));
    let mut stream = StreamOwned::new(conn, tcp);
    let io = |e| ("io", e);
    if let Some(text) = text {
        stream.write_all(text.as_bytes()).map_err(io)?;
    }
    stream.conn.send_close_notify();
    stream.flush().map_err(io)?;
    stream.sock.shutdown(Shutdown::Write).map_err(io)?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).map_err(io)?;
    Ok((reply, version))
}
