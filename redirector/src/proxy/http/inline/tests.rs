//! Leases against a local HTTP/1.1 server that counts the connections it accepts:
//! connections lent from request to request, closed when they cannot carry another,
//! and expired when idle.

use std::sync::atomic::AtomicUsize;
use std::task::Waker;

use http::header::HOST;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::backend::Protocol;
use crate::proxy::http::error::HttpError;
use crate::proxy::http::test_server::counting_server;

/// Dials the test server on loopback, no TLS.
struct TestDial(SocketAddr);

impl Connect for TestDial {
    async fn connect(&self) -> Result<Upstream, DialError> {
        let tcp = TcpStream::connect(self.0)
            .await
            .map_err(|error| DialError {
                kind: HttpError::UpstreamConnect,
                detail: error.to_string(),
            })?;
        Ok(Upstream::Plain(tcp))
    }

    fn hand_over(&self, _: Upstream) {
        unreachable!("the test server speaks HTTP/1.1 only");
    }

    fn backend(&self) -> &str {
        "test/server"
    }
}

/// `counting_server`'s dialer, and how many connections it has accepted.
async fn server(keep_alive: bool) -> (TestDial, Arc<AtomicUsize>) {
    let (addr, accepted) = counting_server(keep_alive).await;
    (TestDial(addr), accepted)
}

fn idle(timeout: Duration) -> Arc<IdleConnections> {
    IdleConnections::new(timeout, CancellationToken::new())
}

fn lease(idle: &Arc<IdleConnections>) -> Lease {
    let speaks = Arc::new(UpstreamSpeaks::of(Protocol::Http11, None));
    Lease::new(idle.clone(), speaks)
}

/// Sends a GET on a connection `lease` holds: whether the connection was reused, and the
/// response, whose body has not been read.
async fn send(lease: &Lease, dial: &impl Connect) -> (bool, Response<()>) {
    let request = Request::get("/")
        .header(HOST, "api.example.test")
        .body(())
        .unwrap();
    let answered = AtomicU64::new(DIALING);
    // The address the client dialed, for error messages only.
    let original = SocketAddr::from(([127, 0, 0, 1], 443));
    match lease
        .send(dial, request, (original, &answered))
        .await
        .unwrap()
    {
        Sent::Response(response, reused) => {
            let before = answered.load(Ordering::Relaxed);
            assert_eq!(reused, before > 0, "answered before this request: {before}");
            (reused, response)
        }
        Sent::Pool(_) => panic!("a cleartext upstream is never h2"),
    }
}

