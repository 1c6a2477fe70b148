//! `netprobe serve-h2 ADDR --cert PEM --key PEM`: a TLS server that speaks HTTP/2 only,
//! as gRPC servers and many APIs do. ALPN offers `h2` alone, and every connection is
//! spoken to in h2 whatever the client negotiated: one that sends HTTP/1.1 has its
//! connection closed (hyper's h2 server, like others, takes it for a bad preface).
//!
//! Every request is answered `host=<authority> protocol=HTTP/2.0`. Per connection it
//! prints `accepted <peer>`, `failed <peer> <error>` if TLS or h2 failed, and `closed
//! <peer>`; per request `request {json}` (before answering) with `connection` (numbered
//! from 1 in accept order), `peer`, `alpn` (`-` for none), `version`, `method`, `path`,
//! `authority` and `headers` (name to value, values of a repeated name joined by `, `).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::TcpStream;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ServerConfig;
use serde_json::json;
use tokio_rustls::TlsAcceptor;

use super::{accept_each, say, tls};

/// Connections accepted so far: the next one's number is this plus one.
static CONNECTIONS: AtomicU64 = AtomicU64::new(0);

pub fn serve(args: &[String]) -> ExitCode {
    let args = match tls::ServeArgs::parse(args) {
        Ok(args) => args,
        Err(e) => return super::usage(&e),
    };
    let config = match tls::server_config(&args, &[b"h2"]) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("netprobe: serve-h2: {e}");
            return ExitCode::from(2);
        }
    };
    accept_each(&args.addr, move |stream, peer| {
        let connection = CONNECTIONS.fetch_add(1, Ordering::Relaxed) + 1;
        if let Err(e) = connection_of(config.clone(), stream, peer, connection) {
            say(&format!("failed {peer} {e}"));
        }
        say(&format!("closed {peer}"));
    })
}

/// One connection, on a runtime of its own (the thread `accept_each` gave it).
fn connection_of(
    config: Arc<ServerConfig>,
    stream: TcpStream,
    peer: &str,
    connection: u64,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    runtime.block_on(async {
        stream
            .set_nonblocking(true)
            .map_err(|e| format!("nonblocking: {e}"))?;
        let tcp = tokio::net::TcpStream::from_std(stream).map_err(|e| format!("socket: {e}"))?;
        let tls = TlsAcceptor::from(config)
            .accept(tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let alpn = (tls.get_ref().1.alpn_protocol()).map_or_else(
            || "-".to_owned(),
            |p| String::from_utf8_lossy(p).into_owned(),
        );
        let peer = peer.to_owned();
        let service = service_fn(move |req| {
            let answer = answer(&req, connection, &peer, &alpn);
            async move { Ok::<_, Infallible>(answer) }
        });
        http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(tls), service)
            .await
            .map_err(|e| format!("h2: {e}"))
    })
}

fn answer(
    req: &Request<Incoming>,
    connection: u64,
    peer: &str,
    alpn: &str,
) -> Response<Full<Bytes>> {
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in req.headers() {
        let value = String::from_utf8_lossy(value.as_bytes());
        headers
            .entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    let authority = req.uri().authority().map(ToString::to_string);
    let version = format!("{:?}", req.version());
    let request = json!({
        "connection": connection,
        "peer": peer,
        "alpn": alpn,
        "version": version,
        "method": req.method().as_str(),
        "path": req.uri().path(),
        "authority": authority,
        "headers": headers,
    });
    say(&format!("request {request}"));
    let host = authority.unwrap_or_default();
    let body = format!("host={host} protocol={version}\n");
    Response::new(Full::new(Bytes::from(body)))
}
