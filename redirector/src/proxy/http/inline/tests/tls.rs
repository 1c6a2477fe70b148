//! A lease over TLS, as the agent originates it, to an in-process rustls server whose
//! response heads come cut across records (`Held::poll_fill_head`).

use std::sync::Mutex;

use rustls::CipherSuite;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::proxy::{
    kernel_tls::tests::{ServerTls, connected_to},
    tcp::UpstreamTls,
};

/// Hands the lease the one TLS connection made beforehand.
struct TlsDial(Mutex<Option<UpstreamTls>>);

impl Connect for TlsDial {
    async fn connect(&self) -> Result<Upstream, DialError> {
        let tls = self.0.lock().unwrap().take().expect("dialed once only");
        Ok(Upstream::Tls(Box::new(tls)))
    }

    fn hand_over(&self, _: Upstream) {
        unreachable!("the test server offers no ALPN: HTTP/1.1");
    }

    fn backend(&self) -> &str {
        "test/tls-server"
    }
}

/// Answers two requests with `hello`, each response in four records that cut its head
/// mid-line, with a pause after each so that the client reads most of them apart (as
/// `trickling_server` paces its pieces); then reads a third request, sends part of a
/// head and closes (close_notify).
async fn cut_heads(mut tls: ServerTls) {
    let mut request = [0u8; 1024];
    for _ in 0..2 {
        assert!(tls.read(&mut request).await.unwrap() > 0);
        let parts = [
            &b"HTTP/1.1 200 OK\r\nconte"[..],
            b"nt-length: 5\r\n",
            b"\r\nhel",
            b"lo",
        ];
        for part in parts {
            tls.write_all(part).await.unwrap();
            tls.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    assert!(tls.read(&mut request).await.unwrap() > 0);
    tls.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
    tls.shutdown().await.unwrap();
}

#[tokio::test]
async fn response_heads_cut_across_tls_records_are_read_whole() {
    let cipher = CipherSuite::TLS13_AES_128_GCM_SHA256;
    let (tls, served) = connected_to(false, cipher, cut_heads).await;
    let dial = TlsDial(Mutex::new(Some(tls)));
    let idle = idle(Duration::from_secs(60));
    let lease = lease(&idle);
    let rounds = async {
        for round in 0..2 {
            let (reused, response) = send(&lease, &dial).await;
            assert_eq!(reused, round == 1);
            assert_eq!(response.headers()["content-length"], "5");
            assert_eq!(read_body(&lease, response).await, b"hello");
        }
        // The server closes in the middle of the third head: the request fails, on the
        // one connection (a second dial would panic).
        let request = Request::get("/").body(()).unwrap();
        let answered = AtomicU64::new(DIALING);
        let original = SocketAddr::from(([127, 0, 0, 1], 443));
        lease.send(&dial, request, (original, &answered)).await
    };
    let third = tokio::time::timeout(Duration::from_secs(10), rounds).await;
    let Err(error) = third.expect("no wake lost") else {
        panic!("a response to the third request");
    };
    let detail = error.detail;
    assert!(detail.contains("before the response head"), "{detail}");
    served.await.unwrap();
}
