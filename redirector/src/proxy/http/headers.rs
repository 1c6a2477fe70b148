//! Hop-by-hop headers (RFC 9110 section 7.6.1): they describe one connection, so a proxy
//! that opens its own upstream connection must not forward them. hyper frames bodies
//! (Content-Length, chunked) for each side itself.

use http::{
    HeaderMap, HeaderName, HeaderValue, Request, Version,
    header::{CONNECTION, CONTENT_LENGTH, COOKIE, TE, TRANSFER_ENCODING, UPGRADE},
};
use hyper::body::Body;

/// Hop-by-hop headers besides those the `Connection` header lists. `HTTP2-Settings`
/// belongs to the h2c upgrade of one connection (RFC 7540 section 3.2.1), which the
/// proxy declines: it goes even when a client does not list it in `Connection`.
const HOP_BY_HOP: [HeaderName; 5] = [
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("http2-settings"),
    TE,
    TRANSFER_ENCODING,
];

/// The Upgrade token of cleartext HTTP/2.
const H2C: &[u8] = b"h2c";

/// An HTTP/1.1 Upgrade request (WebSocket and others): `Connection: upgrade` and an
/// `Upgrade` header offering a protocol besides `h2c`. Upgrade is HTTP/1.1's own: on
/// HTTP/1.0 the headers are stripped like any hop-by-hop ones.
///
/// `h2c` alone (Java's `HttpClient` and `curl --http2` offer it on every first request
/// to an `http://` address) is declined, not followed: the request is answered in
/// HTTP/1.1 and forwarded like any other, on the Backend's pool in the upstream protocol
/// it declares. An upgrade gets an HTTP/1.1 upstream connection of its own, without
/// ALPN (`upgrade.rs`), which an h2-only server closes (502) and which is never pooled.
/// Declining is what RFC 9110 section 7.8 lets any server do; RFC 9113 section 3.1
/// deprecates the h2c upgrade; hyper's server has none to offer; clients go on in
/// HTTP/1.1, and those that want h2 speak it with prior knowledge, which the proxy
/// serves.
pub fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.version() == Version::HTTP_11
        && connection_lists(req.headers(), "upgrade")
        && upgrade_tokens(req.headers()).any(|token| !is_h2c(token))
}

/// Removes hop-by-hop headers. With `upgrade`, `Connection: upgrade` and `Upgrade` stay:
/// the upgrade is passed on to the upstream connection made for it, offering what the
/// client offered besides `h2c` (declined: see [`is_upgrade`]).
///
/// Returns the transfer codings other than `chunked` that `Transfer-Encoding` listed
/// (`gzip, chunked` gives `gzip`). hyper has undone `chunked` itself, but not the
/// others: they describe the body, so the caller refuses the message or passes them on.
#[must_use = "a body with transfer codings besides chunked must not pass as plain content"]
pub fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) -> Option<HeaderValue> {
    // Runs twice per request, and most messages carry none of these names: one pass
    // over the names spares the lookups below.
    if !upgrade && !headers.keys().any(is_hop_by_hop) {
        return None;
    }
    let codings = other_transfer_codings(headers);
    // A message with both framed its body by Transfer-Encoding (RFC 9112 section 6.3):
    // hyper decoded it so, and the stale length must not frame it again.
    if headers.contains_key(TRANSFER_ENCODING) {
        headers.remove(CONTENT_LENGTH);
    }
    // Names the Connection header lists (rare beyond keep-alive/close/upgrade;
    // keep-alive, the common one, goes with `HOP_BY_HOP` and allocates nothing here).
    let listed: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|name| !name.eq_ignore_ascii_case("keep-alive"))
        .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .collect();
    // `TE: trailers` says the client accepts trailers, which h2 upstreams need to know
    // (gRPC); any other TE value is hop-by-hop.
    let trailers = headers
        .get(TE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    for name in listed.iter().chain(&HOP_BY_HOP) {
        if upgrade && name == UPGRADE {
            continue;
        }
        headers.remove(name);
    }
    if trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
    if upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        drop_h2c(headers);
    } else {
        headers.remove(CONNECTION);
        headers.remove(UPGRADE);
    }
    codings
}

