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

#[test]
fn alerts_are_read_two_bytes_at_a_time_however_the_kernel_joins_them() {
    // user_canceled and close_notify in one read (kernels before the 2024 fix).
    let mut reading = Reading::default();
    reading
        .control(ALERT, &[1, USER_CANCELED, 1, CLOSE_NOTIFY])
        .unwrap();
    assert!(reading.peer_closed);
    // One alert over two one-byte reads.
    let mut reading = Reading::default();
    reading.control(ALERT, &[1]).unwrap();
    reading.control(ALERT, &[USER_CANCELED, 1]).unwrap();
    assert!(!reading.peer_closed);
    reading.control(ALERT, &[CLOSE_NOTIFY]).unwrap();
    assert!(reading.peer_closed);
    // Any other alert ends the connection, also behind a user_canceled.
    let mut reading = Reading::default();
    let error = reading
        .control(ALERT, &[1, USER_CANCELED, 2, 40])
        .unwrap_err();
    assert!(error.to_string().contains("HandshakeFailure"), "{error}");
}

#[test]
fn a_write_that_could_pass_the_record_limit_is_refused_before_it_is_made() {
    let limit = 1000;
    let mut writing = Writing {
        records_sent: limit - 3,
        record_limit: limit,
        retiring: Arc::default(),
        close_notify_sent: false,
    };
    // The last record is kept for the close_notify.
    writing.admit(MAX_PLAINTEXT).unwrap();
    writing.admit(2 * MAX_PLAINTEXT).unwrap();
    assert!(
        writing.admit(2 * MAX_PLAINTEXT + 1).is_err(),
        "three records"
    );
    writing.wrote(1);
    assert!(writing.admit(MAX_PLAINTEXT + 1).is_err(), "two records");
    writing.admit(0).unwrap();
    writing.wrote(0);
    let error = writing.admit(0).unwrap_err();
    assert!(
        error.to_string().contains("limit of 1000 records"),
        "{error}"
    );
}

/// At the limit the close_notify is left out, and the FIN still goes.
#[tokio::test]
async fn a_connection_at_its_record_limit_still_ends_with_a_fin() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let socket = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (mut peer, _) = listener.accept().await.unwrap();
    // No keys are set: what the socket sends arrives as it is.
    let mut stream = KernelTlsStream::new(socket, 1000, 1000);
    stream.shutdown().await.unwrap();
    let mut got = Vec::new();
    peer.read_to_end(&mut got).await.unwrap();
    assert!(got.is_empty(), "{got:?}");
}
