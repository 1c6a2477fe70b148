//! The authority of a request: what it names (the Backend it is for), and what the
//! upstream is told.

use http::{HeaderValue, Request, header::HOST, uri::Authority};
use hyper::body::Incoming;

use crate::proxy::http::error::{HttpError, ProxyError};

/// The authority the request names: the URI's (h2 `:authority`, HTTP/1 absolute form),
/// else the Host header.
pub fn authority_of(req: &Request<Incoming>) -> Option<&str> {
    match req.uri().authority() {
        Some(authority) => Some(authority.as_str()),
        None => req.headers().get(HOST).and_then(|h| h.to_str().ok()),
    }
}

/// `host[:port]` split; a port that is not a number leaves the whole as the host (which
/// then names no Backend). Bracketed IPv6 literals name no Backend either.
pub fn split_host_port(authority: &str) -> (&str, Option<u16>) {
    match authority.rsplit_once(':') {
        Some((host, port)) if !authority.ends_with(']') => match port.parse() {
            Ok(port) => (host, Some(port)),
            Err(_) => (authority, None),
        },
        _ => (authority, None),
    }
}

/// `host` or `host:port` when the port is not the scheme's default: what the upstream
/// sees as Host / `:authority`, whichever spelling the client used.
pub fn canonical_authority(hostname: &str, port: u16, tls: bool) -> String {
    match (tls, port) {
        (true, 443) | (false, 80) => hostname.to_owned(),
        _ => format!("{hostname}:{port}"),
    }
}

/// What the upstream is told a request is for, formed once per client connection and
/// Backend: the URI's authority (h2 `:authority`; hyper-util writes it as Host) and the
/// same as a Host header (upgrades and inline HTTP/1, which write their own).
pub struct UpstreamAuthority {
    pub uri: Authority,
    pub host: HeaderValue,
}

impl UpstreamAuthority {
    /// `canonical` (`canonical_authority`), or itself back if it does not parse.
    pub fn parse(canonical: String) -> Result<Self, String> {
        let host = HeaderValue::from_str(&canonical);
        match (Authority::from_maybe_shared(canonical.clone()), host) {
            (Ok(uri), Ok(host)) => Ok(Self { uri, host }),
            _ => Err(canonical),
        }
    }
}

pub fn bad_authority(authority: &str) -> ProxyError {
    ProxyError::new(
        HttpError::UpstreamError,
        format!("cannot form an upstream request for {authority:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::{canonical_authority, split_host_port};

    #[test]
    fn hosts_and_ports() {
        assert_eq!(split_host_port("a.test"), ("a.test", None));
        assert_eq!(split_host_port("a.test:8443"), ("a.test", Some(8443)));
        assert_eq!(split_host_port("a.test:x"), ("a.test:x", None));
        assert_eq!(split_host_port("[::1]"), ("[::1]", None));
        assert_eq!(split_host_port("[::1]:443"), ("[::1]", Some(443)));
    }

    #[test]
    fn default_ports_are_left_out() {
        assert_eq!(canonical_authority("a.test", 443, true), "a.test");
        assert_eq!(canonical_authority("a.test", 443, false), "a.test:443");
        assert_eq!(canonical_authority("a.test", 80, false), "a.test");
        assert_eq!(canonical_authority("a.test", 8443, true), "a.test:8443");
    }
}
