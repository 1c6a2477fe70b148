//! What one exchange is: a line echoed back by a TCP server, or an HTTP/1.1 request
//! answered 200 (keep-alive, so a connection can ask again).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::conn::kind;

/// Largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;

#[derive(Clone, Debug)]
pub enum Proto {
    /// `ping\n`, echoed.
    Echo,
    /// `GET path` with this Host.
    Http { host: String, path: String },
}

impl Proto {
    pub fn new(http: Option<String>, path: &str) -> Proto {
        match http {
            Some(host) => Proto::Http {
                host,
                path: path.to_owned(),
            },
            None => Proto::Echo,
        }
    }

    /// The bytes of one request.
    pub fn request(&self) -> Vec<u8> {
        match self {
            Proto::Echo => b"ping\n".to_vec(),
            Proto::Http { host, path } => {
                format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
            }
        }
    }

    /// One exchange within `timeout`; `Err(kind)` names what went wrong.
    pub async fn exchange(&self, stream: &mut TcpStream, timeout: Duration) -> Result<(), String> {
        match tokio::time::timeout(timeout, self.exchange_once(stream)).await {
            Ok(result) => result,
            Err(_) => Err("reply-timeout".into()),
        }
    }

    async fn exchange_once(&self, stream: &mut TcpStream) -> Result<(), String> {
        let request = self.request();
        stream.write_all(&request).await.map_err(|e| kind(&e))?;
        match self {
            Proto::Echo => {
                let mut reply = vec![0u8; request.len()];
                stream.read_exact(&mut reply).await.map_err(|e| kind(&e))?;
                if reply != request {
                    return Err("bad-reply".into());
                }
                Ok(())
            }
            Proto::Http { .. } => match read_response(stream).await {
                Ok(200) => Ok(()),
                Ok(status) => Err(format!("status-{status}")),
                Err(e) => Err(kind(&e)),
            },
        }
    }
}

/// Reads one response (head, then a `Content-Length` or chunked body) and returns its
/// status. A body of neither kind is left unread: the caller does not reuse the stream.
pub async fn read_response(stream: &mut TcpStream) -> std::io::Result<u16> {
    use std::io::{Error, ErrorKind};
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = find(&buf, b"\r\n\r\n") {
            break at + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(Error::new(
                ErrorKind::InvalidData,
                "response head too large",
            ));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| Error::new(ErrorKind::InvalidData, "no status line"))?;
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    let mut body = buf[head_end..].to_vec();
    if let Some(length) = header("content-length:").and_then(|v| v.parse::<usize>().ok()) {
        while body.len() < length {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(ErrorKind::UnexpectedEof.into());
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if header("transfer-encoding:").is_some_and(|v| v.contains("chunked")) {
        // Small bodies only (the proxy's own answers): wait for the last chunk.
        while find(&body, b"0\r\n\r\n").is_none() {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(ErrorKind::UnexpectedEof.into());
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    Ok(status)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
