//! A bytes Backend's relay over a connection handed to the kernel: splice(2) moves the
//! bytes both ways, and what it cannot pass (tickets, empty records, alerts) is read
//! with recvmsg(2). Where the kernel has no TLS the same relay runs through rustls.

use std::{io, time::Duration};

use super::{
    records::{sealed, sealed_in_pieces},
    *,
};
use crate::{
    proxy::relay::{Pipes, Transferred, relay_spliced, relay_tls},
    tls::sniff::{FirstBytesGuard, OpeningRule},
};

const FAREWELL: &[u8] = b"goodbye from the server";

/// How long a test may take before a hang (a direction waiting for what never comes)
/// fails it; a megabyte each way takes about a second under software emulation.
const DEADLINE: Duration = Duration::from_secs(60);

/// `test`, failed if it runs past [`DEADLINE`].
async fn within_deadline(test: impl Future<Output = ()>) {
    if tokio::time::timeout(DEADLINE, test).await.is_err() {
        panic!("still running after {DEADLINE:?}: a direction hangs");
    }
}

/// Greets, echoes until the client's close_notify, then says [`FAREWELL`] and closes
/// with its own close_notify; `true` if all of that went through.
async fn echo_then_close(mut tls: ServerTls) -> bool {
    tls.write_all(GREETING).await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tls.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => tls.write_all(&buf[..n]).await.unwrap(),
            Err(_) => return false,
        }
    }
    tls.write_all(FAREWELL).await.unwrap();
    tls.shutdown().await.is_ok()
}

/// A client application's connection through the proxy's relay to `upstream`, as
/// `tcp.rs` runs it: spliced where the connection went to the kernel, else through
/// rustls.
struct Relayed {
    app: TcpStream,
    relay: JoinHandle<(Transferred, io::Result<()>)>,
    handed: bool,
    pipes: Arc<Pipes>,
}

async fn relayed(upstream: UpstreamTls) -> Relayed {
    relayed_through(upstream, Arc::new(Pipes::new(16))).await
}

async fn relayed_through(upstream: UpstreamTls, pipes: Arc<Pipes>) -> Relayed {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut client, _) = listener.accept().await.unwrap();
    let offload = offload_checked(upstream);
    let handed = matches!(offload, Offload::Kernel(_));
    let lent = pipes.clone();
    let relay = tokio::spawn(async move {
        let (pipes, buffer_size, idle) = (&*lent, 64 * 1024, Duration::from_secs(30));
        let (read, mut write) = client.split();
        // As `tcp.rs` guards it: the client's opening is judged (plaintext is allowed)
        // and then written to the upstream before splicing starts.
        let rule = OpeningRule {
            names: Vec::new(),
            plaintext: Ok(()),
        };
        let mut guard = FirstBytesGuard::new(read, rule, true);
        match offload {
            Offload::Kernel(mut upstream) => {
                let (from, to) = upstream.split();
                let limits = (pipes, buffer_size, idle);
                relay_spliced(&mut guard, write.as_ref(), from, to, limits).await
            }
            Offload::Rustls(mut upstream) => {
                let mut client = tokio::io::join(&mut guard, &mut write);
                relay_tls(&mut client, &mut upstream, buffer_size, idle).await
            }
        }
    });
    Relayed {
        app,
        relay,
        handed,
        pipes,
    }
}

/// Writes `sent` and then closes writing, while reading what comes back to the end.
async fn send_and_read_to_end(app: TcpStream, sent: &[u8]) -> Vec<u8> {
    let (mut from_app, mut to_app) = app.into_split();
    let writer = async {
        to_app.write_all(sent).await.unwrap();
        to_app.shutdown().await.unwrap();
    };
    let reader = async {
        let mut got = Vec::new();
        from_app.read_to_end(&mut got).await.unwrap();
        got
    };
    tokio::join!(writer, reader).1
}

#[tokio::test]
async fn spliced_relay_reads_records_instead_of_splicing_them_into_small_pipes() {
    within_deadline(async {
        // Pipes as a uid over `pipe-user-pages-soft` gets them: 2 pages.
        let pipes = Arc::new(Pipes::of_size(16, 8192));
        let sent: Vec<u8> = (0..256 * 1024).map(|i: u32| (i % 251) as u8).collect();
        let expected = [&sent, FAREWELL].concat();
        let cipher = CipherSuite::TLS13_AES_256_GCM_SHA384;
        let (upstream, served) = connected_to(true, cipher, echo_then_close).await;
        let Relayed {
            app, relay, handed, ..
        } = relayed_through(upstream, pipes.clone()).await;
        let mut app = app;
        // The opening first (judged, then written from a buffer): what follows is
        // spliced.
        app.write_all(b"go!").await.unwrap();
        let mut echoed = [0u8; GREETING.len() + 3];
        app.read_exact(&mut echoed).await.unwrap();
        let got = send_and_read_to_end(app, &sent).await;
        assert!(
            got == expected,
            "handed over: {handed}: {} bytes",
            got.len()
        );
        relay.await.unwrap().1.unwrap();
        assert!(served.await.unwrap());
        // The client's plain bytes are spliced through the small pipes; no record is.
        let expect = if handed { sent.len() as u64 } else { 0 };
        assert_eq!(pipes.spliced(), expect);
    })
    .await;
}

