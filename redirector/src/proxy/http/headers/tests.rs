use super::*;

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(*name, http::HeaderValue::from_static(value));
    }
    map
}

#[test]
fn split_cookies_are_joined_into_one_field() {
    let mut map = headers(&[("cookie", "a=1"), ("x", "y"), ("cookie", "b=2; c=3")]);
    join_cookies(&mut map);
    let cookies: Vec<_> = map.get_all("cookie").iter().collect();
    assert_eq!(cookies, ["a=1; b=2; c=3"]);
    let mut one = headers(&[("cookie", "a=1; b=2")]);
    let before = one.clone();
    join_cookies(&mut one);
    assert_eq!(one, before);
}

/// A body that says nothing of its length (as chunked ones do).
struct Unsized;

impl Body for Unsized {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        std::task::Poll::Ready(None)
    }
}

#[test]
fn a_body_of_unknown_length_is_sent_chunked_one_of_known_length_as_it_is() {
    use http_body_util::{Empty, Full};
    let mut unsized_get = Request::get("/").body(Unsized).unwrap();
    keep_unsized_body(&mut unsized_get);
    assert_eq!(unsized_get.headers()[TRANSFER_ENCODING], "chunked");
    let full = Full::new(bytes::Bytes::from_static(b"q"));
    let mut sized = Request::get("/").body(full).unwrap();
    keep_unsized_body(&mut sized);
    let mut empty = Request::get("/")
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    keep_unsized_body(&mut empty);
    assert!(sized.headers().is_empty() && empty.headers().is_empty());
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
    assert_eq!(strip_hop_by_hop(&mut map, false), None);
    let mut names: Vec<&str> = map.keys().map(|k| k.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["host", "last-event-id", "mcp-session-id"]);
}

#[test]
fn end_to_end_headers_alone_are_left_as_they_are() {
    let mut map = headers(&[("content-length", "3"), ("x-a", "1"), ("x-a", "2")]);
    let before = map.clone();
    assert_eq!(strip_hop_by_hop(&mut map, false), None);
    assert_eq!(map, before);
    let mut map = headers(&[("connection", "keep-alive"), ("date", "x")]);
    assert_eq!(strip_hop_by_hop(&mut map, false), None);
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
    assert_eq!(strip_hop_by_hop(&mut map, false), None);
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
    let mut http10 = Request::new(());
    *http10.headers_mut() = map.clone();
    *http10.version_mut() = Version::HTTP_10;
    assert!(!is_upgrade(&http10), "Upgrade is HTTP/1.1's");
    assert_eq!(strip_hop_by_hop(&mut map, true), None);
    assert_eq!(map["te"], "trailers");
    assert_eq!(map["upgrade"], "websocket");
    assert_eq!(map["connection"], "upgrade");
}

#[test]
fn transfer_codings_besides_chunked_are_handed_back() {
    let mut map = headers(&[
        ("transfer-encoding", "gzip, Chunked"),
        ("transfer-encoding", " deflate ,chunked"),
    ]);
    let codings = strip_hop_by_hop(&mut map, false);
    assert_eq!(
        codings.as_ref().map(HeaderValue::as_bytes),
        Some(&b"gzip, deflate"[..])
    );
    assert!(map.is_empty());
    let mut response = headers(&[("transfer-encoding", "gzip, chunked"), ("x", "1")]);
    assert_eq!(
        strip_response(&mut response.clone(), Version::HTTP_2),
        Err(HeaderValue::from_static("gzip"))
    );
    assert_eq!(strip_response(&mut response, Version::HTTP_11), Ok(()));
    assert_eq!(response["transfer-encoding"], "gzip");
    let mut plain = headers(&[("transfer-encoding", "chunked")]);
    assert_eq!(strip_response(&mut plain, Version::HTTP_10), Ok(()));
    assert!(plain.is_empty());
    // The length beside a transfer coding never framed the body.
    let mut both = headers(&[
        ("transfer-encoding", "gzip, chunked"),
        ("content-length", "9"),
    ]);
    assert_eq!(strip_response(&mut both, Version::HTTP_11), Ok(()));
    assert_eq!(
        both.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
        ["transfer-encoding"]
    );
}

