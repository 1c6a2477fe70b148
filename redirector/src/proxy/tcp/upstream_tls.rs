//! TLS towards the upstream, shared by bytes and HTTP Backends: the handshake, and the
//! alert a server may have queued behind a broken relay.

use std::{io, sync::Arc, time::Duration};

use rustls::ClientConfig;
use tokio::{
    io::{AsyncRead, AsyncReadExt},
    net::TcpStream,
};
use tokio_rustls::TlsConnector;

use crate::{
    proxy::{Refusal, connection::Refused, read_ahead::ReadAhead, relay::Transferred},
    tls::{HandshakeFailure, TlsOrigination, sniff},
};

/// A TLS connection to an upstream: rustls over a socket read in large chunks.
pub type UpstreamTls = tokio_rustls::client::TlsStream<ReadAhead<TcpStream>>;

/// How long a failed TLS connection is given to reveal a queued alert.
const ALERT_WAIT: Duration = Duration::from_millis(100);

/// With TLS 1.3 the server judges our client certificate after our side of the handshake
/// is done: its refusal is an alert queued behind whatever broke the relay (typically a
/// reset when we wrote). After such an error, read once more so the alert surfaces.
pub(super) async fn with_pending_alert<U: AsyncRead + Unpin>(
    (moved, result): (Transferred, io::Result<()>),
    upstream: &mut U,
) -> (Transferred, io::Result<()>) {
    match result {
        Err(error) if !sniff::is_reroute(&error) && sniff::refusal(&error).is_none() => {
            let mut byte = [0u8; 1];
            let alert = match tokio::time::timeout(ALERT_WAIT, upstream.read(&mut byte)).await {
                Ok(Err(alert))
                    if HandshakeFailure::classify(&alert) == HandshakeFailure::RejectedByServer =>
                {
                    alert
                }
                _ => error,
            };
            (moved, Err(alert))
        }
        other => (moved, other),
    }
}

/// The TLS handshake with the upstream, with a given client configuration (ALPN
/// differs for HTTP upgrades). Nothing from the client has been read yet, so no
/// plaintext can reach the network before it completes. `record_bounded`: read so that
/// the keys can go to the kernel afterwards (see `kernel_tls.rs`).
pub async fn handshake_with(
    tls: &TlsOrigination,
    config: Arc<ClientConfig>,
    tcp: TcpStream,
    timeout: Duration,
    record_bounded: bool,
) -> Result<UpstreamTls, Refused> {
    let connector = TlsConnector::from(config);
    let transport = if record_bounded {
        ReadAhead::record_bounded(tcp)
    } else {
        ReadAhead::new(tcp)
    };
    let handshake = connector.connect(tls.server_name.clone(), transport);
    match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(error)) => {
            let failure = HandshakeFailure::classify(&error);
            Err(Refused::new(
                Refusal::Handshake(failure),
                format!(
                    "TLS handshake with SNI {:?} failed ({}): {error}",
                    tls.server_name.to_str(),
                    failure.as_str()
                ),
            ))
        }
        Err(_) => Err(Refused::new(
            Refusal::Handshake(HandshakeFailure::Other),
            format!("TLS handshake timed out after {timeout:?}"),
        )),
    }
}
