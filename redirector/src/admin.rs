//! The admin endpoint (`--admin-addr`, default 127.0.0.1:15000): `/healthz`, `/readyz`
//! (200 only once programs are attached, Backends loaded and the proxy listens) and
//! `/metrics` in the Prometheus text format, `/backends` (JSON, for `redirector status`).

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Bytes, service::service_fn};
use hyper_util::rt::TokioIo;
use prometheus_client::{encoding::text::encode, registry::Registry};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{proxy::Stats, status::StatusBoard};

/// Readiness, flipped once by `run` when everything is in place.
#[derive(Debug, Default)]
pub struct Readiness(AtomicBool);

impl Readiness {
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

pub struct Admin {
    pub registry: Registry,
    pub readiness: Arc<Readiness>,
    pub board: Arc<StatusBoard>,
    pub stats: Arc<Stats>,
}

/// Binds at once (so a wrong `--admin-addr` fails start-up) and serves until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    admin: Admin,
    shutdown: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on --admin-addr {addr}: {e}"),
        )
    })?;
    let admin = Arc::new(admin);
    Ok(tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                () = shutdown.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::debug!(%error, "admin accept failed");
                        continue;
                    }
                },
            };
            let admin = admin.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let admin = admin.clone();
                    async move { Ok::<_, Infallible>(respond(&admin, &request)) }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(error) = connection.await {
                    tracing::debug!(%error, "admin connection");
                }
            });
        }
    }))
}

fn respond<B>(admin: &Admin, request: &Request<B>) -> Response<Full<Bytes>> {
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
    }
    match request.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" if admin.readiness.is_ready() => text(StatusCode::OK, "ready\n".into()),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n".into()),
        "/backends" => {
            let mut statuses = admin.board.snapshot();
            for status in &mut statuses {
                status.active_connections = admin.stats.active(&status.name);
            }
            match serde_json::to_string_pretty(&statuses) {
                Ok(json) => with_type(text(StatusCode::OK, json + "\n"), "application/json"),
                Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
            }
        }
        "/metrics" => {
            let mut body = String::new();
            match encode(&mut body, &admin.registry) {
                Ok(()) => text(StatusCode::OK, body),
                Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
            }
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "try /healthz, /readyz or /metrics\n".into(),
        ),
    }
}

fn with_type(
    mut response: Response<Full<Bytes>>,
    content_type: &'static str,
) -> Response<Full<Bytes>> {
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}
