//! Hop-by-hop headers (RFC 9110 section 7.6.1): they describe one connection, so a proxy
//! that opens its own upstream connection must not forward them. hyper frames bodies
//! (Content-Length, chunked) for each side itself.

use http::{
    HeaderMap, Request,
    header::{CONNECTION, TE, TRANSFER_ENCODING, UPGRADE},
};

/// Hop-by-hop headers besides those the `Connection` header lists.
const HOP_BY_HOP: [&str; 4] = ["keep-alive", "proxy-connection", "te", "transfer-encoding"];

/// An HTTP/1.1 Upgrade request (WebSocket and others): `Connection: upgrade` and an
/// `Upgrade` header.
pub fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.headers().contains_key(UPGRADE) && connection_lists(req.headers(), "upgrade")
}

/// Removes hop-by-hop headers. With `upgrade`, `Connection: upgrade` and `Upgrade` stay:
/// the upgrade is passed on to the upstream connection made for it.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    let listed: Vec<String> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect();
    // `TE: trailers` says the client accepts trailers, which h2 upstreams need to know
    // (gRPC); any other TE value is hop-by-hop.
    let trailers = headers
        .get(TE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    for name in listed.iter().map(String::as_str).chain(HOP_BY_HOP) {
        if upgrade && name == "upgrade" {
            continue;
        }
        headers.remove(name);
    }
    headers.remove(TRANSFER_ENCODING);
    if trailers {
        headers.insert(TE, http::HeaderValue::from_static("trailers"));
    }
    if upgrade {
        headers.insert(CONNECTION, http::HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(CONNECTION);
        headers.remove(UPGRADE);
    }
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