#[tokio::test]
async fn spliced_bytes_cross_kernel_tls_both_ways_and_end_with_close_notify() {
    within_deadline(async {
        let sent: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
        let expected = [GREETING, &sent, FAREWELL].concat();
        for cipher in ciphers() {
            let (upstream, served) = connected_to(true, cipher, echo_then_close).await;
            let Relayed {
                app,
                relay,
                handed,
                pipes,
            } = relayed(upstream).await;
            let got = send_and_read_to_end(app, &sent).await;
            assert!(
                got == expected,
                "{cipher:?}, handed over: {handed}: {} bytes came back, {} expected",
                got.len(),
                expected.len()
            );
            let (moved, result) = relay.await.unwrap();
            result.unwrap();
            assert_eq!(moved.client_to_upstream, sent.len() as u64);
            assert_eq!(moved.upstream_to_client, expected.len() as u64);
            assert!(served.await.unwrap(), "{cipher:?}: close_notify both ways");
            // Handed over, the bytes go through pipes: only a record that is not data (the
            // server's session tickets) and what one read takes after it use a buffer.
            let spliced = pipes.spliced();
            let expect = if handed {
                (sent.len() + expected.len()) as u64 * 9 / 10
            } else {
                0
            };
            assert!(spliced >= expect, "{cipher:?}: {spliced} bytes spliced");
        }
    })
    .await;
}

#[tokio::test]
async fn spliced_relay_reads_what_splice_cannot_pass_with_recvmsg() {
    within_deadline(async {
        // NewSessionTicket: lifetime, age_add, a 1-byte nonce, a 1-byte ticket, no extensions.
        let ticket = vec![4, 0, 0, 15, 0, 0, 0, 60, 0, 0, 0, 0, 1, 0, 0, 1, 7, 0, 0];
        let records = vec![
            (sys::APPLICATION_DATA, Vec::new()),
            (sys::APPLICATION_DATA, b"between empty records".to_vec()),
            (sys::HANDSHAKE, ticket),
            (sys::APPLICATION_DATA, Vec::new()),
            (sys::APPLICATION_DATA, b", a ticket, and an alert".to_vec()),
            (ALERT, vec![1, 90]),
            (ALERT, vec![1, 0]),
        ];
        for cipher in ciphers() {
            let records = records.clone();
            let serve = |tls| records::sealing_server(tls, records);
            let (upstream, served) = connected_to(true, cipher, serve).await;
            let Relayed {
                mut app,
                relay,
                handed,
                ..
            } = relayed(upstream).await;
            let mut got = Vec::new();
            app.read_to_end(&mut got).await.unwrap();
            app.shutdown().await.unwrap();
            let (moved, result) = relay.await.unwrap();
            assert_eq!(
                String::from_utf8_lossy(&got),
                "between empty records, a ticket, and an alert",
                "{cipher:?}, handed over: {handed}, relay: {result:?}"
            );
            result.unwrap();
            assert_eq!(moved.upstream_to_client, got.len() as u64);
            assert!(served.await.unwrap());
        }
    })
    .await;
}

#[tokio::test]
async fn spliced_relay_waits_for_records_that_arrive_in_pieces() {
    within_deadline(async {
        let big: Vec<u8> = (0..16 * 1024).map(|i: u32| (i % 251) as u8).collect();
        let records = vec![
            (sys::APPLICATION_DATA, big.clone()),
            (sys::APPLICATION_DATA, b"and a small one".to_vec()),
            (ALERT, vec![1, 0]),
        ];
        let expected = [&big[..], b"and a small one"].concat();
        let serve = |mut tls: ServerTls| async move {
            // The client's first bytes come through the relay after it has read the
            // session tickets (both directions run in one task): the records below
            // then meet a relay that splices.
            let mut go = [0u8; 3];
            tls.read_exact(&mut go).await.unwrap();
            let mut tcp = sealed_in_pieces(tls, records, 1000).await;
            let mut rest = Vec::new();
            tcp.read_to_end(&mut rest).await.is_ok()
        };
        let cipher = CipherSuite::TLS13_CHACHA20_POLY1305_SHA256;
        let (upstream, served) = connected_to(true, cipher, serve).await;
        let Relayed {
            mut app,
            relay,
            handed,
            pipes,
        } = relayed(upstream).await;
        app.write_all(b"go!").await.unwrap();
        let mut got = Vec::new();
        app.read_to_end(&mut got).await.unwrap();
        assert!(
            got == expected,
            "handed over: {handed}: {} bytes",
            got.len()
        );
        app.shutdown().await.unwrap();
        let (_, result) = relay.await.unwrap();
        result.unwrap();
        assert!(served.await.unwrap());
        // Both data records went through the pipes, each whole once it had arrived
        // (the client's three bytes, its opening, were judged and written from a
        // buffer).
        let expect = if handed { expected.len() as u64 } else { 0 };
        assert_eq!(pipes.spliced(), expect);
    })
    .await;
}

#[tokio::test]
async fn spliced_relay_fails_when_the_server_closes_without_close_notify() {
    within_deadline(async {
        let records = vec![(sys::APPLICATION_DATA, b"cut short".to_vec())];
        let (upstream, served) = connected_to(
            true,
            CipherSuite::TLS13_AES_128_GCM_SHA256,
            |tls| async move { drop(sealed(tls, records).await) },
        )
        .await;
        let Relayed {
            mut app,
            relay,
            handed,
            ..
        } = relayed(upstream).await;
        served.await.unwrap();
        let mut got = Vec::new();
        let _ = app.read_to_end(&mut got).await;
        assert_eq!(got, b"cut short", "handed over: {handed}");
        let (moved, result) = relay.await.unwrap();
        let error = result.unwrap_err();
        assert!(error.to_string().contains("close_notify"), "{error}");
        assert_eq!(moved.upstream_to_client, 9);
    })
    .await;
}
