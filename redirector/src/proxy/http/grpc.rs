//! gRPC calls through HTTP Backends (any protocol, `GRPC` foremost: h2 upstream).
//!
//! gRPC clients read a call's outcome from `grpc-status`, not from the HTTP status: a
//! 502 or 504 alone makes them report UNKNOWN or INTERNAL, which says nothing of what
//! happened. So the proxy's own answers to gRPC calls are trailers-only responses
//! (HTTP 200, `grpc-status`, `grpc-message`: gRPC over HTTP/2, "Responses"), and every
//! call is counted by the code its response ended with.
//!
//! gRPC-Web (`application/grpc-web...`) is not a gRPC call here: its clients speak
//! HTTP/1.1 to browsers' rules and get the plain HTTP answers.

use http::{HeaderMap, HeaderValue, Response, StatusCode, header::CONTENT_TYPE};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

use super::{
    body::{ProxyBody, text},
    error::{HttpError, ProxyError},
};

const GRPC_STATUS: &str = "grpc-status";
const GRPC_MESSAGE: &str = "grpc-message";
const APPLICATION_GRPC: &str = "application/grpc";

/// What `grpc-message` percent-encodes besides non-ASCII bytes: controls and `%`
/// itself (gRPC over HTTP/2: "Percent-Encoded").
const MESSAGE_ENCODED: &AsciiSet = &CONTROLS.add(b'%');

/// Whether a request is a gRPC call: its content type is `application/grpc`, alone or
/// with a subtype (`+proto`) or parameters.
pub fn is_call(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return false;
    };
    let value = value.as_bytes();
    let prefix = APPLICATION_GRPC.as_bytes();
    value.len() >= prefix.len()
        && value[..prefix.len()].eq_ignore_ascii_case(prefix)
        && matches!(value.get(prefix.len()), None | Some(b'+' | b';' | b' '))
}

/// The gRPC status codes (grpc/doc/statuscodes.md), in their numeric order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok,
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

/// Every code, indexed by its number.
pub const CODES: [Code; 17] = [
    Code::Ok,
    Code::Cancelled,
    Code::Unknown,
    Code::InvalidArgument,
    Code::DeadlineExceeded,
    Code::NotFound,
    Code::AlreadyExists,
    Code::PermissionDenied,
    Code::ResourceExhausted,
    Code::FailedPrecondition,
    Code::Aborted,
    Code::OutOfRange,
    Code::Unimplemented,
    Code::Internal,
    Code::Unavailable,
    Code::DataLoss,
    Code::Unauthenticated,
];

impl Code {
    /// Its number, as `grpc-status` carries it.
    pub fn number(self) -> usize {
        self as usize
    }

    /// The name the gRPC docs and clients print (`UNAVAILABLE`): the metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "OK",
            Self::Cancelled => "CANCELLED",
            Self::Unknown => "UNKNOWN",
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Self::NotFound => "NOT_FOUND",
            Self::AlreadyExists => "ALREADY_EXISTS",
            Self::PermissionDenied => "PERMISSION_DENIED",
            Self::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Self::FailedPrecondition => "FAILED_PRECONDITION",
            Self::Aborted => "ABORTED",
            Self::OutOfRange => "OUT_OF_RANGE",
            Self::Unimplemented => "UNIMPLEMENTED",
            Self::Internal => "INTERNAL",
            Self::Unavailable => "UNAVAILABLE",
            Self::DataLoss => "DATA_LOSS",
            Self::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// A `grpc-status` value; one that is no code is UNKNOWN, as clients read it.
    fn parse(value: &HeaderValue) -> Code {
        let number = (value.to_str().ok()).and_then(|v| v.trim().parse::<usize>().ok());
        number
            .and_then(|n| CODES.get(n).copied())
            .unwrap_or(Code::Unknown)
    }

    /// What a gRPC client makes of a response without `grpc-status` from its HTTP
    /// status (grpc/doc/http-grpc-status-mapping.md).
    fn of_http(status: StatusCode) -> Code {
        match status.as_u16() {
            400 => Code::Internal,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 | 502 | 503 | 504 => Code::Unavailable,
            _ => Code::Unknown,
        }
    }

    /// The code of the proxy's own answer for `kind`. Upstream connect and handshake
    /// failures are UNAVAILABLE (a client may retry: nothing reached the server), the
    /// response timeout DEADLINE_EXCEEDED, a policy's refusal PERMISSION_DENIED; the
    /// rest as gRPC's own mapping reads the HTTP status the proxy would have sent, but
    /// a name no Backend declares is PERMISSION_DENIED (retrying cannot help) and an
    /// unsupported transfer coding UNIMPLEMENTED.
    pub fn of_error(kind: HttpError) -> Code {
        match kind {
            HttpError::UpstreamConnect | HttpError::UpstreamHandshake => Code::Unavailable,
            HttpError::UpstreamTimeout => Code::DeadlineExceeded,
            HttpError::PolicyDenied | HttpError::Misdirected | HttpError::McpToolDenied => {
                Code::PermissionDenied
            }
            HttpError::TransferCoding => Code::Unimplemented,
            HttpError::HeadersTooLarge => Code::ResourceExhausted,
            HttpError::TlsConfig
            | HttpError::UpstreamError
            | HttpError::MalformedRequest
            | HttpError::PolicyUnresolved
            | HttpError::McpRequestTooLarge
            | HttpError::McpMalformed
            | HttpError::McpUnfilterable => Code::of_http(kind.status()),
        }
    }
}

