//! A local HTTP/1.1 server for the unit tests of the upstream side.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// An HTTP/1.1 server on loopback that answers "ok" and keeps connections open when
/// `keep_alive`: its address, and how many connections it has accepted.
pub async fn counting_server(keep_alive: bool) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, Ordering::Relaxed);
            let service = service_fn(|_request| async {
                Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from("ok"))))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .keep_alive(keep_alive)
                    .serve_connection(TokioIo::new(tcp), service),
            );
        }
    });
    (addr, accepted)
}
