//! Affinities against a local HTTP/1.1 server that counts the connections it accepts:
//! lending idle connections on, closing those that cannot carry another request, and
//! expiring idle ones.

use std::sync::atomic::AtomicUsize;

use http::header::HOST;
use http_body_util::Empty;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::backend::Protocol;
use crate::proxy::http::test_server::counting_server;

type TestBody = Empty<Bytes>;

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

    fn backend(&self) -> &str {
        "test/server"
    }
}

/// `counting_server`'s dialer, and how many connections it has accepted.
async fn server(keep_alive: bool) -> (TestDial, Arc<AtomicUsize>) {
    let (addr, accepted) = counting_server(keep_alive).await;
    (TestDial(addr), accepted)
}

fn idle(timeout: Duration) -> Arc<IdleConnections<TestBody>> {
    IdleConnections::new(timeout, CancellationToken::new())
}

fn affinity(idle: &Arc<IdleConnections<TestBody>>) -> Affinity<TestBody> {
    let speaks = Arc::new(UpstreamSpeaks::of(Protocol::Http11, None));
    Affinity::new(idle.clone(), speaks)
}

/// Sends a GET on `affinity`'s connection: whether the connection was reused, and the
/// response, whose body has not been read.
async fn send(affinity: &Affinity<TestBody>, dial: &TestDial) -> (bool, Response<Incoming>) {
    let request = Request::get("/")
        .header(HOST, "api.example.test")
        .body(Empty::new())
        .unwrap();
    let answered = AtomicU64::new(DIALING);
    match affinity
        .send(dial, request, (dial.0, &answered))
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

/// Reads `response`'s body to its end, driving the connection as `Metered` does, and
/// says the response ended.
async fn read_body(affinity: &Affinity<TestBody>, response: Response<Incoming>) -> Vec<u8> {
    let mut body = response.into_body();
    let mut read = Vec::new();
    poll_fn(|cx| {
        loop {
            affinity.drive(cx);
            match Pin::new(&mut body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => read.extend_from_slice(frame.data_ref().unwrap()),
                Poll::Ready(Some(Err(error))) => panic!("response body: {error}"),
                Poll::Ready(None) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await;
    affinity.ended(true);
    read
}

/// A whole GET: whether its connection was reused.
async fn get(affinity: &Affinity<TestBody>, dial: &TestDial) -> bool {
    let (reused, response) = send(affinity, dial).await;
    assert_eq!(read_body(affinity, response).await, b"ok");
    reused
}

#[tokio::test]
async fn a_connection_carries_its_client_connections_requests_then_the_next_ones() {
    let (dial, accepted) = server(true).await;
    let idle = idle(Duration::from_secs(60));
    let first = affinity(&idle);
    assert!(!get(&first, &dial).await, "the first request dials");
    assert!(
        get(&first, &dial).await,
        "the second goes on the same connection"
    );
    drop(first);
    assert_eq!(
        idle.list().len(),
        1,
        "the ended client connection's upstream waits"
    );
    let second = affinity(&idle);
    assert!(
        get(&second, &dial).await,
        "the next client connection is lent it"
    );
    assert_eq!(idle.list().len(), 0);
    assert_eq!(accepted.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_connection_the_server_closes_is_not_lent_again() {
    let (dial, accepted) = server(false).await;
    let idle = idle(Duration::from_secs(60));
    let first = affinity(&idle);
    assert!(!get(&first, &dial).await);
    // The server said `Connection: close`: the next request needs a new connection.
    assert!(!get(&first, &dial).await);
    drop(first);
    let second = affinity(&idle);
    assert!(!get(&second, &dial).await);
    assert_eq!(accepted.load(Ordering::Relaxed), 3);
}

#[tokio::test]
async fn a_response_cut_short_or_still_in_flight_closes_its_connection() {
    let (dial, accepted) = server(true).await;
    let idle = idle(Duration::from_secs(60));
    let cut = affinity(&idle);
    let (_, response) = send(&cut, &dial).await;
    assert!(cut.busy(), "in flight until its body ends");
    // The client went away before the body was read.
    drop(response);
    cut.ended(false);
    assert!(!cut.busy());
    drop(cut);
    let in_flight = affinity(&idle);
    let (_, _response) = send(&in_flight, &dial).await;
    drop(in_flight);
    assert_eq!(idle.list().len(), 0, "neither can carry another request");
    assert!(!get(&affinity(&idle), &dial).await);
    assert_eq!(accepted.load(Ordering::Relaxed), 3);
}

#[tokio::test]
async fn idle_connections_close_after_the_idle_timeout() {
    let (dial, accepted) = server(true).await;
    let timeout = Duration::from_millis(50);
    let idle = idle(timeout);
    let first = affinity(&idle);
    get(&first, &dial).await;
    drop(first);
    assert_eq!(idle.list().len(), 1);
    // The sweep runs every idle timeout; the connection is gone by the second one.
    tokio::time::sleep(timeout * 4).await;
    assert_eq!(idle.list().len(), 0, "swept");
    assert!(
        !idle.sweeping.load(Ordering::Relaxed),
        "the sweep ends with the list"
    );
    assert!(!get(&affinity(&idle), &dial).await, "a new connection");
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
