//! HTTP/1.1 on the inline path's upstream connections: the request head written, the
//! response head read, and the response body's framing (RFC 9112 section 6.3) decoded.
//! The same rules as hyper's client, strictly: a head or chunk that could be read two
//! ways fails the response, and a response whose end is in doubt (Transfer-Encoding and
//! Content-Length both, bytes after its end) leaves its connection closed, so that a
//! connection lent to the next request never starts in the middle of a message.

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Version};

mod body;

pub use body::{Chunked, Decoded, Decoder};

/// Most bytes a response head may take: as much as hyper's client lets through at the
/// most (twice `pool::UPSTREAM_READ_BUFFER`), whatever the reads.
pub const MAX_HEAD: usize = 2 * super::super::pool::UPSTREAM_READ_BUFFER;
/// Most fields in a response head or trailer section.
const MAX_FIELDS: usize = 128;
/// Most bytes of a chunk-size line, extensions included.
const MAX_CHUNK_LINE: usize = 4096;
/// Most bytes of a chunked body's trailer section (as hyper's client).
const MAX_TRAILERS: usize = 16 * 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("malformed response head: {0}")]
    Head(#[from] httparse::Error),
    #[error("response head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("a response header is not valid: {0}")]
    Field(&'static str),
    #[error("Content-Length is not one decimal length")]
    ContentLength,
    #[error("an HTTP/1.0 response with Transfer-Encoding")]
    TransferEncoding10,
    #[error("101 Switching Protocols to a request that asked for no upgrade")]
    UnexpectedUpgrade,
    #[error("malformed chunked body: {0}")]
    Chunk(&'static str),
    #[error("the upstream closed the connection {0}")]
    Closed(&'static str),
}

/// The request head of `req`, whose URI is in origin-form, and which has no body (the
/// inline path sends no other): its header fields as they are, Host among them.
pub fn request_head<B>(req: &Request<B>) -> Vec<u8> {
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let fields: usize = (req.headers().iter())
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    let mut head = Vec::with_capacity(req.method().as_str().len() + target.len() + fields + 14);
    head.extend_from_slice(req.method().as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in req.headers() {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// A response head, and how its body is framed.
#[derive(Debug)]
pub struct Head {
    pub response: Response<()>,
    pub body: Decoder,
    /// Whether the connection may carry another request once the body has ended.
    pub reusable: bool,
}

/// Takes the response head to a request of `method` off the front of `buf`, skipping
/// interim (1xx) responses: `None` until all of it has arrived.
pub fn parse_head(buf: &mut BytesMut, method: &Method) -> Result<Option<Head>, CodecError> {
    loop {
        // Left uninitialised: filling 128 slots with empty headers for every read of a
        // head was the largest part of this function's time (perf, HTTP keep-alive).
        let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
        let mut parsed = httparse::Response::new(&mut []);
        let config = httparse::ParserConfig::default();
        let length =
            match config.parse_response_with_uninit_headers(&mut parsed, buf, &mut fields)? {
                httparse::Status::Complete(length) if length > MAX_HEAD => {
                    return Err(CodecError::HeadTooLarge);
                }
                httparse::Status::Complete(length) => length,
                httparse::Status::Partial if buf.len() > MAX_HEAD => {
                    return Err(CodecError::HeadTooLarge);
                }
                httparse::Status::Partial => return Ok(None),
            };
        let code = parsed.code.ok_or(httparse::Error::Status)?;
        let version = match parsed.version {
            Some(0) => Version::HTTP_10,
            _ => Version::HTTP_11,
        };
        // Where each field's name and value lie in the head, to share its bytes.
        let start = buf.as_ptr() as usize;
        let spans: Vec<_> = (parsed.headers.iter())
            .map(|f| {
                let name = f.name.as_ptr() as usize - start;
                let value = f.value.as_ptr() as usize - start;
                (name..name + f.name.len(), value..value + f.value.len())
            })
            .collect();
        let head = buf.split_to(length).freeze();
        match code {
            101 => return Err(CodecError::UnexpectedUpgrade),
            100..=199 => continue,
            _ => {}
        }
        let status = StatusCode::from_u16(code).map_err(|_| httparse::Error::Status)?;
        let mut headers = HeaderMap::with_capacity(spans.len());
        for (name, value) in spans {
            let name = HeaderName::from_bytes(&head[name])
                .map_err(|_| CodecError::Field("a field name"))?;
            let value = HeaderValue::from_maybe_shared(head.slice(value))
                .map_err(|_| CodecError::Field("a field value"))?;
            headers.append(name, value);
        }
        let (body, reusable) = framing(&mut headers, version, status, method)?;
        let mut response = Response::new(());
        *response.status_mut() = status;
        *response.version_mut() = version;
        *response.headers_mut() = headers;
        return Ok(Some(Head {
            response,
            body,
            reusable,
        }));
    }
}

/// How the body after this head is framed, and whether the connection may carry
/// another request after it.
fn framing(
    headers: &mut HeaderMap,
    version: Version,
    status: StatusCode,
    method: &Method,
) -> Result<(Decoder, bool), CodecError> {
    // `close` wins over `keep-alive`, which HTTP/1.0 needs.
    let keep_alive = !lists(headers, CONNECTION, "close")
        && (version == Version::HTTP_11 || lists(headers, CONNECTION, "keep-alive"));
    if *method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((Decoder::Done, keep_alive));
    }
    if headers.contains_key(TRANSFER_ENCODING) {
        if version == Version::HTTP_10 {
            return Err(CodecError::TransferEncoding10);
        }
        // Transfer-Encoding overrides Content-Length, and both at once may be a
        // smuggling attempt (RFC 9112 section 6.3): the length goes, and so does the
        // connection after this response.
        let both = headers.remove(CONTENT_LENGTH).is_some();
        return Ok(match chunked_last(headers) {
            true => (Decoder::Chunked(Chunked::Size), keep_alive && !both),
            false => (Decoder::Close, false),
        });
    }
    if headers.contains_key(CONTENT_LENGTH) {
        return Ok((Decoder::Length(content_length(headers)?), keep_alive));
    }
    Ok((Decoder::Close, false))
}

/// Whether any `name` field lists `token` among its comma-separated values.
fn lists(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    (headers.get_all(name).iter())
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// Whether the last transfer coding is `chunked`.
fn chunked_last(headers: &HeaderMap) -> bool {
    let last = headers.get_all(TRANSFER_ENCODING).iter().next_back();
    last.and_then(|v| v.as_bytes().rsplit(|&b| b == b',').next())
        .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

/// The one length all Content-Length values (and list members) agree on.
fn content_length(headers: &HeaderMap) -> Result<u64, CodecError> {
    let mut length = None;
    for part in
        (headers.get_all(CONTENT_LENGTH).iter()).flat_map(|v| v.as_bytes().split(|&b| b == b','))
    {
        let part = part.trim_ascii();
        if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
            return Err(CodecError::ContentLength);
        }
        let parsed = part.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
        if length.is_some_and(|l| l != parsed) {
            return Err(CodecError::ContentLength);
        }
        length = Some(parsed);
    }
    length.ok_or(CodecError::ContentLength)
}

#[cfg(test)]
mod tests;
