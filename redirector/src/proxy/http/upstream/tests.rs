//! Retiring a pooled connection: through hyper-util's pool, as the proxy's client uses
//! it, against a local HTTP/1.1 server that counts the connections it accepts.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::{
    client::legacy::{
        Client,
        connect::{HttpConnector, capture_connection},
    },
    rt::TokioExecutor,
};

use super::*;
use crate::proxy::http::test_server::counting_server;

/// Three requests one after another; after each, the connection that carried it is
/// told it asks to be retired when `retiring`. Returns the connections the server saw.
async fn connections_for_three_requests(retiring: bool) -> usize {
    let (addr, accepted) = counting_server(true).await;
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
