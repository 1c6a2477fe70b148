//! Hop-by-hop headers (RFC 9110 section 7.6.1): they describe one connection, so a proxy
//! that opens its own upstream connection must not forward them. hyper frames bodies
//! (Content-Length, chunked) for each side itself.

use http::{
    HeaderMap, HeaderName, HeaderValue, Request,
    header::{CONNECTION, TE, TRANSFER_ENCODING, UPGRADE},
};

/// Hop-by-hop headers besides those the `Connection` header lists.
const HOP_BY_HOP: [HeaderName; 4] = [
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    TE,
    TRANSFER_ENCODING,
];

/// An HTTP/1.1 Upgrade request (WebSocket and others): `Connection: upgrade` and an
/// `Upgrade` header.
pub fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.headers().contains_key(UPGRADE) && connection_lists(req.headers(), "upgrade")
}

/// Removes hop-by-hop headers. With `upgrade`, `Connection: upgrade` and `Upgrade` stay:
/// the upgrade is passed on to the upstream connection made for it.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    // Runs twice per request, and most messages carry none of these names: one pass
    // over the names spares the lookups below.
    if !upgrade && !headers.keys().any(is_hop_by_hop) {
        return;
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
    } else {
        headers.remove(CONNECTION);
        headers.remove(UPGRADE);
    }
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == CONNECTION || name == UPGRADE || HOP_BY_HOP.contains(name)
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
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, http::HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn hop_by_hop_headers_go_end_to_end_headers_stay() {
        let mut map = headers(&[
            ("connection", "keep-alive, x-hop"),
            ("keep-alive", "timeout=5"),
            ("x-hop", "1"),
            ("transfer-encoding", "chunked"),
            ("te", "gzip"),
            ("mcp-session-id", "abc"),
            ("last-event-id", "7"),
            ("host", "a.test"),
        ]);
        strip_hop_by_hop(&mut map, false);
        let mut names: Vec<&str> = map.keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["host", "last-event-id", "mcp-session-id"]);
    }

    #[test]
    fn end_to_end_headers_alone_are_left_as_they_are() {
        let mut map = headers(&[("content-length", "3"), ("x-a", "1"), ("x-a", "2")]);
        let before = map.clone();
        strip_hop_by_hop(&mut map, false);
        assert_eq!(map, before);
        let mut map = headers(&[("connection", "keep-alive"), ("date", "x")]);
        strip_hop_by_hop(&mut map, false);
        assert_eq!(map.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["date"]);
    }

    #[test]
    fn names_listed_in_connection_go_in_any_case() {
        let mut map = headers(&[
            ("connection", "Keep-Alive, X-Hop , close"),
            ("x-hop", "1"),
            ("close", "2"),
            ("upgrade", "h2c"),
            ("proxy-connection", "keep-alive"),
            ("x-end", "3"),
        ]);
        strip_hop_by_hop(&mut map, false);
        assert_eq!(
            map.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["x-end"]
        );
    }

    #[test]
    fn te_trailers_and_upgrades_are_kept() {
        let mut map = headers(&[
            ("te", "trailers"),
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
        ]);
        let req = {
            let mut req = Request::new(());
            *req.headers_mut() = map.clone();
            req
        };
        assert!(is_upgrade(&req));
        strip_hop_by_hop(&mut map, true);
        assert_eq!(map["te"], "trailers");
        assert_eq!(map["upgrade"], "websocket");
        assert_eq!(map["connection"], "upgrade");
    }
}
