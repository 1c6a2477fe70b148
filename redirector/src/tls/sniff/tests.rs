use std::sync::Arc;

use rustls::{ClientConfig, ClientConnection, RootCertStore};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

use super::*;

/// The first flight of a real rustls client for `name`.
fn client_hello(name: ServerName<'static>) -> Vec<u8> {
    let provider = crate::tls::crypto_provider();
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    let mut connection = ClientConnection::new(Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    connection.write_tls(&mut hello).unwrap();
    hello
}

fn named(host: &str) -> Vec<u8> {
    client_hello(ServerName::try_from(host.to_owned()).unwrap())
}

#[test]
fn plaintext_is_recognised_from_the_first_byte() {
    assert_eq!(inspect(b"G"), Ok(Some(Opening::Plain)));
    assert_eq!(inspect(b"GET / HTTP/1.1\r\n"), Ok(Some(Opening::Plain)));
    // 0x16 followed by something that is not a TLS version: not TLS.
    assert_eq!(inspect(&[0x16, 0x41]), Ok(Some(Opening::Plain)));
    assert_eq!(inspect(&[]), Ok(None));
    assert_eq!(inspect(&[0x16]), Ok(None));
}

#[test]
fn client_hello_sni_is_read_from_any_prefix_length() {
    let hello = named("api.example.test");
    let sni = Some(Opening::ClientHello {
        sni: Some("api.example.test".into()),
    });
    assert_eq!(inspect(&hello), Ok(sni));
    for cut in 1..hello.len() {
        assert_eq!(inspect(&hello[..cut]), Ok(None), "prefix of {cut} bytes");
    }
}

/// `hello` (one TLS record) re-cut into records of `payload` bytes each.
fn fragmented(hello: &[u8], payload: usize) -> Vec<u8> {
    let (header, body) = hello.split_at(5);
    let mut records = Vec::new();
    for piece in body.chunks(payload) {
        records.extend_from_slice(&header[..3]);
        records.extend_from_slice(&u16::try_from(piece.len()).unwrap().to_be_bytes());
        records.extend_from_slice(piece);
    }
    records
}

#[test]
fn a_client_hello_arriving_a_byte_at_a_time_is_read_once() {
    let sni = Some(Opening::ClientHello {
        sni: Some("api.example.test".into()),
    });
    let hello = named("api.example.test");
    // One record, and the same hello in records of one handshake byte each.
    for flight in [hello.clone(), fragmented(&hello, 1)] {
        let mut reader = OpeningReader::default();
        for end in 1..flight.len() {
            assert_eq!(reader.read(&flight[..end]), Ok(None), "{end} bytes");
            // Every byte so far went to rustls (once two tell it is TLS), and only once.
            assert_eq!(reader.fed, if end < 2 { 0 } else { end });
        }
        assert_eq!(reader.read(&flight), Ok(sni.clone()));
    }
}

#[test]
fn client_hello_without_sni() {
    let hello = client_hello(ServerName::IpAddress(
        "10.0.0.1".parse::<std::net::IpAddr>().unwrap().into(),
    ));
    assert_eq!(
        inspect(&hello),
        Ok(Some(Opening::ClientHello { sni: None }))
    );
}

#[test]
fn garbage_after_a_handshake_header_is_refused() {
    let mut bogus = vec![0x16, 0x03, 0x01, 0x00, 0x05];
    bogus.extend_from_slice(&[0xff; 5]);
    assert!(inspect(&bogus).is_err());
}

/// One Backend on the address: `originates` says whether the proxy does its TLS.
fn only(name: &str, originates: bool) -> OpeningRule {
    OpeningRule {
        names: vec![(name.to_owned(), originates)],
        plaintext: Ok(()),
    }
}

#[test]
fn rules() {
    let hello = |sni: Option<&str>| Opening::ClientHello {
        sni: sni.map(str::to_owned),
    };
    let plain = only("api.example.test", false);
    assert!(plain.judge(&Opening::Plain).is_ok());
    assert_eq!(
        plain.judge(&hello(Some("API.example.test"))),
        Ok(Verdict::Declared {
            sni: Some("API.example.test".into())
        })
    );
    // Another site on the same address, or no name at all: not ours, passed through.
    assert_eq!(
        plain.judge(&hello(Some("other.example.test"))),
        Ok(Verdict::Passthrough {
            sni: Some("other.example.test".into())
        })
    );
    assert_eq!(
        plain.judge(&hello(None)),
        Ok(Verdict::Passthrough { sni: None })
    );
    let originating = only("api.example.test", true);
    assert!(originating.judge(&Opening::Plain).is_ok());
    let refused = originating
        .judge(&hello(Some("api.example.test")))
        .unwrap_err();
    assert_eq!(refused.kind, RefusedKind::ClientOpening);
    assert!(matches!(
        originating.judge(&hello(Some("other.example.test"))),
        Ok(Verdict::Passthrough { .. })
    ));
    let shared = OpeningRule {
        names: vec![("a.test".into(), true), ("b.test".into(), false)],
        plaintext: Err(OpeningRefused::new(RefusedKind::Ambiguous, "which one?")),
    };
    assert_eq!(
        shared.judge(&Opening::Plain).unwrap_err().kind,
        RefusedKind::Ambiguous
    );
    assert!(matches!(
        shared.judge(&hello(Some("b.test"))),
        Ok(Verdict::Declared { .. })
    ));
}

/// Feeds `bytes` one at a time through a guard and returns what comes out.
async fn through_guard(bytes: Vec<u8>, rule: OpeningRule, reroute: bool) -> io::Result<Vec<u8>> {
    let (mut writer, reader) = duplex(1);
    let feeder = tokio::spawn(async move {
        for byte in bytes {
            if writer.write_all(&[byte]).await.is_err() {
                return;
            }
        }
    });
    let mut guard = FirstBytesGuard::new(reader, rule, reroute);
    let mut out = Vec::new();
    let result = guard.read_to_end(&mut out).await.map(|_| out);
    feeder.abort();
    result
}

#[tokio::test]
async fn guard_passes_a_split_client_hello_with_the_right_sni_unchanged() {
    let hello = named("api.example.test");
    let mut stream = hello.clone();
    stream.extend_from_slice(b"more");
    let out = through_guard(stream.clone(), only("api.example.test", false), true)
        .await
        .unwrap();
    assert_eq!(out, stream);
}

#[tokio::test]
async fn guard_refuses_before_releasing_anything() {
    let error = through_guard(
        named("api.example.test"),
        only("api.example.test", true),
        false,
    )
    .await
    .unwrap_err();
    assert!(refusal(&error).is_some(), "{error}");
}

#[tokio::test]
async fn guard_stops_a_passthrough_for_rerouting_then_replays_it() {
    let hello = named("other.example.test");
    let (mut writer, reader) = duplex(64 * 1024);
    writer.write_all(&hello).await.unwrap();
    drop(writer);
    let mut guard = FirstBytesGuard::new(reader, only("api.example.test", true), true);
    let mut out = Vec::new();
    let error = guard.read_to_end(&mut out).await.unwrap_err();
    assert!(is_reroute(&error), "{error}");
    assert!(out.is_empty(), "nothing released before the reroute");
    guard.read_to_end(&mut out).await.unwrap();
    assert_eq!(out, hello);
    assert!(matches!(guard.verdict(), Some(Verdict::Passthrough { .. })));
}

#[tokio::test]
async fn guard_passes_plaintext_and_short_streams() {
    for bytes in [b"hello".to_vec(), vec![0x16], Vec::new()] {
        let out = through_guard(bytes.clone(), only("api.example.test", true), true)
            .await
            .unwrap();
        assert_eq!(out, bytes);
    }
}

#[tokio::test]
async fn read_opening_returns_what_it_read() {
    let hello = named("api.example.test");
    let mut stream = hello.clone();
    stream.extend_from_slice(b"tail");
    let (mut writer, mut reader) = duplex(64 * 1024);
    writer.write_all(&stream).await.unwrap();
    let (opening, held) = read_opening(&mut reader).await.unwrap();
    assert_eq!(
        opening,
        Ok(Some(Opening::ClientHello {
            sni: Some("api.example.test".into())
        }))
    );
    assert!(stream.starts_with(&held) && held.len() >= hello.len());
}

/// A connection with nothing held (a passthrough) reads the client's own bytes at once:
/// an empty replay must not read as EOF.
#[tokio::test]
async fn released_with_nothing_held_reads_the_stream() {
    let (mut client, inner) = duplex(64);
    let mut guard = FirstBytesGuard::released(inner, Vec::new());
    assert!(guard.is_passing());
    client.write_all(b"hello").await.unwrap();
    let mut got = [0u8; 5];
    guard.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"hello");
}
