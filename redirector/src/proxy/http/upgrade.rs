//! Upgrade requests (WebSocket and others): an HTTP/1.1 upstream connection of their
//! own, whatever the Backend's protocol, then bytes both ways once both sides agreed.
//! An offer of `h2c` is declined and never comes here (`headers::is_upgrade`).

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use http::{Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::{
    error::{HttpError, ProxyError},
    headers,
    metrics::BackendHttp,
    upstream::Dialer,
};
use crate::{proxy::Shared, tls::TlsOrigination};

/// `connected` is set once the upstream connection is made (TCP, TLS and HTTP/1.1
/// handshakes), for the 504 that may cut this short. The upgraded connection counts as
/// active for `source_namespace` until its relay ends.
pub async fn forward(
    shared: &Arc<Shared>,
    metrics: Arc<BackendHttp>,
    tls: Option<&Arc<TlsOrigination>>,
    to: &Arc<[SocketAddr]>,
    (original, source_namespace): (SocketAddr, &str),
    mut req: Request<Incoming>,
    connected: &AtomicBool,
) -> Result<Response<Incoming>, ProxyError> {
    let label = metrics.name.clone();
    let stream = Dialer::new(shared, metrics, tls, to.clone())
        .dial(tls.map(|tls| tls.http1_config.clone()))
        .await
        .map_err(|error| ProxyError::new(error.kind, error.detail))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|error| ProxyError::from_client(&error, original))?;
    connected.store(true, Ordering::Relaxed);
    tokio::spawn(async move {
        if let Err(error) = connection.with_upgrades().await {
            tracing::debug!(%error, "upgrade connection to the upstream ended");
        }
    });
    // The origin-form target: this connection is the upstream's own.
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    *req.uri_mut() = path.parse().map_err(|_| {
        ProxyError::new(
            HttpError::UpstreamError,
            format!("bad request target {path:?}"),
        )
    })?;
    let client_side = hyper::upgrade::on(&mut req);
    let mut response = sender
        .send_request(req)
        .await
        .map_err(|error| ProxyError::from_client(&error, original))?;
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Upgrades are HTTP/1.1's own: the client speaks it.
        headers::strip_response(response.headers_mut(), Version::HTTP_11)
            .map_err(|c| ProxyError::coded_response(&c, original, &label, Version::HTTP_11))?;
        return Ok(response);
    }
    let upstream_side = hyper::upgrade::on(&mut response);
    let limits = shared.limits;
    let for_relay = shared.clone();
    let source_namespace = source_namespace.to_owned();
    shared.tasks.spawn(async move {
        let (client, upstream) = match tokio::try_join!(client_side, upstream_side) {
            Ok(both) => both,
            Err(error) => {
                tracing::debug!(%error, "upgrade did not complete");
                return;
            }
        };
        // hyper's client connection ended with the upgrade (and counted itself done):
        // the upgraded one is active until its relay ends.
        let _active = (for_relay.stats).active_guard_from(&label, &source_namespace);
        let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
        let (_, result) = crate::proxy::relay::relay(
            &mut client,
            &mut upstream,
            limits.buffer_size,
            limits.idle_timeout,
        )
        .await;
        if let Err(error) = result {
            tracing::debug!(%error, "upgraded connection ended with an error");
        }
    });
    Ok(response)
}
