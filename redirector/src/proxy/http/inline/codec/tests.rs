//! The codec against hand-written heads and bodies: how each framing is read, in one
//! piece and byte by byte, and the heads and chunks it refuses.

use bytes::Bytes;

use super::*;

/// Parses `head` as the response to a `method` request; the rest stays in the buffer.
fn head(method: &Method, bytes: &[u8]) -> Result<Option<Head>, CodecError> {
    parse_head(&mut BytesMut::from(bytes), method)
}

fn get(bytes: &[u8]) -> Head {
    head(&Method::GET, bytes).unwrap().expect("a whole head")
}

/// Decodes all of `body` as `decoder` frames it, fed `step` bytes at a time: the data,
/// the trailers, and what was left after the end (read or not).
fn decode(
    mut decoder: Decoder,
    body: &[u8],
    step: usize,
) -> Result<(Vec<u8>, HeaderMap, Vec<u8>), CodecError> {
    let mut buf = BytesMut::new();
    let (mut data, mut trailers) = (Vec::new(), HeaderMap::new());
    let mut fed = 0;
    loop {
        match decoder.decode(&mut buf)? {
            Decoded::Data(bytes) => {
                assert!(!bytes.is_empty(), "no empty data frames");
                data.extend_from_slice(&bytes);
            }
            Decoded::Trailers(map) => trailers = map,
            Decoded::End => return Ok((data, trailers, [&buf[..], &body[fed..]].concat())),
            Decoded::More if fed == body.len() => match decoder.at_eof()? {
                Decoded::End => return Ok((data, trailers, buf.to_vec())),
                other => panic!("at EOF: {other:?}"),
            },
            Decoded::More => {
                let next = (fed + step).min(body.len());
                buf.extend_from_slice(&body[fed..next]);
                fed = next;
            }
        }
    }
}

#[test]
fn requests_are_written_as_given_in_origin_form() {
    let req = Request::get("/a/b?c=1")
        .header("host", "api.example.test")
        .header("accept", "*/*")
        .body(())
        .unwrap();
    assert_eq!(
        request_head(&req),
        b"GET /a/b?c=1 HTTP/1.1\r\nhost: api.example.test\r\naccept: */*\r\n\r\n"
    );
}

#[test]
fn a_head_arrives_whole_or_not_at_all() {
    let whole = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-a: 1\r\nx-a: 2\r\n\r\nok";
    for cut in 0..whole.len() - 2 {
        assert!(
            head(&Method::GET, &whole[..cut]).unwrap().is_none(),
            "cut at {cut}"
        );
    }
    let mut buf = BytesMut::from(&whole[..]);
    let parsed = parse_head(&mut buf, &Method::GET).unwrap().unwrap();
    assert_eq!(&buf[..], b"ok", "the body stays in the buffer");
    assert_eq!(parsed.response.status(), StatusCode::OK);
    assert_eq!(parsed.response.headers().get_all("x-a").iter().count(), 2);
    assert_eq!(parsed.body, Decoder::Length(2));
    assert!(parsed.reusable);
}

