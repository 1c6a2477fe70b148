//! Retiring a pooled connection: through hyper-util's pool, as the proxy's client uses
//! it, against a local HTTP/1.1 server that counts the connections it accepts. And the
//! connections the inline path hands over to the pool.

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

/// A connection to a loopback listener, and the listener's end of it.
async fn loopback_pair(listener: &tokio::net::TcpListener) -> (Upstream, TcpStream) {
    let dialed = TcpStream::connect(listener.local_addr().unwrap());
    let (dialed, accepted) = tokio::join!(dialed, listener.accept());
    (Upstream::Plain(dialed.unwrap()), accepted.unwrap().0)
}

/// Whether the peer of `accepted` closed the connection.
async fn closed(accepted: &mut TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut byte = [0u8; 1];
    matches!(accepted.read(&mut byte).await, Ok(0))
}

#[tokio::test(start_paused = true)]
async fn handed_over_connections_are_taken_newest_first_and_closed_when_left() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let handed = Arc::new(HandedOver::default());
    let (first, mut first_peer) = loopback_pair(&listener).await;
    let (second, _second_peer) = loopback_pair(&listener).await;
    let second_port = match &second {
        Upstream::Plain(tcp) => tcp.local_addr().unwrap().port(),
        _ => unreachable!(),
    };
    handed.keep(first);
    tokio::time::advance(Duration::from_millis(500)).await;
    handed.keep(second);
    match handed.take() {
        Some(Upstream::Plain(tcp)) => assert_eq!(tcp.local_addr().unwrap().port(), second_port),
        _ => panic!("the newest connection is taken first"),
    }
    // The first one is left: its timer closes it once kept for a second (the timers
    // start when their tasks first run, after the advance).
    tokio::time::sleep(HANDED_OVER_FOR + Duration::from_millis(1)).await;
    assert!(
        handed.list().is_empty(),
        "nothing kept after {HANDED_OVER_FOR:?}"
    );
    assert!(
        closed(&mut first_peer).await,
        "the connection left was closed"
    );
    assert!(handed.take().is_none());
}
