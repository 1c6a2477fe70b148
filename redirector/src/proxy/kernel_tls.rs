//! Kernel TLS (kTLS) for upstream TLS connections, of bytes and HTTP Backends alike:
//! once rustls has made the handshake, the session keys go to the kernel
//! (`setsockopt(SOL_TLS)`), which seals and opens the records on the socket itself, and
//! the proxy reads and writes plaintext: HTTP Backends through [`KernelTlsStream`],
//! bytes Backends by splice(2) through its two sides (`splice.rs`).
//!
//! Opt-in with `--kernel-tls`, probed once at start: a kernel without the `tls` module
//! (`CONFIG_TLS` unset) leaves every connection in rustls. A connection is handed over
//! only when nothing can be lost: TLS 1.3, a cipher the probe saw the kernel take, and
//! no byte read past the handshake (it is read record by record, see `read_ahead.rs`).
//! Otherwise, or when the socket refuses the `tls` protocol, it stays in rustls. A
//! failure after the socket took the `tls` protocol closes the connection: without a
//! send key there, a write would leave in plaintext.
//!
//! What the kernel path gives up: session tickets that arrive after the hand-over are
//! dropped (rustls's secret extraction keeps no session to store them in), a server's
//! KeyUpdate ends the connection, and so does reaching the cipher's record limit (an
//! HTTP pool lends a connection no more as it nears it: `KernelTlsStream::retiring`).

mod splice;
mod stream;
mod sys;

use std::{
    io,
    net::{Ipv4Addr, TcpListener, TcpStream},
    os::fd::AsRawFd,
};

use rustls::{CipherSuite, ProtocolVersion};

pub use self::stream::KernelTlsStream;
use self::sys::{CryptoInfo, Way};
use super::tcp::UpstreamTls;

/// `--kernel-tls`: whether upstream TLS may move into the kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum KernelTlsMode {
    /// TLS stays in rustls.
    #[default]
    Off,
    /// Keys go to the kernel where the start-up probe found kernel TLS; else rustls.
    Auto,
    /// As auto, but the agent does not start where the kernel has no TLS.
    Require,
}

#[derive(Debug, thiserror::Error)]
pub enum KernelTlsError {
    #[error(
        "this kernel has no TLS: setsockopt(TCP_ULP, \"tls\") on a loopback connection \
         failed: {0} (it needs CONFIG_TLS, or the `tls` module loaded)"
    )]
    Unavailable(io::Error),
    #[error("the kernel took the keys of no TLS 1.3 cipher: {0}")]
    NoCipher(io::Error),
    #[error("the kernel TLS probe's loopback connection failed: {0}")]
    Loopback(io::Error),
}

/// Which TLS 1.3 ciphers' connections are handed to the kernel (none: TLS stays in
/// rustls).
#[derive(Debug, Default)]
pub struct KernelTls {
    ciphers: Vec<CipherSuite>,
}

/// An upstream TLS connection after [`KernelTls::offload`].
#[expect(
    clippy::large_enum_variant,
    reason = "matched where it is returned; boxing would allocate for every connection \
              that stays in rustls"
)]
pub enum Offload {
    Kernel(KernelTlsStream),
    Rustls(UpstreamTls),
}

impl KernelTls {
    /// Probes the kernel as `mode` asks, logging what it found.
    pub fn start(mode: KernelTlsMode) -> Result<Self, KernelTlsError> {
        if mode == KernelTlsMode::Off {
            return Ok(Self::default());
        }
        let probed = probe();
        match (probed, mode) {
            (Ok(ciphers), _) => {
                tracing::info!(
                    ?ciphers,
                    "kernel TLS: upstream TLS 1.3 connections hand their keys to the \
                     kernel after the handshake"
                );
                Ok(Self { ciphers })
            }
            (Err(error), KernelTlsMode::Require) => Err(error),
            (Err(error), _) => {
                tracing::info!(%error, "kernel TLS unavailable: TLS stays in rustls");
                Ok(Self::default())
            }
        }
    }

    /// Whether connections may be handed over; their handshakes must then be read
    /// record by record ([`super::read_ahead::ReadAhead::record_bounded`]).
    pub fn enabled(&self) -> bool {
        !self.ciphers.is_empty()
    }