/// A request of `version` with these headers.
fn request(version: Version, pairs: &[(&'static str, &'static str)]) -> Request<()> {
    let mut req = Request::new(());
    *req.headers_mut() = headers(pairs);
    *req.version_mut() = version;
    req
}

/// What Java's `HttpClient` (version HTTP_2, its default) and `curl --http2` send with
/// their first request to an `http://` address.
const H2C_OFFER: [(&str, &str); 4] = [
    ("connection", "Upgrade, HTTP2-Settings"),
    ("upgrade", "h2c"),
    ("http2-settings", "AAEAAEAAAAIAAAABAAMAAABkAAQBAAAAAAUAAEAA"),
    ("user-agent", "Java-http-client/17.0.15"),
];

#[test]
fn an_h2c_offer_is_declined_and_its_headers_go() {
    let mut req = request(Version::HTTP_11, &H2C_OFFER);
    assert!(!is_upgrade(&req), "h2c is no upgrade the proxy follows");
    assert_eq!(strip_hop_by_hop(req.headers_mut(), false), None);
    let names: Vec<&str> = req.headers().keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["user-agent"]);
    // In any case, and with HTTP2-Settings not listed in Connection.
    let mut req = request(
        Version::HTTP_11,
        &[
            ("connection", "upgrade"),
            ("upgrade", " H2C "),
            ("http2-settings", "AAMAAABkAAQCAAAAAAIAAAAA"),
        ],
    );
    assert!(!is_upgrade(&req));
    assert_eq!(strip_hop_by_hop(req.headers_mut(), false), None);
    assert!(req.headers().is_empty(), "{:?}", req.headers());
}

#[test]
fn http2_settings_from_an_h2_client_is_not_passed_on() {
    let mut req = request(
        Version::HTTP_2,
        &[("http2-settings", "AAMAAABkAAQCAAAAAAIAAAAA"), ("x", "1")],
    );
    assert!(!is_upgrade(&req));
    assert_eq!(strip_hop_by_hop(req.headers_mut(), false), None);
    assert_eq!(
        req.headers().keys().map(|k| k.as_str()).collect::<Vec<_>>(),
        ["x"]
    );
}

#[test]
fn h2c_beside_another_protocol_leaves_that_one_offered() {
    // The upgrade the proxy relays goes on; h2c and its settings do not.
    for (upgrade, kept) in [
        ("h2c, websocket", "websocket"),
        ("websocket, h2c", "websocket"),
        ("h2c,foo/2,websocket", "foo/2, websocket"),
    ] {
        let mut pairs = H2C_OFFER.to_vec();
        pairs[1] = ("upgrade", upgrade);
        let mut req = request(Version::HTTP_11, &pairs);
        assert!(is_upgrade(&req), "{upgrade}");
        assert_eq!(strip_hop_by_hop(req.headers_mut(), true), None);
        assert_eq!(req.headers()["upgrade"], kept, "{upgrade}");
        assert_eq!(req.headers()["connection"], "upgrade");
        assert!(!req.headers().contains_key("http2-settings"), "{upgrade}");
    }
    // Two Upgrade fields: the same.
    let mut req = request(
        Version::HTTP_11,
        &[
            ("connection", "upgrade"),
            ("upgrade", "h2c"),
            ("upgrade", "websocket"),
        ],
    );
    assert!(is_upgrade(&req));
    assert_eq!(strip_hop_by_hop(req.headers_mut(), true), None);
    let offered: Vec<_> = req.headers().get_all("upgrade").iter().collect();
    assert_eq!(offered, ["websocket"]);
}