/// The proxy's own answer to a gRPC call: trailers-only (HTTP 200, no body; on h2 one
/// HEADERS frame that ends the stream), with the detail as `grpc-message`.
pub fn own_answer(error: &ProxyError) -> (Response<ProxyBody>, Code) {
    let code = Code::of_error(error.kind);
    let mut response = Response::new(text(String::new()));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(APPLICATION_GRPC));
    headers.insert(GRPC_STATUS, HeaderValue::from(code.number()));
    let message = format!("redirector: {}", error.detail);
    let encoded = utf8_percent_encode(&message, MESSAGE_ENCODED).to_string();
    // Percent-encoded text is visible ASCII: always a valid value.
    if let Ok(value) = HeaderValue::from_str(&encoded) {
        headers.insert(GRPC_MESSAGE, value);
    }
    (response, code)
}

/// The outcome of a call as its response streams: `grpc-status` in the head
/// (trailers-only) or in the trailers, else what the client makes of the HTTP status.
#[derive(Debug, Clone, Copy)]
pub struct Outcome(Option<Code>);

impl Outcome {
    /// What the response head tells.
    pub fn of_head(status: StatusCode, headers: &HeaderMap) -> Outcome {
        if let Some(value) = headers.get(GRPC_STATUS) {
            return Outcome(Some(Code::parse(value)));
        }
        Outcome((status != StatusCode::OK).then(|| Code::of_http(status)))
    }

    /// The response's trailers arrived.
    pub fn trailers(&mut self, trailers: &HeaderMap) {
        if let Some(value) = trailers.get(GRPC_STATUS) {
            self.0 = Some(Code::parse(value));
        }
    }

    /// The code, once the response has ended; `None`: it ended without one (cut short,
    /// or the server is no gRPC server).
    pub fn code(self) -> Option<Code> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderName;
    use hyper::body::Body;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        (pairs.iter())
            .map(|(k, v)| {
                let name = HeaderName::from_bytes(k.as_bytes()).unwrap();
                (name, HeaderValue::from_str(v).unwrap())
            })
            .collect()
    }

    #[test]
    fn grpc_content_types_are_calls_and_grpc_web_is_not() {
        for yes in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC; x=1",
        ] {
            assert!(is_call(&headers(&[("content-type", yes)])), "{yes}");
        }
        for no in [
            "application/grpc-web",
            "application/grpc-web+proto",
            "text/plain",
        ] {
            assert!(!is_call(&headers(&[("content-type", no)])), "{no}");
        }
        assert!(!is_call(&HeaderMap::new()));
    }

    #[test]
    fn own_answers_are_trailers_only_with_the_issue_s_codes() {
        let cases = [
            (HttpError::UpstreamConnect, "14"),
            (HttpError::UpstreamHandshake, "14"),
            (HttpError::UpstreamTimeout, "4"),
            (HttpError::PolicyDenied, "7"),
            (HttpError::UpstreamError, "14"),
        ];
        for (kind, status) in cases {
            let error = ProxyError::new(kind, "upstream 10.0.0.1:443: 100% down\n(é)");
            let (response, code) = own_answer(&error);
            assert_eq!(code.number().to_string(), status);
            assert_eq!(response.status(), StatusCode::OK);
            assert!(response.body().is_end_stream(), "no body, no DATA frame");
            let h = response.headers();
            assert_eq!(h["content-type"], "application/grpc");
            assert_eq!(h["grpc-status"], status, "{kind:?}");
            assert_eq!(
                h["grpc-message"],
                "redirector: upstream 10.0.0.1:443: 100%25 down%0A(%C3%A9)"
            );
        }
    }

    #[test]
    fn outcomes_come_from_the_head_or_the_trailers_or_the_http_status() {
        let only = Outcome::of_head(StatusCode::OK, &headers(&[("grpc-status", "5")]));
        assert_eq!(only.code(), Some(Code::NotFound));
        let mut streamed = Outcome::of_head(StatusCode::OK, &HeaderMap::new());
        assert_eq!(streamed.code(), None, "not known before the trailers");
        streamed.trailers(&headers(&[("grpc-status", "0")]));
        assert_eq!(streamed.code(), Some(Code::Ok));
        streamed.trailers(&headers(&[("grpc-status", "99")]));
        assert_eq!(streamed.code(), Some(Code::Unknown));
        let http = Outcome::of_head(StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new());
        assert_eq!(http.code(), Some(Code::Unavailable));
        for (i, code) in CODES.iter().enumerate() {
            assert_eq!(code.number(), i);
        }
    }
}