    /// How many ciphers' connections are handed over.
    pub fn ciphers(&self) -> usize {
        self.ciphers.len()
    }

    /// Hands a freshly made connection's keys to the kernel where that loses nothing;
    /// else gives it back. An error means the connection cannot be used (closed).
    pub fn offload(&self, mut stream: UpstreamTls) -> io::Result<Offload> {
        let limit = self.eligible(&mut stream);
        let (transport, _) = stream.get_mut();
        let Some(limit) = limit else {
            transport.unbound();
            return Ok(Offload::Rustls(stream));
        };
        let fd = transport.get_ref().as_raw_fd();
        if let Err(error) = sys::attach_ulp(fd) {
            tracing::debug!(%error, "kernel TLS: the socket refused the tls protocol");
            transport.unbound();
            return Ok(Offload::Rustls(stream));
        }
        // From here the socket must not be written before its send key is set.
        let (transport, session) = stream.into_inner();
        let secrets = session
            .dangerous_extract_secrets()
            .map_err(|e| io::Error::other(format!("kernel TLS: extracting the keys: {e}")))?;
        let socket = transport.into_inner();
        let (tx_seq, tx) = &secrets.tx;
        let (rx_seq, rx) = &secrets.rx;
        for (way, seq, secret) in [(Way::Send, tx_seq, tx), (Way::Receive, rx_seq, rx)] {
            let info = CryptoInfo::tls13(*seq, secret)
                .ok_or_else(|| io::Error::other("kernel TLS: a key of an unexpected size"))?;
            info.set(fd, way).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("kernel TLS: setting the {way:?} key: {e}"),
                )
            })?;
        }
        Ok(Offload::Kernel(KernelTlsStream::new(
            socket, *tx_seq, limit,
        )))
    }

    /// The record limit of a connection whose keys can go to the kernel with nothing
    /// lost: TLS 1.3 with a cipher the kernel takes, nothing to send, and nothing read
    /// past the handshake (neither held by rustls nor by the transport). `None` if not.
    fn eligible(&self, stream: &mut UpstreamTls) -> Option<u64> {
        let (transport, session) = stream.get_mut();
        let suite = session.negotiated_cipher_suite()?.tls13()?;
        if !self.ciphers.contains(&suite.common.suite) {
            return None;
        }
        let nothing_held = session
            .process_new_packets()
            .is_ok_and(|io| io.plaintext_bytes_to_read() == 0 && !io.peer_has_closed());
        if session.protocol_version() != Some(ProtocolVersion::TLSv1_3)
            || session.wants_write()
            || !nothing_held
            || !transport.is_clean()
        {
            tracing::debug!("kernel TLS: bytes past the handshake are held; stays in rustls");
            return None;
        }
        Some(suite.common.confidentiality_limit)
    }
}

/// The TLS 1.3 ciphers whose keys the kernel takes, tried on loopback connections that
/// carry no byte.
fn probe() -> Result<Vec<CipherSuite>, KernelTlsError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(KernelTlsError::Loopback)?;
    let addr = listener.local_addr().map_err(KernelTlsError::Loopback)?;
    let mut ciphers = Vec::new();
    let mut refused = None;
    for (cipher, key) in CryptoInfo::probes() {
        // A socket takes one key per direction: a fresh connection per cipher.
        let socket = TcpStream::connect(addr).map_err(KernelTlsError::Loopback)?;
        let _peer = listener.accept().map_err(KernelTlsError::Loopback)?;
        let fd = socket.as_raw_fd();
        sys::attach_ulp(fd).map_err(KernelTlsError::Unavailable)?;
        match key
            .set(fd, Way::Send)
            .and_then(|()| key.set(fd, Way::Receive))
        {
            Ok(()) => ciphers.push(cipher),
            Err(error) => refused = Some(error),
        }
    }
    match refused {
        Some(error) if ciphers.is_empty() => Err(KernelTlsError::NoCipher(error)),
        _ => Ok(ciphers),
    }
}

#[cfg(test)]
pub(super) mod tests;
