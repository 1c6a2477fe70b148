use super::*;

#[test]
fn post_handshake_messages_are_framed_across_records() {
    let ticket = [NEW_SESSION_TICKET, 0, 0, 3, 9, 9, 9];
    assert_eq!(post_handshake(&ticket[..3]).unwrap(), None);
    assert_eq!(post_handshake(&ticket[..6]).unwrap(), None);
    assert_eq!(
        post_handshake(&ticket).unwrap(),
        Some((NEW_SESSION_TICKET, 7))
    );
    let update = [KEY_UPDATE, 0, 0, 1, 0];
    assert_eq!(post_handshake(&update).unwrap(), Some((KEY_UPDATE, 5)));
    assert!(
        post_handshake(&[KEY_UPDATE, 1, 0, 0]).is_err(),
        "64 KiB and more"
    );
    assert!(post_handshake(&[1, 0, 0, 0]).is_err(), "a ClientHello");
}

/// The counting alone: the socket has no keys, so its bytes go out as they are.
#[tokio::test]
async fn a_connection_asks_to_be_retired_a_sixteenth_before_its_record_limit() {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limit = 1 << 24;
    let retire_at = limit - limit / RETIRE_SHARE;
    for (sent, limit, retiring) in [
        (0, limit, false),
        (retire_at, limit, true),
        (u64::MAX / 2, u64::MAX, false),
    ] {
        let socket = TcpStream::connect(addr).await.unwrap();
        let stream = KernelTlsStream::new(socket, sent, limit);
        assert_eq!(
            stream.retiring().load(Ordering::Relaxed),
            retiring,
            "{sent}"
        );
    }
    let socket = TcpStream::connect(addr).await.unwrap();
    let mut stream = KernelTlsStream::new(socket, retire_at - 2, limit);
    let retiring = stream.retiring();
    stream.write_all(b"one record").await.unwrap();
    assert!(!retiring.load(Ordering::Relaxed), "one record short");
    stream.write_all(&[0; MAX_PLAINTEXT + 1]).await.unwrap();
    assert!(retiring.load(Ordering::Relaxed), "two more records");
}
