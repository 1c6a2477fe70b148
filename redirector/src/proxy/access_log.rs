//! `--access-log`: one JSON line per HTTP request (`"event":"request"`) and one per
//! connection of the bytes path (`"event":"connection"`: forwarded, passed through or
//! refused), each with the `source` workload, written by a thread of its own so that a
//! slow disk never stalls a connection. Requests to MCP Backends carry `mcp` (method and
//! tool, read from their JSON-RPC).

use std::{
    io::{self, Write},
    net::IpAddr,
    path::Path,
    sync::atomic::{AtomicU64, Ordering},
};

use serde::Serialize;
use tokio::sync::mpsc;

use crate::workload::Workload;

/// Lines waiting for the writer; beyond this they are dropped and counted, rather than
/// growing memory or slowing requests.
const QUEUE: usize = 16 * 1024;

/// One request, as logged.
#[derive(Debug, Serialize)]
pub struct Request<'a> {
    pub backend: &'a str,
    pub source: &'a Workload,
    pub method: &'a str,
    pub authority: &'a str,
    pub path: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<&'a Mcp>,
    pub status: u16,
    /// Response body bytes sent to the client.
    pub bytes: u64,
    pub duration_ms: f64,
    pub upstream_protocol: &'a str,
}

/// What a request to an MCP Backend asked: the JSON-RPC `method`, and for `tools/call`
/// the `tool`. A batch lists each, comma-separated, in its order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mcp {
    pub method: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

/// One connection of the bytes path, as logged when it ends (or is refused).
#[derive(Debug, Serialize)]
pub struct Connection<'a> {
    /// `namespace/name`; `-` when none was chosen (passthrough, or refused before).
    pub backend: &'a str,
    pub source: &'a Workload,
    /// The address and port the client dialed.
    pub destination: IpAddr,
    pub port: u16,
    /// Client to upstream.
    pub bytes_sent: u64,
    /// Upstream to client.
    pub bytes_received: u64,
    pub duration_ms: f64,
    pub outcome: Outcome,
    /// Why it was refused or passed through (the metrics' reason); for a forwarded
    /// connection, `idle_timeout` if that closed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
}

/// What became of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Forwarded for a Backend.
    Forwarded,
    /// Sent to the dialed address unchanged: it names no Backend there.
    Passthrough,
    /// Closed without forwarding.
    Refused,
}

#[derive(Serialize)]
struct Line<'a, E> {
    time: String,
    event: &'static str,
    #[serde(flatten)]
    entry: &'a E,
}

pub struct AccessLog {
    lines: mpsc::Sender<String>,
    dropped: AtomicU64,
}

impl AccessLog {
    /// Appends to `path` (`-`: standard output).
    pub fn open(path: &Path) -> io::Result<Self> {
        let mut out: Box<dyn Write + Send> = if path == Path::new("-") {
            Box::new(io::stdout())
        } else {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot open --access-log {}: {e}", path.display()),
                    )
                })?;
            Box::new(io::BufWriter::new(file))
        };
        let (lines, mut queue) = mpsc::channel::<String>(QUEUE);
        // A blocking thread: file writes block, and this one only ever waits on them.
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || {
                while let Some(line) = queue.blocking_recv() {
                    let mut result = out.write_all(line.as_bytes());
                    // Flush when nothing else is queued: lines reach the file promptly
                    // without one write per line under load.
                    if result.is_ok() && queue.is_empty() {
                        result = out.flush();
                    }
                    if let Err(error) = result {
                        tracing::error!(%error, "writing the access log failed; it is off from now");
                        return;
                    }
                }
            })?;
        Ok(Self {
            lines,
            dropped: AtomicU64::new(0),
        })
    }

    pub fn request(&self, entry: &Request<'_>) {
        self.write("request", entry);
    }

    pub fn connection(&self, entry: &Connection<'_>) {
        self.write("connection", entry);
    }

    fn write<E: Serialize>(&self, event: &'static str, entry: &E) {
        let line = Line {
            time: jiff::Timestamp::now().to_string(),
            event,
            entry,
        };
        let Ok(mut text) = serde_json::to_string(&line) else {
            return;
        };
        text.push('\n');
        if self.lines.try_send(text).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(dropped, "access log cannot keep up: lines dropped");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_line_names_its_event_and_source() {
        let source = Workload::unknown(7);
        let entry = Connection {
            backend: "-",
            source: &source,
            destination: IpAddr::from([10, 200, 2, 2]),
            port: 443,
            bytes_sent: 1,
            bytes_received: 2,
            duration_ms: 0.5,
            outcome: Outcome::Passthrough,
            reason: Some("undeclared_sni"),
        };
        let line = Line {
            time: "t".into(),
            event: "connection",
            entry: &entry,
        };
        let json = serde_json::to_value(&line).unwrap();
        let expected = serde_json::json!({
            "time": "t", "event": "connection", "backend": "-", "source": {"cgroup": "7"},
            "destination": "10.200.2.2", "port": 443, "bytes_sent": 1, "bytes_received": 2,
            "duration_ms": 0.5, "outcome": "passthrough", "reason": "undeclared_sni",
        });
        assert_eq!(json, expected);
    }

    #[test]
    fn an_mcp_request_line_names_its_method_and_tool() {
        let source = Workload::unknown(7);
        let mcp = Mcp {
            method: "tools/call".into(),
            tool: Some("search".into()),
        };
        let entry = Request {
            backend: "demo/mcp",
            source: &source,
            method: "POST",
            authority: "mcp.test",
            path: "/mcp",
            mcp: Some(&mcp),
            status: 200,
            bytes: 10,
            duration_ms: 1.0,
            upstream_protocol: "HTTP/1.1",
        };
        let json = serde_json::to_value(&entry).unwrap();
        assert_eq!(
            json["mcp"],
            serde_json::json!({"method": "tools/call", "tool": "search"})
        );
        let plain = Request { mcp: None, ..entry };
        assert!(serde_json::to_value(&plain).unwrap().get("mcp").is_none());
    }
}
