//! Retiring a pooled connection: through hyper-util's pool, as the proxy's client uses
//! it, against a local HTTP/1.1 server that counts the connections it accepts.

use std::sync::atomic::AtomicUsize;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::{Request, Response, service::service_fn};
use hyper_util::{
    client::legacy::{
        Client,
        connect::{HttpConnector, capture_connection},
    },
    rt::TokioExecutor,
};
use tokio::net::TcpListener;

use super::*;

/// A keep-alive HTTP/1.1 server on loopback: its address, and how many connections it
/// has accepted.
async fn counting_server() -> (SocketAddr, Arc<AtomicUsize>) {
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
                    .serve_connection(TokioIo::new(tcp), service),
            );
        }
    });
    (addr, accepted)
}

/// Three requests one after another; after each, the connection that carried it is
/// told it asks to be retired when `retiring`. Returns the connections the server saw.
async fn connections_for_three_requests(retiring: bool) -> usize {
    let (addr, accepted) = counting_server().await;
    let client = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let asked = if retiring {
        UpstreamConnection::retired()
    } else {
        UpstreamConnection::default()
    };
    for _ in 0..3 {
        let mut request = Request::get(format!("http://{addr}/"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let captured = capture_connection(&mut request);
        let response = client.request(request).await.unwrap();
        assert_eq!(asked.retire_if_asked(&captured), retiring);
        response.into_body().collect().await.unwrap();
        // Let the pool take the connection back before the next request.
        tokio::task::yield_now().await;
    }
    accepted.load(Ordering::Relaxed)
}

#[tokio::test]
async fn a_retiring_connection_is_not_lent_again_and_others_are() {
    assert_eq!(connections_for_three_requests(false).await, 1);
    assert_eq!(connections_for_three_requests(true).await, 3);
}

#[tokio::test]
async fn only_a_connection_that_asks_is_retired() {
    assert!(!UpstreamConnection::default().retiring());
    assert!(UpstreamConnection::retired().retiring());
    let mut unsent = Request::new(());
    let captured = capture_connection(&mut unsent);
    assert!(
        !UpstreamConnection::retired().retire_if_asked(&captured),
        "no connection lent"
    );
    let described = UpstreamConnection::describe(&captured);
    assert!(
        described.contains("waiting for an upstream connection"),
        "{described}"
    );
}
