use std::sync::Arc;

use rustls::{ClientConfig, ClientConnection, RootCertStore};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

use super::*;

/// The first flight of a real rustls client for `name`.
fn client_hello(name: ServerName<'static>) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
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

#[test]
fn rules() {
    let hello = |sni: Option<&str>| Opening::ClientHello {
        sni: sni.map(str::to_owned),
    };
    let pass = OpeningRule::SniMustBe("api.example.test".into());
    assert!(pass.judge(&Opening::Plain).is_ok());
    assert!(pass.judge(&hello(Some("API.example.test"))).is_ok());
    assert!(pass.judge(&hello(Some("evil.example.test"))).is_err());
    assert!(pass.judge(&hello(None)).is_err());
    assert!(OpeningRule::Plaintext.judge(&Opening::Plain).is_ok());
    assert!(
        OpeningRule::Plaintext
            .judge(&hello(Some("api.example.test")))
            .is_err()
    );
}

/// Feeds `bytes` one at a time through a guard and returns what comes out.
async fn through_guard(bytes: Vec<u8>, rule: OpeningRule) -> io::Result<Vec<u8>> {
    let (mut writer, reader) = duplex(1);
    let feeder = tokio::spawn(async move {
        for byte in bytes {
            if writer.write_all(&[byte]).await.is_err() {
                return;
            }
        }
    });
    let mut guard = FirstBytesGuard::new(reader, rule);
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
    let out = through_guard(
        stream.clone(),
        OpeningRule::SniMustBe("api.example.test".into()),
    )
    .await
    .unwrap();
    assert_eq!(out, stream);
}

#[tokio::test]
async fn guard_refuses_before_releasing_anything() {
    let error = through_guard(
        named("other.example.test"),
        OpeningRule::SniMustBe("api.example.test".into()),
    )
    .await
    .unwrap_err();
    assert!(refusal(&error).is_some(), "{error}");
    let error = through_guard(named("api.example.test"), OpeningRule::Plaintext)
        .await
        .unwrap_err();
    assert!(refusal(&error).is_some(), "{error}");
}

#[tokio::test]
async fn guard_passes_plaintext_and_short_streams() {
    let out = through_guard(b"hello".to_vec(), OpeningRule::Plaintext)
        .await
        .unwrap();
    assert_eq!(out, b"hello");
    let out = through_guard(vec![0x16], OpeningRule::Plaintext)
        .await
        .unwrap();
    assert_eq!(out, vec![0x16]);
    let out = through_guard(Vec::new(), OpeningRule::Plaintext)
        .await
        .unwrap();
    assert!(out.is_empty());
}
