use super::*;
use crate::tls::sniff::{OpeningRefused, OpeningRule, RefusedKind};
use tokio::io::{AsyncWriteExt, duplex};

#[tokio::test]
async fn half_close_keeps_the_other_direction_open() {
    let (mut client_app, mut client_side) = duplex(64);
    let (mut upstream_side, mut server_app) = duplex(64);
    let proxy = tokio::spawn(async move {
        relay(
            &mut client_side,
            &mut upstream_side,
            16,
            Duration::from_secs(5),
        )
        .await
    });
    client_app.write_all(b"request").await.unwrap();
    client_app.shutdown().await.unwrap();
    let mut got = Vec::new();
    server_app.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"request");
    // The client finished writing, but the answer still gets through.
    server_app.write_all(b"answer after EOF").await.unwrap();
    server_app.shutdown().await.unwrap();
    let mut answer = Vec::new();
    client_app.read_to_end(&mut answer).await.unwrap();
    assert_eq!(answer, b"answer after EOF");
    let (transferred, result) = proxy.await.unwrap();
    result.unwrap();
    assert_eq!(transferred.client_to_upstream, 7);
    assert_eq!(transferred.upstream_to_client, 16);
}

#[tokio::test(start_paused = true)]
async fn idle_connections_time_out() {
    let (_client_app, mut client_side) = duplex(64);
    let (mut upstream_side, _server_app) = duplex(64);
    let (transferred, result) = relay(
        &mut client_side,
        &mut upstream_side,
        16,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(result.unwrap_err().kind(), io::ErrorKind::TimedOut);
    assert_eq!(transferred, Transferred::default());
}

#[tokio::test]
async fn buffers_grow_while_reads_fill_them_and_are_given_back_when_idle() {
    let (mut source, mut from) = duplex(1 << 20);
    let (mut to, mut sink) = duplex(1 << 20);
    source.write_all(&vec![7u8; 256 * 1024]).await.unwrap();
    let mut copy = buffered::Buffered::new(64 * 1024);
    assert_eq!(copy.next_size(), buffered::INITIAL_SIZE);
    let (moved, activity) = (AtomicU64::new(0), Activity::new());
    let poll = poll_fn(|cx| {
        std::task::Poll::Ready(copy.poll_copy(cx, &mut from, &mut to, &moved, &activity))
    })
    .await;
    assert!(poll.is_pending(), "the source is still open");
    assert_eq!(moved.load(Ordering::Relaxed), 256 * 1024);
    assert_eq!(
        copy.next_size(),
        64 * 1024,
        "4 KiB doubled up to the maximum"
    );
    assert!(
        !copy.holds_buffer(),
        "waiting with nothing to write holds no buffer"
    );
    let mut copied = vec![0u8; 256 * 1024];
    sink.read_exact(&mut copied).await.unwrap();
    assert!(copied.iter().all(|&b| b == 7));
}

/// A client and an upstream connected through `relay_tcp` on loopback, as the proxy
/// sees them; `held` is replayed before the client's own bytes.
struct Loopback {
    app: TcpStream,
    server: TcpStream,
    relay: tokio::task::JoinHandle<(Transferred, io::Result<()>, bool)>,
    pipes: std::sync::Arc<Pipes>,
}

async fn loopback(held: Vec<u8>, plaintext: Result<(), OpeningRefused>) -> Loopback {
    loopback_with(held, plaintext, 16).await
}

async fn loopback_with(
    held: Vec<u8>,
    plaintext: Result<(), OpeningRefused>,
    max_pipes: usize,
) -> Loopback {
    let pipes = std::sync::Arc::new(Pipes::new(max_pipes));
    let lent = pipes.clone();
    let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let back = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let app = TcpStream::connect(front.local_addr().unwrap())
        .await
        .unwrap();
    let (mut client, _) = front.accept().await.unwrap();
    let upstream = TcpStream::connect(back.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = back.accept().await.unwrap();
    // As the proxy sets them at accept and dial (connection.rs).
    for socket in [&client, &upstream] {
        let inline = socket2::SockRef::from(socket).set_out_of_band_inline(true);
        inline.unwrap();
    }
    let relay = tokio::spawn(async move {
        let (read, write) = client.split();
        let mut guard = if held.is_empty() {
            let rule = OpeningRule {
                names: Vec::new(),
                plaintext,
            };
            FirstBytesGuard::new(read, rule, false)
        } else {
            FirstBytesGuard::released(read, held)
        };
        let (moved, result) = relay_tcp(
            &mut guard,
            write.as_ref(),
            &upstream,
            &lent,
            64 * 1024,
            Duration::from_secs(30),
        )
        .await;
        (moved, result, guard.is_passing())
    });
    Loopback {
        app,
        server,
        relay,
        pipes,
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[tokio::test]
async fn splice_moves_bulk_both_ways_with_half_close() {
    bulk_both_ways(16).await;
}

#[tokio::test]
async fn without_pipes_chunks_go_through_buffers() {
    bulk_both_ways(0).await;
}

async fn bulk_both_ways(max_pipes: usize) {
    let Loopback {
        mut app,
        mut server,
        relay,
        pipes,
    } = loopback_with(Vec::new(), Ok(()), max_pipes).await;
    let request = pattern(8 << 20);
    let answer = pattern(3 << 20);
    let sent = request.clone();
    let writer = tokio::spawn(async move {
        app.write_all(&sent).await.unwrap();
        app.shutdown().await.unwrap();
        let mut got = Vec::new();
        app.read_to_end(&mut got).await.unwrap();
        got
    });
    let mut got = Vec::new();
    server.read_to_end(&mut got).await.unwrap();
    assert!(got == request, "8 MiB arrive intact and in order");
    // The client finished writing, but the answer still gets through.
    server.write_all(&answer).await.unwrap();
    server.shutdown().await.unwrap();
    assert!(writer.await.unwrap() == answer);
    let (moved, result, passing) = relay.await.unwrap();
    result.unwrap();
    assert!(passing);
    assert_eq!(moved.client_to_upstream, 8 << 20);
    assert_eq!(moved.upstream_to_client, 3 << 20);
    // One pipe per direction at most, lent per chunk and given back empty.
    assert!(pipes.live() <= max_pipes.min(2), "{} pipes", pipes.live());
}

#[tokio::test]
async fn the_upstream_may_speak_first() {
    let Loopback {
        mut app,
        mut server,
        relay,
        ..
    } = loopback(Vec::new(), Ok(())).await;
    server.write_all(b"220 ready\r\n").await.unwrap();
    let mut greeting = [0u8; 11];
    app.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting, b"220 ready\r\n");
    app.write_all(b"HELO x\r\n").await.unwrap();
    let mut hello = [0u8; 8];
    server.read_exact(&mut hello).await.unwrap();
    assert_eq!(&hello, b"HELO x\r\n");
    drop((app, server));
    let (moved, _, _) = relay.await.unwrap();
    assert_eq!(moved.client_to_upstream, 8);
    assert_eq!(moved.upstream_to_client, 11);
}

#[tokio::test]
async fn a_held_opening_is_replayed_first() {
    let Loopback {
        mut app,
        mut server,
        relay,
        ..
    } = loopback(b"GET / HTTP/1.1\r\n".to_vec(), Ok(())).await;
    app.write_all(b"Host: a\r\n\r\n").await.unwrap();
    app.shutdown().await.unwrap();
    let mut got = Vec::new();
    server.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    drop(server);
    let (moved, result, _) = relay.await.unwrap();
    result.unwrap();
    assert_eq!(moved.client_to_upstream, got.len() as u64);
}

#[tokio::test]
async fn a_refused_opening_sends_nothing_upstream() {
    let refused = OpeningRefused::new(RefusedKind::Ambiguous, "plaintext refused here");
    let Loopback {
        mut app,
        mut server,
        relay,
        ..
    } = loopback(Vec::new(), Err(refused)).await;
    app.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let (_, result, passing) = relay.await.unwrap();
    let error = result.unwrap_err();
    assert!(crate::tls::sniff::refusal(&error).is_some(), "{error}");
    assert!(!passing);
    // The relay task dropped its upstream socket: the server sees EOF and no byte.
    let mut got = Vec::new();
    server.read_to_end(&mut got).await.unwrap();
    assert!(got.is_empty());
}

#[tokio::test]
async fn from_a_buffered_reader_with_half_close() {
    let (mut client_app, mut client_side) = duplex(64);
    let (upstream_side, mut server_app) = duplex(64);
    let proxy = tokio::spawn(async move {
        let mut upstream = tokio::io::BufReader::with_capacity(16, upstream_side);
        relay_tls(&mut client_side, &mut upstream, 16, Duration::from_secs(5)).await
    });
    client_app.write_all(b"request").await.unwrap();
    client_app.shutdown().await.unwrap();
    let mut got = Vec::new();
    server_app.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"request");
    // More than all the buffers on the way hold: the client reads while it is sent.
    let reader = tokio::spawn(async move {
        let mut received = Vec::new();
        client_app.read_to_end(&mut received).await.unwrap();
        received
    });
    let answer = pattern(100_000);
    server_app.write_all(&answer).await.unwrap();
    server_app.shutdown().await.unwrap();
    assert!(reader.await.unwrap() == answer);
    let (transferred, result) = proxy.await.unwrap();
    result.unwrap();
    assert_eq!(transferred.client_to_upstream, 7);
    assert_eq!(transferred.upstream_to_client, 100_000);
}

#[tokio::test]
async fn a_waiting_connection_holds_no_pipe() {
    let Loopback {
        mut app,
        mut server,
        pipes,
        ..
    } = loopback(Vec::new(), Ok(())).await;
    for _ in 0..3 {
        app.write_all(b"ping\n").await.unwrap();
        let mut got = [0u8; 5];
        server.read_exact(&mut got).await.unwrap();
        server.write_all(b"pong\n").await.unwrap();
        app.read_exact(&mut got).await.unwrap();
    }
    // Both directions now wait for data (their readiness may be stale: a chunk that
    // finds nothing must give its pipe back). The relay runs on its own task: poll.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while pipes.lent() > 0 && tokio::time::Instant::now() < deadline {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        pipes.lent(),
        0,
        "{} pipes lent to idle directions",
        pipes.lent()
    );
    assert!(pipes.live() >= 1, "the exchange went through pipes");
}

/// Fails a step that does not finish in time (a stalled direction), instead of hanging.
async fn in_time<T>(step: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), step)
        .await
        .expect("the relay stalled")
}

mod boundaries;
mod gather;
