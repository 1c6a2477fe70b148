//! The admin endpoint (`--admin-addr`, default 127.0.0.1:15000): `/healthz`, `/readyz`
//! (200 only once programs are attached, Backends loaded and the proxy listens) and
//! `/metrics` in the Prometheus text format, `/backends` (JSON, for `redirector status`).
//! The probe socket keeps a descriptor in reserve (`reserve.rs`), so probes are answered
//! at the open file limit too.

use std::{
    convert::Infallible,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Bytes, service::service_fn};
use hyper_util::rt::TokioIo;
use prometheus_client::{encoding::text::encode, registry::Registry};
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;

use crate::{proxy::Stats, status::StatusBoard};

mod reserve;

use reserve::{Reserve, out_of_descriptors};

/// How long the probe socket waits after an accept failure it cannot help.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

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

/// Binds at once (so a wrong `--admin-addr` or `--admin-socket` fails start-up) and
/// serves until `shutdown`.
///
/// The TCP port is shared with a second agent during an upgrade (SO_REUSEPORT), so a
/// request to it may reach either; the unix socket is this agent's alone, which is what
/// the DaemonSet's probes use.
pub async fn serve(
    addr: SocketAddr,
    socket: Option<&Path>,
    admin: Admin,
    shutdown: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let tcp = crate::proxy::listen_shared(addr, 128, "--admin-addr")?;
    let unix = match socket {
        Some(path) => Some(bind_unix(path)?),
        None => None,
    };
    let admin = Arc::new(admin);
    Ok(tokio::spawn(async move {
        let tasks = tokio_util::task::TaskTracker::new();
        if let Some((unix, path)) = unix {
            let (admin, shutdown) = (admin.clone(), shutdown.clone());
            tasks.spawn(async move {
                let reserve = Arc::new(Reserve::new());
                loop {
                    let stream = tokio::select! {
                        () = shutdown.cancelled() => break,
                        accepted = unix.accept() => match accepted {
                            Ok((stream, _)) => stream,
                            // The probe gets the reserved descriptor.
                            Err(error) if out_of_descriptors(&error) && reserve.release() => {
                                continue;
                            }
                            Err(error) => {
                                tracing::debug!(%error, "admin socket accept failed");
                                tokio::time::sleep(ACCEPT_BACKOFF).await;
                                reserve.refill();
                                continue;
                            }
                        },
                    };
                    let (admin, reserve) = (admin.clone(), reserve.clone());
                    tokio::spawn(async move {
                        serve_connection(admin, stream).await;
                        reserve.refill();
                    });
                }
                let _ = std::fs::remove_file(path);
            });
        }
        tasks.spawn(async move {
            crate::proxy::accept_until(&tcp, &shutdown, |stream, _| {
                tokio::spawn(serve_connection(admin.clone(), stream));
            })
            .await;
        });
        tasks.close();
        tasks.wait().await;
    }))
}

/// The unix admin socket; a stale one (left by a killed agent of this pod) is replaced.
fn bind_unix(path: &Path) -> std::io::Result<(UnixListener, PathBuf)> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(std::io::Error::new(
                error.kind(),
                format!("cannot replace --admin-socket {}: {error}", path.display()),
            ));
        }
        _ => {}
    }
    let listener = UnixListener::bind(path).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on --admin-socket {}: {e}", path.display()),
        )
    })?;
    Ok((listener, path.to_path_buf()))
}

async fn serve_connection<S>(admin: Arc<Admin>, stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let admin = admin.clone();
        async move { Ok::<_, Infallible>(respond(&admin, &request)) }
    });
    let connection =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    if let Err(error) = connection.await {
        tracing::debug!(%error, "admin connection");
    }
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
                let by_source = admin.stats.active(&status.name);
                status.active_connections = by_source.values().sum();
                status.active_by_source_namespace = by_source;
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
