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