#[test]
fn interim_responses_are_skipped() {
    let parsed = get(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n");
    assert_eq!(parsed.response.status(), StatusCode::NO_CONTENT);
    assert!(parsed.response.headers().get("link").is_none());
    assert_eq!(
        head(
            &Method::GET,
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n"
        )
        .unwrap_err(),
        CodecError::UnexpectedUpgrade
    );
}

#[test]
fn framing_follows_rfc_9112() {
    let cases: [(&Method, &[u8], Decoder, bool); 11] = [
        (
            &Method::GET,
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
            Decoder::Length(5),
            true,
        ),
        (
            &Method::GET,
            b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\ncontent-length: 5\r\n\r\n",
            Decoder::Length(5),
            true,
        ),
        (
            &Method::GET,
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            Decoder::Chunked(Chunked::Size),
            true,
        ),
        (
            &Method::GET,
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, Chunked\r\n\r\n",
            Decoder::Chunked(Chunked::Size),
            true,
        ),
        // Both: chunked, and the connection closes after it.
        (
            &Method::GET,
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n",
            Decoder::Chunked(Chunked::Size),
            false,
        ),
        (
            &Method::GET,
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n",
            Decoder::Close,
            false,
        ),
        (
            &Method::GET,
            b"HTTP/1.1 200 OK\r\n\r\n",
            Decoder::Close,
            false,
        ),
        (
            &Method::HEAD,
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
            Decoder::Done,
            true,
        ),
        (
            &Method::GET,
            b"HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\n\r\n",
            Decoder::Done,
            true,
        ),
        (
            &Method::GET,
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: keep-alive, Close\r\n\r\n",
            Decoder::Length(5),
            false,
        ),
        (
            &Method::GET,
            b"HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\n",
            Decoder::Length(5),
            false,
        ),
    ];
    for (method, bytes, body, reusable) in cases {
        let parsed = head(method, bytes).unwrap().unwrap();
        let shown = String::from_utf8_lossy(bytes);
        assert_eq!(parsed.body, body, "{method} {shown}");
        assert_eq!(parsed.reusable, reusable, "{method} {shown}");
    }
    let kept = get(b"HTTP/1.0 200 OK\r\ncontent-length: 5\r\nconnection: keep-alive\r\n\r\n");
    assert!(kept.reusable);
    let closed = get(b"HTTP/1.0 200 OK\r\ncontent-length: 5\r\nconnection: keep-alive\r\nconnection: close\r\n\r\n");
    assert!(!closed.reusable, "close wins");
    let both = get(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n");
    assert!(
        both.response.headers().get("content-length").is_none(),
        "the length goes"
    );
}

#[test]
fn heads_that_could_be_read_two_ways_are_refused() {
    let refused: [(&[u8], CodecError); 7] = [
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
            CodecError::ContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 5, 6\r\n\r\n",
            CodecError::ContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\n",
            CodecError::ContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: \r\n\r\n",
            CodecError::ContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n",
            CodecError::ContentLength,
        ),
        (
            b"HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            CodecError::TransferEncoding10,
        ),
        // Obsolete line folding.
        (
            b"HTTP/1.1 200 OK\r\nx-a: 1\r\n folded\r\n\r\n",
            CodecError::Head(httparse::Error::HeaderName),
        ),
    ];
    for (bytes, error) in refused {
        assert_eq!(
            head(&Method::GET, bytes).unwrap_err(),
            error,
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
    let mut endless = b"HTTP/1.1 200 OK\r\n".to_vec();
    endless.resize(MAX_HEAD + 1, b'a');
    assert_eq!(
        head(&Method::GET, &endless).unwrap_err(),
        CodecError::HeadTooLarge
    );
}

#[test]
fn bodies_are_read_to_their_end_in_any_pieces() {
    let chunked = b"3\r\nabc\r\n5;name=value\r\ndefgh\r\n0\r\nx-sum: 8\r\n\r\nNEXT";
    for step in [1, 2, 3, 7, chunked.len()] {
        let (data, trailers, left) =
            decode(Decoder::Chunked(Chunked::Size), chunked, step).unwrap();
        assert_eq!(data, b"abcdefgh", "step {step}");
        assert_eq!(trailers.get("x-sum").unwrap(), "8");
        assert_eq!(left, b"NEXT", "what follows stays, step {step}");
        let (data, _, left) = decode(Decoder::Length(5), b"helloNEXT", step).unwrap();
        assert_eq!(
            (data.as_slice(), left.as_slice()),
            (&b"hello"[..], &b"NEXT"[..])
        );
    }
    let (data, trailers, left) = decode(
        Decoder::Chunked(Chunked::Size),
        b"A \t\r\n0123456789\r\n0\r\n\r\n",
        4,
    )
    .unwrap();
    assert_eq!(data, b"0123456789");
    assert!(trailers.is_empty() && left.is_empty());
    let (data, _, _) = decode(Decoder::Close, b"until the end", 5).unwrap();
    assert_eq!(data, b"until the end");
    assert_eq!(decode(Decoder::Length(0), b"", 1).unwrap().0, b"");
}

#[test]
fn malformed_chunks_and_short_bodies_are_errors() {
    let malformed: [&[u8]; 12] = [
        // A bare LF in the trailer section, where httparse would end a line.
        b"0\r\nx-a: 1\n\nHTTP/1.1 200 OK\r\n\r\n",
        b"0\r\n\nx-a: 1\r\n\r\n",
        b"0\r\nx-a: 1\r\nx-b\r\n\r\n",
        b"x\r\nabc\r\n0\r\n\r\n",
        b"\r\n0\r\n\r\n",
        b"3\nabc\r\n0\r\n\r\n",
        b"3\r\nabcX\r\n0\r\n\r\n",
        b"3 x\r\nabc\r\n0\r\n\r\n",
        b"3;a\rb\r\nabc\r\n0\r\n\r\n",
        b"11111111111111111\r\n",
        b"0\r\nbad trailer\r\n\r\n",
        b"+3\r\nabc\r\n0\r\n\r\n",
    ];
    for body in malformed {
        for step in [1, body.len()] {
            let error = decode(Decoder::Chunked(Chunked::Size), body, step).unwrap_err();
            assert!(
                matches!(error, CodecError::Chunk(_)),
                "{}: {error}",
                String::from_utf8_lossy(body)
            );
        }
    }
    let long = [b'1'; MAX_CHUNK_LINE];
    assert!(matches!(
        decode(Decoder::Chunked(Chunked::Size), &long, 64),
        Err(CodecError::Chunk(_))
    ));
    let short: [(Decoder, &[u8]); 3] = [
        (Decoder::Length(5), b"abc"),
        (Decoder::Chunked(Chunked::Size), b"3\r\nabc\r\n"),
        (Decoder::Chunked(Chunked::Size), b"3\r\nab"),
    ];
    for (decoder, body) in short {
        let error = decode(decoder, body, 1).unwrap_err();
        assert!(
            matches!(error, CodecError::Closed(_)),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

/// What hyper's client makes of `response` to a GET, sent whole and then the connection
/// closed: the status, body and trailers, or `None` if it fails the response.
async fn hyper_reads(response: &'static [u8]) -> Option<(u16, Vec<u8>, HeaderMap)> {
    use http_body_util::{BodyExt, Empty};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (client, mut server) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let mut request = [0u8; 1024];
        let _ = server.read(&mut request).await;
        let _ = server.write_all(response).await;
        let _ = server.shutdown().await;
        // Until hyper lets go: dropping the stream early would cut what it still reads.
        let _ = server.read(&mut request).await;
    });
    let io = hyper_util::rt::TokioIo::new(client);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.ok()?;
    tokio::spawn(connection);
    let req = Request::get("/").body(Empty::<Bytes>::new()).ok()?;
    let response = sender.send_request(req).await.ok()?;
    let status = response.status().as_u16();
    let collected = response.into_body().collect().await.ok()?;
    let trailers = collected.trailers().cloned().unwrap_or_default();
    Some((status, collected.to_bytes().to_vec(), trailers))
}

/// The same with the codec.
fn codec_reads(response: &[u8]) -> Option<(u16, Vec<u8>, HeaderMap)> {
    let mut buf = BytesMut::from(response);
    let head = parse_head(&mut buf, &Method::GET).ok()??;
    let (body, trailers, _) = decode(head.body, &buf, buf.len()).ok()?;
    Some((head.response.status().as_u16(), body, trailers))
}

#[tokio::test]
async fn responses_are_read_as_hyper_reads_them() {
    // Where the codec is stricter than hyper, on purpose (none of these so far).
    let stricter: [&[u8]; 0] = [];
    let responses: [&'static [u8]; 26] = [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nx-a: 1\n\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nx-a: 1\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhel",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!",
        b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\ncontent-length: 0x5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\n\r\nuntil the end",
        b"HTTP/1.0 200 OK\r\n\r\nuntil the end",
        b"HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nx-sum: 5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nz\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        b"HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-a: 1\r\n folded\r\ncontent-length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nx a: 1\r\ncontent-length: 2\r\n\r\nok",
    ];
    let mut read = 0;
    for response in responses {
        let shown = String::from_utf8_lossy(response);
        let hyper = hyper_reads(response).await;
        let codec = codec_reads(response);
        if stricter.contains(&response) {
            assert!(codec.is_none(), "{shown}");
            continue;
        }
        read += usize::from(codec.is_some());
        assert_eq!(codec, hyper, "{shown}");
    }
    assert_eq!(read, 12, "responses both read rather than both refused");
}
