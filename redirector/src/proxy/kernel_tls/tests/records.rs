//! Records no rustls server writes, sealed by the test with the server's own keys after
//! its handshake: what the kernel path must read as any TLS 1.3 peer may send them.

use super::*;

/// A server that hands its keys over after the handshake and seals `records` (content
/// type, plaintext) in one write, then waits for the client to close.
pub(super) async fn sealing_server(tls: ServerTls, records: Vec<(u8, Vec<u8>)>) -> bool {
    let mut tcp = sealed(tls, records).await;
    let mut rest = Vec::new();
    tcp.read_to_end(&mut rest).await.is_ok()
}

/// The server's side of [`sealing_server`] once its records are written.
pub(super) async fn sealed(tls: ServerTls, records: Vec<(u8, Vec<u8>)>) -> TcpStream {
    sealed_in_pieces(tls, records, usize::MAX).await
}

/// [`sealed`], the records written `piece` bytes at a time, each its own segment.
pub(super) async fn sealed_in_pieces(
    tls: ServerTls,
    records: Vec<(u8, Vec<u8>)>,
    piece: usize,
) -> TcpStream {
    let (mut tcp, session) = tls.into_inner();
    tcp.set_nodelay(true).unwrap();
    let (seq, secret) = session.dangerous_extract_secrets().unwrap().tx;
    let mut sealer = RecordKey::new(&CryptoInfo::tls13(seq, &secret).unwrap());
    let wire: Vec<u8> = (records.iter())
        .flat_map(|(content_type, plain)| sealer.seal(*content_type, plain))
        .collect();
    for piece in wire.chunks(piece) {
        tcp.write_all(piece).await.unwrap();
        // Let the reader take what arrived before the rest follows.
        tokio::task::yield_now().await;
    }
    tcp
}

#[tokio::test]
async fn empty_data_records_are_skipped_up_to_the_close_notify() {
    let records = vec![
        (sys::APPLICATION_DATA, Vec::new()),
        (sys::APPLICATION_DATA, b"between empty records".to_vec()),
        (sys::APPLICATION_DATA, Vec::new()),
        (ALERT, vec![1, 0]),
    ];
    for cipher in ciphers() {
        let records = records.clone();
        let (stream, served) = connected_to(true, cipher, |tls| sealing_server(tls, records)).await;
        let (mut stream, handed) = offload_here(stream);
        let mut read = Vec::new();
        let ended = stream.read_to_end(&mut read).await;
        assert!(
            ended.is_ok() && read == b"between empty records",
            "{cipher:?}, handed over: {handed}: {ended:?} after {:?}",
            String::from_utf8_lossy(&read)
        );
        stream.shutdown().await.unwrap();
        drop(stream);
        assert!(served.await.unwrap());
    }
}
