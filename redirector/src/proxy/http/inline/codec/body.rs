//! A response body's framing, decoded as its bytes arrive: a length, chunks (with their
//! trailer section), or until the upstream closes.

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};

use super::{CodecError, MAX_CHUNK_LINE, MAX_FIELDS, MAX_TRAILERS};

/// Where a response body is in its framing.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoder {
    /// This many bytes still to come.
    Length(u64),
    Chunked(Chunked),
    /// Until the upstream closes the connection.
    Close,
    /// Ended.
    Done,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Chunked {
    /// Next, a chunk-size line.
    Size,
    /// This many bytes of the chunk still to come.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// The trailer section after the last chunk, of which this many bytes have been
    /// looked at.
    Trailers(usize),
}

/// What a look at the buffer gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    Data(Bytes),
    Trailers(HeaderMap),
    /// The body has ended.
    End,
    /// More bytes are needed.
    More,
}

impl Decoder {
    /// Takes the next part of the body off the front of `buf`.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, CodecError> {
        loop {
            match self {
                Self::Done | Self::Length(0) => {
                    *self = Self::Done;
                    return Ok(Decoded::End);
                }
                _ if buf.is_empty() => return Ok(Decoded::More),
                Self::Length(left) => {
                    let take = data_len(*left, buf);
                    *left -= take as u64;
                    return Ok(Decoded::Data(buf.split_to(take).freeze()));
                }
                Self::Close => return Ok(Decoded::Data(buf.split().freeze())),
                Self::Chunked(state) => match state.decode(buf)? {
                    Some(Decoded::End) => *self = Self::Done,
                    Some(Decoded::Trailers(trailers)) => {
                        *self = Self::Done;
                        return Ok(Decoded::Trailers(trailers));
                    }
                    Some(decoded) => return Ok(decoded),
                    None => {}
                },
            }
        }
    }

    /// The upstream closed the connection, after what `decode` has taken.
    pub fn at_eof(&mut self) -> Result<Decoded, CodecError> {
        match self {
            Self::Close | Self::Done | Self::Length(0) => {
                *self = Self::Done;
                Ok(Decoded::End)
            }
            _ => Err(CodecError::Closed("in the middle of the response body")),
        }
    }

    /// Whether the body has ended (nothing more to read for it).
    pub fn is_end(&self) -> bool {
        matches!(self, Self::Done | Self::Length(0))
    }

    /// How many bytes are left, when the framing says.
    pub fn remaining(&self) -> Option<u64> {
        match self {
            Self::Length(left) => Some(*left),
            Self::Done => Some(0),
            _ => None,
        }
    }
}

/// How many of the `left` bytes `buf` holds.
fn data_len(left: u64, buf: &BytesMut) -> usize {
    usize::try_from(left).map_or(buf.len(), |left| left.min(buf.len()))
}

impl Chunked {
    /// One step: `None` when the state moved on with nothing to give yet.
    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, CodecError> {
        match self {
            Self::Size => {
                let Some(line) = line(buf, MAX_CHUNK_LINE)? else {
                    return Ok(Some(Decoded::More));
                };
                let size = chunk_size(&line)?;
                *self = if size == 0 {
                    Self::Trailers(0)
                } else {
                    Self::Data(size)
                };
                Ok(None)
            }
            Self::Data(left) => {
                let take = data_len(*left, buf);
                *left -= take as u64;
                let data = buf.split_to(take).freeze();
                if *left == 0 {
                    *self = Self::DataEnd;
                }
                Ok(Some(Decoded::Data(data)))
            }
            Self::DataEnd => {
                if buf.len() < 2 {
                    return Ok(Some(Decoded::More));
                }
                if &buf[..2] != b"\r\n" {
                    return Err(CodecError::Chunk("no CRLF after a chunk's data"));
                }
                let _ = buf.split_to(2);
                *self = Self::Size;
                Ok(None)
            }
            Self::Trailers(scanned) => trailers(buf, scanned).map(Some),
        }
    }
}

/// Takes a CRLF-ended line (without its CRLF) off the front of `buf`: `None` until it
/// has all arrived. A bare CR or LF in it is an error.
fn line(buf: &mut BytesMut, max: usize) -> Result<Option<BytesMut>, CodecError> {
    let Some(end) = buf.iter().take(max).position(|&b| b == b'\n') else {
        if buf.len() >= max {
            return Err(CodecError::Chunk("a chunk-size line is too long"));
        }
        return Ok(None);
    };
    if end == 0 || buf[end - 1] != b'\r' || buf[..end - 1].contains(&b'\r') {
        return Err(CodecError::Chunk("a line not ended by CRLF"));
    }
    let mut line = buf.split_to(end + 1);
    Ok(Some(line.split_to(end - 1)))
}

/// A chunk-size line's size: hexadecimal digits, then optional whitespace and
/// extensions (`;...`), which are skipped.
fn chunk_size(line: &[u8]) -> Result<u64, CodecError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 16 {
        return Err(CodecError::Chunk(
            "a chunk size is not 1 to 16 hexadecimal digits",
        ));
    }
    let rest = &line[digits..];
    let blank = rest
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    if rest.get(blank).is_some_and(|&b| b != b';') {
        return Err(CodecError::Chunk(
            "a chunk size is followed by something else",
        ));
    }
    let hex = |d: u8| u64::from((d as char).to_digit(16).unwrap_or(0));
    Ok(line[..digits].iter().fold(0, |n, &d| n << 4 | hex(d)))
}

/// The trailer section after the last chunk, up to and with its empty line: found by
/// looking only at what arrived since the last look (`scanned` bytes had no end), so
/// that a section sent a byte at a time costs no more than one sent whole.
fn trailers(buf: &mut BytesMut, scanned: &mut usize) -> Result<Decoded, CodecError> {
    if buf.len() < 2 {
        return Ok(Decoded::More);
    }
    if &buf[..2] == b"\r\n" {
        let _ = buf.split_to(2);
        return Ok(Decoded::End);
    }
    let from = scanned.saturating_sub(3);
    let Some(end) = (buf[from..].windows(4)).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > MAX_TRAILERS {
            return Err(CodecError::Chunk("the trailer section is too large"));
        }
        *scanned = buf.len();
        return Ok(Decoded::More);
    };
    let section = &buf[..from + end + 4];
    // httparse also ends a line at a bare LF, where the end would then be in doubt.
    let bare_lf = (section.iter().enumerate())
        .any(|(i, &b)| b == b'\n' && (i == 0 || section[i - 1] != b'\r'));
    if bare_lf || section.len() > MAX_TRAILERS {
        return Err(CodecError::Chunk(
            "a malformed or too large trailer section",
        ));
    }
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let fields = match httparse::parse_headers(section, &mut fields) {
        Ok(httparse::Status::Complete((length, fields))) if length == section.len() => fields,
        _ => return Err(CodecError::Chunk("a malformed trailer section")),
    };
    let mut trailers = HeaderMap::with_capacity(fields.len());
    for field in fields {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| CodecError::Field("a trailer name"))?;
        let value = HeaderValue::from_bytes(field.value)
            .map_err(|_| CodecError::Field("a trailer value"))?;
        trailers.append(name, value);
    }
    let length = section.len();
    let _ = buf.split_to(length);
    Ok(Decoded::Trailers(trailers))
}
