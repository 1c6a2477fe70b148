//! `--access-log`: one JSON line per HTTP request, written by a task of its own so that
//! a slow disk never stalls a request.

use std::{
    io::{self, Write},
    path::Path,
    sync::atomic::{AtomicU64, Ordering},
};

use serde::Serialize;
use tokio::sync::mpsc;

/// Lines waiting for the writer; beyond this they are dropped and counted, rather than
/// growing memory or slowing requests.
const QUEUE: usize = 16 * 1024;

/// One request, as logged.
#[derive(Debug, Serialize)]
pub struct Entry<'a> {
    pub backend: &'a str,
    pub method: &'a str,
    pub authority: &'a str,
    pub path: &'a str,
    pub status: u16,
    /// Response body bytes sent to the client.
    pub bytes: u64,
    pub duration_ms: f64,
    pub upstream_protocol: &'a str,
}

#[derive(Serialize)]
struct Line<'a> {
    time: String,
    #[serde(flatten)]
    entry: &'a Entry<'a>,
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

    pub fn write(&self, entry: &Entry<'_>) {
        let line = Line {
            time: jiff::Timestamp::now().to_string(),
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
