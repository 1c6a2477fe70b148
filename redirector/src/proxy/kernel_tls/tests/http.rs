//! HTTP/1.1 and HTTP/2 through hyper over a handed-over connection: what an HTTP
//! Backend's upstream carries under `--kernel-tls`. HTTP/2 adds what HTTP/1.1 never
//! does: the server's SETTINGS arrive right after the handshake (before the hand-over,
//! so the kernel must find them in the socket's queue), and several streams interleave
//! their frames both ways.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::{Request, Response, service::service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::*;

/// The body of every response of [`http_server`].
const BODY: usize = 100_000;

/// The HTTP version both ends speak (prior knowledge: the test server offers no ALPN).
#[derive(Clone, Copy)]
enum Version {
    Http1,
    Http2,
}

/// A server answering every request with [`BODY`] bytes; `true` if the client closed
/// cleanly.
async fn http_server(version: Version, tls: ServerTls) -> bool {
    let service = service_fn(|_request| async {
        let body = Full::new(Bytes::from(vec![7u8; BODY]));
        Ok::<_, std::convert::Infallible>(Response::new(body))
    });
    let io = TokioIo::new(tls);
    match version {
        Version::Http1 => hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .await
            .is_ok(),
        Version::Http2 => hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(io, service)
            .await
            .is_ok(),
    }
}

fn request() -> Request<Empty<Bytes>> {
    Request::get("http://api.example.test/")
        .body(Empty::new())
        .unwrap()
}

async fn full_body(response: Response<hyper::body::Incoming>) -> bool {
    let body = response.into_body().collect().await.unwrap().to_bytes();
    body.len() == BODY && body.iter().all(|&b| b == 7)
}

#[tokio::test]
async fn http1_requests_run_over_a_handed_over_connection() {
    let cipher = CipherSuite::TLS13_CHACHA20_POLY1305_SHA256;
    let (stream, served) = connected_to(true, cipher, |tls| http_server(Version::Http1, tls)).await;
    let (stream, handed) = offload_here(stream);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    for _ in 0..3 {
        let mut request = request();
        let host = hyper::header::HeaderValue::from_static("api.example.test");
        request.headers_mut().insert(hyper::header::HOST, host);
        let response = sender.send_request(request).await.unwrap();
        assert!(full_body(response).await, "handed over: {handed}");
    }
    drop(sender);
    connection.await.unwrap().unwrap();
    assert!(served.await.unwrap(), "handed over: {handed}");
}

#[tokio::test]
async fn http2_streams_interleave_over_a_handed_over_connection() {
    let cipher = CipherSuite::TLS13_AES_128_GCM_SHA256;
    let (stream, served) = connected_to(true, cipher, |tls| http_server(Version::Http2, tls)).await;
    let (stream, handed) = offload_here(stream);
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let connection = tokio::spawn(connection);
    // Eight streams at once, each body larger than HTTP/2's initial 64 KiB window, so
    // data and WINDOW_UPDATE frames of different streams cross on the connection.
    let mut streams = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let mut sender = sender.clone();
        streams.spawn(async move {
            let response = sender.send_request(request()).await.unwrap();
            full_body(response).await
        });
    }
    while let Some(stream) = streams.join_next().await {
        assert!(stream.unwrap(), "handed over: {handed}");
    }
    drop(sender);
    connection.await.unwrap().unwrap();
    assert!(served.await.unwrap(), "handed over: {handed}");
}
