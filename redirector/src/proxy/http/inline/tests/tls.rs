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
/// mid-line, then reads a third request and closes (close_notify) instead of answering.
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
        }
    }
    assert!(tls.read(&mut request).await.unwrap() > 0);
    tls.shutdown().await.unwrap();
}

#[tokio::test]
async fn response_heads_cut_across_tls_records_are_read_whole() {
    let cipher = CipherSuite::TLS13_AES_128_GCM_SHA256;
    let (tls, served) = connected_to(false, cipher, cut_heads).await;
    let dial = TlsDial(Mutex::new(Some(tls)));
    let idle = idle(Duration::from_secs(60));
    let lease = lease(&idle);
    for round in 0..2 {
        let (reused, response) = send(&lease, &dial).await;
        assert_eq!(reused, round == 1);
        assert_eq!(response.headers()["content-length"], "5");
        assert_eq!(read_body(&lease, response).await, b"hello");
    }
    // The server closes where the third head would be: the request fails, on the one
    // connection (a second dial would panic).
    let request = Request::get("/").body(()).unwrap();
    let answered = AtomicU64::new(DIALING);
    let original = SocketAddr::from(([127, 0, 0, 1], 443));
    let sending = lease.send(&dial, request, (original, &answered));
    let sent = tokio::time::timeout(Duration::from_secs(10), sending).await;
    assert!(
        sent.expect("the close is seen").is_err(),
        "no response to the third request"
    );
    served.await.unwrap();
}