/// Removes a response's hop-by-hop headers, keeping its transfer codings besides
/// `chunked` for a client that can take them: an HTTP/1.1 client gets them back (hyper
/// appends `chunked`). h2 has no transfer codings and HTTP/1.0 no chunked, so such a
/// response cannot reach those clients as sent: `Err` with the codings.
pub fn strip_response(headers: &mut HeaderMap, client: Version) -> Result<(), HeaderValue> {
    match strip_hop_by_hop(headers, false) {
        None => Ok(()),
        Some(codings) if client == Version::HTTP_11 => {
            headers.insert(TRANSFER_ENCODING, codings);
            Ok(())
        }
        Some(codings) => Err(codings),
    }
}

/// The codings `Transfer-Encoding` lists besides `chunked`, `, `-joined.
fn other_transfer_codings(headers: &HeaderMap) -> Option<HeaderValue> {
    let mut others = Vec::new();
    let listed = headers.get_all(TRANSFER_ENCODING);
    for coding in listed
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
    {
        let coding = coding.trim_ascii();
        if coding.is_empty() || coding.eq_ignore_ascii_case(b"chunked") {
            continue;
        }
        if !others.is_empty() {
            others.extend_from_slice(b", ");
        }
        others.extend_from_slice(coding);
    }
    // Parts of valid values joined by ", " are a valid value.
    (!others.is_empty()).then(|| HeaderValue::from_bytes(&others).ok())?
}

/// Makes the request's body go upstream as sent when its length is not known (chunked
/// from an HTTP/1.1 client, DATA frames without content-length from an h2 one): hyper
/// sends a GET, HEAD or CONNECT with no framing header as having no body at all, and
/// `Transfer-Encoding` was just stripped as hop-by-hop. On an h2 upstream hyper drops
/// the header again and frames the body itself.
pub fn keep_unsized_body<B: Body>(req: &mut Request<B>) {
    let body = req.body();
    if !body.is_end_stream() && body.size_hint().exact().is_none() {
        let chunked = HeaderValue::from_static("chunked");
        req.headers_mut().insert(TRANSFER_ENCODING, chunked);
    }
}

/// Joins several `Cookie` fields into one, `; `-separated: an h2 client may send each
/// cookie as a field of its own (RFC 9113 section 8.2.3), and an HTTP/1.1 server reads
/// one `Cookie` header (many read only the first).
pub fn join_cookies(headers: &mut HeaderMap) {
    if headers.get_all(COOKIE).iter().nth(1).is_none() {
        return;
    }
    let mut joined = Vec::new();
    for value in &headers.get_all(COOKIE) {
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(value.as_bytes());
    }
    // Valid values joined by "; " are a valid value: this always replaces them.
    if let Ok(value) = HeaderValue::from_bytes(&joined) {
        headers.insert(COOKIE, value);
    }
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == CONNECTION || name == UPGRADE || HOP_BY_HOP.contains(name)
}

/// The protocols the `Upgrade` header offers (`websocket`, `h2c`, `foo/2`).
fn upgrade_tokens(headers: &HeaderMap) -> impl Iterator<Item = &[u8]> {
    (headers.get_all(UPGRADE).iter())
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|token| !token.is_empty())
}

fn is_h2c(token: &[u8]) -> bool {
    token.eq_ignore_ascii_case(H2C)
}

/// Leaves the `Upgrade` header offering what it offered besides `h2c`: the server is
/// asked only for the upgrade the proxy can relay.
fn drop_h2c(headers: &mut HeaderMap) {
    if !upgrade_tokens(headers).any(is_h2c) {
        return;
    }
    let mut kept = Vec::new();
    for token in upgrade_tokens(headers).filter(|t| !is_h2c(t)) {
        if !kept.is_empty() {
            kept.extend_from_slice(b", ");
        }
        kept.extend_from_slice(token);
    }
    // Parts of valid values joined by ", " are a valid value; an upgrade request
    // offers at least one protocol besides h2c.
    match HeaderValue::from_bytes(&kept) {
        Ok(value) if !kept.is_empty() => headers.insert(UPGRADE, value),
        _ => headers.remove(UPGRADE),
    };
}

fn connection_lists(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests;