/// Reads the body of the response the lease holds to its end, as `Metered` does, and
/// says the response ended.
async fn read_body(lease: &Lease, _response: Response<()>) -> Vec<u8> {
    let mut read = Vec::new();
    poll_fn(|cx| {
        loop {
            match lease.poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    match frame.into_data() {
                        Ok(data) => read.extend_from_slice(&data),
                        Err(trailers) => {
                            let trailers = trailers.into_trailers().unwrap();
                            read.extend_from_slice(format!("{trailers:?}").as_bytes());
                        }
                    }
                    // As hyper's server does: a body at its end is polled no more.
                    if lease.is_end_stream() {
                        return Poll::Ready(());
                    }
                }
                Poll::Ready(Some(Err(error))) => panic!("response body: {error}"),
                Poll::Ready(None) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await;
    lease.ended(true);
    read
}

/// A whole GET: whether its connection was reused.
async fn get(lease: &Lease, dial: &TestDial) -> bool {
    let (reused, response) = send(lease, dial).await;
    assert_eq!(read_body(lease, response).await, b"ok");
    reused
}

#[tokio::test]
async fn a_connection_goes_back_to_the_pool_when_its_response_ends() {
    let (dial, accepted) = server(true).await;
    let idle = idle(Duration::from_secs(60));
    let first = lease(&idle);
    assert!(!get(&first, &dial).await, "the first request dials");
    assert!(
        !first.busy(),
        "a client connection between requests holds none"
    );
    assert_eq!(
        idle.list().len(),
        1,
        "the connection waits for the next request"
    );
    assert!(get(&first, &dial).await, "the second request is lent it");
    let second = lease(&idle);
    assert!(
        get(&second, &dial).await,
        "and so is another client connection's"
    );
    assert_eq!(idle.list().len(), 1);
    assert_eq!(accepted.load(Ordering::Relaxed), 1);
}

/// A server that answers every request on a connection with `size` bytes, written in
/// pieces of 4 KiB with a pause now and then, so that the reader waits for most of them.
async fn trickling_server(size: usize) -> TestDial {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut tcp, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                // Until the client goes.
                while tcp.read(&mut request).await.unwrap_or(0) > 0 {
                    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {size}\r\n\r\n");
                    if tcp.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    for (i, piece) in vec![7u8; size].chunks(4096).enumerate() {
                        if tcp.write_all(piece).await.is_err() {
                            return;
                        }
                        if i % 8 == 0 {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                }
            });
        }
    });
    TestDial(addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_arrive_piece_by_piece_are_read_to_the_end_on_any_runtime() {
    // The upstream's socket wakes the task from the I/O driver, on either thread.
    let size = 4 << 20;
    let dial = trickling_server(size).await;
    let idle = idle(Duration::from_secs(60));
    let lease = Arc::new(lease(&idle));
    for round in 0..3 {
        let lease = lease.clone();
        let dial = TestDial(dial.0);
        let read = tokio::time::timeout(Duration::from_secs(30), async move {
            let (_, response) = send(&lease, &dial).await;
            read_body(&lease, response).await
        });
        let read = read
            .await
            .unwrap_or_else(|_| panic!("round {round}: stalled"));
        assert_eq!(read.len(), size, "round {round}");
    }
}

#[tokio::test]
async fn concurrent_requests_take_connections_of_their_own() {
    let (dial, accepted) = server(true).await;
    let idle = idle(Duration::from_secs(60));
    let (first, second) = (lease(&idle), lease(&idle));
    let (_, one) = send(&first, &dial).await;
    let (_, two) = send(&second, &dial).await;
    assert_eq!(read_body(&second, two).await, b"ok");
    assert_eq!(read_body(&first, one).await, b"ok");
    assert_eq!(idle.list().len(), 2);
    assert_eq!(accepted.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_connection_the_server_closes_is_not_lent_again() {
    let (dial, accepted) = server(false).await;
    let idle = idle(Duration::from_secs(60));
    let first = lease(&idle);
    assert!(!get(&first, &dial).await);
    // The server said `Connection: close`: the next request needs a new connection.
    assert_eq!(idle.list().len(), 0);
    assert!(!get(&first, &dial).await);
    assert!(!get(&lease(&idle), &dial).await);
    assert_eq!(accepted.load(Ordering::Relaxed), 3);
}

#[tokio::test]
async fn a_response_cut_short_or_still_in_flight_closes_its_connection() {
    let (dial, accepted) = server(true).await;
    let idle = idle(Duration::from_secs(60));
    let cut = lease(&idle);
    let (_, response) = send(&cut, &dial).await;
    assert!(cut.busy(), "held until its body ends");
    // The client went away before the body was read.
    drop(response);
    cut.ended(false);
    assert!(!cut.busy());
    let in_flight = lease(&idle);
    let (_, _response) = send(&in_flight, &dial).await;
    // The client connection ends with its request unanswered.
    drop(in_flight);
    assert_eq!(idle.list().len(), 0, "neither can carry another request");
    assert!(!get(&lease(&idle), &dial).await);
    assert_eq!(accepted.load(Ordering::Relaxed), 3);
}

#[tokio::test]
async fn a_retired_pool_keeps_no_connection() {
    let (dial, accepted) = server(true).await;
    let retired = CancellationToken::new();
    let idle = IdleConnections::new(Duration::from_secs(60), retired.clone());
    get(&lease(&idle), &dial).await;
    assert_eq!(idle.list().len(), 1);
    // What `Pools::retain` does when the Backend changed.
    retired.cancel();
    idle.clear();
    assert!(!get(&lease(&idle), &dial).await, "a new connection");
    assert_eq!(idle.list().len(), 0, "not kept for the old settings");
    assert_eq!(accepted.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn idle_connections_close_after_the_idle_timeout() {
    let (dial, accepted) = server(true).await;
    let timeout = Duration::from_millis(50);
    let idle = idle(timeout);
    get(&lease(&idle), &dial).await;
    assert_eq!(idle.list().len(), 1);
    // The sweep runs every idle timeout; the connection is gone by the second one.
    tokio::time::sleep(timeout * 4).await;
    assert_eq!(idle.list().len(), 0, "swept");
    assert!(
        !idle.sweeping.load(Ordering::Relaxed),
        "the sweep ends with the list"
    );
    assert!(!get(&lease(&idle), &dial).await, "a new connection");
    assert_eq!(accepted.load(Ordering::Relaxed), 2);
}

#[test]
fn requests_go_upstream_in_origin_form() {
    for (uri, expected) in [
        ("https://api.example.test/a/b?c=1", "/a/b?c=1"),
        ("https://api.example.test", "/"),
        ("http://api.example.test/", "/"),
        ("/x", "/x"),
    ] {
        let uri: Uri = uri.parse().unwrap();
        assert_eq!(origin_form(&uri), expected, "{uri}");
    }
}

/// A server that answers every request on a connection with `response`, as it is.
async fn scripted_server(response: &'static [u8]) -> (TestDial, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (mut tcp, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let mut request = [0u8; 1024];
                while tcp.read(&mut request).await.unwrap_or(0) > 0 {
                    if tcp.write_all(response).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (TestDial(addr), accepted)
}

#[tokio::test]
async fn a_chunked_response_passes_its_trailers_on_and_its_connection_is_lent_again() {
    let response = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\no\r\n1\r\nk\r\n0\r\nx-sum: 2\r\n\r\n";
    let (dial, accepted) = scripted_server(response).await;
    let idle = idle(Duration::from_secs(60));
    let lease = lease(&idle);
    for reused in [false, true] {
        let (was_reused, response) = send(&lease, &dial).await;
        assert_eq!(was_reused, reused);
        let body = String::from_utf8(read_body(&lease, response).await).unwrap();
        assert_eq!(body, r#"ok{"x-sum": "2"}"#);
        assert_eq!(idle.list().len(), 1);
    }
    assert_eq!(accepted.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_response_whose_end_is_in_doubt_closes_its_connection() {
    let doubtful: [&'static [u8]; 3] = [
        // More than its length says.
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n",
        // Both framings.
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        // The server says it closes.
        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
    ];
    for response in doubtful {
        let (dial, accepted) = scripted_server(response).await;
        let idle = idle(Duration::from_secs(60));
        let lease = lease(&idle);
        let (_, first) = send(&lease, &dial).await;
        assert_eq!(read_body(&lease, first).await, b"ok");
        assert_eq!(
            idle.list().len(),
            0,
            "{}",
            String::from_utf8_lossy(response)
        );
        let (reused, _) = send(&lease, &dial).await;
        assert!(!reused);
        assert_eq!(accepted.load(Ordering::Relaxed), 2);
    }
}

mod tls;
mod wakes;
