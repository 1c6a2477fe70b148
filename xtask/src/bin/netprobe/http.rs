//! `netprobe serve-http ADDR`: a small HTTP/1.1 server (keep-alive, chunked or sized
//! request bodies) for what nginx cannot do by itself: server-sent events with a pause
//! between events, a late answer, and a WebSocket echo.
//!
//! Routes: `/sse?events=N&gap_ms=MS` (text/event-stream, chunked; event `i` is
//! `id: i` / `data: event i last-event-id=<the request's Last-Event-ID or ->`, an
//! `Mcp-Session-Id` request header is sent back), `/delay?ms=MS` (answers `late` after
//! MS ms), `/big-head?bytes=N` (`ok`, after response headers of about N bytes),
//! `/gzip-coded` (`hello, gzip-coded` sent with `Transfer-Encoding: gzip, chunked`),
//! `/early` (answers `early` before it reads the request body, then reads it), `/ws`
//! with `Upgrade: websocket` (101, then every frame is echoed), anything else
//! `hello from netprobe`. Per request it prints `request {json}` (method, path,
//! version, headers, body_bytes), before answering (`/early`: after).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;

use super::{accept_each, say, websocket};

pub fn serve(addr: &str) -> ExitCode {
    accept_each(addr, |stream, peer| {
        if let Err(e) = keep_alive(stream, peer) {
            eprintln!("netprobe: http connection from {peer}: {e}");
        }
        say(&format!("closed {peer}"));
    })
}

struct Request {
    method: String,
    target: String,
    version: String,
    headers: BTreeMap<String, String>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    /// A numeric query parameter, or `default`.
    fn param(&self, name: &str, default: u64) -> u64 {
        let query = self
            .target
            .split_once('?')
            .map(|(_, q)| q)
            .unwrap_or_default();
        query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(key, _)| *key == name)
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(default)
    }
}

fn keep_alive(stream: TcpStream, peer: &str) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let Some(request) = read_head(&mut reader)? else {
            return Ok(());
        };
        // A server that answers before it has read the upload (a 401, a 413).
        let early = request.path() == "/early";
        if early {
            respond(&mut out, "early\n")?;
        }
        let body_bytes = read_body(&mut reader, &request)?;
        let line = json!({
            "peer": peer,
            "method": request.method,
            "path": request.target,
            "version": request.version,
            "headers": request.headers,
            "body_bytes": body_bytes,
        });
        say(&format!("request {line}"));
        let upgrade = request.header("upgrade").unwrap_or_default();
        if request.path() == "/ws" && upgrade.eq_ignore_ascii_case("websocket") {
            let key = request.header("sec-websocket-key").unwrap_or_default();
            return websocket::echo(key, reader, out, peer);
        }
        match request.path() {
            "/sse" => events(&request, &mut out)?,
            "/delay" => {
                std::thread::sleep(Duration::from_millis(request.param("ms", 1000)));
                respond(&mut out, "late\n")?;
            }
            "/big-head" => big_head(&mut out, request.param("bytes", 0))?,
            "/gzip-coded" => gzip_coded(&mut out)?,
            "/early" => {}
            _ => respond(&mut out, "hello from netprobe\n")?,
        }
        let close = request.header("connection").unwrap_or_default();
        if close.eq_ignore_ascii_case("close") || request.version == "HTTP/1.0" {
            return Ok(());
        }
    }
}

/// The request line and headers (names lowercased); `None` at EOF before a request.
fn read_head(reader: &mut impl BufRead) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (method, target, version) = match (parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v)) => (m.to_owned(), t.to_owned(), v.to_owned()),
        _ => return Err(invalid(format!("bad request line {line:?}"))),
    };
    let mut headers = BTreeMap::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(invalid("EOF in the request headers".into()));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header
            .split_once(':')
            .ok_or_else(|| invalid(format!("bad header {header:?}")))?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    Ok(Some(Request {
        method,
        target,
        version,
        headers,
    }))
}

/// Reads and discards the request body; returns its length.
fn read_body(reader: &mut impl BufRead, request: &Request) -> std::io::Result<u64> {
    let chunked = request
        .header("transfer-encoding")
        .is_some_and(|te| te.eq_ignore_ascii_case("chunked"));
    if !chunked {
        let length: u64 = request
            .header("content-length")
            .map(|l| l.parse().map_err(|_| invalid(format!("bad length {l:?}"))))
            .transpose()?
            .unwrap_or(0);
        return std::io::copy(&mut reader.take(length), &mut std::io::sink());
    }
    let mut total = 0;
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let size = line.trim().split(';').next().unwrap_or_default();
        let size = u64::from_str_radix(size, 16)
            .map_err(|_| invalid(format!("bad chunk size {line:?}")))?;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                line.clear();
                if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                    return Ok(total);
                }
            }
        }
        total += std::io::copy(&mut reader.take(size), &mut std::io::sink())?;
        line.clear();
        reader.read_line(&mut line)?;
    }
}

fn respond(out: &mut impl Write, body: &str) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

/// `/big-head`: `ok` after filler headers of 4,000 bytes each, `bytes` in all.
fn big_head(out: &mut impl Write, bytes: u64) -> std::io::Result<()> {
    let mut head = String::from("HTTP/1.1 200 OK\r\ncontent-length: 3\r\n");
    for i in 0..bytes.div_ceil(4000) {
        head.push_str(&format!("x-filler-{i}: {}\r\n", "f".repeat(4000)));
    }
    write!(out, "{head}\r\nok\n")?;
    out.flush()
}

/// `gzip -n` of `hello, gzip-coded`.
const GZIP_CODED: [u8; 37] = [
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0xd7,
    0x51, 0x48, 0xaf, 0xca, 0x2c, 0xd0, 0x4d, 0xce, 0x4f, 0x49, 0x4d, 0x01, 0x00, 0xfc, 0xc5, 0xd1,
    0x62, 0x11, 0x00, 0x00, 0x00,
];

/// `/gzip-coded`: a body with a transfer coding besides chunked (rare; servers use
/// Content-Encoding), which a proxy must not pass on as plain content.
fn gzip_coded(out: &mut impl Write) -> std::io::Result<()> {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\
                transfer-encoding: gzip, chunked\r\n\r\n";
    write!(out, "{head}{:x}\r\n", GZIP_CODED.len())?;
    out.write_all(&GZIP_CODED)?;
    out.write_all(b"\r\n0\r\n\r\n")?;
    out.flush()
}

/// `/sse`: `events` events, `gap_ms` apart, each flushed on its own.
fn events(request: &Request, out: &mut impl Write) -> std::io::Result<()> {
    let mut head = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
         transfer-encoding: chunked\r\n",
    );
    if let Some(session) = request.header("mcp-session-id") {
        head.push_str(&format!("mcp-session-id: {session}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.flush()?;
    let last = request.header("last-event-id").unwrap_or("-");
    let count = request.param("events", 2);
    for i in 1..=count {
        if i > 1 {
            std::thread::sleep(Duration::from_millis(request.param("gap_ms", 2000)));
        }
        let event = format!("id: {i}\ndata: event {i} last-event-id={last}\n\n");
        write!(out, "{:x}\r\n{event}\r\n", event.len())?;
        out.flush()?;
    }
    out.write_all(b"0\r\n\r\n")?;
    out.flush()
}

pub fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}
